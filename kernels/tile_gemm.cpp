// The simulated NPU's matmul on tile-format weights (Highway).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/tile_gemm.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/tile_simd-inl.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/tile_gemm.h"
#include "quant/fp16.h"
#include "quant/tile.h"

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// out[0..16) = fp16(d * (q[i] - off)) for 16 quantised values q (bytes, signed or not).
template <typename T8>
HWY_INLINE void Row16(const T8* q, float d, float off, float* out) {
    const TileTagF df;
    const hn::Rebind<int32_t, decltype(df)> di;
    const hn::Rebind<T8, decltype(df)> d8;
    constexpr size_t kN = hn::MaxLanes(df) < 16 ? hn::MaxLanes(df) : 16;
    const auto vd = hn::Set(df, d), voff = hn::Set(df, off);
    for (size_t c = 0; c < 16; c += kN) {
        const auto qf = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, q + c)));
        const auto v = hn::Mul(hn::Sub(qf, voff), vd);
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
        // Highway's emulated fp16 demotion truncates; round to nearest even one by one.
        HWY_ALIGN float tmp[kN];
        hn::Store(v, df, tmp);
        for (size_t i = 0; i < kN; ++i)
            out[c + i] = quant::round_to_fp16(tmp[i]);
#else
        const hn::Rebind<hwy::float16_t, decltype(df)> dh;
        hn::StoreU(hn::PromoteTo(df, hn::DemoteTo(dh, v)), df, out + c);
#endif
    }
}

void DequantTileStripKN(const quant::TileLayout& l, const uint8_t* strip, float* w) {
#if HWY_TARGET == HWY_SCALAR
    quant::dequantize_tile_strip_kn(l, strip, w, true);
#else
    if (l.type == quant::TileType::TF16) {
        quant::dequantize_tile_strip_kn(l, strip, w, true);
        return;
    }
    const hn::Full128<uint8_t> du8;
    const hn::Full128<int8_t> di8;
    HWY_ALIGN uint8_t r0[16], r1[16];
    HWY_ALIGN int8_t s0[16], s1[16];
    for (int64_t kt = 0; kt < l.k_tiles; ++kt) {
        const uint8_t* tile = strip + kt * l.tile_bytes;
        float* wt = w + kt * quant::kTileDim * quant::kTileDim;
        for (int g = 0; g < 32; ++g) {
            const int sb = g / quant::kTileGroupsPerSuper, gl = g % quant::kTileGroupsPerSuper;
            // Group g holds inputs 2(g/2) and 2(g/2)+1 of outputs 16(g%2) .. 16(g%2)+15: the
            // even values of the group make the first input's row, the odd ones the second's.
            float* row = wt + (2 * (g / 2)) * quant::kTileDim + 16 * (g % 2);
            if (l.type == quant::TileType::TQ4) {
                const auto* super = reinterpret_cast<const quant::SuperBlockTQ4*>(tile) + sb;
                const float d = quant::fp16_to_fp32(super->d[gl]);
                const auto b = hn::LoadU(du8, super->qs[gl]);
                // Byte j holds value j (low nibble) and value j + 16 (high nibble).
                const auto lo = hn::And(b, hn::Set(du8, static_cast<uint8_t>(0x0f)));
                const auto hi = hn::ShiftRight<4>(b);
                hn::Store(hn::ConcatEven(du8, hi, lo), du8, r0);
                hn::Store(hn::ConcatOdd(du8, hi, lo), du8, r1);
                Row16(r0, d, 8.0f, row);
                Row16(r1, d, 8.0f, row + quant::kTileDim);
            } else {
                const auto* super = reinterpret_cast<const quant::SuperBlockTQ8*>(tile) + sb;
                const float d = quant::fp16_to_fp32(super->d[gl]);
                const auto a = hn::LoadU(di8, super->qs[gl]);
                const auto c = hn::LoadU(di8, super->qs[gl] + 16);
                hn::Store(hn::ConcatEven(di8, c, a), di8, s0);
                hn::Store(hn::ConcatOdd(di8, c, a), di8, s1);
                Row16(s0, d, 0.0f, row);
                Row16(s1, d, 0.0f, row + quant::kTileDim);
            }
        }
    }
#endif
}

