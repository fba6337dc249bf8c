#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Slow clients on the admin listener: 100 connections from another
loopback address (127.0.0.2) trickle one header byte every half second
for 10 s; meanwhile /healthz from 127.0.0.1 answers 200 within 1 s every
time (admin.max_connections_per_ip refuses most of them), and the
tricklers that were accepted are closed once admin.request_timeout_ms has
passed, although every byte they send would reset an idle timeout.

Loopback only; 100 sockets, 10 s.
"""
import http.client
import socket
import time

import harness
from test_clients_lib import Dedupd

TRICKLERS = 100
DURATION_S = 10.0
REQUEST_TIMEOUT_MS = 2000


def healthz(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        c.request("GET", "/healthz")
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def main():
    redis = harness.Redis()
    admin = harness.free_port()
    d = Dedupd(redis.addr, extra={
        "admin.listen": "127.0.0.1:%d" % admin,
        "admin.request_timeout_ms": str(REQUEST_TIMEOUT_MS),
    })
    if healthz(admin) != 200:
        harness.fail("/healthz before the tricklers")

    socks = []
    for _ in range(TRICKLERS):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.2", 0))
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", admin))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            socks.append([s, time.monotonic(), None])  # socket, opened, closed at
        except OSError:
            s.close()
    harness.log("%d trickling connections opened" % len(socks))

    start = time.monotonic()
    checks, worst = 0, 0.0
    line = b"X-Slow: " + b"a" * 1000 + b"\r\n"
    pos = 0
    while time.monotonic() - start < DURATION_S:
        # One byte per connection per round; EOF or an error = closed by
        # the server (a refused connection is closed at once).
        now = time.monotonic()
        for e in socks:
            if e[2] is not None:
                continue
            try:
                e[0].sendall(line[pos % len(line):pos % len(line) + 1])
                e[0].setblocking(False)
                try:
                    if e[0].recv(4096) == b"":
                        e[2] = now
                except BlockingIOError:
                    pass
                finally:
                    e[0].setblocking(True)
            except OSError:
                e[2] = now
        pos += 1
        t0 = time.monotonic()
        try:
            st = healthz(admin)
        except OSError as ex:
            harness.fail("/healthz with %d tricklers: %s after %.2f s"
                         % (len(socks), ex, time.monotonic() - t0))
        took = time.monotonic() - t0
        worst = max(worst, took)
        checks += 1
        if st != 200:
            harness.fail("/healthz answered %d" % st)
        time.sleep(0.5)

    alive = [e for e in socks if e[2] is None]
    cut = [e for e in socks if e[2] is not None and e[2] - e[1] >= REQUEST_TIMEOUT_MS / 1000]
    harness.log("/healthz answered %d times, slowest %.3f s; tricklers still open %d, "
                "closed after the deadline %d, refused or closed sooner %d"
                % (checks, worst, len(alive), len(cut), len(socks) - len(alive) - len(cut)))
    if alive:
        harness.fail("%d trickling connections still open after %.0f s "
                     "(admin.request_timeout_ms=%d)" % (len(alive), DURATION_S, REQUEST_TIMEOUT_MS))
    if not cut:
        harness.fail("no trickling connection was accepted and then closed at its deadline")
    for e in socks:
        e[0].close()
    if not d.alive():
        harness.fail("dedupd died:\n" + d.proc.tail())
    d.stop()
    redis.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
