// The CPU's repacked layouts of llama.cpp's block formats and of Q8 activations. Q4_0 / Q8_0: the
// same quantised values and scales (the same bytes per weight; Q8_0 values offset by 128),
// reordered so that 16 weight rows are interleaved 4 values at a time. A 512-bit vector then holds
// 4 consecutive values of 16 rows, and one u8 x s8 dot-product instruction against 4 broadcast
// activation values advances 16 output columns at once: no horizontal sums, and the per-block
// scales apply once per 16 outputs. Repacking happens once at load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

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
// Every other block format (Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K ... Q6_K, IQ4_XS) is repacked into
// one generic layout read by one kernel, from the integer form quant::decode_block gives
// (x = d * sc_j * q - dmin * m_j). Per group of 16 rows and per "unit" (a legacy block of 32
// values or a super-block of 256):
//   d:     16 fp16, one per row (the block's d, exactly as stored in the file)        32 bytes
//   dmin:  16 fp16 (formats with minimums; Q4_1/Q5_1: minus the block's m)            32 bytes
//   (padding to 64 bytes)
//   sc:    per sub-block, 16 int8 scales (super-block formats only)           n_sub x 16 bytes
//   m:     per sub-block, 16 int8 minimums (k-quants with minimums only)      n_sub x 16 bytes
//   values per sub-block, in 64-byte steps of 16 rows x 4 values, as q + zero (unsigned):
//     nibbles (formats of <= 4 bits): step c byte 4n + i holds row n's value 8c + i in its low
//             nibble and 8c + 4 + i in its high nibble (as Q4_0 above); IQ4 formats store the
//             grid index, which the kernel maps through the table.
//     bytes (5-6 bit formats): step s byte 4n + i is row n's value 4s + i.
// Padding rows have zero scales and values equal to `zero` (value 0).
struct GenericPack {
    int unit_values = 0;  // 32 or 256
    int sub_len = 0;      // 16 or 32
    bool nibbles = false;
    bool lut = false;      // nibbles index quant::kIq4Values (q is the grid value)
    bool has_min = false;  // dmin (and m per sub-block for the k-quants)
    bool has_sub = false;  // per-sub-block int8 scales (and minimums): super-block formats
    int zero = 0;          // stored value = q + zero (unused with lut)
    int n_sub() const { return unit_values / sub_len; }
};

struct PackedLayout {
    format::TensorType type;
    int64_t n_rows = 0, n_cols = 0;
    int64_t n_groups = 0;  // ceil(n_rows / 16)
    int64_t n_blocks = 0;  // n_cols / 32 (F16: n_cols; generic formats: units per row)
    size_t block_bytes = 0;
    size_t group_bytes = 0;  // n_blocks * block_bytes
    // Generic formats: the description, and the offsets within a unit.
    bool generic = false;
    GenericPack g;
    size_t dmin_at = 0, sc_at = 0, m_at = 0, values_at = 0;
    size_t sub_value_bytes = 0;  // one sub-block's values for 16 rows
    size_t total_bytes() const { return group_bytes * static_cast<size_t>(n_groups); }
};

// The generic description of a block format (nullopt for Q4_0, Q8_0 and the float types, which
// have layouts of their own).
std::optional<GenericPack> generic_pack(format::TensorType type);
// Whether the CPU kernels read `type` from a repacked copy (Q4_0, Q8_0, F16, generic formats).
bool is_packed_type(format::TensorType type);

PackedLayout packed_layout(format::TensorType type, int64_t n_rows, int64_t n_cols);

// Repacks groups [g0, g1) of a row-major matrix of a packed type (row stride src_row_bytes) into
// `dst`, which points at group g0.
void pack_groups(const PackedLayout& l, const uint8_t* src, size_t src_row_bytes, int64_t g0,
                 int64_t g1, uint8_t* dst);

// Row n's 32 values of block b of a packed group, as integers (Q4_0: q - 8, in [-8, 7]).
void unpack_block(const PackedLayout& l, const uint8_t* group, int64_t b, int n, int8_t* out);
// Row n's values of unit u of a generic packed group, as the signed integers q (unit_values).
void unpack_generic(const PackedLayout& l, const uint8_t* group, int64_t u, int n, int8_t* out);

// Quantised activations for the packed kernels: per row, one 64-byte record per 32-value block
// (64-byte aligned rows). A kernel finds everything a block needs at constant offsets from one
// pointer per row, and seeds its integer sums with one broadcast load.
//   0   int8 values[32]
//   32  float d: the block's scale (Q8_0: the fp16-rounded amax/127, as llama.cpp stores it;
//       Q8_K: the 256-value super-block's 1/iscale, in every one of its 8 records)
//   36  int32 -8 * sum (Q4_0's offset of 8, removed with it)
//   40  int32 -128 * sum (Q8_0's stored offset on VNNI, the IQ4 table's on every target)
//   44  int32 -(sum of values 0-15), 48: -(sum of values 16-31): the generic kernel's seeds
//   52  float -d * (sum of values 0-15), 56: the same for 16-31 (Q8_K: the k-quants' minimums)
//   60  float the minimum's multiplier for a 32-value sub-block, negated: Q8_K -d * sum; Q8_0
//       -s with s = fp16(amax/127 * sum), llama.cpp's Q8_1 (Q4_1 and Q5_1 read these
//       records; their values and d are Q8_0's)
// Two quantisers write them: Q8_0's (a scale per 32 values) and Q8_K's (one per 256, which
// the k-quants and IQ4_XS use, as llama.cpp does).
constexpr size_t kActRecordBytes = 64;
constexpr size_t kActScaleAt = 32, kActSeedQ4At = 36, kActSeedQ8At = 40;
constexpr size_t kActNegSumAt = 44, kActNegMinAt = 52, kActNegMin32At = 60;
struct ActLayout {
    int64_t n_cols = 0, n_blocks = 0;
    size_t row_bytes = 0;
};
ActLayout act_layout(int64_t n_cols);

}  // namespace llada::quant
