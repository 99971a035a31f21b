// Table-driven exp (softmax) and int4 dequantisation (Highway).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/lut.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"

#include <cmath>
#include <limits>

#include "kernels/lut.h"
#include "quant/fp16.h"
#include "quant/packed.h"

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

HWY_INLINE float DotF(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    auto acc = hn::Zero(df);
    int64_t i = 0;
    for (; i + N <= n; i += N)
        acc = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc);
    float s = hn::GetLane(hn::SumOfLanes(df, acc));
    for (; i < n; ++i)
        s += a[i] * b[i];
    return s;
}

// s[j] = exp(s[j] - m) for j < n, read from the table (index: fp16 bits of m - s[j] >= 0).
HWY_INLINE void ExpChunkLut(float* s, int64_t n, float m, const float* table) {
    int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
    // (Highway's emulated fp16 demotion truncates; those targets take the scalar loop.)
    const hn::ScalableTag<float> df;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const hn::Rebind<uint16_t, decltype(df)> du16;
    const hn::Rebind<int32_t, decltype(df)> di;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const auto vm = hn::Set(df, m);
    for (; j + N <= n; j += N) {
        const auto neg = hn::Sub(vm, hn::LoadU(df, s + j));  // -(x - m) >= 0
        const auto bits = hn::BitCast(du16, hn::DemoteTo(dh, neg));
        const auto idx = hn::BitCast(di, hn::PromoteTo(hn::Rebind<uint32_t, decltype(df)>(), bits));
        hn::StoreU(hn::GatherIndex(df, table, hn::And(idx, hn::Set(di, 0x7fff))), df, s + j);
    }
#endif
    for (; j < n; ++j)
        s[j] = table[quant::fp32_to_fp16(m - s[j]) & 0x7fff];
}

// The streaming softmax of attention_head, with exp(x - m) read from the table.
void AttentionHeadLut(const float* q, const float* k, const float* v, int64_t kv_stride,
                      int64_t n_kv, int64_t head_dim, float scale, float* out, const float* table) {
    constexpr int64_t kChunk = 64;
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    HWY_ALIGN float scores[kChunk + 1];
    float m = -std::numeric_limits<float>::infinity();
    float l = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d)
        out[d] = 0.0f;
    for (int64_t j0 = 0; j0 < n_kv; j0 += kChunk) {
        const int64_t nj = std::min(kChunk, n_kv - j0);
        float cmax = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < nj; ++j) {
            scores[j] = DotF(q, k + (j0 + j) * kv_stride, head_dim) * scale;
            cmax = std::max(cmax, scores[j]);
        }
        const float m_new = std::max(m, cmax);
        // The rescale of the running sums rides along as one more table entry.
        scores[nj] = m;
        ExpChunkLut(scores, nj + 1, m_new, table);
        const float correction = m == -std::numeric_limits<float>::infinity() ? 0.0f : scores[nj];
        l *= correction;
        for (int64_t d = 0; d < head_dim; ++d)
            out[d] *= correction;
        for (int64_t j = 0; j < nj; ++j) {
            const float p = scores[j];
            l += p;
            const float* vj = v + (j0 + j) * kv_stride;
            const auto vp = hn::Set(df, p);
            int64_t d = 0;
            for (; d + N <= head_dim; d += N) {
                hn::StoreU(hn::MulAdd(vp, hn::LoadU(df, vj + d), hn::LoadU(df, out + d)), df,
                           out + d);
            }
            for (; d < head_dim; ++d)
                out[d] += p * vj[d];
        }
        m = m_new;
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < head_dim; ++d)
        out[d] *= inv;
}

