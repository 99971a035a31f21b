// Projected time of a plan on a profile: where each op runs (NPU or CPU), which weight format it
// reads, and the resources it uses for a given execution shape. Shared by npu-sim (its timeline)
// and by the cpu device's projection onto a phone CPU profile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "npu/cost_model.h"
#include "npu/profile.h"
#include "quant/tile.h"
#include "runtime/plan.h"

namespace llada::runtime {

struct Batch;  // runtime/device.h

enum class Placement : uint8_t { Npu, Cpu, Skip };
const char* placement_name(Placement p);

// Which tile format the NPU reads a model weight in. `model`: the model's own precision class
// (block formats of <= 4 bits per weight, Q2_K ... Q4_K and IQ4 included, -> TQ4; Q5_0 ... Q8_0
// -> TQ8; float types -> TF16). `tq4`: the published recipe (docs/npu-facts.md,
// "Tile-group quantisation"): TQ4 for every matrix, TQ8 for the FFN down projection.
enum class WeightRecipe { Model, Tq4 };
WeightRecipe parse_weight_recipe(const std::string& name);  // throws llada::Error
quant::TileType npu_weight_type(format::TensorType type, const std::string& op_name,
                                WeightRecipe recipe);

// Static facts about a plan for projection, computed once per compiled plan.
struct PlanProjection {
    std::vector<Placement> where;      // per op
    std::vector<size_t> weight_bytes;  // per op: bytes of its weights in the placement's format
    std::vector<uint8_t> dequant;      // per op: the NPU dequantises (TQ4/TQ8) through its LUT
    int n_layers = 0;                  // layers in the plan (attention ops)
    bool any_npu = false;
};

// The placement rule of a device with a matrix engine (on_npu = true): the transformer's
// per-row work (matmuls, attention, norms, elementwise, KV stores) runs on the NPU; the
// embedding gather and everything in output-row space (final norm, LM head, fused sampling)
// on the CPU unless the profile puts the LM head on the NPU; activation preparation for the
// CPU's int8 kernels is skipped when only NPU ops consume it (the NPU reads fp16 directly).
// on_npu = false places everything on the CPU.
PlanProjection project_plan(const Plan& plan, bool on_npu, bool lm_head_on_npu,
                            WeightRecipe recipe);

// One execution's shape.
struct ExecShape {
    int64_t rows = 0;        // window rows
    int64_t bucket = 0;      // window rows the NPU computes (the shape bucket)
    int64_t n_out = 0;       // output rows
    int64_t out_bucket = 0;  // output rows the NPU computes when it runs the output head
    int64_t keys = 0;        // attention keys per row (longest sequence)
    int64_t n_seq = 1;       // sequences the window spans (KV read once per sequence)
};

// The shape of `b` on `plan`: keys = the longest attention span (kv_len, or the last position + 1
// for causal attention), n_seq = sequences the rows span; bucket / out_bucket as given.
ExecShape exec_shape(const Plan& plan, const Batch& b, int64_t bucket, int64_t out_bucket);

// The resources op `i` uses at its placement. `prof` is the NPU profile for NPU ops and the CPU
// profile for CPU ops.
npu::OpWork op_work(const Plan& plan, const PlanProjection& proj, int i, const npu::Profile& prof,
                    const ExecShape& s);

}  // namespace llada::runtime
