// Matmul kernels for every weight format and the activation preparation they need (Highway).
//
// This file is compiled once per instruction set (Highway's foreach_target); the dispatcher at
// the bottom picks the best one the machine supports at run time.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"

#include <cmath>

#include "kernels/kernels.h"
#include "quant/fp16.h"

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Dot product of float32 x with n weights of type WT (float, float16_t or bfloat16_t).
template <typename WT>
HWY_INLINE float DotFloat(const float* HWY_RESTRICT x, const WT* HWY_RESTRICT w, int64_t n) {
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    auto acc0 = hn::Zero(df);
    auto acc1 = hn::Zero(df);
    int64_t i = 0;
    auto load_w = [&](int64_t at) {
        if constexpr (hwy::IsSame<WT, float>()) {
            return hn::LoadU(df, w + at);
        } else {
            const hn::Rebind<WT, decltype(df)> dw;
            return hn::PromoteTo(df, hn::LoadU(dw, w + at));
        }
    };
    for (; i + 2 * N <= n; i += 2 * N) {
        acc0 = hn::MulAdd(hn::LoadU(df, x + i), load_w(i), acc0);
        acc1 = hn::MulAdd(hn::LoadU(df, x + i + N), load_w(i + N), acc1);
    }
    for (; i + N <= n; i += N)
        acc0 = hn::MulAdd(hn::LoadU(df, x + i), load_w(i), acc0);
    float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
    for (; i < n; ++i) {
        float wi;
        if constexpr (hwy::IsSame<WT, float>()) {
            wi = w[i];
        } else if constexpr (hwy::IsSame<WT, hwy::float16_t>()) {
            uint16_t bits;
            hwy::CopyBytes<2>(w + i, &bits);
            wi = quant::fp16_to_fp32(bits);
        } else {
            uint16_t bits;
            hwy::CopyBytes<2>(w + i, &bits);
            wi = quant::bf16_to_fp32(bits);
        }
        sum += x[i] * wi;
    }
    return sum;
}

template <typename WT>
void MatmulFloatT(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1) {
    const int64_t k = w.n_cols;
    for (int64_t n = n0; n < n1; ++n) {
        const WT* wr = reinterpret_cast<const WT*>(w.row(n));
        for (int64_t m = 0; m < m_rows; ++m)
            y[m * ldy + n] = DotFloat(x + m * k, wr, k);
    }
}

void MatmulFloat(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                 int64_t n0, int64_t n1) {
    switch (w.type) {
        case format::TensorType::F32:
            return MatmulFloatT<float>(x, m_rows, w, y, ldy, n0, n1);
        case format::TensorType::F16:
            return MatmulFloatT<hwy::float16_t>(x, m_rows, w, y, ldy, n0, n1);
        case format::TensorType::BF16:
            return MatmulFloatT<hwy::bfloat16_t>(x, m_rows, w, y, ldy, n0, n1);
        default:
            HWY_ASSERT(false);
    }
}

// Sum over one block of 32 of int8 products, as a vector of int32 partial sums. Products are
// formed in int32 lanes, which every target supports; a later VNNI path can replace this.
HWY_INLINE hn::Vec<hn::ScalableTag<int32_t>> BlockDotI32(const int8_t* HWY_RESTRICT a,
                                                         const int8_t* HWY_RESTRICT b) {
    const hn::ScalableTag<int32_t> d32;
    const hn::Rebind<int8_t, decltype(d32)> d8;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d32));
    auto sum = hn::Zero(d32);
    for (int64_t j = 0; j < quant::kQK; j += N) {
        const auto va = hn::PromoteTo(d32, hn::LoadU(d8, a + j));
        const auto vb = hn::PromoteTo(d32, hn::LoadU(d8, b + j));
        sum = hn::Add(hn::Mul(va, vb), sum);
    }
    return sum;
}

// Unpacks a Q4_0 block's nibbles to int8 values in [-8, 7], element order as in llama.cpp.
HWY_INLINE void UnpackQ4(const quant::BlockQ4_0& blk, int8_t* HWY_RESTRICT out) {
    const hn::CappedTag<uint8_t, 16> d8;
    const hn::Repartition<int8_t, decltype(d8)> di8;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d8));
    const auto mask = hn::Set(d8, 0x0f);
    const auto eight = hn::Set(di8, 8);
    for (int64_t j = 0; j < quant::kQK / 2; j += N) {
        const auto bytes = hn::LoadU(d8, blk.qs + j);
        const auto lo = hn::And(bytes, mask);
        const auto hi = hn::ShiftRight<4>(bytes);
        hn::StoreU(hn::Sub(hn::BitCast(di8, lo), eight), di8, out + j);
        hn::StoreU(hn::Sub(hn::BitCast(di8, hi), eight), di8, out + quant::kQK / 2 + j);
    }
}

