// The block formats beyond Q4_0 / Q8_0 (Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K ... Q6_K, IQ4_XS): the
// Q8 activation records against llama.cpp's activation blocks (the scalar twins), the generic
// packed layout against the source blocks, and the generic matmul on every SIMD target against
// the scalar twin kernels::ref::matmul_block.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/packed.h"
#include "tests/test_util.h"

using namespace llada;
using namespace llada::kernels;
using format::TensorType;
using llada::test::for_each_target;

namespace {

constexpr TensorType kGenericTypes[] = {
    TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL, TensorType::Q2_K,
    TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,   TensorType::IQ4_XS};

const char* name(TensorType t) {
    return format::tensor_type_info(t).name;
}

std::vector<float> gaussian(size_t n, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v)
        x = dist(rng);
    return v;
}

struct Weights {
    std::vector<uint8_t> bytes, packed;
    WeightView view;
};

// n rows of k values in `t`: quantised from gaussian values (random = false), or random bytes
// with sane fp16 scales (random = true), which reach every value and scale bit pattern.
Weights make_weights(TensorType t, int64_t n, int64_t k, uint32_t seed, bool random) {
    Weights w;
    const size_t rb = quant::row_bytes(t, k);
    w.bytes.resize(rb * n);
    if (!random) {
        const auto f = gaussian(static_cast<size_t>(n * k), seed, 0.5f);
        for (int64_t r = 0; r < n; ++r)
            quant::quantize_row(t, f.data() + r * k, &w.bytes[r * rb], k);
    } else {
        std::mt19937 rng(seed);
        for (auto& b : w.bytes)
            b = static_cast<uint8_t>(rng());
        // Every fp16 field of every block replaced by a finite value in [-2, 2].
        std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
        const auto& info = format::tensor_type_info(t);
        for (size_t at = 0; at < w.bytes.size(); at += info.block_bytes) {
            uint8_t* blk = &w.bytes[at];
            auto put = [&](size_t off) {
                const uint16_t h = quant::fp32_to_fp16(scale(rng));
                std::memcpy(blk + off, &h, 2);
            };
            switch (t) {
                case TensorType::Q4_1:
                case TensorType::Q5_1:
                case TensorType::Q4_K:
                case TensorType::Q5_K:
                    put(0);
                    put(2);
                    break;
                case TensorType::Q2_K:
                    put(80);
                    put(82);
                    break;
                case TensorType::Q3_K:
                    put(108);
                    break;
                case TensorType::Q6_K:
                    put(208);
                    break;
                default:  // Q5_0, IQ4_NL, IQ4_XS: d first
                    put(0);
                    break;
            }
        }
    }
    w.view = {t, w.bytes.data(), n, k, rb};
    const quant::PackedLayout l = quant::packed_layout(t, n, k);
    w.packed.resize(l.total_bytes());
    quant::pack_groups(l, w.bytes.data(), rb, 0, l.n_groups, w.packed.data());
    w.view.packed = w.packed.data();
    return w;
}

// The activation record of row r, block b (quant/packed.h).
template <class T>
T record_field(const std::vector<uint8_t>& recs, const quant::ActLayout& al, int64_t r, int64_t b,
               size_t off) {
    T v;
    std::memcpy(&v, recs.data() + r * al.row_bytes + b * quant::kActRecordBytes + off, sizeof v);
    return v;
}

}  // namespace

