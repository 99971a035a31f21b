// The autoregressive loop behind the `ar` policy and its test-time scaling (decode/tts.h): one
// token per step for each of n generations of one prompt, in one batch.
#pragma once

#include <span>
#include <vector>

#include "decode/policy.h"

namespace llada::decode {

// The prompt is prefilled once (sequence 0) and its K/V copied to every generation's sequence;
// each later step is one forward of one row per live generation (its newest token against its
// own cache). Generation k samples with seed opt.seed + k (opt.noise, when given, serves a
// single generation). Every step's token is checked as the policy alone checks it (a finite
// logit, a spellable id). `on_step` is called after each step when n == 1. Throws llada::Error
// for a bidirectional model, --cfg, an empty or out-of-vocabulary prompt, n < 1. `batch`, when
// given, receives the batch's counts (forwards and rows of all generations together).
std::vector<GenerateResult> autoregressive_generate(const model::Model& model,
                                                    runtime::Device& device,
                                                    const GenerateOptions& opt, const TokenIds& ids,
                                                    std::span<const int32_t> prompt, int n,
                                                    const StepCallback& on_step = nullptr,
                                                    model::ForwardStats* batch = nullptr);

}  // namespace llada::decode
