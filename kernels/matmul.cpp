// Matmul kernels for every weight format and the activation preparation they need (Highway).
//
// This file is compiled once per instruction set (Highway's foreach_target); the dispatcher at
// the bottom picks the best one the machine supports at run time.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/tile_simd-inl.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "quant/fp16.h"
#include "quant/packed.h"

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Scalar value of weight i (the tails of the tiles).
template <typename WT>
HWY_INLINE float WeightAt(const WT* w, int64_t i) {
    if constexpr (hwy::IsSame<WT, float>()) {
        return w[i];
    } else {
        uint16_t bits;
        hwy::CopyBytes<2>(w + i, &bits);
        return hwy::IsSame<WT, hwy::float16_t>() ? quant::fp16_to_fp32(bits)
                                                 : quant::bf16_to_fp32(bits);
    }
}

// One register tile of the output: MR activation rows x NR weight rows, accumulated along K
// (each loaded weight vector is used MR times and each activation vector NR times, so the loop
// is bound by FMAs, not loads), then reduced horizontally once per output.
template <int MR, int NR, typename WT>
HWY_INLINE void TileFloat(const float* HWY_RESTRICT x, int64_t ldx, int64_t k,
                          const WT* HWY_RESTRICT w, int64_t ldw, float* HWY_RESTRICT y, int64_t ldy,
                          bool accumulate) {
    const TileTagF df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    using V = hn::Vec<decltype(df)>;
    VecArray<TileTagF, MR * NR> acc;  // acc[m * NR + n]
    for (int m = 0; m < MR; ++m) {
        for (int n = 0; n < NR; ++n)
            Put(acc, m * NR + n, hn::Zero(df));
    }
    int64_t i = 0;
    for (; i + N <= k; i += N) {
        VecArray<TileTagF, MR> xv;
        for (int m = 0; m < MR; ++m)
            Put(xv, m, hn::LoadU(df, x + m * ldx + i));
        for (int n = 0; n < NR; ++n) {
            V wv;
            if constexpr (hwy::IsSame<WT, float>()) {
                wv = hn::LoadU(df, w + n * ldw + i);
            } else {
                const hn::Rebind<WT, decltype(df)> dw;
                wv = hn::PromoteTo(df, hn::LoadU(dw, w + n * ldw + i));
            }
            for (int m = 0; m < MR; ++m)
                Put(acc, m * NR + n, hn::MulAdd(xv[m], wv, acc[m * NR + n]));
        }
    }
    for (int m = 0; m < MR; ++m) {
        for (int n = 0; n < NR; ++n) {
            float s = hn::GetLane(hn::SumOfLanes(df, acc[m * NR + n]));
            for (int64_t j = i; j < k; ++j)
                s += x[m * ldx + j] * WeightAt(w + n * ldw, j);
            y[m * ldy + n] = accumulate ? y[m * ldy + n] + s : s;
        }
    }
}

// Rows of x in tiles of MR for one group of NR weight rows.
template <int NR, typename WT>
HWY_INLINE void RowsFloat(const float* x, int64_t ldx, int64_t m_rows, int64_t k, const WT* w,
                          int64_t ldw, float* y, int64_t ldy, bool acc) {
    int64_t m = 0;
    for (; m + 4 <= m_rows; m += 4)
        TileFloat<4, NR>(x + m * ldx, ldx, k, w, ldw, y + m * ldy, ldy, acc);
    switch (m_rows - m) {
        case 3:
            TileFloat<3, NR>(x + m * ldx, ldx, k, w, ldw, y + m * ldy, ldy, acc);
            break;
        case 2:
            TileFloat<2, NR>(x + m * ldx, ldx, k, w, ldw, y + m * ldy, ldy, acc);
            break;
        case 1:
            TileFloat<1, NR>(x + m * ldx, ldx, k, w, ldw, y + m * ldy, ldy, acc);
            break;
    }
}

// K is taken in chunks of at most kKChunk: the activation rows' chunk (rows x 8 KiB) then stays in
// L2 while every weight group passes over it (a 5632-wide FFN input of 160 rows would not).
constexpr int64_t kKChunk = 2048;

