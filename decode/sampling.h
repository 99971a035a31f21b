// The per-position decisions every policy shares: guided logits, the candidate token (argmax,
// or Gumbel-max sampling with noise in float64 as the reference does), its confidence, and the
// top-k selection over positions; plus the option checks common to all policies.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "decode/noise.h"
#include "decode/policy.h"

namespace llada::decode {

struct Candidate {
    int32_t token = -1;
    float confidence = 0.0f;
};

// out = u + (w + 1) * (c - u), in float32 as the reference computes it.
void guide(const float* cond, const float* uncond, float w, float* out, int64_t n);

// Candidate token of a logits row: argmax for T = 0 (first maximum); for T > 0 the argmax of
// exp(l) / (-log(u))^T in float64, u = noise.at(noise_offset + v) from the current draw.
// `banned` (if >= 0) is never chosen.
// `filter` (T > 0 only) restricts the choice to its tokens (SampleFilter); the draw is the
// same, so a token the filter keeps wins exactly when it would have won among those tokens.
Candidate pick_candidate(const float* logits, int64_t n_vocab, double temperature,
                         const NoiseSource& noise, int64_t noise_offset, int32_t banned = -1,
                         const SampleFilter& filter = {});

// Whether entry v of a logits row passes `filter`: top_k by logit (ties to the lower index),
// then logit >= max + log(min_p). `banned` is never kept. Writes n_vocab flags to `keep`.
void filter_tokens(const float* logits, int64_t n_vocab, int32_t banned, const SampleFilter& filter,
                   std::vector<uint8_t>& keep);

// softmax(logits)[token], accumulated in double.
float softmax_prob(const float* logits, int64_t n_vocab, int32_t token);

// Indices (into `cand`) of the k highest confidences, ties to the lower index, written to `out`
// in ascending index order (out's capacity is reused: no allocation once warm).
void select_top_k(const std::vector<Candidate>& cand, int k, std::vector<int>& out);

// Parallel commit rules over candidates (indices returned ascending, at least one if any):
// every candidate with confidence >= tau, or by the factor rule the n-th most confident
// (n = 1, 2, ...) needs >= 1 - factor / (n + 1).
void select_by_threshold(const std::vector<Candidate>& cand, double tau, std::vector<int>& out);
void select_by_factor(const std::vector<Candidate>& cand, double factor, std::vector<int>& out);

// Checks shared by all policies; throw llada::Error with the problem named.
void validate_common_options(const GenerateOptions& opt, const TokenIds& ids,
                             const model::Model& model);
// The n most likely tokens of a logits row (logit descending, ties to the lower index) with
// their log-softmax, written to `out`.
void top_logprobs(const float* logits, int64_t n_vocab, int n,
                  std::vector<GenerateResult::TokenLogprob>& out);
// log softmax(logits)[token], in double.
double log_softmax_at(const float* logits, int64_t n_vocab, int32_t token);

// top_k >= 0, min_p in [0, 1], and either only with a temperature above 0.
void check_sample_filter(const GenerateOptions& opt);
// LLaDA 2.x's block-causal models are not decoded by the LLaDA policies (whose blocks start
// after the prompt and see every block): refused, naming why.
void check_not_block_causal(const model::Model& model);
void check_canvas_fits(const model::Model& model, int prompt_len, int gen);
void check_prompt_ids(const model::Model& model, std::span<const int32_t> prompt);
// A token the decoder chose at position `pos` that the tokenizer cannot spell is an error now,
// not when the answer is detokenised after the whole generation.
void check_spellable(const TokenIds& ids, int32_t tok, int pos);
// The chosen token's logit (or the row's maximum) must be finite: a NaN or Inf weight makes a
// whole row NaN, and every comparison with NaN is false, so the argmax would silently be id 0.
void check_finite_logit(float logit, int pos);

}  // namespace llada::decode
