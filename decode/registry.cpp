// The table of policies (decode/registry.h): each row a name, what it takes, how the step engine
// runs it and its stepper's factory.
#include "decode/registry.h"

#include "decode/autoregressive.h"
#include "decode/block_diffusion.h"
#include "decode/dream.h"
#include "decode/generator.h"
#include "util/error.h"

namespace llada::decode {

namespace {

constexpr unsigned bit(Takes t) {
    return 1u << static_cast<unsigned>(t);
}
constexpr unsigned bits(std::initializer_list<Takes> ts) {
    unsigned b = 0;
    for (Takes t : ts)
        b |= bit(t);
    return b;
}

std::unique_ptr<Stepper> make_diffusion(const PolicyInfo& p, const model::Model& model,
                                        const GenerateOptions& opt, const TokenIds& ids,
                                        std::span<const int32_t> prompt, const ForwardCost* cost) {
    return std::make_unique<Generator>(model, opt, ids, configure_diffusion(p, opt), prompt, cost);
}
void check_diffusion(const PolicyInfo& p, const model::Model& model, const GenerateOptions& opt,
                     const TokenIds& ids) {
    configure_diffusion(p, opt);
    validate_common_options(opt, ids, model);
}

std::unique_ptr<Stepper> make_ar(const PolicyInfo&, const model::Model& model,
                                 const GenerateOptions& opt, const TokenIds& ids,
                                 std::span<const int32_t> prompt, const ForwardCost*) {
    return make_ar_stepper(model, opt, ids, prompt);
}
void check_ar(const PolicyInfo&, const model::Model& model, const GenerateOptions& opt,
              const TokenIds&) {
    check_autoregressive(model, opt);
}

std::unique_ptr<Stepper> make_dream(const PolicyInfo&, const model::Model& model,
                                    const GenerateOptions& opt, const TokenIds& ids,
                                    std::span<const int32_t> prompt, const ForwardCost*) {
    return make_dream_stepper(model, opt, ids, prompt);
}
void check_dream(const PolicyInfo&, const model::Model& model, const GenerateOptions& opt,
                 const TokenIds& ids) {
    check_dream_options(model, opt, ids);
}

std::unique_ptr<Stepper> make_llada2(const PolicyInfo&, const model::Model& model,
                                     const GenerateOptions& opt, const TokenIds& ids,
                                     std::span<const int32_t> prompt, const ForwardCost*) {
    return make_block_diffusion_stepper(model, opt, ids, prompt);
}
void check_llada2(const PolicyInfo&, const model::Model& model, const GenerateOptions& opt,
                  const TokenIds& ids) {
    check_block_diffusion(model, opt, ids);
}

using enum Takes;
using enum WindowMode;
constexpr auto D = PolicyFamily::Diffusion;

const PolicyInfo kPolicies[] = {
    {"vanilla", D, "LLaDA's reference: the whole canvas every step, a fixed schedule per block",
     bits({Blocks, Steps}), Full, false, false, false, make_diffusion, check_diffusion},
    {"prefix-cache", D,
     "Fast-dLLM's prefix cache: the block and what follows it, refreshed per block",
     bits({Blocks, Steps, CommitRule, Refresh, Revise}), Prefix, false, false, false,
     make_diffusion, check_diffusion},
    {"dual-cache", D, "Fast-dLLM's dual cache: the block's rows only, refreshed per block",
     bits({Blocks, Steps, CommitRule, Refresh, Revise}), Dual, false, false, false, make_diffusion,
     check_diffusion},
    {"threshold", D, "the whole canvas every step, committing by confidence (default 0.9)",
     bits({Blocks, CommitRule, Revise}), Full, true, false, false, make_diffusion, check_diffusion},
    {"need", D, "windows of need: the rows a step needs, prefix K/V kept exact",
     bits({Blocks, Steps, CommitRule, Revise, SelfCheck, NeedRefresh}), Need, false, false, false,
     make_diffusion, check_diffusion},
    {"mbsd", D, "need + multi-block speculation: the next blocks' rows drafted in the same forward",
     bits({Blocks, Steps, CommitRule, Revise, SelfCheck, Lookahead, NeedRefresh}), Need, false,
     true, false, make_diffusion, check_diffusion},
    {"pipeline", D, "need + pipelined blocks: later blocks decode beside the current one",
     bits({Blocks, CommitRule, Pipeline, NeedRefresh}), Need, true, false, true, make_diffusion,
     check_diffusion},
    {"ar", PolicyFamily::Autoregressive,
     "the autoregressive baseline (a causal model, greedy or sampled)", 0u, Full, false, false,
     false, make_ar, check_ar},
    {"dream", PolicyFamily::Dream, "Dream's sampler: the canvas as one span, its own algorithms",
     bits({Steps, DreamSampler}), Full, false, false, false, make_dream, check_dream},
    {"llada2", PolicyFamily::BlockDiffusion,
     "LLaDA 2.x: blocks from position 0, earlier blocks cached, threshold 0.95 (+ token editing)",
     bits({Blocks, CommitRule, BlockCausal}), Full, false, false, false, make_llada2, check_llada2,
     true},
};

}  // namespace

std::span<const PolicyInfo> policies() {
    return kPolicies;
}

std::string policy_list() {
    std::string s;
    for (const PolicyInfo& p : kPolicies)
        s += (s.empty() ? "" : ", ") + std::string(p.name);
    return s;
}

std::string policies_taking(Takes t) {
    std::string s;
    for (const PolicyInfo& p : kPolicies)
        if (p.takes_option(t)) s += (s.empty() ? "" : ", ") + std::string(p.name);
    return s;
}

const PolicyInfo* find_policy(std::string_view name) {
    for (const PolicyInfo& p : kPolicies)
        if (name == p.name) return &p;
    return nullptr;
}

const PolicyInfo& policy_info(std::string_view name) {
    if (const PolicyInfo* p = find_policy(name)) return *p;
    throw Error("unknown policy '" + std::string(name) + "' (available: " + policy_list() + ")");
}

std::string not_taken(std::string_view option, Takes t, const PolicyInfo& p,
                      std::string_view policy_word) {
    const std::string takers = policies_taking(t);
    const std::string whom = takers.find(',') == std::string::npos
                                 ? std::string(policy_word) + takers
                                 : "the policies " + takers;
    return std::string(option) + " applies to " + whom + ", not " + p.name;
}

bool engine_refuses(const PolicyInfo& p, Takes t) {
    return p.diffusion() && (t == Takes::CommitRule || t == Takes::Steps || t == Takes::Refresh ||
                             t == Takes::Revise || t == Takes::SelfCheck);
}

}  // namespace llada::decode
