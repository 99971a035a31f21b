#!/bin/sh
# Cross-builds llada.cpp for 64-bit Arm (Debian's g++-aarch64-linux-gnu and the arm64 -dev
# packages: scripts/install-deps.sh --aarch64) into build-aarch64/ and runs the kernel, format,
# tokenizer, model, runtime, decode and npu-sim tests under qemu-aarch64. Highway compiles NEON
# and the four SVE targets there. The tests run on a 128-bit SVE2 core (qemu's `max` CPU at
# vector length 16 bytes, as Armv9 phones have), where the dispatch picks SVE2_128 and the kernel
# tests also hold NEON (with the dotprod extension), SVE and SVE2 to the scalar twins; the kernel
# tests run again at 256 bits (SVE_256) and on a Cortex-A72 (plain Armv8.0 NEON, no dotprod).
# The step-engine, pipeline and test-time-scaling tests are decoding policy, the same C++ on
# every target, and run whole in the native, ASan and TSan builds; under qemu (where they took
# 471 of 716 s) only their cases that lean on what differs on Arm run, on NEON (qemu's SVE
# emulation is ~4x slower): shadow and check rows through attention, batched == alone, the
# fused head's sampling, the two revision lanes' threads, the pipeline's cache exactness.
# Under qemu only correctness is measured, never speed.
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
# The tests that exec a tool binary (llada-tokenize, llada-eval, ...) are left out.
exclude="TokenizeTool.*:*Cli*:*Tool*:ShippedModels/EvalSmoke.*"
# One qemu run (the script calls itself for each, two at a time: qemu-user runs one guest
# thread per host thread, and most runs are single-threaded for long stretches).
if [ "${1:-}" = --run ]; then
    cpu=$2 test=$3 filter=${4:-}
    log="$B/$test-$(echo "$cpu" | tr ',=' '--').log"
    s=$(date +%s)
    if qemu-aarch64 -L / -cpu "$cpu" "$B/bin/$test" --gtest_filter="$filter-$exclude" --gtest_brief=1 > "$log" 2>&1; then
        echo "cross-aarch64.sh: $test ($cpu): $(grep -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$log" | head -1), passed in $(( $(date +%s) - s )) s"
    else
        echo "cross-aarch64.sh: $test ($cpu) FAILED:"
        tail -30 "$log"
        exit 1
    fi
    exit 0
fi
cmake -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
    -DLLADA_BUILD_BENCH=OFF > /dev/null
tests="format_test quant_golden_test kernels_test tokenizer_test model_test quant_parity_test hf_model_test runtime_test decode_test alloc_test generator_test pipeline_test tts_test npu_tile_test npu_device_test shipped_models_test"
cmake --build "$B" -j2 --target $tests > /dev/null
start=$(date +%s)
# The runs, one per line: CPU TEST [FILTER], the longest first so that the two slots finish
# together.
# Armv8.0 without dotprod: what differs there is the int8 matmuls' widening path.
only="Kernels.MatmulQuantised*:BlockKernels.*:Kernels.LutDequant*:Kernels.ActivationPreparation*"
runs=$({
    echo "max,sve-default-vector-length=32 kernels_test"
    echo "max,sve-default-vector-length=16 kernels_test"
    echo "cortex-a72 kernels_test $only"
    for t in $tests; do
        case $t in
            kernels_test) ;;
            generator_test)
                echo "max,sve=off $t RowAddressing.*:Scheduler.*:Lookahead.*:Revision.ConcurrentPathsGiveTheSerialResult" ;;
            pipeline_test) echo "max,sve=off $t Pipeline.ShadowChecks*:Pipeline.ImpossibleOptions*" ;;
            tts_test)
                echo "max,sve=off $t Tts.SamplingOnTheFusedHead*:Tts.FusedGumbelMax*:Tts.OneCandidateIsTheSingleRun:Tts.IdenticalWindows*" ;;
            *) echo "max,sve-default-vector-length=16 $t" ;;
        esac
    done
})
status=0
echo "$runs" | AARCH64_BUILD=$B xargs -P 2 -L 1 "$0" --run || status=1
echo "cross-aarch64.sh: done in $(( $(date +%s) - start )) s under qemu"
exit $status
