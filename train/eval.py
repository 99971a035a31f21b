"""Evaluates a tiny model on task JSONL files with the Python reference decoders.

    /usr/bin/python3 train/eval.py models/tiny-llada-m.gguf models/tasks/all-test.jsonl \
        --steps 64 --block 32                      # one setting
    /usr/bin/python3 train/eval.py models/tiny-llada-m.gguf models/tasks/all-test.jsonl \
        --grid --limit 250 --json out.json         # steps gen, gen/2, gen/4, gen/8 x blocks 8/16/32
    /usr/bin/python3 train/eval.py models/tiny-ar-s.gguf models/tasks/all-test.jsonl   # AR: greedy

arch `llada`: train/reference/generate.py's generate() (the `vanilla` policy), temperature 0,
low-confidence remasking unless --remasking random, no CFG. Problems are batched by prompt length
(generate() needs equal-length prompts); each prompt is [BOS] + UTF-8 bytes of the prompt.
arch `llama`: greedy next-token decoding without a KV cache (a full forward per token), stopping
at EOS or after --gen tokens. Its tokens/s is a rough Python number, not the engine's.

Scoring (tasks.py): the generated tokens up to the first EOS, as text, stripped of surrounding
whitespace, must equal the JSONL `answer` exactly. Prints accuracy per task and overall with a
95% Wilson interval.
"""

import argparse
import json
import math
import os
import sys
import time
from collections import OrderedDict, defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tasks  # noqa: E402
import vocab  # noqa: E402
from model import load_gguf  # noqa: E402
from reference.generate import generate  # noqa: E402


def wilson(k, n, z=1.96):
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    den = 1 + z * z / n
    c = (p + z * z / (2 * n)) / den
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, c - h), min(1.0, c + h))


def load_model(path, arch=None, preset=None):
    """A GGUF, or a training checkpoint (.pt) given --arch and --preset."""
    if path.endswith(".gguf"):
        model, md = load_gguf(path)
    else:
        from sft import load_checkpoint
        model = load_checkpoint(arch or "llada", preset or "s", path)
    model.eval()
    return model


def select(rows, limit=None, task_names=None):
    """The first `limit` problems of each task (in file order), optionally only some tasks."""
    count = defaultdict(int)
    out = []
    for r in rows:
        if task_names and r["task"] not in task_names:
            continue
        if limit is not None and count[r["task"]] >= limit:
            continue
        count[r["task"]] += 1
        out.append(r)
    return out


def _groups(rows, batch):
    """Indices of rows grouped by prompt token length, in chunks of at most `batch`."""
    by_len = OrderedDict()
    for i, r in enumerate(rows):
        by_len.setdefault(len(vocab.encode(r["prompt"])), []).append(i)
    for _, idx in sorted(by_len.items()):
        for s in range(0, len(idx), batch):
            yield idx[s:s + batch]


def prompt_tensor(rows, idx):
    return torch.tensor([[vocab.BOS] + vocab.encode(rows[i]["prompt"]) for i in idx],
                        dtype=torch.long)


@torch.no_grad()
def run_llada(model, rows, gen, steps, block, remasking="low_confidence", batch=128):
    outs = [None] * len(rows)
    for idx in _groups(rows, batch):
        prompt = prompt_tensor(rows, idx)
        x = generate(model, prompt, steps=steps, gen_length=gen, block_length=block,
                     temperature=0.0, cfg_scale=0.0, remasking=remasking, mask_id=vocab.MASK)
        for j, i in enumerate(idx):
            outs[i] = x[j, prompt.shape[1]:].tolist()
    return outs


@torch.no_grad()
def run_ar(model, rows, gen, batch=128):
    """Greedy decoding; returns (token lists, generated token count incl. EOS, seconds)."""
    outs = [None] * len(rows)
    n_tok = 0
    t0 = time.time()
    for idx in _groups(rows, batch):
        x = prompt_tensor(rows, idx)
        P = x.shape[1]
        done = torch.zeros(len(idx), dtype=torch.bool)
        for _ in range(gen):
            nxt = model(x)[:, -1].argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, vocab.EOS), nxt)
            n_tok += int((~done).sum())
            done |= nxt == vocab.EOS
            x = torch.cat([x, nxt[:, None]], dim=1)
            if bool(done.all()):
                break
        for j, i in enumerate(idx):
            outs[i] = x[j, P:].tolist()
    return outs, n_tok, time.time() - t0


