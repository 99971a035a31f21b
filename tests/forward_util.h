// One forward over a whole canvas in tests: every position's logits, positions 0..n-1 of one
// sequence attending to the whole canvas.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
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
