// The quantizers of quant/quantize.h, writing the bytes that llama-quantize writes.
//
// Every search below reproduces the arithmetic of llama.cpp's quantizers without an importance
// matrix (ggml-quants.c at 3f545be: the *_ref functions for Q4_1 ... Q6_K, quantize_iq4_nl and
// quantize_iq4_xs for the non-linear types), including the order of each float operation: a
// single rounding that differs can flip a level, and then a scale, and the file is no longer
// llama.cpp's. llama.cpp's default x86-64 build compiles ggml-quants.c without FMA instructions
// (ggml-base gets no -march flag), so every product here is rounded before it is added, and the
// compiler must not fuse them either: see the pragma below.
#include "quant/quantize.h"

#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/fp16.h"

// No fused multiply-adds in this file, whatever the target: GCC contracts a * b + c into an FMA
// even in ISO C++ mode wherever the instruction set has one (every arm64 core; x86 with -mfma),
// and clang does within an expression, and a fused product is rounded once instead of twice.
// llama.cpp's arm64 build does fuse, so its llama-quantize writes other Q2_K/Q4_K/Q5_K bytes than
// its x86-64 one (tests/data/quant/README.md); these quantizers write the x86-64 bytes everywhere.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace llada::quant {

namespace {

// A group whose largest magnitude is below this is treated as all zeros (llama.cpp's
// GROUP_MAX_EPS), which keeps the searches from dividing by a vanishing maximum.
constexpr float kZeroGroup = 1e-15f;

// Rounds to the nearest integer, ties to even, the way llama.cpp does it: adding 1.5 * 2^23
// moves the integer part into the low mantissa bits. Using the same trick (rather than lrintf)
// keeps even out-of-range arguments, which the later clamps absorb, giving the same integer.
int round_to_int(float v) {
    const float shifted = v + 12582912.0f;
    int32_t bits;
    std::memcpy(&bits, &shifted, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

// The index of the IQ4 grid point nearest to v; a value exactly half-way between two points
// takes the upper one, as llama.cpp's binary search does.
int iq4_index(float v) {
    if (v <= kIq4Values[0]) return 0;
    if (v >= kIq4Values[15]) return 15;
    // The first grid point above v; the one below it is its left neighbour.
    const int8_t* above =
        std::upper_bound(kIq4Values + 1, kIq4Values + 15, v,
                         [](float a, int8_t b) { return a < static_cast<float>(b); });
    const int k = static_cast<int>(above - kIq4Values);
    const float to_lower = v - static_cast<float>(kIq4Values[k - 1]);
    const float to_upper = static_cast<float>(kIq4Values[k]) - v;
    return to_lower < to_upper ? k - 1 : k;
}

// Returns the signed value of the first element of largest magnitude and stores that magnitude
// in *amax (both 0 for an all-zero group).
float signed_absmax(const float* x, int n, float* amax) {
    float best = 0.0f, value = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float a = std::fabs(x[i]);
        if (a > best) {
            best = a;
            value = x[i];
        }
    }
    *amax = best;
    return value;
}

// A symmetric scale for n values on the signed levels -nmax .. nmax - 1, weighted by x^2 (the
// largest values matter most): the levels of the plain scale -nmax / max first, then 18 nearby
// inverse scales, keeping whichever maximises the weighted sum(x l)^2 / sum(l^2), which is the
// same as minimising the error at each candidate's least-squares scale. L receives the levels
// offset by nmax. Q6_K uses it.
float fit_symmetric(const float* x, int n, int nmax, int8_t* L) {
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < kZeroGroup) {
        std::fill(L, L + n, int8_t{0});
        return 0.0f;
    }
    const auto sums = [&](float inv, float* sum_xl, float* sum_ll) {
        *sum_xl = 0.0f;
        *sum_ll = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(round_to_int(inv * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            *sum_xl += w * x[i] * static_cast<float>(l);
            *sum_ll += w * static_cast<float>(l) * static_cast<float>(l);
        }
    };
    const auto levels = [&](float inv) {
        for (int i = 0; i < n; ++i)
            L[i] =
                static_cast<int8_t>(nmax + std::clamp(round_to_int(inv * x[i]), -nmax, nmax - 1));
    };
    float inv = static_cast<float>(-nmax) / max;
    float sum_xl, sum_ll;
    sums(inv, &sum_xl, &sum_ll);
    levels(inv);
    float scale = sum_ll != 0.0f ? sum_xl / sum_ll : 0.0f;
    float best = scale * sum_xl;
    for (int step = -9; step <= 9; ++step) {
        if (step == 0) continue;
        inv = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
        sums(inv, &sum_xl, &sum_ll);
        // The ratios are compared cross-multiplied, so a candidate costs no division.
        if (sum_ll > 0.0f && sum_xl * sum_xl > best * sum_ll) {
            levels(inv);
            scale = sum_xl / sum_ll;
            best = scale * sum_xl;
        }
    }
    return scale;
}

// The Q3_K sub-block search: 16 values on the levels -4 .. 3, weighted by x^2, starting from the
// plain scale -4 / max and then moving single values to the level the others' least-squares
// scale asks for, while that improves sum(x l)^2 / sum(l^2), for at most five sweeps. L receives
// the levels offset by 4.
float fit_q3(const float* x, int8_t* L) {
    constexpr int n = 16, nmax = 4;
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < kZeroGroup) {
        std::fill(L, L + n, int8_t{0});
        return 0.0f;
    }
    const float inv = static_cast<float>(-nmax) / max;
    float sum_xl = 0.0f, sum_ll = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = std::clamp(round_to_int(inv * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<int8_t>(l);
        const float w = x[i] * x[i];
        sum_xl += w * x[i] * static_cast<float>(l);
        sum_ll += w * static_cast<float>(l) * static_cast<float>(l);
    }
    for (int sweep = 0; sweep < 5; ++sweep) {
        bool changed = false;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            const float li = static_cast<float>(L[i]);
            // The sums without value i, and the level the remaining fit would give it.
            float rest_xl = sum_xl - w * x[i] * li;
            if (!(rest_xl > 0.0f)) continue;
            float rest_ll = sum_ll - w * li * li;
            const int moved = std::clamp(round_to_int(x[i] * rest_ll / rest_xl), -nmax, nmax - 1);
            if (moved == L[i]) continue;
            const float lm = static_cast<float>(moved);
            rest_xl += w * x[i] * lm;
            rest_ll += w * lm * lm;
            if (rest_ll > 0.0f && rest_xl * rest_xl * sum_ll > sum_xl * sum_xl * rest_ll) {
                L[i] = static_cast<int8_t>(moved);
                sum_xl = rest_xl;
                sum_ll = rest_ll;
                changed = true;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; ++i)
        L[i] = static_cast<int8_t>(L[i] + nmax);
    return sum_ll > 0.0f ? sum_xl / sum_ll : 0.0f;
}

// How fit_affine searches: the levels 0 .. nmax, inverse scales (nmax + rmin + rdelta * k) /
// range for k = 0 .. nstep, and the error measured as |diff| (abs_error) or diff^2.
struct AffineSearch {
    int nmax;
    float rmin, rdelta;
    int nstep;
    bool abs_error;
};

// An affine fit x ~ scale * l + min (min <= 0) of n weighted values: the plain min / max grid
// first, then for every candidate inverse scale the weighted least-squares scale and minimum of
// its levels, keeping the candidate of smallest weighted error. Returns the scale; *neg_min
// receives -min (so >= 0) and L the levels. Q2_K, Q4_K and Q5_K use it.
float fit_affine(const float* x, const float* w, int n, const AffineSearch& s, uint8_t* L,
                 float* neg_min) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        min = std::min(min, x[i]);
        max = std::max(max, x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    // The minimum is subtracted as a non-negative offset, so a group of positive values keeps 0.
    if (min > 0.0f) min = 0.0f;
    if (max == min) {
        std::fill(L, L + n, uint8_t{0});
        *neg_min = -min;
        return 0.0f;
    }
    const float nmax = static_cast<float>(s.nmax);
    const auto error_of = [&](float scale, float offset, const uint8_t* levels) {
        float err = 0.0f;
        for (int i = 0; i < n; ++i) {
            float diff = scale * static_cast<float>(levels[i]) + offset - x[i];
            diff = s.abs_error ? std::fabs(diff) : diff * diff;
            err += w[i] * diff;
        }
        return err;
    };
    float inv = nmax / (max - min);
    float scale = 1.0f / inv;
    for (int i = 0; i < n; ++i)
        L[i] = static_cast<uint8_t>(std::clamp(round_to_int(inv * (x[i] - min)), 0, s.nmax));
    float best_error = error_of(scale, min, L);
    uint8_t trial[32];
    assert(n <= 32);
    for (int k = 0; k <= s.nstep; ++k) {
        inv = (s.rmin + s.rdelta * static_cast<float>(k) + nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(round_to_int(inv * (x[i] - min)), 0, s.nmax);
            trial[i] = static_cast<uint8_t>(l);
            const float fl = static_cast<float>(l);
            sum_l += w[i] * fl;
            sum_l2 += w[i] * fl * fl;
            sum_xl += w[i] * fl * x[i];
        }
        // Solve the normal equations of the weighted fit; det is their determinant.
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0.0f)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0.0f) {
            // A positive offset is not representable; refit the scale through the origin.
            this_min = 0.0f;
            this_scale = sum_xl / sum_l2;
        }
        const float err = error_of(this_scale, this_min, trial);
        if (err < best_error) {
            std::copy(trial, trial + n, L);
            best_error = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

// The IQ4 search of one 32-value block, weighted by x^2: the scale that maps the signed maximum
// onto the grid's end point, then 15 inverse scales around it (the end point moved by -7 .. 7),
// keeping the best weighted sum(x q)^2 / sum(q^2). Returns the scale (0 for a zero block).
float fit_iq4(const float* x) {
    constexpr int n = 32, ntry = 7;
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < kZeroGroup) return 0.0f;
    const float end = static_cast<float>(kIq4Values[0]);
    const auto sums = [&](float inv, float* sum_qx, float* sum_qq) {
        *sum_qx = 0.0f;
        *sum_qq = 0.0f;
        for (int j = 0; j < n; ++j) {
            const float q = static_cast<float>(kIq4Values[iq4_index(inv * x[j])]);
            const float w = x[j] * x[j];
            *sum_qx += w * q * x[j];
            *sum_qq += w * q * q;
        }
    };
    float sum_qx, sum_qq;
    sums(1.0f / (-max / end), &sum_qx, &sum_qq);
    float d = sum_qq > 0.0f ? sum_qx / sum_qq : 0.0f;
    float best = d * sum_qx;
    for (int t = -ntry; t <= ntry; ++t) {
        sums(static_cast<float>(t + kIq4Values[0]) / max, &sum_qx, &sum_qq);
        if (sum_qq > 0.0f && sum_qx * sum_qx > best * sum_qq) {
            d = sum_qx / sum_qq;
            best = d * sum_qx;
        }
    }
    return d;
}

// Legacy-block nibbles: element j in the low nibble of byte j, element j + 16 in the high one.
void pack_nibbles(const uint8_t* q, uint8_t* qs) {
    for (int j = 0; j < kQK / 2; ++j)
        qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | ((q[j + kQK / 2] & 0x0f) << 4));
}

// The fifth bits of 32 Q5 levels: element j at bit j of a little-endian 32-bit word.
void pack_fifth_bits(const uint8_t* q, uint8_t* qh) {
    uint32_t bits = 0;
    for (int j = 0; j < kQK; ++j)
        bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    for (int b = 0; b < 4; ++b)
        qh[b] = static_cast<uint8_t>(bits >> (8 * b));
}

// Q2_K / Q3_K low bits: per 128 values 32 bytes, value 32s + l in bits 2s .. 2s + 1 of byte l.
void pack_two_bit_planes(const uint8_t* L, uint8_t* qs) {
    for (int half = 0; half < 2; ++half) {
        const uint8_t* v = L + 128 * half;
        for (int l = 0; l < 32; ++l)
            qs[32 * half + l] =
                static_cast<uint8_t>(v[l] | (v[l + 32] << 2) | (v[l + 64] << 4) | (v[l + 96] << 6));
    }
}

// The Q4_1 / Q5_1 block: minimum and maximum give the offset and the step (max - min) / nmax;
// each value takes the nearest level, half-way cases rounding up.
void affine_legacy_levels(const float* xb, int nmax, uint16_t* d_out, uint16_t* m_out, uint8_t* q) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK; ++j) {
        min = std::min(min, xb[j]);
        max = std::max(max, xb[j]);
    }
    const float d = (max - min) / static_cast<float>(nmax);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = fp32_to_fp16(d);
    *m_out = fp32_to_fp16(min);
    for (int j = 0; j < kQK; ++j) {
        // Truncating v + 0.5 rounds the non-negative v; v can pass nmax by a rounding error.
        const int level = static_cast<int>((xb[j] - min) * id + 0.5f);
        q[j] = static_cast<uint8_t>(std::min(nmax, level));
    }
}

