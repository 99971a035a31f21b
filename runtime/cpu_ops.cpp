// The CPU's execution of single plan ops (SIMD kernels over the thread pool).
#include "runtime/cpu_ops.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/packed.h"

namespace llada::runtime {
namespace {

// A row that attends to its own key in place of its excluded one: the kernel attended to the
// other keys; this folds the row's own key and value (in slot `own`) in as one more softmax term:
// out = (A * out + B * v_own) / (A + B), A = sum over the other keys of exp(s_j - m),
// B = exp(s_own - m). Scalar, one pass over the keys: only the few revision-check rows take it.
void fold_own_key(const float* q, int64_t hd, float scale, const KvCache& kv, int layer, int seq,
                  int kvh, int64_t n_kv, int64_t excl, int64_t own, float* out) {
    auto score = [&](int64_t j) {
        float d = 0.0f;
        if (kv.f16()) {
            const uint16_t* k = kv.k16(layer, seq, kvh, static_cast<int>(j));
            for (int64_t i = 0; i < hd; ++i)
                d += q[i] * quant::fp16_to_fp32(k[i]);
        } else {
            const float* k = kv.k(layer, seq, kvh, static_cast<int>(j));
            for (int64_t i = 0; i < hd; ++i)
                d += q[i] * k[i];
        }
        return d * scale;
    };
    // Online: the running maximum rescales the sum of the other keys' weights.
    const float s_own = score(own);
    float m = s_own, a = 0.0f;
    for (int64_t j = 0; j < n_kv; ++j) {
        if (j == excl) continue;
        const float sj = score(j);
        if (sj > m) {
            a *= std::exp(m - sj);
            m = sj;
        }
        a += std::exp(sj - m);
    }
    const float bw = std::exp(s_own - m);
    for (int64_t i = 0; i < hd; ++i) {
        const float v = kv.f16()
                            ? quant::fp16_to_fp32(kv.v16(layer, seq, kvh, static_cast<int>(own))[i])
                            : kv.v(layer, seq, kvh, static_cast<int>(own))[i];
        out[i] = (a * out[i] + bw * v) / (a + bw);
    }
}

}  // namespace

namespace {

// Vocabulary entries per task of the fused LM head: the chunk's logits for all output rows
// stay in a small per-thread buffer.
constexpr int64_t kLmChunk = 256;

// y[:, n0:n1] = in x W^T through the kernel the op's weights and activations need.
void matmul_range(const ArenaView& a, const Op& op, int64_t m, const kernels::WeightView& w,
                  float* y, int64_t ldy, int64_t n0, int64_t n1) {
    if (op.lut) {
        kernels::matmul_q4_lut(a.f32(op.in0), m, w, y, ldy, n0, n1);
    } else if (op.act == kernels::ActKind::Q8_0) {
        kernels::matmul_q8(a.data(op.in0), m, w, y, ldy, n0, n1);
    } else {
        kernels::matmul_float(a.f32(op.in0), m, w, y, ldy, n0, n1);
    }
}

}  // namespace

void LmHeadScratch::size_for(const Plan& plan, int n_threads) {
    for (const Op& op : plan.ops) {
        if (op.kind != OpKind::LmHeadReduce) continue;
        const int64_t chunks = (op.weight.n_rows + kLmChunk - 1) / kLmChunk;
        logits.assign(static_cast<size_t>(n_threads * plan.max_out_rows * kLmChunk), 0.f);
        partial.assign(static_cast<size_t>(chunks * plan.max_out_rows), {});
    }
}

void CpuOps::run(const ArenaView& a, LmHeadScratch& s, const Op& op, const Batch& b, KvCache& kv) {
    const Plan& plan = *a.plan;
    auto rows_of = [&](int t) {
        return plan.tensors[t].rows == RowSpace::Window ? b.n_rows : b.n_out;
    };
    switch (op.kind) {
        case OpKind::Embed: {
            float* out = a.f32(op.out);
            const int64_t d = op.weight.n_cols;
            parallel_ranges(b.n_rows, d, [&](int64_t lo, int64_t hi) {
                for (int64_t r = lo; r < hi; ++r) {
                    quant::dequantize_row(op.weight.type, op.weight.row(b.tokens[r]), out + r * d,
                                          d);
                }
            });
            return;
        }
        case OpKind::RmsNorm: {
            const int64_t k = plan.tensors[op.in0].cols;
            const float* x = a.f32(op.in0);
            float* y = a.f32(op.out);
            parallel_ranges(rows_of(op.out), 2 * k, [&](int64_t lo, int64_t hi) {
                kernels::rms_norm(x, op.vec, y, k, op.eps, lo, hi);
            });
            return;
        }
        case OpKind::PrepareActs: {
            const int64_t k = plan.tensors[op.in0].cols;
            const float* x = a.f32(op.in0);
            parallel_ranges(rows_of(op.out), k, [&](int64_t lo, int64_t hi) {
                switch (op.act) {
                    case kernels::ActKind::F16:
                        kernels::round_rows_fp16(x, a.f32(op.out), k, lo, hi);
                        break;
                    case kernels::ActKind::BF16:
                        kernels::round_rows_bf16(x, a.f32(op.out), k, lo, hi);
                        break;
                    case kernels::ActKind::Q8_0:
                        kernels::quantize_acts(x, a.data(op.out), k, lo, hi);
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
            float* y = a.f32(op.out);
            if (op.weight.packed || op.lut || op.act == kernels::ActKind::Q8_0) {
                // Packed weights come in groups of 16 rows: split on group boundaries.
                const int64_t groups = (n + quant::kPackRows - 1) / quant::kPackRows;
                parallel_ranges(groups, quant::kPackRows * m * op.weight.n_cols,
                                [&](int64_t lo, int64_t hi) {
                                    matmul_range(a, op, m, op.weight, y, n, quant::kPackRows * lo,
                                                 std::min(n, quant::kPackRows * hi));
                                });
            } else {
                parallel_ranges(n, m * op.weight.n_cols, [&](int64_t lo, int64_t hi) {
                    matmul_range(a, op, m, op.weight, y, n, lo, hi);
                });
            }
            return;
        }
        case OpKind::AddBias: {
            const int64_t k = plan.tensors[op.in0].cols;
            const float* x = a.f32(op.in0);
            float* y = a.f32(op.out);
            for (int64_t r = 0; r < rows_of(op.out); ++r) {
                kernels::add(x + r * k, op.vec, y + r * k, k);
            }
            return;
        }
        case OpKind::Rope: {
            const int64_t k = plan.tensors[op.in0].cols;
            const float* x = a.f32(op.in0);
            float* y = a.f32(op.out);
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
            const int64_t kd = kv.kv_dim(), hd = kv.head_dim();
            const float* k = a.f32(op.in0);
            const float* v = a.f32(op.in1);
            parallel_ranges(b.n_rows, 2 * kd, [&](int64_t lo, int64_t hi) {
                for (int64_t r = lo; r < hi; ++r) {
                    const int l = op.layer, sq = b.seq[r], p = b.slot_of(r);
                    if (p < 0) continue;  // a row whose K/V nothing keeps
                    assert(p < kv.n_pos() && sq < kv.n_seq());
                    for (int h = 0; h < kv.n_kv_head(); ++h) {
                        if (kv.f16()) {
                            kernels::to_fp16(k + r * kd + h * hd, kv.k16(l, sq, h, p), hd);
                            kernels::to_fp16(v + r * kd + h * hd, kv.v16(l, sq, h, p), hd);
                        } else {
                            std::memcpy(kv.k(l, sq, h, p), k + r * kd + h * hd, sizeof(float) * hd);
                            std::memcpy(kv.v(l, sq, h, p), v + r * kd + h * hd, sizeof(float) * hd);
                        }
                    }
                }
            });
            return;
        }
        case OpKind::Attention: {
            const int64_t cols = op.n_head * op.head_dim;
            const int64_t group = op.n_head / op.n_kv_head;
            const float scale = 1.0f / std::sqrt(static_cast<float>(op.head_dim));
            const float* q = a.f32(op.in0);
            float* out = a.f32(op.out);
            // In output space (the last layer after the output rows were gathered) row i is
            // window row out_rows[i]; its sequence, position and excluded key are that row's.
            const bool out_space = plan.tensors[op.out].rows == RowSpace::Output;
            const int64_t n = out_space ? b.n_out : b.n_rows;
            auto win = [&](int64_t r) { return out_space ? int64_t{b.out_rows[r]} : r; };
            int64_t keys = 0;
            for (int64_t r = 0; r < n; ++r) {
                const int64_t w = win(r);
                keys = std::max<int64_t>(keys, op.causal ? b.pos[w] + 1 : b.kv_len[b.seq[w]]);
            }
            const float* table = op.lut ? exp_lut_.data() : nullptr;  // LUT exp (NPU path)
            // One task = one head of up to kRows consecutive rows, split further where the
            // sequence changes; the multi-row kernel shares each key and value load among them.
            constexpr int64_t kRows = 32;
            const int64_t n_blocks = (n + kRows - 1) / kRows;
            parallel_ranges(
                n_blocks * op.n_head, 2 * kRows * keys * op.head_dim, [&](int64_t lo, int64_t hi) {
                    int64_t n_kv[kRows], excl[kRows];
                    for (int64_t t = lo; t < hi; ++t) {
                        const int64_t r0 = (t / op.n_head) * kRows, h = t % op.n_head;
                        const int64_t r1 = std::min(n, r0 + kRows);
                        const int64_t kvh = h / group;
                        for (int64_t r = r0; r < r1;) {
                            const int s = b.seq[win(r)];
                            int64_t e = r;
                            bool any_excl = false;
                            for (; e < r1 && b.seq[win(e)] == s; ++e) {
                                const int64_t w = win(e);
                                n_kv[e - r] = op.causal ? b.pos[w] + 1 : b.kv_len[s];
                                excl[e - r] = b.exclude_of(w);
                                any_excl = any_excl || excl[e - r] >= 0;
                            }
                            const int64_t* ex = any_excl ? excl : nullptr;
                            const float* qr = q + r * cols + h * op.head_dim;
                            float* o = out + r * cols + h * op.head_dim;
                            if (kv.f16()) {
                                kernels::attention_rows_f16(
                                    qr, cols, e - r, n_kv, kv.k16(op.layer, s, kvh, 0),
                                    kv.v16(op.layer, s, kvh, 0), op.head_dim, op.head_dim, scale, o,
                                    cols, table, ex);
                            } else {
                                kernels::attention_rows(qr, cols, e - r, n_kv,
                                                        kv.k(op.layer, s, kvh, 0),
                                                        kv.v(op.layer, s, kvh, 0), op.head_dim,
                                                        op.head_dim, scale, o, cols, table, ex);
                            }
                            r = e;
                        }
                    }
                });
            for (int64_t r = 0; b.own_key != nullptr && r < n; ++r) {
                const int64_t w = win(r);
                if (!b.own_key_of(w)) continue;
                for (int64_t h = 0; h < op.n_head; ++h) {
                    fold_own_key(q + r * cols + h * op.head_dim, op.head_dim, scale, kv, op.layer,
                                 b.seq[w], static_cast<int>(h / group), b.kv_len[b.seq[w]],
                                 b.exclude_of(w), b.slot_of(w), out + r * cols + h * op.head_dim);
                }
            }
            return;
        }
        case OpKind::SwiGlu: {
            const int64_t k = plan.tensors[op.in0].cols;
            const float* g = a.f32(op.in0);
            const float* u = a.f32(op.in1);
            float* y = a.f32(op.out);
            parallel_ranges(rows_of(op.out), 8 * k, [&](int64_t lo, int64_t hi) {
                kernels::swiglu(g + lo * k, u + lo * k, y + lo * k, (hi - lo) * k);
            });
            return;
        }
        case OpKind::Add: {
            const int64_t k = plan.tensors[op.in0].cols;
            const float* x0 = a.f32(op.in0);
            const float* c = a.f32(op.in1);
            float* y = a.f32(op.out);
            parallel_ranges(rows_of(op.out), k, [&](int64_t lo, int64_t hi) {
                kernels::add(x0 + lo * k, c + lo * k, y + lo * k, (hi - lo) * k);
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
                    wc.packed =
                        op.weight.packed +
                        (v0 / quant::kPackRows) *
                            quant::packed_layout(op.weight.type, op.weight.n_rows, op.weight.n_cols)
                                .group_bytes;
                }
                float* logits = s.logits.data() + thread * max_m * kLmChunk;
                matmul_range(a, op, m, wc, logits, kLmChunk, 0, len);
                kernels::row_stats_chunk(logits, m, kLmChunk, len, v0,
                                         s.partial.data() + c * max_m);
                if (b.gumbel != nullptr) {
                    kernels::row_gumbel_chunk(logits, m, kLmChunk, len, v0, b.gumbel,
                                              s.partial.data() + c * max_m);
                }
            });
            // Merged in vocabulary order, so the result does not depend on the thread count.
            auto* out = reinterpret_cast<kernels::RowStats*>(a.data(op.out));
            for (int64_t r = 0; r < m; ++r) {
                kernels::RowStats acc;
                for (int64_t c = 0; c < chunks; ++c) {
                    kernels::row_stats_merge(acc, s.partial[c * max_m + r]);
                }
                out[r] = acc;
            }
            return;
        }
        case OpKind::GatherRows: {
            const size_t rb = plan.tensors[op.in0].row_bytes;
            for (int64_t i = 0; i < b.n_out; ++i) {
                std::memcpy(a.data(op.out) + i * rb, a.data(op.in0) + b.out_rows[i] * rb, rb);
            }
            return;
        }
    }
}

}  // namespace llada::runtime
