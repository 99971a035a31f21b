// llada-quantize's mixes (tools/quant_mix.h): the file types and their numbers, the per-tensor
// rule against tables derived by hand from llama-quantize's rules, the fallback for rows a block
// does not divide, llama.cpp's own quantised fixtures, and (opt-in) llama-quantize itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/tensor_type.h"
#include "model/hf_model.h"
#include "test_util.h"
#include "tools/quant_mix.h"
#include "tools/synthetic.h"
#include "util/error.h"

using namespace llada;
namespace fs = std::filesystem;
using format::TensorType;

namespace {

fs::path temp(const std::string& name) {
    return fs::temp_directory_path() / ("llada_quant_mix_test_" + std::to_string(getpid()) + name);
}

// A model's tensors as the rule sees them, built by hand from the architectures' layouts.
struct Shape {
    std::string arch = "llada";
    int layers = 2;
    int64_t d = 256, ffn = 768, vocab = 512;
    int n_head = 4, n_kv_head = 4;
    int experts = 0;
    int64_t expert_ffn = 0;
    bool biases = false;  // dream's Q/K/V biases
    bool tied = false;
};

struct Model {
    tools::ModelFacts facts;
    std::vector<tools::TensorFacts> tensors;
    std::vector<std::string> names;  // owns the tensors' names
};

Model build(const Shape& s) {
    Model m;
    std::vector<std::tuple<std::string, uint32_t, int64_t>> t;
    t.emplace_back("token_embd.weight", 2, s.d);
    t.emplace_back("output_norm.weight", 1, s.d);
    if (!s.tied) t.emplace_back("output.weight", 2, s.d);
    const int64_t hd = s.d / s.n_head;
    for (int l = 0; l < s.layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        t.emplace_back(p + "attn_norm.weight", 1, s.d);
        for (const char* w : {"attn_q", "attn_k", "attn_v"}) {
            t.emplace_back(p + w + ".weight", 2, s.d);
            if (s.biases) t.emplace_back(p + w + ".bias", 1, s.n_kv_head * hd);
        }
        t.emplace_back(p + "attn_output.weight", 2, s.n_head * hd);
        t.emplace_back(p + "ffn_norm.weight", 1, s.d);
        if (s.experts > 0) {
            t.emplace_back(p + "attn_q_norm.weight", 1, hd);
            t.emplace_back(p + "attn_k_norm.weight", 1, hd);
            t.emplace_back(p + "ffn_gate_inp.weight", 2, s.d);
            t.emplace_back(p + "ffn_gate_exps.weight", 3, s.d);
            t.emplace_back(p + "ffn_up_exps.weight", 3, s.d);
            t.emplace_back(p + "ffn_down_exps.weight", 3, s.expert_ffn);
        } else {
            t.emplace_back(p + "ffn_gate.weight", 2, s.d);
            t.emplace_back(p + "ffn_up.weight", 2, s.d);
            t.emplace_back(p + "ffn_down.weight", 2, s.ffn);
        }
    }
    m.names.reserve(t.size());
    for (const auto& [name, dims, row] : t) {
        m.names.push_back(name);
        m.tensors.push_back({m.names.back(), dims, row, TensorType::F32});
    }
    m.facts.arch = s.arch;
    m.facts.n_layer = s.layers;
    m.facts.n_gqa = s.n_head / s.n_kv_head;
    m.facts.n_expert = s.experts;
    m.facts.n_attention_wv = s.layers;
    m.facts.tied = s.tied;
    return m;
}

// A hand-derived expectation, rows applied in order (a later row overrides an earlier one):
// `kind` is a tensor's name without "blk.N." and ".weight" ("attn_v", "output"), or "*" for every
// quantised matrix; `layers` empty means every layer.
struct Row {
    std::string kind;
    TensorType type;
    std::set<int> layers = {};
};

std::string kind_of(const std::string& name, int* layer) {
    std::string k = name;
    *layer = -1;
    if (k.rfind("blk.", 0) == 0) {
        const size_t dot = k.find('.', 4);
        *layer = std::stoi(k.substr(4, dot - 4));
        k = k.substr(dot + 1);
    }
    if (k.size() > 7 && k.substr(k.size() - 7) == ".weight") k = k.substr(0, k.size() - 7);
    return k;
}

bool kept(const std::string& kind, uint32_t n_dims) {
    return n_dims < 2 || kind.find("_norm") != std::string::npos || kind == "ffn_gate_inp";
}

// Checks every tensor of `m` under `mix` against `rows`; returns the type counts of the quantised
// matrices ("Q4_K 13, Q6_K 3"), for comparison with llama-quantize's.
std::string check(const Model& m, const char* mix, const std::vector<Row>& rows) {
    const tools::FileType& ft = tools::parse_file_type(mix);
    std::map<std::string, int> counts;
    for (const auto& t : m.tensors) {
        int layer = 0;
        const std::string name(t.name);
        const std::string kind = kind_of(name, &layer);
        TensorType want = t.type;
        if (!kept(kind, t.n_dims)) {
            for (const Row& r : rows) {
                if ((r.kind == "*" || r.kind == kind) &&
                    (r.layers.empty() || r.layers.count(layer))) {
                    want = r.type;
                }
            }
        }
        const TensorType got = tools::choose_type(ft, m.facts, t, false);
        EXPECT_EQ(format::tensor_type_info(got).name,
                  std::string(format::tensor_type_info(want).name))
            << mix << " " << name;
        if (!kept(kind, t.n_dims)) ++counts[format::tensor_type_info(got).name];
    }
    std::string s;
    for (const auto& [name, n] : counts)
        s += (s.empty() ? "" : ", ") + name + " " + std::to_string(n);
    return s;
}

// use_more_bits's layers, written out: the first and last eighth and every third layer between.
const std::set<int> kMoreBits2 = {1};
const std::set<int> kMoreBits16 = {0, 1, 4, 7, 10, 13, 14, 15};
const std::set<int> kMoreBits28 = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27};
const std::set<int> kMoreBits32 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};

}  // namespace

