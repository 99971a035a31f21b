// Every SIMD kernel on every instruction set this machine supports, against its scalar twin.
#include <gtest/gtest.h>

#include <algorithm>

#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hwy/highway.h"
#include "hwy/targets.h"
#if HWY_ARCH_X86
#include <cpuid.h>
#endif
#include "kernels/kernels.h"
#include "kernels/lut.h"
#include "kernels/reference.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/packed.h"
#include "tests/test_util.h"
#include "util/error.h"

using namespace llada;
using namespace llada::kernels;
using format::TensorType;

namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v)
        x = dist(rng);
    return v;
}

using llada::test::for_each_target;

struct Weights {
    std::vector<uint8_t> bytes;
    WeightView view;
};

Weights make_weights(TensorType t, int64_t n, int64_t k, uint32_t seed) {
    auto f = random_vec(static_cast<size_t>(n * k), seed, 0.5f);
    Weights w;
    size_t rb = quant::row_bytes(t, k);
    w.bytes.resize(rb * n);
    for (int64_t r = 0; r < n; ++r)
        quant::quantize_row(t, f.data() + r * k, &w.bytes[r * rb], k);
    w.view = {t, w.bytes.data(), n, k, rb};
    return w;
}

}  // namespace

TEST(Kernels, SeveralTargetsAreTested) {
    auto targets = hwy::SupportedAndGeneratedTargets();
    std::string names;
    for (auto t : targets)
        names += std::string(hwy::TargetName(t)) + " ";
    RecordProperty("targets", names);
#if HWY_ARCH_ARM_A64
    // 64-bit Arm builds NEON (its baseline) and the SVE targets; a core with SVE runs the SVE
    // ones too (under qemu: scripts/cross-aarch64.sh runs the kernel tests at two vector
    // lengths), each held to the scalar twins by every kernel test.
    auto has = [&](int64_t t) {
        return std::find(targets.begin(), targets.end(), t) != targets.end();
    };
    EXPECT_TRUE(has(HWY_NEON)) << names;
    static_assert((HWY_TARGETS & HWY_SVE) && (HWY_TARGETS & HWY_SVE2) &&
                      (HWY_TARGETS & HWY_SVE_256) && (HWY_TARGETS & HWY_SVE2_128),
                  "every SVE target is compiled");
    if (hwy::SupportedTargets() & HWY_SVE) {
        EXPECT_TRUE(has(HWY_SVE)) << names;
        EXPECT_GE(targets.size(), 3u) << names;  // NEON, SVE and SVE2 or a fixed-width one
    }
#else
    // Every target this CPU can run is generated and tested, as the CPU itself reports it
    // (cpuid and the OS's saved register state, read here, not Highway's own detection): the
    // scalar fallback always, AVX2 (with FMA, F16C, BMI1/2), AVX-512 (F, BW, DQ, VL) and AVX3_DL
    // (with VNNI, VBMI, VBMI2, BITALG, VPOPCNTDQ, VPCLMULQDQ and VAES) wherever the CPU has them.
    auto has = [&](int64_t t) {
        return std::find(targets.begin(), targets.end(), t) != targets.end();
    };
    EXPECT_TRUE(has(HWY_SCALAR) || has(HWY_EMU128)) << names;  // the scalar fallback
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0, a7 = 0, b7 = 0, c7 = 0, d7 = 0;
    __get_cpuid(1, &a1, &b1, &c1, &d1);
    __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7);
    auto bit = [](unsigned r, int i) { return ((r >> i) & 1u) != 0; };
    uint32_t xcr0 = 0;
    if (bit(c1, 27)) {  // OSXSAVE: xgetbv may be used
        uint32_t hi = 0;
        __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(hi) : "c"(0));
    }
    const bool os_avx = (xcr0 & 0x6u) == 0x6u, os_avx512 = (xcr0 & 0xE6u) == 0xE6u;
    const bool avx2 = os_avx && bit(c1, 12) && bit(c1, 29) && bit(b7, 5) && bit(b7, 3) &&
                      bit(b7, 8);  // FMA, F16C, AVX2, BMI1, BMI2
    const bool avx3 = avx2 && os_avx512 && bit(b7, 16) && bit(b7, 17) && bit(b7, 30) &&
                      bit(b7, 31);  // AVX512F, DQ, BW, VL
    const bool avx3_dl = avx3 && bit(c7, 11) && bit(c7, 1) && bit(c7, 6) && bit(c7, 12) &&
                         bit(c7, 14) && bit(c7, 10) && bit(c7, 9);
    EXPECT_EQ(has(HWY_AVX2), avx2) << names;
    EXPECT_EQ(has(HWY_AVX3), avx3) << names;
    EXPECT_EQ(has(HWY_AVX3_DL), avx3_dl) << names;
#endif
}

TEST(Kernels, Fp16ConversionIsExactAndRoundsToEven) {
    // Every finite fp16 value round-trips; every midpoint between neighbours rounds to even.
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const uint16_t bits = static_cast<uint16_t>(h);
        if ((bits & 0x7c00) == 0x7c00) continue;  // inf / NaN
        const float f = quant::fp16_to_fp32(bits);
        ASSERT_EQ(quant::fp32_to_fp16(f), bits) << h;
        const uint16_t next = static_cast<uint16_t>(bits + 1);
        if ((bits & 0x8000) || (next & 0x7c00) == 0x7c00) continue;
        const float mid = (f + quant::fp16_to_fp32(next)) * 0.5f;  // exact in float32
        const uint16_t even = (bits & 1) ? next : bits;
        ASSERT_EQ(quant::fp32_to_fp16(mid), even) << h;
    }
    EXPECT_EQ(quant::fp32_to_fp16(1e6f), 0x7c00);
    EXPECT_EQ(quant::fp32_to_fp16(-1e6f), 0xfc00);
    EXPECT_TRUE(std::isnan(quant::fp16_to_fp32(quant::fp32_to_fp16(NAN))));
}

