"""Unit tests of the `llada-moe` reference forward (reference/llada_moe.py).

    cd train && /usr/bin/python3 -m unittest reference.test_llada_moe

The reference is held to a second implementation written here as plain loops in float64 (token
by token, head by head, expert by expert, each RoPE pair by its own angle), on random models that
exercise grouped-query attention, partial rotary dims, an expert weight scale, every expert used
and a tied output head; and the committed fixtures in tests/data/moe are checked to be what
train/make_moe_fixtures.py writes from the reference.
"""

import json
import math
import os
import sys
import tempfile
import unittest

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import torch

from reference import llada_moe
import make_moe_fixtures as fixtures
from gguf_io import GGUFReader
import vocab

torch.set_num_threads(1)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MOE_DATA = os.path.join(REPO, "tests", "data", "moe")


def plain_forward(path, tokens):
    """The `llada-moe` forward as loops over float64 NumPy vectors: logits [L, n_vocab]."""
    r = GGUFReader(path)
    md = r.metadata
    T = {name: arr.astype(np.float64) for name, arr in r.tensors.items()}
    a = "llada-moe"
    d = md[f"{a}.embedding_length"]
    n_head = md[f"{a}.attention.head_count"]
    n_kv = md[f"{a}.attention.head_count_kv"]
    hd = d // n_head
    n_rot = md.get(f"{a}.rope.dimension_count", hd)
    base = md.get(f"{a}.rope.freq_base", 10000.0)
    eps = md[f"{a}.attention.layer_norm_rms_epsilon"]
    E = md[f"{a}.expert_count"]
    K = md[f"{a}.expert_used_count"]
    scale = md.get(f"{a}.expert_weights_scale", 0.0)

    def norm(v, w):
        return v / math.sqrt(float(np.dot(v, v)) / len(v) + eps) * w

    def rope(v, pos):
        out = v.copy()
        half = n_rot // 2
        for i in range(half):
            theta = pos * base ** (-2.0 * i / n_rot)
            c, s = math.cos(theta), math.sin(theta)
            out[i] = v[i] * c - v[i + half] * s
            out[i + half] = v[i] * s + v[i + half] * c
        return out

    L = len(tokens)
    x = [T["token_embd.weight"][t].copy() for t in tokens]
    for il in range(md[f"{a}.block_count"]):
        p = f"blk.{il}."
        qs, ks, vs = [], [], []
        for pos in range(L):
            h = norm(x[pos], T[p + "attn_norm.weight"])
            q = T[p + "attn_q.weight"] @ h
            k = T[p + "attn_k.weight"] @ h
            v = T[p + "attn_v.weight"] @ h
            qs.append([rope(norm(q[j * hd:(j + 1) * hd], T[p + "attn_q_norm.weight"]), pos)
                       for j in range(n_head)])
            ks.append([rope(norm(k[j * hd:(j + 1) * hd], T[p + "attn_k_norm.weight"]), pos)
                       for j in range(n_kv)])
            vs.append([v[j * hd:(j + 1) * hd] for j in range(n_kv)])
        new_x = []
        for i in range(L):
            heads = []
            for j in range(n_head):
                g = j // (n_head // n_kv)
                scores = [float(np.dot(qs[i][j], ks[c][g])) / math.sqrt(hd) for c in range(L)]
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                total = sum(e)
                heads.append(sum((e[c] / total) * vs[c][g] for c in range(L)))
            xi = x[i] + T[p + "attn_output.weight"] @ np.concatenate(heads)
            h = norm(xi, T[p + "ffn_norm.weight"])
            logits = T[p + "ffn_gate_inp.weight"] @ h
            e = [math.exp(v - max(logits)) for v in logits]
            probs = [v / sum(e) for v in e]
            chosen = sorted(range(E), key=lambda n: -probs[n])[:K]
            out = np.zeros(d)
            for n in chosen:
                gate = T[p + "ffn_gate_exps.weight"][n] @ h
                up = T[p + "ffn_up_exps.weight"][n] @ h
                act = np.array([gv / (1.0 + math.exp(-gv)) * uv for gv, uv in zip(gate, up)])
                w = probs[n] * (scale if scale not in (0.0, 1.0) else 1.0)
                out += w * (T[p + "ffn_down_exps.weight"][n] @ act)
            new_x.append(xi + out)
        x = new_x
    head = T.get("output.weight", T["token_embd.weight"])
    return np.stack([head @ norm(xi, T["output_norm.weight"]) for xi in x])


