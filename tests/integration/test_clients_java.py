# SPDX-License-Identifier: Apache-2.0
"""The Java client library (clients/java) against a real 2 x 2 fleet
(fleet.py: the devbroker, one redis-server per shard, four dedupd), run by
test_clients.py java (meson test clients_java). One fleet serves every
case; tests/clients/java/ClientCheck.java makes the calls, one command a
line, and this file reads the nodes' /metrics:

  feed          the feed server's path (what the old Java test program
                checked): exact kept sets page after page, indexes mode,
                INVALID_ARGUMENT, ForgetUser
  routing       200 users' deliveries and Filters: every call answered by
                its owner, dedupd_cluster_forwarded_total 0 on every node
  coalescing    20 users x 10 deliveries issued at once: fewer
                RecordDelivery calls than deliveries, and the nodes
                counted exactly the calls the client sent
  backpressure  300 deliveries at once through a client bounded to 2 in
                flight + 2 queued: some refused at once (fail fast), none
                lost; blocking: all accepted
  failover      4 threads of calls while one node is killed with -9:
                0 failed calls, still nothing forwarded
  map refresh   the client's periodic map reads show the killed node
                down, and ready again once it is back (the refresh on
                FAILED_PRECONDITION is checked by the unit tests,
                DedupdClientTest, against in-process nodes, and through a
                real resharding step by test_clients_reshard.py, meson
                test clients_java_reshard)

The library is built with Maven the first time (clients/java/build.sh,
which also runs its unit tests) into BUILD/clients-java; ClientCheck is
compiled there with javac against the jar.
"""
import os
import select
import shutil
import subprocess
import time

import harness


def build():
    """The java command line that runs ClientCheck (building it first)."""
    java = shutil.which("java")
    javac = shutil.which("javac")
    if not java or not javac:
        harness.skip("java/javac not installed (default-jdk-headless)")
    out = os.path.join(harness.BUILD_ROOT, "clients-java")
    script = os.path.join(harness.SOURCE_ROOT, "clients", "java", "build.sh")
    t0 = time.time()
    r = subprocess.run(["bash", script, out], capture_output=True, text=True)
    if r.returncode != 0:
        if "not found" in r.stderr:
            harness.skip(r.stderr.strip())
        harness.fail("clients/java/build.sh failed:\n" + r.stderr[-4000:])
    harness.log("clients/java built in %.1f s" % (time.time() - t0))
    with open(os.path.join(out, "classpath.txt")) as f:
        cp = os.path.join(out, "dedupd-client.jar") + ":" + f.read().strip()
    classes = os.path.join(out, "check")
    os.makedirs(classes, exist_ok=True)
    src = os.path.join(harness.SOURCE_ROOT, "tests", "clients", "java", "ClientCheck.java")
    r = subprocess.run([javac, "-encoding", "UTF-8", "-Xlint:all", "-Werror", "-d", classes,
                        "-cp", cp, src], capture_output=True, text=True)
    if r.returncode != 0:
        harness.fail("javac ClientCheck.java failed:\n" + r.stdout + r.stderr)
    return [java, "-cp", classes + ":" + cp, "ClientCheck"]


