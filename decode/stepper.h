// One generation on the Scheduler, whatever its policy: it says which window rows its next step
// needs (plan_step) and turns their predictions into its next state (apply). The diffusion
// policies' Generator (decode/generator.h), the autoregressive baseline (decode/autoregressive.h)
// and Dream's sampler (decode/dream.h) are steppers, so test-time scaling, the server and
// batching take every policy the same way. Steppers never touch kernels or the device.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "decode/lookahead.h"
#include "decode/policy.h"
#include "model/model.h"

namespace llada::decode {

// One window row a generation asks for. `seq` is the generation's own sequence index (0, or 1
// for the unconditional branch of classifier-free guidance); the scheduler maps it onto a KV
// cache sequence. The row's K/V go to `slot` of that sequence (-1: nowhere); it attends to the
// sequence's slots [0, kv_len) except `exclude` (-1: none); a causal model's row at position p
// attends to the slots [0, p].
struct RowRequest {
    int32_t token = 0;
    int32_t pos = 0;
    int32_t seq = 0;
    int32_t slot = -1;
    int32_t exclude = -1;
    bool predict = false;  // the row's prediction is needed (it goes through the LM head)
    // Attends to its own K/V (written to `slot`, a scratch slot beyond kv_len) in place of
    // `exclude`: a revision check sees a mask at its position (runtime::Batch::own_key).
    bool own_key = false;
};

struct StepRequest {
    std::vector<RowRequest> rows;
    std::vector<int32_t> kv_len;  // per own sequence
    bool need_logits = false;     // vocabulary-wide logits rows (T > 0, CFG, --full-logits)
    // Progressive revision: the CPU path's rows (K/V refreshes of revised tokens, then one
    // shadow row per Visible token). They run against the cache as the previous step left it;
    // their predictions are always logits rows (the rule needs the committed token's own
    // probability). `dense` is false on a step with no dense rows (revision after the last block).
    std::vector<RowRequest> cpu_rows;
    bool dense = true;
    // T > 0 on the fused head: the Gumbel-max draw of each predicted row, in their order.
    std::vector<model::HeadDraw> gumbel;
};

// The output of one predicted row: its logits row, or the fused head's statistics.
struct RowPrediction {
    const float* logits = nullptr;            // [n_vocab]
    const model::HeadStats* stats = nullptr;  // when the fused head ran
};

class RevisionHooks;  // decode/revision.h

class Stepper {
  public:
    virtual ~Stepper() = default;

    virtual int n_seq() const = 0;       // KV-cache sequences it holds
    virtual int canvas_len() const = 0;  // positions (prompt + generated)
    virtual bool done() const = 0;

    // The rows of the next step (valid until the next call). Call only while !done(). A step
    // may ask for no rows (it then runs no forward of its own).
    virtual const StepRequest& plan_step() = 0;
    // The predictions of the planned rows with predict = true, in their order (dense rows in
    // `preds`, CPU-path rows in `cpu_preds`).
    virtual void apply(std::span<const RowPrediction> preds,
                       std::span<const RowPrediction> cpu_preds = {}) = 0;
    // Set by the scheduler after each forward: rows the device computed for this generation
    // (tile padding included, shared padding split by rows) and the step's wall time.
    virtual void record_cost(int64_t device_rows, double ms) = 0;

    // A generation under progressive revision gives what the scheduler's CPU path needs of it
    // (decode/revision.h); every other generation, null.
    virtual RevisionHooks* revision() { return nullptr; }

