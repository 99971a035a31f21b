// Quantised matmul: Q8 activations x packed Q4_0 / Q8_0 weights (quant/packed.h), and the
// activation quantiser that feeds it (Highway for dispatch; the int8 dot products use the x86
// instructions of each target directly, since Highway 1.0 has no u8 x s8 dot product).
//
// Register tile: MR activation rows x 4 weight rows. Per 32-value block the integer dot product
// is exact (int32); it is scaled by d_w * d_x in float, as llama.cpp does. For Q4_0 the nibbles
// (0..15) are the unsigned operand and the offset of 8 is removed exactly in int32 by seeding the
// accumulator with -8 * sum(x); for Q8_0 the sign of the weight is moved onto the activation so
// that |w| can be the unsigned operand.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/qmatmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"

#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "quant/fp16.h"
#include "quant/packed.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Activations -> int8 with one fp16-rounded scale per 32 values, round half to even (as
// llama.cpp's SIMD quantiser), into quant::ActLayout rows.
void QuantizeActs(const float* x, uint8_t* out, int64_t k, int64_t r0, int64_t r1) {
    const quant::ActLayout a = quant::act_layout(k);
    const hn::ScalableTag<float> df;
    const hn::Rebind<int32_t, decltype(df)> di;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    HWY_ALIGN int32_t q[quant::kQK];
    for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * k;
        int8_t* qs = reinterpret_cast<int8_t*>(out + r * a.row_bytes);
        float* d = reinterpret_cast<float*>(out + r * a.row_bytes + a.qs_bytes);
        for (int64_t b = 0; b < a.n_blocks; ++b) {
            if (b * quant::kQK >= k) {  // padding block
                std::memset(qs + b * quant::kQK, 0, quant::kQK);
                d[b] = 0.0f;
                continue;
            }
            const float* xb = xr + b * quant::kQK;
            auto vmax = hn::Zero(df);
            for (int64_t j = 0; j < quant::kQK; j += N) {
                vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
            }
            const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            d[b] = quant::fp16_to_fp32(quant::fp32_to_fp16(amax / 127.0f));
            for (int64_t j = 0; j < quant::kQK; j += N) {
                hn::Store(hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), hn::Set(df, id))), di,
                          q + j);
            }
            for (int j = 0; j < quant::kQK; ++j)
                qs[b * quant::kQK + j] = static_cast<int8_t>(q[j]);
        }
    }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// ---- AVX-512: one 512-bit vector = a pair of blocks; 16 int32 lanes, 8 per block ----
#if HWY_TARGET == HWY_AVX3_DL
// Highway 1.0's AVX3_DL target string names the VEX AVX-VNNI but not AVX512-VNNI, which the
// CPUs it selects (Ice Lake and later) have; enable it for the kernels below.
#pragma GCC push_options
#pragma GCC target("avx512vnni")
#endif

HWY_INLINE __m512i DotU8S8(__m512i acc, __m512i u, __m512i s) {
#if HWY_TARGET == HWY_AVX3_DL
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    const __m512i p16 = _mm512_maddubs_epi16(u, s);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p16, _mm512_set1_epi16(1)));
#endif
}

// Broadcasts two floats into the low and high 8 lanes.
HWY_INLINE __m512 Pair(float lo, float hi) {
    return _mm512_insertf32x8(_mm512_set1_ps(lo), _mm256_set1_ps(hi), 1);
}

