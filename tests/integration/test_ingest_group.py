# SPDX-License-Identifier: Apache-2.0
"""Two dedupd instances in one consumer group: the partitions are split
between them; one stops cleanly while plays keep coming and the other takes
its partitions over. No play is lost: every play is in the store of the
instance that consumed it, and every play produced after the handover is in
the survivor's."""
import random
import time

import harness
import test_ingest_lib as il

USERS = 5_000
RATE = 6_000


def unseen_set(dd, plays):
    _, _, missing = il.check(dd, plays, unseen_list=True)
    return {(u, i) for u, i, *_ in missing}


def assigned_counts(dd):
    return [int(x.split("count=")[1].split()[0]) for x in dd.run_log().splitlines()
            if 'msg="partitions assigned"' in x]


def main():
    rnd = random.Random(11)
    broker = harness.DevBroker(("plays:8",))
    extra = {"kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "500"}
    a = harness.Dedupd(il.ingest_overrides(broker, **extra), name="dedupd-a")
    a.wait_log('msg="partitions assigned"')
    b = harness.Dedupd(il.ingest_overrides(broker, **extra), name="dedupd-b")
    b.wait_log('msg="partitions assigned"')
    # Cooperative rebalance: A gives some partitions up, B gets them (B's
    # first assignment may be empty; the second round hands them over).
    a.wait_log('msg="partitions revoked"')
    deadline = time.time() + 30
    while sum(assigned_counts(b)) == 0 and time.time() < deadline:
        time.sleep(0.2)
    got_a, got_b = sum(assigned_counts(a)), sum(assigned_counts(b))
    harness.log("A assigned %d, then revoked some; B assigned %d" % (got_a, got_b))
    if got_b == 0 or got_b >= 8:
        harness.fail("partitions were not split: B got %d" % got_b)

    phase1 = [("g%04d" % rnd.randrange(USERS), "p1-%d" % i, None) for i in range(60_000)]
    phase2 = [("g%04d" % rnd.randrange(USERS), "p2-%d" % i, None) for i in range(60_000)]
    prod = il.produce_async(broker, phase1 + phase2, rate=RATE)
    time.sleep(len(phase1) / RATE)          # about when phase 2 starts
    st_a = il.stop_stats(a)                 # clean stop mid-stream
    harness.log("A stopped: %s" % st_a)
    b.wait_log('msg="partitions assigned"')
    il.wait_producer(prod)
    deadline = time.time() + 60
    while sum(assigned_counts(b)) < 8 and time.time() < deadline:
        time.sleep(0.2)
    if sum(assigned_counts(b)) < 8:
        harness.fail("B never took over all partitions: %s" % assigned_counts(b))
    il.wait_idle(b)
    st_b = il.stop_stats(b)
    harness.log("B stopped: %s" % st_b)
    if st_a["messages"] == 0 or st_b["messages"] == 0:
        harness.fail("one instance consumed nothing: A %d, B %d" % (st_a["messages"],
                                                                    st_b["messages"]))

    everything = phase1 + phase2
    lost = unseen_set(a, everything) & unseen_set(b, everything)
    if lost:
        harness.fail("%d plays in neither store, e.g. %s" % (len(lost), sorted(lost)[:5]))
    harness.log("all %d plays are in A's or B's store" % len(everything))
    # Produced after A left (the tail of phase 2): all in B.
    il.require_all_seen(b, phase2[len(phase2) // 2:], "after the handover, in B")
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
