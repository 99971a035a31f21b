"""The `real` suite: tasks with many valid answers, each scored by a checker.

Why it exists: on the ladd/lsub suite every answer token is determined by the prompt, so a
trained model is near-certain of every position and threshold decoding commits a 32-token block
in about one forward (~30 tokens per forward). Published LLaDA-8B figures at threshold 0.9 are
2.8-2.9 tokens per forward (docs/real-model-decoding.md): real text leaves many positions open,
and two open positions decoded in one step can each take a locally likely value that is not
jointly valid. These tasks have that property by construction. Each answer mixes free tokens
(several values are valid, and the training data draws them uniformly, so a model that learned
the task spreads its probability over them) with tokens that the free ones determine, and the
dependencies run across the 32-token block boundaries.

Generated as 128 tokens in blocks of 32 (GEN_LENGTH_R, BLOCK_LENGTH_R), like the long suite.
Scoring (the C++ llada-eval applies the same rules, tools/checkers.cpp): the generated text up
to the first EOS, with surrounding whitespace removed, must pass the task's checker; `answer`
in a test file is one valid answer (a reference, not the only one). ladd keeps the exact-match
rule of tasks.py.

  rwalk  "walk c; a:bdf b:ace c:adh d:bcg e:afh f:bdg g:ceh h:abf;"  ->  "cafdgc..." (72 nodes)
         A walk of WALK_N nodes through a directed graph of 8 nodes, each with 3 out-neighbours
         (listed at fixed places in the prompt: node k's list is 6 characters after node k-1's).
         The walk starts at the named node; every next node is one of the current node's three.
         Free: every node after the first (3 choices). Joint failure: two neighbouring nodes
         decided in one step, each a plausible node, but not an edge.
  rpick  "pick 14 of a27 c70 f93 ...:"  ->  "f93 a27 ..."
         n distinct items (12-20) of the prompt's list of 20 (a letter and two digits each), in
         any order, each copied whole. Free: which item (its letter); its digits are copied.
         Every order is as good as another, so the task is as easy in any decoding order.
         Joint failure: two positions decided in one step that take the same item.
  rsent  "story of the dogs; ant cat cow dog; fear like love mind:"  ->
         "the dogs like a cat. the cat fears two cows. the cows ..."
         SENT_N sentences "<subject> <verb> <object>." of a small grammar with agreement, using
         only the prompt's four nouns and four verbs (of eight each): the
         subject is "the" and the previous sentence's object noun in its number (the first
         sentence's from the prompt); the verb takes -s after a singular subject; the object is
         "a"/"an" (singular; "an" before a vowel) or "the" (either number) or "two" (plural),
         then a noun, with -s when plural. Free: the verb, the article, the noun, and the number
         after "the" (two nouns and two verbs share each first letter, so a word's second
         letter is free too). Joint failure: "a" and a vowel noun, "two" and a singular noun, a verb's -s
         and the previous object's number, each decided apart.
  ladd   the long suite's deterministic column addition (tasks.gen_ladd), kept beside them.

The suite (tasks.REAL_TASKS) is rwalk, rsent and ladd. rpick stays defined, and its checker
tested, but is not trained: its AR twin of tiny-llada-r's size scored 0 of 50 on it after
2,500 steps (rwalk 100 %, rsent 100 %, ladd 94 % in the same run), so the 870 k-parameter
model cannot learn it in budget, and a task that neither model learns measures nothing about
parallel decoding (copying n distinct items needs a count the model does not keep).

Hard sets (all-hard-r.jsonl): rwalk on the least-overlapping of 64 random graphs (nodes share
few out-neighbours, so a node decided without its predecessor rarely fits) and ladd's long
carry chains (rpick's hard variant, all 20 items, stays defined with the task).

(A first version had `rasc`, n ascending numbers in a range, in rpick's place. Its tens digits
are predictable from a number's index alone, so confidence-ordered decoding committed them
first, and the units then could not make the numbers ascend: tiny-llada-r scored 6 % on it at
one token per step, where its AR twin scored 100 %. models/README.md, "tiny-llada-r".) rsent has no hard
variant (every problem is alike) and is left out of the hard set.
"""

