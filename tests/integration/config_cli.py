#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The configuration as the operator drives it from the command line.

Runs the real dedupd binary with -t (check and exit) and -p (print and
exit), so no server is needed: the reference conf/dedupd.conf is accepted,
-p output is a file dedupd reads back to the same configuration, and every
kind of mistake (unknown key, bad value, bad file line, cross-key rule)
exits non-zero with a message naming the key.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

DEDUPD = harness.build_path("src", "dedupd")
CONF = os.path.join(harness.SOURCE_ROOT, "conf", "dedupd.conf")


WORKDIR = harness.tmpdir()  # the default history.path is relative: keep it here


def run(*args):
    p = subprocess.run([DEDUPD, *args], capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL, cwd=WORKDIR)
    return p.returncode, p.stdout, p.stderr


def expect_ok(*args):
    rc, out, err = run(*args)
    if rc != 0:
        harness.fail("dedupd %s: exit %d, stderr: %s" % (" ".join(args), rc, err.strip()))
    return out


def expect_error(args, *fragments):
    rc, out, err = run(*args)
    if rc == 0:
        harness.fail("dedupd %s: exit 0, expected an error" % " ".join(args))
    for f in fragments:
        if f not in err:
            harness.fail("dedupd %s: stderr %r does not mention %r" % (" ".join(args), err, f))
    harness.log("ok: dedupd %s -> exit %d: %s" % (" ".join(args), rc, err.strip()))


def main():
    if not os.path.exists(CONF):
        harness.fail("missing %s" % CONF)
    out = expect_ok("-t", "-c", CONF)
    if "configuration ok" not in out:
        harness.fail("-t printed %r" % out)

    # The reference file is the defaults: -p with and without it agree.
    defaults = expect_ok("-p")
    if expect_ok("-p", "-c", CONF) != defaults:
        harness.fail("-p -c conf/dedupd.conf differs from the built-in defaults")
    for key in ("[history]", "segment_days = 30", "[kafka]", "group.id = \"dedupd\""):
        if key not in defaults:
            harness.fail("-p output lacks %r:\n%s" % (key, defaults))

    # -o overrides the file whatever the order, and -p writes a file that
    # reads back to the same configuration.
    d = harness.tmpdir()
    printed = expect_ok("-p", "-o", "history.segment_days=7", "-c", CONF,
                        "-o", "kafka.auto.offset.reset=earliest",
                        "-o", "recent.password=a \"#quoted\" ;one",
                        "-o", "log.level=warn")
    if "segment_days = 7\n" not in printed or "auto.offset.reset = \"earliest\"" not in printed:
        harness.fail("overrides not in -p output:\n%s" % printed)
    path = os.path.join(d, "printed.conf")
    with open(path, "w") as f:
        f.write(printed)
    if expect_ok("-p", "-c", path) != printed:
        harness.fail("-p output read back with -c prints differently")
    expect_ok("-t", "-c", path)

    # Mistakes: non-zero exit, the key (and the file line) in the message.
    expect_error(["-t", "-o", "history.bogus=1"], "history.bogus")
    expect_error(["-t", "-c", CONF, "-o", "history.bogus=1"], "history.bogus")
    expect_error(["-t", "-o", "history.segment_days=abc"], "history.segment_days", "abc")
    expect_error(["-t", "-o", "history.segment_days=-1"], "history.segment_days")
    expect_error(["-t", "-o", "rpc.threads=99999999999"], "rpc.threads")
    expect_error(["-t", "-o", "history.sync=maybe"], "history.sync")
    expect_error(["-t", "-o", "ingest.format=xml"], "ingest.format")
    expect_error(["-t", "-o", "rpc.listen=localhost"], "rpc.listen")
    expect_error(["-t", "-o", "history.segment_days=120"], "history.segment_days",
                 "history.retention_days")
    expect_error(["-t", "-o", "rpc.tls_cert=/x.pem"], "rpc.tls_key")
    expect_error(["-t", "-o", "history.path"], "history.path")
    expect_error(["-t", "-c", os.path.join(d, "missing.conf")], "missing.conf")

    bad = os.path.join(d, "bad.conf")
    with open(bad, "w") as f:
        f.write("# fine\n[history]\npath = /x\nsegmnet_days = 3\n")
    expect_error(["-t", "-c", bad], "bad.conf:4:", "history.segmnet_days")
    harness.log("config_cli: all checks passed")


if __name__ == "__main__":
    main()
