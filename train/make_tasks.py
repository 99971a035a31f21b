"""Writes the test sets of the task suite to models/tasks/ (deterministic: same bytes every run).

    /usr/bin/python3 train/make_tasks.py [--suite short|long] [--out models/tasks] [--n 1000] [--hard 500]

Files: <task>-test.jsonl (--n problems drawn like the training data, but only problems whose hash
puts them in the test split), <task>-hard.jsonl (--hard problems from the hard distribution, also
from the test split), all-test.jsonl (every <task>-test, concatenated in TASKS order),
all-hard.jsonl, smoke-50.jsonl (the first problems of each <task>-test, 50 in all, tasks
interleaved) and mix-1000.jsonl (the first 1000 / len(tasks) of each <task>-test, interleaved: the quicker set
bench/quality.sh compares decoding policies on). The long suite (--suite long, tiny-llada-l's
tasks) writes its per-task files the same way and its combined files with an "-l" suffix:
all-test-l.jsonl, all-hard-l.jsonl, smoke-50-l.jsonl, mix-1000-l.jsonl; the real suite (--suite real,
tiny-llada-r's; tasks_real.py) with an "-r" suffix, its hard files only for the tasks that have a
hard variant (tasks.HARD_TASKS), and a dev set dev-300-r.jsonl (100 per task, test-split problems in
none of the other files: what a checkpoint is chosen by). One JSON object per line: {"task", "prompt", "answer"}; see tasks.py
for the tasks, the split and the scoring rule (for the real suite's checker tasks the answer is
one valid answer of many).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tasks  # noqa: E402

SEED = 2024


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(root, "models", "tasks"))
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--hard", type=int, help="hard problems per task (default 500; the real suite "
                    "300, which keeps its hard set at the size of the sets tiny-llada-r was first measured on)")
    ap.add_argument("--suite", default="short", choices=sorted(tasks.SUITES))
    args = ap.parse_args()
    task_names = tasks.SUITES[args.suite][0]
    if args.hard is None:
        args.hard = 300 if args.suite == "real" else 500
    sfx = {"short": "", "long": "-l", "real": "-r"}[args.suite]
    os.makedirs(args.out, exist_ok=True)
    all_test, all_hard, per_task = [], [], {}
    for t in task_names:
        test = tasks.make_test_set(t, args.n, SEED)
        hard = []
        if t in tasks.HARD_TASKS[args.suite]:
            hard = tasks.make_test_set(t, args.hard, SEED, hard=True)
            # ladd's files belong to the long suite too: the same problems, written once.
            if not (args.suite == "real" and t in tasks.LONG_TASKS):
                tasks.write_jsonl(os.path.join(args.out, f"{t}-hard.jsonl"), hard)
        if not (args.suite == "real" and t in tasks.LONG_TASKS):
            tasks.write_jsonl(os.path.join(args.out, f"{t}-test.jsonl"), test)
        all_test += test
        all_hard += hard
        per_task[t] = test
        print(f"{t}: {len(test)} test, {len(hard)} hard")
    tasks.write_jsonl(os.path.join(args.out, f"all-test{sfx}.jsonl"), all_test)
    tasks.write_jsonl(os.path.join(args.out, f"all-hard{sfx}.jsonl"), all_hard)
    smoke = []
    i = 0
    while len(smoke) < 50:
        for t in task_names:
            if len(smoke) < 50:
                smoke.append(per_task[t][i])
        i += 1
    tasks.write_jsonl(os.path.join(args.out, f"smoke-50{sfx}.jsonl"), smoke)
    per = min(1000 // len(task_names), args.n)  # 1,000 problems in all, tasks interleaved
    mix = [per_task[t][i] for i in range(per) for t in task_names]
    tasks.write_jsonl(os.path.join(args.out, f"mix-1000{sfx}.jsonl"), mix)
    if args.suite == "real":
        # The real suite's dev set: test-split problems in none of the files above, to choose
        # tiny-llada-r's checkpoint by (train/learning_curve.py).
        used = {r["prompt"] for r in all_test + all_hard}
        per_dev = {t: tasks.make_dev_set(t, 100, SEED, used) for t in task_names}
        dev = [per_dev[t][i] for i in range(100) for t in task_names]
        tasks.write_jsonl(os.path.join(args.out, "dev-300-r.jsonl"), dev)
    print(f"all-test {len(all_test)}, all-hard {len(all_hard)}, smoke-50 {len(smoke)}, "
          f"mix-1000 {len(mix)}")


if __name__ == "__main__":
    main()