TEST(FileTypes, NamesNumbersAndDefaultTypes) {
    // llama.cpp's enum llama_ftype (include/llama.h) and llama_ftype_get_default_type.
    const std::tuple<const char*, uint32_t, TensorType> want[] = {
        {"F32", 0, TensorType::F32},        {"F16", 1, TensorType::F16},
        {"Q4_0", 2, TensorType::Q4_0},      {"Q4_1", 3, TensorType::Q4_1},
        {"Q8_0", 7, TensorType::Q8_0},      {"Q5_0", 8, TensorType::Q5_0},
        {"Q5_1", 9, TensorType::Q5_1},      {"Q2_K", 10, TensorType::Q2_K},
        {"Q3_K_S", 11, TensorType::Q3_K},   {"Q3_K_M", 12, TensorType::Q3_K},
        {"Q3_K_L", 13, TensorType::Q3_K},   {"Q4_K_S", 14, TensorType::Q4_K},
        {"Q4_K_M", 15, TensorType::Q4_K},   {"Q5_K_S", 16, TensorType::Q5_K},
        {"Q5_K_M", 17, TensorType::Q5_K},   {"Q6_K", 18, TensorType::Q6_K},
        {"Q2_K_S", 21, TensorType::Q2_K},   {"IQ4_NL", 25, TensorType::IQ4_NL},
        {"IQ4_XS", 30, TensorType::IQ4_XS}, {"BF16", 32, TensorType::BF16},
        {"TQ4", 1024, TensorType::TQ4},     {"TQ8", 1025, TensorType::TQ8},
        {"TF16", 1026, TensorType::TF16},
    };
    EXPECT_EQ(tools::file_types().size(), std::size(want));
    for (const auto& [name, number, type] : want) {
        const tools::FileType& ft = tools::parse_file_type(name);
        EXPECT_STREQ(ft.name, name);
        EXPECT_EQ(ft.llama_ftype, number) << name;
        EXPECT_EQ(ft.default_type, type) << name;
    }
    // Case-insensitive, with llama-quantize's aliases.
    EXPECT_STREQ(tools::parse_file_type("q4_k_m").name, "Q4_K_M");
    EXPECT_STREQ(tools::parse_file_type("Q4_K").name, "Q4_K_M");
    EXPECT_STREQ(tools::parse_file_type("q3_k").name, "Q3_K_M");
    EXPECT_STREQ(tools::parse_file_type("Q5_K").name, "Q5_K_M");
    // A file all in one type carries the type llama.cpp guesses for it.
    EXPECT_EQ(tools::file_type_of(TensorType::Q4_K).llama_ftype, 15u);
    EXPECT_EQ(tools::file_type_of(TensorType::Q3_K).llama_ftype, 12u);
    EXPECT_EQ(tools::file_type_of(TensorType::Q8_0).llama_ftype, 7u);
    EXPECT_EQ(tools::parse_type("Q4_K_S"), TensorType::Q4_K);
    // An unknown name lists the accepted ones.
    try {
        tools::parse_file_type("Q4_K_X");
        ADD_FAILURE() << "Q4_K_X was accepted";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("unknown weight type 'Q4_K_X'"), std::string::npos) << m;
        for (const char* n : {"F32", "Q4_K_M", "IQ4_XS", "Q2_K_S", "TF16", "Q4_K"})
            EXPECT_NE(m.find(n), std::string::npos) << n << ": " << m;
    }
}

