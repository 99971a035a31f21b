"""Unit tests of the PyTorch references: generate() and train/model.py's forward.

    cd train && /usr/bin/python3 -m unittest            (discovers reference/test_reference.py)
    /usr/bin/python3 train/reference/test_reference.py

Covers get_num_transfer_tokens edge cases, generate()'s invariants (exactly the scheduled count
committed per step, nothing outside the current block, the prompt never changes), determinism and
noise record/replay, that the committed tests/data/decode fixtures still replay, and that
model.py reproduces llama.cpp's logits on ../shared/fixtures (skipped when that folder is absent).
"""

import json
import os
import sys
import unittest

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import torch

from reference.generate import (RecordingNoise, ReplayNoise, TorchNoise, generate,
                                get_num_transfer_tokens, guided_logits)
from model import Config, Model, load_gguf
from vocab import BOS, MASK, N_VOCAB

torch.set_num_threads(1)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DECODE_DATA = os.path.join(REPO, "tests", "data", "decode")
SHARED_FIXTURES = os.environ.get("LLADA_SHARED_FIXTURES",
                                 os.path.join(os.path.dirname(REPO), "shared", "fixtures"))


def tiny_model(seed=0, n_kv_head=4, arch="llada"):
    cfg = Config(arch=arch, n_vocab=N_VOCAB, d=32, n_layer=2, n_head=4, n_kv_head=n_kv_head,
                 ffn=64, ctx=128)
    m = Model(cfg)
    m.init_weights(std=0.5, seed=seed)
    return m.eval()


class NoMaskToken:
    """Model wrapper that never predicts the mask id (a trained LLaDA does not): committing a
    mask id would leave the position masked and break the per-step bookkeeping tested here."""

    def __init__(self, model):
        self.model = model
        self.inputs = []

    def __call__(self, x):
        self.inputs.append(x.clone())
        logits = self.model(x).clone()
        logits[..., MASK] = -1e4
        return logits


def prompts(batch, length, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 256, (batch, length - 1), generator=g)
    return torch.cat([torch.full((batch, 1), BOS), ids], dim=1)


class NumTransferTokens(unittest.TestCase):
    def schedule(self, n_masked, steps, width=None):
        width = width if width is not None else max(n_masked, 1)
        m = torch.zeros(1, width, dtype=torch.bool)
        m[0, :n_masked] = True
        return get_num_transfer_tokens(m, steps)[0].tolist()

    def test_even_split(self):
        self.assertEqual(self.schedule(8, 4), [2, 2, 2, 2])
        self.assertEqual(self.schedule(8, 8), [1] * 8)
        self.assertEqual(self.schedule(8, 1), [8])

    def test_remainder_goes_to_the_first_steps(self):
        self.assertEqual(self.schedule(10, 4), [3, 3, 2, 2])
        self.assertEqual(self.schedule(16, 5), [4, 3, 3, 3, 3])
        self.assertEqual(self.schedule(7, 3), [3, 2, 2])

    def test_more_steps_than_masks(self):
        self.assertEqual(self.schedule(2, 5), [1, 1, 0, 0, 0])
        self.assertEqual(self.schedule(0, 3, width=4), [0, 0, 0])

    def test_rows_independent_and_dtype(self):
        m = torch.tensor([[True] * 6 + [False] * 2, [True] * 8, [False] * 8])
        n = get_num_transfer_tokens(m, 3)
        self.assertEqual(n.dtype, torch.int64)
        self.assertEqual(n.tolist(), [[2, 2, 2], [3, 3, 2], [0, 0, 0]])

    def test_matches_definition(self):
        for n_masked in range(0, 20):
            for steps in range(1, 12):
                s = self.schedule(n_masked, steps, width=20)
                self.assertEqual(sum(s), n_masked)
                self.assertEqual(s, sorted(s, reverse=True))
                self.assertLessEqual(max(s) - min(s), 1)


