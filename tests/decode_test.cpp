// The vanilla policy against the PyTorch reference's trajectories (tests/data/decode), replaying
// its recorded noise for T > 0, plus the schedule and the option checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "decode/commit_rule.h"
#include "decode/noise.h"
#include "decode/policy.h"
#include "decode/revision_rule.h"
#include "decode/sampling.h"
#include "decode/speculation.h"
#include "decode/trace.h"
#include "model/model.h"
#include "runtime/device.h"
#include "util/error.h"

using namespace llada;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path data_dir() {
    return fs::path(LLADA_TEST_DATA) / "decode";
}

json load_cases() {
    std::ifstream f(data_dir() / "cases.json");
    return json::parse(f);
}

struct CaseRun {
    decode::GenerateResult result;
    std::vector<std::vector<int32_t>> step_positions;
    std::vector<std::vector<int32_t>> step_tokens;
};

CaseRun run_case(const json& c, int threads, const std::string& policy_name = "vanilla",
                 bool fused = true, int refresh = 0) {
    auto m = model::Model::load((data_dir() / c["model"].get<std::string>()).string());
    runtime::ThreadPool pool(threads);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions opt;
    opt.gen = c["gen"];
    opt.steps = c["steps"];
    opt.block = c["block"];
    opt.temperature = c["temperature"];
    opt.cfg = c["cfg"];
    opt.remasking =
        c["remasking"] == "random" ? decode::Remasking::Random : decode::Remasking::LowConfidence;
    std::unique_ptr<decode::ReplayNoise> noise;
    if (!c["noise"].is_null()) {
        noise = std::make_unique<decode::ReplayNoise>(
            decode::ReplayNoise::from_file((data_dir() / c["noise"].get<std::string>()).string()));
        opt.noise = noise.get();
    }
    opt.fused_sampling = fused;
    opt.refresh = refresh;
    if (policy_name != "vanilla") opt.early_stop = 0;
    decode::TokenIds ids;
    ids.mask = c["mask_id"];
    auto policy = decode::make_policy(policy_name, *m, *dev, opt, ids);
    std::vector<int32_t> prompt = c["prompt"].get<std::vector<int32_t>>();
    CaseRun run;
    run.result = policy->generate(prompt, [&](const decode::StepEvent& ev) {
        run.step_positions.emplace_back(ev.committed.begin(), ev.committed.end());
        std::vector<int32_t> toks;
        for (int32_t p : ev.committed)
            toks.push_back(ev.canvas[p]);
        run.step_tokens.push_back(toks);
    });
    if (noise) {
        EXPECT_EQ(noise->consumed(), c["noise_count"].get<int64_t>())
            << "the run must consume exactly the recorded draws";
    }
    return run;
}

}  // namespace

void expect_reference_trajectory(const json& c, const CaseRun& run) {
    const auto& traj = c["trajectory"];
    ASSERT_EQ(run.step_positions.size(), traj.size());
    for (size_t s = 0; s < traj.size(); ++s) {
        EXPECT_EQ(run.step_positions[s], traj[s]["positions"].get<std::vector<int32_t>>())
            << "step " << s;
        EXPECT_EQ(run.step_tokens[s], traj[s]["tokens"].get<std::vector<int32_t>>())
            << "step " << s;
    }
    EXPECT_EQ(run.result.canvas, c["final"].get<std::vector<int32_t>>());
}

// Both output heads: the fused LM head (argmax and confidence without logits) and full logits.
TEST(Vanilla, ReproducesEveryReferenceTrajectoryExactly) {
    json cases = load_cases();
    ASSERT_GE(cases.size(), 15u);
    for (const auto& c : cases) {
        SCOPED_TRACE(c["name"].get<std::string>());
        expect_reference_trajectory(c, run_case(c, 2, "vanilla", false));
        CaseRun run = run_case(c, 2);
        const auto& traj = c["trajectory"];
        ASSERT_EQ(run.step_positions.size(), traj.size());
        for (size_t s = 0; s < traj.size(); ++s) {
            EXPECT_EQ(run.step_positions[s], traj[s]["positions"].get<std::vector<int32_t>>())
                << "step " << s;
            EXPECT_EQ(run.step_tokens[s], traj[s]["tokens"].get<std::vector<int32_t>>())
                << "step " << s;
        }
        EXPECT_EQ(run.result.canvas, c["final"].get<std::vector<int32_t>>());
        // One forward per step, two canvases' rows with CFG.
        EXPECT_EQ(run.result.stats.forwards, c["steps"].get<int>());
    }
}

TEST(Vanilla, SameTokensForOneAndManyThreads) {
    json cases = load_cases();
    for (const auto& c : cases) {
        if (c["name"] != "gqa-cfg05-t1-random-b8-s4" && c["name"] != "mha-t0-b8-s16") continue;
        EXPECT_EQ(run_case(c, 1).result.canvas, run_case(c, 3).result.canvas) << c["name"];
    }
}

TEST(Vanilla, SeededNoiseIsReproducible) {
    auto m = model::Model::load((data_dir() / "llada-mha.gguf").string());
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions opt;
    opt.gen = 16;
    opt.block = 8;
    opt.steps = 8;
    opt.temperature = 1.0;
    opt.seed = 42;
    decode::TokenIds ids{258, 257, -1};
    std::vector<int32_t> prompt = {256, 72, 105};
    auto a = decode::make_policy("vanilla", *m, *dev, opt, ids)->generate(prompt);
    auto b = decode::make_policy("vanilla", *m, *dev, opt, ids)->generate(prompt);
    EXPECT_EQ(a.canvas, b.canvas);
    opt.seed = 43;
    auto c = decode::make_policy("vanilla", *m, *dev, opt, ids)->generate(prompt);
    EXPECT_NE(a.canvas, c.canvas);  // T = 1 on peaky random weights still samples differently
}

TEST(Schedule, NumTransferTokensMatchesTheReference) {
    EXPECT_EQ(decode::num_transfer_tokens(8, 4), (std::vector<int>{2, 2, 2, 2}));
    EXPECT_EQ(decode::num_transfer_tokens(10, 4), (std::vector<int>{3, 3, 2, 2}));
    EXPECT_EQ(decode::num_transfer_tokens(3, 5), (std::vector<int>{1, 1, 1, 0, 0}));
    EXPECT_EQ(decode::num_transfer_tokens(0, 2), (std::vector<int>{0, 0}));
}

