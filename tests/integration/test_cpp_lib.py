#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The C++ client library (clients/cpp) against a real 2 x 2 cluster
(fleet.py: four dedupd, one redis-server per shard, the devbroker), one
fleet for every case, in this order:

  1. routing: dedupd_lib_check route (exact kept sets through the library,
     compact candidates equal to ids on the same requests, callback and
     future forms) leaves dedupd_cluster_forwarded_total at 0 on every node;
  1b. replica choice: one call at a time (no hedging) stays on one replica
     of each shard (the one that answered last: a node polls for a while
     after a call, so the next call there needs no wake-up), and 4 calls
     at a time reach every replica (the fewest calls outstanding);
  2. hedging: dedupd-load while one replica of each shard is paused 50 ms
     every 500 ms (SIGSTOP/SIGCONT): no call fails, some are hedged and
     the hedge answers some, at most 10 % of calls (+ the budget's burst);
  3. failover: dedupd-load while a node is killed (SIGKILL): no call fails,
     nothing was forwarded;
  4. map refresh: dedupd_lib_check refresh reads the map, the fleet comes
     back with another map (another partitioner, fresh stores), and the
     client's next calls earn FAILED_PRECONDITION, read the new map and
     succeed;
  5. a node's CANCELLED: dedupd_lib_check cancelled against two fake
     replicas of one shard (Python grpcio, no fleet); the one the map says
     is ready answers every call CANCELLED, as a dedupd does to the calls
     that reach it once its shutdown (SIGTERM) began: every call succeeds,
     failed over to the other (skipped without python3-grpcio).

Map refresh through a resharding step is test_clients_reshard.py's (meson
test cpp_lib_reshard).

usage: test_cpp_lib.py DEDUPD_LIB_CHECK DEDUPD_LOAD
"""
import importlib.util
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import fleet  # noqa: E402


def fields(line):
    return {k: v for k, v in re.findall(r"(\w+)=(\S+)", line)}


def load(argv, timeout=60):
    """Run dedupd-load; its phase lines as dicts (filter phases only)."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    harness.log("dedupd-load:\n" + p.stdout + p.stderr[-2000:])
    if p.returncode != 0:
        harness.fail("dedupd-load exited %d" % p.returncode)
    return [fields(x) for x in p.stdout.splitlines() if x.startswith("phase=filter")]


