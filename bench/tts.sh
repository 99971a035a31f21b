#!/bin/sh
# Test-time scaling on the host: N = 8 candidates batched (llada-eval --tts 8) beside the same
# 8 candidates decoded one after another (8 runs with --seed 0..7: candidate k of the batch is
# the run with seed k, tested in tests/tts_test.cpp), tiny-llada-m, mix-1000, one worker, one
# thread. Then accuracy against N. Writes bench/out/tts/*.json.
. "$(dirname "$0")/common.sh"
D=$OUT/tts
mkdir -p "$D"
M=${MODEL:-$ROOT/models/tiny-llada-m.gguf}
T=${TASKS:-$ROOT/models/tasks/mix-1000.jsonl}
POL=${POLICY:---policy dual-cache --threshold 0.9}
run() { "$BIN/llada-eval" -m "$M" --tasks "$T" --gen 32 --block 8 $POL --temperature 1.0 -t 1 --json "$@"; }
run --tts 8 > "$D/batch8.json"
for k in 0 1 2 3 4 5 6 7; do run --seed $k > "$D/seq-seed$k.json"; done
/usr/bin/python3 - "$D" <<'PY'
import json, sys, os
d = sys.argv[1]
b = json.load(open(os.path.join(d, "batch8.json")))
seq = [json.load(open(os.path.join(d, f"seq-seed{k}.json"))) for k in range(8)]
ws = sum(s["wall_s"] for s in seq)
print(f"batched N=8: {b['wall_s']:.2f} s, NFE {b['nfe']:.2f}, rows {b['rows']:.1f} per problem")
print(f"8 sequential runs: {ws:.2f} s, NFE {sum(s['nfe'] for s in seq):.2f}, rows {sum(s['rows'] for s in seq):.1f} per problem")
print(f"ratio sequential / batched: {ws / b['wall_s']:.2f}x")
print(f"first candidate {100*b['tts']['first_candidate']['accuracy']:.1f} % = seed 0 alone {100*seq[0]['accuracy']:.1f} %")
PY
