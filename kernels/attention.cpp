// Attention of a window of query rows against a KV cache, several rows at a time (Highway).
//
// attention_head handles one query row: each score is a dot product reduced across the lanes
// on its own, and the output row is read and written once per key. Here query rows share every
// key and value load. A group of 8 or more rows (a dLLM window) puts its rows in the vector
// lanes: queries transposed once, scores as vectors over rows from broadcast key values, the
// softmax down the lanes (LaneGroup). Fewer rows (autoregressive decoding, a window's last
// rows) go 4 at a time through 4-row x 4-key register tiles of dot products whose 16 lane sums
// are reduced together by interleaving (TileChunk). Either way the outputs of 4 rows stay in
// registers across a chunk of keys, and the softmax is the same streaming (flash-style) one: a
// running maximum and sum per row, rescaled chunk by chunk, no score matrix beyond a chunk.
// A row's excluded key (a shadow row's own position) is masked in that same pass: its score is
// set to -inf in the score buffer of the one chunk that holds it, before that chunk's softmax
// update (MaskExcludedKeys); chunks holding no excluded key run exactly as without exclusions.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/exp_lut-inl.h"
#include "kernels/tile_simd-inl.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/kernels.h"
#include "quant/fp16.h"
#include "util/error.h"

HWY_BEFORE_NAMESPACE();
namespace llada::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kTileRows = 4;          // query rows sharing each key and value load
constexpr int64_t kChunk = 32;        // keys per softmax rescale (their K and V rows stay in L1)
constexpr int64_t kGroupRows = 32;    // rows sharing each chunk of keys
constexpr int64_t kMaxCopyDim = 256;  // largest head copied into contiguous chunk buffers
constexpr int64_t kOutVecs = 4;       // output vectors per row held in registers in the PV loop
constexpr int64_t kSumBlock = 32;     // head values per partial sum of a one-lane score chain

using DF = TileTagF;  // full vectors; 128-bit on SVE (kernels/tile_simd-inl.h)
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

// out[c] = the sum of the lanes of a_c, c = 0..3 (the scalar target sums in Scores4 itself).
HWY_INLINE void Sum4(DF df, VF a0, VF a1, VF a2, VF a3, float* HWY_RESTRICT out) {
    // Within each 128-bit block: x01 = (a0, a1, a0, a1) partial sums, then 64-bit interleaving
    // gives (a0, a1, a2, a3); the blocks are added last.
    const hn::Repartition<uint64_t, DF> du;
    const VF x01 = hn::Add(hn::InterleaveLower(df, a0, a1), hn::InterleaveUpper(df, a0, a1));
    const VF x23 = hn::Add(hn::InterleaveLower(df, a2, a3), hn::InterleaveUpper(df, a2, a3));
    const auto u01 = hn::BitCast(du, x01), u23 = hn::BitCast(du, x23);
    const VF y = hn::Add(hn::BitCast(df, hn::InterleaveLower(du, u01, u23)),
                         hn::BitCast(df, hn::InterleaveUpper(du, u01, u23)));
    StoreBlockSum(df, y, out);
}
#endif  // HWY_TARGET != HWY_SCALAR

// s[r][c] = q_r . k_c for R rows (1-4) and 4 keys over head_dim values.
template <int R>
HWY_INLINE void Scores4(const float* const* q, const float* const* k, int64_t head_dim,
                        float (*s)[4]) {
#if HWY_TARGET == HWY_SCALAR
    // One lane: a head summed in one chain would round several times more than the vector
    // targets' lanes do; partial sums over blocks of kSumBlock values instead.
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < 4; ++c) {
            float total = 0.0f;
            for (int64_t i0 = 0; i0 < head_dim; i0 += kSumBlock) {
                float part = 0.0f;
                for (int64_t i = i0; i < std::min(head_dim, i0 + kSumBlock); ++i)
                    part += q[r][i] * k[c][i];
                total += part;
            }
            s[r][c] = total;
        }
    }
