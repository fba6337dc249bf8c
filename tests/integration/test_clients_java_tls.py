#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The Java client library's TLS options (DedupdClient.Builder tlsCa,
tlsClientCert, tlsServerName: dedupctl's --tls-ca, --tls-cert/--tls-key,
--tls-name) against a real fleet on mutual TLS (meson test
clients_java_tls).

fleet.py's 2 shards x 1 replica, every node with rpc.tls_cert (a node
certificate for localhost / 127.0.0.1, CN dedupd-node, which the nodes
also call each other with: rpc.allow_peer), rpc.tls_client_ca (a test CA
made here with openssl), rpc.allow_read "feed-app, recall" and
rpc.allow_write "feed-app". tests/clients/java/TlsCheck.java makes each
client, one command a line:

  mutual TLS     the CA and feed-app's certificate: Filter, RecordDelivery
                 and Filter again for users of both shards, each call
                 routed by the map (read over TLS) to its owner, nothing
                 forwarded
  no cert        the CA only: refused (UNAVAILABLE), and the error says the
                 node likely wants a client certificate (tlsClientCert)
  identity       recall's certificate: Filter answered, RecordDelivery
                 PERMISSION_DENIED naming recall and rpc.allow_write
  wrong name     tlsServerName elsewhere.example, which the node's
                 certificate does not name: the handshake fails, the error
                 names the certificate check
  right name     tlsServerName localhost: answered

