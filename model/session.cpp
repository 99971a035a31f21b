// The per-generation state: a compiled plan and a KV cache, allocated once.
#include "model/model.h"
#include "util/error.h"

namespace llada::model {

Session::Session(const Model& model, runtime::Device& device, int n_seq, int n_pos,
                 int64_t max_rows, int64_t max_out)
    : model_(model), device_(device) {
    const Hparams& hp = model.hparams();
    if (n_pos > hp.n_ctx) {
        throw Error("a canvas of " + std::to_string(n_pos) +
                    " positions exceeds the model's context length " + std::to_string(hp.n_ctx));
    }
    compiled_ = device.compile(model.build_plan(max_rows, max_out));
    kv_ = runtime::KvCache(hp.n_layer, n_seq, n_pos, hp.n_kv_head * hp.head_dim);
}

const float* Session::forward(const runtime::Batch& batch, const runtime::OpObserver* obs) {
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
        if (batch.pos[r] < 0 || batch.pos[r] >= n_pos() || batch.seq[r] < 0 ||
            batch.seq[r] >= n_seq()) {
            throw Error("row " + std::to_string(r) + " has position " +
                        std::to_string(batch.pos[r]) + " / sequence " +
                        std::to_string(batch.seq[r]) + " outside the session");
        }
    }
    for (int64_t i = 0; i < batch.n_out; ++i) {
        if (batch.out_rows[i] < 0 || batch.out_rows[i] >= batch.n_rows) {
            throw Error("output row " + std::to_string(batch.out_rows[i]) +
                        " is outside the window");
        }
    }
    if (!model_.hparams().causal) {
        for (int s = 0; s < n_seq(); ++s) {
            if (batch.kv_len == nullptr || batch.kv_len[s] < 0 || batch.kv_len[s] > n_pos()) {
                throw Error("attention span of sequence " + std::to_string(s) + " is invalid");
            }
        }
    }
    device_.execute(*compiled_, batch, kv_, obs);
    stats_.forwards += 1;
    stats_.rows += batch.n_rows;
    stats_.lm_head_rows += batch.n_out;
    return compiled_->output();
}

}  // namespace llada::model
