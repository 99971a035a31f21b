// The per-position decisions every policy shares, and the common option checks.
#include "decode/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace llada::decode {

void guide(const float* cond, const float* uncond, float w, float* out, int64_t n) {
    const float scale = w + 1.0f;
    for (int64_t v = 0; v < n; ++v)
        out[v] = uncond[v] + scale * (cond[v] - uncond[v]);
}

void filter_tokens(const float* logits, int64_t n_vocab, int32_t banned, const SampleFilter& filter,
                   std::vector<uint8_t>& keep) {
    keep.assign(static_cast<size_t>(n_vocab), 1);
    if (banned >= 0 && banned < n_vocab) keep[static_cast<size_t>(banned)] = 0;
    if (filter.top_k > 0 && filter.top_k < n_vocab) {
        // The k-th best (logit, lower index first) among the candidates; the rest drop out.
        std::vector<int32_t> order;
        order.reserve(static_cast<size_t>(n_vocab));
        for (int64_t v = 0; v < n_vocab; ++v)
            if (keep[static_cast<size_t>(v)]) order.push_back(static_cast<int32_t>(v));
        const auto better = [&](int32_t a, int32_t b) {
            return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
        };
        if (static_cast<int64_t>(order.size()) > filter.top_k) {
            std::nth_element(order.begin(), order.begin() + (filter.top_k - 1), order.end(),
                             better);
            const int32_t kth = order[static_cast<size_t>(filter.top_k - 1)];
            for (int64_t v = 0; v < n_vocab; ++v)
                if (keep[static_cast<size_t>(v)] && better(kth, static_cast<int32_t>(v)))
                    keep[static_cast<size_t>(v)] = 0;
        }
    }
    if (filter.min_p > 0.0) {
        float mx = -INFINITY;
        for (int64_t v = 0; v < n_vocab; ++v)
            if (keep[static_cast<size_t>(v)]) mx = std::max(mx, logits[v]);
        // p_v >= min_p * p_max  <=>  logit_v >= max + log(min_p), in double.
        const double cut = static_cast<double>(mx) + std::log(filter.min_p);
        for (int64_t v = 0; v < n_vocab; ++v)
            if (keep[static_cast<size_t>(v)] && !(static_cast<double>(logits[v]) >= cut))
                keep[static_cast<size_t>(v)] = 0;
    }
}

Candidate pick_candidate(const float* logits, int64_t n_vocab, double temperature,
                         const NoiseSource& noise, int64_t noise_offset, int32_t banned,
                         const SampleFilter& filter) {
    Candidate c;
    int64_t best = -1;
    if (temperature == 0.0) {
        for (int64_t v = 0; v < n_vocab; ++v) {
            if (v != banned && (best < 0 || logits[v] > logits[best])) best = v;
        }
        c.token = static_cast<int32_t>(best);
        return c;
    }
    // The filter's tokens (banned excluded), or every token but the banned one.
    thread_local std::vector<uint8_t> keep;
    if (filter.on()) filter_tokens(logits, n_vocab, banned, filter, keep);
    double best_val = 0.0;
    for (int64_t v = 0; v < n_vocab; ++v) {
        if (filter.on() ? !keep[static_cast<size_t>(v)] : v == banned) continue;
        const double g = std::pow(-std::log(noise.at(noise_offset + v)), temperature);
        const double val = std::exp(static_cast<double>(logits[v])) / g;
        if (best < 0 || val > best_val) {
            best = v;
            best_val = val;
        }
    }
    c.token = static_cast<int32_t>(best);
    return c;
}

namespace {

// The row's maximum (float) and sum of exp(logit - max) (double): softmax's normaliser.
struct Normaliser {
    float max;
    double sum;
};
Normaliser normaliser(const float* logits, int64_t n_vocab) {
    float mx = logits[0];
    for (int64_t v = 1; v < n_vocab; ++v)
        mx = std::max(mx, logits[v]);
    double sum = 0.0;
    for (int64_t v = 0; v < n_vocab; ++v)
        sum += std::exp(static_cast<double>(logits[v] - mx));
    return {mx, sum};
}

}  // namespace

