# Shared settings of the benchmark scripts (sourced). Override by environment:
#   BUILD=build                       the llada.cpp build directory
#   BENCH_MODELS=/path/to/models      where synthetic models are written (several GB; not in git)
#   LLAMA_CPP_BIN=/path/to/bin        an existing llama.cpp build's bin/ (optional); nothing of
#                                     llama.cpp is built, downloaded or shipped by these scripts
#   THREADS=2                         threads for both engines
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
BIN=$BUILD/bin
BENCH_MODELS=${BENCH_MODELS:-$ROOT/bench/models}
THREADS=${THREADS:-$(nproc)}
OUT=${OUT:-$ROOT/bench/out}
mkdir -p "$BENCH_MODELS" "$OUT"

# Writes a synthetic model once: model SHAPE TYPE NAME (TYPE a tensor type puts every matrix
# in it; a mix name such as Q4_K_M gives the mix's types, llada-quantize --synthetic)
model() {
    local path="$BENCH_MODELS/$3.gguf"
    if [ ! -f "$path" ]; then
        "$BIN/llada-quantize" --synthetic "$1" --type "$2" --out "$path" -t "$THREADS" >&2
    fi
    echo "$path"
}

# A file of one of llama-quantize's file types (a mix such as Q4_K_M) for a synthetic model, made
# once from the F16 model of that shape: mixed SHAPE FTYPE NAME. With LLAMA_CPP_BIN set it is
# llama-quantize's output (how the files users download are made); otherwise llada-quantize's,
# which has the same tensor types and bytes (tests/quant_mix_test.cpp, tests/quant_golden_test.cpp).
mixed() {
    local path="$BENCH_MODELS/$3.gguf"
    if [ ! -f "$path" ]; then
        local src
        src=$(model "$1" F16 "llada-$1-f16")
        if [ -n "${LLAMA_CPP_BIN:-}" ]; then
            "$LLAMA_CPP_BIN/llama-quantize" "$src" "$path" "$2" "$THREADS" > "$path.log" 2>&1
        else
            "$BIN/llada-quantize" --in "$src" --out "$path" --type "$2" -t "$THREADS" >&2
        fi
    fi
    echo "$path"
}
