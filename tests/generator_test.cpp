// The step engine (decode/generator.h, decode/scheduler.h) and the row addressing under it:
// the token-state invariants of every policy, multi-block speculation's drafts (never in the
// cache that later steps treat as final, rejected ones back to masked), --lookahead 0 against
// the policy without speculation, the lookahead rule on hand-made cost tables, several
// generations in one forward, and shadow rows / slots / duplicate writes in runtime::Batch
// (the pipeline's tests are in pipeline_test.cpp).
#include <gtest/gtest.h>

#include <array>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "decode/generator.h"
#include "decode/lookahead.h"
#include "decode/noise.h"
#include "decode/scheduler.h"
#include "decode/trace.h"
#include "model/model.h"
#include "runtime/device.h"
#include "tests/step_trace.h"
#include "tools/common.h"
#include "util/error.h"

using namespace llada;
namespace fs = std::filesystem;

using namespace llada::steptest;

namespace {

// The invariants every non-reference policy keeps (docs/step-engine.md).
void expect_invariants(const Trace& t, int prompt_len, int block, const decode::TokenIds& ids) {
    int last_block = 0;
    for (size_t i = 0; i < t.steps.size(); ++i) {
        SCOPED_TRACE("step " + std::to_string(i));
        const auto& st = t.steps[i];
        // Blocks commit strictly left to right: every commit lies in the step's block, and a
        // block is current only once every earlier one is fully committed.
        EXPECT_GE(st.block, last_block);
        last_block = st.block;
        const int b0 = prompt_len + st.block * block;
        for (int32_t p : t.committed[i]) {
            EXPECT_GE(p, b0);
            EXPECT_LT(p, b0 + block);
        }
        const auto& before_states = i == 0 ? t.states[0] : t.states[i - 1];
        for (int p = prompt_len; p < b0; ++p) {
            EXPECT_TRUE(committed_state(before_states[p]) || i == 0) << p;
        }
        for (size_t p = prompt_len; p < t.canvas[i].size(); ++p) {
            // The mask id is never a committed token.
            if (committed_state(t.states[i][p])) {
                EXPECT_NE(t.canvas[i][p], ids.mask) << p;
            }
            // A stable token never changes, nor its state.
            if (i > 0 && t.states[i - 1][p] == decode::TokenState::Stable) {
                EXPECT_EQ(t.states[i][p], decode::TokenState::Stable) << p;
                EXPECT_EQ(t.canvas[i][p], t.canvas[i - 1][p]) << p;
            }
            // A draft is not committed: the canvas keeps the mask there.
            if (t.states[i][p] == decode::TokenState::Draft) {
                EXPECT_EQ(t.canvas[i][p], ids.mask);
            }
        }
    }
}

}  // namespace

TEST(Generator, EveryPolicyKeepsTheTokenStateInvariants) {
    Tiny tiny;
    for (const char* policy : {"dual-cache", "prefix-cache", "threshold", "need", "mbsd"}) {
        for (const char* text : kPrompts) {
            SCOPED_TRACE(std::string(policy) + " " + text);
            auto opt = tiny.opt;
            if (std::string(policy) == "mbsd") opt.lookahead = 8;
            const auto prompt = tiny.prompt(text);
            const Trace t = run(*tiny.lm.model, policy, opt, tiny.lm.ids, prompt);
            expect_invariants(t, static_cast<int>(prompt.size()), opt.block, tiny.lm.ids);
            // At the end everything generated is stable.
            for (size_t p = prompt.size(); p < t.states.back().size(); ++p)
                EXPECT_EQ(t.states.back()[p], decode::TokenState::Stable) << p;
        }
    }
}

// Under --need-refresh once. (With the default suffix rule mbsd's drafts are accepted as often,
// but on these prompts it takes as many forwards as need: 17 and 17; BENCHMARKS.md.)
TEST(Generator, MbsdAcceptsDraftsAndSavesForwardsOnTheTrainedModel) {
    Tiny tiny;
    tiny.opt.need_refresh = decode::NeedRefresh::Once;
    int64_t accepted = 0, nfe_mbsd = 0, nfe_need = 0;
    for (const char* text : kPrompts) {
        auto opt = tiny.opt;
        opt.lookahead = 8;
        const auto prompt = tiny.prompt(text);
        const Trace s = run(*tiny.lm.model, "mbsd", opt, tiny.lm.ids, prompt);
        const Trace n = run(*tiny.lm.model, "need", tiny.opt, tiny.lm.ids, prompt);
        accepted += s.result.drafts_accepted;
        nfe_mbsd += s.result.stats.forwards;
        nfe_need += n.result.stats.forwards;
        // Drafts are proposed on lookahead rows only and counted per step.
        int64_t proposed = 0;
        for (const auto& st : s.steps) {
            EXPECT_LE(st.drafts_proposed, st.lookahead);
            proposed += st.drafts_proposed;
        }
        EXPECT_EQ(proposed, s.result.drafts_proposed);
    }
    EXPECT_GT(accepted, 0);
    EXPECT_LT(nfe_mbsd, nfe_need);
}

// Speculation with no lookahead rows is the policy without speculation, token for token.
TEST(Generator, LookaheadZeroIsThePolicyWithoutSpeculation) {
    Tiny tiny;
    for (const char* text : kPrompts) {
        SCOPED_TRACE(text);
        auto opt = tiny.opt;
        opt.lookahead = 0;
        const auto prompt = tiny.prompt(text);
        const Trace a = run(*tiny.lm.model, "mbsd", opt, tiny.lm.ids, prompt);
        const Trace b = run(*tiny.lm.model, "need", tiny.opt, tiny.lm.ids, prompt);
        expect_same_steps(a, b);
        EXPECT_EQ(a.result.drafts_proposed, 0);
    }
}

// Classifier-free guidance (two sequences per generation) through the windows of need and
// speculation: the invariants hold, and --lookahead 0 is need.
TEST(Generator, GuidanceRunsThroughNeedAndMbsd) {
    Tiny tiny;
    auto opt = tiny.opt;
    opt.cfg = 1.0;
    const auto prompt = tiny.prompt("sort 75 71 54 77 85 25:");
    const Trace n = run(*tiny.lm.model, "need", opt, tiny.lm.ids, prompt);
    expect_invariants(n, static_cast<int>(prompt.size()), opt.block, tiny.lm.ids);
    opt.lookahead = 0;
    const Trace z = run(*tiny.lm.model, "mbsd", opt, tiny.lm.ids, prompt);
    EXPECT_EQ(z.result.canvas, n.result.canvas);
    opt.lookahead = 8;
    const Trace m = run(*tiny.lm.model, "mbsd", opt, tiny.lm.ids, prompt);
    expect_invariants(m, static_cast<int>(prompt.size()), opt.block, tiny.lm.ids);
    EXPECT_GT(m.result.drafts_proposed, 0);
    // Both sequences' rows are asked for: twice the rows of the run without guidance.
    auto plain = tiny.opt;
    const Trace p = run(*tiny.lm.model, "need", plain, tiny.lm.ids, prompt);
    EXPECT_EQ(n.steps[0].rows, 2 * p.steps[0].rows);
}

