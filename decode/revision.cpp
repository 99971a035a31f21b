// Progressive revision (decode/revision.h, decode/revision_rule.h): the CPU path's rows per
// step, the revision rule over its checks, stability, and the CPU lane's cost.
#include "decode/revision.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "decode/sampling.h"
#include "decode/trace.h"
#include "util/error.h"

namespace llada::decode {

Reviser::Reviser(const GenerateOptions& opt, int prompt_len, int canvas_len, int32_t n_vocab,
                 int32_t mask)
    : opt_(opt.revise),
      P_(prompt_len),
      L_(canvas_len),
      mask_(mask),
      replay_(opt.replay != nullptr),
      rule_(opt.revise, opt.replay, n_vocab, mask) {
    checks_.reserve(canvas_len);
    lane_refresh_.reserve(canvas_len);
    revised_.reserve(canvas_len);
    needs_refresh_.assign(canvas_len, 0);
    dense_writes_.assign(canvas_len, 0);
    commit_step_.assign(canvas_len, -1);
    streak_.assign(canvas_len, 0);
}

void Reviser::committed(int p, int step) {
    if (commit_step_[p] < 0) commit_step_[p] = step;
    streak_[p] = 0;
}

void Reviser::refreshed(const RevisionCanvas& c) {
    for (int p : lane_refresh_)
        needs_refresh_[p] = c.kv_tok[p] != c.tokens[p];
}

// The CPU path's rows (docs/step-engine.md, "Progressive revision"): a K/V refresh of every
// committed position whose cached K/V are not of its token (so that the shadow rows see every
// committed token), then a shadow row per Visible token.
void Reviser::plan(const RevisionCanvas& c, std::span<const RowRequest> dense_rows, bool dense_step,
                   std::vector<RowRequest>& cpu_rows) {
    cpu_rows.clear();
    checks_.clear();
    lane_refresh_.clear();
    std::fill(dense_writes_.begin(), dense_writes_.end(), 0);
    for (const RowRequest& row : dense_rows) {
        if (row.seq == 0 && row.slot >= 0) dense_writes_[row.slot] = 1;
    }
    const auto& x = c.tokens;
    stale_unrefreshed_ = 0;
    visible_at_plan_ = 0;
    for (int p = 0; p < L_; ++p) {
        const bool committed =
            c.state[p] == TokenState::Visible || c.state[p] == TokenState::Stable;
        visible_at_plan_ += c.state[p] == TokenState::Visible;
        if (!committed || c.kv_tok[p] == x[p]) continue;
        if (!opt_.fresh_context && !needs_refresh_[p]) {
            ++stale_unrefreshed_;
            continue;
        }
        lane_refresh_.push_back(p);
    }
    // Under a row budget the refreshes go first, then the leftmost visible tokens (the ones the
    // stable prefix waits for); unchecked tokens keep their count. A fixed budget checks at
    // least one token. The auto budget is what hides behind the dense step: when no check fits
    // there, the lane runs no check, and of its refreshes only those of revised tokens (whose
    // K/V are its own to recompute), not the ones a check would have read.
    const int budget = lane_budget(opt_, dense_step, static_cast<int64_t>(dense_rows.size()),
                                   dense_cost_, lane_cost_);
    int room = budget < 0 ? L_ : budget - static_cast<int>(lane_refresh_.size());
    if (opt_.rows > 0) room = std::max(1, room);
    if (room <= 0 && opt_.rows < 0 && dense_step) {
        room = 0;
        std::erase_if(lane_refresh_, [&](int p) { return !needs_refresh_[p]; });
    }
    for (int p : lane_refresh_)
        cpu_rows.push_back({x[p], p, 0, p, -1, false});
    // A check row: the mask at p, blind to p's key, seeing its own mask key instead (its K/V go
    // to a scratch slot past the canvas, which no other row attends to).
    for (int p = P_; p < L_ && room > 0; ++p) {
        if (c.state[p] != TokenState::Visible) continue;
        --room;
        const int32_t scratch = L_ + static_cast<int32_t>(checks_.size());
        checks_.push_back(p);
        cpu_rows.push_back({mask_, p, 0, scratch, p, true, true});
    }
}

RevisionRule::RevisionRule(const ReviseOptions& opt, const DecisionTrace* replay, int32_t n_vocab,
                           int32_t mask)
    : margin_(opt.margin),
      floor_(opt.floor),
      V_(n_vocab),
      mask_(mask),
      replay_(replay != nullptr),
      rate_(replay ? replay->revision_rate() : 0.0) {}

CheckVerdict RevisionRule::check(int p, int32_t t, const float* logits, NoiseSource& noise) {
    CheckVerdict v;
    if (replay_) {
        owed_ += rate_;
        v.revise = owed_ >= 1.0;
        if (v.revise) owed_ -= 1.0;
        v.top = (t + 1) % V_;
        if (v.top == mask_) v.top = (v.top + 1) % V_;
        v.q = v.revise ? 0.0f : 1.0f;
        return v;
    }
    assert(logits != nullptr);
    const Candidate c = pick_candidate(logits, V_, 0.0, noise, 0, mask_);
    check_finite_logit(logits[c.token], p);
    v.q = softmax_prob(logits, V_, t);
    v.top = c.token;
    // The margin is between probabilities: the top token's own against the committed one's
    // (pick_candidate gives the token only).
    const float top_p = v.top == t ? v.q : softmax_prob(logits, V_, v.top);
    v.revise = (v.top != t && top_p - v.q >= margin_) || v.q < floor_;
    return v;
}

int lane_budget(const ReviseOptions& opt, bool dense, int64_t dense_rows,
                const ForwardCost& dense_cost, const ForwardCost& lane_cost) {
    const int rows = opt.rows;
    if (rows > 0) return rows;
    if (rows == 0 || !dense || dense_cost.empty() || lane_cost.empty()) return -1;
    // auto: the CPU lane's rows whose projected time fits within the dense step's.
    const double t = dense_cost.at(dense_rows);
    int n = 0;
    for (size_t i = 0; i < lane_cost.rows.size(); ++i) {
        if (lane_cost.ms[i] <= t) n = static_cast<int>(lane_cost.rows[i]);
    }
    return n;
}

// The revision rule over this step's checks, in position order.
void Reviser::revise(const RevisionCanvas& c, std::span<const RowPrediction> cpu_preds,
                     bool dense_step, int step, NoiseSource& noise, StepInfo& info,
                     GenerateResult& res) {
    auto& x = c.tokens;
    auto& rv = res.revision;
    info.checks = static_cast<int>(checks_.size());
    info.refreshes = static_cast<int>(lane_refresh_.size());
    rv.checks += info.checks;
    rv.refreshes += info.refreshes;
    if (!dense_step) ++rv.lane_only_steps;
    // A remask after the last block would need another dense forward: replace instead.
    const bool remask = opt_.mode == ReviseMode::Remask && dense_step;
    for (size_t i = 0; i < checks_.size(); ++i) {
        const int p = checks_[i];
        const int32_t t = x[p];
        const CheckVerdict v = rule_.check(p, t, replay_ ? nullptr : cpu_preds[i].logits, noise);
        if (!v.revise) {
            streak_[p] = v.q >= opt_.stable ? streak_[p] + 1 : 0;
            continue;
        }
        streak_[p] = 0;
        if (remask) {
            res.revision_events.push_back({p, t, mask_, step});
            x[p] = mask_;
            c.state[p] = TokenState::Masked;
            ++info.remasked;
            ++rv.remasks;
            revised_.push_back(p);
        } else if (v.top != t && v.top >= 0) {
            res.revision_events.push_back({p, t, v.top, step});
            x[p] = v.top;
            needs_refresh_[p] = 1;
            ++info.revised;
            ++rv.revisions;
            revised_.push_back(p);
        }
    }
}

// A Visible token turns Stable once its checks passed stable_k times in a row or its budget is
// spent, and every earlier position is stable.
void Reviser::stabilise(const RevisionCanvas& c, bool dense_step, int step, StepInfo& info,
                        GenerateResult& res) const {
    // After the last block, a step of the CPU path alone that revised nothing and checked every
    // visible token against a cache holding every committed token's own K/V saw the final
    // context: a further check would see the same and decide the same, so they are all final.
    const bool settled = !dense_step && info.revised + info.remasked == 0 &&
                         static_cast<int>(checks_.size()) == visible_at_plan_ &&
                         stale_unrefreshed_ == 0;
    for (int p = P_; p < L_; ++p) {
        if (c.state[p] == TokenState::Stable) continue;
        if (c.state[p] != TokenState::Visible) break;
        const int age = step - commit_step_[p];
        if (!settled && streak_[p] < opt_.stable_k && age < opt_.budget) break;
        c.state[p] = TokenState::Stable;
        ++info.stabilised;
        ++res.revision.stabilised;
        res.revision.commit_to_stable_steps += age;
    }
}

// Counts each revision against the final canvas.
void finish_revision(GenerateResult& res, int prompt_len, int32_t mask) {
    auto& rv = res.revision;
    const auto sp =
        split_revisions(res.revision_events, prompt_len,
                        std::span<const int32_t>(res.canvas).subspan(prompt_len), -1, mask);
    rv.right_to_wrong = sp.right_to_wrong;
    rv.wrong_to_right = sp.wrong_to_right;
    rv.wrong_to_wrong = sp.wrong_to_wrong;
    rv.remasks_of_right = sp.remasks_of_right;
    rv.remasks_of_wrong = sp.remasks_of_wrong;
}

void add_lane_cost(const LaneCost& c, StepInfo& s, GenerateResult::Revision& rv) {
    s.cpu_ms = c.cpu_ms;
    s.exposed_ms = c.exposed_ms;
    s.proj_dense_ms = c.proj_dense_ms;
    s.proj_cpu_ms = c.proj_cpu_ms;
    s.proj_merge_ms = c.proj_merge_ms;
    rv.cpu_ms += c.cpu_ms;
    rv.exposed_ms += c.exposed_ms;
    rv.proj_dense_ms += c.proj_dense_ms;
    rv.proj_cpu_ms += c.proj_cpu_ms;
    rv.proj_merge_ms += c.proj_merge_ms;
    s.proj_contention_ms = c.proj_contention_ms;
    rv.proj_contention_ms += c.proj_contention_ms;
    rv.proj_step_ms +=
        std::max(c.proj_dense_ms, c.proj_cpu_ms) + c.proj_contention_ms + c.proj_merge_ms;
}

}  // namespace llada::decode
