// The two sources of a step's decisions (decode/decisions.h).
#include "decode/decisions.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace llada::decode {
namespace {

class ModelDecisions : public DecisionSource {
  public:
    ModelDecisions(bool pipeline, bool exact_reference, int no_progress_steps, int max_candidates)
        : pipeline_(pipeline), exact_reference_(exact_reference), limit_(no_progress_steps) {
        chosen_.reserve(static_cast<size_t>(std::max(1, max_candidates)));
    }

    void decide(BlockView& b, CommitPolicy& rule, const Speculation& spec,
                BlockActions& act) override {
        const int n = static_cast<int>(b.pos.size());
        // The drafts of a block that has just become current: accepted or back to masked.
        for (int r = 0; r < n; ++r) {
            const int p = b.pos[r];
            if (b.state[p] != TokenState::Draft) continue;
            const bool accept = spec.accepts(p, b.cand[r]);
            // Early: the commit rule would not have taken it this step (what speculation buys).
            act.resolve_draft(p, accept, !rule.takes(b.cand[r].confidence));
            if (accept) b.cand[r].confidence = -1.0f;  // out of the commit rule's running
        }
        if (!exact_reference_ && b.step_in_block > limit_) {
            throw Error("decoding made no progress in block " + std::to_string(b.block) +
                        ": the model predicts only the mask token");
        }
        // Accepted drafts and verified tokens count as this step's progress.
        const int kept = pipeline_ ? act.verify_ahead() : 0;
        const int accepted = act.accepted() + kept;
        rule.choose(b.cand, rule.scheduled(b.step_in_block), accepted, n - accepted, chosen_);
        for (int r : chosen_)
            act.commit(b.pos[r], b.cand[r].token, b.cand[r].confidence, true);
    }

    void judge(const Pipeline& pipe, std::span<const int32_t>, std::span<const int32_t>,
               std::span<const int32_t> token, std::span<const Candidate> cand,
               std::vector<Pipeline::Verdict>& out) override {
        pipe.judge(token, cand, out);
    }

    void choose_ahead(Pipeline& pipe, std::span<const int32_t> pos, std::span<const int32_t>,
                      std::vector<Candidate>& cand, std::vector<int>& chosen) override {
        pipe.choose_ahead(pos, cand, chosen);
    }

    void judge_self_checks(std::span<const int32_t> pos, std::span<const int32_t> token,
                           std::vector<Candidate>& cand, double accept, int32_t mask,
                           std::vector<int>& replace) override {
        replace.clear();
        for (size_t i = 0; i < pos.size(); ++i) {
            const Candidate& c = cand[i];
            if (c.token != token[i] && c.token != mask && c.confidence >= accept)
                replace.push_back(static_cast<int>(i));
        }
    }

  private:
    bool pipeline_, exact_reference_;
    int limit_;
    std::vector<int> chosen_;
};

class TraceDecisions : public DecisionSource {
  public:
    TraceDecisions(const DecisionTrace& trace, int n_blocks, int block_len, int32_t n_vocab,
                   int32_t mask)
        : trace_(trace), n_blocks_(n_blocks), block_len_(block_len), V_(n_vocab), mask_(mask) {}

    void decide(BlockView& b, CommitPolicy& rule, const Speculation&, BlockActions& act) override {
        const int n = static_cast<int>(b.pos.size());
        auto token_of = [&](int r) { return committable(b.cand[r].token); };
        if (trace_.pipeline.depth > 0) {
            // The trace's step k of this block (a pipeline trace replays at its own shape), or
            // none past its steps.
            const std::span<const TraceStep> steps = trace_.block_steps(b.block);
            cur_ = b.step_in_block < static_cast<int>(steps.size()) ? &steps[b.step_in_block]
                                                                    : nullptr;
            act.verify_ahead();
            int rest = cur_ != nullptr ? cur_->committed - cur_->ahead_committed() : n;
            for (int r = 0; r < n && rest > 0; ++r) {
                const int p = b.pos[r];
                if (b.state[p] != TokenState::Masked) continue;
                int32_t t = token_of(r);
                for (const auto& [q, old] : rejected_) {
                    if (q == p && t == old) t = committable((t + 1) % V_);
                }
                act.commit(p, t, b.cand[r].confidence, false);
                --rest;
            }
            return;
        }
        // The traced step's self-check replacements.
        const TraceStep* traced = replay_step(trace_, n_blocks_, b.block, b.step_in_block);
        revised_ = traced != nullptr ? traced->revised : 0;
        int drafts = 0;
        for (int r = 0; r < n; ++r)
            drafts += b.state[b.pos[r]] == TokenState::Draft;
        ReplayDecision d;
        replay_decision(trace_, n_blocks_, block_len_, b.block, b.step_in_block, drafts,
                        b.committed, d);
        int accept = d.accept, early = d.accept_early, rest = d.commit - d.accept;
        if (rule.rule() == CommitRule::Schedule) {
            // Under a fixed schedule only the share of drafts accepted comes from the trace: the
            // steps are the target's own schedule, and every accepted draft is early.
            accept = early = std::min(d.accept_share, drafts);
            rest = std::max(0, rule.scheduled(b.step_in_block) - accept);
        }
        for (int r = 0; r < n; ++r) {
            const int p = b.pos[r];
            if (b.state[p] != TokenState::Draft) continue;
            act.resolve_draft(p, accept > 0, early > 0);
            accept -= accept > 0;
            early -= early > 0;
        }
        for (int r = 0; r < n && rest > 0; ++r) {
            if (b.state[b.pos[r]] != TokenState::Masked) continue;
            act.commit(b.pos[r], token_of(r), b.cand[r].confidence, false);
            --rest;
        }
    }

