// The CPU device: runs each op of a plan with the SIMD kernels, split over the thread pool.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/lut.h"
#include "quant/blocks.h"
#include "quant/packed.h"
#include "runtime/device.h"
#include "runtime/memory_planner.h"

namespace llada::runtime {
namespace {

struct AlignedFree {
    void operator()(uint8_t* p) const { std::free(p); }
};

// Vocabulary entries per task of the fused LM head: the chunk's logits for all output rows
// stay in a small per-thread buffer.
constexpr int64_t kLmChunk = 256;

class CpuCompiledPlan : public CompiledPlan {
  public:
    CpuCompiledPlan(Plan plan, int n_threads) : plan_(std::move(plan)) {
        plan_memory(plan_);
        assert(memory_plan_is_valid(plan_));
        const size_t bytes = std::max<size_t>(64, (plan_.arena_bytes + 63) / 64 * 64);
        arena_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)));
        std::memset(arena_.get(), 0, bytes);
        for (const Op& op : plan_.ops) {
            if (op.kind != OpKind::LmHeadReduce) continue;
            const int64_t chunks = (op.weight.n_rows + kLmChunk - 1) / kLmChunk;
            lm_scratch.assign(static_cast<size_t>(n_threads * plan_.max_out_rows * kLmChunk), 0.f);
            lm_partial.assign(static_cast<size_t>(chunks * plan_.max_out_rows), {});
        }
    }
    const Plan& plan() const override { return plan_; }
    const float* output() const override { return f32(plan_.output); }
    size_t arena_bytes() const override { return plan_.arena_bytes; }

    uint8_t* data(int t) const { return arena_.get() + plan_.tensors[t].offset; }
    float* f32(int t) const { return reinterpret_cast<float*>(data(t)); }

    // Fused LM head: per-thread logits of one chunk, and per-chunk partial statistics.
    std::vector<float> lm_scratch;
    std::vector<kernels::RowStats> lm_partial;

  private:
    Plan plan_;
    std::unique_ptr<uint8_t, AlignedFree> arena_;
};

class CpuDevice : public Device {
  public:
    explicit CpuDevice(ThreadPool& pool) : pool_(pool) {}
    std::string name() const override { return "cpu"; }

    std::unique_ptr<CompiledPlan> compile(Plan plan) override {
        return std::make_unique<CpuCompiledPlan>(std::move(plan), pool_.size());
    }

    void execute(CompiledPlan& compiled, const Batch& batch, KvCache& kv,
                 const OpObserver* observer) override {
        auto& cp = static_cast<CpuCompiledPlan&>(compiled);
        const Plan& plan = cp.plan();
        assert(batch.n_rows <= plan.max_rows && batch.n_out <= plan.max_out_rows);
        for (int i = 0; i < static_cast<int>(plan.ops.size()); ++i) {
            const Op& op = plan.ops[i];
            run(cp, op, batch, kv);
            if (observer && op.out >= 0 && op.kind != OpKind::PrepareActs &&
                op.kind != OpKind::LmHeadReduce) {
                const TensorDesc& d = plan.tensors[op.out];
                (*observer)(i, op, d, cp.f32(op.out),
                            d.rows == RowSpace::Window ? batch.n_rows : batch.n_out);
            }
        }
    }

  private:
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

