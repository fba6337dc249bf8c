#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The C++ client library's benchmarks (issue 28) on a 2 x 2 loopback
cluster (tests/integration/fleet.py: four dedupd, a redis-server per shard,
the devbroker), each comparison run A B A B ... in slices of --slice
seconds so that both sides see the same (shared, loaded) host:

  route:   Filter through the library (to a replica of the owner) vs
           through one seed node (--forward: that node forwards the calls
           of the other shard's users), 1 in flight; and the library
           against a call built by hand and sent on a plain stub straight
           to the same node (--paired: the floor, call by call in one
           process, so host drift cancels), hedged as by default and not;
  hedge:   one replica of each shard paused 50 ms every 500 ms
           (SIGSTOP/SIGCONT): hedged vs not; and the same calls with no
           pause, for the unpaused p99;
  compact: 10,000 candidates as item hashes vs as ids (13 bytes each, a
           150 KB request): request bytes, dedupd CPU per call (all four
           nodes, /proc/PID/stat, less what they spend idle over as long),
           p50/p99; 1 in flight (latency), then 4 in flight (CPU per call
           under load, where the nodes' workers rarely spin between calls);
  compaction: a second fleet whose nodes flush every second and compact
           L0 from 2 files, plays produced at --play-rate (default
           20,000/s) into it throughout, so every node flushes and compacts
           while it answers (the plays ingested and bytes written in each
           slice are printed): hedged vs not, 2 in flight paced as in
           hedge.

Prints each slice's dedupd-load line, then per comparison the median over
slices of each side's p50/p99 (and CPU per call). Figures go to
docs/benchmarks.md. Exits 1 if any dedupd-load run failed (a call failed,
or it printed no phase line).

usage: bench/run_cpp_lib.py [--slices N] [--slice S] [--play-rate R] [--spin-us U]
                            [--only route,hedge,compact,compaction]
--spin-us sets every node's rpc.spin_us (default: dedupd's default, 500):
after a call a worker polls that long for the next one, CPU that counts in
dedupd_cpu_ms_per_call at low load.
Binaries from build/ (DD_BUILD_ROOT overrides).
"""
import os
import re
import statistics
import subprocess
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
os.environ.setdefault("DD_SOURCE_ROOT", root)
os.environ.setdefault("DD_BUILD_ROOT", os.path.join(root, "build"))
sys.path.insert(0, os.path.join(root, "tests", "integration"))
import fleet  # noqa: E402
import harness  # noqa: E402
import test_ingest_lib as il  # noqa: E402


def fields(line):
    return {k: v for k, v in re.findall(r"(\w+)=(\S+)", line)}


FAILED_RUNS = []  # dedupd-load runs that failed or printed no phase line


def run(load, seeds, args, label, kind="filter", also=None):
    """dedupd-load's phase=KIND lines, as dicts; with ALSO (a list), its
    phase=direct lines are added to that list."""
    argv = [load, "--seeds", seeds, "--no-setup"] + args
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    if also is not None:
        for x in p.stdout.splitlines():
            if x.startswith("phase=direct"):
                print("%-10s %s" % ("direct", x), flush=True)
                also.append(fields(x))
    lines = [x for x in p.stdout.splitlines() if x.startswith("phase=" + kind)]
    for x in lines:
        print("%-10s %s" % (label, x), flush=True)
    if p.returncode != 0 or not lines:
        print("%-10s dedupd-load exited %d: %s" % (label, p.returncode, p.stderr[-500:]),
              flush=True)
        FAILED_RUNS.append(label)
    return [fields(x) for x in lines]


def cpu_seconds(pids):
    """User + system CPU seconds of PIDS so far (/proc/PID/stat)."""
    tck = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
        total += (int(rest[11]) + int(rest[12])) / tck
    return total


def written_mb(pids):
    """Bytes PIDS have caused to be written to storage so far, in MB."""
    total = 0
    for pid in pids:
        with open("/proc/%d/io" % pid) as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    total += int(line.split()[1])
    return total / 1e6


def ingested(f):
    """Plays ingested so far by every node (dedupd_ingest_messages_total)."""
    return sum(f.metric(i, "dedupd_ingest_messages_total") for i in range(len(f.nodes)))


def summary(name, sides):
    for label, rows in sides:
        if not rows:
            continue
        med = lambda k: statistics.median(float(r[k]) for r in rows if k in r)  # noqa: E731
        extra = ""
        if "dedupd_cpu_ms_per_call" in rows[0]:
            extra = " dedupd_cpu_ms_per_call=%.3f" % med("dedupd_cpu_ms_per_call")
        if "busy_cpu_ms_per_call" in rows[0]:
            extra += " busy_cpu_ms_per_call=%.3f" % med("busy_cpu_ms_per_call")
        if "written_mb" in rows[0]:
            extra += " written_mb_per_slice=%.1f" % med("written_mb")
        calls = sum(int(r["calls"]) for r in rows)
        hedged = sum(int(r["hedged"]) for r in rows)
        failed = sum(int(r["failed"]) for r in rows)
        print("%s %-10s slices=%d calls=%d failed=%d hedged=%d (%.1f %%) req_bytes=%s "
              "p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f (medians over slices)%s"
              % (name, label, len(rows), calls, failed, hedged,
                 100.0 * hedged / calls if calls else 0, rows[0]["req_bytes"], med("p50_ms"),
                 med("p99_ms"), med("p999_ms"), extra), flush=True)


def main():
    slices, slice_s, only = 6, 3.0, {"route", "hedge", "compact", "compaction"}
    play_rate = 20000
    extra = {}
    args = sys.argv[1:]
    while args:
        a = args.pop(0)
        if a == "--slices":
            slices = int(args.pop(0))
        elif a == "--slice":
            slice_s = float(args.pop(0))
        elif a == "--spin-us":
            extra["rpc.spin_us"] = str(int(args.pop(0)))
        elif a == "--play-rate":
            play_rate = int(args.pop(0))
        elif a == "--only":
            only = set(args.pop(0).split(","))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    load = harness.build_path("clients", "cpp", "dedupd-load")
    f = fleet.Fleet(extra=extra)
    seeds = f.seeds
    pids = ",".join(str(f.pid(i)) for i in range(len(f.nodes)))
    print("run_cpp_lib: fleet %s, %d cores, %d slices of %.1f s per side, rpc.spin_us %s"
          % (seeds, os.cpu_count(), slices, slice_s, extra.get("rpc.spin_us", "default")),
          flush=True)
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
        # Call by call: the library, then the same request by hand to the
        # same node (or the other way round), one process.
        for hedge in ([], ["--no-hedge"]):
            name = "paired" + ("" if hedge else "-hedged")
            lib, dire = [], []
            for _ in range(slices):
                argv = base + ["--candidates", "1000", "--paired"] + hedge
                lib += run(load, seeds, argv, "library", also=dire)
            summary(name, [("library", lib), ("direct", dire)])
            if lib and dire:
                d50 = [float(x["p50_ms"]) - float(y["p50_ms"]) for x, y in zip(lib, dire)]
                print("%s library-direct p50_ms per slice: %s (median %.3f)"
                      % (name, " ".join("%.3f" % x for x in d50), statistics.median(d50)),
                      flush=True)

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
        args = base + ["--candidates", "10000", "--no-hedge"]
        node_pids = [f.pid(i) for i in range(len(f.nodes))]

        def with_busy(rows):
            # The nodes' CPU idle (ingest polls, health rounds) over as
            # long as the slice, taken off: the CPU the calls cost.
            c0 = cpu_seconds(node_pids)
            time.sleep(slice_s)
            idle = cpu_seconds(node_pids) - c0
            for r in rows:
                calls = int(r["calls"])
                if calls and "dedupd_cpu_ms_per_call" in r:
                    busy = float(r["dedupd_cpu_ms_per_call"]) - idle * 1000 / calls
                    r["busy_cpu_ms_per_call"] = "%.4f" % busy
                    print("%-10s idle_cpu_s=%.3f busy_cpu_ms_per_call=%.4f" % ("", idle, busy),
                          flush=True)
            return rows

        for inflight in (1, 4):
            a, b = [], []
            more = ["--inflight", str(inflight)]
            for _ in range(slices):
                a += with_busy(run(load, seeds, args + more, "hashes"))
                b += with_busy(run(load, seeds, args + more + ["--ids"], "ids"))
            name = "compact%d" % inflight
            summary(name, [("hashes", a), ("ids", b)])
            if a and b:
                rb = statistics.median(float(x["busy_cpu_ms_per_call"]) for x in a) / \
                    statistics.median(float(x["busy_cpu_ms_per_call"]) for x in b)
                rt = statistics.median(float(x["dedupd_cpu_ms_per_call"]) for x in a) / \
                    statistics.median(float(x["dedupd_cpu_ms_per_call"]) for x in b)
                print("%s hashes/ids dedupd CPU per call: %.2fx (idle taken off), %.2fx (all)"
                      % (name, rb, rt), flush=True)

    if "compaction" in only:
        # A fleet of its own whose nodes flush every second (a durable
        # point) and compact L0 from 2 files: with plays flowing, each node
        # flushes and compacts several times a slice, as a full-size node
        # does over its 10 s flushes. The first fleet is stopped.
        for i in range(len(f.nodes)):
            f.kill9(i)
        f = fleet.Fleet(extra=dict(extra, **{
            "ingest.durable_interval_ms": "1000",
            "rocksdb.level0_file_num_compaction_trigger": "2"}))
        seeds = f.seeds
        subprocess.run([load, "--seeds", seeds, "--users", "100", "--seconds", "0.2",
                        "--candidates", "100"], capture_output=True, timeout=120)
        base = ["--users", "100", "--seconds", str(slice_s), "--server-pids",
                ",".join(str(f.pid(i)) for i in range(len(f.nodes)))]
        # Plays for users of their own (the load's users keep exact
        # answers), produced at PLAY_RATE throughout the slices.
        rows = [("ingest-user-%d" % (k % 20000), "ingest-item-%d" % k)
                for k in range(int(play_rate * slice_s * 2 * slices * 1.2))]
        pids = [f.pid(i) for i in range(len(f.nodes))]
        prod = il.produce_async(f.broker, rows, rate=play_rate, partitioner=f.partitioner)
        time.sleep(1.0)
        args = base + ["--candidates", "1000", "--inflight", "2", "--rate", "400"]
        a, b = [], []
        try:
            for _ in range(slices):
                for label, more, out in (("hedged", [], a), ("unhedged", ["--no-hedge"], b)):
                    w0, m0 = written_mb(pids), ingested(f)
                    got = run(load, seeds, args + more, label)
                    w, m = written_mb(pids) - w0, ingested(f) - m0
                    for r in got:
                        r["written_mb"] = "%.1f" % w
                    print("%-10s nodes ingested %d plays and wrote %.1f MB in the slice"
                          % (label, m, w), flush=True)
                    out += got
        finally:
            if prod.p.poll() is None:
                prod.p.terminate()
        summary("compaction", [("hedged", a), ("unhedged", b)])
    if FAILED_RUNS:
        print("run_cpp_lib: %d dedupd-load runs failed: %s" % (len(FAILED_RUNS),
                                                               " ".join(FAILED_RUNS)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
