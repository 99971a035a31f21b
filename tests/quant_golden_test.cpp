// The block quantizers (quant/blocks.h, quant/quantize.h) against llama.cpp's own: every case of
// tests/data/quant/golden.bin (written by llama.cpp's ggml_quantize_chunk without an importance
// matrix, see the README there) must come out byte for byte; and per format, the error of a
// quantise / dequantise round trip on gaussian data stays below a bound that a wrong scale breaks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "format/tensor_type.h"
#include "quant/blocks.h"

using namespace llada;
using format::TensorType;

namespace {

constexpr TensorType kBlockTypes[] = {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                                      TensorType::Q5_1, TensorType::Q8_0, TensorType::IQ4_NL,
                                      TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
                                      TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_XS};

const char* name_of(TensorType t) {
    return format::tensor_type_info(t).name;
}

// One input set of golden.bin and llama.cpp's bytes for it, per type id.
struct GoldenInput {
    std::string name;
    uint32_t rows = 0, per_row = 0;
    std::vector<float> x;
    std::vector<std::pair<uint32_t, std::vector<uint8_t>>> quantized;
};

struct Golden {
    std::vector<GoldenInput> inputs;
    std::string error;  // why the file could not be read; empty when it was
};

// A little-endian reader over the whole file that records the first short read.
struct Reader {
    const std::vector<uint8_t>& data;
    size_t at = 0;
    bool ok = true;
    bool bytes(void* out, size_t n) {
        if (!ok || data.size() - at < n) return ok = false;
        std::memcpy(out, data.data() + at, n);
        at += n;
        return true;
    }
    uint32_t u32() {
        uint8_t b[4] = {};
        bytes(b, 4);
        return b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
    }
};

Golden load_golden() {
    Golden g;
    const std::string path = std::string(LLADA_TEST_DATA) + "/quant/golden.bin";
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        g.error = path + " is missing (a shipped file: regenerate it with make_golden.sh)";
        return g;
    }
    const std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)),
                                    std::istreambuf_iterator<char>());
    Reader r{data};
    char magic[4] = {};
    r.bytes(magic, 4);
    const uint32_t version = r.u32();
    if (std::memcmp(magic, "LQGD", 4) != 0 || version != 1) {
        g.error = path + ": not a version-1 golden file";
        return g;
    }
    const uint32_t n_inputs = r.u32(), n_types = r.u32();
    for (uint32_t k = 0; k < n_inputs && r.ok; ++k) {
        GoldenInput in;
        in.name.resize(r.u32() & 0xffff);
        r.bytes(in.name.data(), in.name.size());
        in.rows = r.u32();
        in.per_row = r.u32();
        in.x.resize(static_cast<size_t>(in.rows) * in.per_row);
        r.bytes(in.x.data(), in.x.size() * sizeof(float));  // little-endian hosts only
        for (uint32_t t = 0; t < n_types && r.ok; ++t) {
            const uint32_t type = r.u32();
            std::vector<uint8_t> q(r.u32());
            r.bytes(q.data(), q.size());
            in.quantized.emplace_back(type, std::move(q));
        }
        g.inputs.push_back(std::move(in));
    }
    if (!r.ok || r.at != data.size()) g.error = path + ": truncated or trailing bytes";
    return g;
}

const Golden& golden() {
    static const Golden g = load_golden();
    return g;
}

class GoldenBytes : public testing::TestWithParam<TensorType> {};

// Every input set, row by row through quant::quantize_row, equals llama.cpp's bytes; a mismatch
// names the input, the row, the block and the first differing byte.
TEST_P(GoldenBytes, MatchLlamaCppQuantizeChunk) {
    const Golden& g = golden();
    ASSERT_TRUE(g.error.empty()) << g.error;
    ASSERT_FALSE(g.inputs.empty());
    const TensorType type = GetParam();
    const auto& info = format::tensor_type_info(type);
    int checked = 0;
    for (const GoldenInput& in : g.inputs) {
        const std::vector<uint8_t>* want = nullptr;
        for (const auto& [id, bytes] : in.quantized)
            if (id == static_cast<uint32_t>(type)) want = &bytes;
        ASSERT_NE(want, nullptr) << "golden.bin has no " << name_of(type) << " for " << in.name;
        const size_t row = quant::row_bytes(type, in.per_row);
        ASSERT_EQ(want->size(), row * in.rows) << name_of(type) << ", input " << in.name;
        std::vector<uint8_t> got(row);
        for (uint32_t r = 0; r < in.rows; ++r) {
            quant::quantize_row(type, in.x.data() + static_cast<size_t>(r) * in.per_row, got.data(),
                                in.per_row);
            const uint8_t* w = want->data() + r * row;
            size_t first = row, n_diff = 0;
            for (size_t i = 0; i < row; ++i) {
                if (got[i] == w[i]) continue;
                if (first == row) first = i;
                ++n_diff;
            }
            EXPECT_EQ(n_diff, 0u) << name_of(type) << ", input '" << in.name << "' row " << r
                                  << ": " << n_diff << " of " << row
                                  << " bytes differ; the first is byte " << first % info.block_bytes
                                  << " of block " << first / info.block_bytes << " (want 0x"
                                  << std::hex << int{w[first % row]} << ", got 0x"
                                  << int{got[first % row]} << std::dec << ")";
            ++checked;
        }
    }
    EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(AllBlockFormats, GoldenBytes, testing::ValuesIn(kBlockTypes),
                         [](const testing::TestParamInfo<TensorType>& p) {
                             return std::string(name_of(p.param));
                         });

// N(0, 1) values from a fixed seed; Box-Muller over mt19937, whose sequence the standard fixes
// (std::normal_distribution's is the library's own).
std::vector<float> gaussian(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    const auto unit = [&] { return (static_cast<double>(gen()) + 0.5) / 4294967296.0; };
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i)
        x[i] = static_cast<float>(std::sqrt(-2.0 * std::log(unit())) *
                                  std::cos(6.283185307179586 * unit()));
    return x;
}

