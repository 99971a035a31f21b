"""Checks reference/generate.py against ML-GSAI/LLaDA's own generate.py, step for step.

A local check, not a dependency: at run time it reads generate.py from a bare git mirror of
ML-GSAI/LLaDA (default /work/.mirror/ML-GSAI+LLaDA/repo, or $LLADA_UPSTREAM_MIRROR), executes only
its add_gumbel_noise, get_num_transfer_tokens and generate definitions (the file imports
transformers at the top, which is not installed and not needed), and runs both implementations on
a tiny random model with the same torch seed. Both use the global torch RNG, so identical draws
mean identical noise. The model wrapper records every canvas it is called with, so the comparison
covers every step's canvas, not only the final one. Exits 0 with a message when the mirror or git
is absent.

    /usr/bin/python3 train/reference/check_against_upstream.py
"""

import ast
import os
import shutil
import subprocess
import sys
import types

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import torch
import torch.nn.functional as F

from reference.generate import TorchNoise, generate
from model import Config, Model
from vocab import BOS, MASK, N_VOCAB

MIRROR = os.environ.get("LLADA_UPSTREAM_MIRROR", "/work/.mirror/ML-GSAI+LLaDA/repo")
WANTED = ("add_gumbel_noise", "get_num_transfer_tokens", "generate")


def load_upstream():
    """Upstream's three functions, or None (with a reason) when the mirror is not available."""
    if shutil.which("git") is None:
        return None, "git not found"
    if not os.path.isdir(MIRROR):
        return None, f"mirror {MIRROR} is absent"
    try:
        src = subprocess.run(["git", "-C", MIRROR, "show", "HEAD:generate.py"], check=True,
                             capture_output=True, text=True).stdout
    except subprocess.CalledProcessError as e:
        return None, f"git show failed: {e.stderr.strip()}"
    tree = ast.parse(src)
    # Only the wanted function definitions: no imports (transformers), no main().
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in WANTED]
    missing = set(WANTED) - {n.name for n in defs}
    if missing:
        raise RuntimeError(f"upstream generate.py lacks {sorted(missing)}")
    module = ast.Module(body=defs, type_ignores=[])
    ns = {"torch": torch, "np": np, "F": F}
    exec(compile(module, f"{MIRROR}:generate.py", "exec"), ns)
    rev = subprocess.run(["git", "-C", MIRROR, "rev-parse", "HEAD"], check=True,
                         capture_output=True, text=True).stdout.strip()
    return ns, rev


class Recorder:
    """Makes our Model look like a Hugging Face model (`.device`, `model(x, ...).logits`) and
    keeps a copy of every canvas it is asked about."""

    def __init__(self, model):
        self.model = model
        self.device = torch.device("cpu")
        self.inputs = []

    def __call__(self, x, attention_mask=None):
        # An all-ones mask means no padding, which is what our model computes.
        assert attention_mask is None or bool(attention_mask.all())
        self.inputs.append(x.clone())
        return types.SimpleNamespace(logits=self.model(x))


def make_model(seed):
    # Weights large enough that the logits are peaky and decisions are not coin flips.
    cfg = Config(arch="llada", n_vocab=N_VOCAB, d=32, n_layer=2, n_head=4, n_kv_head=2, ffn=64,
                 ctx=128, rope_base=10000.0)
    m = Model(cfg)
    m.init_weights(std=0.4, seed=seed)
    return m.eval()


# (block, steps) pairs for gen 16: even splits, splits with a remainder (16/5, 8/3, 4/3) and
# more steps than masks per block (4/5, so some steps commit nothing).
BLOCK_STEPS = ((16, 16), (16, 8), (16, 5), (8, 8), (8, 6), (4, 16), (4, 12), (4, 20))


def settings():
    for temperature in (0.0, 0.7, 1.0):
        for cfg_scale in (0.0, 1.5):
            for remasking in ("low_confidence", "random"):
                for block, steps in BLOCK_STEPS:
                    yield dict(steps=steps, gen_length=16, block_length=block,
                               temperature=temperature, cfg_scale=cfg_scale, remasking=remasking)


def main():
    torch.set_num_threads(1)
    upstream, info = load_upstream()
    if upstream is None:
        print(f"SKIP: {info}; nothing compared")
        return 0
    print(f"upstream generate.py at {MIRROR} commit {info}")
    model = make_model(seed=7)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 256, (2, 6), generator=g)
    prompts = {"plain": torch.cat([torch.full((2, 1), BOS), ids], dim=1)}
    # Upstream lets a mask id inside the prompt be filled in; check that we follow it there too.
    with_mask = prompts["plain"].clone()
    with_mask[0, 3] = MASK
    with_mask[1, 5] = MASK
    prompts["mask-in-prompt"] = with_mask

    n_runs = n_same = 0
    failures = []
    for pname, prompt in prompts.items():
        for i, s in enumerate(settings()):
            seed = 1000 + i
            rec_up, rec_ours = Recorder(model), Recorder(model)
            torch.manual_seed(seed)
            # Upstream's CFG branch reads `attention_mask_`, which it only defines when an
            # attention_mask is passed, so pass the all-ones (no padding) mask.
            ones = torch.ones_like(prompt)
            out_up = upstream["generate"](rec_up, prompt, ones, mask_id=MASK, **s)
            torch.manual_seed(seed)
            out_ours = generate(rec_ours, prompt, mask_id=MASK, noise=TorchNoise(), **s)
            same = (torch.equal(out_up, out_ours) and len(rec_up.inputs) == len(rec_ours.inputs)
                    and all(torch.equal(a, b) for a, b in zip(rec_up.inputs, rec_ours.inputs)))
            n_runs += 1
            n_same += same
            if not same:
                failures.append((pname, s))
    print(f"{n_same}/{n_runs} runs identical (final canvas and every step's model input), batch 2, "
          f"gen 16, T in (0, 0.7, 1), cfg in (0, 1.5), both remasking modes, (block, steps) in "
          f"{BLOCK_STEPS}, prompts: {', '.join(prompts)}")
    for pname, s in failures[:10]:
        print(f"DIFFERENT: prompt {pname} {s}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
