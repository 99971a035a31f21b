// Stepping one diffusion generation for the step engine's tests (generator_test.cpp,
// pipeline_test.cpp): the canvas, states and commits after every step, an optional check that
// the cache's committed slots hold their tokens' keys, and the shipped tiny model's setting.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "decode/generator.h"
#include "decode/scheduler.h"
#include "model/model.h"
#include "runtime/device.h"
#include "tools/common.h"

namespace llada::steptest {

namespace fs = std::filesystem;

inline fs::path decode_dir() {
    return fs::path(LLADA_TEST_DATA) / "decode";
}

inline std::string shipped(const char* name) {
    return (fs::path(LLADA_SOURCE_DIR) / "models" / name).string();
}

// A generation run step by step, with the canvas and states after every step.
struct Trace {
    decode::GenerateResult result;
    std::vector<std::vector<int32_t>> canvas;
    std::vector<std::vector<decode::TokenState>> states;
    std::vector<decode::StepInfo> steps;
    std::vector<std::vector<int32_t>> committed;
    std::vector<std::vector<bool>> ahead;  // pipeline: committed ahead, not verified yet
    // Layer-0 keys read back from the cache after the last step, per position (head 0).
    std::vector<std::vector<float>> k0;
    std::vector<int32_t> kv_token;
};

inline std::vector<float> layer0_key(const model::Model& m, int32_t token, int32_t p);

// Checked after every step when asked: each committed position whose slot is not due for
// recomputation holds the layer-0 key of its committed token (never a draft's).
struct CacheCheck {
    bool on = false;
    int checked = 0;
    std::map<std::pair<int32_t, int32_t>, std::vector<float>> keys;  // (token, position)
};

inline Trace run(const model::Model& m, const std::string& policy, decode::GenerateOptions opt,
                 const decode::TokenIds& ids, const std::vector<int32_t>& prompt,
                 const decode::ForwardCost* cost = nullptr, int threads = 1,
                 CacheCheck* check = nullptr) {
    runtime::ThreadPool pool(threads);
    auto dev = runtime::make_cpu_device(pool);
    const auto cfg = decode::configure_diffusion(policy, opt);
    decode::Generator g(m, opt, ids, cfg, prompt, cost);
    const int L = g.canvas_len();
    // The shape the CLI sizes its session by (with --revise-tail dense's scratch slots).
    const decode::SessionShape shape = decode::session_shape(cfg, opt, L);
    runtime::KvCache kv = decode::session_cache(m, shape, opt);
    model::Session s(m, *dev, kv, shape.rows, shape.rows, opt.kernels);
    Trace t;
    {
        decode::Scheduler sched(s);
        sched.add(g);
        while (!g.done()) {
            EXPECT_TRUE(sched.step());
            t.canvas.emplace_back(g.result().canvas);
            t.states.emplace_back(g.states().begin(), g.states().end());
            t.steps.push_back(g.last_step());
            t.committed.emplace_back(g.last_committed().begin(), g.last_committed().end());
            t.ahead.emplace_back(L);
            for (int p = 0; p < L; ++p)
                t.ahead.back()[p] = g.committed_ahead(p);
            if (check == nullptr || !check->on) continue;
            for (int p = static_cast<int>(prompt.size()); p < L; ++p) {
                if (!g.kv_fresh(p)) continue;
                const int32_t tok = g.result().canvas[p];
                auto& want = check->keys[{tok, p}];
                if (want.empty()) want = layer0_key(m, tok, p);
                const float* k = s.kv().k(0, 0, 0, p);
                float err = 0;
                for (size_t i = 0; i < want.size(); ++i)
                    err = std::max(err, std::fabs(want[i] - k[i]));
                EXPECT_LT(err, 1e-5f) << "step " << t.steps.size() << " position " << p;
                ++check->checked;
            }
        }
        EXPECT_FALSE(sched.step());
    }
    const int64_t hd = m.hparams().head_dim;
    for (int p = 0; p < L; ++p) {
        const float* k = s.kv().k(0, 0, 0, p);
        t.k0.emplace_back(k, k + hd);
        t.kv_token.push_back(g.kv_token(p));
    }
    t.result = g.take_result();
    return t;
}

// The layer-0 key of `token` at position p: it depends on nothing else (no attention before it).
inline std::vector<float> layer0_key(const model::Model& m, int32_t token, int32_t p) {
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    model::Session s(m, *dev, 1, p + 1, 1, 1);
    int32_t seq = 0, out = 0, kv = p + 1, slot = p;
    runtime::Batch b{1, &token, &p, &seq, 1, &out, &kv, &slot, nullptr};
    s.forward_stats(b);
    const float* k = s.kv().k(0, 0, 0, p);
    return std::vector<float>(k, k + m.hparams().head_dim);
}

inline bool committed_state(decode::TokenState s) {
    return s == decode::TokenState::Visible || s == decode::TokenState::Stable;
}

struct Tiny {
    tools::LoadedModel lm;
    decode::GenerateOptions opt;
    Tiny() : lm(tools::load_model(shipped("tiny-llada-m.gguf"))) {
        opt.gen = 32;
        opt.block = 8;
        opt.steps = 32;
        opt.threshold = 0.9;
    }
    std::vector<int32_t> prompt(const std::string& text) const {
        return lm.tok->encode(text, lm.tok->add_bos_default(), false);
    }
};

// Two runs that decode alike: the same canvas, and step for step the same commits and rows.
inline void expect_same_steps(const Trace& a, const Trace& b) {
    EXPECT_EQ(a.result.canvas, b.result.canvas);
    ASSERT_EQ(a.steps.size(), b.steps.size());
    for (size_t i = 0; i < a.steps.size(); ++i) {
        EXPECT_EQ(a.committed[i], b.committed[i]);
        EXPECT_EQ(a.steps[i].rows, b.steps[i].rows);
    }
}

inline const char* kPrompts[] = {
    "sort 75 71 54 77 85 25:", "6238+0032=", "0784-0542=", "sort 38 27 91 54 66 12:", "4721+3987="};

}  // namespace llada::steptest