template <typename WT>
void MatmulFloatT(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1) {
    const int64_t k = w.n_cols;
    const int64_t ldw = static_cast<int64_t>(w.row_bytes / sizeof(WT));
    // Equal chunks, each a multiple of 32 where possible, so no chunk is a short tail.
    const int64_t n_chunks = (k + kKChunk - 1) / kKChunk;
    const int64_t chunk = ((k / n_chunks + 31) / 32) * 32;
    // Widened 16-bit weights (unused for float weights, which the tiles read in place).
    HWY_ALIGN float panel[hwy::IsSame<WT, float>() ? 1 : 4 * (kKChunk + 32)];
    for (int64_t k0 = 0; k0 < k; k0 += chunk) {
        const int64_t kc = std::min(chunk, k - k0);
        const bool acc = k0 > 0;
        int64_t n = n0;
        for (; n + 4 <= n1; n += 4) {
            const WT* wn = reinterpret_cast<const WT*>(w.row(n)) + k0;
            if constexpr (!hwy::IsSame<WT, float>()) {
                if (m_rows > 4) {
                    // Widen the 4 weight rows once for all row tiles instead of once per tile.
                    const hn::ScalableTag<float> df;
                    const hn::Rebind<WT, decltype(df)> dw;
                    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
                    for (int r = 0; r < 4; ++r) {
                        int64_t i = 0;
                        for (; i + N <= kc; i += N) {
                            hn::Store(hn::PromoteTo(df, hn::LoadU(dw, wn + r * ldw + i)), df,
                                      panel + r * chunk + i);
                        }
                        for (; i < kc; ++i)
                            panel[r * chunk + i] = WeightAt(wn + r * ldw, i);
                    }
                    RowsFloat<4>(x + k0, k, m_rows, kc, static_cast<const float*>(panel), chunk,
                                 y + n, ldy, acc);
                    continue;
                }
            }
            RowsFloat<4>(x + k0, k, m_rows, kc, wn, ldw, y + n, ldy, acc);
        }
        for (; n < n1; ++n) {
            RowsFloat<1>(x + k0, k, m_rows, kc, reinterpret_cast<const WT*>(w.row(n)) + k0, ldw,
                         y + n, ldy, acc);
        }
    }
}