// The fp16 KV cache's stores: every target's conversion against the scalar twin, bit for bit,
// over every fp16 value, the midpoints between neighbours of either sign (ties to even), values
// past the range (to infinity) and below it (subnormals and zero), in lengths with and without a
// vector tail.
TEST(Kernels, ToFp16MatchesScalarTwinBitForBit) {
    std::vector<float> x;
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const uint16_t bits = static_cast<uint16_t>(h);
        if ((bits & 0x7c00) == 0x7c00) continue;  // inf / NaN
        x.push_back(quant::fp16_to_fp32(bits));
        // The midpoint to the next value away from zero (negative ones too): ties to even.
        const uint16_t next = static_cast<uint16_t>(bits + 1);
        if ((next & 0x7c00) != 0x7c00 && (next & 0x7fff) != 0)
            x.push_back((x.back() + quant::fp16_to_fp32(next)) * 0.5f);
    }
    for (float f : {1e6f, -1e6f, 65520.0f, 1e-9f, -3e-8f, 0.0f, -0.0f})
        x.push_back(f);
    auto r = random_vec(1001, 7, 10.0f);
    x.insert(x.end(), r.begin(), r.end());
    std::vector<uint16_t> want(x.size());
    for (size_t i = 0; i < x.size(); ++i)
        want[i] = quant::fp32_to_fp16(x[i]);
    for_each_target([&] {
        std::vector<uint16_t> got(x.size());
        to_fp16(x.data(), got.data(), static_cast<int64_t>(x.size()));
        ASSERT_EQ(got, want);
        to_fp16(x.data() + 3, got.data(), 13);  // a tail only, unaligned
        for (int i = 0; i < 13; ++i)
            ASSERT_EQ(got[i], want[3 + i]) << i;
    });
}

TEST(Kernels, ActivationPreparationMatchesScalarExactly) {
    const int64_t k = 96, rows = 5;
    auto x = random_vec(static_cast<size_t>(k * rows), 1);
    x[7] = 0.0f;
    for (int j = 0; j < 32; ++j)
        x[32 + j] = 0.0f;  // an all-zero block: scale 0
    std::vector<float> a(x.size()), b(x.size());
    std::vector<quant::BlockQ8_0> qb(rows * k / 32);
    ref::round_rows_fp16(x.data(), b.data(), k, 0, rows);
    ref::quantize_rows_q8_0(x.data(), qb.data(), k, 0, rows);
    for_each_target([&] {
        round_rows_fp16(x.data(), a.data(), k, 0, rows);
        EXPECT_EQ(a, b);
        round_rows_bf16(x.data(), a.data(), k, 0, rows);
        std::vector<float> c(x.size());
        ref::round_rows_bf16(x.data(), c.data(), k, 0, rows);
        EXPECT_EQ(a, c);
        // The packed activation layout holds the same values and scales as Q8_0 blocks.
        const quant::ActLayout al = quant::act_layout(k);
        std::vector<uint8_t> packed(al.row_bytes * rows);
        quantize_acts(x.data(), packed.data(), k, 0, rows);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t b = 0; b < k / 32; ++b) {
                const uint8_t* rec = packed.data() + r * al.row_bytes + b * quant::kActRecordBytes;
                const auto& want = qb[r * (k / 32) + b];
                float d;
                int32_t seeds[4];
                std::memcpy(&d, rec + quant::kActScaleAt, sizeof d);
                std::memcpy(seeds, rec + quant::kActSeedQ4At, sizeof seeds);
                ASSERT_EQ(d, quant::fp16_to_fp32(want.d)) << r << "," << b;
                int32_t lo = 0, hi = 0;
                for (int j = 0; j < 32; ++j) {
                    ASSERT_EQ(static_cast<int8_t>(rec[j]), want.qs[j]);
                    (j < 16 ? lo : hi) += want.qs[j];
                }
                // The Q4_0 and Q8_0 seeds, then the generic kernel's negated half sums.
                ASSERT_EQ(seeds[0], -8 * (lo + hi));
                ASSERT_EQ(seeds[1], -128 * (lo + hi));
                ASSERT_EQ(seeds[2], -lo);
                ASSERT_EQ(seeds[3], -hi);
            }
        }
    });
}

// Float-weight matmuls. Tolerance: float32 summation of K products has error at most
// ~K * FLT_EPSILON * sum|x_i w_i| (worst case); the reference sums in double.
TEST(Kernels, MatmulFloatFormatsMatchScalarTwin) {
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
        // k = 4133 is taken in K chunks (kernels/matmul.cpp) with a short last chunk and a tail.
        for (int64_t k : {16, 67, 256, 4133}) {
            const int64_t n = 37, m = 6;
            Weights w = make_weights(t, n, k, 7);
            auto x = random_vec(static_cast<size_t>(m * k), 3);
            std::vector<float> want(m * n), got(m * n), mag(m * n);
            ref::matmul_float(x.data(), m, w.view, want.data(), n, 0, n);
            // |x| . |w| for the tolerance.
            std::vector<float> ax(x.size());
            for (size_t i = 0; i < x.size(); ++i)
                ax[i] = std::fabs(x[i]);
            std::vector<float> wf(k);
            for (int64_t r = 0; r < n; ++r) {
                quant::dequantize_row(t, w.view.row(r), wf.data(), k);
                for (int64_t c = 0; c < m; ++c) {
                    double s = 0;
                    for (int64_t i = 0; i < k; ++i)
                        s += ax[c * k + i] * std::fabs(wf[i]);
                    mag[c * n + r] = static_cast<float>(s);
                }
            }
            for_each_target([&] {
                std::fill(got.begin(), got.end(), NAN);
                // Two column ranges, as the thread pool would split them.
                matmul_float(x.data(), m, w.view, got.data(), n, 0, 20);
                matmul_float(x.data(), m, w.view, got.data(), n, 20, n);
                for (size_t i = 0; i < got.size(); ++i) {
                    ASSERT_NEAR(got[i], want[i], k * FLT_EPSILON * mag[i] + 1e-30)
                        << format::tensor_type_info(t).name << " k=" << k << " i=" << i;
                }
            });
        }
    }
}