#else
    const DF df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    VecArray<DF, R * 4> acc;  // acc[r * 4 + c]
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < 4; ++c)
            Put(acc, r * 4 + c, hn::Zero(df));
    }
    int64_t i = 0;
    for (; i + N <= head_dim; i += N) {
        VecArray<DF, 4> kv;
        for (int c = 0; c < 4; ++c)
            Put(kv, c, hn::LoadU(df, k[c] + i));
        for (int r = 0; r < R; ++r) {
            const VF qv = hn::LoadU(df, q[r] + i);
            for (int c = 0; c < 4; ++c)
                Put(acc, r * 4 + c, hn::MulAdd(qv, kv[c], acc[r * 4 + c]));
        }
    }
    // Written out: with a loop over r here GCC 12 keeps acc in memory, storing all the
    // accumulators on every step of the loop above.
    Sum4(df, acc[0], acc[1], acc[2], acc[3], s[0]);
    if constexpr (R > 1) Sum4(df, acc[4], acc[5], acc[6], acc[7], s[1]);
    if constexpr (R > 2) Sum4(df, acc[8], acc[9], acc[10], acc[11], s[2]);
    if constexpr (R > 3) Sum4(df, acc[12], acc[13], acc[14], acc[15], s[3]);
    for (int r = 0; r < R; ++r) {
        for (int64_t t = i; t < head_dim; ++t) {
            for (int c = 0; c < 4; ++c)
                s[r][c] += q[r][t] * k[c][t];
        }
    }
#endif
}

// o_r[d0, d0 + nv * N) += sum_j p_r[j * ps] v_j for R rows (1-4), the outputs in registers.
template <int R>
HWY_INLINE void AccumulateValues(const float* const* p, int64_t ps, const float* v,
                                 int64_t kv_stride, int64_t nj, int64_t d0, int64_t nv,
                                 float* const* o) {
    const DF df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    constexpr int U = static_cast<int>(kOutVecs);
    VecArray<DF, R * U> acc;  // acc[r * U + u]
    for (int r = 0; r < R; ++r) {
        for (int64_t u = 0; u < nv; ++u)
            Put(acc, r * U + static_cast<int>(u), hn::LoadU(df, o[r] + d0 + u * N));
    }
    for (int64_t j = 0; j < nj; ++j) {
        const float* vj = v + j * kv_stride + d0;
        VecArray<DF, R> pv;
        for (int r = 0; r < R; ++r)
            Put(pv, r, hn::Set(df, p[r][j * ps]));
        for (int64_t u = 0; u < nv; ++u) {
            const VF x = hn::LoadU(df, vj + u * N);
            for (int r = 0; r < R; ++r) {
                const int i = r * U + static_cast<int>(u);
                Put(acc, i, hn::MulAdd(pv[r], x, acc[i]));
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int64_t u = 0; u < nv; ++u)
            hn::StoreU(acc[r * U + static_cast<int>(u)], df, o[r] + d0 + u * N);
    }
}

template <int R>
HWY_INLINE void AccumulateRows(const float* const* p, int64_t ps, const float* v, int64_t kv_stride,
                               int64_t nj, int64_t head_dim, float* const* o) {
    const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
    int64_t d = 0;
    for (; d + kOutVecs * N <= head_dim; d += kOutVecs * N)
        AccumulateValues<R>(p, ps, v, kv_stride, nj, d, kOutVecs, o);
    if (d + N <= head_dim) {
        const int64_t nv = (head_dim - d) / N;
        AccumulateValues<R>(p, ps, v, kv_stride, nj, d, nv, o);
        d += nv * N;
    }
    for (; d < head_dim; ++d) {
        for (int r = 0; r < R; ++r) {
            float s = o[r][d];
            for (int64_t j = 0; j < nj; ++j)
                s += p[r][j * ps] * v[j * kv_stride + d];
            o[r][d] = s;
        }
    }
}

// o[d] *= f for d < n: a running output rescaled, or normalised by its softmax sum at the end.
HWY_INLINE void ScaleRow(float* o, int64_t n, float f) {
    const DF df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const VF vf = hn::Set(df, f);
    int64_t d = 0;
    for (; d + N <= n; d += N)
        hn::StoreU(hn::Mul(hn::LoadU(df, o + d), vf), df, o + d);
    for (; d < n; ++d)
        o[d] *= f;
}

// The scores of a chunk of keys [j0, j0 + nj) for `rows` rows, row r's score of key j0 + c at
// s[r * row_step + c * key_step]: each row whose excluded key excl[r] lies in the chunk has that
// score set to -inf, so the softmax update that follows gives it weight exactly 0 (the
// polynomial exp returns 0 below its range; the table's index for m - (-inf) = +inf holds 0)
// and it cannot raise the row's maximum. Rows with excl[r] = -1, or keys in other chunks, are
// left alone; the callers skip the call when no row excludes anything.
HWY_INLINE void MaskExcludedKeys(const int64_t* excl, int64_t rows, int64_t j0, int64_t nj,
                                 float* s, int64_t row_step, int64_t key_step) {
    for (int64_t r = 0; r < rows; ++r) {
        // -1 (and any key before j0) wraps to a large unsigned value: outside the chunk.
        const uint64_t c = static_cast<uint64_t>(excl[r] - j0);
        if (c < static_cast<uint64_t>(nj))
            s[r * row_step + static_cast<int64_t>(c) * key_step] =
                -std::numeric_limits<float>::infinity();
    }
}

// Keys [j0, j0 + nj) for one tile of R rows (1-4): the scores, the streaming-softmax update of
// each row's running maximum m and sum l (the output so far rescaled), and the values into the
// outputs. k and v point at key j0's row. excl: nullptr, or the tile's R excluded keys (-1:
// none; the caller passes nullptr for chunks that hold none of them).
template <int R>
void TileChunk(const float* const* qr, float* const* orow, const int64_t* nk, float* m, float* l,
               const float* k, const float* v, int64_t kv_stride, int64_t head_dim, float scale,
               int64_t j0, int64_t nj, const float* exp_table, const int64_t* excl) {
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
    if (excl != nullptr) MaskExcludedKeys(excl, R, j0, nj, s[0], kChunk, 1);
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
        if (correction != 1.0f) ScaleRow(orow[r], head_dim, correction);
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
    AccumulateRows<R>(p, 1, v, kv_stride, nj, head_dim, orow);
}

// Copies keys and values [j0, j0 + nj) out of the cache into contiguous float buffers; fp16
// ones (T = uint16_t: the fp16 cache's bits) are widened on the way.
HWY_INLINE void CopyRow(const float* src, int64_t n, float* dst) {
    std::memcpy(dst, src, n * sizeof(float));
}
HWY_INLINE void CopyRow(const uint16_t* src, int64_t n, float* dst) {
    int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
    const DF df;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    for (; i + N <= n; i += N)
        hn::StoreU(
            hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(src + i))), df,
            dst + i);
