// llada-bench's rows mode: one forward of R window rows against a cached prefix, for each R, beside
// the machine's measured peaks and (--llama-bench) llama.cpp's prompt throughput on the same file.
#include <algorithm>
#include <cstdio>

#include "kernels/kernels.h"
#include "quant/blocks.h"
#include "tools/bench/bench.h"

namespace llada::tools::bench {
namespace {

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
                        int prefix, int reps, const Peaks& peaks, bool kv_f16) {
    nlohmann::json out = nlohmann::json::array();
    const int max_r = *std::max_element(rows.begin(), rows.end());
    const int n_pos = prefix + max_r;
    runtime::PlanOptions po;
    po.kv_f16 = kv_f16;
    model::Session s(m, dev, 1, n_pos, std::max(prefix, max_r), max_r, po);
    // Quantised weights run on int8 dot products, the others on float FMAs: the matching peak.
    const format::GgufTensor* probe = m.gguf().find_tensor("blk.0.ffn_gate.weight");
    const bool int8 = probe && quant::is_block_format(probe->type);
    const double peak = int8 ? peaks.int8_gops : peaks.gflops;
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
        out.push_back(
            {{"rows", R},
             {"prefix", prefix},
             {"ms", med},
             {"rows_per_s", R / (med * 1e-3)},
             {"gflops", gflops},
             {"peak_pct", peak > 0 ? 100.0 * gflops / peak : 0.0},
             {"peak_adjacent", peak},
             {"peak_kind", int8 ? "int8" : "fma"},
             // Roofline: weight bytes streamed per forward set the memory ceiling.
             {"intensity", forward_flops(m, R, prefix) / static_cast<double>(m.weight_bytes())},
             {"bound",
              forward_flops(m, R, prefix) / static_cast<double>(m.weight_bytes()) * peaks.gbps <
                      peak
                  ? "memory"
                  : "compute"}});
    }
    return out;
}

}  // namespace

