#!/usr/bin/env bash
# ab-efficiency.sh REV_A REV_B [PAIRS] [weir bench backfill flags...]
#
# Compares the backfill efficiency of two revisions on this machine: builds
# tools/weir at each (in git worktrees under a temporary directory), then runs
# `weir bench backfill --efficiency-only --json --quiet` PAIRS times for each
# (default 3), alternating A, B, A, B, ... so that both see the same drift in the
# machine's speed. It prints one line per process (revision, efficiency, executor and
# raw rows/s, CPU ns per row of each, cores used by each) and the median efficiency
# of each revision. Extra flags go to every run (default: --rows 2000000
# --efficiency-reps 5). The processes' JSON lines stay in a file under $TMPDIR, named
# at the start. Needs git, go and python3; nothing else may run meanwhile.
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 REV_A REV_B [PAIRS] [flags...]" >&2; exit 2; }
revs=("$1" "$2")
shift 2
pairs=3
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
	pairs=$1
	shift
fi
[ "$pairs" -ge 1 ] || { echo "ab-efficiency.sh: PAIRS must be at least 1" >&2; exit 2; }
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--rows 2000000 --efficiency-reps 5)

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

# Each process's JSON line is kept outside the temporary directory, so that a
# failed run leaves the ones before it.
out=$(mktemp "${TMPDIR:-/tmp}/ab-efficiency.XXXXXX.jsonl")
echo "raw results: $out"
for i in $(seq 1 "$pairs"); do
	for r in A B; do
		json=$("$tmp/weir-$r" bench backfill --efficiency-only --json --quiet "${flags[@]}")
		printf '{"rev":"%s","run":%s}\n' "$r" "$json" >>"$out"
	done
done

python3 - "$out" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("rev  efficiency  executor_Mrows/s  raw_Mrows/s  executor_cpu_ns/row  raw_cpu_ns/row  executor_cores  raw_cores")
effs = {}
for x in runs:
    d, e = x["run"], x["run"]["efficiency_detail"]
    effs.setdefault(x["rev"], []).append(d["efficiency"])
    print(f'{x["rev"]:<4} {d["efficiency"]:.3f}       {e["rows_per_sec"]/1e6:6.2f}            {e["raw_rows_per_sec"]/1e6:6.2f}       '
          f'{e["cpu_ns_per_row"]:7.1f}              {e["raw_cpu_ns_per_row"]:7.1f}         {e["cores_used"]:.2f}            {e["raw_cores_used"]:.2f}')
for r in sorted(effs):
    print(f"median efficiency {r}: {statistics.median(effs[r]):.3f} over {len(effs[r])} processes")
EOF