// The fixture's shape (2 layers, d 256, 4 heads over 2 K/V heads, FFN 768, untied): the counts
// are llama-quantize's, from its manifests in ../shared/fixtures/llamacpp-quants.
TEST(QuantMix, TwoLayerLlada) {
    Shape s;
    s.n_kv_head = 2;
    const Model m = build(s);
    using T = TensorType;
    EXPECT_EQ(check(m, "Q4_K_M",
                    {{"*", T::Q4_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q6_K, kMoreBits2},
                     {"ffn_down", T::Q6_K, kMoreBits2}}),
              "Q4_K 13, Q6_K 3");
    EXPECT_EQ(check(m, "Q5_K_M",
                    {{"*", T::Q5_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q6_K, kMoreBits2},
                     {"ffn_down", T::Q6_K, kMoreBits2}}),
              "Q5_K 13, Q6_K 3");
    EXPECT_EQ(check(m, "Q2_K",
                    {{"*", T::Q2_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q3_K},
                     {"ffn_down", T::Q3_K},
                     {"attn_output", T::Q3_K}}),
              "Q2_K 9, Q3_K 6, Q6_K 1");
    EXPECT_EQ(check(m, "Q3_K_M",
                    {{"*", T::Q3_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q5_K},  // the first two V projections
                     {"ffn_down", T::Q4_K},
                     {"attn_output", T::Q4_K}}),
              "Q3_K 9, Q4_K 4, Q5_K 2, Q6_K 1");
    EXPECT_EQ(check(m, "Q3_K_L",
                    {{"*", T::Q3_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q5_K},
                     {"ffn_down", T::Q5_K},
                     {"attn_output", T::Q5_K}}),
              "Q3_K 9, Q5_K 6, Q6_K 1");
    EXPECT_EQ(check(m, "Q3_K_S", {{"*", T::Q3_K}, {"output", T::Q6_K}}), "Q3_K 15, Q6_K 1");
    EXPECT_EQ(check(m, "Q4_K_S", {{"*", T::Q4_K}, {"output", T::Q6_K}, {"attn_v", T::Q5_K}}),
              "Q4_K 13, Q5_K 2, Q6_K 1");
    EXPECT_EQ(check(m, "Q5_K_S", {{"*", T::Q5_K}, {"output", T::Q6_K}}), "Q5_K 15, Q6_K 1");
    // 2 layers: no first eighth, so IQ4's FFN down and Q2_K_S's keep the default.
    EXPECT_EQ(check(m, "IQ4_XS", {{"*", T::IQ4_XS}, {"output", T::Q6_K}}), "IQ4_XS 15, Q6_K 1");
    EXPECT_EQ(check(m, "IQ4_NL", {{"*", T::IQ4_NL}, {"output", T::Q6_K}}), "IQ4_NL 15, Q6_K 1");
    EXPECT_EQ(check(m, "Q2_K_S", {{"*", T::Q2_K}, {"output", T::Q6_K}}), "Q2_K 15, Q6_K 1");
    EXPECT_EQ(check(m, "Q6_K", {{"*", T::Q6_K}}), "Q6_K 16");
    EXPECT_EQ(check(m, "Q8_0", {{"*", T::Q8_0}}), "Q8_0 16");
    // The legacy types: the head at Q6_K (llada.cpp kept it at Q8_0 before it read Q6_K).
    EXPECT_EQ(check(m, "Q4_0", {{"*", T::Q4_0}, {"output", T::Q6_K}}), "Q4_0 15, Q6_K 1");
    EXPECT_EQ(check(m, "Q4_1", {{"*", T::Q4_1}, {"output", T::Q6_K}}), "Q4_1 15, Q6_K 1");
    EXPECT_EQ(check(m, "Q5_0", {{"*", T::Q5_0}, {"output", T::Q6_K}}), "Q5_0 15, Q6_K 1");
    EXPECT_EQ(check(m, "Q5_1", {{"*", T::Q5_1}, {"output", T::Q6_K}}), "Q5_1 15, Q6_K 1");
    // The float types have no mix.
    for (const char* f : {"F32", "F16", "BF16"}) {
        const TensorType t = tools::parse_file_type(f).default_type;
        EXPECT_EQ(check(m, f, {{"*", t}}), std::string(f) + " 16");
    }
}

// LLaDA-8B's shape: 32 layers (use_more_bits picks 16 of them), d 4096, FFN 12288, no GQA.
TEST(QuantMix, LladaEightB) {
    Shape s;
    s.layers = 32;
    s.d = 4096;
    s.ffn = 12288;
    s.vocab = 126464;
    s.n_head = s.n_kv_head = 32;
    const Model m = build(s);
    using T = TensorType;
    const std::set<int> first2 = {0, 1}, first4 = {0, 1, 2, 3};
    EXPECT_EQ(check(m, "Q4_K_M",
                    {{"*", T::Q4_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q6_K, kMoreBits32},
                     {"ffn_down", T::Q6_K, kMoreBits32}}),
              "Q4_K 193, Q6_K 33");
    EXPECT_EQ(check(m, "Q5_K_M",
                    {{"*", T::Q5_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q6_K, kMoreBits32},
                     {"ffn_down", T::Q6_K, kMoreBits32}}),
              "Q5_K 193, Q6_K 33");
    EXPECT_EQ(check(m, "Q3_K_M",
                    {{"*", T::Q3_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q4_K},
                     {"attn_v", T::Q5_K, first2},
                     {"ffn_down", T::Q4_K},
                     {"ffn_down", T::Q5_K, first2},  // 32 / 16
                     {"attn_output", T::Q4_K}}),
              "Q3_K 129, Q4_K 92, Q5_K 4, Q6_K 1");
    EXPECT_EQ(check(m, "Q2_K",
                    {{"*", T::Q2_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q3_K},
                     {"ffn_down", T::Q3_K},
                     {"attn_output", T::Q3_K}}),
              "Q2_K 129, Q3_K 96, Q6_K 1");
    EXPECT_EQ(
        check(m, "Q2_K_S", {{"*", T::Q2_K}, {"output", T::Q6_K}, {"ffn_down", T::Q4_K, first4}}),
        "Q2_K 221, Q4_K 4, Q6_K 1");
    EXPECT_EQ(
        check(m, "IQ4_XS", {{"*", T::IQ4_XS}, {"output", T::Q6_K}, {"ffn_down", T::Q5_K, first4}}),
        "IQ4_XS 221, Q5_K 4, Q6_K 1");
    EXPECT_EQ(check(m, "Q4_K_S",
                    {{"*", T::Q4_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q5_K, first4},
                     {"ffn_down", T::Q5_K, first4}}),
              "Q4_K 217, Q5_K 8, Q6_K 1");
    EXPECT_EQ(check(m, "Q6_K", {{"*", T::Q6_K}}), "Q6_K 226");
    EXPECT_EQ(check(m, "Q4_0", {{"*", T::Q4_0}, {"output", T::Q6_K}}), "Q4_0 225, Q6_K 1");
    EXPECT_EQ(check(m, "Q8_0", {{"*", T::Q8_0}}), "Q8_0 226");
}