    virtual const GenerateResult& result() const = 0;
    virtual GenerateResult take_result() = 0;
    // Per canvas position: its state (prompt positions Stable) and its draft token (-1 where
    // there is none).
    virtual std::span<const TokenState> states() const = 0;
    virtual std::span<const int32_t> drafts() const = 0;
    const StepInfo& last_step() const { return result().steps.back(); }
    // What a live view gets after the last step (llada-cli's --show-steps, the callbacks).
    virtual StepEvent event() const = 0;
};

// Whether a policy is one of the diffusion policies the Generator runs (every policy but `ar`
// and `dream`, which are steppers of their own).
bool is_diffusion(const std::string& policy);

// The token states of a fresh canvas of L positions whose first P are the prompt: Stable, then
// Masked.
std::vector<TokenState> fresh_states(int prompt_len, int canvas_len);

// Stepper::record_cost's bookkeeping: the last step's device rows and time, and the result's
// device rows.
void record_step_cost(GenerateResult& res, int64_t device_rows, double ms);

// The session `n` generations of one policy need on a canvas of canvas_len positions (prompt
// prompt_len): the one shape the CLI's policies, test-time scaling and the server size their
// sessions by. Throws llada::Error for a diffusion policy's impossible options.
struct SessionShape {
    int n_seq = 1;      // KV-cache sequences
    int64_t rows = 0;   // window rows a forward may carry
    int64_t outs = 0;   // output rows a forward may carry
    int64_t n_pos = 0;  // cache slots per sequence: the canvas (and --revise-tail dense's scratch)
};
SessionShape session_shape(const std::string& policy, const GenerateOptions& opt, int prompt_len,
                           int canvas_len, int n = 1);
// The session llada-server runs every request in: n_seq sequences of canvas_len positions and
// one window row per position of each. A request takes its own session_shape's sequences and
// rows of it, so a policy that asks two rows per position (drafts fed as tokens, pipeline
// checks) takes the rows of two canvases. `check_slots` (--revise-tail dense): every sequence
// also holds a canvas of scratch slots for the check rows, and the session two rows per
// position, what such a request's session_shape asks (it doubles every sequence's cache).
SessionShape shared_session_shape(int n_seq, int canvas_len, bool check_slots = false);
// The KV cache of that shape (its scratch slots may lie past the model's context; the canvas
// itself must fit, check_canvas_fits).
runtime::KvCache session_cache(const model::Model& model, const SessionShape& shape,
                               const GenerateOptions& opt);
// KV-cache sequences one generation holds: 2 under classifier-free guidance (--cfg: the
// conditional and the unconditional canvas), else 1.
int sequences_per_generation(const GenerateOptions& opt);
// Whether the policy's generations size mbsd's lookahead from a forward cost (--lookahead auto).
bool needs_lookahead_cost(const std::string& policy, const GenerateOptions& opt);

// The private session of `n` generations of one prompt under `policy`: its shape, KV cache and
// session, and (mbsd --lookahead auto) the forward cost that sizes the lookahead, taken from
// `costs` (a table kept across prompts by its owner). The one place this sequence is written:
// the CLI's policies and test-time scaling build it; llada-server's shared session is the
// engine's (shared_session_shape). Throws llada::Error when the canvas does not fit.
class GenerationSession {
  public:
    GenerationSession(const std::string& policy, const model::Model& model, runtime::Device& device,
                      const GenerateOptions& opt, int prompt_len, int n, LookaheadCosts& costs);
    GenerationSession(const GenerationSession&) = delete;
    GenerationSession& operator=(const GenerationSession&) = delete;

    model::Session& session() { return session_; }
    // A stepper of one of the generations (`opt`: the session's options, a candidate's own
    // seed say).
    std::unique_ptr<Stepper> stepper(const GenerateOptions& opt, const TokenIds& ids,
                                     std::span<const int32_t> prompt) const;

  private:
    std::string policy_;
    const model::Model& model_;
    SessionShape shape_;
    runtime::KvCache kv_;
    runtime::PlanOptions kernels_;  // its plans' options (session_kernels)
    model::Session session_;
    const ForwardCost* cost_ = nullptr;
};

// The plan options of a session for `policy`: opt.kernels, with the attention blocks set to
// --block for a policy whose decoding blocks are the attention blocks (LLaDA 2.x).
runtime::PlanOptions session_kernels(const std::string& policy, const GenerateOptions& opt);

// A stepper for `policy` (any of policy_names() but none of the model-free ones), after the
// policy's own checks of the model and options. `cost` sizes mbsd's lookahead (null: none
// available). Throws llada::Error naming what the policy cannot run.
std::unique_ptr<Stepper> make_stepper(const std::string& policy, const model::Model& model,
                                      const GenerateOptions& opt, const TokenIds& ids,
                                      std::span<const int32_t> prompt,
                                      const ForwardCost* cost = nullptr);

}  // namespace llada::decode
