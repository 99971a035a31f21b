// Progressive revision's rule over one check (docs/step-engine.md, "Progressive revision"), and
// the CPU lane's row budget: the parts of revision that decide, apart from the generator's
// bookkeeping (decode/revision.cpp). A check sees the committed token t at position p as if it
// were masked; the rule revises t when the model's top token beats t's own probability by the
// margin, or t's probability falls below the floor. A replay (--replay) revises at the trace's
// rate per check instead, every other check passing.
#pragma once

#include <cstdint>

#include "decode/lookahead.h"
#include "decode/noise.h"
#include "decode/policy.h"

namespace llada::decode {

struct CheckVerdict {
    bool revise = false;  // the token is revised (replaced by `top`, or remasked)
    int32_t top = -1;     // the model's choice at the position
    float q = 0.0f;       // the committed token's probability (the stability rule reads it)
};

class RevisionRule {
  public:
    RevisionRule() = default;
    RevisionRule(const ReviseOptions& opt, const DecisionTrace* replay, int32_t n_vocab,
                 int32_t mask);
    // The verdict on committed token t at position p from the check row's logits (null under a
    // replay).
    CheckVerdict check(int p, int32_t t, const float* logits, NoiseSource& noise);

  private:
    double margin_ = 1.0, floor_ = 0.0;
    int32_t V_ = 0, mask_ = -1;
    bool replay_ = false;
    double rate_ = 0.0, owed_ = 0.0;  // replay: revisions per check, and the running count
};

// CPU-path rows a step may take (-1: no cap). --revise-rows N: N; auto: the most rows of the CPU
// lane's cost table that project within the dense step of `dense_rows` rows (both tables
// needed; none on a step without dense rows).
int lane_budget(const ReviseOptions& opt, bool dense, int64_t dense_rows,
                const ForwardCost& dense_cost, const ForwardCost& lane_cost);

}  // namespace llada::decode
