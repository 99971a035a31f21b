// The CPU's repacked layout of llama.cpp Q4_0 / Q8_0 weights and of Q8 activations.
#include "quant/packed.h"

#include <cassert>
#include <cstring>

#include "quant/blocks.h"

namespace llada::quant {

PackedLayout packed_layout(format::TensorType type, int64_t n_rows, int64_t n_cols) {
    PackedLayout l;
    l.type = type;
    l.n_rows = n_rows;
    l.n_cols = n_cols;
    l.n_groups = (n_rows + kPackRows - 1) / kPackRows;
    if (type == format::TensorType::F16) {
        l.n_blocks = n_cols;  // one "block" per column: the 16 rows' values
        l.block_bytes = 2 * kPackRows;
        l.group_bytes = l.block_bytes * static_cast<size_t>(n_cols);
        return l;
    }
    assert(type == format::TensorType::Q4_0 || type == format::TensorType::Q8_0);
    assert(n_cols % kQK == 0);
    l.n_blocks = n_cols / kQK;
    l.block_bytes = kPackRows * (type == format::TensorType::Q4_0 ? 18 : 34);
    l.group_bytes = l.block_bytes * static_cast<size_t>(l.n_blocks);
    return l;
}

void pack_groups(const PackedLayout& l, const uint8_t* src, size_t src_row_bytes, int64_t g0,
                 int64_t g1, uint8_t* dst) {
    if (l.type == format::TensorType::F16) {
        for (int64_t g = g0; g < g1; ++g) {
            auto* gdst = reinterpret_cast<uint16_t*>(dst + (g - g0) * l.group_bytes);
            std::memset(gdst, 0, l.group_bytes);  // padding rows: +0.0
            for (int n = 0; n < kPackRows && g * kPackRows + n < l.n_rows; ++n) {
                const uint8_t* s = src + (g * kPackRows + n) * src_row_bytes;
                for (int64_t k = 0; k < l.n_cols; ++k)
                    std::memcpy(gdst + k * kPackRows + n, s + 2 * k, 2);
            }
        }
        return;
    }
    const bool q4 = l.type == format::TensorType::Q4_0;
    for (int64_t g = g0; g < g1; ++g) {
        uint8_t* gdst = dst + (g - g0) * l.group_bytes;
        std::memset(gdst, 0, l.group_bytes);
        for (int n = 0; n < kPackRows; ++n) {
            const int64_t row = g * kPackRows + n;
            for (int64_t b = 0; b < l.n_blocks; ++b) {
                uint8_t* sb = gdst + b * l.block_bytes;
                auto* scales = reinterpret_cast<uint16_t*>(sb);
                uint8_t* q = sb + 2 * kPackRows;
                if (row >= l.n_rows) {
                    // Padding rows: zero scale, and value 0 (nibble 8; Q8_0 byte 0x80) so sums
                    // stay clean.
                    if (q4) {
                        for (int j = 0; j < 4; ++j)
                            std::memset(q + j * 64 + 4 * n, 0x88, 4);
                    } else {
                        for (int st = 0; st < 8; ++st)
                            std::memset(q + st * 64 + 4 * n, 0x80, 4);
                    }
                    continue;
                }
                const uint8_t* s = src + row * src_row_bytes;
                if (q4) {
                    const auto& blk = reinterpret_cast<const BlockQ4_0*>(s)[b];
                    scales[n] = blk.d;
                    auto nib = [&](int k) {  // Q4_0: values 0-15 low nibbles, 16-31 high
                        return k < 16 ? (blk.qs[k] & 0x0f) : (blk.qs[k - 16] >> 4);
                    };
                    for (int j = 0; j < 4; ++j) {
                        for (int i = 0; i < 4; ++i) {
                            q[j * 64 + 4 * n + i] =
                                static_cast<uint8_t>(nib(8 * j + i) | (nib(8 * j + 4 + i) << 4));
                        }
                    }
                } else {
                    const auto& blk = reinterpret_cast<const BlockQ8_0*>(s)[b];
                    scales[n] = blk.d;
                    for (int st = 0; st < 8; ++st) {
                        for (int i = 0; i < 4; ++i) {
                            q[st * 64 + 4 * n + i] = static_cast<uint8_t>(
                                static_cast<uint8_t>(blk.qs[4 * st + i]) ^ 0x80);
                        }
                    }
                }
            }
        }
    }
}

void unpack_block(const PackedLayout& l, const uint8_t* group, int64_t b, int n, int8_t* out) {
    const uint8_t* q = group + b * l.block_bytes + 2 * kPackRows;
    if (l.type == format::TensorType::Q4_0) {
        for (int j = 0; j < 4; ++j) {
            for (int i = 0; i < 4; ++i) {
                const uint8_t byte = q[j * 64 + 4 * n + i];
                out[8 * j + i] = static_cast<int8_t>((byte & 0x0f) - 8);
                out[8 * j + 4 + i] = static_cast<int8_t>((byte >> 4) - 8);
            }
        }
    } else {
        for (int st = 0; st < 8; ++st) {
            for (int i = 0; i < 4; ++i)
                out[4 * st + i] = static_cast<int8_t>(q[st * 64 + 4 * n + i] ^ 0x80);
        }
    }
}

ActLayout act_layout(int64_t n_cols) {
    ActLayout a;
    a.n_cols = n_cols;
    a.n_blocks = (n_cols + kQK - 1) / kQK;
    a.row_bytes = static_cast<size_t>(a.n_blocks) * kActRecordBytes;
    a.row_bytes = (a.row_bytes + 63) / 64 * 64;
    return a;
}

}  // namespace llada::quant
