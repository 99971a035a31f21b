// Multi-block speculation's state (decode/speculation.h).
#include "decode/speculation.h"

#include <algorithm>

namespace llada::decode {

Speculation::Speculation(const GenerateOptions& opt, int n_seq, int canvas_len,
                         const ForwardCost* cost, int32_t n_vocab, int32_t mask)
    : n_seq_(n_seq),
      L_(canvas_len),
      fixed_(opt.lookahead),
      block_(opt.block),
      placeholder_(opt.replay != nullptr ? (mask + 1) % n_vocab : -1),
      n_vocab_(n_vocab),
      mask_(mask),
      accept_(opt.accept),
      mem_mb_(opt.lookahead_mem_mb),
      cost_(cost) {
    tok_.assign(canvas_len, -1);
    conf_.assign(canvas_len, 0.0f);
    // Classifier-free guidance doubles every row: the lookahead is weighed in pairs of rows.
    if (n_seq == 2 && cost != nullptr) {
        for (size_t i = 0; i < cost->rows.size(); ++i) {
            if (cost->rows[i] % 2 != 0) continue;
            paired_cost_.rows.push_back(cost->rows[i] / 2);
            paired_cost_.ms.push_back(cost->ms[i]);
            paired_cost_.arena_bytes.push_back(i < cost->arena_bytes.size() ? cost->arena_bytes[i]
                                                                            : 0);
            if (i < cost->buckets.size()) paired_cost_.buckets.push_back(cost->buckets[i] / 2);
        }
        paired_cost_.source = cost->source;
    }
}

void Speculation::resolved(bool accepted, bool early) {
    ++evaluated_;
    if (!accepted) return;
    ++accepted_;
    early_ += early;
}

int Speculation::lookahead(int base_rows, int available, int block_masked, int last_commits) const {
    if (fixed_ >= 0) return std::min(fixed_, available);
    LookaheadInputs in;
    in.base_rows = base_rows * n_seq_;
    in.available = available;
    in.commits_per_step = commit_steps_ > 0
                              ? static_cast<double>(commits_) / static_cast<double>(commit_steps_)
                              : 1.0;
    // Only drafts accepted earlier than the commit rule would have taken them save work.
    in.accept_rate = (static_cast<double>(early_) + 1.0) / (static_cast<double>(evaluated_) + 2.0);
    in.accept_measured = evaluated_ > 0;
    in.block = block_;
    in.first_step_commits =
        first_steps_ > 0 ? static_cast<double>(first_commits_) / static_cast<double>(first_steps_)
                         : in.commits_per_step;
    // The block's own pace: its last step's commits (a threshold rule's commits per step move
    // within a block), the generation's mean at the block's first step.
    const double pace = last_commits >= 0 ? std::max(1, last_commits) : in.commits_per_step;
    in.steps_left = static_cast<double>(block_masked) / std::max(1e-9, pace);
    in.mem_budget = static_cast<size_t>(mem_mb_ * 1024.0 * 1024.0);
    in.max_rows = int64_t{n_seq_} * L_;
    if (n_seq_ == 1) return choose_lookahead(*cost_, in);
    in.base_rows = base_rows;
    in.max_rows = L_;
    return choose_lookahead(paired_cost_, in);
}

void Speculation::plan(std::span<const TokenState> state, int block_end, int base_rows,
                       int block_masked, int last_commits, std::vector<int32_t>& out) const {
    auto open = [&](int p) {
        return state[p] == TokenState::Masked || state[p] == TokenState::Draft;
    };
    int available = 0;
    for (int p = block_end; p < L_; ++p)
        available += open(p);
    const int n = lookahead(base_rows, available, block_masked, last_commits);
    for (int p = block_end; p < L_ && static_cast<int>(out.size()) < n; ++p) {
        if (open(p)) out.push_back(p);
    }
}

int Speculation::propose_all(std::span<const int32_t> look, std::span<const Candidate> cand,
                             std::span<TokenState> state) {
    for (size_t r = 0; r < look.size(); ++r) {
        const int p = look[r];
        state[p] = TokenState::Draft;
        Candidate c = cand[r];
        // A replay on a timing-only device predicts placeholders: keep drafts committable.
        if (placeholder_ >= 0 && (c.token < 0 || c.token >= n_vocab_ || c.token == mask_))
            c.token = placeholder_;
        propose(p, c);
    }
    return static_cast<int>(look.size());
}

}  // namespace llada::decode
