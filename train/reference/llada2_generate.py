"""Reference decoding of LLaDA 2.x: LLaDA2.0's block-wise generate() and LLaDA2.1's token editing.

Written from the published algorithm (docs/llada2.md, "Decoding"); the C++ policy `llada2`
(decode/block_diffusion.h) is held to the trajectories this writes (train/
make_llada2_decode_fixtures.py). No KV cache: every step runs the forward over the whole window
from position 0 to the current block's end, under block-causal attention with the decoding
block as the attention block, as the published code does. Greedy (the argmax and its softmax
probability).

  * The canvas is the prompt, then masks up to a whole number of blocks that holds prompt + gen
    positions. Blocks are counted from position 0, so the first block decoded may hold the
    prompt's last tokens (only its masks change).
  * LLaDA2.0 (editing_threshold None): a block of m masks gets `steps` steps with a quota of
    m // steps positions per step, the remainder to the first steps. A step commits every mask
    whose probability is >= threshold when there are at least the quota of them, else the
    quota's most confident masks. The block ends when it holds no mask.
  * LLaDA2.1 (editing_threshold set): a step commits every mask whose probability is >=
    threshold, or the most confident one when none is; in the same step every token of the
    block that was committed before it (not the prompt's) whose argmax is another token with
    probability > editing_threshold is replaced by that token. A step that starts without a mask
    is a post-step: the block ends after a post-step without an edit, or after max_post_steps.
  * Generation stops after a block that holds the end-of-text id (the rest stays masked).

Each step's record: the positions committed (with their tokens) and edited (from, to), and the
smallest margin of any decision the step made (argmax against the runner-up, a probability
against the threshold it was compared with, the quota's last chosen against the first left
out), so a fixture can prove its decisions are far from a tie.
"""

import torch


def generate(model, prompt, gen, block, threshold, mask, eos, steps=None,
             editing_threshold=None, max_post_steps=16):
    """Decodes `prompt` (list of ids); returns (canvas, [step records])."""
    P = len(prompt)
    n_blocks = -(-(P + gen) // block)
    L = n_blocks * block
    x = list(prompt) + [mask] * (L - P)
    steps = block if steps is None else steps
    records = []
    for b in range(P // block, n_blocks):
        s, e = b * block, (b + 1) * block
        m = sum(1 for p in range(s, e) if x[p] == mask)
        quota = [m // steps + (1 if i < m % steps else 0) for i in range(steps)]
        i = post = 0
        while True:
            masks = [p for p in range(s, e) if x[p] == mask]
            if editing_threshold is None and (not masks or i >= steps):
                break
            if editing_threshold is not None and not masks:
                if post >= max_post_steps:
                    break
                post += 1
            with torch.no_grad():
                logits = model(torch.tensor(x[:e]), block=block)
            probs = torch.softmax(logits.to(torch.float64), dim=-1)
            top2 = probs.topk(2, dim=-1)
            conf, tok = top2.values[:, 0], top2.indices[:, 0]
            margin = float("inf")
            rec = {"block": b, "step": i, "committed": [], "edited": []}
            # Commits among the masks.
            if masks:
                c = {p: float(conf[p]) for p in masks}
                for p in masks:
                    margin = min(margin, float(top2.values[p, 0] - top2.values[p, 1]),
                                 abs(c[p] - threshold))
                above = [p for p in masks if c[p] >= threshold]
                k = quota[i] if editing_threshold is None else 1
                if len(above) >= k and above:
                    chosen = above
                else:
                    order = sorted(masks, key=lambda p: -c[p])
                    chosen = order[:k]
                    if k < len(order):
                        margin = min(margin, c[order[k - 1]] - c[order[k]]) if k > 0 else margin
                chosen = sorted(chosen)
            else:
                chosen = []
            # Edits among the block's tokens committed before this step.
            edits = []
            if editing_threshold is not None:
                for p in range(max(s, P), e):
                    if x[p] == mask:
                        continue
                    margin = min(margin, abs(float(conf[p]) - editing_threshold))
                    if float(conf[p]) <= editing_threshold:
                        continue
                    margin = min(margin, float(top2.values[p, 0] - top2.values[p, 1]))
                    if int(tok[p]) != x[p]:
                        edits.append((p, x[p], int(tok[p])))
            for p in chosen:
                x[p] = int(tok[p])
                rec["committed"].append([p, x[p]])
            for p, f, t in edits:
                x[p] = t
                rec["edited"].append([p, f, t])
            rec["margin"] = margin
            records.append(rec)
            i += 1
            if editing_threshold is not None and not masks and not edits:
                break
        if any(x[p] == eos for p in range(max(s, P), e)):
            break
    return x, records
