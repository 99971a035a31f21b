#!/bin/sh
# Memory per sequence of llada-server: the server's peak resident set after one request at
# --parallel 1 and at --parallel $PARALLEL (default 16), the difference per added sequence, and
# the KV cache's share as the server reports it. MODEL (default tiny-llada-m), SERVER_FLAGS.
. "$(dirname "$0")/common.sh"
M=${MODEL:-$ROOT/models/tiny-llada-m.gguf}
N=${PARALLEL:-16}
rss() {  # rss PARALLEL -> "peak_kib kv_per_sequence_bytes"
    log=$(mktemp)
    "$BIN/llada-server" -m "$M" --port 0 --parallel "$1" --max-gen 32 --block 8 -t "$THREADS" \
        ${SERVER_FLAGS:-} > "$log" 2>/dev/null &
    pid=$!
    for i in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
    port=$(awk '/listening/{print $2}' "$log")
    /usr/bin/python3 - "$port" <<'PY'
import json, sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions",
                             data=json.dumps({"prompt": "sort 56 44 46 59 52 58:",
                                              "max_tokens": 32}).encode(),
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=600).read()
PY
    kv=$(/usr/bin/python3 -c "
import sys, urllib.request
m = urllib.request.urlopen('http://127.0.0.1:$port/metrics').read().decode()
print([l.split()[1] for l in m.splitlines() if l.startswith('llada_kv_cache_bytes_per_sequence ')][0])")
    hwm=$(awk '/VmHWM/{print $2}' /proc/$pid/status)
    kill $pid; wait $pid 2>/dev/null || true
    rm -f "$log"
    echo "$hwm $kv"
}
set -- $(rss 1)
one=$1
set -- $(rss "$N")
many=$1 kv=$2
/usr/bin/python3 - "$one" "$many" "$N" "$kv" <<'PY'
import sys
one, many, n, kv = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
per = (many - one) / (n - 1) / 1024
print(f"peak RSS: {one / 1024:.1f} MiB at --parallel 1, {many / 1024:.1f} MiB at --parallel {n}")
print(f"per added sequence: {per:.2f} MiB measured; its KV cache {kv / 1048576:.2f} MiB")
PY
