#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Redis stopped under a running dedupd: Filter still answers from the
played history with degraded = true, RecordDelivery fails with UNAVAILABLE;
Redis restarted on the same port: degraded clears by itself, without
restarting dedupd, and deliveries filter again.
"""
import time

import harness
from test_clients_lib import Dedupd, python_stubs


def main():
    pb, pbg, grpc = python_stubs()
    redis = harness.Redis()
    d = Dedupd(redis.addr)
    ch = grpc.insecure_channel(d.addr)
    grpc.channel_ready_future(ch).result(timeout=20)
    stub = pbg.DedupStub(ch)
    user = "degraded-user"
    cands = ["p1", "d1", "f1", "p2", "d2", "f2"]

    def filt():
        t0 = time.monotonic()
        r = stub.Filter(pb.FilterRequest(user_id=user, candidate_ids=cands, explain=True),
                        timeout=5)
        return r, (time.monotonic() - t0) * 1000

    stub.RecordPlays(pb.RecordPlaysRequest(user_id=user, plays=[
        pb.Play(item_id="p1"), pb.Play(item_id="p2")]), timeout=10)
    stub.RecordDelivery(pb.RecordDeliveryRequest(user_id=user, item_ids=["d1", "d2"]), timeout=10)
    r, _ = filt()
    if list(r.kept_ids) != ["f1", "f2"] or r.degraded:
        harness.fail("healthy: kept %s degraded %s" % (list(r.kept_ids), r.degraded))

    harness.log("stopping redis")
    redis.stop()
    worst = 0.0
    for i in range(20):  # enough calls to reach every worker
        r, ms = filt()
        worst = max(worst, ms)
        if not r.degraded:
            harness.fail("redis down, call %d: degraded not set" % i)
        if list(r.kept_ids) != ["d1", "f1", "d2", "f2"]:
            harness.fail("redis down, call %d: kept %s (history must still apply)"
                         % (i, list(r.kept_ids)))
        if r.removed_played != 2 or r.removed_delivered != 0:
            harness.fail("redis down: counters played=%d delivered=%d"
                         % (r.removed_played, r.removed_delivered))
    harness.log("degraded answers ok, slowest %.1f ms" % worst)
    if worst > 1000:
        harness.fail("degraded Filter took %.0f ms" % worst)
    try:
        stub.RecordDelivery(pb.RecordDeliveryRequest(user_id=user, item_ids=["d3"]), timeout=5)
        harness.fail("RecordDelivery succeeded with redis down")
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNAVAILABLE:
            harness.fail("RecordDelivery with redis down: %s, want UNAVAILABLE" % e.code())

    harness.log("restarting redis on port", redis.port)
    redis.start()
    t0 = time.monotonic()
    while True:
        r, _ = filt()
        if not r.degraded:
            break
        if time.monotonic() - t0 > 15:
            harness.fail("still degraded 15 s after redis came back")
        time.sleep(0.1)
    harness.log("degraded cleared after %.1f s" % (time.monotonic() - t0))
    # Every worker recovers, not just one: the next calls are all clean.
    deadline = time.monotonic() + 15
    clean = 0
    while clean < 20:
        r, _ = filt()
        clean = clean + 1 if not r.degraded else 0
        if time.monotonic() > deadline:
            harness.fail("some calls still degraded 15 s after redis came back")
    # The restarted Redis lost the old deliveries (no persistence in the
    # test); new ones filter again.
    stub.RecordDelivery(pb.RecordDeliveryRequest(user_id=user, item_ids=["d2"]), timeout=10)
    r, _ = filt()
    if list(r.kept_ids) != ["d1", "f1", "f2"] or r.degraded:
        harness.fail("after recovery: kept %s degraded %s" % (list(r.kept_ids), r.degraded))
    if not d.proc.alive():
        harness.fail("dedupd died")
    ch.close()
    d.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
