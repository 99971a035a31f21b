// The generic block-format matmul: Q8 activation records x weights in quant::generic_pack's
// layout (Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K ... Q6_K, IQ4_XS), with llama.cpp's integer sums.
//
// Every such format is x = d * sc_j * q - dmin * m_j per sub-block j of 16 or 32 values. A
// sub-block's dot product with one activation row is an exact int32 sum of q * x_q; it is scaled
// in float by (d * sc_j) * d_x and, for formats with minimums, the minimum's term adds
// (dmin * m_j) * (-d_x * sum x_q), the multiplier the activation record carries (llama.cpp's
// Q8_K sums, or Q8_1's s for Q4_1 / Q5_1). llama.cpp applies the integer scales inside its
// integer sums and converts once per super-block; the per-sub-block conversion here rounds
// differently by a few float32 ulps of the result, nothing more (the tests hold the kernels to
// llama.cpp's logits and to the scalar twin kernels::ref::matmul_block).
//
// The packed layout interleaves 16 weight rows 4 values at a time (as the Q4_0 / Q8_0 kernels'
// layout in kernels/qmatmul.cpp), so one vector of 16 int32 lanes holds the 16 output columns of
// a group and one u8 x s8 dot-product instruction against 4 broadcast activation values advances
// all of them. The values are stored unsigned (q + zero); the offset is removed exactly by
// seeding each sub-block's sums with -zero * sum(x). The IQ4 formats store the grid index and map
// it through the 16-entry table with one byte shuffle.
//
// Per target: AVX-512 VNNI (two groups per tile, vpdpbusd), AVX-512 and AVX2 (maddubs + madd:
// the stored values are <= 63, so the int16 pair sums cannot saturate; the IQ4 grid, up to 127 in
// magnitude, takes the signed path, its signs moved onto the activations), Arm with a 4-way int8
// dot product (SVE, NEON dotprod: signed values, no seeds), other portable targets (widening
// multiplies), and a scalar target that unpacks each unit.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gmatmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "kernels/tile_simd-inl.h"

#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"
#include "quant/blocks.h"
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

// A format's layout as compile-time constants (quant::generic_pack gives the same at run time).
template <int Unit, int S, bool Nib, bool Lut, bool Min, bool Sub, int Zero>
struct Fmt {
    static constexpr int kUnit = Unit;  // values per unit (legacy block or super-block)
    static constexpr int kS = S;        // values per sub-block
    static constexpr int kNSub = Unit / S;
    static constexpr bool kNib = Nib, kLut = Lut, kMin = Min, kSub = Sub;
    static constexpr int kZero = Zero;
};
using FmtQ4_1 = Fmt<32, 32, true, false, true, false, 0>;
using FmtQ5_0 = Fmt<32, 32, false, false, false, false, 16>;
using FmtQ5_1 = Fmt<32, 32, false, false, true, false, 0>;
using FmtIQ4_NL = Fmt<32, 32, true, true, false, false, 0>;
using FmtQ2_K = Fmt<256, 16, true, false, true, true, 0>;
using FmtQ3_K = Fmt<256, 16, true, false, false, true, 4>;
using FmtQ4_K = Fmt<256, 32, true, false, true, true, 0>;
using FmtQ5_K = Fmt<256, 32, false, false, true, true, 0>;
using FmtQ6_K = Fmt<256, 16, false, false, false, true, 32>;
using FmtIQ4_XS = Fmt<256, 32, true, true, false, true, 0>;

