#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What a real Kafka topic does to a running cluster, against Apache Kafka
itself (one KRaft node, realkafka.py), where the devbroker cannot follow:

Two dedupd, shard 0 and shard 1 of 2 (one replica each), each consuming its
own partitions of "plays" (4 partitions), plays produced by ddproduce with
the Java client's partitioner (murmur2_random), as the cluster's producers.

1. Lag as Kafka's own tools see it: once the nodes are idle, every owned
   partition's offset that `kafka-consumer-groups --describe` shows for the
   node's own group (<group>.s<shard>.r0) is the log end, its lag 0, and
   dedupd_ingest_consumer_lag says 0 for the same partitions. Then shard
   1's node, restarted with windows written only every two minutes,
   consumes new plays without committing them: both say the same lag per
   partition, the number of those plays.
2. The log start moved past a stopped node's position: shard 0's node is
   stopped, more plays go to its partitions, `kafka-delete-records` moves
   one partition's log start past them; restarted on its store, the node
   is not ready, names the gap in /readyz and counts it
   (dedupd_ingest_log_gaps_total), instead of resuming at the log start.
3. Partitions added to the live topic (`kafka-topics --alter`): users move,
   so shard 1's node, which was ready, goes not ready naming the change,
   answers Filter UNAVAILABLE, and its log says what to do.
