// Quantised matmul: Q8 activations x packed Q4_0 / Q8_0 weights (quant/packed.h), and the
// activation quantiser that feeds it (Highway for dispatch; the int8 dot products use each x86
// target's instructions directly, since Highway 1.0 has no u8 x s8 dot product).
//
// The packed layout interleaves 16 weight rows 4 values at a time, so one vector holds 4
// values of 16 rows and one dot-product instruction against 4 broadcast activation values
// advances all 16 output columns: each int32 lane is one output's partial dot product, exact
// per 32-value block. Per block the lane sums are scaled by d_w (a vector over the 16 rows) and
// d_x (one scalar per activation row) in float, as llama.cpp does. For Q4_0 the nibbles (0..15)
// are the unsigned operand and the offset of 8 is removed exactly by seeding each block's int32
// sums with -8 * sum(x). Q8_0 weights are stored with their sign bit flipped (w + 128): on VNNI
// that is the unsigned operand as loaded, the offset removed with -128 * sum(x); AVX2 flips
// the bit back and moves the weights' signs onto the activations so that |w| can be the
// unsigned operand. The portable targets (NEON, SVE, x86 below AVX2) widen to int16 and
// multiply-accumulate pairs (below); only the no-vector target unpacks blocks.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/qmatmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/tile_simd-inl.h"

#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "quant/fp16.h"
#include "quant/packed.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif
#if HWY_ARCH_ARM_A64
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The sums and seeds of one 32-value activation record (quant/packed.h) whose values and scale
// are written: the Q4_0/Q8_0 seeds, the generic kernel's negated half sums and minimum
// multipliers (`min32` is the 32-value one, which the two quantisers define differently).
HWY_INLINE void FinishRecord(uint8_t* rec, float d, float min32) {
    const int8_t* q = reinterpret_cast<const int8_t*>(rec);
    int32_t lo = 0, hi = 0;
    for (int j = 0; j < quant::kQK / 2; ++j) {
        lo += q[j];
        hi += q[j + quant::kQK / 2];
    }
    const int32_t sum = lo + hi;
    const int32_t ints[4] = {-8 * sum, -128 * sum, -lo, -hi};
    const float floats[4] = {d, -(d * static_cast<float>(lo)), -(d * static_cast<float>(hi)),
                             -min32};
    std::memcpy(rec + quant::kActScaleAt, &floats[0], 4);
    std::memcpy(rec + quant::kActSeedQ4At, ints, sizeof ints);
    std::memcpy(rec + quant::kActNegMinAt, &floats[1], 12);
}

// Activations -> int8 with one fp16-rounded scale per 32 values, round half to even (as
// llama.cpp's SIMD quantiser), into quant::ActLayout records. The 32-value minimum multiplier
// is llama.cpp's Q8_1 s: fp16(amax/127 * sum), with the unrounded amax/127.
void QuantizeActs(const float* x, uint8_t* out, int64_t k, int64_t r0, int64_t r1) {
    const quant::ActLayout a = quant::act_layout(k);
    const hn::CappedTag<float, quant::kQK> df;  // a block's 32 values: at most 32 lanes
    const hn::Rebind<int32_t, decltype(df)> di;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    HWY_ALIGN int32_t q[quant::kQK];
    for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * k;
        uint8_t* row = out + r * a.row_bytes;
        for (int64_t b = 0; b < a.n_blocks; ++b) {
            const float* xb = xr + b * quant::kQK;
            uint8_t* rec = row + b * quant::kActRecordBytes;
            auto vmax = hn::Zero(df);
            for (int64_t j = 0; j < quant::kQK; j += N) {
                vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
            }
            const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            const float d32 = amax / 127.0f;
            const float d = quant::fp16_to_fp32(quant::fp32_to_fp16(d32));
            for (int64_t j = 0; j < quant::kQK; j += N) {
                hn::Store(hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), hn::Set(df, id))), di,
                          q + j);
            }
            int32_t sum = 0;
            for (int j = 0; j < quant::kQK; ++j) {
                rec[j] = static_cast<uint8_t>(static_cast<int8_t>(q[j]));
                sum += q[j];
            }
            const float s = quant::fp16_to_fp32(quant::fp32_to_fp16(d32 * static_cast<float>(sum)));
            FinishRecord(rec, d, s);
        }
    }
}

