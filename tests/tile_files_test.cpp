// GGUF files in llada.cpp's tile formats (TQ4, TQ8, TF16; quant/tile.h): llada-quantize writes
// them with the published recipe, the reader sizes them, the CPU runs them with the NPU's
// numerics, npu-sim reads them in place with no host copy, and the tile matmul matches its scalar
// twin. Shapes are chosen off the 32-grid so the padding of the last strip and tile is exercised.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "forward_util.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "model/model.h"
#include "quant/fp16.h"
#include "quant/tile.h"
#include "runtime/devices.h"
#include "tools/synthetic.h"
#include "util/error.h"

using namespace llada;
namespace fs = std::filesystem;
using format::TensorType;

namespace {

fs::path temp(const std::string& name) {
    return fs::temp_directory_path() / ("llada_tile_files_test_" + std::to_string(getpid()) + name);
}

// vocab 500: the head and the embedding end in a partial strip (the synthetic shapes keep d and
// ffn multiples of 32; the matmul test below pads K as well).
constexpr const char* kShape = "layers=2,d=96,heads=4,ffn=224,vocab=500,ctx=64";

std::vector<int32_t> some_tokens() {
    return {494, 72, 101, 108, 108, 111, 44, 32, 499, 499, 499, 499};
}

using test::max_abs;
using test::max_diff;

struct Files {
    fs::path f32 = temp("f32.gguf"), tq4 = temp("tq4.gguf"), back = temp("back.gguf");
    Files() {
        runtime::ThreadPool pool(2);
        tools::write_synthetic(tools::parse_shape(kShape), TensorType::F32, 3, f32.string(), pool);
        tools::requantize(f32.string(), tq4.string(), TensorType::TQ4, pool, /*pure=*/false);
    }
    ~Files() {
        for (const auto& f : {f32, tq4, back})
            fs::remove(f);
    }
};

}  // namespace

// --type TQ4 without --pure is the published recipe: TQ4 everywhere, TQ8 for FFN down, vectors
// as they were; each matrix occupies exactly its padded tiles.
TEST(TileFiles, TheTq4MixIsThePublishedRecipe) {
    Files f;
    auto in = format::GgufFile::open(f.f32.string());
    auto out = format::GgufFile::open(f.tq4.string());
    int matrices = 0;
    for (const auto& t : in->tensors()) {
        const auto* o = out->find_tensor(t.name);
        ASSERT_NE(o, nullptr) << t.name;
        if (t.n_dims != 2) {
            EXPECT_EQ(o->type, TensorType::F32) << t.name;
            continue;
        }
        const bool down = t.name.find("ffn_down") != std::string::npos;
        EXPECT_EQ(o->type, down ? TensorType::TQ8 : TensorType::TQ4) << t.name;
        const auto l =
            quant::tile_layout(down ? quant::TileType::TQ8 : quant::TileType::TQ4,
                               static_cast<int64_t>(t.ne[1]), static_cast<int64_t>(t.ne[0]));
        EXPECT_EQ(o->n_bytes, l.total_bytes()) << t.name;
        ++matrices;
    }
    EXPECT_EQ(matrices, 2 + 7 * 2);
    EXPECT_EQ(out->get_uint("general.file_type"), static_cast<uint64_t>(TensorType::TQ4));
    EXPECT_EQ(tools::mix_type("blk.0.ffn_down.weight", TensorType::TQ4, false), TensorType::TQ8);
    EXPECT_EQ(tools::mix_type("output.weight", TensorType::TQ4, false), TensorType::TQ4);
}

