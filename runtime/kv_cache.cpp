// Per-layer key/value cache, indexed by (sequence, canvas position); sized once per session.
#include "runtime/kv_cache.h"

namespace llada::runtime {

KvCache::KvCache(int n_layer, int n_seq, int n_pos, int64_t kv_dim)
    : n_layer_(n_layer), n_seq_(n_seq), n_pos_(n_pos), kv_dim_(kv_dim) {
    const size_t n = static_cast<size_t>(n_layer) * n_seq * n_pos * kv_dim;
    k_.assign(n, 0.0f);
    v_.assign(n, 0.0f);
}

}  // namespace llada::runtime
