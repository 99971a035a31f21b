// A loaded model: hyper-parameters and weights from a GGUF, and the forward pass of a window of
// rows recorded as an op plan. Decoding policies see only Session::forward: logits for rows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "kernels/kernels.h"
#include "runtime/device.h"
#include "runtime/plan.h"
#include "util/aligned.h"

namespace llada::model {

// The fused LM head's output per row and the Gumbel-max draw it takes for a row, as the layers
// above the model read them (their definitions and reductions are the kernels').
using HeadStats = kernels::RowStats;
using HeadDraw = kernels::GumbelRow;
// The softmax probability of a row's argmax, and of its Gumbel-max choice.
inline float head_confidence(const HeadStats& s) {
    return kernels::row_confidence(s);
}
inline float head_gumbel_confidence(const HeadStats& s) {
    return kernels::row_gumbel_confidence(s);
}

struct Hparams {
    // GGUF general.architecture: "llada", "llama", "dream", "llada-moe", "llada2",
    // "bailingmoe2"
    std::string arch;
    int n_layer = 0;
    int64_t n_embd = 0;
    int64_t n_ff = 0;
    int64_t n_head = 0;
    int64_t n_kv_head = 0;
    int64_t head_dim = 0;
    int64_t n_rot = 0;
    int64_t n_vocab = 0;
    int n_ctx = 0;
    float eps = 0.0f;
    float rope_base = 10000.0f;
    kernels::RopeStyle rope_style = kernels::RopeStyle::Norm;
    bool causal = false;        // autoregressive attention (llama) vs bidirectional (dLLMs)
    bool shift_logits = false;  // row p predicts position p + 1 (Dream)
    bool tied_output = false;   // output head is token_embd
    bool qk_norm = false;       // RMSNorm of each Q and K head before RoPE (LLaDA-MoE)
    // Mixture of experts (0 experts: a dense SwiGLU FFN of n_ff).
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    int64_t n_ff_expert = 0;
    float expert_weights_scale = 0.0f;  // 0 or 1: the gate probabilities as they are
    // LLaDA 2.x / Ling 2.0 (bailingmoe2): the first n_layer_dense_lead layers keep a dense FFN
    // of n_ff; a sigmoid router whose selection bias picks among expert groups; the chosen
    // weights renormalised; n_ff_shexp: the shared expert's hidden size (0: none), added to the
    // experts' sum ungated.
    int64_t n_layer_dense_lead = 0;
    runtime::MoeGating expert_gating = runtime::MoeGating::Softmax;
    int64_t n_expert_groups = 0, n_expert_groups_used = 0;
    bool expert_weights_norm = false;
    int64_t n_ff_shexp = 0;
    // Block-causal attention (llada2): a position sees every block of `attention_block`
    // positions up to its own; the default of PlanOptions::attention_block (0: not block-causal).
    int64_t attention_block = 0;
};

// Weights of one transformer block (views into the mmapped GGUF).
struct LayerWeights {
    std::vector<float> attn_norm, ffn_norm;  // F32 copies of the norm vectors
    kernels::WeightView wq, wk, wv, wo, w_gate, w_up, w_down;
    std::vector<float> bq, bk, bv;      // optional projection biases (Dream's); empty when absent
    std::vector<float> q_norm, k_norm;  // per-head Q/K RMSNorm weights [head_dim] (qk_norm)
    kernels::WeightView router;         // MoE: ffn_gate_inp [n_expert][d]
    runtime::MoeExperts experts;        // MoE: per-expert views of ffn_{gate,up,down}_exps
    kernels::WeightView sh_gate, sh_up, sh_down;  // MoE: the shared expert (n_ff_shexp > 0)
    bool moe() const { return experts.n_expert > 0; }
};

class Model {
  public:
    // Loads any supported architecture from a GGUF file or a Hugging Face directory
    // (model/hf_model.h); throws llada::Error naming what is wrong. Load-time
    // work (repacking quantised weights) runs on `pool` when one is given.
    static std::unique_ptr<Model> load(const std::string& path,
                                       runtime::ThreadPool* pool = nullptr);
    // Takes ownership of an already parsed file (tests, tools that inspect first).
    static std::unique_ptr<Model> from_gguf(std::unique_ptr<format::GgufFile> file,
                                            runtime::ThreadPool* pool = nullptr);

    const Hparams& hparams() const { return hp_; }
    const format::GgufFile& gguf() const { return *file_; }
    // Parameter count and weight bytes (for summaries).
    int64_t n_params() const { return n_params_; }
    size_t weight_bytes() const { return weight_bytes_; }

    // What the output head produces: logits [rows][n_vocab], or per-row statistics
    // (HeadStats: argmax, confidence, runner-up, entropy) from the fused LM head.
    enum class Head { Logits, Stats };
    // Records the forward pass for up to max_rows window rows and max_out LM-head rows.
    runtime::Plan build_plan(int64_t max_rows, int64_t max_out, Head head = Head::Logits,
                             runtime::PlanOptions options = {}) const;