// Activations -> llama.cpp's Q8_K: one float scale per 256 values, the value of largest
// magnitude (the first one, on ties) mapped to -127, round half to even; written as 8 records
// that share the scale (quant/packed.h).
void QuantizeActsK(const float* x, uint8_t* out, int64_t k, int64_t r0, int64_t r1) {
    const quant::ActLayout a = quant::act_layout(k);
    const hn::CappedTag<float, quant::kQK> df;
    const hn::Rebind<int32_t, decltype(df)> di;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    HWY_ALIGN int32_t q[quant::kQKK];
    for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * k;
        uint8_t* row = out + r * a.row_bytes;
        for (int64_t sb = 0; sb < k / quant::kQKK; ++sb) {
            const float* xs = xr + sb * quant::kQKK;
            auto vmax = hn::Zero(df);
            for (int64_t j = 0; j < quant::kQKK; j += N)
                vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xs + j)));
            const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
            float max = 0.0f;
            for (int j = 0; j < quant::kQKK; ++j) {
                if (std::fabs(xs[j]) == amax) {
                    max = xs[j];
                    break;
                }
            }
            float d = 0.0f;
            if (amax != 0.0f) {
                const float iscale = -127.0f / max;
                d = 1.0f / iscale;
                for (int64_t j = 0; j < quant::kQKK; j += N) {
                    const auto v =
                        hn::NearestInt(hn::Mul(hn::LoadU(df, xs + j), hn::Set(df, iscale)));
                    hn::Store(hn::Min(v, hn::Set(di, 127)), di, q + j);
                }
            } else {
                std::memset(q, 0, sizeof q);
            }
            for (int b = 0; b < quant::kQKK / quant::kQK; ++b) {
                uint8_t* rec = row + (sb * 8 + b) * quant::kActRecordBytes;
                int32_t sum = 0;
                for (int j = 0; j < quant::kQK; ++j) {
                    rec[j] = static_cast<uint8_t>(static_cast<int8_t>(q[b * quant::kQK + j]));
                    sum += q[b * quant::kQK + j];
                }
                FinishRecord(rec, d, d * static_cast<float>(sum));
            }
        }
    }
}

// Rows of the activations a tile covers: row m's block b is one quant::ActLayout record.
struct ActRows {
    const uint8_t* base;
    size_t row_bytes;
    const uint8_t* rec(int m, int64_t b) const {
        return base + m * row_bytes + b * quant::kActRecordBytes;
    }
    const int8_t* qs(int m, int64_t b) const { return reinterpret_cast<const int8_t*>(rec(m, b)); }
    float d(int m, int64_t b) const {
        float v;
        std::memcpy(&v, rec(m, b) + quant::kActScaleAt, sizeof v);
        return v;
    }
    // The value a block's int32 sums start from: -8 * sum(x) for Q4_0, -128 * sum(x) for Q8_0.
    template <bool Q4>
    int32_t seed(int m, int64_t b) const {
        int32_t v;
        std::memcpy(&v, rec(m, b) + (Q4 ? quant::kActSeedQ4At : quant::kActSeedQ8At), sizeof v);
        return v;
    }
};

HWY_INLINE int32_t Load4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

#if !(HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL)
#define LLADA_VNNI_FN
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// ---- AVX-512: 16 int32 lanes = the group's 16 output columns ----
#if HWY_TARGET == HWY_AVX3_DL
// Highway 1.0's AVX3_DL target string names the VEX AVX-VNNI but not AVX512-VNNI, which the
// CPUs it selects (Ice Lake and later) have; enable it for the kernels below.
// GCC: a pragma over the region. Clang ignores GCC's pragma and lets Highway's own target
// attribute win over a pushed one, so there each function of the region names the whole target
// (LLADA_VNNI_FN: Highway's string plus avx512vnni).
#if defined(__clang__)
#define LLADA_VNNI_FN __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#else
#pragma GCC push_options
#pragma GCC target("avx512vnni")
#define LLADA_VNNI_FN
#endif
#define LLADA_POP_VNNI 1
#endif

LLADA_VNNI_FN HWY_INLINE __m512i DotU8S8(__m512i acc, __m512i u, __m512i s) {
#if HWY_TARGET == HWY_AVX3_DL
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    const __m512i p16 = _mm512_maddubs_epi16(u, s);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p16, _mm512_set1_epi16(1)));
#endif
}

