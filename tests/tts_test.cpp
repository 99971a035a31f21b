// Test-time scaling (decode/tts.h): one candidate is the single-candidate run, candidates in one
// batch are each the generation decoded alone with its seed (identical windows computed once),
// and the selection rules on hand-made answer sets.
#include <gtest/gtest.h>
#include <set>

#include <filesystem>
#include <random>

#include "decode/lookahead.h"
#include "decode/noise.h"
#include "decode/sampling.h"
#include "decode/tts.h"
#include "runtime/device.h"
#include "runtime/devices.h"
#include "tools/common.h"
#include "util/error.h"

using namespace llada;
namespace fs = std::filesystem;

namespace {

struct Tiny {
    tools::LoadedModel lm;
    decode::GenerateOptions opt;
    Tiny()
        : lm(tools::load_model(
              (fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-llada-m.gguf").string())) {
        opt.gen = 32;
        opt.block = 8;
        opt.steps = 32;
    }
    std::vector<int32_t> prompt(const std::string& text) const {
        return lm.tok->encode(text, lm.tok->add_bos_default(), false);
    }
};

decode::GenerateResult alone(const Tiny& t, const std::string& policy,
                             const decode::GenerateOptions& opt,
                             const std::vector<int32_t>& prompt) {
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    auto p = decode::make_policy(policy, *t.lm.model, *dev, opt, t.lm.ids);
    return p->generate(prompt);
}

}  // namespace

TEST(Tts, CandidatesInOneBatchEqualEachDecodedAloneWithItsSeed) {
    Tiny t;
    struct Case {
        const char* policy;
        double temperature, threshold;
        decode::Remasking remasking;
        int lookahead;
        bool revise = false;
    };
    const Case cases[] = {{"vanilla", 1.0, 0.0, decode::Remasking::LowConfidence, -1},
                          {"dual-cache", 0.0, 0.0, decode::Remasking::Random, -1},
                          {"threshold", 1.0, 0.7, decode::Remasking::LowConfidence, -1},
                          {"mbsd", 1.0, 0.7, decode::Remasking::LowConfidence, 4},
                          // Progressive revision: every candidate's checks share one CPU path.
                          {"mbsd", 1.0, 0.5, decode::Remasking::LowConfidence, 4, true}};
    int total_distinct = 0;
    for (const Case& c : cases) {
        SCOPED_TRACE(c.policy);
        auto opt = t.opt;
        opt.temperature = c.temperature;
        opt.threshold = c.threshold;
        opt.remasking = c.remasking;
        opt.lookahead = c.lookahead;
        opt.revise.on = c.revise;
        opt.seed = 7;
        // A hard-set prompt on which the samples differ.
        const auto prompt = t.prompt("sort 56 44 46 59 52 58:");
        runtime::ThreadPool pool(2);
        auto dev = runtime::make_cpu_device(pool);
        const auto batch =
            decode::generate_candidates(c.policy, *t.lm.model, *dev, opt, t.lm.ids, prompt, 4);
        ASSERT_EQ(batch.candidates.size(), 4u);
        int distinct = 0;
        int64_t forwards_alone = 0;
        for (int k = 0; k < 4; ++k) {
            auto o = opt;
            o.seed = opt.seed + k;
            const auto a = alone(t, c.policy, o, prompt);
            EXPECT_EQ(batch.candidates[k].canvas, a.canvas) << "candidate " << k;
            EXPECT_EQ(batch.candidates[k].stats.forwards, a.stats.forwards) << k;
            distinct += k > 0 && a.canvas != batch.candidates[0].canvas;
            forwards_alone = std::max<int64_t>(forwards_alone, a.stats.forwards);
        }
        // One forward per step of the longest candidate, whatever N.
        EXPECT_EQ(batch.forwards, forwards_alone);
        total_distinct += distinct;
    }
    // The seeds made a difference somewhere (the test would otherwise compare equal runs only).
    EXPECT_GT(total_distinct, 0);
}

TEST(Tts, OneCandidateIsTheSingleRun) {
    Tiny t;
    auto opt = t.opt;
    opt.temperature = 0.5;
    opt.threshold = 0.8;
    const auto prompt = t.prompt("sort 75 71 54 77 85 25:");
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    const auto one =
        decode::generate_candidates("dual-cache", *t.lm.model, *dev, opt, t.lm.ids, prompt, 1);
    const auto a = alone(t, "dual-cache", opt, prompt);
    EXPECT_EQ(one.candidates[0].canvas, a.canvas);
    EXPECT_EQ(one.forwards, a.stats.forwards);
    EXPECT_EQ(one.rows, a.stats.rows);
}

// While candidates' windows agree (here: T = 0 and the same schedule, so always) the batch
// computes them once: N candidates cost one candidate's rows.
TEST(Tts, IdenticalWindowsAreComputedOnce) {
    Tiny t;
    auto opt = t.opt;
    const auto prompt = t.prompt("6238+0032=");
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    const auto b = decode::generate_candidates("need", *t.lm.model, *dev, opt, t.lm.ids, prompt, 8);
    const auto a = alone(t, "need", opt, prompt);
    EXPECT_EQ(b.rows, a.stats.rows);
    for (const auto& c : b.candidates)
        EXPECT_EQ(c.canvas, a.canvas);
}

TEST(Tts, VoteAndConfidenceOnHandMadeAnswers) {
    using decode::select_by_confidence;
    using decode::select_by_vote;
    // Majority wins; its earliest candidate is returned.
    EXPECT_EQ(select_by_vote({"3", "4", "4", "3", "4"}, {0.9, 0.1, 0.1, 0.9, 0.1}), 1);
    // A tie goes to the higher mean confidence.
    EXPECT_EQ(select_by_vote({"3", "4", "4", "3"}, {0.9, 0.5, 0.5, 0.8}), 0);
    EXPECT_EQ(select_by_vote({"3", "4", "4", "3"}, {0.2, 0.5, 0.5, 0.2}), 1);
    // Equal votes and confidence: the earliest candidate.
    EXPECT_EQ(select_by_vote({"b", "a"}, {0.5, 0.5}), 0);
    // Empty answers abstain, unless every answer is empty.
    EXPECT_EQ(select_by_vote({"", "", "7"}, {0.9, 0.9, 0.1}), 2);
    EXPECT_EQ(select_by_vote({"", ""}, {0.1, 0.9}), 0);
    EXPECT_EQ(select_by_confidence({0.2, 0.7, 0.7, 0.1}), 1);
    EXPECT_THROW(select_by_vote({}, {}), Error);
    EXPECT_THROW(select_by_vote({"a"}, {0.1, 0.2}), Error);
}

// --tts auto on npu-sim: N candidates' rows cost at most 1.1x one candidate's on the latency
// table, N + 1 would cost more (or N is the cap); a device without a cost model is refused.
TEST(Tts, AutoSizesNFromTheLatencyTable) {
    Tiny t;
    auto opt = t.opt;
    opt.threshold = 0.9;
    runtime::ThreadPool pool(1);
    runtime::DeviceConfig c;
    c.device = "npu-sim";
    auto npu = runtime::make_device(c, pool);
    double ms = 0.0;
    const int n = decode::auto_candidates("dual-cache", *t.lm.model, *npu, opt, 20, 16, &ms);
    EXPECT_GE(n, 2);  // one candidate's block (8 rows) is a quarter of a 32-row tile
    EXPECT_LE(n, 16);
    model::Session s(*t.lm.model, *npu, 1, 52, 8 * 17, 8 * 17);
    const auto table = decode::device_forward_cost(s, 8 * 17, 52);
    EXPECT_LE(table.at(8 * n), 1.1 * table.at(8) + 1e-9);
    if (n < 16) {
        EXPECT_GT(table.at(8 * (n + 1)), 1.1 * table.at(8));
    }
    EXPECT_NEAR(ms, table.at(8 * n), 1e-6);
    auto cpu = runtime::make_cpu_device(pool);
    EXPECT_THROW(decode::auto_candidates("dual-cache", *t.lm.model, *cpu, opt, 20, 16, nullptr),
                 Error);
    // ar and dream size N the same way from their own step's rows: one token per candidate
    // (ar), the whole canvas (dream), no longer "internal: unknown diffusion policy".
    for (const auto& [policy, r] : {std::pair<const char*, int64_t>{"ar", 1}, {"dream", 52}}) {
        SCOPED_TRACE(policy);
        const int k = decode::auto_candidates(policy, *t.lm.model, *npu, t.opt, 20, 16, &ms);
        EXPECT_GE(k, 1);
        model::Session sp(*t.lm.model, *npu, 1, 52, r * 17, r * 17);
        const auto tp = decode::device_forward_cost(sp, r * 17, 52);
        EXPECT_LE(tp.at(r * k), 1.1 * tp.at(r) + 1e-9);
        if (k < 16) {
            EXPECT_GT(tp.at(r * (k + 1)), 1.1 * tp.at(r));
        }
        EXPECT_NEAR(ms, tp.at(r * k), 1e-6);
    }
}

// The fused head's Gumbel-max draw against the unfused path's (decode::pick_candidate over the
// counter generator's draws) on random logits, over vocabulary chunks merged as the LM head
// merges them: the same token every time, and its softmax probability.
TEST(Tts, FusedGumbelMaxEqualsTheUnfusedChoice) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    const int64_t V = 1000, chunk = 128;
    int differ_from_argmax = 0;
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> logits(V);
        for (float& x : logits)
            x = nd(rng);
        const double T = trial % 4 == 0 ? 0.3 : trial % 4 == 1 ? 1.0 : trial % 4 == 2 ? 2.0 : 0.0;
        const int32_t banned = trial % 3 == 0 ? static_cast<int32_t>(trial % V) : -1;
        decode::CounterNoise noise(static_cast<uint64_t>(trial));
        noise.next_draw(7 * V);  // an earlier draw, so the offsets are not trivial
        noise.next_draw(4 * V);
        const int64_t row = trial % 4;
        const auto want = decode::pick_candidate(logits.data(), V, T, noise, row * V, banned);
        const kernels::GumbelRow g{noise.seed(), 7 * V + static_cast<uint64_t>(row * V), T, banned};
        kernels::RowStats acc;
        for (int64_t v0 = 0; v0 < V; v0 += chunk) {
            const int64_t n = std::min(chunk, V - v0);
            kernels::RowStats part;
            kernels::row_stats_chunk(logits.data() + v0, 1, n, n, v0, &part);
            kernels::row_gumbel_chunk(logits.data() + v0, 1, n, n, v0, &g, &part);
            kernels::row_stats_merge(acc, part);
        }
        ASSERT_EQ(acc.gumbel_token, want.token) << "trial " << trial << " T " << T;
        EXPECT_NEAR(kernels::row_gumbel_confidence(acc),
                    decode::softmax_prob(logits.data(), V, want.token), 1e-5);
        differ_from_argmax += acc.gumbel_token != acc.token;
    }
    EXPECT_GT(differ_from_argmax, 20);  // the noise did change choices
}

