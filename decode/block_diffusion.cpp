// LLaDA 2.x decoding (decode/block_diffusion.h).
#include "decode/block_diffusion.h"

#include <algorithm>
#include <cmath>

#include "decode/sampling.h"
#include "util/error.h"

namespace llada::decode {

namespace {

class BlockDiffusion : public Stepper {
  public:
    BlockDiffusion(const model::Model& model, const GenerateOptions& opt, const TokenIds& ids,
                   std::span<const int32_t> prompt)
        : opt_(opt), ids_(ids), V_(model.hparams().n_vocab) {
        check_block_diffusion(model, opt, ids);
        // The session's plans attend in blocks of opt.kernels.attention_block (the model's
        // own when 0; decode::session_kernels sets it to --block for a session of its own).
        const int64_t attention = opt.kernels.attention_block > 0 ? opt.kernels.attention_block
                                                                  : model.hparams().attention_block;
        if (opt.block != attention) {
            throw Error("policy 'llada2' decodes in the attention blocks of the session (" +
                        std::to_string(attention) +
                        " positions, the model's llada_cpp.block_length unless the session "
                        "sets them); --block " +
                        std::to_string(opt.block) + " differs");
        }
        check_prompt_ids(model, prompt);
        P_ = static_cast<int>(prompt.size());
        if (P_ == 0) throw Error("policy 'llada2' needs a prompt of at least one token");
        B_ = opt.block;
        L_ = block_diffusion_canvas(opt, P_);
        check_canvas_fits(model, P_, L_ - P_);
        threshold_ = opt.threshold > 0.0 ? opt.threshold : kLlada2Threshold;
        steps_ = opt.block_steps > 0 ? opt.block_steps : B_;
        editing_ = opt.editing_threshold >= 0.0;
        res_.prompt_len = P_;
        res_.canvas.assign(prompt.begin(), prompt.end());
        res_.canvas.resize(L_, ids_.mask);
        states_ = fresh_states(P_, L_);
        drafts_.assign(L_, -1);
        req_.rows.reserve(2 * static_cast<size_t>(L_));
        req_.kv_len.assign(1, 0);
        req_.need_logits = !opt.fused_sampling;
        block_ = P_ / B_;
        start_block();
    }

    int n_seq() const override { return 1; }
    int canvas_len() const override { return L_; }
    bool done() const override { return done_; }

    const StepRequest& plan_step() override {
        const auto& x = res_.canvas;
        const int s = block_ * B_, e = s + B_;
        req_.rows.clear();
        // The prompt's whole blocks before the first one decoded, once; at a block's first
        // step, the previous block's final tokens, once: their K/V are final from then on.
        const int from = step_ == 0 ? 0 : step_in_block_ == 0 ? s - B_ : s;
        masks_at_plan_ = 0;
        for (int p = from; p < e; ++p) {
            const bool masked = x[p] == ids_.mask;
            masks_at_plan_ += p >= s && masked;
            // Predicted: the block's masks, and under editing its tokens committed so far.
            const bool predict = p >= s && (masked || (editing_ && p >= P_));
            req_.rows.push_back({x[p], p, 0, p, -1, predict});
        }
        req_.kv_len[0] = e;
        if (editing_ && masks_at_plan_ == 0) ++post_steps_;
        return req_;
    }

