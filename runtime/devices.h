// Making a device by name, as the tools' --device / --npu-profile flags ask for it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"

namespace llada::runtime {

struct DeviceConfig {
    std::string device = "cpu";        // "cpu" or "npu-sim"
    std::string profile;               // npu-sim: an NPU profile (default sm8750); cpu: an
                                       // optional CPU profile to project onto (sm8750-cpu)
    std::string overrides;             // profile parameters, "key=value,..."
    std::string memory = "optimised";  // npu-sim: "optimised" or "baseline"
    std::string weights = "model";     // npu-sim: tile formats, "model" or "tq4"
    bool timing_only = false;          // project without computing (outputs are zeros)
    std::vector<int64_t> buckets;      // npu-sim: static row shapes (empty: multiples of 32)
};

std::vector<std::string> device_names();  // {"cpu", "npu-sim"}
// Throws llada::Error naming the problem (unknown device or profile, bad options).
std::unique_ptr<Device> make_device(const DeviceConfig& config, ThreadPool& pool);

}  // namespace llada::runtime
