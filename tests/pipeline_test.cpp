// Pipelined blocks (decode/pipeline.h, `--policy pipeline`): ahead commits and their checks in
// each mode. Mask mode (one block ahead, checked by feeding the mask in its block's first
// forward): every ahead commit is resolved exactly once, at its block's first step. Window mode:
// every ahead commit is resolved at the next step, one row a check. Shadow mode
// (several blocks ahead, checked by shadow rows): verdicts keep the longest passing prefix, in
// block order, several blocks per forward; the cache's committed slots stay exact in both;
// --pipeline-start 1 is need; the long model takes fewer forwards than need; a trace replays
// step for step on another model.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "decode/generator.h"
#include "tests/step_trace.h"
#include "util/error.h"

using namespace llada;
using namespace llada::steptest;

namespace {

// The mode the tests of one block ahead run: the options --pipeline-verify mask was tuned with.
decode::GenerateOptions mask_mode(decode::GenerateOptions o) {
    o.pipeline_verify = decode::PipelineVerify::Mask;
    o.pipeline_depth = 1;
    o.pipeline_threshold = 0.7;
    o.pipeline_accept = 0.1;
    o.pipeline_min = 1;
    return o;
}

// Mask mode's invariants (one block ahead): commits lie in the step's block or the next one; a
// position committed ahead of its block is resolved (kept or masked again) exactly once, at the
// first step of its block, and a block is never left with such a position unresolved (the early
// stop may fill it instead).
void expect_mask_invariants(const Trace& t, int P, int block, const decode::TokenIds& ids) {
    std::map<int32_t, int32_t> ahead;  // unresolved ahead commits: position -> token
    int64_t committed = 0, verified = 0, rejected = 0;
    int last_block = 0;
    for (size_t i = 0; i < t.steps.size(); ++i) {
        SCOPED_TRACE("step " + std::to_string(i));
        const auto& st = t.steps[i];
        EXPECT_GE(st.block, last_block);
        const int b0 = P + st.block * block, b1 = b0 + block;
        // Resolutions: the ahead commits of this block, at the block's first step.
        int resolved = 0;
        for (auto it = ahead.begin(); it != ahead.end();) {
            if (it->first >= b1) {
                ++it;
                continue;
            }
            EXPECT_GE(it->first, b0) << "an earlier block ended with an unresolved position";
            EXPECT_EQ(st.step_in_block, 0);
            const bool kept =
                t.canvas[i][it->first] == it->second && committed_state(t.states[i][it->first]);
            const bool recommitted = std::find(t.committed[i].begin(), t.committed[i].end(),
                                               it->first) != t.committed[i].end();
            // Masked again, unless the commit rule took its new prediction in the same step.
            if (!kept || recommitted) {
                EXPECT_TRUE(t.states[i][it->first] == decode::TokenState::Masked || recommitted);
            }
            ++resolved;
            it = ahead.erase(it);
        }
        EXPECT_EQ(resolved, st.ahead_verified + st.ahead_rejected);
        int n_ahead = 0;
        for (int32_t p : t.committed[i]) {
            EXPECT_GE(p, b0);
            EXPECT_LT(p, b1 + block);
            EXPECT_NE(t.canvas[i][p], ids.mask);
            if (p >= b1) {
                ahead[p] = t.canvas[i][p];
                ++n_ahead;
            }
        }
        EXPECT_EQ(n_ahead, st.ahead_committed);
        committed += st.ahead_committed;
        verified += st.ahead_verified;
        rejected += st.ahead_rejected;
        last_block = st.block;
    }
    // Left unresolved only when the answer ended first: the stop filled them with end-of-text.
    for (const auto& [p, tok] : ahead) {
        EXPECT_TRUE(t.result.stopped_early) << p;
        EXPECT_EQ(t.states.back()[p], decode::TokenState::Stable) << p;
    }
    EXPECT_EQ(committed, verified + rejected + static_cast<int64_t>(ahead.size()));
    EXPECT_EQ(committed, t.result.ahead_committed);
}

// Shadow mode's invariants. Each step: new ahead commits lie in blocks after the step's block,
// at most --pipeline-depth of them; the ahead commits resolved at the step (no longer ahead)
// are counted as verified + rejected, at most one is rejected, and every kept one lies before
// it (the longest passing prefix); every block before a resolved position is then complete
// (committed, nothing ahead). At the end nothing is ahead (or the stop filled it).
void expect_shadow_invariants(const Trace& t, int P, int block, int depth,
                              const decode::TokenIds& ids) {
    const int L = static_cast<int>(t.canvas.front().size());
    std::vector<bool> was(L, false);
    std::vector<int32_t> tok(L, -1);
    int64_t committed = 0, verified = 0, rejected = 0;
    for (size_t i = 0; i < t.steps.size(); ++i) {
        SCOPED_TRACE("step " + std::to_string(i));
        const auto& st = t.steps[i];
        const int b1 = P + (st.block + 1) * block;
        int kept = 0, lost = 0, first_lost = L, last_kept = -1;
        for (int p = P; p < L; ++p) {
            if (!was[p] || t.ahead[i][p]) continue;
            const bool same = t.canvas[i][p] == tok[p] && committed_state(t.states[i][p]);
            const bool recommitted =
                std::find(t.committed[i].begin(), t.committed[i].end(), p) != t.committed[i].end();
            if (same && !recommitted) {
                ++kept;
                last_kept = std::max(last_kept, p);
            } else {
                ++lost;
                first_lost = std::min(first_lost, p);
            }
            // Verified in block order: everything before its block is committed, none ahead.
            for (int q = P; q < P + (p - P) / block * block; ++q) {
                EXPECT_TRUE(committed_state(t.states[i][q])) << p << " " << q;
                EXPECT_FALSE(t.ahead[i][q]) << p << " " << q;
            }
        }
        // A position the stop filled is not a verdict.
        if (t.result.stopped_early && i + 1 == t.steps.size()) {
            kept = lost = 0;
            last_kept = -1;
        }
        EXPECT_LE(lost, 1);
        EXPECT_LT(last_kept, first_lost);
        if (!(t.result.stopped_early && i + 1 == t.steps.size())) {
            EXPECT_EQ(kept, st.ahead_verified);
            EXPECT_EQ(lost, st.ahead_rejected);
        }
        int n_ahead = 0;
        for (int p = P; p < L; ++p) {
            if (t.ahead[i][p] && !was[p]) {
                EXPECT_GE(p, b1);
                EXPECT_LT(p, b1 + depth * block);
                EXPECT_NE(t.canvas[i][p], ids.mask);
                ++n_ahead;
            }
            was[p] = t.ahead[i][p];
            tok[p] = t.canvas[i][p];
        }
        EXPECT_EQ(n_ahead, st.ahead_committed);
        committed += st.ahead_committed;
        verified += st.ahead_verified;
        rejected += st.ahead_rejected;
    }
    int left = 0;
    for (int p = P; p < L; ++p) {
        left += was[p];
        if (was[p]) {
            EXPECT_TRUE(t.result.stopped_early) << p;
        }
    }
    EXPECT_EQ(committed, verified + rejected + left);
    EXPECT_EQ(committed, t.result.ahead_committed);
}

// Window mode's invariants: every ahead commit is resolved (kept or masked again) at the very
// next step, whatever its block, and each check is one row (the mask at the position): a step's
// rows are its masked, stale and ahead-checked positions, once each.
void expect_window_invariants(const Trace& t, int P, int block, int depth,
                              const decode::TokenIds& ids) {
    const int L = static_cast<int>(t.canvas.front().size());
    int64_t committed = 0, verified = 0, rejected = 0;
    for (size_t i = 0; i < t.steps.size(); ++i) {
        SCOPED_TRACE("step " + std::to_string(i));
        const auto& st = t.steps[i];
        const int b1 = P + (st.block + 1) * block;
        int kept = 0, lost = 0, n_ahead = 0;
        for (int p = P; p < L; ++p) {
            if (i > 0 && t.ahead[i - 1][p]) {
                EXPECT_FALSE(t.ahead[i][p]) << p << ": not resolved at the next step";
                const bool same = t.canvas[i][p] == t.canvas[i - 1][p];
                const bool recommitted = std::find(t.committed[i].begin(), t.committed[i].end(),
                                                   p) != t.committed[i].end();
                (same && !recommitted ? kept : lost) += 1;
            }
            if (t.ahead[i][p]) {
                EXPECT_GE(p, b1);
                EXPECT_LT(p, b1 + depth * block);
                EXPECT_NE(t.canvas[i][p], ids.mask);
                ++n_ahead;
            }
        }
        EXPECT_EQ(kept, st.ahead_verified);
        EXPECT_EQ(lost, st.ahead_rejected);
        EXPECT_EQ(n_ahead, st.ahead_committed);
        // One row per position at most: no shadow rows beside the tokens.
        EXPECT_LE(st.rows, L);
        committed += st.ahead_committed;
        verified += st.ahead_verified;
        rejected += st.ahead_rejected;
    }
    EXPECT_EQ(committed, verified + rejected);
    EXPECT_EQ(committed, t.result.ahead_committed);
}

// A run with the cache checked after every step (each committed slot holds its token's key),
// which ends with every generated position stable.
Trace checked_run(const Tiny& tiny, const decode::GenerateOptions& opt,
                  const std::vector<int32_t>& prompt) {
    CacheCheck check;
    check.on = true;
    Trace t = run(*tiny.lm.model, "pipeline", opt, tiny.lm.ids, prompt, nullptr, 1, &check);
    EXPECT_GT(check.checked, 0);
    for (size_t p = prompt.size(); p < t.states.back().size(); ++p)
        EXPECT_EQ(t.states.back()[p], decode::TokenState::Stable) << p;
    return t;
}

}  // namespace

