// npu-sim: a functional and timing simulator of a Hexagon-class NPU (docs/design.md, "Devices").
// Functionally it runs the plan on the host with the NPU's numerics (runtime/npu_exec.h); its clock
// is the cost model of a profile (npu/), every figure labelled projected. Plans are compiled per
// static shape bucket on first use; weights live in a device window of limited size, managed by the
// baseline (map on use) or the swap-optimised memory runtime (runtime/window_planner.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"

namespace llada::runtime {

struct NpuSimOptions {
    std::string profile = "sm8750";
    std::string profile_overrides;     // "key=value,..." (npu::Profile::apply_overrides)
    std::string memory = "optimised";  // "optimised" or "baseline" (map each tensor on use)
    std::string weights = "model";     // tile formats: "model" or "tq4" (runtime/projection.h)
    bool timing_only = false;          // project without computing: outputs are zeros
    int ring_slots = 2;                // streaming slots of the optimised runtime
    std::vector<int64_t> buckets;      // static row shapes; empty = every multiple of 32
};

// Throws llada::Error for an unknown profile, a CPU profile, unknown options.
std::unique_ptr<Device> make_npu_sim_device(ThreadPool& pool, const NpuSimOptions& options);

}  // namespace llada::runtime