TEST(Schedule, TopKTiesGoToTheLowerIndex) {
    std::vector<decode::Candidate> c = {{1, 0.5f}, {2, 0.9f}, {3, 0.5f}, {4, 0.1f}};
    std::vector<int> out;
    decode::select_top_k(c, 2, out);
    EXPECT_EQ(out, (std::vector<int>{0, 1}));
    decode::select_top_k(c, 9, out);
    EXPECT_EQ(out, (std::vector<int>{0, 1, 2, 3}));
}

namespace {
std::string policy_error(decode::GenerateOptions opt, decode::TokenIds ids, int prompt_len = 3) {
    auto m = model::Model::load((data_dir() / "llada-mha.gguf").string());
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    try {
        auto p = decode::make_policy("vanilla", *m, *dev, opt, ids);
        std::vector<int32_t> prompt(prompt_len, 65);
        p->generate(prompt);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}
}  // namespace

namespace {

// An independent reference for a model with shifted logits: LLaDA's low-confidence schedule
// (equal commits per step, the remainder first) where position p takes row p - 1's argmax and
// its softmax probability, every step a full forward of the canvas. ban_mask: the mask id never
// wins (the non-reference policies' rule); otherwise it may be committed, as in LLaDA's code.
// max_steps >= 0 stops after that many steps (the rest of the canvas still masked).
std::vector<int32_t> shifted_reference(const model::Model& m, std::vector<int32_t> x, int gen,
                                       int block, int steps, int32_t mask, bool ban_mask,
                                       int shift = 1, int max_steps = -1) {
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    const int P = static_cast<int>(x.size()), L = P + gen;
    x.resize(L, mask);
    model::Session sess(m, *dev, 1, L, L, L);
    std::vector<int32_t> pos(L), seq(L, 0);
    for (int i = 0; i < L; ++i)
        pos[i] = i;
    const int64_t V = m.hparams().n_vocab;
    const int per_block = steps / (gen / block);
    for (int b = 0; b < gen / block; ++b) {
        const int b0 = P + b * block, b1 = b0 + block;
        int n_masked = 0;
        for (int p = b0; p < b1; ++p)
            n_masked += x[p] == mask;
        for (int st = 0; st < per_block; ++st) {
            if (max_steps-- == 0) return std::vector<int32_t>(x.begin() + P, x.end());
            const int k = n_masked / per_block + (st < n_masked % per_block ? 1 : 0);
            int32_t kv = L;
            runtime::Batch batch{L, x.data(), pos.data(), seq.data(), L, pos.data(), &kv};
            const float* logits = sess.forward(batch);
            std::vector<std::pair<double, int>> conf;  // (confidence, position)
            std::vector<int32_t> pick(L, -1);
            for (int p = b0; p < b1; ++p) {
                if (x[p] != mask) continue;
                const float* row = logits + (p - shift) * V;
                int best = -1;
                for (int v = 0; v < V; ++v) {
                    if (ban_mask && v == mask) continue;
                    if (best < 0 || row[v] > row[best]) best = v;
                }
                double mx = row[0], z = 0;
                for (int v = 0; v < V; ++v)
                    mx = std::max(mx, double(row[v]));
                for (int v = 0; v < V; ++v)
                    z += std::exp(row[v] - mx);
                pick[p] = best;
                conf.push_back({std::exp(row[best] - mx) / z, p});
            }
            std::stable_sort(conf.begin(), conf.end(),
                             [](auto& a, auto& c) { return a.first > c.first; });
            for (int i = 0; i < k && i < static_cast<int>(conf.size()); ++i)
                x[conf[i].second] = pick[conf[i].second];
        }
    }
    return std::vector<int32_t>(x.begin() + P, x.end());
}

fs::path dream_fixture() {
    return fs::path(LLADA_SHARED_FIXTURES) / "llamacpp" / "dream-tiny-f32-perturbed" / "model.gguf";
}

}  // namespace

// Shifted logits (Dream): each position is decided from the row before it, in every window.
// vanilla against the reference above exactly; dual-cache refreshed every step (every step a
// full forward) against it with the mask banned; and the first step of need, mbsd,
// prefix-cache and dual-cache (each a full forward of the canvas) commits the position and
// token the reference's first step does; every policy fills the canvas.
TEST(ShiftedLogits, EveryPolicyDecidesAPositionFromTheRowBefore) {
    if (!fs::exists(dream_fixture())) GTEST_SKIP() << "../shared/fixtures is absent: skipped";
    auto m = model::Model::load(dream_fixture().string());
    ASSERT_TRUE(m->hparams().shift_logits);
    const decode::TokenIds ids{299, 298, -1};
    const std::vector<int32_t> prompt{297, 72, 101, 108, 108, 111, 44, 32};
    const int P = static_cast<int>(prompt.size());
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions o;
    o.gen = 16;
    o.block = 8;
    o.steps = 16;
    o.early_stop = 0;
    // The generated tokens, and the canvas's generated part after the first step.
    auto run = [&](const char* policy, decode::GenerateOptions po,
                   std::vector<int32_t>* first = nullptr) {
        auto on_step = [&](const decode::StepEvent& e) {
            if (first && e.info.step == 0)
                *first = std::vector<int32_t>(e.canvas.begin() + P, e.canvas.end());
        };
        return decode::make_policy(policy, *m, *dev, po, ids)
            ->generate(prompt, on_step)
            .generated();
    };
    const auto want = shifted_reference(*m, prompt, o.gen, o.block, o.steps, ids.mask, false);
    EXPECT_EQ(run("vanilla", o), want);
    // Read unshifted (row p for position p) the same model decodes otherwise, so the comparison
    // tells the two apart.
    EXPECT_NE(want, shifted_reference(*m, prompt, o.gen, o.block, o.steps, ids.mask, false, 0));
    decode::GenerateOptions every = o;
    every.refresh = 1;
    const auto banned = shifted_reference(*m, prompt, o.gen, o.block, o.steps, ids.mask, true);
    EXPECT_EQ(run("dual-cache", every), banned);
    // One token per step: the first step commits the most confident position of block 0.
    const auto first_want =
        shifted_reference(*m, prompt, o.gen, o.block, o.steps, ids.mask, true, 1, 1);
    ASSERT_EQ(std::count(first_want.begin(), first_want.end(), ids.mask), o.gen - 1);
    // ... which the unshifted reading commits differently, so the check tells them apart.
    EXPECT_NE(first_want,
              shifted_reference(*m, prompt, o.gen, o.block, o.steps, ids.mask, true, 0, 1));
    decode::GenerateOptions look = o;
    look.lookahead = 4;
    for (auto [policy, po] : {std::pair{"need", o}, std::pair{"mbsd", look},
                              std::pair{"prefix-cache", o}, std::pair{"dual-cache", o}}) {
        std::vector<int32_t> first;
        const auto got = run(policy, po, &first);
        ASSERT_EQ(got.size(), want.size()) << policy;
        for (int32_t t : got)
            EXPECT_NE(t, ids.mask) << policy;
        EXPECT_EQ(first, first_want) << policy;
    }
}

TEST(ShiftedLogits, RevisionThePipelineAndSelfChecksAreRefused) {
    if (!fs::exists(dream_fixture())) GTEST_SKIP() << "../shared/fixtures is absent: skipped";
    auto m = model::Model::load(dream_fixture().string());
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions o;
    o.gen = 16;
    o.block = 8;
    o.steps = 16;
    o.revise.on = true;
    std::string err;
    try {
        decode::make_policy("mbsd", *m, *dev, o, {299, 298, -1})
            ->generate(std::vector<int32_t>{297, 65});
    } catch (const Error& e) {
        err = e.what();
    }
    EXPECT_NE(err.find("--revise is not available for a model with shifted logits"),
              std::string::npos)
        << err;
    o.revise.on = false;
    err.clear();
    try {
        decode::make_policy("pipeline", *m, *dev, o, {299, 298, -1})
            ->generate(std::vector<int32_t>{297, 65});
    } catch (const Error& e) {
        err = e.what();
    }
    EXPECT_NE(err.find("--policy pipeline is not available for a model with shifted logits"),
              std::string::npos)
        << err;
    o.self_check.on = true;
    o.threshold = 0.9;
    err.clear();
    try {
        decode::make_policy("mbsd", *m, *dev, o, {299, 298, -1})
            ->generate(std::vector<int32_t>{297, 65});
    } catch (const Error& e) {
        err = e.what();
    }
    EXPECT_NE(err.find("--self-check is not available for a model with shifted logits"),
              std::string::npos)
        << err;
}

TEST(Vanilla, ImpossibleOptionsAreRejectedClearly) {
    decode::TokenIds ids{258, 257, -1};
    decode::GenerateOptions o;
    o.gen = 16;
    o.block = 6;
    o.steps = 8;
    EXPECT_NE(policy_error(o, ids).find("--gen 16 is not a multiple of --block 6"),
              std::string::npos);
    o.block = 8;
    o.steps = 7;
    EXPECT_NE(policy_error(o, ids).find("--steps 7 is not a multiple of the 2 blocks"),
              std::string::npos);
    o.steps = 8;
    EXPECT_NE(policy_error(o, {-1, 257, -1}).find("no mask token"), std::string::npos);
    // The fixture models have a context of 64 positions.
    o.gen = 64;
    o.block = 64;
    EXPECT_NE(policy_error(o, ids, 3).find("exceeds the model's context length 64"),
              std::string::npos);
    o.gen = 16;
    o.block = 16;
    o.temperature = -1;
    EXPECT_NE(policy_error(o, ids).find("--temperature"), std::string::npos);
    o.temperature = 0;
    try {
        auto m = model::Model::load((data_dir() / "llada-mha.gguf").string());
        runtime::ThreadPool pool(2);
        auto dev = runtime::make_cpu_device(pool);
        decode::make_policy("nope", *m, *dev, o, ids);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unknown policy 'nope'"), std::string::npos);
    }
    // Every name the error and --help advertise is one make_policy accepts.
    {
        auto m = model::Model::load((data_dir() / "llada-mha.gguf").string());
        auto causal = model::Model::load((data_dir() / "llama-causal.gguf").string());
        runtime::ThreadPool pool(1);
        auto dev = runtime::make_cpu_device(pool);
        auto block_causal = model::Model::load(
            (fs::path(LLADA_TEST_DATA) / "llada2" / "llada2-tiny.gguf").string());
        for (const auto& name : decode::policy_names()) {
            const model::Model& model = name == "ar"       ? *causal
                                        : name == "llada2" ? *block_causal
                                                           : *m;
            EXPECT_NO_THROW(decode::make_policy(name, model, *dev, o, ids)) << name;
        }
        // The step engine's seven, ar, dream and LLaDA 2.x's.
        EXPECT_EQ(decode::policy_names().size(), 10u);
    }
    // A causal model cannot be decoded by a diffusion policy.
    auto ar = model::Model::load((data_dir() / "llama-causal.gguf").string());
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    EXPECT_THROW(decode::make_policy("vanilla", *ar, *dev, o, ids), Error);
}

// The sampling filter against a brute-force twin written here: sort every token by (logit
// descending, index ascending), keep the first top_k, then those with p >= min_p * p_max
// (computed as probabilities in double, not in the kernel's log form); the sampled token is
// the Gumbel-max over exactly the kept ones, with the same draw. Logits with ties, k past the
// vocabulary and a banned token included.
TEST(SampleFilter, KeepsTheTopKThenMinPAndSamplesAmongThem) {
    constexpr int64_t V = 40;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> level(0, 12);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> logits(V);
        for (auto& x : logits)
            x = 0.5f * static_cast<float>(level(rng));  // many ties
        const int32_t banned = trial % 3 == 0 ? static_cast<int32_t>(trial % V) : -1;
        const decode::SampleFilter f{std::array{0, 1, 3, 7, 39, 40, 55}[trial % 7],
                                     std::array{0.0, 0.05, 0.3, 1.0}[trial % 4]};
        std::vector<int32_t> order;
        for (int32_t v = 0; v < V; ++v)
            if (v != banned) order.push_back(v);
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
        if (f.top_k > 0 && static_cast<int64_t>(order.size()) > f.top_k) order.resize(f.top_k);
        double pmax = 0.0, z = 0.0;
        for (int32_t v = 0; v < V; ++v)
            z += std::exp(static_cast<double>(logits[v]));
        for (int32_t v : order)
            pmax = std::max(pmax, std::exp(static_cast<double>(logits[v])) / z);
        std::vector<uint8_t> want(V, 0);
        for (int32_t v : order)
            want[v] = std::exp(static_cast<double>(logits[v])) / z >= f.min_p * pmax * (1 - 1e-12);
        std::vector<uint8_t> got;
        decode::filter_tokens(logits.data(), V, banned, f, got);
        ASSERT_EQ(got, want) << "trial " << trial << " top_k " << f.top_k << " min_p " << f.min_p;

        decode::CounterNoise noise(100 + trial);
        noise.next_draw(V);
        const double T = 0.7;
        int32_t best = -1;
        double best_val = 0.0;
        for (int32_t v = 0; v < V; ++v) {
            if (!want[v]) continue;
            const double val =
                std::exp(static_cast<double>(logits[v])) / std::pow(-std::log(noise.at(v)), T);
            if (best < 0 || val > best_val) best = v, best_val = val;
        }
        EXPECT_EQ(decode::pick_candidate(logits.data(), V, T, noise, 0, banned, f).token, best)
            << "trial " << trial;
    }
}

