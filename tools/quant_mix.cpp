// llama-quantize's mixes as tables: file types, tensor parts, per-part rules, row fallbacks.
#include "tools/quant_mix.h"

#include <cctype>
#include <charconv>
#include <initializer_list>
#include <optional>

#include "util/error.h"

namespace llada::tools {
namespace {

using format::TensorType;

// llama.cpp's file type numbers (enum llama_ftype, include/llama.h), the ones used here.
namespace lf {
enum : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q8_0 = 7,
    Q5_0 = 8,
    Q5_1 = 9,
    Q2_K = 10,
    Q3_K_S = 11,
    Q3_K_M = 12,
    Q3_K_L = 13,
    Q4_K_S = 14,
    Q4_K_M = 15,
    Q5_K_S = 16,
    Q5_K_M = 17,
    Q6_K = 18,
    Q2_K_S = 21,
    IQ4_NL = 25,
    IQ4_XS = 30,
    BF16 = 32,
};
}  // namespace lf

constexpr uint32_t tile_id(TensorType t) {
    return static_cast<uint32_t>(t);
}

constexpr FileType kFileTypes[] = {
    {"F32", lf::F32, TensorType::F32},
    {"F16", lf::F16, TensorType::F16},
    {"BF16", lf::BF16, TensorType::BF16},
    {"Q8_0", lf::Q8_0, TensorType::Q8_0},
    {"Q6_K", lf::Q6_K, TensorType::Q6_K},
    {"Q5_K_M", lf::Q5_K_M, TensorType::Q5_K},
    {"Q5_K_S", lf::Q5_K_S, TensorType::Q5_K},
    {"Q5_1", lf::Q5_1, TensorType::Q5_1},
    {"Q5_0", lf::Q5_0, TensorType::Q5_0},
    {"Q4_K_M", lf::Q4_K_M, TensorType::Q4_K},
    {"Q4_K_S", lf::Q4_K_S, TensorType::Q4_K},
    {"Q4_1", lf::Q4_1, TensorType::Q4_1},
    {"Q4_0", lf::Q4_0, TensorType::Q4_0},
    {"IQ4_NL", lf::IQ4_NL, TensorType::IQ4_NL},
    {"IQ4_XS", lf::IQ4_XS, TensorType::IQ4_XS},
    {"Q3_K_L", lf::Q3_K_L, TensorType::Q3_K},
    {"Q3_K_M", lf::Q3_K_M, TensorType::Q3_K},
    {"Q3_K_S", lf::Q3_K_S, TensorType::Q3_K},
    {"Q2_K", lf::Q2_K, TensorType::Q2_K},
    {"Q2_K_S", lf::Q2_K_S, TensorType::Q2_K},
    {"TQ4", tile_id(TensorType::TQ4), TensorType::TQ4},
    {"TQ8", tile_id(TensorType::TQ8), TensorType::TQ8},
    {"TF16", tile_id(TensorType::TF16), TensorType::TF16},
};

// llama-quantize's short names for the medium k-quant mixes.
constexpr std::pair<const char*, const char*> kAliases[] = {
    {"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};

bool same_name(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::toupper(static_cast<unsigned char>(a[i])) !=
            std::toupper(static_cast<unsigned char>(b[i])))
            return false;
    }
    return true;
}

const FileType* find_file_type(std::string_view name) {
    for (const auto& [alias, target] : kAliases)
        if (same_name(name, alias)) name = target;
    for (const FileType& ft : kFileTypes)
        if (same_name(name, ft.name)) return &ft;
    return nullptr;
}

bool contains(std::string_view s, std::string_view part) {
    return s.find(part) != std::string_view::npos;
}

// The rules below are llama-quantize's (llama.cpp's src/llama-quant.cpp at 3f545be) for the file
// types above, restricted to what llada, dream and llada-moe files contain.

// Which tensors are quantised at all. llama-quantize keeps every 1-D tensor (norms, biases) as it
// is, and of the matrices it keeps the norms and the MoE routers (ffn_gate_inp), which are small
// and pick the experts each token runs through. It keeps a few more small tensors of other
// architectures (RWKV, Mamba, T5, BERT, vision towers), none of which these models have.
bool quantised(const TensorFacts& t) {
    return t.n_dims >= 2 && t.name.ends_with("weight") && !contains(t.name, "_norm.weight") &&
           !contains(t.name, "ffn_gate_inp.weight");
}

// The parts of a model the rules tell apart, found by name as llama-quantize finds them.
enum class Part { Head, TokenEmbd, AttnV, AttnK, AttnOutput, FfnDown, Other };

// Checked in order; the first match names the part. Q projections, FFN up and FFN gate are
// categories of llama-quantize too, but only its IQ1, IQ2 and IQ3 mixes (not written here) have
// rules for them, so they are Other here; they stay in the list because llama-quantize checks
// their names before ffn_down's.
constexpr std::pair<const char*, Part> kParts[] = {
    // A fused QKV projection and DeepSeek's compressed K/V one carry the values, as attn_v does.
    {"attn_qkv.weight", Part::AttnV},
    {"attn_kv_b.weight", Part::AttnV},
    {"attn_v.weight", Part::AttnV},
    {"attn_k.weight", Part::AttnK},
    {"attn_q.weight", Part::Other},
    {"attn_output.weight", Part::AttnOutput},
    {"ffn_up", Part::Other},  // ffn_up.weight and the expert stacks ffn_up_exps.weight
    {"ffn_gate", Part::Other},
    {"ffn_down", Part::FfnDown},  // ffn_down.weight and ffn_down_exps.weight
};

Part part_of(std::string_view name, bool tied) {
    if (name == "output.weight") return Part::Head;
    // Without output.weight the head is the embedding matrix, so it takes the head's type.
    if (name == "token_embd.weight") return tied ? Part::Head : Part::TokenEmbd;
    for (const auto& [pattern, part] : kParts)
        if (contains(name, pattern)) return part;
    return Part::Other;
}

// The block "blk.N." a tensor belongs to, or -1.
int layer_of(std::string_view name) {
    if (!name.starts_with("blk.")) return -1;
    int layer = -1;
    const char* begin = name.data() + 4;
    const auto [end, ec] = std::from_chars(begin, name.data() + name.size(), layer);
    return ec == std::errc() && end != begin && *end == '.' ? layer : -1;
}

// The layers llama.cpp's k-quant mixes give more bits to: the first and the last eighth, and
// every third layer between (the pattern llama.cpp's k-quants chose by measuring perplexity).
bool use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

enum class When {
    Always,
    Gqa4,             // four or more query heads share each K/V head
    MoreBits,         // use_more_bits(layer)
    FirstEighth,      // layer < n / 8
    FirstSixteenth,   // layer < n / 16
    FirstTwo,         // layer < 2
    FirstFour,        // layer < 4
    EightExperts,     // the model has exactly 8 experts (Mixtral's count)
    NotEightExperts,  // any other count, dense models included
};

struct Rule {
    Part part;
    uint64_t mixes;  // a bit per llama_ftype number
    When when;
    TensorType type;
};

constexpr uint64_t mixes(std::initializer_list<uint32_t> ftypes) {
    uint64_t bits = 0;
    for (uint32_t f : ftypes)
        bits |= uint64_t{1} << f;
    return bits;
}
constexpr uint64_t kEveryMix = ~uint64_t{0};

// The mixes' rules, llama-quantize's for the file types above. For a tensor, the first rule of
// its part whose file type and condition match gives its type; without one it takes the default.
// The head is decided before these (choose_type).
constexpr Rule kRules[] = {
    // V projections. With 8 experts (Mixtral) the attention, shared by all experts, is a small
    // part of the model: llama.cpp notes that Q8_0 for V and K costs Mixtral only about 128 MB.
    {Part::AttnV, kEveryMix, When::EightExperts, TensorType::Q8_0},
    // With grouped K/V heads the V matrix is n_gqa times smaller than Q's, so more bits there
    // cost little and buy accuracy (llama.cpp's reasoning for LLaMA-2-70B's 8 heads per K/V).
    {Part::AttnV, mixes({lf::Q2_K}), When::Gqa4, TensorType::Q4_K},
    {Part::AttnV, mixes({lf::Q2_K}), When::Always, TensorType::Q3_K},
    {Part::AttnV, mixes({lf::Q2_K_S}), When::Gqa4, TensorType::Q4_K},
    {Part::AttnV, mixes({lf::Q3_K_M}), When::FirstTwo, TensorType::Q5_K},
    {Part::AttnV, mixes({lf::Q3_K_M}), When::Always, TensorType::Q4_K},
    {Part::AttnV, mixes({lf::Q3_K_L}), When::Always, TensorType::Q5_K},
    {Part::AttnV, mixes({lf::IQ4_NL, lf::IQ4_XS}), When::Gqa4, TensorType::Q5_K},
    {Part::AttnV, mixes({lf::Q4_K_M, lf::Q5_K_M}), When::MoreBits, TensorType::Q6_K},
    {Part::AttnV, mixes({lf::Q4_K_S}), When::FirstFour, TensorType::Q5_K},

    {Part::AttnK, kEveryMix, When::EightExperts, TensorType::Q8_0},

    // Attention output projections: with 8 experts these rules replace the dense ones.
    {Part::AttnOutput,
     mixes({lf::Q2_K, lf::Q3_K_S, lf::Q3_K_M, lf::IQ4_NL, lf::Q4_K_S, lf::Q4_K_M, lf::IQ4_XS}),
     When::EightExperts, TensorType::Q5_K},
    {Part::AttnOutput, mixes({lf::Q2_K}), When::NotEightExperts, TensorType::Q3_K},
    {Part::AttnOutput, mixes({lf::Q3_K_M}), When::NotEightExperts, TensorType::Q4_K},
    {Part::AttnOutput, mixes({lf::Q3_K_L}), When::NotEightExperts, TensorType::Q5_K},

    // FFN down projections (the expert stacks' too, by the layer in their name). llama.cpp notes
    // that the first few layers' FFN down weights are prone to large quantisation errors.
    {Part::FfnDown, mixes({lf::Q2_K}), When::Always, TensorType::Q3_K},
    {Part::FfnDown, mixes({lf::Q2_K_S}), When::FirstEighth, TensorType::Q4_K},
    {Part::FfnDown, mixes({lf::Q3_K_M}), When::FirstSixteenth, TensorType::Q5_K},
    {Part::FfnDown, mixes({lf::Q3_K_M}), When::Always, TensorType::Q4_K},
    {Part::FfnDown, mixes({lf::Q3_K_L}), When::Always, TensorType::Q5_K},
    {Part::FfnDown, mixes({lf::Q4_K_M, lf::Q5_K_M}), When::MoreBits, TensorType::Q6_K},
    {Part::FfnDown, mixes({lf::IQ4_NL, lf::IQ4_XS, lf::Q4_K_S}), When::FirstEighth,
     TensorType::Q5_K},
};

// llama-quantize's fallback for rows the chosen type's block does not divide: a type of 32-value
// blocks with about as many bits (the k-quants and IQ4_XS need rows of 256 values). When even that
// block does not divide the rows, F16.
constexpr std::pair<TensorType, TensorType> kFallbacks[] = {
    {TensorType::IQ4_XS, TensorType::IQ4_NL}, {TensorType::Q2_K, TensorType::Q4_0},
    {TensorType::Q3_K, TensorType::Q4_0},     {TensorType::Q4_K, TensorType::Q5_0},
    {TensorType::Q5_K, TensorType::Q5_1},     {TensorType::Q6_K, TensorType::Q8_0},
};

int64_t block_of(TensorType t) {
    return format::tensor_type_info(t).block_elems;
}

TensorType fit_rows(TensorType type, const TensorFacts& t, std::string* note) {
    if (t.row_length % block_of(type) == 0) return type;
    const char* name = format::tensor_type_info(type).name;
    const std::string rows = std::string(t.name) + ": rows of " + std::to_string(t.row_length) +
                             " values are not a multiple of " + name + "'s block of " +
                             std::to_string(block_of(type));
    for (const auto& [from, to] : kFallbacks) {
        if (from != type) continue;
        const TensorType fallback = t.row_length % block_of(to) == 0 ? to : TensorType::F16;
        if (note) {
            *note = rows + ": " + format::tensor_type_info(fallback).name +
                    " instead (llama-quantize's fallback)";
        }
        return fallback;
    }
    throw Error(rows + ", and " + name + " has no fallback type (llama-quantize refuses it too)");
}

// The mix's type for a quantised tensor, before the fallback.
TensorType mix_rule(const FileType& ft, const ModelFacts& m, const TensorFacts& t) {
    const TensorType def = ft.default_type;
    const Part part = part_of(t.name, m.tied);
    if (part == Part::Head) {
        // The head, which turns every hidden state into logits, takes 6 bits in every mix (Q8_0
        // stays Q8_0); llama.cpp states no reason. Rows the default type's block does not divide
        // get Q8_0 at once rather than a fallback.
        if (t.row_length % block_of(def) != 0) return TensorType::Q8_0;
        return def == TensorType::Q8_0 ? TensorType::Q8_0 : TensorType::Q6_K;
    }
    const int layer = layer_of(t.name);
    // llama.cpp counts the V projections in its reading order, block by block, so with one per
    // block the count so far is the layer; FFN down layers are counted against block_count.
    const int n = part == Part::AttnV ? m.n_attention_wv : m.n_layer;
    auto holds = [&](When when) {
        switch (when) {
            case When::Always:
                return true;
            case When::Gqa4:
                return m.n_gqa >= 4;
            case When::MoreBits:
                return use_more_bits(layer, n);
            case When::FirstEighth:
                return layer < n / 8;
            case When::FirstSixteenth:
                return layer < n / 16;
            case When::FirstTwo:
                return layer < 2;
            case When::FirstFour:
                return layer < 4;
            case When::EightExperts:
                return m.n_expert == 8;
            case When::NotEightExperts:
                return m.n_expert != 8;
        }
        return false;
    };
    TensorType type = def;
    for (const Rule& r : kRules) {
        if (r.part == part && ft.llama_ftype < 64 && (r.mixes >> ft.llama_ftype & 1) &&
            holds(r.when)) {
            type = r.type;
            break;
        }
    }
    // LLaMA-2-70B's attn_v is 8 times smaller than attn_q (8 query heads per K/V head): llama.cpp
    // raises it from 3 or 4 bits to 5 for nearly no size.
    if (part == Part::AttnV && m.llama_70b &&
        (type == TensorType::Q3_K || type == TensorType::Q4_K)) {
        type = TensorType::Q5_K;
    }
    return type;
}

std::optional<uint64_t> first_uint(const format::GgufFile& f, const std::string& key) {
    const format::GgufValue* v = f.find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type == format::GgufType::ARRAY) {
        // Per-layer values (llama.cpp reads layer 0's for n_gqa).
        const auto a = f.get_int_array(key);
        if (a.empty()) return std::nullopt;
        return static_cast<uint64_t>(a[0]);
    }
    return f.opt_uint(key);
}

}  // namespace