def main():
    if len(sys.argv) != 3:
        harness.fail(__doc__)
    check, dload = sys.argv[1:]
    for f in (check, dload):
        if not os.path.exists(f):
            harness.skip("%s not built (grpc++ or a C++ compiler missing)" % f)
    t_start = time.time()
    f = fleet.Fleet()
    seeds = f.seeds

    # 1. Routing, compact candidates = ids.
    t0 = time.time()
    r = subprocess.run([check, "route", seeds], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    harness.log("lib_check route:\n" + r.stdout + r.stderr[-3000:])
    if r.returncode != 0:
        harness.fail("dedupd_lib_check route exited %d" % r.returncode)
    per_node = [f.metric(i, "dedupd_cluster_forwarded_total{") for i in range(4)]
    if any(per_node):
        harness.fail("calls through the library were forwarded: %s" % per_node)
    harness.log("PASS routing (forwarded %s) in %.1fs" % (per_node, time.time() - t0))

    # 1b. Replica choice: sticky at one call in flight, spread under load.
    t0 = time.time()
    one = load([dload, "--seeds", seeds, "--users", "50", "--seconds", "1", "--candidates", "200",
                "--no-hedge"])[0]
    if int(one["failed"]) or int(one["replicas"]) != f.shards:
        harness.fail("one call in flight: %s nodes answered, not one per shard (%d): %s"
                     % (one["replicas"], f.shards, one))
    four = load([dload, "--seeds", seeds, "--users", "50", "--seconds", "1", "--candidates",
                 "200", "--no-hedge", "--no-setup", "--inflight", "4"])[0]
    if int(four["failed"]) or int(four["replicas"]) != len(f.nodes):
        harness.fail("4 calls in flight: %s nodes answered, not all %d: %s"
                     % (four["replicas"], len(f.nodes), four))
    harness.log("PASS replica choice (p50 %s ms at 1 in flight) in %.1fs"
                % (one["p50_ms"], time.time() - t0))

    # 2. Hedging under a replica of each shard paused 50 ms every 500 ms.
    t0 = time.time()
    paused = [f.node_index(s, 1) for s in range(f.shards)]
    stop = threading.Event()

    def pauser():
        while not stop.is_set():
            for i in paused:
                f.stop(i)
            time.sleep(0.05)
            for i in paused:
                f.cont(i)
            stop.wait(0.45)

    th = threading.Thread(target=pauser)
    th.start()
    try:
        phases = load([dload, "--seeds", seeds, "--users", "50", "--seconds", "3",
                       "--candidates", "200", "--inflight", "2", "--rate", "300"])
    finally:
        stop.set()
        th.join()
        for i in paused:
            f.cont(i)
    ph = phases[0]
    calls, hedged = int(ph["calls"]), int(ph["hedged"])
    if int(ph["failed"]) != 0 or calls < 100:
        harness.fail("hedging run: %s" % ph)
    if hedged == 0 or int(ph["hedge_wins"]) == 0:
        harness.fail("no call hedged (or no hedge answered) with replicas paused: %s" % ph)
    if hedged > 0.10 * calls + 10:
        harness.fail("%d of %d calls hedged: over the 10 %% budget" % (hedged, calls))
    harness.log("PASS hedging: %d of %d calls hedged, p99 %s ms, in %.1fs"
                % (hedged, calls, ph["p99_ms"], time.time() - t0))

    # 3. Failover: a node killed under load.
    t0 = time.time()
    fw0 = f.forwarded_total()
    p = subprocess.Popen([dload, "--seeds", seeds, "--users", "50", "--seconds", "3", "--phases",
                          "3", "--candidates", "200", "--inflight", "2", "--rate", "300",
                          "--no-setup"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, stdin=subprocess.DEVNULL)
    time.sleep(1.2)
    victim = f.node_index(0, 0)
    f.kill9(victim)
    out, err = p.communicate(timeout=60)
    harness.log("dedupd-load (node %d killed at 1.2 s):\n%s%s" % (victim, out, err[-2000:]))
    phases = [fields(x) for x in out.splitlines() if x.startswith("phase=filter")]
    if p.returncode != 0 or len(phases) != 3 or any(int(x["failed"]) for x in phases):
        harness.fail("calls failed with a node killed (exit %d)" % p.returncode)
    if f.alive(victim):
        harness.fail("node %d survived its SIGKILL" % victim)
    # Calls in flight on the killed node fail over (failovers); later ones
    # may already avoid it (a hedge answered, or the replica marked down):
    # what must hold is that none failed.
    harness.log("failovers %d, hedge answers %d" % (sum(int(x["failovers"]) for x in phases),
                                                   sum(int(x["hedge_wins"]) for x in phases)))
    if f.forwarded_total() != fw0:
        harness.fail("calls were forwarded during the failover")
    harness.log("PASS failover in %.1fs" % (time.time() - t0))

    # 4. Map refresh: the fleet comes back under another map.
    t0 = time.time()
    p = subprocess.Popen([check, "refresh", seeds], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    if not first.startswith("hash="):
        p.kill()
        harness.fail("lib_check refresh: %r %s" % (first, p.stderr.read()[-2000:]))
    old_hash = first.split("=", 1)[1].strip()
    for i in range(len(f.nodes)):
        if f.alive(i):
            f.kill9(i)
    # Another partitioner is another map (and another ownership: the
    # stores are fresh, as a store refuses a map it was not made for).
    f.partitioner = "fnv1a"
    for dd in f.nodes:
        d = harness.tmpdir("dedupd-data-")
        dd.overrides["history.path"] = os.path.join(d, "db")
        dd.overrides["trace.path"] = os.path.join(d, "trace")
        dd.overrides["cluster.partitioner"] = "fnv1a"
        dd.overrides["kafka.group.id"] = "dd-fleet-2"
    f.start_all()
    out, err = p.communicate("go\n", timeout=60)
    harness.log("lib_check refresh:\n" + first + out + err[-3000:])
    if p.returncode != 0:
        harness.fail("dedupd_lib_check refresh exited %d" % p.returncode)
    m = fields(out)
    if int(m.get("stale_map", "0")) == 0 or m.get("hash") in (None, old_hash):
        harness.fail("no FAILED_PRECONDITION then a new map: %s" % out)
    harness.log("PASS map refresh in %.1fs" % (time.time() - t0))

    # 5. A node's CANCELLED is failed over.
    t0 = time.time()
    cancelled(check)
    harness.log("PASS a node's CANCELLED failed over in %.1fs" % (time.time() - t0))
    harness.log("PASS: cpp_lib in %.1fs" % (time.time() - t_start))


def cancelled(check):
    """Case 5: two fake replicas of one shard; the first cancels every call."""
    missing = [m for m in ("grpc", "grpc_tools") if importlib.util.find_spec(m) is None]
    if missing:
        harness.log("case 5 skipped: python3-grpcio / python3-grpc-tools missing: %s" % missing)
        return
    from concurrent import futures
    from test_clients_lib import python_stubs
    pb, _, grpc = python_stubs()
    ports = [harness.free_port() for _ in range(2)]
    addrs = ["127.0.0.1:%d" % p for p in ports]
    # The one that cancels is the one the map says is ready: calls go there first.
    reps = [pb.ReplicaInfo(replica=r, address=a, ready=r == 0, lag_ms=0)
            for r, a in enumerate(addrs)]
    the_map = pb.ClusterMapResponse(map_hash="00000000000000cc", partitioner="murmur2_random",
                                    partition_count=8, max_lag_ms=3000,
                                    shards=[pb.ShardInfo(shard=0, replicas=reps)])
    calls = [0, 0]
    servers = []
    for k, port in enumerate(ports):
        def filt(req, ctx, k=k):
            calls[k] += 1
            if k == 0:
                ctx.abort(grpc.StatusCode.CANCELLED, "shutting down")
            return pb.FilterResponse(kept_indexes=range(len(req.candidate_hashes)))
        handlers = {
            "ClusterMap": grpc.unary_unary_rpc_method_handler(
                lambda req, ctx: the_map, request_deserializer=pb.ClusterMapRequest.FromString,
                response_serializer=pb.ClusterMapResponse.SerializeToString),
            "Filter": grpc.unary_unary_rpc_method_handler(
                filt, request_deserializer=pb.FilterRequest.FromString,
                response_serializer=pb.FilterResponse.SerializeToString),
        }
        srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("dedup.v1.Dedup",
                                                                           handlers),))
        srv.add_insecure_port("127.0.0.1:%d" % port)
        srv.start()
        servers.append(srv)
    try:
        r = subprocess.run([check, "cancelled", ",".join(addrs)], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
    finally:
        for srv in servers:
            srv.stop(0)
    harness.log("lib_check cancelled (calls per fake node %s):\n%s%s"
                % (calls, r.stdout, r.stderr[-3000:]))
    if r.returncode != 0:
        harness.fail("calls a node cancelled were not failed over (exit %d)" % r.returncode)
    if calls[0] == 0:
        harness.fail("no call reached the node that cancels: nothing was tested")


if __name__ == "__main__":
    main()
