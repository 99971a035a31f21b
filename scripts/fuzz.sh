#!/bin/sh
# Builds the libFuzzer targets with clang-16 (ASan + UBSan, build-fuzz/; or reuses build-asan/ when
# scripts/sanitize.sh address made it with clang's libFuzzer build), writes the seed corpora
# and runs every target, two at a time: `scripts/fuzz.sh [SECONDS]` for a bounded time each (default 30; CI), or
# `RUNS=1000000 scripts/fuzz.sh` for a number of executions each (the long run of
# docs/reliability.md); TARGETS="safetensors ..." runs only those. A crash leaves its input in
# build-fuzz/findings/ and fails the script; put it under fuzz/regressions/<target>/ once
# fixed, where ctest replays it in every build.
# Skips (exit 0, with a message) where clang-16 or libFuzzer is not installed.
set -eu
cd "$(dirname "$0")/.."
secs=${1:-30}
if ! command -v clang++-16 > /dev/null; then
    echo "fuzz.sh: skipped: clang-16 is not installed (scripts/install-deps.sh --fuzz)"
    exit 0
fi
# clang without its fuzzer runtime is a half install (as --fuzz once left it): an error, so that
# CI cannot pass with its fuzzers silently skipped.
if ! ls /usr/lib/llvm-16/lib/clang/16/lib/linux/libclang_rt.fuzzer-*.a > /dev/null 2>&1; then
    echo "fuzz.sh: clang-16 is installed but its libFuzzer runtime is not (libclang-rt-16-dev; scripts/install-deps.sh --fuzz)" >&2
    exit 1
fi
# scripts/sanitize.sh address leaves clang's libFuzzer build (tests included) in build-asan:
# reuse it when it is there, else build the fuzz targets alone.
if [ -z "${FUZZ_BUILD:-}" ] && grep -q '^LLADA_FUZZ:BOOL=ON' build-asan/CMakeCache.txt 2> /dev/null; then
    B=build-asan
else
    B=${FUZZ_BUILD:-build-fuzz}
    CC=clang-16 CXX=clang++-16 cmake -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLADA_FUZZ=ON \
        -DLLADA_BUILD_TESTS=OFF > /dev/null
fi
targets=${TARGETS:-gguf tokenizer chat request safetensors hf_tokenizer}
cmake --build "$B" -j2 --target llada-quantize $(for t in $targets; do printf '%s_fuzz ' "$t"; done) > /dev/null
rm -rf "$B/corpus"
python3 fuzz/make_corpus.py "$B/corpus" "$B/bin"
mkdir -p "$B/findings"
# Two targets at a time (each runs on one core).
fuzz_one() {  # fuzz_one TARGET: runs it, prints its line, leaves its status in findings/
    t=$1
    max_len=4096
    [ "$t" = gguf ] && max_len=1048576
    [ "$t" = hf_tokenizer ] && max_len=65536
    if [ -n "${RUNS:-}" ]; then limit="-runs=$RUNS"; else limit="-max_total_time=$secs"; fi
    # The corpus folder grows with what the run finds; the regressions seed it too.
    log="$B/findings/$t.log"
    if "$B/bin/${t}_fuzz" "$limit" -max_len="$max_len" -rss_limit_mb=4096 -timeout=10 \
        -artifact_prefix="$B/findings/$t-" -print_final_stats=1 \
        "$B/corpus/$t" "fuzz/regressions/$t" > "$log" 2>&1; then
        runs=$(awk '/stat::number_of_executed_units/{print $2}' "$log")
        secs_run=$(awk '/^Done [0-9]+ runs in/{print $5}' "$log")
        echo "fuzz.sh: $t: $runs executions in ${secs_run:-?} s, no crash"
    else
        echo "fuzz.sh: $t: FAILED, see $log and $B/findings/$t-*"
        tail -30 "$log"
        touch "$B/findings/$t.failed"
    fi
}
rm -f "$B"/findings/*.failed
set -- $targets
while [ $# -gt 0 ]; do
    fuzz_one "$1" &
    if [ $# -gt 1 ]; then
        fuzz_one "$2" &
        shift
    fi
    shift
    wait
done
status=0
for t in $targets; do
    [ -e "$B/findings/$t.failed" ] && status=1
done
exit $status