    void run(CpuCompiledPlan& cp, const Op& op, const Batch& b, KvCache& kv) {
        const Plan& plan = cp.plan();
        auto rows_of = [&](int t) {
            return plan.tensors[t].rows == RowSpace::Window ? b.n_rows : b.n_out;
        };
        switch (op.kind) {
            case OpKind::Embed: {
                float* out = cp.f32(op.out);
                const int64_t d = op.weight.n_cols;
                parallel_ranges(b.n_rows, d, [&](int64_t lo, int64_t hi) {
                    for (int64_t r = lo; r < hi; ++r) {
                        quant::dequantize_row(op.weight.type, op.weight.row(b.tokens[r]),
                                              out + r * d, d);
                    }
                });
                return;
            }
            case OpKind::RmsNorm: {
                const int64_t k = plan.tensors[op.in0].cols;
                const float* x = cp.f32(op.in0);
                float* y = cp.f32(op.out);
                parallel_ranges(rows_of(op.out), 2 * k, [&](int64_t lo, int64_t hi) {
                    kernels::rms_norm(x, op.vec, y, k, op.eps, lo, hi);
                });
                return;
            }
            case OpKind::PrepareActs: {
                const int64_t k = plan.tensors[op.in0].cols;
                const float* x = cp.f32(op.in0);
                parallel_ranges(rows_of(op.out), k, [&](int64_t lo, int64_t hi) {
                    switch (op.act) {
                        case kernels::ActKind::F16:
                            kernels::round_rows_fp16(x, cp.f32(op.out), k, lo, hi);
                            break;
                        case kernels::ActKind::BF16:
                            kernels::round_rows_bf16(x, cp.f32(op.out), k, lo, hi);
                            break;
                        case kernels::ActKind::Q8_0:
                            kernels::quantize_acts(x, cp.data(op.out), k, lo, hi);
                            break;
                        case kernels::ActKind::F32:
                            assert(false);
                    }
                });
                return;
            }
            case OpKind::MatMul: {
                const int64_t m = rows_of(op.out);
                const int64_t n = op.weight.n_rows;
                float* y = cp.f32(op.out);
                if (op.lut) {
                    const int64_t groups = (n + quant::kPackRows - 1) / quant::kPackRows;
                    parallel_ranges(groups, quant::kPackRows * m * op.weight.n_cols,
                                    [&](int64_t lo, int64_t hi) {
                                        kernels::matmul_q4_lut(cp.f32(op.in0), m, op.weight, y, n,
                                                               quant::kPackRows * lo,
                                                               std::min(n, quant::kPackRows * hi));
                                    });
                } else if (op.act == kernels::ActKind::Q8_0) {
                    // Packed weights come in groups of 4 rows: split on group boundaries.
                    const int64_t groups = (n + quant::kPackRows - 1) / quant::kPackRows;
                    parallel_ranges(groups, quant::kPackRows * m * op.weight.n_cols,
                                    [&](int64_t lo, int64_t hi) {
                                        kernels::matmul_q8(cp.data(op.in0), m, op.weight, y, n,
                                                           quant::kPackRows * lo,
                                                           std::min(n, quant::kPackRows * hi));
                                    });
                } else {
                    parallel_ranges(n, m * op.weight.n_cols, [&](int64_t lo, int64_t hi) {
                        kernels::matmul_float(cp.f32(op.in0), m, op.weight, y, n, lo, hi);
                    });
                }
                return;
            }
            case OpKind::AddBias: {
                const int64_t k = plan.tensors[op.in0].cols;
                const float* x = cp.f32(op.in0);
                float* y = cp.f32(op.out);
                for (int64_t r = 0; r < rows_of(op.out); ++r) {
                    kernels::add(x + r * k, op.vec, y + r * k, k);
                }
                return;
            }
            case OpKind::Rope: {
                const int64_t k = plan.tensors[op.in0].cols;
                const float* x = cp.f32(op.in0);
                float* y = cp.f32(op.out);
                const int64_t half = op.n_rot / 2;
                parallel_ranges(b.n_rows, k, [&](int64_t lo, int64_t hi) {
                    for (int64_t r = lo; r < hi; ++r) {
                        std::memcpy(y + r * k, x + r * k, sizeof(float) * k);
                        const int64_t p = b.pos[r];
                        assert(p >= 0 && p < op.rope_ctx);
                        kernels::rope_row(y + r * k, op.n_head, op.head_dim, op.n_rot,
                                          op.rope_cos + p * half, op.rope_sin + p * half,
                                          op.rope_style);
                    }
                });
                return;
            }
            case OpKind::StoreKV: {
                const int64_t kd = kv.kv_dim();
                const float* k = cp.f32(op.in0);
                const float* v = cp.f32(op.in1);
                for (int64_t r = 0; r < b.n_rows; ++r) {
                    assert(b.pos[r] >= 0 && b.pos[r] < kv.n_pos() && b.seq[r] < kv.n_seq());
                    std::memcpy(kv.k(op.layer, b.seq[r], b.pos[r]), k + r * kd, sizeof(float) * kd);
                    std::memcpy(kv.v(op.layer, b.seq[r], b.pos[r]), v + r * kd, sizeof(float) * kd);
                }
                return;
            }
            case OpKind::Attention: {
                const int64_t cols = op.n_head * op.head_dim;
                const int64_t group = op.n_head / op.n_kv_head;
                const float scale = 1.0f / std::sqrt(static_cast<float>(op.head_dim));
                const float* q = cp.f32(op.in0);
                float* out = cp.f32(op.out);
                // Cost of one (row, head): a dot and an axpy per key, keys ~ the window + cache.
                const int64_t keys = op.causal ? b.n_rows : b.kv_len[0];
                parallel_ranges(
                    b.n_rows * op.n_head, 2 * keys * op.head_dim, [&](int64_t lo, int64_t hi) {
                        for (int64_t t = lo; t < hi; ++t) {
                            const int64_t r = t / op.n_head, h = t % op.n_head;
                            const int s = b.seq[r];
                            const int64_t n_kv = op.causal ? b.pos[r] + 1 : b.kv_len[s];
                            const int64_t kvh = h / group;
                            const float* qh = q + r * cols + h * op.head_dim;
                            const float* kh = kv.k(op.layer, s, 0) + kvh * op.head_dim;
                            const float* vh = kv.v(op.layer, s, 0) + kvh * op.head_dim;
                            float* oh = out + r * cols + h * op.head_dim;
                            if (op.lut) {
                                kernels::attention_head_lut(qh, kh, vh, kv.kv_dim(), n_kv,
                                                            op.head_dim, scale, oh, exp_lut_);
                            } else {
                                kernels::attention_head(qh, kh, vh, kv.kv_dim(), n_kv, op.head_dim,
                                                        scale, oh);
                            }
                        }
                    });
                return;
            }
            case OpKind::SwiGlu: {
                const int64_t k = plan.tensors[op.in0].cols;
                const float* g = cp.f32(op.in0);
                const float* u = cp.f32(op.in1);
                float* y = cp.f32(op.out);
                parallel_ranges(rows_of(op.out), 8 * k, [&](int64_t lo, int64_t hi) {
                    kernels::swiglu(g + lo * k, u + lo * k, y + lo * k, (hi - lo) * k);
                });
                return;
            }
            case OpKind::Add: {
                const int64_t k = plan.tensors[op.in0].cols;
                const float* a = cp.f32(op.in0);
                const float* c = cp.f32(op.in1);
                float* y = cp.f32(op.out);
                parallel_ranges(rows_of(op.out), k, [&](int64_t lo, int64_t hi) {
                    kernels::add(a + lo * k, c + lo * k, y + lo * k, (hi - lo) * k);
                });
                return;
            }
            case OpKind::LmHeadReduce: {
                const int64_t m = rows_of(op.out);
                const int64_t max_m = plan.max_out_rows;
                const int64_t V = op.weight.n_rows;
                const int64_t chunks = (V + kLmChunk - 1) / kLmChunk;
                pool_.parallel_for(chunks, [&](int64_t c, int thread) {
                    const int64_t v0 = c * kLmChunk, len = std::min(kLmChunk, V - v0);
                    kernels::WeightView wc = op.weight;
                    wc.data = op.weight.row(v0);
                    wc.n_rows = len;
                    if (op.weight.packed) {
                        wc.packed = op.weight.packed +
                                    (v0 / quant::kPackRows) * quant::packed_layout(op.weight.type,
                                                                                   op.weight.n_rows,
                                                                                   op.weight.n_cols)
                                                                  .group_bytes;
                    }
                    float* logits = cp.lm_scratch.data() + thread * max_m * kLmChunk;
                    if (op.lut) {
                        kernels::matmul_q4_lut(cp.f32(op.in0), m, wc, logits, kLmChunk, 0, len);
                    } else if (op.act == kernels::ActKind::Q8_0) {
                        kernels::matmul_q8(cp.data(op.in0), m, wc, logits, kLmChunk, 0, len);
                    } else {
                        kernels::matmul_float(cp.f32(op.in0), m, wc, logits, kLmChunk, 0, len);
                    }
                    kernels::row_stats_chunk(logits, m, kLmChunk, len, v0,
                                             cp.lm_partial.data() + c * max_m);
                });
                // Merged in vocabulary order, so the result does not depend on the thread count.
                auto* out = reinterpret_cast<kernels::RowStats*>(cp.data(op.out));
                for (int64_t r = 0; r < m; ++r) {
                    kernels::RowStats acc;
                    for (int64_t c = 0; c < chunks; ++c) {
                        kernels::row_stats_merge(acc, cp.lm_partial[c * max_m + r]);
                    }
                    out[r] = acc;
                }
                return;
            }
            case OpKind::GatherRows: {
                const size_t rb = plan.tensors[op.in0].row_bytes;
                for (int64_t i = 0; i < b.n_out; ++i) {
                    std::memcpy(cp.data(op.out) + i * rb, cp.data(op.in0) + b.out_rows[i] * rb, rb);
                }
                return;
            }
        }
    }

    ThreadPool& pool_;
    const kernels::ExpLut exp_lut_;  // 128 KiB, for plans that ask for LUT exp
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(ThreadPool& pool) {
    return std::make_unique<CpuDevice>(pool);
}

}  // namespace llada::runtime