template <int MR, bool Q4>
LLADA_VNNI_FN HWY_INLINE void TileQ(const ActRows& x, const uint8_t* HWY_RESTRICT group,
                                    const quant::PackedLayout& l, float* HWY_RESTRICT y,
                                    int64_t ldy, int nr) {
    __m512 acc[MR];
    for (int m = 0; m < MR; ++m)
        acc[m] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int64_t b = 0; b < l.n_blocks; ++b) {
        const uint8_t* sb = group + b * l.block_bytes;
        const __m512 sw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb)));
        const uint8_t* q = sb + 2 * quant::kPackRows;
        __m512i w[8];
        __mmask64 neg[8];
        if constexpr (Q4) {
            for (int j = 0; j < 4; ++j) {
                const __m512i raw = _mm512_loadu_si512(q + 64 * j);
                w[2 * j] = _mm512_and_si512(raw, low4);
                w[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
            }
        } else {
            const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
            for (int s = 0; s < 8; ++s) {
                const __m512i raw = _mm512_xor_si512(_mm512_loadu_si512(q + 64 * s), flip);
                neg[s] = _mm512_movepi8_mask(raw);
                w[s] = _mm512_abs_epi8(raw);
            }
        }
        for (int m = 0; m < MR; ++m) {
            const int8_t* xb = x.qs(m, b);
            __m512i isum = Q4 ? _mm512_set1_epi32(x.seed<true>(m, b)) : _mm512_setzero_si512();
            for (int s = 0; s < 8; ++s) {
                // Q4 step s holds values 8(s/2) + 4(s%2) + i: those activations, broadcast.
                const int xoff = Q4 ? 8 * (s / 2) + 4 * (s % 2) : 4 * s;
                __m512i xv = _mm512_set1_epi32(Load4(xb + xoff));
                if constexpr (!Q4)
                    xv = _mm512_mask_sub_epi8(xv, neg[s], _mm512_setzero_si512(), xv);
                isum = DotU8S8(isum, w[s], xv);
            }
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                     _mm512_mul_ps(sw, _mm512_set1_ps(x.d(m, b))), acc[m]);
        }
    }
    const __mmask16 keep = nr >= 16 ? 0xffff : static_cast<__mmask16>((1u << nr) - 1);
    for (int m = 0; m < MR; ++m)
        _mm512_mask_storeu_ps(y + m * ldy, keep, acc[m]);
}
#if HWY_TARGET == HWY_AVX3_DL
// VNNI: two groups (32 output columns) per tile, so each broadcast of 4 activation bytes feeds
// two dot products. Q8_0 weights are stored unsigned (w + 128, quant/packed.h) and the offset is
// removed exactly by seeding the block's sums with -128 * sum(x), as Q4_0's -8 * sum(x):
// vpdpbusd has no intermediate saturation, so this is exact (the maddubs path of the other
// targets would saturate, so they flip the sign bit back).
// Six activation rows per tile: 12 independent chains of 8 dot products per block. With two
// vpdpbusd issued per cycle and a latency of ~5, a 4-row tile's 8 chains left it waiting
// (1B forward, one thread: 1.05-1.12x faster with 6 rows and the seeds below loaded, not
// computed). The Q4_0 tile spills one float accumulator; the row loop keeps tiles >= 4 high.
constexpr int kMR2 = 6;

