# SPDX-License-Identifier: Apache-2.0
"""Ingest in cluster mode (ingest.h, "assign"): a dedupd that is shard 1 of
2 (-o cluster.shards=2 -o cluster.shard=1 ...) against the real devbroker.

1. It assigns itself partitions 1, 3, 5, 7 of 8 (its log, the per-partition
   lag gauges on /metrics): the plays of users the partitioner puts in odd
   partitions are stored, the others never read.
2. It commits under its own group id, <kafka.group.id>.s1.r0: that group
   has the odd partitions' end offsets (tests/tools/ddoffsets asks the
   broker), the plain group id nothing.
3. A play kcat put into an owned partition its user does not hash to is
   counted as wrong_partition, dead-lettered and not stored.
4. A topic that does not exist yet (the devbroker's --unavailable): the node
   is not ready, knows no partition count, assigns nothing; once the topic
   appears it assigns its partitions (1, 3 of 4) and is ready.
5. The lag: dedupd_ingest_lag_seconds is absent (dedupd_ingest_lag_known
   0) before anything is assigned, 0 once
   caught up, and, with a play consumed but its window not yet written
   (window.flush_ms = 6 s), grows with the play's age, in that partition
   only, until the window is written.

Not tested: a partition count that changes while running. The devbroker
is librdkafka 2.0.2's mock cluster, which cannot add partitions to a topic
(no CreatePartitions handler; creating an existing topic fails; topics
cannot be deleted), so dedupd_ingest_partition_count_changes_total is only
checked to stay 0.
"""
import json
import os
import re
import shutil
import subprocess
import time

import harness
import test_ingest_lib as il

USERS = 400
PLAYS_PER_USER = 3
PARTITIONS = 8
GROUP = "dd-cl"




def node(broker, data_dir=None, **extra):
    """A dedupd that is shard 1, replica 0 of 2 shards (shard 0's node is
    not running: ingest does not need it)."""
    rpc, admin = harness.free_port(), harness.free_port()
    o = il.ingest_overrides(broker, group=GROUP)
    o.update({
        "rpc.listen": "127.0.0.1:%d" % rpc,
        "admin.listen": "127.0.0.1:%d" % admin,
        "cluster.shards": "2",
        "cluster.shard": "1",
        "cluster.replica": "0",
        "cluster.nodes": "127.0.0.1:%d;127.0.0.1:%d" % (harness.free_port(), rpc),
        "cluster.partitioner": "murmur2_random",
        "window.flush_ms": "200",
    })
    o.update(extra)
    dd = harness.Dedupd(o, data_dir=data_dir)
    dd.admin = admin
    return dd


