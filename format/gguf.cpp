// GGUF v2/v3 reader over a read-only mmap, with every count, offset and size checked.
#include "format/gguf.h"

#include <cstring>
#include <limits>
#include <unordered_set>

#include "util/error.h"

namespace llada::format {
namespace {

// Arrays may nest; a hostile file could nest deeply to exhaust the stack.
constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;

size_t scalar_size(GgufType t) {
    switch (t) {
        case GgufType::UINT8:
        case GgufType::INT8:
        case GgufType::BOOL:
            return 1;
        case GgufType::UINT16:
        case GgufType::INT16:
            return 2;
        case GgufType::UINT32:
        case GgufType::INT32:
        case GgufType::FLOAT32:
            return 4;
        case GgufType::UINT64:
        case GgufType::INT64:
        case GgufType::FLOAT64:
            return 8;
        case GgufType::STRING:
        case GgufType::ARRAY:
            return 0;
    }
    return 0;
}

bool valid_type(uint32_t t) {
    return t <= static_cast<uint32_t>(GgufType::FLOAT64);
}

// A bounds-checked little-endian cursor. `what` names the item being read for error messages.
class Cursor {
  public:
    Cursor(const uint8_t* base, uint64_t size, const std::string& file)
        : base_(base), size_(size), file_(file) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    [[noreturn]] void fail(const std::string& what, const std::string& problem) const {
        throw Error("GGUF file '" + file_ + "': " + what + ": " + problem + " (at byte " +
                    std::to_string(pos_) + " of " + std::to_string(size_) + ")");
    }

    void need(uint64_t n, const std::string& what) const {
        if (n > remaining()) {
            fail(what, "truncated: needs " + std::to_string(n) + " bytes, " +
                           std::to_string(remaining()) + " remain");
        }
    }

