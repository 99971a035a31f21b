// The NPU's building blocks below the device: the tile-aligned weight formats (quant/tile.h), the
// profiles, the cost model (the staircase) and the address window (npu/).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "hwy/highway.h"
#include "hwy/targets.h"
#include "kernels/tile_gemm.h"
#include "npu/address_window.h"
#include "npu/cost_model.h"
#include "npu/profile.h"
#include "npu/tile_engine.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/tile.h"
#include "tests/test_util.h"
#include "util/error.h"

using namespace llada;
using quant::TileType;

namespace {

std::vector<float> random_matrix(int64_t n, int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 0.5f);
    std::vector<float> v(static_cast<size_t>(n * k));
    for (auto& x : v)
        x = dist(rng);
    return v;
}

using llada::test::for_each_target;

std::vector<uint8_t> to_tiles(const quant::TileLayout& l, const std::vector<float>& w) {
    std::vector<uint8_t> out(l.total_bytes());
    quant::quantize_tile_strips(l, w.data(), l.n_cols, 0, l.n_strips, out.data());
    return out;
}

}  // namespace

TEST(TileFormat, SizesAreTheDocumentedOnes) {
    const auto q4 = quant::tile_layout(TileType::TQ4, 64, 96);
    EXPECT_EQ(q4.tile_bytes, 576u);  // 4 super-blocks of 144 bytes
    EXPECT_EQ(q4.n_strips, 2);
    EXPECT_EQ(q4.k_tiles, 3);
    EXPECT_DOUBLE_EQ(q4.total_bytes() * 8.0 / (64 * 96), 4.5);  // bits per weight
    const auto q8 = quant::tile_layout(TileType::TQ8, 64, 96);
    EXPECT_DOUBLE_EQ(q8.total_bytes() * 8.0 / (64 * 96), 8.5);
    const auto f16 = quant::tile_layout(TileType::TF16, 64, 96);
    EXPECT_DOUBLE_EQ(f16.total_bytes() * 8.0 / (64 * 96), 16.0);
    // Padding to whole tiles: 33 x 33 takes 2 x 2 tiles.
    const auto pad = quant::tile_layout(TileType::TQ4, 33, 33);
    EXPECT_EQ(pad.total_bytes(), 4u * 576u);
}

TEST(TileFormat, PositionsFollowTheHmxWeightOrder) {
    // A 128-byte fp16 vector (64 positions) holds one pair of inputs for all 32 outputs.
    EXPECT_EQ(quant::tile_position(0, 0), 0);
    EXPECT_EQ(quant::tile_position(0, 1), 1);
    EXPECT_EQ(quant::tile_position(1, 0), 2);
    EXPECT_EQ(quant::tile_position(31, 1), 63);
    EXPECT_EQ(quant::tile_position(0, 2), 64);
    // A group (32 positions) is a 2x16 fragment: outputs 0-15 of inputs 0-1, then 16-31.
    EXPECT_EQ(quant::tile_position(15, 1) / 32, 0);
    EXPECT_EQ(quant::tile_position(16, 0) / 32, 1);
    // Every position is used once.
    std::vector<int> seen(1024, 0);
    for (int n = 0; n < 32; ++n)
        for (int k = 0; k < 32; ++k)
            ++seen[quant::tile_position(n, k)];
    for (int c : seen)
        EXPECT_EQ(c, 1);
}

