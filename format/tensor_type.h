// Tensor element types as GGUF numbers them, and the block geometry of each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llada::format {

// GGML type ids. Only the types llada.cpp can compute with are named; any other id is rejected
// at load with a message that names it (see tensor_type_name_any).
enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    IQ4_NL = 20,
    IQ4_XS = 23,
    BF16 = 30,
    // llada.cpp's own tile formats (quant/tile.h, docs/formats.md): a whole 2-D matrix in 32x32
    // tiles in the NPU's order. The ids sit far above ggml's (< 64), so no ggml type collides
    // with them and llama.cpp refuses such a file by its type check.
    TQ4 = 1024,
    TQ8 = 1025,
    TF16 = 1026,
};

struct TensorTypeInfo {
    TensorType type;
    const char* name;
    uint32_t block_elems;  // elements per block along ne[0]
    uint32_t block_bytes;  // bytes per block
    // Tile formats: a block is a 32x32 tile of a 2-D matrix (block_elems = 1024), both dimensions
    // padded to multiples of 32, instead of a run of block_elems values along ne[0].
    bool tiled = false;
};

constexpr uint32_t kTileEdge = 32;  // the tile formats' tile is kTileEdge x kTileEdge

// Geometry of a supported type; nullopt for an id llada.cpp does not support.
std::optional<TensorTypeInfo> tensor_type_info(uint32_t ggml_type);
const TensorTypeInfo& tensor_type_info(TensorType t);
// Bytes of a tensor of `info`'s type with dimensions ne[0..n_dims); nullopt when the shape does
// not fit the type (ne[0] not a multiple of the block, a tile format on other than 2 dimensions)
// or the size overflows 64 bits, with the reason in *why.
std::optional<uint64_t> tensor_bytes(const TensorTypeInfo& info, const uint64_t* ne,
                                     uint32_t n_dims, std::string* why);
// A printable name for any ggml type id, supported or not ("IQ2_XS", "unknown").
std::string_view tensor_type_name_any(uint32_t ggml_type);
// The names of every supported type, comma-separated, for error messages.
const std::string& supported_type_names();
// The supported type called `name` (case-insensitive: "q4_k" is Q4_K); nullopt otherwise.
std::optional<TensorType> tensor_type_by_name(std::string_view name);

}  // namespace llada::format
