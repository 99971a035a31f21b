"""Reference of LLaDA's `generate()` (the `vanilla` decoding policy), written from its semantics.

This is the oracle for decode/'s `vanilla` policy (docs/design.md, "Decoding policies") and the decoder
the training code uses for evaluation. It reproduces ML-GSAI/LLaDA's generate.py step for step
(check_against_upstream.py verifies that on a local mirror):

  * canvas = prompt + gen_length mask ids; the generated span is cut into blocks of block_length
    that are decoded left to right, each with steps / n_blocks steps;
  * per block, the number of positions to commit at each step is get_num_transfer_tokens() of the
    block's masked count: an even split, the remainder going to the first steps;
  * per step, one full forward over the canvas (two with classifier-free guidance: the canvas
    and a copy whose prompt positions are masked, guided = u + (w + 1) * (c - u));
  * candidate token = argmax of the Gumbel-noised logits exp(l) / (-log u)^T, in float64
    (T = 0: argmax of the logits, and no noise is drawn);
  * confidence = softmax(logits)[candidate] (`low_confidence`) or a fresh uniform draw
    (`random`); it is -inf at positions past the current block and at positions that are not
    masked; the top-k confidences of each row are committed.

Every uniform number comes from a `noise` object, so a run can be recorded (RecordingNoise) and
replayed bit for bit (ReplayNoise), which is how the C++ tests reproduce T > 0 trajectories.
Draw order per step: the Gumbel uniforms, float64, shape [B, L, V] (only when T > 0), then the
`random` remasking uniforms, float32, shape [B, L] (only for `random`).

Not reproduced: upstream's `attention_mask` (left padding), `logits_eos_inf` and
`confidence_eos_eot_inf` options. As upstream, prompts must have equal length and a mask id
inside the prompt is treated like any other masked position (it may be filled in).
"""

import math

import torch
import torch.nn.functional as F

from vocab import MASK

REMASKING = ("low_confidence", "random")


class TorchNoise:
    """Uniform [0, 1) draws from torch.rand.

    With `generator=None` and no seed the global torch RNG is used, which is what upstream
    does; that is how check_against_upstream.py gets identical draws from identical seeds.
    """

    def __init__(self, seed=None, generator=None):
        if generator is None and seed is not None:
            generator = torch.Generator().manual_seed(seed)
        self.generator = generator

    def rand(self, shape, dtype=torch.float64):
        return torch.rand(tuple(shape), generator=self.generator, dtype=dtype)


class RecordingNoise:
    """Wraps another noise source and keeps every draw, in draw order, as float64.

    float32 draws (the `random` remasking ones) are stored exactly, since float64 holds every
    float32 value; ReplayNoise casts them back without loss.
    """

    def __init__(self, inner=None, seed=0):
        self.inner = inner if inner is not None else TorchNoise(seed=seed)
        self.draws = []  # one flat float64 tensor per rand() call

    def rand(self, shape, dtype=torch.float64):
        t = self.inner.rand(shape, dtype)
        self.draws.append(t.detach().reshape(-1).to(device="cpu", dtype=torch.float64).clone())
        return t

    @property
    def count(self):
        return sum(d.numel() for d in self.draws)

    def values(self):
        """All draws concatenated: a flat float64 tensor."""
        if not self.draws:
            return torch.zeros(0, dtype=torch.float64)
        return torch.cat(self.draws)


class ReplayNoise:
    """Serves recorded uniforms (a flat float64 sequence) back in order."""

    def __init__(self, values):
        self.values = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
        self.pos = 0

    def rand(self, shape, dtype=torch.float64):
        n = math.prod(shape)
        if self.pos + n > self.values.numel():
            raise RuntimeError(f"ReplayNoise exhausted: {n} draws requested at {self.pos} "
                               f"of {self.values.numel()}")
        # A copy: the caller may write into it (generate() sets out-of-block confidences).
        t = self.values[self.pos:self.pos + n].reshape(tuple(shape)).to(dtype).clone()
        self.pos += n
        return t

    @property
    def remaining(self):
        return self.values.numel() - self.pos


def get_num_transfer_tokens(mask_index, steps):
    """Positions to commit at each of `steps` steps, per row: [B, steps] int64.

    mask_index: [B, n] bool, the masked positions of the block. LLaDA's schedule is linear in
    time, so each step commits the same count; the remainder goes to the earliest steps.
    """
    mask_num = mask_index.sum(dim=1, keepdim=True).to(torch.int64)
    base = mask_num // steps
    remainder = mask_num % steps
    step = torch.arange(steps, device=mask_index.device)[None, :]
    return base + (step < remainder).to(torch.int64)


def add_gumbel_noise(logits, temperature, noise):
    """exp(l) / (-log u)^T in float64; its argmax is a sample of softmax(l / T).

    float64 because the LLaDA authors found low-precision Gumbel-max hurts generation quality;
    the exact formula (not l/T + Gumbel) is kept so argmax ties resolve as upstream's do.
    """
    if temperature == 0:
        return logits
    logits = logits.to(torch.float64)
    u = noise.rand(logits.shape, torch.float64).to(logits.device)
    return logits.exp() / (-torch.log(u)) ** temperature


