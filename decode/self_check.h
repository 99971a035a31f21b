// Self-checks (`--self-check`, policies need and mbsd; docs/step-engine.md): the rows that
// recompute a committed token's K/V, once, in the next forward, also predict it, and a
// prediction of another token replaces it. Checks that cost no forward row, for a model trained
// to judge the tokens it is fed. This component owns which tokens are due a check, which refresh
// rows of a step check, and the verdicts on them; the window of need (decode/windows.h) asks it
// which stale rows predict, and the generator hands it the rows' predictions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "decode/decisions.h"
#include "decode/noise.h"
#include "decode/policy.h"
#include "decode/sampling.h"
#include "decode/stepper.h"

namespace llada::decode {

class SelfChecks {
  public:
    SelfChecks() = default;
    SelfChecks(const SelfCheckOptions& opt, int canvas_len, bool replay);

    bool on() const { return opt_.on; }
    // The commit threshold of block b of n: a block a later forward refreshes (and so checks)
    // commits at --self-check-threshold, the last block at `threshold`; < 0: no change.
    double block_threshold(int b, int n_blocks, double threshold) const;

    // Planning a step: `traced` is the number of checks of the replayed step (a replay checks
    // that many stale rows, the leftmost). check_at(p) says whether the stale row at p predicts
    // its position, and records it as one of this step's checks.
    void begin_step(int traced);
    bool check_at(int p);
    std::span<const int32_t> checks() const { return checks_; }

    // A position committed with `confidence`: due a check when below --self-check-below.
    void committed(int p, float confidence) {
        checks_due_[p] = opt_.below >= 1.0 || confidence < opt_.below;
    }
    bool due(int p) const { return checks_due_[p] != 0; }

    // The step's predicted rows (`preds`, in the order of `rows` with predict set) parted into
    // this step's checks and the rest (returned: the block's and the lookahead's rows).
    std::span<const RowPrediction> split(std::span<const RowRequest> rows,
                                         std::span<const RowPrediction> preds);

    // What the verdicts change.
    struct Canvas {
        std::vector<int32_t>& tokens;
        const TokenIds& ids;
        GenerateResult& res;  // revision counters and events, logprobs
        int logprobs = -1;    // GenerateOptions::logprobs
        int step = 0;         // the global step
    };
    // The verdicts on this step's checks (their predictions from split(): the fused head's
    // statistics unless `logits_rows`): a check whose row predicts another token than the
    // committed one (and the mask) at --self-check-accept replaces it; the replaced tokens and
    // this step's commits (`committed`, decided beside them) are due a check in turn.
    void judge(DecisionSource& decisions, NoiseSource& noise, bool logits_rows, int64_t n_vocab,
               std::span<const int32_t> committed, Canvas c, StepInfo& info);

  private:
    SelfCheckOptions opt_;
    bool replay_ = false;
    int traced_ = 0;
    std::vector<uint8_t> checks_due_;  // per position
    std::vector<int32_t> checks_;      // this step's checks, ascending
    std::vector<RowPrediction> main_preds_, check_preds_;
    std::vector<int32_t> check_tok_;
    std::vector<Candidate> check_cand_;
    std::vector<int> replace_;
};

}  // namespace llada::decode