// Q4_K and Q5_K share everything but the level count and packing: an affine fit per 32-value
// sub-block with weights |x| + rms(x), scales and minimums coded on 6 bits against the largest
// of each, and the values requantised with the coded scale and minimum. `scales` receives the
// 12 coded bytes, L the 256 levels.
void affine_k_superblock(const float* x, const AffineSearch& search, uint16_t* d_out,
                         uint16_t* dmin_out, uint8_t* scales, uint8_t* L) {
    float scale[8], neg_min[8], w[32];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
        const float* xs = x + 32 * j;
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; ++l)
            sum_x2 += xs[l] * xs[l];
        const float rms = std::sqrt(sum_x2 / 32.0f);
        for (int l = 0; l < 32; ++l)
            w[l] = rms + std::fabs(xs[l]);
        scale[j] = fit_affine(xs, w, 32, search, L + 32 * j, &neg_min[j]);
        if (scale[j] > max_scale) max_scale = scale[j];
        if (neg_min[j] > max_min) max_min = neg_min[j];
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    uint8_t ls[8], lm[8];
    std::memset(scales, 0, kScaleBytesK);
    for (int j = 0; j < 8; ++j) {
        // The codes are narrowed to a byte before the clamp, as llama.cpp stores them.
        ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(round_to_int(inv_scale * scale[j])));
        lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(round_to_int(inv_min * neg_min[j])));
        if (j < 4) {
            scales[j] = ls[j];
            scales[j + 4] = lm[j];
        } else {
            // Sub-blocks 4-7 keep their low nibbles in byte j + 4 and their top two bits in the
            // spare high bits of bytes j - 4 (scale) and j (minimum).
            scales[j + 4] = static_cast<uint8_t>((ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4));
            scales[j - 4] = static_cast<uint8_t>(scales[j - 4] | ((ls[j] >> 4) << 6));
            scales[j] = static_cast<uint8_t>(scales[j] | ((lm[j] >> 4) << 6));
        }
    }
    *d_out = fp32_to_fp16(max_scale / 63.0f);
    *dmin_out = fp32_to_fp16(max_min / 63.0f);
    const float d = fp16_to_fp32(*d_out), dmin = fp16_to_fp32(*dmin_out);
    for (int j = 0; j < 8; ++j) {
        // A sub-block whose coded scale is 0 keeps the levels of its own fit.
        const float dl = d * static_cast<float>(ls[j]);
        if (dl == 0.0f) continue;
        const float ml = dmin * static_cast<float>(lm[j]);
        for (int i = 0; i < 32; ++i) {
            const int l = round_to_int((x[32 * j + i] + ml) / dl);
            L[32 * j + i] = static_cast<uint8_t>(std::clamp(l, 0, search.nmax));
        }
    }
}

}  // namespace

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
    assert(n % kQK == 0);
    uint8_t q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        affine_legacy_levels(x + b * kQK, 15, &y[b].d, &y[b].m, q);
        pack_nibbles(q, y[b].qs);
    }
}