// Re-quantising a tile file back to F32 reads every value through the row accessor: each must be
// the scalar reference's value of its tile element, and every F32 value within half a group step
// of the TQ4 value the quantiser chose (independent of the accessor under test).
TEST(TileFiles, ReadBackGivesEveryElementOfEveryTile) {
    Files f;
    runtime::ThreadPool pool(2);
    tools::requantize(f.tq4.string(), f.back.string(), TensorType::F32, pool, true);
    auto src = format::GgufFile::open(f.f32.string());
    auto tq = format::GgufFile::open(f.tq4.string());
    auto back = format::GgufFile::open(f.back.string());
    for (const char* name : {"token_embd.weight", "blk.1.ffn_down.weight", "blk.0.attn_q.weight"}) {
        SCOPED_TRACE(name);
        const auto* t = tq->find_tensor(name);
        const auto* b = back->find_tensor(name);
        const auto* s = src->find_tensor(name);
        ASSERT_TRUE(t && b && s);
        ASSERT_EQ(b->type, TensorType::F32);
        const int64_t rows = static_cast<int64_t>(t->ne[1]), cols = static_cast<int64_t>(t->ne[0]);
        const auto l = quant::tile_layout(*quant::tile_type_of(t->type), rows, cols);
        const auto* bv = reinterpret_cast<const float*>(b->data);
        const auto* sv = reinterpret_cast<const float*>(s->data);
        // Q4_0's quantiser (a TQ4 group's) has steps of a group's amax / 8 and may clamp its
        // largest positive value by a whole step; Q8_0's rounds to half a step of amax / 127.
        // The scale is stored in fp16 (relative error <= 2^-11) and multiplies |q| <= 8 / 127.
        const double bound =
            t->type == TensorType::TQ4 ? (1.0 + 8.0 / 2048) / 8 : (0.5 + 127.0 / 2048) / 127;
        double amax = 0;
        for (int64_t i = 0; i < rows * cols; ++i)
            amax = std::max(amax, std::fabs(double(sv[i])));
        for (int64_t n = 0; n < rows; ++n) {
            for (int64_t k = 0; k < cols; ++k) {
                ASSERT_EQ(bv[n * cols + k], quant::tile_value(l, t->data, n, k)) << n << "," << k;
                ASSERT_LE(std::fabs(double(bv[n * cols + k]) - sv[n * cols + k]),
                          bound * amax + 1e-9);
            }
        }
    }
}

// On the CPU a tile file runs with the NPU's numerics: weights through fp16 tables, activations
// rounded to fp16. The same values written as F16 (TQ4 -> F16 is exact: every table entry is an
// fp16 value) take llada.cpp's independent F16 kernels, which round activations the same way, so
// the two may differ only by summation order and the embedding (exact tile values against their
// fp16 roundings): 1e-3 of the largest logit. The quantisation itself moves logits far more.
TEST(TileFiles, TheCpuRunsTileWeightsAsTheirFp16Values) {
    Files f;
    runtime::ThreadPool pool(2);
    const fs::path f16 = temp("f16.gguf");
    tools::requantize(f.tq4.string(), f16.string(), TensorType::F16, pool, true);
    auto cpu = runtime::make_cpu_device(pool);
    const auto tokens = some_tokens();
    const auto tile = test::forward_all(*model::Model::load(f.tq4.string()), *cpu, tokens);
    const auto half = test::forward_all(*model::Model::load(f16.string()), *cpu, tokens);
    const auto exact = test::forward_all(*model::Model::load(f.f32.string()), *cpu, tokens);
    const double scale = max_abs(half);
    EXPECT_LE(max_diff(tile, half), 1e-3 * scale);
    EXPECT_GT(max_diff(tile, exact), 10 * max_diff(tile, half));
    RecordProperty("tile_vs_f16_rel", std::to_string(max_diff(tile, half) / scale));
    fs::remove(f16);
}

// npu-sim reads a TQ4 file as it is and makes no host copy of its weights. Its logits are
// bit-identical to npu-sim converting, with the same recipe (--npu-weights tq4), an F32 file of
// the TQ4 file's exact values (re-quantising values that are already on a group's grid gives the
// same grid: the largest magnitude and so the scale are unchanged). The F32 file also carries
// the same embedding, which is not a matmul and never goes through the recipe.
TEST(TileFiles, NpuSimReadsATileFileInPlace) {
    Files f;
    runtime::ThreadPool pool(2);
    tools::requantize(f.tq4.string(), f.back.string(), TensorType::F32, pool, true);
    runtime::DeviceConfig c;
    c.device = "npu-sim";
    c.overrides = "lm_head_on_npu=1";  // the head too (on the CPU it would see exact F32 values)
    auto as_is = runtime::make_device(c, pool);
    c.weights = "tq4";
    auto converted = runtime::make_device(c, pool);
    const auto tokens = some_tokens();
    auto tq4 = model::Model::load(f.tq4.string());
    auto f32 = model::Model::load(f.back.string());
    const auto a = test::forward_all(*tq4, *as_is, tokens);
    const auto b = test::forward_all(*f32, *converted, tokens);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << "max diff " << max_diff(a, b);
    EXPECT_EQ(as_is->report()->host_tile_copy_bytes, 0u);
    EXPECT_GT(converted->report()->host_tile_copy_bytes, 0u);
}

