#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""dedupctl against a real dedupd and redis-server: every command's output
and exit code (0 ok, 1 RPC error or not serving, 2 usage), scenes, lookback,
and a daemon that is not there.
"""
import subprocess
import time

import harness
from test_clients_lib import Dedupd

DAY_MS = 86400 * 1000




def main():
    exe = harness.build_path("tools", "dedupctl")
    redis = harness.Redis()
    d = Dedupd(redis.addr)

    def ctl(*args, addr=None, want=0):
        argv = [exe, "-a", addr or d.addr] + [str(a) for a in args]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if p.returncode != want:
            harness.fail("%s: exit %d, want %d\nstdout: %s\nstderr: %s"
                         % (" ".join(argv), p.returncode, want, p.stdout, p.stderr))
        return p.stdout, p.stderr

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
    _, err = ctl("health", "no.such.Service", want=1)
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

    # An id may hold '@' itself: only the last one separates the time.
    ctl("play", "bob", "a@b@%d" % now)
    out, _ = ctl("filter", "bob", "a@b", "a")
    if kept(out) != ["a"]:
        harness.fail("id with '@': kept %s" % kept(out))

    out, _ = ctl("forget", "alice")
    if "forgot alice" not in out:
        harness.fail("forget: %r" % out)
    out, _ = ctl("filter", "alice", "p1", "d1", "p2")
    if kept(out) != ["p1", "d1", "p2"]:
        harness.fail("after forget kept %s" % kept(out))

    # RPC errors: exit 1 with the status name and the server's message.
    _, err = ctl("filter", "", "x", want=1)
    if "INVALID_ARGUMENT" not in err or "user_id" not in err:
        harness.fail("empty user: %r" % err)
    _, err = ctl("play", "carol", "x" * 300, want=1)
    if "INVALID_ARGUMENT" not in err:
        harness.fail("over-long id: %r" % err)
    dead = "127.0.0.1:%d" % harness.free_port()
    _, err = ctl("-t", "2000", "health", addr=dead, want=1)
    if "UNAVAILABLE" not in err:
        harness.fail("dead daemon: %r" % err)
    _, err = ctl("-t", "2000", "filter", "u", "x", addr=dead, want=1)
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
    # NOT_SERVING and a stopped daemon both exit 1.
    ctl("health", want=1)
    harness.log("PASS")


if __name__ == "__main__":
    main()
