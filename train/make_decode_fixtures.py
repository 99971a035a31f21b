"""Writes tests/data/decode/: the fixtures the C++ `vanilla` decoder and forward are tested with.

    /usr/bin/python3 train/make_decode_fixtures.py [--out DIR]

Deterministic: rerunning on the same machine gives identical bytes (seeded generators, one
thread). What it writes (tests/data/decode/README.md, also written here, has the layouts):
  * three tiny random-weight models as GGUF: an MHA `llada` with an untied output head, a GQA
    `llada` with a tied one, and a causal `llama` (the autoregressive twin, forward only);
  * per model, one canvas and its float32 logits from train/model.py (forward parity);
  * cases.json: decoding cases run by reference/generate.py (batch 1), each with its per-step
    trajectory, the final canvas and, when the case draws any, the uniform noise it consumed.

The C++ engine computes in float32 with its own summation order, so a decision that hinges on a
near-tie could flip there. Every case is therefore verified before it is written: the same case
rerun with the model in float64 (same noise) must give the same trajectory, and every decision
must clear a relative margin (MIN_GAP). A case that fails moves to the next seed, which changes
its prompt and its noise; the seed used and the smallest margins are recorded.
"""

import argparse
import copy
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from model import Config, Model, export_gguf  # noqa: E402
from reference.generate import RecordingNoise, ReplayNoise, TorchNoise, generate  # noqa: E402
import vocab  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "decode")

# Smallest accepted relative gap of any decision (see Margins). float32 logits from a different
# summation order differ by a few 1e-6 of max|logit|; CFG amplifies that by about 2 (w + 1).
MIN_GAP = 1e-3
MAX_SEED_TRIES = 200

# Tiny models. Large weight std (not the 0.02 of training) so the logits are peaky: max|logit|
# around 10 and top probabilities spread over (0.1, 0.9), far from ties and from saturation.
# The GQA model also changes rope base and eps so that hard-coded defaults would show.
MODELS = {
    "llada-mha": dict(cfg=dict(arch="llada", n_head=4, n_kv_head=4, tied=False,
                               rope_base=10000.0, eps=1e-5), seed=11),
    "llada-gqa-tied": dict(cfg=dict(arch="llada", n_head=4, n_kv_head=2, tied=True,
                                    rope_base=1000000.0, eps=1e-6), seed=12),
    "llama-causal": dict(cfg=dict(arch="llama", n_head=4, n_kv_head=4, tied=False,
                                  rope_base=10000.0, eps=1e-5), seed=13),
}
COMMON_CFG = dict(n_vocab=vocab.N_VOCAB, d=32, n_layer=2, ffn=64, ctx=64)
WEIGHT_STD = 0.5
FORWARD_PROMPT_LEN = 10  # canvas = BOS + 10 prompt ids + 20 masks
FORWARD_MASKS = 20


def case(name, model, gen, steps, block, temperature=0.0, cfg=0.0, remasking="low_confidence",
         prompt_len=5, seed=None):
    return dict(name=name, model=model, gen=gen, steps=steps, block=block,
                temperature=temperature, cfg=cfg, remasking=remasking, prompt_len=prompt_len,
                seed=seed)


