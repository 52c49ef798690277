#!/usr/bin/env bash
# fresh-module.sh [DOC]
#
# Follows the steps of docs/getting-started.md (or DOC) in a new module under a
# temporary directory, word for word, and fails naming the step that fails
# (make fresh-module; make test runs it).
#
# It reads what lies between <!-- fresh-module:begin --> and <!-- fresh-module:end -->.
# There every fenced block follows one of two comments:
#   <!-- run -->          a ```sh block: each line is a step, run in order in one shell
#                         (so `cd` carries over); blank lines and # comments are skipped
#   <!-- file: PATH -->   the block is written to PATH, relative to the directory the
#                         steps are in at that point
# and the blocks are taken in the order of the document. A fenced block with neither
# comment, or a comment without a block, is an error: nothing in the section is
# silently left out.
#
# The one thing added to the steps: right after `go mod init`, a replace of
# github.com/seed04fbb902/weir by this checkout, which stands in for the published
# module. So that `go get github.com/seed04fbb902/weir@latest` resolves to it whether
# or not a version is published (and without asking the network about it), a file://
# module proxy that lists no version of Weir comes before GOPROXY; every other module
# still comes from GOPROXY. GOWORK is off and a -mod= flag is dropped from GOFLAGS, as
# on a machine that has only Go. The Go build and module caches are the usual ones.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
doc=${1:-$root/docs/getting-started.md}
weir=github.com/seed04fbb902/weir
go=${GO:-go}

die() { echo "fresh-module: $*" >&2; exit 1; }
[ -f "$doc" ] || die "no such file: $doc"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fresh-module.XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

# Parse the section into $tmp/blocks: items "run LINE STEP", "file LINE PATH BLOCKFILE".
items=()
in=0 fence=0 want="" wantline=0 begin=0 end=0 n=0 lineno=0 body=""
while IFS= read -r line || [ -n "$line" ]; do
	lineno=$((lineno + 1))
	case $line in
	'<!-- fresh-module:begin -->'*) [ $begin = 0 ] || die "$doc:$lineno: a second begin marker"; begin=$lineno in=1; continue ;;
	'<!-- fresh-module:end -->'*) [ $in = 1 ] || die "$doc:$lineno: end marker before begin"; end=$lineno in=0; continue ;;
	esac
	[ $in = 1 ] || continue
	if [ $fence = 1 ]; then
		if [[ $line == '```' ]]; then
			fence=0
			if [ "$want" = run ]; then
				i=0
				while IFS= read -r step; do
					i=$((i + 1))
					trimmed=${step#"${step%%[![:space:]]*}"}
					[ -z "$trimmed" ] || [[ $trimmed == '#'* ]] && continue
					[[ $step == *'\' ]] && die "$doc:$((wantline + i)): continued lines are not supported in a run block"
					items+=("run	$((wantline + i))	$step")
				done <"$body"
			else
				items+=("file	$wantline	${want#file:}	$body")
			fi
			want=""
		else
			printf '%s\n' "$line" >>"$body"
		fi
		continue
	fi
	case $line in
	'<!-- run -->')
		[ -z "$want" ] || die "$doc:$lineno: <!-- run --> after another block comment (line $wantline) with no block between"
		want=run wantline=$lineno ;;
	'<!-- file: '*' -->')
		[ -z "$want" ] || die "$doc:$lineno: <!-- file: --> after another block comment (line $wantline) with no block between"
		path=${line#'<!-- file: '}
		path=${path%' -->'}
		case $path in /* | *..*) die "$doc:$lineno: file path must be relative and without ..: $path" ;; esac
		want=file:$path wantline=$lineno ;;
	'```'*)
		[ -n "$want" ] || die "$doc:$lineno: a fenced block with neither <!-- run --> nor <!-- file: PATH --> before it"
		lang=${line#'```'}
		if [ "$want" = run ] && [ "$lang" != sh ]; then
			die "$doc:$lineno: a <!-- run --> block must be a \`\`\`sh block, not \`\`\`$lang"
		fi
		n=$((n + 1))
		body=$tmp/block.$n
		: >"$body"
		wantline=$lineno # the steps' line numbers count from the fence
		fence=1 ;;
	esac
done <"$doc"
[ $begin != 0 ] || die "$doc: no <!-- fresh-module:begin --> marker"
[ $end != 0 ] || die "$doc: no <!-- fresh-module:end --> marker after line $begin"
[ $fence = 0 ] || die "$doc: a fenced block not closed before the end marker"
[ -z "$want" ] || die "$doc:$wantline: a block comment with no block after it"
[ ${#items[@]} -gt 0 ] || die "$doc: nothing between the markers"

# The environment of a machine with just Go, reusing its caches.
proxy=$tmp/proxy
mkdir -p "$proxy/$weir/@v"
: >"$proxy/$weir/@v/list"
upstream=${GOPROXY:-$("$go" env GOPROXY)}
export GOPROXY="file://$proxy,$upstream"
export GOWORK=off
flags=()
for f in ${GOFLAGS:-$("$go" env GOFLAGS)}; do
	case $f in -mod=*) ;; *) flags+=("$f") ;; esac
done
export GOFLAGS="${flags[*]}"
if [ "$go" != go ]; then
	go() { "$GO" "$@"; }
fi

log=$tmp/log
mkdir "$tmp/work"
cd "$tmp/work"
start=$SECONDS
rel=${doc#"$root/"}
steps=0 replaced=0
for item in "${items[@]}"; do
	IFS=$'\t' read -r kind at rest <<<"$item"
	if [ "$kind" = file ]; then
		path=${rest%%$'\t'*}
		src=${rest#*$'\t'}
		echo "fresh-module: write $path ($rel:$at)"
		mkdir -p "$(dirname "$path")"
		cp "$src" "$path"
		continue
	fi
	steps=$((steps + 1))
	t0=$SECONDS
	echo "fresh-module: \$ $rest"
	if ! eval "$rest" >"$log" 2>&1 </dev/null; then
		cat "$log" >&2
		die "FAILED at step $steps ($rel:$at, in $PWD): $rest"
	fi
	out=$(wc -l <"$log")
	if [ "$out" -le 5 ]; then
		sed 's/^/    /' "$log"
	else
		sed -n '1,2s/^/    /p' "$log"
		echo "    ... ($out lines of output)"
	fi
	[ $((SECONDS - t0)) -lt 5 ] || echo "    ($((SECONDS - t0))s)"
	if [[ $rest == "go mod init"* ]]; then
		echo "fresh-module: (added by the script) go mod edit -replace=$weir=$root"
		"$go" mod edit -replace="$weir=$root" || die "go mod edit -replace failed"
		replaced=1
	fi
done
[ $replaced = 1 ] || die "$rel: no \`go mod init\` step, so no place for the replace of $weir"
echo "fresh-module: ok, $steps steps of $rel in $((SECONDS - start))s"
