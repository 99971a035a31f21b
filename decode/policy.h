// Decoding policies: how a canvas of masked positions becomes text. A policy knows tokens and
// logits; it asks a model::Session for the logits of the rows it needs and decides what to commit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "decode/noise.h"
#include "model/model.h"
#include "runtime/device.h"

namespace llada::decode {

enum class Remasking { LowConfidence, Random };
const char* remasking_name(Remasking r);

// Special token ids a policy needs.
struct TokenIds {
    int32_t mask = -1;
    int32_t eos = -1;  // end of text (-1 if none)
    int32_t eot = -1;  // end of turn (-1 if none)
};

struct GenerateOptions {
    int gen = 64;    // generated positions
    int steps = 64;  // denoising steps in total (split evenly over blocks)
    int block = 32;  // block length
    double temperature = 0.0;
    double cfg = 0.0;  // classifier-free guidance scale w (0 = off)
    Remasking remasking = Remasking::LowConfidence;
    uint64_t seed = 0;
    // Replaces the seeded generator (tests replay the reference's recorded draws).
    NoiseSource* noise = nullptr;

    // Parallel commit rules (instead of the fixed schedule); 0 = off. threshold: commit every
    // masked position of the block whose confidence >= threshold, at least the most confident.
    // factor: the n-th most confident needs >= 1 - factor / (n + 1), at least one.
    double threshold = 0.0;
    double factor = 0.0;
    // Cached policies: a full forward refreshes every K/V at the start of each block and, if
    // refresh > 0, every `refresh` steps within it (refresh = 1 makes every step a full forward).
    int refresh = 0;
    // Stop once a completed block holds an end-of-text token: everything the answer can contain
    // is then decided. -1 = the policy's default (off for vanilla, on otherwise).
    int early_stop = -1;
    // Allow the fused LM-head kernel (argmax and confidence without vocabulary-wide logits)
    // where the decision needs no full row (T = 0, no CFG); false forces full logits.
    bool fused_sampling = true;
    // Kernel choices (table-driven exp / int4 dequantisation), passed to the model's plans.
    runtime::PlanOptions kernels;
};

// One denoising step as it happened.
struct StepInfo {
    int step = 0;           // global step index
    int block = 0;          // block index
    int step_in_block = 0;  // step within the block
    int committed = 0;      // positions decided at this step
    int64_t rows = 0;       // transformer rows computed at this step
    int64_t lm_head_rows = 0;
    double ms = 0.0;  // host wall time of the step
};

// What a live view needs after each step.
struct StepEvent {
    const StepInfo& info;
    int total_steps;
    int prompt_len;
    std::span<const int32_t> canvas;     // the whole canvas after the step
    std::span<const int32_t> committed;  // positions decided at this step
};
using StepCallback = std::function<void(const StepEvent&)>;

struct GenerateResult {
    std::vector<int32_t> canvas;  // prompt + generated positions
    int prompt_len = 0;
    std::vector<StepInfo> steps;
    model::ForwardStats stats;
    double wall_s = 0.0;
    bool stopped_early = false;  // positions after the stop were filled with end-of-text

    // The generated ids, prompt excluded.
    std::vector<int32_t> generated() const;
    // The generated ids up to (not including) the first EOS / end-of-turn token.
    std::vector<int32_t> answer(const TokenIds& ids) const;
};

class Policy {
  public:
    virtual ~Policy() = default;
    virtual const char* name() const = 0;
    // Throws llada::Error for impossible requests (prompt + gen past the context, ...).
    virtual GenerateResult generate(std::span<const int32_t> prompt,
                                    const StepCallback& on_step = {}) = 0;
};

// Names of the available policies, for --help and errors.
std::vector<std::string> policy_names();

// Builds a policy; throws llada::Error for an unknown name or options it cannot honour.
std::unique_ptr<Policy> make_policy(const std::string& name, const model::Model& model,
                                    runtime::Device& device, const GenerateOptions& options,
                                    const TokenIds& ids);

// LLaDA's get_num_transfer_tokens: how many of `masked` positions each of `steps` steps commits
// (base = masked / steps, the first masked % steps steps one more).
std::vector<int> num_transfer_tokens(int masked, int steps);
// The same into `out` (its capacity reused).
void num_transfer_tokens(int masked, int steps, std::vector<int>& out);

}  // namespace llada::decode
