// The CPU's execution of single plan ops (SIMD kernels over the thread pool).
#include "runtime/cpu_ops.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/packed.h"
#include "quant/tile.h"

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
static_assert(kLmChunk % quant::kTileDim == 0, "LM head chunks start at tile strips");

// y[:, n0:n1] = x W^T for m rows of x prepared as `act` (float rows, or Q8_0 / Q8_K records
// when the weights are quantised; lut: Q4_0 weights dequantised through the table, float rows).
void matmul_rows(const uint8_t* x, kernels::ActKind act, bool lut, int64_t m,
                 const kernels::WeightView& w, float* y, int64_t ldy, int64_t n0, int64_t n1) {
    const float* xf = reinterpret_cast<const float*>(x);
    if (quant::tile_type_of(w.type)) {
        kernels::matmul_tile(xf, m, w, y, ldy, n0, n1);
    } else if (lut) {
        kernels::matmul_q4_lut(xf, m, w, y, ldy, n0, n1);
    } else if (act == kernels::ActKind::Q8_0 || act == kernels::ActKind::Q8_K) {
        kernels::matmul_q8(x, m, w, y, ldy, n0, n1);
    } else {
        kernels::matmul_float(xf, m, w, y, ldy, n0, n1);
    }
}

// y[:, n0:n1] = in x W^T through the kernel the op's weights and activations need.
void matmul_range(const ArenaView& a, const Op& op, int64_t m, const kernels::WeightView& w,
                  float* y, int64_t ldy, int64_t n0, int64_t n1) {
    matmul_rows(a.data(op.in0), op.act, op.lut, m, w, y, ldy, n0, n1);
}

