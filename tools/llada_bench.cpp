// llada-bench: how fast the engine runs a model, measured side by side with this machine's
// ceilings and (optionally) with llama.cpp on the same GGUF.
//
//   rows mode (default): one forward of R window rows against a cached prefix of P positions, for
//     each R; ms, rows/s, GFLOP/s and the share of the measured peak (a roofline table).
//   --e2e: whole generations per decoding policy (prompt + gen), latency and counters, with
//     llama.cpp's llama-diffusion-cli on the same file interleaved when --llama-diffusion is given.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "decode/policy.h"
#include "kernels/peak.h"
#include "runtime/device.h"
#include "tools/common.h"
#include "util/error.h"

using namespace llada;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

size_t peak_rss_bytes() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

struct Peaks {
    double gflops = 0;  // FMA, all threads
    double gbps = 0;    // streaming reads, all threads
};

// Runs body(thread) on every thread of the pool for about `seconds` and returns the summed
// rate of what body reports per call.
template <typename Body>
double all_threads_rate(runtime::ThreadPool& pool, double seconds, Body body) {
    std::vector<double> work(pool.size(), 0.0), time(pool.size(), 0.0);
    pool.parallel_for(pool.size(), [&](int64_t, int thread) {
        const auto t0 = Clock::now();
        double w = 0;
        while (seconds_since(t0) < seconds)
            w += body(thread);
        work[thread] += w;
        time[thread] += seconds_since(t0);
    });
    double rate = 0;
    for (int t = 0; t < pool.size(); ++t)
        rate += time[t] > 0 ? work[t] / time[t] : 0;
    return rate;
}

Peaks measure_peaks(runtime::ThreadPool& pool) {
    Peaks p;
    float sink = 0;
    p.gflops =
        all_threads_rate(pool, 0.5, [&](int) { return kernels::fma_flops(1 << 20, &sink); }) / 1e9;
    // 256 MiB per thread: far beyond the caches.
    const int64_t n = 64ll << 20;
    std::vector<std::vector<float>> bufs(pool.size(), std::vector<float>(n, 1.0f));
    p.gbps = all_threads_rate(
                 pool, 1.0, [&](int t) { return kernels::read_bytes(bufs[t].data(), n, &sink); }) /
             1e9;
    return p;
}

// Multiply-adds of one forward of R rows against P cached positions: the weight matrices (LM head
// only for the R rows) and attention (QK and PV over P + R keys).
double forward_flops(const model::Model& m, int64_t R, int64_t P) {
    const auto& hp = m.hparams();
    const double per_row_weights =
        static_cast<double>(hp.n_layer) *
            (hp.n_embd * (hp.n_head + 2 * hp.n_kv_head) * hp.head_dim +
             hp.n_head * hp.head_dim * hp.n_embd + 3.0 * hp.n_embd * hp.n_ff) +
        static_cast<double>(hp.n_embd) * hp.n_vocab;
    const double attn = static_cast<double>(hp.n_layer) * hp.n_head * hp.head_dim * 2.0 * (P + R);
    return 2.0 * R * (per_row_weights + attn);
}

nlohmann::json run_rows(const model::Model& m, runtime::Device& dev, const std::vector<int>& rows,
                        int prefix, int reps, const Peaks& peaks) {
    nlohmann::json out = nlohmann::json::array();
    const int max_r = *std::max_element(rows.begin(), rows.end());
    const int n_pos = prefix + max_r;
    model::Session s(m, dev, 1, n_pos, std::max(prefix, max_r), max_r);
    std::vector<int32_t> tok(n_pos), pos(n_pos), seq(n_pos, 0);
    for (int i = 0; i < n_pos; ++i) {
        tok[i] = static_cast<int32_t>((i * 7919) % m.hparams().n_vocab);
        pos[i] = i;
    }
    if (prefix > 0) {  // fill the cache once
        int32_t kv = prefix, last = prefix - 1;
        runtime::Batch b{prefix, tok.data(), pos.data(), seq.data(), 1, &last, &kv};
        s.forward_stats(b);
    }
    for (int R : rows) {
        std::vector<int32_t> out_rows(R);
        for (int i = 0; i < R; ++i)
            out_rows[i] = i;
        int32_t kv = prefix + R;
        runtime::Batch b{
            R, tok.data() + prefix, pos.data() + prefix, seq.data(), R, out_rows.data(), &kv};
        s.forward_stats(b);  // warm-up
        std::vector<double> ms;
        for (int r = 0; r < reps; ++r) {
            const auto t0 = Clock::now();
            s.forward_stats(b);
            ms.push_back(seconds_since(t0) * 1e3);
        }
        const double med = median(ms);
        const double gflops = forward_flops(m, R, prefix) / (med * 1e-3) / 1e9;
        out.push_back({{"rows", R},
                       {"prefix", prefix},
                       {"ms", med},
                       {"rows_per_s", R / (med * 1e-3)},
                       {"gflops", gflops},
                       {"peak_pct", peaks.gflops > 0 ? 100.0 * gflops / peaks.gflops : 0.0}});
    }
    return out;
}

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