// The activation records of a tile's rows (quant/packed.h): row m's 32-value block b.
struct Acts {
    const uint8_t* base;
    size_t row_bytes;
    const uint8_t* rec(int m, int64_t b) const {
        return base + m * row_bytes + b * quant::kActRecordBytes;
    }
    template <class T>
    T at(int m, int64_t b, size_t off) const {
        T v;
        std::memcpy(&v, rec(m, b) + off, sizeof v);
        return v;
    }
    float d(int m, int64_t b) const { return at<float>(m, b, quant::kActScaleAt); }
    // -sum of the sub-block's values (16 values: half h of the record; 32: the whole record).
    template <int S>
    int32_t neg_sum(int m, int64_t b, int h) const {
        if constexpr (S == 16) return at<int32_t>(m, b, quant::kActNegSumAt + 4 * h);
        return at<int32_t>(m, b, quant::kActNegSumAt) + at<int32_t>(m, b, quant::kActNegSumAt + 4);
    }
    // The minimum's multiplier of the sub-block, negated.
    template <int S>
    float neg_min(int m, int64_t b, int h) const {
        if constexpr (S == 16) return at<float>(m, b, quant::kActNegMinAt + 4 * h);
        return at<float>(m, b, quant::kActNegMin32At);
    }
};

HWY_INLINE int32_t Load4(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Where sub-block j of unit u starts in the activation records: record b, half h (16 values).
template <class F>
HWY_INLINE void SubAt(int64_t u, int j, int64_t* b, int* h) {
    const int64_t v = u * F::kUnit + j * F::kS;
    *b = v / quant::kQK;
    *h = static_cast<int>((v % quant::kQK) / 16);
}

#if !(HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL)
#define LLADA_VNNI_FN
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// ---- x86: one kernel over "16 lanes" of int32 / float, written once for three targets ----
#if HWY_TARGET == HWY_AVX3_DL
// As in kernels/qmatmul.cpp: Highway 1.0's AVX3_DL target string lacks AVX512-VNNI.
#if defined(__clang__)
#define LLADA_VNNI_FN __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#else
#pragma GCC push_options
#pragma GCC target("avx512vnni")
#define LLADA_VNNI_FN
#endif
#define LLADA_POP_VNNI 1
#endif

#if HWY_TARGET <= HWY_AVX3
// 16 lanes are one 512-bit register.
struct V16 {
    using I = __m512i;
    using F = __m512;
    static constexpr bool kVnni = HWY_TARGET == HWY_AVX3_DL;
    static I Load(const uint8_t* p) { return _mm512_loadu_si512(p); }
    static I Lo(I w) { return _mm512_and_si512(w, _mm512_set1_epi8(0x0f)); }
    static I Hi(I w) { return _mm512_and_si512(_mm512_srli_epi16(w, 4), _mm512_set1_epi8(0x0f)); }
    // The IQ4 grid at the nibbles (+128 where the values stay unsigned, i.e. on VNNI).
    static I Lut(I idx) {
        const __m128i t =
            kVnni ? _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, -127, -115, -103, -90, -75, -59,
                                  -39, -15)
                  : _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4Values));
        return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(t), idx);
    }
    static I Bcast(int32_t v) { return _mm512_set1_epi32(v); }
    static LLADA_VNNI_FN I Dot(I acc, I u, I s) {
#if HWY_TARGET == HWY_AVX3_DL
        return _mm512_dpbusd_epi32(acc, u, s);
#else
        const __m512i p16 = _mm512_maddubs_epi16(u, s);
        return _mm512_add_epi32(acc, _mm512_madd_epi16(p16, _mm512_set1_epi16(1)));
#endif
    }
    // Signed weights (the IQ4 grid off VNNI): |w| as the unsigned operand, w's signs on x.
    static I DotSigned(I acc, I w, I x) {
        const __mmask64 neg = _mm512_movepi8_mask(w);
        return Dot(acc, _mm512_abs_epi8(w),
                   _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x));
    }
    static F Zero() {
        return _mm512_setzero_ps();
    }
    static F Set(float v) {
        return _mm512_set1_ps(v);
    }
    static F Mul(F a, F b) {
        return _mm512_mul_ps(a, b);
    }
    static F MulAdd(F a, F b, F c) {
        return _mm512_fmadd_ps(a, b, c);
    }
    static F ToF(I v) {
        return _mm512_cvtepi32_ps(v);
    }
    static F LoadF16(const uint8_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static F LoadI8(const uint8_t* p) {
        return _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    }
    static void Store(float* y, F v, int nr) {
        const __mmask16 keep = nr >= 16 ? 0xffff : static_cast<__mmask16>((1u << nr) - 1);
        _mm512_mask_storeu_ps(y, keep, v);
    }
};
#else
// AVX2: 16 lanes are two 256-bit registers (rows 0-7, 8-15).
struct V16 {
    struct I {
        __m256i a, b;
    };
    struct F {
        __m256 a, b;
    };
    static constexpr bool kVnni = false;
    static I Load(const uint8_t* p) {
        return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32))};
    }
    static __m256i Lo1(__m256i w) { return _mm256_and_si256(w, _mm256_set1_epi8(0x0f)); }
    static I Lo(I w) { return {Lo1(w.a), Lo1(w.b)}; }
    static I Hi(I w) { return {Lo1(_mm256_srli_epi16(w.a, 4)), Lo1(_mm256_srli_epi16(w.b, 4))}; }
    static I Lut(I idx) {
        const __m256i t = _mm256_broadcastsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4Values)));
        return {_mm256_shuffle_epi8(t, idx.a), _mm256_shuffle_epi8(t, idx.b)};
    }
    static I Bcast(int32_t v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
    static __m256i Dot1(__m256i acc, __m256i u, __m256i s) {
        const __m256i p16 = _mm256_maddubs_epi16(u, s);
        return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
    }
    static I Dot(I acc, I u, I s) { return {Dot1(acc.a, u.a, s.a), Dot1(acc.b, u.b, s.b)}; }
    static I DotSigned(I acc, I w, I x) {
        return {Dot1(acc.a, _mm256_sign_epi8(w.a, w.a), _mm256_sign_epi8(x.a, w.a)),
                Dot1(acc.b, _mm256_sign_epi8(w.b, w.b), _mm256_sign_epi8(x.b, w.b))};
    }
    static F Zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
    static F Set(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
    static F Mul(F a, F b) { return {_mm256_mul_ps(a.a, b.a), _mm256_mul_ps(a.b, b.b)}; }
    static F MulAdd(F a, F b, F c) {
        return {_mm256_fmadd_ps(a.a, b.a, c.a), _mm256_fmadd_ps(a.b, b.b, c.b)};
    }
    static F ToF(I v) { return {_mm256_cvtepi32_ps(v.a), _mm256_cvtepi32_ps(v.b)}; }
    static F LoadF16(const uint8_t* p) {
        return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
                _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)))};
    }
    static F LoadI8(const uint8_t* p) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)),
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)))};
    }
    static void Store(float* y, F v, int nr) {
        if (nr >= 16) {
            _mm256_storeu_ps(y, v.a);
            _mm256_storeu_ps(y + 8, v.b);
            return;
        }
        HWY_ALIGN float t[16];
        _mm256_store_ps(t, v.a);
        _mm256_store_ps(t + 8, v.b);
        for (int c = 0; c < nr; ++c)
            y[c] = t[c];
    }
};
#endif

