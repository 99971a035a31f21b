"""Per-token accuracy of tiny-llada-l and its AR twin when every earlier answer token is right.

For each answer position j (the answer and its first EOS) the dLLM sees the prompt, the gold
answer before j and MASK from j on -- the canvas of a one-token-per-step decode in reading order
-- and its argmax at j is scored; the AR twin is scored by teacher-forced next-token argmax. Per
task: the token accuracy and the share of problems whose every position is right (what a
reading-order decode of that model could at best reach). The first N problems of each task in
mix-1000-l.jsonl (default 40):

    /usr/bin/python3 train/probe_l2r.py [N] [LLADA.gguf] [AR.gguf]

models/README.md ("tiny-llada-l and tiny-ar-l") cites its output.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sft  # noqa: E402
import vocab  # noqa: E402
from model import load_gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def everywhere(x):
    return torch.ones_like(x, dtype=torch.bool)


@torch.no_grad()
def llada_positions(m, prompt, answer):
    """Correct flags of the dLLM's reading-order predictions, one per answer token + EOS."""
    ids, plen = sft.encode_row(prompt, answer, "llada", 128)
    n = len(vocab.encode(answer)) + 1
    x = torch.tensor(ids)
    canvases = x.repeat(n, 1)
    for j in range(n):
        canvases[j, plen + j:] = vocab.MASK
    logits = sft.forward_padded(m, canvases, everywhere(canvases))
    pred = logits[torch.arange(n), plen + torch.arange(n)].argmax(-1)
    return pred == x[plen:plen + n]


@torch.no_grad()
def ar_positions(m, prompt, answer):
    ids, plen = sft.encode_row(prompt, answer, "ar")
    x = torch.tensor([ids])
    logits = sft.forward_padded(m, x, everywhere(x))[0]
    return logits[plen - 1:len(ids) - 1].argmax(-1) == x[0, plen:]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    dllm = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "models", "tiny-llada-l.gguf")
    ar = sys.argv[3] if len(sys.argv) > 3 else os.path.join(ROOT, "models", "tiny-ar-l.gguf")
    torch.set_num_threads(1)
    models = {"dLLM": load_gguf(dllm)[0].eval(), "AR": load_gguf(ar)[0].eval()}
    score = {"dLLM": llada_positions, "AR": ar_positions}
    by_task = {}
    for line in open(os.path.join(ROOT, "models", "tasks", "mix-1000-l.jsonl")):
        p = json.loads(line)
        if len(by_task.setdefault(p["task"], [])) < n:
            by_task[p["task"]].append(p)
    for task, probs in by_task.items():
        cols = []
        for name, m in models.items():
            flags = [score[name](m, p["prompt"], p["answer"]) for p in probs]
            tok = sum(f.sum().item() for f in flags) / sum(len(f) for f in flags)
            exact = sum(bool(f.all()) for f in flags) / len(flags)
            cols.append(f"{name} token {100 * tok:.2f} % all right {100 * exact:.1f} %")
        print(f"{task:6s} {len(probs)} problems: " + " | ".join(cols), flush=True)


if __name__ == "__main__":
    main()
