"""Writes tests/data/llada2/: a tiny random LLaDA 2.x model, its Ling 2.0 twin, reference logits.

    /usr/bin/python3 train/make_llada2_fixtures.py [--out DIR]

The C++ engine's `llada2` and `bailingmoe2` forwards are held to train/reference/llada2.py on
these files, so that a clone without ../shared checks them too:
  llada2-tiny.gguf       random F32 weights in bailingmoe2's layout: 3 layers (the first dense),
                         d 64, 4 query heads over 2 KV heads of 16 dims with 8 rotated, 16
                         experts of 32 in 4 groups (2 kept), 4 used, a shared expert of 32,
                         expert_weights_scale 2.5, renormalised weights; the byte vocabulary
  bailingmoe2-tiny.gguf  the same weights as the causal architecture
  tokens.txt             the canvas: BOS, a prompt's bytes, 16 mask ids
  logits-block4.f32      the reference's float64 logits, rounded to float32 [n_tokens][n_vocab],
                         llada2 with attention blocks of 4
  logits-block32.f32     the same with blocks of 32 (the file's default)
  logits-causal.f32      bailingmoe2's causal logits
  manifest.json          shapes, the seed, the routing margin, what plausible mistakes cost

Norm weights are 1 + 0.1 N(0, 1) and the router's weights N(0, 0.5), the selection biases
N(0, 0.05): each row's routing prefers clearly different experts and groups. The seed is the
first from 1 on whose canvas every routing decision (which groups, which experts) has a margin
of at least MIN_GAP in all three settings. Deterministic: running twice writes identical bytes.
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
from reference import llada2  # noqa: E402

REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "llada2")
COMMAND = "/usr/bin/python3 train/make_llada2_fixtures.py"

CONFIG = dict(n_layer=3, d=64, n_head=4, n_head_kv=2, head_dim=16, n_rot=8, n_expert=16,
              n_expert_used=4, n_group=4, n_group_used=2, n_ff_exp=32, n_ff_shexp=32, n_ff=96,
              n_dense=1, ctx=256, rope_base=600000.0, eps=1e-6, scale=2.5,
              n_vocab=vocab.N_VOCAB)
PROMPT = "What is two plus three?"
N_MASKS = 16
MIN_GAP = 1e-3
MAX_SEED_TRIES = 1000
SETTINGS = (("llada2", 4, "logits-block4.f32"), ("llada2", 32, "logits-block32.f32"),
            ("bailingmoe2", None, "logits-causal.f32"))


def random_weights(cfg, seed):
    rng = np.random.default_rng(seed)
    d, hd = cfg["d"], cfg["head_dim"]
    E = cfg["n_expert"]

    def matrix(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    t = {"token_embd.weight": matrix(cfg["n_vocab"], d)}
    for il in range(cfg["n_layer"]):
        p = f"blk.{il}."
        t[p + "attn_norm.weight"] = norm(d)
        t[p + "attn_qkv.weight"] = matrix((cfg["n_head"] + 2 * cfg["n_head_kv"]) * hd, d)
        t[p + "attn_q_norm.weight"] = norm(hd)
        t[p + "attn_k_norm.weight"] = norm(hd)
        t[p + "attn_output.weight"] = matrix(d, cfg["n_head"] * hd)
        t[p + "ffn_norm.weight"] = norm(d)
        if il < cfg["n_dense"]:
            t[p + "ffn_gate.weight"] = matrix(cfg["n_ff"], d)
            t[p + "ffn_up.weight"] = matrix(cfg["n_ff"], d)
            t[p + "ffn_down.weight"] = matrix(d, cfg["n_ff"])
            continue
        t[p + "ffn_gate_inp.weight"] = matrix(E, d, std=0.5)
        t[p + "exp_probs_b.bias"] = matrix(E, std=0.05)
        t[p + "ffn_gate_exps.weight"] = matrix(E, cfg["n_ff_exp"], d)
        t[p + "ffn_up_exps.weight"] = matrix(E, cfg["n_ff_exp"], d)
        t[p + "ffn_down_exps.weight"] = matrix(E, d, cfg["n_ff_exp"])
        t[p + "ffn_gate_shexp.weight"] = matrix(cfg["n_ff_shexp"], d)
        t[p + "ffn_up_shexp.weight"] = matrix(cfg["n_ff_shexp"], d)
        t[p + "ffn_down_shexp.weight"] = matrix(d, cfg["n_ff_shexp"])
    t["output_norm.weight"] = norm(d)
    t["output.weight"] = matrix(cfg["n_vocab"], d)
    return t


def write_gguf(path, arch, cfg, tensors):
    """`tensors` as an F32 GGUF of `arch` with the keys llama.cpp's bailingmoe2 loader reads."""
    a = arch
    w = GGUFWriter()
    w.add_string("general.architecture", a)
    w.add_string("general.name", f"{a}-tiny")
    w.add_u32(f"{a}.block_count", cfg["n_layer"])
    w.add_u32(f"{a}.context_length", cfg["ctx"])
    w.add_u32(f"{a}.embedding_length", cfg["d"])
    w.add_u32(f"{a}.feed_forward_length", cfg["n_ff"])
    w.add_u32(f"{a}.attention.head_count", cfg["n_head"])
    w.add_u32(f"{a}.attention.head_count_kv", cfg["n_head_kv"])
    w.add_u32(f"{a}.attention.key_length", cfg["head_dim"])
    w.add_u32(f"{a}.attention.value_length", cfg["head_dim"])
    w.add_u32(f"{a}.rope.dimension_count", cfg["n_rot"])
    w.add_f32(f"{a}.rope.freq_base", cfg["rope_base"])
    w.add_f32(f"{a}.attention.layer_norm_rms_epsilon", cfg["eps"])
    w.add_u32(f"{a}.expert_count", cfg["n_expert"])
    w.add_u32(f"{a}.expert_used_count", cfg["n_expert_used"])
    w.add_u32(f"{a}.expert_feed_forward_length", cfg["n_ff_exp"])
    w.add_u32(f"{a}.expert_shared_feed_forward_length", cfg["n_ff_shexp"])
    w.add_u32(f"{a}.expert_shared_count", 1)
    w.add_u32(f"{a}.expert_group_count", cfg["n_group"])
    w.add_u32(f"{a}.expert_group_used_count", cfg["n_group_used"])
    w.add_f32(f"{a}.expert_weights_scale", cfg["scale"])
    w.add_bool(f"{a}.expert_weights_norm", True)
    w.add_u32(f"{a}.expert_gating_func", 2)
    w.add_u32(f"{a}.leading_dense_block_count", cfg["n_dense"])
    w.add_u32(f"{a}.vocab_size", cfg["n_vocab"])
    w.add_u32("general.file_type", 0)
    for key, spec in vocab.gguf_metadata().items():
        w.add(key, *spec)
    for name, arr in tensors.items():
        w.add_tensor(name, arr, GGML_F32)
    w.write(path)