    template <typename T>
    T read(const std::string& what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string_view read_string(const std::string& what) {
        uint64_t len = read<uint64_t>(what + " (string length)");
        if (len > remaining()) {
            fail(what, "string length " + std::to_string(len) + " exceeds the " +
                           std::to_string(remaining()) + " bytes left in the file");
        }
        std::string_view s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
        pos_ += len;
        return s;
    }

    void skip(uint64_t n, const std::string& what) {
        need(n, what);
        pos_ += n;
    }

    const uint8_t* here() const { return base_ + pos_; }

  private:
    const uint8_t* base_;
    uint64_t size_;
    uint64_t pos_ = 0;
    const std::string& file_;
};

// Reads one value of type `t` (the type id was already read). Arrays recurse.
void read_value(Cursor& c, GgufType t, GgufValue& v, const std::string& what, int depth) {
    v.type = t;
    switch (t) {
        case GgufType::UINT8:
            v.u = c.read<uint8_t>(what);
            v.i = static_cast<int64_t>(v.u);
            break;
        case GgufType::INT8:
            v.i = c.read<int8_t>(what);
            break;
        case GgufType::UINT16:
            v.u = c.read<uint16_t>(what);
            v.i = static_cast<int64_t>(v.u);
            break;
        case GgufType::INT16:
            v.i = c.read<int16_t>(what);
            break;
        case GgufType::UINT32:
            v.u = c.read<uint32_t>(what);
            v.i = static_cast<int64_t>(v.u);
            break;
        case GgufType::INT32:
            v.i = c.read<int32_t>(what);
            break;
        case GgufType::UINT64:
            v.u = c.read<uint64_t>(what);
            v.i = static_cast<int64_t>(v.u);
            break;
        case GgufType::INT64:
            v.i = c.read<int64_t>(what);
            break;
        case GgufType::FLOAT32:
            v.f = c.read<float>(what);
            break;
        case GgufType::FLOAT64:
            v.f = c.read<double>(what);
            break;
        case GgufType::BOOL: {
            uint8_t b = c.read<uint8_t>(what);
            if (b > 1) c.fail(what, "bool value " + std::to_string(b) + " is neither 0 nor 1");
            v.u = b;
            v.i = b;
            break;
        }
        case GgufType::STRING:
            v.str = c.read_string(what);
            break;
        case GgufType::ARRAY: {
            if (depth >= kMaxArrayDepth) c.fail(what, "arrays nested too deeply");
            uint32_t et = c.read<uint32_t>(what + " (array element type)");
            if (!valid_type(et)) {
                c.fail(what, "array element type " + std::to_string(et) + " is not a GGUF type");
            }
            v.elem_type = static_cast<GgufType>(et);
            v.count = c.read<uint64_t>(what + " (array length)");
            v.data = c.here();
            uint64_t start = c.pos();
            size_t es = scalar_size(v.elem_type);
            if (es > 0) {
                if (v.count > c.remaining() / es) {
                    c.fail(what, "array of " + std::to_string(v.count) + " " +
                                     gguf_type_name(v.elem_type) + " exceeds the file");
                }
                c.skip(v.count * es, what);
            } else {
                // Strings and nested arrays take at least 8 bytes each: a cheap bound first.
                if (v.count > c.remaining() / 8) {
                    c.fail(what, "array of " + std::to_string(v.count) + " " +
                                     gguf_type_name(v.elem_type) + " exceeds the file");
                }
                GgufValue elem;
                for (uint64_t k = 0; k < v.count; ++k) {
                    read_value(c, v.elem_type, elem, what + "[" + std::to_string(k) + "]",
                               depth + 1);
                }
            }
            v.data_bytes = c.pos() - start;
            break;
        }
    }
}

bool is_integer(GgufType t) {
    switch (t) {
        case GgufType::UINT8:
        case GgufType::INT8:
        case GgufType::UINT16:
        case GgufType::INT16:
        case GgufType::UINT32:
        case GgufType::INT32:
        case GgufType::UINT64:
        case GgufType::INT64:
            return true;
        default:
            return false;
    }
}

bool is_signed(GgufType t) {
    return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 ||
           t == GgufType::INT64;
}

int64_t array_int_at(const GgufValue& v, uint64_t k) {
    const uint8_t* p = v.data + k * scalar_size(v.elem_type);
    switch (v.elem_type) {
        case GgufType::UINT8:
        case GgufType::BOOL:
            return *p;
        case GgufType::INT8:
            return static_cast<int8_t>(*p);
        case GgufType::UINT16: {
            uint16_t x;
            std::memcpy(&x, p, 2);
            return x;
        }
        case GgufType::INT16: {
            int16_t x;
            std::memcpy(&x, p, 2);
            return x;
        }
        case GgufType::UINT32: {
            uint32_t x;
            std::memcpy(&x, p, 4);
            return x;
        }
        case GgufType::INT32: {
            int32_t x;
            std::memcpy(&x, p, 4);
            return x;
        }
        case GgufType::UINT64:
        case GgufType::INT64: {
            int64_t x;
            std::memcpy(&x, p, 8);
            return x;
        }
        default:
            return 0;
    }
}

}  // namespace

const char* gguf_type_name(GgufType t) {
    switch (t) {
        case GgufType::UINT8:
            return "UINT8";
        case GgufType::INT8:
            return "INT8";
        case GgufType::UINT16:
            return "UINT16";
        case GgufType::INT16:
            return "INT16";
        case GgufType::UINT32:
            return "UINT32";
        case GgufType::INT32:
            return "INT32";
        case GgufType::FLOAT32:
            return "FLOAT32";
        case GgufType::BOOL:
            return "BOOL";
        case GgufType::STRING:
            return "STRING";
        case GgufType::ARRAY:
            return "ARRAY";
        case GgufType::UINT64:
            return "UINT64";
        case GgufType::INT64:
            return "INT64";
        case GgufType::FLOAT64:
            return "FLOAT64";
    }
    return "?";
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = path;
    f->map_ = MappedFile::open(path);
    f->base_ = f->map_->data();
    f->size_ = f->map_->size();
    f->parse();
    return f;
}

std::unique_ptr<GgufFile> GgufFile::from_memory(const uint8_t* data, size_t size,
                                                std::string name) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = std::move(name);
    f->base_ = data;
    f->size_ = size;
    f->parse();
    return f;
}

std::unique_ptr<GgufFile> GgufFile::assemble(std::vector<uint8_t> metadata, std::string name,
                                             std::vector<GgufTensor> tensors,
                                             std::shared_ptr<const void> owner,
                                             std::vector<const MappedFile*> mappings) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->owned_ = std::move(metadata);
    f->path_ = std::move(name);
    f->base_ = f->owned_.data();
    f->size_ = f->owned_.size();
    f->parse();
    if (!f->tensors_.empty()) throw Error("GgufFile::assemble: the metadata must hold no tensors");
    f->tensors_ = std::move(tensors);
    f->owner_ = std::move(owner);
    f->mappings_ = std::move(mappings);
    return f;
}

void GgufFile::release(const GgufTensor& t) const {
    if (map_) map_->release(t.data, t.n_bytes);
    for (const MappedFile* m : mappings_) {
        if (t.data >= m->data() && t.data + t.n_bytes <= m->data() + m->size())
            m->release(t.data, t.n_bytes);
    }
}

