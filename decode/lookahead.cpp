// mbsd's lookahead sizing: forward cost by row count and the rule that uses it.
#include "decode/lookahead.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace llada::decode {

double ForwardCost::at(int64_t r) const {
    if (rows.empty()) return 0.0;
    if (r <= rows.front()) return ms.front() * static_cast<double>(r) / rows.front();
    for (size_t i = 1; i < rows.size(); ++i) {
        if (r <= rows[i]) {
            const double f = static_cast<double>(r - rows[i - 1]) / (rows[i] - rows[i - 1]);
            return ms[i - 1] + f * (ms[i] - ms[i - 1]);
        }
    }
    if (rows.size() < 2) return ms.back() * static_cast<double>(r) / rows.back();
    const size_t n = rows.size();
    const double slope = (ms[n - 1] - ms[n - 2]) / static_cast<double>(rows[n - 1] - rows[n - 2]);
    return ms[n - 1] + slope * static_cast<double>(r - rows[n - 1]);
}

size_t ForwardCost::arena_at(int64_t r) const {
    for (size_t i = 0; i < rows.size(); ++i) {
        if (r <= rows[i]) return i < arena_bytes.size() ? arena_bytes[i] : 0;
    }
    return arena_bytes.empty() ? 0 : arena_bytes.back();
}

int64_t ForwardCost::padding(int64_t r) const {
    if (buckets.empty() || r < 1) return 0;
    for (size_t i = 0; i < rows.size() && i < buckets.size(); ++i) {
        if (r <= rows[i]) return std::max<int64_t>(0, buckets[i] - r);
    }
    return 0;
}

ForwardCost device_forward_cost(model::Session& session, int64_t max_rows, int64_t kv_len) {
    ForwardCost c;
    std::vector<int64_t> rows(static_cast<size_t>(max_rows));
    for (int64_t r = 0; r < max_rows; ++r)
        rows[r] = r + 1;
    const auto table = session.latency_table(rows, kv_len);
    if (table.empty()) return c;
    const auto caps = session.device().caps();
    c.source = "latency_table:" + caps.name + "/" + caps.profile + " (projected)";
    for (const auto& e : table) {
        c.rows.push_back(e.rows);
        c.ms.push_back(e.projected_ms);
        c.arena_bytes.push_back(e.arena_bytes);
        c.buckets.push_back(e.bucket);
    }
    return c;
}

ForwardCost calibrate_forward_cost(model::Session& session, int64_t max_rows, int64_t kv_len,
                                   int reps) {
    if (session.n_pos() < kv_len || max_rows > session.max_rows()) {
        throw Error("calibration needs a session of at least " + std::to_string(kv_len) +
                    " positions and " + std::to_string(max_rows) + " rows");
    }
    ForwardCost c;
    c.source = "calibrated on this host";
    std::vector<int64_t> points;
    for (int64_t r = 1; r < max_rows; r *= 2)
        points.push_back(r);
    points.push_back(max_rows);
    const int64_t n = max_rows;
    std::vector<int32_t> tok(n, 0), pos(n), seq(n, 0), slot(n, -1), out(n);
    for (int64_t r = 0; r < n; ++r) {
        pos[r] = static_cast<int32_t>(r % kv_len);
        out[r] = static_cast<int32_t>(r);
    }
    const int32_t kv = static_cast<int32_t>(kv_len);
    std::vector<int32_t> kv_lens(session.n_seq(), kv);
    for (int64_t r : points) {
        runtime::Batch b{
            r,          tok.data(),     pos.data(),  seq.data(), std::min(r, session.max_out()),
            out.data(), kv_lens.data(), slot.data(), nullptr};
        session.forward_stats(b);  // warm-up
        std::vector<double> t;
        for (int i = 0; i < reps; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            session.forward_stats(b);
            t.push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count());
        }
        std::sort(t.begin(), t.end());
        c.rows.push_back(r);
        c.ms.push_back(t[t.size() / 2]);
    }
    // Activation memory grows with rows: the session's plan, sized for max_rows, scaled down.
    const double per_row = static_cast<double>(session.arena_bytes()) / session.max_rows();
    for (int64_t r : c.rows)
        c.arena_bytes.push_back(static_cast<size_t>(per_row * static_cast<double>(r)));
    // Calibration forwards are not part of any generation's counts.
    session.reset_stats();
    return c;
}

