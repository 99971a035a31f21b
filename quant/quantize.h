// Quantizers for the block formats beyond Q8_0 / Q4_0 (quant/blocks.h): Q4_1, Q5_0, Q5_1, the
// k-quants Q2_K ... Q6_K and the non-linear IQ4_NL / IQ4_XS. They follow the search that
// llama.cpp's quantizers run without an importance matrix (what llama-quantize does when it is
// given no --imatrix), so a file written here holds the same bytes as llama-quantize's
// (docs/formats.md). n is a multiple of the format's block (32, or 256 for Q2_K ... IQ4_XS).
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace llada::quant {

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n);
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n);
void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n);
void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n);
void quantize_row_q2_k(const float* x, BlockQ2_K* y, int64_t n);
void quantize_row_q3_k(const float* x, BlockQ3_K* y, int64_t n);
void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n);
void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n);
void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n);

}  // namespace llada::quant
