// The block-wise diffusion decoder behind the `vanilla`, `prefix-cache`, `dual-cache` and
// `threshold` policies: one loop, configured by which rows each step computes (the cache mode)
// and how many positions each step commits (the commit rule).
//
// vanilla      LLaDA's reference generate(), decision for decision: every step is a forward over
//              the whole canvas; the schedule (get_num_transfer_tokens) commits a fixed number of
//              masked positions of the current block by confidence; all scheduled steps run.
// prefix-cache Fast-dLLM's prefix cache: at the start of each block (and every `refresh` steps) a
//              full forward refreshes every position's K/V and serves as that step's prediction;
//              the other steps compute only the rows from the block start to the end of the
//              canvas (block + suffix) against the cached K/V of the prefix. Approximation: the
//              prefix K/V are those of the refresh, so they do not see the block's later commits.
// dual-cache   Fast-dLLM's dual cache: as prefix-cache, but the other steps compute only the
//              block's rows; the suffix K/V are also those of the refresh, so the suffix's view
//              of the block is stale as well (and its own content does not change before its
//              block starts, as it stays masked).
// threshold    every step a full forward, like vanilla, but the commit rule is parallel.
// Commit rules: the schedule; threshold tau (every masked position of the block with confidence
// >= tau, at least the most confident); factor f (the n-th most confident needs
// >= 1 - f / (n + 1), at least one). With a parallel rule a block takes as many steps as it needs
// (--steps does not apply), as in Fast-dLLM.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "decode/policy.h"
#include "decode/sampling.h"
#include "util/error.h"

namespace llada::decode {
namespace {

enum class CacheMode { None, Prefix, Dual };
enum class Rule { Schedule, Threshold, Factor };

struct DiffusionConfig {
    const char* name;
    CacheMode cache;
    Rule rule;
    bool exact_reference;  // vanilla: run every scheduled step, allow committing the mask id
    bool early_stop;
};

DiffusionConfig configure(const std::string& name, const GenerateOptions& opt) {
    DiffusionConfig c{"vanilla", CacheMode::None, Rule::Schedule, true, false};
    if (opt.threshold != 0.0 && opt.factor != 0.0) {
        throw Error("--threshold and --factor are two commit rules; give only one");
    }
    if (opt.threshold != 0.0 && !(opt.threshold > 0.0 && opt.threshold <= 1.0)) {
        throw Error("--threshold must be in (0, 1], got " + std::to_string(opt.threshold));
    }
    if (opt.factor != 0.0 && !(opt.factor > 0.0)) {
        throw Error("--factor must be > 0, got " + std::to_string(opt.factor));
    }
    if (opt.refresh < 0) throw Error("--refresh must be >= 0");
    const Rule parallel = opt.factor > 0.0 ? Rule::Factor : Rule::Threshold;
    const bool rule_given = opt.threshold > 0.0 || opt.factor > 0.0;
    if (name == "vanilla") {
        if (rule_given) {
            throw Error(
                "policy vanilla is LLaDA's reference schedule; for parallel commits use "
                "--policy threshold (or a cache policy with --threshold/--factor)");
        }
    } else if (name == "threshold") {
        c = {"threshold", CacheMode::None, parallel, false, true};
    } else if (name == "prefix-cache") {
        c = {"prefix-cache", CacheMode::Prefix, rule_given ? parallel : Rule::Schedule, false,
             true};
    } else if (name == "dual-cache") {
        c = {"dual-cache", CacheMode::Dual, rule_given ? parallel : Rule::Schedule, false, true};
    } else {
        throw Error("internal: unknown diffusion policy " + name);
    }
    if (opt.refresh > 0 && c.cache == CacheMode::None) {
        throw Error("--refresh applies to the cache policies (prefix-cache, dual-cache), not " +
                    name);
    }
    if (c.rule != Rule::Schedule && opt.remasking == Remasking::Random) {
        throw Error(
            "--threshold/--factor rank positions by confidence; they cannot be combined "
            "with --remasking random");
    }
    if (opt.early_stop >= 0) c.early_stop = opt.early_stop != 0;
    return c;
}

int steps_per_block_of(const GenerateOptions& o) {
    return o.steps / (o.gen / o.block);
}

class DiffusionPolicy : public Policy {
  public:
    DiffusionPolicy(const std::string& name, const model::Model& model, runtime::Device& device,
                    const GenerateOptions& opt, const TokenIds& ids)
        : model_(model), device_(device), opt_(opt), ids_(ids), cfg_(configure(name, opt)) {
        validate_common_options(opt, ids, model);
        if (opt_.threshold == 0.0 && opt_.factor == 0.0 && cfg_.rule == Rule::Threshold) {
            opt_.threshold = 0.9;  // the threshold policy's default tau (Fast-dLLM's)
        }
    }

