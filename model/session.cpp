// The per-generation state: a compiled plan and a KV cache, allocated once.
#include "model/model.h"
#include "util/error.h"

namespace llada::model {

namespace {

void check_fp16_kv(const Hparams& hp, const runtime::PlanOptions& options) {
    if (options.kv_f16 && hp.head_dim > kernels::kMaxFp16KvHeadDim) {
        throw Error("an fp16 KV cache supports heads of at most " +
                    std::to_string(kernels::kMaxFp16KvHeadDim) + " values; this model's have " +
                    std::to_string(hp.head_dim));
    }
}

}  // namespace

Session::Session(const Model& model, runtime::Device& device, int n_seq, int n_pos,
                 int64_t max_rows, int64_t max_out, runtime::PlanOptions options)
    : model_(model), device_(device), max_rows_(max_rows), max_out_(max_out), options_(options) {
    const Hparams& hp = model.hparams();
    if (n_pos > hp.n_ctx) {
        throw Error("a canvas of " + std::to_string(n_pos) +
                    " positions exceeds the model's context length " + std::to_string(hp.n_ctx));
    }
    check_fp16_kv(hp, options);
    own_kv_ = runtime::KvCache(hp.n_layer, n_seq, n_pos, hp.n_kv_head, hp.head_dim, options.kv_f16);
    kv_ = &own_kv_;
    init();
}

Session::Session(const Model& model, runtime::Device& device, runtime::KvCache& kv,
                 int64_t max_rows, int64_t max_out, runtime::PlanOptions options)
    : model_(model), device_(device), max_rows_(max_rows), max_out_(max_out), options_(options) {
    const Hparams& hp = model.hparams();
    if (kv.n_layer() != hp.n_layer || kv.n_kv_head() != hp.n_kv_head ||
        kv.head_dim() != hp.head_dim || kv.f16() != options.kv_f16) {
        throw Error("the shared KV cache's shape does not match the model's");
    }
    check_fp16_kv(hp, options);
    // A shared cache may hold more slots than the context has positions (progressive
    // revision's scratch slots); every row's position is checked against the context instead.
    kv_ = &kv;
    init();
}

void Session::init() {
    // Rows on a tiled device are padded to the tile anyway, and output-row work is placed on the
    // CPU there: the last layer stays whole.
    options_.gather_last_layer = device_.caps().tile_rows <= 1 && !options_.full_last_layer;
    written_at_.assign(static_cast<size_t>(kv_->n_seq()) * kv_->n_pos(), -1);
    written_by_.assign(written_at_.size(), -1);
}

runtime::CompiledPlan& Session::compiled(Model::Head head) {
    auto& slot = head == Model::Head::Logits ? logits_plan_ : stats_plan_;
    if (!slot) slot = device_.compile(model_.build_plan(max_rows_, max_out_, head, options_));
    return *slot;
}

std::vector<runtime::LatencyEntry> Session::latency_table(std::span<const int64_t> rows,
                                                          int64_t kv_len) {
    return device_.latency_table(compiled(Model::Head::Stats).plan(), rows, kv_len);
}

size_t Session::arena_bytes() const {
    return (logits_plan_ ? logits_plan_->arena_bytes() : 0) +
           (stats_plan_ ? stats_plan_->arena_bytes() : 0);
}

const float* Session::forward(const runtime::Batch& batch, const runtime::OpObserver* obs) {
    check(batch);
    runtime::CompiledPlan& cp = compiled(Model::Head::Logits);
    device_.execute(cp, batch, *kv_, obs);
    stats_.forwards += 1;
    stats_.rows += batch.n_rows;
    stats_.lm_head_rows += batch.n_out;
    return cp.output();
}

const kernels::RowStats* Session::forward_stats(const runtime::Batch& batch) {
    check(batch);
    runtime::CompiledPlan& cp = compiled(Model::Head::Stats);
    device_.execute(cp, batch, *kv_, nullptr);
    stats_.forwards += 1;
    stats_.rows += batch.n_rows;
    stats_.lm_head_rows += batch.n_out;
    return reinterpret_cast<const kernels::RowStats*>(cp.output());
}

void Session::check(const runtime::Batch& batch) {
    const int64_t n_vocab = model_.hparams().n_vocab;
    if (batch.n_rows <= 0 || batch.n_rows > max_rows()) {
        throw Error("forward of " + std::to_string(batch.n_rows) +
                    " rows does not fit the session's " + std::to_string(max_rows()));
    }
    if (batch.n_out < 0 || batch.n_out > max_out()) {
        throw Error("forward asks for " + std::to_string(batch.n_out) +
                    " output rows, the session has " + std::to_string(max_out()));
    }
    for (int64_t r = 0; r < batch.n_rows; ++r) {
        if (batch.tokens[r] < 0 || batch.tokens[r] >= n_vocab) {
            throw Error("token id " + std::to_string(batch.tokens[r]) +
                        " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
        }
        if (batch.pos[r] < 0 ||
            batch.pos[r] >= std::min<int64_t>(n_pos(), model_.hparams().n_ctx) ||
            batch.seq[r] < 0 || batch.seq[r] >= n_seq()) {
            throw Error("row " + std::to_string(r) + " has position " +
                        std::to_string(batch.pos[r]) + " / sequence " +
                        std::to_string(batch.seq[r]) + " outside the session");
        }
    }
    // Row addressing: slots inside the cache, one writer per (sequence, slot) per forward.
    const int64_t stamp = ++checks_;
    for (int64_t r = 0; r < batch.n_rows; ++r) {
        const int32_t slot = batch.slot_of(r), ex = batch.exclude_of(r);
        if (slot >= n_pos() || ex >= n_pos()) {
            throw Error("row " + std::to_string(r) + " addresses cache slot " +
                        std::to_string(std::max(slot, ex)) + ", outside the sequence's " +
                        std::to_string(n_pos()));
        }
        if (slot < 0) continue;
        const size_t at = static_cast<size_t>(batch.seq[r]) * n_pos() + slot;
        if (written_at_[at] == stamp) {
            throw Error("rows " + std::to_string(written_by_[at]) + " and " + std::to_string(r) +
                        " both write the K/V of sequence " + std::to_string(batch.seq[r]) +
                        " slot " + std::to_string(slot) + " in one forward");
        }
        written_at_[at] = stamp;
        written_by_[at] = static_cast<int32_t>(r);
    }
    for (int64_t r = 0; r < batch.n_rows; ++r) {
        if (!batch.own_key_of(r)) continue;
        const int32_t slot = batch.slot_of(r), n = model_.hparams().causal ? 0
                                                   : batch.kv_len ? batch.kv_len[batch.seq[r]]
                                                                  : 0;
        if (model_.hparams().causal || batch.exclude_of(r) < 0 || slot < n) {
            throw Error("row " + std::to_string(r) +
                        " attends to its own key in place of an excluded one: that needs a "
                        "bidirectional model, an excluded key, and a slot beyond the sequence's "
                        "attention span (got slot " +
                        std::to_string(slot) + ", span " + std::to_string(n) + ")");
        }
    }
    for (int64_t i = 0; i < batch.n_out; ++i) {
        if (batch.out_rows[i] < 0 || batch.out_rows[i] >= batch.n_rows) {
            throw Error("output row " + std::to_string(batch.out_rows[i]) +
                        " is outside the window");
        }
    }
    if (model_.hparams().causal) {
        for (int64_t r = 0; r < batch.n_rows; ++r) {
            const int32_t ex = batch.exclude_of(r);
            if (ex > batch.pos[r] || (ex == 0 && batch.pos[r] == 0)) {
                throw Error("row " + std::to_string(r) + " excludes slot " + std::to_string(ex) +
                            ", which it does not attend to or its only key");
            }
        }
    } else {
        for (int s = 0; s < n_seq(); ++s) {
            if (batch.kv_len == nullptr || batch.kv_len[s] < 0 || batch.kv_len[s] > n_pos()) {
                throw Error("attention span of sequence " + std::to_string(s) + " is invalid");
            }
        }
        // A row attends to at least one key (its softmax would divide by zero).
        for (int64_t r = 0; r < batch.n_rows; ++r) {
            const int32_t n = batch.kv_len[batch.seq[r]];
            const int32_t ex = batch.exclude_of(r);
            if (ex >= n) {
                throw Error("row " + std::to_string(r) + " excludes slot " + std::to_string(ex) +
                            ", outside the " + std::to_string(n) + " slots it attends to");
            }
            if (n - (ex >= 0 ? 1 : 0) < 1) {
                throw Error("row " + std::to_string(r) + " of sequence " +
                            std::to_string(batch.seq[r]) + " has no keys to attend to (kv_len 0)");
            }
        }
    }
}

}  // namespace llada::model
