#!/usr/bin/env bash
# ab-nexmark.sh REV_A REV_B [PAIRS] [weir bench nexmark flags...]
#
# Compares the Nexmark view builds of two revisions on this machine: builds
# tools/weir at each (in git worktrees under a temporary directory), then runs PAIRS
# (default 5) pairs of `weir bench nexmark --json --quiet` (A first in odd pairs, B
# first in even ones, so that neither runs first in every pair), and for every query
# and upstream mode prints each pair's ratio of arrangement-backfill build seconds
# (B / A), their geometric mean with a 95% t-interval, and the median seconds of
# each. Extra flags go to every run (default: --events 1000000 --queries
# q0,q4,q7,q16); A_FLAGS and B_FLAGS, when set, go to one side's runs only, so that
# one revision can be compared with itself under two settings, for example
#   A_FLAGS="--state-cache-bytes -1" scripts/ab-nexmark.sh HEAD HEAD 5 --queries q8
# The runs' JSON stays in a directory under $TMPDIR, named at the start. Needs git,
# go and python3; nothing else may run meanwhile.
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 REV_A REV_B [PAIRS] [flags...]" >&2; exit 2; }
revs=("$1" "$2")
shift 2
pairs=5
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
	pairs=$1
	shift
fi
[ "$pairs" -ge 1 ] || { echo "ab-nexmark.sh: PAIRS must be at least 1" >&2; exit 2; }
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--events 1000000 --queries q0,q4,q7,q16)

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

out=$(mktemp -d "${TMPDIR:-/tmp}/ab-nexmark.XXXXXX")
echo "raw results: $out"
read -ra a_flags <<<"${A_FLAGS:-}"
read -ra b_flags <<<"${B_FLAGS:-}"
[ -z "${A_FLAGS:-}" ] || echo "A flags: $A_FLAGS"
[ -z "${B_FLAGS:-}" ] || echo "B flags: $B_FLAGS"
run() {
	local side=()
	if [ "$1" = A ]; then side=("${a_flags[@]}"); else side=("${b_flags[@]}"); fi
	"$tmp/weir-$1" bench nexmark --json --quiet "${flags[@]}" "${side[@]}" >"$out/$1$2.json"
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

python3 "$root/scripts/nexmark-pairs.py" "$out" "$pairs" A B
