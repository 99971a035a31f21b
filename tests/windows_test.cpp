// The window planners of decode/windows.h on small hand-made canvases: which rows a step
// computes, which of them predict, which committed rows are refreshed, against the rows each
// policy's definition names (written out by hand here).
#include <gtest/gtest.h>

#include <vector>

#include "decode/self_check.h"
#include "decode/windows.h"

namespace llada::decode {
namespace {

constexpr int32_t M = 99;  // the mask id

// A canvas of a 2-position prompt and two blocks of 3: [p p | b0 b0 b0 | b1 b1 b1].
struct Canvas {
    std::vector<int32_t> tokens{1, 2, M, M, M, M, M, M};
    std::vector<TokenState> states;
    std::vector<int32_t> kv_tok;
    std::vector<bool> prompt_index;
    Canvas() {
        for (int32_t t : tokens)
            states.push_back(t == M ? TokenState::Masked : TokenState::Stable);
        kv_tok.assign(tokens.size(), -1);
        prompt_index.assign(tokens.size(), false);
        prompt_index[0] = prompt_index[1] = true;
    }
    void commit(int p, int32_t tok) {
        tokens[p] = tok;
        states[p] = TokenState::Visible;
    }
    WindowInputs inputs(int block, int step_in_block, bool first, int shift = 0) const {
        return {.tokens = tokens,
                .states = states,
                .kv_tok = kv_tok,
                .prompt_index = prompt_index,
                .prompt_len = 2,
                .canvas_len = static_cast<int>(tokens.size()),
                .block = block,
                .block_len = 3,
                .step_in_block = step_in_block,
                .first_forward = first,
                .shift = shift,
                .n_seq = 1,
                .mask = M};
    }
};

struct Plan {
    std::vector<RowRequest> rows;
    std::vector<int32_t> need, look, stale;
    int n_cur = 0;
    PlannedWindow out() { return {rows, need, n_cur, look, stale}; }
    std::vector<int32_t> positions() const {
        std::vector<int32_t> v;
        for (const auto& r : rows)
            v.push_back(r.pos);
        return v;
    }
    std::vector<int32_t> predicted() const {
        std::vector<int32_t> v;
        for (const auto& r : rows)
            if (r.predict) v.push_back(r.pos);
        return v;
    }
};

using V = std::vector<int32_t>;

TEST(Windows, FullWindowIsTheWholeCanvasEveryStep) {
    Canvas c;
    c.commit(2, 7);
    Plan pl;
    auto pl_out = pl.out();
    plan_fixed_window(c.inputs(0, 1, false), WindowMode::Full, 0, pl_out);
    EXPECT_EQ(pl.positions(), (V{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(pl.predicted(), (V{3, 4}));  // the block's masked positions
    EXPECT_EQ(pl.need, (V{3, 4}));
    EXPECT_EQ(pl.rows[2].token, 7);  // committed tokens are fed as themselves
    EXPECT_EQ(pl.rows[3].token, M);
}

TEST(Windows, CachePoliciesRefreshAtBlockStartThenComputeTheirWindow) {
    Canvas c;
    Plan start;
    auto start_out = start.out();
    plan_fixed_window(c.inputs(0, 0, false), WindowMode::Dual, 0, start_out);
    EXPECT_EQ(start.positions(), (V{0, 1, 2, 3, 4, 5, 6, 7}));  // the refresh
    c.commit(3, 8);
    Plan dual;
    auto dual_out = dual.out();
    plan_fixed_window(c.inputs(0, 1, false), WindowMode::Dual, 0, dual_out);
    EXPECT_EQ(dual.positions(), (V{2, 3, 4}));  // the block alone
    EXPECT_EQ(dual.predicted(), (V{2, 4}));
    Plan prefix;
    auto prefix_out = prefix.out();
    plan_fixed_window(c.inputs(0, 1, false), WindowMode::Prefix, 0, prefix_out);
    EXPECT_EQ(prefix.positions(), (V{2, 3, 4, 5, 6, 7}));  // block + suffix
    EXPECT_EQ(prefix.predicted(), (V{2, 4}));
    // --refresh 2: step 2 of the block is a full forward again.
    Plan refresh;
    auto refresh_out = refresh.out();
    plan_fixed_window(c.inputs(0, 2, false), WindowMode::Dual, 2, refresh_out);
    EXPECT_EQ(refresh.positions().size(), 8u);
}

TEST(Windows, ShiftedLogitsStartTheWindowOneRowEarly) {
    Canvas c;
    for (int p = 2; p < 5; ++p)  // block 0 is decoded
        c.commit(p, 10 + p);
    Plan pl;
    auto pl_out = pl.out();
    plan_fixed_window(c.inputs(1, 1, false, 1), WindowMode::Dual, 0, pl_out);
    // Block 1 is positions 5..7; row 4 decides position 5.
    EXPECT_EQ(pl.positions(), (V{4, 5, 6, 7}));
    EXPECT_EQ(pl.predicted(), (V{4, 5, 6}));
    EXPECT_EQ(pl.need, (V{5, 6, 7}));
}

TEST(Windows, NeedComputesMaskedRowsAndEachStaleRowOnce) {
    Canvas c;
    Plan first;
    auto first_out = first.out();
    plan_need_window(c.inputs(0, 0, true), {}, first_out);
    EXPECT_EQ(first.positions(), (V{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(first.predicted(), (V{2, 3, 4}));
    EXPECT_TRUE(first.stale.empty());
    // After the first forward every slot holds the K/V of what it was fed.
    c.kv_tok = c.tokens;
    c.commit(3, 8);  // its slot holds the mask's K/V: stale
    Plan next;
    auto next_out = next.out();
    plan_need_window(c.inputs(0, 1, false), {}, next_out);
    EXPECT_EQ(next.positions(), (V{2, 3, 4}));
    EXPECT_EQ(next.predicted(), (V{2, 4}));
    EXPECT_EQ(next.stale, (V{3}));
    EXPECT_EQ(next.rows[1].token, 8);
    EXPECT_EQ(next.rows[1].slot, 3);
    // Once refreshed it is served from the cache.
    c.kv_tok[3] = 8;
    Plan after;
    auto after_out = after.out();
    plan_need_window(c.inputs(0, 2, false), {}, after_out);
    EXPECT_EQ(after.positions(), (V{2, 4}));
    EXPECT_TRUE(after.stale.empty());
}

// --need-refresh: at a block's first step the suffix's masked rows (suffix), or every row
// (block); at its other steps the block's committed rows too (block); neither under once.
TEST(Windows, NeedRefreshRulesAddTheirRowsWritingButNotPredicting) {
    Canvas c;
    // Two positions of block 0 decoded long ago (fresh K/V); block 1 (5..7) starts.
    c.commit(2, 5);
    c.commit(3, 6);
    c.commit(4, 7);
    c.kv_tok = c.tokens;
    c.tokens.push_back(M);  // a third block: 8..10
    c.tokens.push_back(M);
    c.tokens.push_back(M);
    c.states.resize(c.tokens.size(), TokenState::Masked);
    c.kv_tok.resize(c.tokens.size(), M);
    c.prompt_index.resize(c.tokens.size(), false);
    auto rows_of = [&](NeedRefresh r, int step_in_block) {
        NeedParts parts;
        parts.refresh = r;
        Plan pl;
        auto out = pl.out();
        plan_need_window(c.inputs(1, step_in_block, false), parts, out);
        EXPECT_EQ(pl.predicted(), (V{5, 6, 7})) << static_cast<int>(r);
        for (const auto& row : pl.rows)
            EXPECT_EQ(row.slot, row.pos);  // every row writes its own slot
        return pl.positions();
    };
    EXPECT_EQ(rows_of(NeedRefresh::Once, 0), (V{5, 6, 7}));
    EXPECT_EQ(rows_of(NeedRefresh::Suffix, 0), (V{5, 6, 7, 8, 9, 10}));
    EXPECT_EQ(rows_of(NeedRefresh::Block, 0), (V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
    EXPECT_EQ(rows_of(NeedRefresh::Suffix, 1), (V{5, 6, 7}));
    c.commit(6, 9);
    c.kv_tok[6] = 9;  // committed and refreshed: only the block rule recomputes it
    NeedParts block;
    block.refresh = NeedRefresh::Block;
    Plan pl;
    auto out = pl.out();
    plan_need_window(c.inputs(1, 2, false), block, out);
    EXPECT_EQ(pl.positions(), (V{5, 6, 7}));
    EXPECT_EQ(pl.predicted(), (V{5, 7}));
}

TEST(Windows, SelfChecksPredictTheStaleRowsOfDueTokens) {
    Canvas c;
    c.kv_tok = c.tokens;
    SelfCheckOptions o;
    o.on = true;
    o.below = 0.9;
    SelfChecks sc(o, static_cast<int>(c.tokens.size()), false);
    c.commit(2, 5);
    sc.committed(2, 0.95f);  // confident: not due
    c.commit(3, 6);
    sc.committed(3, 0.5f);  // below the bar: due
    NeedParts parts;
    parts.self_checks = &sc;
    sc.begin_step(0);
    Plan pl;
    auto pl_out = pl.out();
    plan_need_window(c.inputs(0, 1, false), parts, pl_out);
    EXPECT_EQ(pl.positions(), (V{2, 3, 4}));
    EXPECT_EQ(pl.predicted(), (V{3, 4}));  // the check, then the masked position
    EXPECT_EQ(V(sc.checks().begin(), sc.checks().end()), (V{3}));
    EXPECT_EQ(pl.stale, (V{2, 3}));
}

TEST(Windows, UnconditionalSequenceMasksThePrompt) {
    Canvas c;
    WindowInputs in = c.inputs(0, 0, true);
    in.n_seq = 2;
    Plan pl;
    auto pl_out = pl.out();
    plan_fixed_window(in, WindowMode::Full, 0, pl_out);
    ASSERT_EQ(pl.rows.size(), 16u);
    EXPECT_EQ(pl.rows[0].token, 1);
    EXPECT_EQ(pl.rows[8].token, M);  // sequence 1 sees no prompt
    EXPECT_EQ(pl.rows[8].seq, 1);
}

}  // namespace
}  // namespace llada::decode
