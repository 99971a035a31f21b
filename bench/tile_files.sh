#!/bin/sh
# A model written in the NPU tile format (llada-quantize --type TQ4 --pure) beside the same random
# weights in Q4_0 (both pure, so npu-sim reads TQ4 tiles either way): the file sizes; npu-sim's
# host peak memory and wall time for loading plus a few forwards (it converts the Q4_0 file into
# tiles and keeps that copy, and reads the TQ4 file in place); and the CPU's forward time on each
# file (Q4_0 through the int8 kernels, TQ4 through the tile path with the NPU's numerics). The two
# files run alternately ROUNDS times (default 3) and each side's median is reported: measured host
# figures, not projections. SHAPE (default 1b) picks the synthetic shape. Writes
# bench/out/tile-files.json.
. "$(dirname "$0")/common.sh"
SHAPE=${SHAPE:-1b}
ROUNDS=${ROUNDS:-3}
q4=$(model "$SHAPE" Q4_0 "llada-$SHAPE-q4_0")
tq4=$(model "$SHAPE" TQ4 "llada-$SHAPE-tq4")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # run NAME FILE DEVICE ROUND: /usr/bin/time's peak RSS (KiB) and wall seconds, and the JSON
    /usr/bin/time -f "%M %e" -o "$tmp/$1-$3-$4.time" \
        "$BIN/llada-bench" -m "$2" --device "$3" --rows 32 --reps 3 --no-peaks -t "$THREADS" --json \
        > "$tmp/$1-$3-$4.json"
}
for r in $(seq "$ROUNDS"); do
    for dev in npu-sim cpu; do
        run q4_0 "$q4" $dev "$r"
        run tq4 "$tq4" $dev "$r"
    done
done
/usr/bin/python3 - "$tmp" "$ROUNDS" "$q4" "$tq4" "$SHAPE" > "$OUT/tile-files.json" <<'EOF'
import json, os, statistics, sys
tmp, rounds, q4, tq4, shape = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
out = {"shape": shape, "rounds": rounds,
       "file_bytes": {"q4_0": os.path.getsize(q4), "tq4": os.path.getsize(tq4)}}
for dev in ("npu-sim", "cpu"):
    side = {}
    for name in ("q4_0", "tq4"):
        rss, wall, load, ms = [], [], [], []
        for r in range(1, rounds + 1):
            kib, secs = open(f"{tmp}/{name}-{dev}-{r}.time").read().split()
            rss.append(int(kib) / 2**20)
            wall.append(float(secs))
            doc = json.load(open(f"{tmp}/{name}-{dev}-{r}.json"))
            load.append(doc["load_s"])
            ms.append(doc["results"][0]["ms"])
        side[name] = {"peak_rss_gib": statistics.median(rss), "process_wall_s": statistics.median(wall),
                      "load_s": statistics.median(load), "forward_ms_32_rows": statistics.median(ms)}
    side["ratio_q4_0_over_tq4"] = {k: side["q4_0"][k] / side["tq4"][k] if side["tq4"][k] else None
                                   for k in side["q4_0"]}
    out[dev] = side
print(json.dumps(out, indent=1))
EOF
cat "$OUT/tile-files.json"