// F16 weights in the packed layout (quant/packed.h) against the scalar twin on the row-major
// weights. Shapes cover a partial last group (n % 16 != 0), K chunks with a short last one
// (k > 512), and every tile height (rows split into near-equal tiles of at most 12 on AVX-512,
// 6 on AVX2: the counts below give heights 1-12), and several tiles per column block (the first
// tile widens the weights for the others). Same tolerance as the row-major float kernels.
TEST(Kernels, MatmulF16PackedMatchesScalarTwin) {
    for (int64_t k : {16, 67, 1100}) {
        for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 12, 13, 17, 24, 31}) {
            const int64_t n = 77;
            Weights w = make_weights(TensorType::F16, n, k, 13);
            const quant::PackedLayout l = quant::packed_layout(TensorType::F16, n, k);
            std::vector<uint8_t> packed(l.total_bytes());
            quant::pack_groups(l, w.bytes.data(), w.view.row_bytes, 0, l.n_groups, packed.data());
            auto x = random_vec(static_cast<size_t>(m * k), 9);
            std::vector<float> want(m * n), got(m * n), mag(m * n, 0.0f), wf(k);
            ref::matmul_float(x.data(), m, w.view, want.data(), n, 0, n);
            for (int64_t r = 0; r < n; ++r) {
                quant::dequantize_row(TensorType::F16, w.view.row(r), wf.data(), k);
                for (int64_t c = 0; c < m; ++c) {
                    double s = 0;
                    for (int64_t i = 0; i < k; ++i)
                        s += std::fabs(x[c * k + i]) * std::fabs(wf[i]);
                    mag[c * n + r] = static_cast<float>(s);
                }
            }
            kernels::WeightView pv = w.view;
            pv.packed = packed.data();
            // Split on a group boundary, as the thread pool splits packed weights: at 32 every
            // range starts with two-group blocks; at 16 the first range is one full group.
            for (int64_t split : {32, 16}) {
                for_each_target([&] {
                    std::fill(got.begin(), got.end(), NAN);
                    matmul_float(x.data(), m, pv, got.data(), n, 0, split);
                    matmul_float(x.data(), m, pv, got.data(), n, split, n);
                    for (size_t i = 0; i < got.size(); ++i) {
                        ASSERT_NEAR(got[i], want[i], k * FLT_EPSILON * mag[i] + 1e-30)
                            << "k=" << k << " m=" << m << " split=" << split << " i=" << i;
                    }
                });
            }
        }
    }
}

// Quantised matmuls on the packed layout against the scalar twin on llama.cpp's blocks: integer
// block sums are exact on both sides, so the only error is the float32 accumulation of K/32
// scaled block sums. Shapes cover a partial row group (n % 16 != 0), several groups (n = 77:
// a pair of full groups for the two-group VNNI tile, then a partial one), and every row-tile
// remainder.
TEST(Kernels, MatmulQuantisedFormatsMatchScalarTwin) {
    for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0}) {
        for (int64_t m : {1, 2, 3, 4, 5, 8, 13, 24}) {
            for (int64_t n : {45, 77, 64, 300}) {
                for (int64_t k : {160, 64, 128}) {
                    Weights w = make_weights(t, n, k, 11);
                    const quant::PackedLayout l = quant::packed_layout(t, n, k);
                    std::vector<uint8_t> packed(l.total_bytes());
                    quant::pack_groups(l, w.bytes.data(), w.view.row_bytes, 0, l.n_groups,
                                       packed.data());
                    w.view.packed = packed.data();
                    auto x = random_vec(static_cast<size_t>(m * k), 5);
                    std::vector<quant::BlockQ8_0> xq(m * k / 32);
                    ref::quantize_rows_q8_0(x.data(), xq.data(), k, 0, m);
                    std::vector<float> want(m * n), got(m * n);
                    ref::matmul_q8(xq.data(), m, w.view, want.data(), n, 0, n);
                    const quant::ActLayout al = quant::act_layout(k);
                    std::vector<uint8_t> xa(al.row_bytes * m);
                    for_each_target([&] {
                        // The activations are quantised by the target under test too.
                        quantize_acts(x.data(), xa.data(), k, 0, m);
                        std::fill(got.begin(), got.end(), NAN);
                        matmul_q8(xa.data(), m, w.view, got.data(), n, 0, 16);
                        matmul_q8(xa.data(), m, w.view, got.data(), n, 16, n);
                        for (size_t i = 0; i < got.size(); ++i) {
                            ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i])))
                                << format::tensor_type_info(t).name << " m=" << m << " n=" << n
                                << " k=" << k << " i=" << i;
                        }
                    });
                }
            }
        }
    }
}

TEST(Kernels, Q4UnpackOrderMatchesLlamaCpp) {
    // Low nibbles hold elements 0-15, high nibbles 16-31: element j = d * (nibble - 8).
    quant::BlockQ4_0 blk{};
    blk.d = quant::fp32_to_fp16(1.0f);
    for (int j = 0; j < 16; ++j)
        blk.qs[j] = static_cast<uint8_t>((j & 15) | (((15 - j) & 15) << 4));
    float out[32];
    quant::dequantize_row(TensorType::Q4_0, &blk, out, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(out[j], static_cast<float>(j - 8));
        EXPECT_EQ(out[16 + j], static_cast<float>(7 - j));
    }
}

TEST(Kernels, RowOpsMatchScalarTwin) {
    const int64_t k = 75, rows = 3;
    auto x = random_vec(static_cast<size_t>(k * rows), 21, 3.0f);
    auto w = random_vec(static_cast<size_t>(k), 22);
    auto u = random_vec(static_cast<size_t>(k * rows), 23);
    std::vector<float> want(x.size()), got(x.size());
    for_each_target([&] {
        ref::rms_norm(x.data(), w.data(), want.data(), k, 1e-5f, 0, rows);
        rms_norm(x.data(), w.data(), got.data(), k, 1e-5f, 0, rows);
        for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_NEAR(got[i], want[i], 4 * k * FLT_EPSILON * std::fabs(want[i]) + 1e-7f);
        }
        ref::add(x.data(), u.data(), want.data(), k * rows);
        add(x.data(), u.data(), got.data(), k * rows);
        EXPECT_EQ(got, want);
        ref::swiglu(x.data(), u.data(), want.data(), k * rows);
        swiglu(x.data(), u.data(), got.data(), k * rows);
        // Highway's Exp is accurate to a few ulp; the division and product add two roundings.
        for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_NEAR(got[i], want[i], 8 * FLT_EPSILON * std::fabs(want[i]) + 1e-30f) << i;
        }
    });
}

