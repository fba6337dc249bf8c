#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Snapshot transfer benchmark (issue 18, item 5): how fast a new replica is
copied from a live peer, and what the copy costs the peer's Filter latency.

On loopback, with tests/integration/harness.py (everything it starts is
stopped at exit, its temporary directories removed):
1. A history store of the realistic mix is written by
   `bench_history --build-only` (or one left in --dir by an earlier run is
   reused); its SST bytes on disk are printed.
2. For each lender bandwidth in --mbps (cluster.snapshot_mbps; default the
   configuration's 400, then 0 = no limit): node A (shard 0, replica 0 of
   one shard with two replicas) starts on that store, with the devbroker
   (an empty plays topic) and a redis-server. bench/filter_pace (C,
   libddclient) sends A one Filter call at a time, paced at --rate
   calls/s: 10,000 candidates against the store's heaviest user, as a
   recall service would. Its latencies, and how many answers came back
   degraded (Redis slower than recent.timeout_ms), are taken for --seconds
   before the copy ("before"), and from B's start until B has installed
   the copy ("during": A makes its checkpoint and sends the files).
3. Node B starts with an empty data directory and cluster.bootstrap = peer.
   Printed: bytes copied, the copy's MB/s (B's own figure, from its
   "snapshot installed" line), seconds from B's start to its /readyz 200,
   and A's Filter p50/p99 before and during. B's answer for the heavy user
   must equal A's, or the run fails.
Then a table, and one SUMMARY line per bandwidth.

  bench/run_snapshot.py [--users N] [--dir DIR] [--keep] [--rounds R]
                        [--seconds S] [--rate CALLS_PER_S] [--mbps 400,0]

--users N: the store's users (the realistic mix averages about 3,000 plays
a user; the default makes a little over 2 GB of SST). --dir DIR: where the
store is (DIR/history); built there when missing, reused (whatever --users
says) when DIR/bench_store.txt says a build there finished. A store this script built is removed at exit
unless --keep; one it found is never removed. --rounds R is passed to
bench_history (default 90: one flush round per day). Run from the source
tree with the build in build/ (or DD_SOURCE_ROOT / DD_BUILD_ROOT set).
Not a test: it prints figures; it exits non-zero only when something
fails (a node does not start, B never becomes ready, a Filter call fails).
"""
import argparse
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import harness  # noqa: E402
import test_ingest_lib as il  # noqa: E402
from test_clients_lib import python_stubs  # noqa: E402

CANDIDATES = 10000
STORE_INFO = "bench_store.txt"   # in --dir: the users and heaviest user of the store


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=420000)
    ap.add_argument("--dir")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--rounds", type=int, default=90)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--mbps", default="400,0")
    a = ap.parse_args()
    a.mbps = [int(x) for x in a.mbps.split(",") if x != ""]
    if a.users < 1 or a.seconds <= 0 or a.rate <= 0 or not a.mbps:
        ap.error("--users, --seconds, --rate and --mbps must be positive / not empty")
    return a


def sst_bytes(path):
    """SST files' bytes and every file's bytes under PATH."""
    sst = total = 0
    for root, _, files in os.walk(path):
        for f in files:
            n = os.path.getsize(os.path.join(root, f))
            total += n
            if f.endswith(".sst"):
                sst += n
    return sst, total


def store(args):
    """The store's directory (holding history/) and its heaviest user;
    built by bench_history when missing."""
    if args.dir:
        d = args.dir
    else:
        d = tempfile.mkdtemp(prefix="dedupd-snapbench-")
        if not args.keep:
            harness._tmpdirs.append(d)
    hist = os.path.join(d, "history")
    info = os.path.join(d, STORE_INFO)
    if os.path.exists(info):
        with open(info) as f:
            kv = dict(w.split("=", 1) for w in f.read().split())
        harness.log("reusing the store in %s (%s users, heaviest user %s)" % (hist, kv["users"],
                                                                          kv["heavy"]))
        return hist, kv["heavy"]
    if os.path.exists(hist):
        # a build cut short leaves a store without the info file
        harness.fail("%s exists but no %s beside it says it is complete: remove it or choose "
                     "another --dir" % (hist, STORE_INFO))
    os.makedirs(d, exist_ok=True)
    if args.dir and not args.keep:
        # built here, so removed at exit; DIR itself may be the caller's
        harness._tmpdirs.append(hist)
        harness._tmpdirs.append(hist + ".snapshot")  # A's checkpoint, if a run left one
        atexit.register(lambda: os.path.exists(info) and os.unlink(info))
    argv = [harness.build_path("bench", "bench_history"), "--build-only", "--users",
            str(args.users), "--rounds", str(args.rounds), "--dir", d]
    harness.log("building the store:", " ".join(argv))
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        harness.fail("bench_history failed (%d): %s" % (r.returncode, r.stderr))
    m = re.search(r"heaviest user (\d+)", r.stdout)
    heavy = "u" + m.group(1)
    with open(info, "w") as f:
        f.write("users=%d heavy=%s\n" % (args.users, heavy))
    print("store built in %.1f s%s" % (time.time() - t0, " (kept in %s)" % d if args.keep else ""))
    return hist, heavy


class FilterLoad:
    """bench/filter_pace against ADDR (one Filter call at a time for USER,
    paced at RATE calls/s); its lines are read in a thread and kept as
    (due, latency s), on time.monotonic()'s clock (CLOCK_MONOTONIC, as
    filter_pace's)."""

    def __init__(self, addr, user, rate):
        self.proc = harness.Proc([harness.build_path("bench", "filter_pace"), "--addr", addr,
                                  "--user", user, "--rate", str(rate)], "filter_pace")
        self.samples = []
        self.errors = []
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()
        harness.wait_until("the first paced Filter call", lambda: self.samples or self.errors
                           or not self.proc.alive(), timeout=30, every=0.01)
        if not self.samples:
            harness.fail("filter_pace: %s %s" % (self.errors[:1], self.proc.tail()))

    def read(self):
        with open(self.proc.logpath) as f:
            while True:
                line = f.readline()
                if not line:
                    if not self.proc.alive():
                        return
                    time.sleep(0.02)
                    continue
                w = line.split()
                if w[0] == "call" and len(w) == 5:
                    self.samples.append((int(w[1]) / 1e9, int(w[2]) / 1e9, w[4] == "1"))
                elif w[0] == "error":
                    self.errors.append(line.strip())

    def window(self, t0, t1):
        """The latencies of the calls due in [T0, T1), sorted, and how many
        of them were answered degraded."""
        w = [s for s in list(self.samples) if t0 <= s[0] < t1]
        return sorted(lat for _, lat, _ in w), sum(1 for _, _, deg in w if deg)

    def stop(self):
        self.proc.stop()
        self.thread.join()


