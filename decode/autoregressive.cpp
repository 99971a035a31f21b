// The `ar` policy: token-by-token decoding of a causal model (the autoregressive baseline) with
// an incremental KV cache, in the same engine and kernels as the diffusion policies.
//
// The prompt is prefilled in one forward; then every step computes one row (the newest token)
// against the cache and samples the next token: argmax at T = 0, otherwise Gumbel-max, which
// draws from softmax(logits / T); at T = 0 the fused LM head gives the argmax without writing
// a logits row (unless fused sampling is off). Generation stops at EOS / end of turn or after `gen`
// tokens.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "decode/autoregressive.h"
#include "decode/policy.h"
#include "decode/sampling.h"
#include "util/error.h"

namespace llada::decode {
namespace {

// Rejects what no autoregressive generation can run, naming it.
void check_autoregressive(const model::Model& model, const GenerateOptions& opt) {
    if (!model.hparams().causal) {
        throw Error("policy 'ar' needs an autoregressive model; '" + model.hparams().arch +
                    "' is bidirectional (use a diffusion policy such as vanilla)");
    }
    if (opt.gen <= 0) throw Error("--gen must be positive, got " + std::to_string(opt.gen));
    if (!(opt.temperature >= 0.0)) throw Error("--temperature must be >= 0");
    if (opt.cfg != 0.0) throw Error("--cfg is not available with policy 'ar'");
}

class AutoregressivePolicy : public Policy {
  public:
    AutoregressivePolicy(const model::Model& model, runtime::Device& device,
                         const GenerateOptions& opt, const TokenIds& ids)
        : model_(model), device_(device), opt_(opt), ids_(ids) {
        check_autoregressive(model, opt);
    }

    const char* name() const override { return "ar"; }

    GenerateResult generate(std::span<const int32_t> prompt, const StepCallback& on_step) override {
        return std::move(
            autoregressive_generate(model_, device_, opt_, ids_, prompt, 1, on_step)[0]);
    }

