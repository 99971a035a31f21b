// The device flags of the tools: llada-cli on npu-sim, bad flags, and llada-bench's latency
// table (projected_ms per row count, a staircase) and its projected ablation; llada-bench's
// comparison with llama-bench (against a stand-in script: rounds, medians, errors); replays of
// decision traces, the pipeline's included.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Result = llada::test::CommandResult;

Result run(const std::string& cmd) {
    return llada::test::run_command(cmd, "npu_tools_test");
}

std::string bin(const char* name) {
    return (fs::path(LLADA_BIN_DIR) / name).string();
}
std::string model() {
    return (fs::path(LLADA_TEST_DATA) / "decode" / "llada-mha.gguf").string();
}

}  // namespace

TEST(NpuTools, CliRunsOnNpuSimAndReportsTheProjection) {
    const std::string args =
        " -m " + model() + " --prompt-tokens \"256 54 61 77 118 72\" --gen 16 --block 16 --json";
    Result cpu = run(bin("llada-cli") + args);
    Result npu = run(bin("llada-cli") + args + " --device npu-sim --npu-profile sm8650");
    ASSERT_EQ(npu.status, 0) << npu.err;
    const json a = json::parse(cpu.out), b = json::parse(npu.out);
    // Token agreement is npu_device_test's subject (decisions within the fp16 bound may flip).
    EXPECT_EQ(a["tokens"].size(), b["tokens"].size());
    EXPECT_EQ(b["device"]["device"], "npu-sim");
    EXPECT_EQ(b["device"]["profile"], "sm8650");
    EXPECT_TRUE(b["device"]["projected"].get<bool>());
    EXPECT_GT(b["device"]["projected_ms"].get<double>(), 0.0);
    EXPECT_GT(b["device"]["ops_npu"].get<int>(), 0);
    EXPECT_GT(b["device"]["ops_cpu"].get<int>(), 0);
    EXPECT_EQ(b["device"]["memory"]["policy"], "optimised");
}

TEST(NpuTools, BadDeviceFlagsFailWithAMessage) {
    Result r = run(bin("llada-cli") + " -m " + model() + " -p Hi --gen 8 --block 8 --device tpu");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("unknown device 'tpu'"), std::string::npos) << r.err;
    r = run(bin("llada-cli") + " -m " + model() +
            " -p Hi --gen 8 --block 8 --device npu-sim --npu-profile sm1");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("unknown device profile"), std::string::npos) << r.err;
    // npu-sim's flags on the cpu device, also when given with their default value.
    for (const char* f : {"--npu-memory baseline", "--npu-memory optimised", "--npu-weights tq4",
                          "--npu-buckets 32,64"}) {
        r = run(bin("llada-cli") + " -m " + model() + " -p Hi --gen 8 --block 8 " + f);
        EXPECT_EQ(r.status, 1) << f;
        const std::string flag = std::string(f).substr(0, std::string(f).find(' '));
        EXPECT_NE(r.err.find(flag + " applies to --device npu-sim"), std::string::npos)
            << f << ": " << r.err;
    }
    r = run(bin("llada-cli") + " -m " + model() + " -p Hi --gen 8 --block 8 --npu-set a=1");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("profile overrides need a profile"), std::string::npos) << r.err;
}

TEST(NpuTools, BenchJsonHasProjectedMsPerRowCount) {
    // (The fixture's context is 64 positions.)
    Result r = run(bin("llada-bench") + " -m " + model() +
                   " --device npu-sim --rows 1,16,32,33,64 --reps 1 --no-peaks --json -t 1");
    ASSERT_EQ(r.status, 0) << r.err;
    const json rows = json::parse(r.out)["results"];
    ASSERT_EQ(rows.size(), 5u);
    for (const auto& row : rows)
        ASSERT_TRUE(row.contains("projected_ms")) << row.dump();
    auto npu_ms = [&](int i) { return rows[i]["projected_npu_ms"].get<double>(); };
    // The NPU part is flat inside a tile and jumps at the boundary.
    EXPECT_DOUBLE_EQ(npu_ms(0), npu_ms(1));
    EXPECT_DOUBLE_EQ(npu_ms(1), npu_ms(2));
    EXPECT_GT(npu_ms(3), npu_ms(2));
    EXPECT_DOUBLE_EQ(npu_ms(3), npu_ms(4));
    EXPECT_EQ(rows[2]["bucket"], 32);
    EXPECT_EQ(rows[3]["bucket"], 64);
}

