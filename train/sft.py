"""Training of the tiny models: batches from the task suite, LLaDA's SFT objective, the AR
next-token objective, the training loop, presets and export.

Entry points: train_llada.py (masked diffusion, arch `llada`) and train_ar.py (causal twin, arch
`llama`); both call `main(arch)` here.

Sequence layout, both objectives: [BOS] + encode(prompt) + response. For LLaDA the response is the
answer followed by EOS up to GEN_LENGTH tokens (exactly the canvas the decoder fills), for the AR
twin it is the answer and one EOS. Rows of a batch have different prompt lengths; they are padded
at the end and the padding is excluded from attention (as keys) and from the loss, so every row is
computed exactly as it would be alone (RoPE depends only on relative positions within the row, and
row i's positions start at 0).
"""

import argparse
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tasks  # noqa: E402
import vocab  # noqa: E402
from gguf_io import GGUFReader  # noqa: E402
from model import Config, Model, export_gguf, load_gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "train", "out")
MODELS_DIR = os.path.join(ROOT, "models")

# name -> (model config kwargs, training kwargs). Steps are the budget; batch is rows per step.
PRESETS = {
    "s": dict(model=dict(d=96, n_layer=4, n_head=4, n_kv_head=4, ffn=256),
              train=dict(ar_steps=3000, steps=5000, batch=64, lr=2e-3)),
    "m": dict(model=dict(d=128, n_layer=4, n_head=4, n_kv_head=4, ffn=352),
              train=dict(ar_steps=3000, steps=5000, batch=64, lr=2e-3)),
    # The long suite (tasks.LONG_TASKS): 128 generated tokens in blocks of 32. Rows are ~3x
    # longer than the short suite's, so a step of 32 rows carries more answer tokens than one of
    # 64 short rows; the budget is set by the ~2-hour limit on the 2-core machine.
    # tiny-llada-l: the AR twin (~11 min), then 9,000 LLaDA steps on one schedule (~71 min; both
    # measured at 2 threads, models/README.md).
    "l": dict(model=dict(d=128, n_layer=4, n_head=4, n_kv_head=4, ffn=352),
              train=dict(ar_steps=2000, steps=9000, batch=32, lr=2e-3), suite="long"),
    # The real suite (tasks_real.py: answers with many valid forms, scored by checkers), 128
    # tokens in blocks of 32: tiny-llada-r and tiny-ar-r, the same size as l, within the ~2-hour
    # budget (models/README.md has the measured time).
    "r": dict(model=dict(d=128, n_layer=4, n_head=4, n_kv_head=4, ffn=352),
              train=dict(ar_steps=2500, steps=10000, batch=32, lr=2e-3), suite="real"),
}
# The LLaDA model of a preset starts from the weights of its AR twin (the same preset trained by
# train_ar.py for ar_steps steps), then trains `steps` steps with LLaDA's SFT objective: adapting
# an AR model is Dream-7B's recipe. From random weights a masked diffusion model of this size
# learns these tasks far more slowly: tiny-llada-m from random weights still had a loss of 0.35
# after ~3,000 steps; initialised from its AR twin, tiny-llada-s reached ~0.1 in 2,000 (see
# models/README.md, "Training recipe").
NAMES = {("llada", "s"): "tiny-llada-s", ("llada", "m"): "tiny-llada-m",
         ("llama", "s"): "tiny-ar-s", ("llama", "m"): "tiny-ar-m",
         ("llada", "l"): "tiny-llada-l", ("llama", "l"): "tiny-ar-l",
         ("llada", "r"): "tiny-llada-r", ("llama", "r"): "tiny-ar-r"}

EPS = 1e-3  # LLaDA's forward_process: p_mask = (1 - eps) * t + eps


def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# data


class TaskStream:
    """An endless, seeded stream of training problems, tasks mixed with equal weight."""

    def __init__(self, seed, task_names=tasks.TASKS):
        self.rng = random.Random(f"train|{seed}")
        self.task_names = tuple(task_names)

    def next(self):
        task = self.rng.choice(self.task_names)
        prompt, answer = tasks.sample_train(self.rng, task)
        return task, prompt, answer


def encode_row(prompt, answer, arch, gen_length=tasks.GEN_LENGTH):
    """Token ids of one training row and the index where the response starts."""
    p = [vocab.BOS] + vocab.encode(prompt)
    a = vocab.encode(answer)
    if arch == "llada":
        if len(a) >= gen_length:
            raise ValueError(f"answer of {len(a)} tokens does not fit gen_length {gen_length}")
        r = a + [vocab.EOS] * (gen_length - len(a))
    else:
        r = a + [vocab.EOS]
    return p + r, len(p)


