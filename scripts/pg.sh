#!/usr/bin/env bash
# pg.sh start|stop|status DIR [PORT]
#
# Runs a private PostgreSQL cluster for the Nexmark peer comparison: its data, log and
# unix socket all live under DIR, it listens on 127.0.0.1:PORT only (default 54329) and
# trusts every local connection. `start` initialises DIR on first use, is a no-op when
# the cluster already runs, waits until it accepts connections and prints its DSN on
# stdout; `stop` shuts it down (fast mode); `status` prints the DSN and exits 0 when it
# runs, 3 otherwise.
#
# PostgreSQL refuses to run as root: as root the server runs as PG_USER (default
# postgres), which then owns DIR. PG_BIN selects the server binaries (default: the
# newest /usr/lib/postgresql/*/bin, else the initdb on PATH).
set -euo pipefail

usage() {
	echo "usage: $0 start|stop|status DIR [PORT]" >&2
	exit 2
}

[ $# -ge 2 ] || usage
cmd=$1
dir=$2
port=${3:-54329}
case $port in '' | *[!0-9]*) echo "pg.sh: bad port '$port'" >&2; exit 2 ;; esac

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
data=$dir/data
sock=$dir/sock
log=$dir/server.log
pg_user=${PG_USER:-postgres}

find_bin() {
	if [ -n "${PG_BIN:-}" ]; then
		echo "$PG_BIN"
		return
	fi
	local b
	b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
	if [ -n "$b" ] && [ -x "$b/initdb" ]; then
		echo "$b"
		return
	fi
	if command -v initdb >/dev/null 2>&1; then
		dirname "$(command -v initdb)"
		return
	fi
	echo "pg.sh: no PostgreSQL server binaries (initdb) found; run 'make pg-install'" >&2
	exit 1
}
bin=$(find_bin)

# as_owner runs a command as the cluster's owner.
if [ "$(id -u)" = 0 ]; then
	if ! id "$pg_user" >/dev/null 2>&1; then
		echo "pg.sh: running as root and user '$pg_user' does not exist (set PG_USER)" >&2
		exit 1
	fi
	as_owner() { runuser -u "$pg_user" -- "$@"; }
	chown "$pg_user" "$dir"
else
	as_owner() { "$@"; }
fi

running() {
	[ -f "$data/PG_VERSION" ] && as_owner "$bin/pg_ctl" status -D "$data" >/dev/null 2>&1
}

# The port the running server listens on: line 4 of postmaster.pid.
live_port() {
	sed -n 4p "$data/postmaster.pid" 2>/dev/null || true
}

dsn() {
	echo "postgres://postgres@127.0.0.1:$1/postgres?sslmode=disable"
}

case $cmd in
start)
	if running; then
		p=$(live_port)
		if [ -n "$p" ] && [ "$p" != "$port" ]; then
			echo "pg.sh: already running on port $p (not $port)" >&2
		fi
		dsn "${p:-$port}"
		exit 0
	fi
	if [ ! -f "$data/PG_VERSION" ]; then
		as_owner "$bin/initdb" -D "$data" -U postgres --auth=trust \
			--encoding=UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
			cat "$dir/initdb.log" >&2
			exit 1
		}
	fi
	as_owner mkdir -p "$sock"
	# Settings on the command line, so that a restart may change the port.
	if ! as_owner "$bin/pg_ctl" start -D "$data" -l "$log" -w -t 60 -o \
		"-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$sock -c timezone=UTC" \
		>/dev/null; then
		echo "pg.sh: server did not start; tail of $log:" >&2
		tail -n 20 "$log" >&2 || true
		exit 1
	fi
	for _ in $(seq 1 60); do
		if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
			dsn "$port"
			exit 0
		fi
		sleep 0.5
	done
	echo "pg.sh: server not ready after 30s; see $log" >&2
	exit 1
	;;
stop)
	if running; then
		as_owner "$bin/pg_ctl" stop -D "$data" -m fast -w -t 60 >/dev/null
		echo "pg.sh: stopped $data" >&2
	else
		echo "pg.sh: not running ($data)" >&2
	fi
	;;
status)
	if running; then
		dsn "$(live_port)"
	else
		echo "pg.sh: not running ($data)" >&2
		exit 3
	fi
	;;
*)
	usage
	;;
esac
