#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Full disk: dedupd's store on a 64 MiB tmpfs in a private mount namespace
(the test re-executes itself under `unshare -m`; it needs root, which CI
has: there a missing capability fails, locally it skips). Twice: with
history.min_free_mb = 8 (dedupd refuses writes before RocksDB meets the
full disk), and with 0 (RocksDB's flush fails with ENOSPC, RocksDB stops
writing with a background error and must resume by itself), with Kafka
ingest's durable points as memtable flushes (ingest.durable = flush); then
with 8 and ingest.durable = wal (windows through the WAL, the durable point
a WAL sync: the reserve keeps the WAL from meeting the full disk, which
would need a restart, as run_wal shows). With Kafka ingest and RecordPlays:

1. plays A are ingested and made durable; a RecordPlays is stored;
2. a filler file takes every free byte of the filesystem; plays B are
   produced meanwhile. RecordPlays and ForgetUser answer UNAVAILABLE "no
   space left on device", Filter still removes what was stored, /readyz
   stays 200 and says "degraded: store not writable", /metrics says
   dedupd_history_writable 0 and counts the refusals, and no offset past A
   becomes durable (so none is committed);
3. the filler is deleted: the store becomes writable by itself, plays B and
   the C produced after it are written and made durable, RecordPlays works
   again, and every play (A, B, C, RecordPlays) is filtered; after a clean
   stop the store has all of them and a restart consumes nothing again.
