// llada-bench's shared helpers: timing, the machine's measured peaks, llama.cpp's runners.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>

#include "kernels/peak.h"
#include "tools/bench/bench.h"
#include "util/error.h"

namespace llada::tools::bench {

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

size_t peak_rss_bytes() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

// Runs body(thread) on every thread of the pool for about `seconds` and returns the summed
// rate of what body reports per call.
template <typename Body>
double all_threads_rate(runtime::ThreadPool& pool, double seconds, Body body) {
    std::vector<double> work(pool.size(), 0.0), time(pool.size(), 0.0);
    pool.parallel_for(pool.size(), [&](int64_t, int thread) {
        const auto t0 = Clock::now();
        double w = 0;
        while (seconds_since(t0) < seconds)
            w += body(thread);
        work[thread] += w;
        time[thread] += seconds_since(t0);
    });
    double rate = 0;
    for (int t = 0; t < pool.size(); ++t)
        rate += time[t] > 0 ? work[t] / time[t] : 0;
    return rate;
}

// The FMA and int8-dot rates over `seconds` each (bandwidth left at 0).
Peaks measure_compute_peaks(runtime::ThreadPool& pool, double seconds) {
    Peaks p;
    float sink = 0;
    p.gflops =
        all_threads_rate(pool, seconds, [&](int) { return kernels::fma_flops(1 << 20, &sink); }) /
        1e9;
    p.int8_gops =
        all_threads_rate(pool, seconds, [&](int) { return kernels::int8_ops(1 << 20, &sink); }) /
        1e9;
    return p;
}

Peaks measure_peaks(runtime::ThreadPool& pool) {
    Peaks p = measure_compute_peaks(pool, 0.5);
    float sink = 0;
    // 256 MiB per thread: far beyond the caches.
    const int64_t n = 64ll << 20;
    std::vector<std::vector<float>> bufs(pool.size(), std::vector<float>(n, 1.0f));
    p.gbps = all_threads_rate(
                 pool, 1.0, [&](int t) { return kernels::read_bytes(bufs[t].data(), n, &sink); }) /
             1e9;
    return p;
}

std::vector<int> parse_int_list(const std::string& s, const std::string& flag) {
    std::vector<int> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        char* end = nullptr;
        long x = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || x <= 0 || x > (1 << 20)) {
            throw Error(flag + ": '" + item + "' is not a positive integer");
        }
        v.push_back(static_cast<int>(x));
    }
    if (v.empty()) throw Error(flag + " is empty");
    return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, sep)) {
        if (!item.empty()) v.push_back(item);
    }
    return v;
}

// Runs a command, returning its combined output (stderr included) and exit status.
std::pair<int, std::string> run_command(const std::string& cmd) {
    std::string out;
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) throw Error("cannot run '" + cmd + "'");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
        out.append(buf, n);
    return {pclose(p), out};
}

// One generation with llama.cpp's llama-diffusion-cli; returns its wall time in seconds (the
// whole process, model load included, and its own "total time" of the denoising loop).
std::pair<double, double> run_llama_diffusion(const std::string& bin, const std::string& model,
                                              const std::string& prompt, int n_ub, int steps,
                                              int block, int threads) {
    std::ostringstream cmd;
    cmd << "'" << bin << "' -m '" << model << "' -p '" << prompt << "' -ub " << n_ub << " -b "
        << n_ub << " -c " << n_ub << " --diffusion-steps " << steps << " --diffusion-block-length "
        << block << " -t " << threads << " --temp 0 --seed 1";
    const auto t0 = Clock::now();
    auto [status, out] = run_command(cmd.str());
    const double wall = seconds_since(t0);
    if (status != 0) throw Error("llama-diffusion-cli failed:\n" + out.substr(0, 2000));
    const auto at = out.find("total time: ");
    const double loop_ms = at == std::string::npos ? 0.0 : std::atof(out.c_str() + at + 12);
    return {wall, loop_ms / 1e3};
}

// llama.cpp's prompt processing of R tokens on the same file: tokens per second (the median of
// its repetitions).
double run_llama_bench(const std::string& bin, const std::string& model, int rows, int reps,
                       int threads) {
    std::ostringstream cmd;
    cmd << "'" << bin << "' -m '" << model << "' -p " << rows << " -n 0 -r " << reps << " -t "
        << threads << " -o jsonl";
    auto [status, out] = run_command(cmd.str());
    if (status != 0) throw Error("llama-bench failed:\n" + out.substr(0, 2000));
    std::istringstream is(out);
    std::string line;
    while (std::getline(is, line)) {
        if (line.empty() || line[0] != '{') continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_object()) continue;
        // The median of its repetitions, like ours; older builds only print the mean.
        if (j.contains("samples_ts") && j["samples_ts"].is_array() && !j["samples_ts"].empty())
            return median(j["samples_ts"].get<std::vector<double>>());
        if (j.contains("avg_ts")) return j["avg_ts"].get<double>();
    }
    throw Error("no result in llama-bench's output:\n" + out.substr(0, 2000));
}

}  // namespace llada::tools::bench
