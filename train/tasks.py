"""The synthetic task suite of the tiny models: problems with exact answers and written work.

Every problem is a prompt (plain text, what a user types, e.g. "48213+9077=") and an answer: the
exact text the model must generate after the prompt, up to the first EOS. The model generates
GEN_LENGTH = 32 tokens (blocks of 8 / 16 / 32 give 4 / 2 / 1 blocks); every answer is at most 31
bytes and is followed by EOS padding up to that length. Scoring rule (the C++ `llada-eval`
implements the same): decode the generated tokens up to the first EOS (special tokens dropped),
strip leading and trailing whitespace, and compare with the JSONL `answer` field for exact
equality.

Tasks (each writes its work so that later tokens depend on earlier ones, left to right):
  add   "48213+9077="  ->  "10,09,02,17,05 => 57290"
        One entry per column, least significant first: digit of a + digit of b (0 where a number
        is shorter) + carry in, written as two digits. The first digit of an entry is its carry
        out, which the next entry adds. After " => " the sum.
  sub   "5203-867="  ->  "16,13,13,04 => 4336"
        The same for a - b (a >= b): per column, digit of a - digit of b - borrow in; the entry's
        first digit is the borrow out (1 when the column borrowed 10), its second the digit of
        the difference. After " => " the difference.
  sort  "sort 38 27 91 54 66 12:"  ->  "12 27 38 54 66 91"  (5-8 two-digit numbers, ascending)
  word  "Ann had 12, ate 5, got 17."  ->  "12-5=7,+17=24. Answer: 24"
        A running count through two events, each line starting from the previous result; the
        answer is the number after "Answer: ".

Train/test split: a problem is a test problem iff sha256("<task>|<prompt>") mod SPLIT_MOD == 0
(`is_test`); training draws reject test problems, test sets contain only test problems. Small
problem spaces (1-digit additions) therefore keep 1 - 1/SPLIT_MOD of their problems for training.
"""

import hashlib
import json
import random

GEN_LENGTH = 32  # generated tokens per problem; answers are shorter and padded with EOS
SPLIT_MOD = 10  # 1 in SPLIT_MOD problems is a test problem

TASKS = ("add", "sub", "sort", "word")


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


def add_answer(a, b):
    sa, sb = str(a)[::-1], str(b)[::-1]
    n = max(len(sa), len(sb))
    entries, carry = [], 0
    for i in range(n):
        x = int(sa[i]) if i < len(sa) else 0
        y = int(sb[i]) if i < len(sb) else 0
        s = x + y + carry
        entries.append(f"{s:02d}")
        carry = s // 10
    return ",".join(entries) + f" => {a + b}"


def sub_answer(a, b):
    assert a >= b
    sa, sb = str(a)[::-1], str(b)[::-1]
    entries, borrow = [], 0
    for i in range(len(sa)):
        x = int(sa[i])
        y = int(sb[i]) if i < len(sb) else 0
        d = x - y - borrow
        out = 1 if d < 0 else 0
        entries.append(f"{out}{d + 10 * out}")
        borrow = out
    return ",".join(entries) + f" => {a - b}"


def carry_chain(a, b):
    """Longest run of consecutive columns that produce a carry in a + b."""
    best = run = carry = 0
    sa, sb = str(a)[::-1], str(b)[::-1]
    for i in range(max(len(sa), len(sb))):
        x = int(sa[i]) if i < len(sa) else 0
        y = int(sb[i]) if i < len(sb) else 0
        carry = (x + y + carry) // 10
        run = run + 1 if carry else 0
        best = max(best, run)
    return best


def borrow_chain(a, b):
    """Longest run of consecutive columns that borrow in a - b."""
    best = run = borrow = 0
    sa, sb = str(a)[::-1], str(b)[::-1]
    for i in range(len(sa)):
        x = int(sa[i])
        y = int(sb[i]) if i < len(sb) else 0
        borrow = 1 if x - y - borrow < 0 else 0
        run = run + 1 if borrow else 0
        best = max(best, run)
    return best


MAX_DIGITS = 5


