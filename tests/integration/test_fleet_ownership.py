# SPDX-License-Identifier: Apache-2.0
"""A store knows whose it is, and nothing is empty by accident (issue 26,
cases 1 and 2), on loopback: the devbroker, one redis-server, dedupd
processes with their own data directories, Python grpcio clients.

Case 1, two shards' volumes swapped. A cluster of 2 shards x 1 replica
(A = shard 0, B = shard 1) ingests plays of 40 users and finds them all.
Both stop; their history directories are swapped; both start again.
  - No Filter call is answered OK with degraded = false while keeping a
    played item (before: every played item of the other shard's users was
    served again, and both nodes said ready).
  - Both are not ready (/readyz 503) and every call is UNAVAILABLE, both
    naming the two ownerships; dedupd_history_ownership_mismatch 1; an
    error in the log.
  - The record is not erased: restarted once more, both still refuse.
  - After the explicit take-over (dedupd --take-over, one start each) both
    serve again and every played item is found (a taken-over store lacks
    its new shard's partitions' positions; their logs start at offset 0,
    so they are replayed whole).

Case 2, empty by accident. A topic whose log no longer starts at offset 0
(filler messages push the devbroker's 5 MB per partition past its first
plays, as test_snapshot.py does):
  - a new replica bootstraps (cluster.bootstrap = peer) from a peer whose
    manifest lists zero files: refused, not ready, the node says why and
    keeps trying (before: "snapshot installed files=0", ready, and the old
    plays served again);
  - a new empty node (cluster.bootstrap = none) on the truncated log: not
    ready with the gap (and nothing consumed, so a restart finds it
    again); declared with ingest.accept_truncated_log = true it serves.

A single node's store started under another ingest.topic is refused too.
"""
import os
import subprocess
import sys
import time
from concurrent import futures

import harness
import test_ingest_lib as il
from test_clients_lib import python_stubs

pb, pbg, grpc = python_stubs()

USERS = 40
ITEMS = 3
FILLER = 3200        # 2 KB each, uncompressed: over the devbroker's 5 MB of one partition


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def metric(admin, name):
    st, body = harness.http_get(admin, "/metrics")
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def start_args(dd, extra=()):
    """Start DD with EXTRA command-line arguments, waiting for msg=ready."""
    dd._log_from = os.path.getsize(dd.logpath) if os.path.exists(dd.logpath) else 0
    dd.proc = harness.Proc([harness.build_path("src", "dedupd")] + dd.option_args() + list(extra),
                           dd.name, logfile=dd.logpath, env=dd.env)


def start_nowait(dd):
    start_args(dd)


def produce(broker, plays, topic="plays", extra=()):
    path = os.path.join(harness.tmpdir("dedupd-plays-"), "plays.tsv")
    il.write_lines(path, plays)
    argv = [harness.build_path("tests", "tools", "ddproduce"), "-b", broker.addr, "-t", topic,
            "-F", "json", "-X", "partitioner=murmur2_random"]
    for x in extra:
        argv += ["-X", x]
    r = subprocess.run(argv + [path], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, "ddproduce failed: %s %s" % (r.stdout, r.stderr))


def sweep_filter(port, users, what):
    """Filter each user's played items and a fresh one through PORT. Returns
    (answers OK and complete, errors with their messages, violations: OK
    with degraded = false keeping a played item)."""
    ok, errors, bad = 0, [], []
    with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
        stub = pbg.DedupStub(ch)
        for u in users:
            ids = ["v-%s-%d" % (u, k) for k in range(ITEMS)] + ["fresh-%s" % u]
            try:
                r = stub.Filter(pb.FilterRequest(user_id=u, candidate_ids=ids), timeout=10)
            except grpc.RpcError as e:
                errors.append((e.code(), e.details()))
                continue
            kept = [i for i in r.kept_ids if not i.startswith("fresh-")]
            if kept and not r.degraded:
                bad.append((u, kept))
            elif not kept:
                ok += 1
    harness.log("%s: %d complete, %d errors, %d played items served again" % (
        what, ok, len(errors), len(bad)))
    return ok, errors, bad