// F16 weights repacked at load (quant/packed.h: per group of 16 rows, each column's 16 values
// together). An outer-product tile: MR activation rows x G groups of 16 output columns, held in
// MR * G * 16 / lanes accumulators; per column k, the G groups' values are widened once and
// multiplied by MR broadcast activations. No horizontal sums, and each widened weight vector
// serves MR rows.
template <int MR, int G, typename WT, bool kWiden>
HWY_INLINE void TileF16Packed(const float* HWY_RESTRICT x, int64_t ldx, int64_t kc,
                              const WT* HWY_RESTRICT wp, int64_t gs, int64_t ks,
                              float* HWY_RESTRICT wide, const WT* next, float* HWY_RESTRICT y,
                              int64_t ldy, bool accumulate) {
    const TileTagF df;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    using V = hn::Vec<decltype(df)>;
    constexpr int L = static_cast<int>(hn::MaxLanes(df));
    constexpr int VG = quant::kPackRows / L > 0 ? quant::kPackRows / L : 1;  // vectors per group
    constexpr int NV = G * VG;
    static_assert(VG * L == quant::kPackRows, "lanes must divide the group");
    if constexpr (MR == 1 && !kWiden) {
        // One row (decoding): a single chain of FMAs per vector would wait on each one's
        // latency; even and odd columns go to two chains, added at the end.
        VecArray<TileTagF, 2 * NV> a2;  // [parity * NV + v]
        for (int v = 0; v < 2 * NV; ++v)
            Put(a2, v, hn::Zero(df));
        auto column = [&](int64_t k, int parity) {
            const V xb = hn::Set(df, x[k]);
            for (int g = 0; g < G; ++g) {
                for (int j = 0; j < VG; ++j) {
                    const WT* p = wp + g * gs + k * ks + j * L;
                    V w;
                    if constexpr (hwy::IsSame<WT, float>()) {
                        w = hn::LoadU(df, p);
                    } else {
                        w = hn::PromoteTo(df, hn::LoadU(dh, p));
                    }
                    const int v = parity * NV + g * VG + j;
                    Put(a2, v, hn::MulAdd(xb, w, a2[v]));
                }
            }
        };
        int64_t k = 0;
        for (; k + 2 <= kc; k += 2) {
            column(k, 0);
            column(k + 1, 1);
        }
        if (k < kc) column(k, 0);
        for (int v = 0; v < NV; ++v) {
            float* yp = y + v * L;
            const V a = hn::Add(a2[v], a2[NV + v]);
            hn::StoreU(accumulate ? hn::Add(hn::LoadU(df, yp), a) : a, df, yp);
        }
        return;
    }
    VecArray<TileTagF, MR * NV> acc;  // acc[m * NV + v]
    for (int m = 0; m < MR; ++m) {
        for (int v = 0; v < NV; ++v)
            Put(acc, m * NV + v, hn::Zero(df));
    }
    if (accumulate) {
        // The partial sums this tile adds to at its end: in flight from L2/L3 while it computes
        // (y is m_rows x n, revisited once per K chunk, and larger than L2 for the FFN).
        for (int m = 0; m < MR; ++m) {
            for (int c = 0; c < NV * L; c += 64 / static_cast<int>(sizeof(float)))
                __builtin_prefetch(y + m * ldy + c, 1, 3);
        }
    }
    for (int64_t k = 0; k < kc; ++k) {
        if constexpr (kWiden) {
            // The next column block's weights into L2, one cache line per group every 64 bytes
            // of k: the stream for the next tile then starts from L2 instead of memory.
            if (next != nullptr && (k * ks * sizeof(WT)) % 64 == 0) {
                for (int g = 0; g < G; ++g)
                    __builtin_prefetch(next + g * gs + k * ks, 0, 2);
            }
        }
        VecArray<TileTagF, NV> wv;
        for (int g = 0; g < G; ++g) {
            for (int j = 0; j < VG; ++j) {
                const WT* p = wp + g * gs + k * ks + j * L;
                if constexpr (hwy::IsSame<WT, float>()) {
                    Put(wv, g * VG + j, hn::LoadU(df, p));
                } else {
                    Put(wv, g * VG + j, hn::PromoteTo(df, hn::LoadU(dh, p)));
                }
                if constexpr (kWiden) {
                    hn::StoreU(wv[g * VG + j], df, wide + (k * G + g) * quant::kPackRows + j * L);
                }
            }
        }
        for (int m = 0; m < MR; ++m) {
            const V xb = hn::Set(df, x[m * ldx + k]);
            for (int v = 0; v < NV; ++v)
                Put(acc, m * NV + v, hn::MulAdd(xb, wv[v], acc[m * NV + v]));
        }
    }
    for (int m = 0; m < MR; ++m) {
        for (int v = 0; v < NV; ++v) {
            float* yp = y + m * ldy + v * L;
            const V a = acc[m * NV + v];
            hn::StoreU(accumulate ? hn::Add(hn::LoadU(df, yp), a) : a, df, yp);
        }
    }
}

// Rows per tile: 12 x 2 groups fill 24 of AVX-512's 32 registers; narrower vectors need more
// registers per group, so fewer rows.
constexpr int kTileLanes = static_cast<int>(hn::MaxLanes(TileTagF()));
constexpr int kF16TileRows = kTileLanes >= 16 ? 12 : kTileLanes >= 8 ? 6 : 2;
// Groups per tile in the main loop: two on AVX-512 (2 vectors), one elsewhere (AVX2: 2 vectors
// x 6 rows = 12 accumulators of its 16 registers).
constexpr int kF16TileGroups = kTileLanes >= 16 ? 2 : 1;

