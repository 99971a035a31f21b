// llama.cpp's block formats: decoding, scalar dequantisation, Q8_0/Q4_0 quantisation and the
// quantisation dispatch.
#include "quant/blocks.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "quant/fp16.h"
#include "quant/quantize.h"

namespace llada::quant {

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
    assert(n % kQK == 0);
    for (int64_t b = 0; b < n / kQK; ++b) {
        const float* xb = x + b * kQK;
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j)
            amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < kQK; ++j)
            y[b].qs[j] = static_cast<int8_t>(std::roundf(xb[j] * id));
    }
}

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
    assert(n % kQK == 0);
    for (int64_t b = 0; b < n / kQK; ++b) {
        const float* xb = x + b * kQK;
        // The scale takes the sign of the largest-magnitude element so that it maps to -8 exactly.
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < kQK; ++j) {
            if (amax < std::fabs(xb[j])) {
                amax = std::fabs(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < kQK / 2; ++j) {
            const float x0 = xb[j] * id;
            const float x1 = xb[j + kQK / 2] * id;
            const uint8_t q0 = static_cast<uint8_t>(
                std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f))));
            const uint8_t q1 = static_cast<uint8_t>(
                std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f))));
            y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

namespace {

// The 6-bit scale and minimum of sub-block j of a Q4_K / Q5_K super-block: sub-blocks 0-3 keep
// theirs in the low 6 bits of bytes j and j + 4; sub-blocks 4-7 in the nibbles of byte j + 4 with
// their top two bits in the spare high bits of bytes j - 4 (scale) and j (minimum).
void scale_min_k4(int j, const uint8_t* q, int16_t* sc, int16_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = static_cast<int16_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = static_cast<int16_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// The 16 6-bit scales of a Q3_K super-block: the low 4 bits of scales 0-7 in the low nibbles of
// bytes 0-7 and of scales 8-15 in their high nibbles; the top 2 bits of scale j in bits
// 2 * (j / 4) of byte 8 + j % 4.
int16_t scale_q3_k(int j, const uint8_t* s) {
    const int low = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
    const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return static_cast<int16_t>(low | (high << 4));
}

// The 32 values of a legacy block's nibble bytes: element j in the low nibble of byte j, element
// j + 16 in its high nibble.
void nibbles_32(const uint8_t* qs, int8_t* out) {
    for (int j = 0; j < kQK / 2; ++j) {
        out[j] = static_cast<int8_t>(qs[j] & 0x0f);
        out[j + kQK / 2] = static_cast<int8_t>(qs[j] >> 4);
    }
}

// Bit j of a Q5 block's 32-bit high-bit word, as the value's fifth bit.
int fifth_bit(const uint8_t* qh, int j) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    return ((h >> j) & 1u) << 4;
}

void legacy(DecodedBlock* o, uint16_t d) {
    o->n_values = kQK;
    o->sub_len = kQK;
    o->d = fp16_to_fp32(d);
    o->dmin = 0.0f;
    o->sc[0] = 1;
    o->m[0] = 0;
}

}  // namespace

bool is_block_format(format::TensorType type) {
    using format::TensorType;
    switch (type) {
        case TensorType::Q8_0:
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::IQ4_NL:
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
        case TensorType::IQ4_XS:
            return true;
        default:
            return false;
    }
}

