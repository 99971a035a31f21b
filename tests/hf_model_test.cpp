// Hugging Face directories (model/hf_model.h): the same weights through a directory and through
// the GGUF llama.cpp's converter writes from it (tests/data/hf, written by
// train/make_hf_fixtures.py) give the same logits, token ids and generations; a directory's
// faults are named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "decode/policy.h"
#include "format/hf_directory.h"
#include "forward_util.h"
#include "model/hf_model.h"
#include "model/model.h"
#include "runtime/device.h"
#include "tokenizer/tokenizer.h"
#include "tools/common.h"
#include "tools/synthetic.h"
#include "util/error.h"

using namespace llada;
namespace fs = std::filesystem;

namespace {

fs::path data(const std::string& name) {
    return fs::path(LLADA_TEST_DATA) / "hf" / name;
}

// The directory and its converted GGUF: the same hyper-parameters, the same logits bit for bit
// (the same weights in the same type, LLaDA's Q/K rows permuted as the converter permutes
// them), the same tokenizer and the same generation.
void expect_same_model(const std::string& dir, const std::string& gguf) {
    SCOPED_TRACE(dir);
    const tools::LoadedModel a = tools::load_model(data(dir).string());
    const tools::LoadedModel b = tools::load_model(data(gguf).string());
    const auto &ha = a.model->hparams(), &hb = b.model->hparams();
    EXPECT_EQ(ha.arch, hb.arch);
    EXPECT_EQ(ha.n_layer, hb.n_layer);
    EXPECT_EQ(ha.n_kv_head, hb.n_kv_head);
    EXPECT_EQ(ha.n_ff, hb.n_ff);
    EXPECT_EQ(ha.n_ctx, hb.n_ctx);
    EXPECT_EQ(ha.rope_style, hb.rope_style);
    EXPECT_EQ(ha.shift_logits, hb.shift_logits);
    EXPECT_EQ(ha.tied_output, hb.tied_output);
    EXPECT_FLOAT_EQ(ha.rope_base, hb.rope_base);
    EXPECT_FLOAT_EQ(ha.eps, hb.eps);

    // The tokenizer: special ids, template, pre-type and the ids of texts that exercise merges,
    // digits, an added non-special token and (parsed) special tokens.
    const tokenizer::Tokenizer &ta = *a.tok, &tb = *b.tok;
    EXPECT_EQ(ta.n_vocab(), tb.n_vocab());
    EXPECT_EQ(ta.bos(), tb.bos());
    EXPECT_EQ(ta.eos(), tb.eos());
    EXPECT_EQ(ta.pad(), tb.pad());
    EXPECT_EQ(ta.mask(), tb.mask());
    EXPECT_EQ(ta.eot(), tb.eot());
    EXPECT_EQ(ta.pre_type(), tb.pre_type());
    EXPECT_EQ(ta.add_bos_default(), tb.add_bos_default());
    EXPECT_EQ(ta.chat_template(), tb.chat_template());
    EXPECT_EQ(ta.n_merges(), tb.n_merges());
    for (int32_t id = 0; id < ta.n_vocab(); ++id) {
        ASSERT_EQ(ta.token_text(id), tb.token_text(id)) << id;
        ASSERT_EQ(ta.token_type(id), tb.token_type(id)) << id;
    }
    const char* texts[] = {"the theory of the thing, then 12345 + 678 = 13023.",
                           "<think>a</think> <|im_start|>user\nHi<|im_end|>",
                           "  spaces\tand\nnew lines  ", "caf\xc3\xa9 \xe2\x82\xac 100"};
    for (const char* t : texts) {
        for (bool special : {false, true}) {
            const auto ia = ta.encode(t, ta.add_bos_default(), special);
            EXPECT_EQ(ia, tb.encode(t, tb.add_bos_default(), special)) << t;
            EXPECT_GT(ia.size(), 0u);
        }
    }

    // Logits of a canvas: BOS, a prompt, masks.
    std::vector<int32_t> canvas = ta.encode("the theory of 12 + 34", true, false);
    canvas.resize(canvas.size() + 12, ta.mask());
    const auto la = test::forward_all(*a.model, canvas, 2),
               lb = test::forward_all(*b.model, canvas, 2);
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0)
        << "the directory's logits differ from the converted GGUF's";