def collate(rows):
    """rows: list of (ids, prompt_len) -> tokens [B, L], valid [B, L] bool, resp [B, L] bool."""
    L = max(len(ids) for ids, _ in rows)
    B = len(rows)
    tokens = torch.full((B, L), vocab.EOS, dtype=torch.long)
    valid = torch.zeros((B, L), dtype=torch.bool)
    resp = torch.zeros((B, L), dtype=torch.bool)
    for i, (ids, plen) in enumerate(rows):
        tokens[i, :len(ids)] = torch.tensor(ids)
        valid[i, :len(ids)] = True
        resp[i, plen:len(ids)] = True
    return tokens, valid, resp


# ---------------------------------------------------------------------------------------------
# forward with key padding


def forward_padded(model, tokens, valid):
    """model(tokens) where the positions with valid == False are no keys for anyone.

    Equal to running each row alone on its valid prefix (the rows are padded at the end only).
    Uses the model's own modules, so it is the C++ engine's forward.
    """
    B, L = tokens.shape
    x = model.tok_embd(tokens)
    cos, sin = model.rope(L, x.device, x.dtype)
    bias = torch.zeros((B, 1, 1, L), dtype=x.dtype)
    bias = bias.masked_fill(~valid[:, None, None, :], float("-inf"))
    if model.cfg.causal:
        causal = torch.full((L, L), float("-inf"), dtype=x.dtype).triu(1)
        bias = bias + causal[None, None]
    for b in model.blocks:
        x = b(x, cos, sin, bias)
    x = model.output_norm(x)
    w = model.tok_embd.weight if model.output is None else model.output.weight
    return x @ w.t()


# ---------------------------------------------------------------------------------------------
# objectives


def sample_t(B, generator, stratified):
    """t ~ U(0, 1) per row; stratified: one draw in each of B equal strata, in random order
    (each t is still uniform on (0, 1); the batch covers the range evenly)."""
    u = torch.rand(B, generator=generator, dtype=torch.float64)
    if stratified:
        perm = torch.randperm(B, generator=generator)
        u = (perm.to(torch.float64) + u) / B
    return u.to(torch.float32)


def llada_mask(tokens, resp, t, generator):
    """LLaDA's forward process on the response only: each response position is replaced by MASK
    with probability p = (1 - eps) t + eps. Returns (noisy tokens, masked bool, p [B, L])."""
    B, L = tokens.shape
    p = ((1 - EPS) * t + EPS)[:, None].expand(B, L)
    masked = (torch.rand((B, L), generator=generator) < p) & resp
    noisy = torch.where(masked, torch.full_like(tokens, vocab.MASK), tokens)
    return noisy, masked, p


def block_mask(tokens, resp, t, block_length, block_frac, generator):
    """The block-wise forward process (the inference canvas of block-by-block decoding).

    A row is a block row with probability block_frac, else a uniform row (llada_mask's process).
    A block row draws one block k of its response uniformly: blocks before k are clean, block k's
    positions are masked with probability p = (1 - eps) t + eps, every later block is all MASK,
    and only block k's masked positions carry loss, each weighted 1 / (p * block_length). A
    uniform row's masked positions are weighted 1 / (p * response length), as in LLaDA's SFT.
    Block-by-block decoding only ever shows the model a clean prefix, a partly masked current
    block and a masked future, so the block rows spend the training on that distribution; the
    uniform rows keep the model able to read partly decoded later blocks (speculation).
    Returns (noisy tokens, loss positions bool, weight [B, L])."""
    B, L = tokens.shape
    p = ((1 - EPS) * t + EPS)[:, None].expand(B, L)
    u = torch.rand((B, L), generator=generator)
    is_block = (torch.rand((B, 1), generator=generator) < block_frac).expand(B, L)
    start = resp.to(torch.int64).argmax(dim=1, keepdim=True)
    n_resp = resp.sum(dim=1, keepdim=True)
    n_blocks = torch.div(n_resp + block_length - 1, block_length, rounding_mode="floor")
    k = (torch.rand((B, 1), generator=generator) * n_blocks).floor().to(torch.int64)
    blk = torch.div(torch.arange(L)[None, :] - start, block_length, rounding_mode="floor")
    hit = (u < p) & resp
    current = hit & (blk == k)
    later = resp & (blk > k)
    masked = torch.where(is_block, current | later, hit)
    loss_at = torch.where(is_block, current, hit)
    norm = torch.where(is_block, torch.full_like(p, float(block_length)), n_resp.expand(B, L).to(p.dtype))
    noisy = torch.where(masked, torch.full_like(tokens, vocab.MASK), tokens)
    return noisy, loss_at, 1.0 / (p * norm)