void decode_block(format::TensorType type, const uint8_t* row, int64_t index, DecodedBlock* o) {
    using format::TensorType;
    const auto& info = format::tensor_type_info(type);
    const uint8_t* blk = row + static_cast<size_t>(index) * info.block_bytes;
    switch (type) {
        case TensorType::Q8_0: {
            const auto& b = *reinterpret_cast<const BlockQ8_0*>(blk);
            legacy(o, b.d);
            std::memcpy(o->q, b.qs, kQK);
            return;
        }
        case TensorType::Q4_0: {
            const auto& b = *reinterpret_cast<const BlockQ4_0*>(blk);
            legacy(o, b.d);
            nibbles_32(b.qs, o->q);
            for (int j = 0; j < kQK; ++j)
                o->q[j] = static_cast<int8_t>(o->q[j] - 8);
            return;
        }
        case TensorType::Q4_1: {
            const auto& b = *reinterpret_cast<const BlockQ4_1*>(blk);
            legacy(o, b.d);
            nibbles_32(b.qs, o->q);
            o->dmin = -fp16_to_fp32(b.m);
            o->m[0] = 1;
            return;
        }
        case TensorType::Q5_0: {
            const auto& b = *reinterpret_cast<const BlockQ5_0*>(blk);
            legacy(o, b.d);
            nibbles_32(b.qs, o->q);
            for (int j = 0; j < kQK; ++j)
                o->q[j] = static_cast<int8_t>((o->q[j] | fifth_bit(b.qh, j)) - 16);
            return;
        }
        case TensorType::Q5_1: {
            const auto& b = *reinterpret_cast<const BlockQ5_1*>(blk);
            legacy(o, b.d);
            nibbles_32(b.qs, o->q);
            for (int j = 0; j < kQK; ++j)
                o->q[j] = static_cast<int8_t>(o->q[j] | fifth_bit(b.qh, j));
            o->dmin = -fp16_to_fp32(b.m);
            o->m[0] = 1;
            return;
        }
        case TensorType::IQ4_NL: {
            const auto& b = *reinterpret_cast<const BlockIQ4_NL*>(blk);
            legacy(o, b.d);
            nibbles_32(b.qs, o->q);
            for (int j = 0; j < kQK; ++j)
                o->q[j] = kIq4Values[o->q[j]];
            return;
        }
        case TensorType::Q2_K: {
            const auto& b = *reinterpret_cast<const BlockQ2_K*>(blk);
            o->n_values = kQKK;
            o->sub_len = 16;
            o->d = fp16_to_fp32(b.d);
            o->dmin = fp16_to_fp32(b.dmin);
            for (int j = 0; j < 16; ++j) {
                o->sc[j] = b.scales[j] & 0x0f;
                o->m[j] = b.scales[j] >> 4;
            }
            for (int i = 0; i < kQKK; ++i) {
                const int half = i / 128, s = (i % 128) / 32, l = i % 32;
                o->q[i] = static_cast<int8_t>((b.qs[32 * half + l] >> (2 * s)) & 3);
            }
            return;
        }
        case TensorType::Q3_K: {
            const auto& b = *reinterpret_cast<const BlockQ3_K*>(blk);
            o->n_values = kQKK;
            o->sub_len = 16;
            o->d = fp16_to_fp32(b.d);
            o->dmin = 0.0f;
            for (int j = 0; j < 16; ++j) {
                o->sc[j] = static_cast<int16_t>(scale_q3_k(j, b.scales) - 32);
                o->m[j] = 0;
            }
            for (int i = 0; i < kQKK; ++i) {
                const int half = i / 128, s = (i % 128) / 32, l = i % 32;
                const int low = (b.qs[32 * half + l] >> (2 * s)) & 3;
                const bool high = (b.hmask[l] >> (4 * half + s)) & 1;
                o->q[i] = static_cast<int8_t>(low - (high ? 0 : 4));
            }
            return;
        }
        case TensorType::Q4_K:
        case TensorType::Q5_K: {
            const bool five = type == TensorType::Q5_K;
            const auto* b4 = reinterpret_cast<const BlockQ4_K*>(blk);
            const auto* b5 = reinterpret_cast<const BlockQ5_K*>(blk);
            const uint8_t* scales = five ? b5->scales : b4->scales;
            const uint8_t* qs = five ? b5->qs : b4->qs;
            o->n_values = kQKK;
            o->sub_len = 32;
            o->d = fp16_to_fp32(five ? b5->d : b4->d);
            o->dmin = fp16_to_fp32(five ? b5->dmin : b4->dmin);
            for (int j = 0; j < 8; ++j)
                scale_min_k4(j, scales, &o->sc[j], &o->m[j]);
            for (int i = 0; i < kQKK; ++i) {
                const int s = i / 32, l = i % 32;
                const uint8_t byte = qs[32 * (s / 2) + l];
                int v = s % 2 == 0 ? (byte & 0x0f) : (byte >> 4);
                if (five) v |= ((b5->qh[l] >> s) & 1) << 4;
                o->q[i] = static_cast<int8_t>(v);
            }
            return;
        }
        case TensorType::Q6_K: {
            const auto& b = *reinterpret_cast<const BlockQ6_K*>(blk);
            o->n_values = kQKK;
            o->sub_len = 16;
            o->d = fp16_to_fp32(b.d);
            o->dmin = 0.0f;
            for (int j = 0; j < 16; ++j) {
                o->sc[j] = b.scales[j];
                o->m[j] = 0;
            }
            // Per 128 values: ql bytes l and l + 32 hold values l, l + 32 (low nibbles) and
            // l + 64, l + 96 (high nibbles); qh byte l their top two bits at 0, 2, 4, 6.
            for (int i = 0; i < kQKK; ++i) {
                const int half = i / 128, s = (i % 128) / 32, l = i % 32;
                const uint8_t lo = b.ql[64 * half + l + 32 * (s % 2)];
                const int low = s < 2 ? (lo & 0x0f) : (lo >> 4);
                const int high = (b.qh[32 * half + l] >> (2 * s)) & 3;
                o->q[i] = static_cast<int8_t>((low | (high << 4)) - 32);
            }
            return;
        }
        case TensorType::IQ4_XS: {
            const auto& b = *reinterpret_cast<const BlockIQ4_XS*>(blk);
            o->n_values = kQKK;
            o->sub_len = 32;
            o->d = fp16_to_fp32(b.d);
            o->dmin = 0.0f;
            for (int j = 0; j < 8; ++j) {
                const int low = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
                const int high = (b.scales_h >> (2 * j)) & 3;
                o->sc[j] = static_cast<int16_t>((low | (high << 4)) - 32);
                o->m[j] = 0;
                nibbles_32(b.qs + 16 * j, o->q + 32 * j);
                for (int i = 0; i < 32; ++i)
                    o->q[32 * j + i] = kIq4Values[o->q[32 * j + i]];
            }
            return;
        }
        default:
            break;
    }
    assert(false && "decode_block: not a block format");
}

