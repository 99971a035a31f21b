// Scalar reference twins of the SIMD kernels: plain loops, double accumulation where it helps.
#include "kernels/reference.h"

#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/fp16.h"
#include "quant/tile.h"

namespace llada::kernels::ref {

void round_rows_fp16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1) {
    for (int64_t i = r0 * k; i < r1 * k; ++i)
        y[i] = quant::round_to_fp16(x[i]);
}

void round_rows_bf16(const float* x, float* y, int64_t k, int64_t r0, int64_t r1) {
    for (int64_t i = r0 * k; i < r1 * k; ++i)
        y[i] = quant::round_to_bf16(x[i]);
}

void quantize_rows_q8_0(const float* x, quant::BlockQ8_0* y, int64_t k, int64_t r0, int64_t r1) {
    const int64_t nb = k / quant::kQK;
    for (int64_t r = r0; r < r1; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            const float* xb = x + r * k + b * quant::kQK;
            float amax = 0.0f;
            for (int j = 0; j < quant::kQK; ++j)
                amax = std::max(amax, std::fabs(xb[j]));
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            y[r * nb + b].d = quant::fp32_to_fp16(amax / 127.0f);
            for (int j = 0; j < quant::kQK; ++j) {
                y[r * nb + b].qs[j] = static_cast<int8_t>(std::nearbyintf(xb[j] * id));
            }
        }
    }
}

void matmul_float(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1) {
    std::vector<float> wrow(static_cast<size_t>(w.n_cols));
    for (int64_t n = n0; n < n1; ++n) {
        quant::dequantize_row(w.type, w.row(n), wrow.data(), w.n_cols);
        for (int64_t m = 0; m < m_rows; ++m) {
            double s = 0.0;
            for (int64_t i = 0; i < w.n_cols; ++i)
                s += double(x[m * w.n_cols + i]) * wrow[i];
            y[m * ldy + n] = static_cast<float>(s);
        }
    }
}

void matmul_tile(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                 int64_t n0, int64_t n1) {
    const quant::TileLayout l =
        quant::tile_layout(*quant::tile_type_of(w.type), w.n_rows, w.n_cols);
    for (int64_t n = n0; n < n1; ++n) {
        for (int64_t m = 0; m < m_rows; ++m) {
            double s = 0.0;
            for (int64_t i = 0; i < w.n_cols; ++i)
                s += double(x[m * w.n_cols + i]) *
                     quant::round_to_fp16(quant::tile_value(l, w.data, n, i));
            y[m * ldy + n] = static_cast<float>(s);
        }
    }
}

void matmul_q8(const quant::BlockQ8_0* xq, int64_t m_rows, const WeightView& w, float* y,
               int64_t ldy, int64_t n0, int64_t n1) {
    const int64_t nb = w.n_cols / quant::kQK;
    for (int64_t n = n0; n < n1; ++n) {
        for (int64_t m = 0; m < m_rows; ++m) {
            double s = 0.0;
            for (int64_t b = 0; b < nb; ++b) {
                int32_t isum = 0;
                float dw;
                if (w.type == format::TensorType::Q4_0) {
                    const auto& blk = reinterpret_cast<const quant::BlockQ4_0*>(w.row(n))[b];
                    dw = quant::fp16_to_fp32(blk.d);
                    for (int j = 0; j < quant::kQK / 2; ++j) {
                        isum += ((blk.qs[j] & 0x0f) - 8) * xq[m * nb + b].qs[j];
                        isum += ((blk.qs[j] >> 4) - 8) * xq[m * nb + b].qs[j + quant::kQK / 2];
                    }
                } else {
                    const auto& blk = reinterpret_cast<const quant::BlockQ8_0*>(w.row(n))[b];
                    dw = quant::fp16_to_fp32(blk.d);
                    for (int j = 0; j < quant::kQK; ++j)
                        isum += blk.qs[j] * xq[m * nb + b].qs[j];
                }
                s += double(dw) * quant::fp16_to_fp32(xq[m * nb + b].d) * isum;
            }
            y[m * ldy + n] = static_cast<float>(s);
        }
    }
}

