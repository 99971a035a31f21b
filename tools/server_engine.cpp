// The engine behind llada-server (tools/server_engine.h).
#include "tools/server_engine.h"

#include <algorithm>
#include <chrono>

#include "decode/lookahead.h"
#include "util/error.h"

namespace llada::tools {

ServerEngine::ServerEngine(const LoadedModel& lm, runtime::Device& device,
                           const ServerLimits& limits)
    : lm_(lm), limits_(limits) {
    const int ctx = static_cast<int>(lm.model->hparams().n_ctx);
    if (limits_.max_gen <= 0 || limits_.max_gen >= ctx) {
        throw Error("--max-gen must be in [1, " + std::to_string(ctx - 1) + "] for this model");
    }
    if (limits_.max_prompt <= 0) limits_.max_prompt = ctx - limits_.max_gen;
    if (limits_.max_prompt + limits_.max_gen > ctx) {
        throw Error("--max-prompt + --max-gen exceed the model's context of " +
                    std::to_string(ctx));
    }
    if (limits_.parallel < 1) throw Error("--parallel must be >= 1");
    n_pos_ = limits_.max_prompt + limits_.max_gen;
    shape_ = decode::shared_session_shape(limits_.parallel, n_pos_, limits_.check_slots);
    decode::GenerateOptions cache_opt;
    cache_opt.kernels.kv_f16 = limits_.kv_f16;
    kv_ = decode::session_cache(*lm.model, shape_, cache_opt);
    session_ = std::make_unique<model::Session>(*lm.model, device, kv_, shape_.rows, shape_.outs,
                                                cache_opt.kernels);
    sched_ = std::make_unique<decode::Scheduler>(*session_);
    sched_->isolate_failures(true);  // one request's failure is its own, not its batch's
    thread_ = std::thread([this] { loop(); });
}

ServerEngine::~ServerEngine() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

std::string ServerEngine::never_fits(const decode::SessionShape& need) const {
    if (need.n_seq > shape_.n_seq) {
        return "--cfg needs " + std::to_string(need.n_seq) +
               " sequences per request; this server runs --parallel " +
               std::to_string(limits_.parallel);
    }
    if (need.rows > shape_.rows) {
        return "this request's policy needs " + std::to_string(need.rows) +
               " window rows per step; this server has " + std::to_string(shape_.rows) +
               " (--parallel x (--max-prompt + --max-gen))";
    }
    return "";
}

std::string ServerEngine::validate(const ServerRequest& r) const {
    try {
        const int P = static_cast<int>(r.prompt.size());
        const decode::SessionShape need = decode::session_shape(r.policy, r.opt, P, P + r.opt.gen);
        if (std::string why = never_fits(need); !why.empty()) return why;
        // The generation the engine would start, built and dropped: its option checks. (mbsd's
        // --lookahead auto needs the forward cost, measured at admission; its other checks run
        // then.)
        if (!decode::needs_lookahead_cost(r.policy, r.opt))
            decode::make_stepper(r.policy, *lm_.model, r.opt, lm_.ids, r.prompt, nullptr);
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

bool ServerEngine::submit(const std::shared_ptr<ServerRequest>& r) {
    std::lock_guard<std::mutex> lock(mu_);
    // Room: the free sequences plus the queue's length.
    const int room = limits_.queue + limits_.parallel - sequences_in_use();
    if (static_cast<int>(queue_.size()) >= room) {
        ++counters_.rejected;
        return false;
    }
    ++counters_.requests;
    queue_.push_back(r);
    wake_.notify_all();
    return true;
}

void ServerEngine::wait(ServerRequest& r) {
    std::unique_lock<std::mutex> lock(mu_);
    r.cv.wait(lock, [&] { return r.done; });
}

bool ServerEngine::wait_for(ServerRequest& r, double seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    return r.cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return r.done; });
}

void ServerEngine::cancel(const std::shared_ptr<ServerRequest>& r) {
    std::lock_guard<std::mutex> lock(mu_);
    r->cancelled = true;
    wake_.notify_all();
}

ServerCounters ServerEngine::counters() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counters_;
}

