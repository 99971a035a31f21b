#!/bin/sh
# The threaded tests of scripts/sanitize.sh thread under ThreadSanitizer on a host slowed down
# on purpose, to show that they depend on what the code does and not on how fast the host is
# (docs/reliability.md, "Timing"): every test process is pinned to one core (taskset) that a
# busy loop, pinned to the same core, shares with it, so the tests run at about half of one
# core, ~4x below an idle 2-core host and further below than a slow host under TSan.
#   scripts/tsan-slow.sh [RUNS]     RUNS rounds of every test (default 5); any failure fails it
# Reuses build-tsan/ (scripts/sanitize.sh thread builds it; this builds it too if needed).
set -eu
cd "$(dirname "$0")/.."
runs=${1:-5}
command -v taskset > /dev/null || { echo "tsan-slow.sh: taskset (util-linux) is not installed" >&2; exit 2; }
cmake -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLADA_SANITIZE=thread > /dev/null
cmake --build build-tsan -j2 --target runtime_test generator_test tts_test server_test \
    llada-server > /dev/null
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$(pwd)/scripts/tsan.supp"
taskset -c 0 sh -c 'while :; do :; done' &
hog=$!
trap 'kill $hog 2> /dev/null' EXIT
status=0
for r in $(seq "$runs"); do
    for t in "runtime_test --gtest_filter=-Memory.*" \
        "generator_test --gtest_filter=Revision.*:Scheduler.*" "tts_test" "server_test"; do
        log="build-tsan/slow-$r-$(echo "$t" | cut -d' ' -f1).log"
        s=$(date +%s)
        # shellcheck disable=SC2086
        if taskset -c 0 ./build-tsan/bin/$t --gtest_brief=1 > "$log" 2>&1; then
            echo "tsan-slow.sh: round $r: $(echo "$t" | cut -d' ' -f1) passed in $(( $(date +%s) - s )) s"
        else
            echo "tsan-slow.sh: round $r: $(echo "$t" | cut -d' ' -f1) FAILED after $(( $(date +%s) - s )) s:"
            tail -30 "$log"
            status=1
        fi
    done
done
exit $status
