// LLaDA 2.x decoding (policy `llada2`, docs/llada2.md "Decoding"): block diffusion over a
// block-causal model. Blocks of --block positions are counted from position 0 (the first one
// decoded may hold the prompt's last tokens), the canvas runs to a whole number of blocks, and a
// block is decoded while every earlier block is final: as a block-causal position sees only its
// own block and the earlier ones, the earlier blocks' K/V stay in the cache exactly and a step
// computes one block's rows (the first step also the prompt's whole blocks; a block's first
// step also the previous block's rows once, with its final tokens).
//
//   LLaDA2.0 (no --editing-threshold): --block-steps steps per block (default: the block
//     length) with a quota of m / steps of its m masks per step (the remainder to the first
//     steps); a step commits every mask whose probability is >= --threshold (default 0.95) when
//     there are at least the quota of them, else the quota's most confident masks.
//   LLaDA2.1 (--editing-threshold E): a step commits every mask at --threshold, or the most
//     confident one, and replaces every token of the block committed before it (not the
//     prompt's) whose argmax is another token with probability > E. A step that starts without
//     a mask is a post-step; the block ends after one without an edit, or after
//     --max-post-steps of them.
// Generation stops after a block that holds end of text. Greedy: the argmax and its softmax
// probability (the fused head's statistics where no logits row is needed).
#pragma once

#include <memory>
#include <span>

#include "decode/policy.h"
#include "decode/stepper.h"

namespace llada::decode {

// The threshold LLaDA2.0's generate() commits at when --threshold is not given.
inline constexpr double kLlada2Threshold = 0.95;

// Rejects what the policy cannot run, naming it: a model that does not attend block-causally, the
// options it does not take. (The stepper also refuses a --block other than its session's
// attention blocks.)
void check_block_diffusion(const model::Model& model, const GenerateOptions& opt,
                           const TokenIds& ids);
// The canvas of a prompt of prompt_len and opt.gen positions: up to a whole number of blocks.
int block_diffusion_canvas(const GenerateOptions& opt, int prompt_len);

std::unique_ptr<Stepper> make_block_diffusion_stepper(const model::Model& model,
                                                      const GenerateOptions& opt,
                                                      const TokenIds& ids,
                                                      std::span<const int32_t> prompt);

}  // namespace llada::decode
