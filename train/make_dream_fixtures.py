"""Writes tests/data/dream/: trajectories of Dream's sampler (train/reference/dream.py).

    /usr/bin/python3 train/make_dream_fixtures.py [--out DIR]

The models are the decode fixtures' tiny random `llada` models (tests/data/decode/*.gguf, same
seeds, rebuilt here by make_decode_fixtures.make_model); a case with `shift` decodes the model
as if its logits were shifted (the C++ test writes that copy of the GGUF with
diffusion.shift_logits = true). Every algorithm at T = 0 and T > 0 (replayed noise), top-p,
top-k and alg_temp. As for the decode fixtures, each case is verified before it is written: the
float64 model given the same noise must take the same decisions, and every decision must clear
a relative margin (MIN_GAP), or the next seed (another prompt and noise) is tried.
"""

import argparse
import copy
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_decode_fixtures import make_model, make_prompt, sig  # noqa: E402
from reference import dream  # noqa: E402
from reference.generate import RecordingNoise, ReplayNoise, TorchNoise  # noqa: E402
import vocab  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "dream")
MIN_GAP = 1e-3
MAX_SEED_TRIES = 200


def case(name, model, gen, steps, alg, temperature=0.0, top_p=None, top_k=None, alg_temp=0.0,
         eps=1e-3, shift=False, prompt_len=5):
    return dict(name=name, model=model, gen=gen, steps=steps, alg=alg, temperature=temperature,
                top_p=top_p, top_k=top_k, alg_temp=alg_temp, eps=eps, shift=shift,
                prompt_len=prompt_len)


CASES = [
    case("entropy-t0", "llada-mha", gen=16, steps=16, alg="entropy"),
    case("entropy-t0-s6", "llada-gqa-tied", gen=16, steps=6, alg="entropy", shift=True),
    case("maskgit-t0", "llada-mha", gen=16, steps=8, alg="maskgit_plus"),
    case("margin-t0-shift", "llada-mha", gen=16, steps=8, alg="topk_margin", shift=True),
    case("origin-t0", "llada-gqa-tied", gen=16, steps=8, alg="origin"),
    case("origin-t0-eps01", "llada-mha", gen=12, steps=12, alg="origin", eps=0.1, shift=True),
    case("entropy-t07-topp", "llada-mha", gen=12, steps=6, alg="entropy", temperature=0.7,
         top_p=0.9),
    case("maskgit-t1-topk", "llada-gqa-tied", gen=12, steps=4, alg="maskgit_plus",
         temperature=1.0, top_k=20, shift=True),
    case("origin-t1", "llada-mha", gen=12, steps=6, alg="origin", temperature=1.0, top_p=0.95),
    case("margin-t0-algtemp", "llada-gqa-tied", gen=16, steps=8, alg="topk_margin",
         alg_temp=0.5),
    case("entropy-t05-algtemp-topk", "llada-mha", gen=12, steps=4, alg="entropy",
         temperature=0.5, top_k=50, alg_temp=0.2, shift=True),
]


def margins(model, prompt, c, trace):
    """The smallest relative decision margin of a run, replayed along its trace: at T = 0 each
    masked row's argmax over its runner-up, and for the confidence algorithms without alg_temp
    the k-th selected confidence over the (k+1)-th; for origin, how far each transfer uniform
    lies from the transfer probability is not a model decision and is not measured. (At T > 0
    the float64 check stands in: the decisions hinge on the replayed noise.)"""
    gaps = [math.inf]
    x = torch.cat([prompt, torch.full((1, c["gen"]), vocab.MASK, dtype=prompt.dtype)], dim=1)
    for e in trace:
        masked = (x[0] == vocab.MASK).nonzero()[:, 0].tolist()
        if masked and c["temperature"] == 0:
            with torch.no_grad():
                logits = dream.shifted_logits(model(x), c["shift"])[0, masked].to(torch.float32)
            probs = dream.filtered_probs(logits, 0.0, c["top_p"], c["top_k"])
            top2 = torch.topk(probs, 2, dim=-1).values
            gaps.append(float(((top2[:, 0] - top2[:, 1]) / top2[:, 0]).min()))
            if c["alg"] != "origin" and not c["alg_temp"]:
                _, conf = dream.sample_tokens(logits, 0.0, c["top_p"], c["top_k"], c["alg"], None)
                k = len(e["transfer"])
                vals = torch.sort(conf, descending=True).values
                if 0 < k < vals.numel():
                    scale = max(float(vals[k - 1].abs()), float(vals[k].abs()), 1e-12)
                    gaps.append(float(vals[k - 1] - vals[k]) / scale)
        for p, v in zip(e["transfer"], e["tokens"]):
            x[0, p] = v
    return min(gaps)