TEST(Kernels, RopeMatchesScalarTwinBothStyles) {
    const int64_t heads = 3, hd = 16, n_rot = 16;
    auto x = random_vec(static_cast<size_t>(heads * hd), 31);
    std::vector<float> cs(n_rot / 2), sn(n_rot / 2);
    for (int i = 0; i < n_rot / 2; ++i) {
        double th = 5.0 * std::pow(10000.0, -2.0 * i / n_rot);
        cs[i] = static_cast<float>(std::cos(th));
        sn[i] = static_cast<float>(std::sin(th));
    }
    for (RopeStyle st : {RopeStyle::Norm, RopeStyle::Neox}) {
        auto want = x;
        ref::rope_row(want.data(), heads, hd, n_rot, cs.data(), sn.data(), st);
        for_each_target([&] {
            auto got = x;
            rope_row(got.data(), heads, hd, n_rot, cs.data(), sn.data(), st);
            for (size_t i = 0; i < got.size(); ++i)
                ASSERT_NEAR(got[i], want[i], 1e-6f);
        });
    }
    // NORM rotates adjacent pairs: element 1 moves into element 0's place at 90 degrees.
    float v[4] = {1, 0, 0, 0};
    float c[2] = {0, 1}, s[2] = {1, 0};
    rope_row(v, 1, 4, 4, c, s, RopeStyle::Norm);
    EXPECT_NEAR(v[1], 1.0f, 1e-7f);
    float v2[4] = {1, 0, 0, 0};
    rope_row(v2, 1, 4, 4, c, s, RopeStyle::Neox);
    EXPECT_NEAR(v2[2], 1.0f, 1e-7f);
}

TEST(Kernels, StreamingAttentionMatchesTwoPassSoftmax) {
    const int64_t hd = 32, stride = 96;
    for (int64_t n_kv : {1, 5, 64, 65, 300}) {
        auto q = random_vec(hd, 41, 2.0f);
        auto k = random_vec(static_cast<size_t>(n_kv * stride), 42);
        auto v = random_vec(static_cast<size_t>(n_kv * stride), 43);
        std::vector<float> want(hd), got(hd);
        ref::attention_head(q.data(), k.data() + 32, v.data() + 32, stride, n_kv, hd, 0.3f,
                            want.data());
        for_each_target([&] {
            attention_head(q.data(), k.data() + 32, v.data() + 32, stride, n_kv, hd, 0.3f,
                           got.data());
            for (int64_t i = 0; i < hd; ++i)
                ASSERT_NEAR(got[i], want[i], 2e-6f) << n_kv;
        });
    }
}

// The multi-row kernel against the same two-pass double-precision twin, row by row: head sizes
// with and without a vector tail and one too large for the chunk copy, groups below 8 rows (4-row
// tiles; n_q not a multiple of 4) and from 8 rows (rows in the lanes: 8, 9, 16, partial vectors
// padded), more than one 32-row group, all rows on the same keys (a dLLM window) or each
// on its own prefix (causal, n_kv[r] = first + r), key counts across the 32-key chunk boundaries,
// keys and values rows apart (copied per chunk) or contiguous (read in place, as from the
// engine's head-major cache). Tolerance: float32 rounding relative to the output's size (the
// one-row kernel is off by up to 3.4e-6 x (1 + |want|) on these cases at 128 values, 2.1e-5 at
// 320).
TEST(Kernels, MultiRowAttentionMatchesTwoPassSoftmax) {
    for (int64_t hd : {32, 33, 40, 128, 320}) {
        const int64_t q_stride = hd + 8, o_stride = hd + 4;
        for (int64_t stride : {2 * hd + 16, hd}) {
            for (int64_t n_q : {1, 3, 4, 8, 9, 16, 37}) {
                for (int64_t first : {1, 5, 64, 65, 300}) {
                    for (bool causal : {false, true}) {
                        const int64_t max_kv = first + (causal ? n_q - 1 : 0);
                        auto q = random_vec(static_cast<size_t>(n_q * q_stride), 51, 2.0f);
                        // Keys and values start hd floats in (a head slice), so one row more.
                        auto k = random_vec(static_cast<size_t>((max_kv + 1) * stride), 52);
                        auto v = random_vec(static_cast<size_t>((max_kv + 1) * stride), 53);
                        std::vector<int64_t> n_kv(n_q);
                        for (int64_t r = 0; r < n_q; ++r)
                            n_kv[r] = causal ? first + r : first;
                        std::vector<float> want(n_q * o_stride, 0.0f);
                        for (int64_t r = 0; r < n_q; ++r) {
                            ref::attention_head(q.data() + r * q_stride, k.data() + hd,
                                                v.data() + hd, stride, n_kv[r], hd, 0.3f,
                                                want.data() + r * o_stride);
                        }
                        for_each_target([&] {
                            std::vector<float> got(n_q * o_stride, 0.0f);
                            attention_rows(q.data(), q_stride, n_q, n_kv.data(), k.data() + hd,
                                           v.data() + hd, stride, hd, 0.3f, got.data(), o_stride);
                            // Longer dot products round more: at 320 values the one-row kernel's
                            // own error on these rows reaches 2.1e-5.
                            const float tol = hd > 128 ? 2.5e-5f : 5e-6f;
                            for (size_t i = 0; i < got.size(); ++i) {
                                ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i])))
                                    << "hd=" << hd << " n_q=" << n_q << " first=" << first
                                    << " causal=" << causal << " stride=" << stride << " i=" << i;
                            }
                        });
                    }
                }
            }
        }
    }
}

