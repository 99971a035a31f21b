// Replaying a decision trace onto a canvas of another shape (decode/trace.h).
#include "decode/trace.h"

#include <algorithm>
#include <cmath>

namespace llada::decode {
namespace {

// The steps of the trace block that target block b of n_blocks maps onto (proportionally).
std::span<const TraceStep> replayed_block(const DecisionTrace& t, int n_blocks, int b) {
    return t.block_steps(std::min(t.n_blocks() - 1, b * t.n_blocks() / std::max(1, n_blocks)));
}

}  // namespace

bool replay_decision(const DecisionTrace& t, int n_blocks, int block_len, int b, int k,
                     int drafts_present, int committed_so_far, ReplayDecision& out) {
    out = {};
    const std::span<const TraceStep> steps = replayed_block(t, n_blocks, b);
    const int count = static_cast<int>(steps.size());
    if (k >= count) {
        out.commit = block_len - committed_so_far;
        return false;
    }
    const double scale = static_cast<double>(block_len) / t.block;
    int cum = 0;
    for (int j = 0; j <= k; ++j)
        cum += steps[j].committed;
    // Cumulative rounding: the block's total is exact, steps differ by at most one.
    int target = static_cast<int>(std::lround(scale * cum));
    if (k == count - 1) target = std::max(target, block_len);  // the trace's block ended here
    target = std::min(target, block_len);
    out.commit = std::max(1, target - committed_so_far);  // a step commits at least one
    const TraceStep& s = steps[k];
    if (s.drafts_present > 0 && drafts_present > 0) {
        const double frac = static_cast<double>(s.accepted) / s.drafts_present;
        out.accept_share = static_cast<int>(std::lround(frac * drafts_present));
        out.accept = std::min(out.commit, out.accept_share);
        if (s.accepted > 0) {
            out.accept_early = static_cast<int>(
                std::lround(static_cast<double>(s.accepted_early) / s.accepted * out.accept));
        }
    }
    out.commit = std::min(out.commit, block_len - committed_so_far);
    return true;
}

const TraceStep* replay_step(const DecisionTrace& t, int n_blocks, int b, int k) {
    const std::span<const TraceStep> steps = replayed_block(t, n_blocks, b);
    return k < static_cast<int>(steps.size()) ? &steps[static_cast<size_t>(k)] : nullptr;
}

std::span<const TraceStep> DecisionTrace::block_steps(int b) const {
    const auto in_b = [b](const TraceStep& s) { return s.block == b; };
    const auto first = std::find_if(steps.begin(), steps.end(), in_b);
    const auto last = std::find_if_not(first, steps.end(), in_b);
    return {first, last};
}

int TraceStep::ahead_committed() const {
    int n = 0;
    for (size_t d = 1; d < ahead.size(); ++d)
        n += ahead[d].committed;
    return n;
}

double DecisionTrace::revision_rate() const {
    int64_t checks = 0, revisions = 0;
    for (const TraceStep& s : steps) {
        checks += s.checks;
        revisions += s.revised + s.remasked;
    }
    return checks > 0 ? static_cast<double>(revisions) / static_cast<double>(checks) : 0.0;
}

}  // namespace llada::decode