    void apply(std::span<const RowPrediction> preds, std::span<const RowPrediction>) override {
        auto& x = res_.canvas;
        const int s = block_ * B_, e = s + B_;
        // Each predicted row's argmax and its probability, by position.
        cand_.clear();
        size_t r = 0;
        for (const RowRequest& row : req_.rows) {
            if (!row.predict) continue;
            const RowPrediction& pr = preds[r++];
            Candidate c;
            if (pr.stats != nullptr && !req_.need_logits) {
                check_finite_logit(pr.stats->token < 0 ? NAN : pr.stats->max, row.pos);
                c = {pr.stats->token, model::head_confidence(*pr.stats)};
            } else {
                c.token = argmax(pr.logits, V_);
                check_finite_logit(pr.logits[c.token], row.pos);
                c.confidence = softmax_prob(pr.logits, V_, c.token);
            }
            cand_.push_back({row.pos, c});
        }
        // Commits among the masks.
        masked_.clear();
        for (const auto& [p, c] : cand_)
            if (x[p] == ids_.mask) masked_.push_back({p, c});
        committed_.clear();
        if (!masked_.empty()) {
            const int k = editing_ ? 1 : quota_[std::min(step_in_block_, steps_ - 1)];
            int above = 0;
            for (const auto& [p, c] : masked_)
                above += c.confidence >= threshold_;
            if (above >= k && above > 0) {
                for (const auto& [p, c] : masked_)
                    if (c.confidence >= threshold_) committed_.push_back(p);
            } else {
                // The quota's most confident (ties to the lower position).
                std::stable_sort(masked_.begin(), masked_.end(), [](const auto& a, const auto& b) {
                    return a.second.confidence > b.second.confidence;
                });
                for (int i = 0; i < k && i < static_cast<int>(masked_.size()); ++i)
                    committed_.push_back(masked_[static_cast<size_t>(i)].first);
                std::sort(committed_.begin(), committed_.end());
            }
        }
        // Edits among the block's tokens committed before this step.
        edited_.clear();
        if (editing_) {
            for (const auto& [p, c] : cand_) {
                if (p < P_ || x[p] == ids_.mask) continue;
                if (c.confidence > opt_.editing_threshold && c.token != x[p]) edited_.push_back(p);
            }
        }
        StepInfo info;
        info.step = step_;
        info.block = block_;
        info.step_in_block = step_in_block_;
        for (int p : committed_) {
            const Candidate& c = find(p);
            check_spellable(ids_, c.token, p);
            x[p] = c.token;
            // The reference may choose the mask id itself; the position then stays masked.
            states_[p] = c.token == ids_.mask ? TokenState::Masked : TokenState::Visible;
            res_.confidence_sum += c.confidence;
            ++res_.confidence_n;
        }
        for (int p : edited_) {
            const Candidate& c = find(p);
            check_spellable(ids_, c.token, p);
            res_.revision_events.push_back({p, x[p], c.token, step_});
            x[p] = c.token;
            if (c.token == ids_.mask) states_[p] = TokenState::Masked;
        }
        info.committed = static_cast<int>(committed_.size());
        info.revised = static_cast<int>(edited_.size());
        info.checks = editing_ ? static_cast<int>(cand_.size() - masked_.size()) : 0;
        res_.revision.checks += info.checks;
        res_.revision.revisions += info.revised;
        info.rows = static_cast<int64_t>(req_.rows.size());
        info.rows_device = info.rows;
        info.lm_head_rows = static_cast<int64_t>(cand_.size());
        for (int p = s; p < e; ++p) {
            const bool m = x[p] == ids_.mask;
            info.rows_masked += m;
            info.rows_committed += !m;
        }
        res_.rows_device += info.rows;
        res_.stats.forwards += 1;
        res_.stats.rows += info.rows;
        res_.stats.lm_head_rows += info.lm_head_rows;
        ++step_;
        ++step_in_block_;
        // Whether the block is over (docs/llada2.md).
        int masks = 0;
        for (int p = s; p < e; ++p)
            masks += x[p] == ids_.mask;
        bool over = false;
        if (editing_) {
            over = (masks_at_plan_ == 0 && edited_.empty()) ||
                   (masks == 0 && post_steps_ >= opt_.max_post_steps);
        } else {
            over = masks == 0 || step_in_block_ >= steps_;
        }
        if (over) finish_block();
        for (int p = P_; p < L_; ++p) {
            info.n_masked += states_[p] == TokenState::Masked;
            info.n_visible += states_[p] == TokenState::Visible;
            info.n_stable += states_[p] == TokenState::Stable;
        }
        res_.steps.push_back(info);
    }

    void record_cost(int64_t device_rows, double ms) override {
        record_step_cost(res_, device_rows, ms);
    }
    const GenerateResult& result() const override { return res_; }
    GenerateResult take_result() override {
        // The answer is the positions asked for; the block's rest past them is not.
        res_.canvas.resize(static_cast<size_t>(P_ + opt_.gen));
        return std::move(res_);
    }
    std::span<const TokenState> states() const override { return states_; }
    std::span<const int32_t> drafts() const override { return drafts_; }
    StepEvent event() const override {
        return {last_step(), steps_ * (L_ / B_ - P_ / B_),
                P_,          res_.canvas,
                committed_,  states_,
                drafts_,     edited_};
    }

