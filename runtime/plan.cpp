// The op plan and its builder.
#include "runtime/plan.h"

#include <algorithm>
#include <cassert>

#include "quant/packed.h"
#include "runtime/device.h"

namespace llada::runtime {

const char* op_name(OpKind k) {
    switch (k) {
        case OpKind::Embed:
            return "embed";
        case OpKind::RmsNorm:
            return "rms_norm";
        case OpKind::PrepareActs:
            return "prepare_acts";
        case OpKind::MatMul:
            return "matmul";
        case OpKind::AddBias:
            return "add_bias";
        case OpKind::Rope:
            return "rope";
        case OpKind::StoreKV:
            return "store_kv";
        case OpKind::Attention:
            return "attention";
        case OpKind::SwiGlu:
            return "swiglu";
        case OpKind::Add:
            return "add";
        case OpKind::GatherRows:
            return "gather_rows";
        case OpKind::LmHeadReduce:
            return "lm_head_reduce";
        case OpKind::MoeFfn:
            return "moe_ffn";
    }
    return "?";
}

namespace {

size_t prepared_row_bytes(kernels::ActKind act, int64_t cols) {
    return act == kernels::ActKind::Q8_0 || act == kernels::ActKind::Q8_K
               ? quant::act_layout(cols).row_bytes
               : sizeof(float) * static_cast<size_t>(cols);
}

}  // namespace

MoeScratch moe_scratch(const MoeExperts& moe, int64_t d, int64_t rows) {
    MoeScratch s;
    s.x_row = prepared_row_bytes(kernels::act_kind_for(moe.gate[0].type), d);
    s.act_row = prepared_row_bytes(kernels::act_kind_for(moe.down[0].type), moe.n_ff);
    const size_t slots = static_cast<size_t>(rows * moe.n_used);
    auto region = [&](size_t bytes) {
        const size_t at = s.total;
        s.total += (bytes + 63) / 64 * 64;
        return at;
    };
    s.count = region(sizeof(int32_t) * static_cast<size_t>(moe.n_expert + 1));
    s.probs = region(sizeof(float) * static_cast<size_t>(rows * moe.n_expert));
    s.chosen = region(sizeof(int32_t) * slots);
    s.weight = region(sizeof(float) * slots);
    s.slot = region(sizeof(int32_t) * slots);
    s.x = region(slots * s.x_row);
    s.gate = region(sizeof(float) * slots * static_cast<size_t>(moe.n_ff));
    s.up = region(sizeof(float) * slots * static_cast<size_t>(moe.n_ff));
    s.act = region(slots * s.act_row);
    s.down = region(sizeof(float) * slots * static_cast<size_t>(d));
    return s;
}

size_t Plan::tensor_bytes(int t) const {
    const TensorDesc& d = tensors[t];
    return d.row_bytes * static_cast<size_t>(d.rows == RowSpace::Window ? max_rows : max_out_rows);
}

PlanBuilder::PlanBuilder(int64_t max_rows, int64_t max_out_rows, PlanOptions options)
    : options_(options) {
    plan_.max_rows = max_rows;
    plan_.max_out_rows = max_out_rows;
}

int PlanBuilder::new_tensor(const std::string& name, RowSpace rows, int64_t cols,
                            size_t row_bytes) {
    TensorDesc d;
    d.name = name;
    d.rows = rows;
    d.cols = cols;
    d.row_bytes = row_bytes;
    plan_.tensors.push_back(d);
    return static_cast<int>(plan_.tensors.size()) - 1;
}

int PlanBuilder::push(Op op) {
    plan_.ops.push_back(op);
    return op.out;
}

int PlanBuilder::embed(const kernels::WeightView& token_embd) {
    Op op{OpKind::Embed};
    op.weight = token_embd;
    op.out = new_tensor("embd", RowSpace::Window, token_embd.n_cols,
                        sizeof(float) * static_cast<size_t>(token_embd.n_cols));
    return push(op);
}

int PlanBuilder::rms_norm(int x, const float* weight, float eps, const std::string& name) {
    const TensorDesc& in = plan_.tensors[x];
    Op op{OpKind::RmsNorm};
    op.in0 = x;
    op.vec = weight;
    op.eps = eps;
    op.out = new_tensor(name, in.rows, in.cols, in.row_bytes);
    return push(op);
}

int PlanBuilder::rms_norm_heads(int x, const float* weight, int64_t head_dim, float eps,
                                const std::string& name) {
    assert(plan_.tensors[x].cols % head_dim == 0);
    const int out = rms_norm(x, weight, eps, name);
    plan_.ops.back().group = head_dim;
    return out;
}

int PlanBuilder::moe_ffn(int x, int router, const MoeExperts& moe, const std::string& name) {
    const TensorDesc in = plan_.tensors[x];
    assert(plan_.tensors[router].cols == moe.n_expert && !moe.gate.empty());
    Op op{OpKind::MoeFfn};
    op.in0 = x;
    op.in1 = router;
    op.moe = &moe;
    // The expert matmuls prepare their inputs as any matmul on those weights would.
    op.act = kernels::act_kind_for(moe.gate[0].type);
    op.out = new_tensor(name, in.rows, in.cols, in.row_bytes);
    // Per-row bytes that hold the layout of any row count: its regions are 64-byte aligned, so
    // rows * (one row's bytes + 10 * 64) covers them.
    op.tmp =
        new_tensor(name + ".grouped", in.rows, 0, moe_scratch(moe, in.cols, 1).total + 10 * 64);
    return push(op);
}

kernels::ActKind PlanBuilder::act_for(const kernels::WeightView& w) const {
    if (options_.lut_dequant && w.type == format::TensorType::Q4_0) return kernels::ActKind::F32;
    return kernels::act_kind_for(w.type);
}

int PlanBuilder::prepared_input(int x, const kernels::WeightView& w) {
    const TensorDesc in = plan_.tensors[x];
    assert(in.cols == w.n_cols);
    const kernels::ActKind act = act_for(w);
    if (act == kernels::ActKind::F32) return x;
    for (const auto& [key, t] : prepared_) {
        if (key.first == x && key.second == act) return t;
    }
    const size_t rb = prepared_row_bytes(act, in.cols);
    Op prep{OpKind::PrepareActs};
    prep.in0 = x;
    prep.act = act;
    prep.out = new_tensor(in.name + ".prepared", in.rows, in.cols, rb);
    const int src = push(prep);
    prepared_.push_back({{x, act}, src});
    return src;
}

int PlanBuilder::matmul(int x, const kernels::WeightView& w, const std::string& name) {
    Op op{OpKind::MatMul};
    op.in0 = prepared_input(x, w);
    op.weight = w;
    op.act = act_for(w);
    op.lut = options_.lut_dequant && w.type == format::TensorType::Q4_0;
    op.out = new_tensor(name, plan_.tensors[x].rows, w.n_rows,
                        sizeof(float) * static_cast<size_t>(w.n_rows));
    return push(op);
}

int PlanBuilder::lm_head_reduce(int x, const kernels::WeightView& w, const std::string& name) {
    Op op{OpKind::LmHeadReduce};
    op.in0 = prepared_input(x, w);
    op.weight = w;
    op.act = act_for(w);
    op.lut = options_.lut_dequant && w.type == format::TensorType::Q4_0;
    op.out = new_tensor(name, plan_.tensors[x].rows, 1, sizeof(kernels::RowStats));
    return push(op);
}

int PlanBuilder::add_bias(int x, const float* bias, const std::string& name) {
    const TensorDesc& in = plan_.tensors[x];
    Op op{OpKind::AddBias};
    op.in0 = x;
    op.vec = bias;
    op.out = new_tensor(name, in.rows, in.cols, in.row_bytes);
    return push(op);
}

int PlanBuilder::rope(int x, int64_t n_head, int64_t head_dim, int64_t n_rot,
                      kernels::RopeStyle style, const float* cos, const float* sin, int64_t n_ctx,
                      const std::string& name) {
    const TensorDesc& in = plan_.tensors[x];
    assert(in.cols == n_head * head_dim);
    Op op{OpKind::Rope};
    op.in0 = x;
    op.n_head = n_head;
    op.head_dim = head_dim;
    op.n_rot = n_rot;
    op.rope_style = style;
    op.rope_cos = cos;
    op.rope_sin = sin;
    op.rope_ctx = n_ctx;
    op.out = new_tensor(name, in.rows, in.cols, in.row_bytes);
    return push(op);
}

void PlanBuilder::store_kv(int layer, int k, int v) {
    Op op{OpKind::StoreKV};
    op.layer = layer;
    op.in0 = k;
    op.in1 = v;
    op.kv_f16 = options_.kv_f16;
    plan_.ops.push_back(op);
}

int64_t Op::visible_keys(const Batch& b, int64_t w) const {
    if (causal) return int64_t{b.pos[w]} + 1;
    const int64_t kv = b.kv_len[b.seq[w]];
    if (block <= 0) return kv;
    return std::min<int64_t>(kv, (int64_t{b.pos[w]} / block + 1) * block);
}

int PlanBuilder::attention(int layer, int q, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                           bool causal, const std::string& name, int64_t block) {
    const TensorDesc& in = plan_.tensors[q];
    Op op{OpKind::Attention};
    op.layer = layer;
    op.in0 = q;
    op.n_head = n_head;
    op.n_kv_head = n_kv_head;
    op.head_dim = head_dim;
    op.causal = causal;
    op.block = causal ? 0 : block;
    op.lut = options_.lut_exp;
    op.kv_f16 = options_.kv_f16;
    op.out = new_tensor(name, in.rows, n_head * head_dim,
                        sizeof(float) * static_cast<size_t>(n_head * head_dim));
    return push(op);
}

int PlanBuilder::swiglu(int gate, int up, const std::string& name) {
    const TensorDesc& in = plan_.tensors[gate];
    Op op{OpKind::SwiGlu};
    op.in0 = gate;
    op.in1 = up;
    op.out = new_tensor(name, in.rows, in.cols, in.row_bytes);
    return push(op);
}

int PlanBuilder::add(int a, int b, const std::string& name) {
    const TensorDesc& in = plan_.tensors[a];
    Op op{OpKind::Add};
    op.in0 = a;
    op.in1 = b;
    op.out = new_tensor(name, in.rows, in.cols, in.row_bytes);
    return push(op);
}

int PlanBuilder::gather_output_rows(int x, const std::string& name) {
    const TensorDesc& in = plan_.tensors[x];
    Op op{OpKind::GatherRows};
    op.in0 = x;
    op.out = new_tensor(name, RowSpace::Output, in.cols, in.row_bytes);
    return push(op);
}

void PlanBuilder::set_output(int logits) {
    plan_.output = logits;
}

Plan PlanBuilder::finish() {
    assert(plan_.output >= 0);
    for (int i = 0; i < static_cast<int>(plan_.ops.size()); ++i) {
        const Op& op = plan_.ops[i];
        if (op.out >= 0) plan_.tensors[op.out].first_op = i;
        for (int in : {op.in0, op.in1}) {
            if (in >= 0) plan_.tensors[in].last_op = i;
        }
        if (op.tmp >= 0) plan_.tensors[op.tmp].first_op = plan_.tensors[op.tmp].last_op = i;
    }
    // The output is read after the plan ends.
    plan_.tensors[plan_.output].last_op = static_cast<int>(plan_.ops.size());
    return std::move(plan_);
}

}  // namespace llada::runtime
