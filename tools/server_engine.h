// The engine behind llada-server: one thread that runs every active request's generation on
// one session (decode::Scheduler), each step one forward over all of their windows. Requests
// join and leave at step boundaries (continuous batching); each holds its own KV cache sequence
// from admission to its end. Admission is first come, first served: a request waits in the
// queue until a sequence is free, and the queue has a fixed length (full: refused).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "decode/generator.h"
#include "decode/lookahead.h"
#include "decode/scheduler.h"
#include "tools/common.h"

namespace llada::tools {

struct ServerLimits {
    int parallel = 4;     // generations decoded together (KV cache sequences)
    int queue = 16;       // requests waiting for a free sequence (beyond: refused)
    int max_prompt = 0;   // tokens (0: the model's context minus max_gen)
    int max_gen = 128;    // generated positions per request
    bool kv_f16 = false;  // the KV cache in fp16 (half the memory per sequence)
    // --revise-tail dense: every sequence also holds scratch slots for the check rows after
    // the last block (twice the cache), and the session the rows to check every position.
    bool check_slots = false;
};

// One request's life: filled by the HTTP side, advanced by the engine thread.
struct ServerRequest {
    std::string policy;
    decode::GenerateOptions opt;
    std::vector<int32_t> prompt;
    // Set by the engine (under the engine's lock); `on_step` runs on the engine thread after
    // each of the request's steps with the committed prefix so far, and returns false to end
    // the request there (a stop sequence was reached): it then finishes as done, with
    // `stopped` set and `result` the canvas as it stood.
    struct Committed {
        const std::string& text;               // the prefix as text (ids decoded)
        const std::vector<int32_t>& ids;       // the prefix as tokens
        const decode::GenerateResult& so_far;  // the generation's canvas and logprobs so far
    };
    std::function<bool(const Committed& committed)> on_step;
    // Opt-in diffusion events: after each step, the positions whose token or state changed, as
    // one JSON object {"step", "changes": [{"i", "text", "state"}], "nfe", "committed",
    // "drafts_accepted", "drafts_rejected", "revised", "rows"} (i: generated position).
    std::function<void(const std::string& event_json)> on_event;
    bool done = false, cancelled = false, stopped = false;
    std::string error;  // set instead of a result when the generation could not run
    decode::GenerateResult result;
    std::string text;                 // the answer (a stopped request: its committed prefix)
    int64_t answer_tokens = 0;        // tokens of `text`
    std::vector<size_t> answer_ends;  // bytes of `text` the first 1, 2, ... of them decode to
    std::condition_variable cv;
};

struct ServerCounters {
    int64_t requests = 0, completed = 0, rejected = 0, failed = 0;
    int64_t steps = 0, forwards_rows = 0, tokens = 0;
    int64_t occupancy_sum = 0;  // live generations summed over steps
    double busy_s = 0.0;
};

class ServerEngine {
  public:
    ServerEngine(const LoadedModel& lm, runtime::Device& device, const ServerLimits& limits);
    ~ServerEngine();
    ServerEngine(const ServerEngine&) = delete;
    ServerEngine& operator=(const ServerEngine&) = delete;

    // Why the engine would refuse the request (its options, or a shape no free sequence could
    // ever hold), or "" when it would run it: the HTTP side asks before it answers anything.
    std::string validate(const ServerRequest& r) const;
    // Queues a request; false when the queue is full (the caller answers 503).
    bool submit(const std::shared_ptr<ServerRequest>& r);
    // Blocks until the request is done (or failed).
    void wait(ServerRequest& r);
    // The same for at most `seconds`; false if it is not done by then.
    bool wait_for(ServerRequest& r, double seconds);
    void cancel(const std::shared_ptr<ServerRequest>& r);

    ServerCounters counters() const;
    int queue_length() const;
    int active() const;
    const ServerLimits& limits() const { return limits_; }
    int n_pos() const { return n_pos_; }
    // The KV cache: all sequences, and one sequence's share (max_prompt + max_gen positions).
    size_t kv_bytes() const { return session_->kv_bytes(); }
    size_t kv_bytes_per_sequence() const {
        return kv_bytes() / static_cast<size_t>(limits_.parallel);
    }

  private:
    struct Live {
        std::shared_ptr<ServerRequest> req;
        std::unique_ptr<decode::Stepper> gen;
        decode::SessionShape shape;  // what it takes of the shared session
        size_t stable_bytes = 0;
        std::vector<int32_t> last_tokens;  // what the last event showed
        std::vector<decode::TokenState> last_states;
    };
    std::string step_event(Live& l) const;
    std::string never_fits(const decode::SessionShape& need) const;  // "" when it can fit
    int sequences_in_use() const;  // of the live requests (two each under --cfg); mu_ held
    int64_t rows_in_use() const;   // window rows the live requests may ask for; mu_ held
    void loop();
    std::vector<int32_t> stable_ids(const Live& l) const;

    const LoadedModel& lm_;
    ServerLimits limits_;
    int n_pos_ = 0;
    decode::SessionShape shape_;  // the shared session's (decode::shared_session_shape)
    runtime::KvCache kv_;         // the session's cache (scratch slots past the context allowed)
    std::unique_ptr<model::Session> session_;
    std::unique_ptr<decode::Scheduler> sched_;
    decode::LookaheadCosts costs_;  // for --lookahead auto, measured when first needed
    mutable std::mutex mu_;
    std::condition_variable wake_;
    std::deque<std::shared_ptr<ServerRequest>> queue_;
    std::vector<Live> live_;
    ServerCounters counters_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace llada::tools
