// Test-time scaling (decode/tts.h).
#include "decode/tts.h"

#include <chrono>
#include <map>
#include <memory>

#include "decode/generator.h"
#include "decode/lookahead.h"
#include "decode/scheduler.h"
#include "util/error.h"

namespace llada::decode {

namespace {

// `ar` candidates: the prompt is prefilled once (sequence 0) and its K/V copied to every
// candidate's sequence; then each step is one forward of one row per live candidate (its newest
// token against its own cache), and candidate k samples with seed opt.seed + k, as the `ar`
// policy alone does (decode/autoregressive.cpp).
CandidatesResult ar_candidates(const model::Model& model, runtime::Device& device,
                               const GenerateOptions& opt, const TokenIds& ids,
                               std::span<const int32_t> prompt, int n) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!model.hparams().causal) {
        throw Error("policy 'ar' needs an autoregressive model; '" + model.hparams().arch +
                    "' is bidirectional");
    }
    if (opt.cfg != 0.0) throw Error("--cfg is not available with policy 'ar'");
    if (opt.noise != nullptr) throw Error("--tts draws each candidate's own noise");
    const int P = static_cast<int>(prompt.size());
    if (P == 0) throw Error("policy 'ar' needs a prompt of at least one token");
    check_canvas_fits(model, P, opt.gen);
    check_prompt_ids(model, prompt);
    const int L = P + opt.gen;
    const int64_t V = model.hparams().n_vocab;
    model::Session session(model, device, n, L, std::max(P, n), n, opt.kernels);
    CandidatesResult out;
    out.candidates.resize(static_cast<size_t>(n));
    std::vector<CounterNoise> noise;
    std::vector<bool> live(static_cast<size_t>(n), true);
    for (int k = 0; k < n; ++k) {
        noise.emplace_back(opt.seed + static_cast<uint64_t>(k));
        auto& r = out.candidates[k];
        r.prompt_len = P;
        r.canvas.reserve(L);
        r.canvas.assign(prompt.begin(), prompt.end());
    }
    std::vector<int32_t> tok(std::max(P, n)), pos(std::max(P, n)), seq(std::max(P, n)), outs(n),
        who(n);
    for (int p = 0; p < P; ++p) {
        tok[p] = prompt[p];
        pos[p] = p;
        seq[p] = 0;
    }
    outs[0] = P - 1;
    const float* logits = session.forward({P, tok.data(), pos.data(), seq.data(), 1, outs.data()});
    for (int k = 1; k < n; ++k) {
        for (int p = 0; p < P; ++p)
            session.kv().copy_slot(0, k, p);
    }
    std::vector<float> first(logits, logits + V);
    for (int step = 0; step < opt.gen; ++step) {
        int m = 0;
        for (int k = 0; k < n; ++k) {
            if (!live[k]) continue;
            const float* row = step == 0 ? first.data() : logits + static_cast<int64_t>(m++) * V;
            if (opt.temperature > 0.0) noise[k].next_draw(V);
            const int32_t next = pick_candidate(row, V, opt.temperature, noise[k], 0).token;
            auto& r = out.candidates[k];
            r.canvas.push_back(next);
            r.confidence_sum += softmax_prob(row, V, next);
            ++r.confidence_n;
            StepInfo info;
            info.step = step;
            info.committed = 1;
            info.rows = step == 0 ? P : 1;
            info.lm_head_rows = 1;
            r.steps.push_back(info);
            r.stats.forwards += 1;
            r.stats.rows += info.rows;
            r.stats.lm_head_rows += 1;
            live[k] = next != ids.eos && next != ids.eot && step + 1 < opt.gen;
        }
        m = 0;
        for (int k = 0; k < n; ++k) {
            if (!live[k]) continue;
            const int32_t p = P + step;
            tok[m] = out.candidates[k].canvas[p];
            pos[m] = p;
            seq[m] = k;
            outs[m] = m;
            ++m;
        }
        if (m == 0) break;
        logits = session.forward({m, tok.data(), pos.data(), seq.data(), m, outs.data()});
    }
    for (auto& r : out.candidates)
        r.canvas.resize(L, ids.eos >= 0 ? ids.eos : ids.eot);
    out.forwards = session.stats().forwards;
    out.rows = session.stats().rows;
    out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

}  // namespace

