#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What an operator meets first, on every binary (issue 30, items 3 and 4).

1. --help (exit 0, on stdout, every long option listed) and --version
   (exit 0: the version, the git revision and one line per library) on
   dedupd, ddcheck and dedupd-migrate; a usage error is a short usage line
   on stderr and exit 2, never the whole help.
2. ddcheck refuses a store that does not exist (exit non-zero, the path
   named, nothing created) and a malformed line (spaces instead of tabs, a
   missing field: exit non-zero, the line number named).
3. `dedupd -c conf/dedupd.conf` started from a fresh, empty working
   directory (overrides only for the addresses it would reach outside the
   test) creates ./data/history and ./data/trace and serves; its
   dedupd_build_info carries the labels --version prints. Started again
   with history.path several missing levels deep, it creates them and
   puts the trace store next to the history.

No Redis or Kafka is needed: dedupd answers degraded without them.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

DEDUPD = harness.build_path("src", "dedupd")
DDCHECK = harness.build_path("tools", "ddcheck")
MIGRATE = harness.build_path("scripts", "migrate", "dedupd-migrate")
CONF = os.path.join(harness.SOURCE_ROOT, "conf", "dedupd.conf")
LIBS = ("grpc", "rocksdb", "librdkafka", "hiredis", "protobuf_c")


def run(argv, cwd=None, stdin=None):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=cwd,
                       input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def parse_version(prog, out):
    """--version's lines: "PROG VERSION", then "name value" per item."""
    lines = out.splitlines()
    if not lines or not lines[0].startswith(prog + " "):
        harness.fail("%s --version: first line %r" % (prog, lines[:1]))
    info = {"version": lines[0].split(" ", 1)[1]}
    for line in lines[1:]:
        k, _, v = line.partition(" ")
        info[k] = v
    for k in ("version", "revision") + LIBS:
        if not info.get(k):
            harness.fail("%s --version lacks %s:\n%s" % (prog, k, out))
    if not re.match(r"^\d+\.\d+\.\d+", info["version"]):
        harness.fail("%s --version: version %r" % (prog, info["version"]))
    return info


def check_help_version(prog, exe, long_opts):
    rc, out, err = run([exe, "--help"])
    if rc != 0 or not out.startswith("usage: " + prog) or err:
        harness.fail("%s --help: exit %d, stdout %r, stderr %r" % (prog, rc, out[:200], err))
    for o in long_opts:
        if o not in out:
            harness.fail("%s --help does not list %s:\n%s" % (prog, o, out))
    rc, out, err = run([exe, "--version"])
    if rc != 0 or err:
        harness.fail("%s --version: exit %d, stderr %r" % (prog, rc, err))
    info = parse_version(prog, out)
    # A usage error: the usage line and a pointer to --help, on stderr, exit 2.
    rc, out, err = run([exe, "--no-such-option"])
    lines = [x for x in err.splitlines() if x.strip()]
    if rc != 2 or out or not any(x.startswith("usage: " + prog) for x in lines) \
            or "--help" not in err or len(lines) > 4:
        harness.fail("%s --no-such-option: exit %d, stdout %r, stderr:\n%s" % (prog, rc, out, err))
    harness.log("ok: %s --help, --version (%s), usage error (%d lines)"
                % (prog, " ".join("%s=%s" % kv for kv in info.items()), len(lines)))
    return info


def check_ddcheck(work):
    # No store at the path: refused, named, and nothing created.
    missing = os.path.join(work, "typo", "history")
    rc, out, err = run([DDCHECK, "-o", "history.path=" + missing], stdin="u1\tv1\n")
    if rc == 0 or missing not in err or os.path.exists(os.path.join(work, "typo")):
        harness.fail("ddcheck on a missing store: exit %d, stdout %r, stderr %r, created %s"
                     % (rc, out, err, os.path.exists(os.path.join(work, "typo"))))
    rc, out, err = run([DDCHECK, "-D", "-o", "history.path=" + missing])
    if rc == 0 or missing not in err or os.path.exists(missing):
        harness.fail("ddcheck -D on a missing store: exit %d, stderr %r" % (rc, err))
    harness.log("ok: ddcheck refuses a missing store: %s" % err.strip())

    # A real (empty) store, made by dedupd -o history.path=... and stopped.
    d = harness.Dedupd({"ingest.enabled": "false", "recent.redis": "127.0.0.1:1"})
    d.stop()
    store = d.overrides["history.path"]
    good = "u1\tv1\nu2\tv2\tscene\n\n"
    rc, out, err = run([DDCHECK, "-o", "history.path=" + store], stdin=good)
    if rc != 0 or "total=2 seen=0 unseen=2" not in out:
        harness.fail("ddcheck on a good list: exit %d, %r %r" % (rc, out, err))
    for text, lineno, what in (("u1\tv1\nu2 v2\n", 2, "spaces instead of a tab"),
                               ("u1\n", 1, "a missing item"),
                               ("u1\tv1\n\tv2\n", 2, "an empty user"),
                               ("u1\t\n", 1, "an empty item"),
                               ("u1\tv1\ts\textra\n", 1, "a fourth field")):
        rc, out, err = run([DDCHECK, "-o", "history.path=" + store], stdin=text)
        if rc == 0 or ":%d:" % lineno not in err or "total=" in out:
            harness.fail("ddcheck on %s: exit %d, stdout %r, stderr %r" % (what, rc, out, err))
    path = os.path.join(work, "list.tsv")
    with open(path, "w") as f:
        f.write("u1\tv1\nu1 v2\n")
    rc, out, err = run([DDCHECK, "-o", "history.path=" + store, path])
    if rc == 0 or "%s:2:" % path not in err:
        harness.fail("ddcheck LIST with a bad line 2: exit %d, stderr %r" % (rc, err))
    harness.log("ok: ddcheck refuses malformed lines: %s" % err.strip())