#endif
    for (; i < n; ++i)
        dst[i] = quant::fp16_to_fp32(src[i]);
}
template <typename T>
HWY_INLINE void CopyChunk(const T* k, const T* v, int64_t kv_stride, int64_t j0, int64_t nj,
                          int64_t head_dim, float* kbuf, float* vbuf) {
    for (int64_t j = 0; j < nj; ++j) {
        CopyRow(k + (j0 + j) * kv_stride, head_dim, kbuf + j * head_dim);
        CopyRow(v + (j0 + j) * kv_stride, head_dim, vbuf + j * head_dim);
    }
}

// ---- Groups of many rows: the rows in the lanes ----
// A group of at least kLaneRows rows transposes its queries once (qt[i][r] = q_r[i], rows
// padded to whole vectors), and a chunk's scores are vectors over rows:
// s_c[rows] += qt[i][rows] * k_c[i], one broadcast key value per multiply-add, the tile's
// sums in registers along the head: no lane sums, one scaling multiply per 16 scores. The softmax
// runs down the lanes (each lane one row's maximum, sum and correction), and the values go in
// as in the small tiles, 4 rows at a time, each row's probabilities read down a column of the
// score buffer.
constexpr int64_t kLaneRows = 8;
// Keys per score tile: with 2 row vectors, 16 sums of the 32 AVX-512 registers (8 of AVX2's 16).
constexpr int kLaneKeys = hn::MaxLanes(DF()) >= 16 ? 8 : 4;
static_assert(kChunk % kLaneKeys == 0, "score tiles must not run past the chunk's buffer");

