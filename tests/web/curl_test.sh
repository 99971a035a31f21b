#!/bin/sh
# llada-server through curl: a completion, a chat completion and a stream (SSE framing, ending in
# "data: [DONE]"), each checked against the same request's text from the non-streamed answer.
# Exits 77 (skipped) with a message where curl is not installed.
#
#     sh tests/web/curl_test.sh BIN_DIR MODEL
set -eu
command -v curl > /dev/null || { echo "skipped: curl is not installed (scripts/install-deps.sh --web)"; exit 77; }
bin=$1 model=$2
log=$(mktemp) out=$(mktemp)
"$bin/llada-server" -m "$model" --port 0 -t 1 --max-gen 32 --block 8 > "$log" 2>/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log" "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Until the server listens or exits, however long its start takes on this host (ctest's time
# limit bounds the wait, not a count of tries).
until grep -q listening "$log"; do
    kill -0 $pid 2> /dev/null || fail "llada-server exited before listening"
    sleep 0.05
done
port=$(awk '/listening/{print $2}' "$log")
url=http://127.0.0.1:$port
prompt='sort 56 44 46 59 52 58:'
curl -sf "$url/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$prompt\", \"max_tokens\": 32, \"seed\": 3, \"temperature\": 1}" > "$out"
want=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$out")
[ -n "$want" ] || fail "empty completion: $(cat "$out")"
curl -sf "$url/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\": [{\"role\": \"user\", \"content\": \"$prompt\"}], \"max_tokens\": 32, \"seed\": 3, \"temperature\": 1}" > "$out"
chat=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["message"]["content"])' "$out")
[ "$chat" = "$want" ] || fail "chat '$chat' != completion '$want'"
curl -sfN "$url/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$prompt\", \"max_tokens\": 32, \"seed\": 3, \"temperature\": 1, \"stream\": true}" > "$out"
[ "$(tail -c 14 "$out" | tr '\n' '|')" = "data: [DONE]||" ] || fail "the stream does not end in data: [DONE]"
streamed=$(/usr/bin/python3 - "$out" <<'PY'
import json, sys
events = open(sys.argv[1]).read().split("\n\n")
text = ""
for e in events:
    if not e:
        continue
    assert e.startswith("data: "), f"not an SSE data event: {e!r}"
    if e == "data: [DONE]":
        break
    text += json.loads(e[6:])["choices"][0]["text"]
print(text)
PY
)
[ "$streamed" = "$want" ] || fail "stream '$streamed' != completion '$want'"
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/completions" -d '{bad')
[ "$code" = 400 ] || fail "malformed JSON answered $code"
echo "ok: '$want'"