void GgufFile::parse() {
    Cursor c(base_, size_, path_);
    c.need(4, "magic");
    if (std::memcmp(base_, "GGUF", 4) != 0) c.fail("magic", "not a GGUF file (no 'GGUF' magic)");
    c.skip(4, "magic");
    version_ = c.read<uint32_t>("version");
    if (version_ == 1) c.fail("version", "GGUF v1 is not supported (only v2 and v3)");
    if (version_ != 2 && version_ != 3) {
        c.fail("version", "unsupported GGUF version " + std::to_string(version_) +
                              " (expected 2 or 3; a big-endian file is not supported)");
    }
    uint64_t n_tensors = c.read<uint64_t>("tensor count");
    uint64_t n_kv = c.read<uint64_t>("metadata count");
    // Each metadata entry needs >= 12 bytes (key length + type), each tensor info >= 24.
    if (n_kv > c.remaining() / 12) {
        c.fail("metadata count", std::to_string(n_kv) + " entries cannot fit in the file");
    }
    if (n_tensors > c.remaining() / 24) {
        c.fail("tensor count", std::to_string(n_tensors) + " tensors cannot fit in the file");
    }

    std::unordered_set<std::string_view> seen_keys;
    kvs_.reserve(n_kv);
    for (uint64_t k = 0; k < n_kv; ++k) {
        std::string ctx = "metadata entry " + std::to_string(k);
        std::string_view key = c.read_string(ctx + " key");
        std::string what = "metadata key '" + std::string(key) + "'";
        if (!seen_keys.insert(key).second) c.fail(what, "duplicate key");
        uint32_t t = c.read<uint32_t>(what + " (type)");
        if (!valid_type(t)) c.fail(what, "value type " + std::to_string(t) + " is not a GGUF type");
        GgufKV kv;
        kv.key = std::string(key);
        read_value(c, static_cast<GgufType>(t), kv.value, what, 0);
        kvs_.push_back(std::move(kv));
    }

    if (const GgufValue* a = find("general.alignment")) {
        if (a->type != GgufType::UINT32) {
            throw Error("GGUF file '" + path_ + "': metadata key 'general.alignment' has type " +
                        gguf_type_name(a->type) + ", expected UINT32");
        }
        if (a->u == 0 || (a->u & (a->u - 1)) != 0) {
            throw Error("GGUF file '" + path_ + "': metadata key 'general.alignment' = " +
                        std::to_string(a->u) + " is not a power of two");
        }
        alignment_ = a->u;
    }

    std::unordered_set<std::string_view> seen_tensors;
    tensors_.reserve(n_tensors);
    for (uint64_t k = 0; k < n_tensors; ++k) {
        std::string ctx = "tensor info " + std::to_string(k);
        GgufTensor t;
        std::string_view name = c.read_string(ctx + " name");
        t.name = std::string(name);
        std::string what = "tensor '" + t.name + "'";
        t.n_dims = c.read<uint32_t>(what + " (dimension count)");
        if (t.n_dims > kMaxDims) {
            c.fail(what, std::to_string(t.n_dims) + " dimensions (at most 4 are allowed)");
        }
        uint64_t n = 1;
        for (uint32_t d = 0; d < t.n_dims; ++d) {
            t.ne[d] = c.read<uint64_t>(what + " (dimension " + std::to_string(d) + ")");
            if (t.ne[d] == 0) c.fail(what, "dimension " + std::to_string(d) + " is zero");
            if (t.ne[d] > std::numeric_limits<uint64_t>::max() / n) {
                c.fail(what, "element count overflows 64 bits");
            }
            n *= t.ne[d];
        }
        t.n_elements = n;
        uint32_t type = c.read<uint32_t>(what + " (type)");
        auto info = tensor_type_info(type);
        if (!info) {
            c.fail(what, "tensor type " + std::string(tensor_type_name_any(type)) + " (ggml type " +
                             std::to_string(type) +
                             ") is not supported; supported: " + supported_type_names());
        }
        t.type = info->type;
        std::string why;
        const auto bytes = tensor_bytes(*info, t.ne, t.n_dims, &why);
        if (!bytes) c.fail(what, why);
        t.n_bytes = *bytes;
        t.offset = c.read<uint64_t>(what + " (data offset)");
        if (t.offset % alignment_ != 0) {
            c.fail(what, "data offset " + std::to_string(t.offset) +
                             " is not a multiple of the alignment " + std::to_string(alignment_));
        }
        if (!seen_tensors.insert(name).second) c.fail(what, "duplicate tensor name");
        tensors_.push_back(std::move(t));
    }

    uint64_t pos = c.pos();
    uint64_t pad = (alignment_ - pos % alignment_) % alignment_;
    data_offset_ = pos + pad;
    if (n_tensors > 0 && data_offset_ > size_) {
        throw Error("GGUF file '" + path_ + "': truncated before the tensor data section (needs " +
                    std::to_string(data_offset_) + " bytes, file has " + std::to_string(size_) +
                    ")");
    }
    uint64_t data_size = size_ >= data_offset_ ? size_ - data_offset_ : 0;
    for (auto& t : tensors_) {
        if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
            throw Error("GGUF file '" + path_ + "': tensor '" + t.name + "' data [" +
                        std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
                        ") lies outside the data section of " + std::to_string(data_size) +
                        " bytes (truncated or corrupted file)");
        }
        t.data = base_ + data_offset_ + t.offset;
    }
}

