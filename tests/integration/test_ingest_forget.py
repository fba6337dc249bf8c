# SPDX-License-Identifier: Apache-2.0
"""Forget markers (ingest.h) on a single node: a message with the header
dedupd-op=forget, key = user id and a PlayEvent payload without an item,
signed with the node's cluster.forget_key_file (tests/tools/ddproduce -f;
src/marker.h), deletes the user's plays in that scene in log order:
plays written by earlier windows and plays still pending in the marker's
window are gone, plays after it are kept, as are the user's plays in other
scenes and other users' plays. A kill -9 right after the forget replays
the same log to the same result (the marker's offset was not committed
before the forget was durable). A marker with an item, or another
dedupd-op, is undecodable and dead-lettered. Against Apache Kafka
(realkafka.py): the markers and plays are in a real log."""
import json
import os
import shutil
import subprocess
import time

import harness
import test_ingest_lib as il

USER = "fu-1"


def kcat_produce(broker, lines, header=None):
    """Produce LINES ("key:payload") in order, with HEADER (k=v) if given."""
    argv = ["kcat", "-P", "-l", "-b", broker.addr, "-t", "plays", "-K:"]
    if header:
        argv += ["-H", header]
    path = os.path.join(harness.tmpdir("dedupd-kcat-"), "in.txt")
    with open(path, "w") as f:
        f.write("".join(l + "\n" for l in lines))
    argv.append(path)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        harness.fail("kcat: %s" % r.stderr)


def signed_forget(broker, user, scene="", topic="plays"):
    """Produce a forget marker for (SCENE, USER) signed with
    harness.forget_key_file() (tests/tools/ddproduce -f), into the
    partition kcat's default partitioner gives USER (both are librdkafka's)."""
    r = subprocess.run([harness.build_path("tests", "tools", "ddproduce"), "-b", broker.addr,
                        "-t", topic, "-F", "json", "-f", harness.forget_key_file()],
                       input="%s\t%s\n" % (user, scene), capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        harness.fail("ddproduce -f: %s %s" % (r.stdout, r.stderr))


def play(user, item, scene=""):
    return "%s:%s" % (user, json.dumps({"user_id": user, "item_id": item, "scene": scene}))


def wait_forgets(dd, n, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if "msg=forgotten forgets=%d" % n in dd.run_log():
            return
        if not dd.alive():
            harness.fail("dedupd died:\n" + dd.proc.tail())
        time.sleep(0.1)
    harness.fail("no forget applied in %ds:\n%s" % (timeout, dd.proc.tail()))


def main():
    if not shutil.which("kcat"):
        harness.skip("kcat is not installed (Debian package kcat)")
    broker = il.plays_broker(("plays:4", "plays-dlq:1"))
    # A short session, so the member killed below leaves the group soon.
    # Markers from the topic are applied only when signed with this key.
    key = harness.forget_key_file()
    extra = {"ingest.dead_letter_topic": "plays-dlq", "window.flush_ms": "3000",
             "cluster.forget_key_file": key,
             "kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "500"}

    # 1. Plays written by earlier windows; two bad markers.
    old = [(USER, "old-%d" % i, None, "") for i in range(10)]
    feed = [(USER, "feed-%d" % i, None, "feed") for i in range(5)]
    other = [("fu-2", "o-%d" % i, None, "") for i in range(5)]
    kcat_produce(broker, [play(u, i, s) for u, i, _, s in old + feed + other])
    kcat_produce(broker, ["fu-2:" + json.dumps({"user_id": "fu-2", "item_id": "x"})],
                 header="dedupd-op=forget")
    kcat_produce(broker, ["fu-2:" + json.dumps({"user_id": "fu-2"})], header="dedupd-op=frobnicate")
    dd = harness.Dedupd(il.ingest_overrides(broker, **extra))
    il.wait_flushed(dd, len(old + feed + other) + 2)
    st = il.stop_stats(dd)
    if st["bad_undecodable"] != 2 or st["forgets"] != 0 or st["dead_lettered"] != 2:
        harness.fail("bad markers: %s" % st)
    seen, _, _ = il.check(dd, old + feed + other)
    if seen != len(old + feed + other):
        harness.fail("only %d of %d plays stored before the marker" % (seen, len(old + feed + other)))

    # 2. While it is stopped: more plays, the marker, plays after it - read
    # in one batch at the restart, so the first ones are pending in the
    # marker's window.
    pending = [(USER, "pend-%d" % i, None, "") for i in range(5)]
    after = [(USER, "new-%d" % i, None, "") for i in range(5)]
    kcat_produce(broker, [play(u, i, s) for u, i, _, s in pending])
    signed_forget(broker, USER)
    kcat_produce(broker, [play(u, i, s) for u, i, _, s in after])
    dd.start()
    wait_forgets(dd, 1)
    # Kill it at once: the forget is durable (WAL), the offsets are not
    # committed (ingest.wal=false waits for a memtable flush).
    dd.kill9()
    dd.start()
    il.wait_idle(dd)
    st = il.stop_stats(dd)
    harness.log("after the crash: %s" % st)
    if st["forgets"] != 1:
        harness.fail("the restart applied %d forgets, want 1 (the marker replayed)" % st["forgets"])

    def seen_of(plays):
        return il.check(dd, plays)[0]

    for what, plays, want in (("written before the marker", old, 0),
                              ("pending with the marker", pending, 0),
                              ("after the marker", after, len(after)),
                              ("in another scene", feed, len(feed)),
                              ("of another user", other, len(other))):
        got = seen_of(plays)
        if got != want:
            harness.fail("plays %s: %d of %d seen, want %d" % (what, got, len(plays), want))
        harness.log("plays %s: %d of %d seen, as wanted" % (what, got, len(plays)))

    r = subprocess.run(["kcat", "-C", "-b", broker.addr, "-t", "plays-dlq", "-o", "beginning",
                        "-e", "-q", "-f", "%h\n"], capture_output=True, text=True, timeout=60)
    reasons = [l for l in r.stdout.splitlines() if "dd-reason=undecodable" in l]
    if r.returncode != 0 or len(reasons) != 2:
        harness.fail("dead-letter topic: %r %s" % (r.stdout, r.stderr))
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
