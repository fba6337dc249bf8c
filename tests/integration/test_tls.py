#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Strangers: mutual TLS, the allow lists and the plaintext rule, against a
real dedupd and redis-server on loopback, with certificates made here by
openssl (a test CA; a server certificate for 127.0.0.1 / localhost; a
reader identified by its CN; a writer identified by a URI SAN; a stranger
the CA signed but no list names; a client of another CA with the reader's
CN):

- no client certificate, or one from another CA: the handshake fails, no
  call gets through (UNAVAILABLE);
- the reader can Filter and gets PERMISSION_DENIED, naming it and
  rpc.allow_write, on RecordDelivery, RecordPlays and ForgetUser, which
  change nothing; the writer can write; the stranger can do neither;
  Health/Check answers everyone who completes the handshake;
- allow_write = "" (no one) and allow_read = "*" (any certificate the CA
  signed);
- dedupctl --tls-ca/--tls-cert/--tls-key talks to the server with each
  certificate and gets the same answers; dedupd-migrate's same options
  migrate a legacy set with the writer's certificate, not without TLS or
  with the reader's;
- plaintext on 0.0.0.0 without rpc.allow_insecure: dedupd refuses to start
  and names the keys; with it (on a name that resolves to loopback, so
  nothing here listens beyond this machine) it starts and logs a warning,
  as it does for an admin listener on such a name.
"""
import os
import shutil
import socket
import subprocess
import time

import harness
import test_clients_lib
from certs import Certs
from test_clients_lib import python_stubs

pb, pbg, grpc = python_stubs()

WRITER_URI = "spiffe://test.example/ns/feed/sa/feed-writer"


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def read(p):
    with open(p, "rb") as f:
        return f.read()


class Client:
    """A Python gRPC channel to ADDR over TLS, with the client certificate
    PAIR ((cert, key) or None) and the server's CA."""

    def __init__(self, addr, ca, pair):
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(ca),
            private_key=read(pair[1]) if pair else None,
            certificate_chain=read(pair[0]) if pair else None)
        self.ch = grpc.secure_channel(addr, creds)
        self.stub = pbg.DedupStub(self.ch)
        self.health = self.ch.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda b: b, response_deserializer=lambda b: b)

    def close(self):
        self.ch.close()

    def filter(self, user, ids):
        r = self.stub.Filter(pb.FilterRequest(user_id=user, candidate_ids=ids), timeout=10)
        return list(r.kept_ids)

    def plays(self, user, ids):
        now = int(time.time() * 1000)
        return self.stub.RecordPlays(pb.RecordPlaysRequest(
            user_id=user, plays=[pb.Play(item_id=i, played_at_ms=now) for i in ids]), timeout=10)

    def deliver(self, user, ids):
        return self.stub.RecordDelivery(pb.RecordDeliveryRequest(user_id=user, item_ids=ids),
                                        timeout=10)

    def forget(self, user):
        return self.stub.ForgetUser(pb.ForgetUserRequest(user_id=user), timeout=10)

    def check_health(self):
        # An empty HealthCheckRequest is zero bytes; SERVING is field 1 = 1.
        return self.health(b"", timeout=10)


def expect_code(fn, code, contains=(), what=""):
    try:
        fn()
    except grpc.RpcError as e:
        if e.code() != code:
            harness.fail("%s: %s (%s), want %s" % (what, e.code(), e.details(), code))
        for c in contains:
            if c not in (e.details() or ""):
                harness.fail("%s: details %r lack %r" % (what, e.details(), c))
        return
    harness.fail("%s: succeeded, want %s" % (what, code))


def loopback_name():
    """A host name other than localhost that resolves to 127.x only: dedupd
    counts it as not loopback (it decides from the text), yet binding it
    listens on loopback alone. None if the machine has none."""
    cands = [socket.gethostname(), "vm", "runsc", "localhost.localdomain", "ip6-localhost"]
    for n in cands:
        if not n or n == "localhost":
            continue
        try:
            addrs = {a[4][0] for a in socket.getaddrinfo(n, None, type=socket.SOCK_STREAM)}
        except OSError:
            continue
        if addrs and all(a.startswith("127.") or a == "::1" for a in addrs):
            return n
    return None


