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
#include <numeric>
#include <utility>
#include <vector>

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

class DreamPolicy : public Policy {
  public:
    DreamPolicy(const model::Model& model, runtime::Device& device, const GenerateOptions& opt,
                const TokenIds& ids)
        : model_(model), device_(device), opt_(opt), ids_(ids) {
        const DreamOptions& d = opt.dream;
        if (model.hparams().causal) {
            throw Error("policy 'dream' needs a bidirectional model; '" + model.hparams().arch +
                        "' is autoregressive (use --policy ar)");
        }
        if (ids.mask < 0 || ids.mask >= model.hparams().n_vocab) {
            throw Error(
                "policy 'dream' needs the model's mask token (tokenizer.ggml.mask_token_id)");
        }
        if (opt.gen <= 0) throw Error("--gen must be positive, got " + std::to_string(opt.gen));
        if (opt.steps <= 0)
            throw Error("--steps must be positive, got " + std::to_string(opt.steps));
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

    const char* name() const override { return "dream"; }

    GenerateResult generate(std::span<const int32_t> prompt, const StepCallback& on_step) override {
        const auto t0 = std::chrono::steady_clock::now();
        const DreamOptions& d = opt_.dream;
        const int P = static_cast<int>(prompt.size());
        if (P == 0) throw Error("policy 'dream' needs a prompt of at least one token");
        check_canvas_fits(model_, P, opt_.gen);
        check_prompt_ids(model_, prompt);
        const int L = P + opt_.gen;
        const int64_t V = model_.hparams().n_vocab;
        const bool shift = model_.hparams().shift_logits;
        model::Session session(model_, device_, 1, L, L, L, opt_.kernels);
        CounterNoise own_noise(opt_.seed);
        NoiseSource& noise = opt_.noise ? *opt_.noise : own_noise;
        const std::vector<float> ts = dream_timesteps(opt_.steps, static_cast<float>(d.eps));

        GenerateResult res;
        res.prompt_len = P;
        res.canvas.assign(prompt.begin(), prompt.end());
        res.canvas.resize(L, ids_.mask);
        std::vector<int32_t> pos(L), seq(L, 0), rows, row_of;
        std::iota(pos.begin(), pos.end(), 0);
        const int32_t kv_len = L;
        std::vector<double> x;
        FilterScratch scratch;
        std::vector<int> masked, chosen;
        std::vector<int32_t> tok, committed;
        std::vector<double> conf;
        for (int i = 0; i < opt_.steps; ++i) {
            const auto ts0 = std::chrono::steady_clock::now();
            StepInfo info;
            info.step = i;
            info.step_in_block = i;
            masked.clear();
            for (int p = 0; p < L; ++p)
                if (res.canvas[p] == ids_.mask) masked.push_back(p);
            committed.clear();
            if (!masked.empty()) {
                // The rows that predict the masked positions (shifted: p - 1, row 0 itself).
                rows.clear();
                row_of.assign(masked.size(), 0);
                for (size_t j = 0; j < masked.size(); ++j) {
                    const int32_t r = shift ? std::max(masked[j] - 1, 0) : masked[j];
                    if (rows.empty() || rows.back() != r) rows.push_back(r);
                    row_of[j] = static_cast<int32_t>(rows.size()) - 1;
                }
                const runtime::Batch batch{L,
                                           res.canvas.data(),
                                           pos.data(),
                                           seq.data(),
                                           static_cast<int64_t>(rows.size()),
                                           rows.data(),
                                           &kv_len};
                const int64_t rows_before = session.stats().rows;
                const float* logits = session.forward(batch);
                info.rows = session.stats().rows - rows_before;
                info.lm_head_rows = static_cast<int64_t>(rows.size());
                const float t = ts[i], s = ts[i + 1];
                const bool last = i == opt_.steps - 1;
                const int n_mask = static_cast<int>(masked.size());
                // Samples the rows `which` (indices into masked): tokens and confidences.
                auto sample = [&](const std::vector<int>& which) {
                    tok.assign(which.size(), -1);
                    conf.assign(which.size(), 0.0);
                    if (opt_.temperature > 0.0)
                        noise.next_draw(static_cast<int64_t>(which.size()) * V);
                    for (size_t r = 0; r < which.size(); ++r) {
                        const float* row = logits + static_cast<int64_t>(row_of[which[r]]) * V;
                        filtered_probs(row, V, d, opt_.temperature, x, scratch);
                        int32_t best = 0;
                        if (opt_.temperature > 0.0) {
                            double sum = 0.0;
                            for (double p : x)
                                sum += p;
                            double best_v = -1.0;
                            for (int64_t v = 0; v < V; ++v) {
                                const double q =
                                    -std::log(noise.at(static_cast<int64_t>(r) * V + v));
                                const double val = x[v] / sum / q;
                                if (val > best_v) {
                                    best_v = val;
                                    best = static_cast<int32_t>(v);
                                }
                            }
                        } else {
                            best = first_argmax(x);
                        }
                        check_finite_logit(row[best], masked[which[r]]);
                        tok[r] = best;
                        if (d.alg == "topk_margin") {
                            double a = -1.0, b = -1.0;
                            for (double p : x) {
                                if (p > a) {
                                    b = a;
                                    a = p;
                                } else if (p > b) {
                                    b = p;
                                }
                            }
                            conf[r] = a - b;
                        } else if (d.alg == "entropy") {
                            double e = 0.0;
                            for (double p : x)
                                e += p * std::log(p + 1e-10);
                            conf[r] = e;
                        } else {
                            conf[r] = x[best];
                        }
                    }
                };
                chosen.clear();
                std::vector<int32_t> write;
                if (d.alg == "origin") {
                    const float ratio = last ? 1.0f : 1.0f - s / t;
                    noise.next_draw(n_mask);
                    std::vector<int> sel;
                    for (int j = 0; j < n_mask; ++j)
                        if (noise.at(j) < static_cast<double>(ratio)) sel.push_back(j);
                    if (!sel.empty()) sample(sel);
                    for (size_t r = 0; r < sel.size(); ++r) {
                        chosen.push_back(masked[sel[r]]);
                        write.push_back(tok[r]);
                    }
                } else {
                    std::vector<int> all(n_mask);
                    std::iota(all.begin(), all.end(), 0);
                    sample(all);
                    const float ratio = 1.0f - s / t;
                    const float prod = static_cast<float>(n_mask) * ratio;
                    const int k = last ? n_mask : static_cast<int>(prod);
                    if (k > 0) {
                        std::vector<double> full(L, -INFINITY);
                        for (int j = 0; j < n_mask; ++j)
                            full[masked[j]] = conf[j];
                        if (d.alg_temp > 0.0) {
                            // softmax(full / alg_temp) / q over the canvas, q = -log(u).
                            double mx = -INFINITY, sum = 0.0;
                            for (double& e : full) {
                                e /= d.alg_temp;
                                mx = std::max(mx, e);
                            }
                            for (double& e : full) {
                                e = std::exp(e - mx);
                                sum += e;
                            }
                            noise.next_draw(L);
                            for (int p = 0; p < L; ++p)
                                full[p] = full[p] / sum / -std::log(noise.at(p));
                        }
                        chosen = top_positions(full, k);
                    }
                    for (int p : chosen) {
                        const auto it = std::lower_bound(masked.begin(), masked.end(), p);
                        // Dream's corner: a chosen position that is not masked gets the mask.
                        write.push_back(it != masked.end() && *it == p
                                            ? tok[static_cast<size_t>(it - masked.begin())]
                                            : ids_.mask);
                    }
                }
                for (size_t c = 0; c < chosen.size(); ++c) {
                    if (write[c] != ids_.mask) check_spellable(ids_, write[c], chosen[c]);
                    res.canvas[chosen[c]] = write[c];
                    committed.push_back(chosen[c]);
                }
                res.stats.forwards += 1;
                res.stats.rows += info.rows;
                res.stats.lm_head_rows += info.lm_head_rows;
            }
            info.committed = static_cast<int>(committed.size());
            info.rows_device = info.rows;
            res.rows_device += info.rows;
            info.n_masked =
                static_cast<int>(std::count(res.canvas.begin() + P, res.canvas.end(), ids_.mask));
            info.n_stable = opt_.gen - info.n_masked;
            info.ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ts0)
                    .count();
            res.steps.push_back(info);
            if (on_step) on_step({res.steps.back(), opt_.steps, P, res.canvas, committed});
        }
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

std::unique_ptr<Policy> make_dream_policy(const model::Model& model, runtime::Device& device,
                                          const GenerateOptions& options, const TokenIds& ids) {
    return std::make_unique<DreamPolicy>(model, device, options, ids);
}

}  // namespace llada::decode
