// GGUF v2/v3 reader over a read-only mmap, with every count, offset and size checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/mapped_file.h"
#include "format/tensor_type.h"

namespace llada::format {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

const char* gguf_type_name(GgufType t);

// One metadata value. Scalars are decoded; strings and arrays point into the mapping.
struct GgufValue {
    GgufType type = GgufType::UINT8;
    // Scalars (integers are sign- or zero-extended; bools are 0/1).
    uint64_t u = 0;
    int64_t i = 0;
    double f = 0.0;
    std::string_view str;  // STRING
    // ARRAY: element type and count; `data` is the first element inside the mapping.
    GgufType elem_type = GgufType::UINT8;
    uint64_t count = 0;
    const uint8_t* data = nullptr;
    uint64_t data_bytes = 0;  // bytes the array elements occupy in the file
};

struct GgufKV {
    std::string key;
    GgufValue value;
};

// A tensor as described by the file. Dimensions in GGUF order: ne[0] is the fastest.
struct GgufTensor {
    std::string name;
    TensorType type = TensorType::F32;
    uint32_t n_dims = 0;
    uint64_t ne[4] = {1, 1, 1, 1};
    uint64_t offset = 0;  // relative to the start of the data section
    uint64_t n_elements = 0;
    uint64_t n_bytes = 0;
    const uint8_t* data = nullptr;  // inside the mapping, checked to lie within the file
};

// A parsed GGUF file. Construction throws llada::Error naming the key or tensor at fault.
class GgufFile {
  public:
    static std::unique_ptr<GgufFile> open(const std::string& path);
    // Parses a buffer the caller keeps alive (tests, in-memory files).
    static std::unique_ptr<GgufFile> from_memory(const uint8_t* data, size_t size,
                                                 std::string name = "<memory>");
    // A model assembled in memory (format/hf_directory.h: a Hugging Face directory read as the
    // GGUF llama.cpp's converter would write from it). `metadata` is a GGUF without tensors and
    // is kept here; the tensors point into memory that `owner` keeps alive; release() drops pages
    // only inside `mappings` (never the owner's heap copies).
    static std::unique_ptr<GgufFile> assemble(std::vector<uint8_t> metadata, std::string name,
                                              std::vector<GgufTensor> tensors,
                                              std::shared_ptr<const void> owner,
                                              std::vector<const MappedFile*> mappings);

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }
    uint64_t file_size() const { return size_; }

    const std::vector<GgufKV>& kvs() const { return kvs_; }
    const std::vector<GgufTensor>& tensors() const { return tensors_; }

    const GgufValue* find(std::string_view key) const;
    // Drops a tensor's pages from the resident set (after it was copied or repacked); a no-op for
    // files parsed from memory.
    void release(const GgufTensor& t) const;
    const GgufTensor* find_tensor(std::string_view name) const;

    // Typed accessors. `get_*` throw when the key is missing or has an incompatible type;
    // `opt_*` return nullopt when missing and throw on an incompatible type.
    std::optional<uint64_t> opt_uint(std::string_view key) const;
    std::optional<int64_t> opt_int(std::string_view key) const;
    std::optional<double> opt_float(std::string_view key) const;
    std::optional<bool> opt_bool(std::string_view key) const;
    std::optional<std::string_view> opt_string(std::string_view key) const;
    uint64_t get_uint(std::string_view key) const;
    double get_float(std::string_view key) const;
    std::string_view get_string(std::string_view key) const;

    // Array accessors: throw when the key is not an array of a compatible element type.
    std::vector<std::string_view> get_string_array(std::string_view key) const;
    std::vector<int64_t> get_int_array(std::string_view key) const;
    std::vector<double> get_float_array(std::string_view key) const;

  private:
    GgufFile() = default;
    void parse();

    std::string path_;
    std::unique_ptr<MappedFile> map_;
    const uint8_t* base_ = nullptr;
    uint64_t size_ = 0;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<GgufKV> kvs_;
    std::vector<GgufTensor> tensors_;
    // An assembled file's own metadata bytes, what keeps its tensors alive, and its mappings.
    std::vector<uint8_t> owned_;
    std::shared_ptr<const void> owner_;
    std::vector<const MappedFile*> mappings_;
};

}  // namespace llada::format
