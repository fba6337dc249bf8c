#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A broker of three lost under load, against Apache Kafka itself: three
KRaft nodes (realkafka.py), the plays topic with replication factor 3 and
min.insync.replicas=2, as production runs it.

dedupd runs as replica 0 of a one-shard cluster, so RecordPlays is
written locally and produced to the plays topic by its idempotent producer
(acks=all), and ingest consumes the topic as every replica would. While
ddproduce sends plays (the Java client's partitioner, librdkafka's acks=all
default) and a gRPC client sends RecordPlays, one broker is killed with
SIGKILL and restarted a while later:

- 0 plays lost: every produced play is in the store (ddcheck);
- 0 acknowledged RecordPlays lost: every play a RecordPlays call was told OK
  for is in the topic (so every replica applies it) and in the store; calls
  that failed while leaders moved failed with a retryable status;
- the lag comes back under cluster.max_lag_ms (dedupd_ingest_lag_seconds 0) and
  the node is ready again.
"""
import shutil
import subprocess
import threading
import time

import harness
import realkafka
import test_ingest_lib as il
from test_clients_lib import python_stubs

PARTITIONS = 4
PLAYS = 40_000
RATE = 2_000
MAX_LAG_MS = 10_000


def metric(port, name):
    st, body = harness.http_get(port, "/metrics")
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main():
    for tool in ("kcat", "java"):
        if not shutil.which(tool):
            harness.skip("%s is not installed" % tool)
    kafka = realkafka.KafkaCluster(nodes=3, topics=("plays:%d" % PARTITIONS,))
    rpc, admin = harness.free_port(), harness.free_port()
    o = il.ingest_overrides(kafka, group="dd-kf")
    o.update({
        "rpc.listen": "127.0.0.1:%d" % rpc,
        "admin.listen": "127.0.0.1:%d" % admin,
        "cluster.shards": "1",
        # Two replicas of one shard, the second never started: clustered,
        # so RecordPlays goes through the producer, and nothing to forward.
        "cluster.nodes": "127.0.0.1:%d,127.0.0.1:%d" % (rpc, harness.free_port()),
        "cluster.partitioner": "murmur2_random",
        "cluster.max_lag_ms": str(MAX_LAG_MS),
        "window.flush_ms": "200",
        "ingest.durable_interval_ms": "500",
        "log.level": "info",
    })
    dd = harness.Dedupd(o)
    dd.wait_log('msg="partitions assigned"', timeout=60)
    harness.wait_until("ready", lambda: harness.http_get(admin, "/readyz")[0] == 200, timeout=90)

    plays = [("kf-%d" % (i % 5000), "kf-v%d" % i, None) for i in range(PLAYS)]
    prod = il.produce_async(kafka, plays, rate=RATE, partitioner="murmur2_random")

    pb, pbg, grpc = python_stubs()
    acked, refused, stop = [], {}, threading.Event()

    def record_plays():
        with grpc.insecure_channel("127.0.0.1:%d" % rpc) as ch:
            stub = pbg.DedupStub(ch)
            i = 0
            while not stop.is_set() and i < 20_000:
                user, item = "rp-%d" % (i % 500), "rp-v%d" % i
                try:
                    stub.RecordPlays(pb.RecordPlaysRequest(user_id=user,
                                                           plays=[pb.Play(item_id=item)]),
                                     timeout=10)
                    acked.append((user, item))
                except grpc.RpcError as e:
                    refused[e.code()] = refused.get(e.code(), 0) + 1
                i += 1
                time.sleep(0.01)

    t = threading.Thread(target=record_plays)
    t.start()
    time.sleep(6)
    harness.log("killing broker 2 of 3")
    kafka.kill(1)
    time.sleep(12)
    harness.log("restarting broker 2")
    kafka.start(1)
    if prod.p.wait(timeout=300) != 0:
        harness.fail("ddproduce failed:\n" + prod.tail())
    time.sleep(2)
    stop.set()
    t.join(60)
    harness.log("RecordPlays: %d acknowledged, refused %s" % (len(acked), refused))
    wrong = {c: n for c, n in refused.items()
             if c not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)}
    if wrong:
        harness.fail("RecordPlays failed with a status that is not retryable: %s" % wrong)
    if not acked:
        harness.fail("no RecordPlays call succeeded")

    harness.wait_until("lag 0 and ready after the broker came back",
                       lambda: metric(admin, "dedupd_ingest_lag_seconds") == 0 and
                       harness.http_get(admin, "/readyz")[0] == 200, timeout=120)
    il.wait_idle(dd)
    harness.log("lag back to 0, ready")

    # Every acknowledged RecordPlays is in the topic, where replicas read it.
    r = subprocess.run(["kcat", "-C", "-b", kafka.addr, "-t", "plays", "-o", "beginning", "-e",
                        "-q", "-f", "%s\n"], capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        harness.fail("kcat: %s" % r.stderr)
    logged = r.stdout
    missing = [p for p in acked if '"%s"' % p[1] not in logged]
    if missing:
        harness.fail("%d acknowledged RecordPlays not in the topic, e.g. %s" % (len(missing),
                                                                               missing[:5]))
    dd.stop()
    seen, unseen, lost = il.check(dd, plays + acked, unseen_list=True)
    if unseen:
        harness.fail("%d of %d plays lost, e.g. %s" % (unseen, len(plays) + len(acked), lost[:5]))
    harness.log("0 of %d produced plays and 0 of %d acknowledged RecordPlays lost" % (
        len(plays), len(acked)))
    harness.log("PASS")


if __name__ == "__main__":
    main()
