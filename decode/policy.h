// Decoding policies: how a canvas of masked positions becomes text. A policy knows tokens and
// logits; it asks a model::Session for the logits of the rows it needs and decides what to commit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "decode/noise.h"
#include "decode/trace.h"
#include "model/model.h"
#include "runtime/device.h"

namespace llada::decode {

enum class Remasking { LowConfidence, Random };

// The state of a generated position (docs/step-engine.md). Prompt positions are Stable.
//   Masked   holds the mask token.
//   Draft    a speculative prediction for a later block (mbsd); not committed, and its K/V is
//            never part of the cache that later steps treat as final.
//   Visible  committed, still revisable (K/V may be refreshed).
//   Stable   final: its block is complete and its K/V is part of the stable prefix.
enum class TokenState : uint8_t { Masked, Draft, Visible, Stable };
const char* token_state_name(TokenState s);

// What a draft row feeds into the window (mbsd): the mask token (the default: a draft changes
// nothing that other rows see), or the draft token itself (drafts act as context for the rows
// around them; their K/V are written to the draft's slot, which is recomputed whenever the
// position's state changes).
enum class DraftInput { Mask, Token };
// How the pipeline checks a token committed ahead of its block (docs/step-engine.md, "Pipelined
// blocks"): Mask feeds the mask at every ahead position of a block in its first forward as the
// current block; Shadow adds a check row (the mask, blind to its own key) beside the token, so
// the checks of several blocks can share one forward, in block order; Window feeds the mask at
// every ahead position of the window in the next forward (one row a position, judged alone).
enum class PipelineVerify { Mask, Shadow, Window };
const char* pipeline_verify_name(PipelineVerify v);
// "mask", "shadow" or "window"; false for any other name.
bool parse_pipeline_verify(const std::string& name, PipelineVerify& out);
struct GenerateOptions;
// A pipeline trace's windows follow from the options it was recorded with: sets them in opt
// (nothing for another trace).
void use_trace_pipeline(const DecisionTrace& t, GenerateOptions& opt);
const char* remasking_name(Remasking r);

// Progressive revision (docs/step-engine.md, "Progressive revision"): committed tokens stay
// Visible and are re-checked every step by a shadow row (the mask at their position, blind to
// their own key) on a CPU path beside the dense window, until they are Stable.
enum class ReviseMode {
    Replace,  // a revised token becomes the shadow row's argmax (stays Visible)
    Remask,   // a revised token returns to masked (the commit rule takes it again)
};
struct ReviseOptions {
    bool on = false;
    ReviseMode mode = ReviseMode::Replace;
    // Revised when the shadow's argmax beats the token by >= margin in probability, or the
    // token's own re-evaluated probability falls below floor.
    double margin = 0.5;
    double floor = 0.02;
    // Stable after stable_k consecutive checks with re-evaluated probability >= stable, or
    // `budget` steps after its (last) commit; never before every earlier position is stable.
    double stable = 0.9;
    int stable_k = 2;
    int budget = 8;
    // CPU-path rows per step: 0 = a check of every visible token (default), N > 0 = at most N
    // (K/V refreshes first, then the leftmost visible tokens), -1 = auto: as many as the
    // projected CPU lane finishes within the dense lane's projected step (a projected device).
    int rows = 0;
    // The checks' context: true = the CPU path also recomputes the K/V of every committed token
    // whose cached K/V are not of its token yet (tokens committed last step, which the dense
    // path refreshes this step), so every check sees every committed token; false = it
    // recomputes only revised tokens' K/V, and a check sees last step's commits as the cache
    // holds them (masks): fewer CPU rows, a check one step behind.
    bool fresh_context = true;
    int threads = 1;      // the CPU path's own thread pool
    bool serial = false;  // run the CPU path after the dense forward on the calling thread
    // After the last block, when only checks are left: false = they run on the CPU path (the
    // dense device idles); true = they run on the dense device as a forward of their own (its
    // cache then holds scratch slots for the check rows, twice the canvas).
    bool tail_dense = false;
};

// Self-checks (need, mbsd; docs/step-engine.md, "Self-checks"): the row that recomputes a
// committed token's K/V (once, in the next forward) also predicts its position when the token
// is due a check: committed with confidence below `below` (1: every token), replaced, or committed
// in the step a check replaced another token. A prediction of another token with probability >=
// `accept` replaces the token; its K/V are then recomputed, and the new token checked, in the
// forward after. A check costs an LM-head row and no forward row, but it means something only
// for a model trained to judge the token it is fed (tiny-llada-lc, train/finetune_check.py):
// LLaDA's loss is on masked positions only. Blocks whose tokens a later forward refreshes
// (every block but the last) commit at `threshold`, lower than the last block's --threshold:
// the checks recover its losses.
struct SelfCheckOptions {
    bool on = false;
    double accept = 0.75;
    double below = 0.99;
    double threshold = -1.0;  // < 0: --threshold
};

// Special token ids a policy needs.
struct TokenIds {
    int32_t mask = -1;
    int32_t eos = -1;  // end of text (-1 if none)
    int32_t eot = -1;  // end of turn (-1 if none)
    // Ids at or above this have an output row but no token to spell them (converters pad the
    // embedding past the tokenizer); choosing one is an error when it happens. -1: every row.
    int32_t n_spellable = -1;
};

// The `dream` policy: Dream's own sampler (decode/dream.cpp, docs/dream-decoding.md).
struct DreamOptions {
    // origin | maskgit_plus | topk_margin | entropy (Dream's README and evaluation use entropy)
    std::string alg = "entropy";
    double alg_temp = 0.0;  // > 0: positions drawn from softmax(confidence / alg_temp)
    double eps = 1e-3;      // the schedule's end: timesteps = linspace(1, eps, steps + 1)
    double top_p = 1.0;     // 1: off
    int top_k = 0;          // 0: off
};

// The threshold rule's tau when none is given (Fast-dLLM's): the threshold policy's default,
// the server's for dual-cache, and llada-bench's threshold rows.
inline constexpr double kDefaultThreshold = 0.9;

// Which tokens a sampled choice (temperature > 0) may take, as llama.cpp's samplers filter
// them: the top_k most likely (0: off), then those whose probability is at least min_p times
// the most likely one's (0: off). Both off: every token. The candidate's confidence stays its
// probability under the model's whole distribution.
enum class NeedRefresh { Once, Suffix, Block };

struct SampleFilter {
    int top_k = 0;
    double min_p = 0.0;
    bool on() const { return top_k > 0 || min_p > 0.0; }
};

struct GenerateOptions {
    int gen = 64;    // generated positions
    int steps = 64;  // denoising steps in total (split evenly over blocks)
    int block = 32;  // block length
    double temperature = 0.0;
    SampleFilter filter;  // with temperature > 0 (the policies that sample); the dream policy
                          // has its own (dream.top_k, dream.top_p)
    // Record each generated token's log-probability under the distribution of the step that
    // committed it (GenerateResult::logprobs) and, for logprobs > 0, that many of the step's
    // most likely tokens (top_logprobs; full logits rows then, as the fused head keeps two).
    // -1: off. The LLaDA policies without --revise, and ar.
    int logprobs = -1;
    double cfg = 0.0;  // classifier-free guidance scale w (0 = off)
    Remasking remasking = Remasking::LowConfidence;
    uint64_t seed = 0;
    // Replaces the seeded generator (tests replay the reference's recorded draws).
    NoiseSource* noise = nullptr;

