// Sources of the uniform random numbers a decoding policy draws (Gumbel noise, random
// remasking): a seeded counter-based generator, or a recorded stream replayed exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace llada::decode {

// The policy draws in "draws" of n values, as the reference draws torch.rand tensors; values of
// the current draw can be read in any order, and unread values are simply skipped, so a policy
// that needs only a few rows of an [L][V] draw does not pay for the rest.
class NoiseSource {
  public:
    virtual ~NoiseSource() = default;
    virtual void next_draw(int64_t n) = 0;
    // Value i in [0, n) of the current draw, uniform in [0, 1).
    virtual double at(int64_t i) const = 0;
};

// splitmix64 over (seed, position in the stream): reproducible for a seed, random access.
class CounterNoise : public NoiseSource {
  public:
    explicit CounterNoise(uint64_t seed) : seed_(seed) {}
    void next_draw(int64_t n) override {
        base_ += size_;
        size_ = n;
    }
    double at(int64_t i) const override;
    uint64_t seed() const { return seed_; }
    // Where the next draw's values start in the stream (llada::counter_uniform's index).
    uint64_t next_base() const { return base_ + static_cast<uint64_t>(size_); }

  private:
    uint64_t seed_;
    uint64_t base_ = 0;
    int64_t size_ = 0;
};

// Replays a recorded stream (the PyTorch reference's draws) value for value.
class ReplayNoise : public NoiseSource {
  public:
    explicit ReplayNoise(std::vector<double> values) : values_(std::move(values)) {}
    // Reads raw little-endian float64 values; throws llada::Error if unreadable.
    static ReplayNoise from_file(const std::string& path);
    void next_draw(int64_t n) override;
    double at(int64_t i) const override { return values_[static_cast<size_t>(base_ + i)]; }
    int64_t consumed() const { return base_ + size_; }

  private:
    std::vector<double> values_;
    int64_t base_ = 0;
    int64_t size_ = 0;
};

}  // namespace llada::decode
