"""Markdown tables from bench/quality.sh's llada-eval reports (for models/README.md and
BENCHMARKS.md). Standard library only.

    /usr/bin/python3 bench/quality_tables.py bench/out/quality [MODEL-NAME]
    /usr/bin/python3 bench/quality_tables.py --real bench/out/quality   # quality.sh real

MODEL-NAME (default tiny-llada-m) labels the grid and policy tables: the model quality.sh ran
them on (its MODEL variable).
"""

import json
import os
import sys


def load(d, name):
    path = os.path.join(d, name + ".json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError:  # still being written
        return None


def acc(r):
    lo, hi = r["ci95"]
    return f"{100 * r['accuracy']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def task_names(d):
    """The task names of the first report's per_task, in its (alphabetical) key order: the
    order of every report's per_task, so of the columns tasks() prints."""
    for f in sorted(os.listdir(d)):
        if f.endswith(".json"):
            r = load(d, f[:-5])
            if r and "per_task" in r:
                return list(r["per_task"])
    return []


def tasks(r):
    return " | ".join(f"{100 * t['accuracy']:.1f}" for t in r["per_task"].values())


def grid(d):
    print("| steps (tokens/step) | block 8 | block 16 | block 32 |")
    print("|---|---|---|---|")
    for s in (32, 16, 8, 4):
        cells = []
        for b in (8, 16, 32):
            r = load(d, f"grid-b{b}-s{s}")
            cells.append(acc(r) if r else "-")
        print(f"| {s} ({32 // s}) | " + " | ".join(cells) + " |")
    print()


def hardgrid(d):
    print("| steps (tokens/step) | block 8 | block 16 | block 32 |")
    print("|---|---|---|---|")
    for s in (32, 4):
        cells = []
        for b in (8, 16, 32):
            r = load(d, f"hardgrid-b{b}-s{s}")
            cells.append(f"{acc(r)}<br>{tasks(r).replace(' | ', ' / ')}" if r else "-")
        print(f"| {s} ({32 // s}) | " + " | ".join(cells) + " |")
    print()


POLICIES = [("vanilla", "vanilla"), ("vanilla-es", "vanilla + early stop"),
            ("prefix", "prefix-cache"), ("dual", "dual-cache"), ("threshold", "threshold 0.9"),
            ("dual-threshold", "dual-cache + threshold 0.9")]


def policies(d, names):
    print("| block | policy | accuracy % [95% CI] | " + " | ".join(names) +
          " | NFE | rows computed | LM-head rows | NFE vs vanilla | tokens/s |")
    print("|---|---|---|" + "---|" * len(names) + "---:|---:|---:|---:|---:|")
    for b in (8, 16):
        base = load(d, f"pol-b{b}-vanilla")
        for key, label in POLICIES:
            r = load(d, f"pol-b{b}-{key}")
            if not r:
                continue
            ratio = f"{base['nfe'] / r['nfe']:.2f}x fewer" if base else "-"
            print(f"| {b} | {label} | {acc(r)} | {tasks(r)} | {r['nfe']:.2f} | {r['rows']:.1f} | "
                  f"{r['lm_head_rows']:.1f} | {ratio} | {r['tokens_per_s']:.0f} |")
    print()


def others(d, name, names):
    print("| model | tasks | decoding | accuracy % [95% CI] | " + " | ".join(names) +
          " | NFE | tokens/s |")
    print("|---|---|---|---|" + "---|" * len(names) + "---:|---:|")
    for key, what in [("ar-tiny-ar-s", "tiny-ar-s, test, greedy AR"),
                       ("ar-tiny-ar-m", "tiny-ar-m, test, greedy AR"),
                       ("s-tiny-llada-s-b8-s32", "tiny-llada-s, test, vanilla steps 32 block 8"),
                       ("s-tiny-llada-s-b8-s4", "tiny-llada-s, test, vanilla steps 4 block 8"),
                       ("hard-s-b8-s32", "tiny-llada-s, hard, vanilla steps 32 block 8"),
                       ("hard-s-b8-s4", "tiny-llada-s, hard, vanilla steps 4 block 8"),
                       ("hardgrid-b8-s32", "MODEL, hard, vanilla steps 32 block 8"),
                       ("hardgrid-b8-s4", "MODEL, hard, vanilla steps 4 block 8"),
                       ("hard-dual-threshold-b8", "MODEL, hard, dual-cache + threshold 0.9 block 8"),
                       ("hard-ar-m", "tiny-ar-m, hard, greedy AR")]:
        r = load(d, key)
        if not r:
            continue
        model, split, dec = what.replace("MODEL", name).split(", ")
        print(f"| {model} | {split} | {dec} | {acc(r)} | {tasks(r)} | {r['nfe']:.2f} | "
              f"{r['tokens_per_s']:.0f} |")
    print()


SPEC = [("vanilla", "vanilla", "cpu"), ("dual", "dual-cache + threshold 0.9", "cpu"),
        ("need", "need + threshold 0.9 (windows of need)", "cpu"),
        ("mbsd-cpu", "mbsd + threshold 0.9, lookahead auto", "cpu"),
        ("mbsd-npu", "mbsd + threshold 0.9, lookahead auto", "npu-sim"),
        ("mbsd-npu-token", "mbsd + threshold 0.9, drafts fed as tokens", "npu-sim"),
        ("mbsd-npu-accept09", "mbsd + threshold 0.9, --accept 0.9", "npu-sim")]


def spec(d, names):
    print("| tasks | block | policy | device | accuracy % [95% CI] | NFE | NFE vs dual-cache + "
          "threshold | rows asked | rows on the device | drafts accepted (below tau) / rejected "
          "per problem |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|")
    for s in ("mix-1000", "all-hard"):
        for b in (8, 16):
            dual = load(d, f"spec-{s}-b{b}-dual")
            for key, label, dev in SPEC:
                r = load(d, f"spec-{s}-b{b}-{key}")
                if not r:
                    continue
                ratio = f"{r['nfe'] / dual['nfe']:.3f}x" if dual else "-"
                drafts = (f"{r.get('drafts_accepted', 0):.1f} ({r.get('drafts_accepted_early', 0):.1f})"
                          f" / {r.get('drafts_rejected', 0):.1f}"
                          if key.startswith("mbsd") else "-")
                print(f"| {s} | {b} | {label} | {dev} | {acc(r)} | {r['nfe']:.2f} | {ratio} | "
                      f"{r['rows']:.1f} | {r.get('rows_device', r['rows']):.1f} | {drafts} |")
    print()
    print("One token per step (steps 32, no --threshold), mix-1000:\n")
    print("| block | policy | device | accuracy % [95% CI] | NFE | NFE vs dual-cache | rows asked | "
          "rows on the device | drafts accepted / rejected per problem |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    for b in (8, 16):
        dual = load(d, f"sched-b{b}-dual")
        for key, label, dev in [("dual", "dual-cache", "cpu"), ("need", "need", "cpu"),
                                ("mbsd-npu", "mbsd, lookahead auto", "npu-sim")]:
            r = load(d, f"sched-b{b}-{key}")
            if not r:
                continue
            ratio = f"{r['nfe'] / dual['nfe']:.3f}x" if dual else "-"
            drafts = (f"{r.get('drafts_accepted', 0):.1f} / {r.get('drafts_rejected', 0):.1f}"
                      if key.startswith("mbsd") else "-")
            print(f"| {b} | {label} | {dev} | {acc(r)} | {r['nfe']:.2f} | {ratio} | "
                  f"{r['rows']:.1f} | {r.get('rows_device', r['rows']):.1f} | {drafts} |")
    print()


REVISE = [("vanilla", "vanilla", "cpu"),
          ("dual", "dual-cache + threshold 0.9", "cpu"),
          ("dual-rev", "dual-cache + threshold 0.9 + revise", "cpu"),
          ("mbsd", "mbsd + threshold 0.9", "npu-sim"),
          ("mbsd-rev", "mbsd + threshold 0.9 + revise", "npu-sim"),
          ("mbsd0.7", "mbsd + threshold 0.7", "npu-sim"),
          ("mbsd0.7-rev", "mbsd + threshold 0.7 + revise", "npu-sim"),
          ("mbsd0.7-remask", "mbsd + threshold 0.7 + revise (remask)", "npu-sim"),
          ("mbsd0.5", "mbsd + threshold 0.5", "npu-sim"),
          ("mbsd0.5-rev", "mbsd + threshold 0.5 + revise", "npu-sim"),
          ("mbsd0.5-remask", "mbsd + threshold 0.5 + revise (remask)", "npu-sim")]


def revise(d):
    print("| model | tasks | block | policy | device | accuracy % [95% CI] | NFE | NFE vs "
          "dual-cache + threshold | CPU-path rows | revised (remasked) | vs the expected answer: "
          "wrong->right / right->wrong / wrong->wrong (remasks of right / wrong) |")
    print("|---|---|---|---|---|---|---:|---:|---:|---:|---|")
    for m in ("tiny-llada-m", "tiny-llada-s"):
        for s in ("mix-1000", "all-hard"):
            for b in (8, 16):
                dual = load(d, f"rev-{m}-{s}-b{b}-dual")
                for key, label, dev in REVISE:
                    r = load(d, f"rev-{m}-{s}-b{b}-{key}")
                    if not r:
                        continue
                    n = r["n"]
                    rv, g = r["revision"], r["revision_vs_answer"]
                    ratio = f"{r['nfe'] / dual['nfe']:.3f}x" if dual else "-"
                    lane = (rv["checks"] + rv["refreshes"]) / n
                    rev = (f"{rv['revisions'] / n:.2f} ({rv['remasks'] / n:.2f})"
                           if rv["checks"] else "-")
                    gold = (f"{g['wrong_to_right']} / {g['right_to_wrong']} / {g['wrong_to_wrong']}"
                            f" ({g['remasks_of_right']} / {g['remasks_of_wrong']})"
                            if rv["checks"] else "-")
                    print(f"| {m} | {s} | {b} | {label} | {dev} | {acc(r)} | {r['nfe']:.2f} | "
                          f"{ratio} | {lane:.1f} | {rev} | {gold} |")
    print()
    lanes = [(k, load(d, f"rev-lanes{k}")) for k in ("-none", "", "-serial")]
    if all(r for _, r in lanes):
        print("The two paths on the host (tiny-llada-m, mix-1000, block 8, mbsd + threshold 0.7, "
              "one worker, one thread per pool):\n")
        print("| run | wall s | CPU path s | of which exposed s | hidden |")
        print("|---|---:|---:|---:|---:|")
        for k, r in lanes:
            rv = r["revision"]
            cpu, exp = rv["cpu_ms"] / 1e3, rv["exposed_ms"] / 1e3
            hidden = f"{100 * (1 - exp / cpu):.0f} %" if cpu > 0 else "-"
            label = {"-none": "without revision", "": "revise, concurrent",
                     "-serial": "revise, --revise-serial"}[k]
            print(f"| {label} | {r['wall_s']:.2f} | {cpu:.2f} | {exp:.2f} | {hidden} |")
        print()


def real(d):
    """The real suite (quality.sh real): the goals' table per task with 95 % intervals on the
    test and hard sets, then every policy on mix-1000-r, then test-time scaling."""
    rows = [("one", "tiny-llada-r, one token per step"),
            ("need", "tiny-llada-r, need + threshold 0.9"),
            ("eight", "tiny-llada-r, eight tokens per step"), ("ar", "tiny-ar-r, greedy")]
    for set_ in ("all-test-r", "all-hard-r"):
        first = load(d, f"real-{set_}-one")
        if not first:
            continue
        names = list(first["per_task"])
        print(f"### {set_} (128 tokens in blocks of 32; accuracy % [95 % interval])\n")
        print("| model, decoding | overall | " + " | ".join(names) + " | forwards | tokens/forward |")
        print("|---|---:|" + "---:|" * len(names) + "---:|---:|")
        for k, label in rows:
            r = load(d, f"real-{set_}-{k}")
            if r:
                per = " | ".join(acc(r["per_task"][t]) for t in names)
                print(f"| {label} | {acc(r)} | {per} | {r['nfe']:.1f} | {128 / r['nfe']:.2f} |")
        print()
    pols = [("vanilla", "vanilla, one token per step"), ("dual", "dual-cache + threshold 0.9"),
            ("threshold", "threshold 0.9 (no cache: every row each forward)"),
            ("need", "need + threshold 0.9"), ("mbsd", "mbsd + threshold 0.9 (npu-sim)"),
            ("pipeline", "pipeline"), ("mbsd-rev", "mbsd + threshold 0.9 + --revise"),
            ("mbsd-sc", "mbsd + threshold 0.9 + --self-check")]
    first = load(d, "real-pol-vanilla")
    if first:
        names = list(first["per_task"])
        print("### Every policy on mix-1000-r (tiny-llada-r; accuracy % [95 % interval])\n")
        print("| policy | overall | " + " | ".join(names) + " | forwards | tokens/forward |")
        print("|---|---:|" + "---:|" * len(names) + "---:|---:|")
        for k, label in pols:
            r = load(d, f"real-pol-{k}")
            if r:
                per = " | ".join(f"{100 * r['per_task'][t]['accuracy']:.1f}" for t in names)
                print(f"| {label} | {acc(r)} | {per} | {r['nfe']:.1f} | {128 / r['nfe']:.2f} |")
        print()
    base = load(d, "real-pol300-need")
    if base:
        print("### Test-time scaling on the first 300 of mix-1000-r (need + threshold 0.9, T 0.5)\n")
        print("| candidates | selector | accuracy % | forwards per candidate |")
        print("|---:|---|---:|---:|")
        print(f"| 1 (T 0) | - | {acc(base)} | {base['nfe']:.1f} |")
        for n in (4, 8):
            for sel in ("vote", "confidence"):
                r = load(d, f"real-pol300-tts{n}-{sel}")
                if r:
                    print(f"| {n} | {sel} | {acc(r)} | {r['nfe']:.1f} |")
        print()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--real":
        real(sys.argv[2] if len(sys.argv) > 2 else "bench/out/quality")
        return
    d = sys.argv[1] if len(sys.argv) > 1 else "bench/out/quality"
    name = sys.argv[2] if len(sys.argv) > 2 else "tiny-llada-m"
    names = task_names(d)
    print(f"### Sensitivity grid ({name}, vanilla, overall accuracy %)\n")
    grid(d)
    print(f"### Sensitivity on the hard sets ({name}, vanilla; overall, then "
          f"{' / '.join(names)})\n")
    hardgrid(d)
    print(f"### Policies ({name}, gen 32)\n")
    policies(d, names)
    print("### Other models and the hard sets\n")
    others(d, name, names)
    print(f"### The step engine's policies ({name}, gen 32)\n")
    spec(d, names)
    print("### Progressive revision (gen 32)\n")
    revise(d)


if __name__ == "__main__":
    main()
