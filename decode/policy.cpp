// The policy registry and helpers shared by all policies.
#include "decode/policy.h"

#include "decode/registry.h"

#include "util/error.h"

namespace llada::decode {

// decode/stepper.cpp: every policy is one stepper run alone.
std::unique_ptr<Policy> make_stepper_policy(const std::string& name, const model::Model& model,
                                            runtime::Device& device, const GenerateOptions& opt,
                                            const TokenIds& ids);

const char* token_state_name(TokenState s) {
    switch (s) {
        case TokenState::Masked:
            return "masked";
        case TokenState::Draft:
            return "draft";
        case TokenState::Visible:
            return "visible";
        case TokenState::Stable:
            return "stable";
    }
    return "?";
}

const char* remasking_name(Remasking r) {
    return r == Remasking::LowConfidence ? "low_confidence" : "random";
}

const char* pipeline_verify_name(PipelineVerify v) {
    return v == PipelineVerify::Mask ? "mask" : v == PipelineVerify::Shadow ? "shadow" : "window";
}

bool parse_pipeline_verify(const std::string& name, PipelineVerify& out) {
    for (const PipelineVerify v :
         {PipelineVerify::Mask, PipelineVerify::Shadow, PipelineVerify::Window}) {
        if (name == pipeline_verify_name(v)) {
            out = v;
            return true;
        }
    }
    return false;
}

void use_trace_pipeline(const DecisionTrace& t, GenerateOptions& opt) {
    if (t.pipeline.depth == 0) return;
    opt.pipeline_depth = t.pipeline.depth;
    opt.pipeline_start = t.pipeline.start;
    parse_pipeline_verify(t.pipeline.verify, opt.pipeline_verify);
}

std::vector<int32_t> GenerateResult::generated() const {
    return std::vector<int32_t>(canvas.begin() + prompt_len, canvas.end());
}

std::vector<int32_t> GenerateResult::answer(const TokenIds& ids) const {
    std::vector<int32_t> out;
    for (size_t i = prompt_len; i < canvas.size(); ++i) {
        if (canvas[i] == ids.eos || canvas[i] == ids.eot) break;
        out.push_back(canvas[i]);
    }
    return out;
}

std::vector<std::string> policy_names() {
    std::vector<std::string> names;
    for (const PolicyInfo& p : policies())
        names.emplace_back(p.name);
    return names;
}

std::unique_ptr<Policy> make_policy(const std::string& name, const model::Model& model,
                                    runtime::Device& device, const GenerateOptions& options,
                                    const TokenIds& ids) {
    policy_info(name);  // an unknown name is refused, naming the available ones
    return make_stepper_policy(name, model, device, options, ids);
}

void num_transfer_tokens(int masked, int steps, std::vector<int>& out) {
    out.assign(steps, masked / steps);
    for (int i = 0; i < masked % steps; ++i)
        out[i] += 1;
}

std::vector<int> num_transfer_tokens(int masked, int steps) {
    std::vector<int> n;
    num_transfer_tokens(masked, steps, n);
    return n;
}

void RevisionSplit::add(const RevisionSplit& o) {
    right_to_wrong += o.right_to_wrong;
    wrong_to_right += o.wrong_to_right;
    wrong_to_wrong += o.wrong_to_wrong;
    remasks_of_right += o.remasks_of_right;
    remasks_of_wrong += o.remasks_of_wrong;
}

void GenerateResult::Revision::add(const Revision& o) {
    checks += o.checks;
    refreshes += o.refreshes;
    lane_only_steps += o.lane_only_steps;
    revisions += o.revisions;
    right_to_wrong += o.right_to_wrong;
    wrong_to_right += o.wrong_to_right;
    wrong_to_wrong += o.wrong_to_wrong;
    remasks += o.remasks;
    remasks_of_right += o.remasks_of_right;
    remasks_of_wrong += o.remasks_of_wrong;
    stabilised += o.stabilised;
    commit_to_stable_steps += o.commit_to_stable_steps;
    cpu_ms += o.cpu_ms;
    exposed_ms += o.exposed_ms;
    proj_dense_ms += o.proj_dense_ms;
    proj_cpu_ms += o.proj_cpu_ms;
    proj_merge_ms += o.proj_merge_ms;
    proj_contention_ms += o.proj_contention_ms;
    proj_step_ms += o.proj_step_ms;
}

RevisionSplit split_revisions(std::span<const RevisionEvent> events, int prompt_len,
                              std::span<const int32_t> reference, int32_t beyond, int32_t mask) {
    RevisionSplit g;
    for (const RevisionEvent& e : events) {
        const size_t i = static_cast<size_t>(e.pos - prompt_len);
        const int32_t want = i < reference.size() ? reference[i] : beyond;
        if (e.to == mask) {
            ++(e.from == want ? g.remasks_of_right : g.remasks_of_wrong);
        } else if (e.from == want) {
            ++g.right_to_wrong;
        } else if (e.to == want) {
            ++g.wrong_to_right;
        } else {
            ++g.wrong_to_wrong;
        }
    }
    return g;
}

}  // namespace llada::decode