def _logits(model, x):
    out = model(x)
    return out.logits if hasattr(out, "logits") else out


def guided_logits(model, x, prompt_index, cfg_scale, mask_id):
    """The model's logits for canvas x, with classifier-free guidance when cfg_scale > 0.

    The conditional and unconditional canvases go through the model as one batch, as upstream
    does, so batch-dependent kernels see the same shapes.
    """
    if cfg_scale <= 0:
        return _logits(model, x)
    un_x = x.clone()
    un_x[prompt_index] = mask_id
    cond, uncond = torch.chunk(_logits(model, torch.cat([x, un_x], dim=0)), 2, dim=0)
    return uncond + (cfg_scale + 1) * (cond - uncond)


@torch.no_grad()
def generate(model, prompt, steps, gen_length, block_length, temperature=0.0, cfg_scale=0.0,
             remasking="low_confidence", mask_id=MASK, noise=None, trace=None, hook=None):
    """Decodes `gen_length` tokens after each row of `prompt` ([B, P] int64, equal lengths).

    model: called as model(x) with x [B', L] int64, returns logits [B', L, V] (or an object with
        `.logits`, as Hugging Face models return).
    steps: total forward steps (per canvas); must be a multiple of gen_length / block_length.
    noise: object with rand(shape, dtype=torch.float64) -> tensor of uniforms in [0, 1);
        default TorchNoise(seed=0). Nothing is drawn for T = 0 with `low_confidence`.
    trace: if a list, gets one dict per step: {"block", "step", "positions", "tokens"}, the last
        two being per-row lists of the committed positions (ascending) and their tokens.
    hook: if given, called once per step with a dict of that step's tensors (for diagnostics:
        logits, noised logits, candidates, confidence, commit counts and mask).
    Returns the final canvas [B, P + gen_length].
    """
    if remasking not in REMASKING:
        raise ValueError(f"remasking must be one of {REMASKING}, not {remasking!r}")
    if prompt.dim() != 2:
        raise ValueError("prompt must be [B, P]")
    if block_length <= 0 or gen_length <= 0 or gen_length % block_length != 0:
        raise ValueError(f"gen_length {gen_length} is not a positive multiple of "
                         f"block_length {block_length}")
    n_blocks = gen_length // block_length
    if steps <= 0 or steps % n_blocks != 0:
        raise ValueError(f"steps {steps} is not a positive multiple of the {n_blocks} blocks")
    steps_per_block = steps // n_blocks
    if noise is None:
        noise = TorchNoise(seed=0)

    B, P = prompt.shape
    x = torch.full((B, P + gen_length), mask_id, dtype=torch.long, device=prompt.device)
    x[:, :P] = prompt
    # Positions given at the start; only these are masked in CFG's unconditional canvas.
    prompt_index = x != mask_id

    for b in range(n_blocks):
        block_end = P + (b + 1) * block_length
        block_masks = x[:, block_end - block_length:block_end] == mask_id
        n_transfer = get_num_transfer_tokens(block_masks, steps_per_block)
        for s in range(steps_per_block):
            # Over the whole canvas: any masked position up to the block end may be committed.
            mask_index = x == mask_id
            logits = guided_logits(model, x, prompt_index, cfg_scale, mask_id)
            noised = add_gumbel_noise(logits, temperature, noise)
            x0 = torch.argmax(noised, dim=-1)
            if remasking == "low_confidence":
                p = F.softmax(logits, dim=-1)
                x0_p = torch.gather(p, -1, x0.unsqueeze(-1)).squeeze(-1)
            else:
                # float32 like upstream's torch.rand default, whatever the model's dtype.
                x0_p = noise.rand((B, x.shape[1]), torch.float32).to(x.device)
            x0_p[:, block_end:] = -math.inf
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, torch.full_like(x0_p, -math.inf))

            transfer = torch.zeros_like(x, dtype=torch.bool)
            # Per row because k may differ between rows (different masked counts).
            for j in range(B):
                _, idx = torch.topk(confidence[j], k=int(n_transfer[j, s]))
                transfer[j, idx] = True
            x[transfer] = x0[transfer]

            if hook is not None:
                hook({"block": b, "step": s, "logits": logits, "noised": noised, "x0": x0,
                      "confidence": confidence, "k": n_transfer[:, s], "transfer": transfer,
                      "mask_index": mask_index})
            if trace is not None:
                positions, tokens = [], []
                for j in range(B):
                    pos = torch.nonzero(transfer[j]).flatten()  # ascending
                    positions.append(pos.tolist())
                    tokens.append(x[j, pos].tolist())
                trace.append({"block": b, "step": s, "positions": positions, "tokens": tokens})
    return x
