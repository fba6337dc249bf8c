# SPDX-License-Identifier: Apache-2.0
"""ingest.durable = flush (the argument "flush", the default) or wal ("wal"):
Kafka is the log. Plays are filterable as soon as their window is written
(before they are durable); their offsets are committed only after a durable
point has made them durable: a memtable flush (flush), or an fsync of the
WAL the windows were written through (wal). So:

1. with ingest.durable_interval_ms far away, written plays answer Filter as
   PLAYED, no durable point has run and nothing is committed: a kill -9
   then loses the memtable (flush: the restarted dedupd consumes every
   message again from the start) or not (wal: the WAL, unsynced but in the
   page cache, is replayed with the partitions' positions, and the restart
   consumes nothing again); either way it ends with every play stored;
2. a clean stop makes what was written durable and commits it: the next run
   consumes only what was produced after it;
3. with a short interval, durable points run on their own during ingest
   and their offsets are committed: a kill -9 after one replays only the
   tail since it (nothing here). With wal the durable points write no SST
   file: the memtable is far from full."""
import glob
import os
import subprocess
import sys
import time

import harness
import test_ingest_lib as il

USERS = 2_000


def plays_for(tag, n):
    return [("d%04d" % (i % USERS), "%s-%d" % (tag, i), None) for i in range(n)]


def filter_played(dd, user, items):
    """PLAYED count of a Filter of ITEMS for USER, through dedupctl."""
    r = subprocess.run([harness.build_path("tools", "dedupctl"), "-a", dd.rpc_addr, "filter",
                        user] + items, capture_output=True, text=True, timeout=30)
    for line in r.stdout.splitlines():
        if line.startswith("played="):
            return int(line.split()[0].split("=")[1])
    harness.fail("dedupctl filter said (%d) %r %r" % (r.returncode, r.stdout, r.stderr))


def durable_lines(dd):
    return [l for l in dd.run_log().splitlines() if "module=ingest msg=durable " in l]


def sst_files(dd):
    return len(glob.glob(os.path.join(dd.overrides["history.path"], "*.sst")))


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "flush"
    if mode not in ("flush", "wal"):
        harness.fail("usage: test_ingest_durable.py [flush|wal]")
    broker = harness.DevBroker(("plays:4",))
    first = plays_for("a", 20_000)
    il.produce(broker, first)
    # A short session so that a killed member leaves the group quickly, but
    # not under 6 s (also the least a Kafka broker accepts by default,
    # group.min.session.timeout.ms): the mock cluster (librdkafka 2.0.2)
    # holds the first JoinGroup of an empty group for a fixed 3 s while the
    # member's session runs, so with a 3 s session a late broker thread
    # expires the member it holds, drops its JoinGroup response, and dedupd
    # waits max.poll.interval.ms (5 min) for it, silently.
    dd = harness.Dedupd(il.ingest_overrides(broker, **{
        "ingest.durable_interval_ms": "600000", "kafka.session.timeout.ms": "6000",
        "kafka.heartbeat.interval.ms": "300", "ingest.durable": mode}))

    # 1. Written and filterable, not durable, not committed; kill -9.
    il.wait_flushed(dd, len(first))
    if "durable=%s " % mode not in dd.run_log():
        harness.fail("ingest did not start with durable=%s" % mode)
    user = first[0][0]
    items = [p[1] for p in first if p[0] == user]
    got = filter_played(dd, user, items)
    if got != len(items):
        harness.fail("written plays not filterable: %d of %d PLAYED" % (got, len(items)))
    if durable_lines(dd):
        harness.fail("a durable point ran before its interval: %s" % durable_lines(dd))
    harness.log("%d plays written and filterable, none durable yet; kill -9" % len(first))
    dd.kill9()

    # flush: the restart consumes everything again (nothing had been
    # committed, the memtable is lost); wal: it resumes from the positions
    # the WAL kept with the plays.
    again = len(first) if mode == "flush" else 0
    dd.start()
    il.wait_idle(dd)
    st = il.stop_stats(dd)
    harness.log("after kill -9 before durability: %s" % st)
    if st["messages"] != again:
        harness.fail("expected %d messages consumed again, got %d" % (again, st["messages"]))
    if st["messages_durable"] != again:
        harness.fail("clean stop left plays not durable: %s" % st)
    il.require_all_seen(dd, first, "replayed after kill -9")

    # 2. The clean stop committed everything: only new messages next time.
    second = plays_for("b", 5_000)
    il.produce(broker, second)
    dd.start()
    il.wait_idle(dd)
    st = il.stop_stats(dd)
    if st["messages"] != len(second):
        harness.fail("after a clean stop expected %d new messages, got %d" % (len(second),
                                                                             st["messages"]))
    il.require_all_seen(dd, first + second, "after a clean stop")

    # 3. Durability flushes on their own; a kill -9 replays only the tail.
    dd.overrides["ingest.durable_interval_ms"] = "500"
    third = plays_for("c", 30_000)
    il.produce(broker, third)
    dd.start()
    il.wait_flushed(dd, len(third))
    ssts = sst_files(dd)
    deadline = time.time() + 30
    while time.time() < deadline:
        done = [int(l.split("messages_durable=")[1].split()[0]) for l in durable_lines(dd)]
        if done and done[-1] == len(third):
            break
        time.sleep(0.2)
    else:
        harness.fail("no durable point covered the %d messages: %s" % (len(third),
                                                                        durable_lines(dd)))
    # ... and the asynchronous commit that follows it.
    deadline = time.time() + 30
    while time.time() < deadline:
        log = dd.run_log()
        last = log.rfind("module=ingest msg=durable ")
        if "module=ingest msg=committed " in log[last:]:
            break
        time.sleep(0.1)
    else:
        harness.fail("no offset commit after the last durable point")
    harness.log("durable points: %d, SST files %d then %d; kill -9" % (
        len(durable_lines(dd)), ssts, sst_files(dd)))
    if mode == "wal" and sst_files(dd) != ssts:
        harness.fail("durable = wal: a durable point wrote SST files (%d -> %d)" % (
            ssts, sst_files(dd)))
    dd.kill9()
    dd.start()
    il.wait_idle(dd)
    st = il.stop_stats(dd)
    harness.log("after kill -9 past durability: %s" % st)
    if st["messages"] != 0:
        harness.fail("%d messages consumed again although their offsets were committed"
                     % st["messages"])
    il.require_all_seen(dd, first + second + third, "after all runs")
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