// The IQ4 grid stays unsigned (index -> value + 128, offset removed by the seed) only where
// the dot product cannot saturate (VNNI); elsewhere it is signed.
template <class F>
constexpr bool kSignedValues = F::kLut && !V16::kVnni;
template <class F>
constexpr int kZeroOf = F::kLut ? (V16::kVnni ? 128 : 0) : F::kZero;

template <class F>
LLADA_VNNI_FN HWY_INLINE V16::I DotF(V16::I acc, V16::I w, V16::I x) {
    if constexpr (kSignedValues<F>) return V16::DotSigned(acc, w, x);
    return V16::Dot(acc, w, x);
}

// Tile: MR activation rows x NG groups of 16 output columns, over the whole row. `next`: the
// next tile's first group, prefetched into L2 unit by unit (nullptr: none).
template <class F, int MR, int NG>
LLADA_VNNI_FN HWY_INLINE void TileG(const Acts& x, const uint8_t* const* grp,
                                    const quant::PackedLayout& l, const uint8_t* next, float* y,
                                    int64_t ldy, int nr) {
    using I = V16::I;
    using VF = V16::F;
    constexpr int kZero = kZeroOf<F>;
    VF acc[MR][NG];
    for (int m = 0; m < MR; ++m) {
        for (int g = 0; g < NG; ++g)
            acc[m][g] = V16::Zero();
    }
    for (int64_t u = 0; u < l.n_blocks; ++u) {
        const uint8_t* unit[NG];
        for (int g = 0; g < NG; ++g)
            unit[g] = grp[g] + u * l.block_bytes;
        if (next != nullptr) {
            for (size_t c = 0; c < l.block_bytes; c += 64) {
                for (int g = 0; g < NG; ++g)
                    __builtin_prefetch(next + g * l.group_bytes + u * l.block_bytes + c, 0, 2);
            }
        }
        VF d[NG], dm[NG];
        for (int g = 0; g < NG; ++g) {
            d[g] = V16::LoadF16(unit[g]);
            if constexpr (F::kMin) dm[g] = V16::LoadF16(unit[g] + l.dmin_at);
        }
        for (int j = 0; j < F::kNSub; ++j) {
            int64_t b;
            int h;
            SubAt<F>(u, j, &b, &h);
            I isum[MR][NG];
            for (int m = 0; m < MR; ++m) {
                const I seed = V16::Bcast(kZero * x.neg_sum<F::kS>(m, b, h));
                for (int g = 0; g < NG; ++g)
                    isum[m][g] = seed;
            }
            const uint8_t* vals[NG];
            for (int g = 0; g < NG; ++g)
                vals[g] = unit[g] + l.values_at + j * l.sub_value_bytes;
            if constexpr (F::kNib) {
                for (int c = 0; c < F::kS / 8; ++c) {
                    I lo[NG], hi[NG];
                    for (int g = 0; g < NG; ++g) {
                        const I raw = V16::Load(vals[g] + 64 * c);
                        lo[g] = V16::Lo(raw);
                        hi[g] = V16::Hi(raw);
                        if constexpr (F::kLut) {
                            lo[g] = V16::Lut(lo[g]);
                            hi[g] = V16::Lut(hi[g]);
                        }
                    }
                    for (int m = 0; m < MR; ++m) {
                        const uint8_t* xs = x.rec(m, b) + 16 * h + 8 * c;
                        const I xa = V16::Bcast(Load4(xs)), xc = V16::Bcast(Load4(xs + 4));
                        for (int g = 0; g < NG; ++g) {
                            isum[m][g] = DotF<F>(isum[m][g], lo[g], xa);
                            isum[m][g] = DotF<F>(isum[m][g], hi[g], xc);
                        }
                    }
                }
            } else {
                for (int s = 0; s < F::kS / 4; ++s) {
                    I w[NG];
                    for (int g = 0; g < NG; ++g)
                        w[g] = V16::Load(vals[g] + 64 * s);
                    for (int m = 0; m < MR; ++m) {
                        const I xv = V16::Bcast(Load4(x.rec(m, b) + 16 * h + 4 * s));
                        for (int g = 0; g < NG; ++g)
                            isum[m][g] = DotF<F>(isum[m][g], w[g], xv);
                    }
                }
            }
            VF fsc[NG], fmn[NG];
            for (int g = 0; g < NG; ++g) {
                fsc[g] = F::kSub ? V16::Mul(d[g], V16::LoadI8(unit[g] + l.sc_at + 16 * j)) : d[g];
                if constexpr (F::kMin) {
                    fmn[g] =
                        F::kSub ? V16::Mul(dm[g], V16::LoadI8(unit[g] + l.m_at + 16 * j)) : dm[g];
                }
            }
            for (int m = 0; m < MR; ++m) {
                const VF dx = V16::Set(x.d(m, b));
                for (int g = 0; g < NG; ++g) {
                    acc[m][g] = V16::MulAdd(V16::ToF(isum[m][g]), V16::Mul(fsc[g], dx), acc[m][g]);
                }
                if constexpr (F::kMin) {
                    const VF nmin = V16::Set(x.neg_min<F::kS>(m, b, h));
                    for (int g = 0; g < NG; ++g)
                        acc[m][g] = V16::MulAdd(fmn[g], nmin, acc[m][g]);
                }
            }
        }
    }
    for (int m = 0; m < MR; ++m) {
        for (int g = 0; g < NG; ++g)
            V16::Store(y + m * ldy + 16 * g, acc[m][g], std::min(16, nr - 16 * g));
    }
}

