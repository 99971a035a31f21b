#!/bin/sh
# The whole test suite, as CI runs it (.ci/run): the release build and ctest, then each fuzz
# target for 30 s (scripts/fuzz.sh; skipped without clang-16 and libFuzzer), then the sanitizer
# runs (scripts/sanitize.sh: ctest under ASan + UBSan, the threaded tests under TSan), then the
# aarch64 cross build with its tests under qemu (scripts/cross-aarch64.sh; skipped without the
# cross compiler).
# `scripts/test.sh --quick` stops after ctest.
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
cmake -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j2
ctest --test-dir build -j2 --output-on-failure
[ "${1:-}" = --quick ] && exit 0
scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
scripts/sanitize.sh all
scripts/cross-aarch64.sh
echo "test.sh: everything passed in $(( $(date +%s) - start )) s"
