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
python3 "$root/scripts/nexmark-pairs.py" "$tmp" "$pairs" channel flight
