"""Fine-tunes tiny-llada-l into tiny-llada-lc: a model whose rows at committed positions judge the
token they are fed (docs/step-engine.md, "Refresh checks").

LLaDA's SFT loss is on masked positions only, so what a row predicts at a position that holds a
token is untrained: on tiny-llada-l, 19 % of right tokens get a probability below 0.5 there. This
stage adds a second loss on the clean response positions of the block-wise canvas (blocks before
the current one and the current block's unmasked positions), each predicting its true token,
while half of the rows have 1-3 of those positions replaced by another token of the same
response (a plausible wrong digit or sign), weighted 10x. The masked positions keep the
block-wise SFT loss (sft.block_mask). After it, the K/V refresh rows that the next forward
computes anyway (a block's tokens, recomputed once committed) predict the right token where a
wrong one was committed, so a check costs an LM-head row and no extra forward row.

    OMP_WAIT_POLICY=ACTIVE /usr/bin/python3 train/finetune_check.py   # -> models/tiny-llada-lc.gguf (~8 min)
    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 train/finetune_check.py --suite real
        # tiny-llada-r -> models/tiny-llada-rc.gguf, the real suite's checker model

Seeded; starts from the shipped file (F32 weights) of the suite's model.
"""

import argparse
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sft  # noqa: E402
import tasks  # noqa: E402
import vocab  # noqa: E402
from model import load_gguf  # noqa: E402

# Per suite: the model fine-tuned and the name of the result.
SUITE_MODELS = {"long": ("tiny-llada-l", "tiny-llada-lc"), "real": ("tiny-llada-r", "tiny-llada-rc")}
CORRUPT_ROWS = 0.5  # share of rows with substituted tokens
CORRUPT_WEIGHT = 10.0  # a substituted position's weight in the clean loss


def corrupt(tokens, resp, clean, rng):
    """Replaces 1-3 clean positions of CORRUPT_ROWS of the rows by another token of the same
    response. Returns (noisy tokens, corrupted bool)."""
    noisy = tokens.clone()
    hit = torch.zeros_like(clean)
    for r in range(tokens.shape[0]):
        cpos = clean[r].nonzero().flatten().tolist()
        if not cpos or rng.random() >= CORRUPT_ROWS:
            continue
        alphabet = sorted(set(tokens[r][resp[r]].tolist()))
        for p in rng.sample(cpos, min(len(cpos), rng.randint(1, 3))):
            others = [a for a in alphabet if a != tokens[r, p].item()]
            if others:
                noisy[r, p] = rng.choice(others)
                hit[r, p] = True
    return noisy, hit


def clean_loss(logits, tokens, clean, hit, n_rows):
    """Per row, the mean over its clean positions of CE (substituted ones weighted), summed over
    the rows and divided by n_rows."""
    ce = F.cross_entropy(logits[clean], tokens[clean], reduction="none")
    w = torch.where(hit[clean], CORRUPT_WEIGHT, 1.0)
    per_row = clean.sum(dim=1).clamp(min=1).to(ce.dtype)
    return torch.sum(ce * w / per_row[clean.nonzero()[:, 0]]) / n_rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", choices=sorted(SUITE_MODELS), default="long",
                    help="the task suite, and with it the model fine-tuned and the name exported")
    ap.add_argument("--init", help="the GGUF to start from (default: the suite's model)")
    ap.add_argument("--export", help="where to write the result (default: models/<name>.gguf)")
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    base, name = SUITE_MODELS[a.suite]
    a.init = a.init or os.path.join(sft.MODELS_DIR, base + ".gguf")
    a.export = a.export or os.path.join(sft.MODELS_DIR, name + ".gguf")
    torch.set_num_threads(a.threads)
    sft.seed_all(a.seed)
    model, _ = load_gguf(a.init)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.98), weight_decay=0.01)
    task_names, gen_length, block_length = tasks.SUITES[a.suite]
    stream = sft.TaskStream(f"{a.seed}|check", task_names)
    gen = torch.Generator().manual_seed(a.seed + 1)
    rng = random.Random(f"corrupt|{a.seed}")
    t0 = time.time()
    for step in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = sft.lr_at(step, a.steps, a.lr, 50)
        rows = [sft.encode_row(*stream.next()[1:], "llada", gen_length) for _ in range(a.batch)]
        order = sorted(range(a.batch), key=lambda i: len(rows[i][0]))
        t = sft.sample_t(a.batch, gen, True)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for c in range(2):
            idx = order[c * a.batch // 2:(c + 1) * a.batch // 2]
            tokens, valid, resp = sft.collate([rows[i] for i in idx])
            masked, loss_at, weight = sft.block_mask(tokens, resp, t[idx], block_length, 0.8, gen)
            clean = resp & (masked != vocab.MASK)
            noisy, hit = corrupt(masked, resp, clean, rng)
            logits = sft.forward_padded(model, noisy, valid)
            loss = sft.weighted_loss_from_logits(logits, tokens, loss_at, weight, a.batch)
            loss = loss + clean_loss(logits, tokens, clean, hit, a.batch)
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % 100 == 0:
            print(json.dumps(dict(step=step + 1, loss=round(total, 5),
                                  elapsed_s=round(time.time() - t0, 1))), flush=True)
    model.eval()
    desc = (f"{name}: train/finetune_check.py --suite {a.suite} (seed {a.seed}, {a.steps} steps "
            f"of batch {a.batch}, lr {a.lr:g}) from {os.path.relpath(a.init, sft.ROOT)}")
    sft.export(model, a.export, name, dict(description=desc), gen_length, block_length)
    print(f"exported {a.export} in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