// Dream-7B's shape: 28 layers, 28 heads over 4 K/V heads (n_gqa 7, so the GQA rules apply to
// attn_v), d 3584, FFN 18944, Q/K/V biases (kept F32).
TEST(QuantMix, DreamSevenBWithGqa) {
    Shape s;
    s.arch = "dream";
    s.layers = 28;
    s.d = 3584;
    s.ffn = 18944;
    s.vocab = 152064;
    s.n_head = 28;
    s.n_kv_head = 4;
    s.biases = true;
    const Model m = build(s);
    using T = TensorType;
    const std::set<int> first = {0}, first2 = {0, 1}, first3 = {0, 1, 2};
    EXPECT_EQ(check(m, "Q4_K_M",
                    {{"*", T::Q4_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q6_K, kMoreBits28},
                     {"ffn_down", T::Q6_K, kMoreBits28}}),
              "Q4_K 169, Q6_K 29");
    EXPECT_EQ(check(m, "Q5_K_M",
                    {{"*", T::Q5_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q6_K, kMoreBits28},
                     {"ffn_down", T::Q6_K, kMoreBits28}}),
              "Q5_K 169, Q6_K 29");
    EXPECT_EQ(check(m, "Q2_K",
                    {{"*", T::Q2_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q4_K},  // n_gqa >= 4
                     {"ffn_down", T::Q3_K},
                     {"attn_output", T::Q3_K}}),
              "Q2_K 113, Q3_K 56, Q4_K 28, Q6_K 1");
    EXPECT_EQ(check(m, "Q2_K_S",
                    {{"*", T::Q2_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q4_K},
                     {"ffn_down", T::Q4_K, first3}}),
              "Q2_K 166, Q4_K 31, Q6_K 1");
    EXPECT_EQ(check(m, "Q3_K_M",
                    {{"*", T::Q3_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q4_K},
                     {"attn_v", T::Q5_K, first2},
                     {"ffn_down", T::Q4_K},
                     {"ffn_down", T::Q5_K, first},  // 28 / 16
                     {"attn_output", T::Q4_K}}),
              "Q3_K 113, Q4_K 81, Q5_K 3, Q6_K 1");
    EXPECT_EQ(check(m, "IQ4_XS",
                    {{"*", T::IQ4_XS},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q5_K},  // n_gqa >= 4
                     {"ffn_down", T::Q5_K, first3}}),
              "IQ4_XS 166, Q5_K 31, Q6_K 1");
    EXPECT_EQ(check(m, "IQ4_NL",
                    {{"*", T::IQ4_NL},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q5_K},
                     {"ffn_down", T::Q5_K, first3}}),
              "IQ4_NL 166, Q5_K 31, Q6_K 1");
    EXPECT_EQ(check(m, "Q6_K", {{"*", T::Q6_K}}), "Q6_K 198");
    EXPECT_EQ(check(m, "Q4_0", {{"*", T::Q4_0}, {"output", T::Q6_K}}), "Q4_0 197, Q6_K 1");
    // Tied (no output.weight): the embedding is the head and takes the head's type.
    s.tied = true;
    s.layers = 2;
    const Model tied = build(s);
    EXPECT_EQ(check(tied, "Q4_K_M",
                    {{"*", T::Q4_K},
                     {"token_embd", T::Q6_K},
                     {"attn_v", T::Q6_K, kMoreBits2},
                     {"ffn_down", T::Q6_K, kMoreBits2}}),
              "Q4_K 12, Q6_K 3");
    EXPECT_EQ(check(tied, "Q4_0", {{"*", T::Q4_0}, {"token_embd", T::Q6_K}}), "Q4_0 14, Q6_K 1");
    EXPECT_EQ(check(tied, "Q8_0", {{"*", T::Q8_0}}), "Q8_0 15");
}