// Q8_K records: the values, the shared scale and every sum equal llama.cpp's Q8_K block
// (ref::quantize_rows_q8_k) exactly, on every target; an all-zero super-block gives scale 0.
TEST(BlockKernels, Q8KActivationRecordsMatchTheScalarTwin) {
    const int64_t k = 768, rows = 3;
    auto x = gaussian(static_cast<size_t>(k * rows), 3, 2.0f);
    for (int j = 0; j < 256; ++j)
        x[k + 256 + j] = 0.0f;  // row 1, super-block 1: all zero
    x[2 * k + 5] = -40.0f;      // row 2: a negative value of largest magnitude
    x[2 * k + 300] = 40.0f;     // and a positive one of the same magnitude later: the first wins
    x[2 * k + 301] = 40.0f;
    std::vector<ref::BlockQ8_K> want(static_cast<size_t>(rows * k / 256));
    ref::quantize_rows_q8_k(x.data(), want.data(), k, 0, rows);
    const quant::ActLayout al = quant::act_layout(k);
    std::vector<uint8_t> recs(al.row_bytes * rows);
    for_each_target([&] {
        quantize_acts_k(x.data(), recs.data(), k, 0, rows);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t b = 0; b < k / 32; ++b) {
                const ref::BlockQ8_K& q = want[r * (k / 256) + b / 8];
                const int8_t* v = q.qs + 32 * (b % 8);
                const uint8_t* rec = recs.data() + r * al.row_bytes + b * quant::kActRecordBytes;
                for (int j = 0; j < 32; ++j)
                    ASSERT_EQ(static_cast<int8_t>(rec[j]), v[j]) << r << "," << b << "," << j;
                const int lo = q.bsums[2 * (b % 8)], hi = q.bsums[2 * (b % 8) + 1];
                EXPECT_EQ(record_field<float>(recs, al, r, b, quant::kActScaleAt), q.d);
                EXPECT_EQ(record_field<int32_t>(recs, al, r, b, quant::kActSeedQ4At),
                          -8 * (lo + hi));
                EXPECT_EQ(record_field<int32_t>(recs, al, r, b, quant::kActSeedQ8At),
                          -128 * (lo + hi));
                EXPECT_EQ(record_field<int32_t>(recs, al, r, b, quant::kActNegSumAt), -lo);
                EXPECT_EQ(record_field<int32_t>(recs, al, r, b, quant::kActNegSumAt + 4), -hi);
                EXPECT_EQ(record_field<float>(recs, al, r, b, quant::kActNegMinAt), -(q.d * lo));
                EXPECT_EQ(record_field<float>(recs, al, r, b, quant::kActNegMinAt + 4),
                          -(q.d * hi));
                EXPECT_EQ(record_field<float>(recs, al, r, b, quant::kActNegMin32At),
                          -(q.d * (lo + hi)));
            }
        }
        EXPECT_EQ(record_field<float>(recs, al, 1, 8, quant::kActScaleAt), 0.0f);
        EXPECT_EQ(static_cast<int8_t>(recs[2 * al.row_bytes + 5]), -127);  // -40 -> -127
    });
}

// Q8_0 records also carry llama.cpp's Q8_1 sum s = fp16(amax / 127 * sum), negated, for Q4_1 and
// Q5_1; their values and scale are Q8_1's.
TEST(BlockKernels, Q8_0RecordsCarryTheQ8_1Sums) {
    const int64_t k = 160, rows = 4;
    auto x = gaussian(static_cast<size_t>(k * rows), 4, 1.5f);
    std::vector<ref::BlockQ8_1> want(static_cast<size_t>(rows * k / 32));
    ref::quantize_rows_q8_1(x.data(), want.data(), k, 0, rows);
    const quant::ActLayout al = quant::act_layout(k);
    std::vector<uint8_t> recs(al.row_bytes * rows);
    for_each_target([&] {
        quantize_acts(x.data(), recs.data(), k, 0, rows);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t b = 0; b < k / 32; ++b) {
                const ref::BlockQ8_1& q = want[r * (k / 32) + b];
                const uint8_t* rec = recs.data() + r * al.row_bytes + b * quant::kActRecordBytes;
                for (int j = 0; j < 32; ++j)
                    ASSERT_EQ(static_cast<int8_t>(rec[j]), q.qs[j]);
                EXPECT_EQ(record_field<float>(recs, al, r, b, quant::kActScaleAt),
                          quant::fp16_to_fp32(q.d));
                EXPECT_EQ(record_field<float>(recs, al, r, b, quant::kActNegMin32At),
                          -quant::fp16_to_fp32(q.s));
            }
        }
    });
}