template <int MR, bool Q4>
HWY_INLINE void TileQ(const uint8_t* HWY_RESTRICT xq, size_t x_row_bytes, size_t x_qs_bytes,
                      const uint8_t* HWY_RESTRICT group, const quant::PackedLayout& l,
                      float* HWY_RESTRICT y, int64_t ldy, int nr) {
    __m512 acc[MR][4];
    for (int m = 0; m < MR; ++m) {
        for (int n = 0; n < 4; ++n)
            acc[m][n] = _mm512_setzero_ps();
    }
    const __m512i nib = _mm512_set1_epi8(0x0f);
    const __m512i eight = _mm512_set1_epi8(8);
    for (int64_t p = 0; p < l.n_pairs; ++p) {
        const uint8_t* sb = group + p * l.pair_bytes;
        // Scales: 4 rows x 2 blocks of fp16 -> per row a vector [d_b0 x8, d_b1 x8].
        const __m256 s8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb)));
        const __m512 s16 = _mm512_castps256_ps512(s8);
        __m512 sw[4];
        __m512i w[4];
        __mmask64 neg[4];
        for (int n = 0; n < 4; ++n) {
            const __m512i idx = _mm512_set_epi32(2 * n + 1, 2 * n + 1, 2 * n + 1, 2 * n + 1,
                                                 2 * n + 1, 2 * n + 1, 2 * n + 1, 2 * n + 1, 2 * n,
                                                 2 * n, 2 * n, 2 * n, 2 * n, 2 * n, 2 * n, 2 * n);
            sw[n] = _mm512_permutexvar_ps(idx, s16);
            if constexpr (Q4) {
                const __m256i raw =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 16 + n * 32));
                const __m512i both =
                    _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1);
                w[n] = _mm512_and_si512(both, nib);
            } else {
                const __m512i raw =
                    _mm512_loadu_si512(reinterpret_cast<const void*>(sb + 16 + n * 64));
                neg[n] = _mm512_movepi8_mask(raw);
                w[n] = _mm512_abs_epi8(raw);
            }
        }
        for (int m = 0; m < MR; ++m) {
            const uint8_t* xr = xq + m * x_row_bytes;
            const __m512i xv = _mm512_loadu_si512(reinterpret_cast<const void*>(xr + p * 64));
            const float* dx = reinterpret_cast<const float*>(xr + x_qs_bytes) + 2 * p;
            const __m512 sx = Pair(dx[0], dx[1]);
            // Q4: sum (nib - 8) x = sum nib x - 8 sum x, the second term seeded exactly.
            __m512i seed = _mm512_setzero_si512();
            if constexpr (Q4) seed = _mm512_sub_epi32(seed, DotU8S8(seed, eight, xv));
            for (int n = 0; n < nr; ++n) {
                __m512i isum;
                if constexpr (Q4) {
                    isum = DotU8S8(seed, w[n], xv);
                } else {
                    const __m512i sx8 =
                        _mm512_mask_sub_epi8(xv, neg[n], _mm512_setzero_si512(), xv);
                    isum = DotU8S8(_mm512_setzero_si512(), w[n], sx8);
                }
                acc[m][n] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sw[n], sx), acc[m][n]);
            }
        }
    }
    for (int m = 0; m < MR; ++m) {
        for (int n = 0; n < nr; ++n)
            y[m * ldy + n] = _mm512_reduce_add_ps(acc[m][n]);
    }
}
constexpr int kMR = 4;

#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// ---- AVX2: one 256-bit vector = one block; 8 int32 lanes ----

HWY_INLINE __m256i DotU8S8(__m256i acc, __m256i u, __m256i s) {
    const __m256i p16 = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

HWY_INLINE float Sum8(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

template <int MR, bool Q4>
HWY_INLINE void TileQ(const uint8_t* HWY_RESTRICT xq, size_t x_row_bytes, size_t x_qs_bytes,
                      const uint8_t* HWY_RESTRICT group, const quant::PackedLayout& l,
                      float* HWY_RESTRICT y, int64_t ldy, int nr) {
    __m256 acc[MR][4];
    for (int m = 0; m < MR; ++m) {
        for (int n = 0; n < 4; ++n)
            acc[m][n] = _mm256_setzero_ps();
    }
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const __m256i eight = _mm256_set1_epi8(8);
    for (int64_t p = 0; p < l.n_pairs; ++p) {
        const uint8_t* sb = group + p * l.pair_bytes;
        HWY_ALIGN float sw[8];
        _mm256_store_ps(sw, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb))));
        for (int h = 0; h < 2; ++h) {
            __m256i w[4], sgn[4];
            for (int n = 0; n < 4; ++n) {
                if constexpr (Q4) {
                    const __m256i raw =
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 16 + n * 32));
                    w[n] = _mm256_and_si256(h ? _mm256_srli_epi16(raw, 4) : raw, nib);
                } else {
                    sgn[n] = _mm256_loadu_si256(
                        reinterpret_cast<const __m256i*>(sb + 16 + n * 64 + h * 32));
                    w[n] = _mm256_sign_epi8(sgn[n], sgn[n]);  // |w|
                }
            }
            for (int m = 0; m < MR; ++m) {
                const uint8_t* xr = xq + m * x_row_bytes;
                const __m256i xv =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + p * 64 + h * 32));
                const float dx = reinterpret_cast<const float*>(xr + x_qs_bytes)[2 * p + h];
                __m256i seed = _mm256_setzero_si256();
                if constexpr (Q4) seed = _mm256_sub_epi32(seed, DotU8S8(seed, eight, xv));
                for (int n = 0; n < nr; ++n) {
                    const __m256i isum =
                        Q4 ? DotU8S8(seed, w[n], xv)
                           : DotU8S8(_mm256_setzero_si256(), w[n], _mm256_sign_epi8(xv, sgn[n]));
                    acc[m][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                                                _mm256_set1_ps(sw[2 * n + h] * dx), acc[m][n]);
                }
            }
        }
    }
    for (int m = 0; m < MR; ++m) {
        for (int n = 0; n < nr; ++n)
            y[m * ldy + n] = Sum8(acc[m][n]);
    }
}
constexpr int kMR = 2;

