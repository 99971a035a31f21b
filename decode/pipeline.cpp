// Pipelined blocks' own state and rules (decode/pipeline.h).
#include "decode/pipeline.h"

#include <algorithm>

namespace llada::decode {

Pipeline::Pipeline(const GenerateOptions& opt, int prompt_len, int canvas_len)
    : verify_(opt.pipeline_verify),
      P_(prompt_len),
      L_(canvas_len),
      block_(opt.block),
      depth_(opt.pipeline_depth),
      min_(opt.pipeline_min),
      start_(opt.pipeline_start),
      threshold_(opt.pipeline_threshold),
      accept_(opt.pipeline_accept) {
    ahead_.assign(static_cast<size_t>(canvas_len), 0);
    checked_.assign(static_cast<size_t>(canvas_len), 0);
    group_.reserve(static_cast<size_t>(opt.block));
    forced_.reserve(static_cast<size_t>(opt.block));
}

bool Pipeline::unverified(int b) const {
    const int b0 = P_ + b * block_, b1 = std::min(L_, b0 + block_);
    for (int p = b0; p < b1; ++p)
        if (ahead_[p]) return true;
    return false;
}

int Pipeline::active_end(int b, std::span<const TokenState> state) const {
    int end = std::min(L_, P_ + (b + 1) * block_);
    for (int k = 0; k < depth_ && end < L_; ++k) {
        // The block ending at `end` starts the next one once far enough along.
        int done = 0;
        for (int p = end - block_; p < end; ++p)
            done += state[p] != TokenState::Masked;
        if (done < start_ * block_) break;
        end = std::min(L_, end + block_);
    }
    return end;
}

void Pipeline::plan_checks(int b, int end, std::span<const TokenState> state) {
    std::fill(checked_.begin(), checked_.end(), 0);
    const int b0 = P_ + b * block_;
    // Mask mode checks the current block only; shadow mode goes on while the blocks before
    // hold no masked position; window mode checks every block of the window.
    const int last = verify_ == PipelineVerify::Mask ? std::min(end, b0 + block_) : end;
    if (verify_ == PipelineVerify::Window) {
        for (int p = b0; p < last; ++p)
            checked_[p] = ahead_[p];
        return;
    }
    for (int c0 = b0; c0 < last; c0 += block_) {
        bool masked = false;
        for (int p = c0; p < std::min(L_, c0 + block_); ++p) {
            checked_[p] = ahead_[p];
            masked = masked || state[p] == TokenState::Masked;
        }
        if (masked) break;
    }
}

void Pipeline::judge(std::span<const int32_t> token, std::span<const Candidate> cand,
                     std::vector<Verdict>& out) const {
    out.assign(token.size(), Verdict::Keep);
    bool failed = false;
    for (size_t i = 0; i < token.size(); ++i) {
        if (failed) {
            out[i] = Verdict::Defer;
            continue;
        }
        const bool pass = cand[i].token == token[i] && cand[i].confidence >= accept_;
        if (pass) continue;
        out[i] = Verdict::Reject;
        failed = shadow();
    }
}

void Pipeline::choose_ahead(std::span<const int32_t> pos, const std::vector<Candidate>& cand,
                            std::vector<int>& chosen) {
    chosen.clear();
    for (size_t i = 0; i < pos.size();) {
        // One block's positions: [i, j).
        size_t j = i;
        group_.clear();
        while (j < pos.size() && block_of(pos[j]) == block_of(pos[i]))
            group_.push_back(cand[j++]);
        select_top_k(group_, std::min(min_, static_cast<int>(group_.size())), forced_);
        for (size_t k = 0; k < group_.size(); ++k) {
            const bool forced =
                std::find(forced_.begin(), forced_.end(), static_cast<int>(k)) != forced_.end();
            if (group_[k].confidence >= threshold_ || forced)
                chosen.push_back(static_cast<int>(i + k));
        }
        i = j;
    }
}

}  // namespace llada::decode
