"""Reference forward of LLaDA 2.x (`llada2`) and Ling 2.0 (`bailingmoe2`), read from a GGUF.

The C++ engine's forward of both architectures is held to this module (tests/data/llada2/,
written by train/make_llada2_fixtures.py), and this module to the independent oracle logits of
../shared/fixtures/llada2 where they exist (reference/test_llada2.py). The layer, as
docs/llada2.md describes it:

  * x = token_embd[token];
  * per layer: h = rmsnorm(x) * attn_norm; q, k, v = the row blocks of h @ attn_qkv^T (all Q
    heads, then the K heads, then the V heads); every Q and K head RMS-normalised over head_dim
    and scaled by attn_q_norm / attn_k_norm; NEOX RoPE on the first n_rot dims of each head
    (pair (i, i + n_rot/2) turned by p * base^(-2i/n_rot)); attention with scale 1/sqrt(hd),
    query head h reading KV head h // (n_head / n_head_kv), under the mask: causal
    (bailingmoe2) or block-causal with blocks of `block` positions counted from 0 (llada2: a
    position sees its own block and every earlier one); x += attn @ attn_output^T;
  * the FFN on h = rmsnorm(x) * ffn_norm: the first leading_dense_block_count layers a SwiGLU
    down(silu(gate h) * up h); the others a mixture of experts: scores = sigmoid(h @
    ffn_gate_inp^T); selection by scores + exp_probs_b among the expert_group_used_count groups
    (of expert_group_count consecutive-id groups) whose two best biased scores sum highest; the
    expert_used_count best experts there; weights = their unbiased scores, divided by their sum
    (at least 2^-14) when expert_weights_norm, times expert_weights_scale; x += the weighted sum
    of the chosen experts' SwiGLUs + the shared expert's SwiGLU;
  * logits = (rmsnorm(x) * output_norm) @ output^T.

Computes in the dtype given to load() (float64 to check). After a forward, `selection_gaps`
holds, per MoE layer, each row's smallest margin between a chosen and an unchosen expert's
biased score within the allowed groups, and between the last allowed and the first excluded
group's score, so a fixture can prove its routing is far from a tie.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from gguf_io import GGUFReader
from model import rope_tables
from reference.llada_moe import apply_rope_neox, rms_norm

ARCHS = ("llada2", "bailingmoe2")


def block_causal_mask(n, block):
    """[n, n] bool: query i sees key j when j's block is not after i's (block 0: causal)."""
    i = torch.arange(n)
    if block <= 0:
        return i[None, :] <= i[:, None]
    return (i[None, :] // block) <= (i[:, None] // block)


class Llada2(nn.Module):
    """The forward over weights held as buffers (nothing here is trained)."""

    def __init__(self, hp, tensors, dtype=torch.float64):
        super().__init__()
        self.hp = hp
        self.dtype = dtype
        for name, arr in tensors.items():
            self.register_buffer(name.replace(".", "__"), torch.from_numpy(np.array(arr)).to(dtype))
        self.selection_gaps = []

    def t(self, name):
        return getattr(self, name.replace(".", "__"))

    def attention(self, x, il, cos, sin, mask):
        hp = self.hp
        L, hd, H, Hkv = x.shape[0], hp["head_dim"], hp["n_head"], hp["n_head_kv"]
        p = f"blk.{il}."
        h = rms_norm(x, self.t(p + "attn_norm.weight"), hp["eps"])
        qkv = h @ self.t(p + "attn_qkv.weight").T
        q = qkv[:, : H * hd].view(L, H, hd)
        k = qkv[:, H * hd: (H + Hkv) * hd].view(L, Hkv, hd)
        v = qkv[:, (H + Hkv) * hd:].view(L, Hkv, hd)
        q = rms_norm(q, self.t(p + "attn_q_norm.weight"), hp["eps"])
        k = rms_norm(k, self.t(p + "attn_k_norm.weight"), hp["eps"])
        q = apply_rope_neox(q, cos, sin, hp["n_rot"])
        k = apply_rope_neox(k, cos, sin, hp["n_rot"])
        group = H // Hkv
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # [H, L, hd]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        scores = scores.masked_fill(~mask[None], float("-inf"))
        a = torch.softmax(scores, dim=-1) @ v
        return a.transpose(0, 1).reshape(L, H * hd) @ self.t(p + "attn_output.weight").T

    def swiglu(self, h, gate, up, down):
        return (F.silu(h @ gate.T) * (h @ up.T)) @ down.T

    def route(self, h, il):
        """(weights [L, K], chosen experts [L, K], most preferred first) of layer il."""
        hp = self.hp
        p = f"blk.{il}."
        scores = torch.sigmoid(h @ self.t(p + "ffn_gate_inp.weight").T)  # [L, E]
        biased = scores + self.t(p + "exp_probs_b.bias")
        E, G, Gu, K = hp["n_expert"], hp["n_group"], hp["n_group_used"], hp["n_expert_used"]
        gaps = []
        if G > 1 and Gu < G:
            per = E // G
            grouped = biased.view(-1, G, per)
            gscore = torch.topk(grouped, min(2, per), dim=-1).values.sum(-1)  # [L, G]
            order = torch.sort(gscore, dim=-1, descending=True, stable=True)
            keep = order.indices[:, :Gu]
            allowed = torch.zeros_like(gscore, dtype=torch.bool).scatter_(1, keep, True)
            gaps.append(order.values[:, Gu - 1] - order.values[:, Gu])
            masked = biased.masked_fill(~allowed.repeat_interleave(per, dim=1), float("-inf"))
        else:
            masked = biased
        order = torch.sort(masked, dim=-1, descending=True, stable=True)
        chosen = order.indices[:, :K]
        if K < E:
            nxt = order.values[:, K]
            gaps.append(order.values[:, K - 1] - torch.where(torch.isinf(nxt), torch.inf, nxt))
        self.selection_gaps.append(torch.stack(gaps).min(0).values if gaps else None)
        w = torch.gather(scores, 1, chosen)
        if hp["norm_w"]:
            w = w / w.sum(-1, keepdim=True).clamp(min=6.103515625e-5)
        if hp["scale"] not in (0.0, 1.0):
            w = w * hp["scale"]
        return w, chosen

    def moe(self, h, il):
        p = f"blk.{il}."
        w, chosen = self.route(h, il)
        gate = self.t(p + "ffn_gate_exps.weight")  # [E, F, d]
        up = self.t(p + "ffn_up_exps.weight")
        down = self.t(p + "ffn_down_exps.weight")  # [E, d, F]
        out = torch.zeros_like(h)
        for j in range(chosen.shape[1]):  # summed in the order chosen, as llama.cpp adds them
            e = chosen[:, j]
            g = torch.einsum("lfd,ld->lf", gate[e], h)
            u = torch.einsum("lfd,ld->lf", up[e], h)
            out = out + w[:, j, None] * torch.einsum("ldf,lf->ld", down[e], F.silu(g) * u)
        if self.hp["shared"]:
            out = out + self.swiglu(h, self.t(p + "ffn_gate_shexp.weight"),
                                    self.t(p + "ffn_up_shexp.weight"),
                                    self.t(p + "ffn_down_shexp.weight"))
        return out

    def forward(self, tokens, block=None):
        """tokens [L] -> logits [L, n_vocab], unshifted. block: llada2's attention blocks
        (default 32); ignored for bailingmoe2 (causal)."""
        hp = self.hp
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        L = tokens.shape[0]
        self.selection_gaps = []
        causal = hp["arch"] == "bailingmoe2"
        mask = block_causal_mask(L, 0 if causal else (block or 32))
        cos, sin = rope_tables(L, hp["n_rot"], hp["rope_base"], self.dtype)
        x = self.t("token_embd.weight")[tokens]
        for il in range(hp["n_layer"]):
            x = x + self.attention(x, il, cos, sin, mask)
            p = f"blk.{il}."
            h = rms_norm(x, self.t(p + "ffn_norm.weight"), hp["eps"])
            if il < hp["n_dense"]:
                x = x + self.swiglu(h, self.t(p + "ffn_gate.weight"), self.t(p + "ffn_up.weight"),
                                    self.t(p + "ffn_down.weight"))
            else:
                x = x + self.moe(h, il)
        x = rms_norm(x, self.t("output_norm.weight"), hp["eps"])
        return x @ self.t("output.weight").T

    def min_selection_gap(self):
        """The smallest routing margin of the last forward (inf without MoE layers)."""
        g = [float(x.min()) for x in self.selection_gaps if x is not None]
        return min(g) if g else math.inf


def hparams(md):
    a = md.get("general.architecture")
    if a not in ARCHS:
        raise ValueError(f"architecture {a!r} is not one of {ARCHS}")
    n_head = md[f"{a}.attention.head_count"]
    head_dim = md.get(f"{a}.attention.key_length", md[f"{a}.embedding_length"] // n_head)
    if md.get(f"{a}.expert_gating_func", 1) != 2:
        raise ValueError("this reference follows the sigmoid router (expert_gating_func 2)")
    return dict(
        arch=a,
        n_layer=md[f"{a}.block_count"],
        d=md[f"{a}.embedding_length"],
        n_head=n_head,
        n_head_kv=md.get(f"{a}.attention.head_count_kv", n_head),
        head_dim=head_dim,
        eps=md[f"{a}.attention.layer_norm_rms_epsilon"],
        rope_base=md.get(f"{a}.rope.freq_base", 10000.0),
        n_rot=md.get(f"{a}.rope.dimension_count", head_dim),
        n_expert=md[f"{a}.expert_count"],
        n_expert_used=md[f"{a}.expert_used_count"],
        n_group=md.get(f"{a}.expert_group_count", 0),
        n_group_used=md.get(f"{a}.expert_group_used_count", 0),
        norm_w=bool(md.get(f"{a}.expert_weights_norm", False)),
        scale=float(md.get(f"{a}.expert_weights_scale", 0.0)),
        n_dense=md.get(f"{a}.leading_dense_block_count", 0),
        shared=md.get(f"{a}.expert_shared_count", 0) > 0,
    )


def load(path, dtype=torch.float64):
    """The F32 `llada2` / `bailingmoe2` GGUF at `path` as a Llada2 computing in `dtype`."""
    r = GGUFReader(path)
    return Llada2(hparams(r.metadata), r.tensors, dtype).eval()
