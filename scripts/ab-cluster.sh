#!/usr/bin/env bash
# ab-cluster.sh REV_A REV_B [PAIRS] [weir bench cluster flags...]
#
# Compares the cluster mode of two revisions on this machine: builds tools/weir at
# each (in git worktrees under a temporary directory), then runs PAIRS (default 5)
# pairs of `weir bench cluster --json --quiet` (A first in odd pairs, B first in
# even ones), and prints each pair's ratio B / A of the cluster's median build
# seconds (a pass-through backfill across compute processes), their geometric mean
# with a 95% t-interval, and each side's median build, embedded build and recovery
# seconds. Extra flags go to every run (default: --rows 1000000 --reps 2). The
# runs' JSON stays in a directory under $TMPDIR, named at the start. Needs git, go
# and python3; nothing else may run meanwhile.
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 REV_A REV_B [PAIRS] [flags...]" >&2; exit 2; }
revs=("$1" "$2")
shift 2
pairs=5
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
	pairs=$1
	shift
fi
[ "$pairs" -ge 2 ] || { echo "ab-cluster.sh: PAIRS must be at least 2" >&2; exit 2; }
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--rows 1000000 --reps 2)

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
tmp=$(mktemp -d)
cleanup() {
	for r in A B; do
		git -C "$root" worktree remove --force "$tmp/$r" >/dev/null 2>&1 || true
	done
	git -C "$root" worktree prune
	rm -rf "$tmp"
}
trap cleanup EXIT

names=(A B)
for i in 0 1; do
	r=${names[$i]}
	git -C "$root" worktree add --detach "$tmp/$r" "${revs[$i]}" >/dev/null
	(cd "$tmp/$r" && go build -o "$tmp/weir-$r" ./tools/weir)
	echo "$r = ${revs[$i]} ($(git -C "$root" rev-parse --short "${revs[$i]}"))"
done

out=$(mktemp -d "${TMPDIR:-/tmp}/ab-cluster.XXXXXX")
echo "raw results: $out"
run() {
	# weir bench cluster starts PostgreSQL through scripts/pg.sh: run in the root.
	(cd "$root" && "$tmp/weir-$1" bench cluster --json --quiet "${flags[@]}") >"$out/$1$2.json"
}
for i in $(seq 1 "$pairs"); do
	if [ $((i % 2)) -eq 1 ]; then
		run A "$i"
		run B "$i"
	else
		run B "$i"
		run A "$i"
	fi
	echo "pair $i done" >&2
done

python3 - "$out" "$pairs" <<'PY'
import json, math, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
# two-sided 95% t quantiles by degrees of freedom
T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
     11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 19: 2.093, 29: 2.045}
def t(df):
    return T.get(df) or min((v for k, v in T.items() if k <= df), default=12.706)
runs = {(s, i): json.load(open(f"{out}/{s}{i}.json")) for s in "AB" for i in range(1, pairs + 1)}
logs = [math.log(statistics.median(runs["B", i]["cluster_seconds"]) / statistics.median(runs["A", i]["cluster_seconds"])) for i in range(1, pairs + 1)]
m, sd = statistics.mean(logs), statistics.stdev(logs)
h = t(pairs - 1) * sd / math.sqrt(pairs)
print("pair ratios B/A of the cluster build:", " ".join(f"{math.exp(x):.3f}" for x in logs))
print(f"geomean {math.exp(m):.3f} [{math.exp(m - h):.3f}, {math.exp(m + h):.3f}] (95% t-interval, {pairs} pairs)")
for s in "AB":
    c = [x for i in range(1, pairs + 1) for x in runs[s, i]["cluster_seconds"]]
    e = [x for i in range(1, pairs + 1) for x in runs[s, i]["embedded_seconds"]]
    r = [x for i in range(1, pairs + 1) for x in runs[s, i]["recovery_seconds"]]
    print(f"{s}: cluster build median {statistics.median(c):.3f} s, embedded {statistics.median(e):.3f} s, recovery {statistics.median(r):.3f} s")
PY
