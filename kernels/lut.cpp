// Table-driven exp (softmax; the lookup itself is in exp_lut-inl.h) and int4 dequantisation
// (Highway).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/lut.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/tile_simd-inl.h"

#include <cmath>
#include <limits>

#include "kernels/lut.h"
#include "quant/fp16.h"
#include "quant/packed.h"

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Q4_0 weights (packed: 16 rows interleaved, quant/packed.h) x float activations, the weights
// dequantised in registers with one lane per weight row: for each of a block's 32 values, the
// nibbles of all rows of the vector become floats (through the 16-entry table {q - 8} when kLut,
// or by convert-and-subtract), are scaled by each row's d, and meet the broadcast activation.
template <bool kLut>
void MatmulQ4Deq(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                 int64_t n0, int64_t n1) {
    const quant::PackedLayout l = quant::packed_layout(w.type, w.n_rows, w.n_cols);
    const TileTagF df;
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
                VecArray<TileTagF, kMaxM> acc;
                for (int m = 0; m < kMaxM; ++m)
                    Put(acc, m, hn::Zero(df));
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
                                    Put(acc, m,
                                        hn::MulAdd(wk, hn::Set(df, x[(m0 + m) * K + b * 32 + k]),
                                                   acc[m]));
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
    attention_rows(q, head_dim, 1, &n_kv, k, v, kv_stride, head_dim, scale, out, head_dim,
                   lut.data());
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
