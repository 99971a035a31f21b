// llama.cpp's block formats, bit-compatible: the legacy types of 32 values (Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, IQ4_NL), the k-quants of 256-value super-blocks (Q2_K ... Q6_K) and IQ4_XS; their
// layouts, scalar dequantisation, quantisation, and the integer form every dot product uses.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/tensor_type.h"

namespace llada::quant {

constexpr int kQK = 32;           // values per legacy block (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL)
constexpr int kQKK = 256;         // values per k-quant / IQ4_XS super-block
constexpr int kScaleBytesK = 12;  // Q3_K/Q4_K/Q5_K: 6-bit scales (and mins) packed in 12 bytes

// Q8_0: x[j] = d * qs[j].
struct BlockQ8_0 {
    uint16_t d;  // fp16 scale
    int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must match llama.cpp's 34 bytes");

// Q4_0: x[j] = d * (nibble_j - 8); bytes hold elements j (low nibble) and j + 16 (high nibble).
struct BlockQ4_0 {
    uint16_t d;  // fp16 scale
    uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must match llama.cpp's 18 bytes");

// Q4_1: x[j] = d * nibble_j + m; nibbles as in Q4_0.
struct BlockQ4_1 {
    uint16_t d, m;  // fp16 scale and minimum
    uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block must match llama.cpp's 20 bytes");

// Q5_0: x[j] = d * (q_j - 16), q_j = nibble_j | bit j of qh << 4 (nibbles as in Q4_0).
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];  // the fifth bits, element j at bit j of the little-endian 32-bit word
    uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block must match llama.cpp's 22 bytes");

// Q5_1: x[j] = d * q_j + m, q_j as in Q5_0.
struct BlockQ5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block must match llama.cpp's 24 bytes");

// IQ4_NL: x[j] = d * kIq4Values[nibble_j] (nibbles as in Q4_0): a non-uniform 4-bit grid.
struct BlockIQ4_NL {
    uint16_t d;
    uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18, "IQ4_NL block must match llama.cpp's 18 bytes");
// The 16 grid points of IQ4_NL and IQ4_XS (llama.cpp's kvalues_iq4nl).
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

// Q2_K: 16 sub-blocks of 16; x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q in 0..3.
// qs: per 128 values, 32 bytes; value 32s + l of that half (s = 0..3) is bits 2s..2s+1 of byte l.
struct BlockQ2_K {
    uint8_t scales[kQKK / 16];
    uint8_t qs[kQKK / 4];
    uint16_t d, dmin;
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block must match llama.cpp's 84 bytes");

// Q3_K: 16 sub-blocks of 16; x = d * (s_j - 32) * q, q = low 2 bits (as Q2_K's) - 4 unless the
// value's bit in hmask is set (value 32s + l of half h: bit 4h + s of hmask[l]); s_j 6 bits.
struct BlockQ3_K {
    uint8_t hmask[kQKK / 8];
    uint8_t qs[kQKK / 4];
    uint8_t scales[kScaleBytesK];
    uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block must match llama.cpp's 110 bytes");

// Q4_K: 8 sub-blocks of 32; x = d * sc_j * q - dmin * m_j, q in 0..15, sc/m 6 bits. qs: per 64
// values 32 bytes, the first 32 values in the low nibbles, the next 32 in the high nibbles.
struct BlockQ4_K {
    uint16_t d, dmin;
    uint8_t scales[kScaleBytesK];
    uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block must match llama.cpp's 144 bytes");

// Q5_K: Q4_K plus a fifth bit (value 32s + l: bit s of qh[l]), q in 0..31.
struct BlockQ5_K {
    uint16_t d, dmin;
    uint8_t scales[kScaleBytesK];
    uint8_t qh[kQKK / 8];
    uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block must match llama.cpp's 176 bytes");

// Q6_K: 16 sub-blocks of 16; x = d * scales[j] * (q - 32), q 6 bits: 4 in ql, 2 in qh.
struct BlockQ6_K {
    uint8_t ql[kQKK / 2];
    uint8_t qh[kQKK / 4];
    int8_t scales[kQKK / 16];
    uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must match llama.cpp's 210 bytes");

// IQ4_XS: 8 sub-blocks of 32; x = d * (ls_j - 32) * kIq4Values[nibble], ls_j 6 bits (4 in
// scales_l, 2 in scales_h); nibbles per sub-block as in IQ4_NL.
struct BlockIQ4_XS {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[kQKK / 64];
    uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136, "IQ4_XS block must match llama.cpp's 136 bytes");

// The integer form of one block (legacy) or super-block (k-quants, IQ4_XS) of any of these
// formats, in which llama.cpp writes its CPU dot products:
//   x[j * sub_len + i] = d * sc[j] * q[j * sub_len + i] - dmin * m[j]
// with signed integer values q (Q4_0: nibble - 8, Q6_K: q - 32, IQ4: the grid point, ...).
// Legacy blocks have one sub-block of 32 with sc = 1; Q4_1/Q5_1 have m = 1 and dmin = -m (their
// minimum is added). Formats without minimums have dmin = 0 and m = 0.
struct DecodedBlock {
    int n_values = 0;  // 32 or 256
    int sub_len = 0;   // 16 or 32
    float d = 0.0f, dmin = 0.0f;
    int8_t q[kQKK];
    int16_t sc[kQKK / 16];
    int16_t m[kQKK / 16];
    int n_sub() const { return n_values / sub_len; }
};
// Decodes block `index` of a row starting at `row` (a block format: Q8_0 ... IQ4_XS).
void decode_block(format::TensorType type, const uint8_t* row, int64_t index, DecodedBlock* out);
// Whether `type` is one of llama.cpp's block formats (not F32/F16/BF16, not a tile format).
bool is_block_format(format::TensorType type);

// Weight quantisation as llama.cpp's reference quantizers (llama-quantize without an importance
// matrix) do it, so files written here are bit-identical to theirs. n must be a multiple of 32.
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);

// Scalar dequantisation of n elements of a row format (F32, F16, BF16 and every block format:
// the reference twin of the SIMD kernels). `src` points at the first block / element. The tile
// formats have no rows of their own: quant::dequantize_matrix_row (quant/tile.h) reads a row of
// any matrix.
void dequantize_row(format::TensorType type, const void* src, float* dst, int64_t n);
// Bytes that n elements of a row format occupy (n a multiple of the block size); 0 for a tile
// format.
size_t row_bytes(format::TensorType type, int64_t n);

// Writes n float32 values as `type` (F32, F16, BF16 and every block format; quant/quantize.h
// has the k-quant and non-linear quantizers this dispatches to).
void quantize_row(format::TensorType type, const float* x, void* dst, int64_t n);

}  // namespace llada::quant
