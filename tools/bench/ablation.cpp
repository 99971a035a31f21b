// llada-bench's ablation mode: the published on-phone ablation's rows, each projected by the
// device cost model (npu-sim and its CPU profile), beside the published seconds.
#include <algorithm>
#include <cstdio>

#include "decode/policy.h"
#include "decode/registry.h"
#include "npu/profile.h"
#include "tools/bench/bench.h"
#include "util/error.h"

namespace llada::tools::bench {
namespace {

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
    // Not in the paper: training-free pipelined blocks (threshold 0.9 in the current block),
    // replayed from --replay-pipeline: forwards cut across blocks instead of within one.
    {"  (pipeline + threshold 0.9)", "pipeline", true, "optimised", 0.0, true},
};

// The --ablation-configs character of row i: its number, and 'p' for the pipeline row.
char row_key(size_t i) {
    return i < 9 ? static_cast<char>('1' + i) : 'p';
}

struct AblationRun {
    double wall_s = 0;
    runtime::DeviceReport rep;
    model::ForwardStats stats;
    std::vector<int> lookahead;  // per step of the first request
    int64_t drafts_accepted = 0, drafts_rejected = 0;
    int requests = 1;                           // requests the report and counters sum over
    decode::GenerateResult::Revision revision;  // summed over requests (row 9)
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
    // Rows 1-3: a policy without a cache stays itself; a cache policy is the bench's choice.
    std::string policy = decode::policy_info(row.policy).window == decode::WindowMode::Full
                             ? std::string(row.policy)
                             : cache_policy;
    const std::vector<decode::DecisionTrace>* replay = nullptr;
    const size_t index = static_cast<size_t>(&row - kAblation);
    if (index >= 4) policy = row.policy;
    if (row.replayed) {
        replay = &traces.of(index);
        // Rows 7-9 commit by the threshold rule (the trace's counts); row 6 keeps the schedule.
        if (index >= 6) opt.threshold = decode::kDefaultThreshold;
        // Row 9 takes the form its trace was recorded in: the CPU lane's checks (--revise), or
        // the refresh rows' (--self-check, a model trained to judge its fed tokens).
        const bool self_check = index == 8 && replay->front().self_check;
        opt.revise.on = index == 8 && !self_check;
        opt.self_check.on = self_check;
        if (self_check) opt.self_check.threshold = replay->front().self_check_threshold;
        opt.revise.rows = traces.revise_rows;
        opt.revise.fresh_context = traces.revise_fresh;
        opt.revise.tail_dense = traces.revise_tail_dense;
        if (index == 9) decode::use_trace_pipeline(replay->front(), opt);
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
        r.revision.add(res.revision);
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
        if (configs.find(row_key(i)) == std::string::npos) continue;
        const AblationRow& row = kAblation[i];
        const auto& row_traces = traces.of(i);
        const decode::DecisionTrace* trace = row_traces.empty() ? nullptr : &row_traces[0];
        if (row.replayed && trace == nullptr) {
            std::fprintf(text, "%-34s %12.1f   (needs a decision trace: %s FILE)\n", row.name,
                         row.published_s,
                         i == 5   ? "--replay"
                         : i == 6 ? "--replay-need"
                         : i == 7 ? "--replay-threshold"
                         : i == 8 ? "--replay-revise"
                                  : "--replay-pipeline");
            continue;
        }
        const AblationRun r =
            run_ablation_row(lm, row, cache_policy, base, prompt, gen, block, steps, pool, traces);
        // With revision a step costs the longer of the NPU and CPU lanes (plus the shared-DRAM
        // slowdown of their overlap and the merge), not the NPU lane alone.
        const bool revise = i == 8 && !trace->self_check;
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
        if (i == 8 && trace->self_check) {
            const double n = r.requests;
            j["self_check"] = {{"threshold", trace->self_check_threshold},
                               {"checks", r.revision.checks / n},
                               {"revisions", r.revision.revisions / n},
                               {"lm_head_rows", static_cast<double>(r.stats.lm_head_rows) / n}};
            std::fprintf(text,
                         "  SELF-CHECKS per request: %.0f checks in the K/V refresh rows (no extra "
                         "forward row; %.0f LM-head rows in all), %.2f revised\n",
                         r.revision.checks / n, static_cast<double>(r.stats.lm_head_rows) / n,
                         r.revision.revisions / n);
        }
        if (revise) {
            const auto& v = r.revision;
            const double n = r.requests;
            j["revision"] = {
                {"checks", v.checks / n},
                {"refreshes", v.refreshes / n},
                {"revisions", v.revisions / n},
                {"remasks", v.remasks / n},
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
                "refreshes, %.1f revised, %.1f remasked, %.1f CPU-only steps), shared-DRAM "
                "slowdown %.2f s, "
                "merge %.3f s; step = max(lanes) + slowdown + merge -> %.2f s (both lanes in "
                "series: %.2f s)\n",
                npu_s, cpu_s, v.checks / n, v.refreshes / n, v.revisions / n, v.remasks / n,
                v.lane_only_steps / n, v.proj_contention_ms / 1e3 / n, v.proj_merge_ms / 1e3 / n,
                proj, npu_s + cpu_s + v.proj_merge_ms / 1e3 / n);
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

int ablation_mode(const Options& o, const LoadedModel& lm,
                  const runtime::DeviceConfig& device_config, runtime::ThreadPool& pool,
                  const AblationTraces& traces, nlohmann::json& report) {
    std::string text;
    for (int i = 0; i + 1 < o.prompt_len; ++i)
        text += static_cast<char>('a' + i % 26);
    const auto ids = lm.tok->encode(text, lm.tok->add_bos_default(), false);
    report["ablation"] =
        run_ablation(lm, device_config, o.ablation_configs, o.cache_policy, ids, o.gen, o.block,
                     o.steps, !o.no_sensitivity, pool, traces, o.json ? stderr : stdout);
    report["prompt_tokens"] = ids.size();
    report["gen"] = o.gen;
    report["block"] = o.block;
    report["steps"] = o.steps;
    report["peak_rss_bytes"] = peak_rss_bytes();
    if (o.json) std::printf("%s\n", report.dump(1).c_str());
    return 0;
}

}  // namespace llada::tools::bench