// One tile of h rows (1 <= h <= MR) through the instantiation of that height.
template <class F, int MR, int NG>
LLADA_VNNI_FN HWY_INLINE void TileGN(int h, const Acts& x, const uint8_t* const* grp,
                                     const quant::PackedLayout& l, const uint8_t* next, float* y,
                                     int64_t ldy, int nr) {
    if constexpr (MR > 1) {
        if (h < MR) return TileGN<F, MR - 1, NG>(h, x, grp, l, next, y, ldy, nr);
    }
    TileG<F, MR, NG>(x, grp, l, next, y, ldy, nr);
}

// Column tiles of two groups (VNNI) or one, each over row tiles of up to kRows rows.
template <class F>
LLADA_VNNI_FN void MatmulG(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y,
                           int64_t ldy, int64_t n0, int64_t n1) {
    constexpr int kNG = V16::kVnni ? 2 : 1;
    constexpr int kRows = V16::kVnni ? 4 : 4;
    const quant::PackedLayout l = quant::packed_layout(w.type, w.n_rows, w.n_cols);
    const quant::ActLayout a = quant::act_layout(w.n_cols);
    const int64_t width = kNG * quant::kPackRows;
    for (int64_t n = n0; n < n1; n += width) {
        const int nr = static_cast<int>(std::min<int64_t>(width, n1 - n));
        const uint8_t* grp[2];
        grp[0] = w.packed + (n / quant::kPackRows) * l.group_bytes;
        grp[1] = grp[0] + l.group_bytes;
        const uint8_t* next = n + 2 * width <= n1 ? grp[0] + kNG * l.group_bytes : nullptr;
        for (int64_t m = 0; m < m_rows; m += kRows) {
            const int hgt = static_cast<int>(std::min<int64_t>(kRows, m_rows - m));
            const Acts x{xq + m * a.row_bytes, a.row_bytes};
            float* ym = y + m * ldy + n;
            const uint8_t* pf = m == 0 ? next : nullptr;
            if (kNG == 2 && nr > quant::kPackRows) {
                TileGN<F, kRows, kNG>(hgt, x, grp, l, pf, ym, ldy, nr);
            } else {
                TileGN<F, kRows, 1>(hgt, x, grp, l, pf, ym, ldy, nr);
            }
        }
    }
}