// The multi-row kernel on fp16 keys and values (the fp16 KV cache) against the two-pass
// twin on the same values widened: once widened the kernel computes exactly as on float keys,
// so the float kernel's tolerance holds. Rows-in-lanes groups and 4-row tiles, causal and not,
// keys contiguous (the engine's head-major cache) and rows apart; also with the exp table.
TEST(Kernels, MultiRowAttentionOnFp16KeysMatchesTwin) {
    const ExpLut lut;
    for (int64_t hd : {32, 33, 128}) {
        const int64_t q_stride = hd + 8, o_stride = hd + 4;
        for (int64_t stride : {hd, 2 * hd + 16}) {
            for (int64_t n_q : {1, 5, 16, 37}) {
                for (bool causal : {false, true}) {
                    const int64_t first = 70, max_kv = first + (causal ? n_q - 1 : 0);
                    auto q = random_vec(static_cast<size_t>(n_q * q_stride), 81, 2.0f);
                    auto kf = random_vec(static_cast<size_t>(max_kv * stride), 82);
                    auto vf = random_vec(static_cast<size_t>(max_kv * stride), 83);
                    std::vector<uint16_t> k(kf.size()), v(vf.size());
                    for (size_t i = 0; i < kf.size(); ++i) {
                        k[i] = quant::fp32_to_fp16(kf[i]);
                        v[i] = quant::fp32_to_fp16(vf[i]);
                        kf[i] = quant::fp16_to_fp32(k[i]);
                        vf[i] = quant::fp16_to_fp32(v[i]);
                    }
                    std::vector<int64_t> n_kv(n_q);
                    std::vector<float> want(n_q * o_stride, 0.0f);
                    for (int64_t r = 0; r < n_q; ++r) {
                        n_kv[r] = causal ? first + r : first;
                        ref::attention_head(q.data() + r * q_stride, kf.data(), vf.data(), stride,
                                            n_kv[r], hd, 0.3f, want.data() + r * o_stride);
                    }
                    for_each_target([&] {
                        std::vector<float> got(n_q * o_stride, 0.0f);
                        attention_rows_f16(q.data(), q_stride, n_q, n_kv.data(), k.data(), v.data(),
                                           stride, hd, 0.3f, got.data(), o_stride);
                        for (size_t i = 0; i < got.size(); ++i) {
                            ASSERT_NEAR(got[i], want[i], 5e-6f * (1.0f + std::fabs(want[i])))
                                << "hd=" << hd << " stride=" << stride << " n_q=" << n_q
                                << " causal=" << causal << " i=" << i;
                        }
                        // With the exp table (the LUT test's tolerance), on the fp16 keys and on
                        // the same values as float keys (read in place when contiguous).
                        for (bool f16 : {true, false}) {
                            std::fill(got.begin(), got.end(), 0.0f);
                            if (f16) {
                                attention_rows_f16(q.data(), q_stride, n_q, n_kv.data(), k.data(),
                                                   v.data(), stride, hd, 0.3f, got.data(), o_stride,
                                                   lut.data());
                            } else {
                                attention_rows(q.data(), q_stride, n_q, n_kv.data(), kf.data(),
                                               vf.data(), stride, hd, 0.3f, got.data(), o_stride,
                                               lut.data());
                            }
                            for (size_t i = 0; i < got.size(); ++i) {
                                ASSERT_NEAR(got[i], want[i], 2e-3f)
                                    << "LUT f16=" << f16 << " hd=" << hd << " stride=" << stride
                                    << " n_q=" << n_q << " causal=" << causal << " i=" << i;
                            }
                        }
                    });
                }
            }
        }
    }
    // Heads past the chunk buffers are refused, with the limit named.
    std::vector<float> q(300), out(300);
    std::vector<uint16_t> kv(300);
    const int64_t one = 1;
    try {
        attention_rows_f16(q.data(), 300, 1, &one, kv.data(), kv.data(), 300, 300, 1.0f, out.data(),
                           300);
        ADD_FAILURE() << "a 300-value head was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("at most 256"), std::string::npos) << e.what();
    }
}

// ---- Excluded keys (shadow rows: a row at position p sees every key but key p) ----
namespace {

// Row r's excluded key among its n_kv keys, cycling (from `shift`) through: none, key 0, the
// last key, inside the first 32-key chunk, both sides of the first chunk boundary (31, 32),
// inside the second chunk, both sides of the second boundary (63, 64). Keys past the row's end
// wrap around into its range; a row with one key excludes none (it must keep one visible).
int64_t excluded_key_for(int64_t r, int64_t shift, int64_t n_kv) {
    const int64_t kinds[] = {-1, 0, n_kv - 1, 5, 31, 32, 45, 63, 64};
    const int64_t e = kinds[(r + shift) % 9];
    return n_kv < 2 || e < 0 ? -1 : e % n_kv;
}

// One head's keys and values (fp16-representable, so the float and fp16 kernels see the same
// numbers), n_q query rows, each row's key count and excluded key, and the twin's outputs.
struct ExclusionCase {
    int64_t hd, q_stride, o_stride, stride, n_q;
    std::vector<float> q, kf, vf;
    std::vector<uint16_t> k16, v16;
    std::vector<int64_t> n_kv, excl;
    std::vector<float> want;
};

ExclusionCase exclusion_case(int64_t hd, int64_t stride, int64_t n_q, int64_t first, bool causal,
                             int64_t shift) {
    ExclusionCase c{hd, hd + 8, hd + 4, stride, n_q, {}, {}, {}, {}, {}, {}, {}, {}};
    const int64_t max_kv = first + (causal ? n_q - 1 : 0);
    c.q = random_vec(static_cast<size_t>(n_q * c.q_stride), 91, 2.0f);
    c.kf = random_vec(static_cast<size_t>(max_kv * stride), 92);
    c.vf = random_vec(static_cast<size_t>(max_kv * stride), 93);
    c.k16.resize(c.kf.size());
    c.v16.resize(c.vf.size());
    for (size_t i = 0; i < c.kf.size(); ++i) {
        c.k16[i] = quant::fp32_to_fp16(c.kf[i]);
        c.v16[i] = quant::fp32_to_fp16(c.vf[i]);
        c.kf[i] = quant::fp16_to_fp32(c.k16[i]);
        c.vf[i] = quant::fp16_to_fp32(c.v16[i]);
    }
    c.n_kv.resize(n_q);
    c.excl.resize(n_q);
    c.want.assign(n_q * c.o_stride, 0.0f);
    for (int64_t r = 0; r < n_q; ++r) {
        c.n_kv[r] = causal ? first + r : first;
        c.excl[r] = excluded_key_for(r, shift, c.n_kv[r]);
        ref::attention_head(c.q.data() + r * c.q_stride, c.kf.data(), c.vf.data(), stride,
                            c.n_kv[r], hd, 0.3f, c.want.data() + r * c.o_stride, c.excl[r]);
    }
    return c;
}

}  // namespace

// The multi-row kernel with excluded keys against the twin that leaves the same key out, row by
// row: rows with and without an excluded key mixed in one call, the excluded key at 0, at the
// last key, inside a 32-key chunk and on both sides of a chunk boundary (every row sees every
// kind across the shifts), 4-row tiles (1-7 rows) and rows in the lanes (8 or more, two groups
// at 37), causal and equal key counts (2 keys: a row keeps one; 33: an excluded key 32 alone in
// its chunk), heads with and without a vector tail and one past the chunk copy (320). The
// multi-row test's tolerances: the masked key's weight is exactly 0, so nothing else changes.
TEST(Kernels, MultiRowAttentionWithExcludedKeysMatchesTwin) {
    for (int64_t hd : {32, 33, 128, 320}) {
        for (int64_t stride : {hd, 2 * hd + 16}) {
            for (int64_t n_q : {1, 3, 4, 7, 8, 9, 16, 37}) {
                for (int64_t first : {2, 33, 70}) {
                    for (bool causal : {false, true}) {
                        for (int64_t shift = 0; shift < (n_q < 9 ? 9 : 1); ++shift) {
                            const ExclusionCase c =
                                exclusion_case(hd, stride, n_q, first, causal, shift);
                            for_each_target([&] {
                                std::vector<float> got(n_q * c.o_stride, 0.0f);
                                attention_rows(c.q.data(), c.q_stride, n_q, c.n_kv.data(),
                                               c.kf.data(), c.vf.data(), stride, hd, 0.3f,
                                               got.data(), c.o_stride, nullptr, c.excl.data());
                                const float tol = hd > 128 ? 2.5e-5f : 5e-6f;
                                for (size_t i = 0; i < got.size(); ++i) {
                                    ASSERT_NEAR(got[i], c.want[i],
                                                tol * (1.0f + std::fabs(c.want[i])))
                                        << "hd=" << hd << " n_q=" << n_q << " first=" << first
                                        << " causal=" << causal << " stride=" << stride
                                        << " shift=" << shift << " i=" << i;
                                }
                            });
                        }
                    }
                }
            }
        }
    }
}

