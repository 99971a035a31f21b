// Tensor element types as GGUF numbers them, and the block geometry of each.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace llada::format {

// GGML type ids. Only the types llada.cpp can compute with are named; any other id is rejected
// at load with a message that names it (see tensor_type_name_any).
enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q8_0 = 8,
    BF16 = 30,
};

struct TensorTypeInfo {
    TensorType type;
    const char* name;
    uint32_t block_elems;  // elements per block along ne[0]
    uint32_t block_bytes;  // bytes per block
};

// Geometry of a supported type; nullopt for an id llada.cpp does not support.
std::optional<TensorTypeInfo> tensor_type_info(uint32_t ggml_type);
const TensorTypeInfo& tensor_type_info(TensorType t);
// A printable name for any ggml type id, supported or not ("Q5_K", "type 99").
std::string_view tensor_type_name_any(uint32_t ggml_type);

}  // namespace llada::format