// The next chunk's cache lines (keys then values, row by row), fetched into L2 one per step of
// the score loops so that they arrive spread over the chunk's compute rather than in a burst
// that waits on the line-fill buffers.
struct NextChunkLines {
    const char* k = nullptr;
    const char* v = nullptr;
    int64_t row_bytes = 0, rows = 0, lines_per_row = 0;  // row_bytes: the cache's row stride
    int64_t row = 0, line = 0;  // the next line: row, and line within K's then V's row
    HWY_INLINE void step() {
        if (row >= rows) return;
        const int64_t kl = line < lines_per_row ? line : line - lines_per_row;
        const char* base = line < lines_per_row ? k : v;
        __builtin_prefetch(base + row * row_bytes + kl * 64, 0, 2);
        if (++line == 2 * lines_per_row) {
            line = 0;
            ++row;
        }
    }
};

// sb[c][r] (row stride kGroupRows) for keys c0 .. c0 + KC - 1 (c0 + KC <= kChunk) and the RV
// row vectors from rv0. kc: the chunk's keys, contiguous rows of head_dim.
template <int RV, int KC>
HWY_INLINE void LaneScores(const float* HWY_RESTRICT qt, const float* HWY_RESTRICT kc,
                           int64_t head_dim, float scale, int64_t c0, int64_t nj, int64_t rv0,
                           float* HWY_RESTRICT sb, NextChunkLines& next) {
    const DF df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const float* kr[KC];
    for (int c = 0; c < KC; ++c)
        kr[c] = kc + std::min<int64_t>(c0 + c, nj - 1) * head_dim;
    // The head in blocks of kSumBlock values, each summed from zero and added to the stored
    // sums: one chain of 128 multiply-adds per score rounded more than the 4x4 tiles (test
    // error 4-5e-6 against their 3.4e-6); in blocks of 32 it is below 4e-6.
    const float* qp = qt + rv0 * N;
    for (int64_t i0 = 0; i0 < head_dim; i0 += kSumBlock) {
        VecArray<DF, RV * KC> acc;  // acc[v * KC + c]
        for (int v = 0; v < RV; ++v) {
            for (int c = 0; c < KC; ++c)
                Put(acc, v * KC + c, hn::Zero(df));
        }
        const int64_t i1 = std::min(head_dim, i0 + kSumBlock);
        for (int64_t i = i0; i < i1; ++i, qp += kGroupRows) {
            next.step();
            VecArray<DF, RV> qv;
            for (int v = 0; v < RV; ++v)
                Put(qv, v, hn::Load(df, qp + v * N));
            for (int c = 0; c < KC; ++c) {
                const VF kb = hn::Set(df, kr[c][i]);
                for (int v = 0; v < RV; ++v)
                    Put(acc, v * KC + c, hn::MulAdd(qv[v], kb, acc[v * KC + c]));
            }
        }
        // All KC keys (those past nj repeat the last key; the softmax reads below nj only): a
        // loop bound known at compile time keeps acc in registers.
        for (int c = 0; c < KC; ++c) {
            for (int v = 0; v < RV; ++v) {
                float* p = sb + (c0 + c) * kGroupRows + (rv0 + v) * N;
                const VF a = acc[v * KC + c];
                hn::Store(i0 == 0 ? a : hn::Add(hn::Load(df, p), a), df, p);
            }
        }
    }
    const VF vs = hn::Set(df, scale);
    for (int c = 0; c < KC; ++c) {
        for (int v = 0; v < RV; ++v) {
            float* p = sb + (c0 + c) * kGroupRows + (rv0 + v) * N;
            hn::Store(hn::Mul(hn::Load(df, p), vs), df, p);
        }
    }
}

