// Attention of a window of query rows against a KV cache, several rows at a time (Highway).
//
// attention_head handles one query row: each score is a dot product reduced across the lanes
// on its own, and the output row is read and written once per key. Here 4 query rows share
// every key and value load: scores come from 4-row x 4-key register tiles of dot products whose 16
// lane-sums are reduced together by interleaving, and the outputs of the 4 rows stay in
// registers across a chunk of keys. The softmax is the same streaming (flash-style) one: a
// running maximum and sum per row, rescaled chunk by chunk, no score matrix beyond a chunk.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/exp_lut-inl.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kTileRows = 4;          // query rows sharing each key and value load
constexpr int64_t kChunk = 32;        // keys per softmax rescale (their K and V rows stay in L1)
constexpr int64_t kGroupRows = 32;    // rows sharing each chunk of keys
constexpr int64_t kMaxCopyDim = 256;  // largest head copied into contiguous chunk buffers
constexpr int64_t kOutVecs = 4;       // output vectors per row held in registers in the PV loop

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

#if HWY_TARGET != HWY_SCALAR
// Stores the sum of v's 128-bit blocks (4 floats): the upper half added onto the lower until
// one block is left.
template <class D>
HWY_INLINE void StoreBlockSum(D d, hn::Vec<D> v, float* HWY_RESTRICT out) {
    if constexpr (hn::MaxLanes(D()) * sizeof(float) > 16) {
        const hn::Half<D> dh;
        StoreBlockSum(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)), out);
    } else {
        hn::StoreU(v, d, out);
    }
}
#endif

// out[c] = the sum of the lanes of a_c, c = 0..3.
HWY_INLINE void Sum4(DF df, VF a0, VF a1, VF a2, VF a3, float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
    out[0] = hn::GetLane(a0);
    out[1] = hn::GetLane(a1);
    out[2] = hn::GetLane(a2);
    out[3] = hn::GetLane(a3);
#else
    // Within each 128-bit block: x01 = (a0, a1, a0, a1) partial sums, then 64-bit interleaving
    // gives (a0, a1, a2, a3); the blocks are added last.
    const hn::Repartition<uint64_t, DF> du;
    const VF x01 = hn::Add(hn::InterleaveLower(df, a0, a1), hn::InterleaveUpper(df, a0, a1));
    const VF x23 = hn::Add(hn::InterleaveLower(df, a2, a3), hn::InterleaveUpper(df, a2, a3));
    const auto u01 = hn::BitCast(du, x01), u23 = hn::BitCast(du, x23);
    const VF y = hn::Add(hn::BitCast(df, hn::InterleaveLower(du, u01, u23)),
                         hn::BitCast(df, hn::InterleaveUpper(du, u01, u23)));
    StoreBlockSum(df, y, out);
#endif
}

// s[r][c] = q_r . k_c for R rows (1-4) and 4 keys over head_dim values.
template <int R>
HWY_INLINE void Scores4(const float* const* q, const float* const* k, int64_t head_dim,
                        float (*s)[4]) {
    const DF df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    VF acc[R][4];
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < 4; ++c)
            acc[r][c] = hn::Zero(df);
    }
    int64_t i = 0;
    for (; i + N <= head_dim; i += N) {
        VF kv[4];
        for (int c = 0; c < 4; ++c)
            kv[c] = hn::LoadU(df, k[c] + i);
        for (int r = 0; r < R; ++r) {
            const VF qv = hn::LoadU(df, q[r] + i);
            for (int c = 0; c < 4; ++c)
                acc[r][c] = hn::MulAdd(qv, kv[c], acc[r][c]);
        }
    }
    // Written out: with a loop over r here GCC 12 keeps acc in memory, storing all the
    // accumulators on every step of the loop above.
    Sum4(df, acc[0][0], acc[0][1], acc[0][2], acc[0][3], s[0]);
    if constexpr (R > 1) Sum4(df, acc[1][0], acc[1][1], acc[1][2], acc[1][3], s[1]);
    if constexpr (R > 2) Sum4(df, acc[2][0], acc[2][1], acc[2][2], acc[2][3], s[2]);
    if constexpr (R > 3) Sum4(df, acc[3][0], acc[3][1], acc[3][2], acc[3][3], s[3]);
    for (int r = 0; r < R; ++r) {
        for (int64_t t = i; t < head_dim; ++t) {
            for (int c = 0; c < 4; ++c)
                s[r][c] += q[r][t] * k[c][t];
        }
    }
}

