"""Forwards per block, drafts accepted and rejected, averaged over a --trace-out file.

    /usr/bin/python3 bench/trace_blocks.py bench/out/quality/trace-need-b8.jsonl

Standard library only. Each line is one generation's decision trace (tools/common.cpp,
trace_json): steps are [block, committed, accepted, rejected, lookahead, rows, rows masked,
rows draft, rows committed, accepted early].
"""

import collections
import json
import sys


def main():
    path = sys.argv[1]
    per_block = collections.Counter()
    n = accepted = rejected = early = 0
    for line in open(path):
        if not line.strip():
            continue
        t = json.loads(line)
        n += 1
        for s in t["steps"]:
            per_block[s[0]] += 1
            accepted += s[2]
            rejected += s[3]
            early += s[9]
    blocks = " / ".join(f"{per_block[b] / n:.2f}" for b in sorted(per_block))
    print(f"{path}: {n} traces; forwards per block {blocks}; per trace {sum(per_block.values()) / n:.2f}"
          f" forwards, drafts {accepted / n:.1f} accepted ({early / n:.1f} early), {rejected / n:.1f} rejected")


if __name__ == "__main__":
    main()
