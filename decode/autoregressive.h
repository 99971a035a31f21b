// The `ar` policy as a stepper (decode/stepper.h): token-by-token decoding of a causal model,
// the autoregressive baseline, on the same Scheduler as the diffusion policies.
#pragma once

#include <memory>
#include <span>

#include "decode/policy.h"
#include "decode/stepper.h"

namespace llada::decode {

// Rejects what no autoregressive generation can run, naming it: a bidirectional model, a
// non-positive --gen, a negative temperature, --cfg.
void check_autoregressive(const model::Model& model, const GenerateOptions& opt);

// The first step prefills the prompt (its rows write the prompt's K/V; the last one predicts);
// each later step is one row, the newest token against the generation's cache. A step's token
// is checked as the policy's (a finite logit, a spellable id); generation ends at EOS / end of
// turn or after `gen` tokens, the positions after an early stop reading as end of text. The
// generation samples with opt.noise, else with its own noise of seed opt.seed. Candidates of one
// prompt share the prefill on the Scheduler (identical rows are computed once). Throws
// llada::Error for what check_autoregressive refuses, an empty or out-of-vocabulary prompt, a
// canvas past the context.
std::unique_ptr<Stepper> make_ar_stepper(const model::Model& model, const GenerateOptions& opt,
                                         const TokenIds& ids, std::span<const int32_t> prompt);

}  // namespace llada::decode
