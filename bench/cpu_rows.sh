#!/bin/sh
# Forward throughput per row count for the 1B-shape random llada model in F16, Q8_0 and Q4_0,
# beside llama.cpp's llama-bench on the same files (interleaved per row count), and the
# machine's measured peaks. With llama-bench, ROUNDS (default 3) alternations of the two per row
# count, each side's median reported. SIMD=AVX2 runs our kernels of that instruction set (pair it
# with a llama.cpp built without AVX-512). Writes bench/out/rows-<type>.json.
. "$(dirname "$0")/common.sh"
ROWS=${ROWS:-32,64,128}
for t in ${TYPES:-F16 Q8_0 Q4_0}; do
    m=$(model 1b $t llada-1b-$(echo $t | tr A-Z a-z))
    extra=""
    [ -n "${LLAMA_CPP_BIN:-}" ] && extra="--llama-bench $LLAMA_CPP_BIN/llama-bench"
    [ -n "${SIMD:-}" ] && extra="$extra --simd $SIMD"
    "$BIN/llada-bench" -m "$m" --rows "$ROWS" --reps "${REPS:-3}" --rounds "${ROUNDS:-3}" -t "$THREADS" $extra \
        --json > "$OUT/rows-$t.json"
    echo "== $t"; cat "$OUT/rows-$t.json"
done