void quantize_rows_q8_1(const float* x, BlockQ8_1* y, int64_t k, int64_t r0, int64_t r1) {
    const int64_t nb = k / quant::kQK;
    for (int64_t r = r0; r < r1; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            const float* xb = x + r * k + b * quant::kQK;
            float amax = 0.0f;
            for (int j = 0; j < quant::kQK; ++j)
                amax = std::max(amax, std::fabs(xb[j]));
            const float d = amax / 127.0f;
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            BlockQ8_1& o = y[r * nb + b];
            int sum = 0;
            for (int j = 0; j < quant::kQK; ++j) {
                o.qs[j] = static_cast<int8_t>(std::nearbyintf(xb[j] * id));
                sum += o.qs[j];
            }
            o.d = quant::fp32_to_fp16(d);
            o.s = quant::fp32_to_fp16(d * static_cast<float>(sum));
        }
    }
}

void quantize_rows_q8_k(const float* x, BlockQ8_K* y, int64_t k, int64_t r0, int64_t r1) {
    const int64_t nb = k / quant::kQKK;
    for (int64_t r = r0; r < r1; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            const float* xb = x + r * k + b * quant::kQKK;
            BlockQ8_K& o = y[r * nb + b];
            // The first value of largest magnitude, with its sign, maps to -127.
            float amax = 0.0f, max = 0.0f;
            for (int j = 0; j < quant::kQKK; ++j) {
                if (std::fabs(xb[j]) > amax) {
                    amax = std::fabs(xb[j]);
                    max = xb[j];
                }
            }
            std::memset(o.qs, 0, sizeof o.qs);
            std::memset(o.bsums, 0, sizeof o.bsums);
            o.d = 0.0f;
            if (amax == 0.0f) continue;
            const float iscale = -127.0f / max;
            for (int j = 0; j < quant::kQKK; ++j) {
                const int v = static_cast<int>(std::nearbyintf(iscale * xb[j]));
                o.qs[j] = static_cast<int8_t>(std::min(127, v));
                o.bsums[j / 16] = static_cast<int16_t>(o.bsums[j / 16] + o.qs[j]);
            }
            o.d = 1.0f / iscale;
        }
    }
}

void matmul_block(const float* x, int64_t m_rows, const WeightView& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1) {
    using format::TensorType;
    const int64_t k = w.n_cols;
    const ActKind act = act_kind_for(w.type);
    const bool q8_1 = w.type == TensorType::Q4_1 || w.type == TensorType::Q5_1;
    std::vector<quant::BlockQ8_0> a0;
    std::vector<BlockQ8_1> a1;
    std::vector<BlockQ8_K> ak;
    if (act == ActKind::Q8_K) {
        ak.resize(static_cast<size_t>(m_rows * k / quant::kQKK));
        quantize_rows_q8_k(x, ak.data(), k, 0, m_rows);
    } else if (q8_1) {
        a1.resize(static_cast<size_t>(m_rows * k / quant::kQK));
        quantize_rows_q8_1(x, a1.data(), k, 0, m_rows);
    } else {
        a0.resize(static_cast<size_t>(m_rows * k / quant::kQK));
        quantize_rows_q8_0(x, a0.data(), k, 0, m_rows);
    }
    const int64_t per = format::tensor_type_info(w.type).block_elems;
    quant::DecodedBlock b;
    for (int64_t n = n0; n < n1; ++n) {
        for (int64_t m = 0; m < m_rows; ++m) {
            double s = 0.0;
            for (int64_t u = 0; u < k / per; ++u) {
                quant::decode_block(w.type, w.row(n), u, &b);
                // The activation values, scale, and the minimum's multiplier of this unit.
                const int8_t* xq;
                double dx, min_mul = 0.0;
                int64_t isum = 0;
                if (act == ActKind::Q8_K) {
                    const BlockQ8_K& a = ak[m * (k / per) + u];
                    xq = a.qs;
                    dx = a.d;
                    int64_t msum = 0;  // sum over sub-blocks of m_j times their values' sum
                    for (int j = 0; j < b.n_sub(); ++j) {
                        int64_t xs = 0;
                        for (int h = 0; h < b.sub_len / 16; ++h)
                            xs += a.bsums[j * b.sub_len / 16 + h];
                        msum += b.m[j] * xs;
                    }
                    min_mul = dx * static_cast<double>(msum);
                } else if (q8_1) {
                    const BlockQ8_1& a = a1[m * (k / per) + u];
                    xq = a.qs;
                    dx = quant::fp16_to_fp32(a.d);
                    min_mul = quant::fp16_to_fp32(a.s);  // m = 1: the block's sum, as s
                } else {
                    const quant::BlockQ8_0& a = a0[m * (k / per) + u];
                    xq = a.qs;
                    dx = quant::fp16_to_fp32(a.d);
                }
                for (int j = 0; j < b.n_sub(); ++j) {
                    int64_t sub = 0;
                    for (int i = 0; i < b.sub_len; ++i)
                        sub += int64_t(b.q[j * b.sub_len + i]) * xq[j * b.sub_len + i];
                    isum += b.sc[j] * sub;
                }
                s += double(b.d) * dx * static_cast<double>(isum) - double(b.dmin) * min_mul;
            }
            y[m * ldy + n] = static_cast<float>(s);
        }
    }
}

