// The step engine: one diffusion generation that advances one denoising step at a time. It owns
// the canvas with a state per position, says which window rows it needs each step (plan_step),
// and turns the rows' predictions into state transitions (apply). It never touches kernels or
// the device: decode::Scheduler gathers the rows of one or many generations into one forward.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "decode/commit_rule.h"
#include "decode/decisions.h"
#include "decode/lookahead.h"
#include "decode/noise.h"
#include "decode/pipeline.h"
#include "decode/policy.h"
#include "decode/registry.h"
#include "decode/revision.h"
#include "decode/sampling.h"
#include "decode/self_check.h"
#include "decode/speculation.h"
#include "decode/stepper.h"

namespace llada::decode {

// What a policy name and its options mean for the step engine.
struct DiffusionConfig {
    const char* name = "vanilla";
    WindowMode window = WindowMode::Full;
    CommitRule rule = CommitRule::Schedule;
    bool exact_reference = true;  // vanilla: every scheduled step runs, the mask id may be chosen
    bool early_stop = false;
    bool speculate = false;  // mbsd: lookahead rows in the next block(s) carry drafts
    bool pipeline = false;   // pipeline: the next block decodes beside the current one
};
// Throws llada::Error for impossible combinations, naming them.
DiffusionConfig configure_diffusion(const PolicyInfo& policy, const GenerateOptions& opt);
// The same by the policy's name (a diffusion policy of decode/registry.h).
inline DiffusionConfig configure_diffusion(std::string_view name, const GenerateOptions& opt) {
    return configure_diffusion(policy_info(name), opt);
}
// Window rows a step may ask for per canvas position and sequence: 2 when drafts are fed as
// tokens (a writer row and a shadow row), else 1. Sessions are sized with it.
int rows_per_position(const DiffusionConfig& cfg, const GenerateOptions& opt);
// The session `n` generations of one diffusion configuration need on a canvas of canvas_len
// positions (decode/stepper.h has the one for any policy).
SessionShape session_shape(const DiffusionConfig& cfg, const GenerateOptions& opt, int canvas_len,
                           int n = 1);

class Generator : public Stepper, private RevisionHooks {
  public:
    // `cost` sizes mbsd's lookahead (null: none available; then --lookahead auto is refused).
    Generator(const model::Model& model, const GenerateOptions& opt, const TokenIds& ids,
              const DiffusionConfig& cfg, std::span<const int32_t> prompt,
              const ForwardCost* cost = nullptr);

    int n_seq() const override { return opt_.cfg > 0.0 ? 2 : 1; }
    int canvas_len() const override { return L_; }
    bool done() const override { return done_; }

    const StepRequest& plan_step() override;
    // Performs the step's commits, drafts, acceptances and rejections, then the revision
    // decisions, and advances blocks.
    void apply(std::span<const RowPrediction> preds,
               std::span<const RowPrediction> cpu_preds = {}) override;
    void record_cost(int64_t device_rows, double ms) override;
    RevisionHooks* revision() override { return opt_.revise.on ? this : nullptr; }

    const GenerateResult& result() const override { return res_; }
    GenerateResult take_result() override;
    std::span<const TokenState> states() const override { return state_; }
    std::span<const int32_t> drafts() const override { return spec_.drafts(); }
    StepEvent event() const override;
    // Positions whose cache slot holds K/V computed from their current committed token.
    bool kv_fresh(int p) const {
        return kv_tok_[p] == res_.canvas[p] && state_[p] != TokenState::Masked;
    }
    // The token whose K/V the cache slot of position p holds (-1: never written).
    int32_t kv_token(int p) const { return kv_tok_[p]; }
    std::span<const int32_t> last_committed() const { return committed_; }
    // pipeline: position p holds a token committed ahead of its block, not verified yet.
    bool committed_ahead(int p) const { return cfg_.pipeline && pipe_.ahead(p); }
    std::span<const int32_t> last_revised() const { return rev_.revised(); }

