#!/bin/sh
# The published on-phone ablation, every row in one table (PROJECTED: npu-sim, sm8750 and its
# CPU): LLaDA-8B shape, random weights in llama-quantize's Q4_K_M mix (WEIGHTS=Q4_0 for the
# pure Q4_0 file of earlier runs), prompt 80, gen 128, block 32. Rows 6-9 replay
# decision traces of a trained model (a fixed sample of $SAMPLE of them): by default
# tiny-llada-m's (32 tokens in blocks of 8, mapped onto the 8B run's blocks of 32), which
# `QUALITY=traces sh bench/quality.sh` writes; with TRACES=long tiny-llada-l's (128 tokens in
# blocks of 32, the 8B run's own shape), which `QUALITY=long sh bench/quality.sh` writes.
# Writes bench/out/ablation.json (and the table, bench/out/ablation.txt).
. "$(dirname "$0")/common.sh"
Q=$OUT/quality
if [ "${TRACES:-m}" = long ]; then
    sched=trace-long-mbsd-sched need=trace-long-need thr=trace-long-mbsd rev=trace-long-mbsd-rev part=long
else
    sched=trace-mbsd-sched-b8 need=trace-need-b8 thr=trace-mbsd-b8 rev=trace-mbsd-rev-b8 part=traces
fi
for t in $sched $need $thr $rev; do
    if [ ! -f "$Q/$t.jsonl" ]; then
        echo "ablation.sh: $Q/$t.jsonl is missing; run: THREADS=$THREADS QUALITY=$part sh bench/quality.sh" >&2
        exit 1
    fi
done
W=${WEIGHTS:-Q4_K_M}
m=$(model 8b "$W" "llada-8b-$(echo "$W" | tr A-Z a-z)")
"$BIN/llada-bench" -m "$m" --ablation --ablation-configs "${CONFIGS:-123456789}" --no-sensitivity \
    --timing-only --prompt-len 80 --gen 128 --block 32 -t "$THREADS" --replay-sample "${SAMPLE:-50}" \
    --replay "$Q/$sched.jsonl" --replay-need "$Q/$need.jsonl" \
    --replay-threshold "$Q/$thr.jsonl" --replay-revise "$Q/$rev.jsonl" \
    --revise-context "${REVISE_CONTEXT:-fresh}" --revise-tail "${REVISE_TAIL:-dense}" \
    --json > "$OUT/ablation.json" 2> "$OUT/ablation.txt"
cat "$OUT/ablation.txt"
