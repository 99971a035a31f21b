// Where a dense step's decisions about the current block come from (docs/step-engine.md): the
// model's predictions through the policy's rules, or a decision trace replayed at another
// shape (--replay, decode/trace.h). A source decides; the generator carries its decisions out
// (BlockActions), so the two sources share every state transition.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "decode/commit_rule.h"
#include "decode/pipeline.h"
#include "decode/policy.h"
#include "decode/sampling.h"
#include "decode/speculation.h"
#include "decode/trace.h"

namespace llada::decode {

// The current block this step, as a decision sees it.
struct BlockView {
    std::span<const int32_t> pos;       // the block's predicted positions (ascending)
    std::vector<Candidate>& cand;       // their predictions (a decision may set confidence -1:
                                        // out of the commit rule's running)
    std::span<const TokenState> state;  // per canvas position, as the actions leave it
    int block = 0, step_in_block = 0;
    int committed = 0;  // positions of the block committed before this step
};

// What the generator does on a source's word (positions are canvas positions).
class BlockActions {
  public:
    // A draft of the block: committed (its draft token) or back to masked. `early`: the commit
    // rule would not have taken it this step.
    virtual void resolve_draft(int p, bool accept, bool early) = 0;
    // Commits `token` at p; `counted`: its confidence counts in the generation's mean.
    virtual void commit(int p, int32_t token, float confidence, bool counted) = 0;
    // pipeline: the block's positions committed ahead, verified; returns how many were kept.
    virtual int verify_ahead() = 0;
    // Accepted drafts so far this step.
    virtual int accepted() const = 0;

  protected:
    ~BlockActions() = default;
};

class DecisionSource {
  public:
    virtual ~DecisionSource() = default;
    virtual void decide(BlockView& block, CommitPolicy& rule, const Speculation& spec,
                        BlockActions& act) = 0;
    // pipeline: the verdicts on this step's checks of ahead commits, in position order (`pos`,
    // `offset` each one's block after the current one, `token` the ahead token, `cand` the
    // check's prediction); called from decide() through BlockActions::verify_ahead.
    virtual void judge(const Pipeline& pipe, std::span<const int32_t> pos,
                       std::span<const int32_t> offset, std::span<const int32_t> token,
                       std::span<const Candidate> cand, std::vector<Pipeline::Verdict>& out) = 0;
    // pipeline: which of the later blocks' masked positions (`pos` ascending, `offset` each
    // one's block after the current one, `cand` their predictions) commit ahead this step, after
    // decide(). Writes indexes into pos.
    virtual void choose_ahead(Pipeline& pipe, std::span<const int32_t> pos,
                              std::span<const int32_t> offset, std::vector<Candidate>& cand,
                              std::vector<int>& chosen) = 0;
    // Self-checks: which of this step's checks (`pos` ascending, `token` the committed token,
    // `cand` the refresh row's argmax) replace their token with cand's, after decide(). The
    // model's rule: another token than the committed one and the mask, with confidence >=
    // `accept`. Writes indexes into pos.
    virtual void judge_self_checks(std::span<const int32_t> pos, std::span<const int32_t> token,
                                   std::vector<Candidate>& cand, double accept, int32_t mask,
                                   std::vector<int>& replace) = 0;
};

// The model decides: a draft is accepted when its re-prediction is the same token at --accept,
// the pipeline's ahead commits are verified, then the commit rule takes the block's masked
// positions. Outside the reference policy a block that makes no progress for
// `no_progress_steps` steps is an error ("the model predicts only the mask token").
std::unique_ptr<DecisionSource> make_model_decisions(bool pipeline, bool exact_reference,
                                                     int no_progress_steps, int max_candidates);
// A trace decides: a replayed step commits as many positions and accepts the same share of
// drafts as the traced run's step did (under a fixed schedule only the share of drafts), left
// to right, with the predicted tokens (placeholders on a timing-only device: a committable id).
// A pipeline trace (replayed at its own shape) also gives each block of the window its ahead
// commits and its kept and rejected checks, left to right; a check beyond them waits. Past the
// trace's steps of a block, the block commits what is left and keeps every check. The replay
// repeats the traced steps' rows exactly when --pipeline-accept <= the threshold: a rejected
// token is then never committed again as itself in the same step (its K/V would still be in
// its slot), so a replayed one is given another token. Self-checks: a replayed step replaces as
// many tokens as the traced step revised, the leftmost checks, each with another token.
std::unique_ptr<DecisionSource> make_trace_decisions(const DecisionTrace& trace, int n_blocks,
                                                     int block_len, int32_t n_vocab, int32_t mask);

}  // namespace llada::decode
