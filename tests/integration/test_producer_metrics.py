# SPDX-License-Identifier: Apache-2.0
"""The producer's families on /metrics (producer.h, dd_producer_collect):
replica 0 of a one-shard cluster (its peer, replica 1, is not running)
against the real devbroker takes
RecordPlays, which it produces to the plays topic; its /metrics must then
show dedupd_producer_messages_total{result="delivered"} for every play,
dedupd_producer_calls_total{result="ok"} for the call, and
dedupd_producer_partitions, the topic's partition count (record.c points
operators at these families)."""
import harness
import test_ingest_lib as il
from test_clients_lib import python_stubs

PARTITIONS = 4
PLAYS = 3


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def main():
    pb, pbg, grpc = python_stubs()
    broker = harness.DevBroker(("plays:%d" % PARTITIONS,))
    redis = harness.Redis()
    rpc, admin = harness.free_port(), harness.free_port()
    o = il.ingest_overrides(broker, group="dd-producer-metrics")
    o.update({
        "recent.redis": redis.addr,
        "rpc.listen": "127.0.0.1:%d" % rpc,
        "admin.listen": "127.0.0.1:%d" % admin,
        "cluster.shards": "1",
        "cluster.shard": "0",
        "cluster.replica": "0",
        # Two replicas make it a cluster (cluster.h); the second never starts.
        "cluster.nodes": "127.0.0.1:%d,127.0.0.1:%d" % (rpc, harness.free_port()),
        "cluster.redis": redis.addr,
        "window.flush_ms": "200",
    })
    dd = harness.Dedupd(o)
    ch = grpc.insecure_channel(dd.rpc_addr)
    grpc.channel_ready_future(ch).result(timeout=20)
    stub = pbg.DedupStub(ch)
    r = stub.RecordPlays(pb.RecordPlaysRequest(
        user_id="pm-user", plays=[pb.Play(item_id="i%d" % i) for i in range(PLAYS)]), timeout=20)
    check(r.accepted == PLAYS, "RecordPlays: %s" % r)

    st, body = harness.http_get(admin, "/metrics")
    check(st == 200, "/metrics: %s %s" % (st, body[:200]))
    for fam, kind in (("dedupd_producer_messages_total", "counter"),
                      ("dedupd_producer_calls_total", "counter"),
                      ("dedupd_producer_partitions", "gauge")):
        check("# TYPE %s %s" % (fam, kind) in body, "/metrics has no %s family" % fam)
    delivered = harness.metric_sum(admin, "dedupd_producer_messages_total",
                                   ['result="delivered"'])
    check(delivered >= PLAYS, "delivered %s, want at least %d" % (delivered, PLAYS))
    check(harness.metric_sum(admin, "dedupd_producer_messages_total", ['result="failed"']) == 0,
          "failed deliveries")
    ok = harness.metric_sum(admin, "dedupd_producer_calls_total", ['result="ok"'])
    check(ok >= 1, "calls ok %s" % ok)
    parts = harness.metric_sum(admin, "dedupd_producer_partitions")
    check(parts == PARTITIONS, "partitions %s, want %d" % (parts, PARTITIONS))
    harness.log("producer families: delivered=%d calls_ok=%d partitions=%d"
                % (delivered, ok, parts))
    dd.stop()
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
