#!/bin/sh
# base-stall-pairs.sh N: N alternating runs of BenchmarkBaseStall's inline and
# background cases (engine/cluster/commitlog), one line per run, for a paired
# interval of the checkpoint stall a base causes.
set -eu
n=${1:-5}
go test -c -o /tmp/weir-commitlog.test ./engine/cluster/commitlog
cd engine/cluster/commitlog # where go test runs it
i=0
while [ "$i" -lt "$n" ]; do
	for mode in inline background; do
		/tmp/weir-commitlog.test -test.run XXX -test.bench "BenchmarkBaseStall/$mode\$" -test.benchtime 16x | grep '^Benchmark'
	done
	i=$((i + 1))
done
