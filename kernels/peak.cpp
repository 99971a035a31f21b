// Microbenchmarks of this machine's ceilings, for roofline tables: float FMA throughput,
// int8 multiply-accumulate throughput and streaming read bandwidth, per thread (Highway).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/peak.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"

#include <chrono>
#include <cstring>

#include "kernels/peak.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Independent FMA chains (enough to cover FMA latency x throughput), repeated `iters` times.
// Returns the number of floating-point operations performed (2 per lane per FMA).
double FmaLoop(int64_t iters, float* sink) {
    const hn::ScalableTag<float> df;
    auto a0 = hn::Set(df, 1.0f), a1 = hn::Set(df, 1.1f), a2 = hn::Set(df, 1.2f);
    auto a3 = hn::Set(df, 1.3f), a4 = hn::Set(df, 1.4f), a5 = hn::Set(df, 1.5f);
    auto a6 = hn::Set(df, 1.6f), a7 = hn::Set(df, 1.7f), a8 = hn::Set(df, 1.8f);
    auto a9 = hn::Set(df, 1.9f), a10 = hn::Set(df, 2.0f), a11 = hn::Set(df, 2.1f);
    const auto m = hn::Set(df, 0.999999f), c = hn::Set(df, 1e-7f);
    for (int64_t i = 0; i < iters; ++i) {
        a0 = hn::MulAdd(a0, m, c);
        a1 = hn::MulAdd(a1, m, c);
        a2 = hn::MulAdd(a2, m, c);
        a3 = hn::MulAdd(a3, m, c);
        a4 = hn::MulAdd(a4, m, c);
        a5 = hn::MulAdd(a5, m, c);
        a6 = hn::MulAdd(a6, m, c);
        a7 = hn::MulAdd(a7, m, c);
        a8 = hn::MulAdd(a8, m, c);
        a9 = hn::MulAdd(a9, m, c);
        a10 = hn::MulAdd(a10, m, c);
        a11 = hn::MulAdd(a11, m, c);
    }
    auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)),
                     hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
    s = hn::Add(s, hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
    *sink = hn::GetLane(hn::SumOfLanes(df, s));
    return static_cast<double>(iters) * 12 * 2 * hn::Lanes(df);
}

// Independent u8 x s8 dot-product chains (vpdpbusd on AVX-512 VNNI, vpmaddubsw + vpmaddwd on
// AVX2/AVX-512BW, plain multiplies elsewhere): the ceiling of the quantised matmuls. Returns the
// int8 operations done (2 per multiply-accumulate).
// (Clang: Highway's target attribute wins over pragmas, so the functions name the whole target.)
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL && defined(__clang__)
#define LLADA_VNNI_FN __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
#pragma GCC push_options
#pragma GCC target("avx512vnni")
#define LLADA_VNNI_FN
#else
#define LLADA_VNNI_FN
#endif
LLADA_VNNI_FN double Int8Loop(int64_t iters, float* sink) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    __m512i a[12];
    for (int i = 0; i < 12; ++i)
        a[i] = _mm512_set1_epi32(i);
    const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
    for (int64_t it = 0; it < iters; ++it) {
        for (int i = 0; i < 12; ++i) {
#if HWY_TARGET == HWY_AVX3_DL
            a[i] = _mm512_dpbusd_epi32(a[i], u, s);
#else
            a[i] = _mm512_add_epi32(
                a[i], _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
        }
    }
    __m512i t = a[0];
    for (int i = 1; i < 12; ++i)
        t = _mm512_add_epi32(t, a[i]);
    *sink = static_cast<float>(_mm512_reduce_add_epi32(t));
    return static_cast<double>(iters) * 12 * 64 * 2;
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    __m256i a[8];
    for (int i = 0; i < 8; ++i)
        a[i] = _mm256_set1_epi32(i);
    const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
    for (int64_t it = 0; it < iters; ++it) {
        for (int i = 0; i < 8; ++i) {
            a[i] = _mm256_add_epi32(
                a[i], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
        }
    }
    __m256i t = a[0];
    for (int i = 1; i < 8; ++i)
        t = _mm256_add_epi32(t, a[i]);
    int32_t v[8];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(v), t);
    *sink = static_cast<float>(v[0]);
    return static_cast<double>(iters) * 8 * 32 * 2;
#else
    int32_t acc[16] = {};
    for (int64_t it = 0; it < iters; ++it) {
        for (int i = 0; i < 16; ++i)
            acc[i] += 3 * (-2) + i;
    }
    *sink = static_cast<float>(acc[3]);
    return static_cast<double>(iters) * 16 * 2;
#endif
}

