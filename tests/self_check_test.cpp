// Self-checks (`--self-check`, decode/policy.h): the rows that recompute a committed token's K/V
// also predict it, and a prediction of another token at --self-check-accept replaces the token.
// The rule alone; a replay that replaces tokens (the checks cost no forward row, a replaced
// token is refreshed and checked again in the next forward, the cache ends holding its K/V);
// the lower threshold of the checked blocks; the trace records the checks; the options a run
// cannot honour.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "decode/decisions.h"
#include "tests/step_trace.h"
#include "util/error.h"

using namespace llada;
using namespace llada::steptest;

namespace {

// The long model's setting: 96 tokens in blocks of 32 (three blocks, so a replaced token of the
// first block is refreshed by the third block's first forward).
struct Long {
    tools::LoadedModel lm;
    decode::GenerateOptions opt;
    Long() : lm(tools::load_model(shipped("tiny-llada-lc.gguf"))) {
        opt.gen = 96;
        opt.block = 32;
        opt.steps = 96;
        opt.threshold = 0.9;
        opt.early_stop = 0;
        opt.self_check.on = true;
    }
    std::vector<int32_t> prompt(const std::string& text) const {
        return lm.tok->encode(text, lm.tok->add_bos_default(), false);
    }
};

std::string error_of(const std::string& policy, const decode::GenerateOptions& o) {
    try {
        decode::configure_diffusion(policy, o);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

// The model's verdict: another token than the committed one, not the mask, at the bar.
TEST(SelfCheck, TheRuleReplacesOnlyAnotherTokenAtTheBar) {
    auto src = decode::make_model_decisions(false, false, 8, 8);
    const std::vector<int32_t> pos = {10, 11, 12, 13, 14};
    const std::vector<int32_t> tok = {5, 5, 5, 5, 5};
    std::vector<decode::Candidate> cand = {
        {6, 0.80f},  // another token above the bar: replaced
        {6, 0.74f},  // below it: kept
        {5, 0.99f},  // the same token: kept
        {9, 0.99f},  // the mask id (9 here): never a replacement
        {7, 0.75f},  // at the bar: replaced
    };
    std::vector<int> replace;
    src->judge_self_checks(pos, tok, cand, 0.75, 9, replace);
    EXPECT_EQ(replace, (std::vector<int>{0, 4}));
}

// A hand-written trace replayed with self-checks: block 0 commits in one forward, block 1's
// first forward checks block 0's 32 tokens (its K/V refresh rows) and replaces two, block 2's
// first forward refreshes block 1 and the two replaced tokens again and checks all 34. Checks
// add LM-head rows only; the replaced tokens are the leftmost checks, each given another
// token; the cache ends with the new tokens' K/V.
TEST(SelfCheck, AReplacedTokenIsRefreshedAndCheckedInTheNextForward) {
    Long l;
    decode::DecisionTrace trace;
    trace.policy = "need";
    trace.gen = 96;
    trace.block = 32;
    trace.parallel = true;
    trace.self_check = true;
    trace.self_check_threshold = 0.9;
    for (int b = 0; b < 3; ++b) {
        decode::TraceStep s;
        s.block = b;
        s.committed = 32;
        s.checks = b == 0 ? 0 : b == 1 ? 32 : 34;
        s.revised = b == 1 ? 2 : 0;
        trace.steps.push_back(s);
    }
    auto opt = l.opt;
    opt.replay = &trace;
    // The rows below are the once rule's (no suffix refresh at block starts: the row counts
    // then hold only the refreshes and the checks).
    opt.need_refresh = decode::NeedRefresh::Once;
    const auto prompt = l.prompt("0167070901+0000571880=");
    const int P = static_cast<int>(prompt.size());
    CacheCheck cache;
    cache.on = true;
    const Trace t = run(*l.lm.model, "need", opt, l.lm.ids, prompt, nullptr, 1, &cache);
    ASSERT_EQ(t.steps.size(), 3u);
    EXPECT_EQ(t.steps[0].rows, P + 96);  // the first forward: the whole canvas
    EXPECT_EQ(t.steps[0].checks, 0);
    EXPECT_EQ(t.steps[1].rows, 64);  // block 0's refreshes and block 1
    EXPECT_EQ(t.steps[1].lm_head_rows, 64);
    EXPECT_EQ(t.steps[1].checks, 32);
    EXPECT_EQ(t.steps[1].revised, 2);
    EXPECT_EQ(t.steps[2].rows, 66);  // block 1's refreshes, the two replaced tokens, block 2
    EXPECT_EQ(t.steps[2].lm_head_rows, 66);
    EXPECT_EQ(t.steps[2].checks, 34);
    EXPECT_EQ(t.steps[2].revised, 0);
    ASSERT_EQ(t.result.revision_events.size(), 2u);
    for (int i = 0; i < 2; ++i) {
        const decode::RevisionEvent& e = t.result.revision_events[static_cast<size_t>(i)];
        EXPECT_EQ(e.pos, P + i);
        EXPECT_EQ(e.step, 1);
        EXPECT_EQ(e.from, t.canvas[0][static_cast<size_t>(P + i)]);
        EXPECT_NE(e.to, e.from);
        EXPECT_NE(e.to, l.lm.ids.mask);
        EXPECT_EQ(t.result.canvas[static_cast<size_t>(P + i)], e.to);
        EXPECT_EQ(t.kv_token[static_cast<size_t>(P + i)], e.to);
    }
    EXPECT_EQ(t.result.revision.checks, 66);
    EXPECT_EQ(t.result.revision.revisions, 2);
    EXPECT_EQ(t.result.stats.forwards, 3);
    EXPECT_GT(cache.checked, 0);
    // A replay takes --self-check exactly when its trace was recorded with it.
    auto plain = opt;
    plain.self_check.on = false;
    EXPECT_THROW(run(*l.lm.model, "need", plain, l.lm.ids, prompt), Error);
    decode::DecisionTrace without = trace;
    without.self_check = false;
    opt.replay = &without;
    EXPECT_THROW(run(*l.lm.model, "need", opt, l.lm.ids, prompt), Error);
}

// The checked blocks commit at --self-check-threshold, the last at --threshold: the first
// forward commits what need at the lower bar commits, and without the option what need at
// --threshold commits. A generation records its checks in its trace, and without a
// replacement its steps compute need's rows.
TEST(SelfCheck, CheckedBlocksCommitAtTheLowerBarAndTheTraceRecordsTheChecks) {
    Long l;
    const auto prompt = l.prompt("0676959035-0058250369=");
    auto low = l.opt;
    low.self_check.threshold = 0.3;
    auto need_low = l.opt;
    need_low.self_check.on = false;
    need_low.threshold = 0.3;
    auto need_high = l.opt;
    need_high.self_check.on = false;
    const Trace a = run(*l.lm.model, "need", low, l.lm.ids, prompt);
    const Trace b = run(*l.lm.model, "need", need_low, l.lm.ids, prompt);
    const Trace c = run(*l.lm.model, "need", l.opt, l.lm.ids, prompt);
    const Trace d = run(*l.lm.model, "need", need_high, l.lm.ids, prompt);
    EXPECT_EQ(a.committed[0], b.committed[0]);
    EXPECT_EQ(c.committed[0], d.committed[0]);
    // The same first forward: the lower bar commits every position the higher one does.
    EXPECT_TRUE(std::includes(a.committed[0].begin(), a.committed[0].end(), c.committed[0].begin(),
                              c.committed[0].end()));
    int64_t checks = 0;
    for (const auto& [t, o] : {std::pair{&a, &low}, std::pair{&c, &l.opt}}) {
        const decode::DecisionTrace tr =
            tools::trace_from_json(tools::trace_json(t->result, *o, "tiny", "need"));
        EXPECT_TRUE(tr.self_check);
        EXPECT_DOUBLE_EQ(tr.self_check_threshold, t == &a ? 0.3 : 0.9);
        ASSERT_EQ(tr.steps.size(), t->steps.size());
        for (size_t i = 0; i < tr.steps.size(); ++i) {
            EXPECT_EQ(tr.steps[i].checks, t->steps[i].checks);
            EXPECT_EQ(tr.steps[i].revised, t->steps[i].revised);
            checks += t->steps[i].checks;
        }
    }
    EXPECT_GT(checks, 0);
    // --self-check-below 1: every refreshed token is due a check (after the first forward, the
    // committed rows of a step are its refreshes); a bar nothing is committed below: none is.
    auto all = low;
    all.self_check.below = 1.0;
    const Trace e = run(*l.lm.model, "need", all, l.lm.ids, prompt);
    for (size_t i = 1; i < e.steps.size(); ++i)
        EXPECT_EQ(e.steps[i].checks, e.steps[i].rows_committed) << i;
    auto none = low;
    none.self_check.below = 1e-9;
    const Trace f = run(*l.lm.model, "need", none, l.lm.ids, prompt);
    for (const auto& st : f.steps)
        EXPECT_EQ(st.checks, 0);
    // With no replacement the checks change no decision and no row: c is d step for step.
    if (c.result.revision.revisions == 0) {
        ASSERT_EQ(c.steps.size(), d.steps.size());
        for (size_t i = 0; i < c.steps.size(); ++i) {
            EXPECT_EQ(c.steps[i].rows, d.steps[i].rows);
            EXPECT_EQ(c.steps[i].lm_head_rows, d.steps[i].lm_head_rows + c.steps[i].checks);
        }
        EXPECT_EQ(c.result.canvas, d.result.canvas);
    }
}

// A recorded self-check run replayed on another model repeats it step for step: the same
// commits, checks, replacements, rows and LM-head rows (the trace goes through its JSON form).
// The problems are hard ones, where threshold 0.1 commits wrong tokens that checks replace.
TEST(SelfCheck, AReplayRepeatsATracesChecksOnAnotherModel) {
    Long l;
    auto other = tools::load_model(shipped("tiny-llada-l.gguf"));
    auto opt = l.opt;
    opt.gen = 128;
    opt.steps = 128;
    opt.self_check.threshold = 0.1;
    int64_t revised = 0, checks = 0;
    for (const char* text : {"9081726354+1928374655=", "5000000001-0999999999=",
                             "8888888888+1111111112=", "7070707070-0707070707="}) {
        SCOPED_TRACE(text);
        const Trace t = run(*l.lm.model, "need", opt, l.lm.ids, l.prompt(text));
        const decode::DecisionTrace trace =
            tools::trace_from_json(tools::trace_json(t.result, opt, "tiny", "need"));
        auto ropt = opt;
        ropt.replay = &trace;
        const auto prompt = other.tok->encode(text, other.tok->add_bos_default(), false);
        const Trace r = run(*other.model, "need", ropt, other.ids, prompt);
        ASSERT_EQ(r.steps.size(), t.steps.size());
        for (size_t i = 0; i < t.steps.size(); ++i) {
            SCOPED_TRACE("step " + std::to_string(i));
            EXPECT_EQ(r.steps[i].committed, t.steps[i].committed);
            EXPECT_EQ(r.steps[i].checks, t.steps[i].checks);
            EXPECT_EQ(r.steps[i].revised, t.steps[i].revised);
            EXPECT_EQ(r.steps[i].rows, t.steps[i].rows);
            EXPECT_EQ(r.steps[i].lm_head_rows, t.steps[i].lm_head_rows);
        }
        revised += t.result.revision.revisions;
        checks += t.result.revision.checks;
    }
    EXPECT_GT(checks, 0);
    EXPECT_GT(revised, 0);  // replacements (and the refreshes they add) were replayed too
}

TEST(SelfCheck, OptionsItCannotHonourAreRefusedByName) {
    decode::GenerateOptions o;
    o.self_check.on = true;
    o.threshold = 0.9;
    EXPECT_EQ(error_of("mbsd", o), "");
    EXPECT_EQ(error_of("need", o), "");
    EXPECT_NE(error_of("pipeline", o).find("--self-check applies to --policy need and mbsd"),
              std::string::npos);
    EXPECT_NE(error_of("dual-cache", o).find("--self-check applies to --policy need and mbsd"),
              std::string::npos);
    auto no_tau = o;
    no_tau.threshold = 0.0;
    EXPECT_NE(error_of("need", no_tau).find("give --threshold"), std::string::npos);
    auto rev = o;
    rev.revise.on = true;
    EXPECT_NE(error_of("mbsd", rev).find("--self-check and --revise"), std::string::npos);
    auto cfg = o;
    cfg.cfg = 1.0;
    EXPECT_NE(error_of("mbsd", cfg).find("cannot be combined with --cfg"), std::string::npos);
    auto hot = o;
    hot.temperature = 0.5;
    EXPECT_NE(error_of("mbsd", hot).find("a temperature above 0"), std::string::npos);
    auto acc = o;
    acc.self_check.accept = 0.0;
    EXPECT_NE(error_of("mbsd", acc).find("--self-check-accept must be in (0, 1]"),
              std::string::npos);
    auto below = o;
    below.self_check.below = 0.0;
    EXPECT_NE(error_of("mbsd", below).find("--self-check-below must be in (0, 1]"),
              std::string::npos);
    auto tau = o;
    tau.self_check.threshold = 1.5;
    EXPECT_NE(error_of("mbsd", tau).find("--self-check-threshold must be in (0, 1]"),
              std::string::npos);
}
