// Self-checks (decode/self_check.h).
#include "decode/self_check.h"

#include <cassert>
#include <cmath>

namespace llada::decode {

SelfChecks::SelfChecks(const SelfCheckOptions& opt, int canvas_len, bool replay)
    : opt_(opt), replay_(replay) {
    const auto L = static_cast<size_t>(canvas_len);
    checks_due_.assign(L, 0);
    checks_.reserve(L);
    check_preds_.reserve(L);
    check_tok_.reserve(L);
    check_cand_.reserve(L);
    replace_.reserve(L);
}

double SelfChecks::block_threshold(int b, int n_blocks, double threshold) const {
    if (!(opt_.threshold > 0.0)) return -1.0;
    return b + 1 < n_blocks ? opt_.threshold : threshold;
}

void SelfChecks::begin_step(int traced) {
    checks_.clear();
    traced_ = traced;
}

bool SelfChecks::check_at(int p) {
    bool check = false;
    if (!replay_) {
        check = checks_due_[p] != 0;
    } else if (traced_ > 0) {
        --traced_;
        check = true;
    }
    if (check) checks_.push_back(p);
    return check;
}

std::span<const RowPrediction> SelfChecks::split(std::span<const RowRequest> rows,
                                                 std::span<const RowPrediction> preds) {
    // The predicted rows are in row order: the checks interleave with the block's and the
    // lookahead's rows by position.
    main_preds_.clear();
    check_preds_.clear();
    size_t r = 0, c = 0;
    for (const RowRequest& row : rows) {
        if (!row.predict) continue;
        const bool check = c < checks_.size() && checks_[c] == row.pos;
        (check ? check_preds_ : main_preds_).push_back(preds[r++]);
        c += check;
    }
    assert(r == preds.size() && c == checks_.size());
    return main_preds_;
}

void SelfChecks::judge(DecisionSource& decisions, NoiseSource& noise, bool logits_rows, int64_t V,
                       std::span<const int32_t> committed, Canvas cv, StepInfo& info) {
    auto& x = cv.tokens;
    check_tok_.clear();
    check_cand_.clear();
    for (size_t i = 0; i < checks_.size(); ++i) {
        const RowPrediction& pr = check_preds_[i];
        Candidate c;
        if (pr.stats != nullptr && !logits_rows) {
            check_finite_logit(pr.stats->token < 0 ? NAN : pr.stats->max, checks_[i]);
            c = {pr.stats->token, model::head_confidence(*pr.stats)};
        } else {
            c = pick_candidate(pr.logits, V, 0.0, noise, 0);
            check_finite_logit(pr.logits[c.token], checks_[i]);
            c.confidence = softmax_prob(pr.logits, V, c.token);
        }
        check_tok_.push_back(x[checks_[i]]);
        check_cand_.push_back(c);
    }
    decisions.judge_self_checks(checks_, check_tok_, check_cand_, opt_.accept, cv.ids.mask,
                                replace_);
    info.checks = static_cast<int>(checks_.size());
    info.revised = static_cast<int>(replace_.size());
    cv.res.revision.checks += info.checks;
    cv.res.revision.revisions += info.revised;
    for (int p : checks_)
        checks_due_[p] = 0;
    for (int i : replace_) {
        const int p = checks_[static_cast<size_t>(i)];
        const int32_t to = check_cand_[static_cast<size_t>(i)].token;
        check_spellable(cv.ids, to, p);
        cv.res.revision_events.push_back({p, x[p], to, cv.step});
        // The slot keeps the old token's K/V: the next forward recomputes them and checks the
        // new token.
        x[p] = to;
        if (cv.logprobs >= 0) {  // the check's distribution committed the new token
            const RowPrediction& pr = check_preds_[static_cast<size_t>(i)];
            cv.res.logprobs[p] = std::log(check_cand_[static_cast<size_t>(i)].confidence);
            if (cv.logprobs > 0 && pr.logits != nullptr)
                top_logprobs(pr.logits, V, cv.logprobs, cv.res.top_logprobs[p]);
        }
        checks_due_[p] = 1;
    }
    // This step's commits were decided beside the replaced tokens: each is checked in turn.
    if (!replace_.empty()) {
        for (int p : committed)
            checks_due_[p] = 1;
    }
}

}  // namespace llada::decode