// --pipeline-start 1: no later block ever starts early, so the policy is need with the same
// commit rule, step for step, in both modes.
TEST(Pipeline, StartOneIsNeed) {
    Tiny tiny;
    for (const bool shadow : {false, true}) {
        for (const char* text : kPrompts) {
            SCOPED_TRACE(text);
            auto opt = shadow ? tiny.opt : mask_mode(tiny.opt);
            opt.pipeline_start = 1.0;
            const auto prompt = tiny.prompt(text);
            const Trace a = run(*tiny.lm.model, "pipeline", opt, tiny.lm.ids, prompt);
            const Trace b = run(*tiny.lm.model, "need", tiny.opt, tiny.lm.ids, prompt);
            expect_same_steps(a, b);
            EXPECT_EQ(a.result.ahead_committed, 0);
        }
    }
}

// Mask mode on the trained model: commits ahead, verifies them at their block's first step,
// keeps the cache's committed slots exact, and ends with everything stable.
TEST(Pipeline, MaskModeVerifiesAtTheBlocksFirstStepAndKeepsTheCacheExact) {
    Tiny tiny;
    int64_t ahead = 0;
    for (const char* text : kPrompts) {
        SCOPED_TRACE(text);
        auto opt = mask_mode(tiny.opt);
        opt.early_stop = 0;
        const auto prompt = tiny.prompt(text);
        const Trace t = checked_run(tiny, opt, prompt);
        expect_mask_invariants(t, static_cast<int>(prompt.size()), opt.block, tiny.lm.ids);
        ahead += t.result.ahead_committed;
    }
    EXPECT_GT(ahead, 0);
}