#elif HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
// ---- No vectors: each unit's values unpacked, exact int32 sums ----

template <class F>
void MatmulG(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
             int64_t n0, int64_t n1) {
    const quant::PackedLayout l = quant::packed_layout(w.type, w.n_rows, w.n_cols);
    const quant::ActLayout a = quant::act_layout(w.n_cols);
    int8_t q[quant::kQKK];
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* group = w.packed + (n / quant::kPackRows) * l.group_bytes;
        const int r = static_cast<int>(n % quant::kPackRows);
        for (int64_t m = 0; m < m_rows; ++m) {
            const Acts x{xq + m * a.row_bytes, a.row_bytes};
            float acc = 0.0f;
            for (int64_t u = 0; u < l.n_blocks; ++u) {
                const uint8_t* unit = group + u * l.block_bytes;
                quant::unpack_generic(l, group, u, r, q);
                uint16_t h16[2];
                std::memcpy(h16, unit + 2 * r, 2);
                std::memcpy(h16 + 1, unit + l.dmin_at + 2 * r, 2);
                const float d = quant::fp16_to_fp32(h16[0]), dm = quant::fp16_to_fp32(h16[1]);
                for (int j = 0; j < F::kNSub; ++j) {
                    int64_t b;
                    int h;
                    SubAt<F>(u, j, &b, &h);
                    const int8_t* xs = reinterpret_cast<const int8_t*>(x.rec(0, b)) + 16 * h;
                    int32_t isum = 0;
                    for (int i = 0; i < F::kS; ++i)
                        isum += q[j * F::kS + i] * xs[i];
                    const float sc =
                        F::kSub
                            ? static_cast<float>(static_cast<int8_t>(unit[l.sc_at + 16 * j + r]))
                            : 1.0f;
                    acc += static_cast<float>(isum) * ((d * sc) * x.d(0, b));
                    if constexpr (F::kMin) {
                        const float mm =
                            F::kSub ? static_cast<float>(unit[l.m_at + 16 * j + r]) : 1.0f;
                        acc += (dm * mm) * x.neg_min<F::kS>(0, b, h);
                    }
                }
            }
            y[m * ldy + n] = acc;
        }
    }
}