def main():
    openssl = shutil.which("openssl")
    if not openssl:
        harness.skip("openssl is not installed")
    d = harness.tmpdir("dedupd-tls-")
    ca = Certs(openssl, d, "main")
    other = Certs(openssl, d, "other")
    server = ca.issue("server", "dedupd", "DNS:localhost,IP:127.0.0.1", usage="serverAuth")
    reader = ca.issue("reader", "recall")
    writer = ca.issue("writer", "feed-writer-cn", "URI:" + WRITER_URI)
    stranger = ca.issue("stranger", "stranger")
    rogue = other.issue("rogue", "recall")  # the reader's CN, from another CA

    redis = harness.Redis()
    tls = {"rpc.tls_cert": server[0], "rpc.tls_key": server[1], "rpc.tls_client_ca": ca.ca}
    d1 = test_clients_lib.Dedupd(redis.addr, dict(tls, **{
        "rpc.allow_read": "recall, " + WRITER_URI,
        "rpc.allow_write": WRITER_URI,
    }), name="dedupd-mtls")
    check("tls=mutual" in d1.run_log(), "start line lacks tls=mutual:\n" + d1.proc.tail())
    addr = d1.addr

    # ---- the handshake ----------------------------------------------------
    for what, pair, cafile in (("no client certificate", None, ca.ca),
                               ("another CA's certificate", rogue, ca.ca)):
        c = Client(addr, cafile, pair)
        expect_code(lambda: c.filter("u", ["a"]), grpc.StatusCode.UNAVAILABLE, what=what)
        expect_code(lambda: c.plays("u", ["a"]), grpc.StatusCode.UNAVAILABLE, what=what)
        expect_code(c.check_health, grpc.StatusCode.UNAVAILABLE, what=what + " health")
        c.close()
    harness.log("handshake: no certificate and another CA's are refused")

    # ---- the allow lists ----------------------------------------------------
    r = Client(addr, ca.ca, reader)
    w = Client(addr, ca.ca, writer)
    s = Client(addr, ca.ca, stranger)
    for name, c in (("reader", r), ("writer", w), ("stranger", s)):
        check(c.check_health() == b"\x08\x01", "%s health not SERVING" % name)

    check(r.filter("alice", ["a", "b"]) == ["a", "b"], "reader Filter")
    denied = ("recall", "rpc.allow_write")
    expect_code(lambda: r.plays("alice", ["a"]), grpc.StatusCode.PERMISSION_DENIED, denied,
                "reader RecordPlays")
    expect_code(lambda: r.deliver("alice", ["b"]), grpc.StatusCode.PERMISSION_DENIED, denied,
                "reader RecordDelivery")
    expect_code(lambda: r.forget("alice"), grpc.StatusCode.PERMISSION_DENIED, denied,
                "reader ForgetUser")
    check(r.filter("alice", ["a", "b"]) == ["a", "b"], "a denied write changed something")

    w.plays("alice", ["a"])
    w.deliver("alice", ["b"])
    check(r.filter("alice", ["a", "b", "c"]) == ["c"], "writer's plays/deliveries not seen")
    check(w.filter("alice", ["a", "c"]) == ["c"], "writer Filter (in allow_read by URI SAN)")
    w.forget("alice")
    check(r.filter("alice", ["a", "b"]) == ["a", "b"], "writer's ForgetUser did nothing")

    expect_code(lambda: s.filter("alice", ["a"]), grpc.StatusCode.PERMISSION_DENIED,
                ("stranger", "rpc.allow_read"), "stranger Filter")
    expect_code(lambda: s.plays("alice", ["a"]), grpc.StatusCode.PERMISSION_DENIED,
                ("stranger", "rpc.allow_write"), "stranger RecordPlays")
    harness.log("allow lists: reader reads, writer writes, stranger neither; health open")

    # ---- dedupctl over mutual TLS ---------------------------------------------
    ctl_exe = harness.build_path("tools", "dedupctl")

    def ctl(pair, *args, want=0, name=None):
        argv = [ctl_exe, "-a", addr, "--tls-ca", ca.ca]
        if pair:
            argv += ["--tls-cert", pair[0], "--tls-key", pair[1]]
        if name:
            argv += ["--tls-name", name]
        p = subprocess.run(argv + list(args), capture_output=True, text=True, timeout=60)
        if p.returncode != want:
            harness.fail("%s: exit %d, want %d\n%s%s" % (" ".join(argv + list(args)),
                                                         p.returncode, want, p.stdout, p.stderr))
        return p.stdout, p.stderr

    out, _ = ctl(writer, "play", "bob", "x1")
    check("accepted 1" in out, "dedupctl play: %r" % out)
    out, _ = ctl(reader, "filter", "bob", "x1", "x2")
    check("played=1" in out, "dedupctl filter: %r" % out)
    _, err = ctl(reader, "forget", "bob", want=5)
    check("PERMISSION_DENIED" in err and "rpc.allow_write" in err, "dedupctl denied: %r" % err)
    out, _ = ctl(stranger, "health")
    check(out.strip() == "SERVING", "dedupctl health: %r" % out)
    _, err = ctl(None, "health", want=3)
    check("UNAVAILABLE" in err and "client certificate" in err and "--tls-cert" in err,
          "dedupctl without a certificate should name the likely cause: %r" % err)
    # The server's certificate does not name "elsewhere": refused by the client.
    _, err = ctl(reader, "health", want=3, name="elsewhere.example")
    check("UNAVAILABLE" in err, "dedupctl with a wrong server name: %r" % err)
    out, _ = ctl(reader, "health", name="localhost")
    check(out.strip() == "SERVING", "dedupctl --tls-name localhost: %r" % out)
    p = subprocess.run([ctl_exe, "-a", addr, "--tls-cert", reader[0], "--tls-key", reader[1],
                        "health"], capture_output=True, text=True, timeout=30)
    check(p.returncode == 2 and "--tls-ca" in p.stderr, "dedupctl cert without CA: %r" % (p,))
    harness.log("dedupctl: TLS options work")

    # ---- dedupd-migrate over mutual TLS ---------------------------------------
    mig_exe = harness.build_path("scripts", "migrate", "dedupd-migrate")
    now_ms = int(time.time() * 1000)
    subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(redis.port), "ZADD",
                    "legacyplay:carol", str(now_ms - 60000), "m1", str(now_ms - 30000), "m2"],
                   check=True, capture_output=True, timeout=30)

    def migrate(pair, want):
        argv = [mig_exe, "--source", redis.addr, "--plays", "legacyplay:{user}",
                "--target", addr, "--parallel", "1", "--retry-s", "2", "--timeout-ms", "3000"]
        if pair:
            argv += ["--tls-ca", ca.ca, "--tls-cert", pair[0], "--tls-key", pair[1]]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if p.returncode != want:
            harness.fail("%s: exit %d, want %d\n%s%s" % (" ".join(argv), p.returncode, want,
                                                         p.stdout, p.stderr))
        return p

    migrate(None, 1)  # plaintext against a TLS server: nothing gets through
    check(r.filter("carol", ["m1", "m2", "m3"]) == ["m1", "m2", "m3"],
          "a migration without TLS wrote something")
    migrate(reader, 1)  # not in rpc.allow_write
    migrate(writer, 0)
    check(r.filter("carol", ["m1", "m2", "m3"]) == ["m3"], "migrated plays not filtered")
    harness.log("dedupd-migrate: TLS options work, the writer's certificate migrates")
    for c in (r, w, s):
        c.close()
    d1.stop()

    # ---- "" (no one) and "*" (any certificate the CA signed) -------------------
    d2 = test_clients_lib.Dedupd(redis.addr, dict(tls, **{
        "rpc.allow_read": "*", "rpc.allow_write": ""}), name="dedupd-readonly")
    s = Client(d2.addr, ca.ca, stranger)
    w = Client(d2.addr, ca.ca, writer)
    check(s.filter("carol", ["a"]) == ["a"], "allow_read=* stranger Filter")
    expect_code(lambda: w.plays("carol", ["a"]), grpc.StatusCode.PERMISSION_DENIED,
                (WRITER_URI, "rpc.allow_write"), "allow_write=\"\" writer")
    s.close()
    w.close()
    d2.stop()
    harness.log("allow lists \"*\" and \"\" ok")

    # ---- plaintext beyond loopback --------------------------------------------
    dedupd = harness.build_path("src", "dedupd")
    data = harness.tmpdir("dedupd-open-")
    base = ["-o", "history.path=" + os.path.join(data, "db"),
            "-o", "trace.path=" + os.path.join(data, "trace"), "-o", "ingest.enabled=false",
            "-o", "admin.listen=", "-o", "recent.redis=" + redis.addr]
    for listen in ("0.0.0.0:0", "[::]:0"):
        p = subprocess.run([dedupd] + base + ["-o", "rpc.listen=" + listen],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode != 0, "plaintext on %s started" % listen)
        for word in ("rpc.listen", "not a loopback address", "rpc.tls_client_ca",
                     "rpc.allow_insecure"):
            check(word in p.stderr, "refusal on %s lacks %r: %r" % (listen, word, p.stderr))
    # TLS without client certificates is no better: also refused.
    p = subprocess.run([dedupd] + base + ["-o", "rpc.listen=0.0.0.0:0", "-o",
                                          "rpc.tls_cert=" + server[0], "-o",
                                          "rpc.tls_key=" + server[1]],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode != 0 and "TLS without rpc.tls_client_ca" in p.stderr,
          "TLS without client CA on 0.0.0.0: %r" % p.stderr)
    harness.log("plaintext beyond loopback refused without rpc.allow_insecure")

    name = loopback_name()
    if name is None:
        harness.log("no host name resolving to loopback here: the warning is not checked")
    else:
        d3 = test_clients_lib.Dedupd(redis.addr, {"rpc.listen": name + ":0",
                                                  "rpc.allow_insecure": "true",
                                                  "admin.listen": name + ":0"},
                                     name="dedupd-insecure")
        log = d3.run_log()
        check(any("level=warn" in l and "plaintext on a non-loopback address" in l
                  and "rpc.allow_insecure" in l for l in log.splitlines()),
              "no plaintext warning:\n" + log)
        # The admin listener is allowed beyond loopback, with a warning.
        check(any("level=warn" in l and "admin listener on a non-loopback address" in l
                  for l in log.splitlines()), "no admin warning:\n" + log)
        d3.stop()
        harness.log("rpc.allow_insecure on %s: started with the warning" % name)
    harness.log("PASS")


if __name__ == "__main__":
    main()
