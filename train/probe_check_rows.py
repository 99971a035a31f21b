"""Why progressive revision's check rows see their own position as a mask (docs/step-engine.md,
"Progressive revision"): on tiny-llada-m, the committed answer of one problem, the PyTorch
reference's probability of the committed token at two positions for (a) the plain
leave-one-out shadow row (no key at its position), (b) the position masked in the canvas (what a
check row computes).

    /usr/bin/python3 train/probe_check_rows.py
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import vocab  # noqa: E402
from model import load_gguf  # noqa: E402


def main():
    torch.set_num_threads(2)
    model, _ = load_gguf(os.path.join(HERE, "..", "models", "tiny-llada-m.gguf"))
    model.eval()
    prompt, answer = "sort 39 48 68 42 62 33:", "33 39 42 48 62 68"
    P = [vocab.BOS] + list(prompt.encode())
    canvas = P + list(answer.encode()) + [vocab.EOS] * (32 - len(answer))
    L = len(canvas)
    for p in (1, 4):
        pos = len(P) + p
        tokens = torch.tensor([canvas + [vocab.MASK]])
        positions = torch.tensor(list(range(L)) + [pos])
        km = torch.zeros((L + 1, L + 1), dtype=torch.bool)
        km[:L, :L] = True
        km[L, :L] = True
        km[L, pos] = False
        with torch.no_grad():
            shadow = torch.softmax(model(tokens, positions, km)[0, L].float(), -1)
        masked = list(canvas)
        masked[pos] = vocab.MASK
        with torch.no_grad():
            full = torch.ones((L, L), dtype=torch.bool)
            check = torch.softmax(
                model(torch.tensor([masked]), torch.tensor(list(range(L))), full)[0, pos].float(), -1)
        t = canvas[pos]
        print(f"answer position {p} ({chr(t)!r}): shadow row p = {shadow[t]:.4f} "
              f"(argmax {chr(int(shadow.argmax()))!r}); masked (check row) p = {check[t]:.4f}")


if __name__ == "__main__":
    main()