def run_case(c, seed, model32, model64):
    prompt = make_prompt(seed, c["prompt_len"])
    kw = dict(alg=c["alg"], temperature=c["temperature"], top_p=c["top_p"], top_k=c["top_k"],
              alg_temp=c["alg_temp"], eps=c["eps"], shift=c["shift"])
    rec = RecordingNoise(TorchNoise(seed=seed))
    trace = []
    final = dream.generate(model32, prompt, c["gen"], c["steps"], vocab.MASK, noise=rec,
                           trace=trace, **kw)
    noise = rec.values()
    if bool((final == vocab.MASK).any()):
        return None, "masks left in the final canvas"
    replay = ReplayNoise(noise)
    trace_r = []
    dream.generate(model32, prompt, c["gen"], c["steps"], vocab.MASK, noise=replay,
                   trace=trace_r, **kw)
    assert trace_r == trace and replay.remaining == 0, "replay of the recorded noise differs"
    replay64 = ReplayNoise(noise)
    trace64 = []
    dream.generate(model64, prompt, c["gen"], c["steps"], vocab.MASK, noise=replay64,
                   trace=trace64, **kw)
    if trace64 != trace or replay64.remaining != 0:
        return None, "float64 trajectory differs"
    gap = margins(model32, prompt, c, trace)
    if gap < MIN_GAP:
        return None, f"decision gap {gap:.3g}"
    return dict(prompt=prompt[0].tolist(), trace=trace, final=final[0].tolist(), noise=noise,
                gap=gap), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    models = {}
    records = []
    for ci, c in enumerate(CASES):
        if c["model"] not in models:
            m = make_model(c["model"])
            models[c["model"]] = (m, copy.deepcopy(m).double())
        model32, model64 = models[c["model"]]
        first = 5000 + 1000 * ci
        rejected = []
        for seed in range(first, first + MAX_SEED_TRIES):
            res, why = run_case(c, seed, model32, model64)
            if res is not None:
                break
            rejected.append(why)
        else:
            raise SystemExit(f"{c['name']}: no seed in {MAX_SEED_TRIES} passes: {rejected[-5:]}")
        noise_file = None
        if res["noise"].numel() > 0:
            noise_file = f"{c['name']}.noise.f64"
            res["noise"].numpy().astype("<f8").tofile(os.path.join(args.out, noise_file))
        records.append(dict(
            name=c["name"], model=f"{c['model']}.gguf", shift=c["shift"], prompt=res["prompt"],
            gen=c["gen"], steps=c["steps"], alg=c["alg"], temperature=c["temperature"],
            top_p=c["top_p"] if c["top_p"] is not None else 1.0,
            top_k=c["top_k"] if c["top_k"] is not None else 0, alg_temp=c["alg_temp"],
            eps=c["eps"], mask_id=vocab.MASK, noise=noise_file,
            noise_count=int(res["noise"].numel()), seed=seed, seeds_rejected=len(rejected),
            min_gap=sig(res["gap"]), trajectory=res["trace"], final=res["final"]))
        print(f"{c['name']:26s} seed {seed} ({len(rejected)} rejected)  min gap "
              f"{sig(res['gap'])}  noise {res['noise'].numel()}")
    written = {r["noise"] for r in records}
    for f in os.listdir(args.out):
        if f.endswith(".noise.f64") and f not in written:
            os.remove(os.path.join(args.out, f))
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        f.write("[\n" + ",\n".join("  " + json.dumps(r, separators=(", ", ": "))
                                   for r in records) + "\n]\n")
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(README.format(n=len(records)))
    print(f"wrote {len(records)} cases to {args.out}")


README = """# Dream sampler fixtures

Written by `train/make_dream_fixtures.py` from `train/reference/dream.py` (the semantics are in
that file's docstring and docs/dream-decoding.md); do not edit by hand. {n} cases in
`cases.json`, one JSON object per line. The models are `../decode/<model>` (the decode
fixtures' tiny random `llada` models); `shift: true` means the model is decoded with shifted
logits (the test writes a copy of the GGUF with `diffusion.shift_logits = true`).

Keys: `alg` (origin, maskgit_plus, topk_margin, entropy), `temperature`, `top_p` (1: off),
`top_k` (0: off), `alg_temp` (0: deterministic selection), `eps`, `gen`, `steps`, `prompt`
(ids), `mask_id`, `noise` (file of the float64 uniforms the run drew, in draw order, or null),
`noise_count`, `seed` / `seeds_rejected` (verification, as in ../decode), `min_gap` (the
smallest relative decision margin), `trajectory` (per step: `step`, `transfer` = positions
written, `tokens` = what was written there), `final` (the whole canvas).
"""

if __name__ == "__main__":
    main()