TEST(NpuTools, BenchAblationProjectsEveryRow) {
    Result r = run(bin("llada-bench") + " -m " + model() +
                   " --ablation --timing-only --prompt-len 8 --gen 16 --block 8 --json -t 1");
    ASSERT_EQ(r.status, 0) << r.err;
    // With --json stdout is the JSON report and nothing else; the table goes to stderr.
    const json j = json::parse(r.out);
    const auto& rows = j["ablation"]["rows"];
    // Rows 1-5 need nothing; the replayed rows 6-8 say which trace they need.
    ASSERT_EQ(rows.size(), 5u);
    for (const auto& row : rows)
        EXPECT_GT(row["projected_s"].get<double>(), 0.0) << row.dump();
    EXPECT_EQ(rows[0]["device"], "cpu");
    EXPECT_EQ(rows[0]["profile"], "sm8750-cpu");
    EXPECT_EQ(rows[2]["memory"], "baseline");
    EXPECT_EQ(rows[3]["memory"], "optimised");
    EXPECT_EQ(rows[4]["policy"], "need");
    EXPECT_NE(r.err.find("needs a decision trace: --replay FILE"), std::string::npos);
    EXPECT_FALSE(j["ablation"]["sensitivity"].empty());
}

// A decision trace written by llada-cli --trace-out replays onto another shape: the replayed
// rows take its decisions and say so.
TEST(NpuTools, BenchAblationReplaysADecisionTrace) {
    const fs::path sched = fs::temp_directory_path() / "llada_npu_tools_trace_sched.jsonl";
    const fs::path thr = fs::temp_directory_path() / "llada_npu_tools_trace_thr.jsonl";
    const std::string cli = bin("llada-cli") + " -m " + model() +
                            " --prompt-tokens \"256 54 61 77 118 72\" --gen 16 --block 8"
                            " --policy mbsd --lookahead 4 --no-early-stop --json --trace-out ";
    Result c = run(cli + sched.string());
    ASSERT_EQ(c.status, 0) << c.err;
    Result ct = run(cli + thr.string() + " --threshold 0.5");
    ASSERT_EQ(ct.status, 0) << ct.err;
    const json tj = json::parse(ct.out);
    const std::string bench = bin("llada-bench") + " -m " + model() +
                              " --ablation --no-sensitivity --timing-only --prompt-len 8"
                              " --gen 32 --block 16 --json -t 1";
    Result r = run(bench + " --ablation-configs 678 --replay " + sched.string() +
                   " --replay-need " + thr.string() + " --replay-threshold " + thr.string());
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = json::parse(r.out);
    const auto& rows = j["ablation"]["rows"];
    ASSERT_EQ(rows.size(), 3u);
    for (const auto& row : rows) {
        EXPECT_NE(row["replayed_from"].get<std::string>().find("llada-mha.gguf"),
                  std::string::npos);
        EXPECT_GT(row["projected_s"].get<double>(), 0.0);
    }
    // The threshold rows take the trace's step count per block (two blocks of 16 from two of 8).
    EXPECT_DOUBLE_EQ(rows[1]["nfe"].get<double>(), tj["nfe"].get<double>());
    EXPECT_DOUBLE_EQ(rows[2]["nfe"].get<double>(), tj["nfe"].get<double>());
    EXPECT_NE(r.err.find("REPLAYED"), std::string::npos);
    // A trace of the other commit rule is refused by name.
    Result wrong = run(bench + " --ablation-configs 6 --replay " + thr.string());
    EXPECT_EQ(wrong.status, 1);
    EXPECT_NE(wrong.err.find("was recorded with --threshold/--factor"), std::string::npos)
        << wrong.err;
    // A malformed trace is refused with its file and line named, and so is one whose counts
    // cannot be a decoding (a block that commits more positions than it has).
    std::ofstream(sched) << "{\"trace\": \"something else\"}\n";
    Result bad = run(bench + " --ablation-configs 6 --replay " + sched.string());
    EXPECT_EQ(bad.status, 1);
    EXPECT_NE(bad.err.find(sched.string() + ":1: not a llada.cpp decision trace"),
              std::string::npos)
        << bad.err;
    std::ofstream(sched) << "{\"trace\": \"llada.cpp decision trace v1\", \"gen\": 16, "
                            "\"block\": 8, \"steps\": [[0, 9, 0, 0, 0, 8, 8, 0, 0, 0], "
                            "[1, 8, 0, 0, 0, 8, 8, 0, 0, 0]]}\n";
    bad = run(bench + " --ablation-configs 6 --replay " + sched.string());
    EXPECT_EQ(bad.status, 1);
    EXPECT_NE(bad.err.find("block 0 commits 9 positions, not its 8"), std::string::npos) << bad.err;
    fs::remove(sched);
    fs::remove(thr);
}

