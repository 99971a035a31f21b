#!/bin/sh
# The whole test suite, as CI runs it (.ci/run): the release build and ctest, then ctest under
# ASan + UBSan (scripts/sanitize.sh address: clang's libFuzzer build when clang-16 is there),
# each fuzz target for 30 s from that same build (scripts/fuzz.sh; skipped without clang-16 and
# libFuzzer), the threaded tests under TSan (scripts/sanitize.sh thread), then the aarch64
# cross build with its tests under qemu (scripts/cross-aarch64.sh; skipped without the cross
# compiler).
# `scripts/test.sh --quick` stops after ctest.
# Each stage prints its time, so that CI's budget can be read off a run's log.
# At the end (passed or not) it prints the whole run's time, each stage's again, and the host's
# CPU model and vector ISA, and after each ctest run the tests it skipped with their reasons.
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
stage_start=$start
stages=""
# The CPU time (user + system) of everything this script has run and waited for, in seconds:
# beside a stage's wall time it says how well the stage used the cores, and it varies less
# than wall time between a loaded and an idle host.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%d", ($16 + $17) / hz }' /proc/$$/stat 2> /dev/null || echo 0; }
stage_cpu=$(cpu)
stage() {  # stage NAME: the time since the previous stage ended
    now=$(date +%s)
    c=$(cpu)
    echo "test.sh: $1 took $((now - stage_start)) s (CPU $((c - stage_cpu)) s)"
    stages="$stages  $1: $((now - stage_start)) s (CPU $((c - stage_cpu)) s)
"
    stage_start=$now
    stage_cpu=$c
}
host() {
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2> /dev/null | head -1)
    isa=$(grep -m1 -o -w 'avx512_vnni\|avx512f\|avx_vnni\|avx2\|asimddp\|asimd\|sve2\|sve' \
        /proc/cpuinfo 2> /dev/null | sort -u | tr '\n' ' ')
    echo "${cpu:-unknown CPU}, $(nproc) cores, ${isa:-no AVX2}"
}
finish() {
    status=$?
    echo "test.sh: $([ $status -eq 0 ] && echo passed || echo FAILED) after $(( $(date +%s) - start )) s on $(host)"
    printf '%s' "$stages"
}
trap finish EXIT
echo "test.sh: on $(host)"
cmake -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j2
stage "the release build"
ctest --test-dir build -j2 --output-on-failure --output-junit ctest-junit.xml
python3 scripts/skipped.py build/ctest-junit.xml "the release ctest"
stage "ctest"
[ "${1:-}" = --quick ] && exit 0
scripts/sanitize.sh address
python3 scripts/skipped.py build-asan/ctest-junit.xml "the ASan + UBSan ctest"
stage "ASan + UBSan (build and ctest)"
scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
stage "the fuzz targets"
scripts/sanitize.sh thread
stage "TSan (build and the threaded tests)"
scripts/cross-aarch64.sh
stage "aarch64 (cross build and qemu)"
