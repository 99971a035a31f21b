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
    auto normaliser = [](const std::vector<double>& y) {
        const double mx = *std::max_element(y.begin(), y.end());
        double sum = 0.0;
        for (double e : y)
            sum += std::exp(e - mx);
        return std::pair{mx, sum};
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

// One candidate of Dream's sampler: its canvas, noise and scratch; a step is begin() (the rows
// that predict its masked positions) and end() (sampling and writing from those rows' logits).
class DreamCandidate {
  public:
    DreamCandidate(const model::Model& model, const GenerateOptions& opt, const TokenIds& ids,
                   std::span<const int32_t> prompt, NoiseSource& noise,
                   const std::vector<float>& ts)
        : opt_(opt), d_(opt.dream), ids_(ids), noise_(noise), ts_(ts) {
        P_ = static_cast<int>(prompt.size());
        L_ = P_ + opt.gen;
        V_ = model.hparams().n_vocab;
        shift_ = model.hparams().shift_logits;
        res_.prompt_len = P_;
        res_.canvas.assign(prompt.begin(), prompt.end());
        res_.canvas.resize(L_, ids.mask);
    }

    // Step i's output rows (canvas positions; empty when nothing is masked any more).
    const std::vector<int32_t>& begin(int i) {
        t0_ = std::chrono::steady_clock::now();
        info_ = StepInfo{};
        info_.step = i;
        info_.step_in_block = i;
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
        return rows_;
    }

    // Step i from the logits of begin()'s rows (null when it had none); `window_rows` is what
    // the forward computed for this candidate.
    void end(int i, const float* logits, int64_t window_rows) {
        if (!masked_.empty()) {
            info_.rows = window_rows;
            info_.lm_head_rows = static_cast<int64_t>(rows_.size());
            sample_and_write(i, logits);
            res_.stats.forwards += 1;
            res_.stats.rows += info_.rows;
            res_.stats.lm_head_rows += info_.lm_head_rows;
        }
        info_.committed = static_cast<int>(committed_.size());
        info_.rows_device = info_.rows;
        res_.rows_device += info_.rows;
        info_.n_masked =
            static_cast<int>(std::count(res_.canvas.begin() + P_, res_.canvas.end(), ids_.mask));
        info_.n_stable = opt_.gen - info_.n_masked;
        info_.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_)
                       .count();
        res_.steps.push_back(info_);
    }

    GenerateResult& result() { return res_; }
    const std::vector<int32_t>& committed() const { return committed_; }

  private:
    // Samples the rows `which` (indices into masked_): tokens and confidences.
    void sample(const float* logits, const std::vector<int>& which) {
        tok_.assign(which.size(), -1);
        conf_.assign(which.size(), 0.0);
        if (opt_.temperature > 0.0) noise_.next_draw(static_cast<int64_t>(which.size()) * V_);
        for (size_t r = 0; r < which.size(); ++r) {
            const float* row = logits + static_cast<int64_t>(row_of_[which[r]]) * V_;
            filtered_probs(row, V_, d_, opt_.temperature, x_, scratch_);
            int32_t best = 0;
            if (opt_.temperature > 0.0) {
                double sum = 0.0;
                for (double p : x_)
                    sum += p;
                double best_v = -1.0;
                for (int64_t v = 0; v < V_; ++v) {
                    const double q = -std::log(noise_.at(static_cast<int64_t>(r) * V_ + v));
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

    void sample_and_write(int i, const float* logits) {
        const float t = ts_[i], s = ts_[i + 1];
        const bool last = i == opt_.steps - 1;
        const int n_mask = static_cast<int>(masked_.size());
        std::vector<int> chosen;
        std::vector<int32_t> write;
        if (d_.alg == "origin") {
            const float ratio = last ? 1.0f : 1.0f - s / t;
            noise_.next_draw(n_mask);
            std::vector<int> sel;
            for (int j = 0; j < n_mask; ++j)
                if (noise_.at(j) < static_cast<double>(ratio)) sel.push_back(j);
            if (!sel.empty()) sample(logits, sel);
            for (size_t r = 0; r < sel.size(); ++r) {
                chosen.push_back(masked_[sel[r]]);
                write.push_back(tok_[r]);
            }
        } else {
            std::vector<int> all(n_mask);
            std::iota(all.begin(), all.end(), 0);
            sample(logits, all);
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
                    noise_.next_draw(L_);
                    for (int p = 0; p < L_; ++p)
                        full[p] = full[p] / sum / -std::log(noise_.at(p));
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
            committed_.push_back(chosen[c]);
        }
    }

    const GenerateOptions& opt_;
    const DreamOptions& d_;
    const TokenIds& ids_;
    NoiseSource& noise_;
    const std::vector<float>& ts_;
    int P_ = 0, L_ = 0;
    int64_t V_ = 0;
    bool shift_ = false;
    GenerateResult res_;
    StepInfo info_;
    std::chrono::steady_clock::time_point t0_;
    std::vector<int> masked_;
    std::vector<int32_t> rows_, row_of_, tok_, committed_;
    std::vector<double> conf_, x_;
    FilterScratch scratch_;
};

// Rejects what Dream's sampler cannot run, naming it.
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

class DreamPolicy : public Policy {
  public:
    DreamPolicy(const model::Model& model, runtime::Device& device, const GenerateOptions& opt,
                const TokenIds& ids)
        : model_(model), device_(device), opt_(opt), ids_(ids) {
        check_dream_options(model, opt, ids);
    }

    const char* name() const override { return "dream"; }

    GenerateResult generate(std::span<const int32_t> prompt, const StepCallback& on_step) override {
        return std::move(dream_batch(model_, device_, opt_, ids_, prompt, 1, on_step)[0]);
    }

  private:
    const model::Model& model_;
    runtime::Device& device_;
    GenerateOptions opt_;
    TokenIds ids_;
};

}  // namespace

std::vector<GenerateResult> dream_batch(const model::Model& model, runtime::Device& device,
                                        const GenerateOptions& opt, const TokenIds& ids,
                                        std::span<const int32_t> prompt, int n,
                                        const StepCallback& on_step, model::ForwardStats* batch) {
    const auto t0 = std::chrono::steady_clock::now();
    check_dream_options(model, opt, ids);
    if (n < 1) throw Error("dream generation of " + std::to_string(n) + " candidates");
    if (opt.noise != nullptr && n > 1) throw Error("--tts draws each candidate's own noise");
    const int P = static_cast<int>(prompt.size());
    if (P == 0) throw Error("policy 'dream' needs a prompt of at least one token");
    check_canvas_fits(model, P, opt.gen);
    check_prompt_ids(model, prompt);
    const int L = P + opt.gen;
    const int64_t V = model.hparams().n_vocab;
    model::Session session(model, device, n, L, int64_t{n} * L, int64_t{n} * L, opt.kernels);
    const std::vector<float> ts = dream_timesteps(opt.steps, static_cast<float>(opt.dream.eps));
    std::vector<CounterNoise> own;
    for (int k = 0; k < n; ++k)
        own.emplace_back(opt.seed + static_cast<uint64_t>(k));
    std::vector<std::unique_ptr<DreamCandidate>> cands;
    for (int k = 0; k < n; ++k) {
        NoiseSource& noise = opt.noise ? *opt.noise : own[k];
        cands.push_back(std::make_unique<DreamCandidate>(model, opt, ids, prompt, noise, ts));
    }
    // Each step: every candidate with masked positions adds its whole canvas on its own
    // sequence (a full forward, as Dream's sampler computes it) and its output rows.
    std::vector<int32_t> tok, pos, seq, outs, kv_len(n, L);
    std::vector<size_t> first_out(n), n_out(n);
    for (int i = 0; i < opt.steps; ++i) {
        tok.clear();
        pos.clear();
        seq.clear();
        outs.clear();
        for (int k = 0; k < n; ++k) {
            const std::vector<int32_t>& rows = cands[k]->begin(i);
            first_out[k] = outs.size();
            n_out[k] = rows.size();
            if (rows.empty()) continue;
            const int32_t base = static_cast<int32_t>(tok.size());
            const auto& canvas = cands[k]->result().canvas;
            for (int p = 0; p < L; ++p) {
                tok.push_back(canvas[p]);
                pos.push_back(p);
                seq.push_back(k);
            }
            for (int32_t r : rows)
                outs.push_back(base + r);
        }
        const float* logits = nullptr;
        if (!tok.empty()) {
            const runtime::Batch b{
                static_cast<int64_t>(tok.size()),  tok.data(),  pos.data(),   seq.data(),
                static_cast<int64_t>(outs.size()), outs.data(), kv_len.data()};
            logits = session.forward(b);
        }
        for (int k = 0; k < n; ++k) {
            cands[k]->end(i, n_out[k] ? logits + static_cast<int64_t>(first_out[k]) * V : nullptr,
                          n_out[k] ? L : 0);
            if (on_step && n == 1) {
                GenerateResult& r = cands[k]->result();
                on_step({r.steps.back(), opt.steps, P, r.canvas, cands[k]->committed()});
            }
        }
    }
    if (batch) *batch = session.stats();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<GenerateResult> out;
    for (auto& c : cands) {
        c->result().wall_s = wall;
        out.push_back(std::move(c->result()));
    }
    return out;
}

std::unique_ptr<Policy> make_dream_policy(const model::Model& model, runtime::Device& device,
                                          const GenerateOptions& options, const TokenIds& ids) {
    return std::make_unique<DreamPolicy>(model, device, options, ids);
}

}  // namespace llada::decode