    // A whole generation.
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions opt;
    opt.gen = 16;
    opt.steps = 16;
    opt.block = 8;
    const char* policy = ha.arch == "dream" ? "dream" : "dual-cache";
    const auto prompt = ta.encode("the theory", ta.add_bos_default(), false);
    auto ra = decode::make_policy(policy, *a.model, *dev, opt, a.ids)->generate(prompt);
    auto rb = decode::make_policy(policy, *b.model, *dev, opt, b.ids)->generate(prompt);
    EXPECT_EQ(ra.canvas, rb.canvas);
}

// A copy of a test directory, removed at the end of the scope; `edit` changes it first.
struct TempDir {
    fs::path path;
    explicit TempDir(const std::string& src) {
        path = fs::temp_directory_path() / ("llada_hf_test_" + std::to_string(getpid()) + "_" +
                                            src + "_" + std::to_string(counter++));
        fs::copy(data(src), path, fs::copy_options::recursive);
    }
    ~TempDir() { fs::remove_all(path); }
    void edit_json(const std::string& file, const std::function<void(nlohmann::json&)>& fn) {
        nlohmann::json j = nlohmann::json::parse(std::ifstream(path / file));
        fn(j);
        std::ofstream(path / file) << j.dump(1);
    }
    static inline int counter = 0;
};