CandidatesResult generate_candidates(const std::string& policy, const model::Model& model,
                                     runtime::Device& device, const GenerateOptions& opt,
                                     const TokenIds& ids, std::span<const int32_t> prompt, int n) {
    if (n < 1 || n > 4096) throw Error("--tts must be in [1, 4096], got " + std::to_string(n));
    if (policy == "ar") return ar_candidates(model, device, opt, ids, prompt, n);
    const auto t0 = std::chrono::steady_clock::now();
    const DiffusionConfig cfg = configure_diffusion(policy, opt);
    check_canvas_fits(model, static_cast<int>(prompt.size()), opt.gen);
    const int L = static_cast<int>(prompt.size()) + opt.gen;
    const int per = opt.cfg > 0.0 ? 2 : 1;
    const int64_t rows = int64_t{n} * per * L * rows_per_position(cfg, opt);
    model::Session session(model, device, n * per, L, rows, rows, opt.kernels);
    // mbsd --lookahead auto: each candidate sizes its lookahead on one candidate's cost table
    // (as if alone; the other candidates' rows in the same forward are not weighed).
    ForwardCost cost;
    if (cfg.speculate && opt.lookahead < 0)
        cost = lookahead_cost(session, opt, int64_t{per} * L, L);
    std::vector<std::unique_ptr<Generator>> gens;
    gens.reserve(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) {
        GenerateOptions o = opt;
        o.seed = opt.seed + static_cast<uint64_t>(k);
        gens.push_back(std::make_unique<Generator>(model, o, ids, cfg, prompt,
                                                   cost.empty() ? nullptr : &cost));
    }
    CandidatesResult out;
    {
        Scheduler sched(session);
        for (auto& g : gens)
            sched.add(*g);
        const int64_t forwards0 = session.stats().forwards;
        while (sched.step()) {
            for (auto& g : gens) {
                if (g->done()) sched.remove(*g);
            }
        }
        out.forwards = session.stats().forwards - forwards0;
        out.rows = session.stats().rows;
    }
    for (auto& g : gens)
        out.candidates.push_back(g->take_result());
    out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

int auto_candidates(const std::string& policy, const model::Model& model, runtime::Device& device,
                    const GenerateOptions& opt, int prompt_len, int max_n, double* cost_ms) {
    const DiffusionConfig cfg = configure_diffusion(policy, opt);
    check_canvas_fits(model, prompt_len, opt.gen);
    const int L = prompt_len + opt.gen;
    const int64_t r = cfg.window == WindowMode::Full ? L : opt.block;
    model::Session session(model, device, 1, L, r * max_n, r * max_n, opt.kernels);
    const ForwardCost cost = device_forward_cost(session, r * max_n, L);
    if (cost.empty()) {
        throw Error(
            "--tts auto sizes N from the device's latency table; this device has none (use "
            "--device npu-sim, or give --tts N)");
    }
    const double one = cost.at(r);
    int n = 1;
    for (int k = 2; k <= max_n; ++k) {
        if (cost.at(k * r) <= 1.1 * one) n = k;
    }
    if (cost_ms) *cost_ms = cost.at(n * r);
    return n;
}

int select_by_vote(const std::vector<std::string>& answers, const std::vector<double>& confidence) {
    if (answers.empty() || answers.size() != confidence.size()) {
        throw Error("vote: one confidence per answer is needed");
    }
    struct Tally {
        int votes = 0;
        double conf = 0.0;
        int first = 0;
    };
    std::map<std::string, Tally> t;
    for (size_t i = 0; i < answers.size(); ++i) {
        auto [it, fresh] = t.try_emplace(answers[i]);
        if (fresh) it->second.first = static_cast<int>(i);
        it->second.votes += 1;
        it->second.conf += confidence[i];
    }
    const Tally* best = nullptr;
    for (const auto& [answer, v] : t) {
        if (answer.empty() && t.size() > 1) continue;  // abstains
        if (best == nullptr) {
            best = &v;
            continue;
        }
        const double mean = v.conf / v.votes, best_mean = best->conf / best->votes;
        if (v.votes > best->votes || (v.votes == best->votes && mean > best_mean) ||
            (v.votes == best->votes && mean == best_mean && v.first < best->first))
            best = &v;
    }
    return best->first;
}

int select_by_confidence(const std::vector<double>& confidence) {
    if (confidence.empty()) throw Error("confidence selection of no candidates");
    int best = 0;
    for (size_t i = 1; i < confidence.size(); ++i) {
        if (confidence[i] > confidence[best]) best = static_cast<int>(i);
    }
    return best;
}

}  // namespace llada::decode
