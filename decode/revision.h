// Progressive revision (`--revise`, docs/step-engine.md, "Progressive revision"): committed
// tokens stay Visible, and a CPU path checks each one as if it were masked until it is Stable.
// This component owns what that needs beside the canvas: which tokens a step checks and which
// K/V the CPU path refreshes (within the lane's budget), the revision rule's verdicts, each
// token's age and streak of passing checks, and the lane's cost tables. The generator hands it
// the canvas and the step's dense rows; it changes tokens and states only in revise() and
// stabilise().
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "decode/lookahead.h"
#include "decode/noise.h"
#include "decode/policy.h"
#include "decode/revision_rule.h"
#include "decode/stepper.h"

namespace llada::decode {

// The two paths' times of a step of progressive revision.
struct LaneCost {
    double cpu_ms = 0.0, exposed_ms = 0.0;
    double proj_dense_ms = 0.0, proj_cpu_ms = 0.0, proj_merge_ms = 0.0;
    double proj_contention_ms = 0.0;  // shared-DRAM slowdown of the overlap
};

// What the scheduler's CPU path (decode/cpu_lane.h) needs of a generation that revises
// (Stepper::revision()): its options, where each step's two lane times go, and the lanes'
// projected costs by row count for --revise-rows auto.
class RevisionHooks {
  public:
    virtual const ReviseOptions& revise_options() const = 0;
    virtual void record_lane_cost(const LaneCost& c) = 0;
    virtual void set_lane_costs(ForwardCost dense, ForwardCost cpu) = 0;

  protected:
    ~RevisionHooks() = default;
};

// The parts of a generation that revision reads and writes.
struct RevisionCanvas {
    std::vector<int32_t>& tokens;     // the canvas
    std::vector<TokenState>& state;   // per position
    std::span<const int32_t> kv_tok;  // the token whose K/V each cache slot holds (-1: none)
};

class Reviser {
  public:
    Reviser() = default;
    Reviser(const GenerateOptions& opt, int prompt_len, int canvas_len, int32_t n_vocab,
            int32_t mask);

    // Position p was committed at global step `step`: its age counts from its first commit, and
    // its streak of passing checks starts again.
    void committed(int p, int step);
    // A revised token whose K/V the CPU path recomputes (the dense rows leave its slot alone).
    bool needs_refresh(int p) const { return needs_refresh_[p] != 0; }
    // The projected costs that size --revise-rows auto (RevisionHooks::set_lane_costs).
    void set_costs(ForwardCost dense, ForwardCost lane) {
        dense_cost_ = std::move(dense);
        lane_cost_ = std::move(lane);
    }

    // The CPU path's rows of a step whose dense rows are `dense_rows` (`dense_step`: a dense
    // forward runs): a K/V refresh of every committed position whose slot does not hold its
    // token's K/V (so that the checks see every committed token), then a check row per Visible
    // token (the mask at p, blind to p's key), within the lane's row budget.
    void plan(const RevisionCanvas& c, std::span<const RowRequest> dense_rows, bool dense_step,
              std::vector<RowRequest>& cpu_rows);
    int checks() const { return static_cast<int>(checks_.size()); }
    // The merge rule: whether this step's dense rows wrote slot s (the dense path's K/V win).
    bool dense_wrote(int s) const { return dense_writes_[s] != 0; }
    // After the merge: a refreshed position whose slot now holds its token's K/V needs no more.
    void refreshed(const RevisionCanvas& c);

    // The verdicts on this step's checks (`cpu_preds`: their logits, in plan order; none under
    // a replay), in position order: a revised token is replaced by the model's choice, or
    // remasked (--revise-mode remask, on a dense step only).
    void revise(const RevisionCanvas& c, std::span<const RowPrediction> cpu_preds, bool dense_step,
                int step, NoiseSource& noise, StepInfo& info, GenerateResult& res);
    // Visible tokens turn Stable in prefix order once their checks passed --stable-k times in a
    // row or their --stable-budget is spent, or all at once when a step after the last block
    // checked every one against a complete cache and changed nothing.
    void stabilise(const RevisionCanvas& c, bool dense_step, int step, StepInfo& info,
                   GenerateResult& res) const;
    // The positions the checks changed this step.
    std::span<const int32_t> revised() const { return revised_; }
    void clear_revised() { revised_.clear(); }

  private:
    ReviseOptions opt_;
    int P_ = 0, L_ = 0;
    int32_t mask_ = -1;
    bool replay_ = false;
    RevisionRule rule_;                   // the verdict of each check
    ForwardCost dense_cost_, lane_cost_;  // --revise-rows auto
    std::vector<int32_t> checks_;         // Visible positions the CPU path checks this step
    std::vector<int32_t> lane_refresh_;   // positions whose K/V the CPU path recomputes
    std::vector<int32_t> revised_;        // positions the checks changed this step
    std::vector<uint8_t> needs_refresh_;  // per position: revised, K/V not recomputed yet
    std::vector<uint8_t> dense_writes_;   // per slot: written by this step's dense rows
    std::vector<int> commit_step_;        // global step of each position's first commit
    std::vector<int> streak_;             // consecutive passing checks
    int visible_at_plan_ = 0;             // Visible tokens when the step was planned
    int stale_unrefreshed_ = 0;           // committed positions the checks saw with older K/V
};

// Adds a step's two lanes' times to the step and the generation's revision totals.
void add_lane_cost(const LaneCost& c, StepInfo& step, GenerateResult::Revision& rv);
// Counts each revision against the final canvas (right-to-wrong, wrong-to-right, ...).
void finish_revision(GenerateResult& res, int prompt_len, int32_t mask);

}  // namespace llada::decode
