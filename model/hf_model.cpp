// Hugging Face directories as GGUF: one table per architecture maps config.json keys to GGUF
// metadata and Hugging Face tensor names to GGUF ones.
#include "model/hf_model.h"

#include <cstring>
#include <span>

#include "format/gguf_writer.h"
#include "format/hf_directory.h"
#include "tokenizer/hf_tokenizer.h"
#include "util/error.h"

namespace llada::model {
namespace {

using nlohmann::json;

// A tensor's dimension in terms of the configuration.
enum class Dim { None, Embd, Q, KV, FF, Vocab };

// How the converter reorders a projection's rows: LLaDA's Hugging Face Q/K rows hold each head's
// two rotated halves one after the other (rotate_half); the GGUF holds them as adjacent pairs.
enum class Permute { None, Q, K };

struct TensorMap {
    const char* gguf;  // per layer: without the "blk.N." prefix
    const char* hf;    // per layer: "{}" stands for the layer number
    Dim rows, cols;    // cols None: a vector of `rows` values
    Permute permute = Permute::None;
    bool optional = false;  // absent: the GGUF has none (biases)
};

// The config.json keys an architecture names its hyper-parameters by.
struct ConfigKeys {
    const char *n_layer, *n_ctx, *n_embd, *n_ff, *n_head, *n_kv_head, *eps, *rope_theta, *vocab,
        *tied;
};

struct HfArch {
    const char* hf_name;  // config.json "architectures"[0]
    const char* arch;     // general.architecture
    ConfigKeys keys;
    int64_t default_ctx;  // when the context key is absent (the converter's default)
    bool add_bos;         // the converter's add_bos_token when tokenizer_config.json is silent
    bool unshifted;       // writes diffusion.shift_logits = false
    std::span<const TensorMap> global, layer;
    const char* output_hf;  // the untied head's Hugging Face name
};

constexpr TensorMap kLladaGlobal[] = {
    {"token_embd.weight", "model.transformer.wte.weight", Dim::Vocab, Dim::Embd},
    {"output_norm.weight", "model.transformer.ln_f.weight", Dim::Embd, Dim::None},
};
constexpr TensorMap kLladaLayer[] = {
    {"attn_norm.weight", "model.transformer.blocks.{}.attn_norm.weight", Dim::Embd, Dim::None},
    {"attn_q.weight", "model.transformer.blocks.{}.q_proj.weight", Dim::Q, Dim::Embd, Permute::Q},
    {"attn_k.weight", "model.transformer.blocks.{}.k_proj.weight", Dim::KV, Dim::Embd, Permute::K},
    {"attn_v.weight", "model.transformer.blocks.{}.v_proj.weight", Dim::KV, Dim::Embd},
    {"attn_output.weight", "model.transformer.blocks.{}.attn_out.weight", Dim::Embd, Dim::Q},
    {"ffn_norm.weight", "model.transformer.blocks.{}.ff_norm.weight", Dim::Embd, Dim::None},
    {"ffn_gate.weight", "model.transformer.blocks.{}.ff_proj.weight", Dim::FF, Dim::Embd},
    {"ffn_up.weight", "model.transformer.blocks.{}.up_proj.weight", Dim::FF, Dim::Embd},
    {"ffn_down.weight", "model.transformer.blocks.{}.ff_out.weight", Dim::Embd, Dim::FF},
};
constexpr TensorMap kDreamGlobal[] = {
    {"token_embd.weight", "model.embed_tokens.weight", Dim::Vocab, Dim::Embd},
    {"output_norm.weight", "model.norm.weight", Dim::Embd, Dim::None},
};
constexpr TensorMap kDreamLayer[] = {
    {"attn_norm.weight", "model.layers.{}.input_layernorm.weight", Dim::Embd, Dim::None},
    {"attn_q.weight", "model.layers.{}.self_attn.q_proj.weight", Dim::Q, Dim::Embd},
    {"attn_q.bias", "model.layers.{}.self_attn.q_proj.bias", Dim::Q, Dim::None, Permute::None,
     true},
    {"attn_k.weight", "model.layers.{}.self_attn.k_proj.weight", Dim::KV, Dim::Embd},
    {"attn_k.bias", "model.layers.{}.self_attn.k_proj.bias", Dim::KV, Dim::None, Permute::None,
     true},
    {"attn_v.weight", "model.layers.{}.self_attn.v_proj.weight", Dim::KV, Dim::Embd},
    {"attn_v.bias", "model.layers.{}.self_attn.v_proj.bias", Dim::KV, Dim::None, Permute::None,
     true},
    {"attn_output.weight", "model.layers.{}.self_attn.o_proj.weight", Dim::Embd, Dim::Q},
    {"ffn_norm.weight", "model.layers.{}.post_attention_layernorm.weight", Dim::Embd, Dim::None},
    {"ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight", Dim::FF, Dim::Embd},
    {"ffn_up.weight", "model.layers.{}.mlp.up_proj.weight", Dim::FF, Dim::Embd},
    {"ffn_down.weight", "model.layers.{}.mlp.down_proj.weight", Dim::Embd, Dim::FF},
};

constexpr HfArch kHfArchs[] = {
    {"LLaDAModelLM",
     "llada",
     {"n_layers", "max_sequence_length", "d_model", "mlp_hidden_size", "n_heads", "n_kv_heads",
      "rms_norm_eps", "rope_theta", "vocab_size", "weight_tying"},
     4096,
     true,
     true,
     kLladaGlobal,
     kLladaLayer,
     "model.transformer.ff_out.weight"},
    {"DreamModel",
     "dream",
     {"num_hidden_layers", "max_position_embeddings", "hidden_size", "intermediate_size",
      "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "rope_theta", "vocab_size",
      "tie_word_embeddings"},
     4096,
     false,
     false,
     kDreamGlobal,
     kDreamLayer,
     "lm_head.weight"},
};

// What keeps an assembled file's tensors alive: the mapped shards and the copied tensors.
struct Owner {
    std::unique_ptr<format::HfDirectory> dir;
    std::vector<std::vector<uint8_t>> copies;
};

struct Shape {
    int64_t n_embd, n_q, n_kv, n_ff, n_vocab, head_dim;
    int64_t of(Dim d) const {
        switch (d) {
            case Dim::Embd:
                return n_embd;
            case Dim::Q:
                return n_q;
            case Dim::KV:
                return n_kv;
            case Dim::FF:
                return n_ff;
            case Dim::Vocab:
                return n_vocab;
            case Dim::None:
                break;
        }
        return 0;
    }
};

std::string dims_str(const std::vector<uint64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i)
        s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

}  // namespace

std::unique_ptr<format::GgufFile> open_model_file(const std::string& path) {
    return format::is_directory(path) ? open_hf_directory(path) : format::GgufFile::open(path);
}

namespace {

std::unique_ptr<format::GgufFile> open_directory(const std::string& dir) {
    auto owner = std::make_shared<Owner>();
    owner->dir = format::HfDirectory::open(dir);
    const format::HfDirectory& hf = *owner->dir;
    const json& cfg = hf.config();
    const std::string cfg_file = "'" + dir + "/config.json'";

    std::string hf_name;
    if (const auto a = cfg.find("architectures");
        a != cfg.end() && a->is_array() && !a->empty() && (*a)[0].is_string()) {
        hf_name = (*a)[0].get<std::string>();
    } else {
        throw Error(cfg_file + ": \"architectures\" is missing");
    }
    const HfArch* arch = nullptr;
    std::string known;
    for (const HfArch& a : kHfArchs) {
        if (hf_name == a.hf_name) arch = &a;
        known += std::string(known.empty() ? "" : ", ") + a.hf_name;
    }
    if (!arch) {
        throw Error(cfg_file + ": architecture '" + hf_name +
                    "' is not supported in a Hugging Face directory (supported: " + known +
                    "); a GGUF from llama.cpp's converter may load (llada, dream, llada-moe)");
    }
    auto num = [&](const char* key, std::optional<int64_t> fallback = std::nullopt) -> int64_t {
        const auto it = cfg.find(key);
        if (it == cfg.end() || it->is_null()) {
            if (fallback) return *fallback;
            throw Error(cfg_file + ": '" + key + "' is missing");
        }
        if (!it->is_number_integer() || it->get<int64_t>() <= 0 ||
            it->get<int64_t>() > (int64_t{1} << 30)) {
            throw Error(cfg_file + ": '" + key + "' is not a positive integer");
        }
        return it->get<int64_t>();
    };
    auto real = [&](const char* key, double fallback) -> double {
        const auto it = cfg.find(key);
        if (it == cfg.end() || it->is_null()) return fallback;
        if (!it->is_number()) throw Error(cfg_file + ": '" + key + "' is not a number");
        return it->get<double>();
    };
    const ConfigKeys& k = arch->keys;
    const int64_t n_layer = num(k.n_layer), n_embd = num(k.n_embd), n_head = num(k.n_head);
    const int64_t n_kv_head = num(k.n_kv_head, n_head), n_ff = num(k.n_ff);
    const int64_t n_ctx = num(k.n_ctx, arch->default_ctx);
    if (n_embd % n_head != 0 || n_head % n_kv_head != 0) {
        throw Error(cfg_file + ": '" + k.n_embd + "' " + std::to_string(n_embd) +
                    " must be a multiple of '" + k.n_head + "' " + std::to_string(n_head) +
                    ", and that of '" + k.n_kv_head + "' " + std::to_string(n_kv_head));
    }
    const int64_t head_dim = n_embd / n_head;
    const auto tied_it = cfg.find(k.tied);
    if (tied_it != cfg.end() && !tied_it->is_null() && !tied_it->is_boolean())
        throw Error(cfg_file + ": '" + k.tied + "' is not true or false");
    const bool tied = tied_it != cfg.end() && tied_it->is_boolean() && tied_it->get<bool>();
    // The embedding may be padded past the tokenizer's vocabulary (LLaDA's embedding_size).
    const int64_t n_vocab = num("embedding_size", num(k.vocab));
    const Shape shape{n_embd, n_head * head_dim, n_kv_head * head_dim, n_ff, n_vocab, head_dim};

    format::GgufWriter w;
    const std::string a = arch->arch;
    w.set_string("general.architecture", a);
    std::string name = dir;
    while (name.size() > 1 && name.back() == '/')
        name.pop_back();
    w.set_string("general.name", name.substr(name.find_last_of('/') + 1));
    w.set_u32(a + ".block_count", static_cast<uint32_t>(n_layer));
    w.set_u32(a + ".context_length", static_cast<uint32_t>(n_ctx));
    w.set_u32(a + ".embedding_length", static_cast<uint32_t>(n_embd));
    w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(n_ff));
    w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(n_head));
    w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(n_kv_head));
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(real(k.eps, 1e-5)));
    w.set_f32(a + ".rope.freq_base", static_cast<float>(real(k.rope_theta, 10000.0)));
    w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(head_dim));
    w.set_bool(a + ".attention.causal", false);
    if (arch->unshifted) w.set_bool("diffusion.shift_logits", false);
    tokenizer::hf_tokenizer_to_gguf(hf, num(k.vocab, 0), arch->add_bos, w);

    // Tensors: each Hugging Face tensor viewed in place under its GGUF name, or copied when its
    // rows must be permuted or its data is not aligned to its element size.
    std::vector<format::GgufTensor> tensors;
    auto add = [&](const TensorMap& m, const std::string& gguf, const std::string& hf_tensor) {
        const format::SafeTensor* t = hf.find(hf_tensor);
        if (!t) {
            if (m.optional) return;
            throw Error("'" + dir + "': tensor '" + hf_tensor + "' is missing (the weights of " +
                        gguf + ")");
        }
        const std::string where =
            "'" + dir + "/" + hf.file_of(hf_tensor) + "': tensor '" + hf_tensor + "'";
        format::GgufTensor g;
        g.name = gguf;
        switch (t->dtype) {
            case format::StDtype::F32:
                g.type = format::TensorType::F32;
                break;
            case format::StDtype::F16:
                g.type = format::TensorType::F16;
                break;
            case format::StDtype::BF16:
                g.type = format::TensorType::BF16;
                break;
            default:
                throw Error(where + " is " + format::st_dtype_name(t->dtype) +
                            "; weights must be F32, F16 or BF16");
        }
        std::vector<uint64_t> want = {static_cast<uint64_t>(shape.of(m.rows))};
        if (m.cols != Dim::None) want.push_back(static_cast<uint64_t>(shape.of(m.cols)));
        if (t->shape != want) {
            throw Error(where + " has shape " + dims_str(t->shape) + "; config.json implies " +
                        dims_str(want));
        }
        g.n_dims = static_cast<uint32_t>(want.size());
        for (size_t i = 0; i < want.size(); ++i)
            g.ne[i] = want[want.size() - 1 - i];  // GGUF order: the fastest dimension first
        g.n_elements = t->n_elements;
        g.n_bytes = t->n_bytes;
        g.data = t->data;
        const size_t elem = format::st_dtype_size(t->dtype);
        if (m.permute != Permute::None || reinterpret_cast<uintptr_t>(t->data) % elem != 0) {
            std::vector<uint8_t>& c = owner->copies.emplace_back(t->n_bytes);
            if (m.permute == Permute::None) {
                std::memcpy(c.data(), t->data, t->n_bytes);
            } else {
                // Row h*hd + 2i + j of the GGUF is row h*hd + j*hd/2 + i of the checkpoint.
                const size_t row = t->n_bytes / want[0];
                const int64_t heads = m.permute == Permute::Q ? n_head : n_kv_head;
                const int64_t half = head_dim / 2;
                for (int64_t h = 0; h < heads; ++h) {
                    for (int64_t i = 0; i < half; ++i) {
                        for (int64_t j = 0; j < 2; ++j) {
                            std::memcpy(c.data() + (h * head_dim + 2 * i + j) * row,
                                        t->data + (h * head_dim + j * half + i) * row, row);
                        }
                    }
                }
            }
            g.data = c.data();
        }
        tensors.push_back(std::move(g));
    };
    for (const TensorMap& m : arch->global)
        add(m, m.gguf, m.hf);
    if (!tied) {
        const TensorMap head{"output.weight", arch->output_hf, Dim::Vocab, Dim::Embd};
        add(head, head.gguf, head.hf);
    }
    for (int64_t l = 0; l < n_layer; ++l) {
        for (const TensorMap& m : arch->layer) {
            std::string name = m.hf;
            name.replace(name.find("{}"), 2, std::to_string(l));
            add(m, "blk." + std::to_string(l) + "." + m.gguf, name);
        }
    }
    std::vector<const format::MappedFile*> maps;
    for (const auto& s : hf.shards())
        maps.push_back(s->mapping());
    return format::GgufFile::assemble(w.to_bytes(), dir, std::move(tensors), std::move(owner),
                                      std::move(maps));
}

}  // namespace

std::unique_ptr<format::GgufFile> open_hf_directory(const std::string& dir) {
    try {
        return open_directory(dir);
    } catch (const nlohmann::json::exception& e) {
        throw Error("'" + dir + "/config.json': a field has the wrong type (" + e.what() + ")");
    }
}

}  // namespace llada::model