// The same exclusions on fp16 keys and values (widened per chunk, then as on float keys: the
// float tolerance) and with the exp table (the LUT test's 2e-3, on fp16 and float keys): the
// table's entry for the masked score's +inf index is 0.
TEST(Kernels, MultiRowAttentionWithExcludedKeysOnFp16AndLutMatchesTwin) {
    const ExpLut lut;
    for (int64_t hd : {32, 33, 128}) {
        for (int64_t stride : {hd, 2 * hd + 16}) {
            for (int64_t n_q : {1, 5, 7, 16, 37}) {
                for (int64_t first : {33, 70}) {
                    for (bool causal : {false, true}) {
                        for (int64_t shift = 0; shift < (n_q < 9 ? 9 : 1); ++shift) {
                            const ExclusionCase c =
                                exclusion_case(hd, stride, n_q, first, causal, shift);
                            for_each_target([&] {
                                for (int variant = 0; variant < 3; ++variant) {
                                    std::vector<float> got(n_q * c.o_stride, 0.0f);
                                    if (variant == 2) {
                                        attention_rows(c.q.data(), c.q_stride, n_q, c.n_kv.data(),
                                                       c.kf.data(), c.vf.data(), stride, hd, 0.3f,
                                                       got.data(), c.o_stride, lut.data(),
                                                       c.excl.data());
                                    } else {
                                        attention_rows_f16(
                                            c.q.data(), c.q_stride, n_q, c.n_kv.data(),
                                            c.k16.data(), c.v16.data(), stride, hd, 0.3f,
                                            got.data(), c.o_stride,
                                            variant == 1 ? lut.data() : nullptr, c.excl.data());
                                    }
                                    for (size_t i = 0; i < got.size(); ++i) {
                                        const float tol =
                                            variant == 0 ? 5e-6f * (1.0f + std::fabs(c.want[i]))
                                                         : 2e-3f;
                                        ASSERT_NEAR(got[i], c.want[i], tol)
                                            << (variant == 0   ? "fp16"
                                                : variant == 1 ? "fp16 LUT"
                                                               : "float LUT")
                                            << " hd=" << hd << " n_q=" << n_q << " first=" << first
                                            << " causal=" << causal << " stride=" << stride
                                            << " shift=" << shift << " i=" << i;
                                    }
                                }
                            });
                        }
                    }
                }
            }
        }
    }
}

// An independent check that does not go through the twin's exclusion: rows that all exclude key
// p give what the plain kernel (no exclusions) gives over the keys with key p physically removed
// (compacted K and V, one key fewer per row), and so does the twin. p at 0, at the chunk
// boundary (31, 32), inside a chunk (40) and at the shortest row's last key; tiles and lanes,
// float and fp16 keys. The two kernel runs group the keys into chunks differently (every key
// after p moves one place), so they agree to float32 rounding, not bit for bit; each is within
// the multi-row test's tolerance of the exact result, and so is their difference here.
TEST(Kernels, ExcludedKeyEqualsThatKeyRemoved) {
    const int64_t first = 70;
    for (int64_t hd : {40, 128}) {
        const int64_t q_stride = hd + 8, o_stride = hd + 4;
        for (int64_t stride : {hd, 2 * hd + 16}) {
            for (int64_t n_q : {1, 3, 8, 16, 37}) {
                const int64_t max_kv = first + n_q - 1;
                auto q = random_vec(static_cast<size_t>(n_q * q_stride), 95, 2.0f);
                auto k = random_vec(static_cast<size_t>(max_kv * stride), 96);
                auto v = random_vec(static_cast<size_t>(max_kv * stride), 97);
                std::vector<uint16_t> k16(k.size()), v16(v.size());
                to_fp16(k.data(), k16.data(), static_cast<int64_t>(k.size()));
                to_fp16(v.data(), v16.data(), static_cast<int64_t>(v.size()));
                std::vector<int64_t> n_kv(n_q);
                for (int64_t r = 0; r < n_q; ++r)
                    n_kv[r] = first + r;
                for (int64_t p : {int64_t{0}, int64_t{31}, int64_t{32}, int64_t{40}, first - 1}) {
                    SCOPED_TRACE("hd=" + std::to_string(hd) + " stride=" + std::to_string(stride) +
                                 " n_q=" + std::to_string(n_q) + " p=" + std::to_string(p));
                    // Key p removed: the rows after it move up one place.
                    std::vector<float> kc, vc;
                    std::vector<uint16_t> kc16, vc16;
                    for (int64_t j = 0; j < max_kv; ++j) {
                        if (j == p) continue;
                        const size_t a = static_cast<size_t>(j * stride), b = a + stride;
                        kc.insert(kc.end(), k.begin() + a, k.begin() + b);
                        vc.insert(vc.end(), v.begin() + a, v.begin() + b);
                        kc16.insert(kc16.end(), k16.begin() + a, k16.begin() + b);
                        vc16.insert(vc16.end(), v16.begin() + a, v16.begin() + b);
                    }
                    const std::vector<int64_t> excl(n_q, p);
                    std::vector<int64_t> n_removed(n_q);
                    for (int64_t r = 0; r < n_q; ++r)
                        n_removed[r] = n_kv[r] - 1;
                    // The twin both ways, in double: equal to float rounding of its result.
                    for (int64_t r = 0; r < n_q; ++r) {
                        std::vector<float> a(hd), b(hd);
                        ref::attention_head(q.data() + r * q_stride, k.data(), v.data(), stride,
                                            n_kv[r], hd, 0.3f, a.data(), p);
                        ref::attention_head(q.data() + r * q_stride, kc.data(), vc.data(), stride,
                                            n_removed[r], hd, 0.3f, b.data());
                        for (int64_t i = 0; i < hd; ++i)
                            ASSERT_NEAR(a[i], b[i], 1e-6f * (1.0f + std::fabs(b[i]))) << r;
                    }
                    for_each_target([&] {
                        for (bool f16 : {false, true}) {
                            std::vector<float> got(n_q * o_stride, 0.0f),
                                want(n_q * o_stride, 0.0f);
                            if (f16) {
                                attention_rows_f16(q.data(), q_stride, n_q, n_kv.data(), k16.data(),
                                                   v16.data(), stride, hd, 0.3f, got.data(),
                                                   o_stride, nullptr, excl.data());
                                attention_rows_f16(q.data(), q_stride, n_q, n_removed.data(),
                                                   kc16.data(), vc16.data(), stride, hd, 0.3f,
                                                   want.data(), o_stride);
                            } else {
                                attention_rows(q.data(), q_stride, n_q, n_kv.data(), k.data(),
                                               v.data(), stride, hd, 0.3f, got.data(), o_stride,
                                               nullptr, excl.data());
                                attention_rows(q.data(), q_stride, n_q, n_removed.data(), kc.data(),
                                               vc.data(), stride, hd, 0.3f, want.data(), o_stride);
                            }
                            for (size_t i = 0; i < got.size(); ++i) {
                                ASSERT_NEAR(got[i], want[i], 5e-6f * (1.0f + std::fabs(want[i])))
                                    << "f16=" << f16 << " i=" << i;
                            }
                        }
                    });
                }
            }
        }
    }
}

