"""Reference forward of llama.cpp's `llada-moe` architecture, read straight from a GGUF.

The C++ engine's `llada-moe` forward is checked against this module (tests/data/moe/, written by
train/make_moe_fixtures.py). It follows llama.cpp's graph for the architecture (a bidirectional
transformer whose feed-forward block is a mixture of experts with softmax gating):

  * x = token_embd[token];
  * per layer: h = rmsnorm(x) * attn_norm; q, k, v = h projected (no biases); every head of q and
    of k is RMS-normalised over its head_dim and scaled by attn_q_norm / attn_k_norm (one
    [head_dim] vector shared by the heads); then NEOX-style RoPE on the first n_rot dims of each
    head, pair (i, i + n_rot/2) rotated by p * base^(-2i/n_rot) at position p; attention without
    a mask, query head h reading KV head h // (n_head / n_head_kv), scale 1/sqrt(head_dim);
    x += attn @ attn_output^T;
  * the MoE block: h = rmsnorm(x) * ffn_norm; probs = softmax(h @ ffn_gate_inp^T) over the E
    experts; the K most probable experts are used with weights probs[selected] (not
    renormalised; times expert_weights_scale when the key is present and neither 0 nor 1);
    expert e computes down_e(silu(gate_e h) * up_e h); x += the weighted sum;
  * logits = (rmsnorm(x) * output_norm) @ output^T (token_embd when output.weight is absent).

Every RMS norm uses the file's layer_norm_rms_epsilon. The computation runs in the dtype given
to load() (float32 by default, as the engine computes; float64 for checking); the RoPE angles are
computed in float64 and cast, as in train/model.py. After a forward, `router_probs` holds each
layer's [L, E] router probabilities and `selected` each layer's [L, K] chosen experts, so a
fixture can prove that its routing decisions are not close calls (min_topk_gap).
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from gguf_io import GGUFReader
from model import rope_tables

ARCH = "llada-moe"


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) over the last axis, times `weight`."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def apply_rope_neox(x, cos, sin, n_rot):
    """x: [L, H, hd]; rotates pairs (i, i + n_rot/2) of the first n_rot dims of every head by the
    per-position angles (cos/sin: [L, n_rot/2]); the dims from n_rot on pass through."""
    half = n_rot // 2
    a = x[..., :half]
    b = x[..., half:n_rot]
    c = cos[:, None, :]
    s = sin[:, None, :]
    return torch.cat((a * c - b * s, a * s + b * c, x[..., n_rot:]), dim=-1)


def min_topk_gap(router_probs, k):
    """The smallest difference, over every row of every layer, between the k-th and the
    (k+1)-th largest router probability: how far the routing is from a tie."""
    gaps = [math.inf]
    for p in router_probs:
        if p.shape[-1] > k:
            top = torch.topk(p.to(torch.float64), k + 1, dim=-1).values
            gaps.append(float((top[:, k - 1] - top[:, k]).min()))
    return min(gaps)


class LladaMoE(nn.Module):
    """The `llada-moe` forward over weights held as buffers (nothing here is trained)."""

    def __init__(self, hp, tensors, dtype=torch.float32):
        super().__init__()
        self.hp = hp
        self.dtype = dtype
        for name, arr in tensors.items():
            # Buffer names may not contain dots; the GGUF name is recoverable by the mapping.
            self.register_buffer(name.replace(".", "__"), torch.from_numpy(np.array(arr)).to(dtype))
        # Not a llada-moe setting; llama.cpp's build_moe_ffn can renormalise the chosen experts'
        # weights to sum to one, and the fixture script uses this switch to measure how much a
        # renormalising engine would be off.
        self.norm_w = False
        self.router_probs = []
        self.selected = []

    def t(self, name):
        return getattr(self, name.replace(".", "__"))

    def has(self, name):
        return hasattr(self, name.replace(".", "__"))

    def attention(self, x, il, cos, sin):
        hp = self.hp
        L = x.shape[0]
        hd = hp["head_dim"]
        eps = hp["eps"]
        p = f"blk.{il}."
        h = rms_norm(x, self.t(p + "attn_norm.weight"), eps)
        q = (h @ self.t(p + "attn_q.weight").T).view(L, hp["n_head"], hd)
        k = (h @ self.t(p + "attn_k.weight").T).view(L, hp["n_head_kv"], hd)
        v = (h @ self.t(p + "attn_v.weight").T).view(L, hp["n_head_kv"], hd)
        q = rms_norm(q, self.t(p + "attn_q_norm.weight"), eps)
        k = rms_norm(k, self.t(p + "attn_k_norm.weight"), eps)
        q = apply_rope_neox(q, cos, sin, hp["n_rot"])
        k = apply_rope_neox(k, cos, sin, hp["n_rot"])
        group = hp["n_head"] // hp["n_head_kv"]
        if group > 1:  # query head h reads KV head h // group
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # [H, L, hd]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        a = torch.softmax(scores, dim=-1) @ v
        return a.transpose(0, 1).reshape(L, hp["n_head"] * hd) @ self.t(p + "attn_output.weight").T

    def moe(self, x, il):
        hp = self.hp
        p = f"blk.{il}."
        h = rms_norm(x, self.t(p + "ffn_norm.weight"), hp["eps"])
        probs = torch.softmax(h @ self.t(p + "ffn_gate_inp.weight").T, dim=-1)  # [L, E]
        w, sel = torch.topk(probs, hp["n_expert_used"], dim=-1)  # descending
        if self.norm_w:
            w = w / w.sum(-1, keepdim=True)
        scale = hp["expert_weights_scale"]
        if scale != 0.0 and scale != 1.0:
            w = w * scale
        self.router_probs.append(probs.detach())
        self.selected.append(sel)
        gate = self.t(p + "ffn_gate_exps.weight")  # [E, F, d]
        up = self.t(p + "ffn_up_exps.weight")  # [E, F, d]
        down = self.t(p + "ffn_down_exps.weight")  # [E, d, F]
        # The experts' outputs are summed in slot order (most probable first), as llama.cpp adds
        # them; each row gathers its own expert's matrices.
        out = torch.zeros_like(x)
        for j in range(sel.shape[1]):
            e = sel[:, j]
            g = torch.einsum("lfd,ld->lf", gate[e], h)
            u = torch.einsum("lfd,ld->lf", up[e], h)
            y = torch.einsum("ldf,lf->ld", down[e], F.silu(g) * u)
            out = out + w[:, j, None] * y
        return out

    def forward(self, tokens):
        """tokens: LongTensor [L] -> logits [L, n_vocab] in the model's dtype, unshifted."""
        hp = self.hp
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        L = tokens.shape[0]
        self.router_probs = []
        self.selected = []
        cos, sin = rope_tables(L, hp["n_rot"], hp["rope_base"], self.dtype)
        x = self.t("token_embd.weight")[tokens]
        for il in range(hp["n_layer"]):
            x = x + self.attention(x, il, cos, sin)
            x = x + self.moe(x, il)
        x = rms_norm(x, self.t("output_norm.weight"), hp["eps"])
        out = self.t("output.weight") if self.has("output.weight") else self.t("token_embd.weight")
        return x @ out.T

    def min_topk_gap(self):
        """min_topk_gap of the last forward's routing."""
        return min_topk_gap(self.router_probs, self.hp["n_expert_used"])


