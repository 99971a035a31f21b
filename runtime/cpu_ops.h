// The CPU's execution of single plan ops (SIMD kernels over the thread pool), shared by the cpu
// device and by npu-sim for the ops it places on the CPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/lut.h"
#include "runtime/device.h"

namespace llada::runtime {

// A plan's tensors placed in an arena (offsets from the memory planner).
struct ArenaView {
    const Plan* plan = nullptr;
    uint8_t* base = nullptr;
    uint8_t* data(int t) const { return base + plan->tensors[t].offset; }
    float* f32(int t) const { return reinterpret_cast<float*>(data(t)); }
};

// Scratch of the fused LM head, sized once per plan: per-thread logits of one vocabulary chunk
// and per-chunk partial statistics.
struct LmHeadScratch {
    void size_for(const Plan& plan, int n_threads);
    std::vector<float> logits;
    std::vector<kernels::RowStats> partial;
};

class CpuOps {
  public:
    explicit CpuOps(ThreadPool& pool) : pool_(pool) {}
    ThreadPool& pool() const { return pool_; }
    const kernels::ExpLut& exp_lut() const { return exp_lut_; }

    // Runs `op` on the batch's rows (window rows: b.n_rows, output rows: b.n_out).
    void run(const ArenaView& a, LmHeadScratch& s, const Op& op, const Batch& b, KvCache& kv);

    // Splits [0, n) items of about `cost` multiply-adds each into about 4 chunks per thread and
    // runs fn(lo, hi) on the pool. Chunks are never smaller than ~64k multiply-adds: below that
    // waking a worker costs more than it saves (and on a busy machine much more).
    template <typename F>
    void parallel_ranges(int64_t n, int64_t cost, F fn) {
        if (n <= 0) return;
        constexpr int64_t kMinWork = 1 << 16;
        const int64_t max_tasks = static_cast<int64_t>(pool_.size()) * 4;
        const int64_t min_chunk = std::max<int64_t>(1, kMinWork / std::max<int64_t>(1, cost));
        const int64_t chunk = std::max(min_chunk, (n + max_tasks - 1) / max_tasks);
        const int64_t tasks = (n + chunk - 1) / chunk;
        pool_.parallel_for(tasks, [&](int64_t t, int) {
            const int64_t lo = t * chunk;
            fn(lo, std::min(n, lo + chunk));
        });
    }

  private:
    // OpKind::MoeFfn on `rows` rows (runtime/plan.h says what it computes).
    void moe_ffn(const ArenaView& a, const Op& op, int64_t rows);

    ThreadPool& pool_;
    const kernels::ExpLut exp_lut_;  // 128 KiB, for plans that ask for LUT exp
};

}  // namespace llada::runtime
