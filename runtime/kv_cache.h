// Per-layer key/value cache, indexed by (sequence, head, slot); sized once, owned outside any
// plan. A sequence is a set of n_pos slots that one generation (or one CFG branch) holds:
// acquire() hands out a free sequence and release() returns it, so several generations (test-time
// candidates, server requests) share one cache and one forward. Slots are canvas positions in
// the engine's use, but a row's RoPE position and its slot are given separately (runtime::Batch).
// Head-major: one head's keys (and values) for consecutive positions are contiguous rows of
// head_dim values, so attention reads each head's cache as one sequential stream. Values are
// float32, or fp16 (half the memory and half the bytes attention reads; llama.cpp's default cache
// type).
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace llada::runtime {

class KvCache {
  public:
    KvCache() = default;
    // n_kv_head heads of head_dim values per position, fp16 if `f16`. Memory is allocated
    // here, once.
    KvCache(int n_layer, int n_seq, int n_pos, int n_kv_head, int64_t head_dim, bool f16 = false);

    // A free sequence, marked in use; throws llada::Error when all n_seq are taken.
    int acquire();
    // Returns sequence `seq` (acquired before) to the free set.
    void release(int seq);
    int n_free() const;
    bool in_use(int seq) const { return seq >= 0 && seq < n_seq_ && used_[seq]; }

    int n_layer() const { return n_layer_; }
    int n_seq() const { return n_seq_; }
    int n_pos() const { return n_pos_; }
    int n_kv_head() const { return n_kv_head_; }
    int64_t head_dim() const { return head_dim_; }
    int64_t kv_dim() const { return n_kv_head_ * head_dim_; }
    bool f16() const { return f16_; }
    // Copies the keys and values of (seq, pos), every layer and head, from a cache of the same
    // shape (its n_pos may differ); returns the bytes copied. (The two paths of progressive
    // revision merge with it.)
    size_t copy_slot_from(const KvCache& other, int seq, int pos);
    // Copies slot `pos` of sequence `from` to the same slot of sequence `to` in this cache.
    size_t copy_slot(int from, int to, int pos);
    size_t slot_bytes() const {
        return static_cast<size_t>(n_layer_) * kv_dim() * 2 * (f16_ ? 2 : sizeof(float));
    }
    size_t bytes() const {
        return (k_.size() + v_.size()) * sizeof(float) + (k16_.size() + v16_.size()) * 2;
    }

    // Head `head`'s key (value) at position pos; the next position's follows after head_dim.
    // k / v for a float32 cache, k16 / v16 (fp16 bits) for an fp16 one.
    float* k(int layer, int seq, int head, int pos) {
        assert(!f16_);
        return k_.data() + index(layer, seq, head, pos);
    }
    float* v(int layer, int seq, int head, int pos) {
        assert(!f16_);
        return v_.data() + index(layer, seq, head, pos);
    }
    const float* k(int layer, int seq, int head, int pos) const {
        assert(!f16_);
        return k_.data() + index(layer, seq, head, pos);
    }
    const float* v(int layer, int seq, int head, int pos) const {
        assert(!f16_);
        return v_.data() + index(layer, seq, head, pos);
    }
    uint16_t* k16(int layer, int seq, int head, int pos) {
        assert(f16_);
        return k16_.data() + index(layer, seq, head, pos);
    }
    uint16_t* v16(int layer, int seq, int head, int pos) {
        assert(f16_);
        return v16_.data() + index(layer, seq, head, pos);
    }
    const uint16_t* k16(int layer, int seq, int head, int pos) const {
        assert(f16_);
        return k16_.data() + index(layer, seq, head, pos);
    }
    const uint16_t* v16(int layer, int seq, int head, int pos) const {
        assert(f16_);
        return v16_.data() + index(layer, seq, head, pos);
    }

  private:
    size_t copy(const KvCache& src, int from_seq, int to_seq, int pos);
    size_t index(int layer, int seq, int head, int pos) const {
        return (((static_cast<size_t>(layer) * n_seq_ + seq) * n_kv_head_ + head) * n_pos_ + pos) *
               static_cast<size_t>(head_dim_);
    }
    int n_layer_ = 0, n_seq_ = 0, n_pos_ = 0, n_kv_head_ = 0;
    int64_t head_dim_ = 0;
    bool f16_ = false;
    std::vector<float> k_, v_;
    std::vector<uint16_t> k16_, v16_;
    std::vector<bool> used_;
};

}  // namespace llada::runtime
