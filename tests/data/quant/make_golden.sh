#!/bin/sh
# Regenerates golden.bin from a llama.cpp source tree: builds its ggml base library (where
# ggml-quants.c lives) the way a default `cmake -B build && cmake --build build` of llama.cpp
# does, in a temporary folder outside this repository, compiles make_golden.cpp against it and
# runs it. See README.md here for the format and for what was measured.
#
#   tests/data/quant/make_golden.sh LLAMA_CPP_DIR [OUT]
#
# OUT defaults to golden.bin beside this script. LLAMA_CMAKE_ARGS adds configure options (e.g.
# LLAMA_CMAKE_ARGS=-DCMAKE_C_FLAGS=-mfma to see whether FMA contraction would change the
# bytes); GOLDEN_BUILD_DIR names the build folder (default: a new one under $TMPDIR or /tmp);
# CXX compiles make_golden.cpp and GOLDEN_RUN prefixes its run, which with a cross toolchain file
# in LLAMA_CMAKE_ARGS measures another architecture's llama-quantize (README.md: arm64).
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 LLAMA_CPP_DIR [OUT]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$1" && pwd)
out=${2:-$here/golden.bin}
if [ ! -f "$src/ggml/src/ggml-quants.c" ]; then
    echo "$0: $src is not a llama.cpp source tree (no ggml/src/ggml-quants.c)" >&2
    exit 1
fi
build=${GOLDEN_BUILD_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/llada-quant-golden.XXXXXX")}
mkdir -p "$build"
echo "make_golden.sh: building llama.cpp's ggml-base in $build"
# Only the parts of llama.cpp that do not touch ggml's flags are turned off (no tools, tests or
# web UI to build); SOURCE_DATE_EPOCH would switch GGML_NATIVE's default off, so it is unset.
# shellcheck disable=SC2086
env -u SOURCE_DATE_EPOCH cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_COMMON=OFF \
    ${LLAMA_CMAKE_ARGS:-} > "$build/configure.log" 2>&1 ||
    { tail -n 20 "$build/configure.log" >&2; exit 1; }
cmake --build "$build" --target ggml-base -j2 > "$build/build.log" 2>&1 ||
    { tail -n 20 "$build/build.log" >&2; exit 1; }
echo "make_golden.sh: ggml-quants.c was compiled with:"
grep '^C_FLAGS' "$build/ggml/src/CMakeFiles/ggml-base.dir/flags.make"
lib=$(dirname "$(find "$build" -name 'libggml-base.so' | head -n 1)")
${CXX:-c++} -std=c++17 -O2 -I"$src/ggml/include" "$here/make_golden.cpp" -o "$build/make_golden" \
    -L"$lib" -lggml-base -Wl,-rpath,"$lib"
# shellcheck disable=SC2086
${GOLDEN_RUN:-} "$build/make_golden" "$out"
