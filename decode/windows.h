// Which rows a step of the step engine computes: each diffusion policy's window, planned over
// the generation's canvas (decode/generator.h owns it and hands it in read-only). A policy's
// window is one of these planners and the parts it takes (speculation, the pipeline,
// self-checks, revision); the commit rule and the decisions are the generator's.
//
//   plan_fixed_window  vanilla, threshold (the whole canvas every step), prefix-cache and
//                      dual-cache (a full refresh at block starts, then block + suffix, or the
//                      block): decode/windows_fixed.cpp
//   plan_need_window   need and what builds on it (mbsd's lookahead, the pipeline's later blocks
//                      and checks, self-checks): decode/windows_need.cpp
//
// A new policy's window is a new planner in a file of its own and a row of decode/registry.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "decode/policy.h"
#include "decode/registry.h"
#include "decode/stepper.h"

namespace llada::decode {

class Pipeline;
class Reviser;
class SelfChecks;
class Speculation;

// What a planner reads of the generation.
struct WindowInputs {
    std::span<const int32_t> tokens;        // the canvas
    std::span<const TokenState> states;     // per position
    std::span<const int32_t> kv_tok;        // the token whose K/V each slot holds (-1: none)
    const std::vector<bool>& prompt_index;  // positions the unconditional pass (CFG) masks
    int prompt_len = 0, canvas_len = 0;
    int block = 0;  // the current block's index
    int block_len = 0;
    int step_in_block = 0;
    bool first_forward = false;  // the generation's first step
    int shift = 0;               // 1 for shifted logits: position p is decided from row p - 1
    int n_seq = 1;               // 2 under classifier-free guidance
    int32_t mask = -1;
    // Progressive revision: remasked positions before the block are predicted with it.
    bool revise = false;

    int block_start() const { return prompt_len + block * block_len; }
    int block_end() const { return block_start() + block_len; }
    bool committed(int p) const {
        return states[p] == TokenState::Visible || states[p] == TokenState::Stable;
    }
};

// What a planner writes: the step's rows and which positions their predictions decide.
struct PlannedWindow {
    std::vector<RowRequest>& rows;
    std::vector<int32_t>& need;   // positions of the block(s) predicted, ascending
    int& n_cur;                   // of which in the current block (the rest: later blocks)
    std::vector<int32_t>& look;   // lookahead positions predicted (mbsd's drafts), ascending
    std::vector<int32_t>& stale;  // committed positions whose K/V the step recomputes
};

// The windows of the fixed-window policies (`mode` Full, Prefix or Dual; `refresh`: the cache
// policies' full refresh every N steps of a block, 0 only at its start).
void plan_fixed_window(const WindowInputs& in, WindowMode mode, int refresh, PlannedWindow& out);

// The parts a window of need takes; null where the policy does not take the part.
struct NeedParts {
    Pipeline* pipeline = nullptr;        // pipeline: later blocks and their checks
    Speculation* speculation = nullptr;  // mbsd: lookahead rows carrying drafts
    SelfChecks* self_checks = nullptr;   // --self-check: refresh rows that predict
    const Reviser* reviser = nullptr;    // --revise: the CPU path refreshes revised tokens
    DraftInput draft_input = DraftInput::Mask;
    // mbsd's pace: the block's previous step's commits (< 0 at its first step), and its masked
    // positions.
    int last_commits = -1;
    int block_masked = 0;
    // Which rows are recomputed beyond the stale ones (--need-refresh; GenerateOptions).
    NeedRefresh refresh = NeedRefresh::Suffix;
};

// The window of need: the first forward computes the whole canvas; after that the current
// block's masked rows (and, with the pipeline, the later blocks decoding beside it), the
// committed rows whose K/V were computed before their token was committed (each once), and the
// parts' rows.
void plan_need_window(const WindowInputs& in, const NeedParts& parts, PlannedWindow& out);

}  // namespace llada::decode
