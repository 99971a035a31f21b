"""The synthetic task suite of the tiny models: problems with exact answers and written work.

Every problem is a prompt (plain text, what a user types, e.g. "8213+0077=") and an answer: the
exact text the model must generate after the prompt, up to the first EOS. The model generates
GEN_LENGTH = 32 tokens (blocks of 8 / 16 / 32 give 4 / 2 / 1 blocks); every answer is at most 31
bytes and is followed by EOS padding up to that length. Scoring rule (the C++ `llada-eval`
implements the same): decode the generated tokens up to the first EOS (special tokens dropped),
strip leading and trailing whitespace, and compare with the JSONL `answer` field for exact
equality. Numbers are written with a fixed number of digits (leading zeros), so every answer of
a task has the same length and layout (see the add/sub section for why). A second, long suite
(LONG_TASKS: ladd, lsub; tiny-llada-l's) generates 128 tokens in blocks of 32 with
answers of 103-104 bytes; it is described where it is defined, below.

Tasks (add and sub write their work so that later tokens depend on earlier ones; sort's later
slots depend on which numbers the earlier ones used; every digit of cum depends on the one
before it):
  add   "8213+0077="  ->  "10,09,02,08 => 08290"
        One entry per column, least significant first: digit of a + digit of b + carry in,
        written as two digits. The first digit of an entry is its carry out, which the next
        entry adds. After " => " the sum with WIDTH + 1 digits.
  sub   "5203-0867="  ->  "16,13,13,04 => 4336"
        The same for a - b (a >= b): per column, digit of a - digit of b - borrow in; the entry's
        first digit is the borrow out (1 when the column borrowed 10), its second the digit of
        the difference. After " => " the difference with WIDTH digits.
  sort  "sort 38 27 91 54 66 12:"  ->  "12 27 38 54 66 91"  (six two-digit numbers, ascending)
  cum   "cum 83533740681241586834:"  ->  "81692933978045084259"  (running sum mod 10 of 20 digits)

Train/test split: a problem is a test problem iff sha256("<task>|<prompt>") mod SPLIT_MOD == 0
(`is_test`); training draws reject test problems, test sets contain only test problems. Small
problem spaces (1-digit additions) therefore keep 1 - 1/SPLIT_MOD of their problems for training.
"""

import hashlib
import json
import random

GEN_LENGTH = 32  # generated tokens per problem; answers are shorter and padded with EOS
SPLIT_MOD = 10  # 1 in SPLIT_MOD problems is a test problem

TASKS = ("add", "sub", "sort", "cum")


def is_test(task, prompt):
    h = hashlib.sha256(f"{task}|{prompt}".encode("utf-8")).digest()
    return int.from_bytes(h[:8], "little") % SPLIT_MOD == 0


def _rand_digits(rng, n):
    """A uniformly random n-digit number (no leading zero; n = 1 includes 0)."""
    if n == 1:
        return rng.randint(0, 9)
    return rng.randint(10 ** (n - 1), 10 ** n - 1)


# ---------------------------------------------------------------------------------------------
# add / sub
#
# Every number is written with a fixed number of digits (leading zeros), so column i of the
# scratchpad sits at the same place for every problem. A bidirectional model has to find a
# column's digits by their position; with variable widths it must count first, which masked
# diffusion models of this size learn far more slowly than the arithmetic itself (the first
# version of this suite used natural widths: the autoregressive twin reached 87.5 %, the LLaDA
# model 1-2 % on add/sub after the same training).

WIDTH = 4  # digits of every operand; sums have WIDTH + 1 digits, differences WIDTH


def _pad(v, n):
    return f"{v:0{n}d}"


def add_answer(a, b):
    sa, sb = _pad(a, WIDTH)[::-1], _pad(b, WIDTH)[::-1]
    entries, carry = [], 0
    for i in range(WIDTH):
        s = int(sa[i]) + int(sb[i]) + carry
        entries.append(f"{s:02d}")
        carry = s // 10
    return ",".join(entries) + f" => {_pad(a + b, WIDTH + 1)}"


def sub_answer(a, b):
    assert a >= b
    sa, sb = _pad(a, WIDTH)[::-1], _pad(b, WIDTH)[::-1]
    entries, borrow = [], 0
    for i in range(WIDTH):
        d = int(sa[i]) - int(sb[i]) - borrow
        out = 1 if d < 0 else 0
        entries.append(f"{out}{d + 10 * out}")
        borrow = out
    return ",".join(entries) + f" => {_pad(a - b, WIDTH)}"


