# SPDX-License-Identifier: Apache-2.0
"""A replica rebuilt from a live peer (src/snapshot.h), on loopback: one
shard, two replicas (A and B), Apache Kafka (realkafka.py) with a plays
topic of 4 partitions, one redis-server, plays produced by ddproduce (the
Java client's partitioner, murmur2_random, as the cluster's producers) while
everything below happens.
0. While B is stopped, more plays arrive and the topic's beginning moves
   past them all (kafka-delete-records, as retention would), so replaying the topic from its beginning could no
   longer rebuild a replica: only a copy can.
   B is stopped meanwhile; restarted on its store, it finds the log
   starting after its stored positions and reports not ready (plays
   missing) rather than skip them.
1. B is killed and its data directory deleted while plays flow; it starts
   again with cluster.bootstrap = peer and copies A's store, throttled by
   A's cluster.snapshot_mbps so the copy lasts a few seconds.
2. B is killed with SIGKILL in the middle of the copy; started again, it
   resumes the copy (the same checkpoint, the files where they stopped);
   stopped with SIGTERM while copying, it exits 0 at once; started again,
   it resumes again and installs the copy. A counts what it sent.
3. B resumes ingest from the log positions inside the copy (from_store=4),
   catches up and becomes ready; then Filter on both A and B finds every
   produced play (0 lost) and keeps unplayed items.
"""
import os
import re
import shutil
import subprocess
import time

import harness
import realkafka
import test_ingest_lib as il
from test_clients_lib import python_stubs

pb, pbg, grpc = python_stubs()

USERS = 3000
FIRST = 300_000      # plays before B's store is lost: a store of a MB or two
MORE = 60_000        # plays produced while B copies and catches up
GAP = 6_000          # plays while B is down, then deleted from the log


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def start_nowait(dd):
    """Start DD without waiting for "msg=ready" (it copies a store first)."""
    dd._log_from = os.path.getsize(dd.logpath) if os.path.exists(dd.logpath) else 0
    dd.proc = harness.Proc([harness.build_path("src", "dedupd")] + dd.option_args(), dd.name,
                           logfile=dd.logpath, env=dd.env)


