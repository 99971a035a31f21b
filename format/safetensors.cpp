// safetensors reader over a read-only mmap, with every size, offset and shape checked.
#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.h"

namespace llada::format {
namespace {

struct DtypeInfo {
    StDtype type;
    const char* name;
    size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {StDtype::BOOL, "BOOL", 1},       {StDtype::U8, "U8", 1},           {StDtype::I8, "I8", 1},
    {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E5M2, "F8_E5M2", 1}, {StDtype::I16, "I16", 2},
    {StDtype::U16, "U16", 2},         {StDtype::F16, "F16", 2},         {StDtype::BF16, "BF16", 2},
    {StDtype::I32, "I32", 4},         {StDtype::U32, "U32", 4},         {StDtype::F32, "F32", 4},
    {StDtype::F64, "F64", 8},         {StDtype::I64, "I64", 8},         {StDtype::U64, "U64", 8},
};

const DtypeInfo* find_dtype(std::string_view name) {
    for (const auto& d : kDtypes) {
        if (name == d.name) return &d;
    }
    return nullptr;
}

std::string dtype_list() {
    std::string s;
    for (const auto& d : kDtypes)
        s += (s.empty() ? "" : ", ") + std::string(d.name);
    return s;
}

}  // namespace

const char* st_dtype_name(StDtype t) {
    for (const auto& d : kDtypes) {
        if (d.type == t) return d.name;
    }
    return "?";
}

size_t st_dtype_size(StDtype t) {
    for (const auto& d : kDtypes) {
        if (d.type == t) return d.size;
    }
    return 0;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    f->map_ = MappedFile::open(path);
    f->base_ = f->map_->data();
    f->size_ = f->map_->size();
    f->parse();
    return f;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::from_memory(const uint8_t* data, size_t size,
                                                              std::string name) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = std::move(name);
    f->base_ = data;
    f->size_ = size;
    f->parse();
    return f;
}

const SafeTensor* SafetensorsFile::find(std::string_view name) const {
    auto it = by_name_.find(std::string(name));
    return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::parse() {
    const std::string where = "safetensors file '" + path_ + "'";
    auto fail = [&](const std::string& what) -> void { throw Error(where + ": " + what); };
    if (size_ < 8) {
        fail("truncated: " + std::to_string(size_) +
             " bytes, fewer than the 8 of the header length");
    }
    uint64_t n_header = 0;
    std::memcpy(&n_header, base_, 8);  // little-endian, as every host this builds for
    if (n_header > size_ - 8) {
        fail("the header length " + std::to_string(n_header) + " exceeds the " +
             std::to_string(size_ - 8) + " bytes after it");
    }
    if (n_header > kMaxHeaderBytes) {
        fail("the header length " + std::to_string(n_header) + " is above the limit of " +
             std::to_string(kMaxHeaderBytes) + " bytes");
    }
    const char* text = reinterpret_cast<const char*>(base_ + 8);
    if (n_header == 0 || text[0] != '{') fail("the header is not a JSON object");

    // Duplicate tensor names would silently keep one of the two: the parser callback sees
    // every key of the top-level object.
    std::set<std::string> seen;
    std::string duplicate;
    const auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& v) {
        if (depth == 1 && ev == nlohmann::json::parse_event_t::key && duplicate.empty()) {
            const std::string k = v.get<std::string>();
            if (!seen.insert(k).second) duplicate = k;
        }
        return true;
    };
    nlohmann::json h = nlohmann::json::parse(text, text + n_header, cb, /*allow_exceptions=*/false);
    if (h.is_discarded() || !h.is_object()) fail("the header is not valid JSON");
    if (!duplicate.empty()) fail("the header names '" + duplicate + "' twice");

    const uint64_t data_size = size_ - 8 - n_header;
    const uint8_t* data = base_ + 8 + n_header;
    struct Range {
        uint64_t begin, end;
        size_t index;
    };
    std::vector<Range> ranges;
    for (auto it = h.begin(); it != h.end(); ++it) {
        const std::string& name = it.key();
        const nlohmann::json& e = it.value();
        if (name == "__metadata__") {
            if (!e.is_object()) fail("'__metadata__' is not an object");
            for (auto m = e.begin(); m != e.end(); ++m) {
                if (!m.value().is_string()) {
                    fail("'__metadata__' entry '" + m.key() + "' is not a string");
                }
                metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const std::string t = "tensor '" + name + "'";
        if (name.empty()) fail("a tensor has an empty name");
        if (!e.is_object()) fail(t + ": not an object");
        if (!e.contains("dtype") || !e["dtype"].is_string()) fail(t + ": no string 'dtype'");
        const std::string dt = e["dtype"].get<std::string>();
        const DtypeInfo* info = find_dtype(dt);
        if (!info) fail(t + ": unknown dtype '" + dt + "' (known: " + dtype_list() + ")");
        if (!e.contains("shape") || !e["shape"].is_array()) fail(t + ": no array 'shape'");
        if (!e.contains("data_offsets") || !e["data_offsets"].is_array() ||
            e["data_offsets"].size() != 2) {
            fail(t + ": 'data_offsets' is not an array of two offsets");
        }
        SafeTensor st;
        st.name = name;
        st.dtype = info->type;
        for (const auto& d : e["shape"]) {
            if (!d.is_number_unsigned()) fail(t + ": shape entry " + d.dump() + " is not a size");
            const uint64_t n = d.get<uint64_t>();
            if (n != 0 && st.n_elements > std::numeric_limits<uint64_t>::max() / n) {
                fail(t + ": the shape's element count overflows");
            }
            st.shape.push_back(n);
            st.n_elements *= n;
        }
        const auto& off = e["data_offsets"];
        if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
            fail(t + ": 'data_offsets' are not byte offsets");
        }
        const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
        if (begin > end || end > data_size) {
            fail(t + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 ") do not lie within the " + std::to_string(data_size) + " data bytes");
        }
        if (st.n_elements > std::numeric_limits<uint64_t>::max() / info->size ||
            st.n_elements * info->size != end - begin) {
            fail(t + ": shape and dtype " + dt + " need " + std::to_string(st.n_elements) + " x " +
                 std::to_string(info->size) + " bytes, data_offsets give " +
                 std::to_string(end - begin));
        }
        st.n_bytes = end - begin;
        st.data = data + begin;
        ranges.push_back({begin, end, tensors_.size()});
        tensors_.push_back(std::move(st));
    }
    // The ranges must tile [0, data_size) in order.
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t at = 0;
    for (const Range& r : ranges) {
        if (r.begin != at) {
            fail("tensor '" + tensors_[r.index].name + "' starts at data byte " +
                 std::to_string(r.begin) +
                 (r.begin < at ? ", inside the tensor before it"
                               : ", leaving a gap after byte " + std::to_string(at)));
        }
        at = r.end;
    }
    if (at != data_size) {
        fail("the tensors end at data byte " + std::to_string(at) + " but the file has " +
             std::to_string(data_size) + " data bytes");
    }
    std::vector<SafeTensor> ordered;
    ordered.reserve(tensors_.size());
    for (const Range& r : ranges)
        ordered.push_back(std::move(tensors_[r.index]));
    tensors_ = std::move(ordered);
    for (size_t i = 0; i < tensors_.size(); ++i)
        by_name_[tensors_[i].name] = i;
}

}  // namespace llada::format
