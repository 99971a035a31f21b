// The `vanilla` policy: LLaDA's reference generate(), decision for decision.
//
// canvas = prompt + gen mask ids; blocks of `block` positions from the end of the prompt, left
// to right; steps split evenly over blocks; at every step one forward over the whole canvas
// (and, with classifier-free guidance, over a second canvas whose prompt is masked), then the
// scheduled number of masked positions of the current block are committed by confidence.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "decode/policy.h"
#include "decode/sampling.h"
#include "util/error.h"

namespace llada::decode {
namespace {

class VanillaPolicy : public Policy {
  public:
    VanillaPolicy(const model::Model& model, runtime::Device& device, const GenerateOptions& opt,
                  const TokenIds& ids)
        : model_(model), device_(device), opt_(opt), ids_(ids) {
        validate_common_options(opt, ids, model);
    }

    const char* name() const override { return "vanilla"; }

    GenerateResult generate(std::span<const int32_t> prompt, const StepCallback& on_step) override {
        const auto t0 = std::chrono::steady_clock::now();
        const int P = static_cast<int>(prompt.size());
        const int L = P + opt_.gen;
        check_canvas_fits(model_, P, opt_.gen);
        check_prompt_ids(model_, prompt);
        const int64_t V = model_.hparams().n_vocab;
        const int n_seq = opt_.cfg > 0.0 ? 2 : 1;
        model::Session session(model_, device_, n_seq, L, int64_t{n_seq} * L, int64_t{n_seq} * L);

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
        std::vector<int32_t> out_rows, kv_len(n_seq, L), need;
        for (int s = 0; s < n_seq; ++s) {
            for (int p = 0; p < L; ++p) {
                pos[s * L + p] = p;
                seq[s * L + p] = s;
            }
        }
        std::vector<float> guided(static_cast<size_t>(V));
        std::vector<Candidate> cand;
        std::vector<int32_t> committed;

        const int n_blocks = opt_.gen / opt_.block;
        const int steps_per_block = opt_.steps / n_blocks;
        int global_step = 0;
        for (int b = 0; b < n_blocks; ++b) {
            const int block_end = P + (b + 1) * opt_.block;
            int masked = 0;
            for (int p = block_end - opt_.block; p < block_end; ++p)
                masked += x[p] == ids_.mask;
            const std::vector<int> schedule = num_transfer_tokens(masked, steps_per_block);
            for (int i = 0; i < steps_per_block; ++i, ++global_step) {
                const auto ts = std::chrono::steady_clock::now();
                // Rows whose prediction can matter: masked positions before the block's end.
                need.clear();
                for (int p = 0; p < block_end; ++p) {
                    if (x[p] == ids_.mask) need.push_back(p);
                }
                for (int p = 0; p < L; ++p)
                    tokens[p] = x[p];
                if (n_seq == 2) {
                    for (int p = 0; p < L; ++p)
                        tokens[L + p] = prompt_index[p] ? ids_.mask : x[p];
                }
                out_rows.assign(need.begin(), need.end());
                if (n_seq == 2) {
                    for (int p : need)
                        out_rows.push_back(L + p);
                }
                runtime::Batch batch{int64_t{n_seq} * L,
                                     tokens.data(),
                                     pos.data(),
                                     seq.data(),
                                     static_cast<int64_t>(out_rows.size()),
                                     out_rows.data(),
                                     kv_len.data()};
                const int64_t rows_before = session.stats().rows;
                const float* logits = session.forward(batch);

                // The reference draws Gumbel noise for the whole [L][V] logits, then (random
                // remasking) L uniforms; only the rows in `need` are read.
                if (opt_.temperature > 0.0) noise.next_draw(int64_t{L} * V);
                cand.assign(need.size(), {});
                const int64_t n_need = static_cast<int64_t>(need.size());
                for (int64_t r = 0; r < n_need; ++r) {
                    const float* row = logits + r * V;
                    if (n_seq == 2) {
                        guide(row, logits + (n_need + r) * V, static_cast<float>(opt_.cfg),
                              guided.data(), V);
                        row = guided.data();
                    }
                    cand[r] = pick_candidate(row, V, opt_.temperature, noise, int64_t{need[r]} * V);
                    if (opt_.remasking == Remasking::LowConfidence) {
                        cand[r].confidence = softmax_prob(row, V, cand[r].token);
                    }
                }
                if (opt_.remasking == Remasking::Random) {
                    noise.next_draw(L);
                    // The reference draws these in float32.
                    for (int64_t r = 0; r < n_need; ++r) {
                        cand[r].confidence = static_cast<float>(noise.at(need[r]));
                    }
                }
                committed.clear();
                for (int r : select_top_k(cand, schedule[i])) {
                    x[need[r]] = cand[r].token;
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
                if (on_step) on_step({res.steps.back(), opt_.steps, P, x, committed});
            }
        }
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

std::unique_ptr<Policy> make_vanilla_policy(const model::Model& model, runtime::Device& device,
                                            const GenerateOptions& opt, const TokenIds& ids) {
    return std::make_unique<VanillaPolicy>(model, device, opt, ids);
}

}  // namespace llada::decode