void MatmulQ8(const quant::BlockQ8_0* xq, int64_t m_rows, const WeightView& w, float* y,
              int64_t ldy, int64_t n0, int64_t n1) {
    const hn::ScalableTag<float> df;
    const int64_t nb = w.n_cols / quant::kQK;
    HWY_ALIGN int8_t unpacked[quant::kQK];
    const bool q4 = w.type == format::TensorType::Q4_0;
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* wr = w.row(n);
        for (int64_t m = 0; m < m_rows; ++m) {
            const quant::BlockQ8_0* xr = xq + m * nb;
            auto acc = hn::Zero(df);
            for (int64_t b = 0; b < nb; ++b) {
                const int8_t* wq;
                float dw;
                if (q4) {
                    const auto& blk = reinterpret_cast<const quant::BlockQ4_0*>(wr)[b];
                    UnpackQ4(blk, unpacked);
                    wq = unpacked;
                    dw = quant::fp16_to_fp32(blk.d);
                } else {
                    const auto& blk = reinterpret_cast<const quant::BlockQ8_0*>(wr)[b];
                    wq = blk.qs;
                    dw = quant::fp16_to_fp32(blk.d);
                }
                const float scale = dw * quant::fp16_to_fp32(xr[b].d);
                const auto isum = BlockDotI32(xr[b].qs, wq);
                acc = hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, scale), acc);
            }
            y[m * ldy + n] = hn::GetLane(hn::SumOfLanes(df, acc));
        }
    }
}

void QuantizeRowsQ8(const float* x, quant::BlockQ8_0* y, int64_t k, int64_t r0, int64_t r1) {
    const hn::ScalableTag<float> df;
    const hn::Rebind<int32_t, decltype(df)> di;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const int64_t nb = k / quant::kQK;
    HWY_ALIGN int32_t q[quant::kQK];
    for (int64_t r = r0; r < r1; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            const float* xb = x + r * k + b * quant::kQK;
            auto vmax = hn::Zero(df);
            for (int64_t j = 0; j < quant::kQK; j += N) {
                vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
            }
            const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
            const float d = amax / 127.0f;
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            quant::BlockQ8_0& out = y[r * nb + b];
            out.d = quant::fp32_to_fp16(d);
            // Round half to even, as llama.cpp's SIMD quantiser does for activations.
            for (int64_t j = 0; j < quant::kQK; j += N) {
                const auto v = hn::Mul(hn::LoadU(df, xb + j), hn::Set(df, id));
                hn::Store(hn::NearestInt(v), di, q + j);
            }
            for (int j = 0; j < quant::kQK; ++j)
                out.qs[j] = static_cast<int8_t>(q[j]);
        }
    }
}

void RoundRowsFp16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1) {
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
    // Highway's emulated fp16 demotion truncates; llama.cpp rounds to nearest even.
    for (int64_t i = r0 * k; i < r1 * k; ++i)
        y[i] = quant::round_to_fp16(x[i]);
#else
    const hn::ScalableTag<float> df;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * k;
        float* yr = y + r * k;
        int64_t i = 0;
        for (; i + N <= k; i += N) {
            hn::StoreU(hn::PromoteTo(df, hn::DemoteTo(dh, hn::LoadU(df, xr + i))), df, yr + i);
        }
        for (; i < k; ++i)
            yr[i] = quant::round_to_fp16(xr[i]);
    }
#endif
}

void RoundRowsBf16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1) {
    // Scalar on every target: bf16 rounding is a few integer ops and not on a hot path.
    for (int64_t i = r0 * k; i < r1 * k; ++i)
        y[i] = quant::round_to_bf16(x[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llada::kernels {

HWY_EXPORT(MatmulFloat);
HWY_EXPORT(MatmulQ8);
HWY_EXPORT(QuantizeRowsQ8);
HWY_EXPORT(RoundRowsFp16);
HWY_EXPORT(RoundRowsBf16);

ActKind act_kind_for(format::TensorType weight_type) {
    switch (weight_type) {
        case format::TensorType::F32:
            return ActKind::F32;
        case format::TensorType::F16:
            return ActKind::F16;
        case format::TensorType::BF16:
            return ActKind::BF16;
        case format::TensorType::Q8_0:
        case format::TensorType::Q4_0:
            return ActKind::Q8_0;
    }
    return ActKind::F32;
}

void round_rows_fp16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(RoundRowsFp16)(x, y, k, r0, r1);
}
void round_rows_bf16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(RoundRowsBf16)(x, y, k, r0, r1);
}
void quantize_rows_q8_0(const float* x, quant::BlockQ8_0* y, int64_t k, int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(QuantizeRowsQ8)(x, y, k, r0, r1);
}
void matmul_float(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1) {
    HWY_DYNAMIC_DISPATCH(MatmulFloat)(x, m_rows, w, y, ldy, n0, n1);
}
void matmul_q8(const quant::BlockQ8_0* xq, int64_t m_rows, const WeightView& w, float* y,
               int64_t ldy, int64_t n0, int64_t n1) {
    HWY_DYNAMIC_DISPATCH(MatmulQ8)(xq, m_rows, w, y, ldy, n0, n1);
}

}  // namespace llada::kernels
#endif
