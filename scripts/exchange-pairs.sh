#!/usr/bin/env bash
# exchange-pairs.sh [PAIRS] [weir bench nexmark flags...]
#
# Compares the Nexmark view builds with every edge between the engine's two nodes an
# Arrow Flight stream on loopback (weir bench nexmark --exchange flight) against the
# same builds over Go channels, on this machine: builds tools/weir once, then runs
# PAIRS (default 5) pairs of the benchmark (channel first in odd pairs, flight first
# in even ones), and for every query
# and upstream mode prints each pair's ratio of arrangement-backfill build seconds
# (flight / channel), then their geometric mean with a 95% t-interval. Extra flags
# go to every run (default: --events 200000). Nothing else may run meanwhile.
set -euo pipefail

pairs=5
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
	pairs=$1
	shift
fi
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--events 200000)

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weir-exchange-pairs-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go build -o "$tmp/weir" ./tools/weir)

run() { "$tmp/weir" bench nexmark --json --quiet "${flags[@]}" --exchange "$1" >"$tmp/$1$2.json"; }
for i in $(seq 1 "$pairs"); do
	# The order alternates, so that neither build runs first in every pair.
	if [ $((i % 2)) -eq 1 ]; then
		run channel "$i"
		run flight "$i"
	else
		run flight "$i"
		run channel "$i"
	fi
	echo "pair $i done" >&2
done
python3 - "$tmp" "$pairs" <<'PY'
import json, math, statistics, sys
tmp, pairs = sys.argv[1], int(sys.argv[2])
# Two-sided 95% t quantiles by degrees of freedom.
T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
ratios = {}
for i in range(1, pairs + 1):
    a = {(r["query"], r["upstream"]): r for r in json.load(open(f"{tmp}/channel{i}.json"))}
    b = {(r["query"], r["upstream"]): r for r in json.load(open(f"{tmp}/flight{i}.json"))}
    for k, ra in a.items():
        rb = b[k]
        if not (ra["verified"] and rb["verified"]):
            sys.exit(f"pair {i}: {k} not verified")
        ratios.setdefault(k, []).append((rb["arrangement_seconds"] / ra["arrangement_seconds"], ra["arrangement_seconds"]))
print("query upstream  flight/channel per pair  geomean [95% CI]  channel s (median)")
for (q, up), rs in ratios.items():
    logs = [math.log(r) for r, _ in rs]
    m = statistics.mean(logs)
    ci = ""
    if len(logs) > 1:
        h = T.get(len(logs) - 1, 1.96) * statistics.stdev(logs) / math.sqrt(len(logs))
        ci = f"[{math.exp(m - h):.3f}, {math.exp(m + h):.3f}]"
    per = " ".join(f"{r:.3f}" for r, _ in rs)
    print(f"{q:5} {up:8}  {per}  {math.exp(m):.3f} {ci}  {statistics.median(s for _, s in rs):.2f}")
PY
