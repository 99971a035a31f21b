// The JSON the tools print of a step, a revision, a test-time-scaling choice and a device report.
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

nlohmann::json step_json(const decode::StepInfo& s) {
    return {{"step", s.step},
            {"block", s.block},
            {"committed", s.committed},
            {"rows", s.rows},
            {"rows_device", s.rows_device},
            {"lm_head_rows", s.lm_head_rows},
            {"lookahead", s.lookahead},
            {"drafts_proposed", s.drafts_proposed},
            {"drafts_accepted", s.drafts_accepted},
            {"drafts_accepted_early", s.drafts_accepted_early},
            {"drafts_rejected", s.drafts_rejected},
            {"ahead_committed", s.ahead_committed},
            {"ahead_verified", s.ahead_verified},
            {"ahead_rejected", s.ahead_rejected},
            {"revision",
             {{"checks", s.checks},
              {"refreshes", s.refreshes},
              {"revised", s.revised},
              {"remasked", s.remasked},
              {"stabilised", s.stabilised},
              {"dense", s.dense},
              {"cpu_ms", s.cpu_ms},
              {"exposed_ms", s.exposed_ms},
              {"projected_dense_ms", s.proj_dense_ms},
              {"projected_cpu_ms", s.proj_cpu_ms},
              {"projected_merge_ms", s.proj_merge_ms},
              {"projected_contention_ms", s.proj_contention_ms}}},
            {"states",
             {{"masked", s.n_masked},
              {"draft", s.n_draft},
              {"visible", s.n_visible},
              {"stable", s.n_stable}}},
            {"ms", s.ms}};
}

nlohmann::json revision_json(const decode::GenerateResult::Revision& r) {
    return {{"checks", r.checks},
            {"refreshes", r.refreshes},
            {"lane_only_steps", r.lane_only_steps},
            {"revisions", r.revisions},
            {"right_to_wrong", r.right_to_wrong},
            {"wrong_to_right", r.wrong_to_right},
            {"wrong_to_wrong", r.wrong_to_wrong},
            {"remasks", r.remasks},
            {"remasks_of_right", r.remasks_of_right},
            {"remasks_of_wrong", r.remasks_of_wrong},
            {"stabilised", r.stabilised},
            {"mean_steps_commit_to_stable",
             r.stabilised > 0 ? static_cast<double>(r.commit_to_stable_steps) / r.stabilised : 0.0},
            {"cpu_ms", r.cpu_ms},
            {"exposed_ms", r.exposed_ms},
            {"hidden_ms", r.cpu_ms - r.exposed_ms},
            {"projected_dense_ms", r.proj_dense_ms},
            {"projected_cpu_ms", r.proj_cpu_ms},
            {"projected_merge_ms", r.proj_merge_ms},
            {"projected_contention_ms", r.proj_contention_ms},
            {"projected_overlapped_ms", r.proj_step_ms}};
}

TtsChoice choose_candidate(const decode::CandidatesResult& c, const tokenizer::Tokenizer& tok,
                           const decode::TokenIds& ids, const std::string& select,
                           const std::function<std::string(const std::string&)>& extract) {
    TtsChoice t;
    for (const auto& r : c.candidates) {
        t.texts.push_back(tok.decode(r.answer(ids), false));
        t.answers.push_back(extract(t.texts.back()));
        t.confidence.push_back(r.mean_confidence());
    }
    t.vote = decode::select_by_vote(t.answers, t.confidence);
    t.by_confidence = decode::select_by_confidence(t.confidence);
    t.chosen = select == "confidence" ? t.by_confidence : t.vote;
    return t;
}

nlohmann::json tts_json(const TtsChoice& t, const std::string& select) {
    nlohmann::json cands = nlohmann::json::array();
    for (size_t i = 0; i < t.texts.size(); ++i) {
        cands.push_back(
            {{"text", t.texts[i]}, {"answer", t.answers[i]}, {"mean_confidence", t.confidence[i]}});
    }
    return {{"n", t.texts.size()},
            {"select", select},
            {"chosen", t.chosen},
            {"vote", t.vote},
            {"by_confidence", t.by_confidence},
            {"candidates", cands}};
}

nlohmann::json device_report_json(const runtime::DeviceReport& r) {
    nlohmann::json cats = nlohmann::json::object();
    for (int c = 0; c < npu::kCategories; ++c) {
        cats[npu::category_name(static_cast<npu::Category>(c))] = r.projected_us.us[c] / 1e3;
    }
    nlohmann::json j = {{"device", r.device},
                        {"profile", r.profile},
                        {"projected", r.projected},
                        {"functional", r.functional},
                        {"executions", r.executions},
                        {"ops_npu", r.ops_npu},
                        {"ops_cpu", r.ops_cpu},
                        {"rows", r.rows},
                        {"padded_rows", r.padded_rows},
                        {"buckets_compiled", r.buckets_compiled},
                        {"host_s", r.host_s}};
    if (r.projected) {
        j["projected_ms"] = r.projected_ms();
        j["projected_ms_by_category"] = cats;
        j["projected_npu_ms"] = r.npu_us / 1e3;
        j["projected_cpu_ms"] = r.cpu_us / 1e3;
        j["projected_one_time_ms"] = r.one_time_us / 1e3;
    }
    if (!r.memory_policy.empty()) {
        j["memory"] = {{"policy", r.memory_policy},
                       {"window_bytes", r.window_bytes},
                       {"window_peak_bytes", r.window_peak},
                       {"mappings", r.mappings},
                       {"unmappings", r.unmappings},
                       {"bytes_mapped", r.bytes_mapped},
                       {"bytes_copied", r.bytes_copied},
                       {"bytes_moved", r.bytes_moved()},
                       {"projected_stall_ms", r.stall_us() / 1e3},
                       {"projected_prefetch_ms", r.prefetch_us / 1e3},
                       {"fragmentation", r.fragmentation},
                       {"resident_bytes", r.resident_bytes},
                       {"streamed_bytes_per_forward", r.streamed_bytes},
                       {"ring_slots", r.ring_slots}};
    }
    return j;
}

}  // namespace llada::tools