def carry_chain(a, b, width=WIDTH):
    """Longest run of consecutive columns that produce a carry in a + b (width-digit operands)."""
    best = run = carry = 0
    sa, sb = _pad(a, width)[::-1], _pad(b, width)[::-1]
    for i in range(width):
        carry = (int(sa[i]) + int(sb[i]) + carry) // 10
        run = run + 1 if carry else 0
        best = max(best, run)
    return best


def borrow_chain(a, b, width=WIDTH):
    """Longest run of consecutive columns that borrow in a - b (width-digit operands)."""
    best = run = borrow = 0
    sa, sb = _pad(a, width)[::-1], _pad(b, width)[::-1]
    for i in range(width):
        borrow = 1 if int(sa[i]) - int(sb[i]) - borrow < 0 else 0
        run = run + 1 if borrow else 0
        best = max(best, run)
    return best


def gen_add(rng, hard=False):
    if hard:  # both operands of WIDTH significant digits, a carry chain of at least 3 columns
        while True:
            a, b = _rand_digits(rng, WIDTH), _rand_digits(rng, WIDTH)
            if carry_chain(a, b) >= 3:
                break
    else:  # 1 to WIDTH significant digits each
        a = _rand_digits(rng, rng.randint(1, WIDTH))
        b = _rand_digits(rng, rng.randint(1, WIDTH))
    return f"{_pad(a, WIDTH)}+{_pad(b, WIDTH)}=", add_answer(a, b), {"a": a, "b": b}


def gen_sub(rng, hard=False):
    if hard:  # WIDTH-digit operands, a borrow chain of at least 3 columns
        while True:
            a, b = _rand_digits(rng, WIDTH), _rand_digits(rng, WIDTH)
            a, b = max(a, b), min(a, b)
            if borrow_chain(a, b) >= 3:
                break
    else:
        na = rng.randint(1, WIDTH)
        nb = rng.randint(1, na)
        a, b = _rand_digits(rng, na), _rand_digits(rng, nb)
        a, b = max(a, b), min(a, b)
    return f"{_pad(a, WIDTH)}-{_pad(b, WIDTH)}=", sub_answer(a, b), {"a": a, "b": b}


# ---------------------------------------------------------------------------------------------
# sort

SORT_N = 6  # numbers per list (two digits each)


def sort_answer(nums):
    return " ".join(str(v) for v in sorted(nums))


def gen_sort(rng, hard=False):
    if hard:  # values from a window of 20: many share their tens digit
        lo = rng.randint(10, 80)
        nums = [rng.randint(lo, lo + 19) for _ in range(SORT_N)]
    else:
        nums = [rng.randint(10, 99) for _ in range(SORT_N)]
    return "sort " + " ".join(str(v) for v in nums) + ":", sort_answer(nums), {"nums": nums}


# ---------------------------------------------------------------------------------------------
# cum
#
# The running sum mod 10 of a fixed-length digit string: answer digit i = (answer digit i - 1 +
# prompt digit i) mod 10. Written left to right, every digit is a two-input lookup (the digit
# before it and the prompt digit at a fixed place); without the digit before it, it needs the sum
# of all prompt digits up to i, which a small model cannot do in one forward pass. So it is the
# suite's order-dependent task: decoded one token per step it is as easy as add's columns, decoded
# many tokens per step it fails. (The fourth version of the suite had string reversal here, a
# pure lookup that loses nothing when decoded in parallel; models/README.md, "History of the
# suite".)

CUM_N = 20  # digits per string


def cum_answer(digits):
    out, acc = [], 0
    for d in digits:
        acc = (acc + int(d)) % 10
        out.append(str(acc))
    return "".join(out)


def gen_cum(rng, hard=False):
    # hard: digits 5-9 only, so (almost) every step wraps past 10
    lo = 5 if hard else 0
    s = "".join(str(rng.randint(lo, 9)) for _ in range(CUM_N))
    return f"cum {s}:", cum_answer(s), {"s": s}


