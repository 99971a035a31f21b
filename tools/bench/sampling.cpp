// llada-bench's sampling mode: the share of a denoising step spent on the LM head and sampling.
#include <algorithm>
#include <cstdio>

#include "kernels/kernels.h"
#include "tools/bench/bench.h"
#include "util/error.h"

namespace llada::tools::bench {
namespace {

// The share of a denoising step spent on sampling: the output head plus the reductions that
// turn logits into (token, confidence). A step computes `window` rows of which `need` are
// masked positions whose prediction the policy needs. Four variants, each timed `reps` times:
//   body        the transformer alone (no output rows)
//   all_rows    logits for every window row, reductions on the needed ones (llama.cpp's way)
//   need_rows   logits only for the needed rows, reductions on the host
//   fused       the fused LM head: per-row argmax/confidence, no logits written
nlohmann::json run_sampling(const model::Model& m, runtime::Device& dev, int window, int need,
                            int reps) {
    const int64_t V = m.hparams().n_vocab;
    model::Session s(m, dev, 1, window, window, window);
    std::vector<int32_t> tok(window), pos(window), seq(window, 0), all(window);
    for (int i = 0; i < window; ++i) {
        tok[i] = static_cast<int32_t>((i * 7919) % V);
        pos[i] = all[i] = i;
    }
    int32_t kv = window;
    auto reduce = [&](const float* logits, int rows) {
        // What a policy does with full logits: argmax and its softmax probability per row.
        float sink = 0;
        for (int r = 0; r < rows; ++r) {
            const float* l = logits + static_cast<int64_t>(r) * V;
            int64_t best = 0;
            for (int64_t v = 1; v < V; ++v)
                best = l[v] > l[best] ? v : best;
            double sum = 0;
            for (int64_t v = 0; v < V; ++v)
                sum += std::exp(static_cast<double>(l[v] - l[best]));
            sink += static_cast<float>(1.0 / sum);
        }
        return sink;
    };
    auto time_it = [&](auto&& fn) {
        fn();  // warm-up (also compiles the plan)
        std::vector<double> ms;
        for (int r = 0; r < reps; ++r) {
            const auto t0 = Clock::now();
            fn();
            ms.push_back(seconds_since(t0) * 1e3);
        }
        return median(ms);
    };
    volatile float sink = 0;
    const double body = time_it([&] {
        runtime::Batch b{window, tok.data(), pos.data(), seq.data(), 0, all.data(), &kv};
        s.forward(b);
    });
    const double all_rows = time_it([&] {
        runtime::Batch b{window, tok.data(), pos.data(), seq.data(), window, all.data(), &kv};
        sink = sink + reduce(s.forward(b), need);
    });
    const double need_rows = time_it([&] {
        runtime::Batch b{window, tok.data(), pos.data(), seq.data(), need, all.data(), &kv};
        sink = sink + reduce(s.forward(b), need);
    });
    const double fused = time_it([&] {
        runtime::Batch b{window, tok.data(), pos.data(), seq.data(), need, all.data(), &kv};
        sink = sink + kernels::row_confidence(s.forward_stats(b)[0]);
    });
    auto share = [&](double t) { return t > 0 ? std::max(0.0, (t - body) / t) : 0.0; };
    return {{"window", window},
            {"need", need},
            {"body_ms", body},
            {"all_rows_ms", all_rows},
            {"need_rows_ms", need_rows},
            {"fused_ms", fused},
            {"share_all_rows", share(all_rows)},
            {"share_need_rows", share(need_rows)},
            {"share_fused", share(fused)}};
}

}  // namespace

int sampling_mode(const Options& o, const LoadedModel& lm, runtime::Device& device,
                  nlohmann::json& report) {
    runtime::Device* dev = &device;
    if (o.need > o.window) throw Error("--need must not exceed --window");
    nlohmann::json r = run_sampling(*lm.model, *dev, o.window, o.need, o.reps);
    report["sampling"] = r;
    if (o.json) {
        std::printf("%s\n", report.dump(1).c_str());
        return 0;
    }
    std::printf("%s: vocab %lld, d %lld, %d layers, %d threads; step of %d rows, %d needed\n",
                o.model_path.c_str(), static_cast<long long>(lm.model->hparams().n_vocab),
                static_cast<long long>(lm.model->hparams().n_embd), lm.model->hparams().n_layer,
                o.threads, o.window, o.need);
    std::printf("  transformer body      %9.1f ms\n", r["body_ms"].get<double>());
    std::printf("  logits for all rows   %9.1f ms   sampling share %5.1f%%\n",
                r["all_rows_ms"].get<double>(), 100 * r["share_all_rows"].get<double>());
    std::printf("  logits for needed rows%9.1f ms   sampling share %5.1f%%\n",
                r["need_rows_ms"].get<double>(), 100 * r["share_need_rows"].get<double>());
    std::printf("  fused LM head         %9.1f ms   sampling share %5.1f%%\n",
                r["fused_ms"].get<double>(), 100 * r["share_fused"].get<double>());
    return 0;
}

}  // namespace llada::tools::bench