def weighted_loss_from_logits(logits, tokens, loss_at, weight, n_rows):
    """Sum over the loss positions of CE x weight, divided by n_rows (the batch size)."""
    ce = F.cross_entropy(logits[loss_at], tokens[loss_at], reduction="none")
    return torch.sum(ce * weight[loss_at]) / n_rows


def llada_loss_from_logits(logits, tokens, masked, p, resp, n_rows):
    """LLaDA SFT loss: sum over masked response positions of CE / p, each row's sum divided by
    its response length, summed over rows, divided by n_rows (the batch size)."""
    ans_len = resp.sum(dim=1, keepdim=True).expand_as(tokens).to(logits.dtype)
    ce = F.cross_entropy(logits[masked], tokens[masked], reduction="none")
    return torch.sum(ce / p[masked] / ans_len[masked]) / n_rows


def ar_loss_from_logits(logits, tokens, resp, n_tokens):
    """Next-token cross-entropy on response tokens (answer and its EOS), summed, / n_tokens.

    Position i predicts token i + 1, so the targets are the response positions and the logits
    come from the position before each."""
    tgt = resp[:, 1:]
    ce = F.cross_entropy(logits[:, :-1][tgt], tokens[:, 1:][tgt], reduction="sum")
    return ce / n_tokens


# ---------------------------------------------------------------------------------------------
# training


def lr_at(step, steps, lr, warmup, final_frac=0.1):
    if step < warmup:
        return lr * (step + 1) / warmup
    prog = (step - warmup) / max(1, steps - warmup)
    return lr * (final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * prog)))


def build_model(arch, model_kwargs, seed):
    cfg = Config(arch=arch, **model_kwargs)
    model = Model(cfg)
    model.init_weights(seed=seed)
    return model


def suite_of(preset):
    """(tasks, gen_length, block_length) of the suite a preset trains on."""
    return tasks.SUITES[PRESETS[preset].get("suite", "short")]


def export(model, path, name, meta=None, gen_length=tasks.GEN_LENGTH, block_length=tasks.GEN_LENGTH):
    extra = {}
    for k, v in (meta or {}).items():
        extra[f"general.{k}"] = (vocab.STRING, str(v))
    # The generation the model was trained for: llada-cli and llada-eval use these as their
    # defaults for --gen / --block (steps default to --gen: one token per step).
    extra["llada_cpp.gen_length"] = (vocab.UINT32, gen_length)
    extra["llada_cpp.block_length"] = (vocab.UINT32, block_length)
    export_gguf(model, path, vocab.gguf_metadata(), name=name, extra_meta=extra)


def ar_twin_checkpoint(preset, seed, threads):
    """The final weights of the preset's AR twin: train/out/tiny-ar-<preset>/final.pt when its
    run.json matches (same preset, seed, steps), otherwise trained now (as train_ar.py would)."""
    name = NAMES[("llama", preset)]
    out_dir = os.path.join(OUT_DIR, name)
    path = os.path.join(out_dir, "final.pt")
    try:
        with open(os.path.join(out_dir, "run.json")) as f:
            run = json.load(f)
        ok = (os.path.exists(path) and run.get("preset") == preset and run.get("seed") == seed
              and run.get("steps") == PRESETS[preset]["train"]["ar_steps"]
              and run.get("batch") == PRESETS[preset]["train"]["batch"]
              and run.get("tasks") == list(suite_of(preset)[0]) and "wall_time_s" in run)
    except (OSError, ValueError):
        ok = False
    if not ok:
        shipped = os.path.join(MODELS_DIR, name + ".gguf")
        if os.path.exists(shipped) and _shipped_recipe(shipped) == _recipe("llama", preset, seed):
            # The shipped twin holds the same F32 weights final.pt would: reuse it.
            model, _ = load_gguf(shipped)
            os.makedirs(out_dir, exist_ok=True)
            torch.save(model.state_dict(), path)
            print(f"initialising from the shipped AR twin {os.path.relpath(shipped, ROOT)}", flush=True)
            return path
        print(f"training the AR twin {name} first", flush=True)
        train("llama", preset, seed=seed, threads=threads)
    return path


