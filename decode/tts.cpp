// Test-time scaling (decode/tts.h).
#include "decode/tts.h"

#include <chrono>
#include <map>
#include <memory>

#include "decode/generator.h"
#include "decode/lookahead.h"
#include "decode/scheduler.h"
#include "decode/stepper.h"
#include "util/error.h"

namespace llada::decode {

CandidatesResult generate_candidates(const std::string& policy, const model::Model& model,
                                     runtime::Device& device, const GenerateOptions& opt,
                                     const TokenIds& ids, std::span<const int32_t> prompt, int n) {
    if (n < 1 || n > 4096) throw Error("--tts must be in [1, 4096], got " + std::to_string(n));
    if (opt.noise != nullptr && n > 1) throw Error("--tts draws each candidate's own noise");
    const auto t0 = std::chrono::steady_clock::now();
    LookaheadCosts costs;
    GenerationSession gs(policy, model, device, opt, static_cast<int>(prompt.size()), n, costs);
    model::Session& session = gs.session();
    std::vector<std::unique_ptr<Stepper>> gens;
    std::vector<Stepper*> all;
    gens.reserve(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) {
        GenerateOptions o = opt;
        o.seed = opt.seed + static_cast<uint64_t>(k);
        gens.push_back(gs.stepper(o, ids, prompt));
        all.push_back(gens.back().get());
    }
    CandidatesResult out;
    const int64_t forwards0 = session.stats().forwards;
    run_to_end(session, all);
    out.forwards = session.stats().forwards - forwards0;
    out.rows = session.stats().rows;
    out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto& g : gens) {
        out.candidates.push_back(g->take_result());
        out.candidates.back().wall_s = out.wall_s;
    }
    return out;
}

int auto_candidates(const std::string& policy, const model::Model& model, runtime::Device& device,
                    const GenerateOptions& opt, int prompt_len, int max_n, double* cost_ms) {
    check_canvas_fits(model, prompt_len, opt.gen);
    const int L = prompt_len + opt.gen;
    // The rows one candidate's typical step computes: a token (ar), the canvas (dream and the
    // full-window policies), or a block.
    int64_t r = L;
    const PolicyInfo& p = policy_info(policy);
    if (p.family == PolicyFamily::Autoregressive) {
        r = 1;
    } else if (p.diffusion() && configure_diffusion(p, opt).window != WindowMode::Full) {
        r = opt.block;
    }
    SessionShape shape = session_shape(policy, opt, prompt_len, L, max_n);
    shape.rows = shape.outs = std::max(shape.rows, r * max_n);
    runtime::KvCache kv = session_cache(model, shape, opt);
    model::Session session(model, device, kv, shape.rows, shape.outs, opt.kernels);
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
