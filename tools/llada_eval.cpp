// llada-eval: accuracy and cost of a decoding policy on a JSONL task set.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "decode/policy.h"
#include "decode/registry.h"
#include "format/output_file.h"
#include "runtime/device.h"
#include "tools/common.h"
#include "tools/eval.h"
#include "util/error.h"

using namespace llada;

namespace {

// Revisions against the expected answer (its tokens, then end-of-text): a replacement that
// turned the expected token into another (right_to_wrong) or another into it (wrong_to_right),
// and remasks of an expected token or of a wrong one.
using GoldRevisions = decode::RevisionSplit;

nlohmann::json gold_json(const GoldRevisions& g) {
    return {{"right_to_wrong", g.right_to_wrong},
            {"wrong_to_right", g.wrong_to_right},
            {"wrong_to_wrong", g.wrong_to_wrong},
            {"remasks_of_right", g.remasks_of_right},
            {"remasks_of_wrong", g.remasks_of_wrong}};
}

GoldRevisions gold_revisions(const decode::GenerateResult& r, const std::vector<int32_t>& answer,
                             const decode::TokenIds& ids) {
    return decode::split_revisions(r.revision_events, r.prompt_len, answer,
                                   ids.eos >= 0 ? ids.eos : ids.eot, ids.mask);
}

struct Tally {
    int64_t n = 0, correct = 0, nfe = 0, rows = 0, lm_head_rows = 0, rows_device = 0;
    int64_t drafts_proposed = 0, drafts_accepted = 0, drafts_rejected = 0, drafts_early = 0;
    int64_t ahead_committed = 0, ahead_verified = 0, ahead_rejected = 0;  // pipeline
    decode::GenerateResult::Revision rv;                                  // summed over problems
    int64_t tokens = 0;         // positions the policy decided
    int64_t answer_tokens = 0;  // tokens before the first EOS
    double wall_s = 0.0;

    GoldRevisions gold;
    // Test-time scaling: problems the vote, the confidence choice, any candidate (pass@N) and
    // the first candidate (its seed alone) got right.
    int64_t tts_vote = 0, tts_confidence = 0, tts_pass = 0, tts_first = 0;

    void add_tts(bool vote, bool confidence, bool pass, bool first) {
        tts_vote += vote;
        tts_confidence += confidence;
        tts_pass += pass;
        tts_first += first;
    }

    void add(const decode::GenerateResult& r, int64_t answer_len, bool ok, const GoldRevisions& g) {
        gold.add(g);
        n += 1;
        correct += ok;
        nfe += r.stats.forwards;
        rows += r.stats.rows;
        lm_head_rows += r.stats.lm_head_rows;
        rows_device += r.rows_device;
        drafts_proposed += r.drafts_proposed;
        drafts_accepted += r.drafts_accepted;
        drafts_rejected += r.drafts_rejected;
        drafts_early += r.drafts_accepted_early;
        ahead_committed += r.ahead_committed;
        ahead_verified += r.ahead_verified;
        ahead_rejected += r.ahead_rejected;
        const auto& a = r.revision;
        rv.checks += a.checks;
        rv.refreshes += a.refreshes;
        rv.lane_only_steps += a.lane_only_steps;
        rv.revisions += a.revisions;
        rv.right_to_wrong += a.right_to_wrong;
        rv.wrong_to_right += a.wrong_to_right;
        rv.wrong_to_wrong += a.wrong_to_wrong;
        rv.remasks += a.remasks;
        rv.remasks_of_right += a.remasks_of_right;
        rv.remasks_of_wrong += a.remasks_of_wrong;
        rv.stabilised += a.stabilised;
        rv.commit_to_stable_steps += a.commit_to_stable_steps;
        rv.cpu_ms += a.cpu_ms;
        rv.exposed_ms += a.exposed_ms;
        rv.proj_dense_ms += a.proj_dense_ms;
        rv.proj_cpu_ms += a.proj_cpu_ms;
        rv.proj_merge_ms += a.proj_merge_ms;
        rv.proj_contention_ms += a.proj_contention_ms;
        rv.proj_step_ms += a.proj_step_ms;
        int64_t decided = 0;
        for (const auto& s : r.steps)
            decided += s.committed;
        tokens += decided;
        answer_tokens += answer_len;
        wall_s += r.wall_s;
    }

