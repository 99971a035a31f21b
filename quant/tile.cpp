// Tile-aligned weight formats (TQ4, TQ8, TF16): layout, quantise, dequantise, scalar reference.
#include "quant/tile.h"

#include <cassert>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"

namespace llada::quant {
namespace {

constexpr int kGroupsPerTile = kTileDim * kTileDim / kTileGroup;      // 32
constexpr int kSupersPerTile = kGroupsPerTile / kTileGroupsPerSuper;  // 4

// Output and input (within the tile) of value i of group g.
inline int group_n(int g, int i) {
    return 16 * (g % 2) + i / 2;
}
inline int group_k(int g, int i) {
    return 2 * (g / 2) + i % 2;
}

// round_to_fp16 for values in fp16's normal range by dropping 13 mantissa bits (round to nearest
// even, as fp32_to_fp16 does); the full conversion for the rest. Bit-identical to round_to_fp16.
inline float fp16_round(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    const uint32_t a = u & 0x7fffffffu;
    if (a < 0x38800000u || a >= 0x477ff000u) return round_to_fp16(v);
    u += 0x0fffu + ((u >> 13) & 1u);
    u &= ~0x1fffu;
    std::memcpy(&v, &u, 4);
    return v;
}

constexpr float kQm8[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

// lut[q] = d * (q - 8), rounded to fp16 when asked. When every product is a normal fp16 value
// (the usual case) the rounding is branch-free integer work the compiler vectorises.
inline void build_lut(float d, bool fp16, float* lut) {
    for (int q = 0; q < 16; ++q)
        lut[q] = d * kQm8[q];
    if (!fp16) return;
    const float a = std::fabs(d);
    if (a >= 6.103515625e-05f && a * 8.0f < 65504.0f) {
        uint32_t u[16];
        std::memcpy(u, lut, sizeof(u));
        for (int q = 0; q < 16; ++q) {
            // 0 stays 0: adding the rounding bias to +0/-0 cannot carry past bit 13.
            u[q] += 0x0fffu + ((u[q] >> 13) & 1u);
            u[q] &= ~0x1fffu;
        }
        std::memcpy(lut, u, sizeof(u));
    } else {
        for (int q = 0; q < 16; ++q)
            lut[q] = fp16_round(lut[q]);
    }
}

}  // namespace

const char* tile_type_name(TileType t) {
    switch (t) {
        case TileType::TQ4:
            return "TQ4";
        case TileType::TQ8:
            return "TQ8";
        case TileType::TF16:
            return "TF16";
    }
    return "?";
}

format::TensorType tensor_type_of(TileType t) {
    switch (t) {
        case TileType::TQ4:
            return format::TensorType::TQ4;
        case TileType::TQ8:
            return format::TensorType::TQ8;
        case TileType::TF16:
            return format::TensorType::TF16;
    }
    return format::TensorType::TQ4;
}

std::optional<TileType> tile_type_of(format::TensorType t) {
    switch (t) {
        case format::TensorType::TQ4:
            return TileType::TQ4;
        case format::TensorType::TQ8:
            return TileType::TQ8;
        case format::TensorType::TF16:
            return TileType::TF16;
        default:
            return std::nullopt;
    }
}

TileLayout tile_layout(TileType type, int64_t n_rows, int64_t n_cols) {
    TileLayout l;
    l.type = type;
    l.n_rows = n_rows;
    l.n_cols = n_cols;
    l.n_strips = (n_rows + kTileDim - 1) / kTileDim;
    l.k_tiles = (n_cols + kTileDim - 1) / kTileDim;
    switch (type) {
        case TileType::TQ4:
            l.tile_bytes = kSupersPerTile * sizeof(SuperBlockTQ4);
            break;
        case TileType::TQ8:
            l.tile_bytes = kSupersPerTile * sizeof(SuperBlockTQ8);
            break;
        case TileType::TF16:
            l.tile_bytes = kTileDim * kTileDim * sizeof(uint16_t);
            break;
    }
    // The GGUF reader sizes these tensors from format/'s table: the two must agree.
    assert(l.tile_bytes == format::tensor_type_info(tensor_type_of(type)).block_bytes);
    return l;
}

void quantize_tile_strips(const TileLayout& l, const float* rows, int64_t ld, int64_t s0,
                          int64_t s1, uint8_t* dst) {
    float vals[kTileGroup];
    for (int64_t s = s0; s < s1; ++s) {
        for (int64_t kt = 0; kt < l.k_tiles; ++kt) {
            uint8_t* tile = dst + ((s - s0) * l.k_tiles + kt) * l.tile_bytes;
            for (int g = 0; g < kGroupsPerTile; ++g) {
                for (int i = 0; i < kTileGroup; ++i) {
                    const int64_t row = s * kTileDim + group_n(g, i);
                    const int64_t col = kt * kTileDim + group_k(g, i);
                    vals[i] = row < l.n_rows && col < l.n_cols
                                  ? rows[(row - s0 * kTileDim) * ld + col]
                                  : 0.0f;
                }
                const int sb = g / kTileGroupsPerSuper, gl = g % kTileGroupsPerSuper;
                switch (l.type) {
                    case TileType::TQ4: {
                        auto* super = reinterpret_cast<SuperBlockTQ4*>(tile) + sb;
                        BlockQ4_0 blk;
                        quantize_row_q4_0(vals, &blk, kTileGroup);
                        super->d[gl] = blk.d;
                        std::memcpy(super->qs[gl], blk.qs, sizeof(blk.qs));
                        break;
                    }
                    case TileType::TQ8: {
                        auto* super = reinterpret_cast<SuperBlockTQ8*>(tile) + sb;
                        BlockQ8_0 blk;
                        quantize_row_q8_0(vals, &blk, kTileGroup);
                        super->d[gl] = blk.d;
                        std::memcpy(super->qs[gl], blk.qs, sizeof(blk.qs));
                        break;
                    }
                    case TileType::TF16: {
                        auto* h = reinterpret_cast<uint16_t*>(tile) + g * kTileGroup;
                        for (int i = 0; i < kTileGroup; ++i)
                            h[i] = fp32_to_fp16(vals[i]);
                        break;
                    }
                }
            }
        }
    }
}

void dequantize_tile_strip(const TileLayout& l, const uint8_t* strip, float* out, int64_t ldo,
                           bool fp16_lut) {
    // One tile at a time into a small [n][k] block that stays in L1 (a group scatters its values
    // over 16 rows), then each row of the block is copied out whole.
    alignas(64) float block[kTileDim][kTileDim];
    float lut[16];
    for (int64_t kt = 0; kt < l.k_tiles; ++kt) {
        const uint8_t* tile = strip + kt * l.tile_bytes;
        for (int g = 0; g < kGroupsPerTile; ++g) {
            const int sb = g / kTileGroupsPerSuper, gl = g % kTileGroupsPerSuper;
            // Pairs of values share an output row: value 2j is input 2(g/2) of output
            // 16(g%2) + j, value 2j+1 the next input.
            float* base = &block[16 * (g % 2)][2 * (g / 2)];
            switch (l.type) {
                case TileType::TQ4: {
                    const auto* super = reinterpret_cast<const SuperBlockTQ4*>(tile) + sb;
                    build_lut(fp16_to_fp32(super->d[gl]), fp16_lut, lut);
                    const uint8_t* qs = super->qs[gl];
                    for (int j = 0; j < 8; ++j) {
                        // Values 2j, 2j+1 (low nibbles) and 2j+16, 2j+17 (high nibbles).
                        const uint8_t b0 = qs[2 * j], b1 = qs[2 * j + 1];
                        base[j * kTileDim] = lut[b0 & 0x0f];
                        base[j * kTileDim + 1] = lut[b1 & 0x0f];
                        base[(j + 8) * kTileDim] = lut[b0 >> 4];
                        base[(j + 8) * kTileDim + 1] = lut[b1 >> 4];
                    }
                    break;
                }
                case TileType::TQ8: {
                    const auto* super = reinterpret_cast<const SuperBlockTQ8*>(tile) + sb;
                    const float d = fp16_to_fp32(super->d[gl]);
                    const int8_t* qs = super->qs[gl];
                    for (int j = 0; j < 16; ++j) {
                        const float v0 = d * static_cast<float>(qs[2 * j]);
                        const float v1 = d * static_cast<float>(qs[2 * j + 1]);
                        base[j * kTileDim] = fp16_lut ? fp16_round(v0) : v0;
                        base[j * kTileDim + 1] = fp16_lut ? fp16_round(v1) : v1;
                    }
                    break;
                }
                case TileType::TF16: {
                    const auto* h = reinterpret_cast<const uint16_t*>(tile) + g * kTileGroup;
                    for (int j = 0; j < 16; ++j) {
                        base[j * kTileDim] = fp16_to_fp32(h[2 * j]);
                        base[j * kTileDim + 1] = fp16_to_fp32(h[2 * j + 1]);
                    }
                    break;
                }
            }
        }
        for (int n = 0; n < kTileDim; ++n)
            std::memcpy(out + n * ldo + kt * kTileDim, block[n], sizeof(block[n]));
    }
}

void dequantize_tile_strip_kn(const TileLayout& l, const uint8_t* strip, float* w, bool fp16_lut) {
    alignas(64) float block[kTileDim * kTileDim];
    for (int64_t kt = 0; kt < l.k_tiles; ++kt) {
        const TileLayout one = [&] {
            TileLayout t = l;
            t.k_tiles = 1;
            return t;
        }();
        dequantize_tile_strip(one, strip + kt * l.tile_bytes, block, kTileDim, fp16_lut);
        for (int n = 0; n < kTileDim; ++n)
            for (int k = 0; k < kTileDim; ++k)
                w[(kt * kTileDim + k) * kTileDim + n] = block[n * kTileDim + k];
    }
}

float tile_value(const TileLayout& l, const uint8_t* data, int64_t n, int64_t k) {
    assert(n >= 0 && n < l.n_strips * kTileDim && k >= 0 && k < l.k_tiles * kTileDim);
    const int64_t tile_index = (n / kTileDim) * l.k_tiles + k / kTileDim;
    const uint8_t* tile = data + tile_index * l.tile_bytes;
    const int p = tile_position(static_cast<int>(n % kTileDim), static_cast<int>(k % kTileDim));
    const int g = p / kTileGroup, i = p % kTileGroup;
    const int sb = g / kTileGroupsPerSuper, gl = g % kTileGroupsPerSuper;
    switch (l.type) {
        case TileType::TQ4: {
            const auto* super = reinterpret_cast<const SuperBlockTQ4*>(tile) + sb;
            const uint8_t byte = super->qs[gl][i % 16];
            const int q = i < 16 ? (byte & 0x0f) : (byte >> 4);
            return fp16_to_fp32(super->d[gl]) * static_cast<float>(q - 8);
        }
        case TileType::TQ8: {
            const auto* super = reinterpret_cast<const SuperBlockTQ8*>(tile) + sb;
            return fp16_to_fp32(super->d[gl]) * static_cast<float>(super->qs[gl][i]);
        }
        case TileType::TF16:
            return fp16_to_fp32(reinterpret_cast<const uint16_t*>(tile)[p]);
    }
    return 0.0f;
}

size_t matrix_bytes(format::TensorType type, int64_t n_rows, int64_t n_cols) {
    if (const auto tile = tile_type_of(type))
        return tile_layout(*tile, n_rows, n_cols).total_bytes();
    return row_bytes(type, n_cols) * static_cast<size_t>(n_rows);
}

void dequantize_matrix_row(format::TensorType type, const uint8_t* data, int64_t n_rows,
                           int64_t n_cols, int64_t r, float* out) {
    assert(r >= 0 && r < n_rows);
    if (const auto tile = tile_type_of(type)) {
        const TileLayout l = tile_layout(*tile, n_rows, n_cols);
        for (int64_t k = 0; k < n_cols; ++k)
            out[k] = tile_value(l, data, r, k);
        return;
    }
    dequantize_row(type, data + static_cast<size_t>(r) * row_bytes(type, n_cols), out, n_cols);
}

}  // namespace llada::quant
