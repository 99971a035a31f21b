// Table-driven alternatives to two exact kernels, as mobile NPUs use them (Hao et al.,
// EuroSys'26): exp through a 32,768-entry table over fp16 inputs <= 0 (softmax), and int4
// dequantisation through a 16-entry table per block. Each is selectable and tested against the
// exact path; the tables are explicit objects, built once by whoever owns the kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace llada::kernels {

// exp(x) for every fp16 value x <= 0, indexed by the fp16 bit pattern of -x (0 .. 0x7fff);
// entries for NaN patterns are 0. Inputs are rounded to fp16 before the lookup, which is the
// table's only error (relative error of exp(x) about |x| * 2^-11).
class ExpLut {
  public:
    ExpLut();
    const float* data() const { return table_.data(); }
    float operator()(float x) const;  // x <= 0

  private:
    std::vector<float> table_;
};

// One query row's attention (as attention_head) with the softmax's exponentials taken from
// `lut`: attention_rows with n_q = 1 and the table.
void attention_head_lut(const float* q, const float* k, const float* v, int64_t kv_stride,
                        int64_t n_kv, int64_t head_dim, float scale, float* out, const ExpLut& lut);

// Q4_0 weights (packed layout, `packed` set) x float activations: each block's nibbles are
// dequantised through a 16-entry table {d * (q - 8)} and multiplied in float32 (no activation
// quantisation). y[m][n] for n in [n0, n1), n0 % 16 == 0.
void matmul_q4_lut(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                   int64_t n0, int64_t n1);

// The same with the conventional dequantisation (convert, subtract 8, scale) instead of the
// table: the baseline the table is measured against.
void matmul_q4_dequant(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                       int64_t n0, int64_t n1);

}  // namespace llada::kernels
