"""Tests of the training side: objective, split, task answers, export round trip.

    /usr/bin/python3 -m unittest discover -s train -p 'test_train.py'
"""

import json
import os
import random
import re
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sft  # noqa: E402
import tasks  # noqa: E402
import tasks_real  # noqa: E402
import vocab  # noqa: E402
from model import Config, Model, load_gguf  # noqa: E402

torch.set_num_threads(1)


class TestObjective(unittest.TestCase):
    def test_mask_only_response(self):
        rows = [sft.encode_row("12+35=", tasks.add_answer(12, 35), "llada"),
                sft.encode_row("sort 55 44 33 22 11:", "11 22 33 44 55", "llada")]
        tokens, valid, resp = sft.collate(rows)
        g = torch.Generator().manual_seed(0)
        t = torch.ones(2)  # p = 1: every response position is masked
        noisy, masked, p = sft.llada_mask(tokens, resp, t, g)
        self.assertTrue(torch.equal(masked, resp))
        self.assertTrue(torch.equal(noisy[~resp], tokens[~resp]))  # prompt and padding intact
        self.assertTrue(bool((noisy[resp] == vocab.MASK).all()))
        # Response = GEN_LENGTH positions per row, the prompt (with BOS) never.
        self.assertEqual(resp.sum(1).tolist(), [tasks.GEN_LENGTH] * 2)
        plen0 = rows[0][1]
        self.assertFalse(bool(resp[0, :plen0].any()))
        for _ in range(20):  # any t: never a prompt or padding position
            noisy, masked, p = sft.llada_mask(tokens, resp, torch.rand(2, generator=g), g)
            self.assertFalse(bool((masked & ~resp).any()))

    def test_block_mask_is_the_block_decoding_canvas(self):
        # Two rows of different prompt lengths, response 16 in blocks of 4; every row block-wise.
        rows = [sft.encode_row("12+35=", "47", "llada", 16),
                sft.encode_row("sort 55 44 33:", "33 44 55", "llada", 16)]
        tokens, valid, resp = sft.collate(rows)
        g = torch.Generator().manual_seed(1)
        seen_blocks = set()
        for _ in range(200):
            t = torch.rand(2, generator=g)
            noisy, loss_at, weight = sft.block_mask(tokens, resp, t, 4, 1.0, g)
            for r, (_, plen) in enumerate(rows):
                m = (noisy[r] == vocab.MASK).tolist()
                self.assertFalse(any(m[:plen]))  # the prompt is never masked
                masked_blocks = [b for b in range(4) if any(m[plen + 4 * b:plen + 4 * b + 4])]
                if not bool(loss_at[r].any()):
                    # Block k drew no mask: what is masked is whole later blocks only.
                    for b in masked_blocks:
                        self.assertTrue(all(m[plen + 4 * b:plen + 4 * b + 4]))
                    self.assertEqual(masked_blocks, list(range(4 - len(masked_blocks), 4)))
                    continue
                k = masked_blocks[0]
                seen_blocks.add(k)
                # Every later block is all MASK, every earlier one clean.
                for b in range(k + 1, 4):
                    self.assertTrue(all(m[plen + 4 * b:plen + 4 * b + 4]))
                # Loss exactly on block k's masked positions, weighted 1 / (p * 4).
                for i in range(tokens.shape[1]):
                    in_k = plen + 4 * k <= i < plen + 4 * k + 4
                    self.assertEqual(bool(loss_at[r, i]), in_k and m[i])
                p = (1 - sft.EPS) * float(t[r]) + sft.EPS
                w = weight[r][loss_at[r]]
                if len(w):
                    self.assertTrue(torch.allclose(w, torch.full_like(w, 1 / (p * 4))))
        self.assertEqual(seen_blocks, {0, 1, 2, 3})
        # block_frac 0: the uniform process with LLaDA's weights 1 / (p * response length).
        t = torch.full((2,), 0.5)
        noisy, loss_at, weight = sft.block_mask(tokens, resp, t, 4, 0.0, g)
        self.assertTrue(torch.equal(loss_at, noisy == vocab.MASK))
        self.assertFalse(bool((loss_at & ~resp).any()))
        p = (1 - sft.EPS) * 0.5 + sft.EPS
        self.assertTrue(torch.allclose(weight[loss_at], torch.full_like(weight[loss_at], 1 / (p * 16))))

    def test_response_padded_with_eos(self):
        ids, plen = sft.encode_row("1+1=", "02 => 2", "llada")
        self.assertEqual(ids[0], vocab.BOS)
        self.assertEqual(plen, 5)
        self.assertEqual(len(ids) - plen, tasks.GEN_LENGTH)
        self.assertEqual(ids[plen:plen + 7], vocab.encode("02 => 2"))
        self.assertTrue(all(i == vocab.EOS for i in ids[plen + 7:]))
        ids, plen = sft.encode_row("1+1=", "02 => 2", "llama")
        self.assertEqual(ids[plen:], vocab.encode("02 => 2") + [vocab.EOS])

    def test_loss_hand_computation(self):
        # 2 rows, L = 4, V = 3. Row 0: prompt 1 position, response 3; row 1: prompt 2, response 2.
        torch.manual_seed(0)
        logits = torch.randn(2, 4, 3)
        tokens = torch.tensor([[0, 1, 2, 0], [1, 1, 0, 2]])
        resp = torch.tensor([[False, True, True, True], [False, False, True, True]])
        masked = torch.tensor([[False, True, False, True], [False, False, True, False]])
        p = torch.tensor([0.5, 0.25])[:, None].expand(2, 4)
        got = sft.llada_loss_from_logits(logits, tokens, masked, p, resp, n_rows=2)

        def ce(i, j):
            return -torch.log_softmax(logits[i, j], -1)[tokens[i, j]].item()

        row0 = (ce(0, 1) / 0.5 + ce(0, 3) / 0.5) / 3  # / response length 3
        row1 = (ce(1, 2) / 0.25) / 2  # / response length 2
        self.assertAlmostEqual(got.item(), (row0 + row1) / 2, places=5)

    def test_t_sampling(self):
        g = torch.Generator().manual_seed(1)
        for strat in (False, True):
            t = sft.sample_t(1000, g, strat)
            self.assertTrue(bool(((t >= 0) & (t < 1)).all()))
            self.assertAlmostEqual(t.mean().item(), 0.5, delta=0.05)
        t = sft.sample_t(8, g, True)  # one draw per stratum
        self.assertEqual(sorted((t * 8).floor().long().tolist()), list(range(8)))

    def test_ar_loss(self):
        torch.manual_seed(0)
        logits = torch.randn(1, 4, 3)
        tokens = torch.tensor([[0, 1, 2, 1]])
        resp = torch.tensor([[False, False, True, True]])
        got = sft.ar_loss_from_logits(logits, tokens, resp, n_tokens=2).item()
        want = -(torch.log_softmax(logits[0, 1], -1)[2] + torch.log_softmax(logits[0, 2], -1)[1]) / 2
        self.assertAlmostEqual(got, want.item(), places=5)

    def test_forward_padded_equals_rows_alone(self):
        for arch in ("llada", "llama"):
            cfg = Config(arch=arch, d=32, n_layer=2, n_head=4, n_kv_head=2, ffn=64)
            m = Model(cfg)
            m.init_weights(seed=3)
            rows = [([vocab.BOS, 1, 2, 3, 4, 5], 3), ([vocab.BOS, 7, 8], 2)]
            tokens, valid, _ = sft.collate(rows)
            with torch.no_grad():
                padded = sft.forward_padded(m, tokens, valid)
                for i, (ids, _) in enumerate(rows):
                    alone = m(torch.tensor([ids]))[0]
                    self.assertTrue(torch.allclose(padded[i, :len(ids)], alone, atol=1e-5))