def score_outputs(rows, outs):
    per = defaultdict(lambda: [0, 0])
    results = []
    for r, o in zip(rows, outs):
        text = vocab.decode(o)
        ok = tasks.score(text, r["answer"], r["task"], r["prompt"])
        per[r["task"]][0] += int(ok)
        per[r["task"]][1] += 1
        results.append({"task": r["task"], "prompt": r["prompt"], "output": text, "ok": ok})
    k = sum(v[0] for v in per.values())
    n = sum(v[1] for v in per.values())
    summary = {"overall": {"correct": k, "n": n, "acc": k / n if n else 0.0, "ci95": wilson(k, n)}}
    for t in sorted(per):
        kt, nt = per[t]
        summary[t] = {"correct": kt, "n": nt, "acc": kt / nt, "ci95": wilson(kt, nt)}
    return summary, results


def fmt(summary):
    parts = []
    for key, v in summary.items():
        lo, hi = v["ci95"]
        parts.append(f"{key} {100 * v['acc']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] (n {v['n']})")
    return "; ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="GGUF (arch llada or llama) or a checkpoint .pt")
    ap.add_argument("jsonl", nargs="+", help="task files ({task, prompt, answer} per line)")
    ap.add_argument("--gen", type=int, default=tasks.GEN_LENGTH)
    ap.add_argument("--steps", type=int, nargs="+", default=None,
                    help="total steps (default: gen, i.e. one token per step)")
    ap.add_argument("--block", type=int, nargs="+", default=[32])
    ap.add_argument("--grid", action="store_true",
                    help="steps gen, gen/2, gen/4, gen/8 at blocks 8, 16, 32")
    ap.add_argument("--remasking", default="low_confidence", choices=["low_confidence", "random"])
    ap.add_argument("--limit", type=int, help="first N problems of each task")
    ap.add_argument("--tasks", nargs="+", help="only these tasks")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--arch", help="for .pt checkpoints: llada or llama")
    ap.add_argument("--preset", help="for .pt checkpoints: the training preset")
    ap.add_argument("--json", help="write the summaries (and per-problem results) here")
    ap.add_argument("--show", type=int, default=0, help="print this many wrong outputs")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = load_model(args.model, args.arch, args.preset)
    rows = []
    for p in args.jsonl:
        rows += tasks.read_jsonl(p)
    rows = select(rows, args.limit, args.tasks)
    report = {"model": args.model, "files": args.jsonl, "limit": args.limit, "gen": args.gen,
              "arch": model.cfg.arch, "n_params": model.n_params(), "runs": []}
    print(f"{args.model}: arch {model.cfg.arch}, {model.n_params()} params, {len(rows)} problems",
          flush=True)

    def record(setting, outs, secs, extra=None):
        summary, results = score_outputs(rows, outs)
        run = {"setting": setting, "summary": summary, "seconds": round(secs, 1)}
        run.update(extra or {})
        if args.json:
            run["results"] = results
        report["runs"].append(run)
        print(f"{json.dumps(setting)}: {fmt(summary)}  [{secs:.0f} s]"
              + (f" {extra}" if extra else ""), flush=True)
        wrong = [r for r in results if not r["ok"]][:args.show]
        for r in wrong:
            print(f"   {r['prompt']!r} -> {r['output']!r}")

    if model.cfg.arch == "llama":
        outs, n_tok, secs = run_ar(model, rows, args.gen, args.batch)
        record({"decoder": "greedy-ar"}, outs, secs,
               {"tokens": n_tok, "tokens_per_s": round(n_tok / secs, 1)})
    else:
        if args.grid:
            settings = [(s, b) for b in (8, 16, 32)
                        for s in (args.gen, args.gen // 2, args.gen // 4, args.gen // 8)]
        else:
            steps = args.steps or [args.gen]
            settings = [(s, b) for b in args.block for s in steps]
        for steps, block in settings:
            t0 = time.time()
            outs = run_llada(model, rows, args.gen, steps, block, args.remasking, args.batch)
            secs = time.time() - t0
            n_tok = len(rows) * args.gen
            record({"decoder": "vanilla", "steps": steps, "block": block, "gen": args.gen,
                    "remasking": args.remasking}, outs, secs,
                   {"tokens_per_s": round(n_tok / secs, 1)})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
