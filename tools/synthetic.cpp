// Random-weight models at any shape, written as real GGUF files, and re-quantisation.
#include "tools/synthetic.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "format/output_file.h"
#include "model/hf_model.h"
#include "quant/blocks.h"
#include "quant/tile.h"
#include "util/error.h"

namespace llada::tools {
namespace {

// GPT-2's printable stand-in for each byte (the byte-level BPE alphabet).
std::string byte_token(int b) {
    auto utf8 = [](uint32_t cp) {
        std::string s;
        if (cp < 0x80) {
            s += static_cast<char>(cp);
        } else {
            s += static_cast<char>(0xc0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3f));
        }
        return s;
    };
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    if (printable) return utf8(static_cast<uint32_t>(b));
    // The others map to 256 + their rank among the non-printable bytes.
    int rank = 0;
    for (int c = 0; c < b; ++c) {
        const bool p = (c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || c >= 0xae;
        rank += !p;
    }
    return utf8(256u + static_cast<uint32_t>(rank));
}

uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Fills `n` floats uniform in [-a, a] from a stream keyed by (seed, tensor, row).
void random_row(uint64_t key, float a, float* out, int64_t n) {
    uint64_t s = mix(key);
    for (int64_t i = 0; i < n; ++i) {
        s = mix(s);
        const float u = static_cast<float>(s >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        out[i] = (2.0f * u - 1.0f) * a;
    }
}

// Converts rows in parallel: row r of the output gets produce(r, scratch) quantised to `type`;
// for a tile format, strips of 32 rows at a time (quant/tile.h).
template <typename Produce>
format::GgufWriter::Fill rows_fill(format::TensorType type, int64_t n_rows, int64_t n_cols,
                                   runtime::ThreadPool& pool, Produce produce) {
    if (const auto tile = quant::tile_type_of(type)) {
        return [=, &pool](uint8_t* dst, size_t) {
            const quant::TileLayout l = quant::tile_layout(*tile, n_rows, n_cols);
            pool.parallel_for(l.n_strips, [&](int64_t s, int) {
                const int64_t r0 = s * quant::kTileDim;
                const int64_t r1 = std::min(n_rows, r0 + quant::kTileDim);
                std::vector<float> rows(static_cast<size_t>((r1 - r0) * n_cols));
                for (int64_t r = r0; r < r1; ++r)
                    produce(r, rows.data() + (r - r0) * n_cols);
                quant::quantize_tile_strips(l, rows.data(), n_cols, s, s + 1,
                                            dst + s * l.strip_bytes());
            });
        };
    }
    return [=, &pool](uint8_t* dst, size_t) {
        const size_t rb = quant::row_bytes(type, n_cols);
        const int64_t chunk = std::max<int64_t>(1, n_rows / (pool.size() * 8));
        const int64_t tasks = (n_rows + chunk - 1) / chunk;
        pool.parallel_for(tasks, [&](int64_t t, int) {
            std::vector<float> row(static_cast<size_t>(n_cols));
            for (int64_t r = t * chunk; r < std::min(n_rows, (t + 1) * chunk); ++r) {
                produce(r, row.data());
                quant::quantize_row(type, row.data(), dst + r * rb, n_cols);
            }
        });
    };
}

// A fill that first redraws a progress line on stderr: "[####      ] 12/198 blk.1.ffn_up.weight".
format::GgufWriter::Fill with_progress(bool on, int index, int total, const std::string& name,
                                       format::GgufWriter::Fill fill) {
    if (!on) return fill;
    return [=](uint8_t* dst, size_t n) {
        const int width = 30, done = total > 0 ? width * index / total : width;
        std::fprintf(stderr, "\r[%s%s] %d/%d %-40.40s", std::string(done, '#').c_str(),
                     std::string(width - done, ' ').c_str(), index, total, name.c_str());
        std::fflush(stderr);
        fill(dst, n);
    };
}

std::string tile_moe_message(format::TensorType type) {
    return std::string("the tile format ") + format::tensor_type_info(type).name +
           " holds 2-D matrices only, and npu-sim, which reads it, does not run mixture-of-"
           "experts models; quantise llada-moe to a row format (Q4_K_M, Q8_0, ...)";
}

}  // namespace

int64_t SyntheticShape::n_params() const {
    const int64_t hd = n_embd / n_head;
    const int64_t ffn =
        n_expert > 0 ? n_expert * (3 * n_embd * n_ff_expert + n_embd) + 2 * hd : 3 * n_embd * n_ff;
    const int64_t per_layer =
        n_embd * (n_head * hd) * 2 + n_embd * (n_kv_head * hd) * 2 + ffn + 2 * n_embd;
    return n_layer * per_layer + 2 * n_vocab * n_embd + n_embd;
}

SyntheticShape parse_shape(const std::string& spec) {
    SyntheticShape s;
    std::stringstream ss(spec);
    std::string item;
    bool first = true;
    while (std::getline(ss, item, ',')) {
        if (first && item.find('=') == std::string::npos) {
            if (item == "tiny") {
            } else if (item == "1b") {
                s.n_layer = 16;
                s.n_embd = 2048;
                s.n_head = s.n_kv_head = 16;
                s.n_ff = 5632;
                s.n_vocab = 32000;
            } else if (item == "8b") {
                s.n_layer = 32;
                s.n_embd = 4096;
                s.n_head = s.n_kv_head = 32;
                s.n_ff = 12288;
                s.n_vocab = 126464;
            } else if (item == "dream-7b") {
                s.arch = "dream";
                s.n_layer = 28;
                s.n_embd = 3584;
                s.n_head = 28;
                s.n_kv_head = 4;
                s.n_ff = 18944;
                s.n_vocab = 152064;
                s.rope_base = 1000000.0f;
                s.qkv_bias = true;
            } else if (item == "llada-moe") {
                // LLaDA-MoE-7B-A1B's published configuration.
                s.arch = "llada-moe";
                s.n_layer = 16;
                s.n_embd = 2048;
                s.n_head = s.n_kv_head = 16;
                s.n_expert = 64;
                s.n_expert_used = 8;
                s.n_ff_expert = 1024;
                s.n_ff = s.n_ff_expert * s.n_expert_used;
                s.n_vocab = 157184;
                s.rope_base = 50000.0f;
            } else {
                throw Error("unknown shape preset '" + item +
                            "' (tiny, 1b, 8b, dream-7b, llada-moe)");
            }
            first = false;
            continue;
        }
        first = false;
        const auto eq = item.find('=');
        if (eq == std::string::npos) throw Error("shape item '" + item + "' is not key=value");
        const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
        if (key == "arch") {
            if (val != "llada" && val != "llama" && val != "dream" && val != "llada-moe")
                throw Error("shape arch must be llada, llama, dream or llada-moe");
            s.arch = val;
            s.qkv_bias = val == "dream";
            if (val == "dream") s.rope_base = 1000000.0f;
            if (val == "llada-moe" && s.n_expert == 0) {
                s.n_expert = 8;
                s.n_expert_used = 2;
                s.n_ff_expert = 64;
            }
            continue;
        }
        char* end = nullptr;
        const long long v = std::strtoll(val.c_str(), &end, 10);
        if (val.empty() || *end != '\0' || v <= 0 || v > (1ll << 30)) {
            throw Error("shape value '" + item + "' is not a positive integer");
        }
        if (key == "layers") {
            s.n_layer = static_cast<int>(v);
        } else if (key == "d") {
            s.n_embd = v;
        } else if (key == "heads") {
            s.n_head = s.n_kv_head = v;
        } else if (key == "kv_heads") {
            s.n_kv_head = v;
        } else if (key == "ffn") {
            s.n_ff = v;
        } else if (key == "vocab") {
            s.n_vocab = v;
        } else if (key == "ctx") {
            s.n_ctx = static_cast<int>(v);
        } else if (key == "experts") {
            s.n_expert = v;
        } else if (key == "used") {
            s.n_expert_used = v;
        } else if (key == "expert_ffn") {
            s.n_ff_expert = v;
        } else {
            throw Error("unknown shape key '" + key +
                        "' (layers, d, heads, kv_heads, ffn, vocab, ctx, arch, experts, used, "
                        "expert_ffn)");
        }
    }
    if ((s.arch == "llada-moe") != (s.n_expert > 0)) {
        throw Error("shape: experts apply to arch llada-moe only, and llada-moe needs them");
    }
    if (s.n_expert > 0 && (s.n_expert_used > s.n_expert || s.n_ff_expert % 32 != 0)) {
        throw Error("shape: used must be at most experts, and expert_ffn a multiple of 32");
    }
    if (s.n_embd % s.n_head != 0 || s.n_head % s.n_kv_head != 0) {
        throw Error("shape: d must be a multiple of heads, and heads of kv_heads");
    }
    if (s.n_embd % 32 != 0 || s.n_ff % 32 != 0) {
        throw Error("shape: d and ffn must be multiples of 32 (the quantisation block)");
    }
    if (s.n_vocab < 300) throw Error("shape: vocab must be at least 300 (bytes + specials)");
    return s;
}

format::TensorType parse_type(const std::string& name) {
    return parse_file_type(name).default_type;
}

void write_synthetic(const SyntheticShape& s, format::TensorType type, uint64_t seed,
                     const std::string& path, runtime::ThreadPool& pool, bool progress) {
    write_synthetic(s, file_type_of(type), seed, path, pool, progress);
}

void write_synthetic(const SyntheticShape& s, const FileType& ft, uint64_t seed,
                     const std::string& path, runtime::ThreadPool& pool, bool progress) {
    const format::TensorType type = ft.default_type;
    if (quant::tile_type_of(type) && s.n_expert > 0) throw Error(tile_moe_message(type));
    format::GgufWriter w;
    const std::string a = s.arch;
    const int64_t hd = s.n_embd / s.n_head;
    w.set_string("general.architecture", a);
    w.set_string("general.name", "synthetic-" + a + "-" + std::to_string(s.n_layer) + "L-" +
                                     std::to_string(s.n_embd) + "d");
    w.set_u32("general.file_type", ft.llama_ftype);
    w.set_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
    w.set_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx));
    w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
    w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
    w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
    w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_kv_head));
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
    w.set_f32(a + ".rope.freq_base", s.rope_base);
    w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(hd));
    w.set_u32(a + ".vocab_size", static_cast<uint32_t>(s.n_vocab));
    if (s.n_expert > 0) {
        w.set_u32(a + ".expert_count", static_cast<uint32_t>(s.n_expert));
        w.set_u32(a + ".expert_used_count", static_cast<uint32_t>(s.n_expert_used));
        w.set_u32(a + ".expert_feed_forward_length", static_cast<uint32_t>(s.n_ff_expert));
    }
    if (a == "llada" || a == "llada-moe") {
        w.set_bool(a + ".attention.causal", false);
        w.set_bool("diffusion.shift_logits", false);
    }
    // Vocabulary: bytes, fillers, and the specials (LLaDA-8B's ids for its vocabulary size,
    // Dream-7B's for its).
    const bool llada8b = s.n_vocab == 126464;
    const bool dream7b = s.arch == "dream" && s.n_vocab == 152064;
    const bool moe7b = s.arch == "llada-moe" && s.n_vocab == 157184;
    const int64_t V = s.n_vocab;
    struct Special {
        const char* text;
        int64_t id;
    };
    // Ids of BOS, EOS, mask, the two header markers and end of turn.
    using Ids = std::array<int64_t, 6>;
    const Ids id = llada8b   ? Ids{126080, 126081, 126336, 126346, 126347, 126348}
                   : dream7b ? Ids{151642, 151643, 151666, 151644, 151646, 151645}
                   : moe7b   ? Ids{V - 6, V - 5, 156895, V - 4, V - 3, V - 2}
                             : Ids{V - 6, V - 5, V - 1, V - 4, V - 3, V - 2};
    const Special specials[] = {
        {dream7b ? "<|beginoftext|>" : "<|startoftext|>", id[0]},
        {"<|endoftext|>", id[1]},
        {"<|mdm_mask|>", id[2]},
        {"<|start_header_id|>", id[3]},
        {"<|end_header_id|>", id[4]},
        {"<|eot_id|>", id[5]},
    };
    std::vector<std::string> tokens(static_cast<size_t>(V));
    std::vector<int32_t> types(static_cast<size_t>(V), 5);  // UNUSED fillers
    for (int b = 0; b < 256; ++b) {
        tokens[b] = byte_token(b);
        types[b] = 1;
    }
    for (int64_t i = 256; i < V; ++i)
        tokens[i] = "<|reserved_" + std::to_string(i) + "|>";
    for (const auto& sp : specials) {
        tokens[sp.id] = sp.text;
        types[sp.id] = 3;  // CONTROL
    }
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", a == "dream" ? "qwen2" : "gpt-2");
    w.set_array_string("tokenizer.ggml.tokens", tokens);
    w.set_array_i32("tokenizer.ggml.token_type", types);
    w.set_array_string("tokenizer.ggml.merges", {});
    w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(specials[0].id));
    w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(specials[1].id));
    w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(specials[1].id));
    w.set_u32("tokenizer.ggml.mask_token_id", static_cast<uint32_t>(specials[2].id));
    w.set_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(specials[5].id));
    w.set_bool("tokenizer.ggml.add_bos_token", a != "dream");  // Qwen2's tokenizer adds none
    // An identity chat template: llama.cpp's diffusion CLI always applies the model's template,
    // and benchmarks must feed both engines the same prompt tokens.
    w.set_string("tokenizer.chat_template",
                 "{% for message in messages %}{{ message['content'] }}{% endfor %}");

    // A file type named after a tensor type (Q4_0, Q6_K, F16, ...) puts every matrix in it; a
    // mix's name (Q4_K_M, Q3_K_S, ...) gives each tensor the type llama-quantize's rules give
    // it in a model of this shape.
    ModelFacts facts;
    facts.arch = a;
    facts.n_layer = s.n_layer;
    facts.n_gqa = static_cast<int>(s.n_head / s.n_kv_head);
    facts.n_expert = static_cast<int>(s.n_expert);
    facts.n_attention_wv = s.n_layer;
    const bool pure = format::tensor_type_by_name(ft.name).has_value();
    // Uniform in [-a, a] has standard deviation a / sqrt(3) = 0.02.
    const float amp = 0.02f * std::sqrt(3.0f);
    uint64_t tensor_index = 0;
    // token_embd, output and 7 per layer (8 with a router and three expert stacks)
    const int n_matrices = 2 + (s.n_expert > 0 ? 8 : 7) * s.n_layer;
    // A matrix of n_rows x n_cols, or with n_expert > 0 a stack of that many (GGUF order
    // {n_cols, n_rows, n_expert}); the router (ffn_gate_inp) stays F32 (choose_type keeps it).
    auto matrix = [&](const std::string& name, int64_t n_cols, int64_t n_rows,
                      int64_t n_expert = 0) {
        const uint64_t key = mix(seed) ^ mix(++tensor_index * 0x100000001b3ull);
        std::vector<uint64_t> ne = {static_cast<uint64_t>(n_cols), static_cast<uint64_t>(n_rows)};
        if (n_expert > 0) ne.push_back(static_cast<uint64_t>(n_expert));
        std::string note;
        const format::TensorType t = choose_type(
            ft, facts, {name, static_cast<uint32_t>(ne.size()), n_cols, format::TensorType::F32},
            pure, &note);
        if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
        w.add_tensor(name, t, ne,
                     with_progress(progress, static_cast<int>(tensor_index), n_matrices, name,
                                   rows_fill(t, n_rows * std::max<int64_t>(1, n_expert), n_cols,
                                             pool, [=](int64_t r, float* row) {
                                                 random_row(key ^ mix(static_cast<uint64_t>(r)),
                                                            amp, row, n_cols);
                                             })));
    };
    auto bias = [&](const std::string& name, int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        random_row(mix(seed) ^ mix(++tensor_index * 0x100000001b3ull), amp, v.data(), n);
        std::vector<uint8_t> b(v.size() * 4);
        std::memcpy(b.data(), v.data(), b.size());
        w.add_tensor(name, format::TensorType::F32, {static_cast<uint64_t>(n)}, b);
    };
    auto ones = [&](const std::string& name, int64_t n) {
        std::vector<float> v(static_cast<size_t>(n), 1.0f);
        std::vector<uint8_t> b(v.size() * 4);
        std::memcpy(b.data(), v.data(), b.size());
        w.add_tensor(name, format::TensorType::F32, {static_cast<uint64_t>(n)}, b);
    };
    matrix("token_embd.weight", s.n_embd, V);
    ones("output_norm.weight", s.n_embd);
    matrix("output.weight", s.n_embd, V);
    for (int l = 0; l < s.n_layer; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        ones(p + "attn_norm.weight", s.n_embd);
        matrix(p + "attn_q.weight", s.n_embd, s.n_head * hd);
        matrix(p + "attn_k.weight", s.n_embd, s.n_kv_head * hd);
        matrix(p + "attn_v.weight", s.n_embd, s.n_kv_head * hd);
        if (s.qkv_bias) {
            bias(p + "attn_q.bias", s.n_head * hd);
            bias(p + "attn_k.bias", s.n_kv_head * hd);
            bias(p + "attn_v.bias", s.n_kv_head * hd);
        }
        matrix(p + "attn_output.weight", s.n_head * hd, s.n_embd);
        if (s.n_expert > 0) {
            ones(p + "attn_q_norm.weight", hd);
            ones(p + "attn_k_norm.weight", hd);
        }
        ones(p + "ffn_norm.weight", s.n_embd);
        if (s.n_expert > 0) {
            matrix(p + "ffn_gate_inp.weight", s.n_embd, s.n_expert);
            matrix(p + "ffn_gate_exps.weight", s.n_embd, s.n_ff_expert, s.n_expert);
            matrix(p + "ffn_up_exps.weight", s.n_embd, s.n_ff_expert, s.n_expert);
            matrix(p + "ffn_down_exps.weight", s.n_ff_expert, s.n_embd, s.n_expert);
        } else {
            matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff);
            matrix(p + "ffn_up.weight", s.n_embd, s.n_ff);
            matrix(p + "ffn_down.weight", s.n_ff, s.n_embd);
        }
    }
    w.write(path);
    if (progress) std::fputc('\n', stderr);
}

