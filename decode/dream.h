// Dream's own sampler (the `dream` policy, decode/dream.cpp) as a stepper (decode/stepper.h):
// the policy alone, test-time scaling's candidates and the server's requests run it on the
// Scheduler.
#pragma once

#include <memory>
#include <span>

#include "decode/policy.h"
#include "decode/stepper.h"

namespace llada::decode {

// Rejects what Dream's sampler cannot run, naming it (a causal model, no mask token, the
// LLaDA policies' options, out-of-range --dream-alg / --eps / --top-p / --top-k / --alg-temp).
void check_dream_options(const model::Model& model, const GenerateOptions& opt,
                         const TokenIds& ids);

// Each step computes the whole canvas on the generation's own cache sequence and samples its
// masked positions; the generation ends after opt.steps steps. It samples with opt.noise, else
// with its own noise of seed opt.seed. Throws llada::Error for what check_dream_options
// refuses, an empty or out-of-vocabulary prompt, a canvas past the context.
std::unique_ptr<Stepper> make_dream_stepper(const model::Model& model, const GenerateOptions& opt,
                                            const TokenIds& ids, std::span<const int32_t> prompt);

}  // namespace llada::decode
