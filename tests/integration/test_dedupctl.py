#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""dedupctl against a real dedupd and redis-server: every command's output
and exit code (0 ok, 1 not serving, 2 usage, 3 unavailable, 4 invalid
argument; test_dedupctl_habits.py has the rest of the table), scenes, lookback,
and a daemon that is not there. Options anywhere on the line and in long
form, '--' before ids that begin with '-', unknown options refused; and
`dedupctl stats`' consumer lag line against a canned /metrics (the live one
is in test_metrics.py).
"""
import http.server
import subprocess
import threading
import time

import harness
from test_clients_lib import Dedupd

DAY_MS = 86400 * 1000


def run(exe, argv, want):
    """Run dedupctl with ARGV; fail unless it exits WANT. (stdout, stderr)."""
    p = subprocess.run([exe] + [str(a) for a in argv], capture_output=True, text=True,
                       timeout=30)
    if p.returncode != want:
        harness.fail("dedupctl %s: exit %d, want %d\nstdout: %s\nstderr: %s"
                     % (" ".join(map(str, argv)), p.returncode, want, p.stdout, p.stderr))
    return p.stdout, p.stderr


def check_usage(exe):
    """What needs no server: help, and unknown or incomplete options, which
    are refused (exit 2, the option named) wherever they stand."""
    for argv in (["--help"], ["-h"], ["filter", "--help"], ["filter", "alice", "v1", "-h"]):
        out, _ = run(exe, argv, 0)
        if "usage: dedupctl" not in out or "--lookback" not in out or "'--'" not in out:
            harness.fail("dedupctl %s: %r" % (" ".join(argv), out))
    # The port is closed: a refused option must stop dedupctl before it
    # dials, or these would exit 1.
    dead = ["-a", "127.0.0.1:%d" % harness.free_port(), "-t", "2000"]
    for argv, named in ((["filter", "--bogus", "alice", "v1"], "'--bogus'"),
                        (["--explainx", "filter", "alice", "v1"], "'--explainx'"),
                        (["filter", "alice", "v1", "--lookback-days", "3"], "'--lookback-days'"),
                        (["filter", "alice", "-x", "v1"], "'x'"),
                        (["filter", "alice", "v1", "-t"], "'t'"),
                        (["filter", "alice", "v1", "--scene"], "'--scene'"),
                        (["health", "--timeout=soon"], "'soon'"),
                        (["filter", "alice", "v1", "--lookback", "-1"], "'-1'")):
        out, err = run(exe, dead + argv, 2)
        if named not in err or out:
            harness.fail("dedupctl %s: the refusal should name %s on stderr: %r %r"
                         % (" ".join(argv), named, out, err))
    _, err = run(exe, ["filter", "alice", "-v1"], 2)
    if "'--'" not in err:
        harness.fail("an option-like id: no hint about '--': %r" % err)
    harness.log("usage: --help anywhere, unknown options refused and named")


def check_stats_lag(exe):
    """`dedupctl stats`' lag line from canned /metrics: in ms where
    dedupd_ingest_lag_seconds is exported, or the previous release's
    dedupd_ingest_lag_ms (negative: not known), else messages
    behind, else why there is none."""
    common = ("# TYPE dedupd_rpc_requests_total counter\n"
              "dedupd_rpc_requests_total{method=\"Filter\",code=\"OK\"} 0\n"
              "# TYPE dedupd_filter_degraded_total counter\n"
              "dedupd_filter_degraded_total 0\n"
              "# TYPE dedupd_ingest_messages_total counter\n"
              "dedupd_ingest_messages_total{result=\"ok\"} 10\n"
              "# TYPE dedupd_ingest_assigned_partitions gauge\n"
              "dedupd_ingest_assigned_partitions 8\n")
    lags = ("# TYPE dedupd_ingest_consumer_lag gauge\n"
            "dedupd_ingest_consumer_lag{partition=\"0\"} 3\n"
            "dedupd_ingest_consumer_lag{partition=\"5\"} 9\n")
    no_lags = "# TYPE dedupd_ingest_consumer_lag gauge\n"

    def ms(v):  # the previous release's family
        return "# TYPE dedupd_ingest_lag_ms gauge\ndedupd_ingest_lag_ms %s\n" % v

    def seconds(v):
        return "# TYPE dedupd_ingest_lag_seconds gauge\ndedupd_ingest_lag_seconds %s\n" % v
    body = {"text": ""}

    class Admin(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            data = (body["text"] if self.path == "/metrics" else "ready\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Admin)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    addr = "127.0.0.1:%d" % srv.server_address[1]
    cases = (
        (common + lags + ms(1500),
         "1500 ms behind; 12 messages over 2 partitions (max 9 on partition 5)"),
        (common + lags + ms(-1), "12 messages over 2 partitions (max 9 on partition 5)"),
        (common + lags, "12 messages over 2 partitions (max 9 on partition 5)"),
        (common + no_lags + ms(250), "250 ms behind\n"),
        (common + lags + seconds(1.5),
         "1500 ms behind; 12 messages over 2 partitions (max 9 on partition 5)"),
        (common + no_lags + seconds(0.25), "250 ms behind\n"),
        (common + no_lags, "- (8 partitions assigned, no lag in librdkafka's statistics yet"),
        (common.replace("assigned_partitions 8", "assigned_partitions 0") + no_lags,
         "- (no partition assigned)"),
    )
    try:
        for text, want in cases:
            body["text"] = text
            # stats takes the options anywhere too
            out, _ = run(exe, ["stats", addr, "--timeout", "3000"], 0)
            line = next((l for l in out.splitlines() if l.startswith("consumer lag")), "")
            if want not in line + "\n":
                harness.fail("stats lag line %r, want %r, from\n%s" % (line, want, text))
    finally:
        srv.shutdown()
        srv.server_close()
    harness.log("stats: lag in ms when exported, else messages behind, else why not")


def main():
    exe = harness.build_path("tools", "dedupctl")
    check_usage(exe)
    check_stats_lag(exe)
    redis = harness.Redis()
    d = Dedupd(redis.addr)

    def ctl(*args, addr=None, want=0):
        return run(exe, ["-a", addr or d.addr] + list(args), want)

    def kept(out):
        """The kept ids of a filter answer, in order."""
        lines = out.splitlines()
        i = next(i for i, l in enumerate(lines) if l.startswith("kept "))
        ids = []
        for l in lines[i + 1:]:
            if not l.startswith("  "):
                break
            ids.append(l.strip())
        return ids

    def removed(out):
        """{id: reason} of a filter answer."""
        lines = out.splitlines()
        i = next(i for i, l in enumerate(lines) if l.startswith("removed "))
        res = {}
        for l in lines[i + 1:]:
            if not l.startswith("  "):
                break
            f = l.split()
            res.setdefault(f[0], []).append(f[1])
        return res

    out, _ = ctl("health")
    if out.strip() != "SERVING":
        harness.fail("health: %r" % out)
    _, err = ctl("health", "no.such.Service", want=1)  # NOT_FOUND: "other failure"
    if "NOT_FOUND" not in err:
        harness.fail("health of an unknown service: %r" % err)

    now = int(time.time() * 1000)
    out, _ = ctl("play", "alice", "p1", "p2@%d" % (now - 80 * DAY_MS), "old@%d" % (now - 400 * DAY_MS))
    if "accepted 2, expired 1" not in out:
        harness.fail("play: %r" % out)
    out, _ = ctl("deliver", "alice", "d1", "d2")
    if "recorded 2 deliveries" not in out or "recent size 2" not in out:
        harness.fail("deliver: %r" % out)

    out, err = ctl("filter", "alice", "p1", "d1", "new", "p2", "old", "new", "d2")
    if kept(out) != ["new", "old"]:
        harness.fail("filter kept %s\n%s" % (kept(out), out))
    want = {"p1": ["PLAYED"], "p2": ["PLAYED"], "d1": ["DELIVERED"], "d2": ["DELIVERED"],
            "new": ["DUPLICATE"]}
    if removed(out) != want:
        harness.fail("filter removed %s, want %s" % (removed(out), want))
    if "played=2 delivered=2 duplicate=1 degraded=no" not in out:
        harness.fail("filter counters: %r" % out)
    if err:
        harness.fail("filter wrote to stderr: %r" % err)

    # Lookback (segment-granular in dedupd, 30-day segments by default): p2
    # is 80 days old, p1 is from now.
    out, _ = ctl("-l", "5", "filter", "alice", "p1", "p2")
    if kept(out) != ["p2"]:
        harness.fail("filter -l 5 kept %s" % kept(out))
    # Scenes are separate namespaces.
    out, _ = ctl("-s", "other", "filter", "alice", "p1", "d1")
    if kept(out) != ["p1", "d1"]:
        harness.fail("filter in scene 'other' kept %s" % kept(out))
    ctl("-s", "other", "play", "alice", "s1")
    out, _ = ctl("-s", "other", "filter", "alice", "s1", "p1")
    if kept(out) != ["p1"]:
        harness.fail("scene 'other' after play kept %s" % kept(out))
    out, _ = ctl("filter", "alice", "s1")
    if kept(out) != ["s1"]:
        harness.fail("default scene sees a play of scene 'other': %s" % kept(out))

    # Options anywhere on the line, in short or long form: the issue's
    # example, the lookback and scene after the ids, --opt=value.
    out, _ = ctl("filter", "--explain", "alice", "p1", "p2")
    if kept(out) != [] or removed(out) != {"p1": ["PLAYED"], "p2": ["PLAYED"]}:
        harness.fail("filter --explain alice: %r" % out)
    for args in (("filter", "alice", "p1", "p2", "-l", "5"),
                 ("filter", "alice", "--lookback", "5", "p1", "p2"),
                 ("filter", "alice", "p1", "p2", "--lookback=5", "--timeout", "3000"),
                 ("--look", "5", "filter", "alice", "p1", "p2")):
        out, _ = ctl(*args)
        if kept(out) != ["p2"]:
            harness.fail("%s kept %s" % (" ".join(args), kept(out)))
    for args in (("filter", "alice", "p1", "d1", "-s", "other"),
                 ("filter", "--scene", "other", "alice", "p1", "d1"),
                 ("filter", "alice", "p1", "d1", "--scene=other")):
        out, _ = ctl(*args)
        if kept(out) != ["p1", "d1"]:
            harness.fail("%s kept %s" % (" ".join(args), kept(out)))
    out, _ = run(exe, ["filter", "alice", "p1", "new", "--addr", d.addr], 0)
    if kept(out) != ["new"]:
        harness.fail("--addr after the ids: kept %s" % kept(out))
    out, _ = run(exe, ["health", "--addr=" + d.addr], 0)
    if out.strip() != "SERVING":
        harness.fail("health --addr=: %r" % out)
    # Without explain the server sends counts only.
    out, _ = ctl("filter", "alice", "p1", "d1", "new", "new", "--no-explain")
    if kept(out) != ["new"] or removed(out) != {} or "removed 3 (--no-explain" not in out \
            or "played=1 delivered=1 duplicate=1" not in out:
        harness.fail("filter --no-explain: %r" % out)
    # '--' ends the options: ids that begin with '-' after it, options
    # before it still read.
    out, _ = ctl("play", "dash", "-s", "other", "--", "-v1", "--scene", "-")
    if "accepted 3" not in out:
        harness.fail("play with '--': %r" % out)
    out, _ = ctl("filter", "dash", "--scene", "other", "--", "-v1", "v2", "--scene", "-", "-h")
    if kept(out) != ["v2", "-h"]:
        harness.fail("filter with '--' kept %s" % kept(out))
    out, _ = ctl("filter", "dash", "--", "-v1", "v2")
    if kept(out) != ["-v1", "v2"]:
        harness.fail("'-v1' in the default scene: kept %s" % kept(out))
    ctl("filter", "dash", "-v1", "v2", want=2)
    ctl("--", "filter", "dash", "--help", want=0)  # after '--' even --help is an id

    # An id may hold '@' itself: only the last one separates the time.
    ctl("play", "bob", "a@b@%d" % now)
    out, _ = ctl("filter", "bob", "a@b", "a")
    if kept(out) != ["a"]:
        harness.fail("id with '@': kept %s" % kept(out))

    out, _ = ctl("forget", "alice")
    if not out.startswith("forgot alice in 2 scenes"):
        harness.fail("forget: %r" % out)
    out, _ = ctl("filter", "alice", "p1", "d1", "p2")
    if kept(out) != ["p1", "d1", "p2"]:
        harness.fail("after forget kept %s" % kept(out))

    # RPC errors: the status name and the server's message, and the exit
    # code of its kind (4 invalid argument, 3 unavailable).
    _, err = ctl("filter", "", "x", want=4)
    if "INVALID_ARGUMENT" not in err or "user_id" not in err:
        harness.fail("empty user: %r" % err)
    _, err = ctl("play", "carol", "x" * 300, want=4)
    if "INVALID_ARGUMENT" not in err:
        harness.fail("over-long id: %r" % err)
    dead = "127.0.0.1:%d" % harness.free_port()
    _, err = ctl("-t", "2000", "health", addr=dead, want=3)
    if "UNAVAILABLE" not in err:
        harness.fail("dead daemon: %r" % err)
    _, err = ctl("-t", "2000", "filter", "u", "x", addr=dead, want=3)
    if "UNAVAILABLE" not in err:
        harness.fail("dead daemon, filter: %r" % err)

    # Usage errors: exit 2, nothing sent.
    for args in ([], ["bogus"], ["filter"], ["filter", "u"], ["deliver", "u"], ["play", "u"],
                 ["forget"], ["forget", "a", "b"], ["health", "a", "b"], ["-t", "0", "health"],
                 ["-t", "x", "health"], ["-l", "-1", "filter", "u", "a"],
                 ["play", "u", "x@notatime"], ["play", "u", "x@-5"]):
        ctl(*args, want=2)
    out, _ = ctl("-h")
    if "usage: dedupctl" not in out:
        harness.fail("-h: %r" % out)

    d.stop()
    # A stopped daemon: unavailable (NOT_SERVING, while it drains, exits 1).
    ctl("health", want=3)
    harness.log("PASS")


if __name__ == "__main__":
    main()