format::TensorType mix_type(const std::string& name, format::TensorType type, bool tied) {
    if (!format::tensor_type_info(type).tiled) {
        throw Error(std::string("mix_type: ") + format::tensor_type_info(type).name +
                    " is not a tile format; the row formats' mixes are choose_type's");
    }
    ModelFacts facts;
    facts.tied = tied;
    return choose_type(file_type_of(type), facts, {name, 2, 0, format::TensorType::F32},
                       /*pure=*/false);
}

void requantize(const std::string& in, const std::string& out, format::TensorType type,
                runtime::ThreadPool& pool, bool pure, bool progress) {
    requantize(in, out, file_type_of(type), pool, pure, progress);
}

void requantize(const std::string& in, const std::string& out, const FileType& ft,
                runtime::ThreadPool& pool, bool pure, bool progress) {
    format::refuse_overwriting_input(out, {in});
    auto f = model::open_model_file(in);
    const ModelFacts facts = model_facts(*f);
    format::GgufWriter w;
    for (const auto& kv : f->kvs())
        w.copy_kv(kv);
    // What llama-quantize writes: the file type, and ggml's quantisation version (2 since the
    // block layouts last changed, in 2023).
    w.set_u32("general.quantization_version", 2);
    w.set_u32("general.file_type", ft.llama_ftype);
    // Every tensor's type first, so the fallback notes come before the progress line.
    std::vector<format::TensorType> types;
    int n_matrices = 0;
    bool unweighted_q2_k = false;
    for (const auto& t : f->tensors()) {
        std::string note;
        const format::TensorType type = choose_type(
            ft, facts, {t.name, t.n_dims, static_cast<int64_t>(t.ne[0]), t.type}, pure, &note);
        if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
        if (quant::tile_type_of(type) && t.n_dims != 2) {
            throw Error("tensor '" + t.name + "': " + tile_moe_message(type));
        }
        types.push_back(type);
        n_matrices += type != t.type;
        unweighted_q2_k |= type == format::TensorType::Q2_K && t.name != "token_embd.weight" &&
                           t.name != "output.weight";
    }
    if (unweighted_q2_k && std::string_view(ft.name) == "Q2_K_S") {
        // llama-quantize writes Q2_K_S's Q2_K tensors only from an importance matrix (--imatrix);
        // llada-quantize has none, so they are quantised as Q2_K quantises them.
        std::fprintf(stderr,
                     "note: llama-quantize requires an importance matrix for Q2_K_S, which "
                     "llada-quantize does not take: its Q2_K tensors are quantised without one\n");
    }
    int index = 0;
    for (size_t i = 0; i < f->tensors().size(); ++i) {
        const auto& t = f->tensors()[i];
        const format::TensorType type = types[i];
        std::vector<uint64_t> ne(t.ne, t.ne + t.n_dims);
        if (type == t.type) {
            // Already in its type (vectors, routers, or a matrix the mix leaves as it is): the
            // bytes as they are, as llama-quantize copies them, read when the file is written.
            const uint8_t* src = t.data;
            w.add_tensor(t.name, t.type, ne,
                         [src](uint8_t* dst, size_t n) { std::memcpy(dst, src, n); });
            continue;
        }
        const int64_t cols = static_cast<int64_t>(t.ne[0]);
        const int64_t rows = static_cast<int64_t>(t.n_elements / t.ne[0]);
        const uint8_t* src = t.data;
        const format::TensorType src_type = t.type;
        w.add_tensor(t.name, type, ne,
                     with_progress(progress, ++index, n_matrices, t.name,
                                   rows_fill(type, rows, cols, pool, [=](int64_t r, float* row) {
                                       quant::dequantize_matrix_row(src_type, src, rows, cols, r,
                                                                    row);
                                   })));
    }
    w.write(out);
    if (progress) std::fputc('\n', stderr);
}

}  // namespace llada::tools
