// The CPU's repacked layout of llama.cpp Q4_0 / Q8_0 weights and of Q8 activations.
#include "quant/packed.h"

#include <cassert>
#include <cstring>

#include "quant/blocks.h"

namespace llada::quant {

PackedLayout packed_layout(format::TensorType type, int64_t n_rows, int64_t n_cols) {
    assert(type == format::TensorType::Q4_0 || type == format::TensorType::Q8_0);
    PackedLayout l;
    l.type = type;
    l.n_rows = n_rows;
    l.n_cols = n_cols;
    l.n_groups = (n_rows + kPackRows - 1) / kPackRows;
    l.n_pairs = (n_cols + kPairElems - 1) / kPairElems;
    const size_t scales = kPackRows * 2 * sizeof(uint16_t);
    l.pair_bytes = scales + (type == format::TensorType::Q4_0 ? kPackRows * 32 : kPackRows * 64);
    l.group_bytes = l.pair_bytes * static_cast<size_t>(l.n_pairs);
    return l;
}

void pack_groups(const PackedLayout& l, const uint8_t* src, size_t src_row_bytes, int64_t g0,
                 int64_t g1, uint8_t* dst) {
    const int64_t nb = l.n_cols / kQK;
    const bool q4 = l.type == format::TensorType::Q4_0;
    for (int64_t g = g0; g < g1; ++g) {
        uint8_t* gdst = dst + (g - g0) * l.group_bytes;
        std::memset(gdst, 0, l.group_bytes);
        for (int r = 0; r < kPackRows; ++r) {
            const int64_t row = g * kPackRows + r;
            if (row >= l.n_rows) {
                // Padding rows: zero scales; Q4 nibbles of 8 (value 0) keep the sums clean.
                if (q4) {
                    for (int64_t p = 0; p < l.n_pairs; ++p) {
                        std::memset(gdst + p * l.pair_bytes + 16 + r * 32, 0x88, 32);
                    }
                }
                continue;
            }
            const uint8_t* s = src + row * src_row_bytes;
            for (int64_t p = 0; p < l.n_pairs; ++p) {
                uint8_t* sb = gdst + p * l.pair_bytes;
                auto* scales = reinterpret_cast<uint16_t*>(sb);
                for (int h = 0; h < 2; ++h) {
                    const int64_t b = 2 * p + h;
                    if (q4) {
                        uint8_t* q = sb + 16 + r * 32;
                        if (b >= nb) {  // padding block: value 0 in every nibble
                            for (int i = 0; i < 32; ++i)
                                q[i] |= h ? 0x80 : 0x08;
                            continue;
                        }
                        const auto& blk = reinterpret_cast<const BlockQ4_0*>(s)[b];
                        scales[r * 2 + h] = blk.d;
                        for (int i = 0; i < 32; ++i) {
                            // Value i of the block: low nibbles hold 0-15, high nibbles 16-31.
                            const uint8_t v = i < 16 ? (blk.qs[i] & 0x0f) : (blk.qs[i - 16] >> 4);
                            q[i] |= h ? static_cast<uint8_t>(v << 4) : v;
                        }
                    } else {
                        if (b >= nb) continue;
                        const auto& blk = reinterpret_cast<const BlockQ8_0*>(s)[b];
                        scales[r * 2 + h] = blk.d;
                        std::memcpy(sb + 16 + r * 64 + h * 32, blk.qs, 32);
                    }
                }
            }
        }
    }
}

ActLayout act_layout(int64_t n_cols) {
    ActLayout a;
    a.n_cols = n_cols;
    a.n_pairs = (n_cols + kPairElems - 1) / kPairElems;
    a.n_blocks = 2 * a.n_pairs;
    a.qs_bytes = static_cast<size_t>(a.n_pairs) * kPairElems;
    a.row_bytes = a.qs_bytes + static_cast<size_t>(a.n_blocks) * sizeof(float);
    a.row_bytes = (a.row_bytes + 63) / 64 * 64;
    return a;
}

}  // namespace llada::quant