// The contract's caller errors, refused in every build (release included): a row whose only
// key is excluded has nothing to attend to, and an excluded key must be -1 or one of its row's.
TEST(Kernels, ExcludingARowsOnlyKeyIsRefused) {
    const int64_t hd = 8;
    const auto q = random_vec(2 * hd, 98), kv = random_vec(2 * hd, 99);
    std::vector<float> out(2 * hd);
    auto refusal = [&](std::vector<int64_t> n_kv, std::vector<int64_t> excl) {
        try {
            attention_rows(q.data(), hd, 2, n_kv.data(), kv.data(), kv.data(), hd, hd, 1.0f,
                           out.data(), hd, nullptr, excl.data());
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(refusal({2, 1}, {-1, 0}).find("row 1 excludes its only key"), std::string::npos);
    EXPECT_NE(refusal({2, 2}, {2, -1}).find("row 0 excludes key 2"), std::string::npos);
    EXPECT_NE(refusal({2, 2}, {-2, -1}).find("row 0 excludes key -2"), std::string::npos);
    EXPECT_EQ(refusal({2, 2}, {1, -1}), "accepted");
    EXPECT_EQ(refusal({1, 1}, {-1, -1}), "accepted");
}

// Fused sampling reductions, chunk by chunk and merged, against the whole-row reference in
// double. Argmax and runner-up must be identical (ties to the lowest index); the normaliser and
// the entropy agree to float32 accumulation error over the chunks (1e-5 relative here).
TEST(Kernels, RowStatsChunksMatchTheWholeRowReference) {
    const int64_t n = 1000, rows = 6;
    auto x = random_vec(static_cast<size_t>(n * rows), 51, 3.0f);
    float* r1 = x.data() + n;  // row 1: ties at the maximum
    r1[10] = r1[500] = 50.0f;
    float* r2 = x.data() + 2 * n;  // row 2: NaN and -inf entries
    r2[0] = NAN;
    r2[3] = -INFINITY;
    r2[999] = NAN;
    float* r3 = x.data() + 3 * n;  // row 3: two +inf
    r3[7] = INFINITY;
    r3[900] = INFINITY;
    float* r4 = x.data() + 4 * n;  // row 4: all -inf but one
    for (int64_t i = 0; i < n; ++i)
        r4[i] = -INFINITY;
    r4[321] = 1.0f;
    float* r5 = x.data() + 5 * n;  // row 5: only NaN and -inf
    for (int64_t i = 0; i < n; ++i)
        r5[i] = i % 2 ? NAN : -INFINITY;
    for_each_target([&] {
        for (int64_t chunk : {1000, 256, 7}) {
            std::vector<RowStats> acc(rows), part(rows);
            for (int64_t v0 = 0; v0 < n; v0 += chunk) {
                const int64_t len = std::min(chunk, n - v0);
                row_stats_chunk(x.data() + v0, rows, n, len, v0, part.data());
                for (int64_t r = 0; r < rows; ++r)
                    row_stats_merge(acc[r], part[r]);
            }
            for (int64_t r = 0; r < rows; ++r) {
                SCOPED_TRACE("row " + std::to_string(r) + " chunk " + std::to_string(chunk));
                const RowStats want = ref::row_stats(x.data() + r * n, n);
                EXPECT_EQ(acc[r].token, want.token);
                EXPECT_EQ(acc[r].second, want.second);
                EXPECT_EQ(acc[r].max, want.max);
                EXPECT_NEAR(row_confidence(acc[r]), row_confidence(want),
                            1e-5f * row_confidence(want));
                EXPECT_NEAR(row_entropy(acc[r]), row_entropy(want),
                            1e-5f * std::fabs(row_entropy(want)) + 1e-5f);
            }
        }
    });
    // The documented edge cases.
    const RowStats tie = ref::row_stats(r1, n);
    EXPECT_EQ(tie.token, 10);
    EXPECT_EQ(tie.second, 500);
    EXPECT_NEAR(ref::row_stats(r3, n).sum_exp, 2.0f, 0);  // two +inf share the mass
    EXPECT_EQ(ref::row_stats(r3, n).token, 7);
    EXPECT_EQ(ref::row_stats(r4, n).token, 321);
    EXPECT_FLOAT_EQ(row_confidence(ref::row_stats(r4, n)), 1.0f);
    EXPECT_EQ(ref::row_stats(r5, n).token, -1);
    EXPECT_EQ(row_confidence(ref::row_stats(r5, n)), 0.0f);
}

// LUT exp: the only error is rounding x to fp16 before the lookup, a relative error of exp(x)
// of about |x| * 2^-11; over a softmax that is below ~2e-3 for these score ranges.
TEST(Kernels, LutExpAttentionStaysCloseToExact) {
    const ExpLut lut;
    EXPECT_EQ(lut(0.0f), 1.0f);
    EXPECT_NEAR(lut(-1.0f), std::exp(-1.0f), std::exp(-1.0f) * 1e-3f);
    EXPECT_EQ(lut(-1e6f), 0.0f);
    const int64_t hd = 32, stride = 64;
    for (int64_t n_kv : {1, 7, 64, 200}) {
        auto q = random_vec(hd, 61, 1.5f);
        auto k = random_vec(static_cast<size_t>(n_kv * stride), 62);
        auto v = random_vec(static_cast<size_t>(n_kv * stride), 63);
        std::vector<float> want(hd), got(hd);
        ref::attention_head(q.data(), k.data(), v.data(), stride, n_kv, hd, 0.25f, want.data());
        for_each_target([&] {
            attention_head_lut(q.data(), k.data(), v.data(), stride, n_kv, hd, 0.25f, got.data(),
                               lut);
            for (int64_t i = 0; i < hd; ++i)
                ASSERT_NEAR(got[i], want[i], 2e-3f) << n_kv;
        });
    }
    // The engine's multi-row kernel with the table: 37 rows (two groups), causal key ranges.
    const int64_t n_q = 37, first = 90;
    auto q = random_vec(static_cast<size_t>(n_q * hd), 64, 1.5f);
    auto k = random_vec(static_cast<size_t>((first + n_q) * stride), 65);
    auto v = random_vec(static_cast<size_t>((first + n_q) * stride), 66);
    std::vector<int64_t> n_kv(n_q);
    std::vector<float> want(n_q * hd), got(n_q * hd);
    for (int64_t r = 0; r < n_q; ++r) {
        n_kv[r] = first + r;
        ref::attention_head(q.data() + r * hd, k.data(), v.data(), stride, n_kv[r], hd, 0.25f,
                            want.data() + r * hd);
    }
    for_each_target([&] {
        attention_rows(q.data(), hd, n_q, n_kv.data(), k.data(), v.data(), stride, hd, 0.25f,
                       got.data(), hd, lut.data());
        for (int64_t i = 0; i < n_q * hd; ++i)
            ASSERT_NEAR(got[i], want[i], 2e-3f) << i;
    });
}

// LUT dequantisation reproduces the exact Q4_0 values (the table holds d * (q - 8) in float32),
// so against the float reference on dequantised weights only summation order differs.
TEST(Kernels, LutDequantMatmulMatchesDequantisedReference) {
    const int64_t n = 37, k = 160;
    for (int64_t m : {1, 3, 4, 6}) {
        Weights w = make_weights(TensorType::Q4_0, n, k, 71);
        const quant::PackedLayout l = quant::packed_layout(TensorType::Q4_0, n, k);
        std::vector<uint8_t> packed(l.total_bytes());
        quant::pack_groups(l, w.bytes.data(), w.view.row_bytes, 0, l.n_groups, packed.data());
        w.view.packed = packed.data();
        auto x = random_vec(static_cast<size_t>(m * k), 72);
        std::vector<float> want(m * n), got(m * n);
        ref::matmul_float(x.data(), m, w.view, want.data(), n, 0, n);
        for_each_target([&] {
            matmul_q4_lut(x.data(), m, w.view, got.data(), n, 0, 16);
            matmul_q4_lut(x.data(), m, w.view, got.data(), n, 16, n);
            for (size_t i = 0; i < got.size(); ++i) {
                ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << i;
            }
            matmul_q4_dequant(x.data(), m, w.view, got.data(), n, 0, n);
            for (size_t i = 0; i < got.size(); ++i) {
                ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << i;
            }
        });
    }
}

// --simd: every target this build and CPU offer can be named (in any case) and then runs; other
// names are refused with the list of those that exist.
TEST(Kernels, LimitSimdSelectsTheNamedTargetOrSaysWhichExist) {
    for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
        std::string lower = hwy::TargetName(t);
        for (char& c : lower)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        kernels::limit_simd(lower);
        EXPECT_STREQ(kernels::active_target(), hwy::TargetName(t));
    }
    // A target of the other architecture is never compiled here.
#if HWY_ARCH_X86
    const std::string foreign = "SVE2";
#else
    const std::string foreign = "AVX2";
#endif
    try {
        kernels::limit_simd(foreign);
        ADD_FAILURE() << foreign << " accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--simd " + foreign), std::string::npos) << e.what();
        EXPECT_NE(
            std::string(e.what()).find(hwy::TargetName(hwy::SupportedAndGeneratedTargets()[0])),
            std::string::npos)
            << e.what();
    }
    hwy::SetSupportedTargetsForTest(0);
}