// One tile of `mr` rows (1 <= mr <= MR) through the instantiation of that height.
template <int MR, int G, typename WT, bool kWiden>
HWY_INLINE void TileF16PackedN(int64_t mr, const float* x, int64_t ldx, int64_t kc, const WT* wp,
                               int64_t gs, int64_t ks, float* wide, const WT* next, float* y,
                               int64_t ldy, bool acc) {
    if constexpr (MR > 1) {
        if (mr < MR) {
            return TileF16PackedN<MR - 1, G, WT, kWiden>(mr, x, ldx, kc, wp, gs, ks, wide, next, y,
                                                         ldy, acc);
        }
    }
    TileF16Packed<MR, G, WT, kWiden>(x, ldx, kc, wp, gs, ks, wide, next, y, ldy, acc);
}

// The rows in tiles of near-equal height (32 rows on AVX-512: 11 + 11 + 10, not 12 + 12 + 8
// or 12 + 12 + 4 + 4): every tile keeps as many FMAs per weight vector as it can. With more
// than one tile and a `wide` buffer (kc x G x 16 floats), the first tile also stores the
// weights it widens and the others read them from there: a conversion costs two uops on the
// ports the FMAs need, a float load none. That first tile also prefetches `next` (the next
// column block's weights, same layout; may be null).
template <int G>
HWY_INLINE void RowsF16Packed(const float* x, int64_t ldx, int64_t m_rows, int64_t kc,
                              const hwy::float16_t* wp, int64_t gs, float* wide,
                              const hwy::float16_t* next, float* y, int64_t ldy, bool acc) {
    constexpr int MR = kF16TileRows;
    constexpr int64_t ks = quant::kPackRows;
    const int64_t tiles = (m_rows + MR - 1) / MR;
    if (tiles == 0) return;
    const int64_t base = m_rows / tiles, taller = m_rows % tiles;
    int64_t m = 0;
    for (int64_t t = 0; t < tiles; ++t) {
        const int64_t mr = base + (t < taller ? 1 : 0);
        float* ym = y + m * ldy;
        if (wide == nullptr || tiles == 1) {
            TileF16PackedN<MR, G, hwy::float16_t, false>(mr, x + m * ldx, ldx, kc, wp, gs, ks,
                                                         nullptr, nullptr, ym, ldy, acc);
        } else if (t == 0) {
            TileF16PackedN<MR, G, hwy::float16_t, true>(mr, x + m * ldx, ldx, kc, wp, gs, ks, wide,
                                                        next, ym, ldy, acc);
        } else {
            TileF16PackedN<MR, G, float, false>(mr, x + m * ldx, ldx, kc, wide, ks, G * ks, nullptr,
                                                nullptr, ym, ldy, acc);
        }
        m += mr;
    }
}

// K chunk of the packed kernel: a tile's activation rows (12 x 1 KiB) and the column block's
// weights (2 x 8 KiB of halves, 32 KiB once widened) stay in L1/L2 while every row tile passes
// over them.
constexpr int64_t kF16KChunk = 256;