  private:
    // RevisionHooks: the options, the two paths' times of the last step, --revise-rows auto's
    // costs.
    const ReviseOptions& revise_options() const override { return opt_.revise; }
    void record_lane_cost(const LaneCost& c) override;
    void set_lane_costs(ForwardCost dense, ForwardCost cpu) override {
        rev_.set_costs(std::move(dense), std::move(cpu));
    }

    // The policy's window (decode/windows.h) with the parts it takes.
    void plan_window();
    void predict(std::span<const RowPrediction> preds, int n_need);
    void commit(int p, int32_t tok);
    // A draft of the block that has just become current: committed (its draft token) or masked.
    void resolve_draft(int p, bool accept, bool early, StepInfo& info);
    struct Actions;  // what a decision source's word does (decode/decisions.h)
    int block_masked() const;
    // A trace's policy and shape fit this generation (--replay).
    void check_replay(const DecisionTrace& t) const;
    // pipeline: the later blocks' commits, and this step's verdicts on ahead commits.
    int block_offset(int p) const { return (p - P_) / opt_.block - block_; }
    void commit_ahead(StepInfo& info);
    int verify_ahead(StepInfo& info);
    void finish_block();
    void start_block();
    RevisionCanvas revision_canvas() { return {res_.canvas, state_, kv_tok_}; }

    const model::Model& model_;
    GenerateOptions opt_;
    TokenIds ids_;
    DiffusionConfig cfg_;
    CommitPolicy rule_;                          // how many and which positions a step commits
    Speculation spec_;                           // mbsd: drafts and lookahead
    Pipeline pipe_;                              // pipeline: ahead commits and their checks
    Reviser rev_;                                // --revise: the CPU path's checks
    SelfChecks sc_;                              // --self-check: refresh rows that check
    std::unique_ptr<DecisionSource> decisions_;  // the model's, or a trace's (--replay)
    CounterNoise own_noise_;
    NoiseSource* noise_;

    int P_ = 0, L_ = 0, n_blocks_ = 0, steps_per_block_ = 0;
    int shift_ = 0;  // 1 for shifted logits: position p is decided from row p - 1
    int block_ = 0, step_in_block_ = 0, global_step_ = 0;
    bool done_ = false;
    bool blocks_done_ = false;  // every block decoded (revision may go on)
    GenerateResult res_;        // its canvas is the generation's token per position
    std::vector<TokenState> state_;
    std::vector<bool> prompt_index_;
    std::vector<int32_t> kv_tok_;  // token whose K/V each slot holds (-1: none yet)

    // This step's plan.
    StepRequest req_;
    std::vector<int32_t> need_;   // positions of the current block predicted this step
    int n_cur_ = 0;               // of which in the current block (pipeline: the rest are ahead)
    std::vector<int32_t> look_;   // lookahead positions predicted this step (drafts)
    std::vector<int32_t> stale_;  // committed positions whose K/V this step recomputes
    // Decisions.
    std::vector<Candidate> cand_, look_cand_, ahead_cand_;
    // pipeline: the later blocks' positions masked when the step was planned, their predictions
    std::vector<int32_t> later_pos_, later_off_;  // and each one's block after the current one
    std::vector<Candidate> later_cand_;
    // pipeline: this step's checks, their blocks (after the current one), tokens and predictions
    std::vector<int32_t> check_pos_, check_off_, check_tok_;
    std::vector<Candidate> check_cand_;
    std::vector<Pipeline::Verdict> verdicts_;
    std::vector<float> guided_;
    std::vector<int> chosen_;
    std::vector<int32_t> committed_;
    // GenerateOptions::logprobs: this step's prediction per position (its token's log-probability
    // and the most likely tokens), copied to the result when the position is committed.
    std::vector<float> step_logprob_;
    std::vector<std::vector<GenerateResult::TokenLogprob>> step_top_;
};

}  // namespace llada::decode
