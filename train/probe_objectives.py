"""Compares tiny-llada-l models on the block canvas: both SFT objectives' losses on 64 fresh
training rows (4 seeded draws each) and the token accuracy of the current block with 100 / 50 /
10 % of it masked (clean prefix, later blocks masked) over 80 blocks of mix-1000-l.jsonl.

    /usr/bin/python3 train/probe_objectives.py models/tiny-llada-l.gguf train/out/X/ckpt-003000.pt

Arguments are GGUF files or checkpoints of preset l. Prints one line per model (models/README.md,
"Tried: a block-wise objective").
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sft  # noqa: E402
import tasks  # noqa: E402
import vocab  # noqa: E402
from model import load_gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(path):
    m = load_gguf(path)[0] if path.endswith(".gguf") else sft.load_checkpoint("llada", "l", path)
    m.eval()
    return m


def full(tokens):
    return torch.ones_like(tokens, dtype=torch.bool)


@torch.no_grad()
def losses(m):
    stream = sft.TaskStream("probe", tasks.LONG_TASKS)
    rows = [sft.encode_row(*stream.next()[1:], "llada", 128) for _ in range(64)]
    tokens, valid, resp = sft.collate(rows)
    out = {}
    for obj in ("uniform", "block"):
        tot = 0.0
        for s in range(4):
            g = torch.Generator().manual_seed(s)
            t = sft.sample_t(64, g, True)
            if obj == "block":
                noisy, at, w = sft.block_mask(tokens, resp, t, 32, 1.0, g)
                tot += sft.weighted_loss_from_logits(sft.forward_padded(m, noisy, valid), tokens,
                                                     at, w, 64).item()
            else:
                noisy, masked, p = sft.llada_mask(tokens, resp, t, g)
                tot += sft.llada_loss_from_logits(sft.forward_padded(m, noisy, valid), tokens,
                                                  masked, p, resp, 64).item()
        out[obj] = round(tot / 4, 4)
    return out


@torch.no_grad()
def block_accuracy(m):
    path = os.path.join(ROOT, "models", "tasks", "mix-1000-l.jsonl")
    probs = [json.loads(line) for line in open(path)][:80:4]
    g = torch.Generator().manual_seed(0)
    res = {}
    for frac in (1.0, 0.5, 0.1):
        ok = tot = 0
        for pr in probs:
            ids, plen = sft.encode_row(pr["prompt"], pr["answer"], "llada", 128)
            x = torch.tensor([ids])
            for k in range(4):
                noisy = x.clone()
                lo = plen + 32 * k
                noisy[0, lo + 32:] = vocab.MASK
                sel = torch.rand(32, generator=g) < frac
                noisy[0, lo:lo + 32][sel] = vocab.MASK
                pred = sft.forward_padded(m, noisy, full(noisy))[0, lo:lo + 32].argmax(-1)
                ok += (pred == x[0, lo:lo + 32])[sel].sum().item()
                tot += sel.sum().item()
        res[f"{int(frac * 100)}%"] = round(ok / tot, 4)
    return res


if __name__ == "__main__":
    torch.set_num_threads(2)
    for p in sys.argv[1:]:
        m = load(p)
        print(p, "loss", losses(m), "block token accuracy", block_accuracy(m), flush=True)
