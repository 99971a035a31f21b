#!/bin/sh
# Starts llada-server on a free loopback port (MODEL, default tiny-llada-m; --parallel
# $PARALLEL, default 32), runs the C++ load generator (bench/server_load.cpp: throughput and
# latency, non-streaming) and then bench/server_load.py (streaming: time to first event)
# against it (LEVELS, REQUESTS; STREAM=0 skips the streaming part, STREAM_REQUESTS sizes it),
# prints the server's peak RSS and KV cache per sequence, and stops it. SERVER_FLAGS adds flags
# (e.g. --max-prompt 64 for a model with a long context).
. "$(dirname "$0")/common.sh"
M=${MODEL:-$ROOT/models/tiny-llada-m.gguf}
TASKS=${TASKS:-$ROOT/models/tasks/mix-1000.jsonl}
log=$(mktemp)
"$BIN/llada-server" -m "$M" --port 0 --parallel "${PARALLEL:-32}" --queue 256 --max-gen 32 --block 8 \
    -t "$THREADS" ${SERVER_FLAGS:-} > "$log" 2>/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for i in $(seq 50); do grep -q listening "$log" && break; sleep 0.1; done
port=$(awk '/listening/{print $2}' "$log")
[ -n "$port" ] || { echo "server_load.sh: the server did not start" >&2; exit 1; }
"$BIN/server_load" "$port" "$TASKS" "${LEVELS:-1,4,8,16,32}" "${REQUESTS:-256}"
[ "${STREAM:-1}" = 0 ] || /usr/bin/python3 "$ROOT/bench/server_load.py" "$port" "$TASKS" \
    "${LEVELS:-1,4,8,16,32}" "${STREAM_REQUESTS:-${REQUESTS:-128}}" stream | grep -v '^\['
# Memory: the server's peak resident set and its KV cache (all sequences, and one's share).
echo
grep VmHWM /proc/$pid/status
/usr/bin/python3 - "$port" <<'PY'
import sys, urllib.request
m = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
for line in m.splitlines():
    if line.startswith("llada_kv_cache_bytes"):
        name, v = line.split()
        print(f"{name} {float(v) / 1048576:.2f} MiB")
PY