// One chunk of keys [j0, j0 + nj) for a group: scores, the streaming-softmax update per lane
// (m, l: running maximum and sum; corr: this chunk's rescale of the outputs so far), and the
// scores replaced by probabilities. nk: each row's key count (padding rows: the group's largest).
HWY_INLINE void LaneSoftmax(float* HWY_RESTRICT sb, int64_t nrv, const int32_t* nk, int64_t min_nk,
                            int64_t j0, int64_t nj, float* m, float* l, float* corr,
                            const float* exp_table) {
    const DF df;
    const hn::RebindToSigned<DF> di;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
    for (int64_t rv = 0; rv < nrv; ++rv) {
        float* col = sb + rv * N;
        const auto nkv = hn::Load(di, nk + rv * N);
        VF cmax = neg_inf;
        for (int64_t c = 0; c < nj; ++c) {
            VF sc = hn::Load(df, col + c * kGroupRows);
            if (j0 + c >= min_nk) {  // some row of the group has no key j0 + c
                sc = hn::IfThenElse(
                    hn::RebindMask(df, hn::Lt(hn::Set(di, static_cast<int32_t>(j0 + c)), nkv)), sc,
                    neg_inf);
                hn::Store(sc, df, col + c * kGroupRows);
            }
            cmax = hn::Max(cmax, sc);
        }
        const VF m_old = hn::Load(df, m + rv * N);
        const VF m_new = hn::Max(m_old, cmax);
        // A row with no key yet (m = -inf) subtracts 0 instead: its scores (-inf) give 0, and
        // it has nothing to rescale.
        const auto live = hn::Ne(m_new, neg_inf);
        const VF ms = hn::IfThenElseZero(live, m_new);
        const auto seen = hn::Ne(m_old, neg_inf);
        VF sum = hn::Zero(df);
        VF cv;
        if (exp_table != nullptr) {
            cv = hn::IfThenElseZero(seen, ExpLutVec(df, hn::Sub(ms, m_old), exp_table));
            for (int64_t c = 0; c < nj; ++c) {
                float* sp = col + c * kGroupRows;
                const VF e = ExpLutVec(df, hn::Sub(ms, hn::Load(df, sp)), exp_table);
                hn::Store(e, df, sp);
                sum = hn::Add(sum, e);
            }
        } else {
            cv = hn::IfThenElseZero(seen, hn::CallExp(df, hn::Sub(m_old, ms)));
            for (int64_t c = 0; c < nj; ++c) {
                float* sp = col + c * kGroupRows;
                const VF e = hn::CallExp(df, hn::Sub(hn::Load(df, sp), ms));
                hn::Store(e, df, sp);
                sum = hn::Add(sum, e);
            }
        }
        hn::Store(hn::MulAdd(hn::Load(df, l + rv * N), cv, sum), df, l + rv * N);
        hn::Store(m_new, df, m + rv * N);
        hn::Store(cv, df, corr + rv * N);
    }
}