void dequantize_row(format::TensorType type, const void* src, float* dst, int64_t n) {
    using format::TensorType;
    switch (type) {
        case TensorType::F32:
            std::memcpy(dst, src, static_cast<size_t>(n) * 4);
            return;
        case TensorType::F16: {
            const auto* s = static_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < n; ++i)
                dst[i] = fp16_to_fp32(s[i]);
            return;
        }
        case TensorType::BF16: {
            const auto* s = static_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < n; ++i)
                dst[i] = bf16_to_fp32(s[i]);
            return;
        }
        case TensorType::TQ4:
        case TensorType::TQ8:
        case TensorType::TF16:
            assert(false && "whole-matrix tile formats have no rows (quant/tile.h)");
            return;
        default:
            break;
    }
    // Block formats, with llama.cpp's operation order: (d * sc) * q - (dmin * m).
    const auto* row = static_cast<const uint8_t*>(src);
    const int64_t per = format::tensor_type_info(type).block_elems;
    DecodedBlock b;
    for (int64_t k = 0; k < n / per; ++k) {
        decode_block(type, row, k, &b);
        for (int j = 0; j < b.n_sub(); ++j) {
            const float dl = b.d * static_cast<float>(b.sc[j]);
            const float ml = b.dmin * static_cast<float>(b.m[j]);
            for (int i = 0; i < b.sub_len; ++i) {
                const int at = j * b.sub_len + i;
                dst[k * per + at] = dl * static_cast<float>(b.q[at]) - ml;
            }
        }
    }
}

size_t row_bytes(format::TensorType type, int64_t n) {
    const auto& info = format::tensor_type_info(type);
    if (info.tiled) return 0;  // a tile-format matrix has no rows of its own (quant/tile.h)
    return static_cast<size_t>(n / info.block_elems) * info.block_bytes;
}

void quantize_row(format::TensorType type, const float* x, void* dst, int64_t n) {
    using format::TensorType;
    switch (type) {
        case TensorType::F32:
            std::memcpy(dst, x, static_cast<size_t>(n) * 4);
            return;
        case TensorType::F16: {
            auto* d = static_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; ++i)
                d[i] = fp32_to_fp16(x[i]);
            return;
        }
        case TensorType::BF16: {
            auto* d = static_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; ++i)
                d[i] = fp32_to_bf16(x[i]);
            return;
        }
        case TensorType::Q8_0:
            quantize_row_q8_0(x, static_cast<BlockQ8_0*>(dst), n);
            return;
        case TensorType::Q4_0:
            quantize_row_q4_0(x, static_cast<BlockQ4_0*>(dst), n);
            return;
        case TensorType::Q4_1:
            quantize_row_q4_1(x, static_cast<BlockQ4_1*>(dst), n);
            return;
        case TensorType::Q5_0:
            quantize_row_q5_0(x, static_cast<BlockQ5_0*>(dst), n);
            return;
        case TensorType::Q5_1:
            quantize_row_q5_1(x, static_cast<BlockQ5_1*>(dst), n);
            return;
        case TensorType::IQ4_NL:
            quantize_row_iq4_nl(x, static_cast<BlockIQ4_NL*>(dst), n);
            return;
        case TensorType::Q2_K:
            quantize_row_q2_k(x, static_cast<BlockQ2_K*>(dst), n);
            return;
        case TensorType::Q3_K:
            quantize_row_q3_k(x, static_cast<BlockQ3_K*>(dst), n);
            return;
        case TensorType::Q4_K:
            quantize_row_q4_k(x, static_cast<BlockQ4_K*>(dst), n);
            return;
        case TensorType::Q5_K:
            quantize_row_q5_k(x, static_cast<BlockQ5_K*>(dst), n);
            return;
        case TensorType::Q6_K:
            quantize_row_q6_k(x, static_cast<BlockQ6_K*>(dst), n);
            return;
        case TensorType::IQ4_XS:
            quantize_row_iq4_xs(x, static_cast<BlockIQ4_XS*>(dst), n);
            return;
        case TensorType::TQ4:
        case TensorType::TQ8:
        case TensorType::TF16:
            break;  // whole-matrix tile formats have no rows (quant/tile.h)
    }
    assert(false && "unhandled tensor type");
}

}  // namespace llada::quant
