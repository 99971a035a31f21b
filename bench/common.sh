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

# Writes a synthetic model once: model SHAPE TYPE NAME
model() {
    local path="$BENCH_MODELS/$3.gguf"
    if [ ! -f "$path" ]; then
        "$BIN/llada-quantize" --synthetic "$1" --type "$2" --out "$path" -t "$THREADS" >&2
    fi
    echo "$path"
}