W = 4  # operand width of add/sub (tasks.WIDTH, restated: this checker is independent)


def _check_add(prompt, answer):
    sa, sb = re.fullmatch(r"(\d{4})\+(\d{4})=", prompt).groups()
    a, b = int(sa), int(sb)
    work, result = answer.split(" => ")
    assert re.fullmatch(r"\d{5}", result) and int(result) == a + b, (prompt, answer)
    carry = 0
    entries = work.split(",")
    assert len(entries) == W
    for i, e in enumerate(entries):
        assert re.fullmatch(r"\d\d", e), (prompt, e)
        s = a // 10 ** i % 10 + b // 10 ** i % 10 + carry
        assert int(e) == s, (prompt, answer)
        carry = s // 10


def _check_sub(prompt, answer):
    sa, sb = re.fullmatch(r"(\d{4})-(\d{4})=", prompt).groups()
    a, b = int(sa), int(sb)
    work, result = answer.split(" => ")
    assert a >= b and re.fullmatch(r"\d{4}", result) and int(result) == a - b, (prompt, answer)
    borrow = 0
    entries = work.split(",")
    assert len(entries) == W
    for i, e in enumerate(entries):
        out, d = map(int, re.fullmatch(r"([01])(\d)", e).groups())
        diff = a // 10 ** i % 10 - b // 10 ** i % 10 - borrow
        assert (out, d) == ((1, diff + 10) if diff < 0 else (0, diff)), (prompt, answer)
        borrow = out


