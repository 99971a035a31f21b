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
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "kernels/kernels.h"
#include "tools/bench/bench.h"
#include "tools/common.h"
#include "util/error.h"

using namespace llada;

int main(int argc, char** argv) {
    return tools::run_tool([&]() -> int {
        // Every flag of the modes is written straight into the options they read.
        tools::bench::Options o;
        bool e2e = false;
        tools::ArgTable args("llada-bench",
                             "Measures forward latency per row count (roofline table), or with "
                             "--e2e whole\ngenerations per policy, optionally beside llama.cpp.");
        tools::add_model_flag(args, &o.model_path, nullptr);
        tools::add_threads_flag(args, &o.threads);
        args.integer({"--reps"}, "N", "repetitions per measurement (median reported)", &o.reps, 1,
                     1000);
        args.flag({"--json"},
                  "print one JSON document on stdout and nothing else (tables go to stderr)",
                  &o.json);
        args.flag({"--full-last-layer"},
                  "e2e mode: run the last layer on every window row (to measure the gather of\n"
                  "the output rows before the last layer's attention and FFN)",
                  &o.full_last_layer);
        args.flag({"--kv-f16"}, "rows and e2e modes: the KV cache in fp16 instead of float32",
                  &o.kv_f16);
        args.section("Rows mode");
        args.string({"--rows"}, "LIST", "row counts (default 1,8,16,32,64,128,256)", &o.rows_list);
        args.integer({"--prefix"}, "P", "cached prefix positions the rows attend to (default 0)",
                     &o.prefix, 0, 1 << 20);
        args.flag({"--no-peaks"}, "skip the peak FLOP/s and bandwidth microbenchmarks",
                  &o.no_peaks);
        bool sampling = false;
        args.string({"--llama-bench"}, "PATH",
                    "an existing llama.cpp llama-bench binary: runs -p ROWS -n 0 on the same\n"
                    "file right after each of our row counts and reports the throughput ratio",
                    &o.llama_bench);
        args.integer(
            {"--rounds"}, "N",
            "with --llama-bench: alternate ours and llama.cpp's N times per row count and\n"
            "report each side's median over the rounds (default 1; a shared, noisy\n"
            "machine needs 3 or more)",
            &o.rounds, 1, 100);
        args.section("Sampling mode");
        args.flag({"--sampling"},
                  "the share of a step spent on the output head and sampling: logits for every\n"
                  "row, logits for the needed rows only, and the fused head",
                  &sampling);
        args.integer({"--window"}, "W", "rows a step computes (default 160)", &o.window, 1,
                     1 << 20);
        args.integer({"--need"}, "N", "rows whose prediction is needed (default 32)", &o.need, 1,
                     1 << 20);
        args.section("End-to-end mode");
        args.flag({"--e2e"}, "time whole generations per policy", &e2e);
        args.string(
            {"--policies"}, "LIST",
            "policies, '+threshold' adds --threshold, '+revise' progressive revision\n"
            "(default: vanilla, prefix-cache, dual-cache, threshold, dual-cache+threshold;\n"
            "e.g. mbsd+threshold+revise)",
            &o.policies);
        args.integer({"--prompt-len"}, "N", "prompt tokens, BOS included (default 32)",
                     &o.prompt_len, 1, 1 << 20);
        // The decoding options' ranges are the table's (decode/options.h), as in llada-cli.
        tools::add_option(args, decode::option("--gen"), &o.gen,
                          "generated positions (default 128)");
        tools::add_option(args, decode::option("--block"), &o.block, "block length (default 32)");
        tools::add_option(args, decode::option("--steps"), &o.steps, "steps (default: --gen)");
        tools::add_option(args, decode::option("--threshold"), &o.tau,
                          "tau of the threshold policies (default " +
                              number_str(decode::kDefaultThreshold) + ")");
        args.string({"--llama-diffusion"}, "PATH",
                    "an existing llama.cpp llama-diffusion-cli binary to run on the same file,\n"
                    "interleaved with ours (nothing of llama.cpp is built or shipped here)",
                    &o.llama_diffusion);
        bool ablation = false;
        args.section("Ablation mode (projected; uses --prompt-len, --gen, --block, --steps)");
        args.flag({"--ablation"},
                  "the published ablation's rows (CPU, + prefix KV cache, + NPU offload,\n"
                  "+ swap-optimised runtime), projected with --npu-profile (default sm8750)\n"
                  "and its CPU profile, beside the published seconds and the host wall time",
                  &ablation);
        args.string({"--ablation-configs"}, "DIGITS",
                    "which rows to run, e.g. 34 (default 123456789p; rows 6-9 and p, the\n"
                    "pipeline's, need traces)",
                    &o.ablation_configs);
        args.string({"--cache-policy"}, "NAME",
                    "the cached policy of rows 2-4: prefix-cache (default) or dual-cache",
                    &o.cache_policy);
        args.flag({"--no-sensitivity"}, "skip the map/unmap and copy cost sensitivity table",
                  &o.no_sensitivity);
        std::string replay_path, replay_need_path, replay_threshold_path, replay_revise_path,
            replay_pipeline_path;
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
                    "threshold + --revise, or + --self-check: the row takes the trace's form)",
                    &replay_revise_path);
        args.string({"--replay-pipeline"}, "FILE",
                    "--ablation: the trace of the row 'pipeline + threshold 0.9' (recorded\n"
                    "with --policy pipeline at the ablation's gen and block)",
                    &replay_pipeline_path);
        std::string revise_rows = "auto", revise_context = "fresh", revise_tail = "cpu";
        args.string({"--revise-tail"}, "cpu|dense",
                    "--ablation row 9: the checks left after the last block on the CPU path\n"
                    "(cpu, default) or as forwards of the NPU (dense)",
                    &revise_tail);
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
        if (o.model_path.empty()) throw Error("-m/--model is required");
        if (o.steps == 0) o.steps = o.gen;
        tools::check_commit_rule_flags(args, o.tau, 0.0);
        if (o.kv_f16 && (sampling || ablation))
            throw Error(
                "--kv-f16 applies to the rows and --e2e modes, not --sampling or --ablation");

        // The traces a replay takes: one (--replay-index, or the median-NFE one), or an evenly
        // spaced sample (--replay-sample N).
        if (replay_sample > 0 && replay_index >= 0)
            throw Error("give one of --replay-sample and --replay-index");
        if (e2e && (!replay_need_path.empty() || !replay_threshold_path.empty() ||
                    !replay_revise_path.empty() || !replay_pipeline_path.empty()))
            throw Error(
                "--replay-need, --replay-threshold, --replay-revise and --replay-pipeline are "
                "--ablation's; --e2e takes --replay");
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
        tools::bench::AblationTraces traces{
            load_traces(replay_path, ablation ? 0 : -1), load_traces(replay_need_path, 1),
            load_traces(replay_threshold_path, 1), load_traces(replay_revise_path, 1),
            load_traces(replay_pipeline_path, 1)};
        for (const auto* set :
             {&traces.mbsd, &traces.need, &traces.mbsd_threshold, &traces.pipeline}) {
            for (const auto& t : *set) {
                if (t.self_check)
                    throw Error("the decision trace from " + t.source +
                                " was recorded with --self-check: it is row 9's (--replay-revise)");
            }
        }
        for (const auto& t : traces.revise) {
            if (t.self_check != traces.revise.front().self_check)
                throw Error("--replay-revise: its traces mix --self-check and --revise runs");
        }
        for (const auto& t : traces.pipeline) {
            if (t.pipeline.depth == 0)
                throw Error("--replay-pipeline: the decision trace from " + t.source +
                            " was not recorded with --policy pipeline");
        }
        traces.revise_rows =
            tools::parse_auto_count("--revise-rows", revise_rows, 0, 1 << 20, "a row count >= 0");
        if (revise_context != "fresh" && revise_context != "snapshot")
            throw Error("--revise-context must be fresh or snapshot, got '" + revise_context + "'");
        traces.revise_fresh = revise_context == "fresh";
        if (revise_tail != "cpu" && revise_tail != "dense")
            throw Error("--revise-tail must be cpu or dense, got '" + revise_tail + "'");
        traces.revise_tail_dense = revise_tail == "dense";
        const auto t_load = tools::bench::Clock::now();
        tools::LoadedModel lm = tools::load_model(o.model_path);
        const double load_s = tools::bench::seconds_since(t_load);
        runtime::ThreadPool pool(o.threads);
        // The ablation makes its own devices, one per configuration.
        std::unique_ptr<runtime::Device> dev = ablation ? nullptr : devf.make(pool);
        nlohmann::json report = {{"model", o.model_path},
                                 {"threads", o.threads},
                                 {"simd", kernels::active_target()},
                                 {"params", lm.model->n_params()},
                                 {"weight_bytes", lm.model->weight_bytes()},
                                 {"load_s", load_s}};
        if (ablation) {
            return tools::bench::ablation_mode(o, lm, devf.config, pool, traces, report);
        }
        if (sampling) return tools::bench::sampling_mode(o, lm, *dev, report);
        if (!e2e) return tools::bench::rows_mode(o, lm, *dev, pool, report);
        return tools::bench::e2e_mode(o, lm, *dev, traces, report);
    });
}