template <int MR, bool Q4>
LLADA_VNNI_FN HWY_INLINE void TileQ2(const ActRows& x, const uint8_t* HWY_RESTRICT g0,
                                     const uint8_t* HWY_RESTRICT g1, const quant::PackedLayout& l,
                                     const uint8_t* next, float* HWY_RESTRICT y, int64_t ldy) {
    __m512 acc[MR][2];
    for (int m = 0; m < MR; ++m)
        acc[m][0] = acc[m][1] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int64_t b = 0; b < l.n_blocks; ++b) {
        const uint8_t* s0 = g0 + b * l.block_bytes;
        const uint8_t* s1 = g1 + b * l.block_bytes;
        if (next != nullptr) {
            // The next column pair's block into L2 (its two groups follow each other), so the
            // first tile there does not start from memory.
            for (size_t c = 0; c < l.block_bytes; c += 64) {
                __builtin_prefetch(next + b * l.block_bytes + c, 0, 2);
                __builtin_prefetch(next + l.group_bytes + b * l.block_bytes + c, 0, 2);
            }
        }
        const __m512 sw0 =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s0)));
        const __m512 sw1 =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s1)));
        const uint8_t* q0 = s0 + 2 * quant::kPackRows;
        const uint8_t* q1 = s1 + 2 * quant::kPackRows;
        __m512i isum[MR][2];
        for (int m = 0; m < MR; ++m) {
            isum[m][0] = isum[m][1] = _mm512_set1_epi32(x.seed<Q4>(m, b));
        }
        if constexpr (Q4) {
            for (int j = 0; j < 4; ++j) {
                const __m512i r0 = _mm512_loadu_si512(q0 + 64 * j);
                const __m512i r1 = _mm512_loadu_si512(q1 + 64 * j);
                const __m512i lo0 = _mm512_and_si512(r0, low4);
                const __m512i lo1 = _mm512_and_si512(r1, low4);
                const __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(r0, 4), low4);
                const __m512i hi1 = _mm512_and_si512(_mm512_srli_epi16(r1, 4), low4);
                for (int m = 0; m < MR; ++m) {
                    const int8_t* xb = x.qs(m, b) + 8 * j;
                    const __m512i xa = _mm512_set1_epi32(Load4(xb));
                    const __m512i xc = _mm512_set1_epi32(Load4(xb + 4));
                    isum[m][0] = _mm512_dpbusd_epi32(isum[m][0], lo0, xa);
                    isum[m][1] = _mm512_dpbusd_epi32(isum[m][1], lo1, xa);
                    isum[m][0] = _mm512_dpbusd_epi32(isum[m][0], hi0, xc);
                    isum[m][1] = _mm512_dpbusd_epi32(isum[m][1], hi1, xc);
                }
            }
        } else {
            for (int st = 0; st < 8; ++st) {
                const __m512i w0 = _mm512_loadu_si512(q0 + 64 * st);
                const __m512i w1 = _mm512_loadu_si512(q1 + 64 * st);
                for (int m = 0; m < MR; ++m) {
                    const __m512i xv = _mm512_set1_epi32(Load4(x.qs(m, b) + 4 * st));
                    isum[m][0] = _mm512_dpbusd_epi32(isum[m][0], w0, xv);
                    isum[m][1] = _mm512_dpbusd_epi32(isum[m][1], w1, xv);
                }
            }
        }
        for (int m = 0; m < MR; ++m) {
            const __m512 dx = _mm512_set1_ps(x.d(m, b));
            acc[m][0] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[m][0]), _mm512_mul_ps(sw0, dx), acc[m][0]);
            acc[m][1] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[m][1]), _mm512_mul_ps(sw1, dx), acc[m][1]);
        }
    }
    for (int m = 0; m < MR; ++m) {
        _mm512_storeu_ps(y + m * ldy, acc[m][0]);
        _mm512_storeu_ps(y + m * ldy + quant::kPackRows, acc[m][1]);
    }
}
// One tile of h rows (1 <= h <= MR) through the instantiation of that height.
template <int MR, bool Q4>
LLADA_VNNI_FN HWY_INLINE void TileQ2N(int h, const ActRows& x, const uint8_t* HWY_RESTRICT g0,
                                      const uint8_t* HWY_RESTRICT g1, const quant::PackedLayout& l,
                                      const uint8_t* next, float* HWY_RESTRICT y, int64_t ldy) {
    if constexpr (MR > 1) {
        if (h < MR) return TileQ2N<MR - 1, Q4>(h, x, g0, g1, l, next, y, ldy);
    }
    TileQ2<MR, Q4>(x, g0, g1, l, next, y, ldy);
}
#define LLADA_HAVE_TILE_Q2 1
#endif
constexpr int kMR = 4;
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// ---- AVX2: 8 int32 lanes; a group is processed as two halves of 8 rows ----

HWY_INLINE __m256i DotU8S8(__m256i acc, __m256i u, __m256i s) {
    const __m256i p16 = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

template <int MR, bool Q4>
HWY_INLINE void TileQ(const ActRows& x, const uint8_t* HWY_RESTRICT group,
                      const quant::PackedLayout& l, float* HWY_RESTRICT y, int64_t ldy, int nr) {
    for (int half = 0; half < 2 && 8 * half < nr; ++half) {
        __m256 acc[MR];
        for (int m = 0; m < MR; ++m)
            acc[m] = _mm256_setzero_ps();
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        for (int64_t b = 0; b < l.n_blocks; ++b) {
            const uint8_t* sb = group + b * l.block_bytes;
            const __m256 sw =
                _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 16 * half)));
            const uint8_t* q = sb + 2 * quant::kPackRows + 32 * half;
            __m256i w[8];
            if constexpr (Q4) {
                for (int j = 0; j < 4; ++j) {
                    const __m256i raw =
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * j));
                    w[2 * j] = _mm256_and_si256(raw, low4);
                    w[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
                }
            } else {
                const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
                for (int s = 0; s < 8; ++s) {
                    w[s] = _mm256_xor_si256(
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * s)), flip);
                }
            }
            for (int m = 0; m < MR; ++m) {
                const int8_t* xb = x.qs(m, b);
                __m256i isum = Q4 ? _mm256_set1_epi32(x.seed<true>(m, b)) : _mm256_setzero_si256();
                for (int s = 0; s < 8; ++s) {
                    const int xoff = Q4 ? 8 * (s / 2) + 4 * (s % 2) : 4 * s;
                    const __m256i xv = _mm256_set1_epi32(Load4(xb + xoff));
                    isum = Q4 ? DotU8S8(isum, w[s], xv)
                              : DotU8S8(isum, _mm256_sign_epi8(w[s], w[s]),
                                        _mm256_sign_epi8(xv, w[s]));
                }
                acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                                         _mm256_mul_ps(sw, _mm256_set1_ps(x.d(m, b))), acc[m]);
            }
        }
        const int cols = std::min(8, nr - 8 * half);
        for (int m = 0; m < MR; ++m) {
            if (cols == 8) {
                _mm256_storeu_ps(y + m * ldy + 8 * half, acc[m]);
            } else {
                HWY_ALIGN float t[8];
                _mm256_store_ps(t, acc[m]);
                for (int c = 0; c < cols; ++c)
                    y[m * ldy + 8 * half + c] = t[c];
            }
        }
    }
}
constexpr int kMR = 4;

