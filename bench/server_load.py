"""A bounded load test of llada-server on loopback: for each concurrency C, C client threads
send REQUESTS streaming completions in total (prompts from a task file, seeds fixed), and the
script reports failed requests, p50/p99 latency, p50 time to first event, and aggregate answer
tokens per second. Standard library only; stops by itself.

    /usr/bin/python3 bench/server_load.py PORT TASKS.jsonl [C,C,...] [REQUESTS] [stream|nostream]
"""

import json
import statistics
import sys
import threading
import time
import urllib.request


STREAM = True


def one(port, prompt, seed):
    # Streaming asks for the diffusion events too: the first one arrives after the request's
    # first step, whatever text that step commits.
    body = json.dumps({"prompt": prompt, "max_tokens": 32, "seed": seed, "stream": STREAM,
                       "diffusion_events": STREAM}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = None
    text = ""
    with urllib.request.urlopen(req, timeout=120) as r:
        if r.status != 200:
            raise RuntimeError(f"status {r.status}")
        if not STREAM:
            text = json.loads(r.read())["choices"][0]["text"]
            dt = time.perf_counter() - t0
            return dt, dt, text
        event = None
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("event: "):
                event = line[7:]
                continue
            if not line.startswith("data: "):
                continue
            if first is None:
                first = time.perf_counter() - t0
            if event is not None:  # a llada.step event, not a text chunk
                event = None
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            text += json.loads(data)["choices"][0].get("text", "")
    return time.perf_counter() - t0, first, text


def level(port, prompts, c, n):
    lat, ttfe, toks, fails = [], [], 0, 0
    lock = threading.Lock()
    next_i = [0]

    def worker():
        nonlocal toks, fails
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= n:
                return
            try:
                dt, first, text = one(port, prompts[i % len(prompts)], i)
                with lock:
                    lat.append(dt)
                    ttfe.append(first or dt)
                    toks += len(text.encode())  # byte-level tiny models: one token per byte
            except Exception:
                with lock:
                    fails += 1

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(c)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    return {"concurrency": c, "requests": n, "failed": fails, "wall_s": wall,
            "p50_ms": 1e3 * statistics.median(lat) if lat else 0,
            "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else 0,
            "ttfe_p50_ms": 1e3 * statistics.median(ttfe) if ttfe else 0,
            "tokens_per_s": toks / wall if wall > 0 else 0}


def main():
    global STREAM
    STREAM = len(sys.argv) <= 5 or sys.argv[5] != "nostream"
    port = int(sys.argv[1])
    prompts = [json.loads(l)["prompt"] for l in open(sys.argv[2])]
    levels = [int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "1,4,8,16,32").split(",")]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 128
    rows = [level(port, prompts, c, n) for c in levels]
    print("| concurrent clients | requests | failed | p50 ms | p99 ms | time to first step event p50 ms | answer tokens/s | wall s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['requests']} | {r['failed']} | {r['p50_ms']:.1f} | "
              f"{r['p99_ms']:.1f} | {r['ttfe_p50_ms']:.1f} | {r['tokens_per_s']:.0f} | {r['wall_s']:.2f} |")
    by = {r["concurrency"]: r for r in rows}
    if 1 in by and 8 in by:
        # The same requests at every level: the ratio of wall times is the throughput ratio.
        print(f"\nthroughput (requests/s) at 8 concurrent clients / one at a time: "
              f"{by[1]['wall_s'] / by[8]['wall_s']:.2f}x")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        m = r.read().decode()
    for line in m.splitlines():
        if line.startswith(("llada_batch_occupancy", "llada_tokens_per_second", "llada_busy")):
            print(line)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