// The generic packed layout holds every row's integer values (quant::decode_block's q) and
// padding rows hold value 0 (the IQ4 grid has no 0: there the padding rows' scale is 0).
TEST(BlockKernels, GenericPackedUnitsUnpackToTheDecodedValues) {
    for (TensorType t : kGenericTypes) {
        const int64_t n = 21, k = 512;  // two groups, the second with 11 padding rows
        const Weights w = make_weights(t, n, k, 9, /*random=*/true);
        const quant::PackedLayout l = quant::packed_layout(t, n, k);
        quant::DecodedBlock blk;
        int8_t got[quant::kQKK];
        for (int64_t row = 0; row < l.n_groups * quant::kPackRows; ++row) {
            const uint8_t* group = w.packed.data() + (row / quant::kPackRows) * l.group_bytes;
            for (int64_t u = 0; u < l.n_blocks; ++u) {
                quant::unpack_generic(l, group, u, static_cast<int>(row % quant::kPackRows), got);
                if (row < n) quant::decode_block(t, w.view.row(row), u, &blk);
                const uint8_t* unit = group + u * l.block_bytes;
                uint16_t d;
                std::memcpy(&d, unit + 2 * (row % quant::kPackRows), 2);
                if (row >= n) {
                    EXPECT_EQ(quant::fp16_to_fp32(d), 0.0f) << name(t) << " row " << row;
                }
                for (int i = 0; i < l.g.unit_values; ++i) {
                    if (row >= n && l.g.lut) continue;
                    ASSERT_EQ(got[i], row < n ? blk.q[i] : 0)
                        << name(t) << " row " << row << " unit " << u << " value " << i;
                }
            }
        }
    }
}

// Sum over every value of a row product of (|d sc_j q| + |dmin m_j|) |x|: a bound on the
// magnitude of the terms the kernel adds (each scaled sub-block sum and minimum term).
double term_magnitude(const WeightView& w, const float* x, int64_t n) {
    quant::DecodedBlock b;
    double s = 0.0;
    const int64_t per = format::tensor_type_info(w.type).block_elems;
    for (int64_t u = 0; u < w.n_cols / per; ++u) {
        quant::decode_block(w.type, w.row(n), u, &b);
        for (int i = 0; i < b.n_values; ++i) {
            const int j = i / b.sub_len;
            s += (std::fabs(double(b.d) * b.sc[j] * b.q[i]) + std::fabs(double(b.dmin) * b.m[j])) *
                 std::fabs(x[u * per + i]);
        }
    }
    return s;
}

// The generic matmul against llama.cpp's arithmetic in double (ref::matmul_block), on every
// target, every format, quantised gaussian weights and raw random blocks, row counts that cover
// every tile height and column ranges that split groups. Tolerance: each term (a sub-block's
// exact integer sum scaled in float32, or a minimum term) carries a few roundings of
// FLT_EPSILON, and summing T terms in float32 adds at most T roundings of the running sum, so the
// error stays below (4 + T) * FLT_EPSILON times the terms' total magnitude (term_magnitude, with
// 1 % headroom for the activations' quantisation, which it measures on the float inputs).
TEST(BlockKernels, GenericMatmulMatchesTheScalarTwin) {
    for (TensorType t : kGenericTypes) {
        const int64_t unit = format::tensor_type_info(t).block_elems;
        for (bool random : {false, true}) {
            for (int64_t m : {1, 2, 3, 4, 5, 7, 13}) {
                const int64_t n = 77, k = unit == 32 ? 160 : 512;
                const Weights w = make_weights(t, n, k, 11 + static_cast<uint32_t>(m), random);
                const auto x = gaussian(static_cast<size_t>(m * k), 5, 1.0f);
                std::vector<float> want(static_cast<size_t>(m * n)), got(want.size());
                ref::matmul_block(x.data(), m, w.view, want.data(), n, 0, n);
                const quant::ActLayout al = quant::act_layout(k);
                std::vector<uint8_t> xa(al.row_bytes * m);
                const double terms = 2.0 * static_cast<double>(k) / 16.0;
                for_each_target([&] {
                    if (act_kind_for(t) == ActKind::Q8_K) {
                        quantize_acts_k(x.data(), xa.data(), k, 0, m);
                    } else {
                        quantize_acts(x.data(), xa.data(), k, 0, m);
                    }
                    std::fill(got.begin(), got.end(), NAN);
                    matmul_q8(xa.data(), m, w.view, got.data(), n, 0, 16);
                    matmul_q8(xa.data(), m, w.view, got.data(), n, 16, 48);
                    matmul_q8(xa.data(), m, w.view, got.data(), n, 48, n);
                    for (size_t i = 0; i < got.size(); ++i) {
                        const double mag =
                            1.01 * term_magnitude(w.view, x.data() + (i / n) * k, i % n);
                        const double tol = (4.0 + terms) * FLT_EPSILON * mag;
                        ASSERT_NEAR(got[i], want[i], tol)
                            << name(t) << (random ? " random" : " gaussian") << " m=" << m
                            << " i=" << i;
                    }
                });
            }
        }
    }
}
