"""Resamples decision traces to another rate of tokens per forward, for the sensitivity table of
docs/results.md: how each replayed figure would move if the model committed faster or slower.

Each block keeps its trace's shape: its cumulative commit curve over its steps is stretched or
squeezed to round(steps * f) steps (f = the trace's tokens per forward over the target's,
clamped to [1, block] steps), and each new step commits what the stretched curve adds (at least
one position; need and mbsd commit at least one a step). Drafts accepted at a block's first step
stay on its first step (at most what it commits); a block's self-checks and the tokens they
replaced are spread over its new steps in proportion to its commits. What the replay does not
read (rows by state, lookahead) is carried from the block's first step. The result is labelled
a resampled trace; it is a what-if, not a model's decisions.

Pipeline traces (several blocks per step, ahead commits) are not resampled: the tool refuses
them.

    python3 bench/resample_traces.py IN.jsonl OUT.jsonl RATE
"""

import json
import sys


def tpf(traces):
    tokens = sum(t["gen"] for t in traces)
    steps = sum(len(t["steps"]) for t in traces)
    return tokens / steps


def spread(total, weights):
    """total split in proportion to weights, rounded cumulatively (sums exactly to total)."""
    out, acc, w_all = [], 0.0, sum(weights) or 1
    done = 0
    for w in weights:
        acc += total * w / w_all
        k = int(round(acc)) - done
        out.append(k)
        done += k
    return out


def resample_block(steps, n_new):
    """The block's steps (lists of 10 or 13 numbers) as n_new steps."""
    commits = [s[1] for s in steps]
    total = sum(commits)
    n_new = max(1, min(n_new, total)) if total > 0 else 1
    # The cumulative curve at the old step boundaries, read at the new ones.
    cum = [0]
    for c in commits:
        cum.append(cum[-1] + c)
    new_cum = []
    for j in range(1, n_new + 1):
        x = j * len(commits) / n_new
        i = min(int(x), len(commits) - 1)
        frac = x - i
        new_cum.append(cum[i] + frac * (cum[i + 1] - cum[i]))
    new_cum[-1] = total
    new = []
    prev = 0
    for j, c in enumerate(new_cum):
        k = max(int(round(c)) - prev, 1 if total > 0 else 0)
        # Leave at least one position for each later step.
        k = min(k, total - prev - (n_new - 1 - j))
        new.append(k)
        prev += k
    first = steps[0]
    has_rev = len(first) >= 13
    checks = spread(sum(s[10] for s in steps), new) if has_rev else None
    revised = spread(sum(s[11] for s in steps), new) if has_rev else None
    remasked = spread(sum(s[12] for s in steps), new) if has_rev else None
    out = []
    for j, k in enumerate(new):
        s = list(first)
        s[1] = k
        if j > 0:  # drafts are accepted the step a block becomes current
            s[2] = s[3] = s[9] = 0
        else:
            s[2] = min(s[2], k)
            s[9] = min(s[9], s[2])
        if has_rev:
            s[10], s[11], s[12] = checks[j], revised[j], remasked[j]
            s[11] = min(s[11], s[10])
            s[12] = min(s[12], s[10] - s[11])
        out.append(s)
    return out


def resample(trace, f):
    if "pipeline" in trace:
        raise SystemExit("resample_traces.py: pipeline traces are not resampled")
    blocks = {}
    for s in trace["steps"]:
        blocks.setdefault(s[0], []).append(s)
    steps = []
    for b in sorted(blocks):
        steps += resample_block(blocks[b], int(round(len(blocks[b]) * f)))
    t = dict(trace)
    t["steps"] = steps
    t["nfe"] = len(steps)
    t["source"] = trace.get("source", "") + f" (resampled by bench/resample_traces.py)"
    return t


def main():
    src, dst, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with open(src) as fh:
        traces = [json.loads(line) for line in fh if line.strip()]
    # One factor for the whole file, found by bisection so that the result lands at the rate
    # (per-block rounding and the one-commit floor move it off a plain ratio).
    lo, hi = 1e-3, 1e3
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        got = tpf([resample(t, mid) for t in traces])
        if got > rate:
            lo = mid
        else:
            hi = mid
    out = [resample(t, hi) for t in traces]
    with open(dst, "w") as fh:
        for t in out:
            fh.write(json.dumps(t) + "\n")
    print(f"{src}: {tpf(traces):.2f} tokens per forward -> {tpf(out):.2f} (target {rate:g})")


if __name__ == "__main__":
    main()
