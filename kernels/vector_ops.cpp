// Row-wise kernels (RMSNorm, residual add, SwiGLU, RoPE) and streaming attention (Highway).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/vector_ops.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

#include <strings.h>

#include <cmath>
#include <limits>
#include <string>

#include "kernels/kernels.h"
#include "util/error.h"

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

HWY_INLINE float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    auto acc = hn::Zero(df);
    int64_t i = 0;
    for (; i + N <= n; i += N)
        acc = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc);
    float s = hn::GetLane(hn::SumOfLanes(df, acc));
    for (; i < n; ++i)
        s += a[i] * b[i];
    return s;
}

// The sum of x[i]^2 as llama.cpp's RMSNorm forms it: each square rounded to float, the sum kept
// in double. So formed it hardly depends on the order of the additions, and every SIMD target
// gets the same scale. That matters for quantised models: a Q4_0 embedding row holds small
// multiples of one scale, so after the norm many activations sit exactly on a rounding tie of
// the Q8_0 activation quantiser, and a float sum in another order moves them by an ulp to the
// other side (2e-3 of max|logit| on the Q4_0 fixture before this).
HWY_INLINE double SumSquares(const float* HWY_RESTRICT x, int64_t n) {
    double s = 0.0;
    int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_HAVE_FLOAT64
    const hn::ScalableTag<float> df;
    const hn::Half<decltype(df)> dh;
    const hn::Rebind<double, decltype(dh)> dd;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    auto lo = hn::Zero(dd), hi = hn::Zero(dd);
    for (; i + N <= n; i += N) {
        const auto v = hn::LoadU(df, x + i);
        const auto sq = hn::Mul(v, v);
        lo = hn::Add(lo, hn::PromoteTo(dd, hn::LowerHalf(dh, sq)));
        hi = hn::Add(hi, hn::PromoteTo(dd, hn::UpperHalf(dh, sq)));
    }
    s = hn::GetLane(hn::SumOfLanes(dd, hn::Add(lo, hi)));
#endif
    for (; i < n; ++i)
        s += static_cast<double>(x[i] * x[i]);
    return s;
}

void RmsNorm(const float* x, const float* w, float* y, int64_t k, float eps, int64_t r0,
             int64_t r1) {
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * k;
        float* yr = y + r * k;
        const float mean = static_cast<float>(SumSquares(xr, k) / static_cast<double>(k));
        const float scale = 1.0f / std::sqrt(mean + eps);
        const auto vs = hn::Set(df, scale);
        int64_t i = 0;
        for (; i + N <= k; i += N) {
            hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, xr + i), vs), hn::LoadU(df, w + i)), df,
                       yr + i);
        }
        for (; i < k; ++i)
            yr[i] = xr[i] * scale * w[i];
    }
}

void Add(const float* a, const float* b, float* y, int64_t n) {
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    int64_t i = 0;
    for (; i + N <= n; i += N) {
        hn::StoreU(hn::Add(hn::LoadU(df, a + i), hn::LoadU(df, b + i)), df, y + i);
    }
    for (; i < n; ++i)
        y[i] = a[i] + b[i];
}

void SwiGlu(const float* g, const float* u, float* y, int64_t n) {
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const auto one = hn::Set(df, 1.0f);
    int64_t i = 0;
    for (; i + N <= n; i += N) {
        const auto vg = hn::LoadU(df, g + i);
        const auto silu = hn::Div(vg, hn::Add(one, hn::CallExp(df, hn::Neg(vg))));
        hn::StoreU(hn::Mul(silu, hn::LoadU(df, u + i)), df, y + i);
    }
    for (; i < n; ++i)
        y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void RopeRow(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos,
             const float* sin, RopeStyle style) {
    // Few values per head (n_rot/2 pairs); a plain loop is as fast as shuffles here.
    const int64_t half = n_rot / 2;
    for (int64_t h = 0; h < n_heads; ++h) {
        float* xh = x + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
            const int64_t ia = style == RopeStyle::Norm ? 2 * i : i;
            const int64_t ib = style == RopeStyle::Norm ? 2 * i + 1 : i + half;
            const float a = xh[ia];
            const float b = xh[ib];
            xh[ia] = a * cos[i] - b * sin[i];
            xh[ib] = a * sin[i] + b * cos[i];
        }
    }
}