// A group of gn >= kLaneRows rows (gn <= kGroupRows), head_dim <= kMaxCopyDim, vectors of at
// most kGroupRows lanes. kbuf, vbuf: the caller's chunk buffers (kChunk x kMaxCopyDim floats).
// excl: nullptr, or the group's gn excluded keys (-1: none).
template <typename T>
void LaneGroup(const float* q, int64_t q_stride, int64_t gn, const int64_t* n_kv, const T* k,
               const T* v, int64_t kv_stride, int64_t head_dim, float scale, float* out,
               int64_t out_stride, const float* exp_table, const int64_t* excl,
               float* HWY_RESTRICT kbuf, float* HWY_RESTRICT vbuf) {
    const DF df;
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    const int64_t nrv = (gn + N - 1) / N;
    HWY_ALIGN float qt[kMaxCopyDim * kGroupRows];
    HWY_ALIGN float sb[kChunk * kGroupRows];
    HWY_ALIGN float m[kGroupRows], l[kGroupRows], corr[kGroupRows];
    HWY_ALIGN int32_t nk[kGroupRows];
    int64_t max_kv = 0, min_nk = std::numeric_limits<int64_t>::max();
    for (int64_t r = 0; r < gn; ++r) {
        max_kv = std::max(max_kv, n_kv[r]);
        min_nk = std::min(min_nk, n_kv[r]);
    }
    // The range of the group's excluded keys, so that a chunk outside it (most chunks of a long
    // cache) costs one comparison; ex_lo > ex_hi when no row excludes a key.
    int64_t ex_lo = std::numeric_limits<int64_t>::max(), ex_hi = -1;
    if (excl != nullptr) {
        for (int64_t r = 0; r < gn; ++r) {
            if (excl[r] < 0) continue;
            ex_lo = std::min(ex_lo, excl[r]);
            ex_hi = std::max(ex_hi, excl[r]);
        }
    }
    for (int64_t r = 0; r < nrv * N; ++r) {
        m[r] = -std::numeric_limits<float>::infinity();
        l[r] = 0.0f;
        nk[r] = static_cast<int32_t>(r < gn ? n_kv[r] : max_kv);
    }
    // The transpose, one gather per row vector and head value; padding lanes repeat the last
    // row (their results are never read).
    const hn::RebindToSigned<DF> di;
    for (int64_t rv = 0; rv < nrv; ++rv) {
        const auto idx = hn::Mul(hn::Min(hn::Iota(di, static_cast<int32_t>(rv * N)),
                                         hn::Set(di, static_cast<int32_t>(gn - 1))),
                                 hn::Set(di, static_cast<int32_t>(q_stride)));
        for (int64_t i = 0; i < head_dim; ++i)
            hn::Store(hn::GatherIndex(df, q + i, idx), df, qt + i * kGroupRows + rv * N);
    }
    for (int64_t r = 0; r < gn; ++r)
        std::fill(out + r * out_stride, out + r * out_stride + head_dim, 0.0f);
    for (int64_t j0 = 0; j0 < max_kv; j0 += kChunk) {
        const int64_t nj = std::min(kChunk, max_kv - j0);
        // Float keys already contiguous (the engine's head-major cache) are read in place, a
        // sequential stream the hardware prefetchers follow; others are copied (fp16 ones
        // widened), and rows far apart have their next chunk prefetched, which the hardware
        // does not do for them.
        const float* kc = kbuf;
        const float* vc = vbuf;
        NextChunkLines next;
        if (std::is_same_v<T, float> && kv_stride == head_dim) {
            kc = reinterpret_cast<const float*>(k) + j0 * kv_stride;
            vc = reinterpret_cast<const float*>(v) + j0 * kv_stride;
        } else {
            CopyChunk(k, v, kv_stride, j0, nj, head_dim, kbuf, vbuf);
            if (kv_stride != head_dim) {
                const int64_t row_bytes = kv_stride * static_cast<int64_t>(sizeof(T));
                next = {reinterpret_cast<const char*>(k + (j0 + nj) * kv_stride),
                        reinterpret_cast<const char*>(v + (j0 + nj) * kv_stride), row_bytes,
                        std::min(kChunk, max_kv - j0 - nj),
                        (head_dim * static_cast<int64_t>(sizeof(T)) + 63) / 64};
            }
        }
        for (int64_t c0 = 0; c0 < nj; c0 += kLaneKeys) {
            int64_t rv = 0;
            for (; rv + 2 <= nrv; rv += 2)
                LaneScores<2, kLaneKeys>(qt, kc, head_dim, scale, c0, nj, rv, sb, next);
            if (rv < nrv) LaneScores<1, kLaneKeys>(qt, kc, head_dim, scale, c0, nj, rv, sb, next);
        }
        // sb holds row r's score of key j0 + c at sb[c * kGroupRows + r].
        if (ex_lo < j0 + nj && ex_hi >= j0) MaskExcludedKeys(excl, gn, j0, nj, sb, 1, kGroupRows);
        LaneSoftmax(sb, nrv, nk, min_nk, j0, nj, m, l, corr, exp_table);
        for (int64_t r = 0; r < gn; ++r) {
            if (corr[r] != 1.0f) ScaleRow(out + r * out_stride, head_dim, corr[r]);
        }
        for (int64_t t0 = 0; t0 < gn; t0 += kTileRows) {
            const int rows = static_cast<int>(std::min<int64_t>(kTileRows, gn - t0));
            const float* p[kTileRows] = {};
            float* orow[kTileRows] = {};
            for (int r = 0; r < rows; ++r) {
                p[r] = sb + t0 + r;
                orow[r] = out + (t0 + r) * out_stride;
            }
            switch (rows) {
                case 4:
                    AccumulateRows<4>(p, kGroupRows, vc, head_dim, nj, head_dim, orow);
                    break;
                case 3:
                    AccumulateRows<3>(p, kGroupRows, vc, head_dim, nj, head_dim, orow);
                    break;
                case 2:
                    AccumulateRows<2>(p, kGroupRows, vc, head_dim, nj, head_dim, orow);
                    break;
                default:
                    AccumulateRows<1>(p, kGroupRows, vc, head_dim, nj, head_dim, orow);
            }
        }
    }
    for (int64_t r = 0; r < gn; ++r)
        ScaleRow(out + r * out_stride, head_dim, 1.0f / l[r]);
}