    void judge(const Pipeline&, std::span<const int32_t> pos, std::span<const int32_t> offset,
               std::span<const int32_t> token, std::span<const Candidate>,
               std::vector<Pipeline::Verdict>& out) override {
        // Per block: the trace's kept checks first, then its rejected ones; the rest wait.
        out.assign(offset.size(), Pipeline::Verdict::Keep);
        rejected_.clear();
        if (cur_ == nullptr) return;
        left_ = cur_->ahead;
        for (size_t i = 0; i < offset.size(); ++i) {
            const auto d = static_cast<size_t>(offset[i]);
            if (d >= left_.size()) continue;
            if (left_[d].kept > 0) {
                --left_[d].kept;
            } else if (left_[d].rejected > 0) {
                --left_[d].rejected;
                out[i] = Pipeline::Verdict::Reject;
                rejected_.push_back({pos[i], token[i]});
            } else {
                out[i] = Pipeline::Verdict::Defer;
            }
        }
    }

    void choose_ahead(Pipeline&, std::span<const int32_t> pos, std::span<const int32_t> offset,
                      std::vector<Candidate>& cand, std::vector<int>& chosen) override {
        chosen.clear();
        if (cur_ == nullptr) return;
        left_ = cur_->ahead;
        for (size_t i = 0; i < pos.size(); ++i) {
            const auto d = static_cast<size_t>(offset[i]);
            if (d == 0 || d >= left_.size() || left_[d].committed == 0) continue;
            --left_[d].committed;
            cand[i].token = committable(cand[i].token);
            chosen.push_back(static_cast<int>(i));
        }
    }

    void judge_self_checks(std::span<const int32_t> pos, std::span<const int32_t> token,
                           std::vector<Candidate>& cand, double, int32_t,
                           std::vector<int>& replace) override {
        replace.clear();
        for (size_t i = 0; i < pos.size() && static_cast<int>(i) < revised_; ++i) {
            int32_t t = committable(cand[i].token);
            if (t == token[i]) t = committable((t + 1) % V_);
            if (t == token[i]) continue;  // a vocabulary of the mask and one token
            cand[i].token = t;
            replace.push_back(static_cast<int>(i));
        }
    }

  private:
    // The predicted token, or a committable placeholder on a timing-only device.
    int32_t committable(int32_t t) const {
        return t >= 0 && t < V_ && t != mask_ ? t : (mask_ + 1) % V_;
    }

    const DecisionTrace& trace_;
    int n_blocks_, block_len_;
    int32_t V_, mask_;
    // pipeline: the step being replayed, what is left of its counts, and the positions it
    // rejected with their tokens.
    const TraceStep* cur_ = nullptr;
    std::vector<AheadCounts> left_;
    int revised_ = 0;  // self-checks: the traced step's replacements
    std::vector<std::pair<int32_t, int32_t>> rejected_;
};

}  // namespace

std::unique_ptr<DecisionSource> make_model_decisions(bool pipeline, bool exact_reference,
                                                     int no_progress_steps, int max_candidates) {
    return std::make_unique<ModelDecisions>(pipeline, exact_reference, no_progress_steps,
                                            max_candidates);
}

std::unique_ptr<DecisionSource> make_trace_decisions(const DecisionTrace& trace, int n_blocks,
                                                     int block_len, int32_t n_vocab, int32_t mask) {
    return std::make_unique<TraceDecisions>(trace, n_blocks, block_len, n_vocab, mask);
}

}  // namespace llada::decode