// Each group of a TQ4/TQ8 matrix is exactly llama.cpp's Q4_0/Q8_0 reference quantiser applied to
// the 2x16 fragment's 32 values in position order.
TEST(TileFormat, GroupsAreTheReferenceQuantiserOnTheirFragment) {
    const int64_t N = 70, K = 100;  // neither a multiple of 32: padding is zero
    const auto w = random_matrix(N, K, 7);
    for (TileType t : {TileType::TQ4, TileType::TQ8}) {
        SCOPED_TRACE(quant::tile_type_name(t));
        const auto l = quant::tile_layout(t, N, K);
        const auto tiles = to_tiles(l, w);
        for (int64_t nt = 0; nt < l.n_strips; ++nt) {
            for (int64_t kt = 0; kt < l.k_tiles; ++kt) {
                for (int g = 0; g < 32; ++g) {
                    float vals[32], want[32];
                    for (int i = 0; i < 32; ++i) {
                        const int64_t n = nt * 32 + 16 * (g % 2) + i / 2;
                        const int64_t k = kt * 32 + 2 * (g / 2) + i % 2;
                        vals[i] = n < N && k < K ? w[n * K + k] : 0.0f;
                    }
                    if (t == TileType::TQ4) {
                        quant::BlockQ4_0 b;
                        quant::quantize_row_q4_0(vals, &b, 32);
                        quant::dequantize_row(format::TensorType::Q4_0, &b, want, 32);
                    } else {
                        quant::BlockQ8_0 b;
                        quant::quantize_row_q8_0(vals, &b, 32);
                        quant::dequantize_row(format::TensorType::Q8_0, &b, want, 32);
                    }
                    for (int i = 0; i < 32; ++i) {
                        const int64_t n = nt * 32 + 16 * (g % 2) + i / 2;
                        const int64_t k = kt * 32 + 2 * (g / 2) + i % 2;
                        ASSERT_EQ(quant::tile_value(l, tiles.data(), n, k), want[i])
                            << "n " << n << " k " << k;
                    }
                }
            }
        }
    }
}

TEST(TileFormat, QuantisationErrorIsWithinTheGroupStep) {
    const int64_t N = 64, K = 128;
    const auto w = random_matrix(N, K, 3);
    for (TileType t : {TileType::TQ4, TileType::TQ8, TileType::TF16}) {
        const auto l = quant::tile_layout(t, N, K);
        const auto tiles = to_tiles(l, w);
        // Half a quantisation step of the largest group (|x| <= ~2.5 for N(0, 0.5) values):
        // Q4 step amax/8, Q8 step amax/127, fp16 relative 2^-11.
        const double bound = t == TileType::TQ4 ? 2.5 / 8 : t == TileType::TQ8 ? 2.5 / 127 : 2e-3;
        double worst = 0;
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k)
                worst = std::max(worst, std::fabs(double(quant::tile_value(l, tiles.data(), n, k)) -
                                                  w[n * K + k]));
        EXPECT_LE(worst, bound) << quant::tile_type_name(t);
        EXPECT_GT(worst, 0.0);
    }
}

TEST(TileFormat, StripDequantisationMatchesTheScalarReference) {
    const int64_t N = 70, K = 100;
    const auto w = random_matrix(N, K, 11);
    for (TileType t : {TileType::TQ4, TileType::TQ8, TileType::TF16}) {
        SCOPED_TRACE(quant::tile_type_name(t));
        const auto l = quant::tile_layout(t, N, K);
        const auto tiles = to_tiles(l, w);
        const int64_t ldo = l.k_tiles * 32;
        std::vector<float> exact(32 * ldo), lut(32 * ldo);
        for (int64_t s = 0; s < l.n_strips; ++s) {
            quant::dequantize_tile_strip(l, tiles.data() + s * l.strip_bytes(), exact.data(), ldo,
                                         false);
            quant::dequantize_tile_strip(l, tiles.data() + s * l.strip_bytes(), lut.data(), ldo,
                                         true);
            for (int n = 0; n < 32; ++n) {
                for (int64_t k = 0; k < ldo; ++k) {
                    const float ref = quant::tile_value(l, tiles.data(), s * 32 + n, k);
                    ASSERT_EQ(exact[n * ldo + k], ref);
                    // The NPU's 16-entry tables hold fp16 values.
                    ASSERT_EQ(lut[n * ldo + k], quant::round_to_fp16(ref));
                    if (s * 32 + n >= N || k >= K) {
                        ASSERT_EQ(ref, 0.0f);
                    }
                }
            }
        }
    }
}

