"""Reference of Dream's `diffusion_generate` sampling loop (the `dream` decoding policy).

Written from the semantics in docs/dream-decoding.md (which cites Dream's generation_utils.py
line by line), batch 1, no attention mask:

  * canvas = prompt + gen mask ids, decoded as one span: exactly `steps` iterations, each one
    full forward over the canvas; no blocks, no cache, no early stop (the answer is cut at the
    first end of text afterwards);
  * timesteps = torch.linspace(1, eps, steps + 1) in float32; at step i, t = ts[i], s = ts[i+1];
  * the logits are shifted when the model's are (row p - 1 predicts position p, row 0 itself);
  * sample_tokens: logits / T (T > 0), then top-p, then top-k, then softmax; the token is the
    argmax (T = 0) or a categorical sample; the confidence per algorithm:
      origin        every masked position transfers with probability 1 - s/t (1 at the last
                    step), decided by one uniform each; the chosen ones are sampled;
      maskgit_plus  the token's probability;
      topk_margin   top-1 minus top-2 probability;
      entropy       sum p log(p + 1e-10) (negative entropy: higher is surer);
    the confidence algorithms commit k = int(n_mask * (1 - s/t)) positions (float32 maths, all
    remaining at the last step): the k most confident, or with alg_temp > 0 k drawn without
    replacement from softmax(confidence / alg_temp) over the canvas.

What is pinned down here that Dream leaves to torch (docs/dream-decoding.md, open questions):
  * the sampling maths runs in float64 on the float32 logits (Dream's runs in the logits'
    dtype, bf16 for the released model);
  * a categorical sample is argmax(p / q) with q = -log(u), u uniform float64: the exponential
    race torch.multinomial uses, with its draws explicit so a run can be replayed; ties go to
    the lowest token id;
  * the top-k selection of positions breaks ties by the lowest position (torch.topk's order is
    undocumented); alg_temp's draw without replacement is topk(p / q) over the canvas, q as
    above;
  * top-p keeps the smallest prefix of the descending order whose mass exceeds top_p (Dream's
    shifted mask), top-k keeps every logit >= the k-th largest (ties kept, as Dream).
Draw order per step: origin: n_mask uniforms (float64; `u < p` decides), then, at T > 0,
n_selected * V uniforms for the selected rows' samples; the confidence algorithms: at T > 0,
n_mask * V uniforms for every masked row's sample, then with alg_temp > 0 and k > 0, L uniforms
for the selection. Nothing is drawn at T = 0 except origin's transfer uniforms.
"""

import torch

ALGORITHMS = ("origin", "maskgit_plus", "topk_margin", "entropy")


def timesteps(steps, eps):
    """torch.linspace(1, eps, steps + 1) in float32, as Dream builds its schedule."""
    return torch.linspace(1.0, eps, steps + 1, dtype=torch.float32)


