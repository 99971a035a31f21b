// One forward over a whole canvas in tests: every position's logits, positions 0..n-1 of one
// sequence attending to the whole canvas.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "model/model.h"
#include "runtime/device.h"

namespace llada::test {

// Logits [n][n_vocab] of `tokens` on `dev`.
inline std::vector<float> forward_all(const model::Model& m, runtime::Device& dev,
                                      const std::vector<int32_t>& tokens,
                                      runtime::PlanOptions opt = {}) {
    const int n = static_cast<int>(tokens.size());
    model::Session s(m, dev, 1, n, n, n, opt);
    std::vector<int32_t> pos(n), seq(n, 0);
    for (int i = 0; i < n; ++i)
        pos[i] = i;
    const int32_t kv_len = n;
    runtime::Batch b{n, tokens.data(), pos.data(), seq.data(), n, pos.data(), &kv_len};
    const float* out = s.forward(b);
    return std::vector<float>(out, out + static_cast<size_t>(n) * m.hparams().n_vocab);
}

// The same on a CPU device of `threads` threads.
inline std::vector<float> forward_all(const model::Model& m, const std::vector<int32_t>& tokens,
                                      int threads, runtime::PlanOptions opt = {}) {
    runtime::ThreadPool pool(threads);
    auto dev = runtime::make_cpu_device(pool);
    return forward_all(m, *dev, tokens, opt);
}

// Whitespace-separated decimal token ids (a fixture's tokens.txt).
inline std::vector<int32_t> read_ids(const std::filesystem::path& p) {
    std::ifstream f(p);
    std::vector<int32_t> ids;
    int32_t x;
    while (f >> x)
        ids.push_back(x);
    return ids;
}

// A little-endian float32 file (a fixture's logits.f32).
inline std::vector<float> read_f32(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
}

// Largest |v| and largest |a - b| (a and b of the same size), in double.
inline double max_abs(const std::vector<float>& v) {
    double m = 0;
    for (float x : v)
        m = std::max(m, std::fabs(double(x)));
    return m;
}

inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i)
        m = std::max(m, std::fabs(double(a[i]) - b[i]));
    return m;
}

}  // namespace llada::test