import random

GEN_LENGTH_R = 128
BLOCK_LENGTH_R = 32

# ---------------------------------------------------------------------------------------------
# rwalk

NODES = "abcdefgh"
DEGREE = 3
WALK_N = 72  # nodes in the answer, the start included, one byte each (no separator)


def overlap(adj):
    """Pairs of (node, node) that share an out-neighbour, counted per shared neighbour."""
    lists = [set(adj[x]) for x in NODES]
    return sum(len(lists[i] & lists[j]) for i in range(len(NODES))
               for j in range(i + 1, len(NODES)))


HARD_DRAWS = 64  # a hard graph is the least-overlapping of this many random ones


def _random_graph(rng, hard):
    def draw():
        return {x: "".join(sorted(rng.sample([y for y in NODES if y != x], DEGREE)))
                for x in NODES}
    if not hard:
        return draw()
    return min((draw() for _ in range(HARD_DRAWS)), key=overlap)


def walk_prompt(start, adj):
    return f"walk {start}; " + " ".join(f"{x}:{adj[x]}" for x in NODES) + ";"


def parse_walk_prompt(prompt):
    """(start, {node: neighbours}) of a walk prompt, or None when it is not one."""
    head = "walk "
    if not prompt.startswith(head) or not prompt.endswith(";"):
        return None
    parts = prompt[len(head):-1].split(" ")
    if len(parts) != len(NODES) + 1 or len(parts[0]) != 2 or parts[0][1] != ";":
        return None
    adj = {}
    for part in parts[1:]:
        if len(part) != 2 + DEGREE or part[1] != ":":
            return None
        adj[part[0]] = part[2:]
    if sorted(adj) != list(NODES):
        return None
    return parts[0][0], adj


def gen_rwalk(rng, hard=False):
    adj = _random_graph(rng, hard)
    start = rng.choice(NODES)
    walk = [start]
    for _ in range(WALK_N - 1):
        walk.append(rng.choice(adj[walk[-1]]))
    return walk_prompt(start, adj), "".join(walk), {"start": start, "adj": adj}


def check_rwalk(prompt, text):
    parsed = parse_walk_prompt(prompt)
    if parsed is None:
        return False
    start, adj = parsed
    nodes = text.strip()
    if len(nodes) != WALK_N or nodes[0] != start:
        return False
    return all(b in adj.get(a, "") for a, b in zip(nodes, nodes[1:]))


# ---------------------------------------------------------------------------------------------
# rpick

PICK_L = 20  # items in the prompt's list
PICK_MIN_N = 12


def gen_rpick(rng, hard=False):
    letters = sorted(rng.sample("abcdefghijklmnopqrstuvwxyz", PICK_L))
    items = [f"{c}{rng.randint(10, 99)}" for c in letters]
    n = PICK_L if hard else rng.randint(PICK_MIN_N, PICK_L)
    return f"pick {n} of " + " ".join(items) + ":", " ".join(rng.sample(items, n)), \
        {"n": n, "items": items}


def parse_rpick_prompt(prompt):
    """(n, items) of a pick prompt, or None."""
    words = prompt.split(" ")
    if len(words) != 3 + PICK_L or words[0] != "pick" or words[2] != "of" or \
            not words[-1].endswith(":") or not words[1].isdigit():
        return None
    items = words[3:-1] + [words[-1][:-1]]
    if any(len(w) != 3 or not w[0].islower() or not w[1:].isdigit() for w in items):
        return None
    return int(words[1]), items


def check_rpick(prompt, text):
    parsed = parse_rpick_prompt(prompt)
    if parsed is None:
        return False
    n, items = parsed
    picks = text.strip().split(" ")
    return len(picks) == n and len(set(picks)) == n and all(p in items for p in picks)


