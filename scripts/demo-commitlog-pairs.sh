#!/usr/bin/env bash
# demo-commitlog-pairs.sh [PAIRS] [weir demo flags...]
#
# Compares the demo over a commit log (weir demo --meta --bucket: checkpoints to a
# private PostgreSQL and a file:// bucket) with the embedded demo on this machine:
# builds tools/weir once, starts a private PostgreSQL server with scripts/pg.sh in a
# temporary directory, then runs PAIRS (default 5) pairs, embedded then commit log,
# each commit-log run on a new database and bucket. It prints each run's seconds
# (the demo's own "seconds") and each pair's ratio (commit log / embedded), then the
# median ratio and the pairs' range. Extra flags go to every run (default: --events
# 10000 --rate 500). It stops the server it started (by its directory) at the end.
# With COMPARE=node-stores each pair is instead the demo over a commit log, then the
# same with --node-stores (a store per node, committed together), each on a new
# database and bucket.
# Needs go, python3 and PostgreSQL's server binaries (make pg-install); nothing else
# may run meanwhile.
set -euo pipefail

pairs=5
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
	pairs=$1
	shift
fi
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--events 10000 --rate 500)

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weir-commitlog-pairs-XXXXXX")
pgdir=$(mktemp -d "${TMPDIR:-/tmp}/weir-commitlog-pairs-pg-XXXXXX") # pg.sh gives it to the server's user
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cleanup() {
	"$root/scripts/pg.sh" stop "$pgdir" "$port" >/dev/null 2>&1 || true
	rm -rf "$tmp" "$pgdir"
}
trap cleanup EXIT
(cd "$root" && go build -o "$tmp/weir" ./tools/weir)
psql=$(command -v psql || ls -d /usr/lib/postgresql/*/bin/psql | sort -V | tail -n 1)
dsn=$("$root/scripts/pg.sh" start "$pgdir" "$port" | tail -n 1)
[ -n "$dsn" ] || { echo "no DSN from pg.sh" >&2; exit 1; }

seconds() { python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])'; }
# logrun NAME [flags]: the demo over a commit log on a new database and bucket NAME.
logrun() {
	local name=$1
	shift
	"$psql" "$dsn" -qc "CREATE DATABASE $name"
	local dbdsn
	dbdsn=$(python3 -c 'import sys,urllib.parse as p; u=p.urlparse(sys.argv[1]); print(p.urlunparse(u._replace(path="/"+sys.argv[2])))' "$dsn" "$name")
	mkdir -p "$tmp/$name"
	"$tmp/weir" demo --json --progress none "${flags[@]}" --meta "$dbdsn" --bucket "file://$tmp/$name" "$@" | seconds
}
what=("embedded" "commit log")
[ "${COMPARE:-}" != node-stores ] || what=("commit log" "node stores")
ratios=()
for i in $(seq 1 "$pairs"); do
	if [ "${COMPARE:-}" = node-stores ]; then
		a=$(logrun "pairs_a$i")
		b=$(logrun "pairs_b$i" --node-stores)
	else
		a=$("$tmp/weir" demo --json --progress none "${flags[@]}" | seconds)
		b=$(logrun "pairs_$i")
	fi
	r=$(python3 -c "print(round($b / $a, 3))")
	ratios+=("$r")
	echo "pair $i: ${what[0]} ${a}s, ${what[1]} ${b}s, ratio $r"
done
python3 - "${what[1]}" "${what[0]}" "${ratios[@]}" <<'PY'
import statistics, sys
b, a = sys.argv[1], sys.argv[2]
r = sorted(float(x) for x in sys.argv[3:])
print(f"{b} / {a}: median {statistics.median(r):.3f}, pairs {r[0]:.3f} .. {r[-1]:.3f} ({len(r)} pairs)")
PY