  private:
    const model::Model& model_;
    runtime::Device& device_;
    GenerateOptions opt_;
    TokenIds ids_;
};

}  // namespace

std::vector<GenerateResult> autoregressive_generate(const model::Model& model,
                                                    runtime::Device& device,
                                                    const GenerateOptions& opt, const TokenIds& ids,
                                                    std::span<const int32_t> prompt, int n,
                                                    const StepCallback& on_step,
                                                    model::ForwardStats* batch_stats) {
    const auto t0 = std::chrono::steady_clock::now();
    check_autoregressive(model, opt);
    if (n < 1) throw Error("autoregressive generation of " + std::to_string(n) + " candidates");
    if (opt.noise != nullptr && n > 1) throw Error("--tts draws each candidate's own noise");
    const int P = static_cast<int>(prompt.size());
    if (P == 0) throw Error("policy 'ar' needs a prompt of at least one token");
    check_canvas_fits(model, P, opt.gen);
    check_prompt_ids(model, prompt);
    const int L = P + opt.gen;
    const int64_t V = model.hparams().n_vocab;
    const int rows = std::max(P, n);
    model::Session session(model, device, n, L, rows, n, opt.kernels);
    std::vector<CounterNoise> own_noise;
    for (int k = 0; k < n; ++k)
        own_noise.emplace_back(opt.seed + static_cast<uint64_t>(k));
    std::vector<GenerateResult> out(static_cast<size_t>(n));
    for (auto& r : out) {
        r.prompt_len = P;
        r.canvas.reserve(L);
        r.canvas.assign(prompt.begin(), prompt.end());
    }
    std::vector<int32_t> tok(rows), pos(rows), seq(rows), outs(n), who(n);
    for (int p = 0; p < P; ++p) {
        tok[p] = prompt[p];
        pos[p] = p;
        seq[p] = 0;
    }
    outs[0] = P - 1;
    who[0] = 0;
    // At T = 0 the fused LM head gives the argmax without writing logits rows (unless fused
    // sampling is off); otherwise each row is sampled from the logits.
    const bool fused = opt.temperature == 0.0 && opt.fused_sampling;
    runtime::Batch batch{P, tok.data(), pos.data(), seq.data(), 1, outs.data(), nullptr};
    int m = 1;  // output rows of the forward: who[i] is the generation of row i
    for (int step = 0; step < opt.gen && m > 0; ++step) {
        const auto ts = std::chrono::steady_clock::now();
        const int64_t rows_before = session.stats().rows;
        const kernels::RowStats* stats = nullptr;
        const float* logits = nullptr;
        if (fused) {
            stats = session.forward_stats(batch);
        } else {
            logits = session.forward(batch);
        }
        if (step == 0) {
            for (int k = 1; k < n; ++k) {
                for (int p = 0; p < P; ++p)
                    session.kv().copy_slot(0, k, p);
            }
        }
        const int64_t step_rows = session.stats().rows - rows_before;
        // After the prefill every generation reads the prompt's one output row.
        const int n_gen = step == 0 ? n : m;
        int next_m = 0;
        for (int i = 0; i < n_gen; ++i) {
            const int k = step == 0 ? i : who[i];
            const int row = step == 0 ? 0 : i;
            NoiseSource& noise = opt.noise ? *opt.noise : own_noise[k];
            int32_t next = -1;
            float conf = 0.0f;
            if (fused) {
                const kernels::RowStats& st = stats[row];
                check_finite_logit(st.token < 0 ? NAN : st.max, P + step);
                next = st.token;
                conf = 1.0f / st.sum_exp;
            } else {
                const float* lr = logits + static_cast<int64_t>(row) * V;
                if (opt.temperature > 0.0) noise.next_draw(V);
                next = pick_candidate(lr, V, opt.temperature, noise, 0).token;
                check_finite_logit(lr[next], P + step);
                conf = softmax_prob(lr, V, next);
            }
            check_spellable(ids, next, P + step);
            GenerateResult& r = out[k];
            r.canvas.push_back(next);
            r.confidence_sum += conf;
            ++r.confidence_n;
            StepInfo info;
            info.step = step;
            info.committed = 1;
            info.rows = step == 0 ? step_rows : step_rows / n_gen;  // the prefill, then 1
            info.lm_head_rows = 1;
            info.ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ts)
                    .count();
            r.steps.push_back(info);
            if (on_step && n == 1) {
                const int32_t at = P + step;
                on_step({r.steps.back(), opt.gen, P, r.canvas, {&at, 1}});
            }
            if (next == ids.eos || next == ids.eot) continue;
            // The next forward: this generation's new token alone, at the next position.
            tok[next_m] = next;
            pos[next_m] = P + step;
            seq[next_m] = k;
            outs[next_m] = next_m;
            who[next_m] = k;
            ++next_m;
        }
        m = next_m;
        batch = runtime::Batch{m, tok.data(), pos.data(), seq.data(), m, outs.data(), nullptr};
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto& r : out) {
        // Positions after an early stop read as end of text, as a diffusion canvas would.
        r.canvas.resize(L, ids.eos >= 0 ? ids.eos : ids.eot);
        r.wall_s = wall;
    }
    if (batch_stats) *batch_stats = session.stats();
    if (n == 1) {
        out[0].stats = session.stats();
    } else {
        for (auto& r : out) {
            r.stats.forwards = static_cast<int64_t>(r.steps.size());
            for (const StepInfo& s : r.steps) {
                r.stats.rows += s.rows;
                r.stats.lm_head_rows += s.lm_head_rows;
            }
        }
    }
    return out;
}

std::unique_ptr<Policy> make_autoregressive_policy(const model::Model& model,
                                                   runtime::Device& device,
                                                   const GenerateOptions& opt,
                                                   const TokenIds& ids) {
    return std::make_unique<AutoregressivePolicy>(model, device, opt, ids);
}

}  // namespace llada::decode
