#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Filter's min_kept and also_scenes (proto/dedup.proto) against a real
dedupd and redis-server, one node, plays recorded with RecordPlays at
event times spread over 65 days:

- min_kept, a heavy user whose candidates are all played: the oldest plays
  come back first, a day at a time, in a scene listed nowhere as in one
  listed in history.day_scenes (now an alias); never a play within
  history.min_lookback_days, a recent delivery or an in-request duplicate;
  lookback_used_days says the lookback applied;
- also_scenes: plays and deliveries of another scene remove a candidate,
  explain names the scene; the bounds are INVALID_ARGUMENT;
- /why with min_kept and also_scene, and dedupctl --min-kept --also-scene;
- briefly, a 2-shard cluster (the dev broker, one replica a shard): both
  fields forwarded unchanged, the same answers through either node.
"""
import json
import subprocess
import time
import urllib.parse

import harness
import test_clients_lib
import test_ingest_lib as il
from test_clients_lib import python_stubs

DAY_MS = 86400000
SEG = 10
FLOOR = 7
pb, pbg, grpc = python_stubs()
PLAYED = pb.REASON_PLAYED
DELIVERED = pb.REASON_DELIVERED
DUPLICATE = pb.REASON_DUPLICATE


def check(cond, msg):
    if not cond:
        harness.fail(msg)


# item -> days ago it was played
AGES = {"o65a": 65, "o65b": 65, "m35a": 35, "m35b": 35, "n15": 15, "r2": 2, "dlv": 65}


def expect_min_kept(min_kept):
    """(kept set, lookback) the contract gives for the heavy user's
    candidates (every item of AGES, dlv also delivered, o65a twice): ages
    exact to the day in every scene."""
    age = {i: a for i, a in AGES.items() if i != "dlv"}
    for lb in range(89, FLOOR - 1, -1):
        back = {i for i, a in age.items() if a > lb}
        if len(back) >= min_kept:
            return back, lb
    return {i for i, a in age.items() if a > FLOOR}, FLOOR


def main():
    redis = harness.Redis()
    admin = harness.free_port()
    d = test_clients_lib.Dedupd(redis.addr, {
        "history.segment_days": str(SEG), "history.retention_days": "90",
        "history.day_scenes": "daily", "history.min_lookback_days": str(FLOOR),
        "history.sync": "false", "recent.timeout_ms": "500",
        "admin.listen": "127.0.0.1:%d" % admin, "admin.token_file": harness.admin_token_file()})
    ch = grpc.insecure_channel(d.addr)
    grpc.channel_ready_future(ch).result(timeout=20)
    dedup = pbg.DedupStub(ch)
    t0 = time.time()
    now = int(t0 * 1000)
    today = now // DAY_MS

    def filt(user, ids, **kw):
        return dedup.Filter(pb.FilterRequest(user_id=user, candidate_ids=ids, **kw), timeout=10)

    def play(user, scene, items):
        dedup.RecordPlays(pb.RecordPlaysRequest(user_id=user, scene=scene, plays=[
            pb.Play(item_id=i, played_at_ms=now - a * DAY_MS) for i, a in items]), timeout=10)

    def deliver(user, scene, items):
        dedup.RecordDelivery(pb.RecordDeliveryRequest(user_id=user, scene=scene, item_ids=items),
                             timeout=10)

    # --- min_kept, in a scene listed nowhere and a day scene
    cands = list(AGES) + ["o65a"]
    for scene in ("coarse", "daily"):
        play("heavy", scene, AGES.items())
        deliver("heavy", scene, ["dlv"])
        r = filt("heavy", cands, scene=scene, explain=True)
        check(list(r.kept_ids) == [] and r.lookback_used_days == 90,
              "%s without min_kept: kept %s, lookback %d" % (scene, list(r.kept_ids),
                                                            r.lookback_used_days))
        for mk in (1, 2, 3, 4, 5, 100):
            want, lb = expect_min_kept(mk)
            r = filt("heavy", cands, scene=scene, min_kept=mk, explain=True)
            got = set(r.kept_ids)
            check(got == want and r.lookback_used_days == lb,
                  "%s min_kept=%d: kept %s lookback %d, want %s lookback %d" %
                  (scene, mk, sorted(got), r.lookback_used_days, sorted(want), lb))
            check("r2" not in got and "dlv" not in got and list(r.kept_ids).count("o65a") <= 1,
                  "%s min_kept=%d: a play within the floor, a delivery or a duplicate came back"
                  % (scene, mk))
            reasons = {(cands[x.index], x.reason) for x in r.removed}
            check(("dlv", DELIVERED) in reasons and ("o65a", DUPLICATE) in reasons
                  and ("r2", PLAYED) in reasons, "%s min_kept=%d: removed %s" % (scene, mk, reasons))
            check(r.removed_played + r.removed_delivered + r.removed_duplicate + len(got)
                  == len(cands), "%s min_kept=%d: counts" % (scene, mk))
        # a lookback at the floor is never shortened
        r = filt("heavy", cands, scene=scene, min_kept=100, lookback_days=FLOOR)
        check(r.lookback_used_days == FLOOR and set(r.kept_ids) == expect_min_kept(100)[0],
              "%s lookback 7: %s" % (scene, list(r.kept_ids)))
        # a day at a time, oldest first
        check(expect_min_kept(2) == ({"o65a", "o65b"}, 64), "the expectation itself")
        r = filt("heavy", cands, scene=scene, min_kept=3)
        check(set(r.kept_ids) == {"o65a", "o65b", "m35a", "m35b"} and r.lookback_used_days == 34,
              "%s min_kept=3: %s %d" % (scene, list(r.kept_ids), r.lookback_used_days))
    harness.log("min_kept ok (a scene listed nowhere and a history.day_scenes one)")

    # --- also_scenes
    play("u", "home", [("h1", 40)])
    play("u", "follow", [("f1", 3), ("h1", 0)])
    deliver("u", "follow", ["f2"])
    deliver("u", "other", ["o1"])
    ids = ["h1", "f1", "f2", "o1", "k"]
    r = filt("u", ids, scene="home", explain=True)
    check(list(r.kept_ids) == ["f1", "f2", "o1", "k"], "home alone: %s" % list(r.kept_ids))
    r = filt("u", ids, scene="home", also_scenes=["follow"], explain=True)
    check(list(r.kept_ids) == ["o1", "k"], "home + follow: %s" % list(r.kept_ids))
    got = {(ids[x.index], x.reason, x.scene) for x in r.removed}
    # h1: played in home 40 days ago and in follow today: the newest play names follow
    check(got == {("h1", PLAYED, "follow"), ("f1", PLAYED, "follow"),
                  ("f2", DELIVERED, "follow")}, "explain: %s" % got)
    r = filt("u", ids, scene="home", also_scenes=["other", "follow"], explain=True)
    check(list(r.kept_ids) == ["k"] and r.removed_delivered == 2, "home + other + follow: %s"
          % list(r.kept_ids))
    bad = [(["s%d" % i for i in range(9)], "also_scenes has 9 entries, more than 8"),
           (["home"], "also_scenes[0] is the request's scene"),
           (["a", "a"], "also_scenes[1] repeats also_scenes[0]"),
           (["x" * 256], "also_scenes[0] is 256 bytes, longer than 255")]
    for also, msg in bad:
        try:
            filt("u", ids, scene="home", also_scenes=also)
            harness.fail("also_scenes %s accepted" % also[:2])
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details() == msg,
                  "also_scenes %s: %s %s" % (also[:2], e.code(), e.details()))
    harness.log("also_scenes ok")

    # --- /why and dedupctl
    q = [("user", "heavy"), ("scene", "daily"), ("min_kept", "2")] + [("item", i) for i in cands]
    st, body = harness.http_get(admin, "/why?" + urllib.parse.urlencode(q),
                                headers=harness.admin_auth())
    check(st == 200, "/why min_kept: %d %s" % (st, body))
    w = json.loads(body)
    check(w["lookback_used_days"] == 64 and w["min_kept"] == 2, "/why lookback: %s" % body)
    verdicts = {x["item"]: x["verdict"] for x in w["items"] if x["index"] < len(AGES)}
    check(verdicts["o65a"] == "kept" and verdicts["m35a"] == "played", "/why: %s" % verdicts)
    check("min_kept" in w["items"][0]["detail"], "/why detail: %s" % w["items"][0])
    q = [("user", "u"), ("scene", "home"), ("also_scene", "follow")] + [("item", i) for i in ids]
    st, body = harness.http_get(admin, "/why?" + urllib.parse.urlencode(q),
                                headers=harness.admin_auth())
    w = json.loads(body)
    check(st == 200 and {x["item"]: x["scene"] for x in w["items"]} ==
          {"h1": "follow", "f1": "follow", "f2": "follow", "o1": None, "k": None},
          "/why also_scene: %s" % body)
    out = subprocess.run([harness.build_path("tools", "dedupctl"), "-a", d.addr, "-s", "home",
                          "filter", "--also-scene", "follow", "--min-kept", "5", "u"] + ids,
                         capture_output=True, text=True, timeout=30)
    check(out.returncode == 0 and "(index 1, scene follow)" in out.stdout
          and "lookback_used_days=" in out.stdout, "dedupctl: %s %s" % (out.stdout, out.stderr))
    out = subprocess.run([harness.build_path("tools", "dedupctl"), "--admin",
                          "127.0.0.1:%d" % admin, "--admin-token-file", harness.admin_token_file(),
                          "-s", "home", "why", "--min-kept", "1", "--also-scene", "follow", "u"]
                         + ids, capture_output=True, text=True, timeout=30)
    check(out.returncode == 0 and "lookback used: 90 days" in out.stdout
          and "in scene follow" in out.stdout, "dedupctl why: %s %s" % (out.stdout, out.stderr))
    harness.log("/why and dedupctl ok")
    # Redis down: degraded, the plays of both scenes still removed
    redis.stop()
    try:
        r = filt("u", ids, scene="home", also_scenes=["follow"], min_kept=1)
        check(r.degraded and list(r.kept_ids) == ["f2", "o1", "k"],
              "Redis down: degraded %s kept %s" % (r.degraded, list(r.kept_ids)))
    finally:
        redis.start()
    harness.log("degraded ok")
    ch.close()
    check(d.proc.stop() == 0, "dedupd exit code")
    harness.log("single node: %.1f s" % (time.time() - t0))
    t1 = time.time()
    case_cluster(redis)
    harness.log("cluster: %.1f s" % (time.time() - t1))


def case_cluster(redis):
    """Through either node of 2 shards: the owner's answer (forwarded
    FilterRequest with min_kept and also_scenes, lookback_used_days and
    Removed.scene in the reply)."""
    broker = harness.DevBroker(topics=("plays:8",))
    ports = [harness.free_port(), harness.free_port()]
    admins = [harness.free_port(), harness.free_port()]
    nodes = "127.0.0.1:%d;127.0.0.1:%d" % tuple(ports)
    dds = []
    for s in range(2):
        o = il.ingest_overrides(broker, group="scenes31")
        o.update({"log.level": "info", "rpc.listen": "127.0.0.1:%d" % ports[s],
                  "admin.listen": "127.0.0.1:%d" % admins[s],
                  "history.day_scenes": "daily", "history.fp_rate": "0.000001",
                  "cluster.shards": "2", "cluster.shard": str(s), "cluster.replica": "0",
                  "cluster.nodes": nodes, "cluster.redis": redis.addr + ";" + redis.addr,
                  "cluster.health_interval_ms": "200", "window.flush_ms": "100"})
        dds.append(harness.Dedupd(o, name="dd-scenes-%d" % s))
    harness.wait_until("both nodes ready", lambda: all(
        harness.http_get(a, "/readyz")[0] == 200 for a in admins), timeout=60)
    chans = [grpc.insecure_channel("127.0.0.1:%d" % p) for p in ports]
    stubs = [pbg.DedupStub(c) for c in chans]
    now = int(time.time() * 1000)
    users = ["cl-%d" % i for i in range(8)]  # both shards, all but surely
    for i, u in enumerate(users):
        st = stubs[i % 2]
        st.RecordPlays(pb.RecordPlaysRequest(user_id=u, scene="daily", plays=[
            pb.Play(item_id="old", played_at_ms=now - 40 * DAY_MS),
            pb.Play(item_id="new", played_at_ms=now - 2 * DAY_MS)]), timeout=30)
        st.RecordPlays(pb.RecordPlaysRequest(user_id=u, scene="follow", plays=[
            pb.Play(item_id="f", played_at_ms=now)]), timeout=30)
    for u in users:
        for k, st in enumerate(stubs):
            r = st.Filter(pb.FilterRequest(user_id=u, scene="daily", candidate_ids=[
                "old", "new", "f", "k"], min_kept=2, also_scenes=["follow"], explain=True),
                timeout=10)
            got = (list(r.kept_ids), r.lookback_used_days,
                   sorted((x.index, x.scene) for x in r.removed))
            check(got == (["old", "k"], 39, [(1, "daily"), (2, "follow")]),
                  "%s through node %d: %s" % (u, k, got))
    fwd = sum(harness.metric_sum(a, "dedupd_cluster_forwarded_total") for a in admins)
    check(fwd >= 2, "no call was forwarded (%s)" % fwd)
    for c in chans:
        c.close()
    for x in dds:
        check(x.proc.stop() == 0, "%s exit code" % x.name)
    broker.stop()
    harness.log("cluster: min_kept and also_scenes forwarded, %d forwarded calls" % fwd)


if __name__ == "__main__":
    main()
