"""Markdown tables from train/eval.py --json reports (for models/README.md).

    /usr/bin/python3 train/tables.py grid REPORT.json            # steps x block table, overall
    /usr/bin/python3 train/tables.py tasks REPORT.json [...]      # one row per setting, per task
"""

import json
import sys


def pct(v):
    return f"{100 * v['acc']:.1f}"


def ci(v):
    lo, hi = v["ci95"]
    return f"{100 * v['acc']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def setting_name(s):
    if s.get("decoder") == "greedy-ar":
        return "AR greedy"
    return f"steps {s['steps']}, block {s['block']}"


def grid(report):
    runs = {(r["setting"]["steps"], r["setting"]["block"]): r for r in report["runs"]
            if r["setting"].get("decoder") == "vanilla"}
    steps = sorted({k[0] for k in runs}, reverse=True)
    blocks = sorted({k[1] for k in runs})
    gen = report["gen"]
    out = ["| steps (tokens/step) | " + " | ".join(f"block {b}" for b in blocks) + " |",
           "|---|" + "---|" * len(blocks)]
    for s in steps:
        cells = [ci(runs[(s, b)]["summary"]["overall"]) if (s, b) in runs else "" for b in blocks]
        out.append(f"| {s} ({gen // s}) | " + " | ".join(cells) + " |")
    return "\n".join(out)


def task_rows(reports):
    tasks = None
    out = []
    for rep in reports:
        for r in rep["runs"]:
            summ = r["summary"]
            if tasks is None:
                tasks = [k for k in summ if k != "overall"]
                out.append("| model | setting | overall | " + " | ".join(tasks) + " | n |")
                out.append("|---|---|---|" + "---|" * len(tasks) + "---|")
            name = rep["model"].split("/")[-1]
            out.append(f"| {name} | {setting_name(r['setting'])} | {ci(summ['overall'])} | "
                       + " | ".join(pct(summ[t]) if t in summ else "" for t in tasks)
                       + f" | {summ['overall']['n']} |")
    return "\n".join(out)


def main():
    kind, paths = sys.argv[1], sys.argv[2:]
    reports = [json.load(open(p)) for p in paths]
    if kind == "grid":
        for rep in reports:
            print(grid(rep))
    else:
        print(task_rows(reports))


if __name__ == "__main__":
    main()