std::vector<int> parse_int_list(const std::string& s, const std::string& flag) {
    std::vector<int> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        char* end = nullptr;
        long x = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || x <= 0 || x > (1 << 20)) {
            throw Error(flag + ": '" + item + "' is not a positive integer");
        }
        v.push_back(static_cast<int>(x));
    }
    if (v.empty()) throw Error(flag + " is empty");
    return v;
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (!item.empty()) v.push_back(item);
    }
    return v;
}

// Runs a command, returning its combined output (stderr included) and exit status.
std::pair<int, std::string> run_command(const std::string& cmd) {
    std::string out;
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) throw Error("cannot run '" + cmd + "'");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
        out.append(buf, n);
    return {pclose(p), out};
}

// One generation with llama.cpp's llama-diffusion-cli; returns its wall time in seconds (the
// whole process, model load included, and its own "total time" of the denoising loop).
std::pair<double, double> run_llama_diffusion(const std::string& bin, const std::string& model,
                                              const std::string& prompt, int n_ub, int steps,
                                              int block, int threads) {
    std::ostringstream cmd;
    cmd << "'" << bin << "' -m '" << model << "' -p '" << prompt << "' -ub " << n_ub << " -b "
        << n_ub << " -c " << n_ub << " --diffusion-steps " << steps << " --diffusion-block-length "
        << block << " -t " << threads << " --temp 0 --seed 1";
    const auto t0 = Clock::now();
    auto [status, out] = run_command(cmd.str());
    const double wall = seconds_since(t0);
    if (status != 0) throw Error("llama-diffusion-cli failed:\n" + out.substr(0, 2000));
    const auto at = out.find("total time: ");
    const double loop_ms = at == std::string::npos ? 0.0 : std::atof(out.c_str() + at + 12);
    return {wall, loop_ms / 1e3};
}

// llama.cpp's prompt processing of R tokens on the same file: tokens per second (avg_ts).
double run_llama_bench(const std::string& bin, const std::string& model, int rows, int reps,
                       int threads) {
    std::ostringstream cmd;
    cmd << "'" << bin << "' -m '" << model << "' -p " << rows << " -n 0 -r " << reps << " -t "
        << threads << " -o jsonl";
    auto [status, out] = run_command(cmd.str());
    if (status != 0) throw Error("llama-bench failed:\n" + out.substr(0, 2000));
    std::istringstream is(out);
    std::string line;
    while (std::getline(is, line)) {
        if (line.empty() || line[0] != '{') continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("avg_ts")) return j["avg_ts"].get<double>();
    }
    throw Error("no result in llama-bench's output:\n" + out.substr(0, 2000));
}

}  // namespace