# Noise files hold V * L * steps float64 per case (V = 259), so T > 0 cases are kept short.
CASES = [
    # T = 0, low_confidence: block = gen, gen/2, gen/4; steps = gen, gen/2; uneven splits.
    case("mha-t0-b16-s16", "llada-mha", gen=16, steps=16, block=16),
    case("mha-t0-b16-s8", "llada-mha", gen=16, steps=8, block=16),
    case("mha-t0-b8-s16", "llada-mha", gen=16, steps=16, block=8),
    case("mha-t0-b8-s8", "llada-mha", gen=16, steps=8, block=8),
    case("mha-t0-b4-s16", "llada-mha", gen=16, steps=16, block=4),
    case("mha-t0-b4-s8", "llada-mha", gen=16, steps=8, block=4),
    case("mha-t0-b16-s5", "llada-mha", gen=16, steps=5, block=16),  # 4,3,3,3,3
    case("gqa-t0-b24-s12", "llada-gqa-tied", gen=24, steps=12, block=24, prompt_len=8),
    case("gqa-t0-b8-s9", "llada-gqa-tied", gen=24, steps=9, block=8),  # 3 per block: 3,3,2
    case("gqa-t0-b6-s24", "llada-gqa-tied", gen=24, steps=24, block=6, prompt_len=3),
    # More steps than masks per block: some steps commit nothing.
    case("gqa-t0-b4-s24", "llada-gqa-tied", gen=16, steps=24, block=4),
    # T = 0, random remasking: the only draws are the [L] float32 remasking uniforms.
    case("mha-t0-random-b8-s8", "llada-mha", gen=16, steps=8, block=8, remasking="random"),
    case("gqa-t0-random-b4-s8", "llada-gqa-tied", gen=16, steps=8, block=4, remasking="random"),
    # T > 0 with replayed Gumbel noise.
    case("mha-t07-b8-s6", "llada-mha", gen=16, steps=6, block=8, temperature=0.7),
    case("gqa-t1-b16-s4", "llada-gqa-tied", gen=16, steps=4, block=16, temperature=1.0),
    case("mha-t1-random-b8-s4", "llada-mha", gen=16, steps=4, block=8, temperature=1.0,
         remasking="random", prompt_len=3),
    # Classifier-free guidance, with and without T > 0.
    case("mha-cfg05-t0-b8-s8", "llada-mha", gen=16, steps=8, block=8, cfg=0.5),
    case("gqa-cfg15-t0-b4-s8", "llada-gqa-tied", gen=16, steps=8, block=4, cfg=1.5),
    case("gqa-cfg15-t0-random-b16-s8", "llada-gqa-tied", gen=16, steps=8, block=16, cfg=1.5,
         remasking="random"),
    case("mha-cfg15-t07-b8-s4", "llada-mha", gen=16, steps=4, block=8, temperature=0.7, cfg=1.5,
         prompt_len=3),
    case("gqa-cfg05-t1-random-b8-s4", "llada-gqa-tied", gen=16, steps=4, block=8,
         temperature=1.0, cfg=0.5, remasking="random", prompt_len=3),
]


def make_model(name):
    spec = MODELS[name]
    cfg = Config(**COMMON_CFG, **spec["cfg"])
    model = Model(cfg)
    g = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for pname, p in model.named_parameters():  # fixed order: the module definition order
            if pname.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * WEIGHT_STD)
    return model.eval()


