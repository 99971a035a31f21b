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

// One weight row's block of 32 values, dequantised through the block's 16-entry table.
// `bytes` holds the pair's 32 bytes; `high` selects the second block (high nibbles).
HWY_INLINE void DequantBlockLut(const uint8_t* bytes, bool high, float d, float* out) {
#if HWY_MAX_BYTES >= 64
    const hn::ScalableTag<float> df;
    {
        if (hn::Lanes(df) == 16) {
            // The table {d * (q - 8)} fills exactly one vector: the lookup is one permute.
            HWY_ALIGN float t[16];
            for (int q = 0; q < 16; ++q)
                t[q] = d * static_cast<float>(q - 8);
            const auto table = hn::Load(df, t);
            const hn::Rebind<int32_t, decltype(df)> di;
            const hn::Rebind<uint8_t, decltype(df)> du8;
            for (int j = 0; j < 32; j += 16) {
                auto nib = hn::LoadU(du8, bytes + j);
                nib = high ? hn::ShiftRight<4>(nib) : hn::And(nib, hn::Set(du8, 0x0f));
                const auto idx =
                    hn::BitCast(di, hn::PromoteTo(hn::Rebind<uint32_t, decltype(df)>(), nib));
                hn::Store(hn::TableLookupLanes(table, hn::IndicesFromVec(df, idx)), df, out + j);
            }
            return;
        }
    }
#endif
    float t[16];
    for (int q = 0; q < 16; ++q)
        t[q] = d * static_cast<float>(q - 8);
    for (int j = 0; j < 32; ++j)
        out[j] = t[high ? bytes[j] >> 4 : bytes[j] & 0x0f];
}

// The conventional dequantisation the table replaces: (q - 8) converted and scaled.
HWY_INLINE void DequantBlockArith(const uint8_t* bytes, bool high, float d, float* out) {
    const hn::ScalableTag<float> df;
    const hn::Rebind<int32_t, decltype(df)> di;
    const hn::Rebind<uint8_t, decltype(df)> du8;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const auto vd = hn::Set(df, d);
    const auto eight = hn::Set(di, 8);
    for (int64_t j = 0; j < 32; j += N) {
        auto nib = hn::LoadU(du8, bytes + j);
        nib = high ? hn::ShiftRight<4>(nib) : hn::And(nib, hn::Set(du8, 0x0f));
        const auto q = hn::Sub(
            hn::BitCast(di, hn::PromoteTo(hn::Rebind<uint32_t, decltype(df)>(), nib)), eight);
        hn::Store(hn::Mul(hn::ConvertTo(df, q), vd), df, out + j);
    }
}

template <bool kLut>
void MatmulQ4Deq(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                 int64_t n0, int64_t n1) {
    const quant::PackedLayout l = quant::packed_layout(w.type, w.n_rows, w.n_cols);
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const int64_t K = w.n_cols;
    HWY_ALIGN float deq[4][32];
    for (int64_t n = n0; n < n1; n += quant::kPackRows) {
        const int nr = static_cast<int>(std::min<int64_t>(quant::kPackRows, n1 - n));
        const uint8_t* group = w.packed + (n / quant::kPackRows) * l.group_bytes;
        for (int64_t m = 0; m < m_rows; ++m) {
            for (int r = 0; r < nr; ++r)
                y[m * ldy + n + r] = 0.0f;
        }
        for (int64_t p = 0; p < l.n_pairs; ++p) {
            const uint8_t* sb = group + p * l.pair_bytes;
            const auto* scales = reinterpret_cast<const uint16_t*>(sb);
            for (int h = 0; h < 2; ++h) {
                const int64_t k0 = p * 64 + h * 32;
                if (k0 >= K) break;
                for (int r = 0; r < nr; ++r) {
                    const float d = quant::fp16_to_fp32(scales[2 * r + h]);
                    if constexpr (kLut) {
                        DequantBlockLut(sb + 16 + r * 32, h == 1, d, deq[r]);
                    } else {
                        DequantBlockArith(sb + 16 + r * 32, h == 1, d, deq[r]);
                    }
                }
                for (int64_t m = 0; m < m_rows; ++m) {
                    const float* xm = x + m * K + k0;
                    for (int r = 0; r < nr; ++r) {
                        auto acc = hn::Zero(df);
                        for (int64_t j = 0; j < 32; j += N) {
                            acc = hn::MulAdd(hn::LoadU(df, xm + j), hn::Load(df, deq[r] + j), acc);
                        }
                        y[m * ldy + n + r] += hn::GetLane(hn::SumOfLanes(df, acc));
                    }
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
