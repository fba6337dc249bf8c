#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The gRPC front end from a Python client (python3-grpcio), against a real
dedupd (ingest off, rpc.listen on port 0, the bound port read back from its
`msg=serving rpc=HOST:PORT` line) over a real redis-server:

- RecordDelivery / RecordPlays then Filter: DELIVERED and PLAYED removed,
  duplicates, explain, index mode, lookback, expiry, ForgetUser;
- bad input: the exact status code and message of each, and a bad request
  never disturbs the calls around it;
- health: SERVING for "" and dedup.v1.Dedup, NOT_FOUND for anything else,
  Health/Watch streams SERVING (test_grpc_front.py tests it further);
- deadlines: a 1 us deadline gives DEADLINE_EXCEEDED, short deadlines under
  load give OK or DEADLINE_EXCEEDED only, and the server stays healthy;
- a 10,000-candidate request with the exact kept set;
- TLS (rpc.tls_cert / rpc.tls_key) with a throwaway self-signed cert;
- SIGTERM with calls in flight: they finish OK or are refused UNAVAILABLE,
  the log says health=NOT_SERVING, dedupd exits 0;
- a call stuck past rpc.shutdown_grace_ms (Redis that accepts and never
  answers) is cancelled and dedupd still exits 0, promptly.

Stubs are generated at run time into a temporary directory with
grpc_tools.protoc (python3-grpc-tools).
"""
import importlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import harness
import test_clients_lib
from test_clients_lib import python_stubs

DAY_MS = 86400000


pb, pbg, grpc = python_stubs()
hpb = importlib.import_module("health_pb2")
hpbg = importlib.import_module("health_pb2_grpc")


class Dedupd(test_clients_lib.Dedupd):
    """test_clients_lib.Dedupd (port 0, ingest off, tiny fp_rate) with
    one-day segments so lookback is exact to the day, a Redis timeout that
    tolerates a loaded machine, and a 2 MiB message limit to test."""

    def __init__(self, redis_addr, extra=None, name="dedupd"):
        opts = {
            "history.segment_days": "1",
            "history.sync": "false",
            "recent.timeout_ms": "200",
            "rpc.threads": "2",
            "rpc.max_message_bytes": str(2 * 1024 * 1024),
        }
        opts.update(extra or {})
        super().__init__(redis_addr, opts, name)


def expect_error(fn, code, details=None, contains=None, what=""):
    try:
        fn()
    except grpc.RpcError as e:
        if e.code() != code:
            harness.fail("%s: status %s (%s), want %s" % (what, e.code(), e.details(), code))
        if details is not None and e.details() != details:
            harness.fail("%s: details %r, want %r" % (what, e.details(), details))
        if contains is not None and contains not in (e.details() or ""):
            harness.fail("%s: details %r lack %r" % (what, e.details(), contains))
        return e
    harness.fail("%s: succeeded, want %s" % (what, code))


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def main():
    redis = harness.Redis()
    d = Dedupd(redis.addr)
    harness.log("dedupd serving on", d.addr)
    ch = grpc.insecure_channel(d.addr, options=[("grpc.max_send_message_length", 64 << 20)])
    grpc.channel_ready_future(ch).result(timeout=20)
    dedup = pbg.DedupStub(ch)
    health = hpbg.HealthStub(ch)
    SERVING = hpb.HealthCheckResponse.SERVING
    now_ms = int(time.time() * 1000)

    def filt(user, ids, **kw):
        return dedup.Filter(pb.FilterRequest(user_id=user, candidate_ids=ids, **kw), timeout=10)

    def healthy(what):
        r = health.Check(hpb.HealthCheckRequest(service=""), timeout=5)
        check(r.status == SERVING, "%s: health %s" % (what, r.status))
        r = filt("probe", ["a", "b"])
        check(list(r.kept_ids) == ["a", "b"], "%s: probe Filter %s" % (what, list(r.kept_ids)))

    # ---- health ----------------------------------------------------------
    for svc in ("", "dedup.v1.Dedup"):
        r = health.Check(hpb.HealthCheckRequest(service=svc), timeout=5)
        check(r.status == SERVING, "health %r: %s" % (svc, r.status))
    expect_error(lambda: health.Check(hpb.HealthCheckRequest(service="no.such.Service"),
                                      timeout=5),
                 grpc.StatusCode.NOT_FOUND, details='unknown service "no.such.Service"',
                 what="health of an unknown service")
    watch = health.Watch(hpb.HealthCheckRequest(service=""), timeout=5)
    first = next(watch)
    check(first.status == SERVING, "Health/Watch: first status %s" % first.status)
    watch.cancel()
    harness.log("health ok")

    # ---- deliveries and plays ----------------------------------------------
    r = dedup.RecordDelivery(pb.RecordDeliveryRequest(user_id="u1", item_ids=["d1", "d2"]),
                             timeout=10)
    check(r.recent_size == 2, "recent_size %d, want 2" % r.recent_size)
    r = filt("u1", ["f1", "d1", "f2", "d2"], explain=True)
    check(list(r.kept_ids) == ["f1", "f2"], "after delivery: kept %s" % list(r.kept_ids))
    check(not r.degraded, "degraded with redis up")
    check(r.removed_delivered == 2, "removed_delivered %d" % r.removed_delivered)
    check([(x.index, x.reason) for x in r.removed] == [(1, pb.REASON_DELIVERED),
                                                         (3, pb.REASON_DELIVERED)],
          "explain after delivery: %s" % r.removed)

    r = dedup.RecordPlays(pb.RecordPlaysRequest(user_id="u1", plays=[
        pb.Play(item_id="p1"), pb.Play(item_id="p2", played_at_ms=now_ms - 60000)]), timeout=10)
    check(r.accepted == 2 and r.expired == 0, "RecordPlays: %s" % r)
    r = filt("u1", ["p1", "f1", "p2", "d1", "f1", "f3"], explain=True)
    check(list(r.kept_ids) == ["f1", "f3"], "after plays: kept %s" % list(r.kept_ids))
    check((r.removed_played, r.removed_delivered, r.removed_duplicate) == (2, 1, 1),
          "counters %s" % r)
    check([(x.index, x.reason) for x in r.removed] == [
        (0, pb.REASON_PLAYED), (2, pb.REASON_PLAYED), (3, pb.REASON_DELIVERED),
        (4, pb.REASON_DUPLICATE)], "explain after plays: %s" % r.removed)
    # Both played and delivered: DELIVERED, counted once; its repeat DUPLICATE.
    dedup.RecordPlays(pb.RecordPlaysRequest(user_id="u1", plays=[pb.Play(item_id="pd")]),
                      timeout=10)
    dedup.RecordDelivery(pb.RecordDeliveryRequest(user_id="u1", item_ids=["pd"]), timeout=10)
    r = filt("u1", ["pd", "f1", "pd"], explain=True)
    check((r.removed_played, r.removed_delivered, r.removed_duplicate) == (0, 1, 1),
          "played and delivered: counters %s" % r)
    check([(x.index, x.reason) for x in r.removed] == [
        (0, pb.REASON_DELIVERED), (2, pb.REASON_DUPLICATE)], "played and delivered: %s" % r.removed)
    r = filt("u1", ["p1", "f1", "p2", "d1", "f1", "f3"], mode=pb.RESPONSE_MODE_INDEXES)
    check(list(r.kept_indexes) == [1, 5] and not r.kept_ids and not r.removed,
          "index mode: %s" % r)
    # Scenes are separate namespaces.
    r = filt("u1", ["p1", "d1"], scene="other")
    check(list(r.kept_ids) == ["p1", "d1"], "other scene: %s" % list(r.kept_ids))

    # Lookback and expiry.
    r = dedup.RecordPlays(pb.RecordPlaysRequest(user_id="u2", plays=[
        pb.Play(item_id="tenago", played_at_ms=now_ms - 10 * DAY_MS),
        pb.Play(item_id="ancient", played_at_ms=now_ms - 200 * DAY_MS)]), timeout=10)
    check(r.accepted == 1 and r.expired == 1, "expiry: %s" % r)
    ids = ["tenago", "ancient", "new"]
    check(list(filt("u2", ids, lookback_days=3).kept_ids) == ids, "lookback 3")
    check(list(filt("u2", ids, lookback_days=30).kept_ids) == ["ancient", "new"], "lookback 30")
    check(list(filt("u2", ids).kept_ids) == ["ancient", "new"], "lookback 0")

    # ForgetUser: plays and deliveries.
    dedup.ForgetUser(pb.ForgetUserRequest(user_id="u1"), timeout=10)
    r = filt("u1", ["p1", "d1", "p2", "d2"])
    check(list(r.kept_ids) == ["p1", "d1", "p2", "d2"], "after forget: %s" % list(r.kept_ids))
    harness.log("semantics ok")

    # ---- bad input -------------------------------------------------------
    INV, EXH = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED
    expect_error(lambda: filt("", ["a"]), INV, details="user_id is empty", what="empty user")
    expect_error(lambda: filt("u", ["a"] * 20001), EXH,
                 details="candidate_ids has 20001 entries, more than rpc.max_candidates=20000",
                 what="too many candidates")
    expect_error(lambda: filt("u", ["a", "b", "c", "x" * 257]), INV,
                 details="candidate_ids[3] is 257 bytes, longer than rpc.max_id_bytes=256",
                 what="long id")
    expect_error(lambda: filt("u" * 300, ["a"]), INV,
                 details="user_id is 300 bytes, longer than rpc.max_id_bytes=256",
                 what="long user")
    expect_error(lambda: dedup.RecordDelivery(pb.RecordDeliveryRequest(user_id="", item_ids=["a"]),
                                              timeout=5),
                 INV, details="user_id is empty", what="RecordDelivery empty user")
    expect_error(lambda: dedup.RecordPlays(pb.RecordPlaysRequest(user_id="u", plays=[
        pb.Play(item_id="ok"), pb.Play(item_id="later", played_at_ms=now_ms + 2 * 3600000)]),
        timeout=5), INV, contains="plays[1].played_at_ms is ", what="future play")
    expect_error(lambda: dedup.ForgetUser(pb.ForgetUserRequest(user_id=""), timeout=5), INV,
                 details="user_id is empty", what="ForgetUser empty user")
    # Bytes that are not a FilterRequest at all.
    raw = ch.unary_unary("/dedup.v1.Dedup/Filter", request_serializer=None,
                         response_deserializer=None)
    expect_error(lambda: raw(b"\x0a\xff\xff\xff\xff\x0f", timeout=5), INV,
                 details="request is not a valid dedup.v1.FilterRequest", what="garbage bytes")
    # Strings proto3 clients cannot send: not UTF-8, or holding a NUL (which
    # protobuf-c's C strings once cut at, "victim\0x" acting on "victim").
    # Sent through a serializer built here from (field number, bytes) pairs.
    def ser(fields):
        return b"".join(bytes([n << 3 | 2, len(v)]) + v for n, v in fields)
    hand = {m: ch.unary_unary("/dedup.v1.Dedup/" + m, request_serializer=ser,
                              response_deserializer=None)
            for m in ("Filter", "RecordDelivery", "RecordPlays", "ForgetUser")}
    expect_error(lambda: hand["Filter"]([(1, b"u"), (2, b"ok"), (2, b"bad\xff")], timeout=5),
                 INV, details="candidate_ids[1] is not valid UTF-8", what="Filter bad UTF-8")
    expect_error(lambda: hand["Filter"]([(1, b"u\xc0\x80"), (2, b"ok")], timeout=5), INV,
                 details="user_id is not valid UTF-8", what="Filter overlong user")
    expect_error(lambda: hand["Filter"]([(1, b"victim\0x"), (2, b"ok")], timeout=5), INV,
                 details="user_id holds a NUL byte", what="Filter NUL user")
    expect_error(lambda: hand["RecordDelivery"]([(1, b"u"), (2, b"a\0b")], timeout=5), INV,
                 details="item_ids[0] holds a NUL byte", what="RecordDelivery NUL item")
    expect_error(lambda: hand["RecordPlays"]([(1, b"u"), (2, b"\x0a\x02\xed\xa0")], timeout=5),
                 INV, details="plays[0].item_id is not valid UTF-8",
                 what="RecordPlays bad UTF-8")
    expect_error(lambda: hand["ForgetUser"]([(1, b"victim\0x")], timeout=5), INV,
                 details="user_id holds a NUL byte", what="ForgetUser NUL user")
    # The same serializer with valid strings (multibyte ones too) works.
    r = pb.FilterResponse.FromString(hand["Filter"](
        [(1, "ü".encode()), (2, "é-1".encode()), (2, b"plain")], timeout=5))
    check(list(r.kept_ids) == ["é-1", "plain"], "hand-built Filter: %s" % list(r.kept_ids))
    check(len(filt("u", ["a", "b"]).kept_ids) == 2, "Filter after bad strings")
    # Past rpc.max_message_bytes (2 MiB): refused by gRPC itself.
    expect_error(lambda: filt("u", ["y" * 250 + str(i) for i in range(9000)]), EXH,
                 what="message over rpc.max_message_bytes")
    # An unknown method of the service.
    nosuch = ch.unary_unary("/dedup.v1.Dedup/NoSuch", request_serializer=None,
                            response_deserializer=None)
    expect_error(lambda: nosuch(b"", timeout=5), grpc.StatusCode.UNIMPLEMENTED,
                 what="unknown method")
    healthy("after bad input")

    # Bad requests interleaved with good ones from several threads: the good
    # ones all succeed with the right answer.
    errors = []

    def mixed(t):
        try:
            for i in range(30):
                if i % 3 == 0:
                    try:
                        filt("", ["a"])
                        errors.append("empty user accepted")
                    except grpc.RpcError as e:
                        if e.code() != INV:
                            errors.append("bad call: %s" % e.code())
                else:
                    r = filt("mix%d" % t, ["a", "b", "a"])
                    if list(r.kept_ids) != ["a", "b"]:
                        errors.append("good call: %s" % list(r.kept_ids))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=mixed, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errors, "interleaved calls: %s" % errors[:5])
    harness.log("bad input ok")

    # ---- 10,000 candidates -----------------------------------------------
    cands = ["vid-%06d" % i for i in range(10000)]
    played = cands[::5]          # 2,000
    delivered = cands[1::100]    # 100
    for i in range(0, len(played), 1000):
        r = dedup.RecordPlays(pb.RecordPlaysRequest(user_id="heavy", plays=[
            pb.Play(item_id=x) for x in played[i:i + 1000]]), timeout=30)
        check(r.accepted == len(played[i:i + 1000]), "heavy plays: %s" % r)
    dedup.RecordDelivery(pb.RecordDeliveryRequest(user_id="heavy", item_ids=delivered),
                         timeout=10)
    gone = set(played) | set(delivered)
    want = [c for c in cands if c not in gone]
    t0 = time.monotonic()
    r = filt("heavy", cands, explain=True)
    ms = (time.monotonic() - t0) * 1000
    check(list(r.kept_ids) == want, "10k: kept %d, want %d" % (len(r.kept_ids), len(want)))
    check((r.removed_played, r.removed_delivered) == (2000, 100), "10k counters: %s %s"
          % (r.removed_played, r.removed_delivered))
    check(len(r.removed) == 2100, "10k explain: %d" % len(r.removed))
    r = filt("heavy", cands, mode=pb.RESPONSE_MODE_INDEXES)
    check(list(r.kept_indexes) == [i for i, c in enumerate(cands) if c not in gone],
          "10k index mode")
    harness.log("10,000 candidates ok (first call %.1f ms)" % ms)

    # ---- deadlines -------------------------------------------------------
    # A 1 us deadline: grpc sends timeouts rounded up to whole units (here
    # 1 ms), so the server may answer in time and the call may beat the
    # client's own timer; DEADLINE_EXCEEDED must come, OK is the only other
    # answer allowed.
    outcomes = []
    for _ in range(20):
        try:
            dedup.Filter(pb.FilterRequest(user_id="heavy", candidate_ids=cands), timeout=1e-6)
            outcomes.append("OK")
        except grpc.RpcError as e:
            outcomes.append(e.code().name)
    check(set(outcomes) <= {"OK", "DEADLINE_EXCEEDED"} and "DEADLINE_EXCEEDED" in outcomes,
          "1 us deadline: %s" % outcomes)
    # Short deadlines under load: only OK or DEADLINE_EXCEEDED, never
    # anything else, and nothing wedged afterwards.
    codes = {}
    lock = threading.Lock()

    def rushed():
        for i in range(20):
            try:
                dedup.Filter(pb.FilterRequest(user_id="heavy", candidate_ids=cands),
                             timeout=0.002 * 3 ** (i % 5))  # 2 .. 162 ms
                c = grpc.StatusCode.OK
            except grpc.RpcError as e:
                c = e.code()
            with lock:
                codes[c] = codes.get(c, 0) + 1

    ts = [threading.Thread(target=rushed) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    harness.log("short deadlines under load:", {str(k): v for k, v in codes.items()})
    check(set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED},
          "short deadlines gave %s" % codes)
    healthy("after deadlines")
    r = filt("heavy", cands)
    check(list(r.kept_ids) == want, "10k after deadlines")
    harness.log("deadlines ok")

    # ---- TLS -------------------------------------------------------------
    tls_test(redis, SERVING)
    poller_test(redis)

    # ---- SIGTERM with calls in flight --------------------------------------
    stop = threading.Event()
    seen = {}

    def busy():
        while not stop.is_set():
            try:
                dedup.Filter(pb.FilterRequest(user_id="heavy", candidate_ids=cands), timeout=10)
                c = grpc.StatusCode.OK
            except grpc.RpcError as e:
                c = e.code()
            with lock:
                seen[c] = seen.get(c, 0) + 1
            if c != grpc.StatusCode.OK:
                return

    ts = [threading.Thread(target=busy) for _ in range(4)]
    for t in ts:
        t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    d.proc.signal(signal.SIGTERM)
    try:
        d.proc.p.wait(30)
    except subprocess.TimeoutExpired:
        harness.fail("dedupd did not exit within 30 s of SIGTERM:\n" + d.proc.tail())
    stop.set()
    for t in ts:
        t.join()
    harness.log("exit after SIGTERM in %.2f s, calls: %s" % (
        time.monotonic() - t0, {str(k): v for k, v in seen.items()}))
    check(d.proc.p.returncode == 0, "dedupd exit code %s:\n%s" % (d.proc.p.returncode,
                                                                d.proc.tail()))
    # A call is OK (it was being worked on, or matched before the server
    # stopped accepting), UNAVAILABLE (refused: the connection was going
    # away) or CANCELLED (it reached grpc core during shutdown but was never
    # handed to a worker; grpc core kills such calls itself). Calls the
    # workers had started are never cut off within the grace period: the
    # log has no "cancelling calls" line.
    check(set(seen) <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE,
                        grpc.StatusCode.CANCELLED},
          "calls around SIGTERM: %s" % seen)
    out = d.proc.output()
    for needle in ("health=NOT_SERVING", "module=rpc msg=stopped", "msg=stopped"):
        check(needle in out, "log lacks %r:\n%s" % (needle, d.proc.tail()))
    check("cancelling calls" not in out, "calls were cancelled within the grace period")
    expect_error(lambda: health.Check(hpb.HealthCheckRequest(service=""), timeout=2),
                 grpc.StatusCode.UNAVAILABLE, what="health after exit")
    ch.close()

    grace_test()
    harness.log("PASS")


def grace_test():
    # A "Redis" that accepts connections and never answers: every Filter
    # blocks in the Redis fetch for recent.timeout_ms.
    hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    held = []

    def accept():
        while True:
            try:
                c, _ = hole.accept()
            except OSError:
                return
            held.append(c)

    threading.Thread(target=accept, daemon=True).start()
    d = Dedupd("127.0.0.1:%d" % hole.getsockname()[1],
               {"recent.timeout_ms": "3000", "rpc.shutdown_grace_ms": "300",
                "rpc.threads": "1"}, name="dedupd-grace")
    ch = grpc.insecure_channel(d.addr)
    stub = pbg.DedupStub(ch)
    result = {}

    def stuck():
        try:
            stub.Filter(pb.FilterRequest(user_id="g", candidate_ids=["a"]), timeout=20)
            result["code"] = grpc.StatusCode.OK
        except grpc.RpcError as e:
            result["code"] = e.code()

    t = threading.Thread(target=stuck)
    t.start()
    time.sleep(0.5)  # the call is now waiting on the silent Redis
    t0 = time.monotonic()
    d.proc.signal(signal.SIGTERM)
    try:
        d.proc.p.wait(15)
    except subprocess.TimeoutExpired:
        harness.fail("dedupd with a stuck call did not exit in 15 s:\n" + d.proc.tail())
    took = time.monotonic() - t0
    t.join(20)
    harness.log("stuck call: %s, exit after %.2f s" % (result.get("code"), took))
    check(d.proc.p.returncode == 0, "exit code %s:\n%s" % (d.proc.p.returncode, d.proc.tail()))
    check("cancelling calls" in d.proc.output(), "no cancel after the grace period:\n"
          + d.proc.tail())
    # Cancelled server-side; the client sees the cancel or the connection
    # being cut, depending on which reaches it first.
    check(result.get("code") in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE),
          "stuck call ended %s, want CANCELLED or UNAVAILABLE" % result.get("code"))
    check(took < 8, "exit took %.1f s" % took)
    ch.close()
    hole.close()
    for c in held:
        c.close()
    harness.log("grace ok")


def poller_test(redis):
    """rpc.poller decides grpc's polling engine whatever GRPC_POLL_STRATEGY
    the environment has, and Filter answers on each, with and without
    rpc.spin_us, and dedupd stops cleanly. grpc names the engine it picked
    in its debug log, which reaches dedupd's log (module=grpc) at
    log.level = debug. At most usable CPUs - 1 workers spin at once, counted
    from the CPUs dedupd may run on: confined to one (a cpuset or taskset),
    none spins, as a spinning worker would take the only core from the
    busy ones."""
    mask = os.sched_getaffinity(0)
    for poller, env_value, spin, cpus in (("poll", "epoll1", "500", mask),
                                          ("epoll1", "poll", "0", mask),
                                          ("poll", "epoll1", "500", {min(mask)})):
        env = dict(os.environ, GRPC_VERBOSITY="debug", GRPC_POLL_STRATEGY=env_value)
        what = "rpc.poller=%s rpc.spin_us=%s on %d CPUs" % (poller, spin, len(cpus))
        os.sched_setaffinity(0, cpus)  # inherited by dedupd
        try:
            d = harness.Dedupd({"ingest.enabled": "false", "recent.redis": redis.addr,
                                "rpc.poller": poller, "rpc.spin_us": spin,
                                "log.level": "debug"},
                               name="dedupd-%s-%s-%d" % (poller, spin, len(cpus)), env=env)
        finally:
            os.sched_setaffinity(0, mask)
        out = d.run_log()
        want = "spin_us=%s spin_max=%d" % (spin, len(cpus) - 1 if spin != "0" else 0)
        check(want in out, "%s: the start line lacks %s:\n%s"
              % (what, want, "\n".join(l for l in out.splitlines() if "msg=started" in l)))
        check('module=grpc msg="Using polling engine: %s"' % poller in out,
              "%s with GRPC_POLL_STRATEGY=%s: grpc's log names another engine:\n%s"
              % (what, env_value, "\n".join(l for l in out.splitlines() if "polling" in l)))
        ch = grpc.insecure_channel(d.rpc_addr)
        grpc.channel_ready_future(ch).result(timeout=20)
        stub = pbg.DedupStub(ch)
        stub.RecordPlays(pb.RecordPlaysRequest(user_id="p", plays=[
            pb.Play(item_id="seen", played_at_ms=int(time.time() * 1000))]), timeout=10)
        for _ in range(20):  # several calls on the one connection
            r = stub.Filter(pb.FilterRequest(user_id="p", candidate_ids=["seen", "new", "new"]),
                            timeout=10)
            check(list(r.kept_ids) == ["new"], "%s: Filter kept %s" % (what, list(r.kept_ids)))
        ch.close()
        d.stop()
    harness.log("pollers ok")


def tls_test(redis, SERVING):
    openssl = shutil.which("openssl")
    if not openssl:
        harness.skip("openssl is not installed (needed for the TLS check)")
    tdir = harness.tmpdir("dedupd-tls-")
    cert, key = os.path.join(tdir, "cert.pem"), os.path.join(tdir, "key.pem")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    d = Dedupd(redis.addr, {"rpc.tls_cert": cert, "rpc.tls_key": key}, name="dedupd-tls")
    with open(cert, "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    tch = grpc.secure_channel("localhost:%d" % d.port, creds)
    grpc.channel_ready_future(tch).result(timeout=20)
    r = hpbg.HealthStub(tch).Check(hpb.HealthCheckRequest(service=""), timeout=5)
    check(r.status == SERVING, "TLS health %s" % r.status)
    r = pbg.DedupStub(tch).Filter(pb.FilterRequest(user_id="t", candidate_ids=["a", "a"]),
                                  timeout=5)
    check(list(r.kept_ids) == ["a"], "TLS Filter %s" % list(r.kept_ids))
    tch.close()
    # A plaintext client gets nowhere on the TLS port.
    pch = grpc.insecure_channel("127.0.0.1:%d" % d.port)
    expect_error(lambda: hpbg.HealthStub(pch).Check(hpb.HealthCheckRequest(service=""),
                                                    timeout=2),
                 grpc.StatusCode.UNAVAILABLE, what="plaintext to TLS port")
    pch.close()
    rc = d.proc.stop()
    check(rc == 0, "TLS dedupd exit code %s" % rc)
    harness.log("TLS ok")


if __name__ == "__main__":
    main()