def _recipe(arch, preset, seed):
    """The recipe part of the description export() writes (name, command, seed, steps, batch)."""
    tr = PRESETS[preset]["train"]
    steps = tr["steps"] if arch == "llada" else tr["ar_steps"]
    return (f"{NAMES[(arch, preset)]}: train/{'train_llada' if arch == 'llada' else 'train_ar'}.py "
            f"--preset {preset} (seed {seed}, {steps} steps of batch {tr['batch']}"
            + _tasks_note(preset))


def _tasks_note(preset):
    """The long suite's tasks, in the description: a twin trained on other tasks is not reused."""
    if PRESETS[preset].get("suite", "short") == "short":
        return ""
    return ", tasks " + " ".join(suite_of(preset)[0])


def _shipped_recipe(path):
    desc = str(GGUFReader(path).metadata.get("general.description", ""))
    return desc[:-1] if desc.endswith(")") else desc


def train(arch, preset, steps=None, batch=None, lr=None, seed=0, name=None, out_dir=None,
          export_path=None, ckpt_every=500, log_every=25, chunks=2, threads=2,
          stratified=True, warmup=100, weight_decay=0.01, init="ar", resume=None, resume_step=0,
          objective=None, block_frac=None):
    """init: "ar" (LLaDA only): start from the preset's AR twin; "random": from random weights.
    resume/resume_step: continue an interrupted run from a checkpoint written at resume_step; the
    learning-rate schedule and the data stream continue where they were, but AdamW's moments and
    the masking generator restart (they are not checkpointed), so the result is close to, not
    bit-identical with, an uninterrupted run. run.json records the resume.
    objective (LLaDA only): "uniform" (LLaDA's SFT masking, the default) or "block" (block_mask,
    block_frac of the rows block-wise); None takes the preset's."""
    spec = PRESETS[preset]
    tr = dict(spec["train"])
    steps = steps or (tr["steps"] if arch == "llada" else tr["ar_steps"])
    batch = batch or tr["batch"]
    lr = lr or tr["lr"]
    name = name or NAMES[(arch, preset)]
    out_dir = out_dir or os.path.join(OUT_DIR, name)
    os.makedirs(out_dir, exist_ok=True)
    export_path = export_path if export_path is not None else os.path.join(MODELS_DIR, name + ".gguf")
    torch.set_num_threads(threads)
    seed_all(seed)

    model = build_model(arch, spec["model"], seed)
    init_from = None
    if arch == "llada" and init == "ar":
        init_from = ar_twin_checkpoint(preset, seed, threads)
        model.load_state_dict(torch.load(init_from))
        seed_all(seed)
    if resume:
        model.load_state_dict(torch.load(resume))
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.98), eps=1e-8)
    # The AR twin and the LLaDA stage draw from different streams of the same distribution.
    task_names, gen_length, block_length = suite_of(preset)
    objective = objective or tr.get("objective", "uniform")
    block_frac = tr.get("block_frac", 0.8) if block_frac is None else block_frac
    stream = TaskStream(seed if arch == "llama" else f"{seed}|llada", task_names)
    gen = torch.Generator().manual_seed(seed + 1)
    run = dict(arch=arch, preset=preset, name=name, steps=steps, batch=batch, lr=lr, seed=seed,
               warmup=warmup, weight_decay=weight_decay, chunks=chunks, threads=threads,
               stratified_t=stratified, gen_length=gen_length, block_length=block_length,
               objective=objective if arch == "llada" else "next-token",
               block_frac=block_frac if arch == "llada" and objective == "block" else None,
               tasks=list(task_names),
               config=asdict(model.cfg), n_params=model.n_params(), init=init if arch == "llada" else "random",
               init_from=os.path.relpath(init_from, ROOT) if init_from else None,
               torch=torch.__version__, command=" ".join(sys.argv))
    if resume:
        run.update(resumed_from=os.path.relpath(resume, ROOT), resumed_at_step=resume_step)
    with open(os.path.join(out_dir, "run.json"), "w") as f:
        json.dump(run, f, indent=1)
    log = open(os.path.join(out_dir, "log.jsonl"), "a")
    print(f"{name}: arch {arch}, {model.n_params()} params, {steps} steps of batch {batch}",
          flush=True)

    t0 = time.time()
    ema = None
    for _ in range(resume_step * batch):  # skip the problems the interrupted run has seen
        stream.next()
    for step in range(resume_step, steps):
        cur_lr = lr_at(step, steps, lr, warmup)
        for g in opt.param_groups:
            g["lr"] = cur_lr
        rows = []
        for _ in range(batch):
            _, prompt, answer = stream.next()
            rows.append(encode_row(prompt, answer, arch, gen_length))
        # Length-sorted chunks: less padding; gradients accumulate over the chunks.
        order = sorted(range(batch), key=lambda i: len(rows[i][0]))
        if arch == "llada":
            t = sample_t(batch, gen, stratified)
        else:
            n_tok = sum(len(ids) - plen for ids, plen in rows)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for c in range(chunks):
            idx = order[c * batch // chunks:(c + 1) * batch // chunks]
            tokens, valid, resp = collate([rows[i] for i in idx])
            if arch == "llada" and objective == "block":
                noisy, loss_at, weight = block_mask(tokens, resp, t[idx], block_length,
                                                    block_frac, gen)
                logits = forward_padded(model, noisy, valid)
                loss = weighted_loss_from_logits(logits, tokens, loss_at, weight, batch)
            elif arch == "llada":
                noisy, masked, p = llada_mask(tokens, resp, t[idx], gen)
                logits = forward_padded(model, noisy, valid)
                loss = llada_loss_from_logits(logits, tokens, masked, p, resp, batch)
            else:
                logits = forward_padded(model, tokens, valid)
                loss = ar_loss_from_logits(logits, tokens, resp, n_tok)
            loss.backward()
            total += loss.item()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        opt.step()
        ema = total if ema is None else 0.98 * ema + 0.02 * total
        done = step + 1
        if done % log_every == 0 or done == steps:
            el = time.time() - t0
            rec = dict(step=done, loss=round(total, 5), loss_ema=round(ema, 5), lr=cur_lr,
                       gnorm=round(gnorm, 4), elapsed_s=round(el, 1),
                       s_per_step=round(el / (done - resume_step), 3))
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)
        if ckpt_every and (done % ckpt_every == 0) and done != steps:
            torch.save(model.state_dict(), os.path.join(out_dir, f"ckpt-{done:06d}.pt"))
    wall = time.time() - t0
    torch.save(model.state_dict(), os.path.join(out_dir, "final.pt"))
    run.update(wall_time_s=round(wall, 1))
    with open(os.path.join(out_dir, "run.json"), "w") as f:
        json.dump(run, f, indent=1)
    if export_path:
        desc = (f"{name}: train/{'train_llada' if arch == 'llada' else 'train_ar'}.py "
                f"--preset {preset} (seed {seed}, {steps} steps of batch {batch}"
                + _tasks_note(preset))
        if arch == "llada" and objective == "block":
            desc += f", block-wise objective, {block_frac:g} of the rows"
        if init_from:
            desc += f", initialised from the AR twin {os.path.relpath(init_from, ROOT)}"
        export(model, export_path, name, dict(description=desc + ")"), gen_length, block_length)
        print(f"exported {export_path} ({os.path.getsize(export_path)} bytes)", flush=True)
    print(f"done: {steps} steps in {wall:.0f} s", flush=True)
    return model