def small_config(**kw):
    cfg = dict(n_layer=2, d=32, n_head=2, n_head_kv=1, n_expert=4, n_expert_used=2, n_ff_exp=16,
               n_ff=32, ctx=64, rope_base=10000.0, eps=1e-5, n_vocab=vocab.N_VOCAB)
    cfg.update(kw)
    return cfg


class AgainstPlainLoops(unittest.TestCase):
    def check(self, cfg, seed, tied=False, scale=None):
        tensors = fixtures.random_weights(cfg, seed)
        if tied:
            del tensors["output.weight"]
        tokens = [vocab.BOS] + vocab.encode("moe!") + [vocab.MASK] * 5
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.gguf")
            fixtures.write_gguf(path, cfg, tensors, expert_weights_scale=scale)
            want = plain_forward(path, tokens)
            model = llada_moe.load(path, dtype=torch.float64)
            with torch.no_grad():
                got = model(torch.tensor(tokens)).numpy()
        self.assertEqual(got.shape, (len(tokens), cfg["n_vocab"]))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
        return got

    def test_gqa_partial_rotary_and_weight_scale(self):
        self.check(small_config(n_rot=8), seed=11, scale=2.5)

    def test_mha_all_experts_tied_output(self):
        self.check(small_config(n_head=4, n_head_kv=4, n_expert=3, n_expert_used=3), seed=12,
                   tied=True)

    def test_scale_of_one_or_zero_is_not_applied(self):
        cfg = small_config()
        plain = self.check(cfg, seed=13)
        np.testing.assert_array_equal(self.check(cfg, seed=13, scale=1.0), plain)
        np.testing.assert_array_equal(self.check(cfg, seed=13, scale=0.0), plain)
        self.assertGreater(np.abs(self.check(cfg, seed=13, scale=2.0) - plain).max(), 1e-6)


@unittest.skipUnless(os.path.exists(os.path.join(MOE_DATA, "manifest.json")),
                     "tests/data/moe has not been written")
class CommittedFixtures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(MOE_DATA, "manifest.json")) as f:
            cls.manifest = json.load(f)
        cls.path = os.path.join(MOE_DATA, cls.manifest["model"])
        with open(os.path.join(MOE_DATA, "tokens.txt")) as f:
            cls.tokens = [int(t) for t in f.read().split()]
        shape = cls.manifest["logits"]["shape"]
        cls.logits = np.fromfile(os.path.join(MOE_DATA, "logits.f32"), dtype="<f4").reshape(shape)
        cls.logits64 = np.fromfile(os.path.join(MOE_DATA, "logits64.f32"),
                                   dtype="<f4").reshape(shape)

    def test_canvas(self):
        self.assertEqual(self.tokens, fixtures.canvas())
        self.assertEqual(self.manifest["logits"]["shape"], [len(self.tokens), vocab.N_VOCAB])

    def test_reference_reproduces_the_logits_and_routing_margin(self):
        model = llada_moe.load(self.path)
        with torch.no_grad():
            got = model(torch.tensor(self.tokens)).numpy()
        np.testing.assert_allclose(got, self.logits, rtol=0, atol=1e-6)
        self.assertGreaterEqual(model.min_topk_gap(), fixtures.MIN_TOPK_GAP)
        model64 = llada_moe.load(self.path, dtype=torch.float64)
        with torch.no_grad():
            got64 = model64(torch.tensor(self.tokens)).numpy()
        np.testing.assert_array_equal(got64.astype(np.float32), self.logits64)
        for s32, s64 in zip(model.selected, model64.selected):
            self.assertTrue(torch.equal(s32, s64))

    def test_plain_loops_agree_with_the_float64_logits(self):
        want = plain_forward(self.path, self.tokens)
        np.testing.assert_allclose(self.logits64, want, rtol=0, atol=1e-7)


if __name__ == "__main__":
    unittest.main()
