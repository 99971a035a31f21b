// How many lookahead rows mbsd adds to a step: a forward's cost by row count (from the device's
// latency table, or this host's calibrated cost) and the rule that weighs extra rows against
// the tokens they are expected to commit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "decode/policy.h"
#include "model/model.h"

namespace llada::decode {

// What one forward of `rows` window rows costs, in milliseconds, at the canvas's attention span.
// Measured points, linearly interpolated between them (and extrapolated from the last two).
struct ForwardCost {
    std::string source;         // "latency_table:<profile> (projected)" or "calibrated:<host>"
    std::vector<int64_t> rows;  // ascending
    std::vector<double> ms;
    std::vector<size_t> arena_bytes;  // activation memory at each point (0 if unknown)
    // The static shape each point executes in (a device table's buckets); empty when the cost
    // has none (a host calibration: every row is paid for).
    std::vector<int64_t> buckets;

    bool empty() const { return rows.empty(); }
    double at(int64_t r) const;
    size_t arena_at(int64_t r) const;
    // The rows a forward of r rows pays for but does not use: its bucket's padding (0 without
    // buckets, or past the table).
    int64_t padding(int64_t r) const;
};

// From the session's device when it has a cost model (npu-sim, a projected cpu): every row count
// 1..max_rows at kv_len keys. Empty when the device has none.
ForwardCost device_forward_cost(model::Session& session, int64_t max_rows, int64_t kv_len);

// Times forwards of 1, 2, 4, ... max_rows rows (and max_rows) on the session, each the median
// of `reps` runs after a warm-up, attending to kv_len slots of sequence 0. The rows write no K/V.
ForwardCost calibrate_forward_cost(model::Session& session, int64_t max_rows, int64_t kv_len,
                                   int reps = 3);

// The cost mbsd's --lookahead auto uses for a canvas: the session's device table when it has
// one, else this host's calibration, read from opt.calibration_file when it holds one for this
// model, canvas and device (unless opt.recalibrate), measured and written there otherwise.
ForwardCost lookahead_cost(model::Session& session, const GenerateOptions& opt, int64_t max_rows,
                           int64_t kv_len);

// The one cache of those costs that the CLI's policies, test-time scaling and the server keep:
// each canvas shape (rows, attention span) is looked up or measured once, then reused; the
// references stay valid while the cache lives.
class LookaheadCosts {
  public:
    const ForwardCost& get(model::Session& session, const GenerateOptions& opt, int64_t max_rows,
                           int64_t kv_len) {
        const auto key = std::make_pair(max_rows, kv_len);
        auto it = costs_.find(key);
        if (it != costs_.end()) return it->second;
        return costs_.emplace(key, lookahead_cost(session, opt, max_rows, kv_len)).first->second;
    }

  private:
    std::map<std::pair<int64_t, int64_t>, ForwardCost> costs_;
};

// Reads / writes a calibration as plain text (one "rows ms" pair per line after a header with
// the key); read returns an empty cost when the file is missing or its key differs.
ForwardCost read_forward_cost(const std::string& path, const std::string& key);
void write_forward_cost(const std::string& path, const std::string& key, const ForwardCost& c);

// The lookahead rule (docs/step-engine.md). A step needs `base_rows` rows without
// speculation; up to `available` lookahead positions exist. A step is expected to commit
//     E(n) = c + a * n / s
// tokens with n lookahead rows: c current-block commits per step (this generation's mean so far),
// a the fraction of drafts accepted below the commit rule's bar so far (the ones that saved
// work), s the steps the current block is expected to take still (its masked rows over the
// commits of the block's last step, or over c at the block's first step; at least 1): a draft
// pays off only if it is the one in place when its block becomes current. The rows a step may
// take:
//   * the padding of the bucket its base rows already execute in, on every step;
//   * beyond it (another bucket, or any row of a cost without buckets), only on the block's
//     expected last step (s <= 1) and once a has been measured (a draft has been evaluated):
//     on an earlier step the same positions are drafted again by a later step of the block,
//     in its own padding, and the draft in place when the block becomes current is that later
//     one, so a row bought now buys nothing; and a prior is not a measurement.
// Among those the chosen n minimises cost(base_rows + n) / E(n) (ties: the smaller n), so a
// row is taken only while the projected time per committed token falls. The drafts' share of
// E(n) is capped at block - c1, with c1 the mean commits of the blocks' first steps so far:
// drafts add to the next block's first step, which commits at most the block, so when first
// steps already commit nearly a block, a draft saves no step and buys nothing.
// `max_rows` and the memory budget cap base_rows + n.
struct LookaheadInputs {
    int base_rows = 0;
    int available = 0;
    double commits_per_step = 1.0;  // c
    double accept_rate = 0.5;       // a
    double steps_left = 1.0;        // s
    bool accept_measured = false;   // a rests on evaluated drafts, not on the prior alone
    int block = 0;                  // the block length (0: no cap on the drafts' share)
    double first_step_commits = 0;  // c1: mean commits of the blocks' first steps so far
    int64_t max_rows = 0;
    size_t mem_budget = 0;  // bytes of activation memory (0: none)
};
int choose_lookahead(const ForwardCost& cost, const LookaheadInputs& in);

}  // namespace llada::decode
