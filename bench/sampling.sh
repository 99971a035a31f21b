#!/bin/sh
# The share of a denoising step spent on the output head and sampling, before and after the
# fused LM head: the 1B-shape model (vocab 32000, d 2048) and a model with LLaDA-8B's vocabulary
# and width (126,464 x 4096) but 4 layers. A step of 160 rows (prompt 32 + gen 128, every row
# computed, as vanilla does) of which 32 need a prediction (the current block).
. "$(dirname "$0")/common.sh"
for spec in "1b Q4_0 llada-1b-q4_0" "8b,layers=4 Q4_0 llada-8bvocab-4l-q4_0"; do
    set -- $spec
    m=$(model "$1" "$2" "$3")
    "$BIN/llada-bench" -m "$m" --sampling --window 160 --need 32 --reps "${REPS:-3}" \
        -t "$THREADS" --json > "$OUT/sampling-$3.json"
    echo "== $3"; cat "$OUT/sampling-$3.json"
done