#else
// ---- Portable 128-bit targets (NEON, SVE at 128 bits, x86 below AVX2) ----
//
// One activation row at a time; a 16-byte vector of a 64-byte step holds 4 rows x 4 values, so
// a group is four quarters of 4 rows. With a 4-way int8 dot product (SVE's sdot on every SVE
// core, NEON's with Armv8.2 dotprod) the values become signed (q = stored - zero, or the IQ4
// grid value) and each instruction advances 4 rows by 4 values with no seed. Without one, each
// quarter's bytes are widened to int16 and multiplied with the activation's 4 values repeated
// (pairs summed in int32 lanes, folded per sub-block).

#if HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || HWY_TARGET == HWY_SVE_256 || \
    HWY_TARGET == HWY_SVE2_128
#define LLADA_DOT_FN
template <class V32, class V8>
HWY_INLINE V32 Dot4(V32 acc, V8 w, V8 x) {
    return svdot_s32(acc, w, x);
}
HWY_INLINE bool HaveDot() {
    return true;
}
#define LLADA_HAVE_DOT 1
#elif HWY_TARGET == HWY_NEON
#define LLADA_DOT_FN __attribute__((target("arch=armv8.2-a+dotprod+crypto")))
LLADA_DOT_FN HWY_INLINE hn::Vec128<int32_t> Dot4(hn::Vec128<int32_t> acc, hn::Vec128<int8_t> w,
                                                 hn::Vec128<int8_t> x) {
    return hn::Vec128<int32_t>(vdotq_s32(acc.raw, w.raw, x.raw));
}
HWY_INLINE bool HaveDot() {
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
}
#define LLADA_HAVE_DOT 1
#endif

