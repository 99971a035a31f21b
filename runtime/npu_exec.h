// Functional semantics of the simulated NPU's ops on the host: activations rounded to fp16 at op
// boundaries, weights in tile formats (quant/tile.h) dequantised through fp16 LUTs, products
// accumulated in float32, and every padded row of a tile really computed. The math reuses the
// CPU kernels; only the numerics and the shapes follow the NPU.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kernels.h"
#include "quant/tile.h"
#include "runtime/cpu_ops.h"
#include "util/aligned.h"

namespace llada::runtime {

// A model weight converted to a tile format, host copy (the bytes the window receives).
struct TileWeight {
    const uint8_t* key = nullptr;  // the model weight's data pointer
    quant::TileLayout layout;
    AlignedBytes host;              // the converted copy (empty when the file is in `type`)
    const uint8_t* data = nullptr;  // the tiles: host's bytes or the model file's own
    size_t bytes() const { return layout.total_bytes(); }
};

// `w` as tiles of `type`. A weight the file already stores in `type` is used in place (no copy);
// any other (a row format, or another tile format) is converted strips in parallel on the pool:
// each strip of 32 rows is dequantised exactly to float32 and re-quantised per 2x16 group.
TileWeight convert_to_tiles(CpuOps& ops, const kernels::WeightView& w, quant::TileType type);

// Per-thread scratch of the NPU matmuls: one dequantised strip (32 x K') and one logits tile.
struct NpuScratch {
    void size_for(int n_threads, int64_t max_k, int64_t max_rows);
    int64_t strip_floats = 0, logits_floats = 0;
    std::vector<float> strips, logits;
};

// y[r][n] = sum_k x[r][k] * W[n][k] for r < m_rows (the padded rows included) and every n < N,
// W in tile format at `w`; y (row stride N) rounded to fp16.
void npu_matmul(CpuOps& ops, NpuScratch& s, const float* x, int64_t m_rows,
                const quant::TileLayout& l, const uint8_t* w, float* y);

// The fused LM head on the NPU: logits of every strip of 32 vocabulary entries for m_rows rows
// (padding included), rounded to fp16, reduced to RowStats for the first n_valid rows. `partial`
// holds n_strips * m_rows entries.
void npu_lm_head_reduce(CpuOps& ops, NpuScratch& s, const float* x, int64_t m_rows, int64_t n_valid,
                        const quant::TileLayout& l, const uint8_t* w,
                        std::vector<kernels::RowStats>& partial, kernels::RowStats* out);

// Rounds rows [0, rows) of a [rows][cols] float32 tensor to fp16 in place.
void round_rows_to_fp16(CpuOps& ops, float* y, int64_t cols, int64_t rows);

}  // namespace llada::runtime