void rms_norm(const float* x, const float* w, float* y, int64_t k, float eps, int64_t r0,
              int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < k; ++i)
            ss += double(x[r * k + i]) * x[r * k + i];
        const double scale = 1.0 / std::sqrt(ss / double(k) + eps);
        for (int64_t i = 0; i < k; ++i) {
            y[r * k + i] = static_cast<float>(x[r * k + i] * scale * w[i]);
        }
    }
}

void add(const float* a, const float* b, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        y[i] = a[i] + b[i];
}

void swiglu(const float* g, const float* u, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        y[i] = static_cast<float>(double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i]);
    }
}

void rope_row(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos,
              const float* sin, RopeStyle style) {
    const int64_t half = n_rot / 2;
    for (int64_t h = 0; h < n_heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
            const int64_t ia = h * head_dim + (style == RopeStyle::Norm ? 2 * i : i);
            const int64_t ib = h * head_dim + (style == RopeStyle::Norm ? 2 * i + 1 : i + half);
            const double a = x[ia], b = x[ib];
            x[ia] = static_cast<float>(a * cos[i] - b * sin[i]);
            x[ib] = static_cast<float>(a * sin[i] + b * cos[i]);
        }
    }
}

void attention_head(const float* q, const float* k, const float* v, int64_t kv_stride, int64_t n_kv,
                    int64_t head_dim, float scale, float* out, int64_t excl) {
    assert(excl >= -1 && excl < n_kv && (excl < 0 || n_kv >= 2));
    std::vector<double> s(static_cast<size_t>(n_kv));
    double mx = -INFINITY;
    for (int64_t j = 0; j < n_kv; ++j) {
        if (j == excl) {  // left out: exp(-inf - mx) is exactly 0
            s[j] = -INFINITY;
            continue;
        }
        double d = 0.0;
        for (int64_t i = 0; i < head_dim; ++i)
            d += double(q[i]) * k[j * kv_stride + i];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
    }
    double sum = 0.0;
    for (auto& e : s)
        sum += (e = std::exp(e - mx));
    for (int64_t i = 0; i < head_dim; ++i) {
        double o = 0.0;
        for (int64_t j = 0; j < n_kv; ++j)
            o += s[j] * v[j * kv_stride + i];
        out[i] = static_cast<float>(o / sum);
    }
}

RowStats row_stats(const float* row, int64_t n) {
    RowStats s;
    double m = -INFINITY;
    int64_t arg = -1;
    for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(row[i]) || row[i] == -INFINITY) continue;
        if (arg < 0 || row[i] > m) {
            m = row[i];
            arg = i;
        }
    }
    if (arg < 0) return s;
    s.token = static_cast<int32_t>(arg);
    s.max = static_cast<float>(m);
    double sum = 0.0, t = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(row[i])) continue;
        if (m == INFINITY) {
            sum += row[i] == INFINITY ? 1.0 : 0.0;
        } else if (row[i] != -INFINITY) {
            const double d = double(row[i]) - m;
            sum += std::exp(d);
            t += std::exp(d) * d;
        }
    }
    s.sum_exp = static_cast<float>(sum);
    s.ent_acc = static_cast<float>(t);
    double m2 = -INFINITY;
    int64_t arg2 = -1;
    for (int64_t i = 0; i < n; ++i) {
        if (i == arg || std::isnan(row[i]) || row[i] == -INFINITY) continue;
        if (arg2 < 0 || row[i] > m2) {
            m2 = row[i];
            arg2 = i;
        }
    }
    if (arg2 >= 0) {
        s.second = static_cast<int32_t>(arg2);
        s.second_max = static_cast<float>(m2);
    }
    return s;
}

}  // namespace llada::kernels::ref
