#!/usr/bin/env python3
"""The table of bench/quant_rows.sh: one line per file type and row count, from rows-<ftype>.json.
Usage: python3 bench/quant_table.py bench/out/DIR [FTYPE ...]"""
import json
import os
import sys

out = sys.argv[1]
names = sys.argv[2:] or sorted(f[5:-5] for f in os.listdir(out) if f.startswith("rows-") and f.endswith(".json"))
print("| file type | GB | rows | ms | rows/s | llama-bench rows/s | ratio (rounds) | GOP/s | % of int8 peak |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for name in names:
    path = os.path.join(out, f"rows-{name}.json")
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        continue
    d = json.load(open(path))
    for r in d["results"]:
        per = r.get("ratio_per_round") or []
        span = f" ({min(per):.2f}-{max(per):.2f})" if per else ""
        ratio = f"**{r['ratio']:.2f}x**{span}" if r.get("ratio") else "-"
        llama = f"{r['llama_cpp_rows_per_s']:.1f}" if r.get("llama_cpp_rows_per_s") else "-"
        print(f"| {name} | {d['weight_bytes'] / 1e9:.2f} | {r['rows']} | {r['ms']:.1f} | {r['rows_per_s']:.1f} | "
              f"{llama} | {ratio} | {r['gflops']:.0f} | {r['peak_pct']:.1f} % |")
