// GGUF v3 writer for tools and tests: metadata of every type, tensors streamed one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/gguf.h"

namespace llada::format {

class GgufWriter {
  public:
    // Scalars.
    void set_u8(const std::string& key, uint8_t v);
    void set_i8(const std::string& key, int8_t v);
    void set_u16(const std::string& key, uint16_t v);
    void set_i16(const std::string& key, int16_t v);
    void set_u32(const std::string& key, uint32_t v);
    void set_i32(const std::string& key, int32_t v);
    void set_u64(const std::string& key, uint64_t v);
    void set_i64(const std::string& key, int64_t v);
    void set_f32(const std::string& key, float v);
    void set_f64(const std::string& key, double v);
    void set_bool(const std::string& key, bool v);
    void set_string(const std::string& key, const std::string& v);
    // Arrays.
    void set_array_string(const std::string& key, const std::vector<std::string>& v);
    void set_array_i32(const std::string& key, const std::vector<int32_t>& v);
    void set_array_f32(const std::string& key, const std::vector<float>& v);
    // Raw: an already-encoded value body of type `t` (used to copy entries between files and to
    // craft unusual files in tests).
    void set_raw(const std::string& key, GgufType t, std::vector<uint8_t> body);
    // Copies an entry of a parsed file unchanged (general.alignment is skipped: use
    // set_alignment).
    void copy_kv(const GgufKV& kv);

    // Tensor data is produced by `fill` when the file is written, so a multi-GB model never has
    // to be held in memory at once. `fill` writes exactly the tensor's byte size into `dst`.
    using Fill = std::function<void(uint8_t* dst, size_t n_bytes)>;
    void add_tensor(const std::string& name, TensorType type, std::vector<uint64_t> ne, Fill fill);
    void add_tensor(const std::string& name, TensorType type, std::vector<uint64_t> ne,
                    std::vector<uint8_t> bytes);

    void set_alignment(uint32_t alignment);

    // Writes the file; throws llada::Error on I/O failure. Keys keep the order they were set in;
    // setting a key twice replaces its value.
    void write(const std::string& path) const;
    // The whole file in memory (tests).
    std::vector<uint8_t> to_bytes() const;

  private:
    struct KV {
        std::string key;
        GgufType type;
        std::vector<uint8_t> body;
    };
    struct Tensor {
        std::string name;
        TensorType type;
        std::vector<uint64_t> ne;
        uint64_t n_bytes;
        Fill fill;
    };
    void put(const std::string& key, GgufType t, std::vector<uint8_t> body);
    std::vector<uint8_t> header() const;

    std::vector<KV> kvs_;
    std::vector<Tensor> tensors_;
    uint32_t alignment_ = 32;
};

}  // namespace llada::format