// Q4_0 weights (packed: 16 rows interleaved, quant/packed.h) x float activations, the weights
// dequantised in registers with one lane per weight row: for each of a block's 32 values, the
// nibbles of all rows of the vector become floats (through the 16-entry table {q - 8} when kLut,
// or by convert-and-subtract), are scaled by each row's d, and meet the broadcast activation.
template <bool kLut>
void MatmulQ4Deq(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                 int64_t n0, int64_t n1) {
    const quant::PackedLayout l = quant::packed_layout(w.type, w.n_rows, w.n_cols);
    const hn::ScalableTag<float> df;
    const hn::Rebind<uint32_t, decltype(df)> du;
    const hn::Rebind<int32_t, decltype(df)> di;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const int64_t K = w.n_cols;
    constexpr int kMaxM = 4;
    // The table lookup needs the 16 entries in one vector (AVX-512); elsewhere it falls back
    // to the arithmetic path.
    const bool use_lut = kLut && N == 16;
    HWY_ALIGN float table[16];
    for (int q = 0; q < 16; ++q)
        table[q] = static_cast<float>(q - 8);
    for (int64_t n = n0; n < n1; n += quant::kPackRows) {
        const uint8_t* group = w.packed + (n / quant::kPackRows) * l.group_bytes;
        for (int64_t r0 = 0; r0 < quant::kPackRows && n + r0 < n1; r0 += N) {
            const int64_t lanes = std::min<int64_t>(N, n1 - n - r0);
            for (int64_t m0 = 0; m0 < m_rows; m0 += kMaxM) {
                const int mr = static_cast<int>(std::min<int64_t>(kMaxM, m_rows - m0));
                hn::Vec<decltype(df)> acc[kMaxM];
                for (int m = 0; m < kMaxM; ++m)
                    acc[m] = hn::Zero(df);
                for (int64_t b = 0; b < l.n_blocks; ++b) {
                    const uint8_t* sb = group + b * l.block_bytes;
                    const auto sw = hn::PromoteTo(
                        df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(sb) + r0));
                    const uint8_t* q = sb + 2 * quant::kPackRows + 4 * r0;
                    for (int j = 0; j < 4; ++j) {
                        const auto raw =
                            hn::LoadU(du, reinterpret_cast<const uint32_t*>(q + 64 * j));
                        for (int half = 0; half < 2; ++half) {
                            for (int i = 0; i < 4; ++i) {
                                const int k = 8 * j + 4 * half + i;
                                const auto nib = hn::And(hn::ShiftRightSame(raw, 8 * i + 4 * half),
                                                         hn::Set(du, 15u));
                                hn::Vec<decltype(df)> v;
                                if (use_lut) {
                                    v = hn::TableLookupLanes(
                                        hn::Load(df, table),
                                        hn::IndicesFromVec(df, hn::BitCast(di, nib)));
                                } else {
                                    v = hn::ConvertTo(
                                        df, hn::Sub(hn::BitCast(di, nib), hn::Set(di, 8)));
                                }
                                const auto wk = hn::Mul(v, sw);
                                for (int m = 0; m < mr; ++m) {
                                    acc[m] = hn::MulAdd(
                                        wk, hn::Set(df, x[(m0 + m) * K + b * 32 + k]), acc[m]);
                                }
                            }
                        }
                    }
                }
                HWY_ALIGN float t[16];
                for (int m = 0; m < mr; ++m) {
                    hn::Store(acc[m], df, t);
                    for (int64_t c = 0; c < lanes; ++c)
                        y[(m0 + m) * ldy + n + r0 + c] = t[c];
                }
            }
        }
    }
}

void MatmulQ4Lut(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                 int64_t n0, int64_t n1) {
    MatmulQ4Deq<true>(x, m_rows, w, y, ldy, n0, n1);
}
void MatmulQ4Arith(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                   int64_t n0, int64_t n1) {
    MatmulQ4Deq<false>(x, m_rows, w, y, ldy, n0, n1);
}

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llada::kernels {

HWY_EXPORT(AttentionHeadLut);
HWY_EXPORT(MatmulQ4Lut);
HWY_EXPORT(MatmulQ4Arith);

ExpLut::ExpLut() : table_(32768) {
    for (uint32_t bits = 0; bits < 32768; ++bits) {
        const float x = quant::fp16_to_fp32(static_cast<uint16_t>(bits));
        table_[bits] = std::isnan(x) ? 0.0f : static_cast<float>(std::exp(-static_cast<double>(x)));
    }
}

float ExpLut::operator()(float x) const {
    return table_[quant::fp32_to_fp16(-x) & 0x7fff];
}

void attention_head_lut(const float* q, const float* k, const float* v, int64_t kv_stride,
                        int64_t n_kv, int64_t head_dim, float scale, float* out,
                        const ExpLut& lut) {
    HWY_DYNAMIC_DISPATCH(AttentionHeadLut)
    (q, k, v, kv_stride, n_kv, head_dim, scale, out, lut.data());
}

void matmul_q4_lut(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                   int64_t n0, int64_t n1) {
    HWY_DYNAMIC_DISPATCH(MatmulQ4Lut)(x, m_rows, w, y, ldy, n0, n1);
}

void matmul_q4_dequant(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                       int64_t n0, int64_t n1) {
    HWY_DYNAMIC_DISPATCH(MatmulQ4Arith)(x, m_rows, w, y, ldy, n0, n1);
}

}  // namespace llada::kernels
#endif