int rows_mode(const Options& o, const LoadedModel& lm, runtime::Device& device,
              runtime::ThreadPool& pool, nlohmann::json& report) {
    runtime::Device* dev = &device;
    Peaks peaks;
    if (!o.no_peaks) peaks = measure_peaks(pool);
    report["peak_gflops"] = peaks.gflops;
    report["peak_int8_gops"] = peaks.int8_gops;
    report["peak_read_gbps"] = peaks.gbps;
    // The highest rates measured anywhere in the run: % of it is the conservative figure.
    Peaks best = peaks;
    nlohmann::json rows = nlohmann::json::array();
    for (int R : parse_int_list(o.rows_list, "--rows")) {
        // Rounds alternate ours and llama.cpp's runs so that a slow spell of the machine
        // hits both sides; each side reports its median over the rounds.
        const int n_rounds = o.llama_bench.empty() ? 1 : o.rounds;
        std::vector<nlohmann::json> ours;
        std::vector<double> ours_ms, theirs, ratios;
        for (int round = 0; round < n_rounds; ++round) {
            // The compute peak again right before each round: on a shared machine the
            // rate the cores give moves within a run, and % of peak is a ratio of two
            // measurements that should see the same spell.
            Peaks round_peaks = peaks;
            if (!o.no_peaks) {
                const Peaks now = measure_compute_peaks(pool, 0.25);
                round_peaks.gflops = now.gflops;
                round_peaks.int8_gops = now.int8_gops;
                best.gflops = std::max(best.gflops, now.gflops);
                best.int8_gops = std::max(best.int8_gops, now.int8_gops);
            }
            ours.push_back(
                run_rows(*lm.model, *dev, {R}, o.prefix, o.reps, round_peaks, o.kv_f16)[0]);
            ours_ms.push_back(ours.back()["ms"].get<double>());
            if (o.llama_bench.empty()) continue;
            theirs.push_back(run_llama_bench(o.llama_bench, o.model_path, R, o.reps, o.threads));
            ratios.push_back(ours.back()["rows_per_s"].get<double>() / theirs.back());
        }
        // The round whose time is the median (the lower middle for an even count).
        std::vector<double> sorted_ms = ours_ms;
        std::sort(sorted_ms.begin(), sorted_ms.end());
        const double mid = sorted_ms[(sorted_ms.size() - 1) / 2];
        nlohmann::json r = ours[static_cast<size_t>(std::find(ours_ms.begin(), ours_ms.end(), mid) -
                                                    ours_ms.begin())];
        // The device's latency table for the same plan the rows ran (steady state).
        const runtime::Plan plan =
            lm.model->build_plan(std::max(o.prefix, R), R, model::Model::Head::Stats);
        const int64_t r64 = R;
        const auto lat = dev->latency_table(plan, {&r64, 1}, o.prefix + R);
        if (!lat.empty()) {
            r["projected_ms"] = lat[0].projected_ms;
            r["projected_npu_ms"] = lat[0].npu_ms;
            r["projected_cpu_ms"] = lat[0].cpu_ms;
            r["bucket"] = lat[0].bucket;
            r["device"] = dev->name();
        }
        if (!o.llama_bench.empty()) {
            const double ts = median(theirs);  // the upper middle for an even count
            r["llama_cpp_rows_per_s"] = ts;
            r["ratio"] = r["rows_per_s"].get<double>() / ts;
            r["rounds"] = n_rounds;
            r["ratio_per_round"] = ratios;
        }
        rows.push_back(r);
    }
    // peak_pct is against the highest rate of the run: a peak sample the host slowed
    // would make the adjacent figure overshoot (it did, to 118 %, once).
    for (auto& r : rows) {
        const double b = r["peak_kind"] == "int8" ? best.int8_gops : best.gflops;
        r["peak_pct_adjacent"] = r["peak_pct"];
        r["peak_pct"] = b > 0 ? 100.0 * r["gflops"].get<double>() / b : 0.0;
    }
    report["best_peak_gflops"] = best.gflops;
    report["best_peak_int8_gops"] = best.int8_gops;
    report["results"] = rows;
    report["peak_rss_bytes"] = peak_rss_bytes();
    if (o.json) {
        std::printf("%s\n", report.dump(1).c_str());
        return 0;
    }
    std::printf("%s: %.2f B params, %.2f GB weights, %s, %d threads\n", o.model_path.c_str(),
                lm.model->n_params() / 1e9, lm.model->weight_bytes() / 1e9,
                kernels::active_target(), o.threads);
    std::printf(
        "measured peak: %.1f GFLOP/s (FMA), %.1f GOP/s (int8 dot), %.1f GB/s (read)\n"
        "%% peak is against the int8 ceiling for block-format weights, FMA otherwise: the\n"
        "highest rate measured in the run (%.1f / %.1f); %% adj against the rate measured\n"
        "right before the row count's round (column \"adj peak\")\n",
        peaks.gflops, peaks.int8_gops, peaks.gbps, best.gflops, best.int8_gops);
    std::printf("%6s %8s %10s %12s %10s %8s %8s %8s %14s %7s\n", "rows", "prefix", "ms", "rows/s",
                "GFLOP/s", "% peak", "adj peak", "% adj", "llama.cpp t/s", "ratio");
    if (dev->caps().projected) {
        std::printf("device %s, profile %s: projected ms per row count (latency table):\n",
                    dev->name().c_str(), dev->caps().profile.c_str());
        for (const auto& r : rows) {
            if (r.contains("projected_ms")) {
                std::printf(
                    "  rows %5d  bucket %5lld  projected %9.3f ms (NPU %.3f, CPU "
                    "%.3f)\n",
                    r["rows"].get<int>(), r["bucket"].get<long long>(),
                    r["projected_ms"].get<double>(), r["projected_npu_ms"].get<double>(),
                    r["projected_cpu_ms"].get<double>());
            }
        }
    }
    for (const auto& r : rows) {
        std::printf("%6d %8d %10.2f %12.1f %10.1f %7.1f%% %8.1f %7.1f%%", r["rows"].get<int>(),
                    r["prefix"].get<int>(), r["ms"].get<double>(), r["rows_per_s"].get<double>(),
                    r["gflops"].get<double>(), r["peak_pct"].get<double>(),
                    r["peak_adjacent"].get<double>(), r["peak_pct_adjacent"].get<double>());
        if (r.contains("ratio")) {
            std::printf(" %14.1f %6.2fx", r["llama_cpp_rows_per_s"].get<double>(),
                        r["ratio"].get<double>());
        }
        std::printf("\n");
    }
    std::printf("peak RSS %.2f GB\n", peak_rss_bytes() / 1e9);
    return 0;
}

}  // namespace llada::tools::bench
