#!/bin/sh
# The autoregressive baseline beside llama.cpp (issue: a fair AR side for dLLM-vs-AR): the `ar`
# policy generating GEN tokens after a PROMPT-token prompt on a random-weight `llama` GGUF
# (llada-quantize --synthetic SHAPE,arch=llama), and `llama-bench -pg PROMPT,GEN` on the same
# file, alternated ROUNDS times in one run (this machine is shared and noisy); each side's
# median time per generation and the ratio. llama-bench's pp+tg test prefills the prompt and
# then decodes GEN tokens one by one; ours decodes GEN - 1 after the prefill, whose forward
# already gives the first token (one decode fewer: at most 1/GEN in our favour).
#
#   LLAMA_CPP_BIN=/path/to/llama.cpp/build/bin THREADS=2 sh bench/ar_baseline.sh
#   (SHAPE 1b, TYPE Q4_0, PROMPT 32, GEN 128, ROUNDS 3, KV_F16 unset: float32 cache)
. "$(dirname "$0")/common.sh"
: "${LLAMA_CPP_BIN:?give LLAMA_CPP_BIN=/path/to/llama.cpp/build/bin (built outside the repo)}"
LLAMA_BENCH=$LLAMA_CPP_BIN/llama-bench
SHAPE=${SHAPE:-1b} TYPE=${TYPE:-Q4_0} PROMPT=${PROMPT:-32} GEN=${GEN:-128} ROUNDS=${ROUNDS:-3}
M=$(model "$SHAPE,arch=llama" "$TYPE" "llama-$SHAPE-$(echo "$TYPE" | tr 'A-Z' 'a-z')")
kv=""
[ -n "${KV_F16:-}" ] && kv="--kv-f16"
ours=""
theirs=""
for r in $(seq "$ROUNDS"); do
    o=$("$BIN/llada-bench" -m "$M" --e2e --policies ar --prompt-len "$PROMPT" --gen "$GEN" \
        -t "$THREADS" --reps 3 $kv --json 2>/dev/null |
        python3 -c 'import json,sys,statistics; d=json.load(sys.stdin); print(statistics.median(e["wall_s"] for e in d["e2e"]))')
    t=$("$LLAMA_BENCH" -m "$M" -p 0 -n 0 -pg "$PROMPT,$GEN" -t "$THREADS" -r 3 -o json 2>/dev/null |
        python3 -c 'import json,sys; d=json.load(sys.stdin)[0]; print((d["n_prompt"] + d["n_gen"]) / d["avg_ts"])')
    echo "round $r: llada.cpp ar $o s, llama-bench pp$PROMPT+tg$GEN $t s" >&2
    ours="$ours $o"
    theirs="$theirs $t"
done
python3 - "$ours" "$theirs" "$M" "$THREADS" "$PROMPT" "$GEN" "${KV_F16:+fp16}" <<'EOF'
import statistics, sys
ours = [float(x) for x in sys.argv[1].split()]
theirs = [float(x) for x in sys.argv[2].split()]
mo, mt = statistics.median(ours), statistics.median(theirs)
gen = int(sys.argv[6])
print(f"model {sys.argv[3]}, {sys.argv[4]} threads, prompt {sys.argv[5]}, {gen} tokens, "
      f"KV cache {sys.argv[7] or 'float32'}")
print(f"llada.cpp ar: {mo:.3f} s ({gen / mo:.1f} tokens/s)   rounds {ours}")
print(f"llama-bench:  {mt:.3f} s ({gen / mt:.1f} tokens/s)   rounds {theirs}")
print(f"llama.cpp time / ours: {mt / mo:.2f}x")
EOF