    const char* name() const override { return cfg_.name; }

    GenerateResult generate(std::span<const int32_t> prompt, const StepCallback& on_step) override;

  private:
    // Candidates and confidences for the rows in `need` (window row indices `rows`).
    void predict(model::Session& session, const runtime::Batch& batch,
                 const std::vector<int32_t>& need, int L, NoiseSource& noise);
    // Indices into need_/cand_ of the positions to commit this step, into chosen_.
    void choose(int scheduled);

    const model::Model& model_;
    runtime::Device& device_;
    GenerateOptions opt_;
    TokenIds ids_;
    DiffusionConfig cfg_;
    std::vector<Candidate> cand_;
    std::vector<float> guided_;
    std::vector<int> chosen_;
};

void DiffusionPolicy::predict(model::Session& session, const runtime::Batch& batch,
                              const std::vector<int32_t>& need, int L, NoiseSource& noise) {
    const int64_t V = model_.hparams().n_vocab;
    const int64_t n_need = static_cast<int64_t>(need.size());
    const bool guided = opt_.cfg > 0.0;
    cand_.assign(need.size(), {});
    // The reference draws Gumbel noise for the whole [L][V] canvas, then (random remasking) L
    // uniforms; only the rows in `need` are read.
    if (opt_.temperature > 0.0) noise.next_draw(int64_t{L} * V);
    if (opt_.fused_sampling && opt_.temperature == 0.0 && !guided) {
        const kernels::RowStats* st = session.forward_stats(batch);
        for (int64_t r = 0; r < n_need; ++r) {
            cand_[r].token = st[r].token;
            cand_[r].confidence = kernels::row_confidence(st[r]);
            // Outside the reference policy, a mask id is never committed: use the runner-up.
            if (!cfg_.exact_reference && cand_[r].token == ids_.mask && st[r].second >= 0) {
                cand_[r].token = st[r].second;
                cand_[r].confidence =
                    std::exp(st[r].second_max - st[r].max) * kernels::row_confidence(st[r]);
            }
        }
    } else {
        const float* logits = session.forward(batch);
        guided_.resize(static_cast<size_t>(V));
        for (int64_t r = 0; r < n_need; ++r) {
            const float* row = logits + r * V;
            if (guided) {
                guide(row, logits + (n_need + r) * V, static_cast<float>(opt_.cfg), guided_.data(),
                      V);
                row = guided_.data();
            }
            const int32_t banned = cfg_.exact_reference ? -1 : ids_.mask;
            cand_[r] =
                pick_candidate(row, V, opt_.temperature, noise, int64_t{need[r]} * V, banned);
            if (opt_.remasking == Remasking::LowConfidence) {
                cand_[r].confidence = softmax_prob(row, V, cand_[r].token);
            }
        }
    }
    if (opt_.remasking == Remasking::Random) {
        noise.next_draw(L);
        // The reference draws these in float32.
        for (int64_t r = 0; r < n_need; ++r) {
            cand_[r].confidence = static_cast<float>(noise.at(need[r]));
        }
    }
}

void DiffusionPolicy::choose(int scheduled) {
    switch (cfg_.rule) {
        case Rule::Schedule:
            return select_top_k(cand_, scheduled, chosen_);
        case Rule::Threshold:
            return select_by_threshold(cand_, opt_.threshold, chosen_);
        case Rule::Factor:
            return select_by_factor(cand_, opt_.factor, chosen_);
    }
}

GenerateResult DiffusionPolicy::generate(std::span<const int32_t> prompt,
                                         const StepCallback& on_step) {
    const auto t0 = std::chrono::steady_clock::now();
    const int P = static_cast<int>(prompt.size());
    const int L = P + opt_.gen;
    check_canvas_fits(model_, P, opt_.gen);
    check_prompt_ids(model_, prompt);
    const int n_seq = opt_.cfg > 0.0 ? 2 : 1;
    model::Session session(model_, device_, n_seq, L, int64_t{n_seq} * L, int64_t{n_seq} * L,
                           opt_.kernels);

    GenerateResult res;
    res.prompt_len = P;
    res.canvas.assign(prompt.begin(), prompt.end());
    res.canvas.resize(L, ids_.mask);
    std::vector<int32_t>& x = res.canvas;
    // Positions that held a real token at the start: the unconditional pass masks them.
    std::vector<bool> prompt_index(L);
    for (int p = 0; p < L; ++p)
        prompt_index[p] = x[p] != ids_.mask;

    CounterNoise own_noise(opt_.seed);
    NoiseSource& noise = opt_.noise ? *opt_.noise : own_noise;

    std::vector<int32_t> tokens(n_seq * L), pos(n_seq * L), seq(n_seq * L);
    std::vector<int32_t> out_rows, kv_len(n_seq, L), need, committed;
    // Everything a step touches is sized here, so the denoising loop allocates nothing.
    need.reserve(L);
    committed.reserve(L);
    out_rows.reserve(static_cast<size_t>(n_seq) * L);
    cand_.reserve(L);
    chosen_.reserve(L);
    res.steps.reserve(static_cast<size_t>(opt_.steps + opt_.gen));
    std::vector<int> schedule;
    schedule.reserve(static_cast<size_t>(steps_per_block_of(opt_)));
    const int n_blocks = opt_.gen / opt_.block;
    const int steps_per_block = opt_.steps / n_blocks;
    int global_step = 0;
    for (int b = 0; b < n_blocks && !res.stopped_early; ++b) {
        const int block_start = P + b * opt_.block;
        const int block_end = block_start + opt_.block;
        auto block_masked = [&] {
            int m = 0;
            for (int p = block_start; p < block_end; ++p)
                m += x[p] == ids_.mask;
            return m;
        };
        num_transfer_tokens(block_masked(), steps_per_block, schedule);
        for (int i = 0;; ++i, ++global_step) {
            if (cfg_.exact_reference ? i >= steps_per_block : block_masked() == 0) break;
            const auto ts = std::chrono::steady_clock::now();
            // Which rows this step computes: a full refresh, or the cached policy's window.
            const bool full = cfg_.cache == CacheMode::None || i == 0 ||
                              (opt_.refresh > 0 && i % opt_.refresh == 0);
            const int w0 = full ? 0 : block_start;
            const int w1 = full || cfg_.cache == CacheMode::Prefix ? L : block_end;
            const int W = w1 - w0;
            // Rows whose prediction can matter: masked positions before the block's end.
            need.clear();
            for (int p = w0; p < std::min(w1, block_end); ++p) {
                if (x[p] == ids_.mask) need.push_back(p);
            }
            for (int s = 0; s < n_seq; ++s) {
                for (int j = 0; j < W; ++j) {
                    const int p = w0 + j;
                    tokens[s * W + j] = s == 1 && prompt_index[p] ? ids_.mask : x[p];
                    pos[s * W + j] = p;
                    seq[s * W + j] = s;
                }
            }
            out_rows.clear();
            for (int s = 0; s < n_seq; ++s) {
                for (int p : need)
                    out_rows.push_back(s * W + (p - w0));
            }
            runtime::Batch batch{int64_t{n_seq} * W,
                                 tokens.data(),
                                 pos.data(),
                                 seq.data(),
                                 static_cast<int64_t>(out_rows.size()),
                                 out_rows.data(),
                                 kv_len.data()};
            const int64_t rows_before = session.stats().rows;
            predict(session, batch, need, L, noise);
            // Past its schedule (only when a step committed nothing new), a cached policy still
            // commits one position per step; a step that cannot make progress is an error.
            const int scheduled =
                i < steps_per_block
                    ? (cfg_.exact_reference ? schedule[i] : std::max(1, schedule[i]))
                    : 1;
            if (!cfg_.exact_reference && i > opt_.block + steps_per_block) {
                throw Error("decoding made no progress in block " + std::to_string(b) +
                            ": the model predicts only the mask token");
            }
            committed.clear();
            choose(scheduled);
            for (int r : chosen_) {
                x[need[r]] = cand_[r].token;
                committed.push_back(need[r]);
            }
            StepInfo info;
            info.step = global_step;
            info.block = b;
            info.step_in_block = i;
            info.committed = static_cast<int>(committed.size());
            info.rows = session.stats().rows - rows_before;
            info.lm_head_rows = batch.n_out;
            info.ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ts)
                    .count();
            res.steps.push_back(info);
            if (on_step) {
                const int total = cfg_.rule == Rule::Schedule ? opt_.steps : opt_.gen;
                on_step({res.steps.back(), total, P, x, committed});
            }
        }
        // Once a finished block holds an end-of-text token, the answer is decided: later
        // blocks cannot change anything before it.
        if (cfg_.early_stop && block_masked() == 0) {
            bool ended = false;
            for (int p = P; p < block_end && !ended; ++p) {
                ended = x[p] == ids_.eos || x[p] == ids_.eot;
            }
            if (ended && block_end < L) {
                const int32_t fill = ids_.eos >= 0 ? ids_.eos : ids_.eot;
                std::fill(x.begin() + block_end, x.end(), fill);
                res.stopped_early = true;
            }
        }
    }
    res.stats = session.stats();
    res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

}  // namespace

std::unique_ptr<Policy> make_diffusion_policy(const std::string& name, const model::Model& model,
                                              runtime::Device& device, const GenerateOptions& opt,
                                              const TokenIds& ids) {
    return std::make_unique<DiffusionPolicy>(name, model, device, opt, ids);
}

}  // namespace llada::decode