def _check_sort(prompt, answer):
    assert prompt.startswith("sort ") and prompt.endswith(":")
    nums = [int(v) for v in prompt[5:-1].split()]
    assert len(nums) == 6
    assert [int(v) for v in answer.split(" ")] == sorted(nums)


def _check_cum(prompt, answer):
    # digit i of the answer is the sum of the first i + 1 prompt digits, mod 10 (computed as a
    # whole sum here, not as the generator's running update)
    m = re.fullmatch(r"cum (\d{20}):", prompt)
    assert m and re.fullmatch(r"\d{20}", answer), (prompt, answer)
    digits = [int(c) for c in m.group(1)]
    for i in range(20):
        assert int(answer[i]) == sum(digits[:i + 1]) % 10, (prompt, answer, i)


# The long suite, restated independently of tasks.py: the checkers parse an answer back and
# verify every entry from the prompt's numbers, not by re-running the generator.
LW = 10  # ladd/lmul operand width


def _check_columns(prompt, answer, op):
    if op == "+":
        sa, sb = re.fullmatch(r"(\d{10})\+(\d{10})=", prompt).groups()
        a, b, want = int(sa), int(sb), int(sa) + int(sb)
    else:
        sa, sm = re.fullmatch(r"(\d{10})\*([2-9])=", prompt).groups()
        a, b, want = int(sa), int(sm), int(sa) * int(sm)
    assert 90 <= len(answer) <= 127, (prompt, answer)
    work, result = answer.split(" => ")
    assert re.fullmatch(r"\d{11}", result) and int(result) == want, (prompt, answer)
    entries = work.split(",")
    assert len(entries) == LW, (prompt, answer)
    carry = 0
    for i, e in enumerate(entries):
        x, y, c, s = map(int, re.fullmatch(r"(\d)[+*](\d)\+(\d)=(\d\d)", e).groups())
        assert x == a // 10 ** i % 10 and c == carry, (prompt, answer, i)
        assert y == (b // 10 ** i % 10 if op == "+" else b), (prompt, answer, i)
        assert s == (x + y + c if op == "+" else x * y + c), (prompt, answer, i)
        carry = s // 10
    assert carry == want // 10 ** LW, (prompt, answer)


def _check_lsub(prompt, answer):
    sa, sb = re.fullmatch(r"(\d{10})-(\d{10})=", prompt).groups()
    a, b = int(sa), int(sb)
    assert a >= b and 90 <= len(answer) <= 127, (prompt, answer)
    work, result = answer.split(" => ")
    assert re.fullmatch(r"\d{10}", result) and int(result) == a - b, (prompt, answer)
    entries = work.split(",")
    assert len(entries) == LW, (prompt, answer)
    borrow = 0
    for i, e in enumerate(entries):
        x, y, c, out, d = map(int, re.fullmatch(r"(\d)-(\d)-(\d)=(\d)(\d)", e).groups())
        assert x == a // 10 ** i % 10 and y == b // 10 ** i % 10 and c == borrow, (prompt, i)
        assert 0 <= x - y - c + 10 * out <= 9 and d == x - y - c + 10 * out, (prompt, i)
        assert out == (1 if x - y - c < 0 else 0), (prompt, i)
        borrow = out
    assert borrow == 0, (prompt, answer)


def _check_lcum(prompt, answer):
    digits = re.fullmatch(r"lcum (\d{20}):", prompt).group(1)
    assert 90 <= len(answer) <= 127, (prompt, answer)
    s = 0
    entries = answer.split(",")
    assert len(entries) == 20, (prompt, answer)
    for c, e in zip(digits, entries):
        p, d, r = map(int, re.fullmatch(r"(\d)\+(\d)=(\d)", e).groups())
        assert p == s and d == int(c) and r == (s + d) % 10, (prompt, answer)
        s = r


CHECKS = {"add": _check_add, "sub": _check_sub, "sort": _check_sort, "cum": _check_cum,
          "ladd": lambda p, a: _check_columns(p, a, "+"),
          "lmul": lambda p, a: _check_columns(p, a, "*"),
          "lsub": _check_lsub, "lcum": _check_lcum}


class TestTasks(unittest.TestCase):
    def test_answers_correct(self):
        rng = random.Random(5)
        for t in tasks.TASKS + tasks.LONG_TASKS:
            for hard in (False, True):
                for _ in range(300):
                    prompt, answer, _ = tasks.GENERATORS[t](rng, hard=hard)
                    CHECKS[t](prompt, answer)

    def test_examples(self):
        self.assertEqual(tasks.add_answer(8213, 77), "10,09,02,08 => 08290")
        self.assertEqual(tasks.add_answer(12, 35), "07,04,00,00 => 00047")
        self.assertEqual(tasks.add_answer(9999, 1), "10,10,10,10 => 10000")
        self.assertEqual(tasks.sub_answer(5203, 867), "16,13,13,04 => 4336")
        self.assertEqual(tasks.sub_answer(1000, 999), "11,10,10,00 => 0001")
        self.assertEqual(tasks.cum_answer("83533740681241586834"), "81692933978045084259")
        self.assertEqual(tasks.cum_answer("99999999999999999999"), "98765432109876543210")

    def test_lengths_fit(self):
        rng = random.Random(6)
        for t in tasks.TASKS:
            for hard in (False, True):
                for _ in range(500):
                    prompt, answer, _ = tasks.GENERATORS[t](rng, hard=hard)
                    self.assertLess(len(vocab.encode(answer)), tasks.GEN_LENGTH)
                    self.assertLessEqual(len(vocab.encode(prompt)), 40)

    def test_long_examples(self):
        self.assertEqual(tasks.ladd_answer(4831920375, 960388214),
                         "5+4+0=09,7+1+0=08,3+2+0=05,0+8+0=08,2+8+0=10,9+3+1=13,1+0+1=02,"
                         "3+6+0=09,8+9+0=17,4+0+1=05 => 05792308589")
        self.assertEqual(tasks.lmul_answer(9999999999, 9),
                         ",".join(["9*9+0=81"] + ["9*9+8=89"] * 9) + " => 89999999991")
        self.assertEqual(tasks.lsub_answer(4831920375, 960388214),
                         "5-4-0=01,7-1-0=06,3-2-0=01,0-8-0=12,2-8-1=13,9-3-1=05,1-0-0=01,"
                         "3-6-0=17,8-9-1=18,4-0-1=03 => 3871532161")
        self.assertEqual(tasks.lcum_answer("83533740681241586834")[:23], "0+8=8,8+3=1,1+5=6,6+3=9")

    def test_long_lengths_fit(self):
        # Answers of 90-127 bytes in the 128-token canvas, prompt + canvas within the context
        rng = random.Random(7)
        cfg = Config(**sft.PRESETS["l"]["model"])
        names, gen, block = tasks.SUITES["long"]
        self.assertEqual((gen, block), (128, 32))
        self.assertEqual(sft.suite_of("l"), tasks.SUITES["long"])
        for t in names:
            lengths = set()
            for hard in (False, True):
                for _ in range(300):
                    prompt, answer, _ = tasks.GENERATORS[t](rng, hard=hard)
                    n = len(vocab.encode(answer))
                    lengths.add(n)
                    self.assertTrue(90 <= n < gen, (t, n))
                    self.assertLessEqual(1 + len(vocab.encode(prompt)) + gen, cfg.ctx)
            self.assertEqual(len(lengths), 1, t)  # a fixed layout per task
        ids, plen = sft.encode_row("0+0=", "9" * 100, "llada", gen)
        self.assertEqual(len(ids) - plen, gen)

    def test_long_stream_draws_the_long_tasks(self):
        stream = sft.TaskStream(0, tasks.LONG_TASKS)
        seen = {stream.next()[0] for _ in range(200)}
        self.assertEqual(seen, set(tasks.LONG_TASKS))

    def test_split_disjoint(self):
        test = {t: tasks.make_test_set(t, 200, 2024) for t in tasks.TASKS}
        for t, rows in test.items():
            self.assertTrue(all(tasks.is_test(t, r["prompt"]) for r in rows))
        stream = sft.TaskStream(0)
        seen = set()
        for _ in range(4000):
            task, prompt, _ = stream.next()
            self.assertFalse(tasks.is_test(task, prompt))
            seen.add((task, prompt))
        for t, rows in test.items():
            for r in rows:
                self.assertNotIn((t, r["prompt"]), seen)
        # the long suite: its test sets and its training stream (the LLaDA stage's seed)
        test = {t: tasks.make_test_set(t, 200, 2024) for t in tasks.LONG_TASKS}
        for t, rows in test.items():
            self.assertTrue(all(tasks.is_test(t, r["prompt"]) for r in rows))
        stream = sft.TaskStream("0|llada", tasks.LONG_TASKS)
        seen = {stream.next()[1:2] for _ in range(4000)}
        for t, rows in test.items():
            self.assertFalse(any((r["prompt"],) in seen for r in rows))

    def test_shipped_files(self):
        d = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "models", "tasks")
        if not os.path.isdir(d):
            self.skipTest("models/tasks not written")
        for name in os.listdir(d):
            if not name.endswith(".jsonl"):
                continue
            for r in tasks.read_jsonl(os.path.join(d, name)):
                self.assertTrue(tasks.is_test(r["task"], r["prompt"]), (name, r))
                if r["task"] in tasks.CHECKERS:  # the reference is one valid answer of many
                    self.assertTrue(tasks.score(r["answer"], None, r["task"], r["prompt"]), r)
                else:
                    CHECKS[r["task"]](r["prompt"], r["answer"])

    def test_score(self):
        self.assertTrue(tasks.score("  12 27 38 \n", "12 27 38"))
        self.assertFalse(tasks.score("12 27 39", "12 27 38"))
        ids = vocab.encode("12 27") + [vocab.EOS] + vocab.encode("junk")
        self.assertTrue(tasks.score(vocab.decode(ids), "12 27"))