// The SIMD strip dequantisation (input-major) is bit-identical to the scalar reference on every
// instruction set: both round d * q to fp16 to nearest even.
TEST(TileKernels, StripDequantisationMatchesTheScalarTwinOnEveryTarget) {
    const int64_t N = 64, K = 96;
    const auto w = random_matrix(N, K, 21);
    for (TileType t : {TileType::TQ4, TileType::TQ8, TileType::TF16}) {
        SCOPED_TRACE(quant::tile_type_name(t));
        const auto l = quant::tile_layout(t, N, K);
        const auto tiles = to_tiles(l, w);
        std::vector<float> want(l.k_tiles * 32 * 32), got(want.size());
        for_each_target([&] {
            for (int64_t s = 0; s < l.n_strips; ++s) {
                const uint8_t* strip = tiles.data() + s * l.strip_bytes();
                quant::dequantize_tile_strip_kn(l, strip, want.data(), true);
                kernels::dequant_tile_strip_kn(l, strip, got.data());
                ASSERT_EQ(got, want);
                // Input-major: element (n, k) of the strip at k * 32 + n.
                EXPECT_EQ(want[5 * 32 + 7],
                          quant::round_to_fp16(quant::tile_value(l, tiles.data(), s * 32 + 7, 5)));
            }
        });
    }
}

// The outer-product matmul against its scalar twin: float32 sums in another order, so within a
// few ulps of the largest partial sum (|x|, |w| <= ~2.5, k = 100: sums below ~60; 1e-4 allowed).
TEST(TileKernels, MatmulMatchesTheScalarTwinOnEveryTarget) {
    const int64_t K = 100;
    for (int64_t m_rows : {1, 3, 8, 17}) {
        for (int64_t n : {32, 7}) {
            const auto x = random_matrix(m_rows, K, 5);
            const auto w = random_matrix(K, 32, 6);
            std::vector<float> want(m_rows * 40, -1.0f), got(want);
            kernels::matmul_kn32_ref(x.data(), m_rows, K, w.data(), want.data(), 40, n);
            for_each_target([&] {
                std::fill(got.begin(), got.end(), -1.0f);
                kernels::matmul_kn32(x.data(), m_rows, K, w.data(), got.data(), 40, n);
                for (size_t i = 0; i < got.size(); ++i) {
                    ASSERT_NEAR(got[i], want[i], 1e-4)
                        << "m " << m_rows << " n " << n << " at " << i;
                }
            });
        }
    }
}

TEST(NpuProfile, KnownProfilesHaveTheirPublishedConstants) {
    for (const auto& name : npu::profile_names()) {
        const npu::Profile p = npu::find_profile(name);
        EXPECT_EQ(p.name, name);
        EXPECT_GT(p.matrix_tflops, 0);
        EXPECT_GT(p.vector_gflops, 0);
        EXPECT_GT(p.dram_gbps, 0);
        EXPECT_GT(p.host_copy_gbps, 0);
    }
    const auto v79 = npu::find_profile("sm8750");
    EXPECT_EQ(v79.tile_rows, 32);
    EXPECT_EQ(v79.window_bytes, size_t{7} << 29);  // 3.5 GiB
    EXPECT_DOUBLE_EQ(v79.matrix_peak_tflops, 12.0);
    EXPECT_EQ(v79.cpu_profile, "sm8750-cpu");
    EXPECT_EQ(npu::find_profile("sm8550").window_bytes, size_t{2} << 30);
    EXPECT_EQ(npu::find_profile("sm8750-cpu").kind, npu::Profile::Kind::Cpu);
    EXPECT_EQ(npu::find_profile("sm8750-cpu").tile_rows, 1);
}

TEST(NpuProfile, BadNamesAndParametersAreRejected) {
    try {
        npu::find_profile("sm9999");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("sm8750"), std::string::npos) << e.what();
    }
    npu::Profile p = npu::find_profile("sm8750");
    EXPECT_THROW(p.apply_overrides("nonsense=1"), Error);
    EXPECT_THROW(p.apply_overrides("map_fixed_us"), Error);
    EXPECT_THROW(p.apply_overrides("map_fixed_us=abc"), Error);
    EXPECT_THROW(p.apply_overrides("map_fixed_us=-1"), Error);
    EXPECT_THROW(p.apply_overrides("dram_gbps=0"), Error);
    p.apply_overrides("map_fixed_us=500,window_gib=2");
    EXPECT_DOUBLE_EQ(p.map_fixed_us, 500.0);
    EXPECT_EQ(p.window_bytes, size_t{2} << 30);
}

