// The fixed-window policies' windows (decode/windows.h):
//
// vanilla      LLaDA's reference generate(): every step is a forward over the whole canvas.
// threshold    the same window, with a parallel commit rule.
// prefix-cache Fast-dLLM's prefix cache: at the start of each block (and every `refresh` steps) a
//              full forward refreshes every position's K/V and serves as that step's prediction;
//              the other steps compute only the rows from the block start to the end of the
//              canvas (block + suffix) against the cached K/V of the prefix. Approximation: the
//              prefix K/V are those of the refresh, so they do not see the block's later commits.
// dual-cache   Fast-dLLM's dual cache: as prefix-cache, but the other steps compute only the
//              block's rows; the suffix K/V are also those of the refresh.
#include <algorithm>

#include "decode/windows.h"

namespace llada::decode {

void plan_fixed_window(const WindowInputs& in, WindowMode mode, int refresh, PlannedWindow& out) {
    const auto& x = in.tokens;
    const int L = in.canvas_len, block_end = in.block_end();
    const int i = in.step_in_block;
    // Which rows this step computes: a full refresh, or the cached policy's window.
    const bool full = mode == WindowMode::Full || i == 0 || (refresh > 0 && i % refresh == 0);
    // (With shifted logits the window starts one row early: that row decides the block's first
    // position.)
    const int w0 = full ? 0 : in.block_start() - in.shift;
    const int w1 = full || mode == WindowMode::Prefix ? L : block_end;
    // Rows whose prediction can matter: masked positions before the block's end (under
    // revision, remasked positions before the window join it).
    const int n0 = in.revise ? in.prompt_len : w0;
    for (int p = n0; p < std::min(w1, block_end); ++p) {
        if (x[p] == in.mask) out.need.push_back(p);
    }
    size_t k = 0;
    for (int s = 0; s < in.n_seq; ++s) {
        k = 0;
        for (int p = std::min(n0, w0); p < w1; ++p) {
            const int q = p + in.shift;  // the position row p decides
            if (p < w0 && !(q < L && x[q] == in.mask)) continue;
            const bool predict = k < out.need.size() && out.need[k] == q;
            k += predict;
            const int32_t tok = s == 1 && in.prompt_index[p] ? in.mask : x[p];
            out.rows.push_back({tok, p, s, p, -1, predict});
        }
    }
    out.n_cur = static_cast<int>(out.need.size());
}

}  // namespace llada::decode