// The packed layout round trip: every row's values come back as llama.cpp's block stores them
// (Q8_0 is stored with the sign bit flipped, Q4_0 as nibbles), and padding rows as value 0.
TEST(Kernels, PackedBlocksUnpackToTheSourceValues) {
    for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0}) {
        const int64_t n = 20, k = 64;  // two groups, the second with 12 padding rows
        Weights w = make_weights(t, n, k, 5);
        const quant::PackedLayout l = quant::packed_layout(t, n, k);
        std::vector<uint8_t> packed(l.total_bytes());
        quant::pack_groups(l, w.bytes.data(), w.view.row_bytes, 0, l.n_groups, packed.data());
        for (int64_t row = 0; row < l.n_groups * quant::kPackRows; ++row) {
            const uint8_t* group = packed.data() + (row / quant::kPackRows) * l.group_bytes;
            for (int64_t b = 0; b < l.n_blocks; ++b) {
                int8_t got[quant::kQK];
                quant::unpack_block(l, group, b, static_cast<int>(row % quant::kPackRows), got);
                for (int i = 0; i < quant::kQK; ++i) {
                    int want = 0;
                    if (row < n && t == TensorType::Q8_0) {
                        want = reinterpret_cast<const quant::BlockQ8_0*>(w.bytes.data() +
                                                                         row * w.view.row_bytes)[b]
                                   .qs[i];
                    } else if (row < n) {
                        const auto& blk = reinterpret_cast<const quant::BlockQ4_0*>(
                            w.bytes.data() + row * w.view.row_bytes)[b];
                        want = (i < 16 ? (blk.qs[i] & 0x0f) : (blk.qs[i - 16] >> 4)) - 8;
                    }
                    ASSERT_EQ(got[i], want) << format::tensor_type_info(t).name << " row " << row
                                            << " block " << b << " i " << i;
                }
            }
        }
    }
}