// Read the cache back: after decoding, every committed position's slot holds the layer-0 key of
// its committed token (layer 0's keys depend on the token and position alone), never a draft's,
// including when drafts are fed as context and so written to their slots.
TEST(Generator, DraftsNeverReachTheCommittedCache) {
    Tiny tiny;
    int checked_drafts = 0;
    for (auto input : {decode::DraftInput::Mask, decode::DraftInput::Token}) {
        for (const char* text : kPrompts) {
            SCOPED_TRACE(text);
            auto opt = tiny.opt;
            opt.lookahead = 24;  // every later position: drafts fed as tokens take two rows each
            opt.draft_input = input;
            opt.early_stop = 0;
            const auto prompt = tiny.prompt(text);
            CacheCheck check;
            check.on = true;
            const Trace t =
                run(*tiny.lm.model, "mbsd", opt, tiny.lm.ids, prompt, nullptr, 1, &check);
            EXPECT_GT(check.checked, 0);
            const int L = static_cast<int>(t.result.canvas.size());
            // The last step's commits are computed by no later forward: only earlier ones count.
            std::vector<bool> last(L, false);
            for (int32_t p : t.committed.back())
                last[p] = true;
            for (int p = static_cast<int>(prompt.size()); p < L; ++p) {
                if (last[p]) continue;
                const int32_t tok = t.result.canvas[p];
                EXPECT_EQ(t.kv_token[p], tok) << p;
                const auto want = layer0_key(*tiny.lm.model, tok, p);
                float err = 0;
                for (size_t i = 0; i < want.size(); ++i)
                    err = std::max(err, std::fabs(want[i] - t.k0[p][i]));
                EXPECT_LT(err, 1e-5f) << "position " << p;
            }
            checked_drafts += static_cast<int>(t.result.drafts_proposed);
        }
    }
    EXPECT_GT(checked_drafts, 0);
    // The check has teeth: a different token's key at the same position differs.
    const auto a = layer0_key(*tiny.lm.model, 40, 10), b = layer0_key(*tiny.lm.model, 41, 10);
    float diff = 0;
    for (size_t i = 0; i < a.size(); ++i)
        diff = std::max(diff, std::fabs(a[i] - b[i]));
    EXPECT_GT(diff, 1e-2f);
}

// With the strictest acceptance (confidence 1.0) most drafts are rejected when their block becomes
// current: each is then masked again (and decided by the commit rule like any masked position).
TEST(Generator, RejectedDraftsReturnToMasked) {
    Tiny tiny;
    auto opt = tiny.opt;
    opt.lookahead = 8;
    opt.accept = 1.0;
    opt.threshold = 1.0;  // one commit per step: the rest of a block stays masked
    const auto prompt = tiny.prompt("sort 75 71 54 77 85 25:");
    const Trace t = run(*tiny.lm.model, "mbsd", opt, tiny.lm.ids, prompt);
    EXPECT_GT(t.result.drafts_rejected, 0);
    const int P = static_cast<int>(prompt.size());
    for (size_t i = 1; i < t.steps.size(); ++i) {
        const auto& st = t.steps[i];
        if (st.drafts_rejected == 0) continue;
        // The step a block became current: its positions were drafts before.
        const int b0 = P + st.block * opt.block;
        int drafts_before = 0, masked_after = 0;
        for (int p = b0; p < b0 + opt.block; ++p) {
            drafts_before += t.states[i - 1][p] == decode::TokenState::Draft;
            masked_after += t.states[i][p] == decode::TokenState::Masked;
            EXPECT_NE(t.states[i][p], decode::TokenState::Draft);
        }
        EXPECT_EQ(st.drafts_accepted + st.drafts_rejected, drafts_before);
        EXPECT_EQ(masked_after, opt.block - st.committed);
    }
}

// Several generations in one forward, each on its own cache sequences, decode exactly what each
// decodes alone.
TEST(Scheduler, GenerationsInOneForwardEqualEachAlone) {
    Tiny tiny;
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    std::vector<std::vector<int32_t>> prompts;
    for (const char* text : kPrompts)
        prompts.push_back(tiny.prompt(text));
    for (const char* policy : {"dual-cache", "mbsd"}) {
        SCOPED_TRACE(policy);
        auto opt = tiny.opt;
        opt.lookahead = 8;
        const auto cfg = decode::configure_diffusion(policy, opt);
        std::vector<std::unique_ptr<decode::Generator>> gens;
        int L = 0;
        for (const auto& p : prompts) {
            gens.push_back(
                std::make_unique<decode::Generator>(*tiny.lm.model, opt, tiny.lm.ids, cfg, p));
            L = std::max(L, gens.back()->canvas_len());
        }
        const int n = static_cast<int>(gens.size());
        model::Session s(*tiny.lm.model, *dev, n, L, int64_t{n} * L, int64_t{n} * L);
        decode::Scheduler sched(s);
        for (auto& g : gens)
            sched.add(*g);
        EXPECT_EQ(s.kv().n_free(), 0);
        while (sched.step()) {
        }
        for (size_t i = 0; i < gens.size(); ++i) {
            const Trace alone = run(*tiny.lm.model, policy, opt, tiny.lm.ids, prompts[i]);
            EXPECT_EQ(gens[i]->result().canvas, alone.result.canvas) << kPrompts[i];
            EXPECT_EQ(gens[i]->result().stats.forwards, alone.result.stats.forwards);
        }
        for (auto& g : gens)
            sched.remove(*g);
        EXPECT_EQ(s.kv().n_free(), n);
    }
}

