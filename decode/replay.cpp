// The step engine's decisions taken from a decision trace instead of the model (decode/trace.h):
// a replayed step commits as many positions and accepts the same share of drafts as the traced
// run's step did.
#include <algorithm>
#include <cassert>
#include <cmath>

#include "decode/generator.h"
#include "decode/trace.h"
#include "util/error.h"

namespace llada::decode {

// A replayed step (decode/trace.h): the trace says how many positions to commit and what share
// of the drafts to accept; they are taken left to right, with the predicted tokens.
void Generator::replay(StepInfo& info) {
    const int n_need = static_cast<int>(need_.size());
    const int32_t V = static_cast<int32_t>(model_.hparams().n_vocab);
    auto token_of = [&](int r) {
        const int32_t t = cand_[r].token;
        return t >= 0 && t < V && t != ids_.mask ? t : (ids_.mask + 1) % V;
    };
    int drafts = 0, committed = 0;
    const int b0 = P_ + block_ * opt_.block;
    for (int p = b0; p < b0 + opt_.block; ++p)
        committed += state_[p] == TokenState::Visible || state_[p] == TokenState::Stable;
    for (int r = 0; r < n_need; ++r)
        drafts += state_[need_[r]] == TokenState::Draft;
    ReplayDecision d;
    replay_decision(*opt_.replay, n_blocks_, opt_.block, block_, step_in_block_, drafts, committed,
                    d);
    int accept = d.accept, early = d.accept_early, rest = d.commit - d.accept;
    if (cfg_.rule == CommitRule::Schedule) {
        // Under a fixed schedule only the share of drafts accepted comes from the trace: the
        // steps are the target's own schedule, and every accepted draft is early.
        accept = early = std::min(d.accept_share, drafts);
        rest = std::max(0, rule_.scheduled(step_in_block_) - accept);
    }
    for (int r = 0; r < n_need; ++r) {
        const int p = need_[r];
        if (state_[p] != TokenState::Draft) continue;
        resolve_draft(p, accept > 0, early > 0, info);
        accept -= accept > 0;
        early -= early > 0;
    }
    for (int r = 0; r < n_need && rest > 0; ++r) {
        if (state_[need_[r]] != TokenState::Masked) continue;
        commit(need_[r], token_of(r));
        --rest;
    }
}

}  // namespace llada::decode
