// Making a device by name, as the tools' --device / --npu-profile flags ask for it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/device_report.h"

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

// The host CPU beside a device, as a second lane running next to it sees it (progressive
// revision's CPU path). For a projected device (report->projected) the CPU device projects onto
// the profile's CPU (the profile itself when it is a CPU profile; an NPU profile's cpu_profile,
// "" when it names none), skips the math when the device does, and the lanes' overlap loses
// `contention` of its time to shared DRAM (two engines reach dram_pair_gbps together, not twice
// dram_gbps: an upper bound that takes both lanes as bandwidth-bound while they overlap);
// copy_gbps is the projected CPU's copy bandwidth. Otherwise: a plain CPU device, no projection.
struct CompanionCpu {
    CpuDeviceOptions device;
    double contention = 0.0;
    double copy_gbps = 0.0;
};
CompanionCpu companion_cpu(const DeviceReport* report);

}  // namespace llada::runtime
