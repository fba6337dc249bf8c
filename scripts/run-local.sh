#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Run dedupd locally, everything real: installs what is missing to build
# and run it (deploy/packages/build.txt and run-local.txt; not the test
# suite's test.txt: no JDK, Prometheus or clang), builds
# dedupd, the dev broker and dedupctl (not the tests), starts redis-server
# and the dev Kafka broker (tools/devbroker, librdkafka's mock cluster)
# under a run directory, then dedupd in the foreground with
# conf/dedupd.conf and its RocksDB data under that directory. Ctrl-C stops
# all of it.
#   scripts/run-local.sh [RUN_DIR]        (default: ./.dedupd-run)
# Environment: DD_RPC_PORT (50051), DD_REDIS_PORT (6379), DD_ADMIN_PORT (9464),
# DD_KAFKA (HOST:PORT[,...]: a real Kafka whose topic "plays" exists, used
# instead of starting the dev broker).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
run=$(mkdir -p "${1:-$here/.dedupd-run}" && cd "${1:-$here/.dedupd-run}" && pwd)
rpc_port=${DD_RPC_PORT:-50051}
redis_port=${DD_REDIS_PORT:-6379}
admin_port=${DD_ADMIN_PORT:-9464}

"$here/scripts/install-deps.sh" "$here/deploy/packages/build.txt" "$here/deploy/packages/run-local.txt"
# Only what this script runs and tells you to try; the rest of the build dir
# (tests, benchmarks, C++ and Java clients) is built by the first plain
# `ninja -C build` or `meson test -C build`, which reuse these objects.
"$here/scripts/build.sh" "$here/build" src/dedupd tools/devbroker tools/dedupctl

pids=()
cleanup() {
    # reverse start order: dedupd flushes and commits before its broker and
    # Redis go away
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill "${pids[i]}" 2>/dev/null || true
        wait "${pids[i]}" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$run/redis" "$run/data"
# The admin token /why and /trace want (admin.token_file), made once and
# kept; dedupctl reads it from DEDUPCTL_ADMIN_TOKEN_FILE or
# --admin-token-file.
if [ ! -s "$run/data/admin.token" ]; then
    (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$run/data/admin.token")
fi
if redis-cli -p "$redis_port" ping >/dev/null 2>&1; then
    echo "run-local: using the Redis already answering on 127.0.0.1:$redis_port"
else
    redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$run/redis" \
        --save "" --appendonly no --daemonize no >"$run/redis.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -p "$redis_port" ping >/dev/null || { echo "redis-server did not start; see $run/redis.log" >&2; exit 1; }
fi

if [ -n "${DD_KAFKA:-}" ]; then
    bootstrap=$DD_KAFKA
    kafka_what="Kafka on $bootstrap"
else
    rm -f "$run/bootstrap"
    "$here/build/tools/devbroker" --topic plays:8 --bootstrap-file "$run/bootstrap" >"$run/devbroker.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do [ -s "$run/bootstrap" ] && break; sleep 0.1; done
    [ -s "$run/bootstrap" ] || { echo "devbroker did not start; see $run/devbroker.log" >&2; exit 1; }
    bootstrap=$(cat "$run/bootstrap")
    kafka_what="dev Kafka broker on $bootstrap"
fi

cat <<MSG

dedupd is starting: gRPC on 127.0.0.1:$rpc_port, metrics on http://127.0.0.1:$admin_port/metrics,
Redis on 127.0.0.1:$redis_port, $kafka_what (topic "plays"), data in $run/data.
Try it from another terminal:
  $here/build/tools/dedupctl -a 127.0.0.1:$rpc_port deliver alice v1 v2
  $here/build/tools/dedupctl -a 127.0.0.1:$rpc_port play alice v3
  echo 'alice:{"user_id":"alice","item_id":"v4"}' | kcat -P -b $bootstrap -t plays -X partitioner=murmur2_random -K:
  $here/build/tools/dedupctl -a 127.0.0.1:$rpc_port filter alice v1 v2 v3 v4 v5
  export DEDUPCTL_ADMIN_TOKEN_FILE=$run/data/admin.token
  $here/build/tools/dedupctl --admin 127.0.0.1:$admin_port trace add alice
  $here/build/tools/dedupctl --admin 127.0.0.1:$admin_port why alice v1 v3 v5
Ctrl-C stops everything.

MSG
"$here/build/src/dedupd" -c "$here/conf/dedupd.conf" \
    -o history.path="$run/data/history" \
    -o trace.path="$run/data/trace" \
    -o rpc.listen=127.0.0.1:"$rpc_port" \
    -o admin.listen=127.0.0.1:"$admin_port" \
    -o admin.token_file="$run/data/admin.token" \
    -o recent.redis=127.0.0.1:"$redis_port" \
    -o kafka.bootstrap.servers="$bootstrap" &
pids+=($!)
wait "${pids[-1]}"