def case1(broker, redis):
    ports = [harness.free_port(), harness.free_port()]
    admins = [harness.free_port(), harness.free_port()]
    nodes = "127.0.0.1:%d;127.0.0.1:%d" % tuple(ports)

    def node(shard):
        o = il.ingest_overrides(broker, group="dd-own")
        o.update({
            "rpc.listen": "127.0.0.1:%d" % ports[shard],
            "admin.listen": "127.0.0.1:%d" % admins[shard],
            "cluster.shards": "2", "cluster.shard": str(shard), "cluster.replica": "0",
            "cluster.nodes": nodes, "cluster.redis": "%s;%s" % (redis.addr, redis.addr),
            "cluster.health_interval_ms": "200", "cluster.max_lag_ms": "3000",
            "window.flush_ms": "100", "ingest.durable_interval_ms": "500",
        })
        return harness.Dedupd(o, name="own-%d" % shard)

    a, b = node(0), node(1)
    users = ["own-user-%03d" % i for i in range(USERS)]
    produce(broker, [(u, "v-%s-%d" % (u, k), None, None) for u in users for k in range(ITEMS)])
    harness.wait_until("both nodes find every play", lambda: all(
        sweep_filter(p, users, "before")[0] == USERS for p in ports), timeout=120, every=1)
    il.wait_idle(a, quiet=1.5)
    il.wait_idle(b, quiet=1.5)

    # ---- the volumes swapped, both restarted ----------------------------
    a.stop()
    b.stop()
    pa, pb_ = a.overrides["history.path"], b.overrides["history.path"]
    a.overrides["history.path"], b.overrides["history.path"] = pb_, pa
    a.start()
    b.start()
    time.sleep(1.5)   # health rounds: under the old behaviour both turned ready here
    violations = []
    for dd, port, admin, me, other in ((a, ports[0], admins[0], "shard=0", "shard=1"),
                                       (b, ports[1], admins[1], "shard=1", "shard=0")):
        ok, errors, bad = sweep_filter(port, users, "swapped %s" % dd.name)
        violations += bad
        st, body = harness.http_get(admin, "/readyz")
        harness.log("%s /readyz %d %s" % (dd.name, st, body.strip()))
        check(not bad, "%s: played items served again with degraded = false: %s" % (
            dd.name, bad[:5]))
        check(st == 503, "%s on the other shard's store: /readyz %d %s" % (dd.name, st, body))
        check("ownership mismatch" in body and me in body and other in body,
              "%s: /readyz does not name both ownerships: %s" % (dd.name, body))
        check(ok == 0 and len(errors) == USERS, "%s answered %d calls from a foreign store" % (
            dd.name, ok))
        for code, details in errors:
            check(code == grpc.StatusCode.UNAVAILABLE, "%s: %s %s" % (dd.name, code, details))
            check(me in details and other in details,
                  "%s: the UNAVAILABLE message names not both ownerships: %s" % (dd.name, details))
        check(metric(admin, "dedupd_history_ownership_mismatch") == 1,
              "%s: dedupd_history_ownership_mismatch is not 1" % dd.name)
        check("the store belongs to another ownership" in dd.run_log(),
              "%s: no error in the log" % dd.name)
    check(not violations, "violations: %s" % violations[:5])
    harness.log("swapped volumes: both refuse, naming both ownerships")

    # ---- the record is not erased ---------------------------------------
    time.sleep(2)     # the sweep of the old behaviour ran once the cluster settled
    a.stop()
    b.stop()
    a.start()
    b.start()
    for dd, admin in ((a, admins[0]), (b, admins[1])):
        st, body = harness.http_get(admin, "/readyz")
        check(st == 503 and "ownership mismatch" in body,
              "%s restarted: the mismatch is gone (%d %s)" % (dd.name, st, body))
    harness.log("restarted: both still refuse (the record was kept)")

    # ---- the explicit take-over -----------------------------------------
    for dd in (a, b):
        dd.stop()
        start_args(dd, ["--take-over"])
        dd.wait_log("msg=ready", timeout=60)
        check("store taken over" in dd.run_log(), "%s: no take-over logged" % dd.name)
    harness.wait_until("both ready after the take-over", lambda: all(
        harness.http_get(p, "/readyz")[0] == 200 for p in admins), timeout=60)
    harness.wait_until("every play found after the take-over", lambda: all(
        sweep_filter(p, users, "taken over")[0] == USERS for p in ports), timeout=60, every=1)
    for dd, admin in ((a, admins[0]), (b, admins[1])):
        check(metric(admin, "dedupd_history_ownership_mismatch") == 0, "%s: mismatch" % dd.name)
    # a plain restart now serves: the take-over was recorded
    a.stop()
    a.start()
    harness.wait_until("A ready after a plain restart",
                       lambda: harness.http_get(admins[0], "/readyz")[0] == 200, timeout=60)
    a.stop()
    b.stop()
    harness.log("case 1: refused until taken over, then served")


