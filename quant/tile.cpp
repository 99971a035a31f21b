// Tile-aligned weight formats (TQ4, TQ8, TF16): layout, quantise, dequantise, scalar reference.
#include "quant/tile.h"

#include <cassert>
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
    float lut[16];
    for (int64_t kt = 0; kt < l.k_tiles; ++kt) {
        const uint8_t* tile = strip + kt * l.tile_bytes;
        float* o = out + kt * kTileDim;
        for (int g = 0; g < kGroupsPerTile; ++g) {
            const int sb = g / kTileGroupsPerSuper, gl = g % kTileGroupsPerSuper;
            // Pairs of values share an output row: value 2j is input 2(g/2) of output
            // 16(g%2) + j, value 2j+1 the next input.
            float* base = o + static_cast<int64_t>(16 * (g % 2)) * ldo + 2 * (g / 2);
            switch (l.type) {
                case TileType::TQ4: {
                    const auto* super = reinterpret_cast<const SuperBlockTQ4*>(tile) + sb;
                    const float d = fp16_to_fp32(super->d[gl]);
                    for (int q = 0; q < 16; ++q) {
                        const float v = d * static_cast<float>(q - 8);
                        lut[q] = fp16_lut ? round_to_fp16(v) : v;
                    }
                    const uint8_t* qs = super->qs[gl];
                    for (int j = 0; j < 8; ++j) {
                        // Values 2j, 2j+1 (low nibbles) and 2j+16, 2j+17 (high nibbles).
                        base[j * ldo] = lut[qs[2 * j] & 0x0f];
                        base[j * ldo + 1] = lut[qs[2 * j + 1] & 0x0f];
                        base[(j + 8) * ldo] = lut[qs[2 * j] >> 4];
                        base[(j + 8) * ldo + 1] = lut[qs[2 * j + 1] >> 4];
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
                        base[j * ldo] = fp16_lut ? round_to_fp16(v0) : v0;
                        base[j * ldo + 1] = fp16_lut ? round_to_fp16(v1) : v1;
                    }
                    break;
                }
                case TileType::TF16: {
                    const auto* h = reinterpret_cast<const uint16_t*>(tile) + g * kTileGroup;
                    for (int j = 0; j < 16; ++j) {
                        base[j * ldo] = fp16_to_fp32(h[2 * j]);
                        base[j * ldo + 1] = fp16_to_fp32(h[2 * j + 1]);
                    }
                    break;
                }
            }
        }
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

}  // namespace llada::quant
