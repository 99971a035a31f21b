// The `dream` policy: Dream's own sampler (diffusion_generate), as docs/dream-decoding.md
// describes it and train/reference/dream.py reproduces it.
//
// The canvas (prompt + gen masks) is decoded as one span in exactly `steps` steps, each a full
// forward over the canvas, with the schedule timesteps = linspace(1, eps, steps + 1) in float32
// (torch's formula: the first half counted from 1, the second from eps). A step's masked rows
// are sampled as Dream's sample_tokens does (logits / T, then top-p, then top-k, then softmax;
// argmax at T = 0, else a categorical draw), and what is written depends on the algorithm:
//   origin        each masked position transfers with probability 1 - s/t (1 at the last step),
//                 by one uniform each; the transferring ones are then sampled;
//   maskgit_plus, topk_margin, entropy
//                 the k = int(n_mask * (1 - s/t)) most confident positions (all at the last
//                 step) take their tokens; with alg_temp > 0 the k are drawn without
//                 replacement from softmax(confidence / alg_temp) over the canvas.
// The sampling maths is float64 over the float32 logits; a categorical draw is argmax(p / q)
// with q = -log(u) (the exponential race of torch.multinomial) and ties go to the lowest id;
// a top-k choice of positions breaks ties by the lowest position. Shifted models (row p - 1
// predicts p) are read as Dream does, row 0 predicting itself.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "decode/dream.h"
#include "decode/policy.h"
#include "decode/sampling.h"
#include "util/error.h"

namespace llada::decode {
namespace {

// torch.linspace(1, eps, steps + 1) in float32, value for value.
std::vector<float> dream_timesteps(int steps, float eps) {
    const int n = steps + 1;
    const float start = 1.0f, end = eps;
    const float step = (end - start) / static_cast<float>(n - 1);
    std::vector<float> ts(n);
    for (int k = 0; k < n; ++k) {
        ts[k] = k < n / 2 ? start + step * static_cast<float>(k)
                          : end - step * static_cast<float>(n - 1 - k);
    }
    return ts;
}

// Buffers of filtered_probs, reused from row to row (a row is the vocabulary wide).
struct FilterScratch {
    std::vector<int32_t> order;
    std::vector<double> sorted;
};

// Dream's sample_tokens preprocessing of one row: probabilities after temperature, top-p and
// top-k (softmax in float64), into x.
void filtered_probs(const float* logits, int64_t V, const DreamOptions& d, double temperature,
                    std::vector<double>& x, FilterScratch& scratch) {
    x.resize(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v)
        x[v] = temperature > 0.0 ? static_cast<double>(logits[v]) / temperature
                                 : static_cast<double>(logits[v]);
    // softmax(y)[v] = exp(y[v] - max) / sum: the maximum and the sum (in index order).
    // (A plain struct, not std::pair: GCC notes a psABI change for pairs on aarch64.)
    struct Normaliser {
        double mx, sum;
    };
    auto normaliser = [](const std::vector<double>& y) {
        const double mx = *std::max_element(y.begin(), y.end());
        double sum = 0.0;
        for (double e : y)
            sum += std::exp(e - mx);
        return Normaliser{mx, sum};
    };
    if (d.top_p < 1.0) {
        // Sorted descending (stable), the smallest prefix whose mass exceeds top_p survives:
        // rank j is kept iff j == 0 or the mass before it is <= top_p.
        std::vector<int32_t>& order = scratch.order;
        order.resize(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t a, int32_t b) { return x[a] > x[b]; });
        const auto [mx, sum] = normaliser(x);
        double cum = 0.0;
        for (int64_t j = 0; j < V; ++j) {
            const int32_t t = order[j];
            const double p = std::exp(x[t] - mx) / sum;  // read before x[t] is filtered out
            if (j > 0 && cum > d.top_p) x[t] = -INFINITY;
            cum += p;
        }
    }
    if (d.top_k > 0 && d.top_k < V) {
        std::vector<double>& sorted = scratch.sorted;
        sorted.assign(x.begin(), x.end());
        std::nth_element(sorted.begin(), sorted.begin() + (d.top_k - 1), sorted.end(),
                         std::greater<double>());
        const double kth = sorted[d.top_k - 1];
        for (double& e : x)
            if (e < kth) e = -INFINITY;
    }
    const auto [mx, sum] = normaliser(x);
    for (double& e : x)
        e = std::exp(e - mx) / sum;
}

int32_t first_argmax(const std::vector<double>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// The k largest of `score` over the canvas, ties by the lowest position; ascending.
std::vector<int> top_positions(const std::vector<double>& score, int k) {
    std::vector<int> idx(score.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score[a] > score[b]; });
    idx.resize(static_cast<size_t>(std::min<int>(k, static_cast<int>(idx.size()))));
    std::sort(idx.begin(), idx.end());
    return idx;
}

// One generation of Dream's sampler as a stepper: a step is every canvas row (a full forward,
// as Dream's sampler computes it), those that predict masked positions through the LM head as
// logits rows; then sampling and writing from them. A step with nothing masked runs no rows.
class DreamStepper : public Stepper {
  public:
    DreamStepper(const model::Model& model, const GenerateOptions& opt, const TokenIds& ids,
                 std::span<const int32_t> prompt)
        : opt_(opt), d_(opt_.dream), ids_(ids), own_noise_(opt.seed) {
        check_dream_options(model, opt, ids);
        P_ = static_cast<int>(prompt.size());
        if (P_ == 0) throw Error("policy 'dream' needs a prompt of at least one token");
        check_canvas_fits(model, P_, opt.gen);
        check_prompt_ids(model, prompt);
        noise_ = opt_.noise ? opt_.noise : &own_noise_;
        ts_ = dream_timesteps(opt.steps, static_cast<float>(d_.eps));
        L_ = P_ + opt.gen;
        V_ = model.hparams().n_vocab;
        shift_ = model.hparams().shift_logits;
        res_.prompt_len = P_;
        res_.canvas.assign(prompt.begin(), prompt.end());
        res_.canvas.resize(L_, ids.mask);
        res_.steps.reserve(opt.steps);
        states_ = fresh_states(P_, L_);
        drafts_.assign(L_, -1);  // none ever
        req_.rows.reserve(L_);
        req_.kv_len.assign(1, L_);
        req_.need_logits = true;
    }

