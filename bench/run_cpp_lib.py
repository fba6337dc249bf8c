#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The C++ client library's benchmarks (issue 28) on a 2 x 2 loopback
cluster (tests/integration/fleet.py: four dedupd, a redis-server per shard,
the devbroker), each comparison run A B A B ... in slices of --slice
seconds so that both sides see the same (shared, loaded) host:

  route:   Filter through the library (to a replica of the owner) vs
           through one seed node (--forward: that node forwards the
           calls of the other shard's users), 1 in flight;
  hedge:   one replica of each shard paused 50 ms every 500 ms
           (SIGSTOP/SIGCONT): hedged vs not; and the same calls with no
           pause, for the unpaused p99;
  compact: 10,000 candidates as item hashes vs as ids: request bytes,
           dedupd CPU per call (all four nodes, /proc/PID/stat), p50/p99.

Prints each slice's dedupd-load line, then per comparison the median over
slices of each side's p50/p99 (and CPU per call). Figures go to
docs/benchmarks.md.

usage: bench/run_cpp_lib.py [--slices N] [--slice S] [--only route,hedge,compact]
Binaries from build/ (DD_BUILD_ROOT overrides).
"""
import os
import re
import statistics
import subprocess
import sys
import threading

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
os.environ.setdefault("DD_SOURCE_ROOT", root)
os.environ.setdefault("DD_BUILD_ROOT", os.path.join(root, "build"))
sys.path.insert(0, os.path.join(root, "tests", "integration"))
import fleet  # noqa: E402
import harness  # noqa: E402


def fields(line):
    return {k: v for k, v in re.findall(r"(\w+)=(\S+)", line)}


def run(load, seeds, args, label):
    argv = [load, "--seeds", seeds, "--no-setup"] + args
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    lines = [x for x in p.stdout.splitlines() if x.startswith("phase=filter")]
    for x in lines:
        print("%-10s %s" % (label, x), flush=True)
    if p.returncode != 0 or not lines:
        print("%-10s dedupd-load exited %d: %s" % (label, p.returncode, p.stderr[-500:]),
              flush=True)
    return [fields(x) for x in lines]


def summary(name, sides):
    for label, rows in sides:
        if not rows:
            continue
        med = lambda k: statistics.median(float(r[k]) for r in rows if k in r)  # noqa: E731
        extra = ""
        if "dedupd_cpu_ms_per_call" in rows[0]:
            extra = " dedupd_cpu_ms_per_call=%.3f" % med("dedupd_cpu_ms_per_call")
        calls = sum(int(r["calls"]) for r in rows)
        hedged = sum(int(r["hedged"]) for r in rows)
        failed = sum(int(r["failed"]) for r in rows)
        print("%s %-10s slices=%d calls=%d failed=%d hedged=%d (%.1f %%) req_bytes=%s "
              "p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f (medians over slices)%s"
              % (name, label, len(rows), calls, failed, hedged,
                 100.0 * hedged / calls if calls else 0, rows[0]["req_bytes"], med("p50_ms"),
                 med("p99_ms"), med("p999_ms"), extra), flush=True)


def main():
    slices, slice_s, only = 6, 3.0, {"route", "hedge", "compact"}
    args = sys.argv[1:]
    while args:
        a = args.pop(0)
        if a == "--slices":
            slices = int(args.pop(0))
        elif a == "--slice":
            slice_s = float(args.pop(0))
        elif a == "--only":
            only = set(args.pop(0).split(","))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    load = harness.build_path("clients", "cpp", "dedupd-load")
    f = fleet.Fleet()
    seeds = f.seeds
    pids = ",".join(str(f.pid(i)) for i in range(len(f.nodes)))
    print("run_cpp_lib: fleet %s, %d cores, %d slices of %.1f s per side"
          % (seeds, os.cpu_count(), slices, slice_s), flush=True)
    # Users' plays, once (20 each), then every run skips its setup.
    subprocess.run([load, "--seeds", seeds, "--users", "100", "--seconds", "0.2",
                    "--candidates", "100"], capture_output=True, timeout=120)
    base = ["--users", "100", "--seconds", str(slice_s), "--server-pids", pids]

    if "route" in only:
        # 1 in flight, 1,000 candidates; --forward sends every call to the
        # first seed (node 0 of shard 0), which forwards shard 1's users.
        a, b = [], []
        args = base + ["--candidates", "1000", "--no-hedge"]
        for _ in range(slices):
            a += run(load, seeds, args, "library")
            b += run(load, f.addrs[0], args + ["--forward"], "forward")
        summary("route", [("library", a), ("forward", b)])

    if "hedge" in only:
        args = base + ["--candidates", "1000", "--inflight", "2", "--rate", "400"]
        paused = [f.node_index(s, 1) for s in range(f.shards)]
        stop = threading.Event()

        def pauser():
            while not stop.is_set():
                for i in paused:
                    f.stop(i)
                stop.wait(0.05)
                for i in paused:
                    f.cont(i)
                stop.wait(0.45)

        a, b, c = [], [], []
        for _ in range(slices):
            c += run(load, seeds, args, "unpaused")
            stop.clear()
            th = threading.Thread(target=pauser)
            th.start()
            try:
                a += run(load, seeds, args, "hedged")
                b += run(load, seeds, args + ["--no-hedge"], "unhedged")
            finally:
                stop.set()
                th.join()
                for i in paused:
                    f.cont(i)
        summary("hedge", [("unpaused", c), ("hedged", a), ("unhedged", b)])

    if "compact" in only:
        a, b = [], []
        args = base + ["--candidates", "10000", "--no-hedge"]
        for _ in range(slices):
            a += run(load, seeds, args, "hashes")
            b += run(load, seeds, args + ["--ids"], "ids")
        summary("compact", [("hashes", a), ("ids", b)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