def make_prompt(seed, n):
    """BOS + n printable-ASCII byte ids, drawn from the case seed."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0x20, 0x7f, (n,), generator=g)
    return torch.cat([torch.tensor([vocab.BOS]), ids])[None, :]


class Margins:
    """Step hook of generate(): the smallest relative gaps of the decisions taken.

    conf: (k-th - (k+1)-th largest confidence) / |k-th|, when the (k+1)-th is finite: how far the
        set of committed positions is from changing.
    token: (best - second best) / max|value| of the (noised) logits row, at every position that
        could be committed this step (finite confidence): its candidate token decides its
        confidence under low_confidence, so even uncommitted candidates matter.
    """

    def __init__(self):
        self.conf = math.inf
        self.token = math.inf

    def __call__(self, info):
        conf = info["confidence"].double()
        noised = info["noised"].double()
        for j in range(conf.shape[0]):
            k = int(info["k"][j])
            cand = torch.isfinite(conf[j])
            if k == 0 or not bool(cand.any()):
                continue
            vals = torch.sort(conf[j], descending=True).values
            if k < vals.numel() and math.isfinite(vals[k]):
                self.conf = min(self.conf, float((vals[k - 1] - vals[k]) / vals[k - 1].abs()))
            rows = noised[j, cand]
            top2 = rows.topk(2, dim=-1).values
            gap = (top2[:, 0] - top2[:, 1]) / rows.abs().max(dim=-1).values
            self.token = min(self.token, float(gap.min()))


def run_case(c, seed, model32, model64):
    """Runs case c with `seed`; returns (result dict, None) or (None, reason it was rejected)."""
    prompt = make_prompt(seed, c["prompt_len"])
    kw = dict(steps=c["steps"], gen_length=c["gen"], block_length=c["block"],
              temperature=c["temperature"], cfg_scale=c["cfg"], remasking=c["remasking"],
              mask_id=vocab.MASK)
    rec = RecordingNoise(TorchNoise(seed=seed))
    trace, margins = [], Margins()
    final = generate(model32, prompt, noise=rec, trace=trace, hook=margins, **kw)
    noise = rec.values()

    if any(t == vocab.MASK for e in trace for t in e["tokens"][0]):
        return None, "a committed token is the mask id"
    if bool((final == vocab.MASK).any()):
        return None, "masks left in the final canvas"
    if margins.conf < MIN_GAP:
        return None, f"confidence gap {margins.conf:.3g}"
    if margins.token < MIN_GAP:
        return None, f"token gap {margins.token:.3g}"
    # Replaying the recorded noise must reproduce the run (checks the draw bookkeeping) ...
    replay32 = ReplayNoise(noise)
    trace_r = []
    generate(model32, prompt, noise=replay32, trace=trace_r, **kw)
    assert trace_r == trace and replay32.remaining == 0, "replay of the recorded noise differs"
    # ... and the float64 model, given the same noise, must take the same decisions.
    replay64 = ReplayNoise(noise)
    trace64 = []
    generate(model64, prompt, noise=replay64, trace=trace64, **kw)
    if trace64 != trace or replay64.remaining != 0:
        return None, "float64 trajectory differs"
    return dict(prompt=prompt[0].tolist(), trace=trace, final=final[0].tolist(), noise=noise,
                margins=margins), None


def fmt_case(d):
    """One case as JSON: a key per line, each trajectory step on one line (diff-friendly)."""
    lines = []
    for key, val in d.items():
        if key == "trajectory":
            steps = ",\n".join("      " + json.dumps(s, separators=(", ", ": ")) for s in val)
            lines.append(f'    "{key}": [\n{steps}\n    ]')
        else:
            lines.append(f'    "{key}": {json.dumps(val, separators=(", ", ": "))}')
    return "  {\n" + ",\n".join(lines) + "\n  }"


def sig(x):
    return None if x == math.inf else float(f"{x:.4g}")


def write_forward(out, name, model, model64, seed):
    """Writes the forward-parity canvas and float32 logits; returns (n_tokens, max|logit|, the
    float32-vs-float64 difference relative to max|logit|, a scale for tolerances)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0x20, 0x7f, (FORWARD_PROMPT_LEN,), generator=g)
    tokens = torch.cat([torch.tensor([vocab.BOS]), ids, torch.full((FORWARD_MASKS,), vocab.MASK)])
    with torch.no_grad():
        logits = model(tokens[None, :])[0].to(torch.float32)
        exact = model64(tokens[None, :])[0]
    with open(os.path.join(out, f"{name}.tokens.txt"), "w") as f:
        f.write(" ".join(str(t) for t in tokens.tolist()) + "\n")
    logits.numpy().astype("<f4").tofile(os.path.join(out, f"{name}.logits.f32"))
    max_logit = float(logits.abs().max())
    return len(tokens), max_logit, float((logits.double() - exact).abs().max()) / max_logit


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)

    models, model_rows = {}, []
    for i, (name, spec) in enumerate(MODELS.items()):
        model = make_model(name)
        models[name] = (model, copy.deepcopy(model).double())
        export_gguf(model, os.path.join(args.out, f"{name}.gguf"), vocab.gguf_metadata(),
                    name=f"decode-fixture-{name}")
        model_rows.append((name, spec) + write_forward(args.out, name, *models[name], seed=100 + i))

    records = []
    for ci, c in enumerate(CASES):
        model32, model64 = models[c["model"]]
        first = 1000 * (ci + 1)  # disjoint seed ranges per case
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
        m = res["margins"]
        records.append(dict(
            name=c["name"], model=f"{c['model']}.gguf", prompt=res["prompt"], gen=c["gen"],
            steps=c["steps"], block=c["block"], temperature=c["temperature"], cfg=c["cfg"],
            remasking=c["remasking"], mask_id=vocab.MASK, noise=noise_file,
            noise_count=int(res["noise"].numel()), seed=seed, seeds_rejected=len(rejected),
            min_conf_gap=sig(m.conf), min_token_gap=sig(m.token),
            trajectory=[dict(block=e["block"], step=e["step"], positions=e["positions"][0],
                             tokens=e["tokens"][0]) for e in res["trace"]],
            final=res["final"]))
        print(f"{c['name']:28s} seed {seed} ({len(rejected)} rejected)  min conf gap "
              f"{sig(m.conf)}  min token gap {sig(m.token)}  noise {res['noise'].numel()}")

    # Noise files of cases that no longer exist would otherwise linger in the folder.
    written = {r["noise"] for r in records}
    for f in os.listdir(args.out):
        if f.endswith(".noise.f64") and f not in written:
            os.remove(os.path.join(args.out, f))
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        f.write("[\n" + ",\n".join(fmt_case(r) for r in records) + "\n]\n")
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(readme(model_rows, records))
    total = sum(os.path.getsize(os.path.join(args.out, n)) for n in os.listdir(args.out))
    print(f"wrote {len(records)} cases to {args.out}, {total} bytes")


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(v) for v in r) + " |" for r in rows])