void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
    assert(n % kQK == 0);
    uint8_t q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        affine_legacy_levels(x + b * kQK, 31, &y[b].d, &y[b].m, q);
        pack_nibbles(q, y[b].qs);
        pack_fifth_bits(q, y[b].qh);
    }
}

void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
    assert(n % kQK == 0);
    uint8_t q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        const float* xb = x + b * kQK;
        // As Q4_0: the largest-magnitude value, with its sign, maps to level 0 (-16) exactly.
        float amax;
        const float max = signed_absmax(xb, kQK, &amax);
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < kQK; ++j)
            q[j] = static_cast<uint8_t>(std::min(31, static_cast<int>(xb[j] * id + 16.5f)));
        pack_nibbles(q, y[b].qs);
        pack_fifth_bits(q, y[b].qh);
    }
}

void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
    assert(n % kQK == 0);
    uint8_t q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        const float* xb = x + b * kQK;
        // The levels follow the unrounded scale; only the stored copy is rounded to fp16.
        const float d = fit_iq4(xb);
        y[b].d = fp32_to_fp16(d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < kQK; ++j)
            q[j] = static_cast<uint8_t>(iq4_index(id * xb[j]));
        pack_nibbles(q, y[b].qs);
    }
}

void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n) {
    assert(n % kQKK == 0);
    uint8_t q[kQK];
    for (int64_t b = 0; b < n / kQKK; ++b) {
        const float* xs = x + b * kQKK;
        BlockIQ4_XS& out = y[b];
        float scale[8];
        float amax_scale = 0.0f, max_scale = 0.0f;
        for (int j = 0; j < 8; ++j) {
            scale[j] = fit_iq4(xs + 32 * j);
            if (std::fabs(scale[j]) > amax_scale) {
                amax_scale = std::fabs(scale[j]);
                max_scale = scale[j];
            }
        }
        // The super-block scale maps the signed largest sub-block scale to -32; an all-zero
        // super-block stores -0 here, as llama.cpp does.
        const float d = -max_scale / 32.0f;
        out.d = fp32_to_fp16(d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        out.scales_h = 0;
        std::memset(out.scales_l, 0, sizeof out.scales_l);
        for (int j = 0; j < 8; ++j) {
            const int l = std::clamp(round_to_int(id * scale[j]), -32, 31);
            // The values are requantised against the unrounded d * l, not the fp16 scale.
            const float dl = d * static_cast<float>(l);
            const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            for (int i = 0; i < 32; ++i)
                q[i] = static_cast<uint8_t>(iq4_index(idl * xs[32 * j + i]));
            pack_nibbles(q, out.qs + 16 * j);
            const int code = l + 32;
            out.scales_l[j / 2] =
                static_cast<uint8_t>(out.scales_l[j / 2] | ((code & 0x0f) << (4 * (j % 2))));
            out.scales_h = static_cast<uint16_t>(out.scales_h | ((code >> 4) << (2 * j)));
        }
    }
}

void quantize_row_q2_k(const float* x, BlockQ2_K* y, int64_t n) {
    assert(n % kQKK == 0);
    constexpr AffineSearch search{3, -0.5f, 0.1f, 15, true};
    uint8_t L[kQKK];
    for (int64_t b = 0; b < n / kQKK; ++b) {
        const float* xs = x + b * kQKK;
        BlockQ2_K& out = y[b];
        float scale[16], neg_min[16], w[16];
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 16; ++j) {
            for (int l = 0; l < 16; ++l)
                w[l] = std::fabs(xs[16 * j + l]);
            scale[j] = fit_affine(xs + 16 * j, w, 16, search, L + 16 * j, &neg_min[j]);
            if (scale[j] > max_scale) max_scale = scale[j];
            if (neg_min[j] > max_min) max_min = neg_min[j];
        }
        // Scales go in the low nibbles and minimums in the high ones, each on 4 bits against the
        // largest; the integers are narrowed to a byte unclamped, as llama.cpp stores them.
        std::memset(out.scales, 0, sizeof out.scales);
        out.d = fp32_to_fp16(0.0f);
        out.dmin = fp32_to_fp16(0.0f);
        if (max_scale > 0.0f) {
            const float inv = 15.0f / max_scale;
            for (int j = 0; j < 16; ++j)
                out.scales[j] = static_cast<uint8_t>(round_to_int(inv * scale[j]));
            out.d = fp32_to_fp16(max_scale / 15.0f);
        }
        if (max_min > 0.0f) {
            const float inv = 15.0f / max_min;
            for (int j = 0; j < 16; ++j)
                out.scales[j] =
                    static_cast<uint8_t>(out.scales[j] | (round_to_int(inv * neg_min[j]) << 4));
            out.dmin = fp32_to_fp16(max_min / 15.0f);
        }
        const float d = fp16_to_fp32(out.d), dmin = fp16_to_fp32(out.dmin);
        for (int j = 0; j < 16; ++j) {
            const float dl = d * static_cast<float>(out.scales[j] & 0x0f);
            if (dl == 0.0f) continue;  // keeps the levels of the sub-block's own fit
            const float ml = dmin * static_cast<float>(out.scales[j] >> 4);
            for (int i = 0; i < 16; ++i) {
                const int l = round_to_int((xs[16 * j + i] + ml) / dl);
                L[16 * j + i] = static_cast<uint8_t>(std::clamp(l, 0, 3));
            }
        }
        pack_two_bit_planes(L, out.qs);
    }
}