Then without ingest and without the reserve, a RecordPlays whose WAL append
fails (run_wal).
"""
import errno
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import harness
import test_ingest_lib as il
from test_clients_lib import python_stubs

NS_MARK = "DD_FULL_DISK_NS"
USERS = 40
DURABLE_RE = re.compile(r"module=ingest msg=durable .*?messages_durable=(\d+)")


def reexec_in_namespace():
    """Run this test again in a private mount namespace (mounts made there
    vanish with it)."""
    if os.geteuid() != 0:
        harness.skip("needs root to mount a tmpfs (CI runs as root)")
    unshare = shutil.which("unshare")
    if not unshare:
        harness.skip("unshare (util-linux) missing")
    env = dict(os.environ, **{NS_MARK: "1"})
    r = subprocess.run([unshare, "-m", "--propagation", "private", sys.executable,
                        os.path.abspath(__file__)], env=env)
    sys.exit(r.returncode)


def metric(text, name):
    """The value of NAME (with its labels, if any, as written) in TEXT."""
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def durable(dd):
    m = DURABLE_RE.findall(dd.run_log())
    return int(m[-1]) if m else 0


def fill(path):
    """Write PATH until the filesystem is full; returns the bytes written."""
    n = 0
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                n += f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        # the last partial chunk, byte-exact down to nothing free
        for size in (65536, 4096, 1):
            while True:
                try:
                    n += f.write(b"\0" * size)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
    return n


def plays(tag, n):
    return [("fd%03d" % (i % USERS), "%s-%d" % (tag, i), None) for i in range(n)]


def run(mnt, min_free_mb, durable_mode="flush"):
    harness.log("== history.min_free_mb = %d, ingest.durable = %s" % (min_free_mb, durable_mode))
    pb, pbg, grpc = python_stubs()
    redis = harness.Redis()
    broker = harness.DevBroker(("plays:2",))
    admin = harness.free_port()
    # A short session (as test_ingest_durable.py) so the restart at the end
    # rejoins the mock cluster's group quickly.
    dd = harness.Dedupd(il.ingest_overrides(broker, **{
        "history.path": os.path.join(mnt, "db"),
        "history.min_free_mb": str(min_free_mb),
        "ingest.durable": durable_mode,
        "kafka.session.timeout.ms": "6000",
        "kafka.heartbeat.interval.ms": "300",
        "rocksdb.write_buffer_size": "1048576",
        "ingest.durable_interval_ms": "500",
        "window.flush_ms": "100",
        "admin.listen": "127.0.0.1:%d" % admin,
        "recent.redis": redis.addr,
    }))
    ch = grpc.insecure_channel("127.0.0.1:%d" % dd.rpc_port)
    grpc.channel_ready_future(ch).result(timeout=20)
    stub = pbg.DedupStub(ch)

    def record(user, item):
        stub.RecordPlays(pb.RecordPlaysRequest(user_id=user, plays=[pb.Play(item_id=item)]),
                         timeout=10)

    def kept(user, items):
        r = stub.Filter(pb.FilterRequest(user_id=user, candidate_ids=items), timeout=10)
        return list(r.kept_ids)

    def require_filtered(ps, what):
        by_user = {}
        for u, item, _ in ps:
            by_user.setdefault(u, []).append(item)
        for u, items in by_user.items():
            k = kept(u, items)
            if k:
                harness.fail("%s: %d of %d plays of %s not filtered, e.g. %s"
                             % (what, len(k), len(items), u, k[:3]))
        harness.log("%s: all %d plays filtered" % (what, len(ps)))

    def scrape():
        st, text = harness.http_get(admin, "/metrics")
        if st != 200:
            harness.fail("/metrics answered %d" % st)
        return text

    # 1. A ingested and durable, one RecordPlays.
    a = plays("a", 4000)
    il.produce(broker, a)
    harness.wait_until("plays A durable", lambda: durable(dd) >= len(a), 60)
    record("rp", "before")
    require_filtered(a, "A before the disk fills")

    # 2. The disk fills.
    filler = os.path.join(mnt, "filler")
    harness.log("filling %s: %d MiB" % (mnt, fill(filler) >> 20))
    durable_at_fill = durable(dd)
    b = plays("b", 4000)
    il.produce(broker, b)
    harness.wait_until("plays B consumed",
               lambda: (metric(scrape(), 'dedupd_ingest_messages_total{result="ok"}') or 0)
               >= len(a) + len(b), 60)
    # Without the reserve, RocksDB itself must have met the full disk (a
    # flush failed: it stops writing) before RecordPlays tries.
    harness.wait_until("a store write refused",
               lambda: metric(scrape(), 'dedupd_history_write_errors_total{kind="no_space"}'), 30)
    try:
        record("rp", "during")
        harness.fail("RecordPlays succeeded on a full disk")
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNAVAILABLE or "no space left on device" not in e.details():
            harness.fail("RecordPlays on a full disk: %s %r" % (e.code(), e.details()))
        harness.log("RecordPlays: UNAVAILABLE %r" % e.details())
    try:
        stub.ForgetUser(pb.ForgetUserRequest(user_id=a[0][0]), timeout=10)
        harness.fail("ForgetUser succeeded on a full disk")
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNAVAILABLE or "no space left on device" not in e.details():
            harness.fail("ForgetUser on a full disk: %s %r" % (e.code(), e.details()))
    require_filtered(a + [("rp", "before", None)], "A during the outage")
    st, body = harness.http_get(admin, "/readyz")
    if st != 200 or "degraded: store not writable" not in body:
        harness.fail("/readyz on a full disk: %d %r" % (st, body))
    harness.log("/readyz: %d %r" % (st, body.strip()))
    text = scrape()
    if metric(text, "dedupd_history_writable") != 0:
        harness.fail("dedupd_history_writable is %s on a full disk"
                     % metric(text, "dedupd_history_writable"))
    if not metric(text, 'dedupd_history_write_errors_total{kind="no_space"}'):
        harness.fail("no refused write counted")
    time.sleep(2)  # several flusher retries and durability deadlines
    if durable(dd) != durable_at_fill or durable_at_fill > len(a):
        harness.fail("offsets made durable on a full disk: %d then %d (A has %d)"
                     % (durable_at_fill, durable(dd), len(a)))
    if not dd.alive():
        harness.fail("dedupd died on a full disk:\n" + dd.proc.tail())
    if metric(text, "dedupd_history_wal_failed") != 0:
        harness.fail("the WAL failed: dedupd needs a restart")

    # 3. Room again: it resumes by itself.
    os.unlink(filler)
    t0 = time.time()
    harness.wait_until("store writable again", lambda: metric(scrape(), "dedupd_history_writable") == 1,
               30)
    harness.log("writable again after %.1fs" % (time.time() - t0))
    c = plays("c", 4000)
    il.produce(broker, c)
    total = len(a) + len(b) + len(c)
    harness.wait_until("every play durable", lambda: durable(dd) >= total, 60)
    record("rp", "after")
    require_filtered(a + b + c + [("rp", "before", None), ("rp", "after", None)],
                     "after the outage")
    st, body = harness.http_get(admin, "/readyz")
    if st != 200 or "degraded" in body:
        harness.fail("/readyz after the outage: %d %r" % (st, body))
    ch.close()

    stats = il.stop_stats(dd)
    if stats["messages_durable"] != total:
        harness.fail("not everything durable at stop: %s" % stats)
    il.require_all_seen(dd, a + b + c + [("rp", "before", None), ("rp", "after", None)],
                        "store after the outage")
    dd.start()
    il.wait_idle(dd, quiet=2.0)
    again = il.stop_stats(dd)
    if again["messages"] != 0:
        harness.fail("a restart consumed %d messages again: offsets were not committed"
                     % again["messages"])
    redis.stop()
    broker.stop()
    shutil.rmtree(os.path.join(mnt, "db"))


def run_wal(mnt):
    """No reserve, no ingest: RecordPlays' WAL append meets the full disk.
    RocksDB 7.8 cannot reuse that WAL writer (Debian's build aborts at its
    next append), so dedupd refuses writes from then on, says so, keeps
    serving Filter, survives the space coming back and stops cleanly; a
    restart writes again and has every acknowledged play."""
    harness.log("== history.min_free_mb = 0, RecordPlays only: the WAL fails")
    pb, pbg, grpc = python_stubs()
    redis = harness.Redis()
    admin = harness.free_port()
    dd = harness.Dedupd({"history.path": os.path.join(mnt, "db"), "history.min_free_mb": "0",
                         "history.sync": "false", "ingest.enabled": "false",
                         # no WAL preallocation, whose slack would take the
                         # first writes after the disk fills
                         "rocksdb.allow_fallocate": "false",
                         "recent.redis": redis.addr, "admin.listen": "127.0.0.1:%d" % admin})

    def connect():
        ch = grpc.insecure_channel("127.0.0.1:%d" % dd.rpc_port)
        grpc.channel_ready_future(ch).result(timeout=20)
        return ch, pbg.DedupStub(ch)

    def record(stub, item):
        stub.RecordPlays(pb.RecordPlaysRequest(user_id="w", plays=[pb.Play(item_id=item)]),
                         timeout=10)

    def refused(stub, item, what):
        try:
            record(stub, item)
            harness.fail("RecordPlays succeeded %s" % what)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or "no space" not in e.details():
                harness.fail("RecordPlays %s: %s %r" % (what, e.code(), e.details()))

    ch, stub = connect()
    record(stub, "w1")
    filler = os.path.join(mnt, "filler")
    fill(filler)
    # The WAL's last page still has room for a few records: write until a
    # call is refused (each call is about 10 KiB of WAL).
    for i in range(200):
        try:
            stub.RecordPlays(pb.RecordPlaysRequest(user_id="w", plays=[
                pb.Play(item_id="fill-%d-%d" % (i, j)) for j in range(1000)]), timeout=10)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or "no space" not in e.details():
                harness.fail("RecordPlays on a full disk: %s %r" % (e.code(), e.details()))
            harness.log("RecordPlays refused after %d calls: %r" % (i, e.details()))
            break
    else:
        harness.fail("RecordPlays never refused on a full disk")
    refused(stub, "w2", "on a full disk")
    text = harness.http_get(admin, "/metrics")[1]
    if metric(text, "dedupd_history_wal_failed") != 1 or metric(text, "dedupd_history_writable"):
        harness.fail("WAL failure not reported: wal_failed=%s writable=%s" % (
            metric(text, "dedupd_history_wal_failed"), metric(text, "dedupd_history_writable")))
    st, body = harness.http_get(admin, "/readyz")
    if st != 200 or "restart dedupd" not in body:
        harness.fail("/readyz after a WAL failure: %d %r" % (st, body))
    os.unlink(filler)
    time.sleep(6)  # RocksDB's own resume (every 5 s) has had its chance
    refused(stub, "w3", "after a WAL failure, space back")
    r = stub.Filter(pb.FilterRequest(user_id="w", candidate_ids=["w1", "x"]), timeout=10)
    if list(r.kept_ids) != ["x"]:
        harness.fail("Filter after a WAL failure kept %s" % list(r.kept_ids))
    ch.close()
    dd.stop()
    dd.start()
    ch, stub = connect()
    record(stub, "w4")
    r = stub.Filter(pb.FilterRequest(user_id="w", candidate_ids=["w1", "w4", "x"]), timeout=10)
    if list(r.kept_ids) != ["x"]:
        harness.fail("after the restart Filter kept %s" % list(r.kept_ids))
    harness.log("WAL failure: refused, survived, restarted with every acknowledged play")
    ch.close()
    dd.stop()
    redis.stop()
    shutil.rmtree(os.path.join(mnt, "db"))


def main():
    if not os.environ.get(NS_MARK):
        reexec_in_namespace()
    mnt = tempfile.mkdtemp(prefix="dedupd-fulldisk-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(mnt)
        harness.skip("cannot mount a tmpfs: %s" % r.stderr.strip())
    try:
        run(mnt, 8)
        run(mnt, 0)
        run(mnt, 8, "wal")
        run_wal(mnt)
    finally:
        harness._cleanup()
        subprocess.run(["umount", "-l", mnt])
        os.rmdir(mnt)
    harness.log("PASS")


if __name__ == "__main__":
    main()
