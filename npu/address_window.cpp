// The NPU's device-visible address window (first-fit placement).
#include "npu/address_window.h"

#include <algorithm>
#include <cassert>

namespace llada::npu {

AddressWindow::AddressWindow(size_t capacity, size_t align)
    : capacity_(capacity / align * align), align_(align) {}

std::optional<size_t> AddressWindow::map(size_t bytes) {
    const size_t size = aligned(std::max<size_t>(bytes, 1));
    size_t cursor = 0;
    for (const auto& [off, sz] : live_) {
        if (off - cursor >= size) break;
        cursor = off + sz;
    }
    if (cursor + size > capacity_) return std::nullopt;
    live_.emplace(cursor, size);
    used_ += size;
    peak_ = std::max(peak_, used_);
    ++maps_;
    return cursor;
}

void AddressWindow::unmap(size_t offset) {
    auto it = live_.find(offset);
    assert(it != live_.end() && "unmap of an offset that is not mapped");
    used_ -= it->second;
    live_.erase(it);
    ++unmaps_;
}

size_t AddressWindow::largest_free() const {
    size_t best = 0, cursor = 0;
    for (const auto& [off, sz] : live_) {
        best = std::max(best, off - cursor);
        cursor = off + sz;
    }
    return std::max(best, capacity_ - cursor);
}

double AddressWindow::fragmentation() const {
    const size_t free = free_bytes();
    if (free == 0) return 0.0;
    return 1.0 - static_cast<double>(largest_free()) / static_cast<double>(free);
}

}  // namespace llada::npu
