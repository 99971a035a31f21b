// The CPU's repacked layout of llama.cpp Q4_0 / Q8_0 weights and of Q8 activations: the same
// quantised values and scales, reordered so that one register tile of the matmul (4 weight rows x
// a pair of 32-element blocks) is one contiguous read. Repacking happens once at load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "format/tensor_type.h"

namespace llada::quant {

// Weight rows are packed in groups of kPackRows; the reduction axis in pairs of 32-element
// blocks (64 values), zero-padded to a whole pair.
constexpr int kPackRows = 4;
constexpr int kPairElems = 64;

// Per group of 4 rows and per block pair, one "super-block":
//   scales: 4 rows x 2 blocks fp16 (16 bytes), row-major [row][block]
//   Q4_0:   4 rows x 32 bytes; byte i of a row holds value 64p + i in its low nibble and value
//           64p + 32 + i in its high nibble (nibble = q + 8, as in Q4_0): 144 bytes in all.
//   Q8_0:   4 rows x 64 int8 values: 272 bytes in all.
// Groups follow each other; padding rows and blocks have zero scales.
struct PackedLayout {
    format::TensorType type;
    int64_t n_rows = 0, n_cols = 0;
    int64_t n_groups = 0;  // ceil(n_rows / 4)
    int64_t n_pairs = 0;   // ceil(n_cols / 64)
    size_t pair_bytes = 0;
    size_t group_bytes = 0;  // n_pairs * pair_bytes
    size_t total_bytes() const { return group_bytes * static_cast<size_t>(n_groups); }
};

PackedLayout packed_layout(format::TensorType type, int64_t n_rows, int64_t n_cols);

// Repacks rows [group g0 * 4, ...) of a row-major Q4_0/Q8_0 matrix (row stride src_row_bytes)
// for groups [g0, g1) into `dst` (which points at group g0).
void pack_groups(const PackedLayout& l, const uint8_t* src, size_t src_row_bytes, int64_t g0,
                 int64_t g1, uint8_t* dst);

// Quantised activations for the packed kernels: per row, n_pairs * 64 int8 values (zero
// padded), then one float scale per 32-block (the fp16-rounded amax/127, as llama.cpp stores
// it); rows start on 64-byte boundaries.
struct ActLayout {
    int64_t n_cols = 0, n_blocks = 0, n_pairs = 0;
    size_t qs_bytes = 0, row_bytes = 0;
};
ActLayout act_layout(int64_t n_cols);

}  // namespace llada::quant