// Rows go in groups of up to kGroupRows whose softmax state is kept while each chunk of keys
// and values serves all of the group's tiles (8 or more rows: LaneGroup). Keys and values of
// type T: float, or uint16_t for fp16 bits, which are always copied (and widened) chunk by
// chunk, so head_dim <= kMaxCopyDim for them. Float keys in contiguous rows (the engine's
// head-major cache) are read in place; float keys whose rows lie far apart (a position-major
// cache: kv_stride floats, often a multiple of 4 KiB, so one head's rows fall into the same few
// L1 sets and evict each other) are copied into contiguous buffers when more than one tile
// will read them.
// excl: nullptr or the n_q rows' excluded keys (kernels.h), masked chunk by chunk.
template <typename T>
void AttentionRowsT(const float* q, int64_t q_stride, int64_t n_q, const int64_t* n_kv, const T* k,
                    const T* v, int64_t kv_stride, int64_t head_dim, float scale, float* out,
                    int64_t out_stride, const float* exp_table, const int64_t* excl) {
    constexpr bool kF16 = std::is_same_v<T, uint16_t>;
    HWY_ALIGN float kbuf[kChunk * kMaxCopyDim];
    HWY_ALIGN float vbuf[kChunk * kMaxCopyDim];
    for (int64_t g0 = 0; g0 < n_q; g0 += kGroupRows) {
        const int64_t gn = std::min(kGroupRows, n_q - g0);
        if (gn >= kLaneRows && head_dim <= kMaxCopyDim &&
            static_cast<int64_t>(hn::Lanes(DF())) <= kGroupRows) {
            LaneGroup<T>(q + g0 * q_stride, q_stride, gn, n_kv + g0, k, v, kv_stride, head_dim,
                         scale, out + g0 * out_stride, out_stride, exp_table,
                         excl != nullptr ? excl + g0 : nullptr, kbuf, vbuf);
            continue;
        }
        float m[kGroupRows], l[kGroupRows];
        int64_t max_kv = 0;
        for (int64_t r = 0; r < gn; ++r) {
            m[r] = -std::numeric_limits<float>::infinity();
            l[r] = 0.0f;
            max_kv = std::max(max_kv, n_kv[g0 + r]);
            float* o = out + (g0 + r) * out_stride;
            std::fill(o, o + head_dim, 0.0f);
        }
        const bool copy =
            kF16 || (gn > kTileRows && head_dim <= kMaxCopyDim && kv_stride != head_dim);
        for (int64_t j0 = 0; j0 < max_kv; j0 += kChunk) {
            const int64_t nj = std::min(kChunk, max_kv - j0);
            const float* kc = kbuf;
            const float* vc = vbuf;
            int64_t stride = head_dim;
            if (copy) {
                CopyChunk(k, v, kv_stride, j0, nj, head_dim, kbuf, vbuf);
            } else {
                kc = reinterpret_cast<const float*>(k) + j0 * kv_stride;
                vc = reinterpret_cast<const float*>(v) + j0 * kv_stride;
                stride = kv_stride;
            }
            for (int64_t t0 = 0; t0 < gn; t0 += kTileRows) {
                const int rows = static_cast<int>(std::min<int64_t>(kTileRows, gn - t0));
                const float* qr[kTileRows] = {};
                float* orow[kTileRows] = {};
                int64_t nk[kTileRows] = {};
                // The tile's excluded keys, passed only for a chunk that holds one of them.
                const int64_t* ex = nullptr;
                for (int r = 0; r < rows; ++r) {
                    qr[r] = q + (g0 + t0 + r) * q_stride;
                    orow[r] = out + (g0 + t0 + r) * out_stride;
                    nk[r] = n_kv[g0 + t0 + r];
                    if (excl != nullptr && excl[g0 + t0 + r] >= j0 && excl[g0 + t0 + r] < j0 + nj)
                        ex = excl + g0 + t0;
                }
                const auto tile = rows == 4   ? TileChunk<4>
                                  : rows == 3 ? TileChunk<3>
                                  : rows == 2 ? TileChunk<2>
                                              : TileChunk<1>;
                tile(qr, orow, nk, m + t0, l + t0, kc, vc, stride, head_dim, scale, j0, nj,
                     exp_table, ex);
            }
        }
        for (int64_t r = 0; r < gn; ++r)
            ScaleRow(out + (g0 + r) * out_stride, head_dim, 1.0f / l[r]);
    }
}

