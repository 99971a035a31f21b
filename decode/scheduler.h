// Runs the steps of one or many generations on one model::Session: each step gathers the window
// rows of every live generation into one runtime::Batch (each generation on KV cache sequences
// of its own), runs one forward, and hands each generation its rows' predictions back. Test-time
// scaling and the server put several generations here; a single generation is the common case.
#pragma once

#include <vector>

#include "decode/generator.h"
#include "model/model.h"

namespace llada::decode {

class Scheduler {
  public:
    explicit Scheduler(model::Session& session);
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Takes part in the following steps until done; its sequences are acquired from the
    // session's cache here (throws llada::Error when the cache has too few free).
    void add(Generator& g);
    // Leaves the steps (done or cancelled); its sequences return to the cache.
    void remove(Generator& g);

    // One forward over the rows of every generation that is not done. Returns false when none
    // had a step to run.
    bool step();

  private:
    struct Entry {
        Generator* g;
        int seq[2];
        size_t first_row = 0, n_rows = 0, first_pred = 0, n_pred = 0;
    };
    model::Session& s_;
    std::vector<Entry> live_;
    // One forward's arrays, reused.
    std::vector<int32_t> tokens_, pos_, seq_, slot_, exclude_, out_rows_, kv_len_;
    std::vector<RowPrediction> preds_;
};

}  // namespace llada::decode
