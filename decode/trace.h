// Decision traces: what each step of a generation computed and decided (rows by state,
// commits, drafts), recorded from a run of a trained model and replayed on a model of another
// shape. Threshold decoding on random weights commits one token per step, so data-dependent
// policies cannot be timed at real shapes directly: a replay keeps the trained model's
// decisions (how many positions each step commits, how many drafts are accepted) and lets the
// target model and device pay for the windows those decisions imply.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace llada::decode {

// pipeline: what a step did to one block of its window (decode/pipeline.h): positions committed
// ahead of the block, and the checks of earlier ahead commits that kept or rejected a token.
struct AheadCounts {
    int committed = 0, kept = 0, rejected = 0;
};

struct TraceStep {
    int block = 0;
    int committed = 0;       // positions committed (accepted drafts included)
    int accepted = 0;        // drafts accepted (the step the block became current)
    int accepted_early = 0;  // of which the commit rule alone would not have taken
    int rejected = 0;        // drafts returned to masked then
    int drafts_present = 0;  // drafts the block held when it became current
    int lookahead = 0;       // lookahead rows in the window
    int rows = 0;            // window rows
    int rows_masked = 0, rows_draft = 0, rows_committed = 0;  // rows by the state of the position
    // Progressive revision: the CPU path's checks, and the tokens they replaced or remasked.
    int checks = 0, revised = 0, remasked = 0;
    // pipeline: per block of the window, from the current one (index 0) on. `committed` above
    // counts the current block's commits and the ahead commits.
    std::vector<AheadCounts> ahead;
    int ahead_committed() const;
};

// The pipeline options a trace was recorded with: a replay's windows follow from them.
struct TracePipeline {
    int depth = 0;  // 0: not a pipeline trace
    double start = 0.0;
    std::string verify;  // --pipeline-verify's name
};

struct DecisionTrace {
    std::string source;  // model file and policy the trace was recorded from
    std::string policy;
    int prompt_len = 0, gen = 0, block = 0;
    bool parallel = false;  // recorded with a parallel commit rule (--threshold / --factor)
    bool stopped_early = false;
    TracePipeline pipeline;
    // Recorded with --self-check: its steps' checks and revisions are the refresh rows' (a replay
    // takes --self-check too); the checked blocks' threshold.
    bool self_check = false;
    double self_check_threshold = 0.0;
    std::vector<TraceStep> steps;

    int n_blocks() const { return block > 0 ? gen / block : 0; }
    // Revisions (replacements and remasks) per check over the whole trace (0 without checks).
    double revision_rate() const;
    int blocks_decoded() const { return steps.empty() ? 0 : steps.back().block + 1; }
    // Block b's steps, in order (steps are in block order; empty if b took none).
    std::span<const TraceStep> block_steps(int b) const;
};

// What a replayed step decides on a canvas of `block` positions per block: how many positions it
// commits and how many of the `drafts_present` drafts it accepts, from trace step `k` of the
// trace block that target block `b` maps onto (blocks map proportionally; counts scale by the
// block-length ratio, rounded cumulatively so each block commits exactly its length when the
// trace's did). `k` is the step within the block. Returns false when the trace has no such step
// (the target block then commits what is left at once).
struct ReplayDecision {
    int commit = 0;
    int accept = 0;
    int accept_early = 0;
    int accept_share = 0;  // the trace's share of drafts accepted, applied to drafts_present
};
bool replay_decision(const DecisionTrace& t, int n_blocks, int block_len, int b, int k,
                     int drafts_present, int committed_so_far, ReplayDecision& out);
// The trace step that step k of target block b replays (blocks map as in replay_decision), or
// nullptr past the trace block's steps.
const TraceStep* replay_step(const DecisionTrace& t, int n_blocks, int b, int k);

}  // namespace llada::decode
