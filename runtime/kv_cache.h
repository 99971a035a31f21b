// Per-layer key/value cache, indexed by (sequence, head, canvas position); sized once per
// session. Head-major: one head's keys (and values) for consecutive positions are contiguous
// rows of head_dim values, so attention reads each head's cache as one sequential stream.
// Values are float32, or fp16 (half the memory and half the bytes attention reads; llama.cpp's
// default cache type).
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

    int n_layer() const { return n_layer_; }
    int n_seq() const { return n_seq_; }
    int n_pos() const { return n_pos_; }
    int n_kv_head() const { return n_kv_head_; }
    int64_t head_dim() const { return head_dim_; }
    int64_t kv_dim() const { return n_kv_head_ * head_dim_; }
    bool f16() const { return f16_; }
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
    size_t index(int layer, int seq, int head, int pos) const {
        return (((static_cast<size_t>(layer) * n_seq_ + seq) * n_kv_head_ + head) * n_pos_ + pos) *
               static_cast<size_t>(head_dim_);
    }
    int n_layer_ = 0, n_seq_ = 0, n_pos_ = 0, n_kv_head_ = 0;
    int64_t head_dim_ = 0;
    bool f16_ = false;
    std::vector<float> k_, v_;
    std::vector<uint16_t> k16_, v16_;
};

}  // namespace llada::runtime
