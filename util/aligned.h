// 64-byte-aligned byte buffers whose allocation failure is a clear llada::Error naming the buffer
// and its size (std::aligned_alloc returns null, which would otherwise be written through).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "util/error.h"

namespace llada {

struct AlignedFree {
    void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t[], AlignedFree>;

// "N.N MiB" for messages.
inline std::string mib(size_t bytes) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
    return b;
}

// `bytes` rounded up to a multiple of 64 (at least 64), 64-byte aligned; throws llada::Error
// ("out of memory: cannot allocate 12.0 MiB for WHAT") when the allocation fails.
inline AlignedBytes aligned_bytes(size_t bytes, const std::string& what) {
    const size_t n = bytes < 64 ? 64 : (bytes + 63) / 64 * 64;
    if (n < bytes) throw Error("out of memory: " + what + " would need more than 2^64 bytes");
    AlignedBytes p(static_cast<uint8_t*>(std::aligned_alloc(64, n)));
    if (!p) throw Error("out of memory: cannot allocate " + mib(n) + " for " + what);
    return p;
}

}  // namespace llada
