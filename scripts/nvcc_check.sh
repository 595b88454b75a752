#!/usr/bin/env bash
# Compile every cuda/*.cu for sm_80 and sm_90 (C++17, every warning an error); no GPU needed.
# Runs $NVCC_JOBS compiles at once (default: the number of CPUs).
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
jobs_max="${NVCC_JOBS:-$(nproc 2>/dev/null || echo 2)}"
status=0
n=0
names=()
for cu in "$here"/cuda/*.cu; do
    for arch in sm_80 sm_90; do
        name="$(basename "$cu" .cu).$arch"
        names+=("$name")
        ( "$NVCC" -cubin -arch="$arch" -std=c++17 -Werror all-warnings -I"$here/cuda" "$@" \
              -o "$out/$name.cubin" "$cu" >"$out/$name.log" 2>&1; echo $? >"$out/$name.rc" ) &
        n=$((n + 1))
        while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 0.2; done
    done
done
wait
for name in "${names[@]}"; do
    if [ "$(cat "$out/$name.rc")" = "0" ]; then
        echo "ok    ${name%.*} ${name##*.}"
    else
        echo "FAIL  ${name%.*} ${name##*.}" >&2
        cat "$out/$name.log" >&2
        status=1
    fi
done
if [ "$n" -eq 0 ]; then
    echo "nvcc_check: no cuda/*.cu files" >&2
    exit 2
fi
exit $status