# ---------------------------------------------------------------------------------------------
# rsent

# Two nouns (and two verbs) per first letter, so that a word's first two letters are both free.
NOUNS = ("ant", "ape", "bat", "bee", "cat", "cow", "dog", "doe")
VERBS = ("fear", "find", "help", "hold", "like", "love", "meet", "mind")
SENT_N = 5


def _noun_phrase(noun, plural):
    return noun + ("s" if plural else "")


N_CAST = 4  # nouns and verbs the prompt allows (sorted, so each sits at a fixed place)


def gen_rsent(rng, hard=False):
    assert not hard, "rsent has no hard variant"
    nouns = sorted(rng.sample(NOUNS, N_CAST))
    verbs = sorted(rng.sample(VERBS, N_CAST))
    noun, plural = rng.choice(nouns), rng.random() < 0.5
    prompt = (f"story of the {_noun_phrase(noun, plural)}; " + " ".join(nouns) + "; " +
              " ".join(verbs) + ":")
    sentences = []
    for _ in range(SENT_N):
        verb = rng.choice(verbs) + ("" if plural else "s")
        art = rng.choice(("indef", "the", "two"))
        obj = rng.choice(nouns)
        obj_plural = art == "two" or (art == "the" and rng.random() < 0.5)
        if art == "indef":
            art = "an" if obj[0] in "aeiou" else "a"
        sentences.append(f"the {_noun_phrase(noun, plural)} {verb} {art} "
                         f"{_noun_phrase(obj, obj_plural)}.")
        noun, plural = obj, obj_plural
    return prompt, " ".join(sentences), {"nouns": nouns, "verbs": verbs}


def _parse_noun(word, nouns=NOUNS):
    """(noun, plural) of 'cat' / 'cats', or None."""
    if word in nouns:
        return word, False
    if word.endswith("s") and word[:-1] in nouns:
        return word[:-1], True
    return None


def parse_rsent_prompt(prompt):
    """(first subject, nouns, verbs) of a story prompt, or None."""
    head = "story of the "
    if not prompt.startswith(head) or not prompt.endswith(":"):
        return None
    parts = prompt[len(head):-1].split("; ")
    if len(parts) != 3:
        return None
    nouns, verbs = parts[1].split(" "), parts[2].split(" ")
    if len(nouns) != N_CAST or len(verbs) != N_CAST or \
            not all(n in NOUNS for n in nouns) or not all(v in VERBS for v in verbs):
        return None
    subj = _parse_noun(parts[0], nouns)
    if subj is None:
        return None
    return subj, nouns, verbs


def check_rsent(prompt, text):
    parsed = parse_rsent_prompt(prompt)
    if parsed is None:
        return False
    subj, nouns, verbs = parsed
    text = text.strip()
    if not text.endswith("."):
        return False
    sentences = text[:-1].split(". ")
    if len(sentences) != SENT_N:
        return False
    for s in sentences:
        words = s.split(" ")
        if len(words) != 5 or words[0] != "the" or _parse_noun(words[1], nouns) != subj:
            return False
        plural = subj[1]
        verb = words[2]
        if plural and verb not in verbs:
            return False
        if not plural and not (verb.endswith("s") and verb[:-1] in verbs):
            return False
        obj = _parse_noun(words[4], nouns)
        if obj is None:
            return False
        art = words[3]
        if art in ("a", "an"):
            want = "an" if obj[0][0] in "aeiou" else "a"
            if art != want or obj[1]:
                return False
        elif art == "two":
            if not obj[1]:
                return False
        elif art != "the":
            return False
        subj = obj
    return True


GENERATORS_R = {"rwalk": gen_rwalk, "rpick": gen_rpick, "rsent": gen_rsent}
CHECKERS = {"rwalk": check_rwalk, "rpick": check_rpick, "rsent": check_rsent}
HARD_TASKS_R = ("rwalk", "ladd")  # the tasks of all-hard-r.jsonl
