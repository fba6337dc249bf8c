# SPDX-License-Identifier: Apache-2.0
"""The broker goes down for 10 s in the middle of sustained ingest and comes
back: dedupd keeps running and serving (its gRPC port answers), resumes
consuming by itself, and no play is lost. It runs with ingest.wal = true,
so that path (windows through the WAL, offsets stored right after each)
is exercised too; the other ingest tests use the default, false."""
import random
import socket
import time

import harness
import test_ingest_lib as il

RATE = 6_000
PLAYS = 150_000


def main():
    rnd = random.Random(5)
    plays = [("b%05d" % rnd.randrange(10_000), "v%d" % i, None) for i in range(PLAYS)]
    broker = harness.DevBroker(("plays:8",))
    dd = harness.Dedupd(il.ingest_overrides(broker, **{"ingest.wal": "true"}))
    dd.wait_log('msg="partitions assigned"')
    port = dd.rpc_port
    prod = il.produce_async(broker, plays, rate=RATE)
    time.sleep(5)
    before = il.flushed(dd)
    if before == 0:
        harness.fail("nothing ingested before the outage")
    harness.log("broker down (flushed %d)" % before)
    broker.down()
    t_end = time.time() + 10
    while time.time() < t_end:
        if not dd.alive():
            harness.fail("dedupd died while the broker was down:\n" + dd.proc.tail())
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass                                    # still serving
        time.sleep(0.5)
    during = il.flushed(dd)
    broker.up()
    harness.log("broker up (flushed %d)" % during)
    il.wait_producer(prod, timeout=240)
    il.wait_idle(dd, timeout=240)
    after = il.flushed(dd)
    if after <= during:
        harness.fail("no progress after the broker came back")
    st = il.stop_stats(dd)
    harness.log("stats: %s" % st)
    if st["durable_flushes"] != 0 or st["messages_durable"] != st["messages_flushed"]:
        harness.fail("ingest.wal=true should make each window durable as written: %s" % st)
    il.require_all_seen(dd, plays, "after a 10 s broker outage")
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
