#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A client library's map refresh through a real resharding step (issue
28): a fleet of 1 shard x 2 replicas (fleet.py: the devbroker, plays:8,
one redis-server) split into 2 shards in place while the library's
clients call (deploy/k8s/README.md, "Resharding"; fleet.Fleet.split_*):

    test_clients_reshard.py cpp DEDUPD_LIB_CHECK   (meson test cpp_lib_reshard)
    test_clients_reshard.py java                    (meson test clients_java_reshard)

cpp drives clients/cpp through `dedupd_lib_check reshard`, java drives
clients/java (io.dedupd.client.DedupdClient, built as test_clients_java.py
does) through tests/clients/java/ClientCheck.java; both speak the same
commands (prepare, start, stop, settle, check) and hold two clients:
client 0 reads the map only when an answer makes it (a stale map, a
failover), client 1 also every 500 ms, so that it holds the new map while
an old node still runs the old one (which refuses the new hash):

1. before: both clients read the 1-shard map; 16 users' plays
   (RecordPlays) and deliveries are written through the library and every
   node has the plays; their Filter answers are exact (played, delivered
   and repeated candidates removed);
2. the split, while both clients filter those users in turn: the new
   shard's two nodes start with the 2-shard map (cluster.split_from = 1,
   cluster.bootstrap = peer: each copies the old shard's store), then the
   old nodes restart one at a time with the 2-shard map, 2.5 s between
   them. No call fails, every answer is exact (the plays from before the
   split are found through whichever node answers);
3. after: every node has swept the users it no longer owns; client 0's
   calls have earned FAILED_PRECONDITION (its map was stale) or a
   failover (a restarting node), which made it read the map, and both
   clients route by the new map: 2 shards, the nodes' hash, not the old
   one, the users on both shards;
4. then 3 rounds of every user's Filter through each client are exact and
   answered by the user's new shard: each shard's nodes answer exactly the
   calls of its users (dedupd_rpc_requests_total), neither
   dedupd_cluster_forwarded_total nor dedupd_rpc_stale_map_total grows,
   and the clients saw no stale map and failed nothing over.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet  # noqa: E402
import harness  # noqa: E402
import test_clients_java as tcj  # noqa: E402

USERS = 16
PLAYS = 30    # each user's, written through the library
ROUNDS = 3
MIXED = 2.5   # seconds with one old node restarted and the other not yet


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def filter_ok(f):
    """Filter calls answered OK, per node."""
    return [f.metric(i, "dedupd_rpc_requests_total{", ('method="Filter"', 'code="OK"'))
            for i in range(len(f.nodes))]


def stale_total(f):
    return sum(f.metric(i, "dedupd_rpc_stale_map_total") for i in range(len(f.nodes)))


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("cpp", "java"):
        harness.fail("usage: test_clients_reshard.py cpp DEDUPD_LIB_CHECK | java")
    kind = sys.argv[1]
    if kind == "cpp":
        if len(sys.argv) != 3 or not os.path.exists(sys.argv[2]):
            harness.skip("dedupd_lib_check not built (grpc++ or a C++ compiler missing)")
        argv = [sys.argv[2], "reshard"]
    else:
        argv = tcj.build()
    t_start = time.time()
    # Exact kept sets need Redis' answers: a reply held up by a busy
    # machine past the fleet's 500 ms would make a call degraded.
    f = fleet.Fleet(shards=1, replicas=2, extra={"recent.timeout_ms": "2000"})
    c = tcj.Check(argv, f.addrs, name="ClientCheck" if kind == "java" else "lib_check")
    try:
        run(c, f, kind)
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
    harness.log("PASS: %s client through a split, %.1f s in all" % (kind, time.time() - t_start))


def pair(r, key):
    """A value the driver gives for both clients: (client 0's, client 1's)."""
    v = r[key].split(",")
    check(len(v) == 2, "%s=%s is not two values" % (key, r[key]))
    return v


