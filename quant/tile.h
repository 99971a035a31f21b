// Tile-aligned weight formats for a 32x32 matrix engine (docs/design.md, "Quantisation"): TQ4, TQ8
// and TF16. Weights are permuted into the order the tile engine consumes them first, then quantised
// per group of 32, so one tile's weights and scales are one contiguous read.
//
// Exact layout. A weight matrix W[N][K] (N outputs = GGUF ne[1], K inputs = ne[0]) is padded with
// zeros to N' = ceil(N/32)*32 and K' = ceil(K/32)*32 and cut into 32x32 tiles T(nt, kt) covering
// outputs [32nt, 32nt+32) x inputs [32kt, 32kt+32). Tiles are stored output-tile major:
//
//     tile index = nt * (K'/32) + kt
//
// so the K'/32 tiles that produce one 32-wide strip of outputs follow each other in the order the
// engine accumulates them. Inside a tile, element (n, k) (n, k in 0..31) sits at position
//
//     p = (k / 2) * 64 + n * 2 + (k % 2)
//
// (the HMX weight order: one 128-byte fp16 vector holds a pair of inputs for all 32 outputs,
// column-major with inputs interleaved in pairs; Hao et al., EuroSys'26, section 3.1). A group is
// 32 consecutive positions, i.e. a 2x16 fragment: group g = p / 32 covers inputs
// {2(g/2), 2(g/2)+1} of outputs 16(g%2) .. 16(g%2)+15, and value i = p % 32 of the group is
// output 16(g%2) + i/2, input 2(g/2) + i%2. Eight consecutive groups (256 values: four input
// pairs of all 32 outputs) form a super-block, scales first:
//
//     TQ4 super-block, 144 bytes (4.5 bits per weight):
//         uint16_t d[8]       fp16 scale of each group
//         uint8_t  qs[8][16]  group g, byte j: value j in the low nibble, value j + 16 in the
//                             high nibble (as in llama.cpp's Q4_0); x = d[g] * (nibble - 8)
//     TQ8 super-block, 272 bytes (8.5 bits per weight):
//         uint16_t d[8]; int8_t qs[8][32];                   x = d[g] * qs[g][i]
//
// A tile is four super-blocks (TQ4: 576 bytes, TQ8: 1088 bytes). TF16 (for float models) has no
// groups: a tile is its 1024 fp16 values in position order (2048 bytes). Quantisation of a group
// is exactly llama.cpp's Q4_0 / Q8_0 reference quantiser applied to the group's 32 values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "format/tensor_type.h"

namespace llada::quant {

constexpr int kTileDim = 32;            // the matrix engine's tile is kTileDim x kTileDim
constexpr int kTileGroup = 32;          // values per quantisation group (a 2x16 fragment)
constexpr int kTileGroupsPerSuper = 8;  // groups per super-block

enum class TileType { TQ4, TQ8, TF16 };
const char* tile_type_name(TileType t);

// The GGUF tensor type that stores a matrix in tile format `t` (format/tensor_type.h), and back:
// nullopt for the row formats (F32, F16, BF16, Q8_0, Q4_0).
format::TensorType tensor_type_of(TileType t);
std::optional<TileType> tile_type_of(format::TensorType t);

struct SuperBlockTQ4 {
    uint16_t d[kTileGroupsPerSuper];
    uint8_t qs[kTileGroupsPerSuper][kTileGroup / 2];
};
static_assert(sizeof(SuperBlockTQ4) == 144, "TQ4 super-block is 144 bytes (4.5 bpw)");

struct SuperBlockTQ8 {
    uint16_t d[kTileGroupsPerSuper];
    int8_t qs[kTileGroupsPerSuper][kTileGroup];
};
static_assert(sizeof(SuperBlockTQ8) == 272, "TQ8 super-block is 272 bytes (8.5 bpw)");

struct TileLayout {
    TileType type = TileType::TQ4;
    int64_t n_rows = 0, n_cols = 0;  // N outputs, K inputs (unpadded)
    int64_t n_strips = 0;            // N' / 32: output strips (tile rows of the weight)
    int64_t k_tiles = 0;             // K' / 32: tiles per strip
    size_t tile_bytes = 0;
    size_t strip_bytes() const { return tile_bytes * static_cast<size_t>(k_tiles); }
    size_t total_bytes() const { return strip_bytes() * static_cast<size_t>(n_strips); }
};

TileLayout tile_layout(TileType type, int64_t n_rows, int64_t n_cols);

// Position of element (n, k) of a tile (n, k in 0..31), as defined above.
inline int tile_position(int n, int k) {
    return (k / 2) * 64 + n * 2 + (k % 2);
}

// Writes output strips [s0, s1) of the matrix whose rows [32*s0, ...) are given as float32,
// row-major with stride `ld` (rows >= n_rows and columns >= n_cols are taken as zero), into
// `dst`, which points at strip s0. `rows` holds rows 32*s0 .. min(32*s1, n_rows) - 1.
void quantize_tile_strips(const TileLayout& l, const float* rows, int64_t ld, int64_t s0,
                          int64_t s1, uint8_t* dst);

// Dequantises one strip (32 outputs x K') into out[n][k] with row stride `ldo` floats (>= K').
// With `fp16_lut` each value is read through a 16-entry fp16 table per group (x rounded to
// fp16, as the NPU's LUT dequantisation produces it); without, it is the exact float d * q.
void dequantize_tile_strip(const TileLayout& l, const uint8_t* strip, float* out, int64_t ldo,
                           bool fp16_lut);

// The same strip input-major: w[k][32] for k < K' (out[k * 32 + n]), the layout the NPU
// simulator's matmul kernel reads (kernels/tile_gemm.h); its scalar reference.
void dequantize_tile_strip_kn(const TileLayout& l, const uint8_t* strip, float* w, bool fp16_lut);

// The scalar reference: element (n, k) of the matrix (exact float value).
float tile_value(const TileLayout& l, const uint8_t* data, int64_t n, int64_t k);

// Bytes of an n_rows x n_cols matrix stored as `type` (a row format or a tile format, padding
// included).
size_t matrix_bytes(format::TensorType type, int64_t n_rows, int64_t n_cols);

// Row r (n_cols exact float values) of an n_rows x n_cols matrix stored as `type`, a row format
// (quant::dequantize_row of its r-th row) or a tile format: how embeddings and re-quantisation
// read a matrix whatever its layout.
void dequantize_matrix_row(format::TensorType type, const uint8_t* data, int64_t n_rows,
                           int64_t n_cols, int64_t r, float* out);

}  // namespace llada::quant