// A generation whose own step fails leaves the scheduler with its message; the others finish
// as they would alone. The failing one samples (temperature 1) from a recorded noise stream too
// short for its steps, so its draws run out partway.
TEST(Scheduler, OneGenerationsFailureIsItsOwn) {
    Tiny tiny;
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    auto opt = tiny.opt;
    const auto cfg = decode::configure_diffusion("dual-cache", opt);
    auto bad_opt = opt;
    bad_opt.temperature = 1.0;
    decode::ReplayNoise noise(std::vector<double>(3000, 0.5));  // a few steps' worth
    bad_opt.noise = &noise;
    const auto p_good = tiny.prompt(kPrompts[1]), p_bad = tiny.prompt(kPrompts[2]);
    const char* kWhy = "recorded noise exhausted";
    // Alone, the bad one throws from step() (failures not isolated, the default).
    {
        decode::Generator bad(*tiny.lm.model, bad_opt, tiny.lm.ids, cfg, p_bad);
        model::Session s(*tiny.lm.model, *dev, 1, bad.canvas_len(), bad.canvas_len(),
                         bad.canvas_len());
        decode::Scheduler sched(s);
        sched.add(bad);
        try {
            while (sched.step()) {
            }
            FAIL() << "the generation with too little noise finished";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(kWhy), std::string::npos) << e.what();
        }
        EXPECT_EQ(s.kv().n_free(), 1);  // its sequence went back to the cache
    }
    decode::Generator good(*tiny.lm.model, opt, tiny.lm.ids, cfg, p_good);
    decode::ReplayNoise noise2(std::vector<double>(3000, 0.5));
    bad_opt.noise = &noise2;
    decode::Generator bad(*tiny.lm.model, bad_opt, tiny.lm.ids, cfg, p_bad);
    const int L = std::max(good.canvas_len(), bad.canvas_len());
    model::Session s(*tiny.lm.model, *dev, 2, L, 2 * L, 2 * L);
    decode::Scheduler sched(s);
    sched.isolate_failures(true);
    sched.add(bad);
    sched.add(good);
    std::vector<decode::Scheduler::Failure> failures;
    while (sched.step()) {
        for (auto& f : sched.take_failures())
            failures.push_back(f);
    }
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_EQ(failures[0].g, &bad);
    EXPECT_NE(failures[0].what.find(kWhy), std::string::npos) << failures[0].what;
    EXPECT_TRUE(good.done());
    const Trace alone = run(*tiny.lm.model, "dual-cache", opt, tiny.lm.ids, p_good);
    EXPECT_EQ(good.result().canvas, alone.result.canvas);
    sched.remove(good);
    EXPECT_EQ(s.kv().n_free(), 2);
}

// A chosen id past the tokenizer's tokens (the padded rows of an output layer) fails the
// generation when it is chosen, naming it, rather than the detokeniser after the whole run.
TEST(Generator, AnIdTheTokenizerCannotSpellIsAnErrorWhenChosen) {
    Tiny tiny;
    const auto prompt = tiny.prompt(kPrompts[1]);
    const Trace full = run(*tiny.lm.model, "dual-cache", tiny.opt, tiny.lm.ids, prompt);
    const auto& canvas = full.result.canvas;
    const int32_t top = *std::max_element(canvas.begin() + prompt.size(), canvas.end());
    decode::TokenIds ids = tiny.lm.ids;
    ids.n_spellable = top;  // the largest id the run chose is now past the tokenizer
    try {
        run(*tiny.lm.model, "dual-cache", tiny.opt, ids, prompt);
        FAIL() << "an unspellable id was committed";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("chose token id " + std::to_string(top) + " at position"),
                  std::string::npos)
            << m;
        EXPECT_NE(m.find("cannot spell: it has " + std::to_string(top) + " tokens"),
                  std::string::npos)
            << m;
    }
}

namespace {

// A forward cost of fixed_ms + per_row_ms * rows, at 1, 2, 4, ... 128 rows.
decode::ForwardCost linear_cost(double fixed_ms, double per_row_ms) {
    decode::ForwardCost c;
    for (int r = 1; r <= 128; r *= 2) {
        c.rows.push_back(r);
        c.ms.push_back(fixed_ms + per_row_ms * r);
    }
    return c;
}

}  // namespace

// The lookahead rule on hand-made cost tables.
TEST(Lookahead, FillsThePaddingAndEntersAnotherBucketOnlyOnTheBlocksLastStep) {
    // An NPU-like staircase: flat inside 32-row tiles, +100 ms per tile.
    decode::ForwardCost stair;
    for (int r = 1; r <= 128; ++r) {
        stair.rows.push_back(r);
        stair.ms.push_back(100.0 * ((r + 31) / 32));
        stair.buckets.push_back(32 * ((r + 31) / 32));
    }
    EXPECT_EQ(stair.padding(10), 22);
    EXPECT_EQ(stair.padding(32), 0);
    EXPECT_EQ(stair.padding(33), 31);
    decode::LookaheadInputs in;
    in.base_rows = 10;
    in.available = 64;
    in.commits_per_step = 2.0;
    in.accept_rate = 0.8;
    in.accept_measured = true;
    in.steps_left = 2.0;
    // Not the block's last step: its padding only, however often drafts are accepted (a later
    // step of the block drafts those positions again, and its drafts are the ones in place).
    EXPECT_EQ(decode::choose_lookahead(stair, in), 22);
    // The last step, with most drafts accepted: 2 + 0.8 * 54 = 45.2 tokens for 200 ms beats
    // 2 + 0.8 * 22 = 19.6 for 100 ms, so the window fills the second bucket too.
    in.steps_left = 1.0;
    EXPECT_EQ(decode::choose_lookahead(stair, in), 54);
    // With few accepted drafts the next bucket does not pay: 200 / (2 + 0.05 * 54) is more
    // than 100 / (2 + 0.05 * 22).
    in.accept_rate = 0.05;
    EXPECT_EQ(decode::choose_lookahead(stair, in), 22);
    // The prior alone (no draft evaluated yet) never buys another bucket.
    in.accept_rate = 0.8;
    in.accept_measured = false;
    EXPECT_EQ(decode::choose_lookahead(stair, in), 22);
    in.accept_measured = true;
    // Fewer positions than the bucket offers.
    in.available = 5;
    EXPECT_EQ(decode::choose_lookahead(stair, in), 5);
    // A CPU-like cost, linear in rows, has no padding: before the last step nothing; on it a
    // lookahead row costs what a block row costs and yields 0.1 expected tokens where a block
    // row yields 2 / 10: still nothing.
    const decode::ForwardCost lin = linear_cost(1.0, 10.0);
    EXPECT_EQ(lin.padding(10), 0);
    in.available = 64;
    in.accept_rate = 0.1;
    in.steps_left = 4.0;
    EXPECT_EQ(decode::choose_lookahead(lin, in), 0);
    in.steps_left = 1.0;
    EXPECT_EQ(decode::choose_lookahead(lin, in), 0);
    // A linear cost dominated by a fixed part (weights streamed once per forward) pays on the
    // last step, and only there.
    in.accept_rate = 0.3;
    decode::ForwardCost fixed = linear_cost(1000.0, 0.1);
    EXPECT_EQ(decode::choose_lookahead(fixed, in), 64);
    in.steps_left = 4.0;
    EXPECT_EQ(decode::choose_lookahead(fixed, in), 0);
    in.steps_left = 1.0;
    // A generation whose blocks commit a whole block in their first step gains nothing from
    // drafts (they add to the next block's first step, which commits at most the block): none,
    // not even in free padding, however few this block's own steps commit.
    in.block = 32;
    in.first_step_commits = 32.0;
    EXPECT_EQ(decode::choose_lookahead(fixed, in), 0);
    EXPECT_EQ(decode::choose_lookahead(stair, in), 0);
    // Near it the drafts' share stops at the first steps' 2 missing commits: 0.3 * 7 rows reach
    // it, where without a block the same table took all 64.
    in.first_step_commits = 30.0;
    EXPECT_EQ(decode::choose_lookahead(fixed, in), 7);
    in.block = 0;
    // Caps: the session's rows and the memory budget.
    in.max_rows = 40;
    EXPECT_EQ(decode::choose_lookahead(fixed, in), 30);
    in.max_rows = 0;
    for (int r : fixed.rows)
        fixed.arena_bytes.push_back(static_cast<size_t>(r) * 1000);
    in.mem_budget = 32 * 1000;
    EXPECT_EQ(decode::choose_lookahead(fixed, in), 22);
    EXPECT_EQ(decode::choose_lookahead(decode::ForwardCost{}, in), 0);
}