#elif HWY_TARGET == HWY_SCALAR
// ---- No vectors: the block's weights unpacked, exact int32 dot products ----

template <int MR, bool Q4>
HWY_INLINE void TileQ(const ActRows& x, const uint8_t* HWY_RESTRICT group,
                      const quant::PackedLayout& l, float* HWY_RESTRICT y, int64_t ldy, int nr) {
    int8_t wv[quant::kQK];
    for (int n = 0; n < nr; ++n) {
        float acc[MR] = {};
        for (int64_t b = 0; b < l.n_blocks; ++b) {
            quant::unpack_block(l, group, b, n, wv);
            const float dw = quant::fp16_to_fp32(
                reinterpret_cast<const uint16_t*>(group + b * l.block_bytes)[n]);
            for (int m = 0; m < MR; ++m) {
                const int8_t* xs = x.qs(m, b);
                int32_t isum = 0;
                for (int i = 0; i < quant::kQK; ++i)
                    isum += wv[i] * xs[i];
                acc[m] += static_cast<float>(isum) * (dw * x.d(m, b));
            }
        }
        for (int m = 0; m < MR; ++m)
            y[m * ldy + n] = acc[m];
    }
}
constexpr int kMR = 1;

#else
// ---- Portable (NEON and SVE on Arm, x86 below AVX2): 128-bit Highway over the packed layout --
//
// The packed layout's 64-byte steps hold 4 values of each of the group's 16 rows: 16 bytes are
// 4 rows x 4 values. Each 16-byte vector is widened to int16 in two halves (2 rows each) and
// multiplied against the activation's 4 values (repeated) with ReorderWidenMulAccumulate
// (NEON's vmlal), accumulating pairs of products in int32 lanes over a block's steps; one fold
// per block (pair sums, then even + odd lanes) gives 4 rows' exact block sums. The stored
// weights are unsigned (Q4_0 nibbles q + 8, Q8_0 values + 128); the activation record's seed
// (-8 or -128 times the block's sum) removes the offset. 128-bit vectors on every target here:
// SVE's minimum, so the same code serves every SVE vector length.

// The block sums of 4 rows from the two halves' pair-product accumulators, in the row order
// 0, 2, 1, 3 (kFoldOrder): pair sums, each added to its neighbour, odd lanes from the second
// half. (No ConcatEven/ConcatOdd: on SVE_256 they assume full vectors, and these are 128-bit.)
constexpr int kFoldOrder[4] = {0, 2, 1, 3};
template <class V32>
HWY_INLINE V32 FoldRows(V32 s0_lo, V32 s1_lo, V32 s0_hi, V32 s1_hi) {
    const V32 lo = hn::RearrangeToOddPlusEven(s0_lo, s1_lo);  // rows 0, 1: (values 01, 23) each
    const V32 hi = hn::RearrangeToOddPlusEven(s0_hi, s1_hi);  // rows 2, 3
    const V32 a = hn::Add(lo, hn::Shuffle2301(lo));           // 0, 0, 1, 1
    const V32 c = hn::Add(hi, hn::Shuffle2301(hi));           // 2, 2, 3, 3
    return hn::OddEven(c, a);                                 // 0, 2, 1, 3
}

