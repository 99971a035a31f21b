"""The learning curve of a training run: every checkpoint exported and scored by llada-eval.

    /usr/bin/python3 train/learning_curve.py train/out/tiny-llada-r [--tasks F] [--limit N]
        [--every K] [--from STEP] [--policies 'one,need9,eight'] [--json OUT]

For each checkpoint of the run folder (ckpt-NNNNNN.pt every --every steps, and final.pt) it writes
a GGUF into a temporary folder (the run's preset and metadata, as the training's own export) and
runs build/bin/llada-eval on the first --limit problems of --tasks under each policy: `one` one
token per step, `need9` need + threshold 0.9, `eight` eight tokens per step (an AR run gets its
greedy decode only). Prints a Markdown table: step, loss (the log's EMA at that step), accuracy
and forwards per answer of each policy.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import sft  # noqa: E402

POLICIES = {
    "one": [],
    "need9": ["--policy", "need", "--threshold", "0.9"],
    "eight": ["--steps", "16"],
}


def checkpoints(run_dir, every, first):
    out = []
    for f in sorted(os.listdir(run_dir)):
        m = re.fullmatch(r"ckpt-(\d+)\.pt", f)
        if m and int(m.group(1)) % every == 0 and int(m.group(1)) >= first:
            out.append((int(m.group(1)), os.path.join(run_dir, f)))
    run = json.load(open(os.path.join(run_dir, "run.json")))
    out.append((run["steps"], os.path.join(run_dir, "final.pt")))
    return run, out


def loss_at(run_dir, step):
    best = None
    for line in open(os.path.join(run_dir, "log.jsonl")):
        r = json.loads(line)
        if "loss_ema" in r and r.get("step", 0) <= step:
            best = r["loss_ema"]
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--tasks", default=os.path.join(ROOT, "models", "tasks", "mix-1000-r.jsonl"))
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--from", dest="first", type=int, default=0, help="the first step scored")
    ap.add_argument("--policies", default="one,need9,eight")
    ap.add_argument("--eval", default=os.path.join(ROOT, "build", "bin", "llada-eval"))
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    run, cks = checkpoints(args.run_dir, args.every, args.first)
    arch = run["arch"]
    pols = ["greedy"] if arch != "llada" else args.policies.split(",")
    for p in pols:
        if p != "greedy" and p not in POLICIES:
            raise SystemExit(f"unknown policy {p!r}: {', '.join(POLICIES)}")
    rows = []
    print(f"{run['name']} on the first {args.limit} of {os.path.relpath(args.tasks, ROOT)}")
    print("| step | loss (EMA) | " + " | ".join(f"{p} acc | {p} fwd" for p in pols) + " |")
    print("|---:|---:|" + "---:|---:|" * len(pols))
    with tempfile.TemporaryDirectory() as tmp:
        for step, path in cks:
            model = sft.load_checkpoint(arch, run["preset"], path)
            gguf = os.path.join(tmp, f"{run['name']}-{step}.gguf")
            sft.export(model, gguf, run["name"], gen_length=run["gen_length"],
                       block_length=run["block_length"])
            row = {"step": step, "loss_ema": loss_at(args.run_dir, step)}
            for p in pols:
                cmd = [args.eval, "-m", gguf, "--tasks", args.tasks, "--limit", str(args.limit),
                       "-t", "1", "--parallel", "2", "--json", "--no-progress"]
                cmd += POLICIES.get(p, [])
                rep = json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                                text=True).stdout)
                row[p] = {"accuracy": rep["accuracy"], "ci95": rep["ci95"], "nfe": rep["nfe"]}
            rows.append(row)
            print(f"| {step} | {row['loss_ema']:.3f} | " + " | ".join(
                f"{100 * row[p]['accuracy']:.1f} % | {row[p]['nfe']:.1f}" for p in pols) + " |",
                flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"run": run["name"], "tasks": os.path.relpath(args.tasks, ROOT),
                       "limit": args.limit, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