    int n_seq() const override { return 1; }
    int canvas_len() const override { return L_; }
    bool done() const override { return step_ == opt_.steps; }

    const StepRequest& plan_step() override {
        t0_ = std::chrono::steady_clock::now();
        info_ = StepInfo{};
        info_.step = step_;
        info_.step_in_block = step_;
        masked_.clear();
        for (int p = 0; p < L_; ++p)
            if (res_.canvas[p] == ids_.mask) masked_.push_back(p);
        committed_.clear();
        rows_.clear();
        // The rows that predict the masked positions (shifted: p - 1, row 0 itself).
        row_of_.assign(masked_.size(), 0);
        for (size_t j = 0; j < masked_.size(); ++j) {
            const int32_t r = shift_ ? std::max(masked_[j] - 1, 0) : masked_[j];
            if (rows_.empty() || rows_.back() != r) rows_.push_back(r);
            row_of_[j] = static_cast<int32_t>(rows_.size()) - 1;
        }
        req_.rows.clear();
        if (!rows_.empty()) {
            size_t k = 0;
            for (int p = 0; p < L_; ++p) {
                const bool predict = k < rows_.size() && rows_[k] == p;
                k += predict;
                req_.rows.push_back({res_.canvas[p], p, 0, p, -1, predict});
            }
        }
        return req_;
    }

    void apply(std::span<const RowPrediction> preds, std::span<const RowPrediction>) override {
        if (!masked_.empty()) {
            info_.rows = L_;
            info_.lm_head_rows = static_cast<int64_t>(rows_.size());
            sample_and_write(step_, preds);
            res_.stats.forwards += 1;
            res_.stats.rows += info_.rows;
            res_.stats.lm_head_rows += info_.lm_head_rows;
        }
        info_.committed = static_cast<int>(committed_.size());
        info_.n_masked =
            static_cast<int>(std::count(res_.canvas.begin() + P_, res_.canvas.end(), ids_.mask));
        info_.n_stable = opt_.gen - info_.n_masked;
        info_.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_)
                       .count();
        res_.steps.push_back(info_);
        ++step_;
    }

