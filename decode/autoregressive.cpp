// The `ar` policy: token-by-token decoding of a causal model (the autoregressive baseline) with
// an incremental KV cache, in the same engine and kernels as the diffusion policies.
//
// The prompt is prefilled in one forward; then every step computes one row (the newest token)
// against the cache and samples the next token: argmax at T = 0, otherwise Gumbel-max, which
// draws from softmax(logits / T); at T = 0 the fused LM head gives the argmax without writing
// a logits row (unless fused sampling is off). Generation stops at EOS / end of turn or after `gen`
// tokens.
#include <chrono>
#include <cmath>

#include "decode/policy.h"
#include "decode/sampling.h"
#include "util/error.h"

namespace llada::decode {
namespace {

class AutoregressivePolicy : public Policy {
  public:
    AutoregressivePolicy(const model::Model& model, runtime::Device& device,
                         const GenerateOptions& opt, const TokenIds& ids)
        : model_(model), device_(device), opt_(opt), ids_(ids) {
        if (!model.hparams().causal) {
            throw Error("policy 'ar' needs an autoregressive model; '" + model.hparams().arch +
                        "' is bidirectional (use a diffusion policy such as vanilla)");
        }
        if (opt.gen <= 0) throw Error("--gen must be positive, got " + std::to_string(opt.gen));
        if (!(opt.temperature >= 0.0)) throw Error("--temperature must be >= 0");
        if (opt.cfg != 0.0) throw Error("--cfg is not available with policy 'ar'");
    }

    const char* name() const override { return "ar"; }

    GenerateResult generate(std::span<const int32_t> prompt, const StepCallback& on_step) override {
        const auto t0 = std::chrono::steady_clock::now();
        const int P = static_cast<int>(prompt.size());
        if (P == 0) throw Error("policy 'ar' needs a prompt of at least one token");
        check_canvas_fits(model_, P, opt_.gen);
        check_prompt_ids(model_, prompt);
        const int L = P + opt_.gen;
        const int64_t V = model_.hparams().n_vocab;
        model::Session session(model_, device_, 1, L, P, 1, opt_.kernels);
        CounterNoise own_noise(opt_.seed);
        NoiseSource& noise = opt_.noise ? *opt_.noise : own_noise;

        GenerateResult res;
        res.prompt_len = P;
        // Reserved up front: batches point into the canvas while it grows.
        res.canvas.reserve(L);
        res.canvas.assign(prompt.begin(), prompt.end());
        std::vector<int32_t> pos(P), seq(P, 0);
        for (int p = 0; p < P; ++p)
            pos[p] = p;
        int32_t last_row = P - 1;
        runtime::Batch batch{P, res.canvas.data(), pos.data(), seq.data(), 1, &last_row, nullptr};
        bool done = false;
        for (int step = 0; step < opt_.gen && !done; ++step) {
            const auto ts = std::chrono::steady_clock::now();
            const int64_t rows_before = session.stats().rows;
            int32_t next = -1;
            if (opt_.temperature == 0.0 && opt_.fused_sampling) {
                // Greedy: the fused LM head's argmax, no vocabulary-wide logits row written.
                const kernels::RowStats& st = *session.forward_stats(batch);
                check_finite_logit(st.token < 0 ? NAN : st.max, P + step);
                next = st.token;
            } else {
                const float* logits = session.forward(batch);
                if (opt_.temperature > 0.0) noise.next_draw(V);
                next = pick_candidate(logits, V, opt_.temperature, noise, 0).token;
                check_finite_logit(logits[next], P + step);
            }
            check_spellable(ids_, next, P + step);
            res.canvas.push_back(next);
            done = next == ids_.eos || next == ids_.eot;
            // The next forward is the new token alone, at the next position.
            const int32_t p = P + step;
            pos[0] = p;
            seq[0] = 0;
            last_row = 0;
            batch =
                runtime::Batch{1, &res.canvas[p], pos.data(), seq.data(), 1, &last_row, nullptr};
            StepInfo info;
            info.step = step;
            info.committed = 1;
            info.rows = session.stats().rows - rows_before;
            info.lm_head_rows = 1;
            info.ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ts)
                    .count();
            res.steps.push_back(info);
            const int32_t at = p;
            if (on_step) on_step({res.steps.back(), opt_.gen, P, res.canvas, {&at, 1}});
        }
        // Positions after an early stop read as end of text, as a diffusion canvas would.
        res.canvas.resize(L, ids_.eos >= 0 ? ids_.eos : ids_.eot);
        res.stats = session.stats();
        res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return res;
    }

  private:
    const model::Model& model_;
    runtime::Device& device_;
    GenerateOptions opt_;
    TokenIds ids_;
};

}  // namespace

std::unique_ptr<Policy> make_autoregressive_policy(const model::Model& model,
                                                   runtime::Device& device,
                                                   const GenerateOptions& opt,
                                                   const TokenIds& ids) {
    return std::make_unique<AutoregressivePolicy>(model, device, opt, ids);
}

}  // namespace llada::decode