// top_k 1 (or min_p 1 without ties) leaves only the most likely token: sampling at any
// temperature must then decode exactly what greedy decoding does, for a diffusion policy (the
// filter takes the unfused head) and for the AR one.
TEST(SampleFilter, TopOneSamplingIsGreedyDecoding) {
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    auto m = model::Model::load((data_dir() / "llada-mha.gguf").string());
    const std::vector<int32_t> prompt = {256, 72, 105};
    for (const char* policy : {"vanilla", "dual-cache"}) {
        SCOPED_TRACE(policy);
        decode::GenerateOptions opt;
        opt.gen = 16;
        opt.block = 8;
        opt.steps = 16;
        const auto greedy =
            decode::make_policy(policy, *m, *dev, opt, {258, 257, -1})->generate(prompt);
        opt.temperature = 2.0;
        opt.seed = 5;
        const auto sampled =
            decode::make_policy(policy, *m, *dev, opt, {258, 257, -1})->generate(prompt);
        EXPECT_NE(sampled.canvas, greedy.canvas);  // the filter is what makes them equal
        opt.filter.top_k = 1;
        EXPECT_EQ(
            decode::make_policy(policy, *m, *dev, opt, {258, 257, -1})->generate(prompt).canvas,
            greedy.canvas);
        opt.filter = {0, 1.0};
        EXPECT_EQ(
            decode::make_policy(policy, *m, *dev, opt, {258, 257, -1})->generate(prompt).canvas,
            greedy.canvas);
    }
    auto ar = model::Model::load((data_dir() / "llama-causal.gguf").string());
    decode::GenerateOptions opt;
    opt.gen = 20;
    const std::vector<int32_t> ar_prompt = {256, 72, 105, 33};
    const auto greedy =
        decode::make_policy("ar", *ar, *dev, opt, {-1, 257, -1})->generate(ar_prompt);
    opt.temperature = 2.0;
    opt.filter.top_k = 1;
    EXPECT_EQ(decode::make_policy("ar", *ar, *dev, opt, {-1, 257, -1})->generate(ar_prompt).canvas,
              greedy.canvas);
    // A filter at T = 0 would be ignored: refused, naming the flags.
    opt.temperature = 0.0;
    try {
        decode::make_policy("ar", *ar, *dev, opt, {-1, 257, -1});
        ADD_FAILURE() << "top_k at temperature 0 was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--temperature above 0"), std::string::npos)
            << e.what();
    }
    opt.temperature = 1.0;
    opt.filter = {-1, 0.0};
    EXPECT_THROW(decode::make_policy("vanilla", *m, *dev, opt, {258, 257, -1}), Error);
    opt.filter = {0, 1.5};
    EXPECT_THROW(decode::make_policy("vanilla", *m, *dev, opt, {258, 257, -1}), Error);
}