std::span<const FileType> file_types() {
    return kFileTypes;
}

std::string file_type_names() {
    std::string s;
    for (const FileType& ft : kFileTypes) {
        if (!s.empty()) s += ", ";
        s += ft.name;
    }
    return s;
}

const FileType& parse_file_type(std::string_view name) {
    if (const FileType* ft = find_file_type(name)) return *ft;
    throw Error("unknown weight type '" + std::string(name) + "' (" + file_type_names() +
                "; Q3_K, Q4_K and Q5_K are Q3_K_M, Q4_K_M and Q5_K_M)");
}

const FileType& file_type_of(format::TensorType type) {
    return parse_file_type(format::tensor_type_info(type).name);
}

ModelFacts model_facts(const format::GgufFile& f) {
    ModelFacts m;
    m.arch = std::string(f.opt_string("general.architecture").value_or(""));
    const std::string a = m.arch + ".";
    m.n_layer = static_cast<int>(f.opt_uint(a + "block_count").value_or(0));
    const uint64_t n_head = first_uint(f, a + "attention.head_count").value_or(0);
    const uint64_t n_head_kv = first_uint(f, a + "attention.head_count_kv").value_or(n_head);
    m.n_gqa = n_head_kv == 0 ? 0 : static_cast<int>(n_head / n_head_kv);
    m.n_expert = static_cast<int>(f.opt_uint(a + "expert_count").value_or(0));
    m.tied = f.find_tensor("output.weight") == nullptr;
    for (const auto& t : f.tensors())
        m.n_attention_wv += part_of(t.name, m.tied) == Part::AttnV;
    // llama.cpp's LLaMA loader calls an 80-block model with grouped K/V heads "70B" (and one
    // with 8 experts a Mixtral, never 70B).
    m.llama_70b = m.arch == "llama" && m.n_expert != 8 && m.n_layer == 80 && n_head != n_head_kv;
    return m;
}

format::TensorType choose_type(const FileType& ft, const ModelFacts& m, const TensorFacts& t,
                               bool pure, std::string* fallback_note) {
    if (!quantised(t)) return t.type;
    const TensorType def = ft.default_type;
    const auto& info = format::tensor_type_info(def);
    if (info.tiled) {
        // The tile formats' published recipe (docs/npu-facts.md): TQ8 for every FFN down
        // projection under TQ4. A tile matrix is padded to whole tiles, so every row fits.
        if (!pure && def == TensorType::TQ4 && contains(t.name, "ffn_down")) return TensorType::TQ8;
        return def;
    }
    // Float file types have no mix: every quantised tensor takes the type.
    if (info.block_elems == 1) return def;
    return fit_rows(pure ? def : mix_rule(ft, m, t), t, fallback_note);
}

}  // namespace llada::tools
