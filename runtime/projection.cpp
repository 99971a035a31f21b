// Placement of plan ops and the resources each uses, for the cost model.
#include "runtime/projection.h"

#include <algorithm>
#include <cmath>

#include "npu/tile_engine.h"
#include "runtime/device.h"
#include "util/error.h"

namespace llada::runtime {

const char* placement_name(Placement p) {
    switch (p) {
        case Placement::Npu:
            return "npu";
        case Placement::Cpu:
            return "cpu";
        case Placement::Skip:
            return "skip";
    }
    return "?";
}

WeightRecipe parse_weight_recipe(const std::string& name) {
    if (name == "model") return WeightRecipe::Model;
    if (name == "tq4") return WeightRecipe::Tq4;
    throw Error(
        "--npu-weights must be 'model' (the model's precision: formats of <= 4 bits -> TQ4, "
        "5-8 bits -> TQ8, float -> TF16, tile formats as they are) or 'tq4' (TQ4, TQ8 for FFN "
        "down), got '" +
        name + "'");
}

quant::TileType npu_weight_type(format::TensorType type, const std::string& op_name,
                                WeightRecipe recipe) {
    if (recipe == WeightRecipe::Tq4) {
        const bool ffn_down = op_name.find("ffn_down") != std::string::npos;
        return ffn_down ? quant::TileType::TQ8 : quant::TileType::TQ4;
    }
    if (const auto tile = quant::tile_type_of(type)) return *tile;  // a file already in tiles
    using format::TensorType;
    switch (type) {
        // Four bits or fewer per weight: the 4-bit tiles (Q2_K and Q3_K gain precision).
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::IQ4_NL:
        case TensorType::IQ4_XS:
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
            return quant::TileType::TQ4;
        // Five to eight bits: the 8-bit tiles.
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
        case TensorType::Q8_0:
            return quant::TileType::TQ8;
        default:
            return quant::TileType::TF16;
    }
}

PlanProjection project_plan(const Plan& plan, bool on_npu, bool lm_head_on_npu,
                            WeightRecipe recipe) {
    const int n = static_cast<int>(plan.ops.size());
    PlanProjection p;
    p.where.assign(n, Placement::Cpu);
    p.weight_bytes.assign(n, 0);
    p.dequant.assign(n, 0);
    for (int i = 0; i < n; ++i) {
        const Op& op = plan.ops[i];
        if (op.kind == OpKind::Attention) ++p.n_layers;
        if (!on_npu) continue;
        const bool output_space = op.out >= 0 && plan.tensors[op.out].rows == RowSpace::Output;
        if (op.kind == OpKind::Embed || (output_space && !lm_head_on_npu)) continue;
        p.where[i] = Placement::Npu;
    }
    // Activation preparation only serves the CPU's int8 kernels: skipped when no CPU op reads it.
    for (int i = 0; i < n; ++i) {
        const Op& op = plan.ops[i];
        if (op.kind != OpKind::PrepareActs) continue;
        bool cpu_reader = false;
        for (int j = i + 1; j < n; ++j) {
            const Op& r = plan.ops[j];
            if ((r.in0 == op.out || r.in1 == op.out) && p.where[j] == Placement::Cpu)
                cpu_reader = true;
        }
        p.where[i] = cpu_reader ? Placement::Cpu : Placement::Skip;
    }
    for (int i = 0; i < n; ++i) {
        const Op& op = plan.ops[i];
        if (p.where[i] == Placement::Npu) p.any_npu = true;
        const bool matrix = op.kind == OpKind::MatMul || op.kind == OpKind::LmHeadReduce;
        if (!matrix) continue;
        if (p.where[i] == Placement::Npu) {
            const std::string& name = plan.tensors[op.out].name;
            const quant::TileType t = npu_weight_type(op.weight.type, name, recipe);
            p.weight_bytes[i] =
                quant::tile_layout(t, op.weight.n_rows, op.weight.n_cols).total_bytes();
            p.dequant[i] = t != quant::TileType::TF16;
        } else {
            p.weight_bytes[i] =
                quant::matrix_bytes(op.weight.type, op.weight.n_rows, op.weight.n_cols);
        }
    }
    return p;
}

ExecShape exec_shape(const Plan& plan, const Batch& b, int64_t bucket, int64_t out_bucket) {
    ExecShape s;
    s.rows = b.n_rows;
    s.bucket = bucket;
    s.n_out = b.n_out;
    s.out_bucket = out_bucket;
    bool causal = false;
    const Op* block_causal = nullptr;  // an attention op with blocks (LLaDA 2.x)
    for (const Op& op : plan.ops) {
        causal = causal || (op.kind == OpKind::Attention && op.causal);
        if (op.kind == OpKind::Attention && op.block > 0) block_causal = &op;
    }
    int32_t max_seq = 0;
    for (int64_t r = 0; r < b.n_rows; ++r) {
        max_seq = std::max(max_seq, b.seq[r]);
        if (causal) s.keys = std::max<int64_t>(s.keys, b.pos[r] + 1);
        if (block_causal && b.kv_len)
            s.keys = std::max<int64_t>(s.keys, block_causal->visible_keys(b, r));
    }
    s.n_seq = max_seq + 1;
    if (!causal && !block_causal && b.kv_len) {
        for (int32_t q = 0; q <= max_seq; ++q)
            s.keys = std::max<int64_t>(s.keys, b.kv_len[q]);
    }
    return s;
}

npu::OpWork op_work(const Plan& plan, const PlanProjection& proj, int i, const npu::Profile& prof,
                    const ExecShape& s) {
    const Op& op = plan.ops[i];
    const bool npu = proj.where[i] == Placement::Npu;
    const double ab = npu ? 2.0 : 4.0;  // fp16 activations on the NPU, float32 on the CPU
    const double kvb = npu || op.kv_f16 ? 2.0 : 4.0;  // the KV cache's bytes per value
    auto rows_of = [&](int t) -> double {
        const bool window = t < 0 || plan.tensors[t].rows == RowSpace::Window;
        if (npu) return static_cast<double>(window ? s.bucket : s.out_bucket);
        return static_cast<double>(window ? s.rows : s.n_out);
    };
    npu::OpWork w;
    const double m = rows_of(op.out >= 0 ? op.out : op.in0);
    const double k = op.in0 >= 0 ? static_cast<double>(plan.tensors[op.in0].cols) : 0.0;
    switch (op.kind) {
        case OpKind::Embed:
            // One row of the table per token (a tile format's row: its share of the bytes).
            w.dram_bytes = static_cast<double>(s.rows) *
                           static_cast<double>(quant::matrix_bytes(op.weight.type, op.weight.n_rows,
                                                                   op.weight.n_cols)) /
                           static_cast<double>(op.weight.n_rows);
            w.vector_ops = m * static_cast<double>(op.weight.n_cols);
            w.vector_bytes = w.vector_ops * ab;
            break;
        case OpKind::RmsNorm:
            w.vector_ops = 4 * m * k;
            w.vector_bytes = 2 * m * k * ab;
            break;
        case OpKind::PrepareActs:
            w.vector_ops = 3 * m * k;
            w.vector_bytes = m * k * ab;
            break;
        case OpKind::MatMul:
        case OpKind::LmHeadReduce: {
            const int64_t rows = static_cast<int64_t>(m);
            w.matrix_flops = npu::matmul_flops(prof, rows, op.weight.n_rows, op.weight.n_cols);
            w.dram_bytes = static_cast<double>(proj.weight_bytes[i]);
            if (proj.dequant[i]) {
                w.vector_ops = static_cast<double>(npu::padded_rows(op.weight.n_rows, 32)) *
                               static_cast<double>(npu::padded_rows(op.weight.n_cols, 32));
            }
            if (op.kind == OpKind::LmHeadReduce) {
                // Running max, exp, sum and entropy over every logit of every row.
                w.vector_ops += 4 * m * static_cast<double>(op.weight.n_rows);
            }
            break;
        }
        case OpKind::AddBias:
        case OpKind::Add:
            w.vector_ops = m * k;
            w.vector_bytes = 3 * m * k * ab;
            break;
        case OpKind::Rope:
            w.vector_ops = 3 * m * k;
            w.vector_bytes = 2 * m * k * ab;
            break;
        case OpKind::SwiGlu:
            w.vector_ops = 8 * m * k;
            w.vector_bytes = 3 * m * k * ab;
            break;
        case OpKind::StoreKV:
            // A static graph stores its whole tile of rows (padding rows into a dummy slot).
            w.dram_bytes = 2.0 * static_cast<double>(npu ? s.bucket : s.rows) * k * kvb;
            break;
        case OpKind::Attention: {
            const double kv_dim = static_cast<double>(op.n_kv_head * op.head_dim);
            const double heads = static_cast<double>(op.n_head);
            const double hd = static_cast<double>(op.head_dim);
            const double keys = static_cast<double>(npu ? npu::padded_rows(s.keys, 32) : s.keys);
            w.dram_bytes =
                static_cast<double>(s.n_seq) * static_cast<double>(s.keys) * kv_dim * 2.0 * kvb;
            const double softmax = 4 * m * heads * keys;
            if (npu) {
                // Scores and values on the matrix engine in tiles; the softmax on the vector
                // unit with exp from the LUT; the two alternate.
                w.matrix_flops = 4 * m * keys * hd * heads;
                w.vector_ops = softmax;
                w.serial_matrix_vector = true;
            } else {
                w.vector_ops = 4 * m * keys * hd * heads + softmax;
            }
            break;
        }
        case OpKind::GatherRows:
            w.vector_bytes =
                2 * rows_of(op.out) * static_cast<double>(plan.tensors[op.out].cols) * ab;
            break;
        case OpKind::MoeFfn: {
            // Three matmuls per chosen (row, expert) slot; the weights of every expert some row
            // chose are read once. Under uniform routing an expert is chosen by none of m rows
            // with probability (1 - n_used / n_expert)^m.
            const MoeExperts& e = *op.moe;
            const double slots = m * static_cast<double>(e.n_used);
            const double ff = static_cast<double>(e.n_ff);
            const double n_exp = static_cast<double>(e.n_expert);
            w.matrix_flops = 2.0 * slots * 3.0 * k * ff;
            const double expert_bytes = 2.0 * static_cast<double>(e.gate[0].row_bytes) * ff +
                                        static_cast<double>(e.down[0].row_bytes) * k;
            const double touched =
                n_exp * (1.0 - std::pow(1.0 - static_cast<double>(e.n_used) / n_exp, m));
            w.dram_bytes = touched * expert_bytes;
            w.vector_ops = 4 * m * n_exp + 8 * slots * ff + 2 * slots * k;
            w.vector_bytes = 3 * slots * (k + ff) * ab;
            break;
        }
    }
    return w;
}

}  // namespace llada::runtime
