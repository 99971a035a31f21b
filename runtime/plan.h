// The op plan: a small static list of tensor ops that a model records once per row capacity and
// any device executes. Activations are float32 [rows][cols] tensors placed in one arena.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace llada::runtime {

// Which row count a tensor follows at run time: the window's rows, or the rows whose output
// (logits) was asked for. Plans are sized for the maximum of each; an execution may use fewer.
enum class RowSpace { Window, Output };

struct TensorDesc {
    std::string name;  // e.g. "blk.3.attn_q", for dumps and error messages
    RowSpace rows = RowSpace::Window;
    int64_t cols = 0;      // float32 columns, or for prepared activations the row byte size
    size_t row_bytes = 0;  // bytes per row
    size_t offset = 0;     // arena offset, set by the memory planner
    int first_op = -1;     // op that writes it
    int last_op = -1;      // last op that reads it
};

enum class OpKind {
    Embed,        // out[r] = token_embd[tokens[r]] (dequantised exactly)
    RmsNorm,      // out = in0 / rms(in0) * norm_weight
    PrepareActs,  // out = in0 rounded (F16/BF16) or quantised (Q8_0) for the matmuls that follow
    MatMul,       // out[r][n] = in0[r] . W[n]   (in0: float or prepared activations)
    AddBias,      // out = in0 + bias (broadcast over rows)
    Rope,         // out = RoPE(in0) at each row's position
    StoreKV,      // KV cache of `layer` at (seq[r], pos[r]) <- in0 (K) and in1 (V)
    Attention,    // out[r] = attention of query in0[r] over the KV cache of `layer`, seq[r]
    SwiGlu,       // out = silu(in0) * in1
    Add,          // out = in0 + in1
    GatherRows,   // out[i] = in0[out_rows[i]] (window space -> output space)
    // out[i] = kernels::RowStats of the row in0[i] . W^T over the whole vocabulary, computed
    // chunk by chunk: the fused LM head that never writes a vocabulary-wide logits row.
    LmHeadReduce,
    // Mixture-of-experts FFN: in0 = the normed input rows, in1 = the router's logits
    // [rows][n_expert]; out[r] = sum over the row's top-k experts e of p_e * down_e(silu(gate_e
    // x) * up_e x), with p the softmax of the router logits. Rows are grouped per expert so each
    // expert's matrices are read once per forward; `tmp` holds the grouped rows.
    MoeFfn,
};

// How a router's logits become expert scores (llama.cpp's expert_gating_func 1 and 2).
enum class MoeGating : uint8_t { Softmax, Sigmoid };

// The experts of one mixture-of-experts layer (views owned by the model). Each row's scores are
// the gating of its router logits (softmax: llama.cpp's llada-moe; sigmoid: bailingmoe2, LLaDA
// 2.x). The n_used experts with the highest score plus `bias` (the selection bias, exp_probs_b;
// empty: none) are chosen, among the n_group_used groups (of n_group consecutive-id groups)
// whose two best biased scores sum highest when n_group > 1. Their weights are the unbiased
// scores, divided by their sum when `norm` (clamped below at 2^-14, as llama.cpp), times
// `scale` when it is not 0 or 1.
struct MoeExperts {
    int64_t n_expert = 0;
    int64_t n_used = 0;
    int64_t n_ff = 0;  // each expert's hidden size
    float scale = 0.0f;
    MoeGating gating = MoeGating::Softmax;
    std::vector<float> bias;  // [n_expert] or empty
    int64_t n_group = 0, n_group_used = 0;
    bool norm = false;
    std::vector<kernels::WeightView> gate, up,
        down;  // [n_expert] each: [n_ff][d], [n_ff][d], [d][n_ff]
};

// Where MoeFfn keeps its working set for `rows` rows of width d: byte offsets into its scratch.
// Every (row, choice) pair is a "slot"; slots are ordered by expert, so each expert's rows are
// consecutive and go through its matrices as one matmul.
struct MoeScratch {
    size_t count = 0;   // int32 [n_expert + 1]: first slot of each expert
    size_t probs = 0;   // float [rows][n_expert]: the router's softmax
    size_t chosen = 0;  // int32 [rows][n_used]: the experts a row chose, most probable first
    size_t weight = 0;  // float [rows][n_used]: their gate weights
    size_t slot = 0;    // int32 [rows][n_used]: the slot of each choice
    size_t x = 0;       // [slots][x_row]: each slot's input row, prepared for the gate/up weights
    size_t gate = 0, up = 0;  // float [slots][n_ff]
    size_t act = 0;           // [slots][act_row]: silu(gate) * up, prepared for the down weights
    size_t down = 0;          // float [slots][d]
    size_t total = 0;
    size_t x_row = 0, act_row = 0;
};
MoeScratch moe_scratch(const MoeExperts& moe, int64_t d, int64_t rows);

const char* op_name(OpKind k);

struct Batch;  // runtime/device.h