def pct(xs, q):
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000.0


def metric(port, name):
    for line in harness.http_get(port, "/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return 0


def kept(pb, stub, user, cands):
    r = stub.Filter(pb.FilterRequest(user_id=user, candidate_ids=cands,
                                     mode=pb.RESPONSE_MODE_INDEXES), timeout=30)
    if r.degraded:
        harness.fail("Filter answered degraded (Redis unreachable from dedupd?)")
    return len(r.kept_indexes)


def one_round(args, mbps, hist, heavy, pb, pbg, grpc, broker, redis):
    ports = [harness.free_port(), harness.free_port()]
    admins = [harness.free_port(), harness.free_port()]
    nodes = ",".join("127.0.0.1:%d" % p for p in ports)
    bdir = harness.tmpdir("dedupd-snapbench-b-")

    def node(replica, path, extra):
        o = il.ingest_overrides(broker, group="dd-snapbench")
        o.update({
            "log.level": "info",
            "history.path": path,
            "rpc.listen": "127.0.0.1:%d" % ports[replica],
            "admin.listen": "127.0.0.1:%d" % admins[replica],
            "recent.redis": redis.addr,
            "cluster.shards": "1", "cluster.shard": "0", "cluster.replica": str(replica),
            "cluster.nodes": nodes, "cluster.redis": redis.addr,
            "cluster.health_interval_ms": "200",
            "cluster.snapshot_mbps": str(mbps),
        })
        o.update(extra)
        return o

    a = harness.Dedupd(node(0, hist, {}), name="dd-a", start=False,
                       data_dir=harness.tmpdir("dedupd-snapbench-a-"))
    a.start(timeout=300)
    harness.wait_until("A ready", lambda: harness.http_get(admins[0], "/readyz")[0] == 200,
                       timeout=120)
    cands = ["pace-%d" % i for i in range(CANDIDATES)]
    with grpc.insecure_channel("127.0.0.1:%d" % ports[0]) as ch:
        a_kept = kept(pb, pbg.DedupStub(ch), heavy, cands)
    load = FilterLoad("127.0.0.1:%d" % ports[0], heavy, args.rate)
    t_before = time.monotonic()
    time.sleep(args.seconds)

    b = harness.Dedupd(node(1, os.path.join(bdir, "db"), {"cluster.bootstrap": "peer"}),
                       name="dd-b", start=False, data_dir=bdir)
    b._log_from = 0
    t_start = time.monotonic()
    b.proc = harness.Proc([harness.build_path("src", "dedupd")] + b.option_args(), b.name,
                          logfile=b.logpath)
    t_installed = t_ready = None
    deadline = t_start + 3600
    while t_ready is None:
        if not b.proc.alive():
            harness.fail("B exited %s:\n%s" % (b.proc.p.returncode, b.proc.tail()))
        if time.monotonic() > deadline:
            harness.fail("B not ready after an hour:\n" + b.proc.tail())
        now = time.monotonic()
        if t_installed is None and "snapshot installed" in b.run_log():
            t_installed = now
        if t_installed is not None and harness.http_get(admins[1], "/readyz", timeout=1)[0] == 200:
            t_ready = now
        time.sleep(0.05)
    load.stop()
    if load.errors:
        harness.fail("%d Filter calls to A failed, first: %s" % (len(load.errors),
                                                                 load.errors[0]))
    before, deg_before = load.window(t_before, t_start)
    during, deg_during = load.window(t_start, t_installed)
    m = re.search(r'msg="snapshot installed".* bytes=(\d+) fetched=(\d+) seconds=(\S+) '
                  r'mb_per_s=(\S+)', b.run_log())
    if not m:
        harness.fail("no \"snapshot installed\" line from B:\n" + b.proc.tail())
    with grpc.insecure_channel("127.0.0.1:%d" % ports[1]) as ch:
        b_kept = kept(pb, pbg.DedupStub(ch), heavy, cands)
    if b_kept != a_kept:
        harness.fail("B keeps %d of the heavy user's candidates, A %d" % (b_kept, a_kept))
    res = {
        "mbps": mbps,
        "bytes": int(m.group(1)),
        "copy_s": float(m.group(3)),
        "mb_per_s": float(m.group(4)),
        "ready_s": t_ready - t_start,
        "sent": metric(admins[0], "dedupd_snapshot_sent_bytes_total"),
        "throttled": metric(admins[0], "dedupd_snapshot_throttled_total"),
        "p50_before": pct(before, 0.5), "p99_before": pct(before, 0.99), "n_before": len(before),
        "p50_during": pct(during, 0.5), "p99_during": pct(during, 0.99), "n_during": len(during),
        "deg_before": deg_before, "deg_during": deg_during,
    }
    b.stop()
    a.stop()
    shutil.rmtree(bdir, ignore_errors=True)  # the copy: as large as the store
    return res


def main():
    args = parse_args()
    pb, pbg, grpc = python_stubs()
    hist, heavy = store(args)
    sst, total = sst_bytes(hist)
    print("store: %s: %.1f MB of SST files (%.1f MB on disk in all); Filter user %s; %d cores"
          % (hist, sst / 1e6, total / 1e6, heavy, os.cpu_count()))
    sys.stdout.flush()
    broker = harness.DevBroker(topics=("plays:4",))
    redis = harness.Redis()
    results = []
    for mbps in args.mbps:
        harness.log("round: cluster.snapshot_mbps = %d" % mbps)
        results.append(one_round(args, mbps, hist, heavy, pb, pbg, grpc, broker, redis))
    broker.stop()
    redis.stop()

    print("\nsnapshot transfer: %.1f MB store, Filter of %d candidates paced at %g calls/s, "
          "1 in flight, p50/p99 ms" % (sst / 1e6, CANDIDATES, args.rate))
    print("%-13s %10s %7s %7s %10s %17s %17s %15s" % (
        "snapshot_mbps", "MB copied", "copy s", "MB/s", "to ready s", "A before p50/p99",
        "A during p50/p99", "degraded b/d"))
    for r in results:
        print("%-13s %10.1f %7.1f %7.1f %10.1f %8.2f/%-8.2f %8.2f/%-8.2f %7d/%-7d" % (
            r["mbps"] or "0 (no limit)", r["bytes"] / 1e6, r["copy_s"], r["mb_per_s"],
            r["ready_s"], r["p50_before"], r["p99_before"], r["p50_during"], r["p99_during"],
            r["deg_before"], r["deg_during"]))
    for r in results:
        print("SUMMARY snapshot mbps=%d bytes=%d copy_s=%.1f mb_per_s=%.1f ready_s=%.1f "
              "sent_bytes=%d throttled=%d filter_p50_before_ms=%.3f filter_p99_before_ms=%.3f "
              "calls_before=%d filter_p50_during_ms=%.3f filter_p99_during_ms=%.3f "
              "calls_during=%d degraded_before=%d degraded_during=%d b_ready=1" % (
                  r["mbps"], r["bytes"], r["copy_s"], r["mb_per_s"], r["ready_s"], r["sent"],
                  r["throttled"], r["p50_before"], r["p99_before"], r["n_before"],
                  r["p50_during"], r["p99_during"], r["n_during"], r["deg_before"],
                  r["deg_during"]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
