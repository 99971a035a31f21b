#!/bin/sh
# The whole test suite, as CI runs it (.ci/run): the release build and ctest, then ctest under
# ASan + UBSan (scripts/sanitize.sh address: clang's libFuzzer build when clang-16 is there),
# each fuzz target for 30 s from that same build (scripts/fuzz.sh; skipped without clang-16 and
# libFuzzer), the threaded tests under TSan (scripts/sanitize.sh thread), then the aarch64
# cross build with its tests under qemu (scripts/cross-aarch64.sh; skipped without the cross
# compiler).
# `scripts/test.sh --quick` stops after ctest.
# Each stage prints its time, so that CI's budget can be read off a run's log.
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
stage_start=$start
stage() {  # stage NAME: the time since the previous stage ended
    now=$(date +%s)
    echo "test.sh: $1 took $((now - stage_start)) s"
    stage_start=$now
}
cmake -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j2
stage "the release build"
ctest --test-dir build -j2 --output-on-failure
stage "ctest"
[ "${1:-}" = --quick ] && exit 0
scripts/sanitize.sh address
stage "ASan + UBSan (build and ctest)"
scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
stage "the fuzz targets"
scripts/sanitize.sh thread
stage "TSan (build and the threaded tests)"
scripts/cross-aarch64.sh
stage "aarch64 (cross build and qemu)"
echo "test.sh: everything passed in $(( $(date +%s) - start )) s"