int main(int argc, char** argv) {
    return tools::run_tool([&]() -> int {
        std::string model_path,
            rows_list = "1,8,16,32,64,128,256",
            policies = "vanilla,prefix-cache,dual-cache,threshold,dual-cache+threshold";
        std::string llama_diffusion;
        int prefix = 0, reps = 5, prompt_len = 32, gen = 128, block = 32, steps = 0;
        double tau = 0.9;
        bool json = false, e2e = false, no_peaks = false;
        int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        tools::ArgTable args("llada-bench",
                             "Measures forward latency per row count (roofline table), or with "
                             "--e2e whole\ngenerations per policy, optionally beside llama.cpp.");
        args.string({"-m", "--model"}, "FILE", "GGUF model", &model_path);
        args.integer({"-t", "--threads"}, "N", "threads (default: all cores)", &threads, 1, 1024);
        args.integer({"--reps"}, "N", "repetitions per measurement (median reported)", &reps, 1,
                     1000);
        args.flag({"--json"}, "print JSON", &json);
        args.section("Rows mode");
        args.string({"--rows"}, "LIST", "row counts (default 1,8,16,32,64,128,256)", &rows_list);
        args.integer({"--prefix"}, "P", "cached prefix positions the rows attend to (default 0)",
                     &prefix, 0, 1 << 20);
        args.flag({"--no-peaks"}, "skip the peak FLOP/s and bandwidth microbenchmarks", &no_peaks);
        std::string llama_bench;
        bool sampling = false;
        int window = 160, need = 32;
        args.string({"--llama-bench"}, "PATH",
                    "an existing llama.cpp llama-bench binary: runs -p ROWS -n 0 on the same\n"
                    "file right after each of our row counts and reports the throughput ratio",
                    &llama_bench);
        args.section("Sampling mode");
        args.flag({"--sampling"},
                  "the share of a step spent on the output head and sampling: logits for every\n"
                  "row, logits for the needed rows only, and the fused head",
                  &sampling);
        args.integer({"--window"}, "W", "rows a step computes (default 160)", &window, 1, 1 << 20);
        args.integer({"--need"}, "N", "rows whose prediction is needed (default 32)", &need, 1,
                     1 << 20);
        args.section("End-to-end mode");
        args.flag({"--e2e"}, "time whole generations per policy", &e2e);
        args.string({"--policies"}, "LIST",
                    "policies, '+threshold' adds --threshold (default: vanilla, prefix-cache,\n"
                    "dual-cache, threshold, dual-cache+threshold)",
                    &policies);
        args.integer({"--prompt-len"}, "N", "prompt tokens, BOS included (default 32)", &prompt_len,
                     1, 1 << 20);
        args.integer({"--gen"}, "N", "generated positions (default 128)", &gen, 1, 1 << 20);
        args.integer({"--block"}, "N", "block length (default 32)", &block, 1, 1 << 20);
        args.integer({"--steps"}, "N", "steps (default: --gen)", &steps, 1, 1 << 20);
        args.real({"--threshold"}, "TAU", "tau of the threshold policies (default 0.9)", &tau, 0.0,
                  1.0);
        args.string({"--llama-diffusion"}, "PATH",
                    "an existing llama.cpp llama-diffusion-cli binary to run on the same file,\n"
                    "interleaved with ours (nothing of llama.cpp is built or shipped here)",
                    &llama_diffusion);
        if (!args.parse(argc, argv)) return 0;
        if (model_path.empty()) throw Error("-m/--model is required");
        if (steps == 0) steps = gen;

        const auto t_load = Clock::now();
        tools::LoadedModel lm = tools::load_model(model_path);
        const double load_s = seconds_since(t_load);
        runtime::ThreadPool pool(threads);
        auto dev = runtime::make_cpu_device(pool);
        nlohmann::json report = {{"model", model_path},
                                 {"threads", threads},
                                 {"simd", kernels::active_target()},
                                 {"params", lm.model->n_params()},
                                 {"weight_bytes", lm.model->weight_bytes()},
                                 {"load_s", load_s}};
        if (sampling) {
            if (need > window) throw Error("--need must not exceed --window");
            nlohmann::json r = run_sampling(*lm.model, *dev, window, need, reps);
            report["sampling"] = r;
            if (json) {
                std::printf("%s\n", report.dump(1).c_str());
                return 0;
            }
            std::printf(
                "%s: vocab %lld, d %lld, %d layers, %d threads; step of %d rows, %d needed\n",
                model_path.c_str(), static_cast<long long>(lm.model->hparams().n_vocab),
                static_cast<long long>(lm.model->hparams().n_embd), lm.model->hparams().n_layer,
                threads, window, need);
            std::printf("  transformer body      %9.1f ms\n", r["body_ms"].get<double>());
            std::printf("  logits for all rows   %9.1f ms   sampling share %5.1f%%\n",
                        r["all_rows_ms"].get<double>(), 100 * r["share_all_rows"].get<double>());
            std::printf("  logits for needed rows%9.1f ms   sampling share %5.1f%%\n",
                        r["need_rows_ms"].get<double>(), 100 * r["share_need_rows"].get<double>());
            std::printf("  fused LM head         %9.1f ms   sampling share %5.1f%%\n",
                        r["fused_ms"].get<double>(), 100 * r["share_fused"].get<double>());
            return 0;
        }
        if (!e2e) {
            Peaks peaks;
            if (!no_peaks) peaks = measure_peaks(pool);
            report["peak_gflops"] = peaks.gflops;
            report["peak_read_gbps"] = peaks.gbps;
            nlohmann::json rows = nlohmann::json::array();
            for (int R : parse_int_list(rows_list, "--rows")) {
                nlohmann::json r = run_rows(*lm.model, *dev, {R}, prefix, reps, peaks)[0];
                if (!llama_bench.empty()) {
                    // Interleaved: llama.cpp runs right after ours, for the same row count.
                    const double ts = run_llama_bench(llama_bench, model_path, R, reps, threads);
                    r["llama_cpp_rows_per_s"] = ts;
                    r["ratio"] = r["rows_per_s"].get<double>() / ts;
                }
                rows.push_back(r);
            }
            report["results"] = rows;
            report["peak_rss_bytes"] = peak_rss_bytes();
            if (json) {
                std::printf("%s\n", rows.dump(1).c_str());
                std::fprintf(stderr, "%s\n", report.dump().c_str());
                return 0;
            }
            std::printf("%s: %.2f B params, %.2f GB weights, %s, %d threads\n", model_path.c_str(),
                        lm.model->n_params() / 1e9, lm.model->weight_bytes() / 1e9,
                        kernels::active_target(), threads);
            std::printf("measured peak: %.1f GFLOP/s (FMA), %.1f GB/s (read)\n", peaks.gflops,
                        peaks.gbps);
            std::printf("%6s %8s %10s %12s %10s %8s %14s %7s\n", "rows", "prefix", "ms", "rows/s",
                        "GFLOP/s", "% peak", "llama.cpp t/s", "ratio");
            for (const auto& r : rows) {
                std::printf("%6d %8d %10.2f %12.1f %10.1f %7.1f%%", r["rows"].get<int>(),
                            r["prefix"].get<int>(), r["ms"].get<double>(),
                            r["rows_per_s"].get<double>(), r["gflops"].get<double>(),
                            r["peak_pct"].get<double>());
                if (r.contains("ratio")) {
                    std::printf(" %14.1f %6.2fx", r["llama_cpp_rows_per_s"].get<double>(),
                                r["ratio"].get<double>());
                }
                std::printf("\n");
            }
            std::printf("peak RSS %.2f GB\n", peak_rss_bytes() / 1e9);
            return 0;
        }

        // End-to-end: a prompt of prompt_len tokens (BOS + printable bytes, one token each in a
        // byte-level vocabulary), the same text for llama.cpp.
        std::string prompt_text;
        for (int i = 0; i + 1 < prompt_len; ++i)
            prompt_text += static_cast<char>('a' + i % 26);
        const auto prompt = lm.tok->encode(prompt_text, lm.tok->add_bos_default(), false);
        nlohmann::json runs = nlohmann::json::array();
        for (int rep = 0; rep < reps; ++rep) {
            for (const std::string& spec : split(policies)) {
                decode::GenerateOptions opt;
                opt.gen = gen;
                opt.block = block;
                opt.steps = steps;
                std::string name = spec;
                if (const auto plus = spec.find("+threshold"); plus != std::string::npos) {
                    name = spec.substr(0, plus);
                    opt.threshold = tau;
                } else if (spec == "threshold") {
                    opt.threshold = tau;
                }
                auto policy = decode::make_policy(name, *lm.model, *dev, opt, lm.ids);
                const auto t0 = Clock::now();
                auto res = policy->generate(prompt);
                const double wall = seconds_since(t0);
                runs.push_back({{"engine", "llada.cpp"},
                                {"policy", spec},
                                {"rep", rep},
                                {"wall_s", wall},
                                {"nfe", res.stats.forwards},
                                {"rows", res.stats.rows},
                                {"lm_head_rows", res.stats.lm_head_rows}});
                std::fprintf(stderr, "llada.cpp %-22s %8.2f s  NFE %lld\n", spec.c_str(), wall,
                             static_cast<long long>(res.stats.forwards));
            }
            if (!llama_diffusion.empty()) {
                // llama.cpp splits the whole ubatch (prompt + gen) into blocks, so the prompt's
                // blocks get steps too; steps must cover them (see BENCHMARKS.md).
                const int n_ub = static_cast<int>(prompt.size()) + gen;
                const int blocks_total = (n_ub + block - 1) / block;
                const int llama_steps = steps / (gen / block) * blocks_total;
                auto [wall, loop] = run_llama_diffusion(llama_diffusion, model_path, prompt_text,
                                                        n_ub, llama_steps, block, threads);
                runs.push_back({{"engine", "llama.cpp"},
                                {"policy", "llama-diffusion-cli"},
                                {"rep", rep},
                                {"wall_s", wall},
                                {"loop_s", loop},
                                {"nfe", llama_steps}});
                std::fprintf(stderr, "llama.cpp %-22s %8.2f s (denoising loop %.2f s, %d steps)\n",
                             "llama-diffusion-cli", wall, loop, llama_steps);
            }
        }
        report["e2e"] = runs;
        report["prompt_tokens"] = prompt.size();
        report["gen"] = gen;
        report["block"] = block;
        report["steps"] = steps;
        report["peak_rss_bytes"] = peak_rss_bytes();
        std::printf("%s\n", report.dump(json ? 1 : -1).c_str());
        return 0;
    });
}