// The four quarter-group int32 sums of one sub-block for one activation row. Dot: the values
// signed, sdot; otherwise unsigned values widened (zero removed by the seed afterwards).
template <class F, bool kDot>
LLADA_DOT_FN HWY_INLINE void SubSums(const uint8_t* vals, const int8_t* xs, int32_t* out) {
    const hn::FixedTag<uint8_t, 16> du8;
    const hn::FixedTag<int8_t, 16> d8;
    const hn::FixedTag<int16_t, 8> d16;
    const hn::FixedTag<int32_t, 4> d32;
    const hn::Half<decltype(du8)> du8h;
    const hn::RebindToUnsigned<decltype(d16)> du16;
    const hn::Rebind<int8_t, decltype(d16)> di8h;
    // The stored bytes of step-group k (4 values of 4 rows, quarter v) as a vector.
    auto step = [&](int k, int v) {
        if constexpr (F::kNib) {
            const auto raw = hn::LoadU(du8, vals + (k / 2) * 64 + 16 * v);
            return k % 2 == 0 ? hn::And(raw, hn::Set(du8, 0x0f)) : hn::ShiftRight<4>(raw);
        } else {
            return hn::LoadU(du8, vals + k * 64 + 16 * v);
        }
    };
    // Activation value groups: group k of a nibble sub-block holds values 8(k/2) + 4(k%2) + i.
    auto x_off = [](int k) { return F::kNib ? 8 * (k / 2) + 4 * (k % 2) : 4 * k; };
    constexpr int kSteps = F::kS / 4;
    for (int v = 0; v < 4; ++v) {
        if constexpr (kDot) {
#if defined(LLADA_HAVE_DOT)
            auto sums = hn::Zero(d32);
            for (int k = 0; k < kSteps; ++k) {
                int32_t xw;
                std::memcpy(&xw, xs + x_off(k), 4);
                const auto xa = hn::BitCast(d8, hn::Set(d32, xw));
                auto w = hn::BitCast(d8, step(k, v));
                if constexpr (F::kLut) {
                    w = hn::TableLookupBytes(hn::LoadU(d8, quant::kIq4Values), w);
                } else if constexpr (F::kZero != 0) {
                    w = hn::Sub(w, hn::Set(d8, static_cast<int8_t>(F::kZero)));
                }
                sums = Dot4(sums, w, xa);
            }
            hn::StoreU(sums, d32, out + 4 * v);
#endif
        } else {
            // Rows 2r, 2r + 1 of the quarter in the low / high half: pairs of products in int32.
            auto s0l = hn::Zero(d32), s1l = hn::Zero(d32), s0h = hn::Zero(d32), s1h = hn::Zero(d32);
            for (int k = 0; k < kSteps; ++k) {
                HWY_ALIGN int8_t twice[8];
                std::memcpy(twice, xs + x_off(k), 4);
                std::memcpy(twice + 4, xs + x_off(k), 4);
                const auto xv = hn::PromoteTo(d16, hn::Load(di8h, twice));
                auto w = step(k, v);
                hn::Vec<decltype(d16)> wl, wh;
                if constexpr (F::kLut) {
                    const auto g =
                        hn::TableLookupBytes(hn::LoadU(d8, quant::kIq4Values), hn::BitCast(d8, w));
                    wl = hn::PromoteTo(d16, hn::LowerHalf(hn::Half<decltype(d8)>(), g));
                    wh = hn::PromoteTo(d16, hn::UpperHalf(hn::Half<decltype(d8)>(), g));
                } else {
                    wl = hn::BitCast(d16, hn::PromoteTo(du16, hn::LowerHalf(du8h, w)));
                    wh = hn::BitCast(d16, hn::PromoteTo(du16, hn::UpperHalf(du8h, w)));
                }
                s0l = hn::ReorderWidenMulAccumulate(d32, wl, xv, s0l, s1l);
                s0h = hn::ReorderWidenMulAccumulate(d32, wh, xv, s0h, s1h);
            }
            // Lane i of the rearranged sums is the pair of products (2i, 2i + 1): lanes 0-1
            // belong to the half's first row, lanes 2-3 to its second.
            HWY_ALIGN int32_t t[2][4];
            hn::Store(hn::RearrangeToOddPlusEven(s0l, s1l), d32, t[0]);
            hn::Store(hn::RearrangeToOddPlusEven(s0h, s1h), d32, t[1]);
            out[4 * v + 0] = t[0][0] + t[0][1];
            out[4 * v + 1] = t[0][2] + t[0][3];
            out[4 * v + 2] = t[1][0] + t[1][1];
            out[4 * v + 3] = t[1][2] + t[1][3];
        }
    }
}