# ---------------------------------------------------------------------------------------------
# The long suite (tiny-llada-l): answers of 103-104 bytes (the retired lmul and lcum: 104 and
# 119), generated as 128 tokens in blocks of 32
#
# Every answer has a fixed layout (same length for every problem of a task) and its later parts
# depend on earlier ones across the block boundaries at 32, 64 and 96: a carry or a register
# value is written in one entry and read by the next. Each token is a small function of a few
# tokens at fixed distances (the lesson of the short suite: a tiny bidirectional model learns
# lookups at fixed places, not counting), so decoded one token per step every task is a chain of
# easy steps; decoded many tokens per step the chain breaks.
#
#   ladd   "4831920375+0960388214="  ->  "5+4+0=09,7+1+0=08,3+2+0=05,0+8+0=08,2+8+0=10,9+3+1=13,
#          1+0+1=02,3+6+0=09,8+9+0=17,4+0+1=05 => 05792308589"  (104 bytes)
#          10-digit operands; one entry per column, least significant first: digit of a, digit
#          of b, carry in (the first digit of the previous entry's sum), their two-digit sum.
#          After " => " the sum with 11 digits.
#   lmul   "5038114926*7="  ->  "6*7+0=42,2*7+4=18,9*7+1=64,...,5*7+0=35 => 35266804482"  (104 bytes)
#          A 10-digit number times one digit (2-9): per column digit * m + carry in = two digits,
#          the first of which is the next column's carry. After " => " the product, 11 digits.
#   lsub   "4831920375-0960388214="  ->  "5-4-0=01,7-1-0=06,3-2-0=01,0-8-0=12,2-8-1=13,9-3-1=05,
#          1-0-0=01,3-6-0=17,8-9-1=18,4-0-1=03 => 3871532161"  (103 bytes)
#          a - b with a >= b (10-digit operands): per column digit of a - digit of b - borrow in;
#          the entry's first digit is the borrow out (1 when the column borrowed 10), which the
#          next entry subtracts, the second the difference's digit. After " => " the
#          difference, 10 digits.
#   lcum   "lcum 83533740681241586834:"  ->  "0+8=8,8+3=1,1+5=6,...,5+4=9"  (119 bytes)
#          The running sum mod 10 of 20 digits, one entry per digit: the previous entry's
#          result plus the prompt's next digit, mod 10.
#
# The suite is LONG_TASKS = ladd + lsub. `lmul` and `lcum` stay defined (their generators and
# checks are tested) but are no longer trained or tested: beside ladd and lsub they took the
# 870 k-parameter dLLM's budget without being learned (lcum 0 %, lmul 26 %, while ladd fell from
# 94.8 to 63.6 %). Two earlier members were dropped because even the AR twin could not learn
# them within the budget: `trace` (three registers through twelve operations; AR twin 73.6 %,
# dLLM 0 %) and `lsort` (31 two-digit numbers sorted; 64.4 % and 0 %). models/README.md
# ("History of the suite") has their numbers.

GEN_LENGTH_L = 128  # generated tokens per problem of the long suite
BLOCK_LENGTH_L = 32  # its default block: four blocks per answer
LONG_TASKS = ("ladd", "lsub")
LWIDTH = 10  # digits of ladd's operands and lmul's multiplicand


def _column_entries(a_digits, b_digits, op, m=None):
    """The scratchpad entries of ladd (op "+") or lmul (op "*") and the final carry."""
    entries, carry = [], 0
    for i in range(LWIDTH):
        da = int(a_digits[i])
        if op == "+":
            db = int(b_digits[i])
            s = da + db + carry
            entries.append(f"{da}+{db}+{carry}={s:02d}")
        else:
            s = da * m + carry
            entries.append(f"{da}*{m}+{carry}={s:02d}")
        carry = s // 10
    return entries, carry


def ladd_answer(a, b):
    entries, _ = _column_entries(_pad(a, LWIDTH)[::-1], _pad(b, LWIDTH)[::-1], "+")
    return ",".join(entries) + f" => {_pad(a + b, LWIDTH + 1)}"


def lmul_answer(a, m):
    entries, _ = _column_entries(_pad(a, LWIDTH)[::-1], None, "*", m)
    return ",".join(entries) + f" => {_pad(a * m, LWIDTH + 1)}"


def gen_ladd(rng, hard=False):
    if hard:  # full-width operands with a carry chain of at least 6 columns
        while True:
            a, b = _rand_digits(rng, LWIDTH), _rand_digits(rng, LWIDTH)
            if carry_chain(a, b, LWIDTH) >= 6:
                break
    else:
        a = _rand_digits(rng, rng.randint(1, LWIDTH))
        b = _rand_digits(rng, rng.randint(1, LWIDTH))
    return f"{_pad(a, LWIDTH)}+{_pad(b, LWIDTH)}=", ladd_answer(a, b), {"a": a, "b": b}


def gen_lmul(rng, hard=False):
    if hard:  # multipliers 7-9 on full-width numbers of digits 5-9: a large carry every column
        m = rng.randint(7, 9)
        a = int("".join(str(rng.randint(5, 9)) for _ in range(LWIDTH)))
    else:
        m = rng.randint(2, 9)
        a = _rand_digits(rng, rng.randint(1, LWIDTH))
    return f"{_pad(a, LWIDTH)}*{m}=", lmul_answer(a, m), {"a": a, "m": m}


def lsub_answer(a, b):
    assert a >= b
    sa, sb = _pad(a, LWIDTH)[::-1], _pad(b, LWIDTH)[::-1]
    entries, borrow = [], 0
    for i in range(LWIDTH):
        da, db = int(sa[i]), int(sb[i])
        d = da - db - borrow
        out = 1 if d < 0 else 0
        entries.append(f"{da}-{db}-{borrow}={out}{d + 10 * out}")
        borrow = out
    return ",".join(entries) + f" => {_pad(a - b, LWIDTH)}"