int ServerEngine::queue_length() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(queue_.size());
}

int ServerEngine::active() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(live_.size());
}

int ServerEngine::sequences_in_use() const {
    int n = 0;
    for (const Live& l : live_)
        n += l.shape.n_seq;
    return n;
}

int64_t ServerEngine::rows_in_use() const {
    int64_t n = 0;
    for (const Live& l : live_)
        n += l.shape.rows;
    return n;
}

// The committed prefix: positions from the first generated one up to the first that is still
// masked or a draft, cut at the end of text.
std::vector<int32_t> ServerEngine::stable_ids(const Live& l) const {
    const auto& g = *l.gen;
    const auto& x = g.result().canvas;
    const auto st = g.states();
    std::vector<int32_t> ids;
    // Under revision only stable tokens are final.
    const bool stable_only = l.req->opt.revise.on;
    for (size_t p = static_cast<size_t>(g.result().prompt_len); p < x.size(); ++p) {
        if (st[p] == decode::TokenState::Masked || st[p] == decode::TokenState::Draft) break;
        if (stable_only && st[p] != decode::TokenState::Stable) break;
        if (x[p] == lm_.ids.eos || x[p] == lm_.ids.eot) break;
        ids.push_back(x[p]);
    }
    return ids;
}

std::string ServerEngine::step_event(Live& l) const {
    const auto& g = *l.gen;
    const auto& x = g.result().canvas;
    const auto st = g.states();
    const auto drafts = g.drafts();
    const size_t P = static_cast<size_t>(g.result().prompt_len);
    if (l.last_tokens.empty()) {  // sized by the canvas to come (ar's grows step by step)
        l.last_tokens.assign(static_cast<size_t>(g.canvas_len()), -2);
        l.last_states.assign(static_cast<size_t>(g.canvas_len()), decode::TokenState::Masked);
    }
    nlohmann::json changes = nlohmann::json::array();
    for (size_t p = P; p < x.size(); ++p) {
        const int32_t shown = st[p] == decode::TokenState::Draft ? drafts[p] : x[p];
        if (shown == l.last_tokens[p] && st[p] == l.last_states[p]) continue;
        l.last_tokens[p] = shown;
        l.last_states[p] = st[p];
        const bool masked = st[p] == decode::TokenState::Masked;
        changes.push_back({{"i", p - P},
                           {"text", masked || shown < 0 ? "" : lm_.tok->decode({shown}, false)},
                           {"state", decode::token_state_name(st[p])}});
    }
    const decode::StepInfo& s = g.last_step();
    return nlohmann::json{
        {"step", g.result().steps.size()},      {"changes", changes},
        {"nfe", g.result().stats.forwards},     {"committed", s.committed},
        {"drafts_accepted", s.drafts_accepted}, {"drafts_rejected", s.drafts_rejected},
        {"revised", s.revised + s.remasked},    {"rows", s.rows}}
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void ServerEngine::loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        // Admission at the step boundary: first come, first served, while the first request's
        // shape fits what is free (its sequences: two under --cfg; its window rows: two per
        // position for drafts fed as tokens or pipeline checks); a request that needs more
        // than the session has fails, naming what, and one that needs more than is free now
        // waits.
        while (!queue_.empty()) {
            auto r = queue_.front();
            decode::SessionShape need;
            std::string too_big;
            try {
                const int P = static_cast<int>(r->prompt.size());
                need = decode::session_shape(r->policy, r->opt, P, P + r->opt.gen);
            } catch (const std::exception& e) {
                too_big = e.what();
            }
            if (too_big.empty()) too_big = never_fits(need);
            const bool fits = sequences_in_use() + need.n_seq <= shape_.n_seq &&
                              rows_in_use() + need.rows <= shape_.rows;
            if (!r->cancelled && too_big.empty() && !fits) break;
            queue_.pop_front();
            if (!r->cancelled && !too_big.empty()) {
                r->error = too_big;
                r->done = true;
                ++counters_.failed;
                r->cv.notify_all();
                continue;
            }
            if (r->cancelled) {
                r->error = "cancelled";
                r->done = true;
                r->cv.notify_all();
                continue;
            }
            try {
                // mbsd's --lookahead auto sizes a sequence's lookahead as if it ran alone, from
                // the forward cost of one sequence's rows: the device's table, or this host's
                // calibration (measured once, at the first such request, and cached in the
                // calibration file when one is set).
                const decode::ForwardCost* cost =
                    decode::needs_lookahead_cost(r->policy, r->opt)
                        ? &costs_.get(*session_, r->opt, n_pos_, n_pos_)
                        : nullptr;
                auto g =
                    decode::make_stepper(r->policy, *lm_.model, r->opt, lm_.ids, r->prompt, cost);
                sched_->add(*g);
                live_.push_back({r, std::move(g), need, 0, {}, {}});
            } catch (const std::exception& e) {
                r->error = e.what();
                r->done = true;
                ++counters_.failed;
                r->cv.notify_all();
            }
        }
        // Cancelled requests leave (their sequence is freed).
        for (size_t i = 0; i < live_.size();) {
            if (!live_[i].req->cancelled) {
                ++i;
                continue;
            }
            sched_->remove(*live_[i].gen);
            live_[i].req->error = "cancelled";
            live_[i].req->done = true;
            live_[i].req->cv.notify_all();
            live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
        }
        if (stop_) return;
        if (live_.empty()) {
            wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            continue;
        }
        // One forward over every live request's window, outside the lock.
        lock.unlock();
        const auto t0 = std::chrono::steady_clock::now();
        std::string error;
        try {
            sched_->step();
        } catch (const std::exception& e) {
            error = e.what();
        }
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        lock.lock();
        // Requests whose own step failed (the scheduler has already let them go).
        for (const auto& f : sched_->take_failures()) {
            for (size_t i = 0; i < live_.size(); ++i) {
                if (live_[i].gen.get() != f.g) continue;
                live_[i].req->error = f.what;
                live_[i].req->done = true;
                ++counters_.failed;
                live_[i].req->cv.notify_all();
                live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
                break;
            }
        }
        counters_.steps += 1;
        counters_.busy_s += s;
        counters_.occupancy_sum += static_cast<int64_t>(live_.size());
        for (size_t i = 0; i < live_.size();) {
            Live& l = live_[i];
            if (error.empty() && l.req->on_event && !l.gen->result().steps.empty()) {
                l.req->on_event(step_event(l));
            }
            std::vector<int32_t> stable;
            if (error.empty() && l.req->on_step && !l.gen->result().steps.empty()) {
                stable = stable_ids(l);
                const std::string text = lm_.tok->decode(stable, false);
                if (!l.req->on_step({text, stable, l.gen->result()})) l.req->stopped = true;
            }
            if (error.empty() && !l.gen->done() && !l.req->stopped) {
                ++i;
                continue;
            }
            sched_->remove(*l.gen);
            if (error.empty()) {
                l.req->result = l.gen->take_result();
                // A stopped request's answer is its committed prefix; the rest may be masked.
                const auto answer = l.req->stopped ? stable : l.req->result.answer(lm_.ids);
                l.req->text = lm_.tok->decode(answer, false);
                l.req->answer_tokens = static_cast<int64_t>(answer.size());
                // decode() is the concatenation of the pieces: the prefix lengths are their sums.
                size_t end = 0;
                for (const int32_t id : answer) {
                    end += lm_.tok->token_to_piece(id, false).size();
                    l.req->answer_ends.push_back(end);
                }
                counters_.tokens += l.req->answer_tokens;
                counters_.forwards_rows += l.req->result.stats.rows;
                ++counters_.completed;
            } else {
                l.req->error = error;
                ++counters_.failed;
            }
            l.req->done = true;
            l.req->cv.notify_all();
            live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
        }
    }
}

}  // namespace llada::tools