// Row p replays a pipeline trace (tiny-llada-m, whose first forward commits ahead): the same
// forwards as the traced run, in --ablation and in --e2e, under the trace's own pipeline
// options; a trace of another policy is refused for it.
TEST(NpuTools, BenchReplaysAPipelineTrace) {
    const fs::path tr = fs::temp_directory_path() / "llada_npu_tools_trace_pipe.jsonl";
    const fs::path need = fs::temp_directory_path() / "llada_npu_tools_trace_pipe_need.jsonl";
    const std::string tiny = (fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-llada-m.gguf").string();
    const std::string cli = bin("llada-cli") + " -m " + tiny +
                            " -p \"6238+0032=\" --gen 32 --block 8 --no-early-stop --json"
                            " --trace-out ";
    Result c = run(cli + tr.string() + " --policy pipeline --pipeline-verify window");
    ASSERT_EQ(c.status, 0) << c.err;
    const json cj = json::parse(c.out);
    Result cn = run(cli + need.string() + " --policy need --threshold 0.9");
    ASSERT_EQ(cn.status, 0) << cn.err;
    const std::string bench = bin("llada-bench") + " -m " + model() +
                              " --no-sensitivity --timing-only --prompt-len 8 --gen 32"
                              " --block 8 --json -t 1";
    Result r = run(bench + " --ablation --ablation-configs p --replay-pipeline " + tr.string());
    ASSERT_EQ(r.status, 0) << r.err;
    const json rj = json::parse(r.out);
    const auto& rows = rj["ablation"]["rows"];
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0]["configuration"], "  (pipeline + threshold 0.9)");
    EXPECT_LT(cj["nfe"].get<double>(), 32.0 / 8 * 2);  // it did pipeline: few forwards a block
    EXPECT_DOUBLE_EQ(rows[0]["nfe"].get<double>(), cj["nfe"].get<double>());
    Result e =
        run(bench + " --e2e --policies pipeline --reps 1 --device npu-sim --replay " + tr.string());
    ASSERT_EQ(e.status, 0) << e.err;
    EXPECT_DOUBLE_EQ(json::parse(e.out)["e2e"][0]["nfe"].get<double>(), cj["nfe"].get<double>());
    // A sample of traces runs each of them and reports the mean (the pipeline commits by a
    // threshold, so every trace is a request of its own).
    const fs::path two = fs::temp_directory_path() / "llada_npu_tools_trace_pipe2.jsonl";
    const fs::path other = fs::temp_directory_path() / "llada_npu_tools_trace_pipe_o.jsonl";
    Result c2 = run(bin("llada-cli") + " -m " + tiny +
                    " -p \"sort 39 48 68 42:\" --gen 32 --block 8 --no-early-stop --json"
                    " --policy pipeline --pipeline-verify window --trace-out " +
                    other.string());
    ASSERT_EQ(c2.status, 0) << c2.err;
    {
        std::ofstream out(two);
        std::ifstream a(tr), b(other);
        out << a.rdbuf() << b.rdbuf();
    }
    Result e2 = run(bench + " --e2e --policies pipeline --reps 1 --device npu-sim --replay " +
                    two.string() + " --replay-sample 2");
    ASSERT_EQ(e2.status, 0) << e2.err;
    const json r2 = json::parse(e2.out)["e2e"][0];
    EXPECT_EQ(r2["requests"].get<int>(), 2);
    EXPECT_DOUBLE_EQ(r2["nfe"].get<double>(),
                     (cj["nfe"].get<double>() + json::parse(c2.out)["nfe"].get<double>()) / 2);
    fs::remove(two);
    fs::remove(other);
    Result wrong =
        run(bench + " --ablation --ablation-configs p --replay-pipeline " + need.string());
    EXPECT_EQ(wrong.status, 1);
    EXPECT_NE(wrong.err.find("was not recorded with --policy pipeline"), std::string::npos)
        << wrong.err;
    fs::remove(tr);
    fs::remove(need);
}

