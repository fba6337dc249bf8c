#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# The cold path through gRPC (issue 19): bench_cold builds (or reuses) a
# store of the realistic mix dated by the wall clock, so that dedupd can
# serve it, and lists 20,000 of its users drawn uniformly and 20,000 drawn
# by plays; a dedupd serves the store with a block cache 1/32 of its SST
# bytes and rocksdb.use_direct_reads, after the page cache is dropped where
# allowed; loadgen --users-file then asks Filter for each list's users in
# turn, a different user per call (10,000 candidates, none of them played
# by these users), 1 in flight, then paced. Compare with bench_cold's
# in-process figures on the same store (printed last).
#
#   bench/run_cold_loadgen.sh [LOADGEN [DEDUPD [BENCH_COLD]]] [-- loadgen options...]
#
# COLD_USERS: users in the store (default 100000). COLD_DIR=PATH keeps the
# store there for the next run (without it, a temporary directory that is
# removed at exit). Loadgen options, e.g. --seconds 10 --rate 100, go after
# "--".
set -eu
here=$(cd "$(dirname "$0")" && pwd)
loadgen=$here/../build/bench/loadgen
dedupd=$here/../build/src/dedupd
bench_cold=$here/../build/bench/bench_cold
if [ $# -gt 0 ] && [ "$1" != "--" ]; then loadgen=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" != "--" ]; then dedupd=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" != "--" ]; then bench_cold=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi
for f in "$loadgen" "$dedupd" "$bench_cold"; do
    [ -x "$f" ] || { echo "run_cold_loadgen: $f is missing (build first)" >&2; exit 1; }
done
command -v redis-server >/dev/null || { echo "run_cold_loadgen: redis-server is not installed" >&2; exit 1; }

tmp=$(mktemp -d /tmp/dedupd-cold-XXXXXX)
store_dir=${COLD_DIR:-$tmp/store}
mkdir -p "$store_dir"
redis_pid= dedupd_pid=
cleanup() {
    [ -n "$dedupd_pid" ] && kill "$dedupd_pid" 2>/dev/null && wait "$dedupd_pid" 2>/dev/null
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
    [ -n "${DD_KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

port_of() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# until PORT answers, while PID lives
await() {
    /usr/bin/python3 - "$1" "$2" <<'PY' || { echo "run_cold_loadgen: nothing on port $1; logs in $tmp" >&2; DD_KEEP_TMP=1; exit 1; }
import os, socket, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
for _ in range(1200):
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
        sys.exit(0)
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            sys.exit(1)
        time.sleep(0.05)
sys.exit(1)
PY
}

# The store (built once with COLD_DIR), its copy under this build's
# settings (v-default) and the user lists.
"$bench_cold" --users "${COLD_USERS:-100000}" --dir "$store_dir" --keep --wall-clock \
    --users-out "$store_dir/users"
store=$store_dir/v-default
cache_mb=$(find "$store" -name '*.sst' -printf '%s\n' | awk '{s += $1} END {m = int(s / 32 / 1048576); print (m > 0 ? m : 1)}')

redis_port=$(port_of)
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$tmp" --save "" --appendonly no \
    >"$tmp/redis.log" 2>&1 &
redis_pid=$!
await "$redis_port" "$redis_pid"

sync
if (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then echo "run_cold_loadgen: page cache dropped"
else echo "run_cold_loadgen: page cache not dropped (not allowed here)"; fi
rpc_port=$(port_of)
"$dedupd" -o history.path="$store" -o trace.path="$tmp/trace" -o ingest.enabled=false \
    -o recent.redis=127.0.0.1:"$redis_port" -o rpc.listen=127.0.0.1:"$rpc_port" \
    -o admin.listen= -o log.level=warn -o history.block_cache_mb="$cache_mb" \
    -o rocksdb.use_direct_reads=true >>"$tmp/dedupd.log" 2>&1 &
dedupd_pid=$!
await "$rpc_port" "$dedupd_pid"
echo "run_cold_loadgen: dedupd 127.0.0.1:$rpc_port on $store, block cache $cache_mb MiB, direct reads"

rc=0
for users in uniform weighted; do
    "$loadgen" --addr 127.0.0.1:"$rpc_port" --redis 127.0.0.1:"$redis_port" \
        --server-pid "$dedupd_pid" --phase run --users-file "$store_dir/users.$users" "$@" || rc=$?
done
kill "$dedupd_pid"
wait "$dedupd_pid" || { echo "run_cold_loadgen: dedupd did not stop cleanly" >&2; rc=1; }
dedupd_pid=
# The same store in process, for comparison (the copy is reused as is).
"$bench_cold" --dir "$store_dir" --keep --calls 4000 --slices 4 || rc=$?
exit $rc
