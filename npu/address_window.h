// The NPU's device-visible address window: a fixed range of bytes (e.g. 3.5 GiB per session)
// into which buffers are mapped and from which they are unmapped. First-fit placement with
// page alignment; counts mappings and measures external fragmentation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

namespace llada::npu {

class AddressWindow {
  public:
    explicit AddressWindow(size_t capacity, size_t align = 4096);

    // Maps `bytes` at the lowest offset with room (first fit); nullopt when no hole is large
    // enough (the caller unmaps something and retries).
    std::optional<size_t> map(size_t bytes);
    // Unmaps the mapping that starts at `offset` (an invariant breach if there is none).
    void unmap(size_t offset);

    size_t capacity() const { return capacity_; }
    size_t align() const { return align_; }
    size_t aligned(size_t bytes) const { return (bytes + align_ - 1) / align_ * align_; }
    size_t used() const { return used_; }
    size_t peak_used() const { return peak_; }
    size_t free_bytes() const { return capacity_ - used_; }
    size_t largest_free() const;
    size_t live() const { return live_.size(); }
    int64_t maps() const { return maps_; }
    int64_t unmaps() const { return unmaps_; }
    // External fragmentation: 1 - largest hole / free bytes (0 when nothing or all is free).
    double fragmentation() const;

  private:
    size_t capacity_, align_;
    std::map<size_t, size_t> live_;  // offset -> aligned size
    size_t used_ = 0, peak_ = 0;
    int64_t maps_ = 0, unmaps_ = 0;
};

}  // namespace llada::npu
