#!/usr/bin/env bash
# Compile every cuda/*.cu for sm_80 and sm_90 (C++17, every warning an error); no GPU needed.
# Exits non-zero if nvcc is missing or any file fails. CI runs it when nvcc exists.
#   scripts/nvcc_check.sh [nvcc flags...]      (extra flags are appended, e.g. -Xptxas -v)
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NVCC="${NVCC:-nvcc}"
if ! command -v "$NVCC" >/dev/null 2>&1; then
    echo "nvcc_check: $NVCC not found" >&2
    exit 2
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
status=0
n=0
for cu in "$here"/cuda/*.cu; do
    for arch in sm_80 sm_90; do
        name="$(basename "$cu" .cu)"
        if "$NVCC" -cubin -arch="$arch" -std=c++17 -Werror all-warnings -I"$here/cuda" \
                "$@" -o "$out/$name.$arch.cubin" "$cu"; then
            echo "ok    $name $arch"
        else
            echo "FAIL  $name $arch" >&2
            status=1
        fi
        n=$((n + 1))
    done
done
if [ "$n" -eq 0 ]; then
    echo "nvcc_check: no cuda/*.cu files" >&2
    exit 2
fi
exit $status
