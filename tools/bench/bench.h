// llada-bench's modes and what they share: tools/llada_bench.cpp parses the flags into Options and
// runs one mode (rows.cpp, sampling.cpp, ablation.cpp, e2e.cpp); common.cpp holds the timing
// helpers, the machine's measured peaks and the runners of llama.cpp's binaries.
#pragma once

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "decode/trace.h"
#include "runtime/device.h"
#include "runtime/thread_pool.h"
#include "tools/common.h"

namespace llada::tools::bench {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0);
double median(std::vector<double> v);  // the upper middle for an even count
size_t peak_rss_bytes();

// The machine's measured ceilings, all threads.
struct Peaks {
    double gflops = 0;     // float32 FMA
    double int8_gops = 0;  // u8 x s8 dot products, all threads (2 ops per multiply-add)
    double gbps = 0;       // read bandwidth
};
// The FMA and int8-dot rates over `seconds` each (bandwidth left at 0).
Peaks measure_compute_peaks(runtime::ThreadPool& pool, double seconds);
Peaks measure_peaks(runtime::ThreadPool& pool);

std::vector<int> parse_int_list(const std::string& s, const std::string& flag);
std::vector<std::string> split(const std::string& s, char sep = ',');
// llama.cpp's llama-diffusion-cli on the same file: (wall s, denoising loop s).
std::pair<double, double> run_llama_diffusion(const std::string& bin, const std::string& model,
                                              const std::string& prompt, int n_ubatch, int steps,
                                              int block, int threads);
// llama-bench -p ROWS -n 0 on the same file: rows per second (the median of its repetitions).
double run_llama_bench(const std::string& bin, const std::string& model, int rows, int reps,
                       int threads);

// The decision traces the replayed rows take (--replay for mbsd, --replay-need for need); a
// replayed row is the mean over its traces, one request each, on one device.
struct AblationTraces {
    std::vector<decode::DecisionTrace> mbsd, need, mbsd_threshold, revise, pipeline;
    int revise_rows = -1;            // row 9's CPU-path rows per step (--revise-rows; -1 auto)
    bool revise_fresh = true;        // row 9's --revise-context (fresh or snapshot)
    bool revise_tail_dense = false;  // row 9's --revise-tail dense
    // The traces of row i of the ablation table (rows 6, 7, 8, 9 and p).
    const std::vector<decode::DecisionTrace>& of(size_t row) const {
        return row == 5   ? mbsd
               : row == 6 ? need
               : row == 7 ? mbsd_threshold
               : row == 8 ? revise
                          : pipeline;
    }
};

// Every flag of llada-bench that a mode reads (tools/llada_bench.cpp registers each on these
// fields: the defaults here are the flags' defaults).
struct Options {
    std::string model_path,
        rows_list = "1,8,16,32,64,128,256",
        policies = "vanilla,prefix-cache,dual-cache,threshold,dual-cache+threshold";
    std::string llama_diffusion, llama_bench;
    int threads = 1, prefix = 0, reps = 5, prompt_len = 32, gen = 128, block = 32, steps = 0;
    int rounds = 1, window = 160, need = 32;
    double tau = decode::kDefaultThreshold;
    bool json = false, no_peaks = false, kv_f16 = false, full_last_layer = false;
    std::string ablation_configs = "123456789p", cache_policy = "prefix-cache";
    bool no_sensitivity = false;
};

// Each mode adds its results to `report` (which holds the model's facts) and prints it (one JSON
// document with --json, tables otherwise); the return value is the exit status.
int rows_mode(const Options& o, const LoadedModel& lm, runtime::Device& device,
              runtime::ThreadPool& pool, nlohmann::json& report);
int sampling_mode(const Options& o, const LoadedModel& lm, runtime::Device& device,
                  nlohmann::json& report);
int ablation_mode(const Options& o, const LoadedModel& lm,
                  const runtime::DeviceConfig& device_config, runtime::ThreadPool& pool,
                  const AblationTraces& traces, nlohmann::json& report);
int e2e_mode(const Options& o, const LoadedModel& lm, runtime::Device& device,
             const AblationTraces& traces, nlohmann::json& report);

}  // namespace llada::tools::bench
