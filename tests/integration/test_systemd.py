# SPDX-License-Identifier: Apache-2.0
"""deploy/systemd/dedupd.service and dedupd's side of Type=notify.

1. `systemd-analyze verify` on the unit. verify insists that ExecStart's
   binary exists and is executable, and /usr/local/bin/dedupd (where
   `meson install` puts it) does not exist on a build machine; so we verify
   a copy whose ExecStart points at the binary in the build tree and which
   is otherwise byte for byte the shipped unit. verify exits 0 even when it
   warns (an unknown key, a bad value), so any output counts as a failure;
   a deliberately broken copy checks that this check can fail.
2. The hardening and lifecycle directives issue 6 asks for are present.
3. The unit's ExecStart command line is one dedupd accepts (checked with
   -t against conf/dedupd.conf).
4. The notify protocol for real, without systemd: dedupd started with
   NOTIFY_SOCKET (a datagram socket of ours) and WATCHDOG_USEC sends
   READY=1 once serving, WATCHDOG=1 repeatedly, STOPPING=1 on SIGTERM.
"""
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import fail, log  # noqa: E402

UNIT = os.path.join(harness.SOURCE_ROOT, "deploy", "systemd", "dedupd.service")
INSTALLED = "/usr/local/bin/dedupd"


def verify(path):
    r = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True)
    out = (r.stdout + r.stderr).strip()
    return r.returncode, out


def main():
    if shutil.which("systemd-analyze") is None:
        harness.skip("systemd-analyze is not installed (Debian package systemd)")
    dedupd = harness.build_path("src", "dedupd")
    text = open(UNIT).read()
    if ("ExecStart=%s " % INSTALLED) not in text:
        fail("ExecStart does not start %s" % INSTALLED)

    # 1. verify, on a copy that differs only in the binary's path.
    d = harness.tmpdir("dedupd-systemd-")
    copy = os.path.join(d, "dedupd.service")
    with open(copy, "w") as f:
        f.write(text.replace(INSTALLED, dedupd))
    rc, out = verify(copy)
    if rc != 0 or out:
        fail("systemd-analyze verify: rc=%d output:\n%s" % (rc, out))
    log("systemd-analyze verify: clean")
    broken = os.path.join(d, "broken.service")
    with open(broken, "w") as f:
        f.write(text.replace(INSTALLED, dedupd).replace("Type=notify", "Type=notfy")
                .replace("ProtectHome=yes", "ProtectHome=yes\nProtectHomes=yes"))
    rc, out = verify(broken)
    if rc == 0 and not out:
        fail("a broken unit verified clean: the check above proves nothing")
    log("a broken copy is caught:", out.splitlines()[0] if out else "rc=%d" % rc)

    # 2. the directives that make it a well-behaved service.
    want = {
        "Type": "notify", "User": "dedupd", "StateDirectory": "dedupd",
        "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
        "NoNewPrivileges": "yes", "ReadWritePaths": "/var/lib/dedupd",
    }
    keys = dict(re.findall(r"^(\w+)=(.*)$", text, re.M))
    for k, v in want.items():
        if keys.get(k) != v:
            fail("unit: %s=%r, want %r" % (k, keys.get(k), v))
    for k in ("LimitNOFILE", "WatchdogSec", "ExecReload"):
        if k not in keys:
            fail("unit: no %s" % k)

    # 3. ExecStart's arguments are valid for dedupd.
    argv = shlex.split(keys["ExecStart"])
    argv[0] = dedupd
    argv = [os.path.join(harness.SOURCE_ROOT, "conf", "dedupd.conf")
            if a == "/etc/dedupd/dedupd.conf" else a for a in argv]
    r = subprocess.run(argv + ["-t"], capture_output=True, text=True)
    if r.returncode != 0 or "configuration ok" not in r.stdout:
        fail("ExecStart arguments rejected: %s %s" % (r.stdout, r.stderr))

    # 4. the notify protocol.
    sock_path = os.path.join(d, "notify.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(sock_path)
    s.settimeout(0.2)
    env = dict(os.environ, NOTIFY_SOCKET=sock_path, WATCHDOG_USEC="400000")
    env.pop("WATCHDOG_PID", None)
    admin = harness.free_port()
    proc = harness.Proc([dedupd, "-o", "history.path=" + os.path.join(d, "db"),
                         "-o", "trace.path=" + os.path.join(d, "trace"),
                         "-o", "ingest.enabled=false", "-o", "rpc.listen=127.0.0.1:0",
                         "-o", "admin.listen=127.0.0.1:%d" % admin,
                         "-o", "recent.redis=127.0.0.1:1"], "dedupd-notify", env=env)
    got = []
    t0 = time.time()
    ready_at = None
    while time.time() - t0 < 20:
        if not proc.alive():
            fail("dedupd exited: %s" % proc.tail())
        try:
            msg = s.recv(4096).decode()
        except socket.timeout:
            continue
        got.append(msg)
        if "READY=1" in msg and ready_at is None:
            ready_at = time.time()
            # READY means serving: /readyz must already say so.
            st, body = http_get(admin, "/readyz")
            if st != 200:
                fail("READY=1 sent but /readyz is %d %s" % (st, body))
        if ready_at and time.time() - ready_at > 1.0:
            break
    if ready_at is None:
        fail("no READY=1 in %r" % got)
    pings = sum(m.count("WATCHDOG=1") for m in got)
    if pings < 3:  # 400 ms interval, pings every 200 ms, for > 1 s
        fail("only %d WATCHDOG=1 pings: %r" % (pings, got))
    proc.signal(15)
    stopping = False
    t0 = time.time()
    while time.time() - t0 < 10 and not stopping:
        try:
            stopping = "STOPPING=1" in s.recv(4096).decode()
        except socket.timeout:
            pass
    if not stopping:
        fail("no STOPPING=1 after SIGTERM")
    if proc.stop() != 0:
        fail("dedupd exit code %s: %s" % (proc.p.returncode, proc.tail()))
    log("notify: READY=1, %d WATCHDOG=1, STOPPING=1" % pings)
    log("PASS")


def http_get(port, path):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", path)
    r = c.getresponse()
    return r.status, r.read().decode()


if __name__ == "__main__":
    main()