"""
import re
import shutil
import time

import harness
import realkafka
import test_ingest_lib as il
from test_clients_lib import python_stubs

PARTITIONS = 4
GROUP = "dd-kt"
USERS = 200




class Node:
    def __init__(self, kafka, shard, rpc_ports):
        self.shard = shard
        self.admin = harness.free_port()
        self.rpc = rpc_ports[shard]
        o = il.ingest_overrides(kafka, group=GROUP)
        o.update({
            "rpc.listen": "127.0.0.1:%d" % self.rpc,
            "admin.listen": "127.0.0.1:%d" % self.admin,
            "cluster.shards": "2",
            "cluster.shard": str(shard),
            "cluster.replica": "0",
            "cluster.nodes": ";".join("127.0.0.1:%d" % p for p in rpc_ports),
            "cluster.partitioner": "murmur2_random",
            "window.flush_ms": "200",
            "ingest.durable_interval_ms": "500",
        })
        self.dd = harness.Dedupd(o, name="dedupd-s%d" % shard)

    def ready(self):
        return harness.http_get(self.admin, "/readyz")

    def owned(self):
        return [p for p in range(PARTITIONS) if p % 2 == self.shard]


def main():
    for tool in ("kcat", "java"):
        if not shutil.which(tool):
            harness.skip("%s is not installed" % tool)
    kafka = realkafka.KafkaCluster(nodes=1, topics=("plays:%d" % PARTITIONS,))
    users = ["kt-%d" % i for i in range(USERS)]
    part = il.partitions_of(users, PARTITIONS)
    plays = [(u, "%s-v%d" % (u, k), None) for u in users for k in range(3)]
    il.produce(kafka, plays, partitioner="murmur2_random")

    rpc_ports = [harness.free_port(), harness.free_port()]
    nodes = [Node(kafka, s, rpc_ports) for s in (0, 1)]
    for n in nodes:
        n.dd.wait_log('msg="partitions assigned"', timeout=60)
        harness.wait_until("shard %d ready" % n.shard, lambda n=n: n.ready()[0] == 200, timeout=90)

    # ---- 1. lag agrees with kafka-consumer-groups ------------------------------
    end = kafka.end_offsets("plays")
    want = {p: sum(3 for u in users if part[u] == p) for p in range(PARTITIONS)}
    if end != want:
        harness.fail("log end offsets %s, produced %s" % (end, want))
    for n in nodes:
        group = "%s.s%d.r0" % (GROUP, n.shard)

        def caught_up(n=n, group=group):
            rows = kafka.describe_group(group)
            return all(rows.get(("plays", p), (None, None, None))[0] == end[p] for p in n.owned())

        harness.wait_until("%s committed to the log end" % group, caught_up, timeout=90)
        rows = kafka.describe_group(group)
        m = il.metrics(n.admin)
        for p in n.owned():
            cur, log_end, lag = rows[("plays", p)]
            mine = m.get('dedupd_ingest_consumer_lag{partition="%d"}' % p)
            if (cur, log_end, lag) != (end[p], end[p], 0) or mine != 0:
                harness.fail("partition %d of %s: kafka-consumer-groups says current %s end %s "
                             "lag %s, dedupd_ingest_consumer_lag %s" % (p, group, cur, log_end,
                                                                        lag, mine))
        foreign = [k for k in rows if k[1] % 2 != n.shard]
        if foreign:
            harness.fail("%s committed partitions it does not own: %s" % (group, foreign))
    harness.log("lag: kafka-consumer-groups and dedupd agree (0 on every owned partition)")

    # ... and while behind: shard 1's node restarted with windows that are
    # not written for two minutes consumes new plays but commits nothing.
    b = nodes[1]
    b.dd.stop()
    behind = [(u, "%s-behind-%d" % (u, k), None) for u in users if part[u] % 2 == 1
              for k in range(2)]
    il.produce(kafka, behind, partitioner="murmur2_random")
    want_lag = {p: sum(1 for x in behind if part[x[0]] == p) for p in b.owned()}
    slow = {"window.flush_ms": "120000", "ingest.durable_interval_ms": "120000"}
    saved = {k: b.dd.overrides[k] for k in slow}
    b.dd.overrides.update(slow)
    b.dd.start()
    group = "%s.s1.r0" % GROUP

    def lag_both():
        m = il.metrics(b.admin)
        rows = kafka.describe_group(group)
        return ({p: m.get('dedupd_ingest_consumer_lag{partition="%d"}' % p) for p in b.owned()},
                {p: rows.get(("plays", p), (None, None, None))[2] for p in b.owned()})

    deadline = time.time() + 60
    while lag_both()[0] != want_lag and time.time() < deadline:
        time.sleep(0.5)
    mine, theirs = lag_both()
    if theirs != want_lag or mine != want_lag:
        harness.fail("behind by %s: dedupd_ingest_consumer_lag %s, kafka-consumer-groups %s" % (
            want_lag, mine, theirs))
    harness.log("lag while behind: dedupd %s, kafka-consumer-groups %s" % (mine, theirs))
    b.dd.stop()
    b.dd.overrides.update(saved)
    b.dd.start()
    harness.wait_until("shard 1 ready again", lambda: b.ready()[0] == 200, timeout=90)

    # ---- 2. the log start moved past a stopped node's position -------------------
    a = nodes[0]
    a.dd.stop()
    more = [(u, "%s-late" % u, None) for u in users if part[u] in a.owned()]
    il.produce(kafka, more, partitioner="murmur2_random")
    end = kafka.end_offsets("plays")
    p0 = a.owned()[0]
    kafka.delete_records("plays", {p0: end[p0] - 1})
    start = kafka.end_offsets("plays", earliest=True)
    if start[p0] != end[p0] - 1:
        harness.fail("kafka-delete-records: log start %s, want %d" % (start, end[p0] - 1))
    a.dd.start()
    harness.wait_until("the gap named in /readyz",
                       lambda: "plays missing" in a.ready()[1], timeout=60)
    st, body = a.ready()
    if st != 503 or "partition %d" % p0 not in body:
        harness.fail("with a log gap on partition %d: /readyz %d %r" % (p0, st, body))
    if il.metrics(a.admin).get("dedupd_ingest_log_gaps_total", 0) < 1:
        harness.fail("the gap is not counted")
    harness.log("log start past the store: not ready, %r" % body.strip())
    a.dd.stop()

    # ---- 3. partitions added to the live topic --------------------------------------
    if b.ready()[0] != 200:
        harness.fail("shard 1 not ready before the change: %r" % (b.ready(),))
    kafka.add_partitions("plays", PARTITIONS * 2)
    changes = "dedupd_ingest_partition_count_changes_total"
    harness.wait_until("shard 1 sees the new partition count",
                       lambda: il.metrics(b.admin).get(changes, 0) >= 1, timeout=120)
    harness.wait_until("shard 1 not ready", lambda: b.ready()[0] == 503, timeout=30)
    st, body = b.ready()
    if "partition count" not in body:
        harness.fail("/readyz after partitions were added: %d %r" % (st, body))
    pb, pbg, grpc = python_stubs()
    with grpc.insecure_channel("127.0.0.1:%d" % b.rpc) as ch:
        stub = pbg.DedupStub(ch)
        u = next(x for x in users if part[x] % 2 == 1)
        try:
            stub.Filter(pb.FilterRequest(user_id=u, candidate_ids=["x"]), timeout=5)
            harness.fail("Filter answered after partitions were added")
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                harness.fail("Filter after partitions were added: %s %s" % (e.code(), e.details()))
            harness.log("Filter: UNAVAILABLE %r" % e.details())
    if not re.search(r"partition count changed", b.dd.run_log()):
        harness.fail("no log line about the partition count:\n" + b.dd.proc.tail())
    harness.log("partitions added: not ready (%r), Filter UNAVAILABLE" % body.strip())
    b.dd.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
