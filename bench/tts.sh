#!/bin/sh
# Test-time scaling measured with llada-eval --tts on mix-1000 (T 1.0; the dLLMs with dual-cache
# + threshold 0.9, block 8; the AR twin with ar). Writes bench/out/tts/*.json. Parts (default
# all): TTS="batch acc npu figure settings".
#   batch   N = 8 candidates batched beside the same 8 candidates decoded one after another
#           (8 runs with --seed 0..7: candidate k of the batch is the run with seed k, tested in
#           tests/tts_test.cpp), tiny-llada-m, one worker, one thread
#   acc     accuracy, vote@N, pass@N and host wall against N in {1, 2, 4, 8, 16}, tiny-llada-m,
#           tiny-llada-s and tiny-ar-m, two workers of one thread
#   npu     the same on npu-sim (sm8750): projected latency per request, one worker
#   figure  docs/figures/tts-frontier.png (bench/tts_frontier.py; python3-matplotlib)
#   settings tiny-llada-m at a parallel setting (dual-cache + threshold 0.7), on the hard sets
#           (threshold 0.9) and at one token per step (vanilla), N in {1, 4, 8}
. "$(dirname "$0")/common.sh"
D=$OUT/tts
mkdir -p "$D"
T=${TASKS:-$ROOT/models/tasks/mix-1000.jsonl}
dllm() { m=$1; shift; "$BIN/llada-eval" -m "$ROOT/models/$m.gguf" --tasks "$T" --gen 32 --block 8 --policy dual-cache --threshold 0.9 --temperature 1.0 -t 1 --json "$@"; }
ar() { m=$1; shift; "$BIN/llada-eval" -m "$ROOT/models/$m.gguf" --tasks "$T" --gen 32 --policy ar --temperature 1.0 -t 1 --json "$@"; }
for part in ${TTS:-batch acc npu figure settings}; do
    case $part in
    batch)
        dllm tiny-llada-m --tts 8 > "$D/batch8.json"
        for k in 0 1 2 3 4 5 6 7; do dllm tiny-llada-m --seed $k > "$D/seq-seed$k.json"; done
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
        ;;
    acc)
        for n in 1 2 4 8 16; do
            for m in tiny-llada-m tiny-llada-s; do dllm $m --tts $n --parallel 2 > "$D/acc-$m-n$n.json"; done
            for m in tiny-ar-m tiny-ar-s; do ar $m --tts $n --parallel 2 > "$D/acc-$m-n$n.json"; done
        done ;;
    npu)
        for n in 1 4 8 16; do
            for m in tiny-llada-m tiny-llada-s; do dllm $m --tts $n --device npu-sim > "$D/npu-$m-n$n.json"; done
            for m in tiny-ar-m tiny-ar-s; do ar $m --tts $n --device npu-sim > "$D/npu-$m-n$n.json"; done
        done ;;
    figure)
        /usr/bin/python3 "$ROOT/bench/tts_frontier.py" "$D" "$ROOT/docs/figures/tts-frontier.png" ;;
    settings)
        for n in 1 4 8; do
            "$BIN/llada-eval" -m "$ROOT/models/tiny-llada-m.gguf" --tasks "$T" --gen 32 --block 8 --policy dual-cache \
                --threshold 0.7 --temperature 1.0 -t 1 --parallel 2 --json --tts $n > "$D/set-thr07-n$n.json"
            "$BIN/llada-eval" -m "$ROOT/models/tiny-llada-m.gguf" --tasks "$ROOT/models/tasks/all-hard.jsonl" --gen 32 --block 8 \
                --policy dual-cache --threshold 0.9 --temperature 1.0 -t 1 --parallel 2 --json --tts $n > "$D/set-hard-n$n.json"
            "$BIN/llada-eval" -m "$ROOT/models/tiny-llada-m.gguf" --tasks "$T" --gen 32 --block 8 --policy vanilla \
                --temperature 1.0 -t 1 --parallel 2 --json --tts $n > "$D/set-vanilla-n$n.json"
        done ;;
    *) echo "tts.sh: unknown part '$part'" >&2; exit 2 ;;
    esac
done
