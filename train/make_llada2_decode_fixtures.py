"""Writes tests/data/llada2/decode.json: LLaDA 2.x decoding trajectories of the reference.

    /usr/bin/python3 train/make_llada2_decode_fixtures.py [--out DIR]

The model is tests/data/llada2/llada2-tiny.gguf (train/make_llada2_fixtures.py) with its output
matrix times HEAD_SCALE (a power of two, so the engine's copy scaled the same way holds the same
float32 weights): a random model's softmax over 259 tokens is nearly flat, and scaled it is
confident enough for a threshold and for edits to be decided by a clear margin. Each case decodes
one prompt with train/reference/llada2_generate.py (float64, no KV cache: the whole window every
step) and records every step's commits and edits. The prompts are the first of PROMPTS whose
every decision has a margin of at least MIN_MARGIN in every case, so that the engine's float32
forward must make the same ones. Deterministic: running twice writes identical bytes.
"""

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import vocab  # noqa: E402
from reference import llada2, llada2_generate  # noqa: E402

REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "llada2")
COMMAND = "/usr/bin/python3 train/make_llada2_decode_fixtures.py"
HEAD_SCALE = 64.0
MIN_MARGIN = 1e-3
PROMPTS = ["sort 3 1 2:", "add 12 34:", "path a-b b-c:", "sum 9 8 7:", "pick 5 of 9:",
           "rev abc:", "copy xyz:", "max 4 2 8:"]
# (name, gen, block, threshold, editing threshold or None, max post-steps, steps per block)
CASES = [
    ("llada2.0 block 4", 12, 4, 0.7, None, 0, 4),
    ("llada2.0 block 8, 4 steps", 12, 8, 0.75, None, 0, 4),
    ("llada2.1 editing block 4", 12, 4, 0.6, 0.5, 4, None),
    ("llada2.1 editing block 8", 16, 8, 0.7, 0.45, 3, None),
]


def load(path):
    m = llada2.load(path)
    m.t("output.weight").mul_(HEAD_SCALE)
    return m


def run(model, prompt_text):
    prompt = [vocab.BOS] + vocab.encode(prompt_text)
    out, low = [], float("inf")
    for name, gen, block, tau, edit, post, steps in CASES:
        x, recs = llada2_generate.generate(model, prompt, gen, block, tau, vocab.MASK, vocab.EOS,
                                           steps=steps, editing_threshold=edit,
                                           max_post_steps=post)
        low = min([low] + [r["margin"] for r in recs])
        for r in recs:
            r["margin"] = float(f"{r['margin']:.4g}")
        out.append({"name": name, "gen": gen, "block": block, "threshold": tau,
                    "editing_threshold": edit, "max_post_steps": post, "steps": steps,
                    "steps_taken": len(recs), "edits": sum(len(r["edited"]) for r in recs),
                    "canvas": x, "trajectory": recs})
    return prompt, out, low


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = load(os.path.join(args.out, "llada2-tiny.gguf"))
    for text in PROMPTS:
        prompt, cases, low = run(model, text)
        if low >= MIN_MARGIN and all(c["edits"] > 0 for c in cases if c["editing_threshold"]):
            break
        print(f"prompt {text!r}: smallest decision margin {low:.3g} (or no edit), next prompt")
    else:
        raise SystemExit("no prompt decodes with every decision clear of a tie")
    doc = {"model": "llada2-tiny.gguf", "head_scale": HEAD_SCALE, "prompt": text,
           "prompt_ids": prompt, "mask": vocab.MASK, "eos": vocab.EOS,
           "min_margin": float(f"{low:.4g}"), "cases": cases, "command": COMMAND}
    with open(os.path.join(args.out, "decode.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"prompt {text!r}: smallest margin {low:.4g}; " + ", ".join(
        f"{c['name']}: {c['steps_taken']} steps, {c['edits']} edits" for c in cases))


if __name__ == "__main__":
    main()
