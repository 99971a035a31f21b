// The thread pool: every task runs exactly once per job, across many back-to-back jobs and
// more threads than cores, and thread indices stay in range.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "runtime/thread_pool.h"
#include "util/error.h"

using namespace llada;

TEST(ThreadPool, EveryTaskRunsExactlyOncePerJob) {
    for (int threads : {1, 2, 3, 5}) {
        runtime::ThreadPool pool(threads);
        std::vector<std::atomic<int>> hits(257);
        for (int job = 0; job < 2000; ++job) {
            const int64_t n = 1 + job % 257;
            for (int64_t i = 0; i < n; ++i)
                hits[i].store(0);
            std::atomic<int> bad_thread{0};
            pool.parallel_for(n, [&](int64_t t, int thread) {
                hits[t].fetch_add(1);
                if (thread < 0 || thread >= threads) bad_thread.fetch_add(1);
            });
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(hits[i].load(), 1) << threads << " " << job;
            ASSERT_EQ(bad_thread.load(), 0);
        }
    }
}

TEST(ThreadPool, RejectsZeroThreads) {
    EXPECT_THROW(runtime::ThreadPool(0), Error);
}
