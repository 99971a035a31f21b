// Gathers the rows of several generations into one forward (decode/scheduler.h).
#include "decode/scheduler.h"

#include <algorithm>
#include <cassert>
#include <chrono>

#include "decode/lookahead.h"
#include "decode/revision.h"
#include "runtime/devices.h"
#include "util/error.h"

namespace llada::decode {

void Scheduler::Rows::clear() {
    tokens.clear();
    pos.clear();
    seq.clear();
    slot.clear();
    exclude.clear();
    own_key.clear();
    out_rows.clear();
    gumbel.clear();
    any_gumbel = any_own_key = false;
}

void Scheduler::Rows::reserve(size_t n) {
    tokens.reserve(n);
    pos.reserve(n);
    seq.reserve(n);
    slot.reserve(n);
    exclude.reserve(n);
    own_key.reserve(n);
    out_rows.reserve(n);
    gumbel.reserve(n);
}

void Scheduler::Rows::add(const RowRequest& r, int32_t cache_seq, const model::HeadDraw* g) {
    if (r.predict) {
        out_rows.push_back(static_cast<int32_t>(tokens.size()));
        gumbel.push_back(g ? *g : model::HeadDraw{});
        any_gumbel = any_gumbel || g != nullptr;
    }
    tokens.push_back(r.token);
    pos.push_back(r.pos);
    seq.push_back(cache_seq);
    slot.push_back(r.slot);
    exclude.push_back(r.exclude);
    own_key.push_back(r.own_key ? 1 : 0);
    any_own_key = any_own_key || r.own_key;
}

runtime::Batch Scheduler::Rows::batch(const int32_t* kv_len) const {
    return {static_cast<int64_t>(tokens.size()),
            tokens.data(),
            pos.data(),
            seq.data(),
            static_cast<int64_t>(out_rows.size()),
            out_rows.data(),
            kv_len,
            slot.data(),
            exclude.data(),
            any_own_key ? own_key.data() : nullptr,
            any_gumbel ? gumbel.data() : nullptr};
}

Scheduler::Scheduler(model::Session& session) : s_(session) {
    const size_t rows = static_cast<size_t>(session.max_rows());
    dense_.reserve(rows);
    preds_.reserve(rows);
    kv_len_.assign(session.n_seq(), 1);
}

Scheduler::~Scheduler() {
    for (Entry& e : live_) {
        for (int k = 0; k < e.g->n_seq(); ++k)
            s_.kv().release(e.seq[k]);
    }
}

void Scheduler::add(Stepper& g) {
    if (g.canvas_len() > s_.n_pos()) {
        throw Error("a canvas of " + std::to_string(g.canvas_len()) +
                    " positions does not fit the session's " + std::to_string(s_.n_pos()));
    }
    if (s_.kv().n_free() < g.n_seq()) {
        throw Error("the KV cache has " + std::to_string(s_.kv().n_free()) +
                    " free sequences; the generation needs " + std::to_string(g.n_seq()));
    }
    RevisionHooks* rev = g.revision();
    if (rev != nullptr && !lane_) {
        // The CPU path is projected onto the CPU beside the dense device when that is projected.
        const runtime::DeviceReport* rep = s_.device().report();
        const runtime::CompanionCpu cpu = runtime::companion_cpu(rep);
        if (rep != nullptr && rep->projected && cpu.device.projection_profile.empty()) {
            throw Error("--revise on profile " + rep->profile +
                        ": it names no CPU profile to project the CPU path on");
        }
        contention_ = cpu.contention;
        const ReviseOptions& ro = rev->revise_options();
        lane_ = std::make_unique<CpuLane>(s_.model(), s_.kv(), ro.threads, s_.options(), cpu,
                                          ro.serial);
        const size_t rows = 2 * static_cast<size_t>(s_.n_seq()) * s_.n_pos();
        lane_rows_.reserve(rows);
        tail_.reserve(rows);
        lane_preds_.reserve(rows);
        dense_written_.assign(static_cast<size_t>(s_.n_seq()) * s_.n_pos(), 0);
    }
    if (rev != nullptr && rev->revise_options().tail_dense && s_.n_pos() < 2 * g.canvas_len()) {
        throw Error("--revise-tail dense needs a session of twice the canvas's " +
                    std::to_string(g.canvas_len()) +
                    " positions per sequence (scratch slots "
                    "for the check rows); this one has " +
                    std::to_string(s_.n_pos()));
    }
    if (rev != nullptr && rev->revise_options().rows < 0) {
        const runtime::DeviceReport* rep = s_.device().report();
        if (rep == nullptr || !rep->projected || !lane_->projected()) {
            throw Error(
                "--revise-rows auto sizes the CPU path from projected lane costs; it needs a "
                "projected device (npu-sim, or cpu with --npu-profile sm8750-cpu); give a row "
                "count instead");
        }
        const int64_t L = g.canvas_len();
        rev->set_lane_costs(device_forward_cost(s_, s_.max_rows(), L),
                            device_forward_cost(lane_->session(), 2 * L, L));
    }
    Entry e{&g, {-1, -1}};
    for (int k = 0; k < g.n_seq(); ++k)
        e.seq[k] = s_.kv().acquire();
    live_.push_back(e);
}

void Scheduler::remove(Stepper& g) {
    for (size_t i = 0; i < live_.size(); ++i) {
        if (live_[i].g != &g) continue;
        for (int k = 0; k < g.n_seq(); ++k)
            s_.kv().release(live_[i].seq[k]);
        live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
    }
}

void Scheduler::merge(const runtime::Batch& dense, const runtime::Batch* lane, LaneCost& lc) {
    runtime::KvCache& main = s_.kv();
    runtime::KvCache& mirror = lane_->kv();
    ++merge_stamp_;
    size_t bytes = 0;
    for (int64_t r = 0; r < dense.n_rows; ++r) {
        if (dense.slot[r] < 0) continue;
        bytes += mirror.copy_slot_from(main, dense.seq[r], dense.slot[r]);
        dense_written_[static_cast<size_t>(dense.seq[r]) * main.n_pos() + dense.slot[r]] =
            merge_stamp_;
    }
    for (int64_t r = 0; lane && r < lane->n_rows; ++r) {
        if (lane->slot[r] < 0 || lane->own_key_of(r)) continue;  // scratch slots stay
        const size_t i = static_cast<size_t>(lane->seq[r]) * main.n_pos() + lane->slot[r];
        if (dense_written_[i] == merge_stamp_) {
            bytes += mirror.copy_slot_from(main, lane->seq[r], lane->slot[r]);
        } else {
            bytes += main.copy_slot_from(mirror, lane->seq[r], lane->slot[r]);
        }
    }
    if (lane_->copy_gbps() > 0.0)
        lc.proj_merge_ms = static_cast<double>(bytes) / (lane_->copy_gbps() * 1e6);
}

bool Scheduler::same_rows(const StepRequest& a, const StepRequest& b) {
    if (a.rows.size() != b.rows.size() || a.kv_len != b.kv_len || a.need_logits != b.need_logits ||
        !a.cpu_rows.empty() || !b.cpu_rows.empty())
        return false;
    for (size_t i = 0; i < a.rows.size(); ++i) {
        const RowRequest &x = a.rows[i], &y = b.rows[i];
        if (x.token != y.token || x.pos != y.pos || x.seq != y.seq || x.slot != y.slot ||
            x.exclude != y.exclude || x.predict != y.predict || x.own_key != y.own_key)
            return false;
    }
    return true;
}

bool Scheduler::step() {
    using clock = std::chrono::steady_clock;
    auto ms_since = [](clock::time_point t) {
        return std::chrono::duration<double, std::milli>(clock::now() - t).count();
    };
    const auto t0 = clock::now();
    // Failed entries stay in live_ (twins hold indices into it) until the step ends, also when
    // the forward throws.
    struct DropFailed {
        Scheduler& s;
        ~DropFailed() { s.drop_failed(); }
    } drop{*this};
    dense_.clear();
    lane_rows_.clear();
    tail_.clear();
    lane_preds_.clear();
    bool need_logits = false, any = false;
    for (Entry& e : live_) {
        e.n_rows = e.n_pred = e.n_lane_pred = 0;
        e.planned = !e.g->done();
        if (!e.planned) continue;
        any = true;
        try {
            e.req = &e.g->plan_step();
        } catch (const Error& err) {
            fail(e, err);
            continue;
        }
        const StepRequest& req = *e.req;
        e.twin = -1;
        for (size_t k = 0; &live_[k] != &e; ++k) {
            const Entry& o = live_[k];
            if (o.planned && o.twin < 0 && o.cache_class == e.cache_class &&
                o.g->n_seq() == e.g->n_seq() && same_rows(*o.req, req)) {
                e.twin = static_cast<int>(k);
                break;
            }
        }
        if (e.twin >= 0) {
            // Served by the twin's rows; its own draws need output rows of their own.
            if (!req.gumbel.empty()) {
                const Entry& o = live_[e.twin];
                e.first_pred = dense_.out_rows.size();
                size_t k = 0;
                for (size_t i = 0; i < req.rows.size(); ++i) {
                    if (!req.rows[i].predict) continue;
                    dense_.out_rows.push_back(static_cast<int32_t>(o.first_row + i));
                    dense_.gumbel.push_back(req.gumbel[k++]);
                    dense_.any_gumbel = true;
                }
                e.n_pred = dense_.out_rows.size() - e.first_pred;
            }
            continue;
        }
        need_logits = need_logits || req.need_logits;
        e.first_row = dense_.tokens.size();
        e.first_pred = dense_.out_rows.size();
        size_t k = 0;
        for (const RowRequest& r : req.rows) {
            const bool g = r.predict && k < req.gumbel.size();
            dense_.add(r, e.seq[r.seq], g ? &req.gumbel[k] : nullptr);
            k += r.predict;
        }
        // After the last block, --revise-tail dense sends the checks to the dense device.
        e.tail = !req.dense && e.g->revision() != nullptr &&
                 e.g->revision()->revise_options().tail_dense;
        Rows& cpu = e.tail ? tail_ : lane_rows_;
        e.first_lane_pred = cpu.out_rows.size();
        for (const RowRequest& r : req.cpu_rows)
            cpu.add(r, e.seq[r.seq], nullptr);
        for (int k = 0; k < e.g->n_seq(); ++k)
            kv_len_[e.seq[k]] = req.kv_len[k];
        e.n_rows = dense_.tokens.size() - e.first_row;
        e.n_pred = dense_.out_rows.size() - e.first_pred;
        e.n_lane_pred = cpu.out_rows.size() - e.first_lane_pred;
    }
    if (!any) return false;
    const runtime::Batch batch = dense_.batch(kv_len_.data());
    const runtime::Batch lane_batch = lane_rows_.batch(kv_len_.data());
    const bool lane = lane_batch.n_rows > 0;
    // The CPU path starts first, so that it runs while the dense forward does.
    if (lane) lane_->start(lane_batch);
    const runtime::DeviceReport* rep = s_.device().report();
    const int64_t padded_before = rep ? rep->padded_rows : 0;
    const double proj_before = rep ? rep->projected_ms() : 0.0;
    preds_.assign(dense_.out_rows.size(), {});
    const int64_t V = s_.model().hparams().n_vocab;
    if (batch.n_rows > 0 && need_logits) {
        const float* logits = s_.forward(batch);
        for (size_t i = 0; i < preds_.size(); ++i)
            preds_[i].logits = logits + static_cast<int64_t>(i) * V;
    } else if (batch.n_rows > 0) {
        const model::HeadStats* st = s_.forward_stats(batch);
        for (size_t i = 0; i < preds_.size(); ++i)
            preds_[i].stats = st + i;
    }
    const int64_t device_rows = rep ? rep->padded_rows - padded_before : batch.n_rows;
    LaneCost lc;
    lc.proj_dense_ms = rep && rep->projected ? rep->projected_ms() - proj_before : 0.0;
    if (lane) {
        const auto t_wait = clock::now();
        const float* logits = lane_->wait();
        lc.exposed_ms = lane_->serial() ? lane_->last_ms() : ms_since(t_wait);
        lc.cpu_ms = lane_->last_ms();
        lc.proj_cpu_ms = lane_->last_projected_ms();
        lc.proj_contention_ms = contention_ * std::min(lc.proj_dense_ms, lc.proj_cpu_ms);
        lane_preds_.assign(lane_rows_.out_rows.size(), {});
        for (size_t i = 0; i < lane_preds_.size(); ++i)
            lane_preds_[i].logits = logits + static_cast<int64_t>(i) * V;
        // The merge: each cache takes the slots the other path wrote this step; a slot both
        // wrote keeps the dense path's K/V.
        merge(batch, &lane_batch, lc);
    } else if (lane_) {
        // No CPU-path rows this step: the mirror still takes what the dense rows wrote.
        merge(batch, nullptr, lc);
    }
    if (!tail_.tokens.empty()) {
        // The checks of generations past their last block, as a forward of the dense device
        // (which has no other work for them): logits rows, like the CPU path's; the refreshed
        // slots go to the mirror too, the check rows' scratch slots stay.
        const runtime::Batch tb = tail_.batch(kv_len_.data());
        const float* logits = s_.forward(tb);
        const size_t base = lane_preds_.size();
        for (size_t i = 0; i < tail_.out_rows.size(); ++i) {
            RowPrediction p;
            p.logits = logits + static_cast<int64_t>(i) * V;
            lane_preds_.push_back(p);
        }
        for (Entry& e : live_) {
            if (e.planned && e.tail) e.first_lane_pred += base;
        }
        for (int64_t r = 0; r < tb.n_rows; ++r) {
            if (tb.slot[r] >= 0 && !tb.own_key_of(r))
                lane_->kv().copy_slot_from(s_.kv(), tb.seq[r], tb.slot[r]);
        }
        lc.proj_dense_ms = rep && rep->projected ? rep->projected_ms() - proj_before : 0.0;
    }
    // Twins: the rows' K/V go to their own sequences too, and they take the same predictions.
    for (Entry& e : live_) {
        if (!e.planned || e.twin < 0) continue;
        const Entry& o = live_[e.twin];
        for (const RowRequest& r : o.req->rows) {
            if (r.slot >= 0) s_.kv().copy_slot(o.seq[r.seq], e.seq[r.seq], r.slot);
        }
        if (lane_) {
            for (const RowRequest& r : o.req->rows) {
                if (r.slot >= 0) lane_->kv().copy_slot(o.seq[r.seq], e.seq[r.seq], r.slot);
            }
        }
        if (e.req->gumbel.empty()) {  // the same predictions as the twin's
            e.first_pred = o.first_pred;
            e.n_pred = o.n_pred;
        }
        e.first_lane_pred = o.first_lane_pred;
        e.n_lane_pred = 0;
    }
    // Cache classes after this step: twins stay with the entry whose rows served them.
    for (Entry& e : live_) {
        if (e.planned && e.twin < 0) e.cache_class = ++next_class_;
    }
    for (Entry& e : live_) {
        if (e.planned && e.twin >= 0) e.cache_class = live_[e.twin].cache_class;
    }
    for (Entry& e : live_) {
        if (!e.planned) continue;
        try {
            e.g->apply({preds_.data() + e.first_pred, e.n_pred},
                       {lane_preds_.data() + e.first_lane_pred, e.n_lane_pred});
        } catch (const Error& err) {
            fail(e, err);
        }
    }
    const double ms = ms_since(t0);
    // Padding is shared: each generation is charged its share by rows.
    for (Entry& e : live_) {
        if (!e.planned) continue;
        const int64_t share =
            batch.n_rows > 0 ? static_cast<int64_t>(e.n_rows) * device_rows / batch.n_rows : 0;
        e.g->record_cost(share, ms);
        if (RevisionHooks* rev = e.g->revision()) rev->record_lane_cost(lc);
    }
    if (!isolate_ && !failures_.empty()) {
        const std::string what = failures_.front().what;
        failures_.clear();
        throw Error(what);
    }
    return true;
}

void Scheduler::drop_failed() {
    std::erase_if(live_, [](const Entry& e) { return e.g == nullptr; });
}

void Scheduler::fail(Entry& e, const Error& err) {
    failures_.push_back({e.g, err.what()});
    for (int k = 0; k < e.g->n_seq(); ++k)
        s_.kv().release(e.seq[k]);
    e.g = nullptr;  // erased at the end of the step
    e.planned = false;
}

void run_to_end(model::Session& session, std::span<Stepper* const> steppers,
                const StepCallback& on_step) {
    Scheduler sched(session);
    std::vector<Stepper*> live(steppers.begin(), steppers.end());
    for (Stepper* s : live)
        sched.add(*s);
    while (!live.empty()) {
        if (!sched.step()) break;  // (none had a step: every one is done)
        if (on_step) on_step(steppers.front()->event());
        std::erase_if(live, [&](Stepper* s) {
            if (s->done()) sched.remove(*s);
            return s->done();
        });
    }
    for (Stepper* s : live)
        sched.remove(*s);
}

GenerateResult run_alone(Stepper& s, model::Session& session, const StepCallback& on_step) {
    Stepper* one[] = {&s};
    run_to_end(session, one, on_step);
    return s.take_result();
}

std::vector<Scheduler::Failure> Scheduler::take_failures() {
    std::vector<Failure> out;
    out.swap(failures_);
    return out;
}

}  // namespace llada::decode
