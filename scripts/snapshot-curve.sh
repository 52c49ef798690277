#!/usr/bin/env bash
# snapshot-curve.sh [ROWS...]
#
# The snapshot read's cost curve as tables outgrow the block cache: builds
# tools/weir, then for every row count (default 1000000 4000000 8000000 16000000)
# and every store setting in SETTINGS (';'-separated sets of `weir bench snapshot`
# flags; default "--compression snappy;--compression none") runs
#   weir bench snapshot --rows N --workers 2 --cache-mb CACHE_MB --reps REPS --json
# (CACHE_MB default 256, the engine's default block cache; REPS default 5) and prints
# one line per run: rows, setting, the snapshot path's and the raw pebble scan's
# rows/s (medians over the repetitions), their ratio, and key+value bytes per row.
# The runs' JSON stays in a directory under $TMPDIR, named at the start. Needs go and
# python3; nothing else may run meanwhile.
set -euo pipefail

rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(1000000 4000000 8000000 16000000)
IFS=';' read -ra settings <<<"${SETTINGS:---compression snappy;--compression none}"
cache=${CACHE_MB:-256}
reps=${REPS:-5}

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go build -o "$tmp/weir" ./tools/weir)
out=$(mktemp -d "${TMPDIR:-/tmp}/snapshot-curve.XXXXXX")
echo "raw results: $out (commit $(git -C "$root" rev-parse --short HEAD), cache $cache MiB, $reps reps)"
i=0
for n in "${rows[@]}"; do
	for s in "${settings[@]}"; do
		i=$((i + 1))
		read -ra flags <<<"$s"
		"$tmp/weir" bench snapshot --rows "$n" --workers 2 --cache-mb "$cache" --reps "$reps" --json "${flags[@]}" >"$out/$i.json"
		python3 - "$out/$i.json" "$s" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['rows']:>9}  {sys.argv[2]:<40}  snapshot {r['rows_per_sec']/1e6:6.2f} M rows/s  raw {r['raw_rows_per_sec']/1e6:6.2f} M rows/s  ratio {r['efficiency']:.3f}  {r['kv_bytes_per_row']:.0f} B/row", flush=True)
PY
	done
done
