"""Writes tests/data/moe/: a tiny random `llada-moe` model and its reference logits.

    /usr/bin/python3 train/make_moe_fixtures.py [--out DIR]

The C++ engine's `llada-moe` forward is held to train/reference/llada_moe.py on these files:
  llada-moe-tiny.gguf  random F32 weights: 2 layers, d 64, 4 query heads over 2 KV heads (head
                       dim 16), 8 experts of which 3 are used, expert FFN 32, the byte vocabulary
  tokens.txt           the canvas: BOS, a short English prompt's bytes, 16 mask ids (one line)
  logits.f32           the reference's float32 logits, little-endian [n_tokens][n_vocab], row i
                       for canvas position i (unshifted)
  logits64.f32         the same forward computed in float64, then rounded to float32
  manifest.json        shapes, the seed, the routing margin, the float32-vs-float64 difference

Every norm weight is 1 + 0.1 N(0, 1), so an engine that skips one (the per-head Q/K norms
included) is off; the router's weights are N(0, 0.5), so each row prefers clearly different
experts. The seed is the first from 1 on whose canvas every layer's routing is decisive: the
K-th and (K+1)-th largest router probabilities differ by at least MIN_TOPK_GAP on every row, far
beyond float32 rounding, so a correct float32 engine selects the same experts. The output is a
function of the constants here alone: running the script twice writes identical bytes.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import vocab  # noqa: E402
from gguf_io import GGUFWriter, GGML_F32  # noqa: E402
from reference import llada_moe  # noqa: E402

REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "moe")
COMMAND = "/usr/bin/python3 train/make_moe_fixtures.py"
MODEL_FILE = "llada-moe-tiny.gguf"

CONFIG = dict(n_layer=2, d=64, n_head=4, n_head_kv=2, n_expert=8, n_expert_used=3, n_ff_exp=32,
              n_ff=96, ctx=256, rope_base=50000.0, eps=1e-5, n_vocab=vocab.N_VOCAB)
PROMPT = "What is two plus three?"
N_MASKS = 16
MIN_TOPK_GAP = 1e-3
MAX_SEED_TRIES = 1000

WEIGHT_STD = 0.02
ROUTER_STD = 0.5
NORM_SPREAD = 0.1


def random_weights(cfg, seed):
    """GGUF tensor name -> float32 array in NumPy order, drawn in a fixed order from `seed`."""
    rng = np.random.default_rng(seed)
    d, hd = cfg["d"], cfg["d"] // cfg["n_head"]
    E, Fe = cfg["n_expert"], cfg["n_ff_exp"]

    def matrix(*shape, std=WEIGHT_STD):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm(n):
        return (1.0 + NORM_SPREAD * rng.standard_normal(n)).astype(np.float32)

    t = {"token_embd.weight": matrix(cfg["n_vocab"], d)}
    for il in range(cfg["n_layer"]):
        p = f"blk.{il}."
        t[p + "attn_norm.weight"] = norm(d)
        t[p + "attn_q.weight"] = matrix(cfg["n_head"] * hd, d)
        t[p + "attn_k.weight"] = matrix(cfg["n_head_kv"] * hd, d)
        t[p + "attn_v.weight"] = matrix(cfg["n_head_kv"] * hd, d)
        t[p + "attn_q_norm.weight"] = norm(hd)
        t[p + "attn_k_norm.weight"] = norm(hd)
        t[p + "attn_output.weight"] = matrix(d, cfg["n_head"] * hd)
        t[p + "ffn_norm.weight"] = norm(d)
        t[p + "ffn_gate_inp.weight"] = matrix(E, d, std=ROUTER_STD)
        t[p + "ffn_gate_exps.weight"] = matrix(E, Fe, d)
        t[p + "ffn_up_exps.weight"] = matrix(E, Fe, d)
        t[p + "ffn_down_exps.weight"] = matrix(E, d, Fe)
    t["output_norm.weight"] = norm(d)
    t["output.weight"] = matrix(cfg["n_vocab"], d)
    return t


def write_gguf(path, cfg, tensors, name="llada-moe-tiny", expert_weights_scale=None):
    """Writes `tensors` as an F32 `llada-moe` GGUF with the metadata llama.cpp's loader reads."""
    a = llada_moe.ARCH
    hd = cfg["d"] // cfg["n_head"]
    w = GGUFWriter()
    w.add_string("general.architecture", a)
    w.add_string("general.name", name)
    w.add_u32(f"{a}.block_count", cfg["n_layer"])
    w.add_u32(f"{a}.context_length", cfg["ctx"])
    w.add_u32(f"{a}.embedding_length", cfg["d"])
    w.add_u32(f"{a}.feed_forward_length", cfg["n_ff"])
    w.add_u32(f"{a}.attention.head_count", cfg["n_head"])
    w.add_u32(f"{a}.attention.head_count_kv", cfg["n_head_kv"])
    w.add_f32(f"{a}.attention.layer_norm_rms_epsilon", cfg["eps"])
    w.add_f32(f"{a}.rope.freq_base", cfg["rope_base"])
    w.add_u32(f"{a}.rope.dimension_count", cfg.get("n_rot", hd))
    w.add_u32(f"{a}.expert_count", cfg["n_expert"])
    w.add_u32(f"{a}.expert_used_count", cfg["n_expert_used"])
    w.add_u32(f"{a}.expert_feed_forward_length", cfg["n_ff_exp"])
    if expert_weights_scale is not None:
        w.add_f32(f"{a}.expert_weights_scale", expert_weights_scale)
    w.add_u32(f"{a}.vocab_size", cfg["n_vocab"])
    w.add_bool(f"{a}.attention.causal", False)
    w.add_bool("diffusion.shift_logits", False)
    w.add_u32("general.file_type", 0)
    for key, spec in vocab.gguf_metadata().items():
        w.add(key, *spec)
    for tname, arr in tensors.items():
        w.add_tensor(tname, arr, GGML_F32)
    w.write(path)


