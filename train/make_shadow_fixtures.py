"""Writes tests/data/decode/shadow-*.f32: the PyTorch reference's output for shadow rows.

A shadow row is the mask token at an occupied position p that writes no K/V and may not attend
to key p, so it predicts p without seeing the token there (mbsd's drafts fed as tokens, and
progressive revision). In the reference it is an extra row of the same forward: positions
[0, L) hold the canvas and attend to each other only; shadow row k sits at RoPE position p_k and
attends to every canvas key but p_k (and to no shadow row). The C++ engine computes the same rows
against the K/V its full forward cached (tests/generator_test.cpp).

    /usr/bin/python3 train/make_shadow_fixtures.py

For each model: shadow-<model>.logits.f32, float32 [len(POSITIONS)][n_vocab].

It also writes check-<model>.logits.f32: progressive revision's check rows (re-evaluation as if
masked). A check row is a shadow row that in addition attends to its own key, the mask's, in place
of key p_k: the position is seen as masked, not as absent.
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from model import load_gguf  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data", "decode")
MODELS = ["llada-mha", "llada-gqa-tied"]
L = 24
POSITIONS = [0, 5, 13, 23]
MASK = 258


def canvas():
    # The same canvas the C++ test builds (generator_test.cpp, Canvas).
    return [(i * 37 + 11) % 250 for i in range(L)]


def main():
    torch.set_num_threads(2)
    for name in MODELS:
        model, _ = load_gguf(os.path.join(DATA, name + ".gguf"))
        model.eval()
        n = L + len(POSITIONS)
        tokens = torch.tensor([canvas() + [MASK] * len(POSITIONS)])
        positions = torch.tensor(list(range(L)) + POSITIONS)
        key_mask = torch.zeros((n, n), dtype=torch.bool)
        key_mask[:L, :L] = True
        for k, p in enumerate(POSITIONS):
            key_mask[L + k, :L] = True
            key_mask[L + k, p] = False
        with torch.no_grad():
            logits = model(tokens, positions, key_mask)[0, L:].float().numpy()
        out = os.path.join(DATA, f"shadow-{name}.logits.f32")
        logits.astype("<f4").tofile(out)
        print(f"wrote {out}: {logits.shape}")
        for k in range(len(POSITIONS)):
            key_mask[L + k, L + k] = True
        with torch.no_grad():
            logits = model(tokens, positions, key_mask)[0, L:].float().numpy()
        out = os.path.join(DATA, f"check-{name}.logits.f32")
        logits.astype("<f4").tofile(out)
        print(f"wrote {out}: {logits.shape}")


if __name__ == "__main__":
    main()
