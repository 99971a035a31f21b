#!/bin/sh
# End-to-end latency per decoding policy on the 1B-shape random llada model (prompt 32 + gen
# 128, block 32, 128 steps), with llama.cpp's llama-diffusion-cli on the same file interleaved
# when LLAMA_CPP_BIN is set. TYPES are pure synthetic files (llada-quantize --synthetic 1b --type
# T); MIXES are llama-quantize's file types of the F16 one (bench/common.sh, mixed). Writes
# bench/out/e2e-<type>.json.
. "$(dirname "$0")/common.sh"
for t in ${TYPES-F16 Q4_0} ${MIXES:-}; do
    case " ${MIXES:-} " in
        *" $t "*) m=$(mixed 1b "$t" "llada-1b-$(echo "$t" | tr A-Z a-z)") ;;
        *) m=$(model 1b "$t" "llada-1b-$(echo "$t" | tr A-Z a-z)") ;;
    esac
    extra=""
    [ -n "${LLAMA_CPP_BIN:-}" ] && extra="--llama-diffusion $LLAMA_CPP_BIN/llama-diffusion-cli"
    "$BIN/llada-bench" -m "$m" --e2e --prompt-len 32 --gen 128 --block 32 --steps 128 \
        --reps "${REPS:-1}" -t "$THREADS" $extra > "$OUT/e2e-$t.json"
    echo "== $t"; cat "$OUT/e2e-$t.json"
done