// MR rows of y (32 columns) as an outer product over k: each weight row (32 values, NV vectors)
// is loaded once and used MR times; each x value is broadcast once and used NV times.
template <int MR>
HWY_INLINE void KnTile(const float* HWY_RESTRICT x, int64_t k, const float* HWY_RESTRICT w,
                       float* HWY_RESTRICT y, int64_t ldy, int64_t n) {
    const TileTagF df;
    constexpr int kN = static_cast<int>(hn::MaxLanes(df));
    constexpr int NV = 32 / kN;
    using V = hn::Vec<decltype(df)>;
    VecArray<TileTagF, MR * NV> acc;  // acc[m * NV + v]
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < NV; ++v)
            Put(acc, m * NV + v, hn::Zero(df));
    for (int64_t i = 0; i < k; ++i) {
        VecArray<TileTagF, NV> wv;
        for (int v = 0; v < NV; ++v)
            Put(wv, v, hn::LoadU(df, w + i * 32 + v * kN));
        for (int m = 0; m < MR; ++m) {
            const V xb = hn::Set(df, x[m * k + i]);
            for (int v = 0; v < NV; ++v)
                Put(acc, m * NV + v, hn::MulAdd(xb, wv[v], acc[m * NV + v]));
        }
    }
    for (int m = 0; m < MR; ++m) {
        if (n == 32) {
            for (int v = 0; v < NV; ++v)
                hn::StoreU(acc[m * NV + v], df, y + m * ldy + v * kN);
        } else {
            HWY_ALIGN float tmp[32];
            for (int v = 0; v < NV; ++v)
                hn::Store(acc[m * NV + v], df, tmp + v * kN);
            for (int64_t j = 0; j < n; ++j)
                y[m * ldy + j] = tmp[j];
        }
    }
}

void MatmulKN32(const float* x, int64_t m_rows, int64_t k, const float* w, float* y, int64_t ldy,
                int64_t n) {
    // Rows per tile so accumulators + weight vectors fit the register file: 8 x 2 on AVX-512,
    // 2 x 4 on AVX2, 1 x 8 on 128-bit targets.
    constexpr int NV = 32 / static_cast<int>(HWY_LANES(float));
    constexpr int MR = NV <= 2 ? 8 : NV <= 4 ? 2 : 1;
    int64_t m = 0;
    for (; m + MR <= m_rows; m += MR)
        KnTile<MR>(x + m * k, k, w, y + m * ldy, ldy, n);
    for (; m < m_rows; ++m)
        KnTile<1>(x + m * k, k, w, y + m * ldy, ldy, n);
}

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llada::kernels {

HWY_EXPORT(DequantTileStripKN);
HWY_EXPORT(MatmulKN32);

void dequant_tile_strip_kn(const quant::TileLayout& l, const uint8_t* strip, float* w) {
    HWY_DYNAMIC_DISPATCH(DequantTileStripKN)(l, strip, w);
}

void matmul_kn32(const float* x, int64_t m_rows, int64_t k, const float* w, float* y, int64_t ldy,
                 int64_t n) {
    HWY_DYNAMIC_DISPATCH(MatmulKN32)(x, m_rows, k, w, y, ldy, n);
}

void matmul_tile(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                 int64_t n0, int64_t n1) {
    const auto type = quant::tile_type_of(w.type);
    HWY_ASSERT(type && n0 % quant::kTileDim == 0);
    const quant::TileLayout l = quant::tile_layout(*type, w.n_rows, w.n_cols);
    std::vector<float> buf(static_cast<size_t>(l.k_tiles * quant::kTileDim * quant::kTileDim));
    for (int64_t n = n0; n < n1; n += quant::kTileDim) {
        const int64_t strip = n / quant::kTileDim;
        dequant_tile_strip_kn(l, w.data + strip * l.strip_bytes(), buf.data());
        matmul_kn32(x, m_rows, w.n_cols, buf.data(), y + n, ldy,
                    std::min<int64_t>(quant::kTileDim, n1 - n));
    }
}

void matmul_kn32_ref(const float* x, int64_t m_rows, int64_t k, const float* w, float* y,
                     int64_t ldy, int64_t n) {
    for (int64_t m = 0; m < m_rows; ++m) {
        for (int64_t j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int64_t i = 0; i < k; ++i)
                s += x[m * k + i] * w[i * 32 + j];
            y[m * ldy + j] = s;
        }
    }
}

}  // namespace llada::kernels
#endif