// Mask mode's verification has teeth: at --pipeline-accept 1 (and with every next-block
// prediction forced in) most ahead commits are masked again, and the invariants still hold.
TEST(Pipeline, MaskModeRejectedAheadCommitsReturnToMasked) {
    Tiny tiny;
    auto opt = mask_mode(tiny.opt);
    opt.pipeline_accept = 1.0;
    opt.pipeline_min = 8;
    const auto prompt = tiny.prompt("sort 75 71 54 77 85 25:");
    const Trace t = run(*tiny.lm.model, "pipeline", opt, tiny.lm.ids, prompt);
    expect_mask_invariants(t, static_cast<int>(prompt.size()), opt.block, tiny.lm.ids);
    EXPECT_GT(t.result.ahead_rejected, 0);
}

// Shadow mode (the default) on the trained model: several blocks ahead, verdicts in block order
// keeping the longest passing prefix, the cache's committed slots exact (a check row writes
// nothing), everything stable at the end.
TEST(Pipeline, ShadowChecksKeepThePassingPrefixInBlockOrderAndTheCacheExact) {
    Tiny tiny;
    int64_t ahead = 0, verified = 0;
    for (const char* text : kPrompts) {
        SCOPED_TRACE(text);
        auto opt = tiny.opt;
        opt.early_stop = 0;
        ASSERT_EQ(opt.pipeline_verify, decode::PipelineVerify::Shadow);
        const auto prompt = tiny.prompt(text);
        const Trace t = checked_run(tiny, opt, prompt);
        expect_shadow_invariants(t, static_cast<int>(prompt.size()), opt.block, opt.pipeline_depth,
                                 tiny.lm.ids);
        ahead += t.result.ahead_committed;
        verified += t.result.ahead_verified;
    }
    EXPECT_GT(verified, 0);
    EXPECT_GT(ahead, 0);
}

