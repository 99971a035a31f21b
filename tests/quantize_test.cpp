// llada-quantize's library (tools/synthetic.h): the synthetic shapes (Dream-7B's among them),
// random-weight models that load and decode, and re-quantisation with the mix rule or --pure,
// metadata carried over (the mixes' rules themselves: tests/quant_mix_test.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "decode/policy.h"
#include "format/gguf.h"
#include "forward_util.h"
#include "model/model.h"
#include "runtime/device.h"
#include "tools/common.h"
#include "tools/synthetic.h"
#include "util/error.h"

using namespace llada;
namespace fs = std::filesystem;

namespace {

fs::path temp(const std::string& name) {
    return fs::temp_directory_path() / ("llada_quantize_test_" + std::to_string(getpid()) + name);
}

std::string shape_error(const std::string& spec) {
    try {
        tools::parse_shape(spec);
    } catch (const Error& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST(Synthetic, Dream7bIsQwen2sSevenBillionShape) {
    const tools::SyntheticShape s = tools::parse_shape("dream-7b");
    EXPECT_EQ(s.arch, "dream");
    EXPECT_EQ(s.n_layer, 28);
    EXPECT_EQ(s.n_embd, 3584);
    EXPECT_EQ(s.n_head, 28);
    EXPECT_EQ(s.n_kv_head, 4);
    EXPECT_EQ(s.n_ff, 18944);
    EXPECT_EQ(s.n_vocab, 152064);
    EXPECT_TRUE(s.qkv_bias);
    EXPECT_NEAR(s.n_params() / 1e9, 7.6, 0.1);  // Qwen2-7B's 7.6 B (biases aside)
    EXPECT_NE(shape_error("arch=moe").find("shape arch must be llada, llama, dream or llada-moe"),
              std::string::npos);
    EXPECT_NE(shape_error("dream-8b").find("unknown shape preset 'dream-8b'"), std::string::npos);
}

// A small model of Dream's architecture: loads as dream (biases, shifted logits), decodes with
// Dream's sampler, and its tokenizer's specials are where the writer put them.
TEST(Synthetic, ADreamShapedModelLoadsAndDecodes) {
    const fs::path path = temp("dream.gguf");
    runtime::ThreadPool pool(2);
    tools::write_synthetic(
        tools::parse_shape("dream-7b,layers=2,d=128,heads=4,kv_heads=2,ffn=256,vocab=512,ctx=256"),
        format::TensorType::Q8_0, 3, path.string(), pool);
    const tools::LoadedModel lm = tools::load_model(path.string());
    const auto& hp = lm.model->hparams();
    EXPECT_EQ(hp.arch, "dream");
    EXPECT_TRUE(hp.shift_logits);
    EXPECT_FALSE(hp.causal);
    EXPECT_EQ(hp.n_kv_head, 2);
    EXPECT_FLOAT_EQ(hp.rope_base, 1e6f);
    EXPECT_EQ(lm.ids.mask, 511);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions opt;
    opt.gen = 16;
    opt.steps = 8;
    auto res = decode::make_policy("dream", *lm.model, *dev, opt, lm.ids)
                   ->generate(lm.tok->encode("hello", lm.tok->add_bos_default(), false));
    EXPECT_EQ(res.steps.size(), 8u);
    EXPECT_EQ(std::count(res.canvas.begin(), res.canvas.end(), lm.ids.mask), 0);
    fs::remove(path);
}

// The Q4_0 mix keeps the head at a higher precision, as llama-quantize does (Q6_K, whose
// fallback for these rows of 128 values is Q8_0); --pure does not. The metadata, tokenizer and
// chat template included, is carried over, and the re-quantised model's logits stay near the
// original's.
TEST(Requantize, MixRuleKeepsTheHeadAndPureDoesNot) {
    const fs::path src = temp("src.gguf"), mix = temp("mix.gguf"), pure = temp("pure.gguf");
    runtime::ThreadPool pool(2);
    tools::write_synthetic(tools::parse_shape("layers=2,d=128,heads=4,ffn=256,vocab=512,ctx=128"),
                           format::TensorType::F32, 5, src.string(), pool);
    tools::requantize(src.string(), mix.string(), format::TensorType::Q4_0, pool, false);
    tools::requantize(src.string(), pure.string(), format::TensorType::Q4_0, pool, true);
    auto in = format::GgufFile::open(src.string());
    auto m = format::GgufFile::open(mix.string());
    auto p = format::GgufFile::open(pure.string());
    int checked = 0;
    for (const auto& t : in->tensors()) {
        const auto* tm = m->find_tensor(t.name);
        const auto* tp = p->find_tensor(t.name);
        ASSERT_TRUE(tm && tp) << t.name;
        if (t.n_dims != 2) {
            EXPECT_EQ(tm->type, format::TensorType::F32) << t.name;
            continue;
        }
        const bool head = t.name == "output.weight";
        EXPECT_EQ(tm->type, head ? format::TensorType::Q8_0 : format::TensorType::Q4_0) << t.name;
        EXPECT_EQ(tp->type, format::TensorType::Q4_0) << t.name;
        ++checked;
    }
    EXPECT_EQ(checked, 2 + 7 * 2);
    tools::ModelFacts tied;
    tied.tied = true;
    const tools::FileType& q4_0 = tools::parse_file_type("Q4_0");
    const tools::FileType& q8_0 = tools::parse_file_type("Q8_0");
    // A tied head is the embedding: Q6_K, or at these 128-value rows its fallback Q8_0.
    EXPECT_EQ(tools::choose_type(q4_0, tied, {"token_embd.weight", 2, 128, format::TensorType::F32},
                                 false),
              format::TensorType::Q8_0);
    EXPECT_EQ(tools::choose_type(q4_0, tied,
                                 {"token_embd.weight", 2, 4096, format::TensorType::F32}, false),
              format::TensorType::Q6_K);
    EXPECT_EQ(tools::choose_type(q8_0, tools::ModelFacts{},
                                 {"output.weight", 2, 4096, format::TensorType::F32}, false),
              format::TensorType::Q8_0);
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.chat_template",
                            "tokenizer.ggml.mask_token_id", "llada.block_count"}) {
        EXPECT_NE(m->find(key), nullptr) << key;
    }
    EXPECT_EQ(m->get_string_array("tokenizer.ggml.tokens").size(),
              in->get_string_array("tokenizer.ggml.tokens").size());
    // The kept head is the head a Q8_0 re-quantisation writes, byte for byte.
    const fs::path q8 = temp("q8.gguf");
    tools::requantize(src.string(), q8.string(), format::TensorType::Q8_0, pool, true);
    auto e = format::GgufFile::open(q8.string());
    const auto* h_mix = m->find_tensor("output.weight");
    const auto* h_q8 = e->find_tensor("output.weight");
    ASSERT_EQ(h_mix->n_bytes, h_q8->n_bytes);
    EXPECT_EQ(std::memcmp(h_mix->data, h_q8->data, h_q8->n_bytes), 0);
    // The re-quantised weights are the original's: Q8_0's logits within 2% of the F32 model's
    // largest (its per-weight error is at most 1/254 of a block's largest weight).
    auto logits = [&](const fs::path& f) {
        auto model = model::Model::load(f.string());
        auto dev = runtime::make_cpu_device(pool);
        model::Session s(*model, *dev, 1, 8, 8, 8);
        std::vector<int32_t> tok = {506, 72, 101, 108, 108, 111, 511, 511}, pos(8), seq(8, 0),
                             out(8);
        for (int i = 0; i < 8; ++i)
            pos[i] = out[i] = i;
        const int32_t kv = 8;
        const float* y = s.forward({8, tok.data(), pos.data(), seq.data(), 8, out.data(), &kv});
        return std::vector<float>(y, y + 8 * 512);
    };
    const auto a = logits(src), b = logits(q8);
    double max_a = 0.0, max_d = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        max_a = std::max(max_a, static_cast<double>(std::fabs(a[i])));
        max_d = std::max(max_d, static_cast<double>(std::fabs(a[i] - b[i])));
    }
    EXPECT_LT(max_d, 0.02 * max_a) << max_d << " of " << max_a;
    fs::remove(q8);
    for (const auto& f : {src, mix, pure})
        fs::remove(f);
}

