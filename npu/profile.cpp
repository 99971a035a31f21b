// The device profiles, each constant with its source beside it. Sources are the rows of
// docs/npu-facts.md unless stated; "derived" is arithmetic on cited numbers;
// "assumed" marks a constant nobody publishes (a parameter: see llada-bench's sensitivity table).
#include "npu/profile.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "util/error.h"

namespace llada::npu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

// Hexagon V75 (Snapdragon 8 Gen 3, SM8650): the generation with published HMX/HVX figures.
Profile hexagon_v75() {
    Profile p;
    p.kind = Profile::Kind::Npu;
    // 32x32 fp16 HMX tile; M and N chunked in 32s (Hao et al., EuroSys'26, §3.1;
    // htp-ops-lib hmx_utils.h).
    p.tile_rows = 32;
    // Effective HMX throughput in a real prefill: 690 tok/s pp512 on a 4B model
    // -> 690 * 2 * 4e9 = 5.5 TFLOP/s (derived; llama.cpp PR #23368).
    p.matrix_tflops = 5.5;
    // fp16 GEMM peak with operands in TCM (Hao et al., Table 2); reported only.
    p.matrix_peak_tflops = 12.0;
    // HVX fp16 GEMM 32.9 GFLOP/s per thread x 4 contexts (Hao et al., Table 2 and §3.1: 4-6
    // contexts; the low end).
    p.vector_gflops = 4 * 32.9;
    // HVX load path ~26 GB/s (Hao et al., Table 2).
    p.vector_load_gbps = 26.0;
    // One engine alone sees ~40-45 GB/s of DRAM (HeteroInfer, SOSP'25, measured on 8 Gen 3);
    // the low end.
    p.dram_gbps = 40.0;
    // Two engines streaming together reach about 60 GB/s (HeteroInfer, 8 Gen 3;
    // docs/npu-facts.md), not twice 40.
    p.dram_pair_gbps = 60.0;
    // DDR -> TCM DMA >= 60 GB/s (Hao et al., Table 2); weight streaming runs at
    // min(dma_gbps, dram_gbps).
    p.dma_gbps = 60.0;
    // 8 MiB VTCM on SM8450/8550/8650/8750 (LiteRT Qualcomm soc_table.cc).
    p.tcm_bytes = 8 * kMiB;
    // 11-35 us per op (llama.cpp issue #18139); the low end, as ops inside one compiled graph
    // do not each pay an RPC.
    p.op_dispatch_us = 11.0;
    // FastRPC latency target 50 us per call (htp-ops-lib session.c): one call per graph run.
    p.graph_call_us = 50.0;
    // QNN graph build ~360 ms and optimisation ~11.5 s for Gemma-2B (llm.npu, ASPLOS'25);
    // Gemma-2B has 18 layers (Gemma technical report), so compile time scales per layer.
    p.graph_build_ms = 360.0;
    p.graph_opt_ms = 11500.0;
    p.compile_ref_layers = 18;
    // A session maps ~3.5 GB at most (32-bit NPU VA; Hexagon V79 PRM; llama.cpp
    // docs/backend/snapdragon; Hao et al. §7).
    p.window_bytes = 3 * kGiB + kGiB / 2;
    // Map/unmap costs are not published (docs/npu-facts.md: a parameter). Assumed:
    // a map is two RPC round trips (2 x 50 us, the FastRPC target above) plus SMMU page-table
    // population and cache maintenance at 25 us/MiB; an unmap one round trip plus 10 us/MiB of
    // TLB/SMMU invalidation. llada-bench --ablation prints the sensitivity to all four.
    p.map_fixed_us = 100.0;
    p.map_us_per_mib = 25.0;
    p.unmap_fixed_us = 50.0;
    p.unmap_us_per_mib = 10.0;
    // A CPU copy reads and writes DRAM: one engine's ~40 GB/s / 2 (derived from HeteroInfer).
    p.host_copy_gbps = 20.0;
    // Vocabulary-wide sampling is vector work, placed on the CPU (docs/design.md, "Devices").
    p.lm_head_on_npu = false;
    // The CPU beside the NPU; only the 8 Elite's CPU has a profile (sm8750-cpu).
    p.cpu_profile = "sm8750-cpu";
    return p;
}