    nlohmann::json to_json() const {
        const auto ci = tools::wilson95(correct, n);
        const double dn = n > 0 ? static_cast<double>(n) : 1.0;
        return {{"n", n},
                {"correct", correct},
                {"accuracy", correct / dn},
                {"ci95", {ci.lo, ci.hi}},
                {"nfe", nfe / dn},
                {"rows", rows / dn},
                {"lm_head_rows", lm_head_rows / dn},
                {"rows_device", rows_device / dn},
                {"drafts_proposed", drafts_proposed / dn},
                {"drafts_accepted", drafts_accepted / dn},
                {"drafts_rejected", drafts_rejected / dn},
                {"drafts_accepted_early", drafts_early / dn},
                {"draft_acceptance",
                 drafts_accepted + drafts_rejected > 0
                     ? static_cast<double>(drafts_accepted) / (drafts_accepted + drafts_rejected)
                     : 0.0},
                {"tokens_per_s", wall_s > 0 ? tokens / wall_s : 0.0},
                {"answer_tokens_per_s", wall_s > 0 ? answer_tokens / wall_s : 0.0},
                {"wall_s", wall_s},
                // Progressive revision: totals over the problems (not per problem).
                {"revision", tools::revision_json(rv)},
                {"revision_vs_answer", gold_json(gold)},
                {"tts", tts_json()},
                // pipeline: per problem, positions committed ahead of their block and how their
                // verification went.
                {"ahead",
                 {{"committed", ahead_committed / dn},
                  {"verified", ahead_verified / dn},
                  {"rejected", ahead_rejected / dn}}}};
    }

    nlohmann::json tts_json() const {
        auto acc = [&](int64_t k) {
            const auto ci = tools::wilson95(k, n);
            return nlohmann::json{{"correct", k},
                                  {"accuracy", n > 0 ? static_cast<double>(k) / n : 0.0},
                                  {"ci95", {ci.lo, ci.hi}}};
        };
        return {{"vote", acc(tts_vote)},
                {"confidence", acc(tts_confidence)},
                {"pass", acc(tts_pass)},
                {"first_candidate", acc(tts_first)}};
    }
};

void progress(int done, int total, int64_t correct) {
    const int width = 30;
    const int filled = total > 0 ? done * width / total : width;
    std::fprintf(stderr, "\r[%s%s] %d/%d  accuracy %.1f%%", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done, total,
                 done > 0 ? 100.0 * correct / done : 0.0);
    std::fflush(stderr);
}

}  // namespace

