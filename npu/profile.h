// Device profiles of the simulated NPU (and of the phone CPU beside it): the published hardware
// numbers the cost model turns into projected time. Every constant carries its source in
// profile.cpp (docs/npu-facts.md); constants nobody publishes are parameters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llada::npu {

struct Profile {
    enum class Kind { Npu, Cpu };

    std::string name;  // "sm8750"
    std::string description;
    Kind kind = Kind::Npu;

    // --- matrix engine ---
    int tile_rows = 32;             // a matmul on M rows computes ceil(M / tile_rows) tiles
    double matrix_tflops = 0;       // effective matmul throughput the model uses, TFLOP/s
    double matrix_peak_tflops = 0;  // published peak (reported, not used for time)
    // --- vector unit (elementwise, reductions, softmax, LUT dequantisation) ---
    double vector_gflops = 0;     // all contexts together, GFLOP/s (one op per element)
    double vector_load_gbps = 0;  // the vector unit's load path from memory, GB/s
    // --- memory ---
    double dram_gbps = 0;  // DRAM bandwidth this engine sees alone, GB/s
    // DRAM bandwidth of two engines streaming at once, together (0: not known; then the
    // contention between a dense lane and a CPU lane is not modelled).
    double dram_pair_gbps = 0;
    double dma_gbps = 0;   // DDR -> TCM DMA, GB/s (NPU only)
    size_t tcm_bytes = 0;  // tightly coupled memory (NPU only)
    // --- dispatch ---
    double op_dispatch_us = 0;  // per op
    double graph_call_us = 0;   // per graph execution (one RPC round trip)
    // --- static graphs ---
    double graph_build_ms = 0;   // build of one graph of compile_ref_layers layers
    double graph_opt_ms = 0;     // optimisation of the same graph
    int compile_ref_layers = 1;  // layers of the model the compile figures were measured on
    // --- device-visible window and its mappings (map/unmap costs are not published) ---
    size_t window_bytes = 0;    // bytes one session can map; 0 = unlimited (CPU)
    double map_fixed_us = 0;    // per mapping
    double map_us_per_mib = 0;  // per MiB mapped (SMMU entries, cache maintenance)
    double unmap_fixed_us = 0;
    double unmap_us_per_mib = 0;
    double host_copy_gbps = 0;  // a CPU thread copying weights into the window, GB/s
    // --- placement ---
    bool lm_head_on_npu = false;  // vocabulary-wide LM head / sampling on the NPU
    std::string cpu_profile;      // the profile that times the ops placed on the CPU

    // Sets a numeric parameter by name ("map_fixed_us", "window_gib", ...); throws llada::Error
    // naming the known parameters for an unknown one or a value out of range.
    void set(const std::string& key, double value);
    // "key=value,key=value" -> set() for each.
    void apply_overrides(const std::string& spec);
    // Names of the settable parameters.
    static std::vector<std::string> parameter_names();
};

// The known profiles: sm8650 (Snapdragon 8 Gen 3, Hexagon V75), sm8750 (8 Elite, V79), sm8550
// (8 Gen 2, V73: the 2 GiB window), sm8750-cpu (the 8 Elite's CPU, for projecting CPU runs).
std::vector<std::string> profile_names();
// Throws llada::Error listing the known names for an unknown one.
Profile find_profile(const std::string& name);

}  // namespace llada::npu