// LLaDA-MoE-7B-A1B's shape: 16 layers of 64 experts; the expert stacks follow the FFN rules by
// the layer in their name, the routers stay F32.
TEST(QuantMix, LladaMoeExpertStacks) {
    Shape s;
    s.arch = "llada-moe";
    s.layers = 16;
    s.d = 2048;
    s.vocab = 157184;
    s.n_head = s.n_kv_head = 16;
    s.experts = 64;
    s.expert_ffn = 1024;
    const Model m = build(s);
    using T = TensorType;
    const std::set<int> first = {0}, first2 = {0, 1};
    EXPECT_EQ(check(m, "Q4_K_M",
                    {{"*", T::Q4_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q6_K, kMoreBits16},
                     {"ffn_down_exps", T::Q6_K, kMoreBits16}}),
              "Q4_K 97, Q6_K 17");
    EXPECT_EQ(check(m, "Q2_K",
                    {{"*", T::Q2_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q3_K},
                     {"ffn_down_exps", T::Q3_K},
                     {"attn_output", T::Q3_K}}),
              "Q2_K 65, Q3_K 48, Q6_K 1");
    EXPECT_EQ(check(m, "Q3_K_M",
                    {{"*", T::Q3_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q4_K},
                     {"attn_v", T::Q5_K, first2},
                     {"ffn_down_exps", T::Q4_K},
                     {"ffn_down_exps", T::Q5_K, first},
                     {"attn_output", T::Q4_K}}),
              "Q3_K 65, Q4_K 45, Q5_K 3, Q6_K 1");
    EXPECT_EQ(check(m, "IQ4_XS",
                    {{"*", T::IQ4_XS}, {"output", T::Q6_K}, {"ffn_down_exps", T::Q5_K, first2}}),
              "IQ4_XS 111, Q5_K 2, Q6_K 1");
    EXPECT_EQ(check(m, "Q6_K", {{"*", T::Q6_K}}), "Q6_K 114");
    EXPECT_EQ(check(m, "Q4_0", {{"*", T::Q4_0}, {"output", T::Q6_K}}), "Q4_0 113, Q6_K 1");
}

// Exactly 8 experts (Mixtral's count) switches on llama-quantize's 8-expert rules: V and K
// projections in Q8_0, attention output in Q5_K for most mixes (not Q3_K_L, whose dense rule no
// longer applies either).
TEST(QuantMix, EightExperts) {
    Shape s;
    s.arch = "llada-moe";
    s.experts = 8;
    s.expert_ffn = 256;
    const Model m = build(s);
    using T = TensorType;
    EXPECT_EQ(check(m, "Q4_K_M",
                    {{"*", T::Q4_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q8_0},
                     {"attn_k", T::Q8_0},
                     {"attn_output", T::Q5_K},
                     {"ffn_down_exps", T::Q6_K, kMoreBits2}}),
              "Q4_K 8, Q5_K 2, Q6_K 2, Q8_0 4");
    EXPECT_EQ(check(m, "Q2_K",
                    {{"*", T::Q2_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q8_0},
                     {"attn_k", T::Q8_0},
                     {"attn_output", T::Q5_K},
                     {"ffn_down_exps", T::Q3_K}}),
              "Q2_K 7, Q3_K 2, Q5_K 2, Q6_K 1, Q8_0 4");
    EXPECT_EQ(check(m, "Q3_K_L",
                    {{"*", T::Q3_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q8_0},
                     {"attn_k", T::Q8_0},
                     {"ffn_down_exps", T::Q5_K}}),
              "Q3_K 9, Q5_K 2, Q6_K 1, Q8_0 4");
    EXPECT_EQ(check(m, "IQ4_XS",
                    {{"*", T::IQ4_XS},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q8_0},
                     {"attn_k", T::Q8_0},
                     {"attn_output", T::Q5_K}}),
              "IQ4_XS 9, Q5_K 2, Q6_K 1, Q8_0 4");
    EXPECT_EQ(check(m, "Q5_K_M",
                    {{"*", T::Q5_K},
                     {"output", T::Q6_K},
                     {"attn_v", T::Q8_0},
                     {"attn_k", T::Q8_0},
                     {"ffn_down_exps", T::Q6_K, kMoreBits2}}),
              "Q5_K 10, Q6_K 2, Q8_0 4");
    EXPECT_EQ(check(m, "Q6_K", {{"*", T::Q6_K}, {"attn_v", T::Q8_0}, {"attn_k", T::Q8_0}}),
              "Q6_K 12, Q8_0 4");
    EXPECT_EQ(
        check(m, "Q4_0",
              {{"*", T::Q4_0}, {"output", T::Q6_K}, {"attn_v", T::Q8_0}, {"attn_k", T::Q8_0}}),
        "Q4_0 11, Q6_K 1, Q8_0 4");
    EXPECT_EQ(check(m, "Q8_0", {{"*", T::Q8_0}}), "Q8_0 16");
}

// --pure: every matrix in the default type, the head too; the fallback still applies.
TEST(QuantMix, PureIsTheDefaultTypeEverywhere) {
    Shape s;
    s.layers = 32;
    const Model m = build(s);
    const tools::FileType& ft = tools::parse_file_type("Q4_K_M");
    for (const auto& t : m.tensors) {
        const TensorType want =
            t.n_dims < 2 || std::string(t.name).find("_norm") != std::string::npos
                ? TensorType::F32
                : TensorType::Q4_K;
        EXPECT_EQ(tools::choose_type(ft, m.facts, t, true), want) << t.name;
    }
    const tools::TensorFacts narrow{"blk.0.attn_v.weight", 2, 64, TensorType::F32};
    EXPECT_EQ(tools::choose_type(ft, m.facts, narrow, true), TensorType::Q5_0);
}

