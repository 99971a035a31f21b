#!/bin/sh
# The sanitizer runs of docs/reliability.md, each in a build folder of its own:
#   scripts/sanitize.sh address   the whole ctest suite under AddressSanitizer + UBSan (build-asan:
#                                 clang's libFuzzer build when clang-16 is installed, which
#                                 scripts/fuzz.sh reuses; g++ otherwise)
#   scripts/sanitize.sh thread    the threaded tests under ThreadSanitizer (build-tsan): the
#                                 thread pool, shared KV caches and the scheduler, progressive
#                                 revision's two paths, test-time scaling, the server
#   scripts/sanitize.sh           both
# Any report fails the run (halt_on_error). Allocations the tests make impossible on purpose
# return null under ASan, as they do without it (allocator_may_return_null).
set -eu
cd "$(dirname "$0")/.."
what=${1:-all}
case "$what" in address|thread|all) ;; *) echo "sanitize.sh: address, thread or all, not '$what'" >&2; exit 2 ;; esac
if [ "$what" != thread ]; then
    # With clang-16 and libFuzzer installed, the ASan + UBSan build is clang's libFuzzer build
    # with the tests in it (LLADA_FUZZ: coverage instrumentation as well), which scripts/fuzz.sh
    # then runs its targets from: one sanitizer build of everything instead of two. Otherwise
    # g++'s ASan + UBSan build.
    if command -v clang++-16 > /dev/null &&
        ls /usr/lib/llvm-16/lib/clang/16/lib/linux/libclang_rt.fuzzer-*.a > /dev/null 2>&1; then
        CC=clang-16 CXX=clang++-16 cmake -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLADA_FUZZ=ON \
            -DLLADA_BUILD_BENCH=OFF > /dev/null
    else
        cmake -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLADA_SANITIZE=address \
            -DLLADA_BUILD_BENCH=OFF > /dev/null
    fi
    cmake --build build-asan -j2 > /dev/null
    ASAN_OPTIONS=abort_on_error=1:allocator_may_return_null=1:detect_leaks=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        ctest --test-dir build-asan -j2 --output-on-failure --output-junit ctest-junit.xml
fi
if [ "$what" != address ]; then
    cmake -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLADA_SANITIZE=thread > /dev/null
    cmake --build build-tsan -j2 --target runtime_test generator_test tts_test server_test \
        llada-server > /dev/null
    # (scripts/tsan.supp: the uninstrumented system HTTP library's own accesses, nothing of ours.)
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$(pwd)/scripts/tsan.supp"
    # (Memory.*: impossible allocations on purpose, not threads; TSan aborts on them.)
    ./build-tsan/bin/runtime_test --gtest_filter='-Memory.*'
    ./build-tsan/bin/generator_test --gtest_filter='Revision.*:Scheduler.*'
    ./build-tsan/bin/tts_test
    ./build-tsan/bin/server_test
fi