// logprobs: each generated token's log-probability and its step's top tokens must be those of
// the forward that committed it. For vanilla (every step a full forward) and ar, that forward
// is recomputed here from the canvas before the step, without the engine's caches; the fused
// head's value (logprobs 0) must equal the rows' (logprobs 3) under a cache policy too.
TEST(Logprobs, AreTheCommittingForwardsDistribution) {
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    auto m = model::Model::load((data_dir() / "llada-mha.gguf").string());
    const int64_t V = m->hparams().n_vocab;
    const std::vector<int32_t> prompt = {256, 72, 105};
    decode::GenerateOptions opt;
    opt.gen = 16;
    opt.block = 8;
    opt.steps = 16;
    opt.logprobs = 3;
    std::vector<std::vector<int32_t>> before;  // the canvas before each step
    std::vector<std::vector<int32_t>> committed;
    std::vector<int32_t> canvas(prompt);
    canvas.resize(prompt.size() + opt.gen, 258);
    auto res = decode::make_policy("vanilla", *m, *dev, opt, {258, 257, -1})
                   ->generate(prompt, [&](const decode::StepEvent& ev) {
                       before.push_back(canvas);
                       committed.emplace_back(ev.committed.begin(), ev.committed.end());
                       canvas.assign(ev.canvas.begin(), ev.canvas.end());
                   });
    ASSERT_EQ(res.logprobs.size(), canvas.size());
    const int n = static_cast<int>(canvas.size());
    int checked = 0;
    for (size_t s = 0; s < before.size(); ++s) {
        for (int32_t p : committed[s]) {
            model::Session sess(*m, *dev, 1, n, n, 1);
            std::vector<int32_t> pos(n), seq(n, 0);
            for (int i = 0; i < n; ++i)
                pos[i] = i;
            int32_t out = p, span = n;
            runtime::Batch b{n, before[s].data(), pos.data(), seq.data(), 1, &out, &span};
            const float* l = sess.forward(b);
            double mx = l[0], z = 0.0;
            for (int64_t v = 0; v < V; ++v)
                mx = std::max<double>(mx, l[v]);
            for (int64_t v = 0; v < V; ++v)
                z += std::exp(l[v] - mx);
            const auto lp = [&](int32_t t) { return l[t] - mx - std::log(z); };
            EXPECT_NEAR(res.logprobs[p], lp(res.canvas[p]), 1e-4) << "step " << s << " pos " << p;
            std::vector<int32_t> order(V);
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(),
                             [&](int32_t a, int32_t b) { return l[a] > l[b]; });
            ASSERT_EQ(res.top_logprobs[p].size(), 3u);
            for (int k = 0; k < 3; ++k) {
                EXPECT_EQ(res.top_logprobs[p][k].token, order[k]) << "pos " << p << " rank " << k;
                EXPECT_NEAR(res.top_logprobs[p][k].logprob, lp(order[k]), 1e-4);
            }
            ++checked;
        }
    }
    EXPECT_EQ(checked, opt.gen);
    for (size_t p = 0; p < prompt.size(); ++p)
        EXPECT_TRUE(std::isnan(res.logprobs[p]));

    // The fused head (logprobs 0: no rows) gives the rows' values under a cache policy.
    opt.steps = 8;
    opt.threshold = 0.5;
    const auto rows =
        decode::make_policy("dual-cache", *m, *dev, opt, {258, 257, -1})->generate(prompt);
    opt.logprobs = 0;
    const auto fused =
        decode::make_policy("dual-cache", *m, *dev, opt, {258, 257, -1})->generate(prompt);
    ASSERT_EQ(fused.canvas, rows.canvas);
    EXPECT_TRUE(fused.top_logprobs.empty());
    for (size_t p = prompt.size(); p < rows.canvas.size(); ++p)
        EXPECT_NEAR(fused.logprobs[p], rows.logprobs[p], 1e-4) << "pos " << p;

    // ar: the full causal forward over everything before each token.
    auto ar = model::Model::load((data_dir() / "llama-causal.gguf").string());
    decode::GenerateOptions aopt;
    aopt.gen = 10;
    aopt.logprobs = 2;
    const std::vector<int32_t> ap = {256, 72, 105, 33};
    const auto ares = decode::make_policy("ar", *ar, *dev, aopt, {-1, 257, -1})->generate(ap);
    ASSERT_EQ(ares.logprobs.size(), ares.canvas.size());
    for (size_t i = ap.size(); i < ares.canvas.size(); ++i) {
        const int k = static_cast<int>(i);
        model::Session sess(*ar, *dev, 1, k, k, 1);
        std::vector<int32_t> pos(k), seq(k, 0);
        for (int j = 0; j < k; ++j)
            pos[j] = j;
        int32_t last = k - 1;
        runtime::Batch b{k, ares.canvas.data(), pos.data(), seq.data(), 1, &last, nullptr};
        const float* l = sess.forward(b);
        const int64_t AV = ar->hparams().n_vocab;
        double mx = l[0], z = 0.0;
        for (int64_t v = 0; v < AV; ++v)
            mx = std::max<double>(mx, l[v]);
        for (int64_t v = 0; v < AV; ++v)
            z += std::exp(l[v] - mx);
        EXPECT_NEAR(ares.logprobs[i], l[ares.canvas[i]] - mx - std::log(z), 1e-4) << "token " << i;
        EXPECT_EQ(ares.top_logprobs[i][0].token, ares.canvas[i]);  // greedy: the top token
    }
    // Refused where they are not recorded, and past 20.
    aopt.logprobs = 21;
    EXPECT_THROW(decode::make_policy("ar", *ar, *dev, aopt, {-1, 257, -1}), Error);
}