void AttentionHead(const float* q, const float* k, const float* v, int64_t kv_stride, int64_t n_kv,
                   int64_t head_dim, float scale, float* out) {
    // Streaming softmax over chunks of keys: running max m, running sum l, output accumulator.
    constexpr int64_t kChunk = 64;
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    HWY_ALIGN float scores[kChunk];
    float m = -std::numeric_limits<float>::infinity();
    float l = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d)
        out[d] = 0.0f;
    for (int64_t j0 = 0; j0 < n_kv; j0 += kChunk) {
        const int64_t nj = std::min(kChunk, n_kv - j0);
        float cmax = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < nj; ++j) {
            scores[j] = Dot(q, k + (j0 + j) * kv_stride, head_dim) * scale;
            cmax = std::max(cmax, scores[j]);
        }
        const float m_new = std::max(m, cmax);
        const float correction = std::exp(m - m_new);  // 0 on the first chunk (m = -inf)
        l *= correction;
        for (int64_t d = 0; d < head_dim; ++d)
            out[d] *= correction;
        // exp(s - m_new) for the chunk, vectorised.
        int64_t j = 0;
        for (; j + N <= nj; j += N) {
            const auto e = hn::CallExp(df, hn::Sub(hn::LoadU(df, scores + j), hn::Set(df, m_new)));
            hn::StoreU(e, df, scores + j);
        }
        for (; j < nj; ++j)
            scores[j] = std::exp(scores[j] - m_new);
        for (int64_t jj = 0; jj < nj; ++jj) {
            const float p = scores[jj];
            l += p;
            const float* vj = v + (j0 + jj) * kv_stride;
            const auto vp = hn::Set(df, p);
            int64_t d = 0;
            for (; d + N <= head_dim; d += N) {
                hn::StoreU(hn::MulAdd(vp, hn::LoadU(df, vj + d), hn::LoadU(df, out + d)), df,
                           out + d);
            }
            for (; d < head_dim; ++d)
                out[d] += p * vj[d];
        }
        m = m_new;
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < head_dim; ++d)
        out[d] *= inv;
}

const char* ActiveTarget() {
    return hwy::TargetName(HWY_TARGET);
}

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llada::kernels {

HWY_EXPORT(RmsNorm);
HWY_EXPORT(Add);
HWY_EXPORT(SwiGlu);
HWY_EXPORT(RopeRow);
HWY_EXPORT(AttentionHead);
HWY_EXPORT(ActiveTarget);

void rms_norm(const float* x, const float* w, float* y, int64_t k, float eps, int64_t r0,
              int64_t r1) {
    HWY_DYNAMIC_DISPATCH(RmsNorm)(x, w, y, k, eps, r0, r1);
}
void add(const float* a, const float* b, float* y, int64_t n) {
    HWY_DYNAMIC_DISPATCH(Add)(a, b, y, n);
}
void swiglu(const float* g, const float* u, float* y, int64_t n) {
    HWY_DYNAMIC_DISPATCH(SwiGlu)(g, u, y, n);
}
void rope_row(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos,
              const float* sin, RopeStyle style) {
    HWY_DYNAMIC_DISPATCH(RopeRow)(x, n_heads, head_dim, n_rot, cos, sin, style);
}
void attention_head(const float* q, const float* k, const float* v, int64_t kv_stride, int64_t n_kv,
                    int64_t head_dim, float scale, float* out) {
    HWY_DYNAMIC_DISPATCH(AttentionHead)(q, k, v, kv_stride, n_kv, head_dim, scale, out);
}
const char* active_target() {
    return HWY_DYNAMIC_DISPATCH(ActiveTarget)();
}

void limit_simd(const std::string& name) {
    hwy::SetSupportedTargetsForTest(0);  // choose among all the CPU has, not an earlier choice
    std::string offered;
    for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
        if (strcasecmp(hwy::TargetName(t), name.c_str()) == 0) {
            hwy::SetSupportedTargetsForTest(t);
            return;
        }
        offered += std::string(offered.empty() ? "" : ", ") + hwy::TargetName(t);
    }
    throw Error("--simd " + name + ": not an instruction set this build and CPU offer (" + offered +
                ")");
}

}  // namespace llada::kernels
#endif
