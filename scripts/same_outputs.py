"""Runs one fixed set of commands through two builds' tools and says whether they behave alike:
every policy's --json document (llada-cli, llada-eval) and decision trace, and the error of each
refused option combination, with the measured times left out (they differ run to run).

    python3 scripts/same_outputs.py BEFORE_BIN AFTER_BIN      # e.g. /tmp/bin-before build/bin

For a refactoring that must not change behaviour (docs/step-engine.md): copy build/bin before
it, rebuild after, and run this. Exit 1 with the first difference of each command that differs.
"""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M = os.path.join(ROOT, "models", "tiny-llada-m.gguf")
R = os.path.join(ROOT, "models", "tiny-llada-r.gguf")
LC = os.path.join(ROOT, "models", "tiny-llada-lc.gguf")
AR = os.path.join(ROOT, "models", "tiny-ar-m.gguf")
SMOKE = os.path.join(ROOT, "models", "tasks", "smoke-50.jsonl")
SMOKE_R = os.path.join(ROOT, "models", "tasks", "smoke-50-r.jsonl")
SMOKE_L = os.path.join(ROOT, "models", "tasks", "smoke-50-l.jsonl")
# Keys whose values are measured times, rates or memory, not behaviour.
TIMED = ("ms", "_s", "per_s", "s_per", "host_s", "peak_rss_bytes")

POLICIES = [
    ["--policy", "vanilla"],
    ["--policy", "vanilla", "--steps", "8"],
    ["--policy", "threshold"],
    ["--policy", "prefix-cache", "--threshold", "0.9"],
    ["--policy", "dual-cache", "--threshold", "0.9"],
    ["--policy", "dual-cache", "--factor", "1"],
    ["--policy", "need", "--threshold", "0.9"],
    ["--policy", "mbsd", "--threshold", "0.9"],
    ["--policy", "mbsd", "--threshold", "0.9", "--device", "npu-sim"],
    ["--policy", "mbsd", "--threshold", "0.9", "--lookahead", "8", "--draft-input", "token"],
    ["--policy", "pipeline"],
    ["--policy", "pipeline", "--pipeline-verify", "window"],
    ["--policy", "dual-cache", "--threshold", "0.9", "--revise"],
    ["--policy", "mbsd", "--threshold", "0.9", "--revise", "--revise-tail", "dense"],
    ["--policy", "need", "--threshold", "0.9", "--self-check"],
    ["--policy", "dual-cache", "--threshold", "0.9", "--temperature", "0.7", "--top-k", "5"],
    ["--policy", "dual-cache", "--threshold", "0.9", "--tts", "4", "--temperature", "0.5"],
    ["--policy", "vanilla", "--cfg", "1.5", "--steps", "16"],
]
REFUSED = [
    ["--policy", "vanilla", "--threshold", "0.9"],
    ["--policy", "threshold", "--steps", "8"],
    ["--policy", "need", "--lookahead", "4"],
    ["--policy", "mbsd", "--pipeline-start", "0.5"],
    ["--policy", "vanilla", "--revise"],
    ["--policy", "dual-cache", "--self-check", "--threshold", "0.9"],
    ["--policy", "ar", "--threshold", "0.9"],
    ["--policy", "ar", "--block", "8"],
    ["--policy", "ar", "--steps", "8"],
    ["--policy", "dream", "--lookahead", "4"],
    ["--policy", "dream", "--block", "8"],
    ["--policy", "nonsense"],
    ["--policy", "need", "--refresh", "2"],
    ["--policy", "need", "--threshold", "0"],
    ["--policy", "dual-cache", "--top-k", "3"],
]


def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items()
                if not any(k == t or k.endswith(t) for t in TIMED)}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    out = p.stdout
    try:
        out = strip(json.loads(out))
    except ValueError:
        pass
    return {"rc": p.returncode, "out": out, "err": p.stderr if p.returncode else ""}


def cases(bin_dir, tmp):
    cli, ev = os.path.join(bin_dir, "llada-cli"), os.path.join(bin_dir, "llada-eval")
    out = {}
    for i, f in enumerate(POLICIES):
        out[f"cli {' '.join(f)}"] = run([cli, "-m", M, "-p", "add 12 34:", "--json", "-t", "2",
                                          "--seed", "3"] + f)
        trace = os.path.join(tmp, f"trace-{i}.jsonl")
        r = run([ev, "-m", M, "--tasks", SMOKE, "--limit", "6", "--json", "--no-progress", "-t", "2",
                 "--trace-out", trace] + f)
        r["trace"] = [strip(json.loads(line)) for line in open(trace)] if os.path.exists(trace) else None
        out[f"eval {' '.join(f)}"] = r
    for f in POLICIES[:3] + POLICIES[6:8]:
        out[f"eval-r {' '.join(f)}"] = run([ev, "-m", R, "--tasks", SMOKE_R, "--limit", "3",
                                            "--json", "--no-progress", "-t", "2"] + f)
    out["eval-r --policy pipeline"] = run([ev, "-m", R, "--tasks", SMOKE_R, "--limit", "3",
                                           "--json", "--no-progress", "-t", "2", "--policy",
                                           "pipeline"])
    # Self-checks on the model trained to judge the tokens it is fed, and their replay.
    sc = ["--policy", "mbsd", "--threshold", "0.9", "--self-check", "--no-early-stop"]
    trace = os.path.join(tmp, "trace-lc.jsonl")
    r = run([ev, "-m", LC, "--tasks", SMOKE_L, "--limit", "4", "--json", "--no-progress", "-t",
             "2", "--trace-out", trace] + sc)
    r["trace"] = [strip(json.loads(line)) for line in open(trace)] if os.path.exists(trace) else None
    out["eval-lc self-check"] = r
    bench = os.path.join(bin_dir, "llada-bench")
    out["bench replay self-check"] = run([bench, "-m", LC, "--ablation", "--ablation-configs", "9",
                                          "--replay-revise", trace, "--no-sensitivity", "--json",
                                          "-t", "2"])
    out["cli ar"] = run([cli, "-m", AR, "-p", "add 12 34:", "--json", "--policy", "ar"])
    out["eval ar"] = run([ev, "-m", AR, "--tasks", SMOKE, "--limit", "6", "--json",
                          "--no-progress", "--policy", "ar"])
    for f in REFUSED:
        model = AR if f[1] == "ar" else M
        out[f"refused {' '.join(f)}"] = run([cli, "-m", model, "-p", "x", "--json"] + f)
    return out


def first_difference(a, b, path=""):
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'after' if k not in a else 'before'}"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {str(a)[:300]!r} != {str(b)[:300]!r}"


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with tempfile.TemporaryDirectory() as t1, tempfile.TemporaryDirectory() as t2:
        before, after = cases(sys.argv[1], t1), cases(sys.argv[2], t2)
    bad = 0
    for k in before:
        d = first_difference(before[k], after[k])
        if d:
            bad += 1
            print(f"DIFFERS: {k}\n    {d}")
    print(f"same_outputs.py: {len(before) - bad} of {len(before)} commands alike")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
