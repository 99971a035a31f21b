// The CPU's repacked layout of llama.cpp Q4_0 / Q8_0 weights and of Q8 activations: the same
// quantised values and scales (the same bytes per weight; Q8_0 values offset by 128), reordered so
// that 16 weight rows are interleaved 4 values at a time. A 512-bit vector then holds 4 consecutive
// values of 16 rows, and one u8 x s8 dot-product instruction against 4 broadcast activation values
// advances 16 output columns at once: no horizontal sums, and the per-block scales apply once per
// 16 outputs. Repacking happens once at load.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/tensor_type.h"

namespace llada::quant {

constexpr int kPackRows = 16;  // weight rows per group (output columns per vector)

// Per group of 16 rows and per 32-value block b, a "super-block":
//   scales: 16 fp16, one per row (32 bytes)
//   Q4_0:   4 steps of 64 bytes; in step j, byte 4n + i holds row n's value 8j + i in its low
//           nibble and value 8j + 4 + i in its high nibble (nibble = q + 8, as in Q4_0):
//           288 bytes = 16 x 18, exactly Q4_0's size.
//   Q8_0:   8 steps of 64 bytes; in step s, byte 4n + i is row n's value 4s + i plus 128 (the
//           int8 with its sign bit flipped, so 0..255: the unsigned operand of vpdpbusd as it
//           is stored; the offset is removed with -128 * sum(x)): 544 bytes.
// Super-blocks follow each other along the row (b = 0, 1, ...), then groups. Padding rows (up
// to a multiple of 16) have zero scales and zero values.
//
// F16 (for the float kernels): per group of 16 rows and per column k, the 16 rows' fp16 values
// (32 bytes), columns in order: one 512-bit vector of widened values advances 16 output
// columns by one FMA per activation row, again with no horizontal sums. Padding rows are +0.
struct PackedLayout {
    format::TensorType type;
    int64_t n_rows = 0, n_cols = 0;
    int64_t n_groups = 0;  // ceil(n_rows / 16)
    int64_t n_blocks = 0;  // n_cols / 32 (F16: n_cols)
    size_t block_bytes = 0;
    size_t group_bytes = 0;  // n_blocks * block_bytes
    size_t total_bytes() const { return group_bytes * static_cast<size_t>(n_groups); }
};

PackedLayout packed_layout(format::TensorType type, int64_t n_rows, int64_t n_cols);

// Repacks groups [g0, g1) of a row-major Q4_0/Q8_0/F16 matrix (row stride src_row_bytes) into
// `dst`, which points at group g0.
void pack_groups(const PackedLayout& l, const uint8_t* src, size_t src_row_bytes, int64_t g0,
                 int64_t g1, uint8_t* dst);

// Row n's 32 values of block b of a packed group, as integers (Q4_0: q - 8, in [-8, 7]).
void unpack_block(const PackedLayout& l, const uint8_t* group, int64_t b, int n, int8_t* out);

// Quantised activations for the packed kernels: per row, one 48-byte record per 32-value block
// (64-byte aligned rows): the block's 32 int8 values, its float scale (the fp16-rounded
// amax/127, as llama.cpp stores it), the int32 -8 * sum of its values (Q4_0's offset of 8 is
// removed with it), -128 * that sum (Q8_0's stored offset, on VNNI) and 4 zero bytes. A kernel
// finds everything a block needs at constant offsets from one pointer per row, and seeds its
// integer sums with one broadcast load.
constexpr size_t kActRecordBytes = 48;
constexpr size_t kActScaleAt = 32, kActSeedQ4At = 36, kActSeedQ8At = 40;
struct ActLayout {
    int64_t n_cols = 0, n_blocks = 0;
    size_t row_bytes = 0;
};
ActLayout act_layout(int64_t n_cols);

}  // namespace llada::quant