class TestRealSuite(unittest.TestCase):
    """The `real` suite's generators and checkers (tasks_real.py)."""

    def test_hand_made_verdicts(self):
        # tests/data/checkers/cases.jsonl (train/make_checker_cases.py): right answers and near
        # misses with the verdict the rules give them; tests/checkers_test.cpp holds the C++
        # checkers to the same file.
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "tests", "data", "checkers", "cases.jsonl")
        n = 0
        for line in open(path, encoding="utf-8"):
            c = json.loads(line)
            got = tasks.score(c["text"], None, c["task"], c["prompt"])
            self.assertEqual(got, c["valid"], c["why"])
            n += 1
        self.assertGreaterEqual(n, 30)

    def test_generated_answers_pass_and_fit(self):
        rng = random.Random(11)
        # Every task of tasks_real.py, the untrained rpick too (its checker stays tested).
        for t in sorted(set(tasks.REAL_TASKS) | set(tasks_real.GENERATORS_R)):
            for hard in (False, True) if t not in ("rsent",) else (False,):
                for _ in range(300):
                    prompt, answer, _ = tasks.GENERATORS[t](rng, hard=hard)
                    self.assertTrue(tasks.score(answer, answer, t, prompt), (t, prompt, answer))
                    self.assertLess(len(vocab.encode(answer)), tasks_real.GEN_LENGTH_R)
                    sft.encode_row(prompt, answer, "llada", tasks_real.GEN_LENGTH_R)

    def test_hard_graphs_overlap_less(self):
        rng = random.Random(4)
        easy = [tasks_real.overlap(tasks.GENERATORS["rwalk"](rng)[2]["adj"]) for _ in range(200)]
        hard = [tasks_real.overlap(tasks.GENERATORS["rwalk"](rng, hard=True)[2]["adj"])
                for _ in range(200)]
        self.assertLess(sum(hard) / len(hard), sum(easy) / len(easy) - 3)


