// Pipelined blocks (`--policy pipeline`, docs/step-engine.md): blocks after the current one decode
// beside it with their own threshold, and their commits count only once verified, in block
// order. This component owns which positions are committed ahead of their block, which blocks
// decode this step, which ahead commits a step checks, the ahead commit rule and the verdicts;
// the generator builds the rows and carries the verdicts out. It never touches the canvas.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "decode/policy.h"
#include "decode/sampling.h"

namespace llada::decode {

class Pipeline {
  public:
    Pipeline() = default;
    Pipeline(const GenerateOptions& opt, int prompt_len, int canvas_len);

    bool shadow() const { return verify_ == PipelineVerify::Shadow; }
    // Whether a check is one row fed the mask at the position (mask and window modes).
    bool masks() const { return verify_ != PipelineVerify::Shadow; }
    // Position p holds a token committed ahead of its block, not verified yet.
    bool ahead(int p) const { return ahead_[p] != 0; }
    // Whether block b holds an unverified ahead commit.
    bool unverified(int b) const;
    void committed_ahead(int p) { ahead_[p] = 1; }
    void clear(int p) { ahead_[p] = 0; }

    // Where this step's decoding window ends: block b's end, and after it each following block
    // (up to --pipeline-depth of them) whose previous block has --pipeline-start of its
    // positions committed (ahead commits count).
    int active_end(int b, std::span<const TokenState> state) const;

    // Marks the ahead commits this step checks (`checked`), for a window decoding up to `end`:
    //   mask mode: the current block's; their rows are fed the mask for this forward;
    //   window mode: every one in the window, fed the mask the same way;
    //   shadow mode: the current block's and then, block after block, the next block's as long
    //   as every block before it held no masked position when the step was planned (their
    //   tokens are then the final context of the later block's checks). Check rows are shadow
    //   rows: the mask at the position, blind to its own key, every other token visible.
    void plan_checks(int b, int end, std::span<const TokenState> state);
    bool checked(int p) const { return checked_[p] != 0; }

    // The verdicts on this step's checks, in position order (`pos` ascending, `token` the ahead
    // token, `cand` the check's prediction). Keep: the prediction is the same token with
    // confidence >= --pipeline-accept. Mask and window modes judge each check alone. Shadow mode
    // keeps the longest passing prefix: the first failing check is rejected and every later one
    // deferred (checked again at a later step), because the later checks saw the rejected token.
    enum class Verdict { Keep, Reject, Defer };
    void judge(std::span<const int32_t> token, std::span<const Candidate> cand,
               std::vector<Verdict>& out) const;

    // The ahead commits of this step among the later blocks' masked positions (`pos` ascending,
    // `cand` their predictions): per block, every position with confidence >= --pipeline-threshold
    // and at least its --pipeline-min most confident ones. Writes indexes into pos.
    void choose_ahead(std::span<const int32_t> pos, const std::vector<Candidate>& cand,
                      std::vector<int>& chosen);

  private:
    int block_of(int p) const { return (p - P_) / block_; }

    PipelineVerify verify_ = PipelineVerify::Mask;
    int P_ = 0, L_ = 0, block_ = 1, depth_ = 1, min_ = 1;
    double start_ = 0.0, threshold_ = 0.7, accept_ = 0.1;
    std::vector<uint8_t> ahead_, checked_;
    // choose_ahead's scratch: one block's candidates and its forced picks.
    std::vector<Candidate> group_;
    std::vector<int> forced_;
};

}  // namespace llada::decode