class GenerateInvariants(unittest.TestCase):
    SETTINGS = [  # (gen, block, steps, temperature, cfg, remasking)
        (16, 16, 16, 0.0, 0.0, "low_confidence"),
        (16, 8, 6, 0.0, 0.0, "low_confidence"),
        (16, 4, 12, 0.7, 0.0, "low_confidence"),
        (16, 4, 20, 0.0, 0.0, "random"),  # 5 steps for 4 masks: one step commits nothing
        (12, 6, 4, 1.0, 1.5, "random"),
        (12, 3, 8, 0.0, 0.5, "low_confidence"),
    ]

    def test_invariants(self):
        model = NoMaskToken(tiny_model(seed=1))
        B, P = 3, 5
        prompt = prompts(B, P, seed=2)
        for gen, block, steps, temperature, cfg, remasking in self.SETTINGS:
            with self.subTest(gen=gen, block=block, steps=steps, T=temperature, cfg=cfg,
                              remasking=remasking):
                model.inputs.clear()
                trace = []
                out = generate(model, prompt, steps, gen, block, temperature=temperature,
                               cfg_scale=cfg, remasking=remasking, noise=TorchNoise(seed=3),
                               trace=trace)
                self.assertEqual(out.shape, (B, P + gen))
                self.assertTrue(torch.equal(out[:, :P], prompt))
                self.assertFalse(bool((out == MASK).any()))
                spb = steps // (gen // block)
                sched = get_num_transfer_tokens(torch.ones(1, block, dtype=torch.bool), spb)[0]
                self.assertEqual(len(trace), steps)
                self.assertEqual(len(model.inputs), steps)  # one forward per step (CFG batched)
                committed = [set() for _ in range(B)]
                for i, e in enumerate(trace):
                    self.assertEqual((e["block"], e["step"]), (i // spb, i % spb))
                    lo, hi = P + e["block"] * block, P + (e["block"] + 1) * block
                    x_in = model.inputs[i][:B]
                    self.assertTrue(torch.equal(x_in[:, :P], prompt))  # prompt never changes
                    if cfg > 0:  # unconditional half: prompt masked, the rest as in x
                        un = model.inputs[i][B:]
                        self.assertTrue(bool((un[:, :P] == MASK).all()))
                        self.assertTrue(torch.equal(un[:, P:], x_in[:, P:]))
                    for j in range(B):
                        pos, tok = e["positions"][j], e["tokens"][j]
                        self.assertEqual(len(pos), int(sched[e["step"]]))
                        self.assertEqual(pos, sorted(pos))
                        self.assertTrue(all(lo <= p < hi for p in pos), (pos, lo, hi))
                        self.assertTrue(all(int(x_in[j, p]) == MASK for p in pos))
                        self.assertFalse(committed[j] & set(pos))
                        committed[j] |= set(pos)
                        self.assertEqual([int(out[j, p]) for p in pos], tok)
                for j in range(B):
                    self.assertEqual(committed[j], set(range(P, P + gen)))

    def test_rejects_bad_arguments(self):
        model = NoMaskToken(tiny_model())
        prompt = prompts(1, 3)
        with self.assertRaises(ValueError):
            generate(model, prompt, 8, 16, 6)  # gen not a multiple of block
        with self.assertRaises(ValueError):
            generate(model, prompt, 6, 16, 4)  # steps not a multiple of the 4 blocks
        with self.assertRaises(ValueError):
            generate(model, prompt, 0, 16, 16)
        with self.assertRaises(ValueError):
            generate(model, prompt, 8, 16, 16, remasking="top_k")

    def test_cfg_formula(self):
        model = tiny_model(seed=4)
        x = prompts(2, 4, seed=5)
        x = torch.cat([x, torch.full((2, 6), MASK)], dim=1)
        prompt_index = x != MASK
        un_x = x.clone()
        un_x[:, :4] = MASK
        c, u = model(x), model(un_x)
        got = guided_logits(model, x, prompt_index, 1.5, MASK)
        torch.testing.assert_close(got, u + 2.5 * (c - u), rtol=1e-5, atol=1e-5)
        self.assertTrue(torch.equal(guided_logits(model, x, prompt_index, 0.0, MASK), model(x)))


class Determinism(unittest.TestCase):
    def setUp(self):
        self.model = NoMaskToken(tiny_model(seed=6, n_kv_head=2))
        self.prompt = prompts(2, 6, seed=7)

    def run_gen(self, noise, **kw):
        trace = []
        args = dict(steps=8, gen_length=16, block_length=8)
        args.update(kw)
        out = generate(self.model, self.prompt, noise=noise, trace=trace, **args)
        return out, trace

    def test_t0_low_confidence_draws_nothing_and_ignores_the_seed(self):
        rec = RecordingNoise(seed=1)
        out1, tr1 = self.run_gen(rec)
        out2, tr2 = self.run_gen(TorchNoise(seed=99))
        self.assertEqual(rec.count, 0)
        self.assertTrue(torch.equal(out1, out2))
        self.assertEqual(tr1, tr2)
        out3, tr3 = self.run_gen(ReplayNoise([]))  # would raise on any draw
        self.assertEqual(tr1, tr3)

    def test_record_and_replay(self):
        L, V, B = 6 + 16, N_VOCAB, 2
        for T, remasking, cfg in ((0.7, "low_confidence", 0.0), (1.0, "random", 1.5),
                                  (0.0, "random", 0.0)):
            with self.subTest(T=T, remasking=remasking, cfg=cfg):
                rec = RecordingNoise(seed=5)
                kw = dict(temperature=T, remasking=remasking, cfg_scale=cfg)
                out1, tr1 = self.run_gen(rec, **kw)
                expected = 8 * ((B * L * V if T > 0 else 0) + (B * L if remasking == "random"
                                                                else 0))
                self.assertEqual(rec.count, expected)
                replay = ReplayNoise(rec.values())
                out2, tr2 = self.run_gen(replay, **kw)
                self.assertEqual(replay.remaining, 0)
                self.assertTrue(torch.equal(out1, out2))
                self.assertEqual(tr1, tr2)
                out3, _ = self.run_gen(RecordingNoise(seed=5), **kw)  # same seed, same result
                self.assertTrue(torch.equal(out1, out3))
                out4, _ = self.run_gen(TorchNoise(seed=6), **kw)  # another seed: another result
                self.assertFalse(torch.equal(out1, out4))

    def test_random_remasking_draws_float32(self):
        # Upstream draws the remasking uniforms with torch.rand's default dtype (float32); the
        # recording must hold those exact values so float64 replay casts back without change.
        rec = RecordingNoise(seed=2)
        self.run_gen(rec, remasking="random")
        v = rec.values()
        self.assertTrue(torch.equal(v, v.to(torch.float32).to(torch.float64)))


def read_f32(path, n_vocab):
    return np.fromfile(path, dtype="<f4").reshape(-1, n_vocab)


class LlamaCppParity(unittest.TestCase):
    def test_model_matches_llamacpp_f32_logits(self):
        d = os.path.join(SHARED_FIXTURES, "llamacpp", "llada-tiny-f32")
        if not os.path.isdir(d):
            self.skipTest(f"{d} is absent")
        model, _ = load_gguf(os.path.join(d, "model.gguf"))
        with open(os.path.join(d, "tokens.txt")) as f:
            tokens = torch.tensor([int(t) for t in f.read().split()])
        with torch.no_grad():
            got = model.eval()(tokens[None])[0].numpy()
        want = read_f32(os.path.join(d, "logits.f32"), model.cfg.n_vocab)
        self.assertEqual(got.shape, want.shape)
        rel = np.abs(got - want).max() / np.abs(want).max()
        self.assertLess(rel, 2e-6, f"max |diff| / max |logit| = {rel:.3g}")


class DecodeFixtures(unittest.TestCase):
    """The committed fixtures still follow from the committed models and noise."""

    def setUp(self):
        if not os.path.isfile(os.path.join(DECODE_DATA, "cases.json")):
            self.skipTest(f"{DECODE_DATA}/cases.json is absent")
        self.models = {}

    def model(self, file):
        if file not in self.models:
            self.models[file] = load_gguf(os.path.join(DECODE_DATA, file))[0].eval()
        return self.models[file]

    def test_forward_parity_files(self):
        names = sorted(f[:-5] for f in os.listdir(DECODE_DATA) if f.endswith(".gguf"))
        self.assertGreaterEqual(len(names), 3)
        for name in names:
            with self.subTest(model=name):
                model = self.model(name + ".gguf")
                with open(os.path.join(DECODE_DATA, name + ".tokens.txt")) as f:
                    tokens = torch.tensor([int(t) for t in f.read().split()])
                want = read_f32(os.path.join(DECODE_DATA, name + ".logits.f32"), N_VOCAB)
                with torch.no_grad():
                    got = model(tokens[None])[0].numpy()
                self.assertEqual(got.shape, want.shape)
                self.assertLess(np.abs(got - want).max() / np.abs(want).max(), 1e-6)

    def test_cases_replay(self):
        with open(os.path.join(DECODE_DATA, "cases.json")) as f:
            cases = json.load(f)
        for c in cases:
            with self.subTest(case=c["name"]):
                values = []
                if c["noise"] is not None:
                    values = np.fromfile(os.path.join(DECODE_DATA, c["noise"]), dtype="<f8")
                self.assertEqual(len(values), c["noise_count"])
                noise = ReplayNoise(values.copy() if len(values) else [])
                trace = []
                out = generate(self.model(c["model"]), torch.tensor([c["prompt"]]), c["steps"],
                               c["gen"], c["block"], temperature=c["temperature"],
                               cfg_scale=c["cfg"], remasking=c["remasking"],
                               mask_id=c["mask_id"], noise=noise, trace=trace)
                self.assertEqual(noise.remaining, 0)
                got = [dict(block=e["block"], step=e["step"], positions=e["positions"][0],
                            tokens=e["tokens"][0]) for e in trace]
                self.assertEqual(got, c["trajectory"])
                self.assertEqual(out[0].tolist(), c["final"])


class DreamSampler(unittest.TestCase):
    """reference/dream.py: the schedule, the filters and the committed fixtures' replay."""

    def test_timesteps_are_torch_linspace(self):
        from reference import dream
        for steps, eps in ((16, 1e-3), (512, 1e-3), (7, 0.1)):
            self.assertTrue(torch.equal(dream.timesteps(steps, eps),
                                        torch.linspace(1, eps, steps + 1)))

    def test_top_p_keeps_the_token_that_crosses(self):
        from reference import dream
        logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
        p = dream.filtered_probs(logits, 0.0, 0.6, None)
        self.assertEqual((p[0] > 0).tolist(), [True, True, False, False])
        p = dream.filtered_probs(logits, 0.0, 0.45, None)  # the first token alone crosses
        self.assertEqual((p[0] > 0).tolist(), [True, False, False, False])
        p = dream.filtered_probs(torch.tensor([[2.0, 1.0, 1.0, 0.0]]), 0.0, None, 2)
        self.assertEqual((p[0] > 0).tolist(), [True, True, True, False])  # ties at the k-th kept

    def test_confidence_schedule_and_the_last_step(self):
        # steps == gen: int(n * (1 - s/t)) is 0 first (0.999 of one), and the last step takes
        # every remaining mask.
        from reference import dream
        model = Model(Config(n_vocab=N_VOCAB, d=16, n_layer=1, ffn=32, n_head=2, n_kv_head=2,
                             ctx=64)).eval()
        prompt = torch.tensor([[BOS, 65, 66]])
        trace = []
        out = dream.generate(model, prompt, 8, 8, MASK, alg="entropy", trace=trace)
        counts = [len(e["transfer"]) for e in trace]
        self.assertEqual(counts[0], 0)
        self.assertEqual(sum(counts), 8)
        self.assertFalse(bool((out == MASK).any()))
        self.assertTrue(torch.equal(out[0, :3], prompt[0]))

    def test_committed_fixtures_replay(self):
        from reference import dream
        from make_decode_fixtures import make_model
        path = os.path.join(REPO, "tests", "data", "dream", "cases.json")
        with open(path) as f:
            cases = json.load(f)
        models = {}
        for c in cases:
            name = c["model"][:-len(".gguf")]
            models.setdefault(name, make_model(name))
            noise = None
            if c["noise"]:
                noise = ReplayNoise(np.fromfile(os.path.join(os.path.dirname(path), c["noise"]),
                                                dtype="<f8"))
            trace = []
            out = dream.generate(models[name], torch.tensor([c["prompt"]]), c["gen"], c["steps"],
                                 c["mask_id"], alg=c["alg"], temperature=c["temperature"],
                                 top_p=c["top_p"], top_k=c["top_k"], alg_temp=c["alg_temp"],
                                 eps=c["eps"], shift=c["shift"], noise=noise, trace=trace)
            self.assertEqual(trace, c["trajectory"], c["name"])
            self.assertEqual(out[0].tolist(), c["final"], c["name"])


if __name__ == "__main__":
    unittest.main()
