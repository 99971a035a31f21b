// The CPU's repacked layout of llama.cpp Q4_0 / Q8_0 weights and of Q8 activations.
#include "quant/packed.h"

#include <cassert>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"

namespace llada::quant {

std::optional<GenericPack> generic_pack(format::TensorType type) {
    using format::TensorType;
    // unit, sub-block, nibbles, lut, min, per-sub-block scales, zero
    switch (type) {
        case TensorType::Q4_1:
            return GenericPack{32, 32, true, false, true, false, 0};
        case TensorType::Q5_0:
            return GenericPack{32, 32, false, false, false, false, 16};
        case TensorType::Q5_1:
            return GenericPack{32, 32, false, false, true, false, 0};
        case TensorType::IQ4_NL:
            return GenericPack{32, 32, true, true, false, false, 0};
        case TensorType::Q2_K:
            return GenericPack{256, 16, true, false, true, true, 0};
        case TensorType::Q3_K:
            return GenericPack{256, 16, true, false, false, true, 4};
        case TensorType::Q4_K:
            return GenericPack{256, 32, true, false, true, true, 0};
        case TensorType::Q5_K:
            return GenericPack{256, 32, false, false, true, true, 0};
        case TensorType::Q6_K:
            return GenericPack{256, 16, false, false, false, true, 32};
        case TensorType::IQ4_XS:
            return GenericPack{256, 32, true, true, false, true, 0};
        default:
            return std::nullopt;
    }
}

bool is_packed_type(format::TensorType type) {
    return type == format::TensorType::Q4_0 || type == format::TensorType::Q8_0 ||
           type == format::TensorType::F16 || generic_pack(type).has_value();
}

PackedLayout packed_layout(format::TensorType type, int64_t n_rows, int64_t n_cols) {
    PackedLayout l;
    l.type = type;
    l.n_rows = n_rows;
    l.n_cols = n_cols;
    l.n_groups = (n_rows + kPackRows - 1) / kPackRows;
    if (const auto g = generic_pack(type)) {
        assert(n_cols % g->unit_values == 0);
        l.generic = true;
        l.g = *g;
        l.n_blocks = n_cols / g->unit_values;
        const size_t per_sub = g->has_sub ? static_cast<size_t>(g->n_sub()) * kPackRows : 0;
        l.dmin_at = 2 * kPackRows;
        l.sc_at = 64;
        l.m_at = l.sc_at + per_sub;
        l.values_at = l.m_at + (g->has_min ? per_sub : 0);
        l.values_at = (l.values_at + 63) / 64 * 64;
        l.sub_value_bytes = static_cast<size_t>(kPackRows * g->sub_len / (g->nibbles ? 2 : 1));
        l.block_bytes = l.values_at + l.sub_value_bytes * static_cast<size_t>(g->n_sub());
        l.group_bytes = l.block_bytes * static_cast<size_t>(l.n_blocks);
        return l;
    }
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

namespace {

// Stores row n's value `v` (already q + zero, or the IQ4 grid index) at position i of a
// sub-block's values (nibble or byte steps, quant/packed.h).
void put_value(const PackedLayout& l, uint8_t* sub, int n, int i, uint8_t v) {
    if (l.g.nibbles) {
        const int c = i / 8, r = i % 8;  // step c: values 8c..8c+3 low, 8c+4..8c+7 high
        uint8_t& byte = sub[c * 64 + 4 * n + r % 4];
        byte = r < 4 ? static_cast<uint8_t>((byte & 0xf0) | v)
                     : static_cast<uint8_t>((byte & 0x0f) | (v << 4));
    } else {
        sub[(i / 4) * 64 + 4 * n + i % 4] = v;
    }
}

uint8_t get_value(const PackedLayout& l, const uint8_t* sub, int n, int i) {
    if (l.g.nibbles) {
        const int c = i / 8, r = i % 8;
        const uint8_t byte = sub[c * 64 + 4 * n + r % 4];
        return r < 4 ? (byte & 0x0f) : (byte >> 4);
    }
    return sub[(i / 4) * 64 + 4 * n + i % 4];
}

// The grid index of an IQ4 value (the table is strictly increasing).
uint8_t iq4_index(int8_t q) {
    for (uint8_t i = 0; i < 16; ++i) {
        if (kIq4Values[i] == q) return i;
    }
    assert(false && "not an IQ4 grid value");
    return 0;
}

void pack_generic(const PackedLayout& l, const uint8_t* src, size_t src_row_bytes, int64_t g0,
                  int64_t g1, uint8_t* dst) {
    const GenericPack& gp = l.g;
    const int n_sub = gp.n_sub();
    DecodedBlock b;
    for (int64_t g = g0; g < g1; ++g) {
        uint8_t* gdst = dst + (g - g0) * l.group_bytes;
        std::memset(gdst, 0, l.group_bytes);
        for (int n = 0; n < kPackRows; ++n) {
            const int64_t row = g * kPackRows + n;
            for (int64_t u = 0; u < l.n_blocks; ++u) {
                uint8_t* unit = gdst + u * l.block_bytes;
                uint8_t* values = unit + l.values_at;
                if (row >= l.n_rows) {
                    // Padding rows: zero scales (already), values that mean 0.
                    const uint8_t zero = gp.lut ? 0 : static_cast<uint8_t>(gp.zero);
                    for (int j = 0; j < n_sub; ++j) {
                        for (int i = 0; i < gp.sub_len; ++i)
                            put_value(l, values + j * l.sub_value_bytes, n, i, zero);
                    }
                    continue;
                }
                decode_block(l.type, src + row * src_row_bytes, u, &b);
                assert(b.n_values == gp.unit_values && b.sub_len == gp.sub_len);
                auto* d = reinterpret_cast<uint16_t*>(unit);
                d[n] = fp32_to_fp16(b.d);  // exact: d came from an fp16
                if (gp.has_min) d[kPackRows + n] = fp32_to_fp16(b.dmin);
                for (int j = 0; j < n_sub; ++j) {
                    if (gp.has_sub) {
                        unit[l.sc_at + j * kPackRows + n] = static_cast<uint8_t>(b.sc[j]);
                        if (gp.has_min)
                            unit[l.m_at + j * kPackRows + n] = static_cast<uint8_t>(b.m[j]);
                    }
                    for (int i = 0; i < gp.sub_len; ++i) {
                        const int8_t q = b.q[j * gp.sub_len + i];
                        const uint8_t v = gp.lut ? iq4_index(q) : static_cast<uint8_t>(q + gp.zero);
                        put_value(l, values + j * l.sub_value_bytes, n, i, v);
                    }
                }
            }
        }
    }
}

}  // namespace

void unpack_generic(const PackedLayout& l, const uint8_t* group, int64_t u, int n, int8_t* out) {
    const uint8_t* values = group + u * l.block_bytes + l.values_at;
    for (int j = 0; j < l.g.n_sub(); ++j) {
        for (int i = 0; i < l.g.sub_len; ++i) {
            const uint8_t v = get_value(l, values + j * l.sub_value_bytes, n, i);
            out[j * l.g.sub_len + i] =
                l.g.lut ? kIq4Values[v] : static_cast<int8_t>(static_cast<int>(v) - l.g.zero);
        }
    }
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
    if (l.generic) {
        pack_generic(l, src, src_row_bytes, g0, g1, dst);
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
