#!/bin/sh
# The seed's evaluation in one command: builds llada.cpp, writes the random-weight models it
# needs into a cache folder outside the repository, runs every row (the ablation, dLLM against
# autoregressive projected and measured, the tiny twins' accuracy frontier, the staircase, where
# a step's time goes) and writes docs/results.md and docs/figures/*.png.
#
#   sh bench/paper.sh            # everything (about an hour on 2 cores)
#   sh bench/paper.sh --quick    # smaller shapes and fewer problems (under 15 minutes), said so
#
# Environment: THREADS (default 2), PAPER_MODELS (default ~/.cache/llada.cpp/paper-models),
# OUT (raw JSON, default bench/out/paper[-quick]). Needs Debian's python3-matplotlib for the
# figures (scripts/install-deps.sh --bench); the engine itself needs no Python.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$ROOT/build" -j2 --target llada-bench llada-eval llada-quantize > /dev/null
exec /usr/bin/python3 "$ROOT/bench/paper.py" "$@"