  private:
    Model() = default;
    void load_hparams();
    void load_weights(runtime::ThreadPool* pool);
    // A weight matrix view; Q4_0/Q8_0 matrices are repacked for the matmul kernels when `pack`.
    kernels::WeightView matrix(const std::string& name, int64_t n_cols, int64_t n_rows,
                               bool pack = true);
    // The n_expert matrices of a 3-D expert tensor {n_cols, n_rows, n_expert}, one view each.
    std::vector<kernels::WeightView> expert_matrices(const std::string& name, int64_t n_cols,
                                                     int64_t n_rows, int64_t n_expert);
    // The row ranges of one fused matrix {n_cols, sum(rows)} (attn_qkv: Q, K, V), one view each.
    std::vector<kernels::WeightView> split_matrix(const std::string& name, int64_t n_cols,
                                                  const std::vector<int64_t>& rows);
    // Repacks a Q4_0/Q8_0/F16 view for the CPU kernels (a no-op for other types).
    void pack(kernels::WeightView& w, const std::string& name);
    std::vector<float> vector(const std::string& name, int64_t n);

    std::unique_ptr<format::GgufFile> file_;
    Hparams hp_;
    kernels::WeightView token_embd_, output_;
    std::vector<float> output_norm_;
    std::vector<LayerWeights> layers_;
    // Q4_0 / Q8_0 matrices repacked for the CPU kernels (quant/packed.h), owned here.
    std::vector<AlignedBytes> packed_;
    runtime::ThreadPool* load_pool_ = nullptr;
    // RoPE tables [n_ctx][n_rot/2], computed once in double precision.
    std::vector<float> rope_cos_, rope_sin_;
    int64_t n_params_ = 0;
    size_t weight_bytes_ = 0;
};

// Counters every policy reports.
struct ForwardStats {
    int64_t forwards = 0;      // forward passes (NFE)
    int64_t rows = 0;          // window rows computed through the transformer
    int64_t lm_head_rows = 0;  // rows sent through the output head
};

// The per-generation state: a device-compiled plan and a KV cache of n_seq sequences of n_pos
// slots, its own or one shared with other sessions (runtime/kv_cache.h). Nothing is allocated
// per forward.
class Session {
  public:
    // A session with a cache of its own.
    Session(const Model& model, runtime::Device& device, int n_seq, int n_pos, int64_t max_rows,
            int64_t max_out, runtime::PlanOptions options = {});
    // A session over a cache owned by the caller (which must outlive the session).
    Session(const Model& model, runtime::Device& device, runtime::KvCache& kv, int64_t max_rows,
            int64_t max_out, runtime::PlanOptions options = {});

    const Model& model() const { return model_; }
    runtime::Device& device() const { return device_; }
    int n_seq() const { return kv_->n_seq(); }
    int n_pos() const { return kv_->n_pos(); }
    int64_t max_rows() const { return max_rows_; }
    int64_t max_out() const { return max_out_; }
    const runtime::PlanOptions& options() const { return options_; }
    runtime::KvCache& kv() { return *kv_; }
    const runtime::KvCache& kv() const { return *kv_; }

    // Runs the window and returns logits [batch.n_out][n_vocab], valid until the next call.
    // Throws llada::Error for token ids outside the vocabulary, rows addressed outside the
    // cache, and two rows writing one (sequence, slot).
    const float* forward(const runtime::Batch& batch, const runtime::OpObserver* obs = nullptr);
    // The same forward with the fused LM head: per output row, the argmax, its softmax
    // probability, the runner-up and the entropy, without vocabulary-wide logits.
    const HeadStats* forward_stats(const runtime::Batch& batch);

    // The device's projected cost of a forward of each row count on this session's fused-head
    // plan, attending to kv_len slots (empty when the device has no cost model).
    std::vector<runtime::LatencyEntry> latency_table(std::span<const int64_t> rows, int64_t kv_len);

    const ForwardStats& stats() const { return stats_; }
    void reset_stats() { stats_ = {}; }
    size_t kv_bytes() const { return kv_->bytes(); }
    // Activation memory of the plans compiled so far.
    size_t arena_bytes() const;

  private:
    void init();
    void check(const runtime::Batch& batch);
    runtime::CompiledPlan& compiled(Model::Head head);

    const Model& model_;
    runtime::Device& device_;
    int64_t max_rows_, max_out_;
    runtime::PlanOptions options_;
    // One compiled plan per output head, built on first use; both share the KV cache.
    std::unique_ptr<runtime::CompiledPlan> logits_plan_, stats_plan_;
    runtime::KvCache own_kv_;
    runtime::KvCache* kv_ = nullptr;
    ForwardStats stats_;
    // Duplicate-write check: the forward that last wrote each (sequence, slot), and by which row.
    std::vector<int64_t> written_at_;
    std::vector<int32_t> written_by_;
    int64_t checks_ = 0;
};

}  // namespace llada::model
