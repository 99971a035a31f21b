#!/bin/sh
# The whole test suite, as CI runs it (.ci/run): the release build and ctest, then ctest under
# ASan + UBSan (scripts/sanitize.sh address: clang's libFuzzer build when clang-16 is there),
# each fuzz target for 30 s from that same build (scripts/fuzz.sh; skipped without clang-16 and
# libFuzzer), the threaded tests under TSan (scripts/sanitize.sh thread), then the aarch64
# cross build with its tests under qemu (scripts/cross-aarch64.sh; skipped without the cross
# compiler).
# `scripts/test.sh --quick` stops after ctest.
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
cmake -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j2
ctest --test-dir build -j2 --output-on-failure
[ "${1:-}" = --quick ] && exit 0
scripts/sanitize.sh address
scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
scripts/sanitize.sh thread
scripts/cross-aarch64.sh
echo "test.sh: everything passed in $(( $(date +%s) - start )) s"