struct Op {
    explicit Op(OpKind k) : kind(k) {}
    OpKind kind;
    int out = -1;
    int in0 = -1;
    int in1 = -1;
    int tmp = -1;                // scratch alive only during this op (MoeFfn)
    kernels::WeightView weight;  // Embed, MatMul
    const float* vec = nullptr;  // RmsNorm weight, AddBias bias
    float eps = 0.0f;            // RmsNorm
    int64_t group = 0;  // RmsNorm: normalise each `group` columns on their own (0: the whole row)
    const MoeExperts* moe = nullptr;               // MoeFfn
    kernels::ActKind act = kernels::ActKind::F32;  // PrepareActs, MatMul input kind
    // Rope / Attention geometry.
    int layer = -1;
    int64_t n_head = 0;
    int64_t n_kv_head = 0;
    int64_t head_dim = 0;
    int64_t n_rot = 0;
    kernels::RopeStyle rope_style = kernels::RopeStyle::Norm;
    const float* rope_cos = nullptr;  // [n_ctx][n_rot/2]
    const float* rope_sin = nullptr;
    int64_t rope_ctx = 0;  // positions the tables cover
    bool causal = false;   // Attention: row at pos p sees keys [0, p]
    // Attention, block-causal (LLaDA 2.x): a row at pos p sees the keys of every block of
    // `block` positions up to its own, [0, (p / block + 1) * block), within its sequence's
    // kv_len. 0: not block-causal.
    int64_t block = 0;
    // Keys [0, n) a row of window row `w` of `b` sees (Attention).
    int64_t visible_keys(const Batch& b, int64_t w) const;
    // Table-driven variants (kernels/lut.h): MatMul on Q4_0 dequantises through a 16-entry
    // table with float activations; Attention takes exp from a 32,768-entry fp16 table.
    bool lut = false;
    bool kv_f16 = false;  // StoreKV / Attention: the session's cache holds fp16 (PlanOptions)
};

struct Plan {
    int64_t max_rows = 0;      // window rows the plan is sized for
    int64_t max_out_rows = 0;  // output rows the plan is sized for
    std::vector<TensorDesc> tensors;
    std::vector<Op> ops;
    int output = -1;         // the logits tensor [out rows][n_vocab]
    size_t arena_bytes = 0;  // set by the memory planner

    size_t tensor_bytes(int t) const;
};

// Records ops with named intermediates; the model's forward reads like the paper.
// Kernel choices a plan is built with (both off: the exact kernels).
struct PlanOptions {
    bool lut_dequant = false;  // Q4_0 matmuls through the int4 table (float activations)
    bool lut_exp = false;      // attention softmax through the exp table
    bool kv_f16 = false;       // the session's KV cache in fp16 (runtime/kv_cache.h)
    // The last layer's attention, output projection and FFN on the output rows only (their K/V
    // still stored for every row). model::Session turns it on for devices without tiles (on a
    // tiled device the rows are padded to a tile anyway, and output-row work is placed on the
    // CPU there) unless full_last_layer asks for the whole last layer (to measure the gain).
    bool gather_last_layer = false;
    bool full_last_layer = false;
    // A block-causal model's attention blocks (0: the model's own default).
    int64_t attention_block = 0;
};

class PlanBuilder {
  public:
    PlanBuilder(int64_t max_rows, int64_t max_out_rows, PlanOptions options = {});

    int embed(const kernels::WeightView& token_embd);
    int rms_norm(int x, const float* weight, float eps, const std::string& name);
    // RMSNorm of each head (`head_dim` columns) on its own, one weight vector for every head.
    int rms_norm_heads(int x, const float* weight, int64_t head_dim, float eps,
                       const std::string& name);
    // x (the normed FFN input) through a mixture of experts whose router logits are `router`.
    int moe_ffn(int x, int router, const MoeExperts& moe, const std::string& name);
    // x @ W^T, preparing x for W's format (prepared activations are shared between matmuls on
    // the same input, e.g. Q/K/V or gate/up).
    int matmul(int x, const kernels::WeightView& w, const std::string& name);
    int add_bias(int x, const float* bias, const std::string& name);
    int rope(int x, int64_t n_head, int64_t head_dim, int64_t n_rot, kernels::RopeStyle style,
             const float* cos, const float* sin, int64_t n_ctx, const std::string& name);
    void store_kv(int layer, int k, int v);
    // block > 0 (with causal false): block-causal attention over blocks of `block` positions.
    int attention(int layer, int q, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                  bool causal, const std::string& name, int64_t block = 0);
    int swiglu(int gate, int up, const std::string& name);
    int add(int a, int b, const std::string& name);
    int gather_output_rows(int x, const std::string& name);
    int lm_head_reduce(int x, const kernels::WeightView& w, const std::string& name);
    void set_output(int logits);

    Plan finish();  // computes lifetimes; the device assigns offsets

  private:
    int new_tensor(const std::string& name, RowSpace rows, int64_t cols, size_t row_bytes);
    int push(Op op);

    Plan plan_;
    PlanOptions options_;
    // The activation kind a matmul on `w` needs under the plan's options.
    kernels::ActKind act_for(const kernels::WeightView& w) const;
    // The input of a matmul-like op on `w`: x itself, or x prepared for w's format.
    int prepared_input(int x, const kernels::WeightView& w);
    // (input tensor, activation kind) -> prepared tensor, so prepared inputs are shared.
    std::vector<std::pair<std::pair<int, kernels::ActKind>, int>> prepared_;
};

}  // namespace llada::runtime
