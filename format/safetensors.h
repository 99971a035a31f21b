// safetensors reader (Hugging Face's tensor container) over a read-only mmap, with every size,
// offset and shape checked. Layout (docs/formats.md): an 8-byte little-endian header length N,
// N bytes of JSON naming each tensor's dtype, shape and byte range [begin, end) within the data
// that follows the header, then the data. The byte ranges must tile the data exactly (no gaps,
// no overlaps, nothing after the last), as the reference implementation requires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/mapped_file.h"

namespace llada::format {

enum class StDtype {
    BOOL,
    U8,
    I8,
    F8_E4M3,
    F8_E5M2,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    F64,
    I64,
    U64
};

const char* st_dtype_name(StDtype t);
size_t st_dtype_size(StDtype t);

// A tensor as the header describes it. Shape in the file's order (row-major: the last
// dimension is the fastest), which is the reverse of GGUF's ne[].
struct SafeTensor {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<uint64_t> shape;
    uint64_t n_elements = 1;
    uint64_t n_bytes = 0;
    const uint8_t* data = nullptr;  // inside the mapping (not aligned: read with memcpy)
};

class SafetensorsFile {
  public:
    // Throws llada::Error naming the file and the tensor or field at fault.
    static std::unique_ptr<SafetensorsFile> open(const std::string& path);
    // Parses a buffer the caller keeps alive (tests, fuzzing).
    static std::unique_ptr<SafetensorsFile> from_memory(const uint8_t* data, size_t size,
                                                        std::string name = "<memory>");

    const std::string& path() const { return path_; }
    // In the order of their data (by begin offset).
    const std::vector<SafeTensor>& tensors() const { return tensors_; }
    const SafeTensor* find(std::string_view name) const;
    // The optional "__metadata__" object (string to string).
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // The file's mapping (null for a buffer parsed from memory).
    const MappedFile* mapping() const { return map_.get(); }

    // Headers larger than this are refused (the reference implementation's limit).
    static constexpr uint64_t kMaxHeaderBytes = 100u << 20;

  private:
    SafetensorsFile() = default;
    void parse();

    std::string path_;
    std::unique_ptr<MappedFile> map_;
    const uint8_t* base_ = nullptr;
    uint64_t size_ = 0;
    std::vector<SafeTensor> tensors_;
    std::map<std::string, size_t> by_name_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace llada::format
