# SPDX-License-Identifier: Apache-2.0
"""1,000,000 plays of 100,000 users through the real devbroker into a real
dedupd: every played item is seen afterwards (zero false negatives), items
never played are seen at no more than history.fp_rate, and the counters
account for every message."""
import random
import time

import harness
import test_ingest_lib as il

USERS = 100_000
PER_USER = 10
FP_RATE = 0.01


def main():
    rnd = random.Random(20261122)
    plays = [("u%06d" % u, "v%d" % rnd.randrange(10**12), None)
             for _ in range(PER_USER) for u in range(USERS)]
    rnd.shuffle(plays)
    broker = harness.DevBroker(("plays:16",))
    t0 = time.time()
    il.produce(broker, plays)
    harness.log("produced %d plays in %.1fs" % (len(plays), time.time() - t0))

    dd = harness.Dedupd(il.ingest_overrides(broker, **{"history.fp_rate": str(FP_RATE)}))
    t0 = time.time()
    il.wait_flushed(dd, len(plays), timeout=240)
    harness.log("dedupd wrote %d plays in %.1fs" % (len(plays), time.time() - t0))
    st = il.stop_stats(dd)
    if st["messages"] != len(plays) or st["plays"] != len(plays):
        harness.fail("counters: %s" % st)
    bad = {k: v for k, v in st.items() if k.startswith("bad_") and v}
    if bad or st["expired"] or st["write_errors"]:
        harness.fail("unexpected drops: %s" % st)

    il.require_all_seen(dd, plays, "played items")
    never = [(u, "never-%d" % rnd.randrange(10**12)) for u, _, _ in plays]
    seen, _, _ = il.check(dd, never)
    rate = seen / len(never)
    harness.log("unplayed items seen: %d of %d (%.5f, limit %.3f)" % (seen, len(never), rate,
                                                                       FP_RATE))
    if rate > FP_RATE:
        harness.fail("false-positive rate %.5f over history.fp_rate %.3f" % (rate, FP_RATE))
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