template <int MR, bool Q4>
HWY_INLINE void TileQ(const ActRows& x, const uint8_t* HWY_RESTRICT group,
                      const quant::PackedLayout& l, float* HWY_RESTRICT y, int64_t ldy, int nr) {
    const hn::FixedTag<uint8_t, 16> du8;
    const hn::FixedTag<int16_t, 8> d16;
    const hn::FixedTag<int32_t, 4> d32;
    const hn::FixedTag<float, 4> df;
    const hn::Half<decltype(du8)> du8h;
    const hn::Rebind<int8_t, decltype(d16)> di8h;
    const hn::RebindToUnsigned<decltype(d16)> du16;
    constexpr int kSteps = quant::kQK / 4;  // a block's 4-value groups
    for (int m = 0; m < MR; ++m) {
        VecArray<decltype(df), 4> acc;
        for (int v = 0; v < 4; ++v)
            Put(acc, v, hn::Zero(df));
        for (int64_t b = 0; b < l.n_blocks; ++b) {
            const uint8_t* blk = group + b * l.block_bytes;
            const uint8_t* q = blk + 2 * quant::kPackRows;
            // The activation's 4-value groups, each twice (once per row of a half), as int16.
            const int8_t* xs = x.qs(m, b);
            HWY_ALIGN int8_t twice[kSteps][8];
            for (int k = 0; k < kSteps; ++k) {
                std::memcpy(twice[k], xs + 4 * k, 4);
                std::memcpy(twice[k] + 4, xs + 4 * k, 4);
            }
            VecArray<decltype(d16), kSteps> xa;
            for (int k = 0; k < kSteps; ++k)
                Put(xa, k, hn::PromoteTo(d16, hn::Load(di8h, twice[k])));
            // The rows' scales in FoldRows' order.
            HWY_ALIGN float dw[quant::kPackRows];
            const uint16_t* scales = reinterpret_cast<const uint16_t*>(blk);
            for (int n = 0; n < quant::kPackRows; ++n)
                dw[n] = quant::fp16_to_fp32(scales[n / 4 * 4 + kFoldOrder[n % 4]]);
            const auto dx = hn::Set(df, x.d(m, b));
            const auto seed = hn::Set(d32, x.seed<Q4>(m, b));
            for (int v = 0; v < 4; ++v) {
                auto s0l = hn::Zero(d32), s1l = hn::Zero(d32);
                auto s0h = hn::Zero(d32), s1h = hn::Zero(d32);
                auto step = [&](hn::Vec<decltype(du8)> w, hn::Vec<decltype(d16)> xv) {
                    const auto wl = hn::BitCast(d16, hn::PromoteTo(du16, hn::LowerHalf(du8h, w)));
                    const auto wh = hn::BitCast(d16, hn::PromoteTo(du16, hn::UpperHalf(du8h, w)));
                    s0l = hn::ReorderWidenMulAccumulate(d32, wl, xv, s0l, s1l);
                    s0h = hn::ReorderWidenMulAccumulate(d32, wh, xv, s0h, s1h);
                };
                if constexpr (Q4) {
                    // Step j: low nibbles are values 8j + i, high nibbles 8j + 4 + i.
                    for (int j = 0; j < 4; ++j) {
                        const auto bytes = hn::LoadU(du8, q + j * 64 + 16 * v);
                        step(hn::And(bytes, hn::Set(du8, 0x0f)), xa[2 * j]);
                        step(hn::ShiftRight<4>(bytes), xa[2 * j + 1]);
                    }
                } else {
                    for (int st = 0; st < kSteps; ++st)
                        step(hn::LoadU(du8, q + st * 64 + 16 * v), xa[st]);
                }
                const auto sums = hn::Add(FoldRows(s0l, s1l, s0h, s1h), seed);
                const auto scale = hn::Mul(hn::Load(df, dw + 4 * v), dx);
                Put(acc, v, hn::MulAdd(hn::ConvertTo(df, sums), scale, acc[v]));
            }
        }
        HWY_ALIGN float out[quant::kPackRows];
        for (int v = 0; v < 4; ++v)
            hn::Store(acc[v], df, out + 4 * v);
        for (int n = 0; n < nr; ++n)
            y[m * ldy + n] = out[n / 4 * 4 + kFoldOrder[n % 4]];
    }
}
constexpr int kMR = 1;

// ---- With a 4-way int8 dot product: SVE's sdot (every SVE core), NEON's (Armv8.2 dotprod) ----
//
// sdot adds the products of 4 int8 pairs into each int32 lane: a 16-byte vector of 4 rows x 4
// values against the activation's 4 values (broadcast to every lane) advances 4 rows' sums by 4
// values in one instruction, in row order, with no widening and no fold. The weights become
// signed first (Q8_0: the sign bit flipped back; Q4_0: nibble - 8), so no seed is needed.
#if HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || HWY_TARGET == HWY_SVE_256 || \
    HWY_TARGET == HWY_SVE2_128
