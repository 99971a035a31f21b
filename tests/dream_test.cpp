// The `dream` policy (decode/dream.cpp) against train/reference/dream.py: every trajectory of
// tests/data/dream/cases.json (written by train/make_dream_fixtures.py) reproduced exactly,
// at T = 0 and at T > 0 with the reference's recorded noise replayed, on the decode fixtures'
// tiny models, shifted and not; its schedule against torch.linspace's; bad options by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "decode/policy.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/model.h"
#include "runtime/device.h"
#include "util/error.h"

using namespace llada;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path dream_dir() {
    return fs::path(LLADA_TEST_DATA) / "dream";
}
fs::path decode_dir() {
    return fs::path(LLADA_TEST_DATA) / "decode";
}

fs::path shifted_copy_path(const std::string& name) {
    return fs::temp_directory_path() / ("dream-shift-" + std::to_string(getpid()) + "-" + name);
}

// The model file, or a copy of it whose logits are read shifted (diffusion.shift_logits).
fs::path model_file(const std::string& name, bool shift) {
    const fs::path src = decode_dir() / name;
    if (!shift) return src;
    const fs::path dst = shifted_copy_path(name);
    if (fs::exists(dst)) return dst;
    auto f = format::GgufFile::open(src.string());
    format::GgufWriter w;
    for (const auto& kv : f->kvs())
        if (kv.key != "diffusion.shift_logits") w.copy_kv(kv);
    w.set_bool("diffusion.shift_logits", true);
    for (const auto& t : f->tensors()) {
        w.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne, t.ne + t.n_dims),
                     std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    }
    w.write(dst.string());
    return dst;
}

struct DreamRun {
    decode::GenerateResult result;
    std::vector<std::vector<int32_t>> positions, tokens;
};

DreamRun run_case(const json& c, int threads) {
    auto m = model::Model::load(model_file(c["model"], c["shift"]).string());
    EXPECT_EQ(m->hparams().shift_logits, c["shift"].get<bool>());
    runtime::ThreadPool pool(threads);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions opt;
    opt.gen = c["gen"];
    opt.steps = c["steps"];
    opt.temperature = c["temperature"];
    opt.dream.alg = c["alg"];
    opt.dream.alg_temp = c["alg_temp"];
    opt.dream.eps = c["eps"];
    opt.dream.top_p = c["top_p"];
    opt.dream.top_k = c["top_k"];
    std::unique_ptr<decode::ReplayNoise> noise;
    if (!c["noise"].is_null()) {
        noise = std::make_unique<decode::ReplayNoise>(
            decode::ReplayNoise::from_file((dream_dir() / c["noise"].get<std::string>()).string()));
        opt.noise = noise.get();
    }
    decode::TokenIds ids;
    ids.mask = c["mask_id"];
    auto policy = decode::make_policy("dream", *m, *dev, opt, ids);
    DreamRun run;
    run.result =
        policy->generate(c["prompt"].get<std::vector<int32_t>>(), [&](const decode::StepEvent& ev) {
            run.positions.emplace_back(ev.committed.begin(), ev.committed.end());
            std::vector<int32_t> t;
            for (int32_t p : ev.committed)
                t.push_back(ev.canvas[p]);
            run.tokens.push_back(t);
        });
    if (noise) {
        EXPECT_EQ(noise->consumed(), c["noise_count"].get<int64_t>())
            << "the run must consume exactly the recorded draws";
    }
    return run;
}

}  // namespace

TEST(Dream, ReproducesEveryReferenceTrajectoryExactly) {
    std::ifstream f(dream_dir() / "cases.json");
    const json cases = json::parse(f);
    ASSERT_GE(cases.size(), 10u);
    std::set<std::string> algs;
    bool shifted = false, sampled = false, alg_temp = false;
    for (const auto& c : cases) {
        SCOPED_TRACE(c["name"].get<std::string>());
        for (int threads : {1, 2}) {
            const DreamRun run = run_case(c, threads);
            const auto& traj = c["trajectory"];
            ASSERT_EQ(run.positions.size(), traj.size());
            for (size_t s = 0; s < traj.size(); ++s) {
                EXPECT_EQ(run.positions[s], traj[s]["transfer"].get<std::vector<int32_t>>())
                    << "step " << s;
                EXPECT_EQ(run.tokens[s], traj[s]["tokens"].get<std::vector<int32_t>>())
                    << "step " << s;
            }
            EXPECT_EQ(run.result.canvas, c["final"].get<std::vector<int32_t>>());
            EXPECT_EQ(run.result.steps.size(), c["steps"].get<size_t>());
        }
        algs.insert(c["alg"].get<std::string>());
        shifted = shifted || c["shift"].get<bool>();
        sampled = sampled || c["temperature"].get<double>() > 0.0;
        alg_temp = alg_temp || c["alg_temp"].get<double>() > 0.0;
    }
    EXPECT_EQ(algs.size(), 4u);  // every algorithm
    EXPECT_TRUE(shifted && sampled && alg_temp);
    for (const auto& c : cases)  // the shifted copies written to the temp folder
        fs::remove(shifted_copy_path(c["model"]));
}

TEST(Dream, BadOptionsAreNamed) {
    auto m = model::Model::load((decode_dir() / "llada-mha.gguf").string());
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    decode::TokenIds ids;
    ids.mask = 258;
    auto error_of = [&](const std::function<void(decode::GenerateOptions&)>& set,
                        decode::TokenIds with = {}) {
        decode::GenerateOptions opt;
        opt.gen = 8;
        opt.steps = 8;
        set(opt);
        try {
            decode::make_policy("dream", *m, *dev, opt, with.mask < 0 ? ids : with)
                ->generate(std::vector<int32_t>{256, 72});
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(error_of([](auto& o) { o.dream.alg = "greedy"; }).find("--dream-alg must be"),
              std::string::npos);
    EXPECT_NE(error_of([](auto& o) { o.dream.eps = 0.0; }).find("--eps must be in (0, 1)"),
              std::string::npos);
    EXPECT_NE(error_of([](auto& o) { o.dream.top_p = 0.0; }).find("--top-p"), std::string::npos);
    EXPECT_NE(error_of([](auto& o) { o.dream.top_k = -1; }).find("--top-k"), std::string::npos);
    EXPECT_NE(error_of([](auto& o) {
                  o.dream.alg = "origin";
                  o.dream.alg_temp = 0.5;
              }).find("--alg-temp applies to the confidence algorithms"),
              std::string::npos);
    EXPECT_NE(error_of([](auto& o) { o.threshold = 0.9; }).find("belong to the LLaDA policies"),
              std::string::npos);
    EXPECT_NE(error_of([](auto& o) { o.gen = 100; }).find("exceeds the model's context"),
              std::string::npos);
    EXPECT_EQ(error_of([](auto&) {}), "no error");
}
