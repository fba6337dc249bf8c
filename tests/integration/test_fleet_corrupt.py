#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Issue 26, case 3: a stored value that fails dedupd's own checksum is an
error for that user, never "nothing seen".

A real dedupd records plays for a victim and a bystander, is stopped, and
one of the victim's stored values is damaged below RocksDB's own checks
(tests/tools/dddamage: the value read, one byte flipped, written back with
a RocksDB Put, so RocksDB's block checksums hold and only dedupd's fails).
Restarted:
- Filter for the victim is never OK (and never OK with degraded = false
  keeping a played item): UNAVAILABLE naming the damaged segment, also
  after more plays and a compaction (the damage is kept, not folded away);
- the bystander is answered in full;
- /why for the victim says the history is damaged; the metrics count it;
  the log names the key;
- `ddcheck -D` lists the victim (exit 1) and nobody else;
- ForgetUser repairs the victim: its Filter answers OK again and new plays
  count; `ddcheck -D` then finds nothing (exit 0).

Then a shard of two replicas (devbroker, one redis-server): the victim's
plays reach both, one replica's copy is damaged the same way, and once it
is caught up again every Filter for the victim sent to it is answered OK,
with degraded = false and every played item removed, by the intact replica
(the damaged node forwards it rather than answer UNAVAILABLE); /metrics
counts the damaged reads there.
"""
import json
import os
import re
import subprocess
import urllib.parse

import harness
import test_ingest_lib as il
from test_clients_lib import Dedupd, python_stubs

PLAYED = ["p%d" % i for i in range(10)]
FRESH = ["f%d" % i for i in range(5)]


def metric(admin, name):
    _, body = harness.http_get(admin, "/metrics")
    text = body.decode() if isinstance(body, bytes) else body
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    if not m:
        harness.fail("no %s in /metrics" % name)
    return float(m.group(1))


def ddcheck_damaged(d):
    r = subprocess.run([harness.build_path("tools", "ddcheck"), "-D"] + d.option_args(),
                       capture_output=True, text=True, timeout=60)
    harness.log("ddcheck -D: exit %d: %s %s" % (r.returncode, r.stdout.strip(), r.stderr.strip()))
    return r.returncode, r.stdout


def main():
    pb, pbg, grpc = python_stubs()
    redis = harness.Redis()
    admin = harness.free_port()
    d = Dedupd(redis.addr, extra={"admin.listen": "127.0.0.1:%d" % admin,
                                  "admin.token_file": harness.admin_token_file()})

    def connect():
        ch = grpc.insecure_channel(d.addr)
        grpc.channel_ready_future(ch).result(timeout=20)
        return ch, pbg.DedupStub(ch)

    ch, stub = connect()

    def filt(user):
        return stub.Filter(pb.FilterRequest(user_id=user, candidate_ids=PLAYED + FRESH),
                           timeout=5)

    def play(user, items):
        stub.RecordPlays(pb.RecordPlaysRequest(user_id=user, plays=[
            pb.Play(item_id=i) for i in items]), timeout=10)

    for user in ("victim", "bystander"):
        play(user, PLAYED)
        r = filt(user)
        if list(r.kept_ids) != FRESH or r.degraded:
            harness.fail("%s before the damage: kept %s degraded %s"
                         % (user, list(r.kept_ids), r.degraded))
    ch.close()
    d.stop()

    out = subprocess.run([harness.build_path("tests", "tools", "dddamage"),
                          d.overrides["history.path"], "", "victim"],
                         capture_output=True, text=True, timeout=60)
    harness.log("dddamage: exit %d %s %s" % (out.returncode, out.stdout.strip(),
                                             out.stderr.strip()))
    if out.returncode != 0 or not out.stdout.startswith("damaged="):
        harness.fail("could not damage the victim's values")

    d.start()
    ch, stub = connect()

    def expect_damaged(when):
        for i in range(20):  # enough calls to reach every worker
            try:
                r = filt("victim")
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    harness.fail("%s, call %d: %s, want UNAVAILABLE" % (when, i, e.code()))
                if "damaged" not in e.details() or "segment" not in e.details():
                    harness.fail("%s: message does not name the damage: %r" % (when, e.details()))
                continue
            kept_played = [x for x in r.kept_ids if x in PLAYED]
            harness.fail("%s, call %d: OK (degraded=%s) keeping %d played items %s"
                         % (when, i, r.degraded, len(kept_played), kept_played[:3]))
        harness.log("%s: 20 of 20 Filter calls UNAVAILABLE" % when)

    expect_damaged("after the damage")
    r = filt("bystander")
    if list(r.kept_ids) != FRESH or r.degraded:
        harness.fail("bystander: kept %s degraded %s" % (list(r.kept_ids), r.degraded))

    st, body = harness.http_get(admin, "/why?" + urllib.parse.urlencode(
        {"user": "victim", "item": "p1"}), headers=harness.admin_auth())
    text = body.decode() if isinstance(body, bytes) else body
    if st != 503 or "damaged" not in json.loads(text).get("error", ""):
        harness.fail("/why for the victim: %d %s" % (st, text))
    if metric(admin, "dedupd_history_corrupt_values_total") < 1:
        harness.fail("dedupd_history_corrupt_values_total did not count the damage")
    if metric(admin, "dedupd_history_damaged_reads_total") < 20:
        harness.fail("dedupd_history_damaged_reads_total did not count the refused reads")
    if not re.search(r"msg=\"damaged value[^\n]*key=[0-9a-f]+", d.run_log()):
        harness.fail("no log line naming the damaged key:\n%s" % d.proc.tail())

    # More plays, a restart (the memtable flushed), then the damage is still
    # there: new operands are folded beside it, not over it.
    play("victim", ["p10", "p11"])
    expect_damaged("after more plays")
    ch.close()
    d.stop()
    rc, listing = ddcheck_damaged(d)
    rows = [ln.split("\t") for ln in listing.splitlines() if ln.startswith("damaged\t")]
    if rc != 1 or not rows or any(r[2] != "victim" for r in rows):
        harness.fail("ddcheck -D: exit %d, want 1 listing the victim only:\n%s" % (rc, listing))
    d.start()
    ch, stub = connect()
    expect_damaged("after a restart")

    stub.ForgetUser(pb.ForgetUserRequest(user_id="victim"), timeout=10)
    r = filt("victim")
    if list(r.kept_ids) != PLAYED + FRESH or r.degraded:
        harness.fail("victim after ForgetUser: kept %s degraded %s"
                     % (list(r.kept_ids), r.degraded))
    play("victim", PLAYED[:3])
    r = filt("victim")
    if list(r.kept_ids) != PLAYED[3:] + FRESH:
        harness.fail("victim's new plays after the repair: kept %s" % list(r.kept_ids))
    r = filt("bystander")
    if list(r.kept_ids) != FRESH:
        harness.fail("bystander after the repair: kept %s" % list(r.kept_ids))
    ch.close()
    d.stop()
    rc, listing = ddcheck_damaged(d)
    if rc != 0 or "damaged\t" in listing:
        harness.fail("ddcheck -D after ForgetUser: exit %d\n%s" % (rc, listing))
    redis.stop()
    replicas(pb, pbg, grpc)
    harness.log("PASS")


def replicas(pb, pbg, grpc):
    broker = harness.DevBroker(topics=("plays:4",))
    redis = harness.Redis()
    ports = [harness.free_port() for _ in range(2)]
    admins = [harness.free_port() for _ in range(2)]
    nodes = ",".join("127.0.0.1:%d" % p for p in ports)
    dds = []
    for r in range(2):
        o = il.ingest_overrides(broker, group="dd-corrupt")
        o.update({
            "log.level": "info",
            "history.fp_rate": "0.000001",
            "rpc.listen": "127.0.0.1:%d" % ports[r],
            "admin.listen": "127.0.0.1:%d" % admins[r],
            "cluster.shards": "1",
            "cluster.shard": "0",
            "cluster.replica": str(r),
            "cluster.nodes": nodes,
            "cluster.redis": redis.addr,
            "cluster.partitioner": "murmur2_random",
            "cluster.health_interval_ms": "200",
            "cluster.max_lag_ms": "3000",
            "window.flush_ms": "100",
        })
        dds.append(harness.Dedupd(o, name="dd-0-%d" % r))
    chans = [grpc.insecure_channel("127.0.0.1:%d" % p) for p in ports]
    stubs = [pbg.DedupStub(c) for c in chans]

    def filt(r, user):
        return stubs[r].Filter(pb.FilterRequest(user_id=user, candidate_ids=PLAYED + FRESH),
                               timeout=10)

    def ready(r):
        return harness.http_get(admins[r], "/readyz")[0] == 200

    harness.wait_until("both replicas ready", lambda: ready(0) and ready(1), timeout=60)
    stubs[0].RecordPlays(pb.RecordPlaysRequest(user_id="victim", plays=[
        pb.Play(item_id=i) for i in PLAYED]), timeout=20)
    # the plays reach the other replica through the topic
    harness.wait_until("replica 1 has the victim's plays",
                       lambda: list(filt(1, "victim").kept_ids) == FRESH, timeout=60)
    for c in chans:
        c.close()
    dds[1].stop()
    dds[0].stop()
    out = subprocess.run([harness.build_path("tests", "tools", "dddamage"),
                          dds[0].overrides["history.path"], "", "victim"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        harness.fail("dddamage on replica 0: %s %s" % (out.stdout, out.stderr))
    dds[1].start()
    dds[0].start()
    chans = [grpc.insecure_channel("127.0.0.1:%d" % p) for p in ports]
    stubs[:] = [pbg.DedupStub(c) for c in chans]
    harness.wait_until("both replicas ready again", lambda: ready(0) and ready(1), timeout=60)

    # The damaged replica asks a caught-up replica of its shard; until its
    # first probe of replica 1 has come back it knows none and refuses
    # (UNAVAILABLE, as it should). Wait until it sees replica 1 ready and
    # caught up, as its own map says (Dedup/ClusterMap).
    def sees_peer():
        m = stubs[0].ClusterMap(pb.ClusterMapRequest(), timeout=5)
        peer = [x for s in m.shards for x in s.replicas if not x.self]
        return bool(peer) and all(x.ready and 0 <= x.lag_ms <= m.max_lag_ms for x in peer)
    harness.wait_until("replica 0 sees replica 1 ready and caught up", sees_peer, timeout=60)
    for i in range(20):
        try:
            r = filt(0, "victim")
        except grpc.RpcError as e:
            harness.fail("replica 0 (damaged), call %d: %s %s; want OK from replica 1"
                         % (i, e.code(), e.details()))
        if list(r.kept_ids) != FRESH or r.degraded:
            harness.fail("replica 0 (damaged), call %d: kept %s degraded %s"
                         % (i, list(r.kept_ids), r.degraded))
    harness.log("replicas: 20 of 20 Filter calls to the damaged replica answered in full")
    if metric(admins[0], "dedupd_history_damaged_reads_total") < 1:
        harness.fail("replica 0 did not count its damaged reads")
    for c in chans:
        c.close()
    for d in dds:
        d.stop()
    redis.stop()
    broker.stop()


if __name__ == "__main__":
    main()
