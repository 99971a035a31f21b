#!/bin/sh
# Decoding quality of the shipped tiny models, measured by llada-eval on the full test sets
# (models/tasks/all-test.jsonl: 4 x 1,000 problems). Writes bench/out/quality/*.json; format
# them with bench/quality_tables.py. Parts (default all): QUALITY="grid hardgrid policies ar hard".
#   grid      tiny-llada-m, vanilla, steps 32/16/8/4 x block 8/16/32 (the sensitivity table)
#   hardgrid  the same on the hard sets, steps 32 and 4 (where the parallel settings lose most)
#   policies  tiny-llada-m, the fast policies at block 8 and 16 on mix-1000.jsonl (250 problems
#             per task; vanilla included, so every comparison is on the same problems)
#   ar        the AR twins, greedy
#   hard      tiny-llada-m vanilla and dual-cache + threshold on the hard sets
#   spec      the step engine's policies beside the cache policies, block 8 and 16, on mix-1000
#             and the hard sets: vanilla, dual-cache + threshold 0.9, need + threshold 0.9,
#             mbsd + threshold 0.9 (lookahead auto) on cpu and on npu-sim, and the mbsd variants
#             (draft tokens as input, --accept 0.9); also writes the decision traces that
#             llada-bench --replay takes (bench/out/quality/trace-*.jsonl)
#   revise    progressive revision, block 8 and 16, mix-1000 and the hard sets, tiny-llada-m
#             and tiny-llada-s: vanilla, dual-cache + threshold 0.9, mbsd + threshold 0.9, each
#             of the last two + --revise, mbsd + threshold 0.7 / 0.5 without and with --revise
#             (WINO's regime), the remask variant at 0.7 (tiny-llada-s: block 8); the CPU path beside the dense one
#             (--revise-serial for the same work in series)
#   traces    only the decision traces of the replayed ablation rows (bench/ablation.sh)
#   real      tiny-llada-r on the real suite (answers with many valid forms, scored by checkers;
#             128 tokens in blocks of 32): one token per step, need + threshold 0.9 and eight
#             tokens per step on all-test-r and all-hard-r beside the AR twin tiny-ar-r (the
#             goals of models/README.md); every policy on mix-1000-r (vanilla, threshold
#             without a cache, dual-cache + threshold, need + threshold, mbsd + threshold on npu-sim, the pipeline, mbsd with
#             progressive revision, mbsd with self-checks) and test-time scaling (4 and 8
#             candidates at T 0.5, by vote and by confidence) on its first 300 problems.
#             Format with bench/quality_tables.py --real.
#   long      tiny-llada-l (128 tokens in blocks of 32; models/README.md) on the long suite:
#             vanilla at 1 and 8 tokens per step, blocks 32 and 16; the fast policies (dual-cache
#             + threshold 0.9, mbsd + threshold 0.9 on npu-sim) on mix-1000-l at block 32, and on
#             its first 200 problems those two beside mbsd + --revise and TTS of 4 candidates; the AR twin tiny-ar-l; and the decision traces
#             the 8B projections replay (bench/ablation.sh with TRACES=long). SET=mix
#             takes the grid on mix-1000-l (1,000 problems) instead of all-test-l (2,000).
. "$(dirname "$0")/common.sh"
Q=$OUT/quality
mkdir -p "$Q"
M=${MODEL:-$ROOT/models/tiny-llada-m.gguf}
TEST=$ROOT/models/tasks/all-test.jsonl
HARD=$ROOT/models/tasks/all-hard.jsonl
MIX=$ROOT/models/tasks/mix-1000.jsonl
# Workers: problems are independent, so llada-eval runs $THREADS of them side by side, 1 thread each.
eval_() { "$BIN/llada-eval" -t 1 --parallel "$THREADS" --json "$@"; }
for part in ${QUALITY:-grid hardgrid policies ar hard spec revise}; do
    case $part in
    long)
        ML=$ROOT/models/tiny-llada-l.gguf
        TL=$ROOT/models/tasks/all-test-l.jsonl
        [ "${SET:-all}" = mix ] && TL=$ROOT/models/tasks/mix-1000-l.jsonl
        ML1=$ROOT/models/tasks/mix-1000-l.jsonl
        for b in 32 16; do for s in 128 16; do
            eval_ -m "$ML" --tasks "$TL" --gen 128 --block $b --steps $s > "$Q/long-b$b-s$s.json"
        done; done
        eval_ -m "$ML" --tasks "$ML1" --gen 128 --block 32 --policy dual-cache --threshold 0.9 > "$Q/long-pol-dual.json"
        eval_ -m "$ML" --tasks "$ML1" --gen 128 --block 32 --policy mbsd --threshold 0.9 --device npu-sim > "$Q/long-pol-mbsd.json"
        # Revision and TTS (4 candidates) cost several times a plain run: the first 200 problems.
        eval_ -m "$ML" --tasks "$ML1" --limit 200 --gen 128 --block 32 --policy mbsd --threshold 0.9 --device npu-sim > "$Q/long-pol200-mbsd.json"
        eval_ -m "$ML" --tasks "$ML1" --limit 200 --gen 128 --block 32 --policy mbsd --threshold 0.9 --device npu-sim --revise > "$Q/long-pol200-mbsd-rev.json"
        eval_ -m "$ML" --tasks "$ML1" --limit 200 --gen 128 --block 32 --policy dual-cache --threshold 0.9 > "$Q/long-pol200-dual.json"
        eval_ -m "$ML" --tasks "$ML1" --limit 200 --gen 128 --block 32 --policy dual-cache --threshold 0.9 --tts 4 --temperature 0.5 > "$Q/long-pol200-tts4.json"
        eval_ -m "$ROOT/models/tiny-ar-l.gguf" --tasks "$TL" --gen 128 > "$Q/long-ar.json"
        # Pipelined blocks beside need + threshold 0.9 (BENCHMARKS.md, "Pipelined blocks"): the
        # full test set (per problem, for the held-out split) and the hard set.
        HL=$ROOT/models/tasks/all-hard-l.jsonl
        eval_ -m "$ML" --tasks "$ROOT/models/tasks/all-test-l.jsonl" --gen 128 --block 32 --policy need --threshold 0.9 \
            --out "$Q/long-pipe-need.jsonl" > "$Q/long-pipe-need.json"
        eval_ -m "$ML" --tasks "$ROOT/models/tasks/all-test-l.jsonl" --gen 128 --block 32 --policy pipeline \
            --out "$Q/long-pipe.jsonl" > "$Q/long-pipe.json"
        eval_ -m "$ML" --tasks "$HL" --gen 128 --block 32 --policy need --threshold 0.9 > "$Q/long-pipe-hard-need.json"
        eval_ -m "$ML" --tasks "$HL" --gen 128 --block 32 --policy pipeline > "$Q/long-pipe-hard.json"
        # The decision traces of the replayed ablation rows (bench/ablation.sh with TRACES=long),
        # every block decoded, on the first 100 problems of mix-1000-l (25 per task).
        tr() { name=$1; shift; eval_ -m "$ML" --tasks "$ML1" --limit 100 --gen 128 --block 32 --no-early-stop \
            --trace-out "$Q/trace-long-$name.jsonl" "$@" > "$Q/trace-long-$name.json"; }
        tr mbsd-sched --policy mbsd --device npu-sim
        tr need --policy need --threshold 0.9
        tr mbsd --policy mbsd --threshold 0.9 --accept 0.7 --device npu-sim
        # Revision where it buys forwards: threshold 0.1 commits a block per forward, and the
        # checks (the ones left after the last block on the NPU, --revise-tail dense) recover
        # what that loses.
        tr mbsd-rev --policy mbsd --threshold 0.1 --device npu-sim --revise --revise-tail dense \
            --revise-floor 0.1 ;;
    real)
        MR=$ROOT/models/tiny-llada-r.gguf
        for set in all-test-r all-hard-r; do
            T=$ROOT/models/tasks/$set.jsonl
            eval_ -m "$MR" --tasks "$T" > "$Q/real-$set-one.json"
            eval_ -m "$MR" --tasks "$T" --policy need --threshold 0.9 > "$Q/real-$set-need.json"
            eval_ -m "$MR" --tasks "$T" --steps 16 > "$Q/real-$set-eight.json"
            eval_ -m "$ROOT/models/tiny-ar-r.gguf" --tasks "$T" > "$Q/real-$set-ar.json"
        done
        T=$ROOT/models/tasks/mix-1000-r.jsonl
        p="$Q/real-pol"
        eval_ -m "$MR" --tasks "$T" > "$p-vanilla.json"
        eval_ -m "$MR" --tasks "$T" --policy threshold --threshold 0.9 > "$p-threshold.json"
        eval_ -m "$MR" --tasks "$T" --policy dual-cache --threshold 0.9 > "$p-dual.json"
        eval_ -m "$MR" --tasks "$T" --policy need --threshold 0.9 > "$p-need.json"
        eval_ -m "$MR" --tasks "$T" --policy mbsd --threshold 0.9 --device npu-sim > "$p-mbsd.json"
        eval_ -m "$MR" --tasks "$T" --policy pipeline > "$p-pipeline.json"
        eval_ -m "$MR" --tasks "$T" --policy mbsd --threshold 0.9 --device npu-sim --revise > "$p-mbsd-rev.json"
        eval_ -m "$MR" --tasks "$T" --policy mbsd --threshold 0.9 --device npu-sim --self-check > "$p-mbsd-sc.json"
        eval_ -m "$MR" --tasks "$T" --limit 300 --policy need --threshold 0.9 > "${p}300-need.json"
        for n in 4 8; do for sel in vote confidence; do
            eval_ -m "$MR" --tasks "$T" --limit 300 --policy need --threshold 0.9 --tts $n \
                --temperature 0.5 --select $sel > "${p}300-tts$n-$sel.json"
        done; done ;;
    grid)
        for b in 8 16 32; do for s in 32 16 8 4; do
            eval_ -m "$M" --tasks "$TEST" --gen 32 --block $b --steps $s > "$Q/grid-b$b-s$s.json"
        done; done ;;
    hardgrid)
        for b in 8 16 32; do for s in 32 4; do
            eval_ -m "$M" --tasks "$HARD" --gen 32 --block $b --steps $s > "$Q/hardgrid-b$b-s$s.json"
        done; done ;;
    policies)
        for b in 8 16; do
            eval_ -m "$M" --tasks "$MIX" --gen 32 --block $b --policy vanilla > "$Q/pol-b$b-vanilla.json"
            eval_ -m "$M" --tasks "$MIX" --gen 32 --block $b --policy prefix-cache > "$Q/pol-b$b-prefix.json"
            eval_ -m "$M" --tasks "$MIX" --gen 32 --block $b --policy dual-cache > "$Q/pol-b$b-dual.json"
            eval_ -m "$M" --tasks "$MIX" --gen 32 --block $b --policy threshold --threshold 0.9 > "$Q/pol-b$b-threshold.json"
            eval_ -m "$M" --tasks "$MIX" --gen 32 --block $b --policy dual-cache --threshold 0.9 > "$Q/pol-b$b-dual-threshold.json"
            eval_ -m "$M" --tasks "$MIX" --gen 32 --block $b --policy vanilla --early-stop > "$Q/pol-b$b-vanilla-es.json"
        done ;;
    ar)
        for name in tiny-ar-s tiny-ar-m; do
            eval_ -m "$ROOT/models/$name.gguf" --tasks "$TEST" --gen 32 > "$Q/ar-$name.json"
        done
        for name in tiny-llada-s; do
            eval_ -m "$ROOT/models/$name.gguf" --tasks "$TEST" --gen 32 --block 8 > "$Q/s-$name-b8-s32.json"
            eval_ -m "$ROOT/models/$name.gguf" --tasks "$TEST" --gen 32 --block 8 --steps 4 > "$Q/s-$name-b8-s4.json"
            eval_ -m "$ROOT/models/$name.gguf" --tasks "$HARD" --gen 32 --block 8 > "$Q/hard-s-b8-s32.json"
            eval_ -m "$ROOT/models/$name.gguf" --tasks "$HARD" --gen 32 --block 8 --steps 4 > "$Q/hard-s-b8-s4.json"
        done ;;
    hard)
        eval_ -m "$M" --tasks "$HARD" --gen 32 --block 8 --policy dual-cache --threshold 0.9 > "$Q/hard-dual-threshold-b8.json"
        eval_ -m "$ROOT/models/tiny-ar-m.gguf" --tasks "$HARD" --gen 32 > "$Q/hard-ar-m.json" ;;
    spec)
        for b in 8 16; do for set in mix-1000 all-hard; do
            T=$ROOT/models/tasks/$set.jsonl
            p="$Q/spec-$set-b$b"
            eval_ -m "$M" --tasks "$T" --gen 32 --block $b --policy vanilla > "$p-vanilla.json"
            eval_ -m "$M" --tasks "$T" --gen 32 --block $b --policy dual-cache --threshold 0.9 > "$p-dual.json"
            eval_ -m "$M" --tasks "$T" --gen 32 --block $b --policy need --threshold 0.9 > "$p-need.json"
            eval_ -m "$M" --tasks "$T" --gen 32 --block $b --policy mbsd --threshold 0.9 > "$p-mbsd-cpu.json"
            eval_ -m "$M" --tasks "$T" --gen 32 --block $b --policy mbsd --threshold 0.9 --device npu-sim > "$p-mbsd-npu.json"
            eval_ -m "$M" --tasks "$T" --gen 32 --block $b --policy mbsd --threshold 0.9 --device npu-sim --draft-input token > "$p-mbsd-npu-token.json"
            eval_ -m "$M" --tasks "$T" --gen 32 --block $b --policy mbsd --threshold 0.9 --device npu-sim --accept 0.9 > "$p-mbsd-npu-accept09.json"
        done; done
        # Decision traces for the replayed 1B / 8B numbers: every block decoded (no early stop).
        eval_ -m "$M" --tasks "$MIX" --gen 32 --block 8 --policy mbsd --threshold 0.9 --device npu-sim --no-early-stop \
            --trace-out "$Q/trace-mbsd-b8.jsonl" > "$Q/trace-mbsd-b8.json"
        eval_ -m "$M" --tasks "$MIX" --gen 32 --block 8 --policy need --threshold 0.9 --no-early-stop \
            --trace-out "$Q/trace-need-b8.jsonl" > "$Q/trace-need-b8.json"
        eval_ -m "$M" --tasks "$MIX" --gen 32 --block 8 --policy mbsd --device npu-sim --no-early-stop \
            --trace-out "$Q/trace-mbsd-sched-b8.jsonl" > "$Q/trace-mbsd-sched-b8.json"
        # One token per step (the schedule of the published ablation's rows).
        for b in 8 16; do
            eval_ -m "$M" --tasks "$MIX" --gen 32 --block $b --policy dual-cache > "$Q/sched-b$b-dual.json"
            eval_ -m "$M" --tasks "$MIX" --gen 32 --block $b --policy need > "$Q/sched-b$b-need.json"
            eval_ -m "$M" --tasks "$MIX" --gen 32 --block $b --policy mbsd --device npu-sim > "$Q/sched-b$b-mbsd-npu.json"
        done ;;
    revise)
        for name in tiny-llada-m tiny-llada-s; do for b in 8 16; do for set in mix-1000 all-hard; do
            [ "$name" = tiny-llada-s ] && [ $b = 16 ] && continue  # tiny-llada-s: block 8 only
            MM=$ROOT/models/$name.gguf
            T=$ROOT/models/tasks/$set.jsonl
            p="$Q/rev-$name-$set-b$b"
            eval_ -m "$MM" --tasks "$T" --gen 32 --block $b --policy vanilla > "$p-vanilla.json"
            eval_ -m "$MM" --tasks "$T" --gen 32 --block $b --policy dual-cache --threshold 0.9 > "$p-dual.json"
            eval_ -m "$MM" --tasks "$T" --gen 32 --block $b --policy dual-cache --threshold 0.9 --revise > "$p-dual-rev.json"
            eval_ -m "$MM" --tasks "$T" --gen 32 --block $b --policy mbsd --threshold 0.9 --device npu-sim > "$p-mbsd.json"
            eval_ -m "$MM" --tasks "$T" --gen 32 --block $b --policy mbsd --threshold 0.9 --device npu-sim --revise > "$p-mbsd-rev.json"
            for tau in 0.7 0.5; do
                eval_ -m "$MM" --tasks "$T" --gen 32 --block $b --policy mbsd --threshold $tau --device npu-sim > "$p-mbsd$tau.json"
                eval_ -m "$MM" --tasks "$T" --gen 32 --block $b --policy mbsd --threshold $tau --device npu-sim --revise > "$p-mbsd$tau-rev.json"
                [ $tau = 0.7 ] && eval_ -m "$MM" --tasks "$T" --gen 32 --block $b --policy mbsd --threshold $tau --device npu-sim --revise --revise-mode remask > "$p-mbsd$tau-remask.json"
            done
        done; done; done
        # The two paths on the host: one thread each, concurrent and in series (one worker).
        for mode in "" --revise-serial; do
            "$BIN/llada-eval" -t 1 --json -m "$M" --tasks "$MIX" --gen 32 --block 8 --policy mbsd --threshold 0.7 --revise $mode \
                > "$Q/rev-lanes${mode:+-serial}.json"
        done
        "$BIN/llada-eval" -t 1 --json -m "$M" --tasks "$MIX" --gen 32 --block 8 --policy mbsd --threshold 0.7 > "$Q/rev-lanes-none.json"
        ;;
    traces)
        # The decision traces the replayed ablation rows take (bench/ablation.sh), every block
        # decoded: mbsd on the schedule (row 6), need and mbsd + threshold 0.9 (rows 7-8), and
        # mbsd + threshold 0.7 + revise ('+ progressive revision', row 9).
        eval_ -m "$M" --tasks "$MIX" --gen 32 --block 8 --policy mbsd --device npu-sim --no-early-stop \
            --trace-out "$Q/trace-mbsd-sched-b8.jsonl" > "$Q/trace-mbsd-sched-b8.json"
        eval_ -m "$M" --tasks "$MIX" --gen 32 --block 8 --policy need --threshold 0.9 --no-early-stop \
            --trace-out "$Q/trace-need-b8.jsonl" > "$Q/trace-need-b8.json"
        eval_ -m "$M" --tasks "$MIX" --gen 32 --block 8 --policy mbsd --threshold 0.9 --device npu-sim --no-early-stop \
            --trace-out "$Q/trace-mbsd-b8.jsonl" > "$Q/trace-mbsd-b8.json"
        eval_ -m "$M" --tasks "$MIX" --gen 32 --block 8 --policy mbsd --threshold 0.7 --revise --device npu-sim --no-early-stop \
            --trace-out "$Q/trace-mbsd-rev-b8.jsonl" > "$Q/trace-mbsd-rev-b8.json" ;;
    *) echo "quality.sh: unknown part '$part'" >&2; exit 2 ;;
    esac
done
/usr/bin/python3 "$ROOT/bench/quality_tables.py" "$Q" "$(basename "$M" .gguf)"
