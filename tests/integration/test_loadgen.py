#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/run_loadgen.sh keeps working: one short run the usual way (every
phase and goal line printed, dedupd's CPU and context switches per call
for each Filter phase: back to back, paced, saturated, and back to back
again with the request serialised once; the other phases build their
request inside each call, as a recall service pays for it, and the ratio
line gives both figures)
and one A/B run (DEDUPD_B_OPTS: a second dedupd, the phases alternated,
the slice pairs compared), whose paced phase waits with --client-spin. Figures are not checked (that is what the
benchmark is for), only that each part runs and reports, without errors.

usage: test_loadgen.py RUN_LOADGEN LOADGEN DEDUPD
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def run(script, loadgen, dedupd, env_extra, seconds, *extra):
    env = dict(os.environ, **env_extra)
    p = subprocess.run(["/bin/sh", script, loadgen, dedupd, "--", "--seconds", str(seconds)]
                       + list(extra),
                       capture_output=True, text=True, timeout=240, env=env,
                       stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        harness.fail("run_loadgen.sh %s exited %d:\n%s\n%s" % (env_extra, p.returncode,
                                                               p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout


def main():
    if len(sys.argv) != 4:
        harness.fail(__doc__)
    script, loadgen, dedupd = sys.argv[1:]
    if not shutil.which("redis-server"):
        harness.skip("redis-server is not installed")

    out = run(script, loadgen, dedupd, {}, 1)
    for needle in ("dedupd Filter, 1 in flight", "dedupd Filter, paced 200/s",
                   "dedupd Filter, 1 in flight, request serialised once",
                   "request built in each call",
                   "dedupd Filter, 8 in flight",
                   "legacy ZRANGE 10000 + flat hash set (strong)",
                   "legacy ZRANGE 10000 + std::unordered_set (weak)", "ratio legacy/dedupd",
                   "goal p99 <= 1 ms at 1 in flight", "goal >= 2000 calls/s",
                   "goal >= 3x faster than the strong legacy path"):
        if needle not in out:
            harness.fail("no %r in:\n%s" % (needle, out))
    for what in ("dedupd CPU", "dedupd context switches"):
        if len(re.findall(what + r" \d+\.\d+ ", out)) != 4:
            harness.fail("%s not printed for the four Filter phases:\n%s" % (what, out))
    if not re.search(r"ratio legacy/dedupd latency: p50 \d+\.\dx.*request built in each call.*"
                     r"p50 \d+\.\dx with the request serialised once", out):
        harness.fail("the ratio line does not give both figures:\n" + out)
    if re.search(r"errors=[1-9]", out):
        harness.fail("calls failed:\n" + out)
    harness.log("plain run ok")

    out = run(script, loadgen, dedupd, {"DEDUPD_B_OPTS": "-o rpc.poller=epoll1 -o rpc.spin_us=0"}, 1,
              "--client-spin")
    for label in ("A 127.0.0.1:", "B 127.0.0.1:"):
        for phase in ("1 in flight", "paced 200/s, client spinning", "8 in flight"):
            if not re.search(re.escape(label) + r"\d+, " + phase, out):
                harness.fail("no %s line for %s in:\n%s" % (label, phase, out))
    pairs = re.findall(r"B/A in (\d+) slice pairs", out)
    if pairs != ["2", "2", "2"]:
        harness.fail("want three comparisons of 2 slice pairs, got %s:\n%s" % (pairs, out))
    if "legacy ZRANGE" in out:
        harness.fail("the A/B run measured the legacy path:\n" + out)
    if re.search(r"errors=[1-9]", out):
        harness.fail("calls failed:\n" + out)
    harness.log("A/B run ok")
    harness.log("PASS")


if __name__ == "__main__":
    main()
