// Fused sampling reductions: argmax, runner-up, softmax normaliser and entropy of logits rows,
// chunk by chunk, so the LM head never has to write a vocabulary-wide row (Highway).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/sampling.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

#include <cmath>
#include <limits>

#include "kernels/kernels.h"
#include "util/counter_rng.h"

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Max over x[0, n) with NaN treated as -inf.
HWY_INLINE float MaxNoNan(const float* x, int64_t n) {
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const auto ninf = hn::Set(df, -std::numeric_limits<float>::infinity());
    auto vmax = ninf;
    int64_t i = 0;
    for (; i + N <= n; i += N) {
        auto v = hn::LoadU(df, x + i);
        v = hn::IfThenElse(hn::IsNaN(v), ninf, v);
        vmax = hn::Max(vmax, v);
    }
    float m = hn::GetLane(hn::MaxOfLanes(df, vmax));
    for (; i < n; ++i) {
        if (!std::isnan(x[i]) && x[i] > m) m = x[i];
    }
    return m;
}

// First index in [0, n) whose value equals m, skipping `skip`; -1 if none.
HWY_INLINE int64_t FirstEqual(const float* x, int64_t n, float m, int64_t skip) {
    for (int64_t i = 0; i < n; ++i) {
        if (x[i] == m && i != skip) return i;
    }
    return -1;
}

