// llada-bench: how fast the engine runs a model, measured side by side with this machine's
// ceilings and (optionally) with llama.cpp on the same GGUF.
//
//   rows mode (default): one forward of R window rows against a cached prefix of P positions, for
//     each R; ms, rows/s, GFLOP/s and the share of the measured peak (a roofline table).
//   --e2e: whole generations per decoding policy (prompt + gen), latency and counters, with
//     llama.cpp's llama-diffusion-cli on the same file interleaved when --llama-diffusion is given.
//   --ablation: the published on-phone ablation's structure (CPU, + prefix KV cache, + NPU
//     offload, + swap-optimised memory runtime), each row projected by the device cost model,
//     beside the published seconds and this host's wall time, plus the sensitivity of the
//     projection to the unpublished map/unmap and copy costs.
//   --device npu-sim adds projected_ms (the device's latency table) to every row of rows mode.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "decode/lookahead.h"
#include "decode/policy.h"
#include "kernels/peak.h"
#include "npu/profile.h"
#include "quant/blocks.h"
#include "runtime/device.h"
#include "tools/common.h"
#include "util/error.h"

using namespace llada;
using Clock = std::chrono::steady_clock;

namespace {

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

struct Peaks {
    double gflops = 0;     // FMA, all threads
    double int8_gops = 0;  // u8 x s8 dot products, all threads (2 ops per multiply-add)
    double gbps = 0;       // streaming reads, all threads
};

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

// Multiply-adds of one forward of R rows against P cached positions: the weight matrices (LM head
// only for the R rows) and attention (QK and PV over P + R keys).
double forward_flops(const model::Model& m, int64_t R, int64_t P) {
    const auto& hp = m.hparams();
    const double per_row_weights =
        static_cast<double>(hp.n_layer) *
            (hp.n_embd * (hp.n_head + 2 * hp.n_kv_head) * hp.head_dim +
             hp.n_head * hp.head_dim * hp.n_embd + 3.0 * hp.n_embd * hp.n_ff) +
        static_cast<double>(hp.n_embd) * hp.n_vocab;
    const double attn = static_cast<double>(hp.n_layer) * hp.n_head * hp.head_dim * 2.0 * (P + R);
    return 2.0 * R * (per_row_weights + attn);
}

nlohmann::json run_rows(const model::Model& m, runtime::Device& dev, const std::vector<int>& rows,
                        int prefix, int reps, const Peaks& peaks, bool kv_f16) {
    nlohmann::json out = nlohmann::json::array();
    const int max_r = *std::max_element(rows.begin(), rows.end());
    const int n_pos = prefix + max_r;
    runtime::PlanOptions po;
    po.kv_f16 = kv_f16;
    model::Session s(m, dev, 1, n_pos, std::max(prefix, max_r), max_r, po);
    // Quantised weights run on int8 dot products, the others on float FMAs: the matching peak.
    const format::GgufTensor* probe = m.gguf().find_tensor("blk.0.ffn_gate.weight");
    const bool int8 = probe && quant::is_block_format(probe->type);
    const double peak = int8 ? peaks.int8_gops : peaks.gflops;
    std::vector<int32_t> tok(n_pos), pos(n_pos), seq(n_pos, 0);
    for (int i = 0; i < n_pos; ++i) {
        tok[i] = static_cast<int32_t>((i * 7919) % m.hparams().n_vocab);
        pos[i] = i;
    }
    if (prefix > 0) {  // fill the cache once
        int32_t kv = prefix, last = prefix - 1;
        runtime::Batch b{prefix, tok.data(), pos.data(), seq.data(), 1, &last, &kv};
        s.forward_stats(b);
    }
    for (int R : rows) {
        std::vector<int32_t> out_rows(R);
        for (int i = 0; i < R; ++i)
            out_rows[i] = i;
        int32_t kv = prefix + R;
        runtime::Batch b{
            R, tok.data() + prefix, pos.data() + prefix, seq.data(), R, out_rows.data(), &kv};
        s.forward_stats(b);  // warm-up
        std::vector<double> ms;
        for (int r = 0; r < reps; ++r) {
            const auto t0 = Clock::now();
            s.forward_stats(b);
            ms.push_back(seconds_since(t0) * 1e3);
        }
        const double med = median(ms);
        const double gflops = forward_flops(m, R, prefix) / (med * 1e-3) / 1e9;
        out.push_back(
            {{"rows", R},
             {"prefix", prefix},
             {"ms", med},
             {"rows_per_s", R / (med * 1e-3)},
             {"gflops", gflops},
             {"peak_pct", peak > 0 ? 100.0 * gflops / peak : 0.0},
             {"peak_adjacent", peak},
             {"peak_kind", int8 ? "int8" : "fma"},
             // Roofline: weight bytes streamed per forward set the memory ceiling.
             {"intensity", forward_flops(m, R, prefix) / static_cast<double>(m.weight_bytes())},
             {"bound",
              forward_flops(m, R, prefix) / static_cast<double>(m.weight_bytes()) * peaks.gbps <
                      peak
                  ? "memory"
                  : "compute"}});
    }
    return out;
}

// The share of a denoising step spent on sampling: the output head plus the reductions that
// turn logits into (token, confidence). A step computes `window` rows of which `need` are
// masked positions whose prediction the policy needs. Four variants, each timed `reps` times:
//   body        the transformer alone (no output rows)
//   all_rows    logits for every window row, reductions on the needed ones (llama.cpp's way)
//   need_rows   logits only for the needed rows, reductions on the host
//   fused       the fused LM head: per-row argmax/confidence, no logits written
nlohmann::json run_sampling(const model::Model& m, runtime::Device& dev, int window, int need,
                            int reps) {
    const int64_t V = m.hparams().n_vocab;
    model::Session s(m, dev, 1, window, window, window);
    std::vector<int32_t> tok(window), pos(window), seq(window, 0), all(window);
    for (int i = 0; i < window; ++i) {
        tok[i] = static_cast<int32_t>((i * 7919) % V);
        pos[i] = all[i] = i;
    }
    int32_t kv = window;
    auto reduce = [&](const float* logits, int rows) {
        // What a policy does with full logits: argmax and its softmax probability per row.
        float sink = 0;
        for (int r = 0; r < rows; ++r) {
            const float* l = logits + static_cast<int64_t>(r) * V;
            int64_t best = 0;
            for (int64_t v = 1; v < V; ++v)
                best = l[v] > l[best] ? v : best;
            double sum = 0;
            for (int64_t v = 0; v < V; ++v)
                sum += std::exp(static_cast<double>(l[v] - l[best]));
            sink += static_cast<float>(1.0 / sum);
        }
        return sink;
    };
    auto time_it = [&](auto&& fn) {
        fn();  // warm-up (also compiles the plan)
        std::vector<double> ms;
        for (int r = 0; r < reps; ++r) {
            const auto t0 = Clock::now();
            fn();
            ms.push_back(seconds_since(t0) * 1e3);
        }
        return median(ms);
    };
    volatile float sink = 0;
    const double body = time_it([&] {
        runtime::Batch b{window, tok.data(), pos.data(), seq.data(), 0, all.data(), &kv};
        s.forward(b);
    });
    const double all_rows = time_it([&] {
        runtime::Batch b{window, tok.data(), pos.data(), seq.data(), window, all.data(), &kv};
        sink = sink + reduce(s.forward(b), need);
    });
    const double need_rows = time_it([&] {
        runtime::Batch b{window, tok.data(), pos.data(), seq.data(), need, all.data(), &kv};
        sink = sink + reduce(s.forward(b), need);
    });
    const double fused = time_it([&] {
        runtime::Batch b{window, tok.data(), pos.data(), seq.data(), need, all.data(), &kv};
        sink = sink + kernels::row_confidence(s.forward_stats(b)[0]);
    });
    auto share = [&](double t) { return t > 0 ? std::max(0.0, (t - body) / t) : 0.0; };
    return {{"window", window},
            {"need", need},
            {"body_ms", body},
            {"all_rows_ms", all_rows},
            {"need_rows_ms", need_rows},
            {"fused_ms", fused},
            {"share_all_rows", share(all_rows)},
            {"share_need_rows", share(need_rows)},
            {"share_fused", share(fused)}};
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

std::vector<std::string> split(const std::string& s, char sep = ',') {
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

// One configuration of the published ablation (docs/npu-facts.md, "LLaDA-8B on a phone").
struct AblationRow {
    const char* name;
    const char* policy;
    bool npu;
    const char* memory;
    double published_s;  // 0: not a row of the published ablation
    bool replayed;       // decisions replayed from a trained model's trace (--replay)
};

constexpr AblationRow kAblation[] = {
    {"CPU", "vanilla", false, "", 2996.2, false},
    {"+ prefix KV cache", "prefix-cache", false, "", 607.0, false},
    {"+ NPU offload", "prefix-cache", true, "baseline", 341.2, false},
    {"+ swap-optimised memory runtime", "prefix-cache", true, "optimised", 87.0, false},
    // Not in the paper: the windows of need on the same schedule, so that row 6's gain is
    // speculation's alone (its rows do not depend on the tokens: nothing to replay).
    {"  (windows of need, same schedule)", "need", true, "optimised", 0.0, false},
    // The share of drafts accepted replayed from --replay; the schedule is row 4's.
    {"+ multi-block speculative decoding", "mbsd", true, "optimised", 71.6, true},
    // Not in the paper: parallel commits (threshold 0.9), replayed from --replay-threshold
    // (mbsd) and --replay-need (need) traces: what the same engine does with Fast-dLLM's rule.
    {"  (need + threshold 0.9)", "need", true, "optimised", 0.0, true},
    {"  (mbsd + threshold 0.9)", "mbsd", true, "optimised", 0.0, true},
    // mbsd + a parallel rule + --revise, replayed from --replay-revise: the CPU lane beside the
    // NPU lane (docs/step-engine.md, "Progressive revision").
    {"+ progressive revision", "mbsd", true, "optimised", 16.1, true},
};

struct AblationRun {
    double wall_s = 0;
    runtime::DeviceReport rep;
    model::ForwardStats stats;
    std::vector<int> lookahead;  // per step of the first request
    int64_t drafts_accepted = 0, drafts_rejected = 0;
    int requests = 1;                           // requests the report and counters sum over
    decode::GenerateResult::Revision revision;  // summed over requests (row 9)
};

// The decision traces the replayed rows take (--replay for mbsd, --replay-need for need); a
// replayed row is the mean over its traces, one request each, on one device.
struct AblationTraces {
    std::vector<decode::DecisionTrace> mbsd, need, mbsd_threshold, revise;
    int revise_rows = -1;      // row 9's CPU-path rows per step (--revise-rows; -1 auto)
    bool revise_fresh = true;  // row 9's --revise-context (fresh or snapshot)
    // The traces of row i of kAblation (rows 6, 7, 8 and 9).
    const std::vector<decode::DecisionTrace>& of(size_t row) const {
        return row == 5 ? mbsd : row == 6 ? need : row == 7 ? mbsd_threshold : revise;
    }
};

// Runs one configuration on a fresh device (so compile and the first load of the window are
// charged once and reported apart from the per-request time).
AblationRun run_ablation_row(const tools::LoadedModel& lm, const AblationRow& row,
                             const std::string& cache_policy, const runtime::DeviceConfig& base,
                             const std::vector<int32_t>& prompt, int gen, int block, int steps,
                             runtime::ThreadPool& pool, const AblationTraces& traces = {}) {
    runtime::DeviceConfig c = base;
    if (row.npu) {
        c.device = "npu-sim";
        c.memory = row.memory;
    } else {
        c.device = "cpu";
        c.profile = npu::find_profile(base.profile.empty() ? "sm8750" : base.profile).cpu_profile;
        c.memory = "optimised";
        c.weights = "model";
        c.buckets.clear();
    }
    auto dev = runtime::make_device(c, pool);
    decode::GenerateOptions opt;
    opt.gen = gen;
    opt.block = block;
    opt.steps = steps;
    opt.early_stop = 0;  // every block decoded, as a fixed-length benchmark
    std::string policy = std::string(row.policy) == "vanilla" ? "vanilla" : cache_policy;
    const std::vector<decode::DecisionTrace>* replay = nullptr;
    const size_t index = static_cast<size_t>(&row - kAblation);
    if (index >= 4) policy = row.policy;
    if (row.replayed) {
        replay = &traces.of(index);
        // Rows 7-9 commit by the threshold rule (the trace's counts); row 6 keeps the schedule.
        if (index >= 6) opt.threshold = 0.9;
        opt.revise.on = index == 8;
        opt.revise.rows = traces.revise_rows;
        opt.revise.fresh_context = traces.revise_fresh;
    }
    AblationRun r;
    r.requests = replay ? static_cast<int>(replay->size()) : 1;
    const auto t0 = Clock::now();
    for (int i = 0; i < r.requests; ++i) {
        if (replay) opt.replay = &(*replay)[i];
        auto p = decode::make_policy(policy, *lm.model, *dev, opt, lm.ids);
        const auto res = p->generate(prompt);
        r.stats.forwards += res.stats.forwards;
        r.stats.rows += res.stats.rows;
        r.stats.lm_head_rows += res.stats.lm_head_rows;
        if (i == 0) {
            for (const auto& s : res.steps)
                r.lookahead.push_back(s.lookahead);
        }
        r.drafts_accepted += res.drafts_accepted;
        r.drafts_rejected += res.drafts_rejected;
        auto& a = r.revision;
        const auto& b = res.revision;
        a.checks += b.checks;
        a.refreshes += b.refreshes;
        a.revisions += b.revisions + b.remasks;
        a.lane_only_steps += b.lane_only_steps;
        a.proj_dense_ms += b.proj_dense_ms;
        a.proj_cpu_ms += b.proj_cpu_ms;
        a.proj_merge_ms += b.proj_merge_ms;
        a.proj_contention_ms += b.proj_contention_ms;
        a.proj_step_ms += b.proj_step_ms;
    }
    r.wall_s = seconds_since(t0) / r.requests;
    r.rep = *dev->report();
    return r;
}

double per_request_s(const runtime::DeviceReport& r) {
    return (r.projected_us.total() - r.one_time_us) / 1e6;
}

nlohmann::json run_ablation(const tools::LoadedModel& lm, const runtime::DeviceConfig& base,
                            const std::string& configs, const std::string& cache_policy,
                            const std::vector<int32_t>& prompt, int gen, int block, int steps,
                            bool sensitivity, runtime::ThreadPool& pool,
                            const AblationTraces& traces, std::FILE* text) {
    nlohmann::json rows = nlohmann::json::array();
    const std::string npu_profile = base.profile.empty() ? "sm8750" : base.profile;
    const npu::Profile prof = npu::find_profile(npu_profile);
    double first_projected = 0;
    std::fprintf(
        text,
        "Published ablation structure, LLaDA-8B-Instruct Q4_0 on SM8750 (docs/npu-facts.md)\n");
    std::fprintf(
        text, "beside this engine's projection (profile %s + %s, %s policy for the cached rows;\n",
        npu_profile.c_str(), prof.cpu_profile.c_str(), cache_policy.c_str());
    std::fprintf(
        text,
        "prompt %zu tokens, gen %d, block %d, steps %d). All projected times are PROJECTED.\n",
        prompt.size(), gen, block, steps);
    std::fprintf(text, "%-34s %12s %9s %14s %9s %10s %12s %6s %10s\n", "configuration",
                 "published s", "speedup", "projected s", "speedup", "one-time s", "host wall s",
                 "NFE", "computed");
    for (size_t i = 0; i < std::size(kAblation); ++i) {
        if (configs.find(std::to_string(i + 1)) == std::string::npos) continue;
        const AblationRow& row = kAblation[i];
        const auto& row_traces = traces.of(i);
        const decode::DecisionTrace* trace = row_traces.empty() ? nullptr : &row_traces[0];
        if (row.replayed && trace == nullptr) {
            std::fprintf(text, "%-34s %12.1f   (needs a decision trace: %s FILE)\n", row.name,
                         row.published_s,
                         i == 5   ? "--replay"
                         : i == 6 ? "--replay-need"
                         : i == 7 ? "--replay-threshold"
                                  : "--replay-revise");
            continue;
        }
        const AblationRun r =
            run_ablation_row(lm, row, cache_policy, base, prompt, gen, block, steps, pool, traces);
        // With revision a step costs the longer of the NPU and CPU lanes (plus the shared-DRAM
        // slowdown of their overlap and the merge), not the NPU lane alone.
        const bool revise = i == 8;
        const double proj =
            revise ? (r.revision.proj_step_ms / 1e3 - r.rep.one_time_us / 1e6) / r.requests
                   : per_request_s(r.rep) / r.requests;
        if (first_projected == 0) first_projected = proj;
        nlohmann::json j = {
            {"configuration", row.name},
            {"policy", i >= 4             ? row.policy
                       : row.npu || i > 0 ? cache_policy
                                          : "vanilla"},
            {"device", r.rep.device},
            {"profile", r.rep.profile},
            {"memory", row.memory},
            {"published_s", row.published_s},
            {"published_speedup", kAblation[0].published_s / row.published_s},
            {"projected_s", proj},
            {"projected_speedup_vs_first_row", proj > 0 ? first_projected / proj : 0},
            {"projected_one_time_s", r.rep.one_time_us / 1e6},
            {"host_wall_s", r.wall_s},
            {"functional", r.rep.functional},
            {"nfe", static_cast<double>(r.stats.forwards) / r.requests},
            {"rows", static_cast<double>(r.stats.rows) / r.requests},
            {"padded_rows", static_cast<double>(r.rep.padded_rows) / r.requests},
            {"requests", r.requests},
            {"report", tools::device_report_json(r.rep)}};
        if (row.replayed) {
            j["policy"] = row.policy;
            j["replayed_from"] = trace->source;
            j["replayed_traces"] = r.requests;
            j["lookahead_per_step_first_trace"] = r.lookahead;
            j["drafts_accepted"] = static_cast<double>(r.drafts_accepted) / r.requests;
            j["drafts_rejected"] = static_cast<double>(r.drafts_rejected) / r.requests;
        }
        if (revise) {
            const auto& v = r.revision;
            const double n = r.requests;
            j["revision"] = {
                {"checks", v.checks / n},
                {"refreshes", v.refreshes / n},
                {"revisions", v.revisions / n},
                {"cpu_only_steps", v.lane_only_steps / n},
                {"projected_npu_lane_s", (v.proj_dense_ms / 1e3 - r.rep.one_time_us / 1e6) / n},
                {"projected_cpu_lane_s", v.proj_cpu_ms / 1e3 / n},
                {"projected_contention_s", v.proj_contention_ms / 1e3 / n},
                {"projected_merge_s", v.proj_merge_ms / 1e3 / n},
                {"projected_serial_s", ((v.proj_dense_ms + v.proj_cpu_ms + v.proj_merge_ms) / 1e3 -
                                        r.rep.one_time_us / 1e6) /
                                           n}};
        }
        rows.push_back(j);
        std::fprintf(text, "%-34s %12.1f %8.1fx %14.1f %8.1fx %10.1f %12.1f %6.2f %10s\n", row.name,
                     row.published_s,
                     row.published_s > 0 ? kAblation[0].published_s / row.published_s : 0.0, proj,
                     proj > 0 ? first_projected / proj : 0.0, r.rep.one_time_us / 1e6, r.wall_s,
                     static_cast<double>(r.stats.forwards) / r.requests,
                     r.rep.functional ? "functional" : "timing-only");
        if (row.replayed) {
            std::string la;
            for (int v : r.lookahead) {
                if (!la.empty()) la += ',';
                la += std::to_string(v);
            }
            std::fprintf(text,
                         "  REPLAYED decisions: mean of %d traces from %s; lookahead per step of "
                         "the first [%s]; drafts per request %.1f accepted, %.1f rejected\n",
                         r.requests, trace->source.c_str(), la.c_str(),
                         static_cast<double>(r.drafts_accepted) / r.requests,
                         static_cast<double>(r.drafts_rejected) / r.requests);
        }
        if (revise) {
            const auto& v = r.revision;
            const double n = r.requests;
            const double npu_s = (v.proj_dense_ms / 1e3 - r.rep.one_time_us / 1e6) / n;
            const double cpu_s = v.proj_cpu_ms / 1e3 / n;
            std::fprintf(
                text,
                "  PROJECTED lanes per request: NPU %.2f s, CPU %.2f s (%.0f check rows, %.0f K/V "
                "refreshes, %.1f revised, %.1f CPU-only steps), shared-DRAM slowdown %.2f s, "
                "merge %.3f s; step = max(lanes) + slowdown + merge -> %.2f s (both lanes in "
                "series: %.2f s)\n",
                npu_s, cpu_s, v.checks / n, v.refreshes / n, v.revisions / n, v.lane_only_steps / n,
                v.proj_contention_ms / 1e3 / n, v.proj_merge_ms / 1e3 / n, proj,
                npu_s + cpu_s + v.proj_merge_ms / 1e3 / n);
        }
        std::fprintf(text, "%s", r.rep.summary().c_str());
        std::fflush(text);
    }
    nlohmann::json out = {{"rows", rows}};
    if (!sensitivity) return out;

    // Map/unmap and copy costs are not published: re-project the NPU rows (timing only, same
    // decisions) with each scaled, and the window at V73's 2 GiB.
    nlohmann::json sens = nlohmann::json::array();
    std::fprintf(
        text, "\nSensitivity of the PROJECTED NPU rows to unpublished constants (timing only):\n");
    std::fprintf(text, "%-44s %16s %16s\n", "parameters", "+ NPU offload s", "+ swap-opt s");
    const npu::Profile p0 = prof;
    struct Variant {
        std::string label, overrides;
    };
    std::vector<Variant> variants;
    for (double f : {0.1, 1.0, 10.0, 100.0}) {
        char buf[256];
        std::snprintf(buf, sizeof(buf),
                      "map_fixed_us=%g,map_us_per_mib=%g,unmap_fixed_us=%g,unmap_us_per_mib=%g",
                      p0.map_fixed_us * f, p0.map_us_per_mib * f, p0.unmap_fixed_us * f,
                      p0.unmap_us_per_mib * f);
        variants.push_back({"map/unmap costs x" + std::to_string(f).substr(0, 5), buf});
    }
    for (double g : {5.0, 10.0, 40.0})
        variants.push_back({"host copy " + std::to_string(static_cast<int>(g)) + " GB/s",
                            "host_copy_gbps=" + std::to_string(g)});
    variants.push_back({"window 2 GiB (V73-like)", "window_gib=2"});
    for (const Variant& v : variants) {
        runtime::DeviceConfig c = base;
        c.timing_only = true;
        c.overrides = base.overrides.empty() ? v.overrides : base.overrides + "," + v.overrides;
        const double b = per_request_s(
            run_ablation_row(lm, kAblation[2], cache_policy, c, prompt, gen, block, steps, pool)
                .rep);
        const double o = per_request_s(
            run_ablation_row(lm, kAblation[3], cache_policy, c, prompt, gen, block, steps, pool)
                .rep);
        sens.push_back({{"parameters", v.label},
                        {"overrides", v.overrides},
                        {"npu_offload_projected_s", b},
                        {"swap_optimised_projected_s", o}});
        std::fprintf(text, "%-44s %16.1f %16.1f\n", v.label.c_str(), b, o);
        std::fflush(text);
    }
    out["sensitivity"] = sens;
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    return tools::run_tool([&]() -> int {
        std::string model_path,
            rows_list = "1,8,16,32,64,128,256",
            policies = "vanilla,prefix-cache,dual-cache,threshold,dual-cache+threshold";
        std::string llama_diffusion;
        int prefix = 0, reps = 5, prompt_len = 32, gen = 128, block = 32, steps = 0;
        double tau = 0.9;
        bool json = false, e2e = false, no_peaks = false;
        int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        tools::ArgTable args("llada-bench",
                             "Measures forward latency per row count (roofline table), or with "
                             "--e2e whole\ngenerations per policy, optionally beside llama.cpp.");
        args.string({"-m", "--model"}, "FILE", "GGUF model", &model_path);
        args.integer({"-t", "--threads"}, "N", "threads (default: all cores)", &threads, 1, 1024);
        args.integer({"--reps"}, "N", "repetitions per measurement (median reported)", &reps, 1,
                     1000);
        args.flag({"--json"},
                  "print one JSON document on stdout and nothing else (tables go to stderr)",
                  &json);
        bool kv_f16 = false, full_last_layer = false;
        args.flag({"--full-last-layer"},
                  "e2e mode: run the last layer on every window row (to measure the gather of\n"
                  "the output rows before the last layer's attention and FFN)",
                  &full_last_layer);
        args.flag({"--kv-f16"}, "rows and e2e modes: the KV cache in fp16 instead of float32",
                  &kv_f16);
        args.section("Rows mode");
        args.string({"--rows"}, "LIST", "row counts (default 1,8,16,32,64,128,256)", &rows_list);
        args.integer({"--prefix"}, "P", "cached prefix positions the rows attend to (default 0)",
                     &prefix, 0, 1 << 20);
        args.flag({"--no-peaks"}, "skip the peak FLOP/s and bandwidth microbenchmarks", &no_peaks);
        std::string llama_bench;
        int rounds = 1;
        bool sampling = false;
        int window = 160, need = 32;
        args.string({"--llama-bench"}, "PATH",
                    "an existing llama.cpp llama-bench binary: runs -p ROWS -n 0 on the same\n"
                    "file right after each of our row counts and reports the throughput ratio",
                    &llama_bench);
        args.integer(
            {"--rounds"}, "N",
            "with --llama-bench: alternate ours and llama.cpp's N times per row count and\n"
            "report each side's median over the rounds (default 1; a shared, noisy\n"
            "machine needs 3 or more)",
            &rounds, 1, 100);
        args.section("Sampling mode");
        args.flag({"--sampling"},
                  "the share of a step spent on the output head and sampling: logits for every\n"
                  "row, logits for the needed rows only, and the fused head",
                  &sampling);
        args.integer({"--window"}, "W", "rows a step computes (default 160)", &window, 1, 1 << 20);
        args.integer({"--need"}, "N", "rows whose prediction is needed (default 32)", &need, 1,
                     1 << 20);
        args.section("End-to-end mode");
        args.flag({"--e2e"}, "time whole generations per policy", &e2e);
        args.string(
            {"--policies"}, "LIST",
            "policies, '+threshold' adds --threshold, '+revise' progressive revision\n"
            "(default: vanilla, prefix-cache, dual-cache, threshold, dual-cache+threshold;\n"
            "e.g. mbsd+threshold+revise)",
            &policies);
        args.integer({"--prompt-len"}, "N", "prompt tokens, BOS included (default 32)", &prompt_len,
                     1, 1 << 20);
        args.integer({"--gen"}, "N", "generated positions (default 128)", &gen, 1, 1 << 20);
        args.integer({"--block"}, "N", "block length (default 32)", &block, 1, 1 << 20);
        args.integer({"--steps"}, "N", "steps (default: --gen)", &steps, 1, 1 << 20);
        args.real({"--threshold"}, "TAU", "tau of the threshold policies (default 0.9)", &tau, 0.0,
                  1.0);
        args.string({"--llama-diffusion"}, "PATH",
                    "an existing llama.cpp llama-diffusion-cli binary to run on the same file,\n"
                    "interleaved with ours (nothing of llama.cpp is built or shipped here)",
                    &llama_diffusion);
        bool ablation = false, no_sensitivity = false;
        std::string ablation_configs = "123456789", cache_policy = "prefix-cache";
        args.section("Ablation mode (projected; uses --prompt-len, --gen, --block, --steps)");
        args.flag({"--ablation"},
                  "the published ablation's rows (CPU, + prefix KV cache, + NPU offload,\n"
                  "+ swap-optimised runtime), projected with --npu-profile (default sm8750)\n"
                  "and its CPU profile, beside the published seconds and the host wall time",
                  &ablation);
        args.string({"--ablation-configs"}, "DIGITS",
                    "which rows to run, e.g. 34 (default 123456789; rows 6-9 need traces)",
                    &ablation_configs);
        args.string({"--cache-policy"}, "NAME",
                    "the cached policy of rows 2-4: prefix-cache (default) or dual-cache",
                    &cache_policy);
        args.flag({"--no-sensitivity"}, "skip the map/unmap and copy cost sensitivity table",
                  &no_sensitivity);
        std::string replay_path, replay_need_path, replay_threshold_path, replay_revise_path;
        int replay_index = -1;
        args.section("Replay (--e2e and --ablation)");
        args.string(
            {"--replay"}, "FILE",
            "a decision trace (llada-eval/llada-cli --trace-out) of a trained model: --e2e's\n"
            "diffusion policies but vanilla commit as that run did, on this model and\n"
            "device; --ablation's '+ multi-block speculation' row takes it",
            &replay_path);
        args.string({"--replay-need"}, "FILE",
                    "--ablation: the trace of the row 'need + threshold 0.9'", &replay_need_path);
        args.string({"--replay-threshold"}, "FILE",
                    "--ablation: the trace of the row 'mbsd + threshold 0.9'",
                    &replay_threshold_path);
        args.string({"--replay-revise"}, "FILE",
                    "--ablation: the trace of the row '+ progressive revision' (mbsd + a\n"
                    "threshold + --revise)",
                    &replay_revise_path);
        std::string revise_rows = "auto", revise_context = "fresh";
        args.string({"--revise-context"}, "fresh|snapshot",
                    "--ablation row 9: what a check sees of last step's commits (default fresh)",
                    &revise_context);
        args.string({"--revise-rows"}, "auto|N",
                    "--ablation row 9: CPU-path rows per step (auto: what the projected CPU\n"
                    "lane finishes within the NPU step, default; 0: every visible token)",
                    &revise_rows);
        args.integer({"--replay-index"}, "N",
                     "which trace of the file (default: the one of median forward count)",
                     &replay_index, 0, 1 << 30);
        int replay_sample = 0;
        args.integer({"--replay-sample"}, "N",
                     "replay a fixed sample of N traces spread through the file and\n"
                     "report the mean per request (default: one trace)",
                     &replay_sample, 0, 1 << 20);
        tools::DeviceFlags devf;
        devf.add_to(args);
        if (!args.parse(argc, argv)) return 0;
        if (model_path.empty()) throw Error("-m/--model is required");
        if (steps == 0) steps = gen;
        if (kv_f16 && (sampling || ablation))
            throw Error(
                "--kv-f16 applies to the rows and --e2e modes, not --sampling or --ablation");

        // The traces a replay takes: one (--replay-index, or the median-NFE one), or an evenly
        // spaced sample (--replay-sample N).
        if (replay_sample > 0 && replay_index >= 0)
            throw Error("give one of --replay-sample and --replay-index");
        if (e2e && (!replay_need_path.empty() || !replay_threshold_path.empty() ||
                    !replay_revise_path.empty()))
            throw Error(
                "--replay-need, --replay-threshold and --replay-revise are --ablation's; --e2e "
                "takes --replay");
        if (!ablation && !e2e && (!replay_path.empty() || replay_sample > 0 || replay_index >= 0))
            throw Error("--replay applies to --e2e and --ablation");
        // `parallel`: 1 the rows need a trace of a parallel commit rule, 0 of a schedule, -1 any.
        auto load_traces = [&](const std::string& path, int parallel) {
            std::vector<decode::DecisionTrace> v;
            if (path.empty()) return v;
            if (replay_sample > 0 && replay_index < 0) {
                v = tools::read_traces(path, replay_sample);
            } else {
                v.push_back(tools::read_trace(path, replay_index));
            }
            for (const auto& t : v) {
                if (parallel >= 0 && t.parallel != (parallel == 1)) {
                    throw Error("the decision trace " + path + " was recorded " +
                                (t.parallel ? "with --threshold/--factor" : "on a fixed schedule") +
                                "; these rows replay " +
                                (parallel == 1 ? "threshold decoding" : "a fixed schedule"));
                }
                if (t.stopped_early) {
                    throw Error("the decision trace from " + t.source +
                                " stopped early; record it with --no-early-stop so that every "
                                "block is decoded");
                }
            }
            return v;
        };
        AblationTraces traces{
            load_traces(replay_path, ablation ? 0 : -1), load_traces(replay_need_path, 1),
            load_traces(replay_threshold_path, 1), load_traces(replay_revise_path, 1)};
        traces.revise_rows =
            tools::parse_auto_count("--revise-rows", revise_rows, 0, 1 << 20, "a row count >= 0");
        if (revise_context != "fresh" && revise_context != "snapshot")
            throw Error("--revise-context must be fresh or snapshot, got '" + revise_context + "'");
        traces.revise_fresh = revise_context == "fresh";
        std::optional<decode::DecisionTrace> trace;
        if (!traces.mbsd.empty()) trace = traces.mbsd[0];
        const auto t_load = Clock::now();
        tools::LoadedModel lm = tools::load_model(model_path);
        const double load_s = seconds_since(t_load);
        runtime::ThreadPool pool(threads);
        // The ablation makes its own devices, one per configuration.
        std::unique_ptr<runtime::Device> dev = ablation ? nullptr : devf.make(pool);
        nlohmann::json report = {{"model", model_path},
                                 {"threads", threads},
                                 {"simd", kernels::active_target()},
                                 {"params", lm.model->n_params()},
                                 {"weight_bytes", lm.model->weight_bytes()},
                                 {"load_s", load_s}};
        if (ablation) {
            std::string text;
            for (int i = 0; i + 1 < prompt_len; ++i)
                text += static_cast<char>('a' + i % 26);
            const auto ids = lm.tok->encode(text, lm.tok->add_bos_default(), false);
            report["ablation"] =
                run_ablation(lm, devf.config, ablation_configs, cache_policy, ids, gen, block,
                             steps, !no_sensitivity, pool, traces, json ? stderr : stdout);
            report["prompt_tokens"] = ids.size();
            report["gen"] = gen;
            report["block"] = block;
            report["steps"] = steps;
            report["peak_rss_bytes"] = peak_rss_bytes();
            if (json) std::printf("%s\n", report.dump(1).c_str());
            return 0;
        }
        if (sampling) {
            if (need > window) throw Error("--need must not exceed --window");
            nlohmann::json r = run_sampling(*lm.model, *dev, window, need, reps);
            report["sampling"] = r;
            if (json) {
                std::printf("%s\n", report.dump(1).c_str());
                return 0;
            }
            std::printf(
                "%s: vocab %lld, d %lld, %d layers, %d threads; step of %d rows, %d needed\n",
                model_path.c_str(), static_cast<long long>(lm.model->hparams().n_vocab),
                static_cast<long long>(lm.model->hparams().n_embd), lm.model->hparams().n_layer,
                threads, window, need);
            std::printf("  transformer body      %9.1f ms\n", r["body_ms"].get<double>());
            std::printf("  logits for all rows   %9.1f ms   sampling share %5.1f%%\n",
                        r["all_rows_ms"].get<double>(), 100 * r["share_all_rows"].get<double>());
            std::printf("  logits for needed rows%9.1f ms   sampling share %5.1f%%\n",
                        r["need_rows_ms"].get<double>(), 100 * r["share_need_rows"].get<double>());
            std::printf("  fused LM head         %9.1f ms   sampling share %5.1f%%\n",
                        r["fused_ms"].get<double>(), 100 * r["share_fused"].get<double>());
            return 0;
        }
        if (!e2e) {
            Peaks peaks;
            if (!no_peaks) peaks = measure_peaks(pool);
            report["peak_gflops"] = peaks.gflops;
            report["peak_int8_gops"] = peaks.int8_gops;
            report["peak_read_gbps"] = peaks.gbps;
            // The highest rates measured anywhere in the run: % of it is the conservative figure.
            Peaks best = peaks;
            nlohmann::json rows = nlohmann::json::array();
            for (int R : parse_int_list(rows_list, "--rows")) {
                // Rounds alternate ours and llama.cpp's runs so that a slow spell of the machine
                // hits both sides; each side reports its median over the rounds.
                const int n_rounds = llama_bench.empty() ? 1 : rounds;
                std::vector<nlohmann::json> ours;
                std::vector<double> ours_ms, theirs, ratios;
                for (int round = 0; round < n_rounds; ++round) {
                    // The compute peak again right before each round: on a shared machine the
                    // rate the cores give moves within a run, and % of peak is a ratio of two
                    // measurements that should see the same spell.
                    Peaks round_peaks = peaks;
                    if (!no_peaks) {
                        const Peaks now = measure_compute_peaks(pool, 0.25);
                        round_peaks.gflops = now.gflops;
                        round_peaks.int8_gops = now.int8_gops;
                        best.gflops = std::max(best.gflops, now.gflops);
                        best.int8_gops = std::max(best.int8_gops, now.int8_gops);
                    }
                    ours.push_back(
                        run_rows(*lm.model, *dev, {R}, prefix, reps, round_peaks, kv_f16)[0]);
                    ours_ms.push_back(ours.back()["ms"].get<double>());
                    if (llama_bench.empty()) continue;
                    theirs.push_back(run_llama_bench(llama_bench, model_path, R, reps, threads));
                    ratios.push_back(ours.back()["rows_per_s"].get<double>() / theirs.back());
                }
                // The round whose time is the median (the lower middle for an even count).
                std::vector<double> sorted_ms = ours_ms;
                std::sort(sorted_ms.begin(), sorted_ms.end());
                const double mid = sorted_ms[(sorted_ms.size() - 1) / 2];
                nlohmann::json r = ours[static_cast<size_t>(
                    std::find(ours_ms.begin(), ours_ms.end(), mid) - ours_ms.begin())];
                // The device's latency table for the same plan the rows ran (steady state).
                const runtime::Plan plan =
                    lm.model->build_plan(std::max(prefix, R), R, model::Model::Head::Stats);
                const int64_t r64 = R;
                const auto lat = dev->latency_table(plan, {&r64, 1}, prefix + R);
                if (!lat.empty()) {
                    r["projected_ms"] = lat[0].projected_ms;
                    r["projected_npu_ms"] = lat[0].npu_ms;
                    r["projected_cpu_ms"] = lat[0].cpu_ms;
                    r["bucket"] = lat[0].bucket;
                    r["device"] = dev->name();
                }
                if (!llama_bench.empty()) {
                    const double ts = median(theirs);  // the upper middle for an even count
                    r["llama_cpp_rows_per_s"] = ts;
                    r["ratio"] = r["rows_per_s"].get<double>() / ts;
                    r["rounds"] = n_rounds;
                    r["ratio_per_round"] = ratios;
                }
                rows.push_back(r);
            }
            // peak_pct is against the highest rate of the run: a peak sample the host slowed
            // would make the adjacent figure overshoot (it did, to 118 %, once).
            for (auto& r : rows) {
                const double b = r["peak_kind"] == "int8" ? best.int8_gops : best.gflops;
                r["peak_pct_adjacent"] = r["peak_pct"];
                r["peak_pct"] = b > 0 ? 100.0 * r["gflops"].get<double>() / b : 0.0;
            }
            report["best_peak_gflops"] = best.gflops;
            report["best_peak_int8_gops"] = best.int8_gops;
            report["results"] = rows;
            report["peak_rss_bytes"] = peak_rss_bytes();
            if (json) {
                std::printf("%s\n", report.dump(1).c_str());
                return 0;
            }
            std::printf("%s: %.2f B params, %.2f GB weights, %s, %d threads\n", model_path.c_str(),
                        lm.model->n_params() / 1e9, lm.model->weight_bytes() / 1e9,
                        kernels::active_target(), threads);
            std::printf(
                "measured peak: %.1f GFLOP/s (FMA), %.1f GOP/s (int8 dot), %.1f GB/s (read)\n"
                "%% peak is against the int8 ceiling for block-format weights, FMA otherwise: the\n"
                "highest rate measured in the run (%.1f / %.1f); %% adj against the rate measured\n"
                "right before the row count's round (column \"adj peak\")\n",
                peaks.gflops, peaks.int8_gops, peaks.gbps, best.gflops, best.int8_gops);
            std::printf("%6s %8s %10s %12s %10s %8s %8s %8s %14s %7s\n", "rows", "prefix", "ms",
                        "rows/s", "GFLOP/s", "% peak", "adj peak", "% adj", "llama.cpp t/s",
                        "ratio");
            if (dev->caps().projected) {
                std::printf("device %s, profile %s: projected ms per row count (latency table):\n",
                            dev->name().c_str(), dev->caps().profile.c_str());
                for (const auto& r : rows) {
                    if (r.contains("projected_ms")) {
                        std::printf(
                            "  rows %5d  bucket %5lld  projected %9.3f ms (NPU %.3f, CPU "
                            "%.3f)\n",
                            r["rows"].get<int>(), r["bucket"].get<long long>(),
                            r["projected_ms"].get<double>(), r["projected_npu_ms"].get<double>(),
                            r["projected_cpu_ms"].get<double>());
                    }
                }
            }
            for (const auto& r : rows) {
                std::printf("%6d %8d %10.2f %12.1f %10.1f %7.1f%% %8.1f %7.1f%%",
                            r["rows"].get<int>(), r["prefix"].get<int>(), r["ms"].get<double>(),
                            r["rows_per_s"].get<double>(), r["gflops"].get<double>(),
                            r["peak_pct"].get<double>(), r["peak_adjacent"].get<double>(),
                            r["peak_pct_adjacent"].get<double>());
                if (r.contains("ratio")) {
                    std::printf(" %14.1f %6.2fx", r["llama_cpp_rows_per_s"].get<double>(),
                                r["ratio"].get<double>());
                }
                std::printf("\n");
            }
            std::printf("peak RSS %.2f GB\n", peak_rss_bytes() / 1e9);
            return 0;
        }

        // End-to-end: a prompt of prompt_len tokens (BOS + printable bytes, one token each in a
        // byte-level vocabulary), the same text for llama.cpp.
        std::string prompt_text;
        for (int i = 0; i + 1 < prompt_len; ++i)
            prompt_text += static_cast<char>('a' + i % 26);
        const auto prompt = lm.tok->encode(prompt_text, lm.tok->add_bos_default(), false);
        nlohmann::json runs = nlohmann::json::array();
        for (int rep = 0; rep < reps; ++rep) {
            for (const std::string& spec : split(policies)) {
                decode::GenerateOptions opt;
                opt.gen = gen;
                opt.block = block;
                opt.steps = steps;
                opt.kernels.kv_f16 = kv_f16;
                opt.kernels.full_last_layer = full_last_layer;
                // NAME[+threshold][+revise]
                const auto parts = split(spec, '+');
                const std::string name = parts.empty() ? spec : parts[0];
                if (name == "threshold") opt.threshold = tau;
                for (size_t i = 1; i < parts.size(); ++i) {
                    if (parts[i] == "threshold") {
                        opt.threshold = tau;
                    } else if (parts[i] == "revise") {
                        opt.revise.on = true;
                    } else {
                        throw Error("--policies: unknown modifier '+" + parts[i] + "' in '" + spec +
                                    "' (known: +threshold, +revise)");
                    }
                }
                // With --replay every diffusion policy but vanilla takes the trace's decisions
                // (the same commits per step, so the policies differ only in their windows);
                // schedule policies keep their schedule (decode/trace.h).
                const bool replayed = trace && name != "vanilla" && name != "ar";
                if (replayed && opt.threshold > 0 && !trace->parallel) {
                    throw Error("--e2e " + spec +
                                " replays threshold decoding; the --replay trace was recorded on a "
                                "fixed schedule");
                }
                if (replayed && opt.revise.on) {
                    throw Error(
                        "--e2e " + spec +
                        ": revision decisions are not replayed in --e2e; --ablation's row 9 "
                        "replays them (--replay-revise)");
                }
                if (replayed) opt.early_stop = 0;  // the trace decoded every block
                if (name == "mbsd") {
                    // The host calibration of --lookahead auto, measured (or read) once before
                    // the timed runs, as llada-cli and llada-eval keep it in a file.
                    opt.calibration_file =
                        (std::filesystem::temp_directory_path() /
                         ("llada-bench-forward-cost-t" + std::to_string(threads) + ".txt"))
                            .string();
                    const int L = static_cast<int>(prompt.size()) + gen;
                    model::Session cal(*lm.model, *dev, 1, L, L, L, opt.kernels);
                    decode::lookahead_cost(cal, opt, L, L);
                }
                // A replay runs every trace of the sample (--replay-sample) and reports means.
                // (Schedule policies other than mbsd take nothing from a trace: run once.)
                const bool data_dependent = opt.threshold > 0 || name == "mbsd";
                const size_t n_req = replayed && data_dependent ? traces.mbsd.size() : 1;
                dev->reset_report();
                double wall = 0;
                decode::GenerateResult res;
                double nfe = 0, rows = 0, lm_rows = 0, dev_rows = 0, accepted = 0;
                for (size_t k = 0; k < n_req; ++k) {
                    if (replayed) opt.replay = &traces.mbsd[k];
                    auto policy = decode::make_policy(name, *lm.model, *dev, opt, lm.ids);
                    const auto t0 = Clock::now();
                    res = policy->generate(prompt);
                    wall += seconds_since(t0) / n_req;
                    nfe += static_cast<double>(res.stats.forwards) / n_req;
                    rows += static_cast<double>(res.stats.rows) / n_req;
                    lm_rows += static_cast<double>(res.stats.lm_head_rows) / n_req;
                    dev_rows += static_cast<double>(res.rows_device) / n_req;
                    accepted += static_cast<double>(res.drafts_accepted) / n_req;
                }
                runs.push_back({{"engine", "llada.cpp"},
                                {"policy", spec},
                                {"rep", rep},
                                {"wall_s", wall},
                                {"nfe", nfe},
                                {"rows", rows},
                                {"lm_head_rows", lm_rows},
                                {"rows_device", dev_rows},
                                {"drafts_accepted", accepted},
                                {"requests", n_req}});
                // Revision is never replayed (refused above), so a revising run is one request.
                if (opt.revise.on) runs.back()["revise"] = tools::revision_json(res.revision);
                if (replayed) runs.back()["replayed_from"] = trace->source;
                if (dev->caps().projected) {
                    runs.back()["device"] = tools::device_report_json(*dev->report());
                }
                std::fprintf(stderr, "llada.cpp %-22s %8.2f s  NFE %.2f", spec.c_str(), wall, nfe);
                if (opt.revise.on) {
                    std::fprintf(stderr, "  checks %lld revised %lld (CPU path exposed %.1f ms)",
                                 static_cast<long long>(res.revision.checks),
                                 static_cast<long long>(res.revision.revisions),
                                 res.revision.exposed_ms);
                }
                std::fprintf(stderr, "%s\n",
                             replayed ? "  (decisions REPLAYED from traces, mean)" : "");
            }
            if (!llama_diffusion.empty()) {
                // llama.cpp splits the whole ubatch (prompt + gen) into blocks, so the prompt's
                // blocks get steps too; steps must cover them (see BENCHMARKS.md).
                const int n_ub = static_cast<int>(prompt.size()) + gen;
                const int blocks_total = (n_ub + block - 1) / block;
                const int llama_steps = steps / (gen / block) * blocks_total;
                auto [wall, loop] = run_llama_diffusion(llama_diffusion, model_path, prompt_text,
                                                        n_ub, llama_steps, block, threads);
                runs.push_back({{"engine", "llama.cpp"},
                                {"policy", "llama-diffusion-cli"},
                                {"rep", rep},
                                {"wall_s", wall},
                                {"loop_s", loop},
                                {"nfe", llama_steps}});
                std::fprintf(stderr, "llama.cpp %-22s %8.2f s (denoising loop %.2f s, %d steps)\n",
                             "llama-diffusion-cli", wall, loop, llama_steps);
            }
        }
        report["e2e"] = runs;
        report["prompt_tokens"] = prompt.size();
        report["gen"] = gen;
        report["block"] = block;
        report["steps"] = steps;
        report["peak_rss_bytes"] = peak_rss_bytes();
        std::printf("%s\n", report.dump(json ? 1 : -1).c_str());
        return 0;
    });
}