// o_r[d0, d0 + nv * N) += sum_j p_r[j] v_j for R rows (1-4), the outputs in registers.
template <int R>
HWY_INLINE void AccumulateValues(const float* const* p, const float* v, int64_t kv_stride,
                                 int64_t nj, int64_t d0, int64_t nv, float* const* o) {
    const DF df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    VF acc[R][kOutVecs];
    for (int r = 0; r < R; ++r) {
        for (int64_t u = 0; u < nv; ++u)
            acc[r][u] = hn::LoadU(df, o[r] + d0 + u * N);
    }
    for (int64_t j = 0; j < nj; ++j) {
        const float* vj = v + j * kv_stride + d0;
        VF pv[R];
        for (int r = 0; r < R; ++r)
            pv[r] = hn::Set(df, p[r][j]);
        for (int64_t u = 0; u < nv; ++u) {
            const VF x = hn::LoadU(df, vj + u * N);
            for (int r = 0; r < R; ++r)
                acc[r][u] = hn::MulAdd(pv[r], x, acc[r][u]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int64_t u = 0; u < nv; ++u)
            hn::StoreU(acc[r][u], df, o[r] + d0 + u * N);
    }
}

template <int R>
HWY_INLINE void AccumulateRows(const float* const* p, const float* v, int64_t kv_stride, int64_t nj,
                               int64_t head_dim, float* const* o) {
    const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
    int64_t d = 0;
    for (; d + kOutVecs * N <= head_dim; d += kOutVecs * N)
        AccumulateValues<R>(p, v, kv_stride, nj, d, kOutVecs, o);
    if (d + N <= head_dim) {
        const int64_t nv = (head_dim - d) / N;
        AccumulateValues<R>(p, v, kv_stride, nj, d, nv, o);
        d += nv * N;
    }
    for (; d < head_dim; ++d) {
        for (int r = 0; r < R; ++r) {
            float s = o[r][d];
            for (int64_t j = 0; j < nj; ++j)
                s += p[r][j] * v[j * kv_stride + d];
            o[r][d] = s;
        }
    }
}

// Keys [j0, j0 + nj) for one tile of R rows (1-4): the scores, the streaming-softmax update of
// each row's running maximum m and sum l (the output so far rescaled), and the values into the
// outputs. k and v point at key j0's row.
template <int R>
void TileChunk(const float* const* qr, float* const* orow, const int64_t* nk, float* m, float* l,
               const float* k, const float* v, int64_t kv_stride, int64_t head_dim, float scale,
               int64_t j0, int64_t nj, const float* exp_table) {
    const DF df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const float kNegInf = -std::numeric_limits<float>::infinity();
    HWY_ALIGN float s[kTileRows][kChunk];
    for (int64_t jj = 0; jj < nj; jj += 4) {
        const float* kc[4];
        for (int c = 0; c < 4; ++c)
            kc[c] = k + std::min(jj + c, nj - 1) * kv_stride;
        float t[4][4];
        Scores4<R>(qr, kc, head_dim, t);
        for (int r = 0; r < R; ++r) {
            for (int c = 0; c < 4 && jj + c < nj; ++c)
                s[r][jj + c] = j0 + jj + c < nk[r] ? t[r][c] * scale : kNegInf;
        }
    }
    for (int r = 0; r < R; ++r) {
        float cmax = kNegInf;
        int64_t j = 0;
        if (nj >= N) {
            auto vmax = hn::Set(df, kNegInf);
            for (; j + N <= nj; j += N)
                vmax = hn::Max(vmax, hn::Load(df, s[r] + j));
            cmax = hn::GetLane(hn::MaxOfLanes(df, vmax));
        }
        for (; j < nj; ++j)
            cmax = std::max(cmax, s[r][j]);
        const float m_new = std::max(m[r], cmax);
        if (m_new == kNegInf) {  // no key of this row yet: nothing to add
            std::fill(s[r], s[r] + nj, 0.0f);
            continue;
        }
        float correction = 0.0f;  // while m = -inf
        if (m[r] != kNegInf) {
            correction = m[r];
            if (exp_table == nullptr) {
                correction = std::exp(m[r] - m_new);
            } else {
                ExpChunkLut(&correction, 1, m_new, exp_table);
            }
        }
        if (correction != 1.0f) {
            for (int64_t d = 0; d < head_dim; ++d)
                orow[r][d] *= correction;
        }
        float sum = 0.0f;
        if (exp_table != nullptr) {
            ExpChunkLut(s[r], nj, m_new, exp_table);
            for (j = 0; j < nj; ++j)
                sum += s[r][j];
        } else {
            const auto vm = hn::Set(df, m_new);
            auto vsum = hn::Zero(df);
            for (j = 0; j + N <= nj; j += N) {
                const auto e = hn::CallExp(df, hn::Sub(hn::Load(df, s[r] + j), vm));
                hn::Store(e, df, s[r] + j);
                vsum = hn::Add(vsum, e);
            }
            sum = hn::GetLane(hn::SumOfLanes(df, vsum));
            for (; j < nj; ++j)
                sum += (s[r][j] = std::exp(s[r][j] - m_new));
        }
        l[r] = l[r] * correction + sum;
        m[r] = m_new;
    }
    const float* p[kTileRows] = {s[0], s[1], s[2], s[3]};
    AccumulateRows<R>(p, v, kv_stride, nj, head_dim, orow);
}

// Rows go in groups of up to kGroupRows whose softmax state is kept while each chunk of keys
// and values serves all of the group's tiles. In the KV cache one head's rows lie a whole
// cache row apart (kv_stride floats, often a multiple of 4 KiB), so they fall into the same few
// L1 sets and evict each other; a group of more than one tile copies the chunk into contiguous
// buffers first, which then stay in L1.
void AttentionRows(const float* q, int64_t q_stride, int64_t n_q, const int64_t* n_kv,
                   const float* k, const float* v, int64_t kv_stride, int64_t head_dim, float scale,
                   float* out, int64_t out_stride, const float* exp_table) {
    HWY_ALIGN float kbuf[kChunk * kMaxCopyDim];
    HWY_ALIGN float vbuf[kChunk * kMaxCopyDim];
    for (int64_t g0 = 0; g0 < n_q; g0 += kGroupRows) {
        const int64_t gn = std::min(kGroupRows, n_q - g0);
        float m[kGroupRows], l[kGroupRows];
        int64_t max_kv = 0;
        for (int64_t r = 0; r < gn; ++r) {
            m[r] = -std::numeric_limits<float>::infinity();
            l[r] = 0.0f;
            max_kv = std::max(max_kv, n_kv[g0 + r]);
            float* o = out + (g0 + r) * out_stride;
            std::fill(o, o + head_dim, 0.0f);
        }
        const bool copy = gn > kTileRows && head_dim <= kMaxCopyDim && kv_stride != head_dim;
        for (int64_t j0 = 0; j0 < max_kv; j0 += kChunk) {
            const int64_t nj = std::min(kChunk, max_kv - j0);
            const float* kc = k + j0 * kv_stride;
            const float* vc = v + j0 * kv_stride;
            int64_t stride = kv_stride;
            if (copy) {
                for (int64_t j = 0; j < nj; ++j) {
                    std::memcpy(kbuf + j * head_dim, kc + j * kv_stride, head_dim * sizeof(float));
                    std::memcpy(vbuf + j * head_dim, vc + j * kv_stride, head_dim * sizeof(float));
                }
                kc = kbuf;
                vc = vbuf;
                stride = head_dim;
            }
            for (int64_t t0 = 0; t0 < gn; t0 += kTileRows) {
                const int rows = static_cast<int>(std::min<int64_t>(kTileRows, gn - t0));
                const float* qr[kTileRows] = {};
                float* orow[kTileRows] = {};
                int64_t nk[kTileRows] = {};
                for (int r = 0; r < rows; ++r) {
                    qr[r] = q + (g0 + t0 + r) * q_stride;
                    orow[r] = out + (g0 + t0 + r) * out_stride;
                    nk[r] = n_kv[g0 + t0 + r];
                }
                const auto tile = rows == 4   ? TileChunk<4>
                                  : rows == 3 ? TileChunk<3>
                                  : rows == 2 ? TileChunk<2>
                                              : TileChunk<1>;
                tile(qr, orow, nk, m + t0, l + t0, kc, vc, stride, head_dim, scale, j0, nj,
                     exp_table);
            }
        }
        for (int64_t r = 0; r < gn; ++r) {
            const float inv = 1.0f / l[r];
            float* o = out + (g0 + r) * out_stride;
            for (int64_t d = 0; d < head_dim; ++d)
                o[d] *= inv;
        }
    }
}

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llada::kernels {

HWY_EXPORT(AttentionRows);

void attention_rows(const float* q, int64_t q_stride, int64_t n_q, const int64_t* n_kv,
                    const float* k, const float* v, int64_t kv_stride, int64_t head_dim,
                    float scale, float* out, int64_t out_stride, const float* exp_table) {
    HWY_DYNAMIC_DISPATCH(AttentionRows)
    (q, q_stride, n_q, n_kv, k, v, kv_stride, head_dim, scale, out, out_stride, exp_table);
}

}  // namespace llada::kernels
#endif  // HWY_ONCE
