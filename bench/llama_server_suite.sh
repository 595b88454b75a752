#!/usr/bin/env bash
# llama.cpp's own server test suite (tools/server/tests/unit, llama.cpp 0c1e570 as vendored in
# llama-cpp-python 0.3.36's source distribution) against pyllama's llama-server and, when it is
# built, llama.cpp's: both columns per test and a table per file (bench/server_suite/report.py).
#
#   bench/llama_server_suite.sh [FILE.py ...] [-- PYTEST_ARGS...]
#
# FILES default to the files issue 21 owns. The suite's downloaded models are replaced by the
# bundled GGUF ($SUITE_MODEL, default qwen2.5-coder-0.5b) through a pytest plugin
# (bench/server_suite/pyllama_suite_patch.py); nothing in the suite is edited. Env:
#   PYLLAMA_SERVER   pyllama's executable (default: llama-server beside this python)
#   LLAMACPP_SERVER  llama.cpp's (default /work/llamacpp/build/bin/llama-server, when present;
#                    LLAMACPP_SERVER=none skips it)
#   OUT              results directory (default bench/results/server_suite)
#   PASSES_OUT       where to write the list of tests llama.cpp's server passed
#   PORT             the port the suite's servers listen on (default 8080; one run per port)
#   ONLY             pyllama | llamacpp: run one side only
#   SUITE_DEDUP=1    run once the tests that differ only in the model they would download (the
#                    same requests once substituted); SUITE_DEDUP_MAP=FILE records the others
#                    and the report counts each with its representative's outcome
# The suite needs pytest, requests, openai, wget, filelock, prometheus-client (the [test] extra).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
PY=${PYTHON:-python3}
SRC=$(bash "$REPO/scripts/build_llamacpp.sh" src)
SUITE="$SRC/vendor/llama.cpp/tools/server/tests"
OUT=${OUT:-$REPO/bench/results/server_suite}
mkdir -p "$OUT"

files=() extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  files+=("$1"); shift
done
if [ ${#files[@]} -eq 0 ]; then
  files=(test_basic.py test_completion.py test_chat_completion.py test_security.py
         test_metrics.py test_speculative.py test_stream.py test_ignore_eos.py
         test_tokenize.py test_kv_keep_only_active.py test_slot_save.py test_proxy.py
         test_compat_gcp.py test_tools_builtin.py test_mcp_servers.py)
fi
targets=()
for f in "${files[@]}"; do targets+=("unit/$f"); done

export SUITE_MODEL=${SUITE_MODEL:-$("$PY" -c "from pyllama import models; print(models.resolve('qwen2.5-coder-0.5b'))")}
export PYTHONPATH="$HERE/server_suite${PYTHONPATH:+:$PYTHONPATH}"
PYLLAMA_SERVER=${PYLLAMA_SERVER:-$(dirname "$(command -v "$PY")")/llama-server}
LLAMACPP_SERVER=${LLAMACPP_SERVER:-/work/llamacpp/build/bin/llama-server}

run() {  # name executable: one pytest per suite file, so a cut-short run keeps what it did
  mkdir -p "$OUT/$1"
  echo "== $1: $2 on ${#targets[@]} files, model $SUITE_MODEL" >&2
  for t in "${targets[@]}"; do
    f=$(basename "$t" .py)
    (cd "$SUITE" && LLAMA_SERVER_BIN_PATH="$2" "$PY" -m pytest -p pyllama_suite_patch -q \
       -o cache_dir="$OUT/.pytest_cache" --junitxml="$OUT/$1/$f.xml" "$t" \
       ${extra[@]+"${extra[@]}"} >"$OUT/$1/$f.log" 2>&1) || true
    echo "   $f: $(tail -1 "$OUT/$1/$f.log")" >&2
  done
}

[ "${ONLY:-}" = llamacpp ] || run pyllama "$PYLLAMA_SERVER"
ref=()
if [ "${ONLY:-}" != pyllama ] && [ "$LLAMACPP_SERVER" != none ] && [ -x "$LLAMACPP_SERVER" ]; then
  [ "${ONLY:-}" = pyllama ] || run llamacpp "$LLAMACPP_SERVER"
  ref=("$OUT/llamacpp")
fi
mkdir -p "$OUT/pyllama"
"$PY" "$HERE/server_suite/report.py" "$OUT/pyllama" ${ref[@]+"${ref[@]}"} \
  ${PASSES_OUT:+--passes-out "$PASSES_OUT"} ${SUITE_DEDUP_MAP:+--dedup-map "$SUITE_DEDUP_MAP"}