class TestExport(unittest.TestCase):
    def test_round_trip(self):
        for arch, tied in (("llada", False), ("llama", False), ("llada", True)):
            cfg = Config(arch=arch, d=32, n_layer=2, n_head=4, n_kv_head=2, ffn=64, tied=tied)
            m = Model(cfg)
            m.init_weights(seed=1)
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "m.gguf")
                sft.export(m, path, "t", {"description": "test"})
                m2, md = load_gguf(path)
            x = torch.tensor([[vocab.BOS] + vocab.encode("12+35=") + [vocab.MASK] * 8])
            with torch.no_grad():
                self.assertTrue(torch.equal(m(x), m2(x)))
            self.assertEqual(md["general.architecture"], arch)
            self.assertEqual(md["tokenizer.ggml.mask_token_id"], vocab.MASK)
            self.assertEqual(md["tokenizer.ggml.model"], "gpt2")
            # eps is stored as float32 (1e-5 -> 9.99999974e-06), which is also what the float32
            # forward adds in either case, so the logits stay bit-identical.
            self.assertAlmostEqual(m2.cfg.eps, m.cfg.eps, delta=1e-12)
            m2.cfg.eps = m.cfg.eps
            self.assertEqual(m2.cfg, m.cfg)


if __name__ == "__main__":
    unittest.main()


