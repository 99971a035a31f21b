// A fixed pool of worker threads that runs parallel loops; passed explicitly, never global.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "util/function_ref.h"

namespace llada::runtime {

class ThreadPool {
  public:
    // n_threads counts the calling thread: a pool of 1 runs everything inline.
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Runs fn(task, thread) for task in [0, n_tasks), tasks handed out dynamically to the caller
    // (thread 0) and the workers (1 .. size()-1); returns when all are done. Not re-entrant: fn
    // must not call parallel_for. `thread` lets a task use per-thread scratch memory.
    using Task = FunctionRef<void(int64_t task, int thread)>;
    void parallel_for(int64_t n_tasks, const Task& fn);

  private:
    void worker_loop(int thread);
    // Claims and runs tasks of job `gen` until none are left or a newer job was published.
    void run_claims(uint64_t gen, int thread);

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable wake_;
    // A job is published by bumping generation_; workers spin briefly on it before sleeping,
    // which keeps the per-op synchronisation cost at a few microseconds.
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> sleepers_{0};  // workers blocked on wake_
    // One word per job: (generation, task count, next unclaimed task), see kTaskBits etc. in
    // thread_pool.cpp. A claim succeeds only for the current job and only below that job's own
    // task count, read from the same word: a worker still looking at a finished job can neither
    // take a task of the next one nor run one past its end. The caller never waits for a worker
    // that was not scheduled in time; it runs the tasks itself and waits only for tasks a worker
    // actually took.
    std::atomic<uint64_t> claim_{0};
    std::atomic<int64_t> done_{0};
    uint64_t job_gen_ = 0;
    // The current job's function, written before claim_ publishes the job.
    const Task* fn_ = nullptr;
    std::atomic<bool> stop_{false};
};

}  // namespace llada::runtime
