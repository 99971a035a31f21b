// The diffusion policies (`vanilla`, `prefix-cache`, `dual-cache`, `threshold`, `need`, `mbsd`):
// one generation on the step engine (decode/generator.cpp says what each policy computes), run
// to completion on a session of its own.
#include <chrono>

#include "decode/generator.h"
#include "decode/lookahead.h"
#include "decode/policy.h"
#include "decode/scheduler.h"
#include "util/error.h"

namespace llada::decode {
namespace {

class DiffusionPolicy : public Policy {
  public:
    DiffusionPolicy(const std::string& name, const model::Model& model, runtime::Device& device,
                    const GenerateOptions& opt, const TokenIds& ids)
        : model_(model),
          device_(device),
          opt_(opt),
          ids_(ids),
          cfg_(configure_diffusion(name, opt)) {
        validate_common_options(opt, ids, model);
    }

    const char* name() const override { return cfg_.name; }

    GenerateResult generate(std::span<const int32_t> prompt, const StepCallback& on_step) override {
        const auto t0 = std::chrono::steady_clock::now();
        const int P = static_cast<int>(prompt.size());
        check_canvas_fits(model_, P, opt_.gen);
        const int L = P + opt_.gen;
        const SessionShape shape = session_shape(cfg_, opt_, L);
        // The cache may hold scratch slots past the context (--revise-tail dense); the
        // canvas itself was checked against it above.
        runtime::KvCache kv = session_cache(model_, shape, opt_);
        model::Session session(model_, device_, kv, shape.rows, shape.rows, opt_.kernels);
        const ForwardCost* cost = nullptr;
        if (cfg_.speculate && opt_.lookahead < 0)
            cost = &costs_.get(session, opt_, int64_t{shape.n_seq} * L, L);
        Generator g(model_, opt_, ids_, cfg_, prompt, cost);
        Scheduler sched(session);
        sched.add(g);
        const int total = cfg_.rule == CommitRule::Schedule ? opt_.steps : opt_.gen;
        while (!g.done()) {
            sched.step();
            if (on_step) {
                on_step({g.last_step(), total, P, g.result().canvas, g.last_committed(), g.states(),
                         g.drafts(), g.last_revised()});
            }
        }
        sched.remove(g);
        GenerateResult res = g.take_result();
        res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return res;
    }

  private:
    const model::Model& model_;
    runtime::Device& device_;
    GenerateOptions opt_;
    TokenIds ids_;
    DiffusionConfig cfg_;
    // The forward cost that sizes mbsd's lookahead, once per canvas shape.
    LookaheadCosts costs_;
};

}  // namespace

std::unique_ptr<Policy> make_diffusion_policy(const std::string& name, const model::Model& model,
                                              runtime::Device& device, const GenerateOptions& opt,
                                              const TokenIds& ids) {
    return std::make_unique<DiffusionPolicy>(name, model, device, opt, ids);
}

}  // namespace llada::decode
