// llama.cpp-compatible block formats (Q8_0, Q4_0): layouts, scalar quantise and dequantise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/tensor_type.h"

namespace llada::quant {

constexpr int kQK = 32;  // elements per Q8_0 / Q4_0 block

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

// Weight quantisation exactly as llama.cpp's reference quantizers (llama-quantize) do it, so files
// written here are bit-identical to theirs. n must be a multiple of 32.
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);

// Scalar dequantisation of n elements of a row format (F32, F16, BF16, Q8_0, Q4_0: the reference
// twin of the SIMD kernels). `src` points at the first block / element. The tile formats have no
// rows of their own: quant::dequantize_matrix_row (quant/tile.h) reads a row of any matrix.
void dequantize_row(format::TensorType type, const void* src, float* dst, int64_t n);
// Bytes that n elements of a row format occupy (n a multiple of the block size); 0 for a tile
// format.
size_t row_bytes(format::TensorType type, int64_t n);

// Writes n float32 values as `type` (F32, F16, BF16, Q8_0, Q4_0).
void quantize_row(format::TensorType type, const float* x, void* dst, int64_t n);

}  // namespace llada::quant