// Window mode on the trained model: ahead commits in every later block, each checked by the
// next forward fed the mask there (kept or masked again then), the cache's committed slots exact;
// with failing checks too (--pipeline-accept 1), and the generation still ends.
TEST(Pipeline, WindowChecksResolveEveryAheadCommitAtTheNextStep) {
    Tiny tiny;
    int64_t ahead = 0, verified = 0, rejected = 0;
    for (const double accept : {0.5, 1.0}) {
        for (const char* text : kPrompts) {
            SCOPED_TRACE(text);
            auto opt = tiny.opt;
            opt.early_stop = 0;
            opt.pipeline_verify = decode::PipelineVerify::Window;
            opt.pipeline_accept = accept;
            opt.pipeline_min = accept == 1.0 ? 8 : 0;
            const auto prompt = tiny.prompt(text);
            const Trace t = checked_run(tiny, opt, prompt);
            expect_window_invariants(t, static_cast<int>(prompt.size()), opt.block,
                                     opt.pipeline_depth, tiny.lm.ids);
            ahead += t.result.ahead_committed;
            verified += t.result.ahead_verified;
            rejected += t.result.ahead_rejected;
        }
    }
    EXPECT_GT(verified, 0);
    EXPECT_GT(rejected, 0);
    EXPECT_GT(ahead, verified);
}

// Shadow mode's checks have teeth: at --pipeline-accept 1 (a check passes only at probability
// 1 in float32) most checks fail, each step rejects the first failing one and defers the rest;
// the invariants hold and the generation still ends.
TEST(Pipeline, ShadowModeRejectsOneCheckAtATimeWhenChecksFail) {
    Tiny tiny;
    auto opt = tiny.opt;
    opt.pipeline_accept = 1.0;
    opt.pipeline_min = 8;
    opt.early_stop = 0;
    const auto prompt = tiny.prompt("sort 75 71 54 77 85 25:");
    const Trace t = run(*tiny.lm.model, "pipeline", opt, tiny.lm.ids, prompt);
    expect_shadow_invariants(t, static_cast<int>(prompt.size()), opt.block, opt.pipeline_depth,
                             tiny.lm.ids);
    EXPECT_GT(t.result.ahead_rejected, 0);
}

