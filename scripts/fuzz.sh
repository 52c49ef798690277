#!/usr/bin/env bash
# fuzz.sh FUZZTIME PKG:TARGET...
#
# Runs each fuzz target for FUZZTIME (make fuzz-short and make fuzz call it; GO names
# the go command, default go). Go's fuzzing engine sometimes ends a run with its own
# "context deadline exceeded" and no failing input: such a run is retried once. A real
# failure writes its input under testdata/fuzz and fails again.
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 FUZZTIME PKG:TARGET..." >&2; exit 2; }
fuzztime=$1
shift
go=${GO:-go}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "$@"; do
	pkg=${t%%:*}
	fn=${t##*:}
	echo "fuzz $pkg $fn for $fuzztime"
	if "$go" test -run='^$' -fuzz="^$fn\$" -fuzztime="$fuzztime" "$pkg" >"$log" 2>&1; then
		cat "$log"
		continue
	fi
	cat "$log"
	if grep -q "context deadline exceeded" "$log" && ! grep -q "Failing input written" "$log"; then
		echo "retrying $fn once (the fuzzing engine's deadline error, no failing input)"
		"$go" test -run='^$' -fuzz="^$fn\$" -fuzztime="$fuzztime" "$pkg"
	else
		exit 1
	fi
done
