#!/bin/sh
# Forward throughput per row count of the 1B-shape random llada model in every file type that
# llama-quantize writes (its default mixes, made by llama-quantize itself when LLAMA_CPP_BIN is
# set), beside llama.cpp's llama-bench on the same files, ROUNDS alternations of the two per row
# count (medians). Writes bench/out/rows-<ftype>.json; bench/quant_table.py prints the table.
#   LLAMA_CPP_BIN=/path/to/llama.cpp/build/bin BENCH_MODELS=/path THREADS=2 sh bench/quant_rows.sh
. "$(dirname "$0")/common.sh"
ROWS=${ROWS:-32,128}
for ft in ${FTYPES:-Q4_K_M Q4_K_S Q5_K_M Q6_K Q3_K_M Q2_K IQ4_XS IQ4_NL Q4_0 Q4_1 Q5_0 Q5_1 Q8_0}; do
    m=$(mixed 1b "$ft" "llada-1b-$(echo "$ft" | tr A-Z a-z)")
    extra=""
    [ -n "${LLAMA_CPP_BIN:-}" ] && extra="--llama-bench $LLAMA_CPP_BIN/llama-bench"
    [ -n "${SIMD:-}" ] && extra="$extra --simd $SIMD"
    "$BIN/llada-bench" -m "$m" --rows "$ROWS" --reps "${REPS:-3}" --rounds "${ROUNDS:-3}" -t "$THREADS" $extra \
        --json > "$OUT/rows-$ft.json"
    echo "== $ft"; cat "$OUT/rows-$ft.json"
done