void quantize_row_q3_k(const float* x, BlockQ3_K* y, int64_t n) {
    assert(n % kQKK == 0);
    int8_t L[kQKK];
    uint8_t low[kQKK];
    for (int64_t b = 0; b < n / kQKK; ++b) {
        const float* xs = x + b * kQKK;
        BlockQ3_K& out = y[b];
        float scale[16];
        float amax = 0.0f, max_scale = 0.0f;
        for (int j = 0; j < 16; ++j) {
            scale[j] = fit_q3(xs + 16 * j, L + 16 * j);
            if (std::fabs(scale[j]) > amax) {
                amax = std::fabs(scale[j]);
                max_scale = scale[j];
            }
        }
        // Signed 6-bit scales against the signed largest one, which lands on -32.
        std::memset(out.scales, 0, sizeof out.scales);
        int code[16] = {};
        if (max_scale != 0.0f) {
            const float inv = -32.0f / max_scale;
            for (int j = 0; j < 16; ++j) {
                const auto rounded = static_cast<int8_t>(round_to_int(inv * scale[j]));
                code[j] = std::clamp<int>(rounded, -32, 31) + 32;
                const int nibble = code[j] & 0x0f;
                out.scales[j % 8] =
                    static_cast<uint8_t>(out.scales[j % 8] | (nibble << (4 * (j / 8))));
                out.scales[8 + j % 4] =
                    static_cast<uint8_t>(out.scales[8 + j % 4] | ((code[j] >> 4) << (2 * (j / 4))));
            }
            out.d = fp32_to_fp16(1.0f / inv);
        } else {
            out.d = fp32_to_fp16(0.0f);
        }
        const float d = fp16_to_fp32(out.d);
        for (int j = 0; j < 16; ++j) {
            const float dl = d * static_cast<float>(code[j] - 32);
            if (dl == 0.0f) continue;  // keeps the levels of the sub-block's own fit
            for (int i = 0; i < 16; ++i) {
                const int l = std::clamp(round_to_int(xs[16 * j + i] / dl), -4, 3);
                L[16 * j + i] = static_cast<int8_t>(l + 4);
            }
        }
        // Bit 2 of each level goes to hmask (value v: bit v / 32 of byte v % 32), the rest to qs.
        std::memset(out.hmask, 0, sizeof out.hmask);
        for (int v = 0; v < kQKK; ++v) {
            if (L[v] > 3)
                out.hmask[v % 32] = static_cast<uint8_t>(out.hmask[v % 32] | (1u << (v / 32)));
            low[v] = static_cast<uint8_t>(L[v] & 3);
        }
        pack_two_bit_planes(low, out.qs);
    }
}

