#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Redis failover under load: a master, an asynchronous replica and three
Sentinels (quorum 2) from Debian's redis-server and redis-sentinel, on free
loopback ports in temporary directories; a dedupd that finds its Redis
through recent.sentinels / recent.master_name; Python gRPC clients calling
RecordDelivery and Filter from threads of their own.

The master is killed with SIGKILL. Then:
  - every Filter call is answered (never an error); degraded answers are
    counted and their window printed, and none is degraded once dedupd has
    switched to the new master;
  - RecordDelivery fails only with UNAVAILABLE, and only between the kill
    and the switch (plus a short grace for each worker to reconnect);
  - every delivery acknowledged after the kill is filtered afterwards (it
    went to the new master);
  - dedupd_recent_master_changes_total counted the switch.
How many deliveries acknowledged before the kill the replica lost is
printed, not asserted: an asynchronous replica may lose the last ones.

Then, against a Sentinel of the test's own (FakeSentinel, with a
password, as the masters have): no master known at start (Filter
degraded, RecordDelivery UNAVAILABLE until one is named), a master
demoted behind dedupd's back (-READONLY, no event), and hostile replies.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import harness
from test_clients_lib import Dedupd, python_stubs

MASTER_NAME = "ddmaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
SWITCH_GRACE_S = 3.0      # after the test sees the switch, dedupd's workers have this long
RUN_BEFORE_KILL_S = 2.0
RUN_AFTER_SWITCH_S = 5.0


def exe(name):
    p = shutil.which(name) or ("/usr/bin/" + name if os.path.exists("/usr/bin/" + name) else None)
    if p is None:
        harness.skip("%s is not installed (Debian: apt-get install redis-server redis-sentinel)"
                     % name)
    return p


def cli(port, *args, timeout=5, password=None):
    """redis-cli against 127.0.0.1:PORT: stdout, or None when it failed."""
    auth = ["-a", password, "--no-auth-warning"] if password else []
    try:
        r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port)] + auth
                           + [str(a) for a in args], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return r.stdout if r.returncode == 0 else None


class Server:
    """redis-server (REPLICA_OF: a master's port) on a free loopback port."""

    def __init__(self, name, replica_of=None, password=None):
        self.port = harness.free_port()
        self.dir = harness.tmpdir("dedupd-sentinel-%s-" % name)
        argv = [exe("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
                # a replica's full sync starts at once, not after 5 s
                "--repl-diskless-sync-delay", "0"]
        if replica_of:
            argv += ["--replicaof", "127.0.0.1", str(replica_of)]
        if password:
            argv += ["--requirepass", password, "--masterauth", password]
        self.proc = harness.Proc(argv, "redis-" + name)
        harness.wait_port(self.port, proc=self.proc.p)


class Sentinel:
    def __init__(self, i, master_port):
        self.port = harness.free_port()
        self.dir = harness.tmpdir("dedupd-sentinel-s%d-" % i)
        conf = os.path.join(self.dir, "sentinel.conf")  # Sentinel rewrites it: its own copy
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\n" % (self.port, self.dir))
            f.write("sentinel monitor %s 127.0.0.1 %d 2\n" % (MASTER_NAME, master_port))
            f.write("sentinel down-after-milliseconds %s %d\n" % (MASTER_NAME, DOWN_AFTER_MS))
            f.write("sentinel failover-timeout %s %d\n" % (MASTER_NAME, FAILOVER_TIMEOUT_MS))
            f.write("sentinel parallel-syncs %s 1\n" % MASTER_NAME)
        self.proc = harness.Proc([exe("redis-sentinel"), conf], "sentinel-%d" % i)
        harness.wait_port(self.port, proc=self.proc.p)

    def master_field(self, field):
        out = cli(self.port, "SENTINEL", "master", MASTER_NAME)
        if not out:
            return None
        lines = out.splitlines()
        for k, v in zip(lines[0::2], lines[1::2]):
            if k == field:
                return v
        return None

    def master_port(self):
        out = cli(self.port, "SENTINEL", "get-master-addr-by-name", MASTER_NAME)
        lines = (out or "").split()
        return int(lines[1]) if len(lines) == 2 and lines[1].isdigit() else None


def metric(admin, name):
    st, body = harness.http_get(admin, "/metrics")
    if st != 200:
        return None
    m = re.search(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), body, re.M)
    return float(m.group(1)) if m else None


