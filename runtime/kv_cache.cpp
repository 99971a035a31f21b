// Per-layer key/value cache, head-major (runtime/kv_cache.h).
#include "runtime/kv_cache.h"

#include <algorithm>
#include <string>

#include "util/aligned.h"
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
    try {
        if (f16) {
            k16_.assign(n, 0);
            v16_.assign(n, 0);
        } else {
            k_.assign(n, 0.0f);
            v_.assign(n, 0.0f);
        }
    } catch (const std::bad_alloc&) {
        throw Error("out of memory: cannot allocate " + mib(2 * n * (f16 ? 2 : 4)) +
                    " for the KV cache (" + std::to_string(n_seq) + " sequences of " +
                    std::to_string(n_pos) + " positions); use fewer positions or --kv-f16");
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

// Slot `pos` of sequence `from_seq` of `src` to the same slot of `to_seq` here (src may be *this).
size_t KvCache::copy(const KvCache& src, int from_seq, int to_seq, int pos) {
    const size_t n = static_cast<size_t>(head_dim_);
    for (int l = 0; l < n_layer_; ++l) {
        for (int h = 0; h < n_kv_head_; ++h) {
            const size_t i = src.index(l, from_seq, h, pos), j = index(l, to_seq, h, pos);
            if (f16_) {
                std::copy_n(src.k16_.data() + i, n, k16_.data() + j);
                std::copy_n(src.v16_.data() + i, n, v16_.data() + j);
            } else {
                std::copy_n(src.k_.data() + i, n, k_.data() + j);
                std::copy_n(src.v_.data() + i, n, v_.data() + j);
            }
        }
    }
    return slot_bytes();
}

size_t KvCache::copy_slot(int from, int to, int pos) {
    if (from < 0 || from >= n_seq_ || to < 0 || to >= n_seq_ || pos < 0 || pos >= n_pos_) {
        throw Error("KV cache copy of slot " + std::to_string(pos) + " from sequence " +
                    std::to_string(from) + " to " + std::to_string(to) + " outside the cache");
    }
    return copy(*this, from, to, pos);
}

size_t KvCache::copy_slot_from(const KvCache& other, int seq, int pos) {
    if (other.n_layer_ != n_layer_ || other.n_seq_ != n_seq_ || other.n_kv_head_ != n_kv_head_ ||
        other.head_dim_ != head_dim_ || other.f16_ != f16_) {
        throw Error("KV cache copy between caches of different shapes");
    }
    if (seq < 0 || seq >= n_seq_ || pos < 0 || pos >= n_pos_ || pos >= other.n_pos_) {
        throw Error("KV cache copy of slot (" + std::to_string(seq) + ", " + std::to_string(pos) +
                    ") outside the cache");
    }
    return copy(other, seq, seq, pos);
}

}  // namespace llada::runtime