template <class F, bool kDot>
LLADA_DOT_FN void MatmulGRows(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y,
                              int64_t ldy, int64_t n0, int64_t n1) {
    const quant::PackedLayout l = quant::packed_layout(w.type, w.n_rows, w.n_cols);
    const quant::ActLayout a = quant::act_layout(w.n_cols);
    constexpr int kZero = kDot ? 0 : (F::kLut ? 0 : F::kZero);
    for (int64_t n = n0; n < n1; n += quant::kPackRows) {
        const int nr = static_cast<int>(std::min<int64_t>(quant::kPackRows, n1 - n));
        const uint8_t* group = w.packed + (n / quant::kPackRows) * l.group_bytes;
        for (int64_t m = 0; m < m_rows; ++m) {
            const Acts x{xq + m * a.row_bytes, a.row_bytes};
            float acc[16] = {};
            for (int64_t u = 0; u < l.n_blocks; ++u) {
                const uint8_t* unit = group + u * l.block_bytes;
                float d[16], dm[16];
                for (int r = 0; r < 16; ++r) {
                    uint16_t h16[2];
                    std::memcpy(h16, unit + 2 * r, 2);
                    std::memcpy(h16 + 1, unit + l.dmin_at + 2 * r, 2);
                    d[r] = quant::fp16_to_fp32(h16[0]);
                    dm[r] = quant::fp16_to_fp32(h16[1]);
                }
                for (int j = 0; j < F::kNSub; ++j) {
                    int64_t b;
                    int h;
                    SubAt<F>(u, j, &b, &h);
                    const int8_t* xs = reinterpret_cast<const int8_t*>(x.rec(0, b)) + 16 * h;
                    HWY_ALIGN int32_t sums[16];
                    SubSums<F, kDot>(unit + l.values_at + j * l.sub_value_bytes, xs, sums);
                    const int32_t seed = kZero * x.neg_sum<F::kS>(0, b, h);
                    const float dx = x.d(0, b);
                    for (int r = 0; r < 16; ++r) {
                        const float sc = F::kSub ? static_cast<float>(static_cast<int8_t>(
                                                       unit[l.sc_at + 16 * j + r]))
                                                 : 1.0f;
                        acc[r] += static_cast<float>(sums[r] + seed) * ((d[r] * sc) * dx);
                        if constexpr (F::kMin) {
                            const float mm =
                                F::kSub ? static_cast<float>(unit[l.m_at + 16 * j + r]) : 1.0f;
                            acc[r] += (dm[r] * mm) * x.neg_min<F::kS>(0, b, h);
                        }
                    }
                }
            }
            for (int r = 0; r < nr; ++r)
                y[m * ldy + n + r] = acc[r];
        }
    }
}

template <class F>
void MatmulG(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
             int64_t n0, int64_t n1) {
#if defined(LLADA_HAVE_DOT)
    if (HaveDot()) return MatmulGRows<F, true>(xq, m_rows, w, y, ldy, n0, n1);
#endif
    MatmulGRows<F, false>(xq, m_rows, w, y, ldy, n0, n1);
}
#endif

LLADA_VNNI_FN void MatmulGeneric(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y,
                                 int64_t ldy, int64_t n0, int64_t n1) {
    using format::TensorType;
    switch (w.type) {
        case TensorType::Q4_1:
            return MatmulG<FmtQ4_1>(xq, m_rows, w, y, ldy, n0, n1);
        case TensorType::Q5_0:
            return MatmulG<FmtQ5_0>(xq, m_rows, w, y, ldy, n0, n1);
        case TensorType::Q5_1:
            return MatmulG<FmtQ5_1>(xq, m_rows, w, y, ldy, n0, n1);
        case TensorType::IQ4_NL:
            return MatmulG<FmtIQ4_NL>(xq, m_rows, w, y, ldy, n0, n1);
        case TensorType::Q2_K:
            return MatmulG<FmtQ2_K>(xq, m_rows, w, y, ldy, n0, n1);
        case TensorType::Q3_K:
            return MatmulG<FmtQ3_K>(xq, m_rows, w, y, ldy, n0, n1);
        case TensorType::Q4_K:
            return MatmulG<FmtQ4_K>(xq, m_rows, w, y, ldy, n0, n1);
        case TensorType::Q5_K:
            return MatmulG<FmtQ5_K>(xq, m_rows, w, y, ldy, n0, n1);
        case TensorType::Q6_K:
            return MatmulG<FmtQ6_K>(xq, m_rows, w, y, ldy, n0, n1);
        case TensorType::IQ4_XS:
            return MatmulG<FmtIQ4_XS>(xq, m_rows, w, y, ldy, n0, n1);
        default:
            break;
    }
}

#if defined(LLADA_POP_VNNI) && !defined(__clang__)
#pragma GCC pop_options
#endif
#undef LLADA_POP_VNNI
#undef LLADA_HAVE_DOT
#undef LLADA_DOT_FN
#undef LLADA_VNNI_FN

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llada::kernels {

HWY_EXPORT(MatmulGeneric);

void matmul_generic(const uint8_t* xq, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                    int64_t n0, int64_t n1) {
    HWY_DYNAMIC_DISPATCH(MatmulGeneric)(xq, m_rows, w, y, ldy, n0, n1);
}

}  // namespace llada::kernels
#endif