TEST(Lookahead, AutoNeedsACostAndTheCalibrationIsReadBack) {
    Tiny tiny;
    auto opt = tiny.opt;
    const auto cfg = decode::configure_diffusion("mbsd", opt);
    EXPECT_THROW(decode::Generator(*tiny.lm.model, opt, tiny.lm.ids, cfg, tiny.prompt("1+1=")),
                 Error);
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    model::Session s(*tiny.lm.model, *dev, 1, 64, 64, 64);
    const auto c = decode::calibrate_forward_cost(s, 64, 64, 1);
    ASSERT_EQ(c.rows.back(), 64);
    EXPECT_EQ(s.stats().forwards, 0);  // not counted as anyone's forwards
    const fs::path f = fs::temp_directory_path() / "llada_generator_test_cost.txt";
    decode::write_forward_cost(f.string(), "key A", c);
    const auto back = decode::read_forward_cost(f.string(), "key A");
    ASSERT_EQ(back.rows, c.rows);
    for (size_t i = 0; i < c.ms.size(); ++i)
        EXPECT_NEAR(back.ms[i], c.ms[i], 1e-3 * c.ms[i]);
    EXPECT_TRUE(decode::read_forward_cost(f.string(), "key B").empty());
    // A damaged cache is an error naming the line, not a shorter table used as if whole.
    auto damaged = [&](const std::string& body) {
        std::ofstream(f) << "llada.cpp forward cost key A\n" << body;
        try {
            decode::read_forward_cost(f.string(), "key A");
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(damaged("1 0.5 100\n2 0.7\n").find("damaged at line 3"), std::string::npos);
    EXPECT_NE(damaged("1 0.5 100\n2 x 100\n4 0.9 100\n").find("damaged at line 3"),
              std::string::npos);
    EXPECT_NE(damaged("2 0.5 100\n1 0.7 100\n").find("damaged at line 3"), std::string::npos);
    EXPECT_NE(damaged("1 nan 100\n").find("damaged at line 2"), std::string::npos);
    EXPECT_NE(damaged("").find("holds no entries"), std::string::npos);
    EXPECT_EQ(damaged("1 0.5 100\n2 0.7 100\n"), "no error");
    fs::remove(f);
}

TEST(Generator, ImpossibleSpeculationOptionsAreRejected) {
    decode::GenerateOptions opt;
    opt.accept = 0.0;
    EXPECT_THROW(decode::configure_diffusion("mbsd", opt), Error);
    opt.accept = 0.5;
    opt.remasking = decode::Remasking::Random;
    EXPECT_THROW(decode::configure_diffusion("mbsd", opt), Error);
    opt.remasking = decode::Remasking::LowConfidence;
    opt.refresh = 2;
    EXPECT_THROW(decode::configure_diffusion("need", opt), Error);
}

// --- row addressing ---

namespace {

struct Canvas {
    std::vector<int32_t> tok, pos, seq, slot, out;
    // Every sequence's attention span: the sessions here have up to two sequences, and the
    // forward checks each one's span, so the batch points at one entry per sequence.
    std::array<int32_t, 2> kv;
    explicit Canvas(int n) : tok(n), pos(n), seq(n, 0), slot(n), out(n), kv{n, n} {
        for (int i = 0; i < n; ++i) {
            tok[i] = (i * 37 + 11) % 250;
            pos[i] = slot[i] = out[i] = i;
        }
    }
    runtime::Batch batch() const {
        return {static_cast<int64_t>(tok.size()),
                tok.data(),
                pos.data(),
                seq.data(),
                static_cast<int64_t>(tok.size()),
                out.data(),
                kv.data(),
                slot.data(),
                nullptr};
    }
};

}  // namespace

// A shadow row (the mask at position p, no K/V written, key p excluded) against the same row in
// a cache where position p's K/V sit in the last slot and the row attends to every slot but that
// one: the exclusion inside the attention kernel against the attention span, on the same keys.
TEST(RowAddressing, ShadowRowEqualsTheRowWithoutItsOwnKey) {
    auto m = model::Model::load((decode_dir() / "llada-gqa-tied.gguf").string());
    const int64_t V = m->hparams().n_vocab;
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    const int n = 24;
    const int32_t mask = 258;
    for (int p : {0, 5, 13, 23}) {
        SCOPED_TRACE("position " + std::to_string(p));
        // A: slots = positions; the shadow row excludes slot p.
        model::Session a(*m, *dev, 1, n, n + 1, n + 1);
        Canvas c(n);
        a.forward(c.batch());
        int32_t tok = mask, pos = p, seq = 0, slot = -1, excl = p, out = 0, kv = n;
        runtime::Batch sa{1, &tok, &pos, &seq, 1, &out, &kv, &slot, &excl};
        const float* la = a.forward(sa);
        std::vector<float> want(la, la + V);
        // B: position p stored in slot n-1 (and n-1 in slot p); the row attends to n-1 slots.
        model::Session b(*m, *dev, 1, n, n + 1, n + 1);
        Canvas d(n);
        std::swap(d.slot[p], d.slot[n - 1]);
        b.forward(d.batch());
        int32_t kv_b = n - 1;
        runtime::Batch sb{1, &tok, &pos, &seq, 1, &out, &kv_b, &slot, nullptr};
        const float* lb = b.forward(sb);
        float err = 0, scale = 0;
        for (int64_t v = 0; v < V; ++v) {
            err = std::max(err, std::fabs(lb[v] - want[v]));
            scale = std::max(scale, std::fabs(want[v]));
        }
        EXPECT_LT(err, 1e-5f * std::max(1.0f, scale));
        // And it differs from the row that sees its own key (the mask at p): the exclusion did
        // something.
        int32_t no_excl = -1;
        runtime::Batch sc{1, &tok, &pos, &seq, 1, &out, &kv, &slot, &no_excl};
        const float* lc = a.forward(sc);
        float diff = 0;
        for (int64_t v = 0; v < V; ++v)
            diff = std::max(diff, std::fabs(lc[v] - want[v]));
        EXPECT_GT(diff, 1e-4f * std::max(1.0f, scale));
    }
}

// Shadow rows against the PyTorch reference (train/make_shadow_fixtures.py): after a full
// forward of the canvas, four shadow rows in one forward (the mask at p, no K/V, key p
// excluded) give the reference's logits for the same rows as extra rows of one forward under a
// key mask. Tolerance as for the other parity tests on these models (model_test.cpp): 1e-5 of
// max|logit|; predicting p while seeing its own token moves them by far more (checked below).
TEST(RowAddressing, ShadowRowsMatchThePyTorchReference) {
    const std::vector<int32_t> ps = {0, 5, 13, 23};
    const int n = 24;
    for (const char* name : {"llada-mha", "llada-gqa-tied"}) {
        SCOPED_TRACE(name);
        auto m = model::Model::load((decode_dir() / (std::string(name) + ".gguf")).string());
        const int64_t V = m->hparams().n_vocab;
        std::ifstream f(decode_dir() / ("shadow-" + std::string(name) + ".logits.f32"),
                        std::ios::binary);
        ASSERT_TRUE(f) << "missing fixture: run train/make_shadow_fixtures.py";
        std::vector<float> want(ps.size() * V);
        f.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
        ASSERT_EQ(f.gcount(), static_cast<std::streamsize>(want.size() * 4));
        runtime::ThreadPool pool(2);
        auto dev = runtime::make_cpu_device(pool);
        model::Session s(*m, *dev, 1, n, n, n);
        Canvas c(n);
        s.forward(c.batch());
        const int k = static_cast<int>(ps.size());
        std::vector<int32_t> tok(k, 258), pos = ps, seq(k, 0), slot(k, -1), excl = ps, out(k);
        for (int i = 0; i < k; ++i)
            out[i] = i;
        int32_t kv = n;
        runtime::Batch b{k,          tok.data(), pos.data(),  seq.data(), k,
                         out.data(), &kv,        slot.data(), excl.data()};
        const float* got = s.forward(b);
        float scale = 0, err = 0;
        for (float w : want)
            scale = std::max(scale, std::fabs(w));
        for (size_t i = 0; i < want.size(); ++i)
            err = std::max(err, std::fabs(got[i] - want[i]));
        EXPECT_LT(err, 1e-5f * scale);
        // Without the exclusion the rows see their own token: far off the reference.
        std::vector<int32_t> none(k, -1);
        b.exclude = none.data();
        const float* own = s.forward(b);
        float diff = 0;
        for (size_t i = 0; i < want.size(); ++i)
            diff = std::max(diff, std::fabs(own[i] - want[i]));
        EXPECT_GT(diff, 1e-3f * scale);
    }
}

TEST(RowAddressing, RowsWithoutASlotLeaveTheCacheAlone) {
    auto m = model::Model::load((decode_dir() / "llada-mha.gguf").string());
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    const int n = 16;
    model::Session s(*m, *dev, 1, n, n, n);
    Canvas c(n);
    s.forward(c.batch());
    const auto& kv = s.kv();
    const size_t per = static_cast<size_t>(m->hparams().head_dim);
    std::vector<float> before(kv.k(0, 0, 0, 0), kv.k(0, 0, 0, 0) + per * n);
    // Rows with other tokens at every position but no slot: the cache is unchanged.
    Canvas d(n);
    for (auto& t : d.tok)
        t = (t + 7) % 250;
    for (auto& sl : d.slot)
        sl = -1;
    s.forward(d.batch());
    std::vector<float> after(kv.k(0, 0, 0, 0), kv.k(0, 0, 0, 0) + per * n);
    EXPECT_EQ(before, after);
}

TEST(RowAddressing, TwoWritesToOneSlotAreRefusedByName) {
    auto m = model::Model::load((decode_dir() / "llada-mha.gguf").string());
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    model::Session s(*m, *dev, 2, 8, 16, 16);
    Canvas c(8);
    c.slot[5] = 2;
    try {
        s.forward(c.batch());
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rows 2 and 5 both write"), std::string::npos)
            << e.what();
    }
    // The same slot in two sequences is two slots.
    Canvas d(8);
    std::vector<int32_t> tok2(16), pos2(16), seq2(16), slot2(16), out2(16);
    for (int i = 0; i < 16; ++i) {
        tok2[i] = d.tok[i % 8];
        pos2[i] = slot2[i] = i % 8;
        seq2[i] = i / 8;
        out2[i] = i;
    }
    int32_t kv2[2] = {8, 8};
    runtime::Batch b{16,          tok2.data(), pos2.data(),  seq2.data(), 16,
                     out2.data(), kv2,         slot2.data(), nullptr};
    EXPECT_NO_THROW(s.forward(b));
    // A slot outside the cache.
    c.slot[5] = 8;
    EXPECT_THROW(s.forward(c.batch()), Error);
    // An excluded slot the row does not attend to.
    Canvas e(8);
    std::vector<int32_t> ex(8, -1);
    ex[3] = 7;
    e.kv[0] = 6;
    runtime::Batch eb = e.batch();
    eb.exclude = ex.data();
    try {
        s.forward(eb);
        FAIL();
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("row 3 excludes slot 7, outside the 6 slots"),
                  std::string::npos)
            << err.what();
    }
}

TEST(RowAddressing, SequencesAreAcquiredAndReleased) {
    runtime::KvCache kv(1, 3, 4, 1, 8);
    EXPECT_EQ(kv.n_free(), 3);
    const int a = kv.acquire(), b = kv.acquire(), c = kv.acquire();
    EXPECT_EQ(std::set<int>({a, b, c}).size(), 3u);
    EXPECT_THROW(kv.acquire(), Error);
    kv.release(b);
    EXPECT_EQ(kv.acquire(), b);
}

// The last layer on the output rows only: the same predictions as the whole last layer.
TEST(RowAddressing, GatheringOutputRowsInTheLastLayerKeepsTheLogits) {
    auto m = model::Model::load((decode_dir() / "llada-gqa-tied.gguf").string());
    const int64_t V = m->hparams().n_vocab;
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    const int n = 20;
    Canvas c(n);
    std::vector<int32_t> out = {3, 7, 8, 19};
    runtime::Batch b = c.batch();
    b.n_out = static_cast<int64_t>(out.size());
    b.out_rows = out.data();
    runtime::PlanOptions full;
    full.full_last_layer = true;
    model::Session g(*m, *dev, 1, n, n, n), f(*m, *dev, 1, n, n, n, full);
    const float* lg = g.forward(b);
    std::vector<float> want(lg, lg + out.size() * V);
    const float* lf = f.forward(b);
    for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(lf[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << i;
    // Two sequences, output rows out of order, and excluded keys: the gathered last layer maps
    // each output row back to its window row's sequence, position and exclusion.
    {
        std::vector<int32_t> tok(2 * n), pos(2 * n), seq(2 * n), slot(2 * n), excl(2 * n, -1);
        for (int i = 0; i < 2 * n; ++i) {
            tok[i] = (i * 29 + 3) % 250;
            pos[i] = slot[i] = i % n;
            seq[i] = i / n;
        }
        excl[5] = 5;
        excl[n + 2] = 9;
        std::vector<int32_t> outs = {n + 2, 5, 0, n + 7, 12};
        int32_t kv2[2] = {n, n};
        runtime::Batch b2{2 * n,       tok.data(), pos.data(),  seq.data(), 5,
                          outs.data(), kv2,        slot.data(), excl.data()};
        model::Session g2(*m, *dev, 2, n, 2 * n, 2 * n), f2(*m, *dev, 2, n, 2 * n, 2 * n, full);
        const float* a = g2.forward(b2);
        std::vector<float> got(a, a + 5 * V);
        const float* w = f2.forward(b2);
        for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], w[i], 1e-5f * (1.0f + std::fabs(w[i]))) << i;
    }
    // Fewer rows through the last layer's FFN: the plan's last FFN tensor is in output space.
    bool gathered = false;
    runtime::PlanOptions on;
    on.gather_last_layer = true;
    const runtime::Plan plan = m->build_plan(n, n, model::Model::Head::Logits, on);
    for (const auto& t : plan.tensors) {
        if (t.name == "blk." + std::to_string(m->hparams().n_layer - 1) + ".ffn_down")
            gathered = t.rows == runtime::RowSpace::Output;
    }
    EXPECT_TRUE(gathered);
}

// Progressive revision's check row (the mask at p, key p excluded, its own mask key in its place)
// against the PyTorch reference (train/make_shadow_fixtures.py, check-*.logits.f32), and against
// an independent twin on the fp32 and fp16 caches: the plain row {mask at p, writing slot p}
// after the canvas, which sees its own key at p through the ordinary attention kernels.
TEST(RowAddressing, CheckRowsSeeTheirPositionAsMasked) {
    const std::vector<int32_t> ps = {0, 5, 13, 23};
    const int n = 24, k = static_cast<int>(ps.size());
    for (const char* name : {"llada-mha", "llada-gqa-tied"}) {
        SCOPED_TRACE(name);
        auto m = model::Model::load((decode_dir() / (std::string(name) + ".gguf")).string());
        const int64_t V = m->hparams().n_vocab;
        std::ifstream f(decode_dir() / ("check-" + std::string(name) + ".logits.f32"),
                        std::ios::binary);
        ASSERT_TRUE(f) << "missing fixture: run train/make_shadow_fixtures.py";
        std::vector<float> want(ps.size() * V);
        f.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
        ASSERT_EQ(f.gcount(), static_cast<std::streamsize>(want.size() * 4));
        float scale = 0;
        for (float w : want)
            scale = std::max(scale, std::fabs(w));
        runtime::ThreadPool pool(2);
        auto dev = runtime::make_cpu_device(pool);
        for (bool f16 : {false, true}) {
            SCOPED_TRACE(f16 ? "fp16 cache" : "fp32 cache");
            runtime::PlanOptions po;
            po.kv_f16 = f16;
            // Slots [n, 2n) take the check rows' own K/V, past the span every row attends to.
            model::Session s(*m, *dev, 1, 2 * n, 2 * n, 2 * n, po);
            Canvas c(n);
            s.forward(c.batch());
            std::vector<int32_t> tok(k, 258), pos = ps, seq(k, 0), slot(k), excl = ps, out(k),
                                              own(k, 1);
            for (int i = 0; i < k; ++i) {
                out[i] = i;
                slot[i] = n + i;
            }
            int32_t kv = n;
            runtime::Batch b{k,          tok.data(), pos.data(),  seq.data(),  k,
                             out.data(), &kv,        slot.data(), excl.data(), own.data()};
            const float* got = s.forward(b);
            std::vector<float> checks(got, got + want.size());
            if (!f16) {
                float err = 0;
                for (size_t i = 0; i < want.size(); ++i)
                    err = std::max(err, std::fabs(checks[i] - want[i]));
                EXPECT_LT(err, 1e-5f * scale);
            }
            // The twin, one position at a time on a fresh canvas each (it overwrites slot p).
            for (int i = 0; i < k; ++i) {
                model::Session t(*m, *dev, 1, n, n, n, po);
                t.forward(c.batch());
                int32_t mt = 258, mp = ps[i], ms = 0, mslot = ps[i], mo = 0, mkv = n;
                runtime::Batch tb{1, &mt, &mp, &ms, 1, &mo, &mkv, &mslot, nullptr};
                const float* twin = t.forward(tb);
                float err = 0;
                for (int64_t v = 0; v < V; ++v)
                    err = std::max(err, std::fabs(twin[v] - checks[i * V + v]));
                EXPECT_LT(err, 1e-5f * scale) << "position " << ps[i];
            }
        }
        // The shadow row without its own key (the PyTorch shadow fixture) is far from it.
        std::ifstream g(decode_dir() / ("shadow-" + std::string(name) + ".logits.f32"),
                        std::ios::binary);
        std::vector<float> shadow(want.size());
        g.read(reinterpret_cast<char*>(shadow.data()),
               static_cast<std::streamsize>(shadow.size() * 4));
        float diff = 0;
        for (size_t i = 0; i < want.size(); ++i)
            diff = std::max(diff, std::fabs(shadow[i] - want[i]));
        EXPECT_GT(diff, 1e-3f * scale);
    }
}

// A check row must write beyond the span and exclude a key; the session says so by name.
TEST(RowAddressing, CheckRowsInsideTheSpanAreRefused) {
    auto m = model::Model::load((decode_dir() / "llada-mha.gguf").string());
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    model::Session s(*m, *dev, 1, 48, 48, 48);
    Canvas c(24);
    s.forward(c.batch());
    int32_t tok = 258, pos = 3, seq = 0, slot = 5, excl = 3, out = 0, kv = 24, own = 1;
    runtime::Batch b{1, &tok, &pos, &seq, 1, &out, &kv, &slot, &excl, &own};
    try {
        s.forward(b);
        FAIL() << "a check row writing inside the span was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("its own key"), std::string::npos) << e.what();
    }
}

namespace {

// Prompts of the hard sets (models/tasks/all-hard.jsonl), `per_task` of each task.
std::vector<std::string> hard_prompts(int per_task) {
    std::ifstream f(fs::path(LLADA_SOURCE_DIR) / "models" / "tasks" / "all-hard.jsonl");
    std::map<std::string, int> taken;
    std::vector<std::string> out;
    std::string line;
    while (std::getline(f, line)) {
        const auto j = nlohmann::json::parse(line);
        if (taken[j["task"]]++ < per_task) out.push_back(j["prompt"]);
    }
    return out;
}

decode::GenerateOptions revising(decode::GenerateOptions opt) {
    opt.revise.on = true;
    return opt;
}

// Per step: stable positions form a prefix of the generated region, never change, and at the
// end everything is stable and nothing is masked.
void expect_revision_invariants(const Trace& t, int prompt_len, const decode::TokenIds& ids) {
    for (size_t i = 0; i < t.steps.size(); ++i) {
        SCOPED_TRACE("step " + std::to_string(i));
        bool prefix = true;
        for (size_t p = prompt_len; p < t.canvas[i].size(); ++p) {
            const bool stable = t.states[i][p] == decode::TokenState::Stable;
            if (stable && !prefix && t.canvas[i][p] != ids.eos) {
                ADD_FAILURE() << "position " << p << " is stable after a non-stable one";
            }
            prefix = prefix && stable;
            if (i > 0 && t.states[i - 1][p] == decode::TokenState::Stable) {
                EXPECT_EQ(t.states[i][p], decode::TokenState::Stable) << p;
                EXPECT_EQ(t.canvas[i][p], t.canvas[i - 1][p]) << p;
            }
        }
    }
    for (size_t p = prompt_len; p < t.states.back().size(); ++p) {
        EXPECT_EQ(t.states.back()[p], decode::TokenState::Stable) << p;
        EXPECT_NE(t.canvas.back()[p], ids.mask) << p;
    }
}

}  // namespace

// With a margin no token can reach, no floor and immediate stability, revision only adds checks:
// the tokens, the forwards and the dense rows are the policy's own.
TEST(Revision, UnreachableMarginAndImmediateStabilityIsThePolicyWithoutRevision) {
    Tiny tiny;
    for (const char* policy : {"dual-cache", "threshold", "mbsd"}) {
        for (const char* text : kPrompts) {
            SCOPED_TRACE(std::string(policy) + " " + text);
            auto opt = tiny.opt;
            opt.threshold = 0.6;
            if (std::string(policy) == "mbsd") opt.lookahead = 8;
            auto rev = revising(opt);
            rev.revise.margin = 2.0;
            rev.revise.floor = 0.0;
            rev.revise.stable_k = 0;
            const auto prompt = tiny.prompt(text);
            const Trace a = run(*tiny.lm.model, policy, opt, tiny.lm.ids, prompt);
            const Trace b = run(*tiny.lm.model, policy, rev, tiny.lm.ids, prompt);
            EXPECT_EQ(a.result.canvas, b.result.canvas);
            EXPECT_EQ(a.result.stats.forwards, b.result.stats.forwards);
            EXPECT_EQ(a.result.stats.rows, b.result.stats.rows);
            EXPECT_EQ(b.result.revision.revisions + b.result.revision.remasks, 0);
            EXPECT_EQ(b.result.revision.lane_only_steps, 0);
        }
    }
}

// At a low threshold the checks revise tokens (both variants), and stable tokens never change.
TEST(Revision, RevisesAtALowThresholdAndStableTokensNeverChange) {
    Tiny tiny;
    for (auto mode : {decode::ReviseMode::Replace, decode::ReviseMode::Remask}) {
        int64_t revised = 0, checks = 0;
        for (const char* policy : {"dual-cache", "mbsd"}) {
            for (const std::string& text : hard_prompts(3)) {
                SCOPED_TRACE(std::string(policy) + " " + text);
                auto opt = revising(tiny.opt);
                opt.threshold = 0.3;
                opt.revise.mode = mode;
                if (std::string(policy) == "mbsd") opt.lookahead = 8;
                const auto prompt = tiny.prompt(text);
                const Trace t = run(*tiny.lm.model, policy, opt, tiny.lm.ids, prompt);
                expect_revision_invariants(t, static_cast<int>(prompt.size()), tiny.lm.ids);
                const auto& rv = t.result.revision;
                revised += rv.revisions + rv.remasks;
                checks += rv.checks;
                EXPECT_EQ(rv.right_to_wrong + rv.wrong_to_right + rv.wrong_to_wrong, rv.revisions);
                EXPECT_EQ(rv.remasks_of_right + rv.remasks_of_wrong, rv.remasks);
                if (mode == decode::ReviseMode::Replace) {
                    EXPECT_EQ(rv.remasks, 0);
                }
                int64_t per_step = 0;
                for (const auto& s : t.steps)
                    per_step += s.revised + s.remasked;
                EXPECT_EQ(per_step, rv.revisions + rv.remasks);
            }
        }
        EXPECT_GT(checks, 0);
        EXPECT_GT(revised, 0) << "no check revised anything at threshold 0.3";
    }
}

// The two paths run concurrently, against the cache of the previous step, and merge by a fixed
// rule: the result is the same as the same work done serially on one thread, at 1 and 2 threads
// of either pool.
TEST(Revision, ConcurrentPathsGiveTheSerialResult) {
    Tiny tiny;
    for (const char* policy : {"threshold", "dual-cache", "mbsd"}) {
        for (const char* text : {kPrompts[0], kPrompts[4]}) {
            SCOPED_TRACE(std::string(policy) + " " + text);
            auto opt = revising(tiny.opt);
            opt.threshold = 0.4;
            if (std::string(policy) == "mbsd") opt.lookahead = 8;
            opt.revise.serial = true;
            const auto prompt = tiny.prompt(text);
            const Trace serial = run(*tiny.lm.model, policy, opt, tiny.lm.ids, prompt, nullptr, 1);
            for (int dense_threads : {1, 2}) {
                for (int lane_threads : {1, 2}) {
                    auto c = opt;
                    c.revise.serial = false;
                    c.revise.threads = lane_threads;
                    const Trace t =
                        run(*tiny.lm.model, policy, c, tiny.lm.ids, prompt, nullptr, dense_threads);
                    EXPECT_EQ(t.result.canvas, serial.result.canvas);
                    ASSERT_EQ(t.steps.size(), serial.steps.size());
                    for (size_t i = 0; i < t.steps.size(); ++i) {
                        EXPECT_EQ(t.steps[i].revised, serial.steps[i].revised) << i;
                        EXPECT_EQ(t.steps[i].checks, serial.steps[i].checks) << i;
                        EXPECT_EQ(t.canvas[i], serial.canvas[i]) << i;
                    }
                }
            }
        }
    }
}

TEST(Revision, ImpossibleOptionsAreRejectedByName) {
    auto expect_error = [](const std::string& policy, decode::GenerateOptions opt,
                           const std::string& part) {
        try {
            decode::configure_diffusion(policy, opt);
            ADD_FAILURE() << "accepted: " << part;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
        }
    };
    decode::GenerateOptions o;
    o.revise.on = true;
    expect_error("vanilla", o, "vanilla");
    auto c = o;
    c.cfg = 1.0;
    expect_error("dual-cache", c, "--cfg");
    c = o;
    c.revise.margin = 0.0;
    expect_error("dual-cache", c, "--revise-margin");
    c = o;
    c.revise.budget = 0;
    expect_error("mbsd", c, "--stable-budget");
    c = o;
    c.revise.threads = 0;
    expect_error("threshold", c, "--revise-threads");
}

// --revise-rows N caps the CPU path's rows per step (the refreshes, then the leftmost visible
// tokens, at least one check); auto needs projected lane costs and says so on a plain CPU.
TEST(Revision, RowBudgetCapsTheCpuPath) {
    Tiny tiny;
    for (const std::string& text : hard_prompts(2)) {
        SCOPED_TRACE(text);
        auto opt = revising(tiny.opt);
        opt.threshold = 0.3;
        opt.revise.rows = 3;
        const auto prompt = tiny.prompt(text);
        const Trace t = run(*tiny.lm.model, "dual-cache", opt, tiny.lm.ids, prompt);
        expect_revision_invariants(t, static_cast<int>(prompt.size()), tiny.lm.ids);
        for (size_t i = 0; i < t.steps.size(); ++i) {
            const auto& s = t.steps[i];
            if (!s.dense) continue;  // steps of the CPU path alone take every visible token
            EXPECT_LE(s.checks + s.refreshes, std::max(3, s.refreshes + 1)) << "step " << i;
            const int visible = i == 0 ? 0 : t.steps[i - 1].n_visible;
            EXPECT_EQ(s.checks, std::min(visible, std::max(1, 3 - s.refreshes))) << "step " << i;
        }
    }
    auto opt = revising(tiny.opt);
    opt.revise.rows = -1;
    try {
        run(*tiny.lm.model, "dual-cache", opt, tiny.lm.ids, tiny.prompt(kPrompts[0]));
        ADD_FAILURE() << "--revise-rows auto was accepted on an unprojected cpu";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--revise-rows auto"), std::string::npos) << e.what();
    }
}

// --revise-tail dense: after the last block the checks run as forwards of the dense device
// instead of the CPU path. The same rows against the same cache give the same tokens and the
// same decisions; each step past the last block is then a forward.
TEST(Revision, ChecksOnTheDenseDeviceAfterTheLastBlockGiveTheCpuPathsResult) {
    Tiny tiny;
    int64_t tail_steps = 0;
    for (const char* policy : {"dual-cache", "mbsd"}) {
        for (const std::string& text : hard_prompts(2)) {
            SCOPED_TRACE(std::string(policy) + " " + text);
            auto opt = revising(tiny.opt);
            opt.threshold = 0.3;
            if (std::string(policy) == "mbsd") opt.lookahead = 8;
            const auto prompt = tiny.prompt(text);
            const Trace cpu = run(*tiny.lm.model, policy, opt, tiny.lm.ids, prompt);
            opt.revise.tail_dense = true;
            const Trace dense = run(*tiny.lm.model, policy, opt, tiny.lm.ids, prompt);
            expect_revision_invariants(dense, static_cast<int>(prompt.size()), tiny.lm.ids);
            EXPECT_EQ(dense.result.canvas, cpu.result.canvas);
            ASSERT_EQ(dense.steps.size(), cpu.steps.size());
            for (size_t i = 0; i < dense.steps.size(); ++i) {
                EXPECT_EQ(dense.steps[i].checks, cpu.steps[i].checks) << i;
                EXPECT_EQ(dense.steps[i].revised, cpu.steps[i].revised) << i;
                EXPECT_EQ(dense.steps[i].dense, cpu.steps[i].dense) << i;
            }
            const auto& rv = dense.result.revision;
            EXPECT_EQ(rv.lane_only_steps, cpu.result.revision.lane_only_steps);
            EXPECT_EQ(dense.result.stats.forwards, cpu.result.stats.forwards + rv.lane_only_steps);
            tail_steps += rv.lane_only_steps;
        }
    }
    EXPECT_GT(tail_steps, 0) << "no generation had checks left after its last block";
}

TEST(Revision, ChecksOnTheDenseDeviceNeedItsScratchSlots) {
    Tiny tiny;
    auto opt = revising(tiny.opt);
    opt.revise.tail_dense = true;
    const auto cfg = decode::configure_diffusion("dual-cache", opt);
    decode::Generator g(*tiny.lm.model, opt, tiny.lm.ids, cfg, tiny.prompt(kPrompts[0]));
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    const int L = g.canvas_len();
    model::Session s(*tiny.lm.model, *dev, 1, L, L, L, opt.kernels);
    decode::Scheduler sched(s);
    try {
        sched.add(g);
        ADD_FAILURE() << "a session without scratch slots was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--revise-tail dense needs a session of twice"),
                  std::string::npos)
            << e.what();
    }
}
