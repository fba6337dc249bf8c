# SPDX-License-Identifier: Apache-2.0
"""Event-time placement, with protobuf payloads (dedup.v1.PlayEvent): plays
dated over the last 121 days are kept with their own day, and those older
than history.retention_days are dropped and counted. Every lookback is
exact to the day, in a scene listed nowhere as in one listed in
history.day_scenes (now an alias): seen if played today or in the D days
before, never older ones (but for the filter's false positives).
Undecodable protobuf payloads are
skipped and counted."""
import random
import time

import harness
import test_ingest_lib as il

DAY = 86_400_000
SEGMENT_DAYS = 30
RETENTION = 90
USERS = 100
DAY_SCENE_USERS = 20
FP = 0.01


def check_lookback(dd, plays, lookback, seen, what):
    """PLAYS (user, item, at, scene, day) through ddcheck with LOOKBACK:
    every play SEEN(play) says is in must be found; of the others no more
    than the filter's false positives."""
    _, _, missing = il.check(dd, [p[:4] for p in plays], lookback=lookback, unseen_list=True)
    missing = {(u, i) for u, i, *_ in missing}
    want_seen = [p for p in plays if seen(p)]
    want_unseen = [p for p in plays if not seen(p)]
    wrong = [p for p in want_seen if (p[0], p[1]) in missing]
    if wrong:
        harness.fail("%s, lookback %d: %d plays in the window not seen, e.g. %s" % (
            what, lookback, len(wrong), wrong[:3]))
    extra = sum(1 for p in want_unseen if (p[0], p[1]) not in missing)
    if extra > FP * len(want_unseen) + 3:
        harness.fail("%s, lookback %d: %d of %d older plays seen" % (
            what, lookback, extra, len(want_unseen)))
    harness.log("%s, lookback %2d: %d seen, %d older unseen (%d fp)" % (
        what, lookback, len(want_seen), len(want_unseen) - extra, extra))


def main():
    rnd = random.Random(3)
    now = int(time.time() * 1000)
    today = now // DAY
    plays = []                      # (user, item, at_ms, days_ago)
    for u in range(USERS):
        for ago in range(121):
            at = now - ago * DAY - rnd.randrange(60_000) if ago else now - rnd.randrange(60_000)
            plays.append(("t%03d" % u, "e%d-%d" % (u, ago), at, None, at // DAY))
    # the same plays of some users in the day scene
    day_plays = [(u, i, at, "live", d) for u, i, at, _, d in plays
                 if int(u[1:]) < DAY_SCENE_USERS]
    plays += day_plays
    rnd.shuffle(plays)
    broker = il.plays_broker(("plays:4",))
    il.produce(broker, [p[:4] for p in plays], fmt="protobuf")
    garbage = [("t000", "0a"), ("t000", "ffffffff"), ("t001", "0a05616263")]  # truncated/bad
    il.produce(broker, garbage, fmt="hex")
    dd = harness.Dedupd(il.ingest_overrides(broker, fmt="protobuf", **{
        "history.segment_days": str(SEGMENT_DAYS), "history.retention_days": str(RETENTION),
        "history.fp_rate": str(FP), "history.day_scenes": "live"}))
    il.wait_flushed(dd, len(plays) + len(garbage), timeout=120)
    st = il.stop_stats(dd)
    if today != int(time.time() * 1000) // DAY:
        harness.skip("the day changed during the test; placement expectations moved")

    # Past retention: the store drops the plays older than a cutoff day and
    # keeps at least RETENTION days (at most RETENTION + SEGMENT_DAYS, as
    # segments expire whole). Find the cutoff the expired count implies.
    harness.log("stats: %s" % st)
    cutoff = None
    for c in sorted({p[-1] for p in plays}) + [today + 1]:
        if sum(1 for p in plays if p[-1] < c) == st["expired"]:
            cutoff = c
            break
    if cutoff is None:
        harness.fail("expired %d is not 'every play before some day'" % st["expired"])
    kept_days = today - cutoff + 1
    if not RETENTION <= kept_days <= RETENTION + SEGMENT_DAYS:
        harness.fail("kept %d days, retention %d, segments of %d" % (kept_days, RETENTION,
                                                                      SEGMENT_DAYS))
    harness.log("plays of the last %d days kept, older ones dropped" % kept_days)
    if kept_days != RETENTION + 1:
        harness.fail("kept %d days, want today and the %d before" % (kept_days, RETENTION))
    live = [p for p in plays if p[-1] >= cutoff]
    dead = [p for p in plays if p[-1] < cutoff]
    if st["expired"] != len(dead) or st["plays"] != len(live):
        harness.fail("expired %d (want %d), plays %d (want %d)" % (
            st["expired"], len(dead), st["plays"], len(live)))
    if st["bad_undecodable"] != len(garbage):
        harness.fail("bad_undecodable %d, want %d" % (st["bad_undecodable"], len(garbage)))

    il.require_all_seen(dd, [p[:4] for p in live], "live plays")
    seen_dead, _, _ = il.check(dd, [p[:4] for p in dead])
    day_live = [p for p in live if p[3]]
    live = [p for p in live if not p[3]]
    if seen_dead > FP * len(dead) + 3:
        harness.fail("%d of %d plays past retention are seen" % (seen_dead, len(dead)))

    # A lookback of L days covers today and the L days before it: a play is
    # seen exactly when its own day is one of them, whatever the segments.
    # (today % SEGMENT_DAYS + 1: the window's first day ends a segment)
    lookbacks = (1, 2, 7, 13, 29, 30, 31, 45, 60, 61, 89, 90, today % SEGMENT_DAYS + 1)
    for lookback in lookbacks:
        check_lookback(dd, live, lookback, lambda p: p[4] >= today - lookback,
                       "scene listed nowhere")
        check_lookback(dd, day_live, lookback, lambda p: p[4] >= today - lookback,
                       "scene in history.day_scenes")
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
