// Multi-block speculation's own state (`mbsd`, docs/step-engine.md): the draft of each position
// of a later block, how many lookahead rows a step takes (decode/lookahead.h's rule, on the
// generation's acceptance so far), and whether a draft is accepted when its block becomes
// current. The generator owns one and asks it; it never touches the canvas.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "decode/lookahead.h"
#include "decode/policy.h"
#include "decode/sampling.h"

namespace llada::decode {

class Speculation {
  public:
    // `cost` sizes --lookahead auto (null: no cost table; then only a fixed lookahead runs).
    // `n_vocab` and `mask`: what a replayed draft may be (opt.replay).
    Speculation() = default;
    Speculation(const GenerateOptions& opt, int n_seq, int canvas_len, const ForwardCost* cost,
                int32_t n_vocab, int32_t mask);

    // The draft token of position p (-1: none), and its confidence when drafted.
    int32_t draft(int p) const { return tok_[p]; }
    float confidence(int p) const { return conf_[p]; }
    std::span<const int32_t> drafts() const { return tok_; }
    void propose(int p, const Candidate& c) {
        tok_[p] = c.token;
        conf_[p] = c.confidence;
    }
    void clear(int p) { tok_[p] = -1; }

    // A draft is accepted when its block's first forward predicts the same token with
    // confidence >= --accept.
    bool accepts(int p, const Candidate& c) const {
        return c.token == tok_[p] && c.confidence >= accept_;
    }
    // A draft resolved; `early`: accepted before the commit rule would have taken it (what
    // speculation saves).
    void resolved(bool accepted, bool early);
    // A dense step committed n positions (the lookahead rule's pace); `first`: the step was its
    // block's first (what drafts add to).
    void stepped(int n, bool first) {
        commits_ += n;
        commit_steps_ += 1;
        first_commits_ += first ? n : 0;
        first_steps_ += first;
    }

    // Lookahead rows of this step out of `available` later positions: --lookahead N, else the
    // rule of decode/lookahead.h on `base_rows` (the rows the step needs predictions of, per
    // sequence), the block's `block_masked` positions and its pace (`last_commits`, the block's
    // previous step's commits; < 0 at its first step). The first forward is no exception: it
    // computes the whole canvas anyway, but every lookahead row adds an LM-head row, which a
    // device may run on its slow CPU.
    int lookahead(int base_rows, int available, int block_masked, int last_commits) const;

    // This step's lookahead positions, ascending, into `out`: the first masked or drafted
    // positions from `block_end` on, as many as lookahead() gives.
    void plan(std::span<const TokenState> state, int block_end, int base_rows, int block_masked,
              int last_commits, std::vector<int32_t>& out) const;
    // The lookahead rows' predictions (`cand`, in `look`'s order) become, or replace, their
    // positions' drafts; returns how many.
    int propose_all(std::span<const int32_t> look, std::span<const Candidate> cand,
                    std::span<TokenState> state);

  private:
    int n_seq_ = 1, L_ = 0, fixed_ = 0, block_ = 0;
    int32_t placeholder_ = -1;  // a replay's stand-in for a draft no real model predicted
    int32_t n_vocab_ = 0, mask_ = -1;
    double accept_ = 1.0, mem_mb_ = 0.0;
    const ForwardCost* cost_ = nullptr;
    ForwardCost paired_cost_;  // CFG: the cost by pairs of rows
    std::vector<int32_t> tok_;
    std::vector<float> conf_;
    int64_t evaluated_ = 0, accepted_ = 0, early_ = 0;
    int64_t commits_ = 0, commit_steps_ = 0;
    int64_t first_commits_ = 0, first_steps_ = 0;  // of blocks' first steps
};

}  // namespace llada::decode