def hparams(md, tensors):
    """The forward's hyper-parameters from the `llada-moe.*` metadata, checked against the
    tensors' shapes."""
    a = ARCH
    if md.get("general.architecture") != a:
        raise ValueError(f"architecture {md.get('general.architecture')!r} is not {a}")
    d = md[f"{a}.embedding_length"]
    n_head = md[f"{a}.attention.head_count"]
    head_dim = d // n_head
    hp = dict(
        n_layer=md[f"{a}.block_count"],
        ctx=md[f"{a}.context_length"],
        d=d,
        n_head=n_head,
        n_head_kv=md.get(f"{a}.attention.head_count_kv", n_head),
        head_dim=head_dim,
        eps=md[f"{a}.attention.layer_norm_rms_epsilon"],
        rope_base=md.get(f"{a}.rope.freq_base", 10000.0),
        n_rot=md.get(f"{a}.rope.dimension_count", head_dim),
        n_expert=md[f"{a}.expert_count"],
        n_expert_used=md[f"{a}.expert_used_count"],
        expert_weights_scale=float(md.get(f"{a}.expert_weights_scale", 0.0)),
        n_vocab=tensors["token_embd.weight"].shape[0],
    )
    # llama.cpp falls back to feed_forward_length / expert_used_count when the expert length is
    # absent (and, failing both, the tensors' shape decides); the tensors must agree with it.
    n_ff_exp = md.get(f"{a}.expert_feed_forward_length")
    if n_ff_exp is None and f"{a}.feed_forward_length" in md:
        n_ff_exp = md[f"{a}.feed_forward_length"] // hp["n_expert_used"]
    if n_ff_exp is None:
        n_ff_exp = tensors["blk.0.ffn_gate_exps.weight"].shape[1]
    hp["n_ff_exp"] = n_ff_exp
    if d % n_head or n_head % hp["n_head_kv"] or hp["n_rot"] % 2 or hp["n_rot"] > head_dim:
        raise ValueError(f"inconsistent attention shape: {hp}")
    if not 0 < hp["n_expert_used"] <= hp["n_expert"]:
        raise ValueError(f"expert_used_count {hp['n_expert_used']} of {hp['n_expert']} experts")
    E = hp["n_expert"]
    expect = {"token_embd.weight": (hp["n_vocab"], d), "output_norm.weight": (d,)}
    if "output.weight" in tensors:
        expect["output.weight"] = (hp["n_vocab"], d)
    for il in range(hp["n_layer"]):
        p = f"blk.{il}."
        expect.update({
            p + "attn_norm.weight": (d,),
            p + "attn_q.weight": (n_head * head_dim, d),
            p + "attn_k.weight": (hp["n_head_kv"] * head_dim, d),
            p + "attn_v.weight": (hp["n_head_kv"] * head_dim, d),
            p + "attn_output.weight": (d, n_head * head_dim),
            p + "attn_q_norm.weight": (head_dim,),
            p + "attn_k_norm.weight": (head_dim,),
            p + "ffn_norm.weight": (d,),
            p + "ffn_gate_inp.weight": (E, d),
            p + "ffn_gate_exps.weight": (E, n_ff_exp, d),
            p + "ffn_up_exps.weight": (E, n_ff_exp, d),
            p + "ffn_down_exps.weight": (E, d, n_ff_exp),
        })
    for name, shape in expect.items():
        if name not in tensors:
            raise ValueError(f"tensor {name} is missing")
        if tuple(tensors[name].shape) != shape:
            raise ValueError(f"tensor {name} has shape {tuple(tensors[name].shape)}, not {shape}")
    return hp


def load(path, dtype=torch.float32):
    """The `llada-moe` GGUF at `path` (F32/F16 tensors) as a LladaMoE computing in `dtype`."""
    r = GGUFReader(path)
    hp = hparams(r.metadata, r.tensors)
    top = ("token_embd.weight", "output.weight", "output_norm.weight")
    used = [n for n in r.tensors if n in top or n.startswith("blk.")]
    return LladaMoE(hp, {n: r.tensors[n] for n in used}, dtype).eval()
