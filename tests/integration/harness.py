# SPDX-License-Identifier: Apache-2.0
"""Shared helpers for dedupd's integration tests.

Real servers only: redis-server from Debian on a free loopback port in a
temporary directory, the devbroker (librdkafka's mock cluster over TCP),
and the dedupd binary from the build tree. Everything started here is
stopped at exit, even when a test fails.

Skips: exit code 77 tells meson a test was skipped. skip() refuses to skip
when CI is set: there a missing server is a failure (exit 1).
"""
import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SOURCE_ROOT = os.environ.get("DD_SOURCE_ROOT", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_ROOT = os.environ.get("DD_BUILD_ROOT", os.path.join(SOURCE_ROOT, "build"))
IN_CI = bool(os.environ.get("CI"))

_procs = []
_tmpdirs = []


def log(*args):
    print("[%s]" % time.strftime("%H:%M:%S"), *args, file=sys.stderr, flush=True)


def skip(reason):
    """Skip locally (exit 77); fail in CI, where nothing may skip."""
    if IN_CI:
        log("FAIL (would skip, but CI is set):", reason)
        sys.exit(1)
    log("SKIP:", reason)
    sys.exit(77)


def fail(msg):
    log("FAIL:", msg)
    sys.exit(1)


def tmpdir(prefix="dedupd-test-"):
    d = tempfile.mkdtemp(prefix=prefix)
    _tmpdirs.append(d)
    return d


# Ports for the servers tests start. Binding port 0 and closing the socket
# is racy once tests run two at a time: the kernel hands the same port out
# again, to another test's bind(0) or as a connection's source port, before
# the server that was promised it binds it. So a port comes from below the
# kernel's ephemeral range (ip_local_port_range), which the kernel never
# hands out by itself, and is claimed with flock(2) on a file named after it
# in PORT_LOCK_DIR, held for the life of this process: no other process
# using this scheme (harness.py, tests/testlib.h, bench/*.sh) takes it
# meanwhile, and a server restarted on it finds it still free.
PORT_LOCK_DIR = os.environ.get("DD_TEST_PORT_DIR", "/tmp/dedupd-test-ports")
_held_ports = {}  # port -> lock file descriptor, kept open until exit


def port_range():
    """The ports free_port draws from: [lo, hi], below the ephemeral range
    (above it when too little lies below); DD_TEST_PORT_RANGE=LO-HI sets it
    (test_ports.py)."""
    if os.environ.get("DD_TEST_PORT_RANGE"):
        lo, hi = (int(x) for x in os.environ["DD_TEST_PORT_RANGE"].split("-"))
        return lo, hi
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph_lo, eph_hi = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        eph_lo, eph_hi = 32768, 60999
    if eph_lo - 1 >= 20000 + 4096:
        return 20000, eph_lo - 1
    if 65535 - eph_hi >= 4096:
        return eph_hi + 1, 65535
    fail("no room for test ports outside ip_local_port_range %d-%d" % (eph_lo, eph_hi))


def free_port():
    """A loopback port nobody is bound to, reserved for this process until
    it exits (see PORT_LOCK_DIR)."""
    import fcntl
    import random
    os.makedirs(PORT_LOCK_DIR, exist_ok=True)
    try:
        os.chmod(PORT_LOCK_DIR, 0o1777)
    except OSError:
        pass
    lo, hi = port_range()
    n = hi - lo + 1
    start = random.SystemRandom().randrange(n)
    for i in range(n):
        port = lo + (start + i) % n
        if port in _held_ports:
            continue
        try:
            fd = os.open(os.path.join(PORT_LOCK_DIR, str(port)),
                         os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        # Claimed; now it must also be free (no SO_REUSEADDR: a port with
        # connections in TIME_WAIT is passed over too).
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            os.close(fd)
            continue
        finally:
            s.close()
        _held_ports[port] = fd
        return port
    fail("no free test port in %d-%d" % (lo, hi))



_admin_token_file = None
ADMIN_TOKEN = "harness-admin-token-%d" % os.getpid()


def admin_token_file():
    """A file holding ADMIN_TOKEN, for admin.token_file (the operator pages
    /why and /trace want it) and dedupctl --admin-token-file."""
    global _admin_token_file
    if _admin_token_file is None:
        _admin_token_file = os.path.join(tmpdir("dedupd-admin-token-"), "token")
        with open(_admin_token_file, "w") as f:
            f.write(ADMIN_TOKEN + "\n")
    return _admin_token_file


def admin_auth():
    """The header that sends ADMIN_TOKEN (http_get's HEADERS)."""
    return {"Authorization": "Bearer " + ADMIN_TOKEN}


def http_get(port, path, timeout=5, headers=None):
    """GET http://127.0.0.1:PORT PATH with HEADERS: (status, body text);
    (0, reason) when nothing answers."""
    try:
        rq = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), headers=headers or {})
        with urllib.request.urlopen(rq, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


def metric_sum(port, name, must=()):
    """The sum of every /metrics series on admin PORT whose line starts
    with NAME and contains each string of MUST (0.0 when none does)."""
    st, body = http_get(port, "/metrics")
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name) and all(m in line for m in must):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_until(what, fn, timeout=120.0, every=0.2):
    """Call FN until it returns true; fail naming WHAT after TIMEOUT s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if fn():
            return
        time.sleep(every)
    fail("timed out waiting for " + what)


def wait_port(port, timeout=20.0, proc=None, host="127.0.0.1"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            fail("process exited with %s before listening on %d" % (proc.returncode, port))
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    fail("nothing listening on %s:%d after %.0fs" % (host, port, timeout))


def build_path(*parts):
    p = os.path.join(BUILD_ROOT, *parts)
    if not os.path.exists(p):
        fail("missing build output %s (run ninja first)" % p)
    return p


class Proc:
    """A started child process, killed at exit if still running."""

    def __init__(self, argv, name, logfile=None, env=None, cwd=None):
        self.argv = argv
        self.name = name
        self.logpath = logfile or os.path.join(tmpdir(), name + ".log")
        self._log = open(self.logpath, "ab")
        self.p = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                  start_new_session=True)
        _procs.append(self)

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            self.p.send_signal(sig)

    def kill9(self):
        if self.alive():
            self.p.send_signal(signal.SIGKILL)
        self.p.wait()

    def stop(self, timeout=30.0):
        """SIGTERM, wait, SIGKILL if needed. Returns the exit code."""
        if self.alive():
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                log("%s did not stop in %.0fs; killing" % (self.name, timeout))
                self.p.kill()
                self.p.wait()
        return self.p.returncode

    def output(self):
        self._log.flush()
        with open(self.logpath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def tail(self, n=40):
        return "\n".join(self.output().splitlines()[-n:])


class Redis:
    """redis-server on a free loopback port, in a temporary directory."""

    def __init__(self, port=None, password=None):
        exe = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)
        if exe is None:
            skip("redis-server is not installed")
        self.exe = exe
        self.dir = tmpdir("dedupd-redis-")
        self.port = port or free_port()
        self.password = password
        self.proc = None
        self.start()

    def start(self):
        argv = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "no", "--daemonize", "no"]
        if self.password:
            argv += ["--requirepass", self.password]
        self.proc = Proc(argv, "redis-%d" % self.port)
        wait_port(self.port, proc=self.proc.p)

    def stop(self):
        if self.proc:
            self.proc.stop()
            self.proc = None

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def cli(self, *args):
        """Run redis-cli against this server; returns stdout as text."""
        argv = ["redis-cli", "-p", str(self.port)]
        if self.password:
            argv += ["-a", self.password, "--no-auth-warning"]
        return subprocess.run(argv + [str(a) for a in args], check=True, capture_output=True,
                              text=True).stdout


class DevBroker:
    """tools/devbroker (librdkafka's mock cluster over TCP) with the given
    topics ("name:partitions"); down()/up() take the brokers down and back
    (SIGUSR1/SIGUSR2). Topics named in UNAVAILABLE (of TOPICS) look missing
    to metadata requests until available() (SIGHUP)."""

    def __init__(self, topics=("plays:8",), brokers=1, unavailable=()):
        self.dir = tmpdir("dedupd-broker-")
        bootstrap = os.path.join(self.dir, "bootstrap")
        argv = [build_path("tools", "devbroker"), "--bootstrap-file", bootstrap,
                "--brokers", str(brokers)]
        for t in topics:
            argv += ["--topic", t]
        for t in unavailable:
            argv += ["--unavailable", t]
        self.proc = Proc(argv, "devbroker")
        deadline = time.time() + 15
        while not os.path.exists(bootstrap):
            if not self.proc.alive() or time.time() > deadline:
                fail("devbroker did not start:\n" + self.proc.tail())
            time.sleep(0.05)
        with open(bootstrap) as f:
            self.addr = f.read().strip()
        log("devbroker at", self.addr)

    def down(self):
        self.proc.signal(signal.SIGUSR1)

    def up(self):
        self.proc.signal(signal.SIGUSR2)

    def available(self):
        self.proc.signal(signal.SIGHUP)

    def stop(self):
        return self.proc.stop()


_forget_key = []


def forget_key_file():
    """The path of a key file for cluster.forget_key_file (src/marker.h),
    mode 0600, the same for every node a test starts."""
    if not _forget_key:
        path = os.path.join(tmpdir("dedupd-key-"), "forget.key")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(b"harness forget key: 0123456789abcdef0123456789abcdef\n")
        _forget_key.append(path)
    return _forget_key[0]


class Dedupd:
    """src/dedupd from the build tree on a temporary data directory, with
    -o overrides (history.path, trace.path, rpc.listen=127.0.0.1:0 and admin.listen=""
    unless given; a cluster node, one with cluster.nodes, also gets
    cluster.forget_key_file = forget_key_file() unless given). The log file is kept across restarts; start() waits for
    "msg=ready" in the part written by this run. ENV: the environment it
    runs with (None: this process's)."""

    def __init__(self, overrides=None, name="dedupd", data_dir=None, conf=None, start=True,
                 env=None):
        self.dir = data_dir or tmpdir("dedupd-data-")
        self.name = name
        self.conf = conf
        self.env = env
        self.overrides = {
            "history.path": os.path.join(self.dir, "db"),
            "trace.path": os.path.join(self.dir, "trace"),
            "rpc.listen": "127.0.0.1:0",
            "admin.listen": "",
        }
        self.overrides.update(overrides or {})
        if self.overrides.get("cluster.nodes") and "cluster.forget_key_file" not in self.overrides:
            self.overrides["cluster.forget_key_file"] = forget_key_file()
        self.logpath = os.path.join(self.dir, name + ".log")
        self.proc = None
        self._log_from = 0
        if start:
            self.start()

    def option_args(self):
        """-c/-o arguments that reproduce this configuration (for ddcheck)."""
        args = ["-c", self.conf] if self.conf else []
        for k, v in self.overrides.items():
            args += ["-o", "%s=%s" % (k, v)]
        return args

    def start(self, timeout=30.0):
        self._log_from = os.path.getsize(self.logpath) if os.path.exists(self.logpath) else 0
        self.proc = Proc([build_path("src", "dedupd")] + self.option_args(), self.name,
                         logfile=self.logpath, env=self.env)
        self.wait_log("msg=ready", timeout)

    def run_log(self):
        """What this run (since the last start) has logged."""
        with open(self.logpath, "rb") as f:
            f.seek(self._log_from)
            return f.read().decode("utf-8", "replace")

    @property
    def rpc_port(self):
        """The gRPC port this run bound, from its "msg=serving rpc=HOST:PORT"
        line (rpc.listen is port 0 by default)."""
        m = re.search(r"msg=serving rpc=\S*:(\d+)", self.run_log())
        if not m or m.group(1) == "0":
            fail("no port in %s's serving line:\n%s" % (self.name, self.proc.tail()))
        return int(m.group(1))

    @property
    def rpc_addr(self):
        return "127.0.0.1:%d" % self.rpc_port

    def wait_log(self, needle, timeout=30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if needle in self.run_log():
                return
            if not self.proc.alive():
                fail("%s exited %s before logging %r:\n%s" % (self.name, self.proc.p.returncode,
                                                               needle, self.proc.tail()))
            time.sleep(0.05)
        fail("%s did not log %r in %.0fs:\n%s" % (self.name, needle, timeout, self.proc.tail()))

    def alive(self):
        return self.proc is not None and self.proc.alive()

    def kill9(self):
        self.proc.kill9()

    def stop(self, timeout=60.0):
        """SIGTERM; fails the test unless dedupd exits 0 in time."""
        rc = self.proc.stop(timeout)
        if rc != 0:
            fail("%s exited %s:\n%s" % (self.name, rc, self.proc.tail()))
        return rc


def _cleanup():
    for pr in reversed(_procs):
        try:
            if pr.alive():
                pr.p.send_signal(signal.SIGTERM)
                try:
                    pr.p.wait(10)
                except subprocess.TimeoutExpired:
                    pr.p.kill()
                    pr.p.wait()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
    if not os.environ.get("DD_KEEP_TMP"):
        for d in _tmpdirs:
            shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))


# `python3 harness.py port` prints a port free_port would give, not held by
# anyone once it has printed it: for shell scripts, which claim it
# themselves (flock -n on PORT_LOCK_DIR/PORT, drawing again if that fails;
# bench/run_forward.sh, bench/run_loadgen.sh).
if __name__ == "__main__" and sys.argv[1:] == ["port"]:
    print(free_port())
    sys.exit(0)