void RowStatsChunk(const float* logits, int64_t m_rows, int64_t ld, int64_t n, int64_t v0,
                   RowStats* out) {
    const hn::ScalableTag<float> df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    constexpr float kInf = std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < m_rows; ++r) {
        const float* x = logits + r * ld;
        RowStats s;
        const float m = MaxNoNan(x, n);
        // Nothing but -inf / NaN in this chunk. (Where a target's lane maximum starts from the
        // lowest finite float instead of -inf, as Highway's EMU128 does under clang, such a
        // chunk yields a maximum no entry equals: that is the same empty chunk.)
        const int64_t arg = m == -kInf ? -1 : FirstEqual(x, n, m, -1);
        if (arg < 0) {
            out[r] = s;
            continue;
        }
        s.token = static_cast<int32_t>(v0 + arg);
        s.max = m;
        if (m == kInf) {
            // Every +inf shares the probability mass; finite values get none.
            for (int64_t i = 0; i < n; ++i)
                s.sum_exp += x[i] == kInf ? 1.0f : 0.0f;
        } else {
            // exp(x - m) with x - m clamped at -88: the clamp keeps -inf and NaN entries from
            // producing NaN and changes the sum by less than 1e-38 relative.
            const auto vm = hn::Set(df, m);
            const auto lo = hn::Set(df, -88.0f);
            auto acc = hn::Zero(df);
            auto ent = hn::Zero(df);
            int64_t i = 0;
            for (; i + N <= n; i += N) {
                auto v = hn::LoadU(df, x + i);
                auto d = hn::Sub(v, vm);
                d = hn::IfThenElse(hn::IsNaN(d), lo, hn::Max(d, lo));
                const auto e = hn::CallExp(df, d);
                acc = hn::Add(acc, e);
                ent = hn::MulAdd(e, d, ent);
            }
            float sum = hn::GetLane(hn::SumOfLanes(df, acc));
            float t = hn::GetLane(hn::SumOfLanes(df, ent));
            for (; i < n; ++i) {
                float d = x[i] - m;
                d = std::isnan(d) ? -88.0f : std::max(d, -88.0f);
                const float e = std::exp(d);
                sum += e;
                t += e * d;
            }
            s.sum_exp = sum;
            s.ent_acc = t;
        }
        // Runner-up: the best value among the other entries (first index on ties).
        float m2 = -kInf;
        for (int64_t i = 0; i < n; ++i) {
            if (i != arg && !std::isnan(x[i]) && x[i] > m2) m2 = x[i];
        }
        if (m2 > -kInf) {
            s.second = static_cast<int32_t>(v0 + FirstEqual(x, n, m2, arg));
            s.second_max = m2;
        }
        out[r] = s;
    }
}

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llada::kernels {

HWY_EXPORT(RowStatsChunk);

void row_stats_chunk(const float* logits, int64_t m_rows, int64_t ld, int64_t n, int64_t v0,
                     RowStats* out) {
    HWY_DYNAMIC_DISPATCH(RowStatsChunk)(logits, m_rows, ld, n, v0, out);
}

namespace {
// Scale of a part's sums when the reference maximum moves from `part_max` to `m`.
float rescale(float part_max, float m) {
    if (part_max == -INFINITY) return 0.0f;
    if (m == INFINITY) return part_max == INFINITY ? 1.0f : 0.0f;
    return std::exp(part_max - m);
}
}  // namespace

void row_stats_merge(RowStats& a, const RowStats& b) {
    if (b.token < 0) return;
    if (a.token < 0) {
        a = b;
        return;
    }
    const float m = std::max(a.max, b.max);
    const float sa = rescale(a.max, m), sb = rescale(b.max, m);
    // Entropy accumulator relative to the new maximum: e^(x-m)(x-m) = s * e^(x-p)((x-p) + (p-m)).
    auto ent = [&](const RowStats& p, float s) {
        if (s == 0.0f || m == INFINITY) return 0.0f;
        return s * (p.ent_acc + (p.max - m) * p.sum_exp);
    };
    RowStats r;
    r.max = m;
    r.sum_exp = a.sum_exp * sa + b.sum_exp * sb;
    r.ent_acc = ent(a, sa) + ent(b, sb);
    // `a` covers lower vocabulary indices, so it wins ties.
    const bool a_best = a.max >= b.max;
    r.token = a_best ? a.token : b.token;
    // Runner-up among the loser's best and both runners-up.
    struct Cand {
        int32_t tok;
        float val;
    };
    Cand c[3] = {a_best ? Cand{b.token, b.max} : Cand{a.token, a.max}, Cand{a.second, a.second_max},
                 Cand{b.second, b.second_max}};
    // The Gumbel-max choice: the later range wins only when strictly better.
    const bool gb = b.gumbel_token >= 0 && (a.gumbel_token < 0 || b.gumbel_score > a.gumbel_score);
    r.gumbel_token = gb ? b.gumbel_token : a.gumbel_token;
    r.gumbel_score = gb ? b.gumbel_score : a.gumbel_score;
    r.gumbel_logit = gb ? b.gumbel_logit : a.gumbel_logit;
    r.second = -1;
    r.second_max = -INFINITY;
    for (const Cand& x : c) {
        if (x.tok < 0) continue;
        if (r.second < 0 || x.val > r.second_max || (x.val == r.second_max && x.tok < r.second)) {
            r.second = x.tok;
            r.second_max = x.val;
        }
    }
    a = r;
}

void row_gumbel_chunk(const float* logits, int64_t m_rows, int64_t ld, int64_t n, int64_t v0,
                      const GumbelRow* rows, RowStats* out) {
    for (int64_t r = 0; r < m_rows; ++r) {
        const GumbelRow& g = rows[r];
        const float* x = logits + r * ld;
        RowStats& s = out[r];
        for (int64_t i = 0; i < n; ++i) {
            const int64_t v = v0 + i;
            if (v == g.banned) continue;
            double score = static_cast<double>(x[i]);
            if (g.temperature > 0.0) {
                const double u = counter_uniform(g.seed, g.offset + static_cast<uint64_t>(v));
                score -= g.temperature * std::log(-std::log(u));
            }
            if (s.gumbel_token < 0 || score > s.gumbel_score) {
                s.gumbel_token = static_cast<int32_t>(v);
                s.gumbel_score = score;
                s.gumbel_logit = x[i];
            }
        }
    }
}

float row_gumbel_confidence(const RowStats& s) {
    if (s.gumbel_token < 0 || s.sum_exp <= 0.0f) return 0.0f;
    return std::exp(s.gumbel_logit - s.max) / s.sum_exp;
}

float row_confidence(const RowStats& s) {
    return s.sum_exp > 0.0f ? 1.0f / s.sum_exp : 0.0f;
}

float row_entropy(const RowStats& s) {
    if (s.sum_exp <= 0.0f) return 0.0f;
    return std::log(s.sum_exp) - s.ent_acc / s.sum_exp;
}

}  // namespace llada::kernels
#endif