// Rows a type's block does not divide: llama-quantize's fallback (K-quants to the 32-block type
// of about as many bits, IQ4_XS to IQ4_NL, F16 when even 32 does not divide), said in a note;
// Q8_0 straight away for such a head; an error where no fallback is defined.
TEST(QuantMix, FallbackForRowsTheBlockDoesNotDivide) {
    Shape s;
    s.d = 64;
    s.ffn = 64;
    const Model m = build(s);
    using T = TensorType;
    EXPECT_EQ(check(m, "Q4_K_M",
                    {{"*", T::Q5_0},
                     {"output", T::Q8_0},
                     {"attn_v", T::Q8_0, kMoreBits2},
                     {"ffn_down", T::Q8_0, kMoreBits2}}),
              "Q5_0 13, Q8_0 3");
    EXPECT_EQ(check(m, "Q5_K_S", {{"*", T::Q5_1}, {"output", T::Q8_0}}), "Q5_1 15, Q8_0 1");
    EXPECT_EQ(check(m, "Q2_K",
                    {{"*", T::Q4_0},
                     {"output", T::Q8_0},
                     {"attn_v", T::Q4_0},
                     {"ffn_down", T::Q4_0},
                     {"attn_output", T::Q4_0}}),
              "Q4_0 15, Q8_0 1");
    EXPECT_EQ(check(m, "IQ4_XS", {{"*", T::IQ4_NL}, {"output", T::Q8_0}}), "IQ4_NL 15, Q8_0 1");
    // Q4_0's head goes to Q6_K, whose fallback is Q8_0: the same head as before for narrow rows.
    EXPECT_EQ(check(m, "Q4_0", {{"*", T::Q4_0}, {"output", T::Q8_0}}), "Q4_0 15, Q8_0 1");

    const tools::FileType& q4km = tools::parse_file_type("Q4_K_M");
    std::string note;
    EXPECT_EQ(
        tools::choose_type(q4km, m.facts, {"blk.1.attn_v.weight", 2, 64, T::F32}, false, &note),
        T::Q8_0);
    EXPECT_EQ(note,
              "blk.1.attn_v.weight: rows of 64 values are not a multiple of Q6_K's block of 256: "
              "Q8_0 instead (llama-quantize's fallback)");
    note.clear();
    EXPECT_EQ(tools::choose_type(q4km, m.facts, {"output.weight", 2, 64, T::F32}, false, &note),
              T::Q8_0);
    EXPECT_EQ(note, "");  // the head rule itself, not a fallback
    EXPECT_EQ(
        tools::choose_type(q4km, m.facts, {"blk.0.attn_q.weight", 2, 48, T::F32}, false, &note),
        T::F16);
    EXPECT_NE(note.find("F16 instead"), std::string::npos) << note;
    try {
        tools::choose_type(tools::parse_file_type("Q4_0"), m.facts,
                           {"blk.0.attn_q.weight", 2, 48, T::F32}, false);
        ADD_FAILURE() << "Q4_0 took rows of 48";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight: rows of 48 values are not a "
                                             "multiple of Q4_0's block of 32, and Q4_0 has no "
                                             "fallback type"),
                  std::string::npos)
            << e.what();
    }
}

// What the rule reads from a file: block count, GQA, experts, tied head, V projections.
TEST(QuantMix, ModelFactsFromAFile) {
    runtime::ThreadPool pool(1);
    struct Case {
        const char* shape;
        const char* arch;
        int n_layer, n_gqa, n_expert;
    };
    const Case cases[] = {
        {"layers=3,d=64,heads=4,kv_heads=2,ffn=64,vocab=320", "llada", 3, 2, 0},
        {"dream-7b,layers=2,d=64,heads=8,kv_heads=2,ffn=64,vocab=320", "dream", 2, 4, 0},
        {"llada-moe,layers=2,d=64,heads=4,experts=8,used=2,expert_ffn=32,vocab=320", "llada-moe", 2,
         1, 8},
    };
    for (const Case& c : cases) {
        const fs::path path = temp("facts.gguf");
        tools::write_synthetic(tools::parse_shape(c.shape), TensorType::F32, 1, path.string(),
                               pool);
        const tools::ModelFacts f = tools::model_facts(*format::GgufFile::open(path.string()));
        EXPECT_EQ(f.arch, c.arch);
        EXPECT_EQ(f.n_layer, c.n_layer) << c.shape;
        EXPECT_EQ(f.n_gqa, c.n_gqa) << c.shape;
        EXPECT_EQ(f.n_expert, c.n_expert) << c.shape;
        EXPECT_EQ(f.n_attention_wv, c.n_layer) << c.shape;
        EXPECT_FALSE(f.tied) << c.shape;
        EXPECT_FALSE(f.llama_70b) << c.shape;
        fs::remove(path);
    }
    // The Hugging Face fixture: LLaDA, 2 layers, untied.
    const tools::ModelFacts hf = tools::model_facts(
        *model::open_model_file((fs::path(LLADA_TEST_DATA) / "hf" / "llada").string()));
    EXPECT_EQ(hf.arch, "llada");
    EXPECT_EQ(hf.n_layer, 2);
    EXPECT_FALSE(hf.tied);
}