int main(int argc, char** argv) {
    return tools::run_tool([&]() -> int {
        std::string model_path, tasks_path, answer_regex, out_path, trace_out;
        int limit = 0, parallel = 1;
        bool json = false, chat = false, no_progress = false;
        int threads = 0;
        tools::DecodeFlags dec;
        tools::DeviceFlags devf;
        tools::ArgTable args("llada-eval",
                             "Generates an answer for every problem of a JSONL task file "
                             "({\"task\", \"prompt\", \"answer\"}),\nscores it and reports "
                             "accuracy (95% Wilson interval) and cost per task and overall.");
        args.section("Model and tasks");
        tools::add_model_flag(args, &model_path, tools::kDefaultModel);
        args.string({"--tasks"}, "FILE", "JSONL task file", &tasks_path);
        args.integer({"--limit"}, "N", "only the first N problems", &limit, 1, 1 << 30);
        args.string({"--answer-regex"}, "RE",
                    "score the last match (group 1) of this PCRE2 regex instead of the whole "
                    "text,\ne.g. '#### (\\S+)' for GSM8K-style answers",
                    &answer_regex);
        args.flag({"--chat"}, "wrap each prompt in the model's chat format", &chat);
        dec.add_to(args);
        devf.add_to(args);
        args.section("Output");
        args.flag({"--json"}, "print one JSON object (n, accuracy, ci95, nfe, tokens_per_s, ...)",
                  &json);
        args.string({"--out"}, "FILE", "also write every problem's generation as JSONL", &out_path);
        args.string({"--trace-out"}, "FILE",
                    "write every problem's decision trace, one per line, for llada-bench --replay",
                    &trace_out);
        args.flag({"--no-progress"}, "no progress bar", &no_progress);
        args.integer({"--parallel"}, "N",
                     "problems decoded at once, each with its own -t threads (for tiny models\n"
                     "--parallel 2 -t 1 beats -t 2: a step is too small to split)",
                     &parallel, 1, 256);
        tools::add_threads_flag(args, &threads);
        if (!args.parse(argc, argv)) return 0;
        if (tasks_path.empty()) throw Error("--tasks FILE is required");
        if (model_path.empty()) model_path = tools::find_default_model(argv[0]);
        for (const std::string& o : {out_path, trace_out}) {
            if (!o.empty()) format::refuse_overwriting_input(o, {tasks_path, model_path});
        }
        if (!out_path.empty() && out_path == trace_out)
            throw Error("--out and --trace-out name the same file '" + out_path + "'");

        std::vector<tools::Problem> problems = tools::read_problems(tasks_path);
        if (limit > 0 && static_cast<size_t>(limit) < problems.size()) problems.resize(limit);
        const tools::AnswerMatcher matcher(answer_regex);
        tools::LoadedModel lm = tools::load_model(model_path);
        dec.finish(args, *lm.model);
        dec.set_calibration_file(model_path, threads);
        // One pool, device and policy per parallel worker; problems are independent.
        struct Worker {
            std::unique_ptr<runtime::ThreadPool> pool;
            std::unique_ptr<runtime::Device> device;
            std::unique_ptr<decode::Policy> policy;
        };
        std::vector<Worker> workers(static_cast<size_t>(parallel));
        for (auto& w : workers) {
            w.pool = std::make_unique<runtime::ThreadPool>(threads);
            w.device = devf.make(*w.pool);
            w.policy = decode::make_policy(dec.policy, *lm.model, *w.device, dec.opt, lm.ids);
        }
        const decode::Policy& policy = *workers[0].policy;
        int n_tts = dec.tts;  // --tts auto: sized once, for the longest prompt
        if (n_tts < 0) {
            size_t longest = 0;
            for (const auto& pb : problems) {
                longest = std::max(longest, tools::problem_ids(*lm.tok, pb.prompt, chat).size());
            }
            n_tts =
                tools::resolve_tts(dec, *lm.model, *workers[0].device, static_cast<int>(longest));
        }

        // Written aside and renamed at the end (format/output_file.h).
        std::unique_ptr<format::OutputFile> out_file;
        if (!out_path.empty()) out_file = std::make_unique<format::OutputFile>(out_path);
        std::FILE* out = out_file ? out_file->get() : nullptr;
        const bool show_progress = !no_progress && isatty(fileno(stderr));
        std::map<std::string, Tally> per_task;
        Tally all;
        const auto t0 = std::chrono::steady_clock::now();
        struct Outcome {
            decode::GenerateResult res;
            int64_t answer_len = 0;
            std::string generated;
            bool ok = false;
            GoldRevisions gold;
            bool tts_vote = false, tts_confidence = false, tts_pass = false, tts_first = false;
            nlohmann::json tts;  // the candidates and the choice (--tts)
        };
        std::vector<Outcome> outcomes(problems.size());
        std::atomic<size_t> next{0}, finished{0};
        std::atomic<bool> failed{false};
        std::string failure;
        std::mutex failure_mu;
        auto work = [&](Worker& w) {
            for (size_t i; !failed && (i = next.fetch_add(1)) < problems.size();) {
                try {
                    const auto& pb = problems[i];
                    const auto ids = tools::problem_ids(*lm.tok, pb.prompt, chat);
                    Outcome& o = outcomes[i];
                    if (n_tts > 0) {
                        // N candidates in one batch; the chosen one stands for the problem,
                        // charged the whole batch's forwards, rows and time.
                        auto c = decode::generate_candidates(dec.policy, *lm.model, *w.device,
                                                             dec.opt, lm.ids, ids, n_tts);
                        const auto t = tools::choose_candidate(
                            c, *lm.tok, lm.ids, dec.select,
                            [&](const std::string& s) { return matcher.extract(s).value_or(""); });
                        o.tts_vote = tools::score(matcher, pb, t.texts[t.vote]);
                        o.tts_confidence = tools::score(matcher, pb, t.texts[t.by_confidence]);
                        o.tts_first = tools::score(matcher, pb, t.texts[0]);
                        for (const auto& text : t.texts)
                            o.tts_pass = o.tts_pass || tools::score(matcher, pb, text);
                        o.tts = tools::tts_json(t, dec.select);
                        o.res = std::move(c.candidates[t.chosen]);
                        o.res.stats.forwards = c.forwards;
                        o.res.stats.rows = c.rows;
                        o.res.wall_s = c.wall_s;
                    } else {
                        o.res = w.policy->generate(ids);
                    }
                    const auto answer = o.res.answer(lm.ids);
                    o.answer_len = static_cast<int64_t>(answer.size());
                    o.generated = lm.tok->decode(answer, false);
                    o.ok = tools::score(matcher, pb, o.generated);
                    if (!o.res.revision_events.empty()) {
                        o.gold =
                            gold_revisions(o.res, lm.tok->encode(pb.answer, false, false), lm.ids);
                    }
                } catch (const std::exception& e) {
                    std::lock_guard<std::mutex> lock(failure_mu);
                    failure = e.what();
                    failed = true;
                }
                finished.fetch_add(1);
            }
        };
        std::vector<std::thread> threads_run;
        for (size_t k = 1; k < workers.size(); ++k)
            threads_run.emplace_back(work, std::ref(workers[k]));
        if (show_progress && workers.size() > 1) {
            // The first worker's problems run on this thread too; progress is polled between.
            threads_run.emplace_back(work, std::ref(workers[0]));
            while (finished.load() < problems.size() && !failed) {
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
                int64_t correct = 0;
                progress(static_cast<int>(finished.load()), static_cast<int>(problems.size()),
                         correct);
            }
        } else {
            work(workers[0]);
        }
        for (auto& t : threads_run)
            t.join();
        if (failed) throw Error(failure);
        for (size_t i = 0; i < problems.size(); ++i) {
            const auto& pb = problems[i];
            const Outcome& o = outcomes[i];
            per_task[pb.task].add(o.res, o.answer_len, o.ok, o.gold);
            all.add(o.res, o.answer_len, o.ok, o.gold);
            per_task[pb.task].add_tts(o.tts_vote, o.tts_confidence, o.tts_pass, o.tts_first);
            all.add_tts(o.tts_vote, o.tts_confidence, o.tts_pass, o.tts_first);
            if (out) {
                nlohmann::json j = {{"task", pb.task},     {"prompt", pb.prompt},
                                    {"answer", pb.answer}, {"generated", o.generated},
                                    {"correct", o.ok},     {"nfe", o.res.stats.forwards}};
                j["rows"] = o.res.stats.rows;
                if (n_tts > 0) j["tts"] = o.tts;
                j["rows_device"] = o.res.rows_device;
                j["drafts"] = {{"proposed", o.res.drafts_proposed},
                               {"accepted", o.res.drafts_accepted},
                               {"accepted_early", o.res.drafts_accepted_early},
                               {"rejected", o.res.drafts_rejected}};
                if (o.res.ahead_committed > 0) {
                    j["ahead"] = {{"committed", o.res.ahead_committed},
                                  {"verified", o.res.ahead_verified},
                                  {"rejected", o.res.ahead_rejected}};
                }
                if (o.res.revision.checks > 0) {
                    j["revision"] = tools::revision_json(o.res.revision);
                    j["revision_vs_answer"] = gold_json(o.gold);
                }
                // Per-step commit counts per block: the schedule a trace replay needs.
                nlohmann::json commits = nlohmann::json::array();
                for (const auto& s : o.res.steps)
                    commits.push_back({s.block, s.committed});
                j["commits"] = commits;
                std::fprintf(
                    out, "%s\n",
                    j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
            }
            if (show_progress && workers.size() == 1)
                progress(static_cast<int>(i + 1), static_cast<int>(problems.size()), all.correct);
        }
        if (out_file) out_file->commit();
        if (!trace_out.empty()) {
            format::OutputFile tf(trace_out);
            for (size_t i = 0; i < problems.size(); ++i) {
                auto j = tools::trace_json(outcomes[i].res, dec.opt, model_path, policy.name());
                j["problem"] = i;
                const std::string line = j.dump() + "\n";
                tf.write(line.data(), line.size());
            }
            tf.commit();
        }
        if (show_progress) std::fputs("\n", stderr);
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

        nlohmann::json report = all.to_json();
        report["elapsed_s"] = elapsed;
        report["model"] = model_path;
        report["tasks"] = tasks_path;
        report["policy"] = policy.name();
        report["options"] = {{"gen", dec.opt.gen},
                             {"steps", dec.opt.steps},
                             {"block", dec.opt.block},
                             {"temperature", dec.opt.temperature},
                             {"cfg", dec.opt.cfg},
                             {"remasking", decode::remasking_name(dec.opt.remasking)},
                             {"seed", dec.opt.seed},
                             {"threads", threads},
                             {"parallel", parallel},
                             {"threshold", dec.opt.threshold},
                             {"factor", dec.opt.factor},
                             {"refresh", dec.opt.refresh},
                             {"early_stop", dec.opt.early_stop},
                             {"lookahead", dec.lookahead},
                             {"accept", dec.opt.accept},
                             {"draft_input", dec.draft_input}};
        const bool pipelined = decode::policy_info(policy.name()).pipeline;
        if (pipelined) {
            report["options"]["pipeline_start"] = dec.opt.pipeline_start;
            report["options"]["pipeline_threshold"] = dec.opt.pipeline_threshold;
            report["options"]["pipeline_min"] = dec.opt.pipeline_min;
            report["options"]["pipeline_accept"] = dec.opt.pipeline_accept;
            report["options"]["pipeline_depth"] = dec.opt.pipeline_depth;
            report["options"]["pipeline_verify"] =
                decode::pipeline_verify_name(dec.opt.pipeline_verify);
        }
        nlohmann::json tasks = nlohmann::json::object();
        for (const auto& [name, t] : per_task)
            tasks[name] = t.to_json();
        report["per_task"] = tasks;
        if (const runtime::DeviceReport* rep = workers[0].device->report(); rep && rep->projected) {
            report["device"] = tools::device_report_json(*rep);
        }
        if (n_tts == 0) {
            report.erase("tts");
            for (auto& [name, t] : report["per_task"].items())
                t.erase("tts");
        }
        if (!pipelined) {
            report.erase("ahead");
            for (auto& [name, t] : report["per_task"].items())
                t.erase("ahead");
        }
        if (json) {
            std::printf("%s\n", report.dump(1).c_str());
            return 0;
        }
        std::printf("%s on %s: policy %s, gen %d, steps %d, block %d, T %g\n", model_path.c_str(),
                    tasks_path.c_str(), policy.name(), dec.opt.gen, dec.opt.steps, dec.opt.block,
                    dec.opt.temperature);
        std::printf("%-10s %6s %9s %17s %8s %9s %10s %10s %9s\n", "task", "n", "accuracy", "95% CI",
                    "NFE", "rows", "LM rows", "tokens/s", "wall s");
        auto row = [](const std::string& name, const nlohmann::json& t) {
            std::printf("%-10s %6lld %8.2f%% [%6.2f, %6.2f] %8.1f %9.1f %10.1f %10.1f %9.2f\n",
                        name.c_str(), t["n"].get<long long>(), 100 * t["accuracy"].get<double>(),
                        100 * t["ci95"][0].get<double>(), 100 * t["ci95"][1].get<double>(),
                        t["nfe"].get<double>(), t["rows"].get<double>(),
                        t["lm_head_rows"].get<double>(), t["tokens_per_s"].get<double>(),
                        t["wall_s"].get<double>());
        };
        for (const auto& [name, t] : tasks.items())
            row(name, t);
        row("overall", report);
        if (pipelined) {
            std::printf(
                "ahead of their block per problem: %.1f committed, %.1f verified, %.1f "
                "rejected\n",
                report["ahead"]["committed"].get<double>(),
                report["ahead"]["verified"].get<double>(),
                report["ahead"]["rejected"].get<double>());
        }
        if (report["drafts_proposed"].get<double>() > 0) {
            std::printf(
                "drafts per problem: %.1f proposed, %.1f accepted, %.1f rejected "
                "(%.1f%% of evaluated drafts accepted); device rows %.1f\n",
                report["drafts_proposed"].get<double>(), report["drafts_accepted"].get<double>(),
                report["drafts_rejected"].get<double>(),
                100 * report["draft_acceptance"].get<double>(),
                report["rows_device"].get<double>());
        }
        if (const auto& rv = report["revision"]; rv["checks"].get<int64_t>() > 0) {
            std::printf(
                "revision: %lld checks (CPU-path rows %lld), %lld replaced (against the final "
                "canvas: "
                "%lld wrong->right, %lld right->wrong, %lld wrong->wrong), %lld remasked (%lld of "
                "the final token), "
                "%.2f steps from commit to stable; CPU path %.1f ms, %.1f ms exposed\n",
                (long long)rv["checks"].get<int64_t>(),
                (long long)(rv["checks"].get<int64_t>() + rv["refreshes"].get<int64_t>()),
                (long long)rv["revisions"].get<int64_t>(),
                (long long)rv["wrong_to_right"].get<int64_t>(),
                (long long)rv["right_to_wrong"].get<int64_t>(),
                (long long)rv["wrong_to_wrong"].get<int64_t>(),
                (long long)rv["remasks"].get<int64_t>(),
                (long long)rv["remasks_of_right"].get<int64_t>(),
                rv["mean_steps_commit_to_stable"].get<double>(), rv["cpu_ms"].get<double>(),
                rv["exposed_ms"].get<double>());
            const auto& g = report["revision_vs_answer"];
            std::printf(
                "revision against the expected answer: %lld wrong->right, %lld right->wrong, %lld "
                "wrong->wrong; %lld remasks of a right token, %lld of a wrong one\n",
                (long long)g["wrong_to_right"].get<int64_t>(),
                (long long)g["right_to_wrong"].get<int64_t>(),
                (long long)g["wrong_to_wrong"].get<int64_t>(),
                (long long)g["remasks_of_right"].get<int64_t>(),
                (long long)g["remasks_of_wrong"].get<int64_t>());
        }
        if (n_tts > 0) {
            const auto& t = report["tts"];
            auto pct = [&](const char* k) { return 100 * t[k]["accuracy"].get<double>(); };
            std::printf(
                "test-time scaling, %d candidates (chosen by %s): vote %.2f%%, confidence %.2f%%, "
                "pass@%d %.2f%%, first candidate %.2f%%\n",
                n_tts, dec.select.c_str(), pct("vote"), pct("confidence"), n_tts, pct("pass"),
                pct("first_candidate"));
        }
        if (const runtime::DeviceReport* rep = workers[0].device->report(); rep && rep->projected) {
            std::printf("%s", rep->summary().c_str());
        }
        return 0;
    });
}