void greedy_matches_full_recomputation(bool fused);

// Incremental decoding with the KV cache must pick, at every step, the argmax of a full causal
// forward over everything before it (computed here without any cache reuse), through the
// fused LM head (the default at T = 0) and through full logits rows.
TEST(Autoregressive, GreedyMatchesFullRecomputation) {
    for (bool fused : {true, false}) {
        SCOPED_TRACE(fused ? "fused head" : "full logits");
        greedy_matches_full_recomputation(fused);
    }
}

void greedy_matches_full_recomputation(bool fused) {
    auto m = model::Model::load((data_dir() / "llama-causal.gguf").string());
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions opt;
    opt.gen = 20;
    opt.fused_sampling = fused;
    decode::TokenIds ids{-1, 257, -1};
    std::vector<int32_t> prompt = {256, 72, 105, 33};
    auto res = decode::make_policy("ar", *m, *dev, opt, ids)->generate(prompt);
    const int64_t V = m->hparams().n_vocab;
    const int n_gen = static_cast<int>(res.steps.size());
    ASSERT_GT(n_gen, 0);
    for (int i = 0; i < n_gen; ++i) {
        const int n = static_cast<int>(prompt.size()) + i;
        model::Session s(*m, *dev, 1, n, n, 1);
        std::vector<int32_t> pos(n), seq(n, 0);
        for (int p = 0; p < n; ++p)
            pos[p] = p;
        int32_t last = n - 1;
        runtime::Batch b{n, res.canvas.data(), pos.data(), seq.data(), 1, &last, nullptr};
        const float* l = s.forward(b);
        const int32_t want = static_cast<int32_t>(std::max_element(l, l + V) - l);
        EXPECT_EQ(res.canvas[n], want) << "step " << i;
    }
    // One prefill forward over the prompt, then one row per generated token.
    EXPECT_EQ(res.stats.forwards, n_gen);
    EXPECT_EQ(res.stats.rows, static_cast<int64_t>(prompt.size()) + n_gen - 1);
}

TEST(Autoregressive, RejectsDiffusionModelsAndCfg) {
    auto m = model::Model::load((data_dir() / "llada-mha.gguf").string());
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions opt;
    EXPECT_THROW(decode::make_policy("ar", *m, *dev, opt, {258, 257, -1}), Error);
    auto ar = model::Model::load((data_dir() / "llama-causal.gguf").string());
    opt.cfg = 1.0;
    EXPECT_THROW(decode::make_policy("ar", *ar, *dev, opt, {-1, 257, -1}), Error);
}

// A cache policy that refreshes every K/V at every step computes exactly what vanilla computes,
// so it must reproduce the reference trajectory, noise replay and CFG included, whenever the
// schedule commits at every step (the cache policies stop a block once it is decided, vanilla
// runs all its steps).
TEST(Caches, RefreshEveryStepReproducesTheReference) {
    int checked = 0;
    for (const auto& c : load_cases()) {
        const int blocks = c["gen"].get<int>() / c["block"].get<int>();
        if (c["steps"].get<int>() / blocks > c["block"].get<int>()) continue;
        for (const char* policy : {"prefix-cache", "dual-cache"}) {
            SCOPED_TRACE(c["name"].get<std::string>() + " " + policy);
            expect_reference_trajectory(c, run_case(c, 2, policy, true, 1));
            ++checked;
        }
    }
    EXPECT_GE(checked, 20);
}

namespace {
std::unique_ptr<model::Model> mha() {
    return model::Model::load((data_dir() / "llada-mha.gguf").string());
}
}  // namespace

// The KV cache itself: a forward of only a block's rows against the cache that a full forward
// just filled gives those rows bit-identical logits.
TEST(Caches, WindowAgainstAFreshCacheEqualsTheFullForward) {
    auto m = mha();
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    const int L = 30, V = static_cast<int>(m->hparams().n_vocab);
    model::Session s(*m, *dev, 1, L, L, L);
    std::vector<int32_t> tok(L), pos(L), seq(L, 0);
    for (int i = 0; i < L; ++i) {
        tok[i] = i < 10 ? 60 + i : 258;
        pos[i] = i;
    }
    int32_t kv_len = L;
    runtime::Batch full{L, tok.data(), pos.data(), seq.data(), L, pos.data(), &kv_len};
    const float* a = s.forward(full);
    std::vector<float> want(a, a + static_cast<size_t>(L) * V);
    // Rows 12..19 only.
    std::vector<int32_t> rows = {0, 1, 2, 3, 4, 5, 6, 7};
    runtime::Batch win{8, tok.data() + 12, pos.data() + 12, seq.data(), 8, rows.data(), &kv_len};
    const float* b = s.forward(win);
    for (int r = 0; r < 8; ++r) {
        for (int v = 0; v < V; ++v)
            ASSERT_EQ(b[r * V + v], want[(12 + r) * V + v]) << r;
    }
}

