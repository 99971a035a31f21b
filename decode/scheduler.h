// Runs the steps of one or many generations on one model::Session: each step gathers the window
// rows of every live generation into one runtime::Batch (each generation on KV cache sequences
// of its own), runs one forward, and hands each generation its rows' predictions back. Test-time
// scaling and the server put several generations here; a single generation is the common case.
// Generations with progressive revision also hand it CPU-path rows: they run on a CpuLane
// (decode/cpu_lane.h) concurrently with the dense forward, and the slots each path wrote are
// merged into the other's cache when both are done (the step boundary). Generations whose
// windows are identical in a step (same rows, same tokens: candidates of one prompt before
// their canvases diverge) are computed once; the K/V the rows wrote are copied to the others'
// sequences and every one gets the same predictions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "decode/cpu_lane.h"
#include "decode/revision.h"
#include "decode/stepper.h"
#include "model/model.h"
#include "util/error.h"

namespace llada::decode {

class Scheduler {
  public:
    explicit Scheduler(model::Session& session);
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Takes part in the following steps until done; its sequences are acquired from the
    // session's cache here (throws llada::Error when the cache has too few free).
    void add(Stepper& g);
    // Leaves the steps (done or cancelled); its sequences return to the cache.
    void remove(Stepper& g);

    // One forward over the rows of every generation that is not done. Returns false when none
    // had a step to run. A generation whose own step fails (a llada::Error from planning or
    // committing its step, e.g. "decoding made no progress") leaves the scheduler, its sequences
    // released; the others' step completes. step() then rethrows that error, unless failures
    // are isolated: then the caller collects them with take_failures() (the server, whose
    // requests are independent). Errors of the forward itself concern every row: they propagate.
    bool step();

    struct Failure {
        Stepper* g;
        std::string what;
    };
    void isolate_failures(bool on) { isolate_ = on; }
    // The generations that failed since the last call, each with its message.
    std::vector<Failure> take_failures();

  private:
    struct Entry {
        Stepper* g;
        int seq[2];
        size_t first_row = 0, n_rows = 0, first_pred = 0, n_pred = 0;
        size_t first_lane_pred = 0, n_lane_pred = 0;
        bool planned = false;  // had a step this forward
        const StepRequest* req = nullptr;
        int twin = -1;      // an earlier entry whose identical rows this step serves this one too
        bool tail = false;  // its CPU-path rows run on the dense device this step
        // Entries of one class hold the same K/V in their sequences (0: none written yet), so
        // identical rows give them identical predictions; an entry computed on its own starts
        // a class of its own.
        int64_t cache_class = 0;
    };
    int64_t next_class_ = 0;
    // Identical windows are computed once (test-time scaling's candidates share their first
    // step, and every step while their canvases agree).
    static bool same_rows(const StepRequest& a, const StepRequest& b);
    // One forward's arrays, reused.
    struct Rows {
        std::vector<int32_t> tokens, pos, seq, slot, exclude, own_key, out_rows;
        std::vector<model::HeadDraw> gumbel;  // per output row (when any row samples)
        bool any_gumbel = false, any_own_key = false;
        void clear();
        void reserve(size_t n);
        void add(const RowRequest& r, int32_t seq, const model::HeadDraw* g);
        runtime::Batch batch(const int32_t* kv_len) const;
    };
    model::Session& s_;
    std::vector<Entry> live_;
    Rows dense_, lane_rows_, tail_;  // tail_: --revise-tail dense's checks
    std::vector<int32_t> kv_len_;
    std::vector<RowPrediction> preds_, lane_preds_;
    bool isolate_ = false;
    std::vector<Failure> failures_;
    // Records a generation's own error and takes it out (its rows in this step are not read).
    void fail(Entry& e, const Error& err);
    void drop_failed();
    std::unique_ptr<CpuLane> lane_;  // made when the first revising generation joins
    // The step boundary's merge of the two caches (lane: null when the CPU path had no rows).
    void merge(const runtime::Batch& dense, const runtime::Batch* lane, LaneCost& lc);
    std::vector<int64_t> dense_written_;  // per (sequence, slot): the merge that saw a dense write
    int64_t merge_stamp_ = 0;
    double contention_ = 0.0;  // projected: extra share of the overlap lost to shared DRAM
};

// Steppers on one scheduler of `session` until every one is done, each leaving as it
// finishes: the one loop that the CLI's policies (one stepper) and test-time scaling (N) run.
// (The server drives its long-lived scheduler itself: requests join and leave between steps.)
// `on_step`, when given, is called after each step with the first stepper's event.
void run_to_end(model::Session& session, std::span<Stepper* const> steppers,
                const StepCallback& on_step = nullptr);
// One stepper alone: run_to_end, then its result.
GenerateResult run_alone(Stepper& s, model::Session& session,
                         const StepCallback& on_step = nullptr);

}  // namespace llada::decode
