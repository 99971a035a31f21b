"""The LLaDA-architecture transformer in PyTorch, with exactly the C++ engine's forward pass.

One module serves training, export and the parity reference:
  * arch "llada": bidirectional attention (masked diffusion model);
  * arch "llama": causal attention (the autoregressive twin).
Weights are kept in the layout llama.cpp's converter writes to GGUF, so export is a rename:
RoPE is applied NORM-style (adjacent pairs (2i, 2i+1) of each head) to Q/K exactly as stored, and
query head h reads KV head h // (n_head / n_head_kv). The forward follows the semantics that
../shared/fixtures/llamacpp/README.md confirms for llama.cpp (RMSNorm, no biases, SwiGLU,
untied or tied output head).
"""

import math
from dataclasses import dataclass, asdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from gguf_io import GGUFReader, GGUFWriter, GGML_F32, UINT32, INT32, FLOAT32, STRING


@dataclass
class Config:
    arch: str = "llada"  # "llada" (bidirectional) or "llama" (causal)
    n_vocab: int = 259
    d: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int = 4
    ffn: int = 352
    ctx: int = 256
    rope_base: float = 10000.0
    eps: float = 1e-5
    tied: bool = False  # True: the output head is token_embd (no output.weight)

    @property
    def head_dim(self):
        return self.d // self.n_head

    @property
    def causal(self):
        return self.arch == "llama"


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(n_pos, head_dim, base, dtype=torch.float32):
    """cos/sin of theta_i = p * base^(-2i/head_dim), computed in float64 then cast."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    inv = base ** (-2.0 * i / head_dim)
    ang = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rope(x, cos, sin):
    """x: [B, L, H, hd]; rotates adjacent pairs (2i, 2i+1): (a, b) -> (a cos - b sin, a sin + b cos)."""
    a = x[..., 0::2]
    b = x[..., 1::2]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    out = torch.stack((a * c - b * s, a * s + b * c), dim=-1)
    return out.flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hd = cfg.head_dim
        self.cfg = cfg
        self.attn_norm = RMSNorm(cfg.d, cfg.eps)
        self.wq = nn.Linear(cfg.d, cfg.n_head * hd, bias=False)
        self.wk = nn.Linear(cfg.d, cfg.n_kv_head * hd, bias=False)
        self.wv = nn.Linear(cfg.d, cfg.n_kv_head * hd, bias=False)
        self.wo = nn.Linear(cfg.n_head * hd, cfg.d, bias=False)
        self.ffn_norm = RMSNorm(cfg.d, cfg.eps)
        self.w_gate = nn.Linear(cfg.d, cfg.ffn, bias=False)
        self.w_up = nn.Linear(cfg.d, cfg.ffn, bias=False)
        self.w_down = nn.Linear(cfg.ffn, cfg.d, bias=False)

    def forward(self, x, cos, sin, attn_bias):
        cfg = self.cfg
        B, L, _ = x.shape
        hd = cfg.head_dim
        h = self.attn_norm(x)
        q = apply_rope(self.wq(h).view(B, L, cfg.n_head, hd), cos, sin)
        k = apply_rope(self.wk(h).view(B, L, cfg.n_kv_head, hd), cos, sin)
        v = self.wv(h).view(B, L, cfg.n_kv_head, hd)
        group = cfg.n_head // cfg.n_kv_head
        if group > 1:  # query head h reads KV head h // group
            k = k.repeat_interleave(group, dim=2)
            v = v.repeat_interleave(group, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, L, hd]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        if attn_bias is not None:
            scores = scores + attn_bias
        a = torch.softmax(scores, dim=-1) @ v
        x = x + self.wo(a.transpose(1, 2).reshape(B, L, cfg.n_head * hd))
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.d % cfg.n_head == 0 and cfg.n_head % cfg.n_kv_head == 0
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg.n_vocab, cfg.d)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.output_norm = RMSNorm(cfg.d, cfg.eps)
        self.output = None if cfg.tied else nn.Linear(cfg.d, cfg.n_vocab, bias=False)
        self._rope = None

    def init_weights(self, std=0.02, seed=None):
        g = torch.Generator().manual_seed(seed) if seed is not None else None
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            else:
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=g) * std)
        # Scale the residual projections down with depth (GPT-2 style) for stable training.
        for b in self.blocks:
            with torch.no_grad():
                b.wo.weight.mul_(1.0 / math.sqrt(2 * self.cfg.n_layer))
                b.w_down.weight.mul_(1.0 / math.sqrt(2 * self.cfg.n_layer))

    def rope(self, L, device, dtype):
        if self._rope is None or self._rope[0].shape[0] < L or self._rope[0].dtype != dtype:
            cos, sin = rope_tables(max(L, self.cfg.ctx), self.cfg.head_dim, self.cfg.rope_base, dtype)
            self._rope = (cos.to(device), sin.to(device))
        return self._rope[0][:L], self._rope[1][:L]

    def forward(self, tokens, positions=None, key_mask=None):
        """tokens: [B, L] int64 -> logits [B, L, n_vocab].

        positions: [L] int64 RoPE positions (default 0..L-1). key_mask: [L, L] bool, True where
        row r may attend to key c (default: all, or causal); the engine's row addressing (a row
        that writes no K/V, a shadow row that may not see one key) is a key mask."""
        B, L = tokens.shape
        x = self.tok_embd(tokens)
        cos, sin = self.rope(L if positions is None else int(positions.max()) + 1, x.device, x.dtype)
        if positions is not None:
            cos, sin = cos[positions], sin[positions]
        attn_bias = None
        if self.cfg.causal:
            attn_bias = torch.full((L, L), float("-inf"), device=x.device, dtype=x.dtype).triu(1)
        if key_mask is not None:
            extra = torch.zeros((L, L), device=x.device, dtype=x.dtype)
            extra[~key_mask] = float("-inf")
            attn_bias = extra if attn_bias is None else attn_bias + extra
        for b in self.blocks:
            x = b(x, cos, sin, attn_bias)
        x = self.output_norm(x)
        w = self.tok_embd.weight if self.output is None else self.output.weight
        return x @ w.t()

    def n_params(self):
        return sum(p.numel() for p in self.parameters())


# GGUF tensor name -> attribute path in Model.
def _tensor_names(cfg):
    names = {"token_embd.weight": "tok_embd.weight", "output_norm.weight": "output_norm.weight"}
    if not cfg.tied:
        names["output.weight"] = "output.weight"
    per_layer = {
        "attn_norm": "attn_norm", "attn_q": "wq", "attn_k": "wk", "attn_v": "wv",
        "attn_output": "wo", "ffn_norm": "ffn_norm", "ffn_gate": "w_gate", "ffn_up": "w_up",
        "ffn_down": "w_down",
    }
    for i in range(cfg.n_layer):
        for g, m in per_layer.items():
            names[f"blk.{i}.{g}.weight"] = f"blocks.{i}.{m}.weight"
    return names


def export_gguf(model, path, vocab_meta, name="tiny-llada", extra_meta=None):
    """Writes the model as a GGUF in llama.cpp's layout (arch `llada` or `llama`), F32 weights.

    vocab_meta: dict of tokenizer.ggml.* keys -> (type, value[, elem_type]), see vocab.py.
    """
    cfg = model.cfg
    a = cfg.arch
    w = GGUFWriter()
    w.add_string("general.architecture", a)
    w.add_string("general.name", name)
    w.add_u32(f"{a}.block_count", cfg.n_layer)
    w.add_u32(f"{a}.context_length", cfg.ctx)
    w.add_u32(f"{a}.embedding_length", cfg.d)
    w.add_u32(f"{a}.feed_forward_length", cfg.ffn)
    w.add_u32(f"{a}.attention.head_count", cfg.n_head)
    w.add_u32(f"{a}.attention.head_count_kv", cfg.n_kv_head)
    w.add_f32(f"{a}.attention.layer_norm_rms_epsilon", cfg.eps)
    w.add_f32(f"{a}.rope.freq_base", cfg.rope_base)
    w.add_u32(f"{a}.rope.dimension_count", cfg.head_dim)
    w.add_u32(f"{a}.vocab_size", cfg.n_vocab)
    if a == "llada":
        w.add_bool(f"{a}.attention.causal", False)
        w.add_bool("diffusion.shift_logits", False)
    w.add_u32("general.file_type", 0)
    for key, spec in vocab_meta.items():
        w.add(key, *spec)
    for key, spec in (extra_meta or {}).items():
        w.add(key, *spec)
    state = model.state_dict()
    for gname, attr in _tensor_names(cfg).items():
        w.add_tensor(gname, state[attr].detach().cpu().numpy().astype(np.float32), GGML_F32)
    w.write(path)


def load_gguf(path):
    """Loads a GGUF written by export_gguf (or llama.cpp's converter, F32/F16) into a Model."""
    r = GGUFReader(path)
    md = r.metadata
    a = md["general.architecture"]
    if a not in ("llada", "llama"):
        raise ValueError(f"{path}: architecture {a!r} is not llada or llama")
    tok = r.tensors["token_embd.weight"]
    d = md[f"{a}.embedding_length"]
    n_head = md.get(f"{a}.attention.head_count", d // 64)
    cfg = Config(
        arch=a,
        n_vocab=tok.shape[0],
        d=d,
        n_layer=md[f"{a}.block_count"],
        n_head=n_head,
        n_kv_head=md.get(f"{a}.attention.head_count_kv", n_head),
        ffn=md[f"{a}.feed_forward_length"],
        ctx=md[f"{a}.context_length"],
        rope_base=md.get(f"{a}.rope.freq_base", 10000.0),
        eps=md[f"{a}.attention.layer_norm_rms_epsilon"],
        tied="output.weight" not in r.tensors,
    )
    model = Model(cfg)
    state = {attr: torch.from_numpy(np.array(r.tensors[g])) for g, attr in _tensor_names(cfg).items()}
    model.load_state_dict(state, strict=True)
    return model, md
