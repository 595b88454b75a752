#!/usr/bin/env bash
# The GPU check, prepared for a machine with an NVIDIA GPU (run from the repo root):
#   bench/cuda_check.sh [OUT_DIR]            (default $OUT or /tmp/cuda_check)
# Env: PYCUDA_WHEEL=/path/pycuda-*.whl  installed with --no-index when pycuda is missing (its
#      dependencies pytools, platformdirs, mako, ... as wheels in the same folder);
#      SKELETONS=dir  holding gemma-3-270m.gguf.gz / qwen2.5-coder-0.5b.gguf.gz (python -m
#      pyllama.synthetic --skeleton ...) when the bundled models are not on that machine;
#      QUICK=1  fewer benchmark tokens.
# Steps (each logged to OUT_DIR; the script goes on after a failure and exits non-zero at the end):
#   1. device, nvcc and pycuda facts (pycuda installed from the wheel, CPU extensions built if
#      missing); 2. scripts/nvcc_check.sh; 3. prebuilt fatbins for this GPU;
#   4. pytest -m cuda tests/cuda (every op vs numpy / RefBackend, tiny models end to end);
#   5. synthetic models shaped like both bundled models: llama-bench -ngl 99, bench/cuda_bench.py
#      (pp512 / tg128 on cuda and a cuda-vs-cpu logits check).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${1:-${OUT:-/tmp/cuda_check}}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
fail=0
step() {  # step NAME CMD...: run, tee to OUT/NAME.log, remember failures
    local name="$1"; shift
    echo "== $name: $*"
    if ! "$@" >"$OUT/$name.log" 2>&1; then
        echo "   FAILED (see $OUT/$name.log)"; tail -n 20 "$OUT/$name.log"; fail=1
    else
        tail -n 5 "$OUT/$name.log"
    fi
}

step facts bash -c "nvidia-smi; nvcc --version; $PY --version; $PY -c 'import numpy, gguf; print(numpy.__version__)'"
if ! $PY -c "import pycuda" 2>/dev/null && [ -n "${PYCUDA_WHEEL:-}" ]; then
    step pycuda_install $PY -m pip install --no-index --find-links "$(dirname "$PYCUDA_WHEEL")" \
        "$PYCUDA_WHEEL"
fi
if ! $PY -c "import pyllama.backend.cpu._ops" 2>/dev/null; then      # CPU kernels for this Python
    step build_ext $PY setup.py build_ext --inplace
fi
step probe $PY -c "from pyllama.backend.cuda import available; ok, why = available(); print(ok, why); assert ok"
step nvcc_check bash scripts/nvcc_check.sh
step fatbins $PY -m pyllama.backend.cuda.build --out "$OUT"
step pytest_cuda $PY -m pytest -q -m cuda tests/cuda -p no:cacheprovider

P=512; N=128; R=3
[ -n "${QUICK:-}" ] && { P=128; N=32; R=1; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
for alias in gemma-3-270m qwen2.5-coder-0.5b; do
    src="$alias"
    [ -n "${SKELETONS:-}" ] && [ -f "$SKELETONS/$alias.gguf.gz" ] && src="$SKELETONS/$alias.gguf.gz"
    syn="$TMP/$alias-synthetic.gguf"
    step "synthetic_$alias" $PY -m pyllama.synthetic "$src" "$syn" || continue
    [ -f "$syn" ] || continue
    if command -v llama-bench >/dev/null 2>&1; then
        step "llama_bench_$alias" llama-bench -m "$syn" -ngl 99 -p "$P" -n "$N" -r "$R"
    else
        step "llama_bench_$alias" $PY -m pyllama llama-bench -m "$syn" -ngl 99 -p "$P" -n "$N" -r "$R"
    fi
    step "cuda_bench_$alias" $PY bench/cuda_bench.py "$syn" --backend cuda -p "$P" -n "$N" -r "$R" --check
done
echo "results in $OUT; exit $fail"
exit $fail
