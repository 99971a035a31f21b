// Per-layer key/value cache, head-major (runtime/kv_cache.h).
#include "runtime/kv_cache.h"

#include <string>

#include "util/error.h"

namespace llada::runtime {

KvCache::KvCache(int n_layer, int n_seq, int n_pos, int n_kv_head, int64_t head_dim, bool f16)
    : n_layer_(n_layer),
      n_seq_(n_seq),
      n_pos_(n_pos),
      n_kv_head_(n_kv_head),
      head_dim_(head_dim),
      f16_(f16),
      used_(static_cast<size_t>(n_seq), false) {
    const size_t n = static_cast<size_t>(n_layer) * n_seq * n_pos * n_kv_head * head_dim;
    if (f16) {
        k16_.assign(n, 0);
        v16_.assign(n, 0);
    } else {
        k_.assign(n, 0.0f);
        v_.assign(n, 0.0f);
    }
}

int KvCache::acquire() {
    for (int s = 0; s < n_seq_; ++s) {
        if (!used_[s]) {
            used_[s] = true;
            return s;
        }
    }
    throw Error("the KV cache has no free sequence (all " + std::to_string(n_seq_) +
                " are in use)");
}

void KvCache::release(int seq) {
    assert(in_use(seq));
    used_[seq] = false;
}

int KvCache::n_free() const {
    int n = 0;
    for (bool u : used_)
        n += !u;
    return n;
}

}  // namespace llada::runtime
