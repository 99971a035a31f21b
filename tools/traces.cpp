// Decision traces as JSON lines: written by --trace-out, read by llada-bench --replay.
#include "decode/registry.h"
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
    const bool pipeline = decode::policy_info(policy).pipeline;
    for (const auto& s : r.steps) {
        // [block, committed, accepted, rejected, lookahead, rows, masked, draft, committed rows,
        //  accepted early, checks, revised, remasked] and, for the pipeline, per block of the
        //  window from the current one on, [ahead commits, checks kept, checks rejected]
        nlohmann::json st = {
            s.block,  s.committed,   s.drafts_accepted, s.drafts_rejected, s.lookahead,
            s.rows,   s.rows_masked, s.rows_draft,      s.rows_committed,  s.drafts_accepted_early,
            s.checks, s.revised,     s.remasked};
        if (pipeline) {
            nlohmann::json ahead = nlohmann::json::array();
            for (const auto& a : s.ahead)
                ahead.push_back({a.committed, a.kept, a.rejected});
            st.push_back(ahead);
        }
        steps.push_back(st);
    }
    nlohmann::json j = {{"trace", "llada.cpp decision trace v1"},
                        {"source", source},
                        {"policy", policy},
                        {"prompt_len", r.prompt_len},
                        {"gen", opt.gen},
                        {"block", opt.block},
                        // The pipeline's current block always commits by a parallel rule (threshold
                        // 0.9 unless given).
                        {"threshold", pipeline && opt.threshold == 0.0 && opt.factor == 0.0
                                          ? decode::kDefaultThreshold
                                          : opt.threshold},
                        {"factor", opt.factor},
                        {"stopped_early", r.stopped_early},
                        {"nfe", r.stats.forwards},
                        {"steps", steps}};
    if (opt.self_check.on) {
        j["self_check"] = {{"threshold", opt.self_check.threshold > 0.0 ? opt.self_check.threshold
                                                                        : opt.threshold},
                           {"accept", opt.self_check.accept},
                           {"below", opt.self_check.below}};
    }
    if (pipeline) {
        j["pipeline"] = {{"depth", opt.pipeline_depth},
                         {"start", opt.pipeline_start},
                         {"verify", decode::pipeline_verify_name(opt.pipeline_verify)}};
    }
    return j;
}

namespace {

// A pipeline step's per-block counts: [ahead commits, checks kept, checks rejected] per block of
// the window, the current one first (which commits nothing ahead).
void read_ahead(const nlohmann::json& a, const decode::DecisionTrace& t, decode::TraceStep& st) {
    const std::string where = "decision trace: step " + std::to_string(t.steps.size());
    if (!a.is_array() || a.size() > static_cast<size_t>(t.pipeline.depth) + 1)
        throw Error(where +
                    ": the ahead counts are not one triple per block of the window (at "
                    "most the pipeline's depth + 1)");
    for (const auto& e : a) {
        if (!e.is_array() || e.size() != 3 || !e[0].is_number_integer() ||
            !e[1].is_number_integer() || !e[2].is_number_integer())
            throw Error(where + ": an ahead count is not three integers");
        decode::AheadCounts c{e[0], e[1], e[2]};
        if (c.committed < 0 || c.kept < 0 || c.rejected < 0 || (st.ahead.empty() && c.committed))
            throw Error(where + ": an ahead count is out of range");
        st.ahead.push_back(c);
    }
    if (st.ahead_committed() > st.committed)
        throw Error(where + ": commits ahead more positions than the step commits");
}

}  // namespace

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
    if (j.contains("self_check")) {
        t.self_check = true;
        t.self_check_threshold = j["self_check"].value("threshold", 0.0);
        if (!(t.self_check_threshold > 0.0 && t.self_check_threshold <= 1.0))
            throw Error("decision trace: 'self_check' needs a threshold in (0, 1]");
    }
    if (j.contains("pipeline")) {
        const auto& p = j["pipeline"];
        t.pipeline.verify = p.value("verify", "");
        t.pipeline.depth = p.value("depth", 0);
        t.pipeline.start = p.value("start", -1.0);
        decode::PipelineVerify v;
        if (t.pipeline.depth < 1 || !(t.pipeline.start >= 0.0 && t.pipeline.start <= 1.0) ||
            !decode::parse_pipeline_verify(t.pipeline.verify, v))
            throw Error(
                "decision trace: 'pipeline' needs depth >= 1, start in [0, 1] and verify "
                "mask, shadow or window");
    }
    for (const auto& s : j["steps"]) {
        const bool sized =
            s.is_array() &&
            (t.pipeline.depth > 0 ? s.size() == 14 : s.size() == 10 || s.size() == 13);
        if (!sized)
            throw Error(t.pipeline.depth > 0
                            ? "decision trace: a pipeline step is not 13 numbers and the blocks' "
                              "ahead counts"
                            : "decision trace: a step is not 10 (or 13, with revision) numbers");
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
        if (s.size() >= 13) {
            st.checks = s[10];
            st.revised = s[11];
            st.remasked = s[12];
        }
        if (s.size() == 14) read_ahead(s[13], t, st);
        if (st.checks < 0 || st.revised < 0 || st.remasked < 0 ||
            st.revised + st.remasked > st.checks)
            throw Error("decision trace: step " + std::to_string(t.steps.size()) +
                        " revises more tokens than it checks");
        if (st.block < 0 || st.block >= t.gen / t.block || st.committed < 0 || st.accepted < 0 ||
            st.rejected < 0 || st.accepted_early < 0 || st.accepted_early > st.accepted ||
            st.accepted > st.committed || st.lookahead < 0 || st.rows < 0)
            throw Error("decision trace: step " + std::to_string(t.steps.size()) +
                        " has a count out of range");
        // (A pipeline step may finish several blocks: the next step's block is then later.)
        const int skip = t.pipeline.depth > 0 ? t.pipeline.depth + 1 : 1;
        if (!t.steps.empty() &&
            (st.block < t.steps.back().block || st.block > t.steps.back().block + skip))
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
    // A remasked token is committed again within the same block. A pipeline step's commits are
    // the current block's and the later blocks' ahead ones, less the ahead tokens its checks
    // rejected.
    for (const auto& st : t.steps) {
        per_block[st.block] += st.committed - st.remasked - st.ahead_committed();
        for (size_t d = 0; d < st.ahead.size(); ++d) {
            const size_t b = static_cast<size_t>(st.block) + d;
            if (b >= per_block.size()) {
                if (st.ahead[d].committed + st.ahead[d].kept + st.ahead[d].rejected > 0)
                    throw Error("decision trace: step " + std::to_string(&st - t.steps.data()) +
                                " commits ahead past the last block");
                continue;
            }
            per_block[b] += (d > 0 ? st.ahead[d].committed : 0) - st.ahead[d].rejected;
        }
    }
    for (int b = 0; b < t.blocks_decoded(); ++b) {
        if (per_block[b] != t.block)
            throw Error("decision trace: block " + std::to_string(b) + " commits " +
                        std::to_string(per_block[b]) + " positions, not its " +
                        std::to_string(t.block));
    }
    // A pipeline trace's last step may finish the blocks after its own.
    int decoded = t.blocks_decoded();
    while (t.pipeline.depth > 0 && decoded < t.n_blocks() && per_block[decoded] == t.block)
        ++decoded;
    if (!t.stopped_early && decoded != t.n_blocks())
        throw Error("decision trace: " + std::to_string(decoded) + " of " +
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