void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n) {
    assert(n % kQKK == 0);
    constexpr AffineSearch search{15, -1.0f, 0.1f, 20, false};
    uint8_t L[kQKK];
    for (int64_t b = 0; b < n / kQKK; ++b) {
        BlockQ4_K& out = y[b];
        affine_k_superblock(x + b * kQKK, search, &out.d, &out.dmin, out.scales, L);
        // Each 64 values take 32 bytes: the first 32 in the low nibbles, the next 32 in the high.
        for (int p = 0; p < 4; ++p)
            for (int l = 0; l < 32; ++l)
                out.qs[32 * p + l] =
                    static_cast<uint8_t>(L[64 * p + l] | (L[64 * p + l + 32] << 4));
    }
}

void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n) {
    assert(n % kQKK == 0);
    constexpr AffineSearch search{31, -0.5f, 0.1f, 15, false};
    uint8_t L[kQKK];
    for (int64_t b = 0; b < n / kQKK; ++b) {
        BlockQ5_K& out = y[b];
        affine_k_superblock(x + b * kQKK, search, &out.d, &out.dmin, out.scales, L);
        // The nibbles are laid out as Q4_K's; the fifth bit of value 32s + l is bit s of qh[l].
        std::memset(out.qh, 0, sizeof out.qh);
        for (int p = 0; p < 4; ++p) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t lo = L[64 * p + l], hi = L[64 * p + l + 32];
                out.qs[32 * p + l] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
                out.qh[l] = static_cast<uint8_t>(out.qh[l] | ((lo >> 4) << (2 * p)) |
                                                 ((hi >> 4) << (2 * p + 1)));
            }
        }
    }
}

