// Scalar reference twins of the SIMD kernels: plain loops, double accumulation where it helps,
// used by the tests as the independent check of every compiled target.
#pragma once

#include "kernels/kernels.h"

namespace llada::kernels::ref {

void round_rows_fp16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1);
void round_rows_bf16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1);
void quantize_rows_q8_0(const float* x, quant::BlockQ8_0* y, int64_t k, int64_t r0, int64_t r1);
void matmul_float(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1);
// W in a tile format: each weight rounded to fp16 (the NPU's tables), sums in double.
void matmul_tile(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                 int64_t n0, int64_t n1);
void matmul_q8(const quant::BlockQ8_0* xq, int64_t m_rows, const WeightView& w, float* y,
               int64_t ldy, int64_t n0, int64_t n1);

// llama.cpp's activation blocks for the block formats: Q8_1 (Q8_0 plus s = d * sum, both fp16)
// and Q8_K (one float scale per 256 values and the sums of each 16).
struct BlockQ8_1 {
    uint16_t d, s;
    int8_t qs[quant::kQK];
};
struct BlockQ8_K {
    float d;
    int8_t qs[quant::kQKK];
    int16_t bsums[quant::kQKK / 16];
};
void quantize_rows_q8_1(const float* x, BlockQ8_1* y, int64_t k, int64_t r0, int64_t r1);
void quantize_rows_q8_k(const float* x, BlockQ8_K* y, int64_t k, int64_t r0, int64_t r1);
// y[m][n] = x[m] . W[n] for any block format, as llama.cpp's CPU backend computes it: x is
// quantised to the activation blocks its vec_dot pairs with the format (Q8_0 for Q8_0, Q4_0,
// Q5_0, IQ4_NL; Q8_1 for Q4_1, Q5_1; Q8_K for the k-quants and IQ4_XS), and each block's
// integer sums (the scales applied in integers, as llama.cpp does) are scaled in double.
void matmul_block(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1);
void rms_norm(const float* x, const float* w, float* y, int64_t k, float eps, int64_t r0,
              int64_t r1);
void add(const float* a, const float* b, float* y, int64_t n);
void swiglu(const float* g, const float* u, float* y, int64_t n);
void rope_row(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos,
              const float* sin, RopeStyle style);
// Materialises the score row and uses a two-pass softmax in double: the textbook definition.
// excl: a key in [0, n_kv) left out of the softmax (attention_rows' excluded key; n_kv >= 2
// then), or -1 for none.
void attention_head(const float* q, const float* k, const float* v, int64_t kv_stride, int64_t n_kv,
                    int64_t head_dim, float scale, float* out, int64_t excl = -1);

// Statistics of a whole logits row, in double, with RowStats' rules for NaN and infinities.
RowStats row_stats(const float* row, int64_t n);

}  // namespace llada::kernels::ref