class EmptyLender:
    """A peer of the map whose SnapshotBegin lends a manifest of no files."""

    def __init__(self, port):
        def begin(req, ctx):
            self.asked += 1
            return pb.SnapshotManifest(id="1-1", ready=True)

        self.asked = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "dedup.v1.Cluster", {"SnapshotBegin": grpc.unary_unary_rpc_method_handler(
                begin, request_deserializer=pb.SnapshotBeginRequest.FromString,
                response_serializer=pb.SnapshotManifest.SerializeToString)}),))
        self.server.add_insecure_port("127.0.0.1:%d" % port)
        self.server.start()

    def stop(self):
        self.server.stop(0)


def first_offset(broker, topic):
    r = subprocess.run(["kcat", "-C", "-b", broker.addr, "-t", topic, "-p", "0",
                        "-o", "beginning", "-c", "1", "-e", "-q", "-f", "%o\\n"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "kcat: %s" % r.stderr)
    return int(r.stdout.split()[0])


def case2(broker, redis):
    users = ["old-user-%02d" % i for i in range(50)]
    produce(broker, [(u, "v-%s-%d" % (u, k), None, None) for u in users for k in range(ITEMS)],
            topic="trunc")
    filler = [("filler-%05d" % i, "f%d-" % i + "x" * 2000, None, None) for i in range(FILLER)]
    produce(broker, filler, topic="trunc", extra=("compression.type=none",))
    start = first_offset(broker, "trunc")
    harness.log("the topic trunc now starts at offset %d" % start)
    check(start > 0, "the log still starts at offset 0")

    lend_port, port, admin = harness.free_port(), harness.free_port(), harness.free_port()
    nodes = "127.0.0.1:%d,127.0.0.1:%d" % (lend_port, port)

    def node(name, extra):
        o = il.ingest_overrides(broker, group="dd-trunc")
        o.update({
            "ingest.topic": "trunc",
            "rpc.listen": "127.0.0.1:%d" % port, "admin.listen": "127.0.0.1:%d" % admin,
            "cluster.shards": "1", "cluster.shard": "0", "cluster.replica": "1",
            "cluster.nodes": nodes, "cluster.redis": redis.addr,
            "cluster.health_interval_ms": "200", "cluster.max_lag_ms": "3000",
            "window.flush_ms": "100", "ingest.durable_interval_ms": "500",
        })
        o.update(extra)
        return harness.Dedupd(o, name=name, start=False)

    # ---- a copy from a peer whose manifest lists no files ---------------
    lender = EmptyLender(lend_port)
    c = node("own-copy", {"cluster.bootstrap": "peer"})
    start_nowait(c)
    harness.wait_until("the copy asked the peer twice (or installed it)", lambda: (
        lender.asked >= 2 or "snapshot installed" in c.run_log()), timeout=30)
    time.sleep(0.5)
    log = c.run_log()
    st, body = harness.http_get(admin, "/readyz")
    harness.log("copy from an empty manifest: /readyz %d %s" % (st, body.strip()))
    check("snapshot installed" not in log, "an empty manifest was installed:\n" + log[-2000:])
    check("lists no files" in log, "the refusal is not said:\n" + log[-2000:])
    check(st == 503, "ready after an empty copy: %d %s" % (st, body))
    check("lists no files" in body, "/readyz does not say why: %s" % body)
    check(not os.path.exists(os.path.join(c.overrides["history.path"], "CURRENT")),
          "a store was made from the empty copy")
    c.stop(timeout=30)
    lender.stop()

    # ---- a new empty node on the truncated log --------------------------
    d = node("own-empty", {"cluster.bootstrap": "none"})
    start_nowait(d)
    d.wait_log("msg=ready", timeout=60)
    harness.wait_until("the gap found (or ready)", lambda: (
        "no longer starts at offset 0" in d.run_log() or
        harness.http_get(admin, "/readyz")[0] == 200), timeout=30)
    time.sleep(1)
    st, body = harness.http_get(admin, "/readyz")
    harness.log("new empty node on a truncated log: /readyz %d %s" % (st, body.strip()))
    check(st == 503 and "plays missing" in body, "empty store on a truncated log: %d %s" % (
        st, body))
    check((metric(admin, "dedupd_ingest_log_gaps_total") or 0) >= 1, "no log gap counted")
    # a restart finds it again (nothing was consumed past the gap)
    d.stop()
    start_nowait(d)
    d.wait_log("msg=ready", timeout=60)
    harness.wait_until("the gap found again", lambda: harness.http_get(admin, "/readyz")[1].find(
        "plays missing") >= 0, timeout=30)
    # declared: the plays before the log's start are not needed
    d.stop()
    d.overrides["ingest.accept_truncated_log"] = "true"
    start_nowait(d)
    d.wait_log("msg=ready", timeout=60)
    harness.wait_until("ready once declared",
                       lambda: harness.http_get(admin, "/readyz")[0] == 200, timeout=60)
    check("accepted (ingest.accept_truncated_log)" in d.run_log(), "the declaration not logged")
    d.stop()
    harness.log("case 2: an empty copy refused; a truncated log is a gap unless declared")


def single_moved():
    """A single node's store carried to a deployment of another topic."""
    admin = harness.free_port()
    dd = harness.Dedupd({"admin.listen": "127.0.0.1:%d" % admin, "ingest.enabled": "false",
                         "ingest.topic": "plays"}, name="own-single")
    check(harness.http_get(admin, "/readyz")[0] == 200, "single node not ready")
    dd.stop()
    dd.overrides["ingest.topic"] = "plays-eu"
    dd.start()
    st, body = harness.http_get(admin, "/readyz")
    check(st == 503 and "topic=plays " in body and "topic=plays-eu " in body,
          "a single node's store under another topic: %d %s" % (st, body))
    _, errors, bad = sweep_filter(dd.rpc_port, ["u1"], "single node, moved")
    check(not bad and errors and errors[0][0] == grpc.StatusCode.UNAVAILABLE,
          "moved single-node store answered: %s %s" % (errors, bad))
    dd.stop()
    harness.log("a single node's store under another topic: refused")


def main():
    broker = harness.DevBroker(topics=("plays:4", "trunc:1"))
    redis = harness.Redis()
    only = sys.argv[1] if len(sys.argv) > 1 else ""   # "case1" or "case2": one of them
    t0 = time.time()
    if only != "case2":
        case1(broker, redis)
    t1 = time.time()
    if only != "case1":
        case2(broker, redis)
        single_moved()
    harness.log("case 1 %.1f s, case 2 %.1f s" % (t1 - t0, time.time() - t1))
    harness.log("PASS")


if __name__ == "__main__":
    main()