#define LLADA_HAVE_DOT 1
#define LLADA_DOT_FN
template <class V32, class V8>
HWY_INLINE V32 Dot4(V32 acc, V8 w, V8 x) {
    return svdot_s32(acc, w, x);
}
HWY_INLINE bool HaveDot() {
    return true;
}
#elif HWY_TARGET == HWY_NEON
#define LLADA_HAVE_DOT 1
// Highway's NEON functions are "+crypto" on the base architecture; this is a superset of both.
#define LLADA_DOT_FN __attribute__((target("arch=armv8.2-a+dotprod+crypto")))
LLADA_DOT_FN HWY_INLINE hn::Vec128<int32_t> Dot4(hn::Vec128<int32_t> acc, hn::Vec128<int8_t> w,
                                                 hn::Vec128<int8_t> x) {
    return hn::Vec128<int32_t>(vdotq_s32(acc.raw, w.raw, x.raw));
}
HWY_INLINE bool HaveDot() {
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
}
#endif

#if defined(LLADA_HAVE_DOT)
template <bool Q4>
LLADA_DOT_FN HWY_INLINE void TileQDot(const ActRows& x, const uint8_t* HWY_RESTRICT group,
                                      const quant::PackedLayout& l, float* HWY_RESTRICT y, int nr) {
    const hn::FixedTag<uint8_t, 16> du8;
    const hn::FixedTag<int8_t, 16> d8;
    const hn::FixedTag<int32_t, 4> d32;
    const hn::FixedTag<float, 4> df;
    constexpr int kSteps = quant::kQK / 4;
    VecArray<decltype(df), 4> acc;
    for (int v = 0; v < 4; ++v)
        Put(acc, v, hn::Zero(df));
    for (int64_t b = 0; b < l.n_blocks; ++b) {
        const uint8_t* blk = group + b * l.block_bytes;
        const uint8_t* q = blk + 2 * quant::kPackRows;
        const int8_t* xs = x.qs(0, b);
        VecArray<decltype(d8), kSteps> xa;  // value group k of the activation, in every lane
        for (int k = 0; k < kSteps; ++k)
            Put(xa, k, hn::BitCast(d8, hn::Set(d32, Load4(xs + 4 * k))));
        HWY_ALIGN float dw[quant::kPackRows];
        const uint16_t* scales = reinterpret_cast<const uint16_t*>(blk);
        for (int n = 0; n < quant::kPackRows; ++n)
            dw[n] = quant::fp16_to_fp32(scales[n]);
        const auto dx = hn::Set(df, x.d(0, b));
        for (int v = 0; v < 4; ++v) {
            auto sums = hn::Zero(d32);
            if constexpr (Q4) {
                const auto eight = hn::Set(d8, 8);
                for (int j = 0; j < 4; ++j) {
                    const auto bytes = hn::LoadU(du8, q + j * 64 + 16 * v);
                    const auto lo = hn::BitCast(d8, hn::And(bytes, hn::Set(du8, 0x0f)));
                    const auto hi = hn::BitCast(d8, hn::ShiftRight<4>(bytes));
                    sums = Dot4(sums, hn::Sub(lo, eight), xa[2 * j]);
                    sums = Dot4(sums, hn::Sub(hi, eight), xa[2 * j + 1]);
                }
            } else {
                const auto flip = hn::Set(du8, 0x80);
                for (int st = 0; st < kSteps; ++st) {
                    const auto w =
                        hn::BitCast(d8, hn::Xor(hn::LoadU(du8, q + st * 64 + 16 * v), flip));
                    sums = Dot4(sums, w, xa[st]);
                }
            }
            const auto scale = hn::Mul(hn::Load(df, dw + 4 * v), dx);
            Put(acc, v, hn::MulAdd(hn::ConvertTo(df, sums), scale, acc[v]));
        }
    }
    HWY_ALIGN float out[quant::kPackRows];
    for (int v = 0; v < 4; ++v)
        hn::Store(acc[v], df, out + 4 * v);
    for (int n = 0; n < nr; ++n)
        y[n] = out[n];
}

