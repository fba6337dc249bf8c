# SPDX-License-Identifier: Apache-2.0
"""kill -9 dedupd at random moments during sustained ingest, five times,
restarting it each time: at the end every produced play is seen (0 lost).
The store records each partition's next offset in the write of the plays
it covers, and a restart resumes there (logged as from_store), so whatever
a crash cut off is consumed again. The windows are kept small
(window.max_bytes) so that consumption pauses for the store again and
again, crashes included. Then the store's offsets are shown to win over the
group's: restarted under a new group id (no committed offsets) with
auto.offset.reset=latest, dedupd still ingests what was produced while it
was down. Against Apache Kafka itself (realkafka.py): a consumer group's
session, rebalances and committed offsets are a real broker's. The argument
is ingest.durable: flush (the default) or wal."""
import random
import re
import sys
import time

import harness
import realkafka
import test_ingest_lib as il

USERS = 20_000
PLAYS = 360_000
RATE = 8_000       # plays/s: the producer runs ~45 s, through every crash
KILLS = 5


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "flush"
    if mode not in ("flush", "wal"):
        harness.fail("usage: test_ingest_crash.py [flush|wal]")
    rnd = random.Random(7)
    plays = [("c%05d" % rnd.randrange(USERS), "v%d" % i, None) for i in range(PLAYS)]
    broker = realkafka.KafkaCluster(topics=("plays:16",))
    # A short session so the killed member leaves the group quickly; plays
    # made durable (and their offsets recorded) every 0.5 s, so that kills
    # land between durable points, not only before the first.
    dd = harness.Dedupd(il.ingest_overrides(broker, **{
        "kafka.session.timeout.ms": "3000", "kafka.heartbeat.interval.ms": "300",
        "window.max_bytes": "262144", "ingest.durable_interval_ms": "500",
        "ingest.durable": mode}))
    prod = il.produce_async(broker, plays, rate=RATE)
    kills_mid_ingest = 0
    for k in range(KILLS):
        dd.wait_log('msg="partitions assigned"', timeout=60)
        time.sleep(rnd.uniform(0.2, 2.5))
        mid = prod.alive()
        kills_mid_ingest += mid
        harness.log("kill -9 #%d (flushed %d this run, producer %s)" % (
            k + 1, il.flushed(dd), "running" if prod.alive() else "done"))
        dd.kill9()
        dd.start()
    il.wait_producer(prod, timeout=180)
    il.wait_idle(dd)
    st = il.stop_stats(dd)
    harness.log("last run: %s" % st)
    if st["pauses"] == 0:
        harness.fail("the small windows never made consumption pause")
    if kills_mid_ingest < KILLS:
        harness.fail("only %d of %d kills hit a running ingest" % (kills_mid_ingest, KILLS))
    il.require_all_seen(dd, plays, "after %d kills" % KILLS)
    resumed = [int(x) for x in re.findall(r'msg="partitions assigned".* from_store=(\d+)',
                                          open(dd.logpath).read())]
    harness.log("partitions resumed from the store's offsets, per assignment: %s" % resumed)
    if not resumed or max(resumed) == 0:
        harness.fail("no restart resumed from the store's offsets")

    more = [("c%05d" % rnd.randrange(USERS), "w%d" % i, None) for i in range(5000)]
    il.produce(broker, more)
    dd.overrides["kafka.group.id"] = "dedupd-crash-other-group"
    dd.overrides["kafka.auto.offset.reset"] = "latest"
    dd.start()
    dd.wait_log('msg="partitions assigned"', timeout=60)
    m = re.search(r'msg="partitions assigned".* from_store=(\d+)', dd.run_log())
    if not m or int(m.group(1)) != 16:
        harness.fail("new group: %s partitions from the store, want 16" % (m and m.group(1)))
    il.wait_flushed(dd, len(more))
    il.wait_idle(dd)
    il.stop_stats(dd)
    il.require_all_seen(dd, more, "produced while down, new group, reset=latest")
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
