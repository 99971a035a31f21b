// The diffusion policies' commit rule (decode/generator.h): how many of the current block's
// masked positions a step commits, and which. LLaDA's schedule commits a fixed number per step
// by confidence; the parallel rules commit every position at or above a threshold, or by
// Fast-dLLM's factor rule, at least the most confident one.
#pragma once

#include <vector>

#include "decode/sampling.h"

namespace llada::decode {

enum class CommitRule { Schedule, Threshold, Factor };

class CommitPolicy {
  public:
    // `exact_reference`: vanilla, whose schedule may commit nothing at a step (LLaDA's own
    // get_num_transfer_tokens), where the other policies commit at least one. `max_candidates`:
    // the most candidates a step ranks (its scratch is sized once).
    CommitPolicy() = default;
    CommitPolicy(CommitRule rule, double threshold, double factor, bool exact_reference,
                 int steps_per_block, int max_candidates);

    CommitRule rule() const { return rule_; }
    // The threshold rule's bar from now on (self-checks lower it for the blocks they check).
    void set_threshold(double threshold) { threshold_ = threshold; }
    // A block starts with `masked` positions to decode: its schedule.
    void start_block(int masked);
    // What the schedule commits at step `i` of the block (one per step past the schedule).
    int scheduled(int i) const;
    // Whether the rule commits a candidate of this confidence on its own (a draft accepted
    // below it was accepted earlier than the rule would have taken it).
    bool takes(float confidence) const {
        return rule_ == CommitRule::Threshold && confidence >= threshold_;
    }
    // The token a candidate may not be (-1: none): the reference may choose the mask id (the
    // position then stays masked); the other policies never do.
    int32_t banned(int32_t mask) const { return exact_reference_ ? -1 : mask; }
    // Whether a block is over: the reference runs every scheduled step, the other policies stop
    // when nothing is masked (`masked`) at step `step_in_block`.
    bool block_over(int step_in_block, int masked) const {
        return exact_reference_ ? step_in_block >= steps_per_block_ : masked == 0;
    }
    // The candidates (indices into `cand`, ascending) the step commits. `masked` of them are
    // still in the running (the others have confidence -1); `accepted` positions of the block
    // (accepted drafts, verified tokens) already count as the step's progress: the schedule
    // commits that many fewer, and the parallel rules do not force their most confident one.
    void choose(const std::vector<Candidate>& cand, int scheduled, int accepted, int masked,
                std::vector<int>& out);

  private:
    CommitRule rule_ = CommitRule::Schedule;
    double threshold_ = 0.0, factor_ = 0.0;
    bool exact_reference_ = true;
    int steps_per_block_ = 1;
    std::vector<int> schedule_;
    std::vector<int> picked_;  // scratch
};

}  // namespace llada::decode
