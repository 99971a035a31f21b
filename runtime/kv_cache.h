// Per-layer key/value cache, indexed by (sequence, canvas position); sized once per session.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace llada::runtime {

class KvCache {
  public:
    KvCache() = default;
    // kv_dim = n_kv_head * head_dim floats per position. Memory is allocated here, once.
    KvCache(int n_layer, int n_seq, int n_pos, int64_t kv_dim);

    int n_layer() const { return n_layer_; }
    int n_seq() const { return n_seq_; }
    int n_pos() const { return n_pos_; }
    int64_t kv_dim() const { return kv_dim_; }
    size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

    float* k(int layer, int seq, int pos) { return k_.data() + index(layer, seq, pos); }
    float* v(int layer, int seq, int pos) { return v_.data() + index(layer, seq, pos); }
    const float* k(int layer, int seq, int pos) const { return k_.data() + index(layer, seq, pos); }
    const float* v(int layer, int seq, int pos) const { return v_.data() + index(layer, seq, pos); }

  private:
    size_t index(int layer, int seq, int pos) const {
        return ((static_cast<size_t>(layer) * n_seq_ + seq) * n_pos_ + pos) *
               static_cast<size_t>(kv_dim_);
    }
    int n_layer_ = 0, n_seq_ = 0, n_pos_ = 0;
    int64_t kv_dim_ = 0;
    std::vector<float> k_, v_;
};

}  // namespace llada::runtime