    // Parallel commit rules (instead of the fixed schedule); 0 = off. threshold: commit every
    // masked position of the block whose confidence >= threshold, at least the most confident.
    // factor: the n-th most confident needs >= 1 - factor / (n + 1), at least one.
    double threshold = 0.0;
    double factor = 0.0;
    // Cached policies: a full forward refreshes every K/V at the start of each block and, if
    // refresh > 0, every `refresh` steps within it (refresh = 1 makes every step a full forward).
    int refresh = 0;
    // Stop once a completed block holds an end-of-text token: everything the answer can contain
    // is then decided. -1 = the policy's default (off for vanilla, on otherwise).
    int early_stop = -1;
    // Allow the fused LM-head kernel (argmax and confidence without vocabulary-wide logits)
    // where the decision needs no full row (T = 0, no CFG); false forces full logits.
    bool fused_sampling = true;
    // Kernel choices (table-driven exp / int4 dequantisation), passed to the model's plans.
    runtime::PlanOptions kernels;

    // The windows of need (need, mbsd, pipeline): beyond the committed rows recomputed once after
    // their commit, none (Once), at each block's first step the masked rows after the block
    // (Suffix), or at each block's first step every row and at the others the block's committed
    // rows (Block: the rows dual-cache computes).
    NeedRefresh need_refresh = NeedRefresh::Suffix;
    // mbsd: lookahead rows per step; -1 = auto (sized from the device's latency table or this
    // host's calibrated forward cost), N >= 0 forces N.
    int lookahead = -1;
    // mbsd auto lookahead: the window's activation memory may not exceed this (0: no cap
    // beyond the session's rows).
    double lookahead_mem_mb = 0.0;
    DraftInput draft_input = DraftInput::Mask;
    // mbsd draft acceptance: when its block becomes current, a draft is accepted if that
    // block's first forward predicts the same token with confidence >= accept (default 0.5).
    double accept = 0.5;
    // pipeline: a later block starts decoding beside the current one once this share of the
    // block before it is committed, up to pipeline_depth blocks ahead; each step an ahead block
    // commits its positions whose confidence reaches pipeline_threshold, and at least its
    // pipeline_min most confident ones. Those commits count once verified in block order: kept
    // when a check predicts the same token with confidence >= pipeline_accept, else masked
    // again (pipeline_verify says how a check is made; docs/step-engine.md).
    double pipeline_start = 0.0;
    double pipeline_threshold = kDefaultThreshold;
    int pipeline_min = 0;
    double pipeline_accept = 0.5;
    int pipeline_depth = 3;
    PipelineVerify pipeline_verify = PipelineVerify::Shadow;
    // mbsd --lookahead auto on a device without a cost model: this host's forward cost by row
    // count is measured once per canvas length and kept here (empty: in memory only);
    // recalibrate measures again.
    std::string calibration_file;
    bool recalibrate = false;
    // Replay (decode/trace.h): each step commits as many positions, and accepts as large a
    // share of its drafts, as the trace's step did; the windows follow from the policy's own
    // rules. Predictions only supply the tokens (any non-mask token on a timing-only device).
    const DecisionTrace* replay = nullptr;
    ReviseOptions revise;
    SelfCheckOptions self_check;
    DreamOptions dream;
    // LLaDA 2.x (policy llada2, decode/block_diffusion.h): LLaDA2.0's steps per block (0: the
    // block length); LLaDA2.1's token editing at this probability (< 0: off) with at most
    // max_post_steps steps after a block's last mask.
    int block_steps = 0;
    double editing_threshold = -1.0;
    int max_post_steps = 16;
};

// One denoising step as it happened.
struct StepInfo {
    int step = 0;           // global step index
    int block = 0;          // block index
    int step_in_block = 0;  // step within the block
    int committed = 0;      // positions decided at this step
    int64_t rows = 0;       // transformer rows computed at this step
    int64_t lm_head_rows = 0;
    double ms = 0.0;  // host wall time of the step
    // Step engine counters (the diffusion policies).
    int64_t rows_device = 0;        // rows the device computed (tile padding included)
    int lookahead = 0;              // lookahead rows in the window (mbsd)
    int drafts_proposed = 0;        // lookahead rows whose prediction became a draft
    int drafts_accepted = 0;        // drafts committed when their block became current
    int drafts_accepted_early = 0;  // of which below the commit rule's bar (threshold)
    int drafts_rejected = 0;        // drafts returned to masked then
    // pipeline: positions of the next block committed ahead of their block, and, when their
    // block became current, those verified (kept) and rejected (masked again).
    int ahead_committed = 0, ahead_verified = 0, ahead_rejected = 0;
    std::vector<AheadCounts> ahead;  // the same per block, from the current one on (traces)
    int n_masked = 0, n_draft = 0, n_visible = 0, n_stable = 0;  // generated positions by state
    // The window's rows by the state of their position (first sequence).
    int rows_masked = 0, rows_draft = 0, rows_committed = 0;
    // Progressive revision: the CPU path's rows (shadow checks + K/V refreshes of revised
    // tokens), what the checks decided, and the two paths' times.
    int checks = 0, refreshes = 0;
    int revised = 0, remasked = 0, stabilised = 0;
    bool dense = true;        // false: a step of the CPU path alone (after the last block)
    double cpu_ms = 0.0;      // host wall time of the CPU path's forward
    double exposed_ms = 0.0;  // of which the dense path waited for (not hidden behind it)
    double proj_dense_ms = 0.0, proj_cpu_ms = 0.0, proj_merge_ms = 0.0;  // projected (npu-sim)
    double proj_contention_ms = 0.0;  // projected shared-DRAM slowdown of the overlap
};

// What a live view needs after each step.
struct StepEvent {
    const StepInfo& info;
    int total_steps;
    int prompt_len;
    std::span<const int32_t> canvas;     // the whole canvas after the step
    std::span<const int32_t> committed;  // positions decided at this step
    // Per canvas position (empty for policies without token states): its state, and the draft
    // token (-1 where none).
    std::span<const TokenState> states = {};
    std::span<const int32_t> drafts = {};
    // Progressive revision: positions whose token a check changed (or remasked) at this step.
    std::span<const int32_t> revised = {};
};
using StepCallback = std::function<void(const StepEvent&)>;

// A token the revision rule changed: `to` is the mask id for a remask.
struct RevisionEvent {
    int32_t pos = 0, from = 0, to = 0, step = 0;
};

// How a generation's revisions stand against a reference: reference[i] is the token expected at
// generated position i (`beyond` past its end). A replacement turned the expected token into
// another (right_to_wrong), another into it (wrong_to_right), or neither; a remask took away the
// expected token or a wrong one.
struct RevisionSplit {
    int64_t right_to_wrong = 0, wrong_to_right = 0, wrong_to_wrong = 0;
    int64_t remasks_of_right = 0, remasks_of_wrong = 0;
    void add(const RevisionSplit& o);
};
RevisionSplit split_revisions(std::span<const RevisionEvent> events, int prompt_len,
                              std::span<const int32_t> reference, int32_t beyond, int32_t mask);

struct GenerateResult {
    std::vector<int32_t> canvas;  // prompt + generated positions
    int prompt_len = 0;
    std::vector<StepInfo> steps;
    model::ForwardStats stats;
    double wall_s = 0.0;
    bool stopped_early = false;  // positions after the stop were filled with end-of-text
    int64_t rows_device = 0;     // rows the device computed (tile padding included)
    int64_t drafts_proposed = 0, drafts_accepted = 0, drafts_rejected = 0;
    int64_t drafts_accepted_early = 0;  // accepted below the commit rule's bar
    int64_t ahead_committed = 0, ahead_verified = 0, ahead_rejected = 0;  // pipeline
    // Progressive revision, against the final canvas: a replacement that turned a token that
    // ends right into another (right_to_wrong) or a wrong one into the final (wrong_to_right);
    // remasks of a token that was (not) the final one.
    struct Revision {
        int64_t checks = 0, refreshes = 0, lane_only_steps = 0;
        int64_t revisions = 0, right_to_wrong = 0, wrong_to_right = 0, wrong_to_wrong = 0;
        int64_t remasks = 0, remasks_of_right = 0, remasks_of_wrong = 0;
        int64_t stabilised = 0, commit_to_stable_steps = 0;  // sum over stabilised tokens
        double cpu_ms = 0.0, exposed_ms = 0.0;
        double proj_dense_ms = 0.0, proj_cpu_ms = 0.0, proj_merge_ms = 0.0;
        double proj_contention_ms = 0.0;
        double proj_step_ms = 0.0;  // sum over steps of max(dense, cpu) + contention + merge
        // Sums every field: `revisions` counts replacements only, remasks apart (one meaning
        // in llada-cli's JSON, llada-eval's and llada-bench's).
        void add(const Revision& o);
    } revision;
    std::vector<RevisionEvent> revision_events;  // in order
    // The confidence of each committed token when it was committed (test-time scaling's
    // `confidence` selection and vote tie-break).
    double confidence_sum = 0.0;
    int64_t confidence_n = 0;
    double mean_confidence() const {
        return confidence_n > 0 ? confidence_sum / static_cast<double>(confidence_n) : 0.0;
    }