// LLaDA-MoE-7B-A1B's shape: 16 layers of 64 experts (8 per token) of 1024, d 2048, about 7.4 B
// parameters in all.
TEST(Synthetic, LladaMoeIsTheSevenBillionA1bShape) {
    const tools::SyntheticShape s = tools::parse_shape("llada-moe");
    EXPECT_EQ(s.arch, "llada-moe");
    EXPECT_EQ(s.n_layer, 16);
    EXPECT_EQ(s.n_embd, 2048);
    EXPECT_EQ(s.n_expert, 64);
    EXPECT_EQ(s.n_expert_used, 8);
    EXPECT_EQ(s.n_ff_expert, 1024);
    EXPECT_EQ(s.n_vocab, 157184);
    EXPECT_NEAR(s.n_params() / 1e9, 7.36, 0.05);
    EXPECT_NE(shape_error("1b,experts=4").find("experts apply to arch llada-moe only"),
              std::string::npos);
    EXPECT_NE(shape_error("llada-moe,used=65").find("used must be at most experts"),
              std::string::npos);
}

// A small model of LLaDA-MoE's architecture in Q8_0 (experts packed one by one, the router kept
// in F32): loads with its expert metadata and decodes.
TEST(Synthetic, ALladaMoeShapedModelLoadsAndDecodes) {
    const fs::path path = temp("moe.gguf");
    runtime::ThreadPool pool(2);
    tools::write_synthetic(tools::parse_shape("llada-moe,layers=2,d=128,heads=4,experts=8,used=2,"
                                              "expert_ffn=64,vocab=512,ctx=256"),
                           format::TensorType::Q8_0, 3, path.string(), pool);
    auto f = format::GgufFile::open(path.string());
    EXPECT_EQ(f->find_tensor("blk.0.ffn_gate_inp.weight")->type, format::TensorType::F32);
    EXPECT_EQ(f->find_tensor("blk.0.ffn_up_exps.weight")->type, format::TensorType::Q8_0);
    EXPECT_EQ(f->find_tensor("blk.0.ffn_up_exps.weight")->n_dims, 3u);
    const tools::LoadedModel lm = tools::load_model(path.string());
    const auto& hp = lm.model->hparams();
    EXPECT_EQ(hp.n_expert, 8);
    EXPECT_EQ(hp.n_expert_used, 2);
    EXPECT_EQ(hp.n_ff_expert, 64);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions opt;
    opt.gen = 16;
    opt.steps = 8;
    opt.block = 8;
    auto res = decode::make_policy("dual-cache", *lm.model, *dev, opt, lm.ids)
                   ->generate(lm.tok->encode("hello", lm.tok->add_bos_default(), false));
    EXPECT_EQ(std::count(res.canvas.begin(), res.canvas.end(), lm.ids.mask), 0);
    fs::remove(path);
}

