# SPDX-License-Identifier: Apache-2.0
"""Resharding 1 shard -> 2 while a client sends Filter and plays flow
(deploy/k8s/README.md, "Resharding"), on loopback: Apache Kafka
(realkafka.py) with a plays topic of 4 partitions, one redis-server (the
new shard keeps its parent's Redis), plays produced by ddproduce
(murmur2_random).

Before: A0 and A1, the two replicas of the only shard (cluster.shards = 1).
1. B, the new shard 1 of the 2-shard map (cluster.split_from = 1,
   cluster.bootstrap = peer), copies its parent shard's store from A0 or
   A1 (shard 0 of the old map), consumes only partitions 1 and 3 from the
   offsets inside the copy, and is ready; it and the old nodes accept each
   other as peers (resharding), and B forwards shard 0's users to them.
2. A0, then A1, restart with the 2-shard map (shard 0), one at a time,
   SIGTERM with admin.drain_ms; each then forwards shard 1's users to B.
   While A0 runs the new map and A1 the old one, a call forwarded by an
   old-map node for a user of the new shard is forwarded once more (the
   test sends one with the old node's metadata) and one forwarded twice is
   refused.
3. Every node runs the new map: each settles and sweeps its store of the
   users it no longer owns (their segments counted as dropped).
Throughout, a client thread sends Filter to a ready node chosen at random
(as a Service would: /readyz polled) for users with plays produced before
the change: no call fails, no played item is kept. At the end every play
produced before and during the change is found through every node.
"""
import json
import random
import subprocess
import threading
import time

import harness
import test_ingest_lib as il
from test_clients_lib import python_stubs
from test_snapshot import all_found, produce, start_nowait

pb, pbg, grpc = python_stubs()