// Rows [r0, r1) of x (k floats each) prepared as `act` into y (row_bytes each).
void prepare_rows(kernels::ActKind act, const float* x, uint8_t* y, size_t row_bytes, int64_t k,
                  int64_t r0, int64_t r1) {
    switch (act) {
        case kernels::ActKind::F32:
            std::memcpy(y + r0 * row_bytes, x + r0 * k, (r1 - r0) * row_bytes);
            break;
        case kernels::ActKind::F16:
            kernels::round_rows_fp16(x, reinterpret_cast<float*>(y), k, r0, r1);
            break;
        case kernels::ActKind::BF16:
            kernels::round_rows_bf16(x, reinterpret_cast<float*>(y), k, r0, r1);
            break;
        case kernels::ActKind::Q8_0:
            kernels::quantize_acts(x, y, k, r0, r1);
            break;
        case kernels::ActKind::Q8_K:
            kernels::quantize_acts_k(x, y, k, r0, r1);
            break;
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
                    quant::dequantize_matrix_row(op.weight.type, op.weight.data, op.weight.n_rows,
                                                 d, b.tokens[r], out + r * d);
                }
            });
            return;
        }
        case OpKind::RmsNorm: {
            // Per head (group > 0): the [rows][heads * group] tensor is [rows * heads][group].
            const int64_t cols = plan.tensors[op.in0].cols;
            const int64_t k = op.group > 0 ? op.group : cols;
            const float* x = a.f32(op.in0);
            float* y = a.f32(op.out);
            parallel_ranges(rows_of(op.out) * (cols / k), 2 * k, [&](int64_t lo, int64_t hi) {
                kernels::rms_norm(x, op.vec, y, k, op.eps, lo, hi);
            });
            return;
        }
        case OpKind::PrepareActs: {
            const int64_t k = plan.tensors[op.in0].cols;
            const float* x = a.f32(op.in0);
            assert(op.act != kernels::ActKind::F32);
            parallel_ranges(rows_of(op.out), k, [&](int64_t lo, int64_t hi) {
                prepare_rows(op.act, x, a.data(op.out), plan.tensors[op.out].row_bytes, k, lo, hi);
            });
            return;
        }
        case OpKind::MatMul: {
            const int64_t m = rows_of(op.out);
            const int64_t n = op.weight.n_rows;
            float* y = a.f32(op.out);
            const bool tiled = quant::tile_type_of(op.weight.type).has_value();
            const bool quantised =
                op.act == kernels::ActKind::Q8_0 || op.act == kernels::ActKind::Q8_K;
            if (tiled || op.weight.packed || op.lut || quantised) {
                // Packed weights come in groups of 16 rows, tile formats in strips of 32: split
                // on their boundaries.
                const int64_t g = tiled ? quant::kTileDim : quant::kPackRows;
                const int64_t groups = (n + g - 1) / g;
                parallel_ranges(groups, g * m * op.weight.n_cols, [&](int64_t lo, int64_t hi) {
                    matmul_range(a, op, m, op.weight, y, n, g * lo, std::min(n, g * hi));
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
                keys = std::max<int64_t>(keys, op.visible_keys(b, w));
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
                                n_kv[e - r] = op.visible_keys(b, w);
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
                wc.n_rows = len;
                // The bytes of the rows before the chunk (for a tile format whole strips:
                // kLmChunk is a multiple of 32).
                wc.data =
                    op.weight.data + quant::matrix_bytes(op.weight.type, v0, op.weight.n_cols);
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
        case OpKind::MoeFfn:
            moe_ffn(a, op, rows_of(op.out));
            return;
        case OpKind::GatherRows: {
            const size_t rb = plan.tensors[op.in0].row_bytes;
            for (int64_t i = 0; i < b.n_out; ++i) {
                std::memcpy(a.data(op.out) + i * rb, a.data(op.in0) + b.out_rows[i] * rb, rb);
            }
            return;
        }
    }
}

void CpuOps::moe_ffn(const ArenaView& a, const Op& op, int64_t n) {
    const MoeExperts& moe = *op.moe;
    const int64_t d = a.plan->tensors[op.in0].cols;
    const int64_t n_exp = moe.n_expert, k_used = moe.n_used, ff = moe.n_ff;
    const MoeScratch L = moe_scratch(moe, d, n);
    uint8_t* base = a.data(op.tmp);
    auto* first = reinterpret_cast<int32_t*>(base + L.count);
    auto* chosen = reinterpret_cast<int32_t*>(base + L.chosen);
    auto* weight = reinterpret_cast<float*>(base + L.weight);
    auto* slot = reinterpret_cast<int32_t*>(base + L.slot);
    auto* gate = reinterpret_cast<float*>(base + L.gate);
    auto* up = reinterpret_cast<float*>(base + L.up);
    auto* down = reinterpret_cast<float*>(base + L.down);
    const kernels::ActKind act_in = kernels::act_kind_for(moe.gate[0].type);
    const kernels::ActKind act_down = kernels::act_kind_for(moe.down[0].type);

    // Routing (MoeExperts): the gating's scores, the selection among the allowed groups by the
    // biased scores (ties to the lower expert id), the chosen experts' weights.
    const float* logits = a.f32(op.in1);
    auto* probs = reinterpret_cast<float*>(base + L.probs);
    std::fill(first, first + n_exp + 1, 0);
    const bool scaled = moe.scale != 0.0f && moe.scale != 1.0f;
    const bool biased = !moe.bias.empty();
    const bool grouped = moe.n_group > 1 && moe.n_group_used < moe.n_group;
    const int64_t per_group = grouped ? n_exp / moe.n_group : n_exp;
    for (int64_t r = 0; r < n; ++r) {
        const float* z = logits + r * n_exp;
        float* p = probs + r * n_exp;
        if (moe.gating == MoeGating::Sigmoid) {
            for (int64_t e = 0; e < n_exp; ++e)
                p[e] = 1.0f / (1.0f + std::exp(-z[e]));
        } else {
            // exp in float, the sum in double, as ggml's soft_max.
            const float mx = *std::max_element(z, z + n_exp);
            double sum = 0.0;
            for (int64_t e = 0; e < n_exp; ++e) {
                p[e] = std::exp(z[e] - mx);
                sum += p[e];
            }
            const float inv = static_cast<float>(1.0 / sum);
            for (int64_t e = 0; e < n_exp; ++e)
                p[e] *= inv;
        }
        auto select_score = [&](int32_t e) { return biased ? p[e] + moe.bias[e] : p[e]; };
        // Group-limited selection: a group's score is the sum of its two best biased scores;
        // only the n_group_used best groups (ties to the lower group) may be chosen from.
        uint64_t allowed = ~uint64_t{0};  // bit g: group g may be chosen (n_group <= 64)
        if (grouped) {
            float gscore[64];
            for (int64_t g = 0; g < moe.n_group; ++g) {
                float b1 = -INFINITY, b2 = -INFINITY;
                for (int64_t i = 0; i < per_group; ++i) {
                    const float v = select_score(static_cast<int32_t>(g * per_group + i));
                    if (v > b1) {
                        b2 = b1;
                        b1 = v;
                    } else if (v > b2) {
                        b2 = v;
                    }
                }
                gscore[g] = per_group > 1 ? b1 + b2 : b1;
            }
            allowed = 0;
            for (int64_t j = 0; j < moe.n_group_used; ++j) {
                int64_t best = -1;
                for (int64_t g = 0; g < moe.n_group; ++g) {
                    if ((allowed >> g) & 1) continue;
                    if (best < 0 || gscore[g] > gscore[best]) best = g;
                }
                allowed |= uint64_t{1} << best;
            }
        }
        int32_t* c = chosen + r * k_used;
        float* wr = weight + r * k_used;
        double wsum = 0.0;
        for (int64_t j = 0; j < k_used; ++j) {
            int32_t best = -1;
            for (int32_t e = 0; e < n_exp; ++e) {
                if (!((allowed >> (e / per_group)) & 1)) continue;
                if (std::find(c, c + j, e) != c + j) continue;
                if (best < 0 || select_score(e) > select_score(best)) best = e;
            }
            c[j] = best;
            wr[j] = p[best];
            wsum += p[best];
            first[best + 1] += 1;
        }
        if (moe.norm) {
            const float denom = std::max(static_cast<float>(wsum), 6.103515625e-5f);
            for (int64_t j = 0; j < k_used; ++j)
                wr[j] /= denom;
        }
        if (scaled) {
            for (int64_t j = 0; j < k_used; ++j)
                wr[j] *= moe.scale;
        }
    }
    // Slots grouped by expert, rows in order within an expert: first[e] is expert e's first slot.
    for (int64_t e = 0; e < n_exp; ++e)
        first[e + 1] += first[e];
    for (int64_t i = 0; i < n * k_used; ++i)
        slot[i] = first[chosen[i]]++;
    for (int64_t e = n_exp; e > 0; --e)
        first[e] = first[e - 1];
    first[0] = 0;

    const float* x = a.f32(op.in0);
    parallel_ranges(n * k_used, d, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
            prepare_rows(act_in, x + (i / k_used) * d, base + L.x + slot[i] * L.x_row, L.x_row, d,
                         0, 1);
        }
    });
    // One task per (expert, block of output columns): the blocks are multiples of the packed
    // layout's 16 rows, and an expert with no rows costs one check.
    constexpr int64_t kCols = 64;
    auto per_expert = [&](int64_t n_out, int matrices, auto fn) {
        const int64_t blocks = (n_out + kCols - 1) / kCols;
        pool_.parallel_for(n_exp * blocks * matrices, [&](int64_t t, int) {
            const int64_t e = t / (blocks * matrices), m = first[e + 1] - first[e];
            if (m == 0) return;
            const int64_t c0 = (t % blocks) * kCols;
            fn(e, static_cast<int>((t / blocks) % matrices), first[e], m, c0,
               std::min(n_out, c0 + kCols));
        });
    };
    per_expert(ff, 2, [&](int64_t e, int which, int64_t s0, int64_t m, int64_t c0, int64_t c1) {
        const kernels::WeightView& w = which == 0 ? moe.gate[e] : moe.up[e];
        float* y = (which == 0 ? gate : up) + s0 * ff;
        matmul_rows(base + L.x + s0 * L.x_row, act_in, false, m, w, y, ff, c0, c1);
    });
    parallel_ranges(n * k_used, 4 * ff, [&](int64_t lo, int64_t hi) {
        for (int64_t s = lo; s < hi; ++s) {
            kernels::swiglu(gate + s * ff, up + s * ff, gate + s * ff, ff);
            prepare_rows(act_down, gate + s * ff, base + L.act + s * L.act_row, L.act_row, ff, 0,
                         1);
        }
    });
    per_expert(d, 1, [&](int64_t e, int, int64_t s0, int64_t m, int64_t c0, int64_t c1) {
        matmul_rows(base + L.act + s0 * L.act_row, act_down, false, m, moe.down[e], down + s0 * d,
                    d, c0, c1);
    });
    // Each row: its experts' outputs weighted and summed in the order they were chosen.
    float* out = a.f32(op.out);
    parallel_ranges(n, k_used * d, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
            float* y = out + r * d;
            for (int64_t j = 0; j < k_used; ++j) {
                const float w = weight[r * k_used + j];
                const float* v = down + slot[r * k_used + j] * d;
                for (int64_t c = 0; c < d; ++c)
                    y[c] = j == 0 ? w * v[c] : y[c] + w * v[c];
            }
        }
    });
}

}  // namespace llada::runtime