double rmse(const std::vector<float>& a, const std::vector<float>& b, double gain) {
    double sum = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double e = gain * b[i] - a[i];
        sum += e * e;
    }
    return std::sqrt(sum / static_cast<double>(a.size()));
}

// The round-trip RMSE bound per format on N(0, 1) data. A uniform grid of step D has an RMSE of
// D / sqrt(12), and the format's bits set D: on this data, blocks of 32 with their maximum on
// level 8 (Q4_0) predict 0.0865, on 16 levels over min..max (Q4_1) 0.0809, then 0.0433 (Q5_0),
// 0.0392 (Q5_1), 0.00545 (Q8_0, 127 steps); k-quants on their sub-blocks: 0.348 (Q2_K, 3 steps
// over 16 values), 0.154 (Q3_K), 0.0809 (Q4_K), 0.0392 (Q5_K), 0.0193 (Q6_K); a uniform 16-level
// grid over +-max 0.0923 (IQ4). Each bit halves the error. The plain formats land within 3% of
// their prediction; the searching ones (IQ4, k-quants) must beat it, by the 5-17% that their
// searches gain. Each bound is the measured value plus about 4%, so that a scale off by 10%
// (which adds about 0.1 in quadrature) fails every one of them: checked below too.
struct RmseBound {
    TensorType type;
    double measured;  // what llama.cpp's bytes give (documentation, not checked)
    double bound;
};
constexpr RmseBound kRmseBounds[] = {
    {TensorType::Q4_0, 0.0867, 0.090},   {TensorType::Q4_1, 0.0786, 0.082},
    {TensorType::Q5_0, 0.0429, 0.045},   {TensorType::Q5_1, 0.0380, 0.040},
    {TensorType::Q8_0, 0.00538, 0.0056}, {TensorType::IQ4_NL, 0.0763, 0.080},
    {TensorType::Q2_K, 0.2953, 0.305},   {TensorType::Q3_K, 0.1507, 0.157},
    {TensorType::Q4_K, 0.0715, 0.075},   {TensorType::Q5_K, 0.0362, 0.038},
    {TensorType::Q6_K, 0.0177, 0.0185},  {TensorType::IQ4_XS, 0.0769, 0.080},
};

class RoundTrip : public testing::TestWithParam<TensorType> {};

TEST_P(RoundTrip, GaussianErrorWithinBound) {
    const TensorType type = GetParam();
    const RmseBound* bound = nullptr;
    for (const RmseBound& b : kRmseBounds)
        if (b.type == type) bound = &b;
    ASSERT_NE(bound, nullptr) << "no RMSE bound for " << name_of(type);
    constexpr int64_t kRows = 64, kPerRow = 512;
    const std::vector<float> x = gaussian(kRows * kPerRow, 1234);
    std::vector<float> y(x.size());
    std::vector<uint8_t> q(quant::row_bytes(type, kPerRow));
    for (int64_t r = 0; r < kRows; ++r) {
        quant::quantize_row(type, x.data() + r * kPerRow, q.data(), kPerRow);
        quant::dequantize_row(type, q.data(), y.data() + r * kPerRow, kPerRow);
    }
    const double err = rmse(x, y, 1.0);
    EXPECT_LT(err, bound->bound) << name_of(type) << " round trip of N(0, 1) data";
    // The bound is tight enough to catch a wrong scale: the same values 10% too large fail it
    // (too large, not too small: Q2_K's search minimises |error|, and shrinking its output
    // lowers the RMSE).
    EXPECT_GT(rmse(x, y, 1.1), bound->bound) << name_of(type) << ": the bound is too loose";
    RecordProperty("rmse", std::to_string(err));
}

INSTANTIATE_TEST_SUITE_P(AllBlockFormats, RoundTrip, testing::ValuesIn(kBlockTypes),
                         [](const testing::TestParamInfo<TensorType>& p) {
                             return std::string(name_of(p.param));
                         });

}  // namespace
