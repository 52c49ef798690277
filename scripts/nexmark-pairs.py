#!/usr/bin/env python3
"""nexmark-pairs.py DIR PAIRS A B

Reads the `weir bench nexmark --json` runs DIR/A1.json .. DIR/A<PAIRS>.json and
DIR/B1.json .. (one pair each) and, for every query and upstream mode, prints each
pair's ratio of arrangement-backfill build seconds (B / A), their geometric mean with
a 95% t-interval, and the median seconds of A and of B. Every view of every run must
be verified. scripts/exchange-pairs.sh and scripts/ab-nexmark.sh call it."""
import json, math, statistics, sys

out, pairs, a_name, b_name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
# Two-sided 95% t quantiles by degrees of freedom.
T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
ratios = {}
for i in range(1, pairs + 1):
    a = {(r["query"], r["upstream"]): r for r in json.load(open(f"{out}/{a_name}{i}.json"))}
    b = {(r["query"], r["upstream"]): r for r in json.load(open(f"{out}/{b_name}{i}.json"))}
    for k, ra in a.items():
        rb = b[k]
        if not (ra["verified"] and rb["verified"]):
            sys.exit(f"pair {i}: {k} not verified")
        ratios.setdefault(k, []).append((rb["arrangement_seconds"] / ra["arrangement_seconds"], ra["arrangement_seconds"], rb["arrangement_seconds"]))
print(f"query upstream  {b_name}/{a_name} per pair  geomean [95% CI]  {a_name} s (median)  {b_name} s (median)")
for (q, up), rs in ratios.items():
    logs = [math.log(r) for r, _, _ in rs]
    m = statistics.mean(logs)
    ci = ""
    if len(logs) > 1:
        h = T.get(len(logs) - 1, 1.96) * statistics.stdev(logs) / math.sqrt(len(logs))
        ci = f"[{math.exp(m - h):.3f}, {math.exp(m + h):.3f}]"
    per = " ".join(f"{r:.3f}" for r, _, _ in rs)
    print(f"{q:5} {up:8}  {per}  {math.exp(m):.3f} {ci}  {statistics.median(x for _, x, _ in rs):.2f}  {statistics.median(y for _, _, y in rs):.2f}")
