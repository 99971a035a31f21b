// A fixed pool of worker threads that runs parallel loops; passed explicitly, never global.
#include "runtime/thread_pool.h"

#include <chrono>

#include "util/error.h"

namespace llada::runtime {
namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
}
// How long an idle worker spins before it sleeps: long enough to bridge the gaps between the
// ops of a forward (a serial op of ~0.1 ms included), short enough not to steal much from other
// processes between forwards. Measured, not counted in pause instructions, whose latency
// differs ~10x between CPU generations. On a VM a sleeping worker's wake-up can take far longer
// than the gap it slept through: with ~93 us of spinning the 1B F16 forward at 32 rows on two
// threads did ~40 sleeps per forward (perf stat context-switches).
constexpr auto kSpinTime = std::chrono::microseconds(1000);

// The claim word: generation (low 24 bits of the job number), task count, next task.
constexpr int kTaskBits = 20;
constexpr uint64_t kTaskMask = (uint64_t{1} << kTaskBits) - 1;
constexpr uint64_t kGenMask = (uint64_t{1} << (64 - 2 * kTaskBits)) - 1;
constexpr int64_t kMaxTasks = int64_t{1} << kTaskBits;
inline uint64_t claim_word(uint64_t gen, int64_t n_tasks) {
    return ((gen & kGenMask) << (2 * kTaskBits)) | (static_cast<uint64_t>(n_tasks) << kTaskBits);
}
inline uint64_t gen_of(uint64_t c) {
    return c >> (2 * kTaskBits);
}
inline int64_t count_of(uint64_t c) {
    return static_cast<int64_t>((c >> kTaskBits) & kTaskMask);
}
inline int64_t next_of(uint64_t c) {
    return static_cast<int64_t>(c & kTaskMask);
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
    if (n_threads < 1)
        throw Error("thread count must be at least 1, got " + std::to_string(n_threads));
    for (int i = 1; i < n_threads; ++i)
        workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_.store(true, std::memory_order_release);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : workers_)
        t.join();
}

void ThreadPool::run_claims(uint64_t gen, int thread) {
    for (;;) {
        uint64_t c = claim_.load(std::memory_order_acquire);
        if (gen_of(c) != (gen & kGenMask)) return;  // a newer job (or none) is current
        if (next_of(c) >= count_of(c)) return;      // every task of this job is taken
        // The exchange succeeds only if claim_ still holds this job with this next task.
        if (claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) {
            (*fn_)(next_of(c), thread);
            done_.fetch_add(1, std::memory_order_release);
        }
    }
}

void ThreadPool::worker_loop(int thread) {
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = generation_.load(std::memory_order_acquire);
        const auto spin_start = std::chrono::steady_clock::now();
        for (int spin = 1; gen == seen; ++spin) {
            cpu_relax();
            gen = generation_.load(std::memory_order_acquire);
            if (spin % 64 == 0 && std::chrono::steady_clock::now() - spin_start > kSpinTime) break;
        }
        if (gen == seen) {
            std::unique_lock<std::mutex> lock(mu_);
            // seq_cst pairs with parallel_for's store of generation_ then load of sleepers_:
            // either this predicate sees the new job, or parallel_for sees this sleeper.
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
            sleepers_.fetch_sub(1, std::memory_order_seq_cst);
            gen = generation_.load(std::memory_order_acquire);
        }
        seen = gen;
        if (stop_.load(std::memory_order_acquire)) return;
        run_claims(gen, thread);
    }
}

void ThreadPool::parallel_for(int64_t n_tasks, const Task& fn) {
    if (n_tasks <= 0) return;
    if (workers_.empty() || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; ++t)
            fn(t, 0);
        return;
    }
    if (n_tasks >= kMaxTasks) {
        throw Error("parallel_for: " + std::to_string(n_tasks) + " tasks, at most " +
                    std::to_string(kMaxTasks - 1));
    }
    // All tasks of the previous job are taken and done, and its claim word admits no more.
    fn_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t gen = ++job_gen_;
    claim_.store(claim_word(gen, n_tasks), std::memory_order_release);
    generation_.store(gen, std::memory_order_seq_cst);
    // Only sleeping workers need the (system-call) wake-up; spinning ones see generation_.
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        { std::lock_guard<std::mutex> lock(mu_); }
        wake_.notify_all();
    }
    run_claims(gen, 0);
    while (done_.load(std::memory_order_acquire) != n_tasks)
        cpu_relax();
}

}  // namespace llada::runtime
