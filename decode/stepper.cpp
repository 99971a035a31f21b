// Every policy as a stepper (decode/stepper.h), and the policy alone: one stepper on a session
// of its own, run to completion by the Scheduler.
#include "decode/stepper.h"

#include <algorithm>
#include <chrono>

#include "decode/block_diffusion.h"
#include "decode/generator.h"
#include "decode/lookahead.h"
#include "decode/policy.h"
#include "decode/registry.h"
#include "decode/scheduler.h"
#include "util/error.h"

namespace llada::decode {
bool is_diffusion(const std::string& policy) {
    return policy_info(policy).diffusion();
}

namespace {

class StepperPolicy : public Policy {
  public:
    StepperPolicy(const std::string& name, const model::Model& model, runtime::Device& device,
                  const GenerateOptions& opt, const TokenIds& ids)
        : name_(name), model_(model), device_(device), opt_(opt), ids_(ids) {
        const PolicyInfo& p = policy_info(name_);
        p.check(p, model, opt, ids);
    }

    const char* name() const override { return name_.c_str(); }

    GenerateResult generate(std::span<const int32_t> prompt, const StepCallback& on_step) override {
        const auto t0 = std::chrono::steady_clock::now();
        GenerationSession gs(name_, model_, device_, opt_, static_cast<int>(prompt.size()), 1,
                             costs_);
        std::unique_ptr<Stepper> s = gs.stepper(opt_, ids_, prompt);
        GenerateResult res = run_alone(*s, gs.session(), on_step);
        res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return res;
    }

  private:
    std::string name_;
    const model::Model& model_;
    runtime::Device& device_;
    GenerateOptions opt_;
    TokenIds ids_;
    // The forward cost that sizes mbsd's lookahead, once per canvas shape.
    LookaheadCosts costs_;
};

}  // namespace

std::vector<TokenState> fresh_states(int prompt_len, int canvas_len) {
    std::vector<TokenState> s(static_cast<size_t>(canvas_len), TokenState::Masked);
    std::fill(s.begin(), s.begin() + prompt_len, TokenState::Stable);
    return s;
}

void record_step_cost(GenerateResult& res, int64_t device_rows, double ms) {
    StepInfo& s = res.steps.back();
    res.rows_device += device_rows - s.rows_device;
    s.rows_device = device_rows;
    s.ms = ms;
}

int sequences_per_generation(const GenerateOptions& opt) {
    return opt.cfg > 0.0 ? 2 : 1;
}

SessionShape session_shape(const std::string& policy, const GenerateOptions& opt, int prompt_len,
                           int canvas_len, int n) {
    const PolicyInfo& p = policy_info(policy);
    if (p.diffusion()) return session_shape(configure_diffusion(p, opt), opt, canvas_len, n);
    SessionShape s;
    s.n_seq = n;
    s.n_pos = canvas_len;
    if (p.block_causal) {
        // A whole number of blocks; the first step computes the prompt's blocks and one more,
        // a block's first step the previous block and itself.
        s.n_pos = block_diffusion_canvas(opt, prompt_len);
        s.rows = s.outs = int64_t{n} * s.n_pos;
    } else if (p.family == PolicyFamily::Autoregressive) {
        // The prompt's prefill (computed once for candidates of one prompt), then one row per
        // live generation.
        s.rows = std::max(prompt_len, n);
        s.outs = n;
    } else {
        s.rows = s.outs = int64_t{n} * canvas_len;  // Dream: each step a full canvas
    }
    return s;
}

SessionShape shared_session_shape(int n_seq, int canvas_len, bool check_slots) {
    SessionShape s;
    s.n_seq = n_seq;
    const int64_t per_position = check_slots ? 2 : 1;
    s.n_pos = per_position * canvas_len;
    s.rows = s.outs = per_position * n_seq * canvas_len;
    return s;
}

runtime::KvCache session_cache(const model::Model& model, const SessionShape& shape,
                               const GenerateOptions& opt) {
    const model::Hparams& hp = model.hparams();
    return runtime::KvCache(hp.n_layer, shape.n_seq, static_cast<int>(shape.n_pos), hp.n_kv_head,
                            hp.head_dim, opt.kernels.kv_f16);
}

bool needs_lookahead_cost(const std::string& policy, const GenerateOptions& opt) {
    const PolicyInfo& p = policy_info(policy);
    return p.diffusion() && configure_diffusion(p, opt).speculate && opt.lookahead < 0;
}

std::unique_ptr<Stepper> make_stepper(const std::string& policy, const model::Model& model,
                                      const GenerateOptions& opt, const TokenIds& ids,
                                      std::span<const int32_t> prompt, const ForwardCost* cost) {
    const PolicyInfo& p = policy_info(policy);
    return p.make(p, model, opt, ids, prompt, cost);
}

namespace {

SessionShape checked_shape(const std::string& policy, const model::Model& model,
                           const GenerateOptions& opt, int prompt_len, int n) {
    check_canvas_fits(model, prompt_len, opt.gen);
    return session_shape(policy, opt, prompt_len, prompt_len + opt.gen, n);
}

}  // namespace

// The cache may hold scratch slots past the context (--revise-tail dense); the canvas itself is
// checked against it first.
GenerationSession::GenerationSession(const std::string& policy, const model::Model& model,
                                     runtime::Device& device, const GenerateOptions& opt,
                                     int prompt_len, int n, LookaheadCosts& costs)
    : policy_(policy),
      model_(model),
      shape_(checked_shape(policy, model, opt, prompt_len, n)),
      kv_(session_cache(model, shape_, opt)),
      kernels_(session_kernels(policy, opt)),
      session_(model, device, kv_, shape_.rows, shape_.outs, kernels_) {
    // mbsd --lookahead auto: a generation sizes its lookahead on one generation's cost table
    // (as if alone; other candidates' rows in the same forward are not weighed).
    if (needs_lookahead_cost(policy, opt)) {
        const int64_t L = prompt_len + opt.gen;
        cost_ = &costs.get(session_, opt, int64_t{sequences_per_generation(opt)} * L, L);
    }
}

std::unique_ptr<Stepper> GenerationSession::stepper(const GenerateOptions& opt, const TokenIds& ids,
                                                    std::span<const int32_t> prompt) const {
    GenerateOptions o = opt;
    o.kernels = kernels_;  // what the session's plans were built with
    return make_stepper(policy_, model_, o, ids, prompt, cost_);
}

runtime::PlanOptions session_kernels(const std::string& policy, const GenerateOptions& opt) {
    runtime::PlanOptions k = opt.kernels;
    if (policy_info(policy).block_causal) k.attention_block = opt.block;
    return k;
}

std::unique_ptr<Policy> make_stepper_policy(const std::string& name, const model::Model& model,
                                            runtime::Device& device, const GenerateOptions& opt,
                                            const TokenIds& ids) {
    return std::make_unique<StepperPolicy>(name, model, device, opt, ids);
}

}  // namespace llada::decode