class TestLlada2Reference(unittest.TestCase):
    """train/reference/llada2.py (the forward the C++ llada2 / bailingmoe2 engine is held to)
    against the independent oracles of ../shared/fixtures/llada2, and the committed fixtures of
    tests/data/llada2 against what train/make_llada2_fixtures.py writes."""

    ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def test_reference_matches_the_shared_oracles(self):
        import numpy as np
        from reference import llada2
        shared = os.path.join(self.ROOT, "..", "shared", "fixtures", "llada2")
        if not os.path.isdir(shared):
            self.skipTest("../shared/fixtures is absent")
        # (set, blocks, allowed error of max|logit|): the float64 block-causal oracle (3.5e-8
        # measured), llama.cpp's float32 logits (8.1e-7 measured).
        for name, block, tol in (("llada2-f32-block4", 4, 1e-6), ("llada2-f32-block1", 1, 5e-6),
                                 ("bailingmoe2-f32", None, 5e-6)):
            d = os.path.join(shared, name)
            m = llada2.load(os.path.join(d, "model.gguf"))
            toks = [int(x) for x in open(os.path.join(d, "tokens.txt")).read().split()]
            want = np.fromfile(os.path.join(d, "logits.f32"), dtype="<f4").reshape(len(toks), -1)
            with torch.no_grad():
                got = m(toks, block=block).numpy()
            self.assertLess(float(np.abs(got - want).max() / np.abs(want).max()), tol, name)
            self.assertGreater(m.min_selection_gap(), 1e-4, name)

    def test_committed_fixtures_are_what_the_script_writes(self):
        import subprocess
        committed = os.path.join(self.ROOT, "tests", "data", "llada2")
        with tempfile.TemporaryDirectory() as tmp:
            # The models and logits, then the decoding trajectories on that model.
            for script in ("make_llada2_fixtures.py", "make_llada2_decode_fixtures.py"):
                subprocess.run([sys.executable, os.path.join(self.ROOT, "train", script),
                                "--out", tmp], check=True, stdout=subprocess.DEVNULL)
            for f in sorted(os.listdir(committed)):
                with open(os.path.join(committed, f), "rb") as a, \
                        open(os.path.join(tmp, f), "rb") as b:
                    self.assertEqual(a.read(), b.read(), f)
