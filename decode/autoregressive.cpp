// The `ar` policy: token-by-token decoding of a causal model (the autoregressive baseline) with
// an incremental KV cache, in the same engine and kernels as the diffusion policies.
//
// The prompt is prefilled in one forward; then every step computes one row (the newest token)
// against the cache and samples the next token: argmax at T = 0, otherwise Gumbel-max, which
// draws from softmax(logits / T); at T = 0 the fused LM head gives the argmax without writing
// a logits row (unless fused sampling is off). Generation stops at EOS / end of turn or after `gen`
// tokens.
#include "decode/autoregressive.h"

#include <cmath>

#include "decode/sampling.h"
#include "util/error.h"

namespace llada::decode {
namespace {

class ArStepper : public Stepper {
  public:
    ArStepper(const model::Model& model, const GenerateOptions& opt, const TokenIds& ids,
              std::span<const int32_t> prompt)
        : opt_(opt), ids_(ids), V_(model.hparams().n_vocab), own_noise_(opt.seed) {
        check_autoregressive(model, opt);
        P_ = static_cast<int>(prompt.size());
        if (P_ == 0) throw Error("policy 'ar' needs a prompt of at least one token");
        check_canvas_fits(model, P_, opt.gen);
        check_prompt_ids(model, prompt);
        L_ = P_ + opt.gen;
        noise_ = opt_.noise ? opt_.noise : &own_noise_;
        // At T = 0 the fused LM head gives the argmax without writing logits rows (unless fused
        // sampling is off); otherwise each row is sampled from the logits.
        fused_ = opt.temperature == 0.0 && opt.fused_sampling && opt.logprobs <= 0;
        if (opt.logprobs >= 0) {
            res_.logprobs.assign(static_cast<size_t>(P_), NAN);
            if (opt.logprobs > 0) res_.top_logprobs.assign(static_cast<size_t>(P_), {});
        }
        res_.prompt_len = P_;
        res_.canvas.reserve(L_);
        res_.canvas.assign(prompt.begin(), prompt.end());
        res_.steps.reserve(opt.gen);
        states_ = fresh_states(P_, L_);
        drafts_.assign(L_, -1);  // none ever
        req_.rows.reserve(P_);
        req_.kv_len.assign(1, 0);
        req_.need_logits = !fused_;
    }

    int n_seq() const override { return 1; }
    int canvas_len() const override { return L_; }
    bool done() const override { return done_; }

    const StepRequest& plan_step() override {
        req_.rows.clear();
        if (step_ == 0) {
            for (int p = 0; p < P_; ++p)
                req_.rows.push_back({res_.canvas[p], p, 0, p, -1, p == P_ - 1});
        } else {
            const int32_t p = static_cast<int32_t>(res_.canvas.size()) - 1;
            req_.rows.push_back({res_.canvas[p], p, 0, p, -1, true});
        }
        req_.kv_len[0] = req_.rows.back().pos + 1;
        return req_;
    }

    void apply(std::span<const RowPrediction> preds, std::span<const RowPrediction>) override {
        const int32_t at = P_ + step_;
        int32_t next = -1;
        float conf = 0.0f;
        if (fused_) {
            const model::HeadStats& st = *preds[0].stats;
            check_finite_logit(st.token < 0 ? NAN : st.max, at);
            next = st.token;
            conf = 1.0f / st.sum_exp;
        } else {
            const float* lr = preds[0].logits;
            if (opt_.temperature > 0.0) noise_->next_draw(V_);
            next = pick_candidate(lr, V_, opt_.temperature, *noise_, 0, -1, opt_.filter).token;
            check_finite_logit(lr[next], at);
            conf = softmax_prob(lr, V_, next);
        }
        check_spellable(ids_, next, at);
        if (opt_.logprobs >= 0) {
            res_.logprobs.push_back(std::log(conf));
            if (opt_.logprobs > 0) {
                res_.top_logprobs.emplace_back();
                top_logprobs(preds[0].logits, V_, opt_.logprobs, res_.top_logprobs.back());
            }
        }
        res_.canvas.push_back(next);
        states_[at] = TokenState::Stable;
        committed_ = at;
        res_.confidence_sum += conf;
        ++res_.confidence_n;
        StepInfo info;
        info.step = step_;
        info.committed = 1;
        info.rows = static_cast<int64_t>(req_.rows.size());  // the prefill, then 1
        info.lm_head_rows = 1;
        res_.steps.push_back(info);
        res_.stats.forwards += 1;
        res_.stats.rows += info.rows;
        res_.stats.lm_head_rows += 1;
        ++step_;
        done_ = step_ == opt_.gen || next == ids_.eos || next == ids_.eot;
    }

    void record_cost(int64_t device_rows, double ms) override {
        record_step_cost(res_, device_rows, ms);
    }

    const GenerateResult& result() const override { return res_; }
    GenerateResult take_result() override {
        // Positions after an early stop read as end of text, as a diffusion canvas would.
        res_.canvas.resize(L_, ids_.eos >= 0 ? ids_.eos : ids_.eot);
        return std::move(res_);
    }
    std::span<const TokenState> states() const override { return states_; }
    std::span<const int32_t> drafts() const override { return drafts_; }
    StepEvent event() const override {
        return {last_step(), opt_.gen, P_, res_.canvas, {&committed_, 1}};
    }

  private:
    GenerateOptions opt_;
    TokenIds ids_;
    int64_t V_ = 0;
    CounterNoise own_noise_;
    NoiseSource* noise_ = nullptr;
    bool fused_ = false;
    int P_ = 0, L_ = 0, step_ = 0;
    bool done_ = false;
    int32_t committed_ = -1;
    GenerateResult res_;
    std::vector<TokenState> states_;
    std::vector<int32_t> drafts_;
    StepRequest req_;
};

}  // namespace

void check_autoregressive(const model::Model& model, const GenerateOptions& opt) {
    if (!model.hparams().causal) {
        throw Error("policy 'ar' needs an autoregressive model; '" + model.hparams().arch +
                    "' is bidirectional (use a diffusion policy such as vanilla)");
    }
    if (opt.gen <= 0) throw Error("--gen must be positive, got " + std::to_string(opt.gen));
    if (!(opt.temperature >= 0.0)) throw Error("--temperature must be >= 0");
    if (opt.cfg != 0.0) throw Error("--cfg is not available with policy 'ar'");
    check_sample_filter(opt);
}

std::unique_ptr<Stepper> make_ar_stepper(const model::Model& model, const GenerateOptions& opt,
                                         const TokenIds& ids, std::span<const int32_t> prompt) {
    return std::make_unique<ArStepper>(model, opt, ids, prompt);
}

}  // namespace llada::decode