def produce(broker, plays, rate=0):
    path = os.path.join(harness.tmpdir("dedupd-plays-"), "plays.tsv")
    il.write_lines(path, plays)
    argv = [harness.build_path("tests", "tools", "ddproduce"), "-b", broker.addr, "-t", "plays",
            "-F", "json", "-X", "partitioner=murmur2_random"]
    if rate:
        argv += ["-r", str(rate)]
    return subprocess.Popen(argv + [path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def all_found(port, plays, what):
    """Filter through PORT for each user: every played item removed, an
    unplayed one kept."""
    by_user = {}
    for u, i, _, _ in plays:
        by_user.setdefault(u, []).append(i)
    with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
        stub = pbg.DedupStub(ch)
        lost = 0
        for u, items in by_user.items():
            r = stub.Filter(pb.FilterRequest(user_id=u, candidate_ids=items + ["never-" + u]),
                            timeout=10)
            kept = list(r.kept_ids)
            lost += len(kept) - 1
            check("never-" + u in kept, "%s: %s's unplayed item removed" % (what, u))
    check(lost == 0, "%s: %d of %d plays not found" % (what, lost, len(plays)))
    harness.log("%s: all %d plays of %d users found" % (what, len(plays), len(by_user)))


def main():
    broker = realkafka.KafkaCluster(topics=("plays:4",))
    redis = harness.Redis()
    ports = [harness.free_port(), harness.free_port()]
    admins = [harness.free_port(), harness.free_port()]
    nodes = ",".join("127.0.0.1:%d" % p for p in ports)

    def node(replica, extra=None):
        o = il.ingest_overrides(broker, group="dd-snap")
        o.update({
            "rpc.listen": "127.0.0.1:%d" % ports[replica],
            "admin.listen": "127.0.0.1:%d" % admins[replica],
            "cluster.shards": "1", "cluster.shard": "0", "cluster.replica": str(replica),
            "cluster.nodes": nodes, "cluster.redis": redis.addr,
            "cluster.health_interval_ms": "200", "cluster.max_lag_ms": "3000",
            "window.flush_ms": "100", "ingest.durable_interval_ms": "1000",
            # 1 Mbit/s: a store of a MB or two takes seconds to copy
            "cluster.snapshot_mbps": "1",
        })
        o.update(extra or {})
        return harness.Dedupd(o, name="dd-%d" % replica)

    a, b = node(0), node(1)
    users = ["user-%05d" % i for i in range(USERS)]
    first = [(users[i % USERS], "v%d" % i, None, None) for i in range(FIRST)]
    more = [(users[i % USERS], "w%d" % i, None, None) for i in range(MORE)]
    gap = [(users[i % USERS], "g%d" % i, None, None) for i in range(GAP)]
    p = produce(broker, first)
    check(p.wait(timeout=300) == 0, "ddproduce failed: %s" % p.stderr.read())
    # both hold every first play before the log drops them
    il.wait_flushed(a, FIRST, timeout=180)
    il.wait_flushed(b, FIRST, timeout=180)

    # ---- 0. the log's beginning moves past the first plays ---------------
    # B is down meanwhile while GAP plays arrive (A takes them), so its
    # store's position falls behind the log's new start.
    b.stop()
    p = produce(broker, gap)
    check(p.wait(timeout=300) == 0, "ddproduce failed: %s" % p.stderr.read())
    il.wait_flushed(a, FIRST + GAP, timeout=180)
    ends = broker.end_offsets("plays")
    check(len(ends) == 4 and all(o > 0 for o in ends.values()), "end offsets: %s" % ends)
    broker.delete_records("plays", ends)
    starts = broker.end_offsets("plays", earliest=True)
    harness.log("the topic now starts at offsets %s: the first plays are gone from it" % starts)
    check(starts == ends, "the log still holds first plays: starts %s, ends %s" % (starts, ends))

    # B restarts on its store: the plays between its position and the
    # log's start are gone, and it says so instead of skipping them
    b.start()
    b.wait_log("the log starts after the store's position", timeout=60)
    time.sleep(1)
    st, body = harness.http_get(admins[1], "/readyz")
    check(st == 503 and "plays missing" in body, "B with a gap: /readyz %d %s" % (st, body))
    gaps = [l for l in harness.http_get(admins[1], "/metrics")[1].splitlines()
            if l.startswith("dedupd_ingest_log_gaps_total ")]
    check(gaps and float(gaps[0].split()[1]) >= 1, "no log gap counted: %s" % gaps)
    harness.log("B restarted behind the log's start: not ready (%s)" % body.strip())

    # ---- 1. B's store lost while plays flow; copied from A ---------------
    flowing = produce(broker, more, rate=6000)
    b.kill9()
    shutil.rmtree(b.overrides["history.path"])
    b.overrides["cluster.bootstrap"] = "peer"
    start_nowait(b)
    b.wait_log('msg="fetching a snapshot"', timeout=120)
    a.wait_log('msg="checkpoint ready to lend"', timeout=5)
    m = re.search(r'msg="fetching a snapshot".* bytes=(\d+)', b.run_log())
    harness.log("B copies A's store: %s bytes" % m.group(1))
    # 1 Mbit/s is 125 kB/s: the kill comes 1.5 s into the copy and SIGTERM
    # 0.5 s into its resumption, so the copy must last over 4 s.
    check(int(m.group(1)) > 500_000, "the store is too small to copy for seconds")

    # ---- 2. killed mid-copy, resumed -------------------------------------
    time.sleep(1.5)
    check("snapshot installed" not in b.run_log(), "the copy ended before the kill")
    b.kill9()
    inc = b.overrides["history.path"] + ".incoming"
    part = sum(os.path.getsize(os.path.join(inc, f)) for f in os.listdir(inc))
    harness.log("B killed mid-copy with %d bytes copied" % part)
    check(part > 0, "nothing copied before the kill")
    start_nowait(b)
    b.wait_log('msg="resuming a snapshot"', timeout=60)
    time.sleep(0.5)
    check("snapshot installed" not in b.run_log(), "the copy ended before SIGTERM")
    t0 = time.time()
    b.stop(timeout=10)
    check("asked to stop while copying a store" in b.run_log(), "no stop message:\n" +
          b.proc.tail())
    harness.log("SIGTERM mid-copy: exit 0 after %.1f s" % (time.time() - t0))
    start_nowait(b)
    b.wait_log('msg="resuming a snapshot"', timeout=60)
    b.wait_log('msg="snapshot installed"', timeout=120)
    m = re.search(r'msg="snapshot installed".* bytes=(\d+) fetched=(\d+) seconds=(\S+) '
                  r'mb_per_s=(\S+)', b.run_log())
    harness.log("installed: %s bytes, %s fetched after the resume in %s s (%s MB/s)" % (
        m.group(1), m.group(2), m.group(3), m.group(4)))
    check(int(m.group(2)) < int(m.group(1)), "the resumed copy fetched everything again")
    sent = 0
    for line in harness.http_get(admins[0], "/metrics")[1].splitlines():
        if line.startswith("dedupd_snapshot_sent_bytes_total "):
            sent = int(float(line.split()[1]))
    check(sent >= int(m.group(1)), "A says it sent %d bytes of a %s-byte copy" % (sent, m.group(1)))

    # ---- 3. ingest from the copy's positions, caught up, nothing lost -----
    b.wait_log("msg=ready", timeout=60)
    b.wait_log('msg="partitions assigned"', timeout=60)
    m = re.search(r'msg="partitions assigned".* from_store=(\d+)', b.run_log())
    check(m and int(m.group(1)) == 4, "B did not resume from the copy's offsets: %s" % (
        m and m.group(0)))
    check(flowing.wait(timeout=300) == 0, "ddproduce failed: %s" % flowing.stderr.read())
    harness.wait_until("A and B ready (caught up)",
                       lambda: all(harness.http_get(p, "/readyz")[0] == 200 for p in admins),
                       timeout=120)
    il.wait_idle(a, quiet=2)
    il.wait_idle(b, quiet=2)
    every = first + gap + more
    all_found(ports[0], every, "A")
    all_found(ports[1], every, "B (the first plays only from the copy: no longer in Kafka)")
    a.stop()
    b.stop()
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
