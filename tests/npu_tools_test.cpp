// The device flags of the tools: llada-cli on npu-sim, bad flags, and llada-bench's latency
// table (projected_ms per row count, a staircase) and its projected ablation.
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
}

TEST(NpuTools, BenchJsonHasProjectedMsPerRowCount) {
    // (The fixture's context is 64 positions.)
    Result r = run(bin("llada-bench") + " -m " + model() +
                   " --device npu-sim --rows 1,16,32,33,64 --reps 1 --no-peaks --json -t 1");
    ASSERT_EQ(r.status, 0) << r.err;
    const json rows = json::parse(r.out);
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
    // The table comes first on stdout, the JSON report last.
    const auto start = r.out.find("\n{");
    ASSERT_NE(start, std::string::npos) << r.out;
    const json j = json::parse(r.out.substr(start + 1));
    const auto& rows = j["ablation"]["rows"];
    ASSERT_EQ(rows.size(), 4u);
    for (const auto& row : rows)
        EXPECT_GT(row["projected_s"].get<double>(), 0.0) << row.dump();
    EXPECT_EQ(rows[0]["device"], "cpu");
    EXPECT_EQ(rows[0]["profile"], "sm8750-cpu");
    EXPECT_EQ(rows[2]["memory"], "baseline");
    EXPECT_EQ(rows[3]["memory"], "optimised");
    EXPECT_FALSE(j["ablation"]["sensitivity"].empty());
}
