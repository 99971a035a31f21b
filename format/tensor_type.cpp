// Tensor element types as GGUF numbers them, and the block geometry of each.
#include "format/tensor_type.h"

#include <cassert>
#include <cctype>
#include <limits>

namespace llada::format {
namespace {

constexpr TensorTypeInfo kSupported[] = {
    {TensorType::F32, "F32", 1, 4},
    {TensorType::F16, "F16", 1, 2},
    {TensorType::BF16, "BF16", 1, 2},
    // llama.cpp's block formats (quant/blocks.h, quant/kquants.h, docs/formats.md).
    {TensorType::Q8_0, "Q8_0", 32, 34},      // fp16 scale + 32 int8
    {TensorType::Q4_0, "Q4_0", 32, 18},      // fp16 scale + 16 bytes of nibbles
    {TensorType::Q4_1, "Q4_1", 32, 20},      // fp16 scale and min + nibbles
    {TensorType::Q5_0, "Q5_0", 32, 22},      // fp16 scale + 32 high bits + nibbles
    {TensorType::Q5_1, "Q5_1", 32, 24},      // fp16 scale and min + 32 high bits + nibbles
    {TensorType::IQ4_NL, "IQ4_NL", 32, 18},  // fp16 scale + nibbles indexing a 16-value table
    {TensorType::Q2_K, "Q2_K", 256, 84},     // super-blocks of 256 values
    {TensorType::Q3_K, "Q3_K", 256, 110},
    {TensorType::Q4_K, "Q4_K", 256, 144},
    {TensorType::Q5_K, "Q5_K", 256, 176},
    {TensorType::Q6_K, "Q6_K", 256, 210},
    {TensorType::IQ4_XS, "IQ4_XS", 256, 136},
    // 32x32 tiles: TQ4 four 144-byte super-blocks, TQ8 four of 272, TF16 1024 fp16 values.
    {TensorType::TQ4, "TQ4", kTileEdge* kTileEdge, 576, true},
    {TensorType::TQ8, "TQ8", kTileEdge* kTileEdge, 1088, true},
    {TensorType::TF16, "TF16", kTileEdge* kTileEdge, 2048, true},
};

// Names of the ggml types llada.cpp does not compute with, for error messages.
constexpr const char* kAllNames[] = {
    "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
    "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
    "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
    "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
    "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
    "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",    "NVFP4",    "Q1_0",
    "Q2_0",
};

}  // namespace

std::optional<TensorTypeInfo> tensor_type_info(uint32_t ggml_type) {
    for (const auto& info : kSupported) {
        if (static_cast<uint32_t>(info.type) == ggml_type) return info;
    }
    return std::nullopt;
}

const TensorTypeInfo& tensor_type_info(TensorType t) {
    for (const auto& info : kSupported) {
        if (info.type == t) return info;
    }
    assert(false && "unsupported TensorType value");
    return kSupported[0];
}

std::optional<uint64_t> tensor_bytes(const TensorTypeInfo& info, const uint64_t* ne,
                                     uint32_t n_dims, std::string* why) {
    constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
    uint64_t blocks = 1;
    if (info.tiled) {
        if (n_dims != 2) {
            *why = std::string(info.name) + " is a tile format of 2-D matrices; this tensor has " +
                   std::to_string(n_dims) + " dimensions";
            return std::nullopt;
        }
        for (uint32_t d = 0; d < 2; ++d) {
            const uint64_t tiles = ne[d] / kTileEdge + (ne[d] % kTileEdge != 0);
            if (tiles != 0 && blocks > kMax / tiles) {
                *why = "byte size overflows 64 bits";
                return std::nullopt;
            }
            blocks *= tiles;
        }
    } else {
        if (ne[0] % info.block_elems != 0) {
            *why = "first dimension " + std::to_string(ne[0]) + " is not a multiple of " +
                   info.name + "'s block size " + std::to_string(info.block_elems);
            return std::nullopt;
        }
        blocks = ne[0] / info.block_elems;
        for (uint32_t d = 1; d < n_dims; ++d) {
            if (ne[d] != 0 && blocks > kMax / ne[d]) {
                *why = "byte size overflows 64 bits";
                return std::nullopt;
            }
            blocks *= ne[d];
        }
    }
    if (blocks > kMax / info.block_bytes) {
        *why = "byte size overflows 64 bits";
        return std::nullopt;
    }
    return blocks * info.block_bytes;
}

const std::string& supported_type_names() {
    static const std::string names = [] {
        std::string s;
        for (const auto& info : kSupported) {
            if (!s.empty()) s += ", ";
            s += info.name;
        }
        return s;
    }();
    return names;
}

std::optional<TensorType> tensor_type_by_name(std::string_view name) {
    for (const auto& info : kSupported) {
        const std::string_view n = info.name;
        if (n.size() != name.size()) continue;
        bool same = true;
        for (size_t i = 0; i < n.size() && same; ++i)
            same = std::toupper(static_cast<unsigned char>(name[i])) == n[i];
        if (same) return info.type;
    }
    return std::nullopt;
}

std::string_view tensor_type_name_any(uint32_t ggml_type) {
    if (auto info = tensor_type_info(ggml_type)) return info->name;
    if (ggml_type < sizeof(kAllNames) / sizeof(kAllNames[0])) return kAllNames[ggml_type];
    return "unknown";
}

}  // namespace llada::format
