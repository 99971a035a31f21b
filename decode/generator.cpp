// The step engine (decode/generator.h): the block-wise diffusion decoder behind `vanilla`,
// `prefix-cache`, `dual-cache`, `threshold`, `need`, `mbsd` and `pipeline`, one step at a time.
// Policies differ in which rows a step computes (the window mode) and how many positions it
// commits (the commit rule).
//
// Each policy's window (which rows a step computes) is planned in decode/windows_fixed.cpp
// (vanilla, prefix-cache, dual-cache, threshold) and decode/windows_need.cpp (need, and mbsd's
// and the pipeline's additions to it), each described there. What the generator adds:
// mbsd         blocks commit strictly left to right: when a block becomes current, its first
//              forward re-predicts every position of it; a draft is accepted (committed) when
//              that re-prediction is the same token with confidence >= --accept, and otherwise
//              returns to masked; the commit rule then runs over the block's masked positions.
// pipeline     a later block decoding beside the current one commits its own positions at
//              --pipeline-threshold (at least --pipeline-min per step). Those commits are real
//              tokens (context for every later row) but count only once a check predicts the same
//              token with confidence >= --pipeline-accept, in block order; else the position is
//              masked again. A block is over only when none of its positions waits for
//              verification.
// Commit rules: the schedule; threshold tau (every masked position of the block with confidence
// >= tau, at least the most confident); factor f (the n-th most confident needs
// >= 1 - f / (n + 1), at least one). With a parallel rule a block takes as many steps as it needs
// (--steps does not apply), as in Fast-dLLM.
#include "decode/generator.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "decode/trace.h"
#include "decode/windows.h"
#include "util/error.h"

