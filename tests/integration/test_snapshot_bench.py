#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/run_snapshot.py works end to end (not its figures): on a store of
2,000 users it builds the store, starts A, copies it to B once throttled
(cluster.snapshot_mbps 400) and once without a limit, and prints a
SUMMARY line per bandwidth with the copy's bytes, B ready, and A's Filter
latencies before and during the copy taken from calls that were made; and
it leaves no process and no temporary directory behind."""
import glob
import os
import re
import subprocess
import sys

import harness


def main():
    script = os.path.join(harness.SOURCE_ROOT, "bench", "run_snapshot.py")
    tmp = harness.tmpdir("dedupd-snapbench-test-")
    env = dict(os.environ, TMPDIR=tmp)
    r = subprocess.run([sys.executable, script, "--users", "2000", "--seconds", "1"],
                       capture_output=True, text=True, timeout=100, env=env)
    sys.stderr.write(r.stderr[-3000:])
    print(r.stdout)
    if r.returncode != 0:
        harness.fail("run_snapshot.py exited %d" % r.returncode)
    m = re.search(r"store: .*: ([\d.]+) MB of SST files", r.stdout)
    if not m or float(m.group(1)) < 5:
        harness.fail("no store size, or a store under 5 MB")
    rows = {}
    for line in r.stdout.splitlines():
        if line.startswith("SUMMARY snapshot "):
            kv = dict(f.split("=", 1) for f in line.split()[2:])
            rows[kv["mbps"]] = kv
    if sorted(rows) != ["0", "400"]:
        harness.fail("SUMMARY lines for %s, not for 400 and 0" % sorted(rows))
    store_bytes = float(m.group(1)) * 1e6
    for mbps, kv in rows.items():
        if kv["b_ready"] != "1" or float(kv["ready_s"]) <= 0:
            harness.fail("mbps=%s: B not ready: %s" % (mbps, kv))
        if not 0.9 * store_bytes <= int(kv["bytes"]) <= 1.5 * store_bytes:
            harness.fail("mbps=%s: %s bytes copied of a %.0f-byte store" % (mbps, kv["bytes"],
                                                                            store_bytes))
        if int(kv["sent_bytes"]) < int(kv["bytes"]) or float(kv["mb_per_s"]) <= 0:
            harness.fail("mbps=%s: A sent %s bytes, %s MB/s" % (mbps, kv["sent_bytes"],
                                                                kv["mb_per_s"]))
        for w in ("before", "during"):
            if int(kv["calls_" + w]) < 1 or not float(kv["filter_p99_%s_ms" % w]) > 0:
                harness.fail("mbps=%s: no Filter latency %s the copy: %s" % (mbps, w, kv))
            if not 0 <= int(kv["degraded_" + w]) <= int(kv["calls_" + w]):
                harness.fail("mbps=%s: degraded answers %s the copy: %s" % (mbps, w, kv))
    # everything the script made was under TMPDIR, and named it in its
    # processes' arguments
    left = os.listdir(tmp)
    if left:
        harness.fail("left behind in TMPDIR: %s" % left)
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(cmdline, "rb") as f:
                if tmp.encode() in f.read():
                    harness.fail("still running: %s" % cmdline)
        except OSError:
            pass
    harness.log("PASS")


if __name__ == "__main__":
    main()