#else
// ---- Portable: plain loops over the packed layout ----

template <int MR, bool Q4>
HWY_INLINE void TileQ(const uint8_t* HWY_RESTRICT xq, size_t x_row_bytes, size_t x_qs_bytes,
                      const uint8_t* HWY_RESTRICT group, const quant::PackedLayout& l,
                      float* HWY_RESTRICT y, int64_t ldy, int nr) {
    for (int m = 0; m < MR; ++m) {
        const uint8_t* xr = xq + m * x_row_bytes;
        const auto* xs = reinterpret_cast<const int8_t*>(xr);
        const auto* dx = reinterpret_cast<const float*>(xr + x_qs_bytes);
        for (int n = 0; n < nr; ++n) {
            float acc = 0.0f;
            for (int64_t p = 0; p < l.n_pairs; ++p) {
                const uint8_t* sb = group + p * l.pair_bytes;
                const auto* scales = reinterpret_cast<const uint16_t*>(sb);
                for (int h = 0; h < 2; ++h) {
                    int32_t isum = 0;
                    for (int i = 0; i < 32; ++i) {
                        int w;
                        if constexpr (Q4) {
                            const uint8_t byte = sb[16 + n * 32 + i];
                            w = (h ? byte >> 4 : byte & 0x0f) - 8;
                        } else {
                            w = static_cast<int8_t>(sb[16 + n * 64 + h * 32 + i]);
                        }
                        isum += w * xs[p * 64 + h * 32 + i];
                    }
                    acc += static_cast<float>(isum) *
                           (quant::fp16_to_fp32(scales[2 * n + h]) * dx[2 * p + h]);
                }
            }
            y[m * ldy + n] = acc;
        }
    }
}
constexpr int kMR = 1;
#endif

#if HWY_TARGET == HWY_AVX3_DL
#define LLADA_POP_VNNI 1
#endif

template <bool Q4>
void MatmulPackedT(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                   int64_t n0, int64_t n1) {
    const quant::PackedLayout l = quant::packed_layout(w.type, w.n_rows, w.n_cols);
    const quant::ActLayout a = quant::act_layout(w.n_cols);
    for (int64_t n = n0; n < n1; n += quant::kPackRows) {
        const int nr = static_cast<int>(std::min<int64_t>(quant::kPackRows, n1 - n));
        const uint8_t* group = w.packed + (n / quant::kPackRows) * l.group_bytes;
        int64_t m = 0;
        for (; m + kMR <= m_rows; m += kMR) {
            TileQ<kMR, Q4>(xq + m * a.row_bytes, a.row_bytes, a.qs_bytes, group, l, y + m * ldy + n,
                           ldy, nr);
        }
        for (; m < m_rows; ++m) {
            TileQ<1, Q4>(xq + m * a.row_bytes, a.row_bytes, a.qs_bytes, group, l, y + m * ldy + n,
                         ldy, nr);
        }
    }
}

void MatmulPacked(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1) {
    if (w.type == format::TensorType::Q4_0) {
        MatmulPackedT<true>(xq, m_rows, w, y, ldy, n0, n1);
    } else {
        MatmulPackedT<false>(xq, m_rows, w, y, ldy, n0, n1);
    }
}

#if defined(LLADA_POP_VNNI)
#pragma GCC pop_options
#undef LLADA_POP_VNNI
#endif
}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llada::kernels {

HWY_EXPORT(QuantizeActs);
HWY_EXPORT(MatmulPacked);

void quantize_acts(const float* x, uint8_t* out, int64_t k, int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(QuantizeActs)(x, out, k, r0, r1);
}

void matmul_q8(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
               int64_t n0, int64_t n1) {
    HWY_DYNAMIC_DISPATCH(MatmulPacked)(xq, m_rows, w, y, ldy, n0, n1);
}

}  // namespace llada::kernels
#endif
