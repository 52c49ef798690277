# Weir's make targets. Everything a fresh machine needs comes from the Go module proxy
# (pinned in go.mod, tools through its `tool` directive).

GO        ?= go
# Packages whose tests exercise goroutines; they also run under -race in `make test`.
RACE_PKGS ?= ./vec/... ./vnode/... ./storage/... ./executors/... ./engine/... ./tools/sim/...
# package:FuzzTarget pairs; `make test` runs each briefly, `make fuzz` for FUZZTIME.
FUZZ_TARGETS = \
	./schema:FuzzParse \
	./gen:FuzzGenerate \
	./vec:FuzzDecodeValue \
	./vec:FuzzDecodeKey \
	./vec:FuzzChunkBuilder \
	./vnode:FuzzUnmarshalBitmap \
	./storage:FuzzProgressRow \
	./engine:FuzzUnmarshalPlan \
	./engine:FuzzDecodeObject \
	./engine:FuzzDecodeBuildSpec \
	./engine:FuzzWrite \
	./engine:FuzzCreateMV \
	./engine/cluster/wire:FuzzDecodeMessage \
	./engine/cluster/wire:FuzzDecodeBarrier \
	./engine/cluster/wire:FuzzDecodeChunkMeta \
	./engine/cluster/wire:FuzzDecodeWatermark \
	./engine/cluster/wire:FuzzDecodeBackfillStats \
	./engine/cluster/control:FuzzDecodeFrame \
	./engine/cluster/commitlog:FuzzDecodeChanges \
	./engine/cluster/commitlog:FuzzDecodeNodeRequest \
	./engine/cluster/commitlog:FuzzDecodeExported \
	./engine/cluster/remote:FuzzDecodeRequest \
	./internal/testschemas:FuzzGeneratedDecode
FUZZTIME       ?= 60s
FUZZTIME_SHORT ?= 4s
BENCHTIME      ?= 1s
BENCHCOUNT     ?= 1
# WEIR_CGO=0 (or 1) builds the weir command (demo, sim, soak and the engine benches)
# without (or with) cgo; empty, Go's default. Without cgo pebble allocates its block
# cache and memtables from the Go heap instead of with C's calloc (docs/operations.md).
WEIR_CGO ?=
WEIR      = $(if $(WEIR_CGO),CGO_ENABLED=$(WEIR_CGO) )$(GO) run ./tools/weir
ROWS     ?= 2000000
# 15 builds of each kind per mode: the idle builds' paired 95% interval is then about
# ±5%; 5 gave about ±10% (docs/benchmarking.md).
REPS     ?= 15

.PHONY: all demo test test-s3 versitygw sim soak bench-backfill bench-nexmark unit race fuzz-short fuzz generate check-generated bench lint vet fmt

all: test

include mk/peers.mk

## demo: the Nexmark views built by arrangement backfill while events flow, through
## rescales, a throttle, a pause and a crash, each verified against its oracle.
demo: generate
	$(WEIR) demo $(DEMO_FLAGS)

## test: vet, unit tests, -race on the concurrent packages, short fuzzing. The meta
## store's tests start a private PostgreSQL: pg-install installs it when missing.
test: pg-install vet unit race fuzz-short fresh-module

## test-s3: the object-storage tests (objstore, the commit log, the demo over it,
## compute processes killed and restarted, the 3-process backfill killed mid-way)
## against a private S3-protocol server, versitygw, instead of file:// buckets.
test-s3: pg-install versitygw
	WEIR_VERSITYGW=$(abspath $(VERSITYGW)) $(GO) test -count=1 ./internal/s3test/ ./engine/cluster/objstore/ ./engine/cluster/commitlog/
	WEIR_VERSITYGW=$(abspath $(VERSITYGW)) $(GO) test -count=1 -run 'TestDemoCommitLog|TestServe(KilledOverCommitLog|Replica|BackfillKilled)|TestComputeProcesses' ./tools/weir/
	WEIR_VERSITYGW=$(abspath $(VERSITYGW)) $(GO) test -count=1 -run 'TestClusterBackfillKill/^sigkill$$' ./tools/weir/

## versitygw: build the S3-protocol server pinned in tools/versitygw/go.mod.
VERSITYGW = .bin/versitygw
versitygw: $(VERSITYGW)
$(VERSITYGW): tools/versitygw/go.mod tools/versitygw/go.sum
	cd tools/versitygw && $(GO) build -o $(abspath $(VERSITYGW)) github.com/versity/versitygw/cmd/versitygw

vet:
	$(GO) vet ./...

unit:
	$(GO) test -count=1 ./...

race:
	$(GO) test -count=1 -race $(RACE_PKGS)

# Both run scripts/fuzz.sh, which retries once a run that Go's fuzzing engine ends with
# its own "context deadline exceeded" and no failing input.
fuzz-short:
	@GO='$(GO)' bash scripts/fuzz.sh $(FUZZTIME_SHORT) $(FUZZ_TARGETS)

## fresh-module: follow docs/getting-started.md, word for word, in a new module that
## uses this checkout (scripts/fresh-module.sh).
fresh-module:
	@GO='$(GO)' bash scripts/fresh-module.sh

## fuzz: run every fuzz target for FUZZTIME each (default 60s).
fuzz:
	@GO='$(GO)' bash scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

## generate: regenerate every *.gen.go from its schema file.
generate:
	$(GO) generate ./...

## check-generated: fail when go generate changes the tree.
check-generated: generate
	@if [ -n "$$(git status --porcelain)" ]; then \
		echo "go generate ./... changed the tree:"; git status --porcelain; git diff --stat; exit 1; \
	fi

## bench-backfill: arrangement ÷ no-shuffle backfill of ROWS bid rows, REPS builds of
## each kind per upstream mode, and the executor's efficiency.
bench-backfill:
	$(WEIR) bench backfill --rows $(ROWS) --reps $(REPS) --json --quiet

## bench-nexmark: the Nexmark views by arrangement and no-shuffle backfill (EVENTS events,
## NEXMARK_REPS builds of each view per kind and mode).
EVENTS       ?= 1000000
NEXMARK_REPS ?= 5
bench-nexmark:
	$(WEIR) bench nexmark --events $(EVENTS) --reps $(NEXMARK_REPS) --json

## bench: the snapshot read path and kernel benchmarks (see bench/RESULTS.md).
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) -count=$(BENCHCOUNT) ./bench/...

## sim: the whole-engine simulation over SEEDS (default 1-300), figures as JSON; a
## third of the seeds commit through a commit log on a private PostgreSQL server.
## Exits non-zero on a mismatch or a scenario counter at zero. (`make test` runs
## seeds 1-20 through TestSim, and seeds 1-3 again under -race.)
SEEDS ?= 1-300
sim: pg-install
	$(WEIR) sim --seeds $(SEEDS) --commit-log --json

## soak: the simulation for SOAK_DURATION (default 60m), seeds from 1000 on.
SOAK_DURATION ?= 60m
soak: pg-install
	$(WEIR) sim --seeds 1000-100000000 --duration $(SOAK_DURATION) --commit-log --json

## lint: gofmt, go vet and staticcheck (pinned in go.mod).
lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) tool staticcheck ./...

fmt:
	gofmt -w $$(git ls-files '*.go')
