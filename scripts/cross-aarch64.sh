#!/bin/sh
# Cross-builds llada.cpp for 64-bit Arm (Debian's g++-aarch64-linux-gnu and the arm64 -dev
# packages: scripts/install-deps.sh --aarch64) into build-aarch64/ and runs the kernel, format,
# tokenizer, model, runtime, decode and npu-sim tests under qemu-aarch64. Highway compiles NEON
# there (SVE is not enabled yet: kernels/CMakeLists.txt), which the kernel tests check against
# the scalar twins. Under qemu only correctness is measured, never speed.
# Tests that start the tools as child processes are left out (no binfmt here: an arm64 child
# cannot be exec'd). Skips (exit 0, with a message) where the cross compiler is not installed.
set -eu
cd "$(dirname "$0")/.."
if ! command -v aarch64-linux-gnu-g++ > /dev/null || ! command -v qemu-aarch64 > /dev/null ||
    [ ! -e /usr/lib/aarch64-linux-gnu/pkgconfig/libhwy.pc ]; then
    echo "cross-aarch64.sh: skipped: g++-aarch64-linux-gnu, qemu-user or the arm64 packages are not installed (scripts/install-deps.sh --aarch64)"
    exit 0
fi
B=${AARCH64_BUILD:-build-aarch64}
cmake -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
    -DLLADA_BUILD_BENCH=OFF > /dev/null
tests="format_test kernels_test tokenizer_test model_test runtime_test decode_test alloc_test generator_test tts_test npu_tile_test npu_device_test shipped_models_test"
cmake --build "$B" -j2 --target $tests > /dev/null
# The tests that exec a tool binary (llada-tokenize, llada-eval, ...) are left out.
exclude="TokenizeTool.*:*Cli*:*Tool*:ShippedModels.EvalSmokeSliceReproducesTheReference"
start=$(date +%s)
status=0
for t in $tests; do
    if qemu-aarch64 -L / "$B/bin/$t" --gtest_filter="-$exclude" --gtest_brief=1 > "$B/$t.log" 2>&1; then
        echo "cross-aarch64.sh: $t: $(grep -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$B/$t.log" | head -1), passed"
    else
        echo "cross-aarch64.sh: $t FAILED:"
        tail -30 "$B/$t.log"
        status=1
    fi
done
echo "cross-aarch64.sh: done in $(( $(date +%s) - start )) s under qemu"
exit $status
