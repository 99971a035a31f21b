// The window of need and the parts built on it (decode/windows.h):
//
// need         the first forward computes the whole canvas; after that a step computes only the
//              current block's masked rows and the committed rows whose K/V were computed before
//              their token was committed (each such row once, in the next forward), and serves
//              everything else from the cache. Where this differs from dual-cache: there is no
//              full refresh at block starts, so a committed token's K/V (and the suffix's) keep
//              the context of the forward that computed them, and the block's committed rows are
//              not recomputed every step. --need-refresh suffix (the default) also recomputes the
//              masked rows after the block at each block's first step (the block reads their
//              K/V; otherwise only the first forward computed them, in the prompt's context
//              alone); block also every row then and the block's committed rows at its other
//              steps (the rows dual-cache computes); once neither.
// + speculation (mbsd) lookahead rows from the next block(s) join the window; their predictions
//              become drafts. Draft rows feed the mask token (default) or the draft token (a
//              writer row and a shadow row); either way a draft's K/V is only ever in its own
//              slot, which is recomputed when the position's state changes.
// + pipeline   later blocks' masked positions join once the block before each is far enough
//              along; their ahead commits are checked by a row fed the mask there, or by a shadow
//              row beside the token (decode/pipeline.h).
// + self-checks a row refreshing a committed token's K/V also predicts it (decode/self_check.h).
// + revision   a revised token's K/V are the CPU path's to recompute (decode/revision.h).
#include <algorithm>

#include "decode/pipeline.h"
#include "decode/revision.h"
#include "decode/self_check.h"
#include "decode/speculation.h"
#include "decode/windows.h"

namespace llada::decode {

void plan_need_window(const WindowInputs& in, const NeedParts& parts, PlannedWindow& out) {
    const auto& x = in.tokens;
    const auto& state = in.states;
    const int L = in.canvas_len, block_end = in.block_end();
    const bool first = in.first_forward;
    const int n0 = in.revise ? in.prompt_len : in.block_start();
    Pipeline* pipe = parts.pipeline;
    // pipeline: later blocks' masked positions join once the block before each is far enough
    // along; ahead commits are checked (fed the mask, or by a shadow row beside the token).
    const int end = pipe ? pipe->active_end(in.block, state) : block_end;
    if (pipe) pipe->plan_checks(in.block, end, state);
    out.n_cur = 0;
    for (int p = n0; p < end; ++p) {
        if (state[p] == TokenState::Masked || state[p] == TokenState::Draft ||
            (pipe && pipe->checked(p))) {
            out.need.push_back(p);
            out.n_cur += p < block_end;
        }
    }
    auto verify_at = [&](int p) { return pipe && pipe->checked(p) && pipe->masks(); };
    auto shadow_at = [&](int p) { return pipe && pipe->checked(p) && pipe->shadow(); };
    // Committed positions whose slot does not hold their token's K/V yet (a revised token's
    // K/V are the CPU path's to recompute; a verified one's slot gets the mask's this step).
    auto stale_at = [&](int p) {
        const bool lane_refreshes = parts.reviser && parts.reviser->needs_refresh(p);
        return in.committed(p) && in.kv_tok[p] != x[p] && !lane_refreshes && !verify_at(p);
    };
    // --need-refresh suffix (the default): at a block's first step the masked rows after the
    // block too (not predicted), whose K/V the block reads and which the first forward alone
    // computed otherwise. --need-refresh block: at a block's first step every row, and at the
    // others the block's committed rows, so that their K/V see the block's later commits.
    auto refresh_at = [&](int p) {
        if (parts.refresh == NeedRefresh::Once) return false;
        const bool lane_refreshes = parts.reviser && parts.reviser->needs_refresh(p);
        if (lane_refreshes || verify_at(p) || stale_at(p)) return false;
        const bool suffix = p >= block_end && !in.committed(p);
        if (in.step_in_block == 0) {
            return suffix || (parts.refresh == NeedRefresh::Block && in.committed(p));
        }
        return parts.refresh == NeedRefresh::Block && p >= in.block_start() && p < block_end &&
               in.committed(p);
    };
    int n_stale = 0;
    for (int p = 0; p < L && !first; ++p)
        n_stale += stale_at(p) || refresh_at(p);
    Speculation* spec = parts.speculation;
    if (spec) {
        spec->plan(state, block_end, n_stale + static_cast<int>(out.need.size()),
                   parts.block_masked, parts.last_commits, out.look);
    }
    const auto& need = out.need;
    const auto& look = out.look;
    size_t in_need = 0, in_look = 0;
    for (int s = 0; s < in.n_seq; ++s) {
        in_need = in_look = 0;
        for (int p = 0; p < L; ++p) {
            // Row p decides position q (p itself, or p + 1 with shifted logits).
            const int q = p + in.shift;
            const bool is_need = in_need < need.size() && need[in_need] == q;
            const bool is_look = in_look < look.size() && look[in_look] == q;
            in_need += is_need;
            in_look += is_look;
            const bool committed = in.committed(p);
            // A row of a later block that is still masked (or a draft).
            const bool future = p >= end && !committed;
            const bool stale = stale_at(p);
            if (!first && !is_need && !is_look && !stale && refresh_at(p)) {
                out.rows.push_back({x[p], p, s, p, -1, false});
                continue;
            }
            if (!(first || is_need || is_look || stale)) continue;
            if (s == 0 && stale && !first) out.stale.push_back(p);
            if (shadow_at(q)) {
                // A check of an ahead commit: the token stays context for every other row (its
                // K/V written when stale), and a shadow row predicts the position blind to it.
                if (stale) out.rows.push_back({x[p], p, s, p, -1, false});
                out.rows.push_back({in.mask, p, s, -1, p, true});
                continue;
            }
            const bool unconditional_prompt = s == 1 && in.prompt_index[p];
            int32_t tok = committed && !verify_at(p) ? x[p] : in.mask;
            if (unconditional_prompt) tok = in.mask;
            if (is_look && parts.draft_input == DraftInput::Token && spec->draft(p) >= 0 &&
                !unconditional_prompt) {
                // A draft fed as a token: one row writes its K/V (context for the rows around
                // it), and a shadow row (the mask, no K/V, not seeing slot p) re-predicts the
                // position, as the model only predicts masked positions.
                out.rows.push_back({spec->draft(p), p, s, p, -1, false});
                out.rows.push_back({in.mask, p, s, -1, p, true});
                continue;
            }
            // A draft row fed the mask writes nothing: the cache keeps what the policy without
            // speculation would have there. Fed its draft token, it writes its own slot, so
            // that the rows around it see the draft.
            // (At a block's first step under --need-refresh suffix or block, a masked row of a
            // later block writes its slot, as the row that refreshes it would.)
            const bool writes =
                !future || first || (parts.refresh != NeedRefresh::Once && in.step_in_block == 0);
            // Self-checks: a row refreshing a committed token's K/V also predicts it.
            const bool check =
                parts.self_checks && stale && !first && s == 0 && parts.self_checks->check_at(p);
            out.rows.push_back({tok, p, s, writes ? p : -1, -1, is_need || is_look || check});
        }
    }
}

}  // namespace llada::decode