TEST(Caches, DualComputesFewerRowsThanPrefixThanVanilla) {
    auto m = mha();
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions opt;
    opt.gen = 32;
    opt.block = 8;
    opt.steps = 32;
    opt.early_stop = 0;
    decode::TokenIds ids{258, 257, -1};
    std::vector<int32_t> prompt = {256, 72, 105, 33};
    std::map<std::string, model::ForwardStats> st;
    for (const char* p : {"vanilla", "prefix-cache", "dual-cache"}) {
        st[p] = decode::make_policy(p, *m, *dev, opt, ids)->generate(prompt).stats;
    }
    // Same steps (one commit each), but per step vanilla computes 36 rows, prefix-cache the
    // block + suffix, dual-cache the block; every block starts with one full refresh.
    EXPECT_EQ(st["vanilla"].forwards, 32);
    EXPECT_EQ(st["prefix-cache"].forwards, 32);
    EXPECT_EQ(st["dual-cache"].forwards, 32);
    EXPECT_EQ(st["vanilla"].rows, 32 * 36);
    EXPECT_EQ(st["dual-cache"].rows, 4 * 36 + 28 * 8);
    EXPECT_EQ(st["prefix-cache"].rows, 4 * 36 + 7 * (32 + 24 + 16 + 8));
    // LM-head rows are the masked positions of the current block only.
    EXPECT_EQ(st["dual-cache"].lm_head_rows, 4 * (8 + 7 + 6 + 5 + 4 + 3 + 2 + 1));
}

TEST(Threshold, CommitRules) {
    std::vector<decode::Candidate> c = {{1, 0.95f}, {2, 0.5f}, {3, 0.91f}, {4, 0.99f}};
    auto thr = [&](double tau) {
        std::vector<int> out;
        decode::select_by_threshold(c, tau, out);
        return out;
    };
    auto fac = [&](double f) {
        std::vector<int> out;
        decode::select_by_factor(c, f, out);
        return out;
    };
    EXPECT_EQ(thr(0.9), (std::vector<int>{0, 2, 3}));
    EXPECT_EQ(thr(0.999), (std::vector<int>{3}));  // at least one
    // Factor 1: the n-th most confident needs 1 - 1/(n+1): 0.5, 0.667, 0.75, 0.8.
    // Sorted: 0.99 (n=1, always), 0.95 >= 0.667, 0.91 >= 0.75, 0.5 < 0.8.
    EXPECT_EQ(fac(1.0), (std::vector<int>{0, 2, 3}));
    // Factor 0.2: n = 2 needs 0.933, n = 3 needs 0.95. Sorted: 0.99 (always), 0.95 passes,
    // 0.91 does not.
    EXPECT_EQ(fac(0.2), (std::vector<int>{0, 3}));
    std::vector<int> none;
    decode::select_by_threshold({}, 0.9, none);
    EXPECT_TRUE(none.empty());
}

// The commit rule as a component: the schedule counts accepted drafts as its commits; the
// parallel rules drop their forced pick (the most confident one below the bar) once drafts made
// progress, and keep every position that clears the bar.
TEST(CommitPolicy, AcceptedProgressCountsAgainstTheScheduleAndTheForcedPick) {
    const std::vector<decode::Candidate> c = {{1, 0.4f}, {2, 0.5f}, {3, -1.0f}, {4, 0.3f}};
    std::vector<int> out;
    // The schedule: 5 masked positions over 2 steps commit 3 then 2 (get_num_transfer_tokens).
    decode::CommitPolicy sched(decode::CommitRule::Schedule, 0.0, 0.0, false, 2, 8);
    sched.start_block(5);
    EXPECT_EQ(sched.scheduled(0), 3);
    EXPECT_EQ(sched.scheduled(1), 2);
    EXPECT_EQ(sched.scheduled(2), 1);  // past the schedule
    sched.choose(c, 3, 1, 3, out);     // one draft accepted: two more
    EXPECT_EQ(out, (std::vector<int>{0, 1}));
    sched.choose(c, 3, 3, 1, out);
    EXPECT_TRUE(out.empty());
    // vanilla's schedule may commit nothing at a step; the others commit at least one.
    decode::CommitPolicy ref(decode::CommitRule::Schedule, 0.0, 0.0, true, 4, 8);
    ref.start_block(2);
    EXPECT_EQ(ref.scheduled(3), 0);
    decode::CommitPolicy fast(decode::CommitRule::Schedule, 0.0, 0.0, false, 4, 8);
    fast.start_block(2);
    EXPECT_EQ(fast.scheduled(3), 1);
    // vanilla runs every scheduled step and may choose the mask id; the others end a block when
    // nothing is masked and never choose the mask id.
    EXPECT_FALSE(ref.block_over(3, 0));
    EXPECT_TRUE(ref.block_over(4, 2));
    EXPECT_EQ(ref.banned(7), -1);
    EXPECT_TRUE(fast.block_over(1, 0));
    EXPECT_FALSE(fast.block_over(9, 1));
    EXPECT_EQ(fast.banned(7), 7);
    // Threshold 0.9: nothing clears it, so alone the step forces its most confident one...
    decode::CommitPolicy thr(decode::CommitRule::Threshold, 0.9, 0.0, false, 1, 8);
    thr.choose(c, 1, 0, 3, out);
    EXPECT_EQ(out, (std::vector<int>{1}));
    // ... and with an accepted draft it does not.
    thr.choose(c, 1, 1, 3, out);
    EXPECT_TRUE(out.empty());
    EXPECT_TRUE(thr.takes(0.95f));
    EXPECT_FALSE(thr.takes(0.5f));
    EXPECT_FALSE(sched.takes(0.99f));  // the schedule takes by count, never by confidence
    // Factor 1: the first needs 0.5 on its own; 0.5 is not below it, so it stays.
    decode::CommitPolicy fac(decode::CommitRule::Factor, 0.0, 1.0, false, 1, 8);
    fac.choose(c, 1, 1, 3, out);
    EXPECT_EQ(out, (std::vector<int>{1}));
    decode::CommitPolicy fac2(decode::CommitRule::Factor, 0.0, 1.5, false, 1, 8);
    fac2.choose(c, 1, 1, 3, out);  // 0.5 is not below 1 - 1.5 / 2 = 0.25: kept
    EXPECT_EQ(out, (std::vector<int>{1}));
    decode::CommitPolicy fac3(decode::CommitRule::Factor, 0.0, 0.2, false, 1, 8);
    fac3.choose(c, 1, 1, 3, out);  // 0.5 < 0.9: only the forced pick, dropped
    EXPECT_TRUE(out.empty());
}