  private:
    static int32_t argmax(const float* row, int64_t V) {
        return static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
    const Candidate& find(int p) const {
        for (const auto& [q, c] : cand_)
            if (q == p) return c;
        throw Error("internal: position " + std::to_string(p) + " was not predicted");
    }
    void start_block() {
        const int s = block_ * B_, e = s + B_;
        int m = 0;
        for (int p = s; p < e; ++p)
            m += res_.canvas[p] == ids_.mask;
        quota_.assign(static_cast<size_t>(steps_), m / steps_);
        for (int i = 0; i < m % steps_; ++i)
            ++quota_[static_cast<size_t>(i)];
        step_in_block_ = 0;
        post_steps_ = 0;
    }
    void finish_block() {
        auto& x = res_.canvas;
        const int s = block_ * B_, e = s + B_;
        bool eos = false;
        for (int p = std::max(s, P_); p < e; ++p) {
            if (states_[p] == TokenState::Visible) states_[p] = TokenState::Stable;
            eos = eos || x[p] == ids_.eos || (ids_.eot >= 0 && x[p] == ids_.eot);
        }
        ++block_;
        if (eos || block_ * B_ >= L_) {
            // The rest reads as end of text, as a diffusion canvas stopped early does.
            const int32_t fill = ids_.eos >= 0 ? ids_.eos : ids_.eot;
            for (int p = e; p < L_; ++p) {
                x[p] = fill;
                states_[p] = TokenState::Stable;
            }
            res_.stopped_early = e < L_;
            done_ = true;
            return;
        }
        start_block();
    }

    GenerateOptions opt_;
    TokenIds ids_;
    int64_t V_ = 0;
    int P_ = 0, L_ = 0, B_ = 0, steps_ = 0;
    double threshold_ = kLlada2Threshold;
    bool editing_ = false;
    int block_ = 0, step_ = 0, step_in_block_ = 0, post_steps_ = 0, masks_at_plan_ = 0;
    std::vector<int> quota_;
    bool done_ = false;
    GenerateResult res_;
    std::vector<TokenState> states_;
    std::vector<int32_t> drafts_;
    StepRequest req_;
    std::vector<std::pair<int, Candidate>> cand_, masked_;
    std::vector<int32_t> committed_, edited_;
};

}  // namespace

int block_diffusion_canvas(const GenerateOptions& opt, int prompt_len) {
    const int b = std::max(opt.block, 1);
    return (prompt_len + opt.gen + b - 1) / b * b;
}

void check_block_diffusion(const model::Model& model, const GenerateOptions& opt,
                           const TokenIds& ids) {
    const model::Hparams& hp = model.hparams();
    if (hp.attention_block <= 0) {
        throw Error("policy 'llada2' decodes a block-causal model (LLaDA 2.x); '" + hp.arch +
                    "' is not one");
    }
    if (ids.mask < 0 || ids.mask >= hp.n_vocab)
        throw Error("the model has no mask token in its vocabulary, so it cannot be decoded");
    if (opt.gen <= 0) throw Error("--gen must be positive, got " + std::to_string(opt.gen));
    if (opt.block <= 0) throw Error("--block must be positive, got " + std::to_string(opt.block));
    if (opt.factor > 0.0)
        throw Error("policy 'llada2' commits by --threshold (LLaDA2's rule), not --factor");
    if (opt.temperature != 0.0)
        throw Error("policy 'llada2' decodes greedily (the argmax); --temperature is not taken");
    if (opt.cfg != 0.0) throw Error("--cfg is not available with policy 'llada2'");
    if (opt.logprobs >= 0) throw Error("logprobs are not recorded by policy 'llada2'");
    if (opt.editing_threshold >= 0.0 && opt.block_steps > 0) {
        throw Error(
            "--block-steps is LLaDA2.0's schedule; with --editing-threshold (LLaDA2.1) a step "
            "commits by the threshold alone");
    }
    if (opt.editing_threshold < 0.0 && opt.max_post_steps != GenerateOptions{}.max_post_steps)
        throw Error("--max-post-steps is a setting of --editing-threshold; give it too");
}

std::unique_ptr<Stepper> make_block_diffusion_stepper(const model::Model& model,
                                                      const GenerateOptions& opt,
                                                      const TokenIds& ids,
                                                      std::span<const int32_t> prompt) {
    return std::make_unique<BlockDiffusion>(model, opt, ids, prompt);
}

}  // namespace llada::decode