MODEL_COLUMNS = ("file", "arch", "layers", "n_embd", "heads / KV heads", "ffn", "output head",
                 "rope base", "rms eps", "seed", "forward tokens", "max abs logit",
                 "f32 vs f64 / max abs logit")
CASE_COLUMNS = ("case", "model", "prompt len", "gen", "block", "steps", "T", "cfg", "remasking",
                "noise values", "seed", "min conf gap", "min token gap")
KEYS = (
    ("`name`", "case name"),
    ("`model`", "GGUF file in this folder"),
    ("`prompt`", "prompt ids, starting with BOS {bos}"),
    ("`gen`, `steps`, `block`", "generated length, total steps, block length (upstream's "
     "`gen_length`, `steps`, `block_length`)"),
    ("`temperature`", "T; 0 means plain argmax and no Gumbel noise"),
    ("`cfg`", "classifier-free guidance scale w; 0 means off"),
    ("`remasking`", "`low_confidence` or `random`"),
    ("`mask_id`", "{mask}"),
    ("`noise`", "file with every uniform draw of the run, or null when there is none "
     "(T = 0 with `low_confidence`)"),
    ("`noise_count`", "number of float64 values in that file"),
    ("`seed`, `seeds_rejected`", "seed of the prompt and noise generators that passed "
     "verification, and how many seeds before it were rejected"),
    ("`min_conf_gap`, `min_token_gap`", "smallest decision margins of the case (below); null "
     "when never measured"),
    ("`trajectory`", "one entry per step, in order: `block`, `step` (within the block), "
     "`positions` (canvas indices committed at that step, ascending) and `tokens` (the ids "
     "written there, same order)"),
    ("`final`", "the whole final canvas (prompt + gen ids)"),
)


def readme(model_rows, records):
    model_table = md_table(MODEL_COLUMNS, [
        (f"`{n}.gguf`", s["cfg"]["arch"], COMMON_CFG["n_layer"], COMMON_CFG["d"],
         f"{s['cfg']['n_head']}/{s['cfg']['n_kv_head']}", COMMON_CFG["ffn"],
         "tied (no output.weight)" if s["cfg"]["tied"] else "untied",
         f"{s['cfg']['rope_base']:g}", f"{s['cfg']['eps']:g}", s["seed"], n_tok, f"{ml:.3f}",
         f"{err:.1e}")
        for n, s, n_tok, ml, err in model_rows])
    case_table = md_table(CASE_COLUMNS, [
        (f"`{r['name']}`", r["model"][:-len(".gguf")], len(r["prompt"]), r["gen"], r["block"],
         r["steps"], f"{r['temperature']:g}", f"{r['cfg']:g}", r["remasking"],
         r["noise_count"], r["seed"], r["min_conf_gap"], r["min_token_gap"])
        for r in records])
    key_table = md_table(("key", "meaning"), KEYS).format(bos=vocab.BOS, mask=vocab.MASK)
    conf = [r["min_conf_gap"] for r in records if r["min_conf_gap"] is not None]
    tok = [r["min_token_gap"] for r in records if r["min_token_gap"] is not None]
    return README_TEMPLATE.format(
        d=COMMON_CFG["d"], ctx=COMMON_CFG["ctx"], std=WEIGHT_STD, min_gap=MIN_GAP,
        n_cases=len(records), model_table=model_table, case_table=case_table,
        key_table=key_table, min_conf=min(conf), min_tok=min(tok), nf=FORWARD_PROMPT_LEN,
        nm=FORWARD_MASKS, mask=vocab.MASK, bos=vocab.BOS)


