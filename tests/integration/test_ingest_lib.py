# SPDX-License-Identifier: Apache-2.0
"""What the Kafka ingest tests share: the broker (plays_broker), producing
plays with tests/tools/ddproduce, waiting for dedupd to write them, and
checking a stopped dedupd's store offline with tools/ddcheck.

Play lists are lists of (user, item, played_at_ms or None, scene or None).
"""
import os
import re
import subprocess
import time

import harness

FLUSHED_RE = re.compile(r"msg=flushed .*?messages_flushed=(\d+)")
STOPPED_RE = re.compile(r"module=ingest msg=stopped (.*)")


def plays_broker(topics):
    """The broker of a test of Kafka semantics: Apache Kafka itself
    (realkafka.py), with TOPICS ("name:partitions"). With DD_TEST_BROKER=
    devbroker, the devbroker instead: scripts/test.sh sets it for its
    sanitizer pass, which checks dedupd's memory handling (the plain pass
    runs the same test against Kafka, for Kafka's semantics)."""
    if os.environ.get("DD_TEST_BROKER") == "devbroker":
        return harness.DevBroker(topics=topics)
    import realkafka
    return realkafka.KafkaCluster(topics=topics)


def ingest_overrides(broker, group="dedupd-test", fmt="json", **extra):
    """dedupd -o overrides for ingesting from BROKER."""
    o = {
        "ingest.enabled": "true",
        "ingest.format": fmt,
        "kafka.bootstrap.servers": broker.addr,
        "kafka.group.id": group,
        "log.level": "debug",
        "history.sync": "false",
    }
    o.update(extra)
    return o


def write_lines(path, plays):
    with open(path, "w") as f:
        for p in plays:
            fields = [str(x) if x is not None else "" for x in p]
            while fields and fields[-1] == "" and len(fields) > 2:
                fields.pop()
            f.write("\t".join(fields) + "\n")


def _produce_argv(broker, path, fmt, topic, rate, partitioner=None):
    argv = [harness.build_path("tests", "tools", "ddproduce"), "-b", broker.addr, "-t", topic, "-F", fmt]
    if rate:
        argv += ["-r", str(rate)]
    if partitioner:
        argv += ["-X", "partitioner=" + partitioner]
    return argv + [path]