void AttentionRows(const float* q, int64_t q_stride, int64_t n_q, const int64_t* n_kv,
                   const float* k, const float* v, int64_t kv_stride, int64_t head_dim, float scale,
                   float* out, int64_t out_stride, const float* exp_table, const int64_t* excl) {
    AttentionRowsT(q, q_stride, n_q, n_kv, k, v, kv_stride, head_dim, scale, out, out_stride,
                   exp_table, excl);
}
void AttentionRowsF16(const float* q, int64_t q_stride, int64_t n_q, const int64_t* n_kv,
                      const uint16_t* k, const uint16_t* v, int64_t kv_stride, int64_t head_dim,
                      float scale, float* out, int64_t out_stride, const float* exp_table,
                      const int64_t* excl) {
    AttentionRowsT(q, q_stride, n_q, n_kv, k, v, kv_stride, head_dim, scale, out, out_stride,
                   exp_table, excl);
}

}  // namespace HWY_NAMESPACE
}  // namespace llada::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llada::kernels {

HWY_EXPORT(AttentionRows);
HWY_EXPORT(AttentionRowsF16);
static_assert(kMaxFp16KvHeadDim <= 256, "the fp16 path copies every chunk (kMaxCopyDim)");

namespace {
// The excluded keys' contract (kernels.h): each is -1 or one of its row's keys, and no row is
// left without a visible key (whose softmax would divide by a zero sum). Checked in every
// build: a pass over n_q pairs beside the n_q x n_kv x head_dim of the attention itself.
void check_excluded_keys(int64_t n_q, const int64_t* n_kv, const int64_t* excl) {
    if (excl == nullptr) return;
    for (int64_t r = 0; r < n_q; ++r) {
        if (excl[r] < -1 || excl[r] >= n_kv[r]) {
            throw Error("attention: row " + std::to_string(r) + " excludes key " +
                        std::to_string(excl[r]) + ", which is neither -1 nor one of its " +
                        std::to_string(n_kv[r]) + " keys");
        }
        if (excl[r] >= 0 && n_kv[r] < 2) {
            throw Error("attention: row " + std::to_string(r) +
                        " excludes its only key and has no visible key left");
        }
    }
}
}  // namespace

void attention_rows(const float* q, int64_t q_stride, int64_t n_q, const int64_t* n_kv,
                    const float* k, const float* v, int64_t kv_stride, int64_t head_dim,
                    float scale, float* out, int64_t out_stride, const float* exp_table,
                    const int64_t* excl) {
    check_excluded_keys(n_q, n_kv, excl);
    HWY_DYNAMIC_DISPATCH(AttentionRows)
    (q, q_stride, n_q, n_kv, k, v, kv_stride, head_dim, scale, out, out_stride, exp_table, excl);
}

void attention_rows_f16(const float* q, int64_t q_stride, int64_t n_q, const int64_t* n_kv,
                        const uint16_t* k, const uint16_t* v, int64_t kv_stride, int64_t head_dim,
                        float scale, float* out, int64_t out_stride, const float* exp_table,
                        const int64_t* excl) {
    if (head_dim > kMaxFp16KvHeadDim) {
        throw Error("an fp16 KV cache supports heads of at most " +
                    std::to_string(kMaxFp16KvHeadDim) + " values, got " + std::to_string(head_dim));
    }
    check_excluded_keys(n_q, n_kv, excl);
    HWY_DYNAMIC_DISPATCH(AttentionRowsF16)
    (q, q_stride, n_q, n_kv, k, v, kv_stride, head_dim, scale, out, out_stride, exp_table, excl);
}

}  // namespace llada::kernels
#endif  // HWY_ONCE
