#!/bin/sh
# The published on-phone ablation, every row in one table (PROJECTED: npu-sim, sm8750 and its
# CPU): LLaDA-8B shape, random Q4_0 weights, prompt 80, gen 128, block 32. Rows 6-9 replay
# tiny-llada-m's decision traces (a fixed sample of $SAMPLE of its 1,000 mix-1000 traces), which
# `QUALITY=traces sh bench/quality.sh` writes. Writes bench/out/ablation.json.
. "$(dirname "$0")/common.sh"
Q=$OUT/quality
for t in trace-mbsd-sched-b8 trace-need-b8 trace-mbsd-b8 trace-mbsd-rev-b8; do
    if [ ! -f "$Q/$t.jsonl" ]; then
        echo "ablation.sh: $Q/$t.jsonl is missing; run: THREADS=$THREADS QUALITY=traces sh bench/quality.sh" >&2
        exit 1
    fi
done
m=$(model 8b Q4_0 llada-8b-q4_0)
"$BIN/llada-bench" -m "$m" --ablation --ablation-configs "${CONFIGS:-123456789}" --no-sensitivity \
    --timing-only --prompt-len 80 --gen 128 --block 32 -t "$THREADS" --replay-sample "${SAMPLE:-50}" \
    --replay "$Q/trace-mbsd-sched-b8.jsonl" --replay-need "$Q/trace-need-b8.jsonl" \
    --replay-threshold "$Q/trace-mbsd-b8.jsonl" --replay-revise "$Q/trace-mbsd-rev-b8.jsonl" \
    --json > "$OUT/ablation.json" 2> "$OUT/ablation.txt"
cat "$OUT/ablation.txt"