ForwardCost lookahead_cost(model::Session& session, const GenerateOptions& opt, int64_t max_rows,
                           int64_t kv_len) {
    ForwardCost c = device_forward_cost(session, max_rows, kv_len);
    if (!c.empty()) return c;
    const model::Model& m = session.model();
    const auto& hp = m.hparams();
    const std::string key =
        hp.arch + " layers " + std::to_string(hp.n_layer) + " embd " + std::to_string(hp.n_embd) +
        " vocab " + std::to_string(hp.n_vocab) + " bytes " + std::to_string(m.weight_bytes()) +
        " rows " + std::to_string(max_rows) + " kv " + std::to_string(kv_len) + " device " +
        session.device().name() + (opt.kernels.kv_f16 ? " kv-f16" : "");
    // One file per canvas shape beside the given path, so canvases do not overwrite each other.
    std::string file = opt.calibration_file;
    if (!file.empty()) {
        const size_t dot = file.rfind('.');
        const std::string tag = "-r" + std::to_string(max_rows) + "-kv" + std::to_string(kv_len);
        file = dot == std::string::npos ? file + tag : file.substr(0, dot) + tag + file.substr(dot);
    }
    if (!file.empty() && !opt.recalibrate) c = read_forward_cost(file, key);
    if (c.empty()) {
        c = calibrate_forward_cost(session, max_rows, kv_len);
        if (!file.empty()) write_forward_cost(file, key, c);
    }
    return c;
}

ForwardCost read_forward_cost(const std::string& path, const std::string& key) {
    ForwardCost c;
    std::ifstream f(path);
    if (!f) return c;
    std::string line;
    if (!std::getline(f, line) || line != "llada.cpp forward cost " + key) return c;
    // Each line "rows ms arena_bytes", rows ascending and times positive, as
    // write_forward_cost writes them; anything else is a damaged file, not a shorter table.
    for (int n = 2; std::getline(f, line); ++n) {
        std::istringstream is(line);
        int64_t r = 0;
        double ms = 0.0;
        size_t bytes = 0;
        std::string rest;
        const bool ok = static_cast<bool>(is >> r >> ms >> bytes) && !(is >> rest) && r >= 1 &&
                        ms > 0.0 && std::isfinite(ms) && (c.rows.empty() || r > c.rows.back());
        if (!ok) {
            throw Error("the forward-cost cache '" + path + "' is damaged at line " +
                        std::to_string(n) + "; delete it and the cost is measured again");
        }
        c.rows.push_back(r);
        c.ms.push_back(ms);
        c.arena_bytes.push_back(bytes);
    }
    if (c.rows.empty()) {
        throw Error("the forward-cost cache '" + path +
                    "' holds no entries; delete it and the cost is measured again");
    }
    c.source = "calibrated on this host (cached in " + path + ")";
    return c;
}

void write_forward_cost(const std::string& path, const std::string& key, const ForwardCost& c) {
    // Written aside and renamed, so a reader (another llada-eval worker) never sees half a file.
    const std::string tmp = path + ".tmp" + std::to_string(reinterpret_cast<uintptr_t>(&c));
    {
        std::ofstream f(tmp);
        if (!f) throw Error("cannot write the calibration file '" + tmp + "'");
        f << "llada.cpp forward cost " << key << "\n";
        for (size_t i = 0; i < c.rows.size(); ++i)
            f << c.rows[i] << " " << c.ms[i] << " "
              << (i < c.arena_bytes.size() ? c.arena_bytes[i] : 0) << "\n";
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw Error("cannot write the calibration file '" + path + "'");
    }
}

int choose_lookahead(const ForwardCost& cost, const LookaheadInputs& in) {
    int limit = std::max(0, in.available);
    if (in.max_rows > 0)
        limit = std::min<int64_t>(limit, std::max<int64_t>(0, in.max_rows - in.base_rows));
    if (in.mem_budget > 0) {
        while (limit > 0 && cost.arena_at(in.base_rows + limit) > in.mem_budget)
            --limit;
    }
    if (limit == 0 || cost.empty()) return 0;
    if (in.steps_left > 1.0 || !in.accept_measured) {
        limit = static_cast<int>(std::min<int64_t>(limit, cost.padding(std::max(1, in.base_rows))));
        if (limit == 0) return 0;
    }
    const double c = std::max(1e-9, in.commits_per_step);
    const double s = std::max(1.0, in.steps_left);
    int best = 0;
    double best_per_token = cost.at(std::max(1, in.base_rows)) / c;
    // Drafts add commits to the next block's first step, which cannot commit more than the
    // block: once first steps commit a block's worth, a draft saves no step.
    const double room = in.block > 0 ? std::max(0.0, in.block - in.first_step_commits) : 1e300;
    for (int n = 1; n <= limit; ++n) {
        const double e = c + std::min(in.accept_rate * n / s, room);
        const double per_token = cost.at(in.base_rows + n) / e;
        // Strictly better only: equal cost per token keeps the smaller window.
        if (per_token < best_per_token * (1.0 - 1e-12)) {
            best = n;
            best_per_token = per_token;
        }
    }
    return best;
}

}  // namespace llada::decode
