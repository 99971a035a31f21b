// Making a device by name.
#include "runtime/devices.h"

#include <algorithm>

#include "npu/profile.h"
#include "runtime/npu_device.h"
#include "util/error.h"

namespace llada::runtime {

std::vector<std::string> device_names() {
    return {"cpu", "npu-sim"};
}

std::unique_ptr<Device> make_device(const DeviceConfig& c, ThreadPool& pool) {
    if (c.device == "cpu") {
        if (c.memory != "optimised" || c.weights != "model" || !c.buckets.empty()) {
            throw Error("--npu-memory, --npu-weights and --npu-buckets apply to --device npu-sim");
        }
        CpuDeviceOptions o;
        o.projection_profile = c.profile;
        o.profile_overrides = c.overrides;
        o.timing_only = c.timing_only;
        if (!c.overrides.empty() && c.profile.empty()) {
            throw Error("profile overrides need a profile (--npu-profile sm8750-cpu)");
        }
        return make_cpu_device(pool, o);
    }
    if (c.device == "npu-sim") {
        NpuSimOptions o;
        if (!c.profile.empty()) o.profile = c.profile;
        o.profile_overrides = c.overrides;
        o.memory = c.memory;
        o.weights = c.weights;
        o.timing_only = c.timing_only;
        o.buckets = c.buckets;
        return make_npu_sim_device(pool, o);
    }
    throw Error("unknown device '" + c.device + "' (known: cpu, npu-sim)");
}

CompanionCpu companion_cpu(const DeviceReport* rep) {
    CompanionCpu c;
    if (rep == nullptr || !rep->projected) return c;
    const npu::Profile p = npu::find_profile(rep->profile);
    c.device.projection_profile = p.kind == npu::Profile::Kind::Cpu ? p.name : p.cpu_profile;
    if (p.dram_pair_gbps > 0.0 && p.kind == npu::Profile::Kind::Npu) {
        c.contention = std::max(0.0, 2.0 * p.dram_gbps / p.dram_pair_gbps - 1.0);
    }
    c.device.timing_only = !rep->functional;
    if (!c.device.projection_profile.empty()) {
        c.copy_gbps = npu::find_profile(c.device.projection_profile).host_copy_gbps;
    }
    return c;
}

}  // namespace llada::runtime
