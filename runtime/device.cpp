// Defaults of the device interface, for devices without static shapes or a cost model.
#include "runtime/device.h"

#include <vector>

namespace llada::runtime {
namespace {

class HostBuffer : public DeviceBuffer {
  public:
    explicit HostBuffer(size_t bytes) : bytes_(bytes) {}
    size_t size() const override { return bytes_.size(); }
    void* map() override {
        mapped_ = true;
        return bytes_.data();
    }
    void unmap() override { mapped_ = false; }
    bool mapped() const override { return mapped_; }

  private:
    std::vector<uint8_t> bytes_;
    bool mapped_ = false;
};

}  // namespace

DeviceCaps Device::caps() const {
    DeviceCaps c;
    c.name = name();
    return c;
}

std::vector<LatencyEntry> Device::latency_table(const Plan&, std::span<const int64_t>, int64_t) {
    return {};
}

std::unique_ptr<DeviceBuffer> Device::alloc_buffer(size_t bytes) {
    return std::make_unique<HostBuffer>(bytes);
}

}  // namespace llada::runtime