    // GenerateOptions::logprobs >= 0: per canvas position (prompt included, NaN there and where
    // nothing was committed), the committed token's log-probability under its committing
    // step's distribution, and that step's most likely tokens, most likely first.
    struct TokenLogprob {
        int32_t token = -1;
        float logprob = 0.0f;
    };
    std::vector<float> logprobs;
    std::vector<std::vector<TokenLogprob>> top_logprobs;

    // The generated ids, prompt excluded.
    std::vector<int32_t> generated() const;
    // The generated ids up to (not including) the first EOS / end-of-turn token.
    std::vector<int32_t> answer(const TokenIds& ids) const;
};

class Policy {
  public:
    virtual ~Policy() = default;
    virtual const char* name() const = 0;
    // Throws llada::Error for impossible requests (prompt + gen past the context, ...).
    virtual GenerateResult generate(std::span<const int32_t> prompt,
                                    const StepCallback& on_step = {}) = 0;
};

// Names of the available policies, for --help and errors.
std::vector<std::string> policy_names();

// Builds a policy; throws llada::Error for an unknown name or options it cannot honour.
std::unique_ptr<Policy> make_policy(const std::string& name, const model::Model& model,
                                    runtime::Device& device, const GenerateOptions& options,
                                    const TokenIds& ids);

// LLaDA's get_num_transfer_tokens: how many of `masked` positions each of `steps` steps commits
// (base = masked / steps, the first masked % steps steps one more).
std::vector<int> num_transfer_tokens(int masked, int steps);
// The same into `out` (its capacity reused).
void num_transfer_tokens(int masked, int steps, std::vector<int>& out);

}  // namespace llada::decode