// A synthetic model of a mix's name has the types llama-quantize's rules give the same shape:
// those of re-quantising its F32 twin to the mix; one of a tensor type's name is pure.
// Under AddressSanitizer (37 s of its ctest for the nine pairs) each shape takes one mix and each
// mix one shape; the release build runs every pair.
TEST(QuantMix, SyntheticMixesTakeTheMixesTypes) {
    runtime::ThreadPool pool(2);
    const char* const shapes[] = {
        "layers=8,d=256,heads=4,kv_heads=4,ffn=256,vocab=512",
        "dream-7b,layers=4,d=256,heads=8,kv_heads=2,ffn=256,vocab=512",
        "llada-moe,layers=2,d=256,heads=4,experts=4,used=2,expert_ffn=256,vocab=512"};
    const char* const mixes[] = {"Q4_K_M", "Q3_K_S", "Q6_K"};
    for (int si = 0; si < 3; ++si) {
        const char* shape = shapes[si];
        for (int mi = 0; mi < 3; ++mi) {
            const char* mix = mixes[mi];
#if defined(LLADA_TEST_ASAN)
            if (mi != si) continue;
#endif
            SCOPED_TRACE(std::string(shape) + " " + mix);
            const tools::SyntheticShape s = tools::parse_shape(shape);
            const tools::FileType& ft = tools::parse_file_type(mix);
            const fs::path f32 = temp("syn-f32.gguf"), direct = temp("syn-mix.gguf"),
                           requant = temp("syn-requant.gguf");
            tools::write_synthetic(s, TensorType::F32, 1, f32.string(), pool);
            tools::write_synthetic(s, ft, 1, direct.string(), pool);
            tools::requantize(f32.string(), requant.string(), ft, pool, false);
            auto a = format::GgufFile::open(direct.string());
            auto b = format::GgufFile::open(requant.string());
            const bool pure = std::string(mix) == "Q6_K";
            for (const auto& t : a->tensors()) {
                if (t.n_dims < 2) continue;
                const TensorType want = pure && t.name.find("ffn_gate_inp") == std::string::npos
                                            ? ft.default_type
                                            : b->find_tensor(t.name)->type;
                EXPECT_EQ(t.type, want) << t.name;
            }
            fs::remove(f32);
            fs::remove(direct);
            fs::remove(requant);
        }
    }
}