def committed(broker, group, topic, n):
    r = subprocess.run([harness.build_path("tests", "tools", "ddoffsets"), "-b", broker.addr,
                        "-g", group, "-t", topic, "-n", str(n)], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        harness.fail("ddoffsets: %s" % r.stderr)
    return {int(p): int(o) for p, o in (l.split("\t") for l in r.stdout.splitlines())}


def main():
    if not shutil.which("kcat"):
        harness.skip("kcat is not installed (Debian package kcat)")
    broker = harness.DevBroker(("plays:%d" % PARTITIONS, "plays-dlq:1", "late:4"),
                               unavailable=("late",))
    users = ["cu-%d" % i for i in range(USERS)]
    part = il.partitions_of(users, PARTITIONS)
    plays = [(u, "%s-v%d" % (u, k), None) for u in users for k in range(PLAYS_PER_USER)]
    il.produce(broker, plays, partitioner="murmur2_random")
    # Wrong partitions: users of partition 5 put into partition 3 (owned).
    wrong_users = [u for u in users if part[u] == 5][:6]
    path = os.path.join(harness.tmpdir("dedupd-wrong-"), "wrong.txt")
    with open(path, "w") as f:
        for u in wrong_users:
            f.write("%s:%s\n" % (u, json.dumps({"user_id": u, "item_id": "wrong-" + u})))
    r = subprocess.run(["kcat", "-P", "-l", "-b", broker.addr, "-t", "plays", "-p", "3", "-K:",
                        path], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        harness.fail("kcat: %s" % r.stderr)
    end = {p: sum(PLAYS_PER_USER for u in users if part[u] == p) for p in range(PARTITIONS)}
    end[3] += len(wrong_users)

    # ---- 1. the odd partitions, and nothing else ---------------------------
    dd = node(broker, **{"ingest.dead_letter_topic": "plays-dlq"})
    dd.wait_log('msg="partitions assigned" count=4 protocol=assign partitions=1,3,5,7 ')
    il.wait_idle(dd)
    m = il.metrics(dd.admin, "dedupd_ingest_")
    owned = sorted(int(re.search(r'partition="(\d+)"', k).group(1)) for k in m
                   if k.startswith("dedupd_ingest_partition_lag_seconds{"))
    if owned != [1, 3, 5, 7] or m["dedupd_ingest_assigned_partitions"] != 4:
        harness.fail("partitions on /metrics: %s, assigned %s" % (
            owned, m.get("dedupd_ingest_assigned_partitions")))
    if m["dedupd_ingest_topic_partitions"] != PARTITIONS:
        harness.fail("topic partitions %s" % m["dedupd_ingest_topic_partitions"])
    harness.wait_until("lag 0 once caught up",
                       lambda: il.metrics(dd.admin).get("dedupd_ingest_lag_seconds") == 0, timeout=30)
    if m["dedupd_ingest_partition_count_changes_total"] != 0:
        harness.fail("partition count changes counted: %s" % m)
    harness.log("assigned 1,3,5,7; lag 0; /metrics agrees")
    st = il.stop_stats(dd)
    harness.log("stats: %s" % st)
    mine = [p for p in plays if part[p[0]] % 2 == 1]
    if st["plays"] != len(mine):
        harness.fail("%d plays ingested, the odd partitions hold %d" % (st["plays"], len(mine)))
    seen, _, _ = il.check(dd, mine)
    if seen != len(mine):
        harness.fail("%d of the %d plays of this shard's users stored" % (seen, len(mine)))
    others = [p for p in plays if part[p[0]] % 2 == 0]
    seen, _, _ = il.check(dd, others)
    if seen:
        harness.fail("%d plays of the other shard's users stored" % seen)
    harness.log("%d plays of odd partitions stored, none of %d in even ones" % (len(mine),
                                                                                 len(others)))

    # ---- 2. its own group id ---------------------------------------------
    own = committed(broker, GROUP + ".s1.r0", "plays", PARTITIONS)
    want = {p: (end[p] if p % 2 == 1 else -1) for p in range(PARTITIONS)}
    if own != want:
        harness.fail("committed under %s.s1.r0: %s, want %s" % (GROUP, own, want))
    plain = committed(broker, GROUP, "plays", PARTITIONS)
    if any(o != -1 for o in plain.values()):
        harness.fail("committed under the plain group id %s: %s" % (GROUP, plain))
    harness.log("offsets committed under %s.s1.r0: %s" % (GROUP, own))

    # ---- 3. wrong partitions -----------------------------------------------
    if st["bad_wrong_partition"] != len(wrong_users) or st["dead_lettered"] != len(wrong_users):
        harness.fail("wrong_partition %d, dead-lettered %d, want %d" % (
            st["bad_wrong_partition"], st["dead_lettered"], len(wrong_users)))
    seen, _, _ = il.check(dd, [(u, "wrong-" + u) for u in wrong_users])
    if seen:
        harness.fail("%d wrong-partition plays stored" % seen)
    r = subprocess.run(["kcat", "-C", "-b", broker.addr, "-t", "plays-dlq", "-o", "beginning",
                        "-e", "-q", "-f", "%k %h\n"], capture_output=True, text=True, timeout=60)
    dlq = sorted(l.split()[0] for l in r.stdout.splitlines()
                 if "dd-reason=wrong_partition" in l and "dd-partition=3" in l)
    if dlq != sorted(wrong_users):
        harness.fail("dead-letter topic: %r" % r.stdout)
    harness.log("%d wrong-partition plays counted, dead-lettered, not stored" % len(wrong_users))

    # ---- 4. a topic that is not there yet -----------------------------------
    late = node(broker, **{"ingest.topic": "late", "window.flush_ms": "6000"})
    time.sleep(3)
    st_code, body = harness.http_get(late.admin, "/readyz")
    m = il.metrics(late.admin, "dedupd_ingest_")
    if st_code != 503 or m["dedupd_ingest_topic_partitions"] != 0 or \
            "dedupd_ingest_lag_seconds" in m or m["dedupd_ingest_lag_known"] != 0 or \
            m["dedupd_ingest_assigned_partitions"] != 0:
        harness.fail("without its topic: /readyz %d %r, metrics %s" % (st_code, body, m))
    if 'msg="partitions assigned"' in late.run_log():
        harness.fail("partitions assigned without a topic")
    harness.log("no topic: not ready (%s), nothing assigned, lag unknown (absent)" % body.strip())
    broker.available()
    late.wait_log('msg="partitions assigned" count=2 protocol=assign partitions=1,3 ')
    harness.wait_until("ready with its topic",
                       lambda: harness.http_get(late.admin, "/readyz")[0] == 200, timeout=30)
    if il.metrics(late.admin, "dedupd_ingest_")["dedupd_ingest_topic_partitions"] != 4:
        harness.fail("late topic's partitions: %s" % il.metrics(late.admin, "dedupd_ingest_"))
    harness.log("the topic appeared: partitions 1,3 of 4 assigned, ready")

    # ---- 5. the lag of a play not yet visible --------------------------------
    harness.wait_until("lag 0 on the new topic",
                       lambda: il.metrics(late.admin).get("dedupd_ingest_lag_seconds") == 0, timeout=30)
    late_part = il.partitions_of(users, 4)
    u = next(x for x in users if late_part[x] == 3)
    t0 = time.time()
    il.produce(broker, [(u, "lagging", None)], topic="late", partitioner="murmur2_random")
    time.sleep(2.5)
    m = il.metrics(late.admin, "dedupd_ingest_")
    waited = (time.time() - t0) * 1000
    lag3 = m['dedupd_ingest_partition_lag_seconds{partition="3"}'] * 1000
    lag = m["dedupd_ingest_lag_seconds"] * 1000
    # The lag counts from when this node first saw the play in the log (its
    # next fetch after the delivery, up to fetch.wait.max.ms later), not from
    # the producer's timestamp: at least the 2.5 s slept less that delay.
    if not 1500 <= lag <= waited + 500 or lag3 != lag or m["dedupd_ingest_lag_known"] != 1 \
            or m['dedupd_ingest_partition_lag_seconds{partition="1"}'] != 0:
        harness.fail("a play pending for %.0f ms: lag %s" % (waited, m))
    harness.log("a play pending %.0f ms: lag %d ms (partition 3), partition 1 at 0" % (
        waited, lag3))
    harness.wait_until("lag 0 once its window is written",
                       lambda: il.metrics(late.admin).get("dedupd_ingest_lag_seconds") == 0, timeout=30)
    late.stop()
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