The library and ClientCheck are built by test_clients_java.build()
(clients/java/build.sh, which runs the unit tests: TlsOptionsTest checks
the options' validation); TlsCheck is compiled next to them.
"""
import os
import select
import shutil
import subprocess
import time

import harness
from certs import Certs


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def build():
    """The java command line that runs TlsCheck: the library built (and
    ClientCheck compiled) by test_clients_java.build(), TlsCheck compiled
    against the same class path."""
    import test_clients_java
    argv = test_clients_java.build()
    java, cp = argv[0], argv[argv.index("-cp") + 1]
    classes = os.path.join(harness.BUILD_ROOT, "clients-java", "tlscheck")
    os.makedirs(classes, exist_ok=True)
    src = os.path.join(harness.SOURCE_ROOT, "tests", "clients", "java", "TlsCheck.java")
    r = subprocess.run([shutil.which("javac"), "-encoding", "UTF-8", "-Xlint:all", "-Werror",
                        "-d", classes, "-cp", cp, src], capture_output=True, text=True)
    if r.returncode != 0:
        harness.fail("javac TlsCheck.java failed:\n" + r.stdout + r.stderr)
    return [java, "-cp", classes + ":" + cp, "TlsCheck"]


class TlsCheck:
    """A running TlsCheck: call(...) sends one command and returns its answer."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)

    def call(self, users, seeds, timeout=120.0, **opts):
        line = "call %s %s %s" % (",".join(users), ",".join(seeds),
                                  " ".join("%s=%s" % kv for kv in sorted(opts.items())))
        harness.log("java <", line)
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            harness.fail("TlsCheck did not answer in %.0f s" % timeout)
        out = self.proc.stdout.readline().strip()
        harness.log("java >", out)
        if not out.startswith(("ok", "error")):
            harness.fail("TlsCheck: " + (out or "exited %s" % self.proc.poll()))
        return out

    def quit(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        check(self.proc.returncode == 0, "TlsCheck exited %s" % self.proc.returncode)


def answered(out, users):
    """{user: (kept, after, owner)} of an "ok" answer; fails on "error"."""
    check(out.startswith("ok "), "call refused: " + out)
    res = {}
    for w in out.split()[1:]:
        k, v = w.split("=", 1)
        if k in users:
            kept, rest = v.split("/", 1)
            after, owner = rest.split("@", 1)
            res[k] = (kept, after, owner)
    check(sorted(res) == sorted(users), "answers for %s, want %s" % (sorted(res), sorted(users)))
    return res


def refused(out, *words):
    check(out.startswith("error "), "succeeded, want a refusal: " + out)
    for w in words:
        check(w in out, "the error lacks %r: %s" % (w, out))


def main():
    import fleet
    openssl = shutil.which("openssl")
    if not openssl:
        harness.skip("openssl is not installed")
    argv = build()
    t0 = time.time()
    certs = Certs(openssl, harness.tmpdir("dedupd-java-tls-"), "java")
    node = certs.issue("node", "dedupd-node", "DNS:localhost,IP:127.0.0.1",
                       usage="serverAuth,clientAuth")
    app = certs.issue("app", "feed-app")
    reader = certs.issue("reader", "recall")
    f = fleet.Fleet(shards=2, replicas=1, extra={
        "rpc.tls_cert": node[0], "rpc.tls_key": node[1], "rpc.tls_client_ca": certs.ca,
        "rpc.allow_read": "feed-app, recall", "rpc.allow_write": "feed-app",
        "rpc.allow_peer": "dedupd-node",
    })
    for dd in f.nodes:
        check("tls=mutual" in dd.run_log(), "%s not on mutual TLS:\n%s" % (dd.name, dd.run_log()))
    # Users of both shards; one seed: the other node is known from the map.
    users = ["jtls-%d" % i for i in range(6)]
    owners = f.owners(users)
    check(set(owners.values()) == {0, 1}, "the users are all of one shard: %s" % owners)
    seeds = [f.addrs[0]]
    c = TlsCheck(argv)
    try:
        run(c, f, certs, app, reader, users, owners, seeds)
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
    harness.log("PASS: java client TLS options (%.1f s after the build)" % (time.time() - t0))


def run(c, f, certs, app, reader, users, owners, seeds):
    ca = certs.ca
    # ---- mutual TLS: every call answered by its owner ------------------------
    res = answered(c.call(users, seeds, ca=ca, cert=app[0], key=app[1]), users)
    for u, (kept, after, owner) in res.items():
        check(kept == "a,b,c" and after == "b,c",
              "%s: kept %s, then %s after delivering a (want a,b,c then b,c)" % (u, kept, after))
        check(owner in f.addrs and f.shard_of(f.addrs.index(owner)) == owners[u],
              "%s routed to %s, not to shard %d" % (u, owner, owners[u]))
    check(f.forwarded_total() == 0, "calls forwarded: %s" % f.forwarded_total())
    for i in range(len(f.nodes)):
        n = f.metric(i, "dedupd_rpc_requests_total{", ('method="RecordDelivery"',))
        check(n > 0, "no RecordDelivery reached node %d" % i)
    harness.log("mutual TLS: Filter and RecordDelivery routed to both shards, nothing forwarded")

    # ---- no client certificate: refused, and the error says why --------------
    refused(c.call(["jtls-nocert"], seeds, ca=ca), "UNAVAILABLE", "client certificate",
            "tlsClientCert")
    harness.log("without a client certificate: refused, the error names tlsClientCert")

    # ---- the identity is the certificate's --------------------------------------
    refused(c.call(["jtls-reader"], seeds, ca=ca, cert=reader[0], key=reader[1]),
            "PERMISSION_DENIED", "recall", "RecordDelivery", "rpc.allow_write")
    harness.log("recall's certificate: Filter answered, RecordDelivery denied by rpc.allow_write")

    # ---- the server name --------------------------------------------------------
    refused(c.call(["jtls-wrongname"], seeds, ca=ca, cert=app[0], key=app[1],
                   name="elsewhere.example"),
            "UNAVAILABLE", "certificate was refused", "elsewhere.example")
    res = answered(c.call(["jtls-name"], seeds, ca=ca, cert=app[0], key=app[1], name="localhost"),
                   ["jtls-name"])
    check(res["jtls-name"][:2] == ("a,b,c", "b,c"), "tlsServerName localhost: %s" % (res,))
    harness.log("tlsServerName: elsewhere.example fails the handshake, localhost is answered")
    c.quit()


if __name__ == "__main__":
    main()