// The CPU's tile matmul against its scalar twin on every compiled target, over strip-aligned
// sub-ranges of a matrix with a partial last strip and a partial last tile.
TEST(TileFiles, TileMatmulMatchesTheScalarTwin) {
    const int64_t N = 77, K = 45, M = 5;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> w(N * K), x(M * K);
    for (float& v : w)
        v = nd(rng);
    for (float& v : x)
        v = quant::round_to_fp16(nd(rng));
    for (auto type : {quant::TileType::TQ4, quant::TileType::TQ8, quant::TileType::TF16}) {
        SCOPED_TRACE(quant::tile_type_name(type));
        const auto l = quant::tile_layout(type, N, K);
        std::vector<uint8_t> data(l.total_bytes());
        quant::quantize_tile_strips(l, w.data(), K, 0, l.n_strips, data.data());
        kernels::WeightView view;
        view.type = quant::tensor_type_of(type);
        view.data = data.data();
        view.n_rows = N;
        view.n_cols = K;
        std::vector<float> want(M * N, -1.0f), got(M * N, -1.0f);
        kernels::ref::matmul_tile(x.data(), M, view, want.data(), N, 0, N);
        for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, N}, {32, 64}, {64, N}}) {
            std::fill(got.begin(), got.end(), -1.0f);
            kernels::matmul_tile(x.data(), M, view, got.data(), N, n0, n1);
            for (int64_t m = 0; m < M; ++m) {
                for (int64_t n = 0; n < N; ++n) {
                    const float expect = n >= n0 && n < n1 ? want[m * N + n] : -1.0f;
                    ASSERT_NEAR(got[m * N + n], expect, 1e-4) << m << "," << n;
                }
            }
        }
    }
}

// Bad input: tile formats are 2-D only, in files and in llada-quantize.
TEST(TileFiles, TileFormatsRefuseAnythingButMatrices) {
    format::GgufWriter w;
    w.set_string("general.architecture", "llada");
    try {
        w.add_tensor("stack", TensorType::TQ4, {32, 32, 2}, std::vector<uint8_t>(2 * 576));
        ADD_FAILURE() << "a 3-D TQ4 tensor was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("2-D"), std::string::npos) << e.what();
    }
    w.add_tensor("m", TensorType::TQ4, {40, 33}, std::vector<uint8_t>(4 * 576));
    w.add_tensor("s", TensorType::F32, {32, 32, 2}, std::vector<uint8_t>(32 * 32 * 2 * 4));
    auto bytes = w.to_bytes();
    auto ok = format::GgufFile::from_memory(bytes.data(), bytes.size(), "ok.gguf");
    EXPECT_EQ(ok->find_tensor("m")->n_bytes, 4u * 576);  // 2 x 2 tiles, padded
    // A crafted file: the 3-D tensor's type changed to TQ4.
    const std::string needle("\x01\0\0\0\0\0\0\0s", 9);
    const size_t at = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end()) -
                      bytes.begin() + needle.size();
    const uint32_t tq4 = static_cast<uint32_t>(TensorType::TQ4);
    std::memcpy(&bytes[at + 4 + 3 * 8], &tq4, 4);
    std::string err;
    try {
        format::GgufFile::from_memory(bytes.data(), bytes.size(), "crafted.gguf");
    } catch (const Error& e) {
        err = e.what();
    }
    EXPECT_NE(err.find("tensor 's'"), std::string::npos) << err;
    EXPECT_NE(err.find("TQ4 is a tile format of 2-D matrices"), std::string::npos) << err;
    runtime::ThreadPool pool(1);
    try {
        tools::write_synthetic(tools::parse_shape("llada-moe,layers=1,d=64,heads=4,vocab=320,"
                                                  "experts=4,used=2,expert_ffn=32"),
                               TensorType::TQ4, 1, temp("moe.gguf").string(), pool);
        ADD_FAILURE() << "a TQ4 llada-moe was written";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("mixture-of-experts"), std::string::npos) << e.what();
    }
    EXPECT_EQ(tools::parse_type("tq8"), TensorType::TQ8);
    try {
        tools::parse_type("TQ2");
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("TF16"), std::string::npos) << e.what();
    }
}
