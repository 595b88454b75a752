#!/usr/bin/env bash
# The llama.cpp oracles, built from the llama.cpp 0c1e570 tree vendored in llama-cpp-python 0.3.36.
#
#   scripts/build_llamacpp.sh python [DIR]   llama-cpp-python in a venv at DIR (default
#                                            $LLAMACPP_ORACLE, else ~/.cache/pyllama-oracle/venv):
#                                            logits, embeddings, LoRA, the quantizer, ctypes access to
#                                            libggml (DIR/lib/python3*/site-packages/llama_cpp/lib)
#   scripts/build_llamacpp.sh exe [DIR] [TARGET...]
#                                            llama.cpp's own executables in DIR/build/bin (default
#                                            ~/.cache/pyllama-oracle/llama.cpp; targets default to
#                                            llama-server llama-completion; examples such as
#                                            llama-embedding are configured too, built only if named)
#   scripts/build_llamacpp.sh src            print the path of the unpacked source tree
#
# LLAMACPP_VARIANT=avx2 (default) builds the arithmetic docs/numerics.md pins as the reference
# (GGML_NATIVE=OFF, AVX2/FMA/F16C, no AVX-512); LLAMACPP_VARIANT=native builds for this CPU.
# The source distribution comes from PyPI (`pip download`), cached under ~/.cache/pyllama-oracle.
# Building llama-cpp-python takes ~10 minutes on 2 cores, llama-server alone about as long.
set -euo pipefail
VERSION=0.3.36
CACHE=${PYLLAMA_ORACLE_CACHE:-$HOME/.cache/pyllama-oracle}
VARIANT=${LLAMACPP_VARIANT:-avx2}
mkdir -p "$CACHE"

case "$VARIANT" in
  avx2) CMAKE_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" ;;
  native) CMAKE_FLAGS="-DGGML_NATIVE=ON" ;;
  *) echo "build_llamacpp.sh: LLAMACPP_VARIANT must be avx2 or native, not '$VARIANT'" >&2; exit 1 ;;
esac

sdist() {
  local tgz
  tgz=$(ls "$CACHE"/llama_cpp_python-$VERSION.tar.gz 2>/dev/null || true)
  if [ -z "$tgz" ]; then
    python3 -m pip download -q --no-deps --no-binary :all: -d "$CACHE" "llama-cpp-python==$VERSION" >&2
    tgz="$CACHE/llama_cpp_python-$VERSION.tar.gz"
  fi
  if [ ! -d "$CACHE/llama_cpp_python-$VERSION" ]; then
    tar -xzf "$tgz" -C "$CACHE"
  fi
  echo "$CACHE/llama_cpp_python-$VERSION"
}

cmd=${1:-python}
case "$cmd" in
  src) sdist ;;
  python)
    dir=${2:-${LLAMACPP_ORACLE:-$CACHE/venv}}
    src=$(sdist)
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --upgrade pip >/dev/null
    "$dir/bin/pip" install -q numpy gguf
    CMAKE_ARGS="$CMAKE_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
      "$dir/bin/pip" install -q --no-build-isolation "$src" 2>/dev/null \
      || CMAKE_ARGS="$CMAKE_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$dir/bin/pip" install -q "$src"
    "$dir/bin/python" -c "import llama_cpp, os; print(os.path.dirname(llama_cpp.__file__))"
    ;;
  exe)
    dir=${2:-$CACHE/llama.cpp}
    shift $(( $# >= 2 ? 2 : $# ))
    targets=${*:-llama-server llama-completion}
    src=$(sdist)
    command -v ninja >/dev/null || python3 -m pip install -q ninja
    # shellcheck disable=SC2086
    cmake -S "$src/vendor/llama.cpp" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
      -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF $CMAKE_FLAGS >/dev/null
    # shellcheck disable=SC2086
    cmake --build "$dir/build" --target $targets -j "$(nproc)"
    echo "$dir/build/bin"
    ;;
  *) echo "usage: build_llamacpp.sh python [DIR] | exe [DIR] [TARGET...] | src" >&2; exit 1 ;;
esac