def canvas():
    return [vocab.BOS] + vocab.encode(PROMPT) + [vocab.MASK] * N_MASKS


def sig(x):
    return float(f"{x:.4g}")


def forward_all(out_dir, tokens):
    """{logits file: float64 logits} and the smallest routing margin over the three settings."""
    logits, gap = {}, float("inf")
    for arch, block, fname in SETTINGS:
        m = llada2.load(os.path.join(out_dir, f"{arch}-tiny.gguf"))
        with torch.no_grad():
            logits[fname] = m(tokens, block=block)
        gap = min(gap, m.min_selection_gap())
    return logits, gap


def mistakes(out_dir, tokens, base):
    """How far plausible engine mistakes move the block-4 logits (max |change|)."""
    path = os.path.join(out_dir, "llada2-tiny.gguf")

    def change(edit, block=4):
        m = llada2.load(path)
        edit(m)
        with torch.no_grad():
            return sig(float((m(tokens, block=block) - base).abs().max()))

    def no_bias(m):
        for il in range(CONFIG["n_dense"], CONFIG["n_layer"]):
            m.t(f"blk.{il}.exp_probs_b.bias").zero_()

    def no_groups(m):
        m.hp = dict(m.hp, n_group=0)

    def unnormalised(m):
        m.hp = dict(m.hp, norm_w=False)

    def no_shared(m):
        m.hp = dict(m.hp, shared=False)

    return {
        "selection_bias_ignored": change(no_bias),
        "expert_groups_ignored": change(no_groups),
        "weights_not_renormalised": change(unnormalised),
        "shared_expert_dropped": change(no_shared),
        "blocks_of_8_instead_of_4": change(lambda m: None, block=8),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    tokens = torch.tensor(canvas())
    for seed in range(1, MAX_SEED_TRIES + 1):
        weights = random_weights(CONFIG, seed)
        for arch in ("llada2", "bailingmoe2"):
            write_gguf(os.path.join(args.out, f"{arch}-tiny.gguf"), arch, CONFIG, weights)
        logits, gap = forward_all(args.out, tokens)
        if gap >= MIN_GAP:
            break
        print(f"seed {seed}: routing margin {gap:.3g} < {MIN_GAP}, next seed")
    else:
        raise SystemExit(f"no seed in 1..{MAX_SEED_TRIES} routes decisively")
    for fname, l in logits.items():
        l.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(args.out, fname))
    with open(os.path.join(args.out, "tokens.txt"), "w") as f:
        f.write(" ".join(str(t) for t in tokens.tolist()) + "\n")
    base = logits["logits-block4.f32"]
    manifest = {
        "models": ["llada2-tiny.gguf", "bailingmoe2-tiny.gguf"],
        "config": CONFIG,
        "prompt": PROMPT,
        "n_tokens": len(tokens),
        "logits": {f: {"arch": a, "block": b, "dtype": "float32 little-endian",
                       "computed_in": "float64"} for a, b, f in SETTINGS},
        "seed": seed,
        "min_routing_margin": sig(gap),
        "max_abs_logit": sig(float(base.abs().max())),
        "max_abs_logit_change_if": mistakes(args.out, tokens, base),
        "command": COMMAND,
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"seed {seed}: routing margin {gap:.4g}, max|logit| {manifest['max_abs_logit']}; "
          f"wrote {args.out}")
    print("max logit change if: " + ", ".join(
        f"{k} {v}" for k, v in manifest["max_abs_logit_change_if"].items()))


if __name__ == "__main__":
    main()
