// llama.cpp-compatible block formats (Q8_0, Q4_0): layouts, scalar quantise and dequantise.
#include "quant/blocks.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "quant/fp16.h"

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
        case TensorType::Q8_0: {
            const auto* blocks = static_cast<const BlockQ8_0*>(src);
            for (int64_t b = 0; b < n / kQK; ++b) {
                const float d = fp16_to_fp32(blocks[b].d);
                for (int j = 0; j < kQK; ++j)
                    dst[b * kQK + j] = d * blocks[b].qs[j];
            }
            return;
        }
        case TensorType::Q4_0: {
            const auto* blocks = static_cast<const BlockQ4_0*>(src);
            for (int64_t b = 0; b < n / kQK; ++b) {
                const float d = fp16_to_fp32(blocks[b].d);
                for (int j = 0; j < kQK / 2; ++j) {
                    dst[b * kQK + j] = d * static_cast<float>((blocks[b].qs[j] & 0x0f) - 8);
                    dst[b * kQK + j + kQK / 2] = d * static_cast<float>((blocks[b].qs[j] >> 4) - 8);
                }
            }
            return;
        }
        case TensorType::TQ4:
        case TensorType::TQ8:
        case TensorType::TF16:
            break;  // whole-matrix tile formats have no rows (quant/tile.h)
    }
    assert(false && "unhandled tensor type");
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
        case TensorType::TQ4:
        case TensorType::TQ8:
        case TensorType::TF16:
            break;  // whole-matrix tile formats have no rows (quant/tile.h)
    }
    assert(false && "unhandled tensor type");
}

}  // namespace llada::quant