README_TEMPLATE = """\
# Decoding fixtures: the `vanilla` policy (LLaDA's `generate()`) on tiny random models

Written by `train/make_decode_fixtures.py` from the PyTorch reference `train/reference/generate.py`
(checked step for step against ML-GSAI/LLaDA's `generate.py` by
`train/reference/check_against_upstream.py`). Do not edit by hand; regenerate with

    /usr/bin/python3 train/make_decode_fixtures.py

which rewrites this folder with identical bytes (seeded, one thread, Debian's python3-torch).

## Models (`*.gguf`)

Random weights: every matrix N(0, {std}) from `torch.Generator().manual_seed(seed)`, norm weights
1, no biases, F32, written by `train/model.export_gguf` with the byte-level vocabulary of
`train/vocab.py` (259 tokens: bytes 0-255, BOS {bos}, EOS 257, MASK {mask}). head_dim 8,
`rope.dimension_count` 8, context length {ctx}. The large std makes the logits peaky, so decisions
are not near-ties.

{model_table}

`llama-causal` is the autoregressive twin architecture (causal attention); it is for forward
parity only and has no decoding cases.

## Forward parity (`<model>.tokens.txt`, `<model>.logits.f32`)

* `<model>.tokens.txt`: the canvas, one line of decimal ids separated by single spaces, ending in
  a newline: BOS, {nf} printable-ASCII byte ids, {nm} mask ids.
* `<model>.logits.f32`: raw little-endian float32, no header, `[n_tokens][n_vocab]` row-major;
  row i is the output at canvas position i, **unshifted**, computed in float32 by `train/model.py`
  (positions 0..n-1, one sequence). The last column of the table above is how far these float32
  logits are from the same forward in float64: the large weights make float32 rounding bigger
  than on ../shared's N(0, 0.02) models, so another float32 engine lands a few 1e-6 of
  max|logit| away; a tolerance around 1e-5 of max|logit| is reasonable.

## Decoding cases (`cases.json`)

A JSON list of {n_cases} objects, batch size 1:

{key_table}

Semantics (reference `generate()`): canvas = prompt + `gen` mask ids; blocks of `block` from the
end of the prompt, decoded left to right, each with `steps / (gen / block)` steps. A block's commit
counts are `base = masked // s` per step plus one for the first `masked % s` steps (s = steps per
block). Per step: one forward over the whole canvas; with CFG a second canvas whose prompt
positions (those not masked at the start) are set to the mask id, and the logits are
`u + (w + 1) * (c - u)` in float32. Candidate = argmax over the vocabulary of the float32 logits
(T = 0) or of `exp(l) / (-log(u))^T` computed in float64 (T > 0). Confidence =
`softmax(logits)[candidate]` in float32 (`low_confidence`) or a uniform draw (`random`); it is
-inf at positions at or past the end of the current block and at positions that do not hold the
mask id. The k highest confidences (k = that step's count) are committed.

### Noise files (`<case>.noise.f64`)

Raw little-endian float64, no header: every uniform in [0, 1) the run drew, in draw order. Per
step, first, if T > 0, the Gumbel uniforms: `L * V` values (L = canvas length, V = 259), value
`[i][v]` at index `i * V + v` of that step's chunk; one set per step even with CFG, since the
noise is applied to the guided logits. Then, if `remasking` is `random`, `L` values, one per
canvas position; these were drawn as float32 and are stored exactly, so use them as float32.
Positions outside the block or already decided consume draws too. So
`noise_count = steps * ((T > 0 ? L * V : 0) + (random ? L : 0))`.

## Verification of every case

The C++ engine computes in float32 with its own summation order, so every case was checked not to
hinge on a near-tie: rerun with the model in float64 and the same noise, it gives the same
trajectory; and at every step (1) the k-th and (k+1)-th largest confidences differ by at least
{min_gap} relative to the k-th (when the (k+1)-th is finite): `min_conf_gap`; (2) at every position
with a finite confidence, the best and second-best candidate values (logits for T = 0, the noised
values for T > 0, guided when CFG is on) differ by at least {min_gap} of the row's max |value|:
`min_token_gap`. No committed token is the mask id. Cases failing any check moved to the next
seed. Overall minima: confidence gap {min_conf}, token gap {min_tok}.

{case_table}
"""


if __name__ == "__main__":
    main()