// The staircase: a matmul's projected time is flat inside a 32-row tile and jumps at each
// boundary on the NPU; on the CPU it grows with every row.
TEST(NpuCostModel, MatmulTimeIsAStaircaseInRows) {
    const npu::Profile npu = npu::find_profile("sm8750");
    const npu::Profile cpu = npu::find_profile("sm8750-cpu");
    auto t = [&](const npu::Profile& p, int64_t m) {
        npu::OpWork w;
        w.matrix_flops = npu::matmul_flops(p, m, 4096, 4096);
        w.dram_bytes = 4096.0 * 4096 * 0.5625;  // TQ4
        return npu::op_cost(p, w).total();
    };
    // Compute-bound sizes (past the weight-streaming floor) show every step.
    for (int64_t tile = 4; tile < 8; ++tile) {
        const double flat = t(npu, tile * 32 + 1);
        for (int64_t m = tile * 32 + 1; m <= tile * 32 + 32; ++m)
            EXPECT_DOUBLE_EQ(t(npu, m), flat) << m;
        EXPECT_GT(t(npu, tile * 32 + 33), flat) << "no jump after " << tile * 32 + 32;
    }
    for (int64_t m = 2; m <= 256; ++m)
        EXPECT_GE(t(npu, m), t(npu, m - 1));
    EXPECT_GT(t(cpu, 200), t(cpu, 199));
    EXPECT_GT(t(cpu, 201), t(cpu, 200));
}

TEST(NpuCostModel, CategoriesAddUpAndAttributeTheBound) {
    const npu::Profile p = npu::find_profile("sm8750");
    npu::OpWork w;
    w.dram_bytes = 40e6;  // 40 MB at 40 GB/s = 1 ms
    w.matrix_flops = 1e6;
    const npu::Cost c = npu::op_cost(p, w);
    EXPECT_NEAR(c[npu::Category::Dma], 1000.0, 1e-6);
    EXPECT_DOUBLE_EQ(c[npu::Category::Matrix], 0.0);
    EXPECT_DOUBLE_EQ(c[npu::Category::Dispatch], p.op_dispatch_us);
    EXPECT_DOUBLE_EQ(c.total(), 1000.0 + p.op_dispatch_us);
    EXPECT_NEAR(npu::map_us(p, 1 << 20), p.map_fixed_us + p.map_us_per_mib, 1e-9);
    // Compile scales with layers from the published Gemma-2B (18 layers) figure.
    EXPECT_NEAR(npu::compile_us(p, 18), (360.0 + 11500.0) * 1e3, 1e-6);
}

TEST(NpuAddressWindow, FirstFitWithFragmentation) {
    npu::AddressWindow w(10 * 4096, 4096);
    auto a = w.map(4096), b = w.map(2 * 4096), c = w.map(4096);
    ASSERT_TRUE(a && b && c);
    EXPECT_EQ(*a, 0u);
    EXPECT_EQ(*b, 4096u);
    EXPECT_EQ(*c, 3 * 4096u);
    w.unmap(*b);  // a hole of two pages before c, six pages after
    EXPECT_EQ(w.free_bytes(), 8 * 4096u);
    EXPECT_EQ(w.largest_free(), 6 * 4096u);
    EXPECT_DOUBLE_EQ(w.fragmentation(), 0.25);
    auto d = w.map(100);  // first fit: the hole
    ASSERT_TRUE(d);
    EXPECT_EQ(*d, 4096u);
    EXPECT_FALSE(w.map(7 * 4096));
    EXPECT_EQ(w.maps(), 4);
    EXPECT_EQ(w.unmaps(), 1);
    EXPECT_EQ(w.peak_used(), 4 * 4096u);
}
