// The thread pool: every task runs exactly once per job, across many back-to-back jobs and
// more threads than cores, and thread indices stay in range.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "runtime/kv_cache.h"
#include "runtime/thread_pool.h"
#include "test_util.h"
#include "util/aligned.h"
#include "util/error.h"

using namespace llada;

TEST(ThreadPool, EveryTaskRunsExactlyOncePerJob) {
    for (int threads : {1, 2, 3, 5, 8}) {
        runtime::ThreadPool pool(threads);
        std::vector<std::atomic<int>> hits(257);
        for (int job = 0; job < 20000; ++job) {
            // Small and large jobs alternate: after a small job a worker that still sees it
            // finished must not claim a task of the larger next one.
            const int64_t n = job % 2 ? 1 + job % 257 : 1 + job % 3;
            for (int64_t i = 0; i < n; ++i)
                hits[i].store(0);
            std::atomic<int> bad_thread{0}, bad_task{0};
            pool.parallel_for(n, [&](int64_t t, int thread) {
                if (t < 0 || t >= n) {
                    bad_task.fetch_add(1);
                    return;
                }
                hits[t].fetch_add(1);
                if (thread < 0 || thread >= threads) bad_thread.fetch_add(1);
            });
            ASSERT_EQ(bad_task.load(), 0) << threads << " " << job;
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(hits[i].load(), 1) << threads << " " << job;
            ASSERT_EQ(bad_thread.load(), 0);
        }
    }
}

TEST(ThreadPool, RejectsZeroThreads) {
    EXPECT_THROW(runtime::ThreadPool(0), Error);
}

// Allocations too large for the machine are a clear error naming the buffer and its size, not a
// null pointer written through or a bare std::bad_alloc.
TEST(Memory, FailedAllocationsNameTheBuffer) {
    try {
        llada::aligned_bytes(size_t{1} << 62, "the test's buffer");
        ADD_FAILURE() << "a 4 EiB allocation succeeded";
    } catch (const llada::Error& e) {
        EXPECT_NE(std::string(e.what()).find("out of memory: cannot allocate"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("for the test's buffer"), std::string::npos);
    }
#if defined(LLADA_TEST_ASAN)
    // AddressSanitizer aborts on a failed operator new whatever allocator_may_return_null says,
    // so the KV cache's bad_alloc cannot be reached under it (docs/reliability.md).
    GTEST_SKIP() << "the KV cache's out-of-memory path is not reachable under AddressSanitizer";
#endif
    try {
        llada::runtime::KvCache kv(32, 1 << 16, 1 << 16, 8, 128, false);  // 2^50 floats
        ADD_FAILURE() << "a 2^50-float KV cache was allocated";
    } catch (const llada::Error& e) {
        EXPECT_NE(std::string(e.what()).find("for the KV cache (65536 sequences of 65536 "
                                             "positions)"),
                  std::string::npos)
            << e.what();
    }
}
