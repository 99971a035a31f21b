// Sources of the uniform random numbers a decoding policy draws.
#include "decode/noise.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "util/counter_rng.h"
#include "util/error.h"

namespace llada::decode {

double CounterNoise::at(int64_t i) const {
    return counter_uniform(seed_, base_ + static_cast<uint64_t>(i));
}

ReplayNoise ReplayNoise::from_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("cannot read noise file '" + path + "'");
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (bytes.size() % 8 != 0) {
        throw Error("noise file '" + path + "' is not a whole number of float64 values");
    }
    std::vector<double> v(bytes.size() / 8);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return ReplayNoise(std::move(v));
}

void ReplayNoise::next_draw(int64_t n) {
    base_ += size_;
    size_ = n;
    if (base_ + n > static_cast<int64_t>(values_.size())) {
        throw Error("recorded noise exhausted: a draw of " + std::to_string(n) + " values at " +
                    std::to_string(base_) + " exceeds the " + std::to_string(values_.size()) +
                    " recorded");
    }
}

}  // namespace llada::decode