class Check:
    """A running ClientCheck (or another program speaking its protocol,
    logged as NAME): send(cmd) then reply(), or call(cmd)."""

    def __init__(self, argv, seeds, name="java"):
        self.name = name
        self.proc = subprocess.Popen(argv + [",".join(seeds)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def send(self, line):
        harness.log(self.name, "<", line)
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def reply(self, timeout=120.0):
        """The answer's key=value pairs; fails the test on "fail ..." or silence."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            harness.fail("ClientCheck did not answer in %.0f s" % timeout)
        line = self.proc.stdout.readline().strip()
        harness.log(self.name, ">", line)
        if not line.startswith("ok"):
            harness.fail("%s: %s" % (self.name, line or "exited %s" % self.proc.poll()))
        kv = {}
        for w in line.split()[1:]:
            if "=" in w:
                k, v = w.split("=", 1)
                kv[k] = v
        return kv

    def call(self, line, timeout=120.0):
        self.send(line)
        return self.reply(timeout)

    def quit(self):
        try:
            self.send("quit")
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        if self.proc.returncode not in (0, None):
            harness.fail("ClientCheck exited %s" % self.proc.returncode)


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def main():
    import fleet
    argv = build()
    # Exact kept sets need Redis' answers: a reply held up by a busy
    # machine past the fleet's 500 ms would make a call degraded.
    f = fleet.Fleet(shards=2, replicas=2, extra={"recent.timeout_ms": "2000"})
    # Two seeds, one per shard: the map comes from whichever answers.
    c = Check(argv, [f.addrs[0], f.addrs[3]])
    try:
        run(c, f)
    finally:
        if c.proc.poll() is None:
            c.proc.kill()


def rpc_calls(f, method):
    return sum(f.metric(i, "dedupd_rpc_requests_total{", ('method="%s"' % method,))
               for i in range(len(f.nodes)) if f.alive(i))


def run(c, f):
    t0 = time.time()
    c.call("feed")
    harness.log("feed: %.1f s" % (time.time() - t0))

    t0 = time.time()
    r = c.call("route 200")
    check(r.get("stale_map") == "0", "stale-map answers on a stable fleet: %s" % r)
    fwd = f.forwarded_total()
    check(fwd == 0, "forwarded %s calls (want 0 on every node)" % fwd)
    served = [f.metric(i, "dedupd_rpc_requests_total{", ('method="Filter"',))
              for i in range(len(f.nodes))]
    harness.log("Filter calls per node:", served)
    for s in range(f.shards):
        check(sum(served[i] for i in range(len(f.nodes)) if f.shard_of(i) == s) > 0,
              "no Filter call reached shard %d" % s)
    owners = c.call("owners u-1 u-2 u-3 u-4 u-5 u-6")
    for u, addr in owners.items():
        check(f.shard_of(f.addrs.index(addr)) == f.owner(u),
              "%s routed to %s, not to shard %d" % (u, addr, f.owner(u)))
    harness.log("routing: %.1f s" % (time.time() - t0))

    t0 = time.time()
    before = rpc_calls(f, "RecordDelivery")
    r = c.call("coalesce 20 10")
    after = rpc_calls(f, "RecordDelivery")
    deliveries, calls = int(r["deliveries"]), int(r["delivery_calls"])
    check(deliveries == 200, "deliveries %d" % deliveries)
    check(after - before == calls, "the nodes counted %d RecordDelivery calls, the client sent %d"
          % (after - before, calls))
    check(calls <= deliveries // 2, "200 deliveries within the linger took %d calls" % calls)
    harness.log("coalescing: 200 deliveries in %d calls, %.1f s" % (calls, time.time() - t0))

    t0 = time.time()
    r = c.call("backpressure 300")
    ok, rej = int(r["fail_fast_ok"]), int(r["fail_fast_rejected"])
    check(ok + rej == 300 and rej > 0 and ok >= 4, "fail fast: %s" % r)
    check(int(r["block_ok"]) == 300 and int(r["block_rejected"]) == 0, "block: %s" % r)
    harness.log("backpressure: %.1f s" % (time.time() - t0))

    # kill -9 of a replica of shard 0 under load: no call fails; the
    # client's map then says it is down (periodic reads), and up again
    # once it is back.
    t0 = time.time()
    victim = f.node_index(0, 0)
    c.send("load 6 4")
    time.sleep(2)
    harness.log("kill -9", f.nodes[victim].name)
    f.kill9(victim)
    r = c.reply(timeout=120)
    check(int(r["failed"]) == 0, "calls failed while a node was killed: %s" % r)
    check(int(r["calls"]) > 100, "too few calls under load: %s" % r)
    check(f.forwarded_total() == 0, "forwarded under failover: %s" % f.forwarded_total())
    harness.log("failover: %s calls, %s failovers, %.1f s" % (r["calls"], r["failovers"],
                                                             time.time() - t0))
    t0 = time.time()
    addr = f.addrs[victim]
    harness.wait_until("the client's map to show %s down" % addr,
                       lambda: c.call("map").get(addr) == "down", timeout=30, every=0.5)
    f.start(victim)
    f.wait_ready()
    harness.wait_until("the client's map to show %s ready" % addr,
                       lambda: c.call("map").get(addr) == "ready", timeout=30, every=0.5)
    harness.log("map refresh: %.1f s" % (time.time() - t0))
    c.quit()
    harness.log("PASS: java client")
