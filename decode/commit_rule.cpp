// The commit rule (decode/commit_rule.h).
#include "decode/commit_rule.h"

#include <algorithm>

#include "decode/policy.h"

namespace llada::decode {

CommitPolicy::CommitPolicy(CommitRule rule, double threshold, double factor, bool exact_reference,
                           int steps_per_block, int max_candidates)
    : rule_(rule),
      threshold_(threshold),
      factor_(factor),
      exact_reference_(exact_reference),
      steps_per_block_(steps_per_block) {
    schedule_.reserve(static_cast<size_t>(std::max(1, steps_per_block)));
    picked_.reserve(static_cast<size_t>(std::max(1, max_candidates)));
}

void CommitPolicy::start_block(int masked) {
    num_transfer_tokens(masked, std::max(1, steps_per_block_), schedule_);
}

int CommitPolicy::scheduled(int i) const {
    if (i >= steps_per_block_) return 1;  // past the schedule: one per step
    return exact_reference_ ? schedule_[i] : std::max(1, schedule_[i]);
}

void CommitPolicy::choose(const std::vector<Candidate>& cand, int scheduled, int accepted,
                          int masked, std::vector<int>& out) {
    out.clear();
    const int k = rule_ == CommitRule::Schedule ? scheduled - accepted : scheduled;
    if (masked <= 0 || k <= 0) return;
    switch (rule_) {
        case CommitRule::Schedule:
            select_top_k(cand, std::min(k, masked), picked_);
            break;
        case CommitRule::Threshold:
            select_by_threshold(cand, threshold_, picked_);
            break;
        case CommitRule::Factor:
            select_by_factor(cand, factor_, picked_);
            break;
    }
    for (int r : picked_) {
        const float c = cand[r].confidence;
        // The parallel rules' forced pick is not needed when the step already made progress.
        const bool forced =
            accepted > 0 &&
            ((rule_ == CommitRule::Threshold && c < threshold_) ||
             (rule_ == CommitRule::Factor && picked_.size() == 1 && c < 1.0 - factor_ / 2.0));
        if (!forced) out.push_back(r);
    }
}

}  // namespace llada::decode