def start_fresh(cwd, extra=()):
    """dedupd -c conf/dedupd.conf from CWD; the addresses it would reach
    outside the test (listeners, Redis, Kafka) overridden."""
    argv = [DEDUPD, "-c", CONF, "-o", "rpc.listen=127.0.0.1:0", "-o", "admin.listen=127.0.0.1:0",
            "-o", "recent.redis=127.0.0.1:1", "-o", "kafka.bootstrap.servers=127.0.0.1:1"]
    for kv in extra:
        argv += ["-o", kv]
    p = harness.Proc(argv, "dedupd-fresh", cwd=cwd)
    harness.wait_until("dedupd to log msg=ready",
                       lambda: "msg=ready" in p.output() or not p.alive(), timeout=30)
    if not p.alive():
        harness.fail("dedupd -c conf/dedupd.conf from a fresh directory exited %s:\n%s"
                     % (p.p.returncode, p.tail()))
    m = re.search(r"msg=\"admin listening\" admin=\S*:(\d+)", p.output())
    if not m:
        harness.fail("no admin port in the log:\n%s" % p.tail())
    return p, int(m.group(1))


def build_info(port):
    st, body = harness.http_get(port, "/metrics")
    m = re.search(r"^dedupd_build_info\{(.*)\} 1$", body, re.M)
    if st != 200 or not m:
        harness.fail("no dedupd_build_info on /metrics (status %d)" % st)
    return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))


def check_fresh_dir(version):
    work = harness.tmpdir("dedupd-fresh-")
    p, port = start_fresh(work)
    labels = build_info(port)
    if labels != version:
        harness.fail("dedupd_build_info labels %s differ from --version %s" % (labels, version))
    harness.log("ok: dedupd_build_info{%s}" % ",".join("%s=%s" % kv for kv in labels.items()))
    if p.stop() != 0:
        harness.fail("dedupd exited %s:\n%s" % (p.p.returncode, p.tail()))
    for sub in ("data/history/CURRENT", "data/trace/CURRENT"):
        if not os.path.exists(os.path.join(work, sub)):
            harness.fail("dedupd from a fresh directory: no %s in %s" % (sub, work))
    harness.log("ok: dedupd -c conf/dedupd.conf from an empty directory made ./data/history "
                "and ./data/trace")

    # history.path three missing levels down; trace.path left at its default.
    deep = os.path.join(work, "a", "b", "c", "history")
    p, _ = start_fresh(harness.tmpdir("dedupd-cwd-"), ["history.path=" + deep])
    if p.stop() != 0:
        harness.fail("dedupd exited %s:\n%s" % (p.p.returncode, p.tail()))
    for d in (deep, os.path.join(work, "a", "b", "c", "trace")):
        if not os.path.exists(os.path.join(d, "CURRENT")):
            harness.fail("no store in %s:\n%s" % (d, p.tail()))
    harness.log("ok: history.path's missing parents created, the trace store next to it")


def main():
    work = harness.tmpdir()
    v1 = check_help_version("dedupd", DEDUPD, ("--config", "--set", "--check", "--print",
                                               "--take-over", "--help", "--version"))
    v2 = check_help_version("ddcheck", DDCHECK, ("--config", "--set", "--lookback-days",
                                                 "--verbose", "--all-unseen", "--damaged",
                                                 "--help", "--version"))
    v3 = check_help_version("dedupd-migrate", MIGRATE, ("--plays", "--total", "--help",
                                                        "--version"))
    if not v1 == v2 == v3:
        harness.fail("the binaries report different versions: %s %s %s" % (v1, v2, v3))
    check_ddcheck(work)
    check_fresh_dir(v1)
    harness.log("cli_meta: all checks passed")


if __name__ == "__main__":
    main()