// Speculation as a component: a fixed lookahead or the first forward's whole next block, drafts
// accepted on the same token at --accept, and the cost table weighed in pairs of rows under CFG.
TEST(Speculation, DraftsAcceptanceAndLookaheadSizes) {
    decode::GenerateOptions opt;
    opt.block = 8;
    opt.accept = 0.6;
    opt.lookahead = 5;
    decode::Speculation fixed(opt, 1, 40, nullptr, 100, 99);
    EXPECT_EQ(fixed.lookahead(8, 20, 8, 2), 5);
    EXPECT_EQ(fixed.lookahead(8, 3, 8, 2), 3);  // no more than are left
    // The lookahead positions: the first masked or drafted ones from the block's end on.
    std::vector<decode::TokenState> state(40, decode::TokenState::Masked);
    state[17] = decode::TokenState::Visible;
    state[18] = decode::TokenState::Stable;
    state[19] = decode::TokenState::Draft;
    state[21] = decode::TokenState::Visible;
    std::vector<int32_t> look;
    fixed.plan(state, 16, 8, 8, 2, look);
    EXPECT_EQ(look, (std::vector<int32_t>{16, 19, 20, 22, 23}));
    look.clear();
    fixed.plan(state, 36, 8, 8, 2, look);  // 4 left
    EXPECT_EQ(look, (std::vector<int32_t>{36, 37, 38, 39}));
    // Their predictions become drafts; without a replay a draft keeps whatever was predicted.
    const std::vector<decode::Candidate> cands = {{5, 0.9f}, {99, 0.5f}, {-1, 0.1f}, {100, 0.2f}};
    EXPECT_EQ(fixed.propose_all(look, cands, state), 4);
    for (int p : look)
        EXPECT_EQ(state[p], decode::TokenState::Draft);
    EXPECT_EQ(fixed.draft(36), 5);
    EXPECT_FLOAT_EQ(fixed.confidence(36), 0.9f);
    EXPECT_EQ(fixed.draft(37), 99);
    // A replay on a timing-only device stands in a committable token (mask + 1) for a mask id
    // or an out-of-vocabulary placeholder, and keeps the rest.
    decode::DecisionTrace trace;
    decode::GenerateOptions ropt = opt;
    ropt.replay = &trace;
    decode::Speculation replayed(ropt, 1, 40, nullptr, 100, 99);
    EXPECT_EQ(replayed.propose_all(look, cands, state), 4);
    EXPECT_EQ(replayed.draft(36), 5);
    EXPECT_EQ(replayed.draft(37), 0);
    EXPECT_EQ(replayed.draft(38), 0);
    EXPECT_EQ(replayed.draft(39), 0);
    opt.lookahead = -1;
    decode::ForwardCost cost;
    cost.rows = {1, 8, 16, 32, 64};
    cost.ms = {10, 10, 10, 10, 20};
    decode::Speculation spec(opt, 1, 40, &cost, 100, 99);
    // The first step of a generation is no exception: with no draft evaluated yet, no row is
    // taken beyond the padding (this table has no buckets, so none at all).
    EXPECT_EQ(spec.lookahead(8, 20, 8, -1), 0);
    EXPECT_EQ(spec.draft(12), -1);
    spec.propose(12, {7, 0.8f});
    EXPECT_EQ(spec.draft(12), 7);
    EXPECT_FLOAT_EQ(spec.confidence(12), 0.8f);
    EXPECT_TRUE(spec.accepts(12, {7, 0.6f}));
    EXPECT_FALSE(spec.accepts(12, {7, 0.59f}));
    EXPECT_FALSE(spec.accepts(12, {8, 0.99f}));
    spec.clear(12);
    EXPECT_EQ(spec.drafts()[12], -1);
    // Under CFG (two sequences) the rule sees the table by pairs of rows: the same choice as a
    // single sequence on a table of half the rows.
    decode::ForwardCost half;
    half.rows = {4, 8, 16, 32};
    half.ms = {10, 10, 10, 20};
    decode::Speculation paired(opt, 2, 40, &cost, 100, 99), single(opt, 1, 40, &half, 100, 99);
    for (int base : {2, 6, 12}) {
        for (int masked : {2, 8}) {
            EXPECT_EQ(paired.lookahead(base, 20, masked, 2), single.lookahead(base, 20, masked, 2))
                << base << " " << masked;
        }
    }
}

