// Gathers the rows of several generations into one forward (decode/scheduler.h).
#include "decode/scheduler.h"

#include <algorithm>
#include <cassert>
#include <chrono>

#include "util/error.h"

namespace llada::decode {

Scheduler::Scheduler(model::Session& session) : s_(session) {
    const size_t rows = static_cast<size_t>(session.max_rows());
    tokens_.reserve(rows);
    pos_.reserve(rows);
    seq_.reserve(rows);
    slot_.reserve(rows);
    exclude_.reserve(rows);
    out_rows_.reserve(rows);
    preds_.reserve(rows);
    kv_len_.assign(session.n_seq(), 1);
}

Scheduler::~Scheduler() {
    for (Entry& e : live_) {
        for (int k = 0; k < e.g->n_seq(); ++k)
            s_.kv().release(e.seq[k]);
    }
}

void Scheduler::add(Generator& g) {
    if (g.canvas_len() > s_.n_pos()) {
        throw Error("a canvas of " + std::to_string(g.canvas_len()) +
                    " positions does not fit the session's " + std::to_string(s_.n_pos()));
    }
    if (s_.kv().n_free() < g.n_seq()) {
        throw Error("the KV cache has " + std::to_string(s_.kv().n_free()) +
                    " free sequences; the generation needs " + std::to_string(g.n_seq()));
    }
    Entry e{&g, {-1, -1}};
    for (int k = 0; k < g.n_seq(); ++k)
        e.seq[k] = s_.kv().acquire();
    live_.push_back(e);
}

void Scheduler::remove(Generator& g) {
    for (size_t i = 0; i < live_.size(); ++i) {
        if (live_[i].g != &g) continue;
        for (int k = 0; k < g.n_seq(); ++k)
            s_.kv().release(live_[i].seq[k]);
        live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
    }
}

bool Scheduler::step() {
    const auto t0 = std::chrono::steady_clock::now();
    tokens_.clear();
    pos_.clear();
    seq_.clear();
    slot_.clear();
    exclude_.clear();
    out_rows_.clear();
    bool need_logits = false, any = false;
    for (Entry& e : live_) {
        e.n_rows = e.n_pred = 0;
        if (e.g->done()) continue;
        any = true;
        const StepRequest& req = e.g->plan_step();
        need_logits = need_logits || req.need_logits;
        e.first_row = tokens_.size();
        e.first_pred = out_rows_.size();
        for (const RowRequest& r : req.rows) {
            if (r.predict) out_rows_.push_back(static_cast<int32_t>(tokens_.size()));
            tokens_.push_back(r.token);
            pos_.push_back(r.pos);
            seq_.push_back(e.seq[r.seq]);
            slot_.push_back(r.slot);
            exclude_.push_back(r.exclude);
        }
        for (int k = 0; k < e.g->n_seq(); ++k)
            kv_len_[e.seq[k]] = req.kv_len[k];
        e.n_rows = tokens_.size() - e.first_row;
        e.n_pred = out_rows_.size() - e.first_pred;
    }
    if (!any) return false;
    const runtime::Batch batch{static_cast<int64_t>(tokens_.size()),
                               tokens_.data(),
                               pos_.data(),
                               seq_.data(),
                               static_cast<int64_t>(out_rows_.size()),
                               out_rows_.data(),
                               kv_len_.data(),
                               slot_.data(),
                               exclude_.data()};
    const runtime::DeviceReport* rep = s_.device().report();
    const int64_t padded_before = rep ? rep->padded_rows : 0;
    preds_.assign(out_rows_.size(), {});
    const int64_t V = s_.model().hparams().n_vocab;
    if (need_logits) {
        const float* logits = s_.forward(batch);
        for (size_t i = 0; i < preds_.size(); ++i)
            preds_[i].logits = logits + static_cast<int64_t>(i) * V;
    } else {
        const kernels::RowStats* st = s_.forward_stats(batch);
        for (size_t i = 0; i < preds_.size(); ++i)
            preds_[i].stats = st + i;
    }
    const int64_t device_rows = rep ? rep->padded_rows - padded_before : batch.n_rows;
    for (Entry& e : live_) {
        if (e.n_rows == 0) continue;
        e.g->apply({preds_.data() + e.first_pred, e.n_pred});
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // Padding is shared: each generation is charged its share by rows.
    for (Entry& e : live_) {
        if (e.n_rows == 0) continue;
        const int64_t share = static_cast<int64_t>(e.n_rows) * device_rows / batch.n_rows;
        e.g->record_cost(share, ms);
    }
    return true;
}

}  // namespace llada::decode
