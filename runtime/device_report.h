// What a device reports about its executions: ops by placement (NPU vs CPU), projected time by
// category, and the memory runtime's counters. Every time in it except host_s is projected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "npu/cost_model.h"

namespace llada::runtime {

struct DeviceReport {
    std::string device;         // "cpu", "npu-sim"
    std::string profile;        // "sm8750", "sm8750-cpu", "" (no projection)
    std::string memory_policy;  // npu-sim: "baseline" or "optimised"
    bool projected = false;
    bool functional = true;

    int64_t executions = 0;
    int64_t ops_npu = 0, ops_cpu = 0;  // op executions by placement
    int64_t rows = 0;                  // window rows asked for
    int64_t padded_rows = 0;           // window rows computed (tile padding included)
    int64_t buckets_compiled = 0;

    npu::Cost projected_us;  // the projected timeline by category (sums to the total)
    double npu_us = 0;       // projected time of the ops placed on the NPU
    double cpu_us = 0;       // projected time of the ops placed on the CPU
    double one_time_us = 0;  // compile + the first load of the window (part of the total)

    // Memory runtime (npu-sim).
    int64_t mappings = 0, unmappings = 0;
    size_t bytes_mapped = 0;   // bytes made device-visible by mapping
    size_t bytes_copied = 0;   // bytes copied into the window (resident load + streaming)
    double prefetch_us = 0;    // projected busy time of the prefetch thread (overlapped)
    double fragmentation = 0;  // baseline: mean free-space fragmentation at each map;
                               // optimised: share of the used window that holds no weight
    size_t window_bytes = 0;
    size_t window_peak = 0;     // highest window use seen
    size_t resident_bytes = 0;  // optimised: weights kept in the window
    size_t streamed_bytes = 0;  // optimised: weights streamed through the ring per forward
    int ring_slots = 0;
    // Host memory of the tile copies npu-sim made of the model's weights (measured, not
    // projected): 0 when the file already stores its matrices in the tile formats it reads.
    size_t host_tile_copy_bytes = 0;
    // npu-sim: the file's weight formats and the tile formats it reads them in, with matrix
    // counts ("Q4_K -> TQ4 (13), Q6_K -> TQ8 (3)").
    std::string weight_conversion;

    double host_s = 0;  // measured host wall time inside execute() (not projected)

    double projected_ms() const { return projected_us.total() / 1e3; }
    double stall_us() const { return projected_us[npu::Category::Stall]; }
    size_t bytes_moved() const { return bytes_mapped + bytes_copied; }
    // Several lines for a terminal, every time labelled projected or host.
    std::string summary() const;
};

}  // namespace llada::runtime