def produce(broker, plays, fmt="json", topic="plays", rate=0, timeout=300, partitioner=None):
    """Produce PLAYS (for raw/hex: (key, payload) pairs), partitioned by
    librdkafka's PARTITIONER (None: its default); fails unless every
    message is delivered."""
    path = os.path.join(harness.tmpdir("dedupd-plays-"), "plays.tsv")
    write_lines(path, plays)
    r = subprocess.run(_produce_argv(broker, path, fmt, topic, rate, partitioner),
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        harness.fail("ddproduce failed (%d): %s %s" % (r.returncode, r.stdout, r.stderr))
    harness.log("ddproduce:", r.stdout.strip())
    return len(plays)


def produce_async(broker, plays, fmt="json", topic="plays", rate=0, partitioner=None):
    """Start producing in the background; returns the Proc (wait on .p)."""
    path = os.path.join(harness.tmpdir("dedupd-plays-"), "plays.tsv")
    write_lines(path, plays)
    return harness.Proc(_produce_argv(broker, path, fmt, topic, rate, partitioner), "ddproduce")


def wait_producer(proc, timeout=300):
    try:
        rc = proc.p.wait(timeout)
    except subprocess.TimeoutExpired:
        harness.fail("ddproduce still running after %ds" % timeout)
    if rc != 0:
        harness.fail("ddproduce failed (%d):\n%s" % (rc, proc.tail()))
    harness.log("ddproduce:", proc.tail(1))


def flushed(dd):
    """messages_flushed of dd's current run (0 before the first flush)."""
    m = FLUSHED_RE.findall(dd.run_log())
    return int(m[-1]) if m else 0


def wait_flushed(dd, n, timeout=120):
    """Until dd's current run has written the windows of N messages."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if flushed(dd) >= n:
            return
        if not dd.alive():
            harness.fail("dedupd died:\n" + dd.proc.tail())
        time.sleep(0.2)
    harness.fail("only %d of %d messages flushed after %ds:\n%s" % (flushed(dd), n, timeout,
                                                                     dd.proc.tail()))


def wait_idle(dd, quiet=3.0, timeout=180):
    """Until dd holds partitions and has written nothing for QUIET seconds:
    it has caught up with the topic (the producers must be done)."""
    dd.wait_log('msg="partitions assigned"', timeout=60)
    deadline = time.time() + timeout
    last, since = None, time.time()
    while time.time() < deadline:
        n = len(FLUSHED_RE.findall(dd.run_log()))
        if n != last:
            last, since = n, time.time()
        elif time.time() - since >= quiet:
            return
        if not dd.alive():
            harness.fail("dedupd died:\n" + dd.proc.tail())
        time.sleep(0.2)
    harness.fail("dedupd still writing after %ds" % timeout)


def stop_stats(dd):
    """Stop dd (exit 0 required) and return its final ingest counters."""
    dd.stop()
    m = STOPPED_RE.findall(dd.run_log())
    if not m:
        harness.fail("no ingest stats at shutdown:\n" + dd.proc.tail())
    return {k: int(v) for k, v in (kv.split("=", 1) for kv in m[-1].split())}


def check(dd, plays, lookback=0, unseen_list=False):
    """ddcheck the (stopped) dd's store for PLAYS; returns (seen, unseen,
    [unseen (user, item, scene)] if asked)."""
    path = os.path.join(harness.tmpdir("dedupd-check-"), "check.tsv")
    with open(path, "w") as f:
        for p in plays:
            scene = p[3] if len(p) > 3 and p[3] else ""
            f.write("%s\t%s%s\n" % (p[0], p[1], "\t" + scene if scene else ""))
    argv = [harness.build_path("tools", "ddcheck")] + dd.option_args() + ["-l", str(lookback)]
    if unseen_list:
        argv.append("-V")
    r = subprocess.run(argv + [path], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        harness.fail("ddcheck failed (%d): %s" % (r.returncode, r.stderr))
    lines = r.stdout.splitlines()
    m = re.match(r"total=(\d+) seen=(\d+) unseen=(\d+)", lines[-1])
    if not m or int(m.group(1)) != len(plays):
        harness.fail("ddcheck said %r for %d plays" % (lines[-1:], len(plays)))
    unseen = [tuple(l.split("\t")[1:]) for l in lines[:-1] if l.startswith("unseen\t")]
    return int(m.group(2)), int(m.group(3)), unseen


def require_all_seen(dd, plays, what):
    seen, unseen, missing = check(dd, plays, unseen_list=True)
    if unseen:
        harness.fail("%s: %d of %d plays lost, e.g. %s" % (what, unseen, len(plays), missing[:5]))
    harness.log("%s: all %d plays seen" % (what, seen))


def partitions_of(users, n, partitioner="murmur2_random"):
    """{user: partition} as PARTITIONER puts USERS into N partitions
    (tests/tools/ddpartition: dedupd's own partition.c)."""
    r = subprocess.run([harness.build_path("tests", "tools", "ddpartition"), partitioner,
                        str(n)], input="".join(u + "\n" for u in users), capture_output=True,
                       text=True, check=True)
    return {k: int(p) for k, p in (l.split("\t") for l in r.stdout.splitlines())}


def metrics(port, prefix="dedupd_"):
    """/metrics of the admin listener on PORT: {series: value} for the
    series whose name starts with PREFIX; fails unless it answers 200."""
    st, body = harness.http_get(port, "/metrics")
    if st != 200:
        harness.fail("/metrics: %d %s" % (st, body))
    out = {}
    for line in body.splitlines():
        if line.startswith(prefix):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
