# SPDX-License-Identifier: Apache-2.0
"""Malformed messages of every kind - undecodable (not JSON, truncated,
wrong types, negative time, empty payload), no user (neither payload nor
key), no item, an id over ingest.max_id_bytes, a time beyond
history.max_future_ms - are skipped and counted by reason, copied to the
dead-letter topic with their reason, and never stall the partition: the
good plays around them are all ingested. Plays older than the retention
are dropped and counted as expired (not dead-lettered)."""
import json
import shutil
import subprocess
import time

import harness
import test_ingest_lib as il

DAY = 86_400_000


def good(i):
    u, it = "ok%03d" % (i % 50), "item-%d" % i
    return (u, json.dumps({"user_id": u, "item_id": it})), (u, it)


def main():
    if not shutil.which("kcat"):
        harness.skip("kcat is not installed (Debian package kcat)")
    now = int(time.time() * 1000)
    long_id = "x" * 300                     # > ingest.max_id_bytes (256)
    bad = [
        ("undecodable", "u1", "not json at all"),
        ("undecodable", "u1", '{"user_id":"u1","item_id":"i1"'),            # truncated
        ("undecodable", "u1", '{"user_id":"u1","item_id":1.5}'),            # wrong type
        ("undecodable", "u1", '{"user_id":"u1","item_id":"i1","played_at_ms":-7}'),
        ("undecodable", "u1", '["u1","i1"]'),
        ("undecodable", "u1", ""),                                          # empty payload
        ("empty_user", "", '{"item_id":"i1"}'),
        ("empty_user", "", '{"user_id":"","item_id":"i1"}'),
        ("empty_item", "u1", '{"user_id":"u1"}'),
        ("empty_item", "u1", '{"user_id":"u1","item_id":""}'),
        ("id_too_long", "u1", json.dumps({"user_id": "u1", "item_id": long_id})),
        ("id_too_long", long_id, json.dumps({"item_id": "i1"})),            # key as user
        ("future", "u1", json.dumps({"user_id": "u1", "item_id": "f1",
                                     "played_at_ms": now + 2 * DAY})),
    ]
    expired = [("u1", json.dumps({"user_id": "u1", "item_id": "old%d" % k,
                                  "played_at_ms": now - (200 + k) * DAY})) for k in range(3)]
    messages, goods = [], []
    i = 0
    for round_ in range(20):                     # every kind, many times, among good ones
        for _, key, payload in bad + [(None,) + e for e in expired]:
            for _ in range(3):
                m, g = good(i)
                messages.append(m)
                goods.append(g)
                i += 1
            messages.append((key, payload))
    m, g = good(i)
    messages.append(m)
    goods.append(g)

    broker = harness.DevBroker(("plays:4", "plays-dlq:1"))
    il.produce(broker, messages, fmt="raw")
    dd = harness.Dedupd(il.ingest_overrides(broker, **{
        "ingest.dead_letter_topic": "plays-dlq"}))
    il.wait_flushed(dd, len(messages), timeout=120)
    st = il.stop_stats(dd)
    harness.log("stats: %s" % st)
    want = {}
    for reason, _, _ in bad:
        want[reason] = want.get(reason, 0) + 20
    for reason in ("undecodable", "empty_user", "empty_item", "id_too_long", "future"):
        if st["bad_" + reason] != want[reason]:
            harness.fail("bad_%s = %d, want %d" % (reason, st["bad_" + reason], want[reason]))
    if st["expired"] != 20 * len(expired):
        harness.fail("expired = %d, want %d" % (st["expired"], 20 * len(expired)))
    if st["plays"] != len(goods) or st["messages"] != len(messages):
        harness.fail("plays %d (want %d), messages %d (want %d)" % (
            st["plays"], len(goods), st["messages"], len(messages)))
    n_bad = 20 * len(bad)
    if st["dead_lettered"] != n_bad or st["dead_letter_errors"]:
        harness.fail("dead-lettered %d (errors %d), want %d" % (
            st["dead_lettered"], st["dead_letter_errors"], n_bad))

    # The dead-letter topic holds each bad message with its reason.
    r = subprocess.run(["kcat", "-C", "-b", broker.addr, "-t", "plays-dlq", "-o", "beginning",
                        "-e", "-q", "-f", "%h\n"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        harness.fail("kcat: %s" % r.stderr)
    reasons = {}
    for line in r.stdout.splitlines():
        hdr = dict(kv.split("=", 1) for kv in line.split(",") if "=" in kv)
        reasons[hdr.get("dd-reason")] = reasons.get(hdr.get("dd-reason"), 0) + 1
    if reasons != want:
        harness.fail("dead-letter reasons %s, want %s" % (reasons, want))

    il.require_all_seen(dd, [(u, it, None) for u, it in goods], "good plays around bad ones")
    seen, _, _ = il.check(dd, [("u1", "old%d" % k) for k in range(3)] + [("u1", "f1")])
    if seen:
        harness.fail("%d expired or future plays were written" % seen)
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