Profile sm8650() {
    Profile p = hexagon_v75();
    p.name = "sm8650";
    p.description = "Snapdragon 8 Gen 3, Hexagon V75 (HMX/HVX figures of Hao et al.)";
    return p;
}

Profile sm8750() {
    Profile p = hexagon_v75();
    p.name = "sm8750";
    p.description =
        "Snapdragon 8 Elite, Hexagon V79 (no V79 HMX/HVX figures are published: V75's are used; "
        "LPDDR5X-5300 ~84.8 GB/s peak, ~40-45 GB/s per engine)";
    // Same per-engine DRAM share as measured on 8 Gen 3 (HeteroInfer); the SoC peak of
    // ~84.8 GB/s (LPDDR5X-5300, press) is what two engines share.
    p.dram_gbps = 40.0;
    return p;
}

Profile sm8550() {
    Profile p = hexagon_v75();
    p.name = "sm8550";
    p.description =
        "Snapdragon 8 Gen 2, Hexagon V73: the 2 GiB window (V75 compute figures assumed)";
    // 2 GiB NPU address space on V73 (docs/npu-facts.md, "address space": qualcomm/fastrpc #137,
    // Hao et al. §7).
    p.window_bytes = 2 * kGiB;
    return p;
}

// The 8 Elite's CPU (2 + 6 Oryon cores), for projecting the CPU baselines. Its GEMM throughput is
// not in docs/npu-facts.md; the sources are named beside each constant.
Profile sm8750_cpu() {
    Profile p;
    p.name = "sm8750-cpu";
    p.description = "Snapdragon 8 Elite CPU (8 Oryon cores), llama.cpp-class int8 kernels";
    p.kind = Profile::Kind::Cpu;
    // A CPU computes exactly the rows it is given.
    p.tile_rows = 1;
    // ~85 tok/s prompt processing of Llama-3.1-8B Q4 on an eight-core Oryon CPU (specpicks.com,
    // "llama.cpp on Snapdragon Hexagon NPU: first real benchmarks", 2026, Snapdragon X Elite;
    // the same Oryon cores as SM8750) -> 85 * 2 * 8.0e9 = 1.36 TFLOP/s (derived; not in
    // docs/npu-facts.md).
    p.matrix_tflops = 1.36;
    // i8mm peak 4.29 TOPS on 12 Oryon cores (pigirons/cpufp PR #30) x 8/12 (derived).
    p.matrix_peak_tflops = 4.29 * 8.0 / 12.0;
    // NEON fp16 FMLA 2.58 TFLOP/s on 12 Oryon cores (pigirons/cpufp PR #30); fp32 has half the
    // lanes, and 8 of 12 cores: 2.58 / 2 * 8/12 = 0.86 TFLOP/s (derived).
    p.vector_gflops = 860.0;
    // Elementwise work streams from DRAM: one engine's ~40 GB/s (HeteroInfer).
    p.vector_load_gbps = 40.0;
    p.dram_gbps = 40.0;
    // Waking the thread pool per op: a few microseconds (runtime/thread_pool.h, measured on the
    // host); assumed the same on the phone.
    p.op_dispatch_us = 5.0;
    // A CPU copy reads and writes DRAM: ~40 GB/s / 2 (derived).
    p.host_copy_gbps = 20.0;
    p.lm_head_on_npu = false;
    return p;
}

struct Param {
    const char* name;
    const char* unit;
    std::function<void(Profile&, double)> set;
};

