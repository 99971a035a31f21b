"""Writes tests/data/models/: what the C++ tests check the shipped tiny models against.

For every shipped model (models/tiny-*.gguf):
  <name>.tokens.txt   a canvas (BOS + a prompt + gen mask ids for llada; BOS + prompt + answer
                      for the autoregressive llama twin), ids on one line
  <name>.logits.f32   train/model.py's float32 logits for it, [n_tokens][n_vocab], unshifted
  <name>.smoke.json   the Python reference decoder's per-problem results on
                      models/tasks/smoke-50.jsonl (vanilla: gen 32, steps 32, block 16, T 0;
                      the llama twin: greedy, gen 32), so llada-eval can be held to them; the
                      long suite's models (tiny-*-l) on smoke-50-l.jsonl and the real suite's
                      (tiny-*-r) on smoke-50-r.jsonl, at gen 128, steps 128, block 32.

    /usr/bin/python3 train/make_model_fixtures.py [NAME ...]   # default: every shipped model
"""

import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import tasks  # noqa: E402
import tasks_real  # noqa: E402
import vocab  # noqa: E402
from eval import run_ar, run_llada, score_outputs  # noqa: E402
from model import load_gguf  # noqa: E402

MODELS = ["tiny-llada-s", "tiny-llada-m", "tiny-ar-s", "tiny-ar-m", "tiny-llada-l", "tiny-ar-l",
          "tiny-llada-lc", "tiny-llada-r", "tiny-ar-r"]
OUT = os.path.join(ROOT, "tests", "data", "models")


def setting_of(name):
    """(smoke slice, setting): the long suite's models at their 128 tokens in blocks of 32."""
    if name.endswith("-r"):  # the real suite (tasks_real.py), scored by its checkers
        return (os.path.join(ROOT, "models", "tasks", "smoke-50-r.jsonl"),
                {"gen": tasks_real.GEN_LENGTH_R, "steps": tasks_real.GEN_LENGTH_R,
                 "block": tasks_real.BLOCK_LENGTH_R})
    if name.endswith("-l") or name.endswith("-lc"):
        return (os.path.join(ROOT, "models", "tasks", "smoke-50-l.jsonl"),
                {"gen": tasks.GEN_LENGTH_L, "steps": tasks.GEN_LENGTH_L, "block": tasks.BLOCK_LENGTH_L})
    return (os.path.join(ROOT, "models", "tasks", "smoke-50.jsonl"),
            {"gen": tasks.GEN_LENGTH, "steps": tasks.GEN_LENGTH, "block": 16})


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    names = sys.argv[1:] or MODELS
    for name in names:
        if name not in MODELS:
            raise SystemExit(f"unknown model {name!r}; shipped: {', '.join(MODELS)}")
        smoke, SETTING = setting_of(name)
        rows = [json.loads(line) for line in open(smoke) if line.strip()]
        path = os.path.join(ROOT, "models", name + ".gguf")
        if not os.path.exists(path):
            print(f"skip {name}: {path} does not exist")
            continue
        model, md = load_gguf(path)
        model.eval()
        arch = md["general.architecture"]
        first = rows[0]
        prompt = [vocab.BOS] + vocab.encode(first["prompt"])
        if arch == "llada":
            canvas = prompt + [vocab.MASK] * SETTING["gen"]
        else:
            canvas = prompt + vocab.encode(first["answer"]) + [vocab.EOS]
        with torch.no_grad():
            logits = model(torch.tensor([canvas]))[0].float().numpy()
        with open(os.path.join(OUT, name + ".tokens.txt"), "w") as f:
            f.write(" ".join(str(t) for t in canvas) + "\n")
        logits.astype("<f4").tofile(os.path.join(OUT, name + ".logits.f32"))

        with torch.no_grad():
            if arch == "llada":
                outs = run_llada(model, rows, SETTING["gen"], SETTING["steps"], SETTING["block"])
                setting = dict(SETTING, policy="vanilla")
            else:
                outs, _, _ = run_ar(model, rows, SETTING["gen"])
                setting = {"gen": SETTING["gen"], "policy": "ar"}
        summary, results = score_outputs(rows, outs)
        correct = [bool(r["ok"]) for r in results]
        record = {
            "model": f"models/{name}.gguf",
            "tasks": os.path.relpath(smoke, ROOT),
            "setting": setting,
            "n": len(correct),
            "correct": sum(correct),
            "per_problem": correct,
        }
        with open(os.path.join(OUT, name + ".smoke.json"), "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
        print(f"{name}: {sum(correct)}/{len(correct)} on smoke-50, logits {logits.shape}")


if __name__ == "__main__":
    main()
