"""How well a model's refresh rows judge the tokens they are fed (docs/step-engine.md,
"Self-checks"): for each answer a decoder wrote, block by block, the canvas a self-check sees
(prompt, the blocks so far with their tokens, every later position masked), and at each position
of the newest block the model's prediction there. A check would flag a position when the top
token is another one and beats the fed token's probability by the margin. Reports, for several
margins, the first wrong position of each wrong answer flagged (a check that could repair it) and
the right positions flagged (a check that would break them), up to each answer's first error.

    build/bin/llada-eval -m models/tiny-llada-lc.gguf --tasks models/tasks/mix-1000-l.jsonl \\
        --limit 300 --gen 128 --block 32 --policy mbsd --threshold 0.1 --accept 0.7 --out gen.jsonl
    /usr/bin/python3 train/probe_self_check.py models/tiny-llada-lc.gguf gen.jsonl
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import vocab  # noqa: E402
from model import load_gguf  # noqa: E402

GEN, BLOCK = 128, 32
MARGINS = (0.1, 0.5, 0.9)


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: probe_self_check.py MODEL.gguf LLADA-EVAL-OUT.jsonl")
    torch.set_num_threads(2)
    model, _ = load_gguf(sys.argv[1])
    model.eval()
    first_errors, right = [], []  # margins (top probability - fed token's)
    fed_below_half = 0
    with open(sys.argv[2]) as f:
        rows = [json.loads(line) for line in f]
    for r in rows:
        prompt = [vocab.BOS] + vocab.encode(r["prompt"])
        gen = (vocab.encode(r["generated"]) + [vocab.EOS] * GEN)[:GEN]
        want = (vocab.encode(r["answer"]) + [vocab.EOS] * GEN)[:GEN]
        bad = next((i for i in range(GEN) if gen[i] != want[i]), GEN)
        for k in range(GEN // BLOCK):
            if k * BLOCK > bad:
                break
            canvas = prompt + gen[:BLOCK * (k + 1)] + [vocab.MASK] * (GEN - BLOCK * (k + 1))
            with torch.no_grad():
                prob = torch.softmax(model(torch.tensor([canvas]))[0].float(), -1)
            for i in range(BLOCK * k, min(BLOCK * (k + 1), bad + 1)):
                row = prob[len(prompt) + i]
                margin = row.max().item() - row[gen[i]].item()
                if i == bad:
                    first_errors.append(margin)
                else:
                    right.append(margin)
                    fed_below_half += row[gen[i]].item() < 0.5
    print(f"{sys.argv[1]} on {len(rows)} answers ({len(first_errors)} wrong): right positions "
          f"whose fed token gets < 0.5 at its refresh row: {fed_below_half} of {len(right)} "
          f"({100.0 * fed_below_half / max(1, len(right)):.1f} %)")
    for m in MARGINS:
        print(f"margin > {m}: first errors flagged {sum(x > m for x in first_errors)} of "
              f"{len(first_errors)}, right positions flagged {sum(x > m for x in right)} of "
              f"{len(right)}")


if __name__ == "__main__":
    main()
