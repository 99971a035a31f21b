// Decision traces as JSON lines: written by --trace-out, read by llada-bench --replay.
#include "tools/common.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "kernels/kernels.h"
#include "tokenizer/chat.h"
#include "util/error.h"

namespace llada::tools {
namespace fs = std::filesystem;

nlohmann::json trace_json(const decode::GenerateResult& r, const decode::GenerateOptions& opt,
                          const std::string& source, const std::string& policy) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : r.steps) {
        // [block, committed, accepted, rejected, lookahead, rows, masked, draft, committed rows,
        //  accepted early, checks, revised, remasked]
        steps.push_back({s.block, s.committed, s.drafts_accepted, s.drafts_rejected, s.lookahead,
                         s.rows, s.rows_masked, s.rows_draft, s.rows_committed,
                         s.drafts_accepted_early, s.checks, s.revised, s.remasked});
    }
    return {{"trace", "llada.cpp decision trace v1"},
            {"source", source},
            {"policy", policy},
            {"prompt_len", r.prompt_len},
            {"gen", opt.gen},
            {"block", opt.block},
            {"threshold", opt.threshold},
            {"factor", opt.factor},
            {"stopped_early", r.stopped_early},
            {"nfe", r.stats.forwards},
            {"steps", steps}};
}

decode::DecisionTrace trace_from_json(const nlohmann::json& j) {
    if (!j.is_object() || j.value("trace", "") != "llada.cpp decision trace v1" ||
        !j.contains("steps") || !j["steps"].is_array()) {
        throw Error("not a llada.cpp decision trace (written by --trace-out)");
    }
    decode::DecisionTrace t;
    t.source = j.value("source", "");
    t.policy = j.value("policy", "");
    t.prompt_len = j.value("prompt_len", 0);
    t.gen = j.value("gen", 0);
    t.block = j.value("block", 0);
    t.stopped_early = j.value("stopped_early", false);
    t.parallel = j.value("threshold", 0.0) > 0.0 || j.value("factor", 0.0) > 0.0;
    if (t.gen <= 0 || t.block <= 0 || t.gen % t.block != 0)
        throw Error("decision trace: gen and block must be positive, gen a multiple of block");
    for (const auto& s : j["steps"]) {
        if (!s.is_array() || (s.size() != 10 && s.size() != 13))
            throw Error("decision trace: a step is not 10 (or 13, with revision) numbers");
        decode::TraceStep st;
        st.block = s[0];
        st.committed = s[1];
        st.accepted = s[2];
        st.rejected = s[3];
        st.drafts_present = st.accepted + st.rejected;
        st.lookahead = s[4];
        st.rows = s[5];
        st.rows_masked = s[6];
        st.rows_draft = s[7];
        st.rows_committed = s[8];
        st.accepted_early = s[9];
        if (s.size() == 13) {
            st.checks = s[10];
            st.revised = s[11];
            st.remasked = s[12];
        }
        if (st.checks < 0 || st.revised < 0 || st.remasked < 0 ||
            st.revised + st.remasked > st.checks)
            throw Error("decision trace: step " + std::to_string(t.steps.size()) +
                        " revises more tokens than it checks");
        if (st.block < 0 || st.block >= t.gen / t.block || st.committed < 0 || st.accepted < 0 ||
            st.rejected < 0 || st.accepted_early < 0 || st.accepted_early > st.accepted ||
            st.accepted > st.committed || st.lookahead < 0 || st.rows < 0)
            throw Error("decision trace: step " + std::to_string(t.steps.size()) +
                        " has a count out of range");
        if (!t.steps.empty() && st.block != t.steps.back().block &&
            st.block != t.steps.back().block + 1)
            throw Error("decision trace: step " + std::to_string(t.steps.size()) +
                        " skips or revisits a block (blocks are decoded in order)");
        if (t.steps.empty() && st.block != 0)
            throw Error("decision trace: the first step is not in block 0");
        t.steps.push_back(st);
    }
    if (t.steps.empty()) throw Error("decision trace: no steps");
    // Every block the trace decoded commits exactly its length (an early stop ends it after a
    // complete block).
    std::vector<int> per_block(static_cast<size_t>(t.n_blocks()), 0);
    // A remasked token is committed again within the same block.
    for (const auto& st : t.steps)
        per_block[st.block] += st.committed - st.remasked;
    for (int b = 0; b < t.blocks_decoded(); ++b) {
        if (per_block[b] != t.block)
            throw Error("decision trace: block " + std::to_string(b) + " commits " +
                        std::to_string(per_block[b]) + " positions, not its " +
                        std::to_string(t.block));
    }
    if (!t.stopped_early && t.blocks_decoded() != t.n_blocks())
        throw Error("decision trace: " + std::to_string(t.blocks_decoded()) + " of " +
                    std::to_string(t.n_blocks()) + " blocks decoded without an early stop");
    return t;
}

namespace {

void read_trace_file(const std::string& path, std::vector<decode::DecisionTrace>& all,
                     std::vector<int64_t>& nfe) {
    std::ifstream f(path);
    if (!f) throw Error("cannot read the decision trace '" + path + "'");
    std::string line;
    int line_no = 0;
    while (std::getline(f, line)) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        try {
            const auto j = nlohmann::json::parse(line);
            all.push_back(trace_from_json(j));
            nfe.push_back(j.value("nfe", static_cast<int64_t>(all.back().steps.size())));
        } catch (const std::exception& e) {
            throw Error(path + ":" + std::to_string(line_no) + ": " + e.what());
        }
    }
    if (all.empty()) throw Error("the decision trace '" + path + "' holds no trace");
}

}  // namespace

std::vector<decode::DecisionTrace> read_traces(const std::string& path, int n) {
    std::vector<decode::DecisionTrace> all;
    std::vector<int64_t> nfe;
    read_trace_file(path, all, nfe);
    const size_t total = all.size();
    if (n <= 0 || static_cast<size_t>(n) >= total) return all;
    // A fixed pseudo-random sample (Fisher-Yates with the standard mt19937_64, seed 1): spread
    // through the file without a stride's aliasing with the task file's period (mix-1000 cycles
    // through its tasks, so every 20th problem is the same task, and so is every 618th).
    std::vector<size_t> idx(total);
    for (size_t i = 0; i < total; ++i)
        idx[i] = i;
    std::mt19937_64 rng(1);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        const size_t j = i + static_cast<size_t>(rng() % (total - i));
        std::swap(idx[i], idx[j]);
    }
    idx.resize(static_cast<size_t>(n));
    std::sort(idx.begin(), idx.end());
    std::vector<decode::DecisionTrace> out;
    for (size_t i : idx) {
        out.push_back(all[i]);
        out.back().source +=
            " (sample of " + std::to_string(n) + " of " + std::to_string(total) + " traces)";
    }
    return out;
}

decode::DecisionTrace read_trace(const std::string& path, int index) {
    std::vector<decode::DecisionTrace> all;
    std::vector<int64_t> nfe;
    read_trace_file(path, all, nfe);
    if (index >= static_cast<int>(all.size()))
        throw Error("--replay-index " + std::to_string(index) + ": '" + path + "' holds " +
                    std::to_string(all.size()) + " traces");
    if (index >= 0) return all[index];
    // The trace of median forward count (the lower median; ties to the first).
    std::vector<size_t> order(all.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return nfe[a] < nfe[b]; });
    decode::DecisionTrace t = all[order[(order.size() - 1) / 2]];
    t.source += " (median-NFE trace of " + std::to_string(all.size()) + ")";
    return t;
}

}  // namespace llada::tools