def gen_add(rng, hard=False):
    if hard:  # both operands of MAX_DIGITS digits, a carry chain of at least 3 columns
        while True:
            a, b = _rand_digits(rng, MAX_DIGITS), _rand_digits(rng, MAX_DIGITS)
            if carry_chain(a, b) >= 3:
                break
    else:
        a = _rand_digits(rng, rng.randint(1, MAX_DIGITS))
        b = _rand_digits(rng, rng.randint(1, MAX_DIGITS))
    return f"{a}+{b}=", add_answer(a, b), {"a": a, "b": b}


def gen_sub(rng, hard=False):
    if hard:  # MAX_DIGITS-digit operands, a borrow chain of at least 3 columns
        while True:
            a, b = _rand_digits(rng, MAX_DIGITS), _rand_digits(rng, MAX_DIGITS)
            a, b = max(a, b), min(a, b)
            if borrow_chain(a, b) >= 3:
                break
    else:
        na = rng.randint(1, MAX_DIGITS)
        nb = rng.randint(1, na)
        a, b = _rand_digits(rng, na), _rand_digits(rng, nb)
        a, b = max(a, b), min(a, b)
    return f"{a}-{b}=", sub_answer(a, b), {"a": a, "b": b}


# ---------------------------------------------------------------------------------------------
# sort

SORT_MIN, SORT_MAX = 5, 8


def sort_answer(nums):
    return " ".join(str(v) for v in sorted(nums))


def gen_sort(rng, hard=False):
    if hard:  # the longest lists, from a window of 20 values: many share their tens digit
        k = SORT_MAX
        lo = rng.randint(10, 80)
        nums = [rng.randint(lo, lo + 19) for _ in range(k)]
    else:
        k = rng.randint(SORT_MIN, SORT_MAX)
        nums = [rng.randint(10, 99) for _ in range(k)]
    return "sort " + " ".join(str(v) for v in nums) + ":", sort_answer(nums), {"nums": nums}


# ---------------------------------------------------------------------------------------------
# word

NAMES = ("Ann", "Bob", "Cal", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kim", "Liz",
         "Max", "Ned", "Oli", "Pam", "Ray", "Sam", "Tom", "Uma", "Vic", "Wes", "Zoe")
PLUS = ("got", "won", "made")
MINUS = ("ate", "lost", "sold", "gave")
WORD_EVENTS = 2


def word_answer(start, events):
    """events: list of (verb, n). Returns the worked answer text."""
    cur, lines = start, []
    for i, (verb, n) in enumerate(events):
        new = cur + n if verb in PLUS else cur - n
        assert new >= 0
        lines.append(f"{cur if i == 0 else ''}{'+' if verb in PLUS else '-'}{n}={new}")
        cur = new
    return ",".join(lines) + f". Answer: {cur}"


def word_value(start, events):
    cur = start
    for verb, n in events:
        cur = cur + n if verb in PLUS else cur - n
    return cur


def _word_events(rng, start, k):
    events, cur = [], start
    for _ in range(k):
        n = rng.randint(1, 99)
        if n <= cur and rng.random() < 0.5:
            verb = rng.choice(MINUS)
            cur -= n
        else:
            verb = rng.choice(PLUS)
            cur += n
        events.append((verb, n))
    return events


def _word_hard(start, events):
    """Every event carries (addition) or borrows (subtraction) in its units digit."""
    cur = start
    for verb, n in events:
        if verb in PLUS:
            if cur % 10 + n % 10 < 10:
                return False
            cur += n
        else:
            if cur % 10 >= n % 10:
                return False
            cur -= n
    return True


def gen_word(rng, hard=False):
    name = rng.choice(NAMES)
    while True:
        start = rng.randint(10, 99)
        k = WORD_EVENTS
        events = _word_events(rng, start, k)
        if not hard or _word_hard(start, events):
            break
    prompt = f"{name} had {start}, " + ", ".join(f"{v} {n}" for v, n in events) + "."
    return prompt, word_answer(start, events), {"start": start, "events": events}


GENERATORS = {"add": gen_add, "sub": gen_sub, "sort": gen_sort, "word": gen_word}


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


def score(generated_text, answer):
    return normalize(generated_text) == normalize(answer)
