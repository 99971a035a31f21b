"""The accuracy-cost frontier of test-time scaling: one point per (model, policy, N) measured by
llada-eval --tts N (bench/out/tts/acc-*.json: host, 2 workers; npu-*.json: npu-sim, 1 worker),
accuracy against host wall time per request and against projected sm8750 latency per request,
the Pareto frontier drawn. Writes docs/figures/tts-frontier.png and prints the frontier.

    /usr/bin/python3 bench/tts_frontier.py [bench/out/tts] [docs/figures/tts-frontier.png]

Needs python3-matplotlib (scripts/install-deps.sh --bench).
"""

import glob
import json
import os
import re
import sys


def points(d, prefix):
    out = []
    for path in sorted(glob.glob(os.path.join(d, prefix + "-*-n*.json"))):
        m = re.match(prefix + r"-(.+)-n(\d+)\.json$", os.path.basename(path))
        try:
            with open(path) as f:
                r = json.load(f)
        except ValueError:
            continue
        out.append((m.group(1), int(m.group(2)), r))
    return out


def frontier(pts):
    """Points not beaten by another with lower cost and higher accuracy, by cost."""
    best, acc = [], -1.0
    for p in sorted(pts, key=lambda p: (p[0], -p[1])):
        if p[1] > acc:
            best.append(p)
            acc = p[1]
    return best


def projected_ms(r):
    dev = r.get("device", {})
    total = dev.get("projected_ms", 0.0)
    one = dev.get("projected_one_time_ms", 0.0)
    return (total - one) / r["n"] if r["n"] else 0.0


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "bench/out/tts"
    png = sys.argv[2] if len(sys.argv) > 2 else "docs/figures/tts-frontier.png"
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    host = [(m, n, r["wall_s"] / r["n"] * 1e3, 100 * r["accuracy"]) for m, n, r in points(d, "acc")]
    npu = [(m, n, projected_ms(r), 100 * r["accuracy"]) for m, n, r in points(d, "npu")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, pts, label in ((axes[0], npu, "projected sm8750 latency per request, ms (PROJECTED)"),
                           (axes[1], host, "host wall time per request, ms (measured, 2 workers)")):
        for model in sorted({p[0] for p in pts}):
            mp = sorted([p for p in pts if p[0] == model], key=lambda p: p[1])
            ax.plot([p[2] for p in mp], [p[3] for p in mp], "o-", label=model, alpha=0.8)
            for p in mp:
                ax.annotate(f"N={p[1]}", (p[2], p[3]), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        f = frontier([(p[2], p[3], p[0], p[1]) for p in pts])
        if f:
            ax.step([p[0] for p in f], [p[1] for p in f], "k--", where="post", lw=1,
                    label="frontier")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("accuracy %, mix-1000 (vote)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        print(f"frontier, {label}:")
        for c, a, model, n in f:
            print(f"  {model} N={n}: {a:.1f} % at {c:.3f} ms")
    fig.suptitle("Test-time scaling: dual-cache + threshold 0.9 (dLLMs) / ar (AR twin), T 1.0")
    fig.tight_layout()
    os.makedirs(os.path.dirname(png), exist_ok=True)
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