def canvas():
    return [vocab.BOS] + vocab.encode(PROMPT) + [vocab.MASK] * N_MASKS


def sig(x):
    return float(f"{x:.4g}")


def mistakes(path, tokens, base):
    """How far plausible engine mistakes move the float32 logits (max |change| against `base`),
    so a test's tolerance can be judged against them. Each mistake is reproduced on a freshly
    loaded reference, by a switch or by an equivalent change of the weights."""

    def change(edit):
        m = llada_moe.load(path)
        edit(m)
        with torch.no_grad():
            return sig(float((m(tokens) - base).abs().max()))

    cfg = CONFIG
    hd = cfg["d"] // cfg["n_head"]
    # A head's dims in the order that makes NEOX RoPE act as adjacent-pair (NORM-style) RoPE
    # would on the stored weights: dim 2i to i, dim 2i + 1 to i + hd/2. Permuting Q and K (and
    # their norm weights) alike leaves q.k unchanged except for which pairs rotate together.
    perm = torch.cat((torch.arange(0, hd, 2), torch.arange(1, hd, 2)))

    def as_norm_rope(m):
        for il in range(cfg["n_layer"]):
            for part, heads in (("q", cfg["n_head"]), ("k", cfg["n_head_kv"])):
                wq = m.t(f"blk.{il}.attn_{part}.weight")
                idx = (torch.arange(heads)[:, None] * hd + perm[None, :]).reshape(-1)
                wq.copy_(wq[idx].clone())
                nw = m.t(f"blk.{il}.attn_{part}_norm.weight")
                nw.copy_(nw[perm].clone())

    def qk_norm_weights_as_ones(m):
        for il in range(cfg["n_layer"]):
            m.t(f"blk.{il}.attn_q_norm.weight").fill_(1.0)
            m.t(f"blk.{il}.attn_k_norm.weight").fill_(1.0)

    def renormalised(m):
        m.norm_w = True

    def one_more_expert(m):
        m.hp = dict(m.hp, n_expert_used=cfg["n_expert_used"] + 1)

    def moe_dropped(m):
        for il in range(cfg["n_layer"]):
            m.t(f"blk.{il}.ffn_down_exps.weight").zero_()

    return {
        "rope_adjacent_pairs": change(as_norm_rope),
        "qk_norm_weights_ignored": change(qk_norm_weights_as_ones),
        "expert_weights_renormalised": change(renormalised),
        "one_more_expert_used": change(one_more_expert),
        "moe_output_dropped": change(moe_dropped),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, MODEL_FILE)
    tokens = torch.tensor(canvas())

    for seed in range(1, MAX_SEED_TRIES + 1):
        write_gguf(path, CONFIG, random_weights(CONFIG, seed))
        model = llada_moe.load(path)
        with torch.no_grad():
            logits = model(tokens)
        gap = model.min_topk_gap()
        if gap >= MIN_TOPK_GAP:
            break
        print(f"seed {seed}: min top-K gap {gap:.3g} < {MIN_TOPK_GAP}, next seed")
    else:
        raise SystemExit(f"no seed in 1..{MAX_SEED_TRIES} routes decisively")

    model64 = llada_moe.load(path, dtype=torch.float64)
    with torch.no_grad():
        exact = model64(tokens)
    for il, (s32, s64) in enumerate(zip(model.selected, model64.selected)):
        if not torch.equal(s32, s64):
            raise SystemExit(f"layer {il}: float32 and float64 select different experts")
    gap64 = model64.min_topk_gap()

    logits.numpy().astype("<f4").tofile(os.path.join(args.out, "logits.f32"))
    exact.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(args.out, "logits64.f32"))
    with open(os.path.join(args.out, "tokens.txt"), "w") as f:
        f.write(" ".join(str(t) for t in tokens.tolist()) + "\n")

    sensitivity = mistakes(path, tokens, exact.to(torch.float32))

    diff = float((logits.double() - exact).abs().max())
    manifest = {
        "model": MODEL_FILE,
        "arch": llada_moe.ARCH,
        "config": CONFIG,
        "prompt": PROMPT,
        "n_tokens": len(tokens),
        "n_vocab": CONFIG["n_vocab"],
        "logits": {"file": "logits.f32", "dtype": "float32 little-endian",
                   "shape": [len(tokens), CONFIG["n_vocab"]], "computed_in": "float32"},
        "logits64": {"file": "logits64.f32", "dtype": "float32 little-endian",
                     "shape": [len(tokens), CONFIG["n_vocab"]], "computed_in": "float64"},
        "seed": seed,
        "seeds_rejected": seed - 1,
        "min_topk_gap": sig(gap),
        "min_topk_gap_float64": sig(gap64),
        "max_abs_logit": sig(float(exact.abs().max())),
        "max_abs_diff_f32_vs_f64": sig(diff),
        "max_abs_logit_change_if": sensitivity,
        "command": COMMAND,
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"seed {seed}: min top-K gap {gap:.4g} (float64 {gap64:.4g}), max|logit| "
          f"{manifest['max_abs_logit']}, float32 vs float64 {diff:.3g}; wrote {args.out}")
    print("max logit change if: " + ", ".join(f"{k} {v}" for k, v in sensitivity.items()))


if __name__ == "__main__":
    main()