    void record_cost(int64_t device_rows, double ms) override {
        record_step_cost(res_, device_rows, ms);
    }

    const GenerateResult& result() const override { return res_; }
    GenerateResult take_result() override { return std::move(res_); }
    std::span<const TokenState> states() const override { return states_; }
    std::span<const int32_t> drafts() const override { return drafts_; }
    StepEvent event() const override {
        return {last_step(), opt_.steps, P_, res_.canvas, committed_};
    }

  private:
    // Samples the rows `which` (indices into masked_): tokens and confidences.
    void sample(std::span<const RowPrediction> preds, const std::vector<int>& which) {
        tok_.assign(which.size(), -1);
        conf_.assign(which.size(), 0.0);
        if (opt_.temperature > 0.0) noise_->next_draw(static_cast<int64_t>(which.size()) * V_);
        for (size_t r = 0; r < which.size(); ++r) {
            const float* row = preds[row_of_[which[r]]].logits;
            filtered_probs(row, V_, d_, opt_.temperature, x_, scratch_);
            int32_t best = 0;
            if (opt_.temperature > 0.0) {
                double sum = 0.0;
                for (double p : x_)
                    sum += p;
                double best_v = -1.0;
                for (int64_t v = 0; v < V_; ++v) {
                    const double q = -std::log(noise_->at(static_cast<int64_t>(r) * V_ + v));
                    const double val = x_[v] / sum / q;
                    if (val > best_v) {
                        best_v = val;
                        best = static_cast<int32_t>(v);
                    }
                }
            } else {
                best = first_argmax(x_);
            }
            check_finite_logit(row[best], masked_[which[r]]);
            tok_[r] = best;
            if (d_.alg == "topk_margin") {
                double a = -1.0, b = -1.0;
                for (double p : x_) {
                    if (p > a) {
                        b = a;
                        a = p;
                    } else if (p > b) {
                        b = p;
                    }
                }
                conf_[r] = a - b;
            } else if (d_.alg == "entropy") {
                double e = 0.0;
                for (double p : x_)
                    e += p * std::log(p + 1e-10);
                conf_[r] = e;
            } else {
                conf_[r] = x_[best];
            }
        }
    }

    void sample_and_write(int i, std::span<const RowPrediction> preds) {
        const float t = ts_[i], s = ts_[i + 1];
        const bool last = i == opt_.steps - 1;
        const int n_mask = static_cast<int>(masked_.size());
        std::vector<int> chosen;
        std::vector<int32_t> write;
        if (d_.alg == "origin") {
            const float ratio = last ? 1.0f : 1.0f - s / t;
            noise_->next_draw(n_mask);
            std::vector<int> sel;
            for (int j = 0; j < n_mask; ++j)
                if (noise_->at(j) < static_cast<double>(ratio)) sel.push_back(j);
            if (!sel.empty()) sample(preds, sel);
            for (size_t r = 0; r < sel.size(); ++r) {
                chosen.push_back(masked_[sel[r]]);
                write.push_back(tok_[r]);
            }
        } else {
            std::vector<int> all(n_mask);
            std::iota(all.begin(), all.end(), 0);
            sample(preds, all);
            const float ratio = 1.0f - s / t;
            const float prod = static_cast<float>(n_mask) * ratio;
            const int k = last ? n_mask : static_cast<int>(prod);
            if (k > 0) {
                std::vector<double> full(L_, -INFINITY);
                for (int j = 0; j < n_mask; ++j)
                    full[masked_[j]] = conf_[j];
                if (d_.alg_temp > 0.0) {
                    // softmax(full / alg_temp) / q over the canvas, q = -log(u).
                    double mx = -INFINITY, sum = 0.0;
                    for (double& e : full) {
                        e /= d_.alg_temp;
                        mx = std::max(mx, e);
                    }
                    for (double& e : full) {
                        e = std::exp(e - mx);
                        sum += e;
                    }
                    noise_->next_draw(L_);
                    for (int p = 0; p < L_; ++p)
                        full[p] = full[p] / sum / -std::log(noise_->at(p));
                }
                chosen = top_positions(full, k);
            }
            for (int p : chosen) {
                const auto it = std::lower_bound(masked_.begin(), masked_.end(), p);
                // Dream's corner: a chosen position that is not masked gets the mask.
                write.push_back(it != masked_.end() && *it == p
                                    ? tok_[static_cast<size_t>(it - masked_.begin())]
                                    : ids_.mask);
            }
        }
        for (size_t c = 0; c < chosen.size(); ++c) {
            if (write[c] != ids_.mask) check_spellable(ids_, write[c], chosen[c]);
            res_.canvas[chosen[c]] = write[c];
            states_[chosen[c]] = write[c] == ids_.mask ? TokenState::Masked : TokenState::Visible;
            committed_.push_back(chosen[c]);
        }
    }