def gen_lsub(rng, hard=False):
    if hard:  # full-width operands with a borrow chain of at least 6 columns
        while True:
            a, b = sorted((_rand_digits(rng, LWIDTH), _rand_digits(rng, LWIDTH)), reverse=True)
            if borrow_chain(a, b, LWIDTH) >= 6:
                break
    else:
        a, b = sorted((_rand_digits(rng, rng.randint(1, LWIDTH)),
                       _rand_digits(rng, rng.randint(1, LWIDTH))), reverse=True)
    return f"{_pad(a, LWIDTH)}-{_pad(b, LWIDTH)}=", lsub_answer(a, b), {"a": a, "b": b}


LCUM_N = 20


def lcum_answer(digits):
    entries, s = [], 0
    for c in digits:
        r = (s + int(c)) % 10
        entries.append(f"{s}+{c}={r}")
        s = r
    return ",".join(entries)


def gen_lcum(rng, hard=False):
    # hard: digits 5-9 only, so nearly every entry wraps around 10
    digits = "".join(str(rng.randint(5 if hard else 0, 9)) for _ in range(LCUM_N))
    return f"lcum {digits}:", lcum_answer(digits), {"digits": digits}


# The `real` suite (tasks_real.py): answers with many valid forms, scored by a checker.
import tasks_real  # noqa: E402

REAL_TASKS = ("rwalk", "rsent", "ladd")

GENERATORS = {"add": gen_add, "sub": gen_sub, "sort": gen_sort, "cum": gen_cum,
              "ladd": gen_ladd, "lmul": gen_lmul, "lsub": gen_lsub, "lcum": gen_lcum,
              **tasks_real.GENERATORS_R}
# suite name -> (tasks, generated tokens per problem, default block length)
SUITES = {"short": (TASKS, GEN_LENGTH, GEN_LENGTH), "long": (LONG_TASKS, GEN_LENGTH_L, BLOCK_LENGTH_L),
          "real": (REAL_TASKS, tasks_real.GEN_LENGTH_R, tasks_real.BLOCK_LENGTH_R)}
# Tasks of each suite that have a hard variant (every task but rsent).
HARD_TASKS = {"short": TASKS, "long": LONG_TASKS, "real": tasks_real.HARD_TASKS_R}
# Tasks scored by a checker rather than by equality with the reference answer.
CHECKERS = tasks_real.CHECKERS


# ---------------------------------------------------------------------------------------------
# sampling with the split


def sample_train(rng, task):
    """A training problem (prompt, answer): never one that is_test."""
    while True:
        prompt, answer, _ = GENERATORS[task](rng)
        if not is_test(task, prompt):
            return prompt, answer


def make_test_set(task, n, seed, hard=False):
    """n distinct test problems of `task` (dicts with task/prompt/answer), deterministic."""
    rng = random.Random(f"{seed}|{task}|{'hard' if hard else 'test'}")
    out, seen = [], set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 10000 * n:
            raise RuntimeError(f"cannot find {n} test problems for {task}")
        prompt, answer, _ = GENERATORS[task](rng, hard=hard)
        if prompt in seen or not is_test(task, prompt):
            continue
        seen.add(prompt)
        out.append({"task": task, "prompt": prompt, "answer": answer})
    return out


def make_dev_set(task, n, seed, exclude):
    """n distinct problems of `task` from the test split (never trained on) that are not in
    `exclude` (the prompts of its test sets): a held-out set to choose a checkpoint by, so that
    the test sets stay unseen by every choice."""
    rng = random.Random(f"{seed}|{task}|dev")
    out, seen = [], set(exclude)
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 10000 * n:
            raise RuntimeError(f"cannot find {n} dev problems for {task}")
        prompt, answer, _ = GENERATORS[task](rng)
        if prompt in seen or not is_test(task, prompt):
            continue
        seen.add(prompt)
        out.append({"task": task, "prompt": prompt, "answer": answer})
    return out


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({"task": r["task"], "prompt": r["prompt"], "answer": r["answer"]},
                               ensure_ascii=False) + "\n")


def normalize(text):
    """The scoring normalisation: strip surrounding whitespace."""
    return text.strip()


def score(generated_text, answer, task=None, prompt=None):
    """The scoring rule: the task's checker where it has one (tasks_real.CHECKERS), else the
    normalised text equals the reference answer."""
    if task in CHECKERS:
        return CHECKERS[task](prompt, normalize(generated_text))
    return normalize(generated_text) == normalize(answer)