// '+ progressive revision' replays a trace recorded with --revise: the NPU lane and the CPU lane
// are projected separately and a step costs the longer one (plus the modelled shared-DRAM
// slowdown and the merge), never less than either lane nor more than both in series.
TEST(NpuTools, BenchAblationProjectsTheRevisionLanes) {
    const fs::path tr = fs::temp_directory_path() / "llada_npu_tools_trace_rev.jsonl";
    Result c = run(bin("llada-cli") + " -m " + model() +
                   " --prompt-tokens \"256 54 61 77 118 72\" --gen 16 --block 8 --policy mbsd"
                   " --lookahead 4 --threshold 0.3 --revise --no-early-stop --json --trace-out " +
                   tr.string());
    ASSERT_EQ(c.status, 0) << c.err;
    const json cj = json::parse(c.out);
    EXPECT_GT(cj["revision"]["checks"].get<int64_t>(), 0);
    Result r = run(bin("llada-bench") + " -m " + model() +
                   " --ablation --no-sensitivity --timing-only --prompt-len 8 --gen 32 --block 16"
                   " --json -t 1 --ablation-configs 9 --replay-revise " +
                   tr.string());
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = json::parse(r.out);
    const auto& rows = j["ablation"]["rows"];
    ASSERT_EQ(rows.size(), 1u);
    const auto& rv = rows[0]["revision"];
    const double npu = rv["projected_npu_lane_s"], cpu = rv["projected_cpu_lane_s"];
    const double proj = rows[0]["projected_s"], serial = rv["projected_serial_s"];
    EXPECT_GT(npu, 0.0);
    EXPECT_GT(cpu, 0.0);
    EXPECT_GT(rv["checks"].get<double>(), 0.0);
    // Replacements and remasks apart, as llada-cli's "revision" object counts them.
    EXPECT_TRUE(rv.contains("remasks"));
    EXPECT_TRUE(cj["revision"].contains("remasks"));
    EXPECT_GE(proj, std::max(npu, cpu) - 1e-9);
    EXPECT_LE(proj, serial + rv["projected_contention_s"].get<double>() + 1e-9);
    EXPECT_NE(r.err.find("PROJECTED lanes per request"), std::string::npos);
    // A trace whose step revises more tokens than it checks is refused by name.
    std::ofstream(tr) << "{\"trace\": \"llada.cpp decision trace v1\", \"gen\": 16, "
                         "\"block\": 8, \"threshold\": 0.5, \"steps\": "
                         "[[0, 8, 0, 0, 0, 8, 8, 0, 0, 0, 1, 2, 0], "
                         "[1, 8, 0, 0, 0, 8, 8, 0, 0, 0, 0, 0, 0]]}\n";
    Result bad = run(bin("llada-bench") + " -m " + model() +
                     " --ablation --no-sensitivity --timing-only --prompt-len 8 --gen 32"
                     " --block 16 -t 1 --ablation-configs 9 --replay-revise " +
                     tr.string());
    EXPECT_EQ(bad.status, 1);
    EXPECT_NE(bad.err.find("revises more tokens than it checks"), std::string::npos) << bad.err;
    fs::remove(tr);
}

