#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Hostile clients: while one misbehaves, a well-behaved client's Filter
calls keep answering OK within their deadline.

(a) a raw HTTP/2 client with SETTINGS_INITIAL_WINDOW_SIZE = 0 opens more
    Filter calls than there are call slots and never reads a reply: its
    calls are cancelled after rpc.send_timeout_ms (RST_STREAM), so the
    slots come back; streams past rpc.max_streams_per_connection are
    refused (RST_STREAM REFUSED_STREAM);
(b) many connections that say hello and then nothing: closed after
    rpc.max_connection_idle_ms;
(c) a gzip-compressed request: UNIMPLEMENTED (rpc.compression = off);
(d) RecordPlays requests of millions of empty plays: RESOURCE_EXHAUSTED
    from a count on the wire, before any decoding, so the daemon's peak
    memory stays far below what decoding them costs (hundreds of MB).

grpcio cannot misbehave enough for (a) and (b), so those speak HTTP/2 by
hand: the connection preface, SETTINGS, HEADERS as HPACK literals without
indexing, DATA with the gRPC message prefix. Loopback only; every loop is
bounded in count and time.
"""
import socket
import struct
import threading
import time

import harness
from test_clients_lib import Dedupd, python_stubs

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0, 1, 3, 4, 6, 7
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
REFUSED_STREAM = 0x7

SLOTS = 8               # rpc.threads 2 x rpc.prepost 4 Filter slots
SEND_TIMEOUT_MS = 1000
MAX_STREAMS = 24
IDLE_MS = 1500
GOOD_DEADLINE_S = 5.0   # the well-behaved client's per-call deadline


def frame(typ, flags, sid, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([typ, flags]) + sid.to_bytes(4, "big") + payload


def hpack_literal(name, value):
    """A header field as an HPACK literal without indexing, new name, no
    Huffman coding (RFC 7541 6.2.2); names and values under 127 bytes."""
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


class RawH2:
    """One HTTP/2 connection spoken by hand. Acknowledges the server's
    SETTINGS and PINGs (so it is a legal peer) but never sends a
    WINDOW_UPDATE: with WINDOW=0 the server cannot send a byte of any
    reply. Records which streams the server ended (RST_STREAM, or a frame
    with END_STREAM) and whether it said GOAWAY or closed."""

    def __init__(self, port, window=0):
        self.port = port
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.s.settimeout(None)
        self.lock = threading.Lock()
        self.next_id = 1
        self.ended = {}        # stream id -> RST_STREAM code (or -1: ended normally)
        self.goaway = False
        self.closed = threading.Event()
        self.acked = threading.Event()  # the server's SETTINGS acknowledged
        self.send(PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", 0x4, window)))
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def send(self, b):
        with self.lock:
            self.s.sendall(b)

    def _read(self):
        buf = b""
        try:
            while True:
                d = self.s.recv(65536)
                if not d:
                    break
                buf += d
                while len(buf) >= 9:
                    n = int.from_bytes(buf[:3], "big")
                    if len(buf) < 9 + n:
                        break
                    typ, flags = buf[3], buf[4]
                    sid = int.from_bytes(buf[5:9], "big") & 0x7fffffff
                    payload, buf = buf[9:9 + n], buf[9 + n:]
                    if typ == SETTINGS and not flags & ACK:
                        self.send(frame(SETTINGS, ACK, 0))
                        self.acked.set()
                    elif typ == PING and not flags & ACK:
                        self.send(frame(PING, ACK, 0, payload))
                    elif typ == RST_STREAM:
                        self.ended[sid] = int.from_bytes(payload[:4], "big")
                    elif typ in (HEADERS, DATA) and flags & END_STREAM:
                        self.ended.setdefault(sid, -1)
                    elif typ == GOAWAY:
                        self.goaway = True
        except OSError:
            pass
        self.closed.set()

    def call(self, path, message, extra_headers=()):
        """Start one unary call on a new stream: HEADERS, then DATA with
        the request (uncompressed) and END_STREAM. Returns the stream id."""
        sid = self.next_id
        self.next_id += 2
        hdrs = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
                (b":authority", b"127.0.0.1:%d" % self.port),
                (b"content-type", b"application/grpc"), (b"te", b"trailers")]
        block = b"".join(hpack_literal(n, v) for n, v in list(hdrs) + list(extra_headers))
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        self.send(frame(HEADERS, END_HEADERS, sid, block) + frame(DATA, END_STREAM, sid, body))
        return sid

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


class GoodClient:
    """A well-behaved client: Filter calls in a loop on its own connection,
    each with a deadline of GOOD_DEADLINE_S, counting OK answers and
    keeping the failures."""

    def __init__(self, stub, pb):
        self.stub, self.pb = stub, pb
        self.ok = 0
        self.failures = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        req = self.pb.FilterRequest(user_id="good-user", candidate_ids=["a", "b", "c"])
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                r = self.stub.Filter(req, timeout=GOOD_DEADLINE_S)
                if list(r.kept_ids) != ["a", "b", "c"]:
                    self.failures.append("kept %s" % list(r.kept_ids))
                self.ok += 1
            except Exception as e:  # grpc.RpcError, with its code
                code = e.code() if hasattr(e, "code") else e
                self.failures.append("%s after %.1f s" % (code, time.monotonic() - t0))
            self.stop.wait(0.05)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop.set()
        self.t.join(GOOD_DEADLINE_S + 5)

    def check(self, phase):
        if self.failures:
            harness.fail("%s: the well-behaved client's Filter failed %d times (first: %s), "
                         "%d OK" % (phase, len(self.failures), self.failures[0], self.ok))
        if self.ok < 3:
            harness.fail("%s: the well-behaved client got only %d answers" % (phase, self.ok))
        harness.log("%s: well-behaved client %d OK, none failed" % (phase, self.ok))


def vm_hwm_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def phase_unread_replies(d, pb, good):
    """(a): keep 3 x SLOTS Filter calls open whose replies cannot be sent,
    on two connections, for 8 s; then one connection asks for more
    streams than rpc.max_streams_per_connection."""
    req = pb.FilterRequest(user_id="hostile", candidate_ids=["x%d" % i for i in range(50)])
    msg = req.SerializeToString()
    conns = [RawH2(d.port), RawH2(d.port)]
    opened = 0
    with good:
        until = time.monotonic() + 8
        while time.monotonic() < until:
            for c in conns:
                live = (c.next_id - 1) // 2 - len(c.ended)
                while live < 3 * SLOTS // 2 and opened < 2000:
                    c.call(b"/dedup.v1.Dedup/Filter", msg)
                    opened += 1
                    live += 1
            time.sleep(0.05)
    cancelled = sum(1 for c in conns for code in c.ended.values() if code >= 0)
    harness.log("(a) hostile opened %d unread calls, %d cancelled by the server"
                % (opened, cancelled))
    good.check("(a) unread replies")
    if cancelled == 0:
        harness.fail("(a) no unread call was cancelled (rpc.send_timeout_ms)")
    for c in conns:
        c.close()

    c = RawH2(d.port)
    # The server enforces its limit once the peer has acknowledged it.
    c.acked.wait(5)
    time.sleep(0.2)
    for _ in range(MAX_STREAMS + 10):
        c.call(b"/dedup.v1.Dedup/Filter", msg)
    until = time.monotonic() + 5
    while time.monotonic() < until:
        refused = sum(1 for code in c.ended.values() if code == REFUSED_STREAM)
        if refused >= 10 or c.closed.is_set():
            break
        time.sleep(0.05)
    closed = c.closed.is_set()
    c.close()
    # grpc core refuses the streams past the limit, or (the version in
    # Debian 12) closes the connection that opened them.
    harness.log("(a) %d streams past rpc.max_streams_per_connection=%d: %d refused, "
                "connection %s" % (10, MAX_STREAMS, refused, "closed" if closed else "open"))
    if refused < 10 and not closed:
        harness.fail("(a) %d streams refused and the connection open, want the 10 past "
                     "the limit refused" % refused)


def phase_idle_connections(d, good):
    """(b): 64 connections that complete the HTTP/2 hello and then send
    nothing are closed after rpc.max_connection_idle_ms."""
    with good:
        conns = [RawH2(d.port, window=65535) for _ in range(64)]
        until = time.monotonic() + IDLE_MS / 1000 + 8
        for c in conns:
            c.closed.wait(max(0.0, until - time.monotonic()))
    open_ = sum(1 for c in conns if not c.closed.is_set())
    for c in conns:
        c.close()
    good.check("(b) idle connections")
    if open_:
        harness.fail("(b) %d of 64 idle connections still open %.1f s after "
                     "rpc.max_connection_idle_ms" % (open_, 8.0))
    harness.log("(b) all 64 idle connections closed by the server")


def phase_gzip(d, stub, pb, grpc, good):
    """(c): a gzip-compressed request is refused UNIMPLEMENTED."""
    with good:
        req = pb.FilterRequest(user_id="gz", candidate_ids=["a" * 100] * 1000)
        try:
            stub.Filter(req, timeout=5, compression=grpc.Compression.Gzip)
            harness.fail("(c) a gzip-compressed Filter was served")
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                harness.fail("(c) gzip request: %s %s, want UNIMPLEMENTED"
                             % (e.code(), e.details()))
            harness.log("(c) gzip request: UNIMPLEMENTED (%s)" % e.details())
        time.sleep(1)
    good.check("(c) gzip request")


def compression_on_bounds_inflated(redis, pb, pbg, grpc):
    """(c) with rpc.compression = on: a gzip request is served, and one
    that inflates past rpc.max_message_bytes is RESOURCE_EXHAUSTED."""
    d = Dedupd(redis.addr, name="dedupd-gzip",
               extra={"rpc.compression": "on", "rpc.max_message_bytes": "50000"})
    ch = grpc.insecure_channel(d.addr)
    stub = pbg.DedupStub(ch)
    ids = ["a" * 100 + str(i) for i in range(1000)]   # 105 KB, a few KB gzipped
    r = stub.Filter(pb.FilterRequest(user_id="gz", candidate_ids=ids[:10]), timeout=10,
                    compression=grpc.Compression.Gzip)
    if len(r.kept_ids) != 10:
        harness.fail("(c) compression on: small gzip request kept %d" % len(r.kept_ids))
    try:
        stub.Filter(pb.FilterRequest(user_id="gz", candidate_ids=ids), timeout=10,
                    compression=grpc.Compression.Gzip)
        harness.fail("(c) compression on: a request inflating past max_message_bytes was served")
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
            harness.fail("(c) compression on, inflated request: %s, want RESOURCE_EXHAUSTED"
                         % e.code())
        harness.log("(c) compression on: inflated request refused (%s)" % e.details())
    ch.close()
    d.stop()


def phase_huge_count(d, ch, grpc, good):
    """(d): 15 MB RecordPlays requests of 7.5 million empty plays each.
    Decoded, one cost the daemon over 600 MB; counted on the wire, it is
    refused before decoding."""
    n = 7_500_000
    user = b"huge"
    body = b"\x0a" + bytes([len(user)]) + user + b"\x12\x00" * n
    call = ch.unary_unary("/dedup.v1.Dedup/RecordPlays", request_serializer=lambda b: b,
                          response_deserializer=lambda b: b)
    before = vm_hwm_kb(d.proc.pid)
    with good:
        for i in range(3):
            try:
                call(body, timeout=30)
                harness.fail("(d) RecordPlays of %d plays was accepted" % n)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    harness.fail("(d) huge RecordPlays: %s %s, want RESOURCE_EXHAUSTED"
                                 % (e.code(), e.details()))
                if i == 0:
                    harness.log("(d) huge RecordPlays: RESOURCE_EXHAUSTED (%s)" % e.details())
        time.sleep(1)
    after = vm_hwm_kb(d.proc.pid)
    good.check("(d) huge-count RecordPlays")
    grew_mb = (after - before) / 1024
    harness.log("(d) peak RSS %d -> %d MB (+%.0f MB)" % (before // 1024, after // 1024, grew_mb))
    # The requests themselves are 15 MB each and gRPC holds one at a time
    # per call in flight; decoding one cost over 600 MB.
    if grew_mb > 150:
        harness.fail("(d) peak RSS grew by %.0f MB for requests refused on their count"
                     % grew_mb)


def main():
    pb, pbg, grpc = python_stubs()
    redis = harness.Redis()
    d = Dedupd(redis.addr, extra={
        "rpc.threads": "2",
        "rpc.prepost": "4",
        "rpc.send_timeout_ms": str(SEND_TIMEOUT_MS),
        "rpc.max_streams_per_connection": str(MAX_STREAMS),
        "rpc.max_connection_idle_ms": str(IDLE_MS),
        "rpc.max_candidates": "20000",
    })
    ch = grpc.insecure_channel(d.addr, options=[("grpc.max_send_message_length", 32 << 20)])
    grpc.channel_ready_future(ch).result(timeout=20)
    stub = pbg.DedupStub(ch)

    phase_unread_replies(d, pb, GoodClient(stub, pb))
    phase_idle_connections(d, GoodClient(stub, pb))
    phase_gzip(d, stub, pb, grpc, GoodClient(stub, pb))
    phase_huge_count(d, ch, grpc, GoodClient(stub, pb))
    compression_on_bounds_inflated(redis, pb, pbg, grpc)

    if not d.alive():
        harness.fail("dedupd died:\n" + d.proc.tail())
    ch.close()
    d.stop()
    redis.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
