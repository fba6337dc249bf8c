#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Traces (trace.h) and `dedupctl why` / `dedupctl trace` (why.h) against a
real dedupd, redis-server and devbroker:

- a traced user (trace.users) gets plays from Kafka (kcat) and from
  RecordPlays (python grpcio), deliveries, a signed forget marker on Kafka and a
  ForgetUser; `why` gives each item's verdict with its time and source
  (Kafka topic/partition/offset as kcat reads them back, RecordPlays,
  RecordDelivery's time), an item twice in the request is a duplicate,
  forgotten plays are kept, and a play dated before the trace's retention
  is played without a record;
- an untraced user's answer says no trace is kept (and still gives the
  filter's and Redis' verdicts);
- `dedupctl trace add` at run time; a restart keeps the list (config and
  run-time users, with their since times) and the records;
- trace.max_records bounds a user's records (the oldest go); `trace
  remove` stops recording and deletes the records; trace.max_users
  refuses one more; the metrics count what was written;
- the admin listener answers /why and /trace to loopback clients with the
  admin token (admin.token_file) only; dedupctl sends it
  (--admin-token-file).
"""
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import harness
import test_ingest_lib as il
from test_clients_lib import python_stubs
from test_ingest_forget import kcat_produce, signed_forget, wait_forgets

DAY = 86_400_000
MAX_RECORDS = 20
RETENTION_DAYS = 5


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def why(admin, user, items, scene=""):
    q = [("user", user)] + ([("scene", scene)] if scene else []) + [("item", i) for i in items]
    st, body = harness.http_get(admin, "/why?" + urllib.parse.urlencode(q),
                                headers=harness.admin_auth())
    check(st == 200, "/why %s %s: %d %s" % (user, items, st, body))
    return json.loads(body)


def run_ctl(argv, want=0):
    exe = harness.build_path("tools", "dedupctl")
    p = subprocess.run([exe, "--admin-token-file", harness.admin_token_file()] + argv,
                       capture_output=True, text=True, timeout=30)
    if p.returncode != want:
        harness.fail("dedupctl %s: exit %d (want %d)\n%s%s" % (" ".join(argv), p.returncode, want,
                                                               p.stdout, p.stderr))
    return p.stdout, p.stderr


def metric(admin, name, label=""):
    _, body = harness.http_get(admin, "/metrics")
    for line in body.splitlines():
        if line.startswith(name + label + " ") or (not label and line.startswith(name + " ")):
            return float(line.split()[-1])
    return None


def kafka_positions(broker):
    """(key, item) -> (partition, offset) of every message of "plays"."""
    r = subprocess.run(["kcat", "-C", "-b", broker.addr, "-t", "plays", "-o", "beginning", "-e",
                        "-q", "-f", "%k\t%p\t%o\t%s\n"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "kcat -C: %s" % r.stderr)
    pos = {}
    for line in r.stdout.splitlines():
        k, p, o, payload = line.split("\t", 3)
        item = json.loads(payload).get("item_id")
        if item:
            pos[(k, item)] = (int(p), int(o))
    return pos


def non_loopback_ip():
    """An address of this host that is not loopback, or None."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("10.255.255.255", 1))
        ip = s.getsockname()[0]
        s.close()
        return None if ip.startswith("127.") else ip
    except OSError:
        return None


def main():
    if not shutil.which("kcat"):
        harness.skip("kcat is not installed (Debian package kcat)")
    pb, pbg, grpc = python_stubs()
    redis = harness.Redis()
    broker = harness.DevBroker(("plays:4",))
    admin = harness.free_port()
    now = int(time.time() * 1000)

    def play(user, item, at=None, scene=""):
        ev = {"user_id": user, "item_id": item, "scene": scene}
        if at:
            ev["played_at_ms"] = at
        return "%s:%s" % (user, json.dumps(ev))

    # Kafka before the start: alice's plays in "" and "feed", a forget
    # marker for "feed", bob's (untraced) play.
    k1_at = now - 3_600_000
    kcat_produce(broker, [play("alice", "k1", k1_at), play("alice", "f1", scene="feed"),
                          play("bob", "b1")])
    signed_forget(broker, "alice", "feed")
    dd = harness.Dedupd(il.ingest_overrides(broker, **{
        "recent.redis": redis.addr, "admin.listen": "127.0.0.1:%d" % admin,
        "cluster.forget_key_file": harness.forget_key_file(),  # markers must be signed
        "admin.token_file": harness.admin_token_file(), "trace.users": "alice, dave", "trace.max_records": str(MAX_RECORDS),
        "trace.retention_days": str(RETENTION_DAYS), "trace.max_users": "3",
        "history.fp_rate": "0.000001", "window.flush_ms": "200",
        # a short session, so the restart below gets its partitions back soon
        "kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "500"}))
    il.wait_flushed(dd, 4)
    wait_forgets(dd, 1)
    pos = kafka_positions(broker)

    ch = grpc.insecure_channel(dd.rpc_addr)
    grpc.channel_ready_future(ch).result(timeout=20)
    dedup = pbg.DedupStub(ch)
    r2_at = now - 10 * DAY  # within the history, past the trace's retention
    r = dedup.RecordPlays(pb.RecordPlaysRequest(user_id="alice", plays=[
        pb.Play(item_id="r1", played_at_ms=now - 60_000), pb.Play(item_id="r2", played_at_ms=r2_at)]),
        timeout=10)
    check(r.accepted == 2, "RecordPlays: %s" % r)
    d1_at = now - 2000
    dedup.RecordDelivery(pb.RecordDeliveryRequest(user_id="alice", item_ids=["d1"],
                                                  delivered_at_ms=d1_at), timeout=10)
    dedup.RecordPlays(pb.RecordPlaysRequest(user_id="alice", scene="x", plays=[
        pb.Play(item_id="x1")]), timeout=10)
    dedup.ForgetUser(pb.ForgetUserRequest(user_id="alice", scene="x"), timeout=10)

    # ---- a traced user ---------------------------------------------------
    w = why(admin, "alice", ["k1", "r1", "d1", "k1", "r2", "nope"])
    check(w["traced"] and w["since_ms"], "alice not traced: %s" % w)
    v = {(i["index"]): i for i in w["items"]}
    part, off = pos[("alice", "k1")]
    check(v[0]["verdict"] == "played" and v[0]["time_ms"] == k1_at and
          v[0]["source"] == "kafka plays/%d@%d" % (part, off), "k1: %s" % v[0])
    check(v[1]["verdict"] == "played" and v[1]["time_ms"] == now - 60_000 and
          v[1]["source"] == "RecordPlays", "r1: %s" % v[1])
    check(v[2]["verdict"] == "delivered" and v[2]["time_ms"] == d1_at and v[2]["recent"],
          "d1: %s" % v[2])
    check(v[3]["verdict"] == "duplicate" and "index 0" in v[3]["detail"], "k1 again: %s" % v[3])
    check(v[4]["verdict"] == "played" and v[4]["time_ms"] is None and
          "false positive" in v[4]["detail"] and "trace.retention_days" in v[4]["detail"],
          "r2: %s" % v[4])
    check(v[5]["verdict"] == "kept" and v[5]["detail"] == "kept", "nope: %s" % v[5])
    f = why(admin, "alice", ["f1"], scene="feed")["items"][0]
    part, off = pos[("alice", "f1")]
    check(f["verdict"] == "kept" and "then forgotten" in f["detail"] and
          f["source"] == "kafka plays/%d@%d" % (part, off), "f1 (forgotten on Kafka): %s" % f)
    x = why(admin, "alice", ["x1"], scene="x")["items"][0]
    check(x["verdict"] == "kept" and "then forgotten" in x["detail"] and
          x["source"] == "RecordPlays", "x1 (ForgetUser): %s" % x)
    harness.log("traced: played (kafka, RecordPlays), delivered, duplicate, forgotten, "
                "past the retention")

    # dedupctl why: one line per item: item, verdict, time, source.
    out, _ = run_ctl(["why", "--admin", "127.0.0.1:%d" % admin, "alice", "k1", "d1", "k1", "nope"])
    lines = out.splitlines()
    check(lines[0].startswith("user alice: traced since "), "header: %r" % lines[0])
    cols = [l.split(None, 4) for l in lines[1:]]
    part, off = pos[("alice", "k1")]
    check(cols[0][:4] == ["k1", "played", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(k1_at / 1000))
                          + ".%03dZ" % (k1_at % 1000), "kafka"] and
          cols[0][4].startswith("plays/%d@%d" % (part, off)), "dedupctl why k1: %r" % lines[1])
    check(cols[1][:2] == ["d1", "delivered"] and cols[1][3] == "RecordDelivery", "d1: %r" % lines[2])
    check(cols[2][:2] == ["k1", "duplicate"] and cols[3][:3] == ["nope", "kept", "-"],
          "dup/kept: %r" % lines[3:])

    # ---- an untraced user ------------------------------------------------
    b = why(admin, "bob", ["b1", "zz"])
    check(not b["traced"] and "no trace is kept" in b["note"], "bob: %s" % b)
    check(b["items"][0]["verdict"] == "played" and "no trace is kept" in b["items"][0]["detail"]
          and b["items"][0]["time_ms"] is None, "b1: %s" % b["items"][0])
    check(b["items"][1]["verdict"] == "kept", "zz: %s" % b["items"][1])
    out, _ = run_ctl(["why", "--admin", "127.0.0.1:%d" % admin, "bob", "b1"])
    check("no trace is kept" in out.splitlines()[0], "dedupctl why bob: %r" % out)

    # ---- run-time add, max_users, the bound ------------------------------
    run_ctl(["trace", "add", "carol", "--admin", "127.0.0.1:%d" % admin])
    _, err = run_ctl(["trace", "add", "erin", "--admin", "127.0.0.1:%d" % admin], want=1)
    check("trace.max_users=3" in err, "fourth user: %r" % err)
    dedup.RecordPlays(pb.RecordPlaysRequest(user_id="carol", plays=[
        pb.Play(item_id="c1", played_at_ms=now - 5000)]), timeout=10)
    # MAX_RECORDS + 10 more plays, oldest first: the oldest records go.
    dedup.RecordPlays(pb.RecordPlaysRequest(user_id="carol", plays=[
        pb.Play(item_id="m%02d" % i, played_at_ms=now - 1000 + i) for i in range(MAX_RECORDS + 10)]),
        timeout=10)
    w = why(admin, "carol", ["c1", "m00", "m%02d" % (MAX_RECORDS + 9)])
    check(all(i["verdict"] == "played" for i in w["items"]), "carol: %s" % w)
    check(w["items"][0]["source"] is None and w["items"][1]["source"] is None,
          "the oldest records should be gone (max_records %d): %s" % (MAX_RECORDS, w["items"][:2]))
    check(w["items"][2]["source"] == "RecordPlays", "the newest record: %s" % w["items"][2])
    kept = sum(1 for i in why(admin, "carol", ["m%02d" % i for i in range(MAX_RECORDS + 10)])["items"]
               if i["source"])
    check(MAX_RECORDS - MAX_RECORDS // 16 <= kept <= MAX_RECORDS, "carol keeps %d records" % kept)
    check(metric(admin, "dedupd_trace_trimmed_total") > 0, "nothing trimmed")
    harness.log("carol added at run time; %d of %d records kept (max_records %d)"
                % (kept, MAX_RECORDS + 11, MAX_RECORDS))

    # ---- restart: the list and the records stay ---------------------------
    out, _ = run_ctl(["trace", "list", "--admin", "127.0.0.1:%d" % admin])
    before = sorted(out.splitlines()[1:])
    dd.stop()
    dd.start()
    ch = grpc.insecure_channel(dd.rpc_addr)  # rpc.listen is port 0: a new port
    dedup = pbg.DedupStub(ch)
    out, _ = run_ctl(["trace", "list", "--admin", "127.0.0.1:%d" % admin])
    check(out.splitlines()[0] == "3 traced users" and sorted(out.splitlines()[1:]) == before,
          "after restart: %r, before %r" % (out, before))
    check(any(l.startswith("carol ") and "added at run time" in l for l in before) and
          any(l.startswith("alice ") and "trace.users" in l for l in before), "list: %r" % before)
    w = why(admin, "alice", ["k1", "r1"])
    check(w["items"][0]["source"] == "kafka plays/%d@%d" % pos[("alice", "k1")] and
          w["items"][1]["source"] == "RecordPlays", "records after restart: %s" % w["items"])
    w = why(admin, "carol", ["m%02d" % (MAX_RECORDS + 9)])
    check(w["items"][0]["source"] == "RecordPlays", "carol after restart: %s" % w)
    harness.log("restart: list and records kept")

    # ---- remove stops recording ------------------------------------------
    plays_before = metric(admin, "dedupd_trace_records_total", '{kind="play"}')
    run_ctl(["trace", "remove", "carol", "--admin", "127.0.0.1:%d" % admin])
    # HTTP 404: exit 4, the invalid-argument code (README, exit codes).
    _, err = run_ctl(["trace", "remove", "carol", "--admin", "127.0.0.1:%d" % admin], want=4)
    check("not traced" in err, "remove twice: %r" % err)
    dedup.RecordPlays(pb.RecordPlaysRequest(user_id="carol", plays=[pb.Play(item_id="c2")]),
                      timeout=10)
    w = why(admin, "carol", ["c2", "m%02d" % (MAX_RECORDS + 9)])
    check(not w["traced"] and all(i["source"] is None for i in w["items"]), "carol removed: %s" % w)
    check(metric(admin, "dedupd_trace_records_total", '{kind="play"}') == plays_before,
          "a play of a removed user was recorded")
    check(metric(admin, "dedupd_trace_users") == 2, "dedupd_trace_users")
    check(metric(admin, "dedupd_trace_errors_total", '{kind="write"}') == 0, "trace write errors")
    # A traced user's Kafka play after the restart: recorded too.
    dd.wait_log('msg="partitions assigned"', timeout=90)
    kcat_produce(broker, [play("dave", "v1")])
    harness.wait_until("dave's Kafka play traced", lambda: why(admin, "dave", ["v1"])["items"][0]
                       ["source"] == "kafka plays/%d@%d" % kafka_positions(broker)[("dave", "v1")],
                       timeout=30)
    harness.log("remove stops recording; Kafka plays traced after the restart")

    # ---- bad requests and non-loopback clients -----------------------------
    st, body = harness.http_get(admin, "/why?user=alice", headers=harness.admin_auth())
    check(st == 400 and "item" in body, "no item: %d %s" % (st, body))
    st, body = harness.http_get(admin, "/why?item=a", headers=harness.admin_auth())
    check(st == 400 and "user" in body, "no user: %d %s" % (st, body))
    dd.stop()
    ip = non_loopback_ip()
    if ip:
        dd.overrides["admin.listen"] = "0.0.0.0:%d" % admin
        dd.start()
        for path in ("/why?user=alice&item=k1", "/trace"):
            try:
                urllib.request.urlopen(urllib.request.Request(
                    "http://%s:%d%s" % (ip, admin, path), headers=harness.admin_auth()),
                    timeout=5)
                harness.fail("%s answered a non-loopback client" % path)
            except urllib.error.HTTPError as e:
                check(e.code == 403, "%s from %s: %d" % (path, ip, e.code))
        st, _ = harness.http_get(admin, "/trace", headers=harness.admin_auth())
        check(st == 200, "/trace from loopback: %d" % st)
        harness.log("/why and /trace: 403 from %s, 200 from loopback" % ip)
        dd.stop()
    else:
        harness.log("no non-loopback address here: the 403 check is skipped")
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