// On the long model (128 tokens in blocks of 32) shadow mode finishes several blocks in one
// forward: fewer forwards than mask mode, which takes fewer than need with the same commit rule.
TEST(Pipeline, SavesForwardsOnTheLongModel) {
    auto lm = tools::load_model(shipped("tiny-llada-l.gguf"));
    decode::GenerateOptions opt;
    opt.gen = 128;
    opt.block = 32;
    opt.steps = 128;
    opt.threshold = 0.9;
    int64_t nfe_shadow = 0, nfe_mask = 0, nfe_need = 0;
    int multi = 0;  // steps that finished two blocks or more
    for (const char* text : {"0167070901+0000571880=", "7192012317-5895372851=",
                             "0676959035-0058250369=", "4831920375+0960388214="}) {
        SCOPED_TRACE(text);
        const auto prompt = lm.tok->encode(text, lm.tok->add_bos_default(), false);
        const Trace s = run(*lm.model, "pipeline", opt, lm.ids, prompt);
        const Trace m = run(*lm.model, "pipeline", mask_mode(opt), lm.ids, prompt);
        const Trace n = run(*lm.model, "need", opt, lm.ids, prompt);
        const int P = static_cast<int>(prompt.size());
        expect_shadow_invariants(s, P, opt.block, opt.pipeline_depth, lm.ids);
        expect_mask_invariants(m, P, opt.block, lm.ids);
        // Blocks over after step i: the next step's block (all four after the last step).
        for (size_t i = 0; i < s.steps.size(); ++i) {
            const int over = i + 1 < s.steps.size() ? s.steps[i + 1].block : opt.gen / opt.block;
            multi += over - s.steps[i].block >= 2;
        }
        nfe_shadow += s.result.stats.forwards;
        nfe_mask += m.result.stats.forwards;
        nfe_need += n.result.stats.forwards;
    }
    EXPECT_GT(multi, 0);
    EXPECT_LT(nfe_shadow, nfe_mask);
    EXPECT_LT(nfe_mask, nfe_need);
}

TEST(Pipeline, ImpossibleOptionsAreRejectedByName) {
    auto expect_error = [](decode::GenerateOptions o, const std::string& want) {
        std::string err;
        try {
            decode::configure_diffusion("pipeline", o);
        } catch (const Error& e) {
            err = e.what();
        }
        EXPECT_NE(err.find(want), std::string::npos) << err;
    };
    decode::GenerateOptions o;
    o.pipeline_start = 1.5;
    expect_error(o, "--pipeline-start must be a share of the block in [0, 1]");
    o.pipeline_start = 0.0;
    o.pipeline_accept = 0.0;
    expect_error(o, "--pipeline-accept must be in (0, 1]");
    o.pipeline_accept = 0.1;
    o.pipeline_threshold = 0.0;
    expect_error(o, "--pipeline-threshold must be in (0, 1]");
    o.pipeline_threshold = 0.7;
    o.pipeline_min = -1;
    expect_error(o, "--pipeline-min must be >= 0");
    o.pipeline_min = 1;
    o.pipeline_depth = 0;
    expect_error(o, "--pipeline-depth must be >= 1");
    o.pipeline_depth = 1;
    o.revise.on = true;
    expect_error(o, "--revise cannot be combined with --policy pipeline");
}

// A pipeline trace replayed on another model (tiny-llada-l, which would decide differently)
// repeats the traced run step for step: the same windows, commits and per-block ahead counts,
// checks that fail included (forced ahead commits checked at the threshold). The trace goes
// through its JSON form.
TEST(Pipeline, ReplayRepeatsATracesStepsOnAnotherModel) {
    Tiny tiny;
    auto other = tools::load_model(shipped("tiny-llada-l.gguf"));
    int64_t rejected = 0;
    for (const auto verify : {decode::PipelineVerify::Shadow, decode::PipelineVerify::Window}) {
        for (const double accept : {0.5, 0.9}) {
            for (const char* text : kPrompts) {
                SCOPED_TRACE(std::string(text) + " accept " + std::to_string(accept) + " " +
                             decode::pipeline_verify_name(verify));
                auto opt = tiny.opt;
                opt.early_stop = 0;
                opt.pipeline_verify = verify;
                opt.pipeline_accept = accept;
                opt.pipeline_min = accept == 0.9 ? 8 : 0;
                const Trace t =
                    run(*tiny.lm.model, "pipeline", opt, tiny.lm.ids, tiny.prompt(text));
                const decode::DecisionTrace trace =
                    tools::trace_from_json(tools::trace_json(t.result, opt, "tiny", "pipeline"));
                ASSERT_EQ(trace.pipeline.depth, opt.pipeline_depth);
                auto ropt = tiny.opt;
                ropt.early_stop = 0;
                ropt.pipeline_verify = verify;
                ropt.replay = &trace;
                const auto prompt = other.tok->encode(text, other.tok->add_bos_default(), false);
                const Trace r = run(*other.model, "pipeline", ropt, other.ids, prompt);
                ASSERT_EQ(r.steps.size(), t.steps.size());
                for (size_t i = 0; i < t.steps.size(); ++i) {
                    SCOPED_TRACE("step " + std::to_string(i));
                    const auto &a = t.steps[i], &b = r.steps[i];
                    EXPECT_EQ(b.block, a.block);
                    EXPECT_EQ(b.committed, a.committed);
                    EXPECT_EQ(b.rows, a.rows);
                    ASSERT_EQ(b.ahead.size(), a.ahead.size());
                    int checks = 0;
                    for (size_t d = 0; d < a.ahead.size(); ++d) {
                        EXPECT_EQ(b.ahead[d].committed, a.ahead[d].committed) << d;
                        EXPECT_EQ(b.ahead[d].kept, a.ahead[d].kept) << d;
                        EXPECT_EQ(b.ahead[d].rejected, a.ahead[d].rejected) << d;
                        checks += a.ahead[d].kept + a.ahead[d].rejected;
                    }
                    EXPECT_EQ(a.ahead_verified + a.ahead_rejected, checks);
                }
                EXPECT_EQ(r.result.stats.forwards, t.result.stats.forwards);
                EXPECT_EQ(r.result.ahead_committed, t.result.ahead_committed);
                rejected += t.result.ahead_rejected;
            }
        }
    }
    EXPECT_GT(rejected, 0);  // failing checks (and the ones they defer) were replayed too
}

