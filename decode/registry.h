// Every decoding policy by name: what family it is, which options it takes, how the step engine
// runs it, and the factory that builds its stepper. The one place in the project where a policy
// name is looked at: the tools, the server's request parser, test-time scaling and the benches
// ask a policy's PolicyInfo instead of comparing names. A new policy is a stepper (or a
// DiffusionConfig of the step engine) and one row of the table in registry.cpp.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "decode/lookahead.h"
#include "decode/policy.h"

namespace llada::decode {

class Stepper;
struct PolicyInfo;

// Which rows a step of the step engine computes (docs/step-engine.md).
enum class WindowMode {
    Full,    // the whole canvas every step (vanilla, threshold)
    Prefix,  // full refresh at each block start, then block + suffix (Fast-dLLM prefix cache)
    Dual,    // full refresh at each block start, then the block (Fast-dLLM dual cache)
    Need,    // windows of need: the block's masked rows, the rows whose K/V is stale, lookahead
};

enum class PolicyFamily {
    Diffusion,       // the step engine (decode/generator.h) on a masked-diffusion model
    Autoregressive,  // the AR baseline on a causal model (decode/autoregressive.h)
    Dream,           // Dream's own sampler (decode/dream.h)
    BlockDiffusion,  // LLaDA 2.x on a block-causal model (decode/block_diffusion.h)
};

// The option groups a policy takes beyond those every policy takes (gen, seed, temperature,
// top-k, test-time scaling, ...). An option of a group the policy does not take is refused,
// by the command-line tools and by the server alike, with not_taken()'s words.
enum class Takes {
    Blocks,        // --block: the canvas decoded block by block
    Steps,         // --steps: a step schedule (a parallel commit rule takes the steps it needs)
    CommitRule,    // --threshold / --factor
    Refresh,       // --refresh: the cache policies' periodic full refresh
    Revise,        // --revise: progressive revision
    SelfCheck,     // --self-check
    Lookahead,     // mbsd's speculation: --lookahead, --accept, --draft-input, ...
    Pipeline,      // --pipeline-*
    DreamSampler,  // --dream-alg, --alg-temp, --eps, --top-p
    BlockCausal,   // LLaDA 2.x's --block-steps, --editing-threshold, --max-post-steps
    NeedRefresh,   // --need-refresh: the windows of need's rule for the block's committed rows
};

// The stepper of one generation: `cost` sizes mbsd's lookahead (null: none available).
using StepperFactory = std::unique_ptr<Stepper> (*)(const PolicyInfo& policy,
                                                    const model::Model& model,
                                                    const GenerateOptions& opt, const TokenIds& ids,
                                                    std::span<const int32_t> prompt,
                                                    const ForwardCost* cost);
// A policy's checks of the model and options before any prompt is seen (throws llada::Error).
using PolicyCheck = void (*)(const PolicyInfo& policy, const model::Model& model,
                             const GenerateOptions& opt, const TokenIds& ids);

struct PolicyInfo {
    const char* name;
    PolicyFamily family;
    const char* summary;  // one line for --help and docs
    unsigned takes;       // bits of Takes
    // The step engine's configuration (PolicyFamily::Diffusion only).
    WindowMode window = WindowMode::Full;
    bool parallel_only =
        false;               // commits by a threshold whatever the options (threshold, pipeline)
    bool speculate = false;  // mbsd: lookahead rows in the next block(s) carry drafts
    bool pipeline = false;   // pipeline: the next block decodes beside the current one
    StepperFactory make = nullptr;
    PolicyCheck check = nullptr;
    // The session's attention blocks are the decoding blocks (--block), and its canvas runs to a
    // whole number of them (LLaDA 2.x on a block-causal model).
    bool block_causal = false;

    bool takes_option(Takes t) const { return (takes >> static_cast<unsigned>(t)) & 1u; }
    bool diffusion() const { return family == PolicyFamily::Diffusion; }
};

// Every policy, in the order --help lists them.
std::span<const PolicyInfo> policies();
// The policy called `name`, or null when there is none.
const PolicyInfo* find_policy(std::string_view name);
// The policy called `name`; throws llada::Error naming the available ones.
const PolicyInfo& policy_info(std::string_view name);
// "a, b, c": the names of the policies that take `t` (every policy when t is not given).
std::string policy_list();
std::string policies_taking(Takes t);
// The error text for an option of group `t` given to a policy that does not take it, in the
// caller's spelling of the option (`--lookahead` or `'lookahead'`) and of a policy name
// (`--policy ` or `policy `): "--lookahead applies to --policy mbsd, not need".
std::string not_taken(std::string_view option, Takes t, const PolicyInfo& p,
                      std::string_view policy_word = "--policy ");
// Whether the step engine itself refuses an option of group `t` that policy `p` does not take,
// with its own reason (a diffusion policy's commit rule, steps, refresh, revision and
// self-checks): the flag and request checks then leave it to the engine instead of not_taken.
bool engine_refuses(const PolicyInfo& p, Takes t);

}  // namespace llada::decode
