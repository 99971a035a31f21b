"""Writes tests/data/checkers/cases.jsonl: hand-made answers to the `real` suite's tasks, right
and wrong, each with the verdict a reader of the rules (tasks_real.py) gives it and why. The
near misses are the point: each wrong answer breaks exactly one rule in the smallest way. Both
the Python checkers (train/test_train.py) and the C++ ones (tests/checkers_test.cpp, the rule
llada-eval scores by) must give every verdict here.

    /usr/bin/python3 train/make_checker_cases.py
"""

import json
import os

WALK_PROMPT = "walk c; a:bdf b:ace c:adh d:bcg e:afh f:bdg g:ceh h:abf;"
# A valid walk of 72 nodes from c: c->a->b->c->d->... built by hand from the lists above.
_W = "cabcdbeafdgchfbeh"  # c:a a:b b:c c:d d:b b:e e:a a:f f:d d:g g:c c:h h:f f:b b:e e:h
_W += "a" + "bcdbeafdgchfbeh" * 3  # h:a, then the same cycle (a:b ... e:h) three more times
_W += "abcdbeafd"  # h:a a:b b:c c:d d:b b:e e:a a:f f:d
assert len(_W) == 72, len(_W)

PICK_PROMPT = ("pick 14 of a18 c58 d99 f92 i41 j30 k26 m35 n80 o94 q25 r14 s20 t43 u70 v64 w43 "
               "x69 y13 z73:")
PICK = "m35 y13 k26 w43 a18 q25 d99 f92 s20 n80 c58 o94 i41 j30"

SENT_PROMPT = "story of the bees; ape bee cat dog; fear hold like mind:"
SENT = ("the bees like a cat. the cat fears two dogs. the dogs hold an ape. "
        "the ape minds the bees. the bees fear the dog.")


def cases():
    w, k, s = WALK_PROMPT, PICK_PROMPT, SENT_PROMPT
    return [
        # rwalk
        ("rwalk", w, _W, True, "a walk of 72 nodes along listed edges"),
        ("rwalk", w, "  " + _W + "\n", True, "surrounding whitespace is not part of the answer"),
        ("rwalk", w, "a" + _W[1:], False, "starts at a, not at the prompt's c"),
        ("rwalk", w, _W[:-1], False, "71 nodes"),
        ("rwalk", w, _W + "a", False, "73 nodes"),
        ("rwalk", w, _W[:5] + "a" + _W[6:], False, "d->a is not an edge (d:bcg)"),
        ("rwalk", w, _W[:-1] + "e", False, "the last node e: d->e is not an edge (d:bcg)"),
        ("rwalk", w, _W[:10] + " " + _W[11:], False, "a space inside the walk"),
        ("rwalk", w, _W[:20] + "z" + _W[21:], False, "z is not a node"),
        ("rwalk", "walk c; a:bdf;", _W, False, "the prompt lists one node, not eight"),
        # rpick
        ("rpick", k, PICK, True, "14 distinct items of the list"),
        ("rpick", k, " ".join(reversed(PICK.split(" "))), True, "any order"),
        ("rpick", k, PICK.replace("m35", "t43"), True,
         "w43 and t43 are two items (same digits)"),
        ("rpick", k, PICK.rsplit(" ", 1)[0], False, "13 items"),
        ("rpick", k, PICK + " v64", False, "15 items"),
        ("rpick", k, PICK.replace("m35", "j30"), False, "j30 twice"),
        ("rpick", k, PICK.replace("m35", "m53"), False, "m53 is not in the list (m35 is)"),
        ("rpick", k, PICK.replace("m35", "b35"), False, "b35 is not in the list"),
        ("rpick", k, PICK.replace(" ", "  ", 1), False, "two spaces between items"),
        ("rpick", k, PICK.replace(" ", ",", 1), False, "a comma for a space"),
        ("rpick", k.replace("a18 ", ""), PICK.replace("a18", "c58"), False,
         "the prompt lists 19 items, not 20"),
        # rsent
        ("rsent", s, SENT, True, "five sentences, each subject the previous object"),
        ("rsent", s, SENT.replace("like a cat", "likes a cat"), False,
         "likes after a plural subject"),
        ("rsent", s, SENT.replace("cat fears", "cat fear"), False,
         "fear after a singular subject"),
        ("rsent", s, SENT.replace("hold an ape", "hold a ape"), False, "a before a vowel noun"),
        ("rsent", s, SENT.replace("like a cat. the cat", "like an cat. the cat"), False,
         "an before a consonant noun"),
        ("rsent", s, SENT.replace("two dogs. the dogs hold", "two dog. the dog holds"), False,
         "two with a singular noun"),
        ("rsent", s, SENT.replace("a cat. the cat fears", "a cats. the cats fear"), False,
         "a with a plural noun"),
        ("rsent", s, SENT.replace("the dogs hold", "the dog holds"), False,
         "the subject is not the previous object (dog, not dogs)"),
        ("rsent", s, SENT.replace("the bees like", "the bee likes"), False,
         "the first subject is not the prompt's (bees)"),
        ("rsent", s, SENT.replace("fear the dog.", "fear the dogs."), True,
         "the takes either number"),
        ("rsent", s, SENT[:-1], False, "no final full stop"),
        ("rsent", s, SENT.rsplit(" the bees fear", 1)[0], False, "four sentences"),
        ("rsent", s, SENT + " the dog likes a bee.", False, "six sentences"),
        ("rsent", s, SENT.replace("minds", "watches"), False, "a verb outside the grammar"),
        ("rsent", s, SENT.replace("a cat. the cat", "a fox. the fox"), False,
         "a noun outside the grammar"),
        ("rsent", s, SENT.replace("minds", "loves"), False,
         "love is in the grammar but not in the prompt's verbs"),
        ("rsent", s, SENT.replace("a cat. the cat", "a cow. the cow"), False,
         "cow is in the grammar but not in the prompt's nouns"),
        ("rsent", "story of the bees; ape bee cat cow; fear hold like mind:", SENT, False,
         "dog is not in this prompt's nouns"),
        ("rsent", "story of the bees; ape bee cat cow dog; fear hold like mind:", SENT, False,
         "the prompt lists five nouns, not four"),
        ("rsent", "story of the bees; ape bat cat dog; fear hold like mind:", SENT, False,
         "the first subject is not among the prompt's nouns"),
        ("rsent", s, SENT.replace(". the cat", ".  the cat"), False, "two spaces between sentences"),
    ]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = os.path.join(root, "tests", "data", "checkers")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "cases.jsonl"), "w", encoding="utf-8") as f:
        for task, prompt, text, valid, why in cases():
            f.write(json.dumps({"task": task, "prompt": prompt, "text": text, "valid": valid,
                                "why": why}) + "\n")
    print(f"wrote {len(cases())} cases")


if __name__ == "__main__":
    main()
