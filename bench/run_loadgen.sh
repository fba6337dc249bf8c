#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# Run bench/loadgen against a fresh dedupd and redis-server in a temporary
# directory (loopback, free ports), then stop both and clean up.
#
#   bench/run_loadgen.sh [LOADGEN [DEDUPD]] [-- loadgen options...]
#
# LOADGEN and DEDUPD default to build/bench/loadgen and build/src/dedupd.
# dedupd runs with the defaults of conf/dedupd.conf (history.fp_rate 0.01,
# rpc.threads 2, recent.timeout_ms 20) except: no Kafka ingest, history in
# the temporary directory, no admin listener. The heavy user is written,
# then dedupd is restarted so the plays are read from an SST as in steady
# state (LOADGEN_NO_RESTART=1: measure right after writing, with the plays
# still merge operands in the memtable). Extra dedupd settings:
# DEDUPD_OPTS="-o rpc.threads=4 ...". Loadgen options, e.g. --seconds 10
# --inflight 16, go after "--".
#
# A/B: DEDUPD_B=path/to/another/dedupd (and/or DEDUPD_B_OPTS="-o ...")
# starts a second dedupd, B, with its own history and the same Redis; both
# get the heavy user, and loadgen --compare alternates the Filter phases
# between them in 0.5 s slices (see bench/loadgen.cc). DEDUPD_B_OPTS alone
# compares settings of one build: DEDUPD_B defaults to DEDUPD when it is set.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
loadgen=$here/../build/bench/loadgen
dedupd=$here/../build/src/dedupd
if [ $# -gt 0 ] && [ "$1" != "--" ]; then loadgen=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" != "--" ]; then dedupd=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi
for f in "$loadgen" "$dedupd"; do
    [ -x "$f" ] || { echo "run_loadgen: $f is missing (build first)" >&2; exit 1; }
done
command -v redis-server >/dev/null || { echo "run_loadgen: redis-server is not installed" >&2; exit 1; }

dir=$(mktemp -d /tmp/dedupd-loadgen-XXXXXX)
redis_pid= dedupd_pid= b_pid=
cleanup() {
    [ -n "$dedupd_pid" ] && kill "$dedupd_pid" 2>/dev/null && wait "$dedupd_pid" 2>/dev/null
    [ -n "$b_pid" ] && kill "$b_pid" 2>/dev/null && wait "$b_pid" 2>/dev/null
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
    [ -n "${DD_KEEP_TMP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# take_port: a port claimed for the life of this script (bench/ports.sh).
. "$here/ports.sh"
wait_port() { # port pid
    i=0
    while ! /usr/bin/python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.5)" 2>/dev/null; do
        kill -0 "$2" 2>/dev/null || { echo "run_loadgen: process $2 exited; log in $dir" >&2; DD_KEEP_TMP=1; exit 1; }
        i=$((i + 1)); [ $i -lt 400 ] || { echo "run_loadgen: nothing on port $1" >&2; exit 1; }
        sleep 0.05
    done
}

take_port; redis_port=$port
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
    >"$dir/redis.log" 2>&1 &
redis_pid=$!
wait_port "$redis_port" "$redis_pid"

take_port; rpc_port=$port
compare=
if [ -n "${DEDUPD_B:-}${DEDUPD_B_OPTS:-}" ]; then
    compare=1
    dedupd_b=${DEDUPD_B:-$dedupd}
    [ -x "$dedupd_b" ] || { echo "run_loadgen: $dedupd_b is missing (build first)" >&2; exit 1; }
    take_port; b_port=$port
fi
# start_one BINARY HISTORY_DIR PORT LOG OPTS: start one dedupd, its pid in
# $started (recorded by the caller before waiting, so cleanup stops it).
start_one() {
    # shellcheck disable=SC2086
    "$1" -o history.path="$2" -o trace.path="$2-trace" -o ingest.enabled=false \
        -o recent.redis=127.0.0.1:"$redis_port" -o rpc.listen=127.0.0.1:"$3" \
        -o admin.listen= -o log.level=warn $5 >>"$4" 2>&1 &
    started=$!
}
start_dedupd() {
    start_one "$dedupd" "$dir/history" "$rpc_port" "$dir/dedupd.log" "${DEDUPD_OPTS:-}"
    dedupd_pid=$started
    wait_port "$rpc_port" "$dedupd_pid"
    [ -n "$compare" ] || return 0
    start_one "$dedupd_b" "$dir/history-b" "$b_port" "$dir/dedupd-b.log" "${DEDUPD_B_OPTS:-}"
    b_pid=$started
    wait_port "$b_port" "$b_pid"
}
stop_dedupd() {
    kill "$dedupd_pid"
    wait "$dedupd_pid" || { echo "run_loadgen: dedupd did not stop cleanly" >&2; exit 1; }
    [ -n "$compare" ] || return 0
    kill "$b_pid"
    wait "$b_pid" || { echo "run_loadgen: dedupd B did not stop cleanly" >&2; exit 1; }
}
start_dedupd
echo "run_loadgen: dedupd 127.0.0.1:$rpc_port, redis 127.0.0.1:$redis_port, $(nproc) cores"
[ -z "$compare" ] || echo "run_loadgen: B: $dedupd_b ${DEDUPD_B_OPTS:-} at 127.0.0.1:$b_port; A: $dedupd ${DEDUPD_OPTS:-}"

rc=0
if [ -n "${LOADGEN_NO_RESTART:-}" ]; then
    [ -z "$compare" ] || { echo "run_loadgen: LOADGEN_NO_RESTART and DEDUPD_B do not go together" >&2; exit 1; }
    # Plays stay in the memtable: every read folds their merge operands.
    "$loadgen" --addr 127.0.0.1:"$rpc_port" --redis 127.0.0.1:"$redis_port" \
        --server-pid "$dedupd_pid" "$@" || rc=$?
    exit $rc
fi
# Steady state: write the heavy user, restart dedupd (RocksDB flushes the
# recovered WAL to an SST, folding the merge operands), then measure.
"$loadgen" --addr 127.0.0.1:"$rpc_port" --redis 127.0.0.1:"$redis_port" --phase setup "$@" || exit $?
if [ -n "$compare" ]; then
    "$loadgen" --addr 127.0.0.1:"$b_port" --redis 127.0.0.1:"$redis_port" --phase setup "$@" || exit $?
fi
stop_dedupd
start_dedupd
# A alone, or A and B alternated.
[ -z "$compare" ] || set -- --compare 127.0.0.1:"$b_port" --compare-pid "$b_pid" "$@"
"$loadgen" --addr 127.0.0.1:"$rpc_port" --redis 127.0.0.1:"$redis_port" \
    --server-pid "$dedupd_pid" --phase run "$@" || rc=$?
exit $rc