def load_checkpoint(arch, preset, path):
    model = build_model(arch, PRESETS[preset]["model"], 0)
    model.load_state_dict(torch.load(path))
    model.eval()
    return model


def main(arch):
    ap = argparse.ArgumentParser(description=f"Train a tiny {arch} model on the task suite.")
    ap.add_argument("--preset", default="s", choices=sorted(PRESETS))
    ap.add_argument("--steps", type=int, help="optimiser steps (default: the preset's)")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", help="model name (default tiny-llada-<preset> / tiny-ar-<preset>)")
    ap.add_argument("--out", help="output directory (default train/out/<name>)")
    ap.add_argument("--export", help="GGUF path (default models/<name>.gguf; '' for none)")
    ap.add_argument("--ckpt-every", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--resume", help="checkpoint of an interrupted run to continue from")
    ap.add_argument("--resume-step", type=int, default=0, help="the step that checkpoint was saved at")
    if arch == "llada":
        ap.add_argument("--init", default="ar", choices=["ar", "random"],
                        help="start from the preset's AR twin (default) or from random weights")
        ap.add_argument("--objective", choices=["uniform", "block"],
                        help="masking of the SFT loss: uniform (LLaDA's, the default) or block "
                             "(sft.block_mask; tried for tiny-llada-l, see models/README.md)")
        ap.add_argument("--block-frac", type=float,
                        help="with --objective block: the share of block-wise rows (default 0.8)")
    args = ap.parse_args()
    train(arch, args.preset, steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed,
          name=args.name, out_dir=args.out, export_path=args.export, ckpt_every=args.ckpt_every,
          threads=args.threads, init=getattr(args, "init", "random"), resume=args.resume,
          resume_step=args.resume_step, objective=getattr(args, "objective", None),
          block_frac=getattr(args, "block_frac", None))
