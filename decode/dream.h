// Dream's own sampler (the `dream` policy, decode/dream.cpp) for n candidates of one prompt in
// one batch: test-time scaling's candidates and the policy alone (n = 1) run the same loop.
#pragma once

#include <span>
#include <vector>

#include "decode/policy.h"

namespace llada::decode {

// Each step, every candidate that still has masked positions adds its whole canvas, on its own
// cache sequence, to one forward. Candidate k samples with seed opt.seed + k (opt.noise, when
// given, serves a single candidate). `on_step` is called after each step when n == 1; `batch`,
// when given, receives the batch's counts. Throws llada::Error for the options the policy
// refuses and for n < 1.
std::vector<GenerateResult> dream_batch(const model::Model& model, runtime::Device& device,
                                        const GenerateOptions& opt, const TokenIds& ids,
                                        std::span<const int32_t> prompt, int n,
                                        const StepCallback& on_step = nullptr,
                                        model::ForwardStats* batch = nullptr);

}  // namespace llada::decode