template <bool Q4>
LLADA_DOT_FN HWY_NOINLINE void MatmulPackedDot(const uint8_t* xq, int64_t m_rows,
                                               const WeightView& w, float* y, int64_t ldy,
                                               int64_t n0, int64_t n1) {
    const quant::PackedLayout l = quant::packed_layout(w.type, w.n_rows, w.n_cols);
    const quant::ActLayout a = quant::act_layout(w.n_cols);
    for (int64_t n = n0; n < n1; n += quant::kPackRows) {
        const int nr = static_cast<int>(std::min<int64_t>(quant::kPackRows, n1 - n));
        const uint8_t* group = w.packed + (n / quant::kPackRows) * l.group_bytes;
        for (int64_t m = 0; m < m_rows; ++m)
            TileQDot<Q4>(ActRows{xq + m * a.row_bytes, a.row_bytes}, group, l, y + m * ldy + n, nr);
    }
}
#endif  // LLADA_HAVE_DOT
#endif

template <bool Q4>
LLADA_VNNI_FN void MatmulPackedT(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y,
                                 int64_t ldy, int64_t n0, int64_t n1) {
    const quant::PackedLayout l = quant::packed_layout(w.type, w.n_rows, w.n_cols);
    const quant::ActLayout a = quant::act_layout(w.n_cols);
    const auto rows_at = [&](int64_t m) { return ActRows{xq + m * a.row_bytes, a.row_bytes}; };
#if defined(LLADA_HAVE_DOT)
    if (HaveDot()) return MatmulPackedDot<Q4>(xq, m_rows, w, y, ldy, n0, n1);
#endif
    int64_t n = n0;
#if defined(LLADA_HAVE_TILE_Q2)
    for (; n + 2 * quant::kPackRows <= n1; n += 2 * quant::kPackRows) {
        const uint8_t* g0 = w.packed + (n / quant::kPackRows) * l.group_bytes;
        const uint8_t* g1 = g0 + l.group_bytes;
        // The next pair's weights, which this pair's first tile prefetches (if the range has one).
        const uint8_t* next = n + 4 * quant::kPackRows <= n1 ? g0 + 2 * l.group_bytes : nullptr;
        // Tiles of kMR2 rows; the last 7-11 rows as two tiles of 4-6, since a short tile has too
        // few independent dot-product chains to hide vpdpbusd's latency.
        for (int64_t m = 0; m < m_rows;) {
            const int64_t left = m_rows - m;
            const int h = static_cast<int>(left >= 2 * kMR2 ? kMR2
                                           : left > kMR2    ? (left + 1) / 2
                                                            : left);
            TileQ2N<kMR2, Q4>(h, rows_at(m), g0, g1, l, m == 0 ? next : nullptr, y + m * ldy + n,
                              ldy);
            m += h;
        }
    }
#endif
    for (; n < n1; n += quant::kPackRows) {
        const int nr = static_cast<int>(std::min<int64_t>(quant::kPackRows, n1 - n));
        const uint8_t* group = w.packed + (n / quant::kPackRows) * l.group_bytes;
        int64_t m = 0;
        for (; m + kMR <= m_rows; m += kMR)
            TileQ<kMR, Q4>(rows_at(m), group, l, y + m * ldy + n, ldy, nr);
        for (; m < m_rows; ++m)
            TileQ<1, Q4>(rows_at(m), group, l, y + m * ldy + n, ldy, nr);
    }
}

LLADA_VNNI_FN void MatmulPacked(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y,
                                int64_t ldy, int64_t n0, int64_t n1) {
    if (w.type == format::TensorType::Q4_0) {
        MatmulPackedT<true>(xq, m_rows, w, y, ldy, n0, n1);
    } else {
        MatmulPackedT<false>(xq, m_rows, w, y, ldy, n0, n1);
    }
}

#if defined(LLADA_POP_VNNI) && !defined(__clang__)
#pragma GCC pop_options
#endif
#undef LLADA_POP_VNNI
#undef LLADA_HAVE_TILE_Q2
#undef LLADA_HAVE_DOT
#undef LLADA_DOT_FN
#undef LLADA_VNNI_FN

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llada::kernels {

HWY_EXPORT(QuantizeActs);
HWY_EXPORT(QuantizeActsK);
HWY_EXPORT(MatmulPacked);

void quantize_acts(const float* x, uint8_t* out, int64_t k, int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(QuantizeActs)(x, out, k, r0, r1);
}

void quantize_acts_k(const float* x, uint8_t* out, int64_t k, int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(QuantizeActsK)(x, out, k, r0, r1);
}

void matmul_q8(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
               int64_t n0, int64_t n1) {
    if (w.type != format::TensorType::Q4_0 && w.type != format::TensorType::Q8_0)
        return matmul_generic(xq, m_rows, w, y, ldy, n0, n1);
    HWY_DYNAMIC_DISPATCH(MatmulPacked)(xq, m_rows, w, y, ldy, n0, n1);
}

}  // namespace llada::kernels
#endif