const std::vector<Param>& params() {
    static const std::vector<Param> kParams = {
        {"matrix_tflops", "TFLOP/s", [](Profile& p, double v) { p.matrix_tflops = v; }},
        {"vector_gflops", "GFLOP/s", [](Profile& p, double v) { p.vector_gflops = v; }},
        {"vector_load_gbps", "GB/s", [](Profile& p, double v) { p.vector_load_gbps = v; }},
        {"dram_gbps", "GB/s", [](Profile& p, double v) { p.dram_gbps = v; }},
        {"dram_pair_gbps", "GB/s", [](Profile& p, double v) { p.dram_pair_gbps = v; }},
        {"dma_gbps", "GB/s", [](Profile& p, double v) { p.dma_gbps = v; }},
        {"op_dispatch_us", "us", [](Profile& p, double v) { p.op_dispatch_us = v; }},
        {"graph_call_us", "us", [](Profile& p, double v) { p.graph_call_us = v; }},
        {"graph_build_ms", "ms", [](Profile& p, double v) { p.graph_build_ms = v; }},
        {"graph_opt_ms", "ms", [](Profile& p, double v) { p.graph_opt_ms = v; }},
        {"window_gib", "GiB",
         [](Profile& p, double v) { p.window_bytes = static_cast<size_t>(v * kGiB); }},
        {"window_mib", "MiB",
         [](Profile& p, double v) { p.window_bytes = static_cast<size_t>(v * kMiB); }},
        {"map_fixed_us", "us", [](Profile& p, double v) { p.map_fixed_us = v; }},
        {"map_us_per_mib", "us", [](Profile& p, double v) { p.map_us_per_mib = v; }},
        {"unmap_fixed_us", "us", [](Profile& p, double v) { p.unmap_fixed_us = v; }},
        {"unmap_us_per_mib", "us", [](Profile& p, double v) { p.unmap_us_per_mib = v; }},
        {"host_copy_gbps", "GB/s", [](Profile& p, double v) { p.host_copy_gbps = v; }},
        {"lm_head_on_npu", "0/1", [](Profile& p, double v) { p.lm_head_on_npu = v != 0.0; }},
    };
    return kParams;
}

}  // namespace

std::vector<std::string> Profile::parameter_names() {
    std::vector<std::string> v;
    for (const auto& p : params())
        v.push_back(p.name);
    return v;
}

void Profile::set(const std::string& key, double value) {
    for (const auto& p : params()) {
        if (key != p.name) continue;
        if (!std::isfinite(value) || value < 0.0) {
            throw Error("profile parameter " + key + " must be a finite value >= 0, got " +
                        std::to_string(value));
        }
        const bool rate =
            key.find("gbps") != std::string::npos || key.find("flops") != std::string::npos;
        if (rate && value == 0.0) throw Error("profile parameter " + key + " must be > 0");
        p.set(*this, value);
        return;
    }
    std::string known;
    for (const auto& p : params())
        known += std::string(known.empty() ? "" : ", ") + p.name + " (" + p.unit + ")";
    throw Error("unknown profile parameter '" + key + "'; known: " + known);
}

void Profile::apply_overrides(const std::string& spec) {
    std::stringstream ss(spec);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        const auto eq = item.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
            throw Error("profile override '" + item + "' is not key=value");
        }
        const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
        char* end = nullptr;
        const double v = std::strtod(val.c_str(), &end);
        if (end == val.c_str() || *end != '\0') {
            throw Error("profile override '" + item + "': '" + val + "' is not a number");
        }
        set(key, v);
    }
}

std::vector<std::string> profile_names() {
    return {"sm8650", "sm8750", "sm8550", "sm8750-cpu"};
}

Profile find_profile(const std::string& name) {
    if (name == "sm8650") return sm8650();
    if (name == "sm8750") return sm8750();
    if (name == "sm8550") return sm8550();
    if (name == "sm8750-cpu") return sm8750_cpu();
    std::string known;
    for (const auto& n : profile_names())
        known += (known.empty() ? "" : ", ") + n;
    throw Error("unknown device profile '" + name + "' (known: " + known + ")");
}

}  // namespace llada::npu