// The PyTorch fixture's llada-moe re-quantised: its expert stacks take the type, its routers
// stay F32 (llama-quantize never quantises ffn_gate_inp). Each quantised model is held to its own
// weights dequantised to F32 (re-quantised back to F32, exactly): what remains is how activations
// meet the format (fp16 rounding for F16, Q8_0 blocks for Q8_0/Q4_0), so the tolerances are the
// llama.cpp parity test's for those formats: F16 1e-3 of max|logit|, Q8_0 and Q4_0 2e-2. An
// expert packed from the wrong rows, or two experts sharing a packed group, moves them by far
// more.
TEST(Requantize, LladaMoeExpertsTakeTheTypeAndStayClose) {
    const fs::path src = fs::path(LLADA_TEST_DATA) / "moe" / "llada-moe-tiny.gguf";
    runtime::ThreadPool pool(2);
    std::vector<int32_t> canvas(16, 258);  // letters, then masks
    for (int i = 0; i < 10; ++i)
        canvas[i] = 97 + i;
    auto logits = [&](const fs::path& f) {
        return test::forward_all(*model::Model::load(f.string()), canvas, 2);
    };
    const std::pair<format::TensorType, double> cases[] = {{format::TensorType::F16, 1e-3},
                                                           {format::TensorType::Q8_0, 2e-2},
                                                           {format::TensorType::Q4_0, 2e-2}};
    for (const auto& [type, tol] : cases) {
        const fs::path q = temp("moe-q.gguf"), dq = temp("moe-dq.gguf");
        tools::requantize(src.string(), q.string(), type, pool, true);
        tools::requantize(q.string(), dq.string(), format::TensorType::F32, pool, true);
        auto f = format::GgufFile::open(q.string());
        EXPECT_EQ(f->find_tensor("blk.1.ffn_gate_inp.weight")->type, format::TensorType::F32);
        EXPECT_EQ(f->find_tensor("blk.1.ffn_down_exps.weight")->type, type);
        EXPECT_EQ(f->find_tensor("blk.1.attn_q_norm.weight")->type, format::TensorType::F32);
        const auto got = logits(q), want = logits(dq);
        double max_w = 0.0, max_d = 0.0;
        for (size_t i = 0; i < got.size(); ++i) {
            max_w = std::max(max_w, static_cast<double>(std::fabs(want[i])));
            max_d = std::max(max_d, static_cast<double>(std::fabs(got[i] - want[i])));
        }
        EXPECT_LT(max_d, tol * max_w) << format::tensor_type_info(type).name;
        RecordProperty(std::string(format::tensor_type_info(type).name) + " max / max|logit|",
                       std::to_string(max_d / max_w));
        fs::remove(q);
        fs::remove(dq);
    }
}