void MatmulF16Packed(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                     int64_t n0, int64_t n1) {
    const int64_t k = w.n_cols;
    const int64_t group_elems = k * quant::kPackRows;
    const auto* packed = reinterpret_cast<const hwy::float16_t*>(w.packed);
    const int64_t n_end = std::min(n1, w.n_rows);
    // Output columns past n_rows (padding rows of the last group) must not be written: a
    // partial last group goes through a scratch tile.
    HWY_ALIGN float scratch[kF16TileRows * quant::kPackRows];
    // The widened weights of one column block (32 KiB on AVX-512), see RowsF16Packed.
    HWY_ALIGN float wide[kF16KChunk * kF16TileGroups * quant::kPackRows];
    // One row tile (a decode's few rows) widens nothing for other tiles to reuse, so the K
    // chunks would only cut each group's stream into pieces: it takes the whole K at once.
    const int64_t chunk = m_rows <= kF16TileRows ? k : kF16KChunk;
    for (int64_t k0 = 0; k0 < k; k0 += chunk) {
        const int64_t kc = std::min(chunk, k - k0);
        const bool acc = k0 > 0;
        int64_t n = n0;
        constexpr int64_t kBlockCols = kF16TileGroups * quant::kPackRows;
        const auto block_at = [&](int64_t col, int64_t kk) {
            return packed + (col / quant::kPackRows) * group_elems + kk * quant::kPackRows;
        };
        for (; n + kBlockCols <= n_end; n += kBlockCols) {
            // The block this thread runs next: the next columns, or the first of the next chunk.
            const hwy::float16_t* next = n + 2 * kBlockCols <= n_end ? block_at(n + kBlockCols, k0)
                                         : k0 + chunk < k            ? block_at(n0, k0 + chunk)
                                                                     : nullptr;
            RowsF16Packed<kF16TileGroups>(x + k0, k, m_rows, kc, block_at(n, k0), group_elems, wide,
                                          next, y + n, ldy, acc);
        }
        for (; n < n_end; n += quant::kPackRows) {
            const hwy::float16_t* wp =
                packed + (n / quant::kPackRows) * group_elems + k0 * quant::kPackRows;
            const int64_t cols = std::min<int64_t>(quant::kPackRows, n_end - n);
            if (cols == quant::kPackRows) {
                RowsF16Packed<1>(x + k0, k, m_rows, kc, wp, group_elems, wide, nullptr, y + n, ldy,
                                 acc);
                continue;
            }
            for (int64_t m = 0; m < m_rows; m += kF16TileRows) {
                const int64_t mr = std::min<int64_t>(kF16TileRows, m_rows - m);
                for (int64_t r = 0; r < mr; ++r) {
                    for (int64_t c = 0; c < cols; ++c)
                        scratch[r * quant::kPackRows + c] = y[(m + r) * ldy + n + c];
                }
                RowsF16Packed<1>(x + k0 + m * k, k, mr, kc, wp, group_elems, nullptr, nullptr,
                                 scratch, quant::kPackRows, acc);
                for (int64_t r = 0; r < mr; ++r) {
                    for (int64_t c = 0; c < cols; ++c)
                        y[(m + r) * ldy + n + c] = scratch[r * quant::kPackRows + c];
                }
            }
        }
    }
}

void MatmulFloat(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                 int64_t n0, int64_t n1) {
    if (w.packed && w.type == format::TensorType::F16)
        return MatmulF16Packed(x, m_rows, w, y, ldy, n0, n1);
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

void ToFp16(const float* x, uint16_t* y, int64_t n) {
    int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
    // (Highway's emulated fp16 demotion truncates; those targets take the scalar loop.)
    const hn::ScalableTag<float> df;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    for (; i + N <= n; i += N) {
        hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, x + i)), dh,
                   reinterpret_cast<hwy::float16_t*>(y + i));
    }
#endif
    for (; i < n; ++i)
        y[i] = quant::fp32_to_fp16(x[i]);
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
HWY_EXPORT(RoundRowsFp16);
HWY_EXPORT(RoundRowsBf16);
HWY_EXPORT(ToFp16);

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
        case format::TensorType::Q4_1:
        case format::TensorType::Q5_0:
        case format::TensorType::Q5_1:
        case format::TensorType::IQ4_NL:
            return ActKind::Q8_0;
        case format::TensorType::Q2_K:
        case format::TensorType::Q3_K:
        case format::TensorType::Q4_K:
        case format::TensorType::Q5_K:
        case format::TensorType::Q6_K:
        case format::TensorType::IQ4_XS:
            return ActKind::Q8_K;
        case format::TensorType::TQ4:
        case format::TensorType::TQ8:
        case format::TensorType::TF16:
            return ActKind::F16;  // the NPU's fp16 activations
    }
    return ActKind::F32;
}

void round_rows_fp16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(RoundRowsFp16)(x, y, k, r0, r1);
}
void round_rows_bf16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(RoundRowsBf16)(x, y, k, r0, r1);
}
void to_fp16(const float* x, uint16_t* y, int64_t n) {
    HWY_DYNAMIC_DISPATCH(ToFp16)(x, y, n);
}
void matmul_float(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1) {
    HWY_DYNAMIC_DISPATCH(MatmulFloat)(x, m_rows, w, y, ldy, n0, n1);
}
}  // namespace llada::kernels
#endif