namespace llada::decode {

namespace {

void check_revise_options(const PolicyInfo& p, const GenerateOptions& opt) {
    const ReviseOptions& r = opt.revise;
    if (!p.takes_option(Takes::CommitRule)) {
        throw Error(
            "--revise needs a policy of the step engine that commits early (threshold, "
            "prefix-cache, dual-cache, need, mbsd); vanilla is LLaDA's reference schedule");
    }
    if (opt.cfg > 0.0) {
        throw Error("--revise cannot be combined with --cfg (the CPU path checks one sequence)");
    }
    if (!(r.margin > 0.0)) throw Error("--revise-margin must be > 0 (above 1: never revise)");
    if (!(r.floor >= 0.0 && r.floor < 1.0)) throw Error("--revise-floor must be in [0, 1)");
    if (!(r.stable >= 0.0 && r.stable <= 1.0)) throw Error("--stable-p must be in [0, 1]");
    if (r.stable_k < 0) throw Error("--stable-k must be >= 0 (0: stable when committed)");
    if (r.budget < 1) throw Error("--stable-budget must be >= 1 step");
    if (r.threads < 1 || r.threads > 256) throw Error("--revise-threads must be in [1, 256]");
    if (r.rows < -1) throw Error("--revise-rows must be 'auto' or a row count >= 0");
}

void check_self_check_options(const DiffusionConfig& c, const GenerateOptions& opt) {
    const SelfCheckOptions& sc = opt.self_check;
    if (c.window != WindowMode::Need || c.pipeline) {
        throw Error(
            "--self-check applies to --policy need and mbsd (their rows recompute a "
            "committed token's K/V once, in the next forward), not " +
            std::string(c.name));
    }
    if (c.rule != CommitRule::Threshold) {
        throw Error(
            "--self-check lowers the threshold rule's bar for the blocks it checks; "
            "give --threshold");
    }
    if (opt.revise.on) {
        throw Error(
            "--self-check and --revise are two ways to re-check committed tokens; give "
            "one");
    }
    if (opt.cfg > 0.0 || opt.temperature > 0.0) {
        throw Error(
            "--self-check judges the argmax of one sequence: it cannot be combined with "
            "--cfg or a temperature above 0");
    }
    if (!(sc.accept > 0.0 && sc.accept <= 1.0)) {
        throw Error("--self-check-accept must be in (0, 1], got " + number_str(sc.accept));
    }
    if (!(sc.below > 0.0 && sc.below <= 1.0)) {
        throw Error("--self-check-below must be in (0, 1], got " + number_str(sc.below));
    }
    if (sc.threshold >= 0.0 && !(sc.threshold > 0.0 && sc.threshold <= 1.0)) {
        throw Error("--self-check-threshold must be in (0, 1], got " + number_str(sc.threshold));
    }
}

}  // namespace

DiffusionConfig configure_diffusion(const PolicyInfo& p, const GenerateOptions& opt) {
    if (!p.diffusion())
        throw Error(std::string("internal: ") + p.name + " is not a diffusion policy");
    DiffusionConfig c;
    if (opt.threshold != 0.0 && opt.factor != 0.0) {
        throw Error("--threshold and --factor are two commit rules; give only one");
    }
    if (opt.threshold != 0.0 && !(opt.threshold > 0.0 && opt.threshold <= 1.0)) {
        throw Error("--threshold must be in (0, 1], got " + number_str(opt.threshold));
    }
    if (opt.factor != 0.0 && !(opt.factor > 0.0)) {
        throw Error("--factor must be > 0, got " + number_str(opt.factor));
    }
    if (opt.refresh < 0) throw Error("--refresh must be >= 0");
    const CommitRule parallel = opt.factor > 0.0 ? CommitRule::Factor : CommitRule::Threshold;
    const bool rule_given = opt.threshold > 0.0 || opt.factor > 0.0;
    const CommitRule rule = rule_given ? parallel : CommitRule::Schedule;
    if (!p.takes_option(Takes::CommitRule)) {
        // LLaDA's reference schedule (vanilla): every scheduled step runs.
        if (rule_given) {
            throw Error(
                "policy vanilla is LLaDA's reference schedule; for parallel commits use "
                "--policy threshold (or a cache policy with --threshold/--factor)");
        }
    } else {
        c.name = p.name;
        c.window = p.window;
        c.rule = p.parallel_only ? parallel : rule;
        c.exact_reference = false;
        c.early_stop = true;
        c.speculate = p.speculate;
        c.pipeline = p.pipeline;
    }
    const std::string name = p.name;
    if (opt.refresh > 0 && c.window != WindowMode::Prefix && c.window != WindowMode::Dual) {
        throw Error("--refresh applies to the cache policies (prefix-cache, dual-cache), not " +
                    name);
    }
    if (c.rule != CommitRule::Schedule && opt.remasking == Remasking::Random) {
        throw Error(
            "--threshold/--factor rank positions by confidence; they cannot be combined "
            "with --remasking random");
    }
    if (c.speculate && opt.remasking == Remasking::Random) {
        throw Error(
            "mbsd accepts drafts by confidence; it cannot be combined with --remasking random");
    }
    if (!(opt.accept > 0.0 && opt.accept <= 1.0)) {
        throw Error("--accept must be in (0, 1], got " + number_str(opt.accept));
    }
    if (opt.lookahead < -1) throw Error("--lookahead must be 'auto' or >= 0");
    if (c.pipeline) {
        if (!(opt.pipeline_start >= 0.0 && opt.pipeline_start <= 1.0)) {
            throw Error("--pipeline-start must be a share of the block in [0, 1], got " +
                        number_str(opt.pipeline_start));
        }
        if (!(opt.pipeline_threshold > 0.0 && opt.pipeline_threshold <= 1.0)) {
            throw Error("--pipeline-threshold must be in (0, 1], got " +
                        number_str(opt.pipeline_threshold));
        }
        if (!(opt.pipeline_accept > 0.0 && opt.pipeline_accept <= 1.0)) {
            throw Error("--pipeline-accept must be in (0, 1], got " +
                        number_str(opt.pipeline_accept));
        }
        if (opt.pipeline_min < 0) throw Error("--pipeline-min must be >= 0");
        if (opt.pipeline_depth < 1) throw Error("--pipeline-depth must be >= 1");
        if (opt.revise.on) {
            throw Error(
                "--revise cannot be combined with --policy pipeline: a token committed ahead "
                "of its block is verified by its block's first forward, not by the CPU path");
        }
    }
    if (opt.early_stop >= 0) c.early_stop = opt.early_stop != 0;
    if (opt.revise.on) check_revise_options(p, opt);
    if (opt.self_check.on) check_self_check_options(c, opt);
    return c;
}

int rows_per_position(const DiffusionConfig& cfg, const GenerateOptions& opt) {
    const bool drafts_as_tokens = cfg.speculate && opt.draft_input == DraftInput::Token;
    const bool shadow_checks = cfg.pipeline && opt.pipeline_verify == PipelineVerify::Shadow;
    return drafts_as_tokens || shadow_checks ? 2 : 1;
}

SessionShape session_shape(const DiffusionConfig& cfg, const GenerateOptions& opt, int canvas_len,
                           int n) {
    SessionShape s;
    s.n_seq = n * sequences_per_generation(opt);
    s.rows = int64_t{s.n_seq} * canvas_len * rows_per_position(cfg, opt);
    s.n_pos = canvas_len;
    if (opt.revise.on && opt.revise.tail_dense) {
        // The checks past the last block run as dense forwards: scratch slots for their own K/V
        // and room for a refresh and a check of every position.
        s.n_pos = 2 * int64_t{canvas_len};
        s.rows = std::max(s.rows, 2 * int64_t{s.n_seq} * canvas_len);
    }
    s.outs = s.rows;
    return s;
}

Generator::Generator(const model::Model& model, const GenerateOptions& opt, const TokenIds& ids,
                     const DiffusionConfig& cfg, std::span<const int32_t> prompt,
                     const ForwardCost* cost)
    : model_(model), opt_(opt), ids_(ids), cfg_(cfg), own_noise_(opt.seed) {
    validate_common_options(opt, ids, model);
    if (opt_.threshold == 0.0 && opt_.factor == 0.0 && cfg_.rule == CommitRule::Threshold) {
        opt_.threshold = kDefaultThreshold;
    }
    if (cfg_.speculate && opt_.lookahead < 0 && (cost == nullptr || cost->empty())) {
        throw Error("--lookahead auto needs the device's latency table or a calibration");
    }
    // Shifted logits (Dream): position p is decided from row p - 1. Every window below then
    // holds the row before each position it predicts.
    shift_ = model_.hparams().shift_logits ? 1 : 0;
    if (shift_ && opt_.self_check.on) {
        throw Error("--self-check is not available for a model with shifted logits (" +
                    model_.hparams().arch + "): row p decides position p + 1, so the row that " +
                    "refreshes a token's K/V does not predict it");
    }
    if (shift_ && opt_.revise.on) {
        throw Error("--revise is not available for a model with shifted logits (" +
                    model_.hparams().arch +
                    "): a check of position p would be row p - 1 seeing "
                    "a mask at p, which the CPU path's check rows do not build yet");
    }
    if (shift_ && cfg_.pipeline) {
        throw Error("--policy pipeline is not available for a model with shifted logits (" +
                    model_.hparams().arch +
                    "): its verification masks a position for one forward, which with shifted "
                    "logits would move the row that decides the next one");
    }
    if (shift_ && cfg_.speculate && opt_.draft_input == DraftInput::Token) {
        throw Error("--draft-input token is not available for a model with shifted logits (" +
                    model_.hparams().arch + "); use --draft-input mask");
    }
    P_ = static_cast<int>(prompt.size());
    L_ = P_ + opt_.gen;
    check_canvas_fits(model_, P_, opt_.gen);
    check_prompt_ids(model_, prompt);
    noise_ = opt_.noise ? opt_.noise : &own_noise_;
    auto& x = res_.canvas;
    res_.prompt_len = P_;
    x.assign(prompt.begin(), prompt.end());
    x.resize(L_, ids_.mask);
    // Positions that held a real token at the start: the unconditional pass masks them.
    prompt_index_.resize(L_);
    state_.resize(L_);
    for (int p = 0; p < L_; ++p) {
        prompt_index_[p] = x[p] != ids_.mask;
        state_[p] = p < P_ ? TokenState::Stable : TokenState::Masked;
    }
    if (opt_.logprobs >= 0) {
        if (opt_.revise.on) {
            throw Error(
                "logprobs are not recorded under --revise: the CPU path replaces tokens from "
                "rows whose distributions it does not keep");
        }
        res_.logprobs.assign(static_cast<size_t>(L_), NAN);
        step_logprob_.assign(static_cast<size_t>(L_), NAN);
        if (opt_.logprobs > 0) {
            res_.top_logprobs.assign(static_cast<size_t>(L_), {});
            step_top_.assign(static_cast<size_t>(L_), {});
        }
    }
    pipe_ = Pipeline(opt_, P_, L_);
    kv_tok_.assign(L_, -1);
    if (opt_.revise.on) {
        req_.cpu_rows.reserve(2 * static_cast<size_t>(L_));
        res_.revision_events.reserve(4 * static_cast<size_t>(L_));
    }
    n_blocks_ = opt_.gen / opt_.block;
    steps_per_block_ = opt_.steps / n_blocks_;
    // Everything a step touches is sized here, so the denoising loop allocates nothing.
    const size_t rows = static_cast<size_t>(n_seq()) * L_ * rows_per_position(cfg_, opt_);
    req_.rows.reserve(rows);
    req_.kv_len.assign(n_seq(), L_);
    need_.reserve(L_);
    look_.reserve(L_);
    stale_.reserve(L_);
    cand_.reserve(L_);
    look_cand_.reserve(L_);
    ahead_cand_.reserve(L_);
    later_pos_.reserve(L_);
    later_cand_.reserve(L_);
    check_tok_.reserve(L_);
    check_cand_.reserve(L_);
    if (opt_.self_check.on) sc_ = SelfChecks(opt_.self_check, L_, opt_.replay != nullptr);
    verdicts_.reserve(L_);
    chosen_.reserve(L_);
    committed_.reserve(L_);
    // Steps: the schedule's, or one per position, plus the no-progress allowance per block.
    res_.steps.reserve(static_cast<size_t>(opt_.steps + opt_.gen + n_blocks_ * (opt_.block + 2) +
                                           (opt_.revise.on ? opt_.revise.budget + opt_.gen : 0)));
    rule_ = CommitPolicy(cfg_.rule, opt_.threshold, opt_.factor, cfg_.exact_reference,
                         steps_per_block_, L_);
    spec_ = Speculation(opt_, n_seq(), L_, cost, static_cast<int32_t>(model_.hparams().n_vocab),
                        ids_.mask);
    if (opt_.replay != nullptr) {
        check_replay(*opt_.replay);
        decisions_ =
            make_trace_decisions(*opt_.replay, n_blocks_, opt_.block,
                                 static_cast<int32_t>(model_.hparams().n_vocab), ids_.mask);
    } else {
        // A block may take the schedule, one step per position, and what remasks (revision)
        // and a pipelined block's verification add, before it counts as making no progress.
        const int remask_allowance = opt_.revise.on && opt_.revise.mode == ReviseMode::Remask
                                         ? opt_.gen * opt_.revise.budget
                                         : 0;
        const int ahead_allowance = cfg_.pipeline ? opt_.block : 0;
        decisions_ = make_model_decisions(
            cfg_.pipeline, cfg_.exact_reference,
            opt_.block + steps_per_block_ + remask_allowance + ahead_allowance, L_);
    }
    if (opt_.cfg > 0.0) guided_.reserve(static_cast<size_t>(model_.hparams().n_vocab));
    if (opt_.revise.on) {
        rev_ = Reviser(opt_, P_, L_, static_cast<int32_t>(model_.hparams().n_vocab), ids_.mask);
    }
    start_block();
    // A block with nothing to decode (cannot happen on a fresh canvas) would end here.
    if (rule_.block_over(0, block_masked())) done_ = blocks_done_ = true;
}

void Generator::check_replay(const DecisionTrace& t) const {
    const TracePipeline& tp = t.pipeline;
    if (cfg_.pipeline != (tp.depth > 0)) {
        throw Error(cfg_.pipeline
                        ? "--policy pipeline replays a pipeline trace (recorded with --policy "
                          "pipeline); this one is " +
                              t.policy + "'s"
                        : "a pipeline trace replays only under --policy pipeline, not " +
                              std::string(cfg_.name));
    }
    if (t.self_check != opt_.self_check.on) {
        throw Error(t.self_check ? "a trace recorded with --self-check replays with --self-check "
                                   "(its steps' checks are the refresh rows')"
                                 : "--self-check replays a trace recorded with --self-check; "
                                   "this one is " +
                                       t.policy + "'s without it");
    }
    if (!cfg_.pipeline) return;
    // Its windows follow from the pipeline's options and its blocks map one to one.
    if (t.gen != opt_.gen || t.block != opt_.block) {
        throw Error("a pipeline trace replays at its own shape (gen " + std::to_string(t.gen) +
                    ", block " + std::to_string(t.block) + "), not gen " +
                    std::to_string(opt_.gen) + ", block " + std::to_string(opt_.block));
    }
    if (tp.depth != opt_.pipeline_depth || tp.start != opt_.pipeline_start ||
        tp.verify != pipeline_verify_name(opt_.pipeline_verify)) {
        throw Error("the pipeline trace was recorded with --pipeline-depth " +
                    std::to_string(tp.depth) + " --pipeline-start " + number_str(tp.start) +
                    " --pipeline-verify " + tp.verify + "; the replay must use the same");
    }
}

int Generator::block_masked() const {
    // With revision, a remasked position of an earlier block belongs to the current one.
    const int b1 = P_ + (block_ + 1) * opt_.block;
    const int b0 = opt_.revise.on ? P_ : b1 - opt_.block;
    int m = 0;
    for (int p = b0; p < b1; ++p)
        m += res_.canvas[p] == ids_.mask;
    return m;
}

int Generator::verify_ahead(StepInfo& info) {
    // This step's checks of ahead commits, in position order: the current block's (in need_'s
    // first n_cur_ entries, candidates in cand_) and, in shadow mode, the later blocks' (the
    // rest, candidates in ahead_cand_). Kept tokens count; rejected ones are masked again (in the
    // current block they stay in the commit rule's running with the check's prediction);
    // deferred ones wait for a later step, out of the running.
    const int n_need = static_cast<int>(need_.size());
    auto cand_at = [&](int i) -> Candidate& {
        return i < n_cur_ ? cand_[i] : ahead_cand_[static_cast<size_t>(i - n_cur_)];
    };
    check_pos_.clear();
    check_off_.clear();
    check_tok_.clear();
    check_cand_.clear();
    for (int i = 0; i < n_need; ++i) {
        if (!pipe_.checked(need_[i])) continue;
        check_pos_.push_back(need_[i]);
        check_off_.push_back(block_offset(need_[i]));
        check_tok_.push_back(res_.canvas[need_[i]]);
        check_cand_.push_back(cand_at(i));
    }
    decisions_->judge(pipe_, check_pos_, check_off_, check_tok_, check_cand_, verdicts_);
    int kept = 0;
    size_t k = 0;
    for (int i = 0; i < n_need; ++i) {
        const int p = need_[i];
        if (!pipe_.checked(p)) continue;
        Candidate& c = cand_at(i);
        AheadCounts& n = info.ahead[static_cast<size_t>(block_offset(p))];
        switch (verdicts_[k++]) {
            case Pipeline::Verdict::Keep:
                pipe_.clear(p);
                ++info.ahead_verified;
                ++n.kept;
                ++kept;
                res_.confidence_sum += c.confidence;
                ++res_.confidence_n;
                c.confidence = -1.0f;
                break;
            case Pipeline::Verdict::Reject:
                pipe_.clear(p);
                res_.canvas[p] = ids_.mask;
                state_[p] = TokenState::Masked;
                ++info.ahead_rejected;
                ++n.rejected;
                if (i >= n_cur_) c.confidence = -1.0f;  // a later block's: not committed ahead now
                break;
            case Pipeline::Verdict::Defer:
                c.confidence = -1.0f;
                break;
        }
    }
    return kept;
}

void Generator::commit_ahead(StepInfo& info) {
    // The later blocks' positions that were masked when the step was planned (checks are not
    // candidates: their prediction was made blind to their own token).
    later_pos_.clear();
    later_off_.clear();
    later_cand_.clear();
    for (size_t i = 0; i < ahead_cand_.size(); ++i) {
        const int p = need_[static_cast<size_t>(n_cur_) + i];
        if (pipe_.checked(p)) continue;
        later_pos_.push_back(p);
        later_off_.push_back(block_offset(p));
        later_cand_.push_back(ahead_cand_[i]);
    }
    decisions_->choose_ahead(pipe_, later_pos_, later_off_, later_cand_, chosen_);
    for (int i : chosen_) {
        const int p = later_pos_[static_cast<size_t>(i)];
        commit(p, later_cand_[static_cast<size_t>(i)].token);
        pipe_.committed_ahead(p);
        ++info.ahead_committed;
        ++info.ahead[static_cast<size_t>(later_off_[static_cast<size_t>(i)])].committed;
    }
}

void Generator::start_block() {
    rule_.start_block(block_masked());
    // Self-checks: a block that a later forward refreshes (and so checks) commits at the lower
    // bar; the last block at --threshold.
    if (sc_.on()) {
        if (const double t = sc_.block_threshold(block_, n_blocks_, opt_.threshold); t > 0.0)
            rule_.set_threshold(t);
    }
}

void Generator::finish_block() {
    auto& x = res_.canvas;
    const int b1 = P_ + (block_ + 1) * opt_.block;
    // Every position before the block's end is final now (vanilla may have committed an earlier
    // block's position late, when the reference committed the mask id there first).
    // Under revision, the revision rule decides when a token is stable instead.
    for (int p = P_; p < b1 && !opt_.revise.on; ++p) {
        if (state_[p] == TokenState::Visible) state_[p] = TokenState::Stable;
    }
    // Once a finished block holds an end-of-text token, the answer is decided: later blocks
    // cannot change anything before it.
    if (cfg_.early_stop && block_masked() == 0) {
        // Self-checks: not while a token up to the end is still due a check (the next block's
        // forward checks it).
        bool ended = false, due = false;
        for (int p = P_; p < b1 && !ended; ++p) {
            due = due || (sc_.on() && sc_.due(p));
            ended = x[p] == ids_.eos || x[p] == ids_.eot;
        }
        ended = ended && !due;
        if (ended && b1 < L_) {
            const int32_t fill = ids_.eos >= 0 ? ids_.eos : ids_.eot;
            for (int p = b1; p < L_; ++p) {
                x[p] = fill;
                state_[p] = TokenState::Stable;
                spec_.clear(p);
                pipe_.clear(p);
            }
            res_.stopped_early = true;
        }
    }
}

const StepRequest& Generator::plan_step() {
    assert(!done_);
    req_.rows.clear();
    need_.clear();
    look_.clear();
    stale_.clear();
    n_cur_ = 0;
    // T > 0 samples in the fused head too (Gumbel-max over the counter generator's draws), unless
    // the noise is a replayed stream the head cannot read.
    const bool gumbel = opt_.temperature > 0.0 && opt_.noise == nullptr;
    // (The fused head draws over the whole vocabulary: a top-k or min-p filter takes rows, as
    // do top logprobs beyond the head's two.)
    req_.need_logits = !(opt_.fused_sampling && (opt_.temperature == 0.0 || gumbel) &&
                         opt_.cfg <= 0.0 && !opt_.filter.on() && opt_.logprobs <= 0);
    req_.gumbel.clear();
    req_.dense = !blocks_done_;
    if (!req_.dense) {
        // Every block is decoded; the CPU path goes on checking until every token is stable.
    } else {
        plan_window();
    }
    if (opt_.revise.on) rev_.plan(revision_canvas(), req_.rows, req_.dense, req_.cpu_rows);
    if (gumbel && !req_.need_logits) {
        // Each predicted row draws from the step's [L][V] draw at its position's offset.
        const uint64_t base = own_noise_.next_base();
        const int64_t V = model_.hparams().n_vocab;
        const int32_t banned = rule_.banned(ids_.mask);
        for (const RowRequest& row : req_.rows) {
            if (!row.predict) continue;
            const int64_t predicted = row.pos + shift_;  // the position the row decides
            req_.gumbel.push_back({own_noise_.seed(), base + static_cast<uint64_t>(predicted * V),
                                   opt_.temperature, banned});
        }
    }
    return req_;
}

void Generator::plan_window() {
    const WindowInputs in{.tokens = res_.canvas,
                          .states = state_,
                          .kv_tok = kv_tok_,
                          .prompt_index = prompt_index_,
                          .prompt_len = P_,
                          .canvas_len = L_,
                          .block = block_,
                          .block_len = opt_.block,
                          .step_in_block = step_in_block_,
                          .first_forward = global_step_ == 0,
                          .shift = shift_,
                          .n_seq = n_seq(),
                          .mask = ids_.mask,
                          .revise = opt_.revise.on};
    PlannedWindow out{req_.rows, need_, n_cur_, look_, stale_};
    if (cfg_.window != WindowMode::Need) {
        plan_fixed_window(in, cfg_.window, opt_.refresh, out);
        return;
    }
    NeedParts parts;
    parts.pipeline = cfg_.pipeline ? &pipe_ : nullptr;
    parts.speculation = cfg_.speculate ? &spec_ : nullptr;
    parts.reviser = opt_.revise.on ? &rev_ : nullptr;
    parts.draft_input = opt_.draft_input;
    parts.refresh = opt_.need_refresh;
    if (sc_.on()) {
        // A replay checks as many stale rows as the traced step did, the leftmost.
        int traced = 0;
        if (opt_.replay != nullptr) {
            const TraceStep* t = replay_step(*opt_.replay, n_blocks_, block_, step_in_block_);
            traced = t != nullptr ? t->checks : 0;
        }
        sc_.begin_step(traced);
        parts.self_checks = &sc_;
    }
    if (cfg_.speculate) {
        parts.last_commits =
            step_in_block_ > 0 && !res_.steps.empty() ? res_.steps.back().committed : -1;
        parts.block_masked = block_masked();
    }
    plan_need_window(in, parts, out);
}

void Generator::predict(std::span<const RowPrediction> preds, int n_pred) {
    const int64_t V = model_.hparams().n_vocab;
    const bool guided = opt_.cfg > 0.0;
    cand_.assign(static_cast<size_t>(n_pred), {});
    // The reference draws Gumbel noise for the whole [L][V] canvas, then (random remasking) L
    // uniforms; only the predicted rows are read.
    if (opt_.temperature > 0.0) noise_->next_draw(int64_t{L_} * V);
    auto pos_of = [&](int r) {
        return r < static_cast<int>(need_.size()) ? need_[r] : look_[r - need_.size()];
    };
    const int32_t banned = rule_.banned(ids_.mask);
    for (int r = 0; r < n_pred; ++r) {
        const RowPrediction& pr = preds[r];
        if (pr.stats != nullptr && !req_.need_logits && opt_.temperature > 0.0) {
            // The fused head's Gumbel-max draw (the same draw as the unfused path's).
            const model::HeadStats& st = *pr.stats;
            check_finite_logit(st.gumbel_token < 0 ? NAN : st.gumbel_logit, pos_of(r));
            cand_[r].token = st.gumbel_token;
            cand_[r].confidence = model::head_gumbel_confidence(st);
            if (opt_.logprobs >= 0) step_logprob_[pos_of(r)] = std::log(cand_[r].confidence);
            continue;
        }
        if (pr.stats != nullptr && !req_.need_logits) {
            const model::HeadStats& st = *pr.stats;
            check_finite_logit(st.token < 0 ? NAN : st.max, pos_of(r));
            cand_[r].token = st.token;
            cand_[r].confidence = model::head_confidence(st);
            // Outside the reference policy, a mask id is never committed: use the runner-up.
            if (banned >= 0 && cand_[r].token == banned && st.second >= 0) {
                cand_[r].token = st.second;
                cand_[r].confidence = std::exp(st.second_max - st.max) * model::head_confidence(st);
            }
            if (opt_.logprobs >= 0) step_logprob_[pos_of(r)] = std::log(cand_[r].confidence);
            continue;
        }
        assert(pr.logits != nullptr);
        const float* row = pr.logits;
        if (guided) {
            guided_.resize(static_cast<size_t>(V));
            guide(row, preds[n_pred + r].logits, static_cast<float>(opt_.cfg), guided_.data(), V);
            row = guided_.data();
        }
        cand_[r] = pick_candidate(row, V, opt_.temperature, *noise_, int64_t{pos_of(r)} * V, banned,
                                  opt_.filter);
        check_finite_logit(row[cand_[r].token], pos_of(r));
        if (opt_.remasking == Remasking::LowConfidence) {
            cand_[r].confidence = softmax_prob(row, V, cand_[r].token);
        }
        if (opt_.logprobs >= 0) {
            const int p = pos_of(r);
            step_logprob_[p] = static_cast<float>(log_softmax_at(row, V, cand_[r].token));
            if (opt_.logprobs > 0) top_logprobs(row, V, opt_.logprobs, step_top_[p]);
        }
    }
    if (opt_.remasking == Remasking::Random) {
        noise_->next_draw(L_);
        // The reference draws these in float32.
        for (int r = 0; r < n_pred; ++r)
            cand_[r].confidence = static_cast<float>(noise_->at(pos_of(r)));
    }
}

void Generator::commit(int p, int32_t tok) {
    assert(state_[p] != TokenState::Stable);
    check_spellable(ids_, tok, p);
    res_.canvas[p] = tok;
    // The reference may choose the mask id itself; the position then stays masked.
    state_[p] = tok == ids_.mask ? TokenState::Masked : TokenState::Visible;
    spec_.clear(p);
    committed_.push_back(p);
    if (opt_.revise.on) rev_.committed(p, global_step_);
    // The token is this step's prediction for p (a draft is accepted, an ahead commit kept, only
    // when this step predicts the same token): its distribution is the committing one.
    if (opt_.logprobs >= 0) {
        res_.logprobs[p] = step_logprob_[p];
        if (opt_.logprobs > 0) res_.top_logprobs[p] = step_top_[p];
    }
}

void Generator::resolve_draft(int p, bool accept, bool early, StepInfo& info) {
    spec_.resolved(accept, early);
    if (accept) {
        ++info.drafts_accepted;
        info.drafts_accepted_early += early;
        const float conf = spec_.confidence(p);
        commit(p, spec_.draft(p));
        res_.confidence_sum += conf;
        ++res_.confidence_n;
    } else {
        ++info.drafts_rejected;
        state_[p] = TokenState::Masked;
        spec_.clear(p);
    }
}

struct Generator::Actions final : BlockActions {
    Generator& g;
    StepInfo& info;
    Actions(Generator& gen, StepInfo& i) : g(gen), info(i) {}
    void resolve_draft(int p, bool accept, bool early) override {
        g.resolve_draft(p, accept, early, info);
    }
    void commit(int p, int32_t token, float confidence, bool counted) override {
        g.commit(p, token);
        // Self-checks: a token committed below --self-check-below is due a check.
        if (g.sc_.on()) g.sc_.committed(p, confidence);
        if (!counted) return;
        g.res_.confidence_sum += confidence;
        ++g.res_.confidence_n;
    }
    int verify_ahead() override { return g.verify_ahead(info); }
    int accepted() const override { return info.drafts_accepted; }
};

void Generator::apply(std::span<const RowPrediction> preds,
                      std::span<const RowPrediction> cpu_preds) {
    assert(!done_);
    const int n_need = static_cast<int>(need_.size());
    const int n_pred = n_need + static_cast<int>(look_.size());
    const int n_checks = sc_.on() ? static_cast<int>(sc_.checks().size()) : 0;
    assert(static_cast<int>(preds.size()) == n_pred * n_seq() + n_checks);
    const auto lm_head_rows = static_cast<int64_t>(preds.size());
    if (n_checks > 0) preds = sc_.split(req_.rows, preds);
    assert(static_cast<int>(cpu_preds.size()) == (opt_.revise.on ? rev_.checks() : 0));
    StepInfo info;
    info.step = global_step_;
    info.block = std::min(block_, n_blocks_ - 1);
    info.step_in_block = step_in_block_;
    info.dense = req_.dense;
    if (cfg_.pipeline && req_.dense) {
        info.ahead.assign(static_cast<size_t>(opt_.pipeline_depth) + 1, {});
    }
    committed_.clear();
    if (opt_.revise.on) rev_.clear_revised();
    if (req_.dense) {
        predict(preds, n_pred);
        info.lookahead = static_cast<int>(look_.size());
        // The lookahead rows' candidates apart: the commit rule ranks the block's positions.
        look_cand_.assign(cand_.begin() + n_need, cand_.end());
        // pipeline: the next block's candidates apart too.
        ahead_cand_.assign(cand_.begin() + n_cur_, cand_.begin() + n_need);
        cand_.resize(static_cast<size_t>(n_cur_));
        const int b0 = P_ + block_ * opt_.block;
        int block_committed = 0;
        for (int p = b0; p < b0 + opt_.block; ++p) {
            block_committed += state_[p] == TokenState::Visible || state_[p] == TokenState::Stable;
        }
        BlockView view{{need_.data(), static_cast<size_t>(n_cur_)},
                       cand_,
                       state_,
                       block_,
                       step_in_block_,
                       block_committed};
        Actions act(*this, info);
        decisions_->decide(view, rule_, spec_, act);
        if (cfg_.pipeline) commit_ahead(info);
        if (n_checks > 0) {
            sc_.judge(*decisions_, *noise_, req_.need_logits, model_.hparams().n_vocab, committed_,
                      {res_.canvas, ids_, res_, opt_.logprobs, global_step_}, info);
        }
        info.drafts_proposed += spec_.propose_all(look_, look_cand_, state_);
        spec_.stepped(static_cast<int>(committed_.size()), step_in_block_ == 0);
    }
    info.committed = static_cast<int>(committed_.size());
    // The cache slots the step wrote (both paths: the merge) now hold K/V of the rows' tokens.
    for (const RowRequest& row : req_.rows) {
        if (row.seq == 0 && row.slot >= 0) kv_tok_[row.slot] = row.token;
    }
    // The merge: a slot both paths wrote keeps the dense path's K/V.
    for (const RowRequest& row : req_.cpu_rows) {
        if (row.slot >= 0 && !row.own_key && !rev_.dense_wrote(row.slot))
            kv_tok_[row.slot] = row.token;
    }
    if (opt_.revise.on) {
        rev_.refreshed(revision_canvas());
        rev_.revise(revision_canvas(), cpu_preds, req_.dense, global_step_, *noise_, info, res_);
        rev_.stabilise(revision_canvas(), req_.dense, global_step_, info, res_);
    }
    info.rows = static_cast<int64_t>(req_.rows.size());
    for (const RowRequest& row : req_.rows) {
        if (row.seq != 0) continue;
        const bool look = std::binary_search(look_.begin(), look_.end(), row.pos);
        if (look) {
            ++info.rows_draft;
        } else if (row.token == ids_.mask && !(row.pos < P_)) {
            ++info.rows_masked;
        } else {
            ++info.rows_committed;
        }
    }
    info.rows_device = info.rows;
    info.lm_head_rows = lm_head_rows;
    res_.rows_device += info.rows;
    // --revise-tail dense: a step past the last block is a forward of the dense device too.
    const bool tail_forward = !req_.dense && opt_.revise.tail_dense && !req_.cpu_rows.empty();
    if (req_.dense || tail_forward) res_.stats.forwards += 1;
    res_.stats.rows += info.rows;
    res_.stats.lm_head_rows += info.lm_head_rows;
    res_.drafts_proposed += info.drafts_proposed;
    res_.drafts_accepted += info.drafts_accepted;
    res_.drafts_rejected += info.drafts_rejected;
    res_.drafts_accepted_early += info.drafts_accepted_early;
    res_.ahead_committed += info.ahead_committed;
    res_.ahead_verified += info.ahead_verified;
    res_.ahead_rejected += info.ahead_rejected;
    if (req_.dense) ++step_in_block_;
    ++global_step_;
    // Advance past every block that is over.
    while (!blocks_done_) {
        const bool over = rule_.block_over(step_in_block_, block_masked()) &&
                          !(cfg_.pipeline && pipe_.unverified(block_));
        if (!over) break;
        finish_block();
        ++block_;
        step_in_block_ = 0;
        if (block_ >= n_blocks_ || res_.stopped_early) {
            blocks_done_ = true;
            break;
        }
        start_block();
    }
    for (int p = P_; p < L_; ++p) {
        switch (state_[p]) {
            case TokenState::Masked:
                ++info.n_masked;
                break;
            case TokenState::Draft:
                ++info.n_draft;
                break;
            case TokenState::Visible:
                ++info.n_visible;
                break;
            case TokenState::Stable:
                ++info.n_stable;
                break;
        }
    }
    // Under revision the generation ends when every token is stable; a remask after the last
    // block cannot happen (lane-only steps replace), so blocks_done_ stays true then.
    done_ = blocks_done_ && !(opt_.revise.on && info.n_visible > 0);
    res_.steps.push_back(info);
    if (done_ && opt_.revise.on) finish_revision(res_, P_, ids_.mask);
}

void Generator::record_cost(int64_t device_rows, double ms) {
    record_step_cost(res_, device_rows, ms);
}

void Generator::record_lane_cost(const LaneCost& c) {
    add_lane_cost(c, res_.steps.back(), res_.revision);
}

StepEvent Generator::event() const {
    const int total = cfg_.rule == CommitRule::Schedule ? opt_.steps : opt_.gen;
    return {last_step(),    total,         P_, res_.canvas, committed_, state_,
            spec_.drafts(), rev_.revised()};
}

GenerateResult Generator::take_result() {
    return std::move(res_);
}

}  // namespace llada::decode
