# SPDX-License-Identifier: Apache-2.0
"""The partition dedupd computes for a key (partition.h, through
tests/tools/ddpartition) equals the one a real producer chose: kcat, on
librdkafka, produces 10,000 random keys to an 8-partition topic of the
devbroker with each of librdkafka's key partitioners (topic.partitioner),
and every message is read back from the partition kcat put it in.

Keys are 1 to 64 bytes: printable ASCII, UTF-8 of any plane, and some
arbitrary bytes (never a tab, kcat's key delimiter here, or a newline,
the line delimiter). Each message's payload is its number, so a key is
never parsed back out of kcat's output. Every partition holds a share
of the keys, and the same is done with 2,000 keys on 7 partitions, where
a hash whose top bit were cleared (or not) wrongly would land elsewhere,
as it would not with 8. A few keys are chosen: "Y7Tdo2", whose FNV-1a is
-2^31, an empty key, and (kcat -Z) a message without a key; where
librdkafka picks those at random, ddpartition must say -1."""
import collections
import random
import shutil
import subprocess
import sys

import harness

PARTITIONERS = ("murmur2_random", "consistent_random", "murmur2", "consistent", "fnv1a",
                "fnv1a_random")
RUNS = ((8, 10_000), (7, 2_000))         # (partitions, random keys)
CHOSEN = [b"Y7Tdo2", b"123456789", b"kafka", b"\xff\xfe\x00\x80"]
SEED = 20240611
# Messages librdkafka places at random (partition.h): the one without a
# key, and for consistent_random the empty key too.
UNPREDICTABLE = {"murmur2_random": 1, "consistent_random": 2, "fnv1a_random": 1}


def random_key(rnd):
    """1 to 64 bytes, without tab or newline."""
    n = rnd.randint(1, 64)
    kind = rnd.random()
    if kind < 0.5:
        return bytes(rnd.randint(0x20, 0x7e) for _ in range(n))
    if kind < 0.9:
        out = b""
        while True:
            plane = rnd.random()
            if plane < 0.4:
                cp = rnd.randint(0x80, 0x7ff)
            elif plane < 0.8:
                cp = rnd.choice((rnd.randint(0x800, 0xd7ff), rnd.randint(0xe000, 0xffff)))
            else:
                cp = rnd.randint(0x10000, 0x10ffff)
            ch = chr(cp).encode("utf-8")
            if len(out) + len(ch) > n:
                break
            out += ch
        return out + bytes(rnd.randint(0x20, 0x7e) for _ in range(n - len(out)))
    return bytes(rnd.choice([b for b in range(256) if b not in (0x09, 0x0a)]) for _ in range(n))


def run(argv, data, what):
    r = subprocess.run(argv, input=data, capture_output=True, timeout=120)
    if r.returncode != 0:
        harness.fail("%s exited %d: %s" % (what, r.returncode,
                                           r.stderr.decode("utf-8", "replace")[-2000:]))
    return r.stdout


def produce(broker, topic, partitioner, lines, null_keys=False):
    """kcat -P: each line KEY<TAB>PAYLOAD; -Z: an empty key is no key."""
    argv = ["kcat", "-P", "-b", broker.addr, "-t", topic, "-K", "\t", "-q",
            "-X", "topic.partitioner=" + partitioner]
    if null_keys:
        argv.append("-Z")
    run(argv, b"".join(lines), "kcat -P " + topic)


def consumed(broker, topic):
    """{message number: partition} of everything in TOPIC."""
    out = run(["kcat", "-C", "-b", broker.addr, "-t", topic, "-o", "beginning", "-e", "-q",
               "-f", "%p\t%s\n"], b"", "kcat -C " + topic)
    got = {}
    for line in out.decode("ascii").splitlines():
        part, num = line.split("\t")
        if int(num) in got:
            harness.fail("%s: message %s read twice" % (topic, num))
        got[int(num)] = int(part)
    return got


def computed(partitioner, partitions, keys, null_keys=False):
    """ddpartition's partition of each key, in order."""
    argv = [harness.build_path("tests", "tools", "ddpartition")]
    if null_keys:
        argv.append("-Z")
    out = run(argv + [partitioner, str(partitions)], b"".join(k + b"\n" for k in keys),
              "ddpartition")
    rows = out.split(b"\n")
    if rows[-1] != b"" or len(rows) - 1 != len(keys):
        harness.fail("ddpartition printed %d rows for %d keys" % (len(rows) - 1, len(keys)))
    parts = []
    for row, key in zip(rows, keys):
        echoed, part = row.rsplit(b"\t", 1)
        if echoed != key:
            harness.fail("ddpartition echoed %r for key %r" % (echoed, key))
        parts.append(int(part))
    return parts


def check(broker, partitioner, partitions, nkeys, rnd):
    topic = "p%d-%s" % (partitions, partitioner)
    keys = [random_key(rnd) for _ in range(nkeys)] + CHOSEN + [b""]
    lines = [k + b"\t%d\n" % i for i, k in enumerate(keys)]
    null_num = len(keys)                          # the message without a key
    produce(broker, topic, partitioner, lines)
    produce(broker, topic, partitioner, [b"\t%d\n" % null_num], null_keys=True)
    want = computed(partitioner, partitions, keys) + computed(partitioner, partitions, [b""],
                                                              null_keys=True)
    got = consumed(broker, topic)
    if sorted(got) != list(range(len(want))):
        harness.fail("%s: read back %d messages, produced %d" % (topic, len(got), len(want)))

    per_partition = collections.Counter()
    bad = []
    for num, part in got.items():
        if want[num] == -1:
            # librdkafka's random pick: only for a key without bytes.
            if num < len(keys) and keys[num]:
                bad.append((keys[num], part, -1))
            continue
        if part != want[num]:
            bad.append((keys[num] if num < len(keys) else None, part, want[num]))
        elif num < nkeys:
            per_partition[part] += 1
    if bad:
        for key, part, w in bad[:10]:
            harness.log("  key %r: kcat put it in %d, dedupd says %d" % (key, part, w))
        harness.fail("%s: %d of %d messages not where dedupd computed" % (topic, len(bad),
                                                                          len(want)))
    # Every partition holds its share of the random keys (8: about 1,250).
    least = nkeys // partitions * 4 // 5
    for p in range(partitions):
        if per_partition[p] < least:
            harness.fail("%s: partition %d holds %d random keys, want at least %d (%s)" % (
                topic, p, per_partition[p], least, dict(per_partition)))
    unpredictable = sum(1 for w in want if w == -1)
    if unpredictable != UNPREDICTABLE.get(partitioner, 0):
        harness.fail("%s: %d messages dedupd cannot place, want %d" % (
            topic, unpredictable, UNPREDICTABLE.get(partitioner, 0)))
    harness.log("%s: %d messages where dedupd computed, %d placed at random" % (
        topic, len(want) - unpredictable, unpredictable))


def main():
    if not shutil.which("kcat"):
        harness.skip("kcat is not installed (Debian package kcat)")
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else SEED
    harness.log("seed", seed)
    rnd = random.Random(seed)
    topics = ["p%d-%s:%d" % (n, name, n) for n, _ in RUNS for name in PARTITIONERS]
    broker = harness.DevBroker(topics)
    for partitions, nkeys in RUNS:
        for name in PARTITIONERS:
            check(broker, name, partitions, nkeys, rnd)
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
