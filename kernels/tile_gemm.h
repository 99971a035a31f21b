// The simulated NPU's matmul on tile-format weights (quant/tile.h), dispatched at run time: a
// strip of 32 outputs is dequantised through fp16 tables into an input-major block w[k][32]
// (one input row of the weight tile after another, as the HMX consumes them), then multiplied
// as an outer product. Scalar twins: quant::dequantize_tile_strip_kn and matmul_kn32_ref.
#pragma once

#include <cstdint>

#include "quant/tile.h"

namespace llada::kernels {

// w[k * 32 + n] for k < K' of strip `strip` (TQ4, TQ8 or TF16), each value rounded to fp16 as
// the NPU's 16-entry tables give it; equal to quant::dequantize_tile_strip_kn(l, strip, w, true).
void dequant_tile_strip_kn(const quant::TileLayout& l, const uint8_t* strip, float* w);

// y[m * ldy + j] = sum_{i < k} x[m * k + i] * w[i * 32 + j] for m < m_rows and j < n (n <= 32).
void matmul_kn32(const float* x, int64_t m_rows, int64_t k, const float* w, float* y, int64_t ldy,
                 int64_t n);
void matmul_kn32_ref(const float* x, int64_t m_rows, int64_t k, const float* w, float* y,
                     int64_t ldy, int64_t n);

}  // namespace llada::kernels