// --e2e's '+revise' runs progressive revision in a whole generation: its CPU path checks what
// llada-cli's --revise checks on the same prompt and settings (llada-bench's prompt of 8 tokens
// is BOS + "abcdefg"); the run without it reports no revision; unknown modifiers, and revision
// with --replay (whose decisions only --ablation's row 9 replays), are refused by name.
TEST(BenchTools, E2eRevisesWhenAskedAndMatchesTheCli) {
    const std::string shipped =
        (fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-llada-s.gguf").string();
    const std::string settings = " --gen 16 --block 8 --threshold 0.5 -t 1 --json";
    Result c = run(bin("llada-cli") + " -m " + shipped +
                   " -p abcdefg --policy dual-cache --revise" + settings);
    ASSERT_EQ(c.status, 0) << c.err;
    const json cj = json::parse(c.out);
    const std::string bench = bin("llada-bench") + " -m " + shipped +
                              " --e2e --prompt-len 8 --reps 1" + settings + " --policies ";
    Result r = run(bench + "dual-cache+threshold,dual-cache+threshold+revise");
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = json::parse(r.out);
    ASSERT_EQ(j["e2e"].size(), 2u);
    EXPECT_FALSE(j["e2e"][0].contains("revise"));
    const auto& rv = j["e2e"][1]["revise"];
    EXPECT_GT(rv["checks"].get<double>(), 0.0);
    EXPECT_EQ(rv["checks"].get<double>(), cj["revision"]["checks"].get<double>());
    EXPECT_EQ(rv["revisions"].get<double>(), cj["revision"]["revisions"].get<double>());
    EXPECT_EQ(j["e2e"][1]["nfe"].get<double>(), cj["nfe"].get<double>());
    EXPECT_NE(r.err.find("checks"), std::string::npos) << r.err;

    Result bad = run(bench + "dual-cache+revize");
    EXPECT_EQ(bad.status, 1);
    EXPECT_NE(bad.err.find("unknown modifier '+revize' in 'dual-cache+revize'"), std::string::npos)
        << bad.err;
    const fs::path tr = fs::temp_directory_path() / "llada_npu_tools_trace_e2e.jsonl";
    Result t = run(bin("llada-cli") + " -m " + shipped +
                   " -p abcdefg --gen 16 --block 8 --policy mbsd --threshold 0.5"
                   " --no-early-stop -t 1 --json --trace-out " +
                   tr.string());
    ASSERT_EQ(t.status, 0) << t.err;
    bad = run(bench + "mbsd+threshold+revise --replay " + tr.string());
    EXPECT_EQ(bad.status, 1);
    EXPECT_NE(bad.err.find("revision decisions are not replayed in --e2e"), std::string::npos)
        << bad.err;
    fs::remove(tr);
}

namespace {

// A stand-in for llama.cpp's llama-bench: prints `line` as its JSONL result (or fails) and
// records its arguments, so the comparison mode can be tested without llama.cpp.
std::string fake_llama_bench(const std::string& name, const std::string& line, int status = 0) {
    const fs::path dir = fs::temp_directory_path() / "llada_fake_llama_bench";
    fs::create_directories(dir);
    const fs::path script = dir / name;
    std::ofstream f(script);
    f << "#!/bin/sh\necho \"$@\" >> '" << (dir / (name + ".args")).string() << "'\n"
      << "echo 'build info line'\necho '" << line << "'\nexit " << status << "\n";
    f.close();
    fs::permissions(script, fs::perms::owner_all);
    fs::remove(dir / (name + ".args"));
    return script.string();
}

}  // namespace

TEST(BenchTools, LlamaBenchComparisonRunsInRoundsAndTakesMedians) {
    // llama-bench's per-repetition samples 10, 30, 20 t/s: the median, 20, not the mean (99).
    const std::string fake =
        fake_llama_bench("lb-samples", R"({"avg_ts": 99.0, "samples_ts": [10.0, 30.0, 20.0]})");
    Result r = run(bin("llada-bench") + " -m " + model() + " --rows 4,8 --reps 2 --rounds 3" +
                   " --no-peaks --json -t 1 --llama-bench " + fake);
    ASSERT_EQ(r.status, 0) << r.err;
    const json rows = json::parse(r.out)["results"];
    ASSERT_EQ(rows.size(), 2u);
    for (const auto& row : rows) {
        EXPECT_DOUBLE_EQ(row["llama_cpp_rows_per_s"].get<double>(), 20.0) << row.dump();
        EXPECT_DOUBLE_EQ(row["ratio"].get<double>(), row["rows_per_s"].get<double>() / 20.0);
        EXPECT_EQ(row["rounds"], 3);
        ASSERT_EQ(row["ratio_per_round"].size(), 3u);
        for (const auto& x : row["ratio_per_round"])
            EXPECT_GT(x.get<double>(), 0.0);
    }
    // Three rounds per row count, each with the same row count and repetitions as ours.
    std::ifstream args(fake + ".args");
    std::string line;
    int calls = 0;
    while (std::getline(args, line)) {
        EXPECT_NE(line.find(calls < 3 ? "-p 4 -n 0 -r 2" : "-p 8 -n 0 -r 2"), std::string::npos)
            << line;
        ++calls;
    }
    EXPECT_EQ(calls, 6);
}

TEST(BenchTools, LlamaBenchWithoutSamplesUsesItsMeanAndFailuresAreReported) {
    Result r = run(bin("llada-bench") + " -m " + model() +
                   " --rows 4 --reps 1 --no-peaks --json -t 1 --llama-bench " +
                   fake_llama_bench("lb-mean", R"({"avg_ts": 42.0})"));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_DOUBLE_EQ(json::parse(r.out)["results"][0]["llama_cpp_rows_per_s"].get<double>(), 42.0);
    r = run(bin("llada-bench") + " -m " + model() +
            " --rows 4 --reps 1 --no-peaks --json -t 1 --llama-bench " +
            fake_llama_bench("lb-fail", "oops", 1));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("llama-bench failed"), std::string::npos) << r.err;
    r = run(bin("llada-bench") + " -m " + model() +
            " --rows 4 --reps 1 --no-peaks --json -t 1 --llama-bench " +
            fake_llama_bench("lb-noresult", "{}"));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("no result in llama-bench's output"), std::string::npos) << r.err;
}

