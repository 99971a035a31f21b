// libFuzzer target: the safetensors reader (header length, JSON header, dtypes, shapes, data
// offsets and their tiling of the data) on arbitrary bytes, then every tensor's bytes read
// through the pointers it hands out. Every rejection must be a llada::Error; anything else (a
// crash, a sanitizer report, another exception) is a finding.
#include <cstddef>
#include <cstdint>

#include "format/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace llada;
    std::unique_ptr<format::SafetensorsFile> f;
    try {
        f = format::SafetensorsFile::from_memory(data, size, "fuzz.safetensors");
    } catch (const Error&) {
        return 0;
    }
    // The reader vouches for every byte range: touch the first and last byte of each.
    unsigned sum = 0;
    for (const auto& t : f->tensors()) {
        if (t.n_bytes > 0) sum += t.data[0] + t.data[t.n_bytes - 1];
        if (f->find(t.name) != &t) __builtin_trap();
    }
    for (const auto& [k, v] : f->metadata())
        sum += static_cast<unsigned>(k.size() + v.size());
    return static_cast<int>(sum & 0);
}
