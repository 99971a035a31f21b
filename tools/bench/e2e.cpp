// llada-bench's --e2e mode: whole generations per decoding policy, with llama.cpp's
// llama-diffusion-cli on the same file interleaved (--llama-diffusion), decisions optionally
// replayed from a trained model's trace (--replay).
#include <cstdio>
#include <filesystem>
#include <optional>

#include "decode/lookahead.h"
#include "decode/policy.h"
#include "decode/registry.h"
#include "tools/bench/bench.h"
#include "util/error.h"

namespace llada::tools::bench {

int e2e_mode(const Options& o, const LoadedModel& lm, runtime::Device& device,
             const AblationTraces& traces, nlohmann::json& report) {
    runtime::Device* dev = &device;
    std::optional<decode::DecisionTrace> trace;
    if (!traces.mbsd.empty()) trace = traces.mbsd[0];
    // End-to-end: a prompt of prompt_len tokens (BOS + printable bytes, one token each in a
    // byte-level vocabulary), the same text for llama.cpp.
    std::string prompt_text;
    for (int i = 0; i + 1 < o.prompt_len; ++i)
        prompt_text += static_cast<char>('a' + i % 26);
    const auto prompt = lm.tok->encode(prompt_text, lm.tok->add_bos_default(), false);
    nlohmann::json runs = nlohmann::json::array();
    for (int rep = 0; rep < o.reps; ++rep) {
        for (const std::string& spec : split(o.policies)) {
            decode::GenerateOptions opt;
            opt.gen = o.gen;
            opt.block = o.block;
            opt.steps = o.steps;
            opt.kernels.kv_f16 = o.kv_f16;
            opt.kernels.full_last_layer = o.full_last_layer;
            // NAME[+threshold][+revise]
            const auto parts = split(spec, '+');
            const std::string name = parts.empty() ? spec : parts[0];
            const decode::PolicyInfo& info = decode::policy_info(name);
            // The policies whose rule is a threshold take --threshold's tau without +threshold.
            if (info.parallel_only) opt.threshold = o.tau;
            for (size_t i = 1; i < parts.size(); ++i) {
                if (parts[i] == "threshold") {
                    opt.threshold = o.tau;
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
            const bool replayed = trace && info.takes_option(decode::Takes::CommitRule);
            if (replayed && opt.threshold > 0 && !trace->parallel) {
                throw Error("--e2e " + spec +
                            " replays threshold decoding; the --replay trace was recorded on a "
                            "fixed schedule");
            }
            if (replayed && opt.revise.on) {
                throw Error("--e2e " + spec +
                            ": revision decisions are not replayed in --e2e; --ablation's row 9 "
                            "replays them (--replay-revise)");
            }
            if (replayed) {
                opt.early_stop = 0;  // the trace decoded every block
                decode::use_trace_pipeline(*trace, opt);
            }
            if (info.speculate) {
                // The host calibration of --lookahead auto, measured (or read) once before
                // the timed runs, as llada-cli and llada-eval keep it in a file.
                opt.calibration_file =
                    (std::filesystem::temp_directory_path() /
                     ("llada-bench-forward-cost-t" + std::to_string(o.threads) + ".txt"))
                        .string();
                const int L = static_cast<int>(prompt.size()) + o.gen;
                model::Session cal(*lm.model, *dev, 1, L, L, L, opt.kernels);
                decode::lookahead_cost(cal, opt, L, L);
            }
            // A replay runs every trace of the sample (--replay-sample) and reports means.
            // (Schedule policies other than mbsd take nothing from a trace: run once.)
            const bool data_dependent = opt.threshold > 0 || info.speculate;
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
        if (!o.llama_diffusion.empty()) {
            // llama.cpp splits the whole ubatch (prompt + gen) into blocks, so the prompt's
            // blocks get steps too; steps must cover them (see BENCHMARKS.md).
            const int n_ub = static_cast<int>(prompt.size()) + o.gen;
            const int blocks_total = (n_ub + o.block - 1) / o.block;
            const int llama_steps = o.steps / (o.gen / o.block) * blocks_total;
            auto [wall, loop] = run_llama_diffusion(o.llama_diffusion, o.model_path, prompt_text,
                                                    n_ub, llama_steps, o.block, o.threads);
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
    report["gen"] = o.gen;
    report["block"] = o.block;
    report["steps"] = o.steps;
    report["peak_rss_bytes"] = peak_rss_bytes();
    std::printf("%s\n", report.dump(o.json ? 1 : -1).c_str());
    return 0;
}

}  // namespace llada::tools::bench
