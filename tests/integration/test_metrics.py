#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Operations, end to end, on real processes: redis-server, the devbroker
(librdkafka's mock cluster over TCP), dedupd from the build tree, Python
gRPC clients.

1. Readiness while the store opens: the history directory's CURRENT file is
   replaced by a FIFO, so RocksDB's open blocks reading it until the test
   writes the real content. Meanwhile /healthz is 200 and /readyz is 503
   "store not open"; once fed, /readyz turns 200 by itself.
2. /metrics around real traffic, each scrape parsed strictly (every sample
   under a # TYPE, histogram series with ascending le ending in +Inf, then
   _sum and _count == the +Inf bucket, counters never going down):
   Filter / RecordDelivery / RecordPlays / a bad Filter move
   dedupd_rpc_requests_total{method,code}, dedupd_rpc_duration_seconds,
   dedupd_filter_candidates and dedupd_filter_removed_total{reason} by
   exactly what was sent; Kafka plays, good and of every bad kind, move
   dedupd_ingest_messages_total{result} and dedupd_plays_written_total
   by exactly their numbers, and flushes show in
   dedupd_flush_duration_seconds; consumer lag per partition appears and
   drains to 0; a Redis outage moves dedupd_filter_degraded_total and
   dedupd_recent_errors_total and RecordDelivery's UNAVAILABLE count.
3. `dedupctl stats` against the live admin listener: a numeric consumer lag
   as soon as partitions are assigned, before any message (librdkafka's
   consumer_lag is -1 until the group commits an offset, and dedupd
   commits none before it has written plays: it showed "-"), and the
   same numbers as /metrics later.
4. SIGHUP with log.file: rename the file, HUP, new lines land in a new file.
5. SIGTERM with admin.drain_ms: /readyz is 503 "stopping" and gRPC health
   NOT_SERVING at once, while Filter calls are still answered; then dedupd
   exits 0 and its last lines are in the reopened log file.
"""
import errno
import http.client
import math
import os
import re
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import fail, log  # noqa: E402
from test_clients_lib import python_stubs  # noqa: E402


# ---- a strict Prometheus text format 0.0.4 reader (independent of promtext.c)

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)( -?\d+)?$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def parse_labels(s):
    out = {}
    pos = 0
    while pos < len(s):
        m = LABEL.match(s, pos)
        if not m:
            raise ValueError("bad labels {%s}" % s)
        out[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        pos = m.end()
    return out


def parse(text):
    """{(name, frozenset(labels)): value}; raises ValueError on any violation."""
    types = {}
    samples = {}
    cur = None       # current family
    closed = set()   # families already finished
    hist = None      # (family, series key) being checked: [last_le, last_count, inf, sum, count]

    def close_hist():
        nonlocal hist
        if hist is not None:
            (fam, key), st = hist
            if st["inf"] is None or st["sum"] is None or st["count"] is None:
                raise ValueError("histogram %s%s incomplete: %r" % (fam, dict(key), st))
        hist = None

    for n, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                fam = parts[2]
                if fam != cur:
                    close_hist()
                    if cur is not None:
                        closed.add(cur)
                    if fam in closed:
                        raise ValueError("line %d: family %s appears twice" % (n, fam))
                    cur = fam
                if parts[1] == "TYPE":
                    if fam in types:
                        raise ValueError("line %d: second TYPE for %s" % (n, fam))
                    types[fam] = parts[3]
            continue
        m = LINE.match(line)
        if not m:
            raise ValueError("line %d: not a sample: %r" % (n, line))
        name, labels, value = m.group(1), parse_labels(m.group(3) or ""), float(m.group(4))
        fam = name
        if cur is not None and types.get(cur) == "histogram":
            for suf in ("_bucket", "_sum", "_count"):
                if name == cur + suf:
                    fam = cur
        if fam != cur or cur not in types:
            raise ValueError("line %d: sample %s without its # TYPE right before it" % (n, name))
        if types[fam] == "histogram":
            if fam == name:
                raise ValueError("line %d: bare histogram sample %s" % (n, name))
            key = frozenset((k, v) for k, v in labels.items() if k != "le")
            if name.endswith("_bucket"):
                le = float(labels["le"])
                if hist is None or hist[0] != (fam, key):
                    close_hist()
                    hist = ((fam, key), {"le": -math.inf, "c": 0, "inf": None, "sum": None,
                                         "count": None})
                st = hist[1]
                if st["inf"] is not None or le <= st["le"] or value < st["c"]:
                    raise ValueError("line %d: bucket order/count violated in %s" % (n, name))
                st["le"], st["c"] = le, value
                if math.isinf(le):
                    st["inf"] = value
            else:
                if hist is None or hist[0] != (fam, key) or hist[1]["inf"] is None:
                    raise ValueError("line %d: %s before its buckets end with +Inf" % (n, name))
                which = "sum" if name.endswith("_sum") else "count"
                hist[1][which] = value
                if which == "count" and value != hist[1]["inf"]:
                    raise ValueError("line %d: %s != +Inf bucket" % (n, name))
        samples[(name, frozenset(labels.items()))] = value
    close_hist()
    return types, samples


class Scrape:
    def __init__(self, port):
        self.text = http_get(port, "/metrics")[1]
        try:
            self.types, self.samples = parse(self.text)
        except ValueError as e:
            fail("/metrics is not valid Prometheus text: %s" % e)

    def get(self, name, **labels):
        """Sum of samples NAME whose labels include LABELS; None if none."""
        want = set(labels.items())
        vals = [v for (n, ls), v in self.samples.items() if n == name and want <= set(ls)]
        return sum(vals) if vals else None

    def series(self, name):
        return {dict(ls).get("partition"): v for (n, ls), v in self.samples.items() if n == name}


def http_get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def delta(before, after, name, **labels):
    a = after.get(name, **labels)
    b = before.get(name, **labels) or 0
    if a is None:
        fail("no sample %s%s" % (name, labels))
    return a - b


def expect(before, after, name, want, **labels):
    d = delta(before, after, name, **labels)
    if d != want:
        fail("%s%s moved by %s, want %s" % (name, labels, d, want))


def counters_monotonic(before, after):
    for (name, ls), v in before.samples.items():
        fam = name
        for suf in ("_bucket", "_sum", "_count"):
            if name.endswith(suf) and after.types.get(name[:-len(suf)]) == "histogram":
                fam = name[:-len(suf)]
        if after.types.get(fam) in ("counter", "histogram"):
            w = after.samples.get((name, ls))
            if w is not None and w < v:
                fail("counter %s%s went down: %s -> %s" % (name, dict(ls), v, w))


# ---- processes --------------------------------------------------------------

class DevBroker:
    def __init__(self):
        exe = harness.build_path("tools", "devbroker")
        d = harness.tmpdir("dedupd-broker-")
        self.file = os.path.join(d, "bootstrap")
        self.proc = harness.Proc([exe, "--topic", "plays:4", "--bootstrap-file", self.file],
                                 "devbroker")
        t0 = time.time()
        while not os.path.exists(self.file):
            if not self.proc.alive() or time.time() - t0 > 20:
                fail("devbroker did not start: %s" % self.proc.tail())
            time.sleep(0.05)
        self.addr = open(self.file).read().strip()


def start_dedupd(opts, name, env=None):
    argv = [harness.build_path("src", "dedupd")]
    for k, v in opts.items():
        argv += ["-o", "%s=%s" % (k, v)]
    return harness.Proc(argv, name, env=env)


# dedupctl stats' lag line: [MS ms behind; ]N messages over P partitions
STATS_LAG = re.compile(r"^consumer lag +(?:(\d+) ms behind; )?(\d+) messages over (\d+) partitions",
                       re.M)


def stats(ctl, admin):
    """`dedupctl stats` of the admin listener on port ADMIN: its stdout."""
    r = subprocess.run([ctl, "stats", "127.0.0.1:%d" % admin], capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        fail("dedupctl stats: %d %s" % (r.returncode, r.stderr))
    return r.stdout


def wait_until(what, cond, timeout=30.0, every=0.1):
    t0 = time.time()
    while True:
        v = cond()
        if v:
            return v
        if time.time() - t0 > timeout:
            fail("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(every)


# ---- 1. readiness while the store opens ----------------------------------------

def test_readiness_before_store(redis):
    d = harness.tmpdir("dedupd-ready-")
    db = os.path.join(d, "db")
    admin = harness.free_port()
    opts = {"history.path": db, "trace.path": os.path.join(d, "trace"),
            "ingest.enabled": "false", "rpc.listen": "127.0.0.1:0",
            "admin.listen": "127.0.0.1:%d" % admin, "recent.redis": redis.addr}
    p = start_dedupd(opts, "dedupd-create")
    wait_until("first store created", lambda: http_get_ok(admin, "/readyz") == 200)
    if p.stop() != 0:
        fail("dedupd exit: %s" % p.tail())
    current = os.path.join(db, "CURRENT")
    content = open(current, "rb").read()
    os.unlink(current)
    os.mkfifo(current)
    p = start_dedupd(opts, "dedupd-blocked")
    wait_until("admin listener", lambda: http_get_ok(admin, "/healthz") == 200)
    for _ in range(5):  # the store stays unopened for as long as we hold it
        st, body = http_get(admin, "/readyz")
        if st != 503 or "store not open" not in body:
            fail("/readyz while the store opens: %d %r" % (st, body))
        s = Scrape(admin)
        if s.get("dedupd_ready") != 0 or s.get("dedupd_component_ready", component="store") != 0:
            fail("dedupd_ready / component store not 0 while the store opens")
        time.sleep(0.1)
    log("store opening: /healthz 200, /readyz 503 %r" % body.strip())
    feed_fifo(current, content, lambda: http_get_ok(admin, "/readyz") == 200 or not p.alive())
    if not p.alive():
        fail("dedupd exited after the store was fed: %s" % p.tail())
    log("store open: /readyz 200")
    if p.stop() != 0:
        fail("dedupd exit: %s" % p.tail())


def feed_fifo(path, content, done, timeout=30.0):
    """Serve CONTENT to every open of the FIFO at PATH until DONE() (RocksDB
    opens CURRENT twice: once to look, once to read). Stops writing as soon
    as PATH is no longer a FIFO (RocksDB replaced it), never clobbering it."""
    t0 = time.time()
    while not done():
        if time.time() - t0 > timeout:
            fail("the store did not open within %.0f s of being fed" % timeout)
        if not os.path.exists(path) or not stat.S_ISFIFO(os.stat(path).st_mode):
            time.sleep(0.01)
            continue
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno not in (errno.ENXIO, errno.ENOENT):  # ENXIO: no reader yet
                raise
            time.sleep(0.001)
            continue
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.set_blocking(fd, True)
                os.write(fd, content)
        except BrokenPipeError:
            pass  # the reader only looked and closed
        finally:
            os.close(fd)
        # Let this reader read to the end and close before the next open is
        # served: a write end opened while it still reads would add a second
        # copy to what it reads ("CURRENT file corrupted").
        time.sleep(0.2)


def http_get_ok(port, path):
    try:
        return http_get(port, path)[0]
    except OSError:
        return None


# ---- 2-5. traffic, stats, SIGHUP, SIGTERM ---------------------------------------

def produce(broker, lines, fmt="json"):
    exe = harness.build_path("tests", "tools", "ddproduce")
    r = subprocess.run([exe, "-b", broker.addr, "-t", "plays", "-F", fmt],
                       input="".join(l + "\n" for l in lines), capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        fail("ddproduce: %s %s" % (r.stdout, r.stderr))


def main():
    pb, pbg, grpc = python_stubs()
    redis = harness.Redis()
    test_readiness_before_store(redis)

    broker = DevBroker()
    d = harness.tmpdir("dedupd-metrics-")
    admin = harness.free_port()
    rpc = harness.free_port()
    logfile = os.path.join(d, "dedupd.log")
    opts = {
        "history.path": os.path.join(d, "db"),
        "trace.path": os.path.join(d, "trace"),
        "history.fp_rate": "0.000001",
        "ingest.enabled": "true",
        "ingest.topic": "plays",
        "window.flush_ms": "200",
        "kafka.bootstrap.servers": broker.addr,
        "kafka.group.id": "metrics-test",
        "kafka.statistics.interval.ms": "500",
        "recent.redis": redis.addr,
        "recent.timeout_ms": "200",
        "rpc.listen": "127.0.0.1:%d" % rpc,
        "admin.listen": "127.0.0.1:%d" % admin,
        "admin.drain_ms": "3000",
        "log.file": logfile,
    }
    p = start_dedupd(opts, "dedupd")
    wait_until("ready (store, grpc, partitions assigned)",
               lambda: http_get_ok(admin, "/readyz") == 200 or (not p.alive() and fail(
                   "dedupd died: %s" % open(logfile).read()[-3000:])))
    ch = grpc.insecure_channel("127.0.0.1:%d" % rpc)
    grpc.channel_ready_future(ch).result(timeout=20)
    stub = pbg.DedupStub(ch)
    s0 = Scrape(admin)
    for fam in ("dedupd_rpc_requests_total", "dedupd_rpc_duration_seconds",
                "dedupd_filter_candidates", "dedupd_filter_removed_total",
                "dedupd_filter_degraded_total", "dedupd_recent_errors_total",
                "dedupd_ingest_messages_total", "dedupd_ingest_consumer_lag",
                "dedupd_ingest_undurable_messages", "dedupd_ingest_durable_flushes_total",
                "dedupd_window_pending_users", "dedupd_window_pending_bytes",
                "dedupd_flush_duration_seconds", "dedupd_plays_written_total",
                "dedupd_plays_expired_total", "dedupd_history_bytes_written_total",
                "dedupd_history_live_sst_bytes", "dedupd_history_pending_compaction_bytes",
                "dedupd_history_block_cache_hit_ratio",
                "dedupd_history_corrupt_values_total", "dedupd_history_segments_expired_total",
                "dedupd_history_writable", "dedupd_history_write_errors_total",
                "dedupd_history_free_bytes", "dedupd_history_filesystem_size_bytes",
                "dedupd_history_wal_failed"):
        if fam not in s0.types:
            fail("family %s missing from /metrics" % fam)
    fs = os.statvfs(os.path.join(d, "db"))
    if s0.get("dedupd_history_filesystem_size_bytes") != fs.f_blocks * fs.f_frsize:
        fail("dedupd_history_filesystem_size_bytes %s, statvfs says %d" % (
            s0.get("dedupd_history_filesystem_size_bytes"), fs.f_blocks * fs.f_frsize))
    if s0.types["dedupd_rpc_duration_seconds"] != "histogram":
        fail("dedupd_rpc_duration_seconds is not a histogram")

    # -- consumer lag once partitions are assigned, before any message: 0 on
    # each of the 4 in /metrics, and a number in `dedupctl stats`.
    ctl = harness.build_path("tools", "dedupctl")
    wait_until("consumer lag 0 on 4 partitions before any message", lambda: (
        lambda lags: lags and len(lags) == 4 and all(v == 0 for v in lags.values()))(
            Scrape(admin).series("dedupd_ingest_consumer_lag")), timeout=15)
    out = stats(ctl, admin)
    m = STATS_LAG.search(out)
    if not m or (int(m.group(2)), int(m.group(3))) != (0, 4):
        fail("dedupctl stats: no numeric consumer lag over the 4 assigned partitions:\n%s" % out)
    log("dedupctl stats before any message: %s" % m.group(0))

    # -- gRPC traffic
    user = "metrics-user"
    stub.RecordPlays(pb.RecordPlaysRequest(user_id=user, plays=[pb.Play(item_id="played")]),
                     timeout=10)
    stub.RecordDelivery(pb.RecordDeliveryRequest(user_id=user, item_ids=["delivered"]),
                        timeout=10)
    cands = ["played", "delivered", "fresh", "fresh", "new"]  # one of each reason
    for _ in range(5):
        r = stub.Filter(pb.FilterRequest(user_id=user, candidate_ids=cands), timeout=10)
        if list(r.kept_ids) != ["fresh", "new"]:
            fail("Filter kept %s" % list(r.kept_ids))
    try:
        stub.Filter(pb.FilterRequest(user_id="", candidate_ids=["x"]), timeout=10)
        fail("Filter with an empty user id succeeded")
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
            fail("empty user: %s" % e.code())
    # A call is counted once the server has seen its batch complete, which
    # can be just after the client has its status.
    wait_until("the empty-user call counted", lambda: Scrape(admin).get(
        "dedupd_rpc_requests_total", method="Filter", code="INVALID_ARGUMENT") is not None)
    s1 = Scrape(admin)
    counters_monotonic(s0, s1)
    expect(s0, s1, "dedupd_rpc_requests_total", 5, method="Filter", code="OK")
    expect(s0, s1, "dedupd_rpc_requests_total", 1, method="Filter", code="INVALID_ARGUMENT")
    expect(s0, s1, "dedupd_rpc_requests_total", 1, method="RecordDelivery", code="OK")
    expect(s0, s1, "dedupd_rpc_requests_total", 1, method="RecordPlays", code="OK")
    expect(s0, s1, "dedupd_rpc_duration_seconds_count", 6, method="Filter")
    expect(s0, s1, "dedupd_rpc_duration_seconds_bucket", 6, method="Filter", le="+Inf")
    if delta(s0, s1, "dedupd_rpc_duration_seconds_sum", method="Filter") <= 0:
        fail("Filter duration sum did not grow")
    expect(s0, s1, "dedupd_filter_candidates_count", 5)
    expect(s0, s1, "dedupd_filter_candidates_sum", 25)
    expect(s0, s1, "dedupd_filter_candidates_bucket", 5, le="10")
    expect(s0, s1, "dedupd_filter_candidates_bucket", 0, le="1")
    for reason in ("played", "delivered", "duplicate"):
        expect(s0, s1, "dedupd_filter_removed_total", 5, reason=reason)
    expect(s0, s1, "dedupd_filter_degraded_total", 0)
    expect(s0, s1, "dedupd_plays_written_total", 1, source="rpc")
    log("rpc counters and histograms moved by exactly the calls made")

    # -- Kafka plays, good and bad (ddproduce: user TAB item [TAB ms]; raw: key TAB payload)
    now = int(time.time() * 1000)
    good = ["k%03d\titem%03d\t%d" % (i % 20, i, now - 1000) for i in range(100)]
    produce(broker, good)
    bad = {
        "undecodable": ["u1\tnot json", "u2\t}{", "u3\t[1,2"],
        "empty_item": ["u4\t{\"user_id\":\"u4\",\"item_id\":\"\"}",
                       "u5\t{\"user_id\":\"u5\"}"],
        "empty_user": ["\t{\"item_id\":\"i\"}"],
        "id_too_long": ["u6\t{\"user_id\":\"u6\",\"item_id\":\"%s\"}" % ("x" * 300)],
        "future": ["u7\t{\"user_id\":\"u7\",\"item_id\":\"i\",\"played_at_ms\":%d}"
                   % (now + 10 * 86400000)],
    }
    expired = ["u8\t{\"user_id\":\"u8\",\"item_id\":\"i\",\"played_at_ms\":%d}"
               % (now - 400 * 86400000)]
    produce(broker, [l for ls in bad.values() for l in ls] + expired, fmt="raw")
    total = 100 + sum(len(v) for v in bad.values()) + len(expired)

    def ingested():
        s = Scrape(admin)
        return s if (s.get("dedupd_ingest_messages_total") or 0) - (
            s0.get("dedupd_ingest_messages_total") or 0) >= total else None
    s2 = wait_until("%d messages consumed" % total, ingested)
    s2 = wait_until("100 plays written", lambda: (lambda s: s if delta(
        s0, s, "dedupd_plays_written_total", source="kafka") >= 100 else None)(Scrape(admin)))
    counters_monotonic(s1, s2)
    expect(s0, s2, "dedupd_ingest_messages_total", 100, result="ok")
    for reason, lines in bad.items():
        expect(s0, s2, "dedupd_ingest_messages_total", len(lines), result=reason)
    expect(s0, s2, "dedupd_ingest_messages_total", 1, result="expired")
    expect(s0, s2, "dedupd_ingest_messages_total", total)
    expect(s0, s2, "dedupd_plays_written_total", 100, source="kafka")
    expect(s0, s2, "dedupd_plays_expired_total", 1, source="kafka")
    # Written plays become durable at the next durability flush (at most
    # ingest.durable_interval_ms later), and the gauge of what a crash would
    # replay drops to 0.
    wait_until("written messages durable", lambda: (lambda s: s if (
        s.get("dedupd_ingest_undurable_messages") == 0 and
        delta(s0, s, "dedupd_ingest_durable_flushes_total") >= 1) else None)(Scrape(admin)))
    if delta(s0, s2, "dedupd_flush_duration_seconds_count") < 1:
        fail("no flush counted in dedupd_flush_duration_seconds")
    if delta(s0, s2, "dedupd_history_bytes_written_total") <= 0:
        fail("dedupd_history_bytes_written_total did not grow")
    r = stub.Filter(pb.FilterRequest(user_id="k007", candidate_ids=["item007", "item008"]),
                    timeout=10)
    if list(r.kept_ids) != ["item008"]:
        fail("a play ingested from Kafka is not filtered: kept %s" % list(r.kept_ids))
    log("ingest: ok / expired / every bad reason counted exactly; plays written 100")

    def lag_drained():
        s = Scrape(admin)
        lags = s.series("dedupd_ingest_consumer_lag")
        return s if lags and len(lags) == 4 and all(v == 0 for v in lags.values()) else None
    s3 = wait_until("consumer lag for 4 partitions, drained to 0", lag_drained, timeout=30)
    log("consumer lag per partition:", s3.series("dedupd_ingest_consumer_lag"))

    # -- a Redis outage
    redis.stop()
    for _ in range(3):
        r = stub.Filter(pb.FilterRequest(user_id=user, candidate_ids=cands), timeout=10)
        if not r.degraded:
            fail("Filter with Redis down is not degraded")
    try:
        stub.RecordDelivery(pb.RecordDeliveryRequest(user_id=user, item_ids=["d"]), timeout=10)
        fail("RecordDelivery with Redis down succeeded")
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNAVAILABLE:
            fail("RecordDelivery with Redis down: %s" % e.code())
    s4 = Scrape(admin)
    counters_monotonic(s3, s4)
    expect(s3, s4, "dedupd_filter_degraded_total", 3)
    expect(s3, s4, "dedupd_rpc_requests_total", 3, method="Filter", code="OK")
    expect(s3, s4, "dedupd_rpc_requests_total", 1, method="RecordDelivery", code="UNAVAILABLE")
    errs = delta(s3, s4, "dedupd_recent_errors_total")
    if errs < 1 or delta(s3, s4, "dedupd_recent_errors_total", kind="connection") < 1:
        fail("Redis outage: dedupd_recent_errors_total moved by %s (connection: %s)"
             % (errs, delta(s3, s4, "dedupd_recent_errors_total", kind="connection")))
    redis.start()
    log("redis outage: degraded +3, recent errors +%d, RecordDelivery UNAVAILABLE +1" % errs)

    # -- dedupctl stats
    out = stats(ctl, admin)
    for want in ("requests/s", "Filter p99", "degraded answers", "consumer lag", "ready"):
        if want not in out:
            fail("dedupctl stats lacks %r:\n%s" % (want, out))
    m = re.search(r"degraded answers\s+\S+ \((\d+) since start\)", out)
    if not m or int(m.group(1)) != int(s4.get("dedupd_filter_degraded_total")):
        fail("dedupctl stats degraded total disagrees with /metrics:\n%s" % out)
    m = STATS_LAG.search(out)
    if not m or (int(m.group(2)), int(m.group(3))) != (0, 4):
        fail("dedupctl stats: consumer lag is not 0 over 4 partitions as /metrics has it:\n%s"
             % out)
    log("dedupctl stats:\n" + out.rstrip())

    # -- SIGHUP reopens log.file
    rotated = logfile + ".1"
    os.rename(logfile, rotated)
    p.signal(signal.SIGHUP)
    wait_until("a new log file after SIGHUP", lambda: os.path.exists(logfile), timeout=10)
    wait_until("'log reopened' in the new file",
               lambda: "log reopened" in open(logfile).read(), timeout=10)
    old = open(rotated).read()
    if "msg=ready" not in old or "log reopened" in old:
        fail("the rotated file should hold the lines before the HUP only")
    log("SIGHUP: rotated file kept the old lines, new lines in a new file")

    # -- SIGTERM: not ready at once, still serving during admin.drain_ms
    p.signal(signal.SIGTERM)
    t0 = time.time()
    st, body = wait_until("/readyz 503 after SIGTERM", lambda: (lambda r: r if r[0] == 503 else None)(
        http_get(admin, "/readyz")), timeout=2, every=0.02)
    if "stopping" not in body:
        fail("/readyz after SIGTERM: %r" % body)
    r = stub.Filter(pb.FilterRequest(user_id=user, candidate_ids=["fresh"]), timeout=5)
    if list(r.kept_ids) != ["fresh"]:
        fail("Filter during the drain: %s" % list(r.kept_ids))
    h = subprocess.run([ctl, "-a", "127.0.0.1:%d" % rpc, "health"], capture_output=True,
                       text=True, timeout=10)
    if h.stdout.strip() != "NOT_SERVING":
        fail("gRPC health during the drain: %r %r" % (h.stdout, h.stderr))
    s5 = Scrape(admin)
    if s5.get("dedupd_ready") != 0:
        fail("dedupd_ready is not 0 while stopping")
    log("SIGTERM: /readyz 503 %r after %.0f ms, gRPC still answering" % (body.strip(),
                                                                         (time.time() - t0) * 1000))
    ch.close()
    if p.stop(timeout=60) != 0:
        fail("dedupd exit code %s" % p.p.returncode)
    if "shutting down" not in open(logfile).read():
        fail("shutdown lines did not go to the reopened log file")
    log("PASS")


if __name__ == "__main__":
    main()