def run(c, f, kind):
    t0 = time.time()
    prefix = "split-%s-%d" % (kind, os.getpid())
    users = ["%s-%d" % (prefix, k) for k in range(USERS)]
    r = c.call("prepare %s %d" % (prefix, USERS))
    old_hash = pair(r, "hash")[0]
    check(pair(r, "shards") == ["1", "1"] and pair(r, "hash") == [old_hash] * 2,
          "the clients' maps before the split: %s" % r)
    # Every node has every play before the split (the new shard copies one
    # of them), whichever replica the clients' calls went to: each has
    # consumed them (one message a play), and written them within its
    # window (window.flush_ms, 100 ms).
    harness.wait_until("every node consuming the %d plays" % (USERS * PLAYS),
                       lambda: all(f.metric(i, "dedupd_ingest_messages_total{", ('"ok"',))
                                   >= USERS * PLAYS for i in range(len(f.nodes))), timeout=60)
    time.sleep(0.5)
    harness.log("before: %d users' plays found through map %s (%.1f s)"
                % (USERS, old_hash, time.time() - t0))

    t0 = time.time()
    c.call("start")
    time.sleep(0.5)
    f.split_start()
    time.sleep(0.5)
    for i in range(f.split_from * f.replicas):
        f.split_restart(i)
        # Old and new maps side by side: client 1's periodic reads give it
        # the new map from the restarted node while the other old node,
        # which refuses the new hash, still runs the old one.
        time.sleep(MIXED if i == 0 else 0.5)
    r = c.call("stop")
    harness.log("during the split (%.1f s): %s" % (time.time() - t0, r))
    check(int(r["calls"]) > 100, "too few calls during the split: %s" % r)
    check(r["failed"] == "0", "calls failed during the split: %s" % r)
    check(r["inexact"] == "0", "inexact answers during the split: %s" % r)

    t0 = time.time()
    f.wait_swept()
    node_hash = json.loads(harness.http_get(f.admin_ports[0], "/cluster")[1])["map_hash"]
    check(node_hash != old_hash, "the nodes' map hash did not change (%s)" % node_hash)
    r = c.call("settle")
    check(pair(r, "shards") == ["2", "2"], "the clients' maps after the split: %s" % r)
    check(pair(r, "hash") == [node_hash] * 2, "the clients' maps are %s, not the new one %s "
          "(the old one was %s)" % (r["hash"], node_hash, old_hash))
    # Client 0 reads the map only when an answer makes it: a stale-map
    # refusal, or a failover (an old node restarting under its call can
    # hand it the new map before any refusal does). Either way it must
    # have read the map again since "before".
    check(int(pair(r, "stale_map")[0]) + int(pair(r, "failovers")[0]) > 0,
          "neither a FAILED_PRECONDITION answer nor a failover made client 0 read the new "
          "map: %s" % r)
    per = [int(x) for x in r["users_per_shard"].split(",")]
    check(len(per) == 2 and all(per), "the users are not on both shards: %s" % r)
    harness.log("after: swept; both clients route by map %s (%.1f s): %s"
                % (node_hash, time.time() - t0, r))

    t0 = time.time()
    fw0, stale0, ok0 = f.forwarded_total(), stale_total(f), filter_ok(f)
    r = c.call("check %d" % ROUNDS)
    fw1, stale1, ok1 = f.forwarded_total(), stale_total(f), filter_ok(f)
    owners = f.owners(users)
    for s in range(f.shards):
        want = 2 * ROUNDS * sum(1 for u in users if owners[u] == s)
        got = sum(ok1[i] - ok0[i] for i in range(len(f.nodes)) if f.shard_of(i) == s)
        check(got == want, "shard %d's nodes answered %d Filter calls, its users made %d "
              "(per node before %s, after %s)" % (s, got, want, ok0, ok1))
    check(fw1 == fw0, "calls were forwarded after the refresh: %d -> %d" % (fw0, fw1))
    check(stale1 == stale0, "calls were refused for a stale map after the refresh: %d -> %d"
          % (stale0, stale1))
    harness.log("PASS map refresh after a split: %s calls, each answered by its user's shard, "
                "none forwarded (%.1f s)" % (r["calls"], time.time() - t0))
    c.quit()


if __name__ == "__main__":
    main()