    GenerateOptions opt_;
    const DreamOptions& d_;
    TokenIds ids_;
    CounterNoise own_noise_;
    NoiseSource* noise_ = nullptr;
    std::vector<float> ts_;
    int P_ = 0, L_ = 0, step_ = 0;
    int64_t V_ = 0;
    bool shift_ = false;
    GenerateResult res_;
    StepInfo info_;
    StepRequest req_;
    std::vector<TokenState> states_;
    std::vector<int32_t> drafts_;
    std::chrono::steady_clock::time_point t0_;
    std::vector<int> masked_;
    std::vector<int32_t> rows_, row_of_, tok_, committed_;
    std::vector<double> conf_, x_;
    FilterScratch scratch_;
};

}  // namespace

void check_dream_options(const model::Model& model, const GenerateOptions& opt,
                         const TokenIds& ids) {
    const DreamOptions& d = opt.dream;
    if (model.hparams().causal) {
        throw Error("policy 'dream' needs a bidirectional model; '" + model.hparams().arch +
                    "' is autoregressive (use --policy ar)");
    }
    if (ids.mask < 0 || ids.mask >= model.hparams().n_vocab) {
        throw Error("policy 'dream' needs the model's mask token (tokenizer.ggml.mask_token_id)");
    }
    if (opt.gen <= 0) throw Error("--gen must be positive, got " + std::to_string(opt.gen));
    if (opt.steps <= 0) throw Error("--steps must be positive, got " + std::to_string(opt.steps));
    if (!(opt.temperature >= 0.0) || !std::isfinite(opt.temperature))
        throw Error("--temperature must be >= 0");
    if (d.alg != "origin" && d.alg != "maskgit_plus" && d.alg != "topk_margin" &&
        d.alg != "entropy") {
        throw Error("--dream-alg must be origin, maskgit_plus, topk_margin or entropy, got '" +
                    d.alg + "'");
    }
    check_not_block_causal(model);
    if (opt.logprobs >= 0)
        throw Error("logprobs are not recorded by policy 'dream' (Dream's own sampler)");
    if (opt.filter.on())
        throw Error(
            "policy 'dream' filters with Dream's own top_k and top_p (DreamOptions), not the "
            "LLaDA policies' top_k / min_p");
    if (!(d.eps > 0.0 && d.eps < 1.0)) throw Error("--eps must be in (0, 1)");
    if (!(d.top_p > 0.0 && d.top_p <= 1.0)) throw Error("--top-p must be in (0, 1]");
    if (d.top_k < 0) throw Error("--top-k must be >= 0 (0: off)");
    if (!(d.alg_temp >= 0.0) || !std::isfinite(d.alg_temp))
        throw Error("--alg-temp must be >= 0 (0: the most confident positions)");
    if (d.alg == "origin" && d.alg_temp > 0.0)
        throw Error("--alg-temp applies to the confidence algorithms, not origin");
    if (opt.cfg != 0.0 || opt.threshold != 0.0 || opt.factor != 0.0 || opt.revise.on)
        throw Error(
            "policy 'dream' is Dream's own sampler: --cfg, --threshold, --factor "
            "and --revise belong to the LLaDA policies");
    if (opt.remasking != Remasking::LowConfidence)
        throw Error("--remasking applies to the LLaDA policies; Dream's is --dream-alg");
}

std::unique_ptr<Stepper> make_dream_stepper(const model::Model& model, const GenerateOptions& opt,
                                            const TokenIds& ids, std::span<const int32_t> prompt) {
    return std::make_unique<DreamStepper>(model, opt, ids, prompt);
}

}  // namespace llada::decode
