"""What checks riding in the dense steps could save over mbsd + threshold, estimated from a trace.

    python3 bench/revision_headroom.py bench/out/paper/trace-mbsd.jsonl \
        bench/out/paper/staircase-*.json [--prompt-len 80]

An estimate, not a replay (the engine has no such mode): it prices each step's rows on the
latency table's staircase (llada-bench --rows ... --json on npu-sim, as bench/paper.py writes
it; projected) and compares, per request of the row 8 trace (`--policy mbsd --threshold 0.9`):

  row 8       every step as the trace took it: a block whose first forward leaves positions
              below the threshold takes a second forward of its own;
  no check    every block in one forward, nothing checked (revision's ceiling: free checks
              that repair every loss);
  dense lane  every block in one forward; the k positions row 8 committed after a block's
              first forward are committed there too and checked once, as k more rows of the
              next block's first forward (which refreshes the block's K/V anyway), or, after
              the last block, in a forward of the block's 32 refreshes and its k checks.

The dense-lane figure is a lower bound on that design's time: it assumes every check passes
(a revised token would also have to re-decode the block decoded beside its check). Standard
library only.
"""

import argparse
import bisect
import json


TILE = 32  # sm8750's row tile: a forward's NPU time steps at every 32 rows


class Staircase:
    """A step's projected ms: the NPU's time for its rows' tiles (the staircase's point at the
    tile multiple) plus the CPU's LM head for its output rows (linear between the points)."""

    def __init__(self, path):
        res = json.load(open(path))["results"]
        self.npu = {r["rows"]: r["projected_npu_ms"] for r in res if r["rows"] % TILE == 0}
        pts = sorted((r["rows"], r["projected_cpu_ms"]) for r in res)
        self.xs, self.cpu = [p[0] for p in pts], [p[1] for p in pts]

    def __call__(self, rows, out):
        tiles = -(-rows // TILE) * TILE
        if tiles not in self.npu:
            raise SystemExit(f"revision_headroom: the staircase has no point at {tiles} rows")
        xs, ys = self.xs, self.cpu
        if out <= xs[0]:
            head = ys[0]
        else:
            i = min(bisect.bisect_left(xs, out), len(xs) - 1)
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            head = y0 + (y1 - y0) * (out - x0) / (x1 - x0)
        return self.npu[tiles] + head


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("staircase")
    ap.add_argument("--prompt-len", type=int, default=80)
    a = ap.parse_args()
    cost = Staircase(a.staircase)
    n = 0
    tot = {"row 8": 0.0, "no check": 0.0, "dense lane": 0.0}
    checks = extra = 0
    for line in open(a.trace):
        if not line.strip():
            continue
        t = json.loads(line)
        if t["policy"] != "mbsd" or t.get("pipeline"):
            raise SystemExit("revision_headroom: expects an mbsd trace (row 8's)")
        n += 1
        gen, block, p0 = t["gen"], t["block"], t["prompt_len"]
        nb = gen // block
        first_rows = a.prompt_len + gen  # the first forward: the prompt and every masked position
        later = [0] * nb  # per block: positions committed after its first forward
        for i, s in enumerate(t["steps"]):
            rows = s[5] - p0 + a.prompt_len if i == 0 else s[5]
            tot["row 8"] += cost(rows, s[6] + s[7])  # output rows: the masked and draft ones
            if i > 0 and t["steps"][i - 1][0] == s[0]:
                later[s[0]] += s[1]
                extra += 1
        one = cost(first_rows, gen) + (nb - 1) * cost(2 * block, block)
        tot["no check"] += one
        dense = cost(first_rows, gen)
        for b in range(1, nb):
            dense += cost(2 * block + later[b - 1], block + later[b - 1])
        if later[-1]:
            dense += cost(block + later[-1], later[-1])
        tot["dense lane"] += dense
        checks += sum(later)
    print(f"{a.trace}: {n} traces, prompt {a.prompt_len}; row 8 takes {extra / n:.2f} second "
          f"forwards a request, {checks / n:.2f} positions committed in them (projected, estimated "
          f"from {a.staircase})")
    base = tot["row 8"] / n
    for k, v in tot.items():
        print(f"  {k:10s} {v / n:8.1f} ms a request  {v / n - base:+7.1f} ms against row 8")


if __name__ == "__main__":
    main()