// llama.cpp's own quantised files (../shared/fixtures/llamacpp-quants, written by llama-quantize
// from F32 models): every tensor's type and general.file_type are what the rule gives.
TEST(QuantMix, MatchesLlamaQuantizesFixtures) {
    const fs::path dir = fs::path(LLADA_SHARED_FIXTURES) / "llamacpp-quants";
    if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " is absent: skipped";
    int files = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
        const fs::path manifest = entry.path() / "manifest.json";
        if (!fs::exists(manifest)) continue;
        std::ifstream in(manifest);
        const std::string text((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
        const size_t at = text.find("\"type\": \"");
        ASSERT_NE(at, std::string::npos) << manifest;
        const std::string type = text.substr(at + 9, text.find('"', at + 9) - at - 9);
        SCOPED_TRACE(entry.path().filename().string() + " " + type);
        const tools::FileType& ft = tools::parse_file_type(type);
        auto f = format::GgufFile::open((entry.path() / "model.gguf").string());
        const tools::ModelFacts facts = tools::model_facts(*f);
        EXPECT_EQ(f->get_uint("general.file_type"), ft.llama_ftype);
        for (const auto& t : f->tensors()) {
            const TensorType got = tools::choose_type(
                ft, facts, {t.name, t.n_dims, static_cast<int64_t>(t.ne[0]), TensorType::F32},
                false);
            EXPECT_EQ(format::tensor_type_info(got).name,
                      std::string(format::tensor_type_info(t.type).name))
                << t.name;
        }
        ++files;
    }
    EXPECT_GT(files, 0);
}

namespace {

// name -> type of a GGUF's tensors.
std::map<std::string, std::string> type_table(const fs::path& path) {
    std::map<std::string, std::string> m;
    auto f = format::GgufFile::open(path.string());
    for (const auto& t : f->tensors())
        m[t.name] = format::tensor_type_info(t.type).name;
    return m;
}

// name -> type from llama-quantize --dry-run's log, one line per tensor:
// "[   1/  16]   token_embd.weight - [  256,   512, ...], type =    f32, size = ... (q2_K)" or,
// for a tensor kept as it is, no "(type)" at the end.
std::map<std::string, std::string> dry_run_table(const std::string& log) {
    std::map<std::string, std::string> m;
    std::istringstream in(log);
    std::string line;
    while (std::getline(in, line)) {
        const size_t close = line.find("] ");
        const size_t dash = line.find(" - [");
        const size_t type_at = line.find("type = ");
        if (line.rfind("[", 0) != 0 || close == std::string::npos || dash == std::string::npos ||
            type_at == std::string::npos)
            continue;
        std::string name = line.substr(close + 2, dash - close - 2);
        name.erase(0, name.find_first_not_of(' '));
        name.erase(name.find_last_not_of(' ') + 1);
        std::string type;
        const size_t open = line.rfind('(');
        if (line.back() == ')' && open != std::string::npos && open > type_at) {
            type = line.substr(open + 1, line.size() - open - 2);
        } else {
            type = line.substr(type_at + 7, line.find(',', type_at) - type_at - 7);
            type.erase(0, type.find_first_not_of(' '));
        }
        const auto t = format::tensor_type_by_name(type);
        m[name] = t ? format::tensor_type_info(*t).name : type;
    }
    return m;
}

}  // namespace

// llama-quantize itself (opt-in: LLADA_LLAMA_CPP_BIN names the bin/ directory of a llama.cpp build
// with llama-quantize and llama-bench): for a random-weight F32 model of each architecture (rows
// multiples of 256, so the K-quants apply) and for the Hugging Face fixture (d 64: every rule
// through its fallback), llada-quantize's tensor types equal llama-quantize's for every mix,
// general.file_type too, and llama.cpp loads llada-quantize's file. Q2_K_S, which llama-quantize
// writes only with an importance matrix, is compared with its --dry-run plan.
TEST(QuantMix, SameTypesAsLlamaQuantize) {
    const char* bin = std::getenv("LLADA_LLAMA_CPP_BIN");
    if (bin == nullptr || *bin == '\0') {
        GTEST_SKIP() << "LLADA_LLAMA_CPP_BIN (a llama.cpp build's bin/ with llama-quantize and "
                        "llama-bench) is not set: skipped";
    }
    const std::string quantize = std::string(bin) + "/llama-quantize";
    const std::string bench = std::string(bin) + "/llama-bench";
    if (!fs::exists(quantize) || !fs::exists(bench)) {
        GTEST_SKIP() << bin << " has no llama-quantize or llama-bench: skipped";
    }
    const char* mixes[] = {"Q4_0",   "Q4_1",   "Q5_0",   "Q5_1",   "Q8_0",   "Q2_K",   "Q2_K_S",
                           "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M",
                           "Q6_K",   "IQ4_NL", "IQ4_XS", "F16",    "BF16",   "F32"};
    runtime::ThreadPool pool(2);
    const fs::path hf_f32 = temp("hf-f32.gguf");
    const std::string hf_dir = (fs::path(LLADA_TEST_DATA) / "hf" / "llada").string();
    tools::requantize(hf_dir, hf_f32.string(), TensorType::F32, pool, true);
    struct Source {
        std::string label, shape;  // shape: a synthetic model; empty: the Hugging Face fixture
    };
    const Source sources[] = {
        {"llada 2 layers GQA 2", "layers=2,d=256,heads=4,kv_heads=2,ffn=768,vocab=512,ctx=128"},
        {"llada 32 layers", "layers=32,d=256,heads=4,ffn=256,vocab=512,ctx=128"},
        {"dream GQA 4", "dream-7b,layers=2,d=256,heads=8,kv_heads=2,ffn=512,vocab=512,ctx=128"},
        {"llada-moe 8 experts",
         "llada-moe,layers=2,d=256,heads=4,experts=8,used=2,expert_ffn=256,vocab=512,ctx=128"},
        {"llada-moe 4 experts",
         "llada-moe,layers=3,d=256,heads=4,experts=4,used=2,expert_ffn=256,vocab=512,ctx=128"},
        {"Hugging Face directory", ""},
    };
    for (const Source& src : sources) {
        const fs::path f32 = src.shape.empty() ? hf_f32 : temp("src-f32.gguf");
        if (!src.shape.empty()) {
            tools::write_synthetic(tools::parse_shape(src.shape), TensorType::F32, 7, f32.string(),
                                   pool);
        }
        // llada-quantize reads the directory itself; llama-quantize its F32 conversion.
        const std::string ours_in = src.shape.empty() ? hf_dir : f32.string();
        for (const char* mix : mixes) {
            SCOPED_TRACE(src.label + " " + mix);
            const fs::path theirs = temp("llama.gguf"), ours = temp("ours.gguf");
            const bool dry = std::string(mix) == "Q2_K_S";
            const auto r =
                test::run_command(quantize + (dry ? " --dry-run " : " ") + f32.string() + " " +
                                      (dry ? "" : theirs.string() + " ") + mix + " 1",
                                  "llama-quantize");
            ASSERT_EQ(r.status, 0) << r.out << r.err;
            tools::requantize(ours_in, ours.string(), tools::parse_file_type(mix), pool, false);
            const auto want = dry ? dry_run_table(r.out + r.err) : type_table(theirs);
            EXPECT_EQ(type_table(ours), want);
            auto o = format::GgufFile::open(ours.string());
            if (!dry) {
                auto t = format::GgufFile::open(theirs.string());
                EXPECT_EQ(o->get_uint("general.file_type"), t->get_uint("general.file_type"));
                EXPECT_EQ(o->get_uint("general.quantization_version"),
                          t->get_uint("general.quantization_version"));
            } else {
                EXPECT_EQ(o->get_uint("general.file_type"), 21u);  // LLAMA_FTYPE_MOSTLY_Q2_K_S
            }
            const auto b = test::run_command(
                bench + " -m " + ours.string() + " -p 8 -n 0 -r 1 -t 1", "llama-bench");
            const size_t tail = b.err.size() > 2000 ? b.err.size() - 2000 : 0;
            EXPECT_EQ(b.status, 0) << b.out << b.err.substr(tail);
            fs::remove(theirs);
            fs::remove(ours);
        }
        if (!src.shape.empty()) fs::remove(f32);
    }
    fs::remove(hf_f32);
}