// Every tool's --json, in every mode: stdout parses as one JSON document (nothing before or
// after it), whatever the mode prints for people goes to stderr.
TEST(BenchTools, EveryJsonModeIsOneDocumentOnStdout) {
    const std::string m = " -m " + model() + " -t 1 --json";
    const std::string tasks =
        (fs::path(LLADA_SOURCE_DIR) / "models" / "tasks" / "smoke-50.jsonl").string();
    const std::vector<std::string> cmds = {
        bin("llada-bench") + m + " --rows 1,8 --reps 1 --no-peaks",
        bin("llada-bench") + m + " --device npu-sim --rows 8 --reps 1 --no-peaks",
        bin("llada-bench") + m + " --sampling --window 16 --need 4 --reps 1",
        bin("llada-bench") + m +
            " --e2e --policies vanilla,dual-cache --prompt-len 8 --gen 16 "
            "--block 8 --reps 1",
        bin("llada-bench") + m + " --ablation --timing-only --prompt-len 8 --gen 16 --block 8",
        bin("llada-cli") + m + " --prompt-tokens '256 72 105' --gen 16 --block 8",
        bin("llada-eval") + " -m " +
            (fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-llada-s.gguf").string() +
            " -t 1 --json --tasks " + tasks + " --limit 2 --gen 16 --block 8",
    };
    for (const std::string& cmd : cmds) {
        Result r = run(cmd);
        ASSERT_EQ(r.status, 0) << cmd << "\n" << r.err;
        const json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
        EXPECT_FALSE(j.is_discarded()) << cmd << "\nstdout:\n" << r.out.substr(0, 400);
    }
}

// llada-bench's decoding flags come from the same table as llada-cli's (decode/options.h): the
// same ranges, and --threshold 0 (the "not given" value, which used to run the threshold
// policies on the step schedule) refused in the same words.
TEST(BenchFlags, DecodingFlagsTakeTheTablesRangesAndRefuseThresholdZero) {
    Result zero = run(bin("llada-bench") + " -m " + model() + " --e2e --threshold 0");
    EXPECT_EQ(zero.status, 1);
    EXPECT_NE(zero.err.find("--threshold 0 is not a threshold"), std::string::npos) << zero.err;
    Result over = run(bin("llada-bench") + " -m " + model() + " --e2e --gen 2000000");
    EXPECT_EQ(over.status, 1);
    EXPECT_NE(over.err.find("--gen = 2000000 is out of range [1, 1048576]"), std::string::npos)
        << over.err;
    Result cli = run(bin("llada-cli") + " -m " + model() + " -p x --gen 2000000");
    EXPECT_NE(cli.err.find("--gen = 2000000 is out of range [1, 1048576]"), std::string::npos)
        << cli.err;
}