def main():
    exe("redis-server")
    exe("redis-sentinel")
    exe("redis-cli")
    pb, pbg, grpc = python_stubs()

    master = Server("master")
    replica = Server("replica", replica_of=master.port)
    harness.wait_until("replica in sync",
                       lambda: "master_link_status:up" in (cli(replica.port, "INFO",
                                                                "replication") or ""),
                       timeout=90)
    sentinels = [Sentinel(i, master.port) for i in range(3)]
    # Each Sentinel must know the replica and the two others before a
    # failover can be agreed (hello messages every 2 s).
    harness.wait_until("sentinels know the replica and each other",
                       lambda: all(s.master_field("num-slaves") == "1"
                                   and s.master_field("num-other-sentinels") == "2"
                                   for s in sentinels), timeout=60)
    harness.log("master :%d, replica :%d, sentinels %s" % (
        master.port, replica.port, [s.port for s in sentinels]))

    admin = harness.free_port()
    d = Dedupd("127.0.0.1:1", extra={  # recent.redis is not used with sentinels
        "recent.sentinels": ",".join("127.0.0.1:%d" % s.port for s in sentinels),
        "recent.master_name": MASTER_NAME,
        "recent.timeout_ms": "200",
        "rpc.threads": "2",
        "admin.listen": "127.0.0.1:%d" % admin,
    })
    ch = grpc.insecure_channel(d.addr)
    grpc.channel_ready_future(ch).result(timeout=20)
    stub = pbg.DedupStub(ch)

    # Healthy: a played item and a delivered one are removed, not degraded.
    reader = "sentinel-reader"
    stub.RecordPlays(pb.RecordPlaysRequest(user_id=reader, plays=[pb.Play(item_id="p1")]),
                     timeout=10)
    harness.wait_until("first delivery recorded", lambda: _try(
        lambda: stub.RecordDelivery(pb.RecordDeliveryRequest(user_id=reader, item_ids=["d1"]),
                                    timeout=5)), timeout=20)
    cands = ["p1", "d1", "f1"]
    r = stub.Filter(pb.FilterRequest(user_id=reader, candidate_ids=cands), timeout=5)
    if list(r.kept_ids) != ["f1"] or r.degraded:
        harness.fail("healthy: kept %s degraded %s" % (list(r.kept_ids), r.degraded))

    stop = threading.Event()
    lock = threading.Lock()
    writes = []   # (start, end, user, item, code or None)
    filters = []  # (start, end, degraded, kept or None, code or None)

    def writer(w):
        n = 0
        while not stop.is_set() and n < 100000:
            user, item = "w%d-%d" % (w, n), "i%d-%d" % (w, n)
            n += 1
            t0 = time.monotonic()
            code = None
            try:
                stub.RecordDelivery(pb.RecordDeliveryRequest(user_id=user, item_ids=[item]),
                                    timeout=5)
            except grpc.RpcError as e:
                code = e.code()
            with lock:
                writes.append((t0, time.monotonic(), user, item, code))
            time.sleep(0.005)

    def filterer():
        n = 0
        while not stop.is_set() and n < 100000:
            n += 1
            t0 = time.monotonic()
            try:
                r = stub.Filter(pb.FilterRequest(user_id=reader, candidate_ids=cands), timeout=5)
                res = (t0, time.monotonic(), r.degraded, list(r.kept_ids), None)
            except grpc.RpcError as e:
                res = (t0, time.monotonic(), None, None, e.code())
            with lock:
                filters.append(res)
            time.sleep(0.005)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    threads += [threading.Thread(target=filterer) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(RUN_BEFORE_KILL_S)
        harness.log("SIGKILL of the master (pid %d)" % master.proc.pid)
        t_kill = time.monotonic()
        master.proc.kill9()
        deadline = t_kill + 30
        while True:
            ports = [s.master_port() for s in sentinels]
            if ports.count(replica.port) >= 2:
                break
            if time.monotonic() > deadline:
                harness.fail("no failover 30 s after the kill: sentinels say %s" % ports)
            time.sleep(0.05)
        t_switch = time.monotonic()
        harness.log("sentinels switched to the replica %.2f s after the kill"
                    % (t_switch - t_kill))
        time.sleep(RUN_AFTER_SWITCH_S)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    if any(t.is_alive() for t in threads):
        harness.fail("a client thread did not finish")
    if not d.alive():
        harness.fail("dedupd died:\n" + d.proc.tail())

    # Filter: always answered; degraded only around the switch.
    errors = [f for f in filters if f[4] is not None]
    if errors:
        harness.fail("%d Filter calls failed, first %s" % (len(errors), errors[0][4]))
    degraded = [f for f in filters if f[2]]
    before = [f for f in degraded if f[1] < t_kill]  # answered before the kill
    late = [f for f in degraded if f[0] > t_switch + SWITCH_GRACE_S]
    wrong = [f for f in filters if f[3] != (["d1", "f1"] if f[2] else ["f1"])]
    window = (degraded[-1][1] - degraded[0][0]) if degraded else 0.0
    harness.log("Filter: %d calls, %d degraded, degraded window %.2f s (from %.2f s after "
                "the kill to %.2f s after it)" % (
                    len(filters), len(degraded), window,
                    (degraded[0][0] - t_kill) if degraded else 0.0,
                    (degraded[-1][1] - t_kill) if degraded else 0.0))
    if before:
        harness.fail("%d Filter answers degraded before the kill" % len(before))
    if late:
        harness.fail("%d Filter answers still degraded %.1f s after the switch (last at +%.2f s)"
                     % (len(late), SWITCH_GRACE_S, late[-1][0] - t_switch))
    if wrong:
        harness.fail("Filter kept %s (degraded %s) at +%.2f s" % (
            wrong[0][3], wrong[0][2], wrong[0][0] - t_kill))

    # RecordDelivery: UNAVAILABLE only, and only during the switch.
    failed = [w for w in writes if w[4] is not None]
    not_unavail = [w for w in failed if w[4] != grpc.StatusCode.UNAVAILABLE]
    outside = [w for w in failed if w[1] < t_kill or w[0] > t_switch + SWITCH_GRACE_S]
    harness.log("RecordDelivery: %d calls, %d failed (all during the switch: %s), "
                "first failure +%.2f s, last +%.2f s after the kill" % (
                    len(writes), len(failed), not outside,
                    (failed[0][0] - t_kill) if failed else 0.0,
                    (failed[-1][1] - t_kill) if failed else 0.0))
    if not_unavail:
        harness.fail("RecordDelivery failed with %s, want UNAVAILABLE" % not_unavail[0][4])
    if outside:
        harness.fail("RecordDelivery failed at +%.2f s, outside the switch (+%.2f s)"
                     % (outside[0][0] - t_kill, t_switch - t_kill))
    after = [w for w in writes if w[4] is None and w[0] > t_kill]
    if len(after) < 10:
        harness.fail("only %d deliveries acknowledged after the kill" % len(after))

    # Every delivery acknowledged after the kill is filtered.
    for w in after:
        r = stub.Filter(pb.FilterRequest(user_id=w[2], candidate_ids=[w[3], "fresh"]), timeout=5)
        if r.degraded or list(r.kept_ids) != ["fresh"]:
            harness.fail("delivery %s/%s acknowledged at +%.2f s: kept %s degraded %s" % (
                w[2], w[3], w[1] - t_kill, list(r.kept_ids), r.degraded))
    acked_before = [w for w in writes if w[4] is None and w[1] < t_kill]
    lost = 0
    for w in acked_before:
        r = stub.Filter(pb.FilterRequest(user_id=w[2], candidate_ids=[w[3]]), timeout=5)
        lost += list(r.kept_ids) == [w[3]]
    harness.log("%d deliveries acknowledged after the kill, all filtered; of %d acknowledged "
                "before it, the replica lost %d" % (len(after), len(acked_before), lost))

    # /readyz: ready throughout; the redis component back once its PING
    # follows the new master.
    harness.wait_until("/readyz without redis degraded", lambda: (
        lambda r: r[0] == 200 and "redis" not in r[1])(harness.http_get(admin, "/readyz")),
        timeout=10)
    changes = metric(admin, "dedupd_recent_master_changes_total")
    if changes is None or changes < 1:
        harness.fail("dedupd_recent_master_changes_total is %s after a failover" % changes)
    harness.log("dedupd_recent_master_changes_total %d" % changes)
    ch.close()
    d.stop()

    demoted_and_hostile(pb, pbg, grpc)
    harness.log("PASS")


class FakeSentinel:
    """A Sentinel of our own on a free loopback port, speaking just enough
    RESP: get-master-addr-by-name answers self.answer (bytes; a function
    of the ask's number when callable) and SUBSCRIBE is confirmed; then
    publish() writes raw bytes to every subscriber. It lets the test name
    an address without a failover, and send what a hostile Sentinel would."""

    def __init__(self, password):
        self.password = password.encode()
        self.answer = b"*-1\r\n"
        self.asks = 0
        self.subs = []
        self.lock = threading.Lock()
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @staticmethod
    def addr(host, port):
        h, p = host.encode(), str(port).encode()
        return b"*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(h), h, len(p), p)

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        f = c.makefile("rb")
        authed = False
        try:
            while True:
                line = f.readline()
                if not line.startswith(b"*"):
                    return
                args = []
                for _ in range(int(line[1:])):
                    n = int(f.readline()[1:])
                    args.append(f.read(n + 2)[:n])
                cmd = [a.lower() for a in args[:2]]
                if cmd[:1] == [b"auth"]:
                    authed = args[1:] == [self.password]
                    c.sendall(b"+OK\r\n" if authed else b"-WRONGPASS invalid password\r\n")
                elif not authed:
                    c.sendall(b"-NOAUTH Authentication required.\r\n")
                elif cmd == [b"sentinel", b"get-master-addr-by-name"]:
                    with self.lock:
                        self.asks += 1
                        a = self.answer(self.asks) if callable(self.answer) else self.answer
                    c.sendall(a)
                elif cmd[:1] == [b"subscribe"]:
                    c.sendall(b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n")
                    with self.lock:
                        self.subs.append(c)
                else:
                    c.sendall(b"-ERR unknown\r\n")
        except (OSError, ValueError):
            return

    def publish(self, raw):
        with self.lock:
            subs = list(self.subs)
        for c in subs:
            try:
                c.sendall(raw)
            except OSError:
                pass

    def subscribers(self):
        """Subscriptions still open (a closed one reads as EOF)."""
        with self.lock:
            live = []
            for c in self.subs:
                try:
                    c.setblocking(False)
                    closed = c.recv(1, socket.MSG_PEEK) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if not closed:
                    live.append(c)
            self.subs = live
            return len(live)


def demoted_and_hostile(pb, pbg, grpc):
    """No failover, but the master demoted behind dedupd's back: the next
    write meets -READONLY, dedupd asks Sentinel again and moves to the
    server it names now. Then a hostile Sentinel: bad addresses, a reply
    that never ends, a malformed +switch-master; dedupd keeps the master
    it knows, and drops the subscription that sent garbage."""
    pw = "master-secret"
    a = Server("a", password=pw)
    b = Server("b", password=pw)
    fake = FakeSentinel("sentinel-secret")  # knows no master yet: answers nil
    admin = harness.free_port()
    d = Dedupd("127.0.0.1:1", name="dedupd-fake", extra={
        "recent.sentinels": "127.0.0.1:%d" % fake.port,
        "recent.master_name": MASTER_NAME,
        "recent.sentinel_password": "sentinel-secret",
        "recent.password": pw,
        "recent.timeout_ms": "200",
        "admin.listen": "127.0.0.1:%d" % admin,
    })
    ch = grpc.insecure_channel(d.addr)
    grpc.channel_ready_future(ch).result(timeout=20)
    stub = pbg.DedupStub(ch)

    def record(user, item):
        try:
            stub.RecordDelivery(pb.RecordDeliveryRequest(user_id=user, item_ids=[item]), timeout=5)
            return None
        except grpc.RpcError as e:
            return e.code()

    # No master known: Filter answers degraded, RecordDelivery UNAVAILABLE.
    r = stub.Filter(pb.FilterRequest(user_id="u0", candidate_ids=["i0"]), timeout=5)
    if not r.degraded or list(r.kept_ids) != ["i0"]:
        harness.fail("no master known: kept %s degraded %s" % (list(r.kept_ids), r.degraded))
    if record("u0", "i0") != grpc.StatusCode.UNAVAILABLE:
        harness.fail("no master known: RecordDelivery did not fail with UNAVAILABLE")
    if metric(admin, "dedupd_recent_master_known") != 0:
        harness.fail("dedupd_recent_master_known is not 0 before any master is named")
    fake.answer = FakeSentinel.addr("127.0.0.1", a.port)
    harness.wait_until("a delivery on A", lambda: record("u0", "i0") is None, timeout=20)
    if metric(admin, "dedupd_recent_master_known") != 1:
        harness.fail("dedupd_recent_master_known is not 1 once a master is named")
    if not (cli(a.port, "DBSIZE", password=pw) or "").strip().endswith("1"):
        harness.fail("the first delivery is not on A")

    # A becomes B's replica; Sentinel (ours) now names B, and says nothing.
    fake.answer = FakeSentinel.addr("127.0.0.1", b.port)
    cli(a.port, "REPLICAOF", "127.0.0.1", b.port, password=pw)
    harness.wait_until("A is a replica", lambda: "role:slave" in (
        cli(a.port, "INFO", "replication", password=pw) or ""), timeout=20)
    codes = []
    deadline = time.monotonic() + 20
    while True:
        code = record("u1", "i1")
        codes.append(code)
        if code is None:
            break
        if code != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
            harness.fail("RecordDelivery after the demotion: %s" % codes)
        time.sleep(0.02)
    ro = metric(admin, 'dedupd_recent_errors_total{kind="readonly"}')
    harness.log("demoted master: %d UNAVAILABLE before the write went to B; readonly errors %s"
                % (len(codes) - 1, ro))
    if not ro:
        harness.fail("no -READONLY counted (dedupd_recent_errors_total{kind=\"readonly\"})")
    r = stub.Filter(pb.FilterRequest(user_id="u1", candidate_ids=["i1", "x"]), timeout=5)
    if list(r.kept_ids) != ["x"] or r.degraded:
        harness.fail("after the move to B: kept %s degraded %s" % (list(r.kept_ids), r.degraded))

    # Hostile: a bad +switch-master, then every answer refused.
    def reply_errors():
        return metric(admin, 'dedupd_recent_sentinel_errors_total{kind="reply"}') or 0

    # A +switch-master for our master with a port no server has: refused
    # (counted), the subscription dropped, the master kept.
    changes0 = metric(admin, "dedupd_recent_master_changes_total")
    errors0 = reply_errors()
    harness.wait_until("dedupd subscribed", lambda: fake.subscribers() >= 1, timeout=20)
    payload = ("%s 127.0.0.1 %d 127.0.0.1 99999" % (MASTER_NAME, b.port)).encode()
    fake.publish(b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$%d\r\n%s\r\n"
                 % (len(payload), payload))
    harness.wait_until("the bad +switch-master refused", lambda: reply_errors() > errors0,
                       timeout=20)
    if metric(admin, "dedupd_recent_master_changes_total") != changes0:
        harness.fail("a +switch-master to port 99999 changed the master")
    # Then every answer is refused, and the subscription gets a reply that
    # never ends.
    errors1 = reply_errors()
    bad_answers = [
        FakeSentinel.addr("127.0.0.1", 99999),
        FakeSentinel.addr("127.0.0.1\r\n", 1),
        FakeSentinel.addr("a" * 300, 1),
        FakeSentinel.addr(":::::", 1),
        b"*2\r\n*1\r\n$1\r\na\r\n$1\r\n1\r\n",
        b"*9\r\n",
        b"-IDONTKNOW\r\n",
        b"$100000000\r\n" + b"a" * 65536,
    ]
    fake.answer = lambda n: bad_answers[n % len(bad_answers)]
    harness.wait_until("dedupd subscribed again", lambda: fake.subscribers() >= 1, timeout=20)
    fake.publish(b"$100000000\r\n" + b"b" * 65536)
    t_end = time.monotonic() + 7  # past one periodic ask (5 s): every ask refused
    n = 0
    while time.monotonic() < t_end:
        code = record("h%d" % n, "i")
        if code is not None:
            harness.fail("RecordDelivery failed (%s) while Sentinel sent garbage" % code)
        r = stub.Filter(pb.FilterRequest(user_id="h%d" % n, candidate_ids=["i", "x"]), timeout=5)
        if list(r.kept_ids) != ["x"] or r.degraded:
            harness.fail("hostile Sentinel: kept %s degraded %s" % (list(r.kept_ids), r.degraded))
        n += 1
        time.sleep(0.05)
    errors = reply_errors()
    harness.log("hostile Sentinel: %d asks, %d reply errors counted, %d deliveries and Filter "
                "calls all on B" % (fake.asks, errors - errors0, n))
    if errors <= errors1:
        harness.fail("no refused Sentinel answer counted")
    if metric(admin, "dedupd_recent_master_changes_total") != changes0:
        harness.fail("a hostile answer changed the master")
    if not d.alive():
        harness.fail("dedupd died")
    ch.close()
    d.stop()


def _try(fn):
    try:
        fn()
        return True
    except Exception:  # noqa: BLE001 - grpc.RpcError while the master is found
        return False


if __name__ == "__main__":
    signal.signal(signal.SIGINT, lambda *_: harness.fail("interrupted"))
    main()