// The int8 rate of llama.cpp's block formats, where every 32 values carry a float scale: the
// instruction mix of the six-row VNNI tile (kernels/qmatmul.cpp) on data that stays in L1. Per
// block: 16 weight loads, 48 activation and 6 seed broadcasts, 96 vpdpbusd into 12 int32
// chains, then per chain one int-to-float, one scale multiply and one FMA, plus the two groups'
// fp16 scales widened. Counts the int8 operations of the vpdpbusd only, so its ratio to
// int8_ops is the share of the raw rate such a kernel can reach. Other targets: the raw loop.
LLADA_VNNI_FN double Int8BlockLoop(int64_t iters, float* sink) {
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
    constexpr int kBlocks = 8, kRows = 6;
    constexpr size_t kBlockBytes = 32 + 8 * 64;  // 16 fp16 scales, then 8 steps of 64 bytes
    HWY_ALIGN uint8_t w[2][kBlocks][kBlockBytes];
    HWY_ALIGN int8_t x[kBlocks][kRows][32];
    float dx[kBlocks][kRows];
    int32_t seed[kBlocks][kRows];
    for (int g = 0; g < 2; ++g) {
        for (int b = 0; b < kBlocks; ++b) {
            for (size_t i = 0; i < kBlockBytes; ++i)
                w[g][b][i] = static_cast<uint8_t>(i * 7 + b);
            for (int i = 0; i < 16; ++i) {
                const uint16_t one = 0x3c00;  // fp16 1.0
                std::memcpy(&w[g][b][2 * i], &one, 2);
            }
        }
    }
    for (int b = 0; b < kBlocks; ++b) {
        for (int m = 0; m < kRows; ++m) {
            for (int i = 0; i < 32; ++i)
                x[b][m][i] = static_cast<int8_t>(i * 3 - m);
            dx[b][m] = 0.01f * static_cast<float>(m + 1);
            seed[b][m] = -128 * m;
        }
    }
    __m512 acc[kRows][2];
    for (int m = 0; m < kRows; ++m)
        acc[m][0] = acc[m][1] = _mm512_setzero_ps();
    for (int64_t it = 0; it < iters; ++it) {
        const int b = static_cast<int>(it % kBlocks);
        const uint8_t* s0 = w[0][b];
        const uint8_t* s1 = w[1][b];
        const __m512 sw0 =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s0)));
        const __m512 sw1 =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s1)));
        __m512i is[kRows][2];
        for (int m = 0; m < kRows; ++m)
            is[m][0] = is[m][1] = _mm512_set1_epi32(seed[b][m]);
        for (int st = 0; st < 8; ++st) {
            const __m512i w0 = _mm512_loadu_si512(s0 + 32 + 64 * st);
            const __m512i w1 = _mm512_loadu_si512(s1 + 32 + 64 * st);
            for (int m = 0; m < kRows; ++m) {
                int32_t v;
                std::memcpy(&v, &x[b][m][4 * st], 4);
                const __m512i xv = _mm512_set1_epi32(v);
                is[m][0] = _mm512_dpbusd_epi32(is[m][0], w0, xv);
                is[m][1] = _mm512_dpbusd_epi32(is[m][1], w1, xv);
            }
        }
        for (int m = 0; m < kRows; ++m) {
            const __m512 d = _mm512_set1_ps(dx[b][m]);
            acc[m][0] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[m][0]), _mm512_mul_ps(sw0, d), acc[m][0]);
            acc[m][1] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[m][1]), _mm512_mul_ps(sw1, d), acc[m][1]);
        }
    }
    __m512 t = acc[0][0];
    for (int m = 0; m < kRows; ++m)
        t = _mm512_add_ps(t, _mm512_add_ps(acc[m][0], acc[m][1]));
    *sink = _mm512_reduce_add_ps(t);
    return static_cast<double>(iters) * kRows * 2 * 8 * 64 * 2;
#else
    return Int8Loop(iters, sink);
#endif
}
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL && !defined(__clang__)
#pragma GCC pop_options
#endif
#undef LLADA_VNNI_FN

// Sums `n` floats (streaming reads); returns the bytes read.
double ReadLoop(const float* data, int64_t n, float* sink) {
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    auto s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
    int64_t i = 0;
    for (; i + 4 * N <= n; i += 4 * N) {
        s0 = hn::Add(s0, hn::LoadU(df, data + i));
        s1 = hn::Add(s1, hn::LoadU(df, data + i + N));
        s2 = hn::Add(s2, hn::LoadU(df, data + i + 2 * N));
        s3 = hn::Add(s3, hn::LoadU(df, data + i + 3 * N));
    }
    *sink = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
    return static_cast<double>(i) * sizeof(float);
}

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llada::kernels {

HWY_EXPORT(FmaLoop);
HWY_EXPORT(ReadLoop);
HWY_EXPORT(Int8Loop);
HWY_EXPORT(Int8BlockLoop);

double fma_flops(int64_t iters, float* sink) {
    return HWY_DYNAMIC_DISPATCH(FmaLoop)(iters, sink);
}
double int8_ops(int64_t iters, float* sink) {
    return HWY_DYNAMIC_DISPATCH(Int8Loop)(iters, sink);
}
double int8_block_ops(int64_t iters, float* sink) {
    return HWY_DYNAMIC_DISPATCH(Int8BlockLoop)(iters, sink);
}
double read_bytes(const float* data, int64_t n, float* sink) {
    return HWY_DYNAMIC_DISPATCH(ReadLoop)(data, n, sink);
}

}  // namespace llada::kernels
#endif