USERS = 2000
FIRST = 40_000       # plays before the change, checked throughout
MORE = 45_000        # plays produced while it happens
RATE = 1500          # plays/s of MORE: about 30 s of flow


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def metric(port, name):
    for line in harness.http_get(port, "/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


class Client:
    """Filter calls to a random ready node, for users of FIRST: each
    candidate list holds a few played items and one never played."""

    def __init__(self, ports, admins, by_user):
        self.ports, self.admins, self.by_user = ports, admins, by_user
        self.users = sorted(by_user)
        self.ready = set()
        self.calls, self.failures, self.false_neg, self.by_node = 0, [], 0, {}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.poll, daemon=True),
                        threading.Thread(target=self.run, daemon=True)]
        for t in self.threads:
            t.start()

    def poll(self):
        while not self.stop.is_set():
            ready = set()
            for i, a in enumerate(self.admins):
                try:
                    if harness.http_get(a, "/readyz", timeout=1)[0] == 200:
                        ready.add(i)
                except OSError:
                    pass
            self.ready = ready
            time.sleep(0.1)

    def run(self):
        chans = [grpc.insecure_channel("127.0.0.1:%d" % p) for p in self.ports]
        stubs = [pbg.DedupStub(c) for c in chans]
        rnd = random.Random(7)
        while not self.stop.is_set():
            ready = sorted(self.ready)
            if not ready:
                time.sleep(0.05)
                continue
            i = rnd.choice(ready)
            u = rnd.choice(self.users)
            played = rnd.sample(self.by_user[u], min(5, len(self.by_user[u])))
            try:
                r = stubs[i].Filter(pb.FilterRequest(user_id=u,
                                                     candidate_ids=played + ["never-" + u]),
                                    timeout=10)
                kept = set(r.kept_ids)
                if "never-" + u not in kept or kept - {"never-" + u}:
                    self.false_neg += len(kept - {"never-" + u})
                    if len(self.failures) < 10 and "never-" + u not in kept:
                        self.failures.append("node %d: %s's unplayed item removed" % (i, u))
            except grpc.RpcError as e:
                self.failures.append("node %d user %s: %s %s" % (i, u, e.code(), e.details()))
            self.calls += 1
            self.by_node[i] = self.by_node.get(i, 0) + 1
        for c in chans:
            c.close()

    def mark(self, what):
        harness.log("%s: %d calls so far (by node %s), %d failed, %d plays missed" % (
            what, self.calls, self.by_node, len(self.failures), self.false_neg))
        check(not self.failures, "calls failed: %s" % self.failures[:5])
        check(self.false_neg == 0, "%d played items kept" % self.false_neg)

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def main():
    broker = il.plays_broker(("plays:4",))
    redis = harness.Redis()
    ports = [harness.free_port() for _ in range(3)]     # A0, A1, B
    admins = [harness.free_port() for _ in range(3)]
    a_nodes = "127.0.0.1:%d,127.0.0.1:%d" % (ports[0], ports[1])
    new_nodes = a_nodes + ";127.0.0.1:%d" % ports[2]

    def overrides(i):
        o = il.ingest_overrides(broker, group="dd-reshard")
        o.update({
            "rpc.listen": "127.0.0.1:%d" % ports[i],
            "admin.listen": "127.0.0.1:%d" % admins[i],
            "cluster.health_interval_ms": "200", "cluster.max_lag_ms": "3000",
            "window.flush_ms": "100", "ingest.durable_interval_ms": "1000",
            "admin.drain_ms": "1000",
        })
        return o

    def old_map(o, replica):
        o.update({"cluster.shards": "1", "cluster.shard": "0", "cluster.replica": str(replica),
                  "cluster.nodes": a_nodes, "cluster.redis": redis.addr})

    def new_map(o, shard, replica):
        o.update({"cluster.shards": "2", "cluster.split_from": "1",
                  "cluster.shard": str(shard), "cluster.replica": str(replica),
                  "cluster.nodes": new_nodes,
                  "cluster.redis": "%s;%s" % (redis.addr, redis.addr)})

    oa0, oa1, ob = overrides(0), overrides(1), overrides(2)
    old_map(oa0, 0)
    old_map(oa1, 1)
    a0 = harness.Dedupd(oa0, name="a0")
    a1 = harness.Dedupd(oa1, name="a1")

    users = ["user-%05d" % i for i in range(USERS)]
    first = [(users[i % USERS], "v%d" % i, None, None) for i in range(FIRST)]
    more = [(users[i % USERS], "w%d" % i, None, None) for i in range(MORE)]
    p = produce(broker, first)
    check(p.wait(timeout=300) == 0, "ddproduce failed: %s" % p.stderr.read())
    il.wait_flushed(a0, FIRST, timeout=180)
    il.wait_flushed(a1, FIRST, timeout=180)
    r = subprocess.run([harness.build_path("tests", "tools", "ddpartition"), "murmur2_random",
                        "4"], input="".join(u + "\n" for u in users), capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 0, "ddpartition: %s" % r.stderr)
    parts = {k: int(v) for k, v in (line.split("\t") for line in r.stdout.splitlines())}
    by_user = {}
    for u, i, _, _ in first:
        by_user.setdefault(u, []).append(i)

    client = Client(ports, admins, by_user)
    harness.wait_until("the client calling", lambda: client.calls > 50, timeout=60)
    client.mark("before")
    flowing = produce(broker, more, rate=RATE)

    # ---- 1. the new shard copies its parent's store ----------------------
    new_map(ob, 1, 0)
    ob["cluster.bootstrap"] = "peer"
    b = harness.Dedupd(ob, name="b", start=False)
    start_nowait(b)
    b.wait_log('msg="snapshot installed"', timeout=120)
    b.wait_log("msg=ready", timeout=60)
    harness.wait_until("B ready", lambda: harness.http_get(admins[2], "/readyz")[0] == 200,
                       timeout=120)
    log = b.run_log()
    check("resharding: peer runs the map this one splits" in log,
          "B does not see the old nodes as the map it splits:\n" + b.proc.tail())
    check('msg="partitions assigned"' in log and "from_store=2" in log,
          "B did not take its 2 partitions from the copy's offsets:\n" + b.proc.tail())
    st = harness.http_get(admins[2], "/readyz")[1]
    check("resharding" in st, "B's /readyz does not say resharding: %s" % st)
    harness.wait_until("B called", lambda: client.by_node.get(2, 0) > 50, timeout=60)
    client.mark("B (shard 1 of 2) serving beside the old nodes")

    # ---- 2. the old nodes restart with the new map, one at a time ---------
    a0.stop()
    new_map(a0.overrides, 0, 0)
    a0.start()
    harness.wait_until("A0 ready", lambda: harness.http_get(admins[0], "/readyz")[0] == 200,
                       timeout=120)
    check("resharding: peer runs the map this one splits" in a0.run_log(),
          "A0 does not run the new map:\n" + a0.proc.tail())
    harness.wait_until("A0 called", lambda: client.by_node.get(0, 0) > 50, timeout=60)
    client.mark("A0 on the new map, A1 on the old one")

    # A call forwarded by an old-map node (A1) for a user of shard 1 that
    # reaches A0 (shard 0 of the new map) goes on to B; forwarded twice, it
    # is refused.
    old_hash = json.loads(harness.http_get(admins[1], "/cluster")[1])["map_hash"]
    # a user of shard 1 (partition mod 2 = 1), as dedupd computes it
    shard1_user = next(u for u in users if parts[u] % 2 == 1)
    md_old = (("dedupd-forwarded-by", "0.1"), ("dedupd-cluster-map", old_hash))
    items = by_user[shard1_user][:5]
    with grpc.insecure_channel("127.0.0.1:%d" % ports[0]) as ch:
        stub = pbg.DedupStub(ch)
        r = stub.Filter(pb.FilterRequest(user_id=shard1_user, candidate_ids=items + ["never"]),
                        timeout=10, metadata=md_old)
        check(list(r.kept_ids) == ["never"], "second hop answered %s" % list(r.kept_ids))
        try:
            stub.Filter(pb.FilterRequest(user_id=shard1_user, candidate_ids=items),
                        timeout=10, metadata=md_old + (("dedupd-forwarded-twice", "1"),))
            harness.fail("a call forwarded twice was forwarded again")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, "forwarded twice: %s" % e)
    harness.log("a call from an old-map node for shard 1's user %s was forwarded on to B; "
                "a third hop is refused" % shard1_user)

    a1.stop()
    new_map(a1.overrides, 0, 1)
    a1.start()
    harness.wait_until("A1 ready", lambda: harness.http_get(admins[1], "/readyz")[0] == 200,
                       timeout=120)
    harness.wait_until("A1 called", lambda: client.by_node.get(1, 0) > 50, timeout=60)
    client.mark("every node on the new map")

    # ---- 3. settled: every node sweeps the other shard's users -------------
    for dd, adm in ((a0, admins[0]), (a1, admins[1]), (b, admins[2])):
        dd.wait_log("store holds only this shard's users now", timeout=180)
        dropped = metric(adm, "dedupd_history_segments_foreign_total") or 0
        harness.log("%s swept: %d segments of the other shard's users dropped" % (dd.name, dropped))
        check(dropped > 0, "%s dropped no other shard's users" % dd.name)

    check(flowing.wait(timeout=300) == 0, "ddproduce failed: %s" % flowing.stderr.read())
    for dd in (a0, a1, b):
        il.wait_idle(dd, quiet=2)
    client.end()
    client.mark("after")
    check(client.calls > 300, "too few calls: %d" % client.calls)
    every = first + more
    for i, name in enumerate(("A0", "A1", "B")):
        all_found(ports[i], every, "through %s after the change" % name)
    # a restart keeps the record: no second sweep
    b.stop()
    b.start()
    check("the store may hold other shards' users" not in b.run_log(),
          "B sweeps again after a restart")
    for dd in (a0, a1, b):
        dd.stop()


if __name__ == "__main__":
    main()
