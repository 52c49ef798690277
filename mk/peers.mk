# PostgreSQL and DuckDB as peers for the Nexmark queries (bench/nexmark/peers).
# Included from the Makefile. The PostgreSQL cluster is private: data, log and socket
# under PG_DIR, listening on 127.0.0.1:PG_PORT with trust authentication.

PG_DIR  ?= $(CURDIR)/.pg
PG_PORT ?= 54329
PG_DSN  ?= postgres://postgres@127.0.0.1:$(PG_PORT)/postgres?sslmode=disable
# apt-get needs root; elsewhere go through sudo.
PG_SUDO ?= $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: pg-install pg-start pg-stop pg-status peers-test peers-test-duckdb

## pg-install: install PostgreSQL with apt, only when no initdb is found.
pg-install:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then \
		echo "PostgreSQL server binaries present"; \
	else \
		$(PG_SUDO) apt-get update && $(PG_SUDO) apt-get install -y postgresql; \
	fi

## pg-start: start (initialising on first use) the private cluster in PG_DIR; prints its DSN.
pg-start:
	@scripts/pg.sh start $(PG_DIR) $(PG_PORT)

## pg-stop: stop the private cluster.
pg-stop:
	@scripts/pg.sh stop $(PG_DIR) $(PG_PORT)

pg-status:
	@scripts/pg.sh status $(PG_DIR) $(PG_PORT)

## peers-test: check PostgreSQL's query results against the Go oracle (needs pg-start).
peers-test:
	WEIR_PG_DSN='$(PG_DSN)' $(GO) test -count=1 -v -run Postgres ./bench/nexmark/peers/

## peers-test-duckdb: the same for DuckDB (cgo; the first build takes minutes).
peers-test-duckdb:
	$(GO) test -count=1 -v -tags duckdb -run DuckDB ./bench/nexmark/peers/