// The same for the k-quants, IQ4 and the other legacy formats on a llada-moe of 256-wide rows
// (k-quant super-blocks): every expert stack in the type, run by the generic kernel one expert
// at a time, held to the same weights in F32. What remains is the activations' quantisation
// (Q8_K's one scale per 256 values for the k-quants and IQ4_XS, Q8_0 or Q8_1 blocks for the
// rest). Each format's bound sits ~1.5x above its error as measured (x86, AVX-512 VNNI and
// AVX2 give the same integer dot products), in the comment beside it. Every token uses every
// expert (weighted by the router's softmax), so no near-tie in a top-k choice turns an
// activation rounding into another expert. Packing an expert from its neighbour's rows moves
// the logits by ~1.
TEST(Requantize, LladaMoeExpertsInEveryBlockFormatStayClose) {
    runtime::ThreadPool pool(2);
    const fs::path src = temp("moe-256.gguf");
    tools::write_synthetic(tools::parse_shape("llada-moe,layers=2,d=256,heads=4,experts=4,used=4,"
                                              "expert_ffn=256,vocab=512,ctx=64"),
                           format::TensorType::F32, 7, src.string(), pool);
    std::vector<int32_t> canvas(16, 258);
    for (int i = 0; i < 10; ++i)
        canvas[i] = 97 + i;
    auto logits = [&](const fs::path& f) {
        return test::forward_all(*model::Model::load(f.string()), canvas, 2);
    };
    using T = format::TensorType;
    // {format, bound on max|diff| / max|logit|}   measured
    const std::pair<T, double> cases[] = {
        {T::Q2_K, 2.5e-2},    // 1.52e-2
        {T::Q3_K, 2.5e-2},    // 1.43e-2
        {T::Q4_K, 2.5e-2},    // 1.73e-2
        {T::Q5_K, 2e-2},      // 1.36e-2
        {T::Q6_K, 2e-2},      // 1.35e-2
        {T::IQ4_XS, 2.5e-2},  // 1.54e-2
        {T::Q4_1, 2e-2},      // 1.35e-2
        {T::Q5_0, 2e-2},      // 1.13e-2
        {T::Q5_1, 2e-2},      // 1.30e-2
        {T::IQ4_NL, 1.5e-2},  // 0.85e-2
    };
    for (const auto& [type, tol] : cases) {
        const char* name = format::tensor_type_info(type).name;
        const fs::path q = temp("moe-256-q.gguf"), dq = temp("moe-256-dq.gguf");
        tools::requantize(src.string(), q.string(), type, pool, true);
        tools::requantize(q.string(), dq.string(), T::F32, pool, true);
        auto f = format::GgufFile::open(q.string());
        EXPECT_EQ(f->find_tensor("blk.1.ffn_gate_inp.weight")->type, T::F32) << name;
        EXPECT_EQ(f->find_tensor("blk.1.ffn_up_exps.weight")->type, type) << name;
        EXPECT_EQ(f->find_tensor("blk.1.ffn_down_exps.weight")->type, type) << name;
        const auto got = logits(q), want = logits(dq);
        const double max_w = test::max_abs(want), max_d = test::max_diff(got, want);
        EXPECT_LT(max_d, tol * max_w) << name;
        RecordProperty(std::string(name) + " max / max|logit|", std::to_string(max_d / max_w));
        fs::remove(q);
        fs::remove(dq);
    }
    fs::remove(src);
}