// A replay fits the trace's policy, shape and pipeline options, or says which does not.
TEST(Pipeline, ReplayRefusesATraceItCannotRepeat) {
    Tiny tiny;
    auto opt = tiny.opt;
    opt.early_stop = 0;
    const auto prompt = tiny.prompt("6238+0032=");
    const Trace t = run(*tiny.lm.model, "pipeline", opt, tiny.lm.ids, prompt);
    const decode::DecisionTrace pipe =
        tools::trace_from_json(tools::trace_json(t.result, opt, "tiny", "pipeline"));
    const Trace n = run(*tiny.lm.model, "need", opt, tiny.lm.ids, prompt);
    const decode::DecisionTrace need =
        tools::trace_from_json(tools::trace_json(n.result, opt, "tiny", "need"));
    auto expect_error = [&](const std::string& policy, decode::GenerateOptions o,
                            const decode::DecisionTrace& tr, const std::string& want) {
        o.replay = &tr;
        std::string err;
        try {
            const auto cfg = decode::configure_diffusion(policy, o);
            decode::Generator g(*tiny.lm.model, o, tiny.lm.ids, cfg, prompt);
        } catch (const Error& e) {
            err = e.what();
        }
        EXPECT_NE(err.find(want), std::string::npos) << err;
    };
    expect_error("pipeline", opt, need, "--policy pipeline replays a pipeline trace");
    expect_error("need", opt, pipe, "a pipeline trace replays only under --policy pipeline");
    auto o = opt;
    o.gen = 64;
    expect_error("pipeline", o, pipe,
                 "a pipeline trace replays at its own shape (gen 32, block 8)");
    o = opt;
    o.pipeline_depth = 2;
    expect_error("pipeline", o, pipe, "recorded with --pipeline-depth 3 --pipeline-start 0");
    o = opt;
    o.pipeline_verify = decode::PipelineVerify::Window;
    expect_error("pipeline", o, pipe, "--pipeline-verify shadow; the replay must use the same");
    // A step's ahead counts that do not add up to its blocks are refused when read.
    auto j = tools::trace_json(t.result, opt, "tiny", "pipeline");
    for (auto& st : j["steps"]) {
        if (st[13].size() > 1 && st[13][1][0].get<int>() > 0) {
            st[13][1][0] = st[13][1][0].get<int>() + 1;
            break;
        }
    }
    std::string err;
    try {
        tools::trace_from_json(j);
    } catch (const Error& e) {
        err = e.what();
    }
    EXPECT_NE(err.find("decision trace"), std::string::npos) << err;
}