// A whole generation at T > 0 on the fused head equals the same generation with full logits.
TEST(Tts, SamplingOnTheFusedHeadEqualsFullLogits) {
    Tiny t;
    for (const char* policy : {"vanilla", "dual-cache", "mbsd"}) {
        SCOPED_TRACE(policy);
        auto opt = t.opt;
        opt.temperature = 1.0;
        opt.seed = 11;
        if (std::string(policy) == "mbsd") {
            opt.lookahead = 4;
            opt.threshold = 0.7;
        }
        const auto prompt = t.prompt("sort 56 44 46 59 52 58:");
        auto full = opt;
        full.fused_sampling = false;
        const auto a = alone(t, policy, opt, prompt);
        const auto b = alone(t, policy, full, prompt);
        EXPECT_EQ(a.canvas, b.canvas);
        EXPECT_EQ(a.stats.forwards, b.stats.forwards);
        EXPECT_GT(b.stats.lm_head_rows, 0);
    }
}

// `ar` candidates: the prompt prefilled once, one row per live candidate per step; candidate k
// is the `ar` policy's run with seed k.
TEST(Tts, ArCandidatesEqualEachRunAlone) {
    auto lm =
        tools::load_model((fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-ar-m.gguf").string());
    decode::GenerateOptions opt;
    opt.gen = 32;
    opt.temperature = 1.0;
    opt.seed = 5;
    const auto prompt = lm.tok->encode("sort 56 44 46 59 52 58:", lm.tok->add_bos_default(), false);
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    const auto b = decode::generate_candidates("ar", *lm.model, *dev, opt, lm.ids, prompt, 6);
    int distinct = 0;
    int64_t longest = 0;
    for (int k = 0; k < 6; ++k) {
        auto o = opt;
        o.seed = opt.seed + k;
        auto p = decode::make_policy("ar", *lm.model, *dev, o, lm.ids);
        const auto a = p->generate(prompt);
        EXPECT_EQ(b.candidates[k].canvas, a.canvas) << "candidate " << k;
        distinct += a.canvas != b.candidates[0].canvas;
        longest = std::max<int64_t>(longest, static_cast<int64_t>(a.steps.size()));
    }
    EXPECT_GT(distinct, 0);
    // One forward per step of the longest candidate (the prefill is the first), and one row
    // per step for each distinct canvas so far: candidates whose tokens agree up to a step share
    // its row (their caches hold the same K/V), those that have diverged never do.
    EXPECT_EQ(b.forwards, longest);
    const int64_t P = static_cast<int64_t>(prompt.size());
    int64_t rows = P;
    for (int64_t s = 1; s < longest; ++s) {
        std::set<std::vector<int32_t>> prefixes;
        for (const auto& c : b.candidates) {
            if (static_cast<int64_t>(c.steps.size()) > s)
                prefixes.emplace(c.canvas.begin(), c.canvas.begin() + P + s);
        }
        rows += static_cast<int64_t>(prefixes.size());
    }
    EXPECT_EQ(b.rows, rows);
    EXPECT_LT(b.rows, P + 6 * (longest - 1));  // the shared rows are computed once
}

// `--policy dream --tts N`: Dream's sampler takes candidates in one batch (one forward per step
// over every candidate's canvas), and each is the generation decoded alone with its seed.
TEST(Tts, DreamCandidatesEqualEachRunAlone) {
    Tiny t;
    t.opt.steps = 16;
    t.opt.temperature = 1.0;
    t.opt.seed = 3;
    for (const char* alg : {"entropy", "origin"}) {
        t.opt.dream.alg = alg;
        const auto prompt = t.prompt("sort 56 44 46 59 52 58:");
        runtime::ThreadPool pool(1);
        auto dev = runtime::make_cpu_device(pool);
        const auto b =
            decode::generate_candidates("dream", *t.lm.model, *dev, t.opt, t.lm.ids, prompt, 4);
        ASSERT_EQ(b.candidates.size(), 4u);
        int distinct = 0;
        for (int k = 0; k < 4; ++k) {
            auto o = t.opt;
            o.seed = t.opt.seed + k;
            const auto a = alone(t, "dream", o, prompt);
            EXPECT_EQ(b.candidates[k].canvas, a.canvas) << alg << " candidate " << k;
            EXPECT_EQ(b.candidates[k].stats.forwards, a.stats.forwards) << alg;
            distinct += a.canvas != b.candidates[0].canvas;
        }
        EXPECT_GT(distinct, 0) << alg;
        // One forward per step for all four (Dream's steps all compute while any is masked).
        EXPECT_EQ(b.forwards, b.candidates[0].stats.forwards) << alg;
    }
}

// The candidates of `ar` run the policy's own loop, with its checks: a token the tokenizer
// cannot spell is refused by name in a batch as it is alone.
TEST(Tts, ArCandidatesCheckTheirTokensAsTheRunAloneDoes) {
    auto lm =
        tools::load_model((fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-ar-m.gguf").string());
    decode::GenerateOptions opt;
    opt.gen = 8;
    const auto prompt = lm.tok->encode("2889+8183=", lm.tok->add_bos_default(), false);
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    decode::TokenIds ids = lm.ids;
    ids.n_spellable = 1;  // every id the model picks is beyond the tokenizer
    auto message = [&](auto&& f) {
        try {
            f();
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const std::string one =
        message([&] { decode::make_policy("ar", *lm.model, *dev, opt, ids)->generate(prompt); });
    const std::string three =
        message([&] { decode::generate_candidates("ar", *lm.model, *dev, opt, ids, prompt, 3); });
    EXPECT_NE(one.find("which the tokenizer cannot spell"), std::string::npos) << one;
    EXPECT_EQ(three, one);
}