double log_softmax_at(const float* logits, int64_t n_vocab, int32_t token) {
    const Normaliser z = normaliser(logits, n_vocab);
    return static_cast<double>(logits[token] - z.max) - std::log(z.sum);
}

void top_logprobs(const float* logits, int64_t n_vocab, int n,
                  std::vector<GenerateResult::TokenLogprob>& out) {
    out.clear();
    if (n <= 0 || n_vocab <= 0) return;
    const Normaliser z = normaliser(logits, n_vocab);
    const float mx = z.max;
    const double log_z = std::log(z.sum);
    // A heap of the n best so far whose front is the worst of them: better is (logit, then
    // the lower index).
    const auto better = [&](int32_t a, int32_t b) {
        return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    };
    std::vector<int32_t> heap;
    heap.reserve(static_cast<size_t>(n) + 1);
    for (int64_t v = 0; v < n_vocab; ++v) {
        const int32_t t = static_cast<int32_t>(v);
        if (static_cast<int>(heap.size()) < n) {
            heap.push_back(t);
            std::push_heap(heap.begin(), heap.end(), better);
        } else if (better(t, heap.front())) {
            std::pop_heap(heap.begin(), heap.end(), better);
            heap.back() = t;
            std::push_heap(heap.begin(), heap.end(), better);
        }
    }
    std::sort(heap.begin(), heap.end(), better);
    for (int32_t t : heap)
        out.push_back({t, static_cast<float>(static_cast<double>(logits[t] - mx) - log_z)});
}

float softmax_prob(const float* logits, int64_t n_vocab, int32_t token) {
    const Normaliser z = normaliser(logits, n_vocab);
    return static_cast<float>(std::exp(static_cast<double>(logits[token] - z.max)) / z.sum);
}

void select_top_k(const std::vector<Candidate>& cand, int k, std::vector<int>& out) {
    out.resize(cand.size());
    std::iota(out.begin(), out.end(), 0);
    k = std::min<int>(k, static_cast<int>(out.size()));
    std::partial_sort(out.begin(), out.begin() + k, out.end(), [&](int a, int b) {
        if (cand[a].confidence != cand[b].confidence) {
            return cand[a].confidence > cand[b].confidence;
        }
        return a < b;
    });
    out.resize(k);
    std::sort(out.begin(), out.end());
}

namespace {
// The longest prefix of candidates by descending confidence (ties to the lower index) whose
// n-th member passes need(n), n counted from 1; at least one.
template <typename Need>
void select_prefix(const std::vector<Candidate>& cand, Need need, std::vector<int>& out) {
    out.resize(cand.size());
    std::iota(out.begin(), out.end(), 0);
    std::sort(out.begin(), out.end(), [&](int a, int b) {
        if (cand[a].confidence != cand[b].confidence) {
            return cand[a].confidence > cand[b].confidence;
        }
        return a < b;
    });
    size_t n = out.empty() ? 0 : 1;
    while (n < out.size() && cand[out[n]].confidence >= need(n + 1))
        ++n;
    out.resize(n);
    std::sort(out.begin(), out.end());
}
}  // namespace

void select_by_threshold(const std::vector<Candidate>& cand, double tau, std::vector<int>& out) {
    select_prefix(
        cand, [&](size_t) { return tau; }, out);
}

void select_by_factor(const std::vector<Candidate>& cand, double factor, std::vector<int>& out) {
    select_prefix(
        cand, [&](size_t n) { return 1.0 - factor / static_cast<double>(n + 1); }, out);
}