std::string load_error(const fs::path& dir) {
    try {
        model::Model::load(dir.string());
        tools::load_model(dir.string());
    } catch (const Error& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST(HfDirectory, LladaF32MatchesItsConvertedGguf) {
    expect_same_model("llada", "llada.gguf");
}

TEST(HfDirectory, ShardedBf16LladaMatchesItsConvertedGguf) {
    expect_same_model("llada-bf16-sharded", "llada-bf16.gguf");
}

TEST(HfDirectory, DreamF16WithBiasesAndATiedHeadMatchesItsConvertedGguf) {
    expect_same_model("dream", "dream.gguf");
}

// LLaDA's Q/K rows must be permuted as the converter does: without it the directory's logits
// would move (the test above holds them equal; this one checks the permutation is not a no-op
// on the fixture, so that test can fail).
TEST(HfDirectory, LladaQkRowsArePermutedAtLoad) {
    auto dir = model::open_hf_directory(data("llada").string());
    auto gguf = format::GgufFile::open(data("llada.gguf").string());
    const auto* q_dir = dir->find_tensor("blk.0.attn_q.weight");
    const auto* q_gguf = gguf->find_tensor("blk.0.attn_q.weight");
    ASSERT_TRUE(q_dir && q_gguf);
    ASSERT_EQ(q_dir->n_bytes, q_gguf->n_bytes);
    EXPECT_EQ(std::memcmp(q_dir->data, q_gguf->data, q_dir->n_bytes), 0);
    auto raw = format::HfDirectory::open(data("llada").string());
    const auto* q_raw = raw->find("model.transformer.blocks.0.q_proj.weight");
    ASSERT_TRUE(q_raw);
    EXPECT_NE(std::memcmp(q_raw->data, q_gguf->data, q_gguf->n_bytes), 0);
}

// llada-quantize reads a directory too: the output is a GGUF with the converter's metadata and
// the directory's vocabulary, quantised.
TEST(HfDirectory, QuantisesToAGguf) {
    const fs::path out =
        fs::temp_directory_path() / ("llada_hf_test_" + std::to_string(getpid()) + ".gguf");
    runtime::ThreadPool pool(2);
    tools::requantize(data("llada-bf16-sharded").string(), out.string(), format::TensorType::Q8_0,
                      pool, true);
    auto f = format::GgufFile::open(out.string());
    EXPECT_EQ(f->get_string("general.architecture"), "llada");
    EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "llama-bpe");
    EXPECT_EQ(f->find_tensor("blk.1.ffn_down.weight")->type, format::TensorType::Q8_0);
    EXPECT_EQ(f->find_tensor("blk.1.ffn_norm.weight")->type, format::TensorType::BF16);
    const tools::LoadedModel lm = tools::load_model(out.string());
    EXPECT_EQ(lm.tok->mask(), 298);
    fs::remove(out);
}

TEST(HfDirectory, MissingFilesAreNamed) {
    {
        TempDir d("llada");
        fs::remove(d.path / "tokenizer.json");
        EXPECT_NE(load_error(d.path).find("tokenizer.json' is missing"), std::string::npos);
    }
    {
        TempDir d("llada");
        fs::remove(d.path / "model.safetensors");
        EXPECT_NE(load_error(d.path).find("has neither model.safetensors nor "
                                          "model.safetensors.index.json"),
                  std::string::npos);
    }
    {
        TempDir d("llada-bf16-sharded");
        fs::remove(d.path / "model-00002-of-00003.safetensors");
        const std::string e = load_error(d.path);
        EXPECT_NE(e.find("model-00002-of-00003.safetensors' is missing (listed in "
                         "model.safetensors.index.json)"),
                  std::string::npos)
            << e;
    }
    {
        TempDir d("dream");
        fs::remove(d.path / "config.json");
        EXPECT_NE(load_error(d.path).find("config.json' is missing"), std::string::npos);
    }
}

TEST(HfDirectory, ConfigFaultsAreNamed) {
    {
        TempDir d("llada");
        d.edit_json("config.json", [](auto& j) { j["architectures"] = {"LLaDAMoEModelLM"}; });
        const std::string e = load_error(d.path);
        EXPECT_NE(e.find("architecture 'LLaDAMoEModelLM' is not supported in a Hugging Face "
                         "directory (supported: LLaDAModelLM, DreamModel)"),
                  std::string::npos)
            << e;
    }
    {
        TempDir d("llada");
        d.edit_json("config.json", [](auto& j) { j["weight_tying"] = "yes"; });
        EXPECT_NE(load_error(d.path).find("config.json': 'weight_tying' is not true or false"),
                  std::string::npos);
    }
    {
        TempDir d("llada");
        d.edit_json("config.json", [](auto& j) { j.erase("n_layers"); });
        EXPECT_NE(load_error(d.path).find("config.json': 'n_layers' is missing"),
                  std::string::npos);
    }
    {
        // Fewer KV heads than the weights have: the K projection's shape disagrees.
        TempDir d("llada");
        d.edit_json("config.json", [](auto& j) { j["n_kv_heads"] = 2; });
        const std::string e = load_error(d.path);
        EXPECT_NE(e.find("model.safetensors': tensor 'model.transformer.blocks.0.k_proj.weight' "
                         "has shape [64, 64]; config.json implies [32, 64]"),
                  std::string::npos)
            << e;
    }
    {
        TempDir d("dream");
        d.edit_json("config.json", [](auto& j) { j["intermediate_size"] = 96; });
        const std::string e = load_error(d.path);
        EXPECT_NE(e.find("tensor 'model.layers.0.mlp.gate_proj.weight' has shape [64, 64]; "
                         "config.json implies [96, 64]"),
                  std::string::npos)
            << e;
    }
}

TEST(HfDirectory, TokenizerFaultsAreNamed) {
    {
        TempDir d("dream");
        d.edit_json("tokenizer.json", [](auto& j) {
            j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
        });
        const std::string e = load_error(d.path);
        EXPECT_NE(e.find("the pre-tokenizer's regexes ('\\w+') are not those of a supported "
                         "pre-type"),
                  std::string::npos)
            << e;
    }
    {
        TempDir d("llada");
        d.edit_json("tokenizer.json", [](auto& j) { j["model"]["type"] = "Unigram"; });
        EXPECT_NE(load_error(d.path).find("model type 'Unigram' is not supported"),
                  std::string::npos);
    }
    {
        TempDir d("llada");
        d.edit_json("config.json", [](auto& j) {
            j["vocab_size"] = 300;
            j["embedding_size"] = 308;
        });
        const std::string e = load_error(d.path);
        EXPECT_NE(e.find("has id 304 but config.json's vocab_size is 300"), std::string::npos) << e;
    }
    {
        // A member of the wrong JSON type (found by hf_tokenizer_fuzz: it escaped as the JSON
        // library's own exception).
        TempDir d("llada");
        d.edit_json("tokenizer.json", [](auto& j) { j["model"] = 1; });
        EXPECT_NE(load_error(d.path).find("has a field of the wrong type"), std::string::npos);
    }
    {
        TempDir d("llada");
        d.edit_json("tokenizer_config.json", [](auto& j) { j["bos_token"] = "<|not_a_token|>"; });
        EXPECT_NE(load_error(d.path).find("bos_token '<|not_a_token|>' is not in the vocabulary"),
                  std::string::npos);
    }
}
