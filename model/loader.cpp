// Loading a model from GGUF: the architecture table, hyper-parameters and weight views, each
// checked against the file with an error that names the key or tensor.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "model/hf_model.h"
#include "model/model.h"
#include "quant/blocks.h"
#include "quant/packed.h"
#include "util/aligned.h"
#include "util/error.h"

namespace llada::model {
namespace {

// What distinguishes the supported architectures. All share the LLaMA block (RMSNorm, separate
// Q/K/V, SwiGLU); they differ in attention direction, RoPE pairing, the logit shift, per-head
// Q/K norms, whether the FFN is a mixture of experts, and which optional tensors they may carry
// (kOptionalBiases).
struct ArchInfo {
    const char* name;
    bool causal;
    kernels::RopeStyle rope;
    bool shift_logits_default;  // when diffusion.shift_logits is absent
    bool qk_norm;               // blk.N.attn_q_norm / attn_k_norm, RMSNorm per head before RoPE
    bool moe;                   // ffn_gate_inp and ffn_{gate,up,down}_exps instead of a dense FFN
    bool fused_qkv = false;     // blk.N.attn_qkv: Q, K and V rows in one matrix
    bool block_causal = false;  // attention by blocks (a block sees the earlier ones and itself)
};

constexpr ArchInfo kArchs[] = {
    // LLaDA: bidirectional, NORM RoPE (the converter permutes Q/K rows for it), unshifted logits.
    {"llada", false, kernels::RopeStyle::Norm, false, false, false},
    // LLaMA: the autoregressive baseline (and the tiny models' AR twin).
    {"llama", true, kernels::RopeStyle::Norm, false, false, false},
    // Dream: the Qwen2 block (Q/K/V biases, GQA), bidirectional, NEOX RoPE (pairs (i, i + n/2),
    // HF's rotate_half), and shifted logits: row p predicts position p + 1.
    {"dream", false, kernels::RopeStyle::Neox, true, false, false},
    // LLaDA-MoE: bidirectional, NEOX RoPE, Q/K RMSNorm per head, and a mixture-of-experts FFN
    // (softmax router, top-k experts, weights not renormalised), as llama.cpp's llada-moe.
    {"llada-moe", false, kernels::RopeStyle::Neox, false, true, true},
    // LLaDA 2.x (llama.cpp PR #17454's llada2, bailingmoe2's tensors): a fused QKV projection,
    // Q/K RMSNorm per head, NEOX RoPE on the first rope.dimension_count dims, leading dense
    // layers, a sigmoid router with a selection bias over expert groups, a shared expert, and
    // block-causal attention.
    {"llada2", false, kernels::RopeStyle::Neox, false, true, true, true, true},
    // Ling 2.0 (bailingmoe2): the same layers with causal attention, LLaDA 2.x's AR twin.
    {"bailingmoe2", true, kernels::RopeStyle::Neox, false, true, true, true, false},
};

// A block-causal model's attention blocks when neither the file (llada_cpp.block_length) nor
// the caller names them: LLaDA 2.0's generate() default.
constexpr int64_t kDefaultAttentionBlock = 32;

// Tensors a file may or may not have, each added where llama.cpp's graph adds it: the Q/K/V
// projection biases (Qwen2's, so Dream's), after the projection and before RoPE. Any
// architecture may carry them; absent means zero. (llama.cpp loads but ignores LLaDA's
// attn_output / ffn biases and Dream's output.bias, and so does this loader.)
struct OptionalBias {
    const char* suffix;
    std::vector<float> LayerWeights::*field;
    bool kv;  // sized by the KV heads (K, V) rather than the query heads
};
const OptionalBias kOptionalBiases[] = {
    {"attn_q.bias", &LayerWeights::bq, false},
    {"attn_k.bias", &LayerWeights::bk, true},
    {"attn_v.bias", &LayerWeights::bv, true},
};

const ArchInfo* find_arch(std::string_view name) {
    for (const auto& a : kArchs) {
        if (name == a.name) return &a;
    }
    return nullptr;
}

std::string shape_str(const uint64_t* ne, uint32_t n) {
    std::string s = "[";
    for (uint32_t i = 0; i < n; ++i)
        s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, runtime::ThreadPool* pool) {
    return from_gguf(open_model_file(path), pool);
}

std::unique_ptr<Model> Model::from_gguf(std::unique_ptr<format::GgufFile> file,
                                        runtime::ThreadPool* pool) {
    std::unique_ptr<Model> m(new Model());
    m->file_ = std::move(file);
    m->load_pool_ = pool;
    m->load_hparams();
    m->load_weights(pool);
    m->load_pool_ = nullptr;
    return m;
}

void Model::load_hparams() {
    const format::GgufFile& f = *file_;
    const std::string where = "model '" + f.path() + "'";
    auto arch_name = f.opt_string("general.architecture");
    if (!arch_name) throw Error(where + ": metadata key 'general.architecture' is missing");
    const ArchInfo* arch = find_arch(*arch_name);
    if (!arch) {
        std::string known;
        for (const auto& a : kArchs)
            known += std::string(known.empty() ? "" : ", ") + a.name;
        throw Error(where + ": architecture '" + std::string(*arch_name) +
                    "' is not supported (supported: " + known + ")");
    }
    const std::string a = arch->name;
    hp_.arch = a;
    auto req_uint = [&](const std::string& key) -> int64_t {
        auto v = f.opt_uint(key);
        if (!v) throw Error(where + ": required metadata key '" + key + "' is missing");
        if (*v == 0 || *v > (1u << 30)) {
            throw Error(where + ": metadata key '" + key + "' = " + std::to_string(*v) +
                        " is out of range");
        }
        return static_cast<int64_t>(*v);
    };
    hp_.n_layer = static_cast<int>(req_uint(a + ".block_count"));
    hp_.n_ctx = static_cast<int>(req_uint(a + ".context_length"));
    hp_.n_embd = req_uint(a + ".embedding_length");
    // A mixture-of-experts model needs no dense FFN size (llama.cpp reads it but LLaDA-MoE's
    // layers have none).
    hp_.n_ff =
        arch->moe && !f.find(a + ".feed_forward_length") ? 0 : req_uint(a + ".feed_forward_length");
    if (arch->moe) {
        hp_.n_expert = req_uint(a + ".expert_count");
        hp_.n_expert_used = req_uint(a + ".expert_used_count");
        if (hp_.n_expert_used > hp_.n_expert) {
            throw Error(where + ": '" + a +
                        ".expert_used_count' = " + std::to_string(hp_.n_expert_used) +
                        " exceeds '" + a + ".expert_count' = " + std::to_string(hp_.n_expert));
        }
        // As llama.cpp: absent, each expert's size is the dense size over the experts used.
        if (f.find(a + ".expert_feed_forward_length")) {
            hp_.n_ff_expert = req_uint(a + ".expert_feed_forward_length");
        } else if (hp_.n_ff > 0) {
            hp_.n_ff_expert = hp_.n_ff / hp_.n_expert_used;
        } else {
            throw Error(where + ": neither '" + a + ".expert_feed_forward_length' nor '" + a +
                        ".feed_forward_length' is present");
        }
        hp_.expert_weights_scale =
            static_cast<float>(f.opt_float(a + ".expert_weights_scale").value_or(0.0));
        hp_.expert_weights_norm = f.opt_bool(a + ".expert_weights_norm").value_or(false);
        // llama.cpp's expert_gating_func: 1 softmax (the default), 2 sigmoid.
        const uint64_t gating = f.opt_uint(a + ".expert_gating_func").value_or(1);
        if (gating != 1 && gating != 2) {
            throw Error(where + ": '" + a + ".expert_gating_func' = " + std::to_string(gating) +
                        " is not 1 (softmax) or 2 (sigmoid)");
        }
        hp_.expert_gating = gating == 2 ? runtime::MoeGating::Sigmoid : runtime::MoeGating::Softmax;
        if (f.find(a + ".expert_group_count")) {
            hp_.n_expert_groups = req_uint(a + ".expert_group_count");
            hp_.n_expert_groups_used = req_uint(a + ".expert_group_used_count");
            const int64_t g = hp_.n_expert_groups, gu = hp_.n_expert_groups_used;
            if (g > 64 || hp_.n_expert % g != 0 || gu > g ||
                gu * (hp_.n_expert / g) < hp_.n_expert_used) {
                throw Error(where + ": '" + a + ".expert_group_count' = " + std::to_string(g) +
                            " and '" + a + ".expert_group_used_count' = " + std::to_string(gu) +
                            " do not fit " + std::to_string(hp_.n_expert) + " experts of which " +
                            std::to_string(hp_.n_expert_used) +
                            " are used (the groups must divide the experts, at most 64, and the "
                            "groups used must hold the experts used)");
            }
        }
        if (f.find(a + ".leading_dense_block_count")) {
            hp_.n_layer_dense_lead =
                static_cast<int64_t>(f.opt_uint(a + ".leading_dense_block_count").value_or(0));
            if (hp_.n_layer_dense_lead > hp_.n_layer)
                throw Error(where + ": '" + a + ".leading_dense_block_count' = " +
                            std::to_string(hp_.n_layer_dense_lead) + " exceeds the " +
                            std::to_string(hp_.n_layer) + " blocks");
            if (hp_.n_layer_dense_lead > 0 && hp_.n_ff == 0)
                throw Error(where + ": dense leading layers need '" + a + ".feed_forward_length'");
        }
        if (f.opt_uint(a + ".expert_shared_count").value_or(0) > 0) {
            // llama.cpp: the shared experts as one FFN of their summed size.
            const int64_t per = f.find(a + ".expert_shared_feed_forward_length")
                                    ? req_uint(a + ".expert_shared_feed_forward_length")
                                    : hp_.n_ff_expert;
            hp_.n_ff_shexp = per * req_uint(a + ".expert_shared_count");
        }
    }
    if (f.opt_uint(a + ".nextn_predict_layers").value_or(0) > 0) {
        throw Error(where + ": '" + a +
                    ".nextn_predict_layers' > 0: multi-token-prediction layers are not supported");
    }
    if (arch->block_causal) {
        hp_.attention_block = static_cast<int64_t>(
            f.opt_uint("llada_cpp.block_length").value_or(kDefaultAttentionBlock));
        if (hp_.attention_block <= 0)
            throw Error(where + ": 'llada_cpp.block_length' must be positive");
    }
    hp_.n_head = req_uint(a + ".attention.head_count");
    hp_.n_kv_head = f.find(a + ".attention.head_count_kv")
                        ? req_uint(a + ".attention.head_count_kv")
                        : hp_.n_head;
    auto eps = f.opt_float(a + ".attention.layer_norm_rms_epsilon");
    if (!eps) {
        throw Error(where + ": required metadata key '" + a +
                    ".attention.layer_norm_rms_epsilon' is missing");
    }
    if (!(*eps > 0.0 && *eps < 1.0)) {
        throw Error(where + ": '" + a + ".attention.layer_norm_rms_epsilon' = " +
                    std::to_string(*eps) + " is not in (0, 1)");
    }
    hp_.eps = static_cast<float>(*eps);
    hp_.rope_base = static_cast<float>(f.opt_float(a + ".rope.freq_base").value_or(10000.0));
    if (!(hp_.rope_base > 0.0f)) throw Error(where + ": '" + a + ".rope.freq_base' must be > 0");
    if (hp_.n_head % hp_.n_kv_head != 0) {
        throw Error(where + ": attention.head_count " + std::to_string(hp_.n_head) +
                    " is not a multiple of attention.head_count_kv " +
                    std::to_string(hp_.n_kv_head));
    }
    hp_.head_dim = f.find(a + ".attention.key_length") ? req_uint(a + ".attention.key_length")
                                                       : hp_.n_embd / hp_.n_head;
    if (!f.find(a + ".attention.key_length") && hp_.n_embd % hp_.n_head != 0) {
        throw Error(where + ": embedding_length " + std::to_string(hp_.n_embd) +
                    " is not a multiple of attention.head_count " + std::to_string(hp_.n_head));
    }
    hp_.n_rot =
        f.find(a + ".rope.dimension_count") ? req_uint(a + ".rope.dimension_count") : hp_.head_dim;
    if (hp_.n_rot > hp_.head_dim || hp_.n_rot % 2 != 0) {
        throw Error(where + ": rope.dimension_count " + std::to_string(hp_.n_rot) +
                    " must be even and at most the head size " + std::to_string(hp_.head_dim));
    }
    hp_.rope_style = arch->rope;
    hp_.causal = arch->causal;
    hp_.qk_norm = arch->qk_norm;
    if (auto c = f.opt_bool(a + ".attention.causal")) {
        if (*c != arch->causal) {
            throw Error(where + ": '" + a + ".attention.causal' = " + (*c ? "true" : "false") +
                        " contradicts the " + a + " architecture");
        }
    }
    hp_.shift_logits = f.opt_bool("diffusion.shift_logits").value_or(arch->shift_logits_default);
}

kernels::WeightView Model::matrix(const std::string& name, int64_t n_cols, int64_t n_rows,
                                  bool pack) {
    const format::GgufTensor* t = file_->find_tensor(name);
    if (!t) throw Error("model '" + file_->path() + "': tensor '" + name + "' is missing");
    if (t->n_dims != 2 || static_cast<int64_t>(t->ne[0]) != n_cols ||
        static_cast<int64_t>(t->ne[1]) != n_rows) {
        throw Error("model '" + file_->path() + "': tensor '" + name + "' has shape " +
                    shape_str(t->ne, t->n_dims) + ", expected [" + std::to_string(n_cols) + ", " +
                    std::to_string(n_rows) + "]");
    }
    kernels::WeightView w;
    w.type = t->type;
    w.data = t->data;
    w.n_rows = n_rows;
    w.n_cols = n_cols;
    w.row_bytes = quant::row_bytes(t->type, n_cols);
    n_params_ += n_rows * n_cols;
    weight_bytes_ += t->n_bytes;
    if (pack) {
        this->pack(w, name);
        // After repacking the matrix is read only from the packed copy (the embedding reads
        // single rows), so the file's pages can go.
        if (w.packed) file_->release(*t);
    }
    return w;
}

void Model::pack(kernels::WeightView& w, const std::string& name) {
    if (!quant::is_packed_type(w.type)) return;
    const quant::PackedLayout l = quant::packed_layout(w.type, w.n_rows, w.n_cols);
    const size_t bytes = (l.total_bytes() + 63) / 64 * 64;
    packed_.push_back(aligned_bytes(bytes, "the repacked copy of tensor '" + name + "'"));
    uint8_t* buf = packed_.back().get();
    auto run = [&](int64_t g0, int64_t g1) {
        quant::pack_groups(l, w.data, w.row_bytes, g0, g1, buf + g0 * l.group_bytes);
    };
    if (load_pool_) {
        const int64_t chunk = std::max<int64_t>(1, l.n_groups / (load_pool_->size() * 8));
        load_pool_->parallel_for((l.n_groups + chunk - 1) / chunk, [&](int64_t c, int) {
            run(c * chunk, std::min(l.n_groups, (c + 1) * chunk));
        });
    } else {
        run(0, l.n_groups);
    }
    w.packed = buf;
}

std::vector<kernels::WeightView> Model::expert_matrices(const std::string& name, int64_t n_cols,
                                                        int64_t n_rows, int64_t n_expert) {
    const format::GgufTensor* t = file_->find_tensor(name);
    if (!t) throw Error("model '" + file_->path() + "': tensor '" + name + "' is missing");
    if (t->n_dims != 3 || static_cast<int64_t>(t->ne[0]) != n_cols ||
        static_cast<int64_t>(t->ne[1]) != n_rows || static_cast<int64_t>(t->ne[2]) != n_expert) {
        throw Error("model '" + file_->path() + "': tensor '" + name + "' has shape " +
                    shape_str(t->ne, t->n_dims) + ", expected [" + std::to_string(n_cols) + ", " +
                    std::to_string(n_rows) + ", " + std::to_string(n_expert) + "]");
    }
    n_params_ += n_expert * n_rows * n_cols;
    weight_bytes_ += t->n_bytes;
    // Each expert is packed on its own, so an expert's rows never share a packed group with the
    // next expert's whatever n_rows is.
    std::vector<kernels::WeightView> out(static_cast<size_t>(n_expert));
    for (int64_t e = 0; e < n_expert; ++e) {
        kernels::WeightView& w = out[e];
        w.type = t->type;
        w.n_rows = n_rows;
        w.n_cols = n_cols;
        w.row_bytes = quant::row_bytes(t->type, n_cols);
        w.data = t->data + static_cast<size_t>(e * n_rows) * w.row_bytes;
        pack(w, name + "[" + std::to_string(e) + "]");
    }
    if (out[0].packed) file_->release(*t);
    return out;
}

std::vector<kernels::WeightView> Model::split_matrix(const std::string& name, int64_t n_cols,
                                                     const std::vector<int64_t>& rows) {
    const format::GgufTensor* t = file_->find_tensor(name);
    if (!t) throw Error("model '" + file_->path() + "': tensor '" + name + "' is missing");
    int64_t total = 0;
    for (int64_t r : rows)
        total += r;
    if (t->n_dims != 2 || static_cast<int64_t>(t->ne[0]) != n_cols ||
        static_cast<int64_t>(t->ne[1]) != total) {
        throw Error("model '" + file_->path() + "': tensor '" + name + "' has shape " +
                    shape_str(t->ne, t->n_dims) + ", expected [" + std::to_string(n_cols) + ", " +
                    std::to_string(total) + "]");
    }
    n_params_ += total * n_cols;
    weight_bytes_ += t->n_bytes;
    // Rows are whole quantisation blocks, so each range is a view of its own, packed on its own.
    std::vector<kernels::WeightView> out(rows.size());
    int64_t at = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
        kernels::WeightView& w = out[i];
        w.type = t->type;
        w.n_rows = rows[i];
        w.n_cols = n_cols;
        w.row_bytes = quant::row_bytes(t->type, n_cols);
        w.data = t->data + static_cast<size_t>(at) * w.row_bytes;
        pack(w, name + "[rows " + std::to_string(at) + "..]");
        at += rows[i];
    }
    if (out[0].packed) file_->release(*t);
    return out;
}

std::vector<float> Model::vector(const std::string& name, int64_t n) {
    const format::GgufTensor* t = file_->find_tensor(name);
    if (!t) throw Error("model '" + file_->path() + "': tensor '" + name + "' is missing");
    if (t->n_dims != 1 || static_cast<int64_t>(t->ne[0]) != n) {
        throw Error("model '" + file_->path() + "': tensor '" + name + "' has shape " +
                    shape_str(t->ne, t->n_dims) + ", expected [" + std::to_string(n) + "]");
    }
    std::vector<float> v(static_cast<size_t>(n));
    quant::dequantize_row(t->type, t->data, v.data(), n);
    n_params_ += n;
    weight_bytes_ += t->n_bytes;
    return v;
}

void Model::load_weights(runtime::ThreadPool*) {
    const format::GgufTensor* embd = file_->find_tensor("token_embd.weight");
    if (!embd) throw Error("model '" + file_->path() + "': tensor 'token_embd.weight' is missing");
    if (embd->n_dims != 2) {
        throw Error("model '" + file_->path() + "': tensor 'token_embd.weight' has shape " +
                    shape_str(embd->ne, embd->n_dims) + ", expected [n_embd, n_vocab]");
    }
    hp_.n_vocab = static_cast<int64_t>(embd->ne[1]);
    const std::string a = hp_.arch;
    if (auto nv = file_->opt_uint(a + ".vocab_size");
        nv && static_cast<int64_t>(*nv) != hp_.n_vocab) {
        throw Error("model '" + file_->path() + "': " + a + ".vocab_size = " + std::to_string(*nv) +
                    " but token_embd.weight has " + std::to_string(hp_.n_vocab) + " rows");
    }
    const int64_t d = hp_.n_embd, hd = hp_.head_dim;
    // The embedding is only read row by row (no matmul) unless it doubles as the output head.
    const bool tied = file_->find_tensor("output.weight") == nullptr;
    token_embd_ = matrix("token_embd.weight", d, hp_.n_vocab, /*pack=*/tied);
    output_norm_ = vector("output_norm.weight", d);
    hp_.tied_output = file_->find_tensor("output.weight") == nullptr;
    output_ = hp_.tied_output ? token_embd_ : matrix("output.weight", d, hp_.n_vocab);
    // block_count is checked against the tensors before storage for that many layers exists: a
    // hostile count in a small file is an error naming it, not a huge allocation.
    if (file_->find_tensor("blk." + std::to_string(hp_.n_layer - 1) + ".attn_norm.weight") ==
        nullptr) {
        throw Error(file_->path() + ": block_count is " + std::to_string(hp_.n_layer) +
                    " but the file has no tensor 'blk." + std::to_string(hp_.n_layer - 1) +
                    ".attn_norm.weight'");
    }
    const ArchInfo* arch = find_arch(a);
    if (!arch->fused_qkv && file_->find_tensor("blk.0.attn_qkv.weight")) {
        throw Error("model '" + file_->path() +
                    "': a fused 'attn_qkv' projection is not part of the " + a +
                    " architecture; this loader reads separate attn_q, attn_k and attn_v for it "
                    "(as llama.cpp's converter writes them)");
    }
    layers_.resize(hp_.n_layer);
    for (int l = 0; l < hp_.n_layer; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        LayerWeights& L = layers_[l];
        L.attn_norm = vector(p + "attn_norm.weight", d);
        if (arch->fused_qkv) {
            auto qkv = split_matrix(p + "attn_qkv.weight", d,
                                    {hp_.n_head * hd, hp_.n_kv_head * hd, hp_.n_kv_head * hd});
            L.wq = qkv[0];
            L.wk = qkv[1];
            L.wv = qkv[2];
        } else {
            L.wq = matrix(p + "attn_q.weight", d, hp_.n_head * hd);
            L.wk = matrix(p + "attn_k.weight", d, hp_.n_kv_head * hd);
            L.wv = matrix(p + "attn_v.weight", d, hp_.n_kv_head * hd);
        }
        for (const OptionalBias& ob : kOptionalBiases) {
            if (file_->find_tensor(p + ob.suffix)) {
                L.*ob.field = vector(p + ob.suffix, (ob.kv ? hp_.n_kv_head : hp_.n_head) * hd);
            }
        }
        L.wo = matrix(p + "attn_output.weight", hp_.n_head * hd, d);
        L.ffn_norm = vector(p + "ffn_norm.weight", d);
        if (hp_.qk_norm) {
            L.q_norm = vector(p + "attn_q_norm.weight", hd);
            L.k_norm = vector(p + "attn_k_norm.weight", hd);
        }
        if (hp_.n_expert > 0 && l >= hp_.n_layer_dense_lead) {
            const int64_t ff = hp_.n_ff_expert, ne = hp_.n_expert;
            L.router = matrix(p + "ffn_gate_inp.weight", d, ne);
            L.experts.n_expert = ne;
            L.experts.n_used = hp_.n_expert_used;
            L.experts.n_ff = ff;
            L.experts.scale = hp_.expert_weights_scale;
            L.experts.gating = hp_.expert_gating;
            L.experts.norm = hp_.expert_weights_norm;
            L.experts.n_group = hp_.n_expert_groups;
            L.experts.n_group_used = hp_.n_expert_groups_used;
            // The selection bias (DeepSeek V3's, bailingmoe2's exp_probs_b): a sigmoid router
            // without one would choose by the unbiased scores, which is not this model.
            if (file_->find_tensor(p + "exp_probs_b.bias")) {
                L.experts.bias = vector(p + "exp_probs_b.bias", ne);
            } else if (hp_.expert_gating == runtime::MoeGating::Sigmoid) {
                throw Error("model '" + file_->path() + "': tensor '" + p +
                            "exp_probs_b.bias' is missing (the sigmoid router's selection bias)");
            }
            if (hp_.n_ff_shexp > 0) {
                L.sh_gate = matrix(p + "ffn_gate_shexp.weight", d, hp_.n_ff_shexp);
                L.sh_up = matrix(p + "ffn_up_shexp.weight", d, hp_.n_ff_shexp);
                L.sh_down = matrix(p + "ffn_down_shexp.weight", hp_.n_ff_shexp, d);
            }
            L.experts.gate = expert_matrices(p + "ffn_gate_exps.weight", d, ff, ne);
            L.experts.up = expert_matrices(p + "ffn_up_exps.weight", d, ff, ne);
            L.experts.down = expert_matrices(p + "ffn_down_exps.weight", ff, d, ne);
            // The gate and up matmuls share one prepared input, so their formats must want the
            // same activations (a per-tensor type override could make them differ).
            if (kernels::act_kind_for(L.experts.gate[0].type) !=
                kernels::act_kind_for(L.experts.up[0].type)) {
                throw Error("model '" + file_->path() + "': '" + p + "ffn_gate_exps.weight' and '" +
                            p + "ffn_up_exps.weight' have types whose inputs differ (" +
                            format::tensor_type_info(L.experts.gate[0].type).name + " and " +
                            format::tensor_type_info(L.experts.up[0].type).name +
                            "); re-quantise them to one type");
            }
        } else {
            L.w_gate = matrix(p + "ffn_gate.weight", d, hp_.n_ff);
            L.w_up = matrix(p + "ffn_up.weight", d, hp_.n_ff);
            L.w_down = matrix(p + "ffn_down.weight", hp_.n_ff, d);
        }
    }
    // theta_i(p) = p * base^(-2i / n_rot), as llama.cpp's RoPE defines it.
    const int64_t half = hp_.n_rot / 2;
    try {
        rope_cos_.resize(static_cast<size_t>(hp_.n_ctx) * half);
        rope_sin_.resize(rope_cos_.size());
    } catch (const std::bad_alloc&) {
        throw Error("out of memory: cannot allocate " +
                    mib(2 * static_cast<size_t>(hp_.n_ctx) * half * sizeof(float)) +
                    " of RoPE tables for context_length " + std::to_string(hp_.n_ctx));
    }
    for (int p = 0; p < hp_.n_ctx; ++p) {
        for (int64_t i = 0; i < half; ++i) {
            const double theta =
                p * std::pow(static_cast<double>(hp_.rope_base), -2.0 * i / hp_.n_rot);
            rope_cos_[p * half + i] = static_cast<float>(std::cos(theta));
            rope_sin_[p * half + i] = static_cast<float>(std::sin(theta));
        }
    }
}

}  // namespace llada::model