void validate_common_options(const GenerateOptions& opt, const TokenIds& ids,
                             const model::Model& model) {
    if (ids.mask < 0) {
        throw Error(
            "the model has no mask token (tokenizer.ggml.mask_token_id is missing), so "
            "it cannot be decoded as a diffusion model");
    }
    if (ids.mask >= model.hparams().n_vocab) {
        throw Error("mask token id " + std::to_string(ids.mask) + " is outside the vocabulary");
    }
    if (model.hparams().causal) {
        throw Error("model architecture '" + model.hparams().arch +
                    "' is autoregressive; diffusion policies need a bidirectional model (llada)");
    }
    check_not_block_causal(model);
    if (opt.gen <= 0) throw Error("--gen must be positive, got " + std::to_string(opt.gen));
    if (opt.block <= 0) throw Error("--block must be positive, got " + std::to_string(opt.block));
    if (opt.steps <= 0) throw Error("--steps must be positive, got " + std::to_string(opt.steps));
    if (opt.gen % opt.block != 0) {
        throw Error("--gen " + std::to_string(opt.gen) + " is not a multiple of --block " +
                    std::to_string(opt.block));
    }
    const int n_blocks = opt.gen / opt.block;
    if (opt.steps % n_blocks != 0) {
        throw Error("--steps " + std::to_string(opt.steps) + " is not a multiple of the " +
                    std::to_string(n_blocks) + " blocks (--gen " + std::to_string(opt.gen) +
                    " / --block " + std::to_string(opt.block) + ")");
    }
    if (!(opt.temperature >= 0.0) || !std::isfinite(opt.temperature)) {
        throw Error("--temperature must be >= 0");
    }
    if (!(opt.cfg >= 0.0) || !std::isfinite(opt.cfg)) throw Error("--cfg must be >= 0");
    check_sample_filter(opt);
}

void check_sample_filter(const GenerateOptions& opt) {
    if (opt.logprobs > 20) {
        throw Error("top logprobs are given for at most 20 tokens, not " +
                    std::to_string(opt.logprobs));
    }
    const SampleFilter& f = opt.filter;
    if (f.top_k < 0) throw Error("--top-k must be >= 0 (0: off), got " + std::to_string(f.top_k));
    if (!(f.min_p >= 0.0 && f.min_p <= 1.0)) {
        throw Error("--min-p must be in [0, 1] (0: off), got " + std::to_string(f.min_p));
    }
    if (f.on() && opt.temperature == 0.0) {
        throw Error(
            "--top-k and --min-p filter a sampled choice: they need --temperature above 0 (at "
            "0 the most likely token is taken)");
    }
}

void check_not_block_causal(const model::Model& model) {
    if (model.hparams().attention_block > 0) {
        throw Error("model architecture '" + model.hparams().arch +
                    "' attends block-causally (LLaDA 2.x): this policy's blocks start after the "
                    "prompt; decode it with --policy llada2 (blocks aligned from position 0, "
                    "committed blocks kept in the KV cache)");
    }
}

void check_canvas_fits(const model::Model& model, int prompt_len, int gen) {
    const int ctx = model.hparams().n_ctx;
    if (static_cast<int64_t>(prompt_len) + gen > ctx) {
        throw Error("the prompt (" + std::to_string(prompt_len) + " tokens) plus --gen " +
                    std::to_string(gen) + " exceeds the model's context length " +
                    std::to_string(ctx));
    }
}

void check_prompt_ids(const model::Model& model, std::span<const int32_t> prompt) {
    for (int32_t id : prompt) {
        if (id < 0 || id >= model.hparams().n_vocab) {
            throw Error("prompt token id " + std::to_string(id) +
                        " is outside the vocabulary [0, " +
                        std::to_string(model.hparams().n_vocab) + ")");
        }
    }
}

void check_finite_logit(float logit, int pos) {
    if (std::isfinite(logit)) return;
    throw Error("the forward gave a non-finite logit at position " + std::to_string(pos) +
                ": the model's weights hold NaN or Inf, or its activations overflowed");
}

void check_spellable(const TokenIds& ids, int32_t tok, int pos) {
    if (ids.n_spellable < 0 || tok < ids.n_spellable) return;
    throw Error("the model chose token id " + std::to_string(tok) + " at position " +
                std::to_string(pos) + ", which the tokenizer cannot spell: it has " +
                std::to_string(ids.n_spellable) +
                " tokens, the output layer more rows (padding a converter added)");
}

}  // namespace llada::decode
