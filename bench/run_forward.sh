#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# What forwarding costs: a cluster of 2 shards x 1 replica on loopback (the
# devbroker with a plays topic of 8 partitions, one redis-server, two
# dedupd), a heavy user of shard 0, and bench/loadgen --compare sending the
# same Filter to the owner (A, served locally) and to the other node (B,
# which forwards it to A), alternating in 0.5 s slices so both see the
# same host. loadgen prints both at 1 in flight, paced and saturated, and
# the B - A difference per slice pair is the forwarding's price.
#
#   bench/run_forward.sh [-- loadgen options...]     (e.g. -- --seconds 10)
#
# Binaries come from build/ (LOADGEN, DEDUPD and BUILD override).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build}
loadgen=${LOADGEN:-$build/bench/loadgen}
dedupd=${DEDUPD:-$build/src/dedupd}
devbroker=$build/tools/devbroker
ddpartition=$build/tests/tools/ddpartition
if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi
for f in "$loadgen" "$dedupd" "$devbroker" "$ddpartition"; do
    [ -x "$f" ] || { echo "run_forward: $f is missing (build first)" >&2; exit 1; }
done
command -v redis-server >/dev/null || { echo "run_forward: redis-server is not installed" >&2; exit 1; }

dir=$(mktemp -d /tmp/dedupd-forward-XXXXXX)
pids=
# Stopped in the reverse order of their start: the dedupd nodes first, while
# the broker still answers (a node stopping after the broker waits out its
# Kafka client's close), then redis-server and the broker.
cleanup() {
    rev=
    for p in $pids; do rev="$p $rev"; done
    for p in $rev; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    [ -n "${DD_KEEP_TMP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# take_port: a port claimed for the life of this script (bench/ports.sh).
. "$here/ports.sh"
wait_ready() { # admin_port pid
    i=0
    while ! /usr/bin/python3 -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:$1/readyz',timeout=1).status!=200)" 2>/dev/null; do
        kill -0 "$2" 2>/dev/null || { echo "run_forward: process $2 exited; logs in $dir" >&2; DD_KEEP_TMP=1; exit 1; }
        i=$((i + 1)); [ $i -lt 600 ] || { echo "run_forward: :$1 never ready" >&2; DD_KEEP_TMP=1; exit 1; }
        sleep 0.1
    done
}

wait_peers_ready() { # admin_port: until its /cluster shows every peer ready
    i=0
    while ! /usr/bin/python3 -c "import json,urllib.request,sys; c=json.load(urllib.request.urlopen('http://127.0.0.1:$1/cluster',timeout=1)); sys.exit(not all(n.get('ready') for n in c['nodes'] if not n.get('self')))" 2>/dev/null; do
        i=$((i + 1)); [ $i -lt 600 ] || { echo "run_forward: :$1 never saw its peers ready" >&2; DD_KEEP_TMP=1; exit 1; }
        sleep 0.1
    done
}

"$devbroker" --bootstrap-file "$dir/bootstrap" --topic plays:8 >"$dir/broker.log" 2>&1 &
pids="$pids $!"
i=0
while [ ! -s "$dir/bootstrap" ]; do i=$((i + 1)); [ $i -lt 300 ] || exit 1; sleep 0.05; done
broker=$(cat "$dir/bootstrap")

take_port; redis_port=$port
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
    >"$dir/redis.log" 2>&1 &
pids="$pids $!"

# A cluster requires the forget-marker key (cluster.forget_key_file), the
# same file for both nodes: 32 random bytes in hex, readable by us only.
(umask 077; od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$dir/forget.key")

take_port; a_port=$port; take_port; b_port=$port; take_port; a_admin=$port; take_port; b_admin=$port
nodes="127.0.0.1:$a_port;127.0.0.1:$b_port"
start_node() { # shard rpc_port admin_port
    "$dedupd" -o history.path="$dir/h$1" -o trace.path="$dir/t$1" -o rpc.listen=127.0.0.1:"$2" \
        -o admin.listen=127.0.0.1:"$3" -o recent.redis=127.0.0.1:"$redis_port" \
        -o kafka.bootstrap.servers="$broker" -o kafka.group.id=bench-forward \
        -o cluster.shards=2 -o cluster.shard="$1" -o cluster.replica=0 \
        -o cluster.nodes="$nodes" -o cluster.forget_key_file="$dir/forget.key" -o log.level=warn ${DEDUPD_OPTS:-} >>"$dir/dedupd-$1.log" 2>&1 &
    started=$!
}
start_node 0 "$a_port" "$a_admin"; a_pid=$started; pids="$pids $a_pid"
start_node 1 "$b_port" "$b_admin"; b_pid=$started; pids="$pids $b_pid"
wait_ready "$a_admin" "$a_pid"
wait_ready "$b_admin" "$b_pid"
# Each node judges its peers by their last Status (a health round, 1 s):
# until B has seen A ready, B marks what it forwards degraded.
wait_peers_ready "$a_admin"
wait_peers_ready "$b_admin"

# A heavy user whose partition (murmur2_random, 8 partitions) is shard 0's.
user=$(for n in 0 1 2 3 4 5 6 7 8 9; do echo "loadgen-heavy-$n"; done |
       "$ddpartition" murmur2_random 8 | awk -F '\t' '$2 % 2 == 0 { print $1; exit }')
[ -n "$user" ] || { echo "run_forward: no user of shard 0 found" >&2; exit 1; }
echo "run_forward: A (owner, shard 0) 127.0.0.1:$a_port, B (shard 1, forwards) 127.0.0.1:$b_port, user $user, $(nproc) cores"

"$loadgen" --addr 127.0.0.1:"$a_port" --redis 127.0.0.1:"$redis_port" --user "$user" \
    --phase setup "$@" || exit $?
"$loadgen" --addr 127.0.0.1:"$a_port" --redis 127.0.0.1:"$redis_port" --user "$user" \
    --server-pid "$a_pid" --compare 127.0.0.1:"$b_port" --compare-pid "$b_pid" \
    --phase run "$@" || { rc=$?; [ -z "${DEBUG_FORWARD:-}" ] || { curl -s "127.0.0.1:$a_admin/cluster"; echo; curl -s "127.0.0.1:$b_admin/cluster"; echo; }; exit $rc; }
