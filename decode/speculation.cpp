// The step engine's multi-block speculation (decode/generator.h, `mbsd`): how many lookahead rows a
// step takes (decode/lookahead.h's rule on the generation's own acceptance so far) and what
// happens to a draft when its block becomes current.
#include <algorithm>
#include <cassert>
#include <cmath>

#include "decode/generator.h"
#include "decode/trace.h"
#include "util/error.h"

namespace llada::decode {

int Generator::choose_lookahead(int base_rows, int available) const {
    LookaheadInputs in;
    in.base_rows = base_rows * n_seq();
    in.available = available;
    in.commits_per_step = commit_steps_ > 0
                              ? static_cast<double>(commits_) / static_cast<double>(commit_steps_)
                              : 1.0;
    // Only drafts accepted earlier than the commit rule would have taken them save work.
    in.accept_rate =
        (static_cast<double>(drafts_early_) + 1.0) / (static_cast<double>(drafts_evaluated_) + 2.0);
    in.accept_measured = drafts_evaluated_ > 0;
    // The block's own pace: its last step's commits (a threshold rule's commits per step move
    // within a block), the generation's mean at the block's first step.
    const double pace = step_in_block_ > 0 && !res_.steps.empty()
                            ? std::max(1, res_.steps.back().committed)
                            : in.commits_per_step;
    in.steps_left = static_cast<double>(block_masked()) / std::max(1e-9, pace);
    in.mem_budget = static_cast<size_t>(opt_.lookahead_mem_mb * 1024.0 * 1024.0);
    in.max_rows = int64_t{n_seq()} * L_;
    if (n_seq() == 1) return decode::choose_lookahead(*cost_, in);
    // Classifier-free guidance doubles every row: weigh lookahead in pairs of rows.
    in.base_rows = base_rows;
    in.max_rows = L_;
    return decode::choose_lookahead(paired_cost_, in);
}

void Generator::resolve_draft(int p, bool accept, bool early, StepInfo& info) {
    ++drafts_evaluated_;
    if (accept) {
        ++info.drafts_accepted;
        ++drafts_accepted_;
        if (early) {
            ++info.drafts_accepted_early;
            ++drafts_early_;
        }
        commit(p, draft_tok_[p]);
        res_.confidence_sum += draft_conf_[p];
        ++res_.confidence_n;
    } else {
        ++info.drafts_rejected;
        state_[p] = TokenState::Masked;
        draft_tok_[p] = -1;
    }
}

}  // namespace llada::decode
