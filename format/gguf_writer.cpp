// GGUF v3 writer for tools and tests: metadata of every type, tensors streamed one at a time.
#include "format/gguf_writer.h"

#include "format/output_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "util/error.h"

namespace llada::format {
namespace {

template <typename T>
void append(std::vector<uint8_t>& out, T v) {
    size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
}

void append_string(std::vector<uint8_t>& out, const std::string& s) {
    append<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

template <typename T>
std::vector<uint8_t> scalar(T v) {
    std::vector<uint8_t> b;
    append(b, v);
    return b;
}

}  // namespace

void GgufWriter::put(const std::string& key, GgufType t, std::vector<uint8_t> body) {
    if (key == "general.alignment") {
        throw Error("GgufWriter: set general.alignment with set_alignment()");
    }
    for (auto& kv : kvs_) {
        if (kv.key == key) {
            kv.type = t;
            kv.body = std::move(body);
            return;
        }
    }
    kvs_.push_back({key, t, std::move(body)});
}

void GgufWriter::set_u8(const std::string& k, uint8_t v) {
    put(k, GgufType::UINT8, scalar(v));
}
void GgufWriter::set_i8(const std::string& k, int8_t v) {
    put(k, GgufType::INT8, scalar(v));
}
void GgufWriter::set_u16(const std::string& k, uint16_t v) {
    put(k, GgufType::UINT16, scalar(v));
}
void GgufWriter::set_i16(const std::string& k, int16_t v) {
    put(k, GgufType::INT16, scalar(v));
}
void GgufWriter::set_u32(const std::string& k, uint32_t v) {
    put(k, GgufType::UINT32, scalar(v));
}
void GgufWriter::set_i32(const std::string& k, int32_t v) {
    put(k, GgufType::INT32, scalar(v));
}
void GgufWriter::set_u64(const std::string& k, uint64_t v) {
    put(k, GgufType::UINT64, scalar(v));
}
void GgufWriter::set_i64(const std::string& k, int64_t v) {
    put(k, GgufType::INT64, scalar(v));
}
void GgufWriter::set_f32(const std::string& k, float v) {
    put(k, GgufType::FLOAT32, scalar(v));
}
void GgufWriter::set_f64(const std::string& k, double v) {
    put(k, GgufType::FLOAT64, scalar(v));
}
void GgufWriter::set_bool(const std::string& k, bool v) {
    put(k, GgufType::BOOL, scalar<uint8_t>(v ? 1 : 0));
}
void GgufWriter::set_string(const std::string& k, const std::string& v) {
    std::vector<uint8_t> b;
    append_string(b, v);
    put(k, GgufType::STRING, std::move(b));
}

void GgufWriter::set_array_string(const std::string& k, const std::vector<std::string>& v) {
    std::vector<uint8_t> b;
    append<uint32_t>(b, static_cast<uint32_t>(GgufType::STRING));
    append<uint64_t>(b, v.size());
    for (const auto& s : v)
        append_string(b, s);
    put(k, GgufType::ARRAY, std::move(b));
}

void GgufWriter::set_array_i32(const std::string& k, const std::vector<int32_t>& v) {
    std::vector<uint8_t> b;
    append<uint32_t>(b, static_cast<uint32_t>(GgufType::INT32));
    append<uint64_t>(b, v.size());
    for (int32_t x : v)
        append(b, x);
    put(k, GgufType::ARRAY, std::move(b));
}

void GgufWriter::set_array_f32(const std::string& k, const std::vector<float>& v) {
    std::vector<uint8_t> b;
    append<uint32_t>(b, static_cast<uint32_t>(GgufType::FLOAT32));
    append<uint64_t>(b, v.size());
    for (float x : v)
        append(b, x);
    put(k, GgufType::ARRAY, std::move(b));
}

void GgufWriter::set_raw(const std::string& key, GgufType t, std::vector<uint8_t> body) {
    put(key, t, std::move(body));
}

void GgufWriter::copy_kv(const GgufKV& kv) {
    if (kv.key == "general.alignment") return;
    const GgufValue& v = kv.value;
    std::vector<uint8_t> b;
    switch (v.type) {
        case GgufType::UINT8:
        case GgufType::BOOL:
            append<uint8_t>(b, static_cast<uint8_t>(v.u));
            break;
        case GgufType::INT8:
            append<int8_t>(b, static_cast<int8_t>(v.i));
            break;
        case GgufType::UINT16:
            append<uint16_t>(b, static_cast<uint16_t>(v.u));
            break;
        case GgufType::INT16:
            append<int16_t>(b, static_cast<int16_t>(v.i));
            break;
        case GgufType::UINT32:
            append<uint32_t>(b, static_cast<uint32_t>(v.u));
            break;
        case GgufType::INT32:
            append<int32_t>(b, static_cast<int32_t>(v.i));
            break;
        case GgufType::UINT64:
            append<uint64_t>(b, v.u);
            break;
        case GgufType::INT64:
            append<int64_t>(b, v.i);
            break;
        case GgufType::FLOAT32:
            append<float>(b, static_cast<float>(v.f));
            break;
        case GgufType::FLOAT64:
            append<double>(b, v.f);
            break;
        case GgufType::STRING:
            append_string(b, std::string(v.str));
            break;
        case GgufType::ARRAY:
            // The elements are already in GGUF encoding in the source file.
            append<uint32_t>(b, static_cast<uint32_t>(v.elem_type));
            append<uint64_t>(b, v.count);
            b.insert(b.end(), v.data, v.data + v.data_bytes);
            break;
    }
    put(kv.key, v.type, std::move(b));
}

void GgufWriter::set_alignment(uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        throw Error("GgufWriter: alignment " + std::to_string(alignment) +
                    " is not a power of two");
    }
    alignment_ = alignment;
}

void GgufWriter::add_tensor(const std::string& name, TensorType type, std::vector<uint64_t> ne,
                            Fill fill) {
    const auto& info = tensor_type_info(type);
    if (ne.empty() || ne.size() > 4) {
        throw Error("GgufWriter: tensor '" + name + "' must have 1 to 4 dimensions");
    }
    std::string why;
    const auto bytes = tensor_bytes(info, ne.data(), static_cast<uint32_t>(ne.size()), &why);
    if (!bytes) throw Error("GgufWriter: tensor '" + name + "': " + why);
    for (const auto& t : tensors_) {
        if (t.name == name) throw Error("GgufWriter: duplicate tensor '" + name + "'");
    }
    tensors_.push_back({name, type, std::move(ne), *bytes, std::move(fill)});
}

void GgufWriter::add_tensor(const std::string& name, TensorType type, std::vector<uint64_t> ne,
                            std::vector<uint8_t> bytes) {
    auto shared = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    add_tensor(name, type, std::move(ne), [shared, name](uint8_t* dst, size_t n) {
        if (shared->size() != n) {
            throw Error("GgufWriter: tensor '" + name + "' has " + std::to_string(shared->size()) +
                        " bytes of data, its shape needs " + std::to_string(n));
        }
        if (n > 0) std::memcpy(dst, shared->data(), n);  // an empty vector's data() may be null
    });
}

std::vector<uint8_t> GgufWriter::header() const {
    std::vector<uint8_t> h{'G', 'G', 'U', 'F'};
    append<uint32_t>(h, 3);
    append<uint64_t>(h, tensors_.size());
    bool custom_alignment = alignment_ != 32;
    append<uint64_t>(h, kvs_.size() + (custom_alignment ? 1 : 0));
    if (custom_alignment) {
        append_string(h, "general.alignment");
        append<uint32_t>(h, static_cast<uint32_t>(GgufType::UINT32));
        append<uint32_t>(h, alignment_);
    }
    for (const auto& kv : kvs_) {
        append_string(h, kv.key);
        append<uint32_t>(h, static_cast<uint32_t>(kv.type));
        h.insert(h.end(), kv.body.begin(), kv.body.end());
    }
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        append_string(h, t.name);
        append<uint32_t>(h, static_cast<uint32_t>(t.ne.size()));
        for (uint64_t d : t.ne)
            append<uint64_t>(h, d);
        append<uint32_t>(h, static_cast<uint32_t>(t.type));
        append<uint64_t>(h, offset);
        offset += (t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
    }
    while (h.size() % alignment_ != 0)
        h.push_back(0);
    return h;
}

void GgufWriter::write(const std::string& path) const {
    // Written aside and renamed (format/output_file.h): a failed or interrupted write leaves the
    // old file, which may be the mmapped input of this very tool, untouched.
    OutputFile f(path);
    std::vector<uint8_t> h = header();
    f.write(h.data(), h.size());
    std::vector<uint8_t> buf;
    for (const auto& t : tensors_) {
        uint64_t padded = (t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
        buf.assign(padded, 0);
        t.fill(buf.data(), t.n_bytes);
        f.write(buf.data(), buf.size());
    }
    f.commit();
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
    std::vector<uint8_t> out = header();
    for (const auto& t : tensors_) {
        uint64_t padded = (t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
        size_t at = out.size();
        out.resize(at + padded, 0);
        t.fill(out.data() + at, t.n_bytes);
    }
    return out;
}

}  // namespace llada::format