def filtered_probs(logits, temperature, top_p, top_k):
    """Dream's sample_tokens preprocessing: [n, V] float64 probabilities."""
    x = logits.to(torch.float64)
    if temperature > 0:
        x = x / temperature
    if top_p is not None and top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=True, stable=True)
        cum = torch.cumsum(torch.softmax(sorted_x, dim=-1), dim=-1)
        remove = cum > top_p
        remove[..., 1:] = remove[..., :-1].clone()  # keep the token that crosses top_p
        remove[..., 0] = False
        drop = torch.zeros_like(remove).scatter(-1, order, remove)
        x = x.masked_fill(drop, float("-inf"))
    if top_k is not None and top_k > 0:
        kth = torch.topk(x, min(top_k, x.shape[-1]), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return torch.softmax(x, dim=-1)


def first_argmax(v):
    """Index of the first maximum of each row (torch.argmax's documented order is not pinned)."""
    m = v.max(dim=-1, keepdim=True).values
    idx = torch.arange(v.shape[-1]).expand_as(v)
    return torch.where(v == m, idx, v.shape[-1]).min(dim=-1).values


def sample_tokens(logits, temperature, top_p, top_k, alg, noise):
    """Tokens and confidences of the rows `logits` [n, V]."""
    probs = filtered_probs(logits, temperature, top_p, top_k)
    n, V = probs.shape
    if temperature > 0:
        u = noise.rand((n, V), torch.float64)
        q = -torch.log(u)
        tok = first_argmax(probs / probs.sum(-1, keepdim=True) / q)
    else:
        tok = first_argmax(probs)
    conf = probs.gather(-1, tok[:, None])[:, 0]
    if alg == "topk_margin":
        top2 = torch.topk(probs, 2, dim=-1).values
        conf = top2[:, 0] - top2[:, 1]
    elif alg == "entropy":
        conf = (probs * torch.log(probs + 1e-10)).sum(-1)
    return tok, conf


def top_positions(score, k):
    """The k largest entries of a 1-D score, ties by the lowest index, ascending positions out."""
    order = sorted(range(score.numel()), key=lambda i: (-float(score[i]), i))
    return sorted(order[:k])


def shifted_logits(logits, shift):
    """Dream's shift: position j takes row j - 1 (j >= 1), position 0 keeps its own row."""
    if not shift:
        return logits
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


@torch.no_grad()
def generate(model, prompt, gen, steps, mask_id, alg="entropy", temperature=0.0, top_p=None,
             top_k=None, alg_temp=0.0, eps=1e-3, shift=False, noise=None, trace=None):
    """Decodes prompt [1, P] (int64); returns the canvas [1, P + gen].

    trace, if a list, gets one dict per step: {"step", "transfer": positions, "tokens": ids}.
    """
    if alg not in ALGORITHMS:
        raise ValueError(f"alg {alg!r} is not one of {ALGORITHMS}")
    x = torch.cat([prompt, torch.full((1, gen), mask_id, dtype=prompt.dtype)], dim=1)
    L = x.shape[1]
    ts = timesteps(steps, eps)
    for i in range(steps):
        masked = (x[0] == mask_id).nonzero()[:, 0].tolist()
        if not masked:  # an iteration without masks changes nothing and draws nothing
            if trace is not None:
                trace.append(dict(step=i, transfer=[], tokens=[]))
            continue
        logits = shifted_logits(model(x), shift)[0, masked].to(torch.float32)
        t, s = ts[i], ts[i + 1]
        last = i == steps - 1
        if alg == "origin":
            p = 1.0 if last else float(1 - s / t)  # float32 ratio, compared in float64
            u = noise.rand((len(masked),), torch.float64) if noise is not None else \
                torch.rand(len(masked), dtype=torch.float64)
            chosen = [masked[j] for j in range(len(masked)) if float(u[j]) < p]
            rows = [j for j in range(len(masked)) if float(u[j]) < p]
            toks = []
            if rows:
                tok, _ = sample_tokens(logits[rows], temperature, top_p, top_k, alg, noise)
                toks = tok.tolist()
        else:
            tok, conf = sample_tokens(logits, temperature, top_p, top_k, alg, noise)
            n = torch.tensor(float(len(masked)), dtype=torch.float32)
            k = len(masked) if last else int(n * (1 - s / t))
            chosen = []
            if k > 0:
                full = torch.full((L,), float("-inf"), dtype=torch.float64)
                full[masked] = conf
                if alg_temp is not None and alg_temp > 0:
                    pr = torch.softmax(full / alg_temp, dim=-1)
                    q = -torch.log(noise.rand((L,), torch.float64))
                    chosen = top_positions(pr / q, k)
                else:
                    chosen = top_positions(full, k)
            where = {p: j for j, p in enumerate(masked)}
            toks = [int(tok[where[p]]) if p in where else mask_id for p in chosen]
        for p, v in zip(chosen, toks):
            x[0, p] = v
        if trace is not None:
            trace.append(dict(step=i, transfer=list(chosen), tokens=list(toks)))
    return x