const GgufValue* GgufFile::find(std::string_view key) const {
    for (const auto& kv : kvs_) {
        if (kv.key == key) return &kv.value;
    }
    return nullptr;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
    for (const auto& t : tensors_) {
        if (t.name == name) return &t;
    }
    return nullptr;
}

namespace {
[[noreturn]] void bad_type(const std::string& path, std::string_view key, GgufType got,
                           const char* expected) {
    throw Error("GGUF file '" + path + "': metadata key '" + std::string(key) + "' has type " +
                gguf_type_name(got) + ", expected " + expected);
}
[[noreturn]] void missing(const std::string& path, std::string_view key) {
    throw Error("GGUF file '" + path + "': required metadata key '" + std::string(key) +
                "' is missing");
}
}  // namespace

std::optional<uint64_t> GgufFile::opt_uint(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!is_integer(v->type)) bad_type(path_, key, v->type, "an integer");
    if (is_signed(v->type) && v->i < 0) {
        throw Error("GGUF file '" + path_ + "': metadata key '" + std::string(key) +
                    "' is negative (" + std::to_string(v->i) + ")");
    }
    return is_signed(v->type) ? static_cast<uint64_t>(v->i) : v->u;
}

std::optional<int64_t> GgufFile::opt_int(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!is_integer(v->type)) bad_type(path_, key, v->type, "an integer");
    return v->i;
}

std::optional<double> GgufFile::opt_float(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type == GgufType::FLOAT32 || v->type == GgufType::FLOAT64) return v->f;
    if (is_integer(v->type)) return static_cast<double>(v->i);
    bad_type(path_, key, v->type, "a number");
}

std::optional<bool> GgufFile::opt_bool(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufType::BOOL) bad_type(path_, key, v->type, "BOOL");
    return v->u != 0;
}

std::optional<std::string_view> GgufFile::opt_string(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufType::STRING) bad_type(path_, key, v->type, "STRING");
    return v->str;
}

uint64_t GgufFile::get_uint(std::string_view key) const {
    auto v = opt_uint(key);
    if (!v) missing(path_, key);
    return *v;
}

double GgufFile::get_float(std::string_view key) const {
    auto v = opt_float(key);
    if (!v) missing(path_, key);
    return *v;
}

std::string_view GgufFile::get_string(std::string_view key) const {
    auto v = opt_string(key);
    if (!v) missing(path_, key);
    return *v;
}

std::vector<std::string_view> GgufFile::get_string_array(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) missing(path_, key);
    if (v->type != GgufType::ARRAY || v->elem_type != GgufType::STRING) {
        bad_type(path_, key, v->type, "ARRAY of STRING");
    }
    // The parser already validated every string's extent.
    std::vector<std::string_view> out;
    out.reserve(v->count);
    const uint8_t* p = v->data;
    for (uint64_t k = 0; k < v->count; ++k) {
        uint64_t len;
        std::memcpy(&len, p, 8);
        out.emplace_back(reinterpret_cast<const char*>(p + 8), static_cast<size_t>(len));
        p += 8 + len;
    }
    return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) missing(path_, key);
    if (v->type != GgufType::ARRAY ||
        !(is_integer(v->elem_type) || v->elem_type == GgufType::BOOL)) {
        bad_type(path_, key, v->type, "ARRAY of integers");
    }
    std::vector<int64_t> out(v->count);
    for (uint64_t k = 0; k < v->count; ++k)
        out[k] = array_int_at(*v, k);
    return out;
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) missing(path_, key);
    if (v->type != GgufType::ARRAY) bad_type(path_, key, v->type, "ARRAY of numbers");
    std::vector<double> out(v->count);
    for (uint64_t k = 0; k < v->count; ++k) {
        const uint8_t* p = v->data + k * scalar_size(v->elem_type);
        if (v->elem_type == GgufType::FLOAT32) {
            float x;
            std::memcpy(&x, p, 4);
            out[k] = x;
        } else if (v->elem_type == GgufType::FLOAT64) {
            std::memcpy(&out[k], p, 8);
        } else if (is_integer(v->elem_type)) {
            out[k] = static_cast<double>(array_int_at(*v, k));
        } else {
            bad_type(path_, key, v->elem_type, "ARRAY of numbers");
        }
    }
    return out;
}

}  // namespace llada::format