// llama.cpp loads what llada-quantize writes in llama.cpp's formats, and refuses the tile formats
// (opt-in: LLADA_LLAMA_CPP_BIN names the bin/ directory of an existing llama.cpp build with
// llama-bench; nothing of llama.cpp is built or shipped here). Each file runs one 8-token prompt
// through llama-bench, which loads the whole model and its vocabulary.
TEST(Requantize, LlamaCppLoadsTheRowFormatsAndRefusesTheTileFormats) {
    const char* bin = std::getenv("LLADA_LLAMA_CPP_BIN");
    if (bin == nullptr || *bin == '\0') {
        GTEST_SKIP() << "LLADA_LLAMA_CPP_BIN (a llama.cpp build's bin/ with llama-bench) is not "
                        "set: skipped";
    }
    runtime::ThreadPool pool(2);
    const std::string llada = "layers=2,d=128,heads=4,ffn=256,vocab=512,ctx=128";
    struct Case {
        std::string shape;
        format::TensorType type;
        bool loads;
    };
    const Case cases[] = {
        {llada, format::TensorType::F16, true},
        {llada, format::TensorType::BF16, true},
        {llada, format::TensorType::Q8_0, true},
        {llada, format::TensorType::Q4_0, true},
        {"dream-7b,layers=2,d=128,heads=4,kv_heads=2,ffn=256,vocab=512,ctx=128",
         format::TensorType::Q4_0, true},
        {"llada-moe,layers=2,d=128,heads=4,experts=8,used=2,expert_ffn=64,vocab=512,ctx=128",
         format::TensorType::Q8_0, true},
        {llada, format::TensorType::TQ4, false},
    };
    auto llama_bench = [&](const fs::path& model) {
        const fs::path log = temp("llama-bench.log");
        const std::string cmd = std::string(bin) + "/llama-bench -m " + model.string() +
                                " -p 8 -n 0 -r 1 -t 1 > " + log.string() + " 2>&1";
        const int rc = std::system(cmd.c_str());
        std::ifstream f(log);
        std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        fs::remove(log);
        return std::make_pair(rc, text.size() > 2000 ? text.substr(text.size() - 2000) : text);
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.shape + " " + format::tensor_type_info(c.type).name);
        const fs::path path = temp("llama.gguf");
        tools::write_synthetic(tools::parse_shape(c.shape), c.type, 1, path.string(), pool);
        const auto [rc, log] = llama_bench(path);
        EXPECT_EQ(rc == 0, c.loads) << log;
        fs::remove(path);
    }
    // A shipped model and the PyTorch-written Hugging Face directory, re-quantised with the Q4_0
    // mix (the head in Q6_K, or Q8_0 where its rows are not a multiple of Q6_K's 256-value
    // block): metadata and vocabulary carried over.
    for (const fs::path& src : {fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-llada-s.gguf",
                                fs::path(LLADA_TEST_DATA) / "hf" / "llada"}) {
        SCOPED_TRACE(src.string());
        const fs::path path = temp("llama-mix.gguf");
        tools::requantize(src.string(), path.string(), format::TensorType::Q4_0, pool, false);
        const auto [rc, log] = llama_bench(path);
        EXPECT_EQ(rc, 0) << log;
        fs::remove(path);
    }
}