void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
    assert(n % kQKK == 0);
    int8_t L[kQKK];
    for (int64_t b = 0; b < n / kQKK; ++b) {
        const float* xs = x + b * kQKK;
        BlockQ6_K& out = y[b];
        float scale[16];
        float amax = 0.0f, max_scale = 0.0f;
        for (int j = 0; j < 16; ++j) {
            scale[j] = fit_symmetric(xs + 16 * j, 16, 32, L + 16 * j);
            if (std::fabs(scale[j]) > amax) {
                amax = std::fabs(scale[j]);
                max_scale = scale[j];
            }
        }
        if (amax < kZeroGroup) {
            std::memset(&out, 0, sizeof out);  // an all-zero super-block is all-zero bytes
            continue;
        }
        // Signed 8-bit scales against the signed largest one, which lands on -128.
        const float inv = -128.0f / max_scale;
        out.d = fp32_to_fp16(1.0f / inv);
        for (int j = 0; j < 16; ++j)
            out.scales[j] = static_cast<int8_t>(std::min(127, round_to_int(inv * scale[j])));
        const float d = fp16_to_fp32(out.d);
        for (int j = 0; j < 16; ++j) {
            const float dl = d * static_cast<float>(out.scales[j]);
            if (dl == 0.0f) continue;  // keeps the levels of the sub-block's own fit
            for (int i = 0; i < 16; ++i) {
                const int l = std::clamp(round_to_int(xs[16 * j + i] / dl), -32, 31);
                L[16 * j + i] = static_cast<int8_t>(l + 32);
            }
        }
        // Per 128 values: the low nibbles of values l, l + 32 (low half of the byte) and l + 64,
        // l + 96 (high half) in ql[l] and ql[l + 32]; the top two bits of all four in qh[l].
        for (int half = 0; half < 2; ++half) {
            const int8_t* v = L + 128 * half;
            uint8_t* ql = out.ql + 64 * half;
            uint8_t* qh = out.qh + 32 * half;
            for (int l = 0; l < 32; ++l) {
                ql[l] = static_cast<uint8_t>((v[l] & 0x0f) | ((v[l + 64] & 0x0f) << 4));
                ql[l + 32] = static_cast<uint8_t>((v[l + 32] & 0x0f) | ((v[l + 96] & 0x0f) << 4));
                qh[l] = static_cast<uint8_t>((v[l] >> 4) | ((v[l + 32] >> 4) << 2) |
                                             ((v[l + 64] >> 4) << 4) | ((v[l + 96] >> 4) << 6));
            }
        }
    }
}

}  // namespace llada::quant