// Revision's rule as a component: a check revises the committed token when the top token beats
// its probability by the margin or it falls below the floor; a replay revises at the trace's
// rate; the auto lane budget is the most CPU rows that project within the dense step.
TEST(RevisionRule, MarginFloorReplayRateAndTheLaneBudget) {
    decode::ReviseOptions ro;
    ro.margin = 0.3;
    ro.floor = 0.05;
    const int32_t V = 4, mask = 3;
    decode::RevisionRule rule(ro, nullptr, V, mask);
    decode::CounterNoise noise(1);
    // Probabilities from logits: softmax(log p) = p.
    auto logits = [](std::vector<float> p) {
        for (float& x : p)
            x = std::log(x);
        return p;
    };
    auto a = logits({0.6f, 0.25f, 0.1f, 0.05f});
    auto v = rule.check(9, 1, a.data(), noise);  // top 0.6 - q 0.25 = 0.35 >= 0.3
    EXPECT_TRUE(v.revise);
    EXPECT_EQ(v.top, 0);
    EXPECT_NEAR(v.q, 0.25f, 1e-6f);
    auto b = logits({0.5f, 0.3f, 0.15f, 0.05f});
    v = rule.check(9, 1, b.data(), noise);  // 0.2 < margin, 0.3 >= floor: kept
    EXPECT_FALSE(v.revise);
    v = rule.check(9, 2, b.data(), noise);  // 0.35 >= margin
    EXPECT_TRUE(v.revise);
    auto c = logits({0.04f, 0.02f, 0.04f, 0.9f});  // the mask id is never the choice
    v = rule.check(9, 1, c.data(), noise);
    EXPECT_TRUE(v.revise);  // 0.02 < floor
    EXPECT_NE(v.top, mask);
    // A replay at 0.25 revisions per check: every fourth check, the token moved off itself.
    decode::DecisionTrace tr;
    tr.steps.push_back({});
    tr.steps[0].checks = 4;
    tr.steps[0].revised = 1;
    decode::RevisionRule replay(ro, &tr, V, mask);
    int revised = 0;
    for (int k = 0; k < 8; ++k) {
        v = replay.check(9, 2, nullptr, noise);
        revised += v.revise;
        EXPECT_NE(v.top, 2);
        EXPECT_NE(v.top, mask);
    }
    EXPECT_EQ(revised, 2);
    // Lane budget: N rows, or none without tables; auto fits the CPU rows within the dense step.
    decode::ForwardCost dense, lane;
    dense.rows = {8, 32, 64};
    dense.ms = {100, 150, 240};
    lane.rows = {1, 8, 16, 32};
    lane.ms = {120, 125, 190, 375};
    ro.rows = 5;
    EXPECT_EQ(decode::lane_budget(ro, true, 32, dense, lane), 5);
    ro.rows = -1;
    EXPECT_EQ(decode::lane_budget(ro, true, 32, dense, lane), 8);   // 125 <= 150 < 190
    EXPECT_EQ(decode::lane_budget(ro, true, 64, dense, lane), 16);  // 190 <= 240 < 375
    EXPECT_EQ(decode::lane_budget(ro, true, 8, dense, lane), 0);    // nothing fits in 100 ms
    EXPECT_EQ(decode::lane_budget(ro, false, 32, dense, lane), -1);
    EXPECT_EQ(decode::lane_budget(ro, true, 32, {}, lane), -1);
}

TEST(Threshold, AtLeastOneCommitPerStepAndNeverOutsideTheBlock) {
    auto m = mha();
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    for (const char* policy : {"threshold", "dual-cache", "prefix-cache"}) {
        for (double tau : {0.3, 0.9}) {
            decode::GenerateOptions opt;
            opt.gen = 32;
            opt.block = 8;
            opt.steps = 4;  // ignored by the parallel rule
            opt.threshold = tau;
            opt.early_stop = 0;
            std::vector<int32_t> prompt = {256, 80, 81, 82, 83};
            int steps = 0;
            auto res = decode::make_policy(policy, *m, *dev, opt, {258, 257, -1})
                           ->generate(prompt, [&](const decode::StepEvent& ev) {
                               ++steps;
                               EXPECT_GE(ev.committed.size(), 1u);
                               const int lo = 5 + ev.info.block * 8;
                               for (int32_t p : ev.committed) {
                                   EXPECT_GE(p, lo);
                                   EXPECT_LT(p, lo + 8);
                               }
                           });
            for (int p = 5; p < 37; ++p)
                EXPECT_NE(res.canvas[p], 258) << policy;
            EXPECT_LE(steps, 32);
            EXPECT_EQ(static_cast<int>(res.stats.forwards), steps);
        }
    }
}

TEST(Threshold, ImpossibleCombinationsAreRejected) {
    auto m = mha();
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    auto error = [&](const std::string& policy, decode::GenerateOptions o) {
        try {
            decode::make_policy(policy, *m, *dev, o, {258, 257, -1});
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    decode::GenerateOptions o;
    o.gen = 16;
    o.block = 8;
    o.steps = 16;
    o.threshold = 0.9;
    EXPECT_NE(error("vanilla", o).find("--policy threshold"), std::string::npos);
    o.factor = 1.0;
    EXPECT_NE(error("dual-cache", o).find("only one"), std::string::npos);
    o.factor = 0;
    o.threshold = 1.5;
    EXPECT_NE(error("threshold", o).find("(0, 1]"), std::string::npos);
    o.threshold = 0.9;
    o.remasking = decode::Remasking::Random;
    EXPECT_NE(error("threshold", o).find("--remasking random"), std::string::npos);
    o.remasking = decode::Remasking::LowConfidence;
    o.refresh = 2;
    EXPECT_NE(error("threshold", o).find("--refresh applies"), std::string::npos);
    EXPECT_EQ(error("dual-cache", o), "");
}

// Early stop never changes the answer: once a finished block holds end-of-text, later blocks
// cannot change anything before it.
TEST(EarlyStop, SameAnswerFewerForwards) {
    auto m = mha();
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    decode::TokenIds ids{258, 257, -1};
    int stopped = 0;
    // Prompts found to end early on this random model ({256, 66, 110, 55}) and not to.
    for (const std::vector<int32_t>& prompt :
         {std::vector<int32_t>{256, 66, 110, 55}, std::vector<int32_t>{256, 65, 97, 48}}) {
        decode::GenerateOptions opt;
        opt.gen = 48;
        opt.block = 8;
        opt.steps = 48;
        opt.early_stop = 1;
        auto a = decode::make_policy("dual-cache", *m, *dev, opt, ids)->generate(prompt);
        opt.early_stop = 0;
        auto b = decode::make_policy("dual-cache", *m, *dev, opt, ids)->generate(prompt);
        EXPECT_EQ(a.answer(ids), b.answer(ids));
        if (a.stopped_early) {
            ++stopped;
            EXPECT_LT(a.stats.forwards, b.stats.forwards);
        } else {
            EXPECT_EQ(a.canvas, b.canvas);
        }
    }
    EXPECT_EQ(stopped, 1);
}

// Revision counts add field by field: `revisions` stays the replacements, remasks apart (what
// llada-bench's ablation sums and llada-cli's JSON prints mean the same).
TEST(Revision, AddKeepsReplacementsAndRemasksApart) {
    decode::GenerateResult::Revision a, b;
    a.checks = 5;
    a.revisions = 2;
    a.remasks = 1;
    a.proj_cpu_ms = 1.5;
    b.checks = 7;
    b.revisions = 3;
    b.remasks = 4;
    b.right_to_wrong = 1;
    b.stabilised = 6;
    b.proj_cpu_ms = 2.0;
    a.add(b);
    EXPECT_EQ(a.checks, 12);
    EXPECT_EQ(a.revisions, 5);
    EXPECT_EQ(a.remasks, 5);
    EXPECT_EQ(a.right_to_wrong, 1);
    EXPECT_EQ(a.stabilised, 6);
    EXPECT_DOUBLE_EQ(a.proj_cpu_ms, 3.5);
}
