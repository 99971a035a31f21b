// Semantics of a 32x32 matrix tile engine (Hexagon HMX): a matmul is computed in whole tiles, so
// its cost follows ceil(M / 32) and not M (the staircase), and padding rows are real work.
#pragma once

#include <cstdint>

#include "npu/profile.h"

namespace llada::npu {

// Rows a matrix engine with `tile_rows`-row tiles computes for m rows: ceil(m / tile) * tile.
inline int64_t padded_rows(int64_t m, int tile_rows) {
    return tile_rows <= 1 ? m : (m + tile_rows - 1) / tile_rows * tile_rows;
}

// Multiply-add FLOPs (2 per MAC) the engine executes for y[m][n] = x[m][k] . W^T: on an NPU
// every dimension is padded to whole 32x32 tiles (weights are tile-aligned, section 6 of
// docs/design.md); a CPU computes exactly m x n x k.
inline double matmul_flops(const Profile& p, int64_t m, int64_t n, int64_t k) {
    if (p.kind == Profile::Kind::Cpu) return 2.0 * m * n * k;
    return 2.0 * padded_rows(m, p.tile_rows) * padded_rows(n, 32) * padded_rows(k, 32);
}

}  // namespace llada::npu
