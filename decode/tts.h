// Test-time scaling: N candidates of one prompt decoded together, each step one forward over
// every live candidate's window rows (decode::Scheduler; each candidate its own cache
// sequence), and the rules that choose one of them. Candidate k samples with seed opt.seed + k;
// diversity comes from Gumbel-noised sampling (T > 0) or random remasking. While candidates'
// windows are identical (their first step, every step at T = 0 with the same seed), the
// scheduler computes them once: the prompt's K/V are computed once and shared.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "decode/policy.h"

namespace llada::decode {

struct CandidatesResult {
    std::vector<GenerateResult> candidates;  // in seed order
    int64_t forwards = 0;                    // forwards of the batch (not per candidate)
    int64_t rows = 0;                        // window rows of the batch
    double wall_s = 0.0;
};

// Decodes `n` candidates of `prompt` with the diffusion policy `policy` (any of the step
// engine's) in one batch. Throws llada::Error for n < 1 or impossible options.
CandidatesResult generate_candidates(const std::string& policy, const model::Model& model,
                                     runtime::Device& device, const GenerateOptions& opt,
                                     const TokenIds& ids, std::span<const int32_t> prompt, int n);

// --tts auto: the number of candidates a step's window can hold for about the price of one on
// this device (docs/step-engine.md, "Test-time scaling"): with r the rows one candidate's step
// asks for (the canvas for the full-window policies, the block for the others), the largest
// N <= max_n with cost(N r) <= 1.1 cost(r) on the device's latency table. Throws llada::Error
// when the device has no cost model. `cost_ms` receives cost(N r), the projected step.
int auto_candidates(const std::string& policy, const model::Model& model, runtime::Device& device,
                    const GenerateOptions& opt, int prompt_len, int max_n, double* cost_ms);

// Majority vote over the extracted answers: the answer most candidates gave wins; ties go to
// the answer whose candidates have the higher mean confidence, then to the earliest candidate.
// Empty answers abstain (they win only when every answer is empty). Returns the index of the
// chosen answer's first (earliest) candidate.
int select_by_vote(const std::vector<std::string>& answers, const std::vector<double>& confidence);
// The candidate with the highest mean committed confidence (ties: the earliest).
int select_by_confidence(const std::vector<double>& confidence);

}  // namespace llada::decode
