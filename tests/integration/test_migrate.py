#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""dedupd-migrate against a real legacy redis-server and a real dedupd.

1. 20,000 legacy users, sets of 1 to 15,000 members (skewed, mean ~125),
   scores spread over 0..150 days ago: the migration counts every entry
   exactly (in retention -> entries, older -> expired_skipped); --verify
   over all users finds 0 misses; items older than the retention are not
   filtered (sampled through Filter).
2. The same store into a fresh dedupd, stopped with SIGTERM at a random
   point (exit 3, checkpoint written), resumed and killed with SIGKILL at a
   random point, resumed again: the same totals as the uninterrupted run,
   and 0 misses.
3. A store seeded with each kind of bad data the legacy Redis can hold:
   counted per reason, never fatal, the good users migrated (and verified);
   deliveries copied, including a user that only has deliveries; --dry-run
   counts the same and writes nothing.

Prints the migration rate (entries/s) of run 1 and its command.

`test_migrate.py progress` (meson test migrate_progress, a few seconds)
checks what the operator watches instead: on a database that holds other
keys too (DBSIZE is not the total), the progress counts the matching keys
first and ends at 100 % of them with an ETA on the way; a usage error is
short; a run resumed after SIGTERM ends at 100 % and rates only its own
work; a resumed finished run says it did nothing, not 0 entries/s.
"""
import os
import random
import re
import signal
import subprocess
import sys
import time

import harness
from test_clients_lib import Dedupd, python_stubs

DAY_MS = 86400 * 1000


RETENTION_DAYS = 90
SEGMENT_DAYS = 30  # dedupd's default; items older than retention + segment are surely gone
USERS = 20000
SEED = int(os.environ.get("DD_MIGRATE_SEED", "20261122"))


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if not isinstance(a, bytes):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def pipe(redis, data, db=0):
    """Feed raw RESP commands to redis-cli --pipe; fail on any error reply."""
    argv = ["redis-cli", "-p", str(redis.port), "-n", str(db), "--pipe"]
    p = subprocess.run(argv, input=data, capture_output=True, timeout=600)
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0 or "errors: 0" not in out:
        harness.fail("redis-cli --pipe: rc %d\n%s\n%s" % (p.returncode, out, p.stderr))


def seed_main(redis, now):
    """USERS users; returns (in-retention entries, expired entries, {user: [(item, age_ms)]}
    for a sample of users)."""
    rng = random.Random(SEED)
    chunks = []
    n_in = n_exp = 0
    sample = {}
    # dedupd remembers whole UTC days: today and the RETENTION_DAYS before it.
    boundary = (now // DAY_MS - RETENTION_DAYS) * DAY_MS
    for uid in range(USERS):
        if uid == 0:
            size = 1
        elif uid == 1:
            size = 15000
        elif rng.random() < 0.005:
            size = rng.randint(3000, 15000)
        else:
            size = min(15000, int(rng.expovariate(1 / 80.0)) + 1)
        args = [b"ZADD", b"play:u%d" % uid]
        keep = uid % 97 == 0
        items = []
        for j in range(size):
            age = rng.randint(60 * 1000, 150 * DAY_MS)
            if abs(now - age - boundary) < 3600 * 1000:  # clear of the edge: exact counts
                age += 2 * 3600 * 1000
            member = b"v%d" % (j * 1000003 + uid)
            args += [b"%d" % (now - age), member]
            if now - age >= boundary:
                n_in += 1
            else:
                n_exp += 1
            if keep:
                items.append((member.decode(), age))
        if keep:
            sample["u%d" % uid] = items
        chunks.append(resp(*args))
    data = b"".join(chunks)
    harness.log("seeding %d users, %d entries (%d in retention), %.0f MB of RESP"
                % (USERS, n_in + n_exp, n_in, len(data) / 1e6))
    pipe(redis, data)
    return n_in, n_exp, sample


def parse_summary(out):
    s = {}
    for line in out.splitlines():
        m = re.match(r"^  (\S+)\s+(.*)$", line)
        if m:
            s[m.group(1)] = m.group(2).strip()
    if "users" not in s:
        harness.fail("no summary in output:\n%s" % out[-3000:])
    return s


def parse_verify(out):
    m = re.search(r"^verify: (.*)$", out, re.M)
    if not m:
        harness.fail("no verify line in output:\n%s" % out[-3000:])
    return {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


class Migrate:
    def __init__(self, legacy):
        self.exe = harness.build_path("scripts", "migrate", "dedupd-migrate")
        self.legacy = legacy

    def argv(self, target, *extra):
        return [self.exe, "--source", self.legacy.addr, "--plays", "play:{user}",
                "--target", target, "--retention-days", str(RETENTION_DAYS)] + list(extra)

    def run(self, target, *extra, want=0):
        argv = self.argv(target, *extra)
        t0 = time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        secs = time.monotonic() - t0
        if p.returncode != want:
            harness.fail("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s"
                         % (" ".join(argv), p.returncode, want, p.stdout[-4000:],
                            p.stderr[-4000:]))
        return p.stdout, p.stderr, secs

    def start(self, target, *extra):
        return harness.Proc(self.argv(target, *extra), "migrate")


SEED_DAY = time.time() // 86400


def check_totals(s, n_in, n_exp, what):
    got = (int(s["users"]), int(s["entries"]), int(s["expired_skipped"]), int(s["bad_total"]),
           int(s["failed_users"]))
    want = (USERS, n_in, n_exp, 0, 0)
    if time.time() // 86400 != SEED_DAY:
        # Midnight UTC passed since seeding: a day of plays moved out of the
        # retention, so only the sum is exact.
        harness.log("%s: the UTC day changed; checking entries + expired only" % what)
        got = (got[0], got[1] + got[2], got[3], got[4])
        want = (USERS, n_in + n_exp, 0, 0)
    if got != want:
        harness.fail("%s: users, entries, expired, bad, failed = %s, want %s" % (what, got, want))
    if s["state"] != "complete":
        harness.fail("%s: state %r" % (what, s["state"]))


def verify_all(mig, target, n_in, extra=()):
    out, _, secs = mig.run(target, "--verify-only", "--verify", str(USERS + 10), "--parallel", "8",
                           *extra)
    v = parse_verify(out)
    if time.time() // 86400 != SEED_DAY:
        n_in = v["items"]  # see check_totals
    if v["misses"] != 0 or v["errors"] != 0 or v["checked"] != USERS or v["items"] != n_in:
        harness.fail("verify: %s (want misses=0 errors=0 checked=%d items=%d)" % (v, USERS, n_in))
    harness.log("verify: %d users, %d items, 0 misses in %.1f s" % (USERS, n_in, secs))


def check_old_not_filtered(stubs, target, sample):
    pb, pbg, grpc = stubs
    ch = grpc.insecure_channel(target)
    stub = pbg.DedupStub(ch)
    n_old = n_new = 0
    gone = (RETENTION_DAYS + SEGMENT_DAYS + 1) * DAY_MS
    for user, items in sample.items():
        old = [m for m, age in items if age > gone][:300]
        new = [m for m, age in items if age < (RETENTION_DAYS - 2) * DAY_MS][:300]
        if not old and not new:
            continue
        r = stub.Filter(pb.FilterRequest(user_id=user, candidate_ids=old + new), timeout=10)
        if list(r.kept_ids) != old:
            harness.fail("user %s: kept %d of %d old items, %d of %d recent ones"
                         % (user, len(set(r.kept_ids) & set(old)), len(old),
                            len(set(r.kept_ids) & set(new)), len(new)))
        n_old += len(old)
        n_new += len(new)
    ch.close()
    if n_old < 1000 or n_new < 1000:
        harness.fail("sample too small: %d old, %d recent items" % (n_old, n_new))
    harness.log("Filter: %d items past the retention kept, %d in it removed" % (n_old, n_new))


def wait_checkpoint_progress(path, proc, min_users, timeout):
    """Wait until the checkpoint has at least MIN_USERS users committed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            harness.fail("migration ended before it could be interrupted:\n%s" % proc.tail())
        try:
            with open(path) as f:
                m = re.search(r"^users=(\d+)$", f.read(), re.M)
            if m and int(m.group(1)) >= min_users:
                return int(m.group(1))
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    harness.fail("checkpoint %s never reached %d users" % (path, min_users))


def interrupted_run(mig, stubs, legacy, recent, n_in, n_exp, s1):
    rng = random.Random(SEED + 1)
    d = Dedupd(recent.addr)
    ck = os.path.join(harness.tmpdir(), "ckpt")
    common = ("--checkpoint", ck, "--checkpoint-interval-s", "1", "--parallel", "8")

    # SIGTERM at a random point: checkpoint written, exit 3.
    p = mig.start(d.addr, *common)
    wait_checkpoint_progress(ck, p, rng.randint(1000, 6000), 300)
    p.signal(signal.SIGTERM)
    try:
        rc = p.p.wait(60)
    except subprocess.TimeoutExpired:
        harness.fail("migration did not stop within 60 s of SIGTERM")
    out = p.output()
    if rc != 3 or "interrupted" not in parse_summary(out)["state"]:
        harness.fail("after SIGTERM: exit %s\n%s" % (rc, out[-3000:]))
    with open(ck) as f:
        at_term = int(re.search(r"^users=(\d+)$", f.read(), re.M).group(1))
    harness.log("SIGTERM: stopped with %d users committed" % at_term)

    # Resume, then SIGKILL at a random point further on.
    p = mig.start(d.addr, *common, "--resume")
    wait_checkpoint_progress(ck, p, at_term + rng.randint(1, max(1, (USERS - at_term) // 2)), 300)
    time.sleep(rng.uniform(0, 0.5))
    p.kill9()
    with open(ck) as f:
        at_kill = int(re.search(r"^users=(\d+)$", f.read(), re.M).group(1))
    harness.log("SIGKILL: %d users committed in the checkpoint" % at_kill)

    out, err, _ = mig.run(d.addr, *common, "--resume")
    s2 = parse_summary(out)
    check_totals(s2, n_in, n_exp, "resumed run")
    for k in ("users", "entries", "expired_skipped", "bad_total"):
        if s2[k] != s1[k]:
            harness.fail("resumed run: %s = %s, uninterrupted run: %s" % (k, s2[k], s1[k]))
    verify_all(mig, d.addr, n_in)

    # Once done, --resume has nothing left to do and reports the same totals.
    out, err, _ = mig.run(d.addr, *common, "--resume")
    s3 = parse_summary(out)
    if s3["entries"] != s1["entries"] or "nothing to migrate" not in err:
        harness.fail("resume after completion: %s\n%s" % (s3, err[-2000:]))
    # Starting over on an existing checkpoint without --resume is refused.
    mig.run(d.addr, *common, want=2)
    d.stop()


def bad_data_run(mig, legacy, recent, stubs):
    """Database 1 of the legacy server: each kind of bad data, and good users."""
    now = int(time.time() * 1000)
    rng = random.Random(SEED + 2)
    cmds = []
    good = {}
    for i in range(50):
        items = ["g%d_%d" % (i, j) for j in range(rng.randint(1, 200))]
        good["good%d" % i] = items
        args = ["ZADD", "play:good%d" % i]
        for m in items:
            args += [now - rng.randint(1000, 80 * DAY_MS), m]
        cmds.append(resp(*args))
    # wrong_type: 3 plays keys, 1 deliveries key.
    cmds += [resp("SET", "play:str", "x"), resp("RPUSH", "play:list", "a"),
             resp("HSET", "play:hash", "f", "v"), resp("SET", "dlv:good1", "x")]
    # score_out_of_range: 5 (inf, -inf, 0, negative, 10 days ahead); 2 good.
    cmds.append(resp("ZADD", "play:badscore", "inf", "a1", "-inf", "a2", "0", "a3", "-5", "a4",
                     now + 10 * DAY_MS, "a5", now - 1000, "ok1", now - 2000, "ok2"))
    good["badscore"] = ["ok1", "ok2"]
    # empty_member: 1; 1 good.
    cmds.append(resp("ZADD", "play:emp", now - 1000, "", now - 1000, "ok3"))
    good["emp"] = ["ok3"]
    # long_member: 2 (257 and 300 bytes); 256 bytes is still good.
    cmds.append(resp("ZADD", "play:long", now - 1000, "x" * 257, now - 1000, "y" * 300,
                     now - 1000, "z" * 256))
    good["long"] = ["z" * 256]
    # binary_member: 1 (a NUL byte); 1 good.
    cmds.append(resp(b"ZADD", b"play:bin", b"%d" % (now - 1000), b"a\x00b", b"%d" % (now - 1000),
                     b"ok4"))
    good["bin"] = ["ok4"]
    # key_mismatch: an empty user and a user id over 256 bytes.
    cmds += [resp("ZADD", "play:", now - 1000, "k1"),
             resp("ZADD", "play:" + "u" * 300, now - 1000, "k2")]
    # Deliveries: good0 has 3 (two delivery times), onlydlv has no plays key.
    cmds += [resp("ZADD", "dlv:good0", now - 5000, "d1", now - 5000, "d2", now - 100, "d3"),
             resp("ZADD", "dlv:onlydlv", now - 100, "o1", now - 50, "o2")]
    pipe(legacy, b"".join(cmds), db=1)

    n_good = sum(len(v) for v in good.values())
    want = {
        "users": 50 + 3 + 4 + 1,  # good, wrong-type plays keys, users with bad entries, onlydlv
        "entries": n_good,
        "expired_skipped": 0,
        "deliveries": 5,
        "failed_users": 0,
        "bad.wrong_type": 4,
        "bad.non_numeric_score": 0,  # Redis refuses non-numeric scores: cannot be seeded
        "bad.score_out_of_range": 5,
        "bad.empty_member": 1,
        "bad.long_member": 2,
        "bad.binary_member": 1,
        "bad.key_mismatch": 2,
        "bad_total": 15,
    }
    d = Dedupd(recent.addr)
    common = ("--source-db", "1", "--deliveries", "dlv:{user}", "--scene", "legacy")

    # Dry run: the same counts, nothing written, no checkpoint.
    ck = os.path.join(harness.tmpdir(), "ckpt")
    out, _, _ = mig.run(d.addr, *common, "--dry-run", "--checkpoint", ck)
    s = parse_summary(out)
    for k, v in want.items():
        if int(s[k]) != v:
            harness.fail("dry run: %s = %s, want %d\n%s" % (k, s[k], v, out))
    if os.path.exists(ck):
        harness.fail("dry run wrote a checkpoint")
    pb, pbg, grpc = stubs
    ch = grpc.insecure_channel(d.addr)
    stub = pbg.DedupStub(ch)
    r = stub.Filter(pb.FilterRequest(user_id="good0", scene="legacy",
                                     candidate_ids=good["good0"]), timeout=10)
    if len(r.kept_ids) != len(good["good0"]):
        harness.fail("dry run wrote plays")

    out, _, _ = mig.run(d.addr, *common, "--checkpoint", ck, "--parallel", "3")
    s = parse_summary(out)
    for k, v in want.items():
        if int(s[k]) != v:
            harness.fail("bad data: %s = %s, want %d\n%s" % (k, s[k], v, out))
    harness.log("bad data counted: %s" % {k: s[k] for k in want if k.startswith("bad.")})

    for user, items in good.items():
        r = stub.Filter(pb.FilterRequest(user_id=user, scene="legacy", candidate_ids=items + ["fresh"]),
                        timeout=10)
        if list(r.kept_ids) != ["fresh"]:
            harness.fail("user %s: kept %s" % (user, list(r.kept_ids)[:5]))
    r = stub.Filter(pb.FilterRequest(user_id="good0", scene="legacy", explain=True,
                                     candidate_ids=["d1", "d2", "d3", "o1", "fresh"]), timeout=10)
    if list(r.kept_ids) != ["o1", "fresh"] or r.removed_delivered != 3:
        harness.fail("deliveries of good0: kept %s delivered=%d"
                     % (list(r.kept_ids), r.removed_delivered))
    r = stub.Filter(pb.FilterRequest(user_id="onlydlv", scene="legacy",
                                     candidate_ids=["o1", "o2", "fresh"]), timeout=10)
    if list(r.kept_ids) != ["fresh"]:
        harness.fail("delivery-only user: kept %s" % list(r.kept_ids))
    # Nothing went to the default scene.
    r = stub.Filter(pb.FilterRequest(user_id="good0", candidate_ids=good["good0"][:5]), timeout=10)
    if len(r.kept_ids) != len(good["good0"][:5]):
        harness.fail("plays of scene 'legacy' visible in the default scene")
    ch.close()

    out, _, _ = mig.run(d.addr, "--source-db", "1", "--scene", "legacy", "--verify-only",
                        "--verify", "1000")
    v = parse_verify(out)
    # The sample is every plays key: 54 users with good items; 3 wrong-type
    # keys and 2 keys that do not match are skipped.
    if v["misses"] != 0 or v["checked"] != 54 or v["skipped"] != 5 or v["items"] != n_good:
        harness.fail("verify of the bad-data store: %s" % v)
    # A verify against the wrong scene must find every item missing, and say so.
    out, _, _ = mig.run(d.addr, "--source-db", "1", "--scene", "elsewhere", "--verify-only",
                        "--verify", "1000", "--verify-print", "3", want=1)
    v = parse_verify(out)
    if v["misses"] != n_good or len(re.findall(r"^miss user=", out, re.M)) != 3:
        harness.fail("verify in the wrong scene: %s\n%s" % (v, out[-2000:]))
    d.stop()


PROGRESS = re.compile(r'msg="progress" (.*)$', re.M)


def progress_lines(err):
    out = []
    for m in PROGRESS.finditer(err):
        out.append(dict(kv.split("=", 1) for kv in m.group(1).split()))
    return out


def check_ends_at_100(err, want_total, what):
    lines = progress_lines(err)
    if not lines:
        harness.fail("%s: no progress lines:\n%s" % (what, err[-3000:]))
    last = lines[-1]
    if (last.get("keys") != str(want_total) or last.get("total") != str(want_total)
            or last.get("pct") != "100.0" or last.get("eta") != "0s"):
        harness.fail("%s: last progress line %s, want keys=total=%d pct=100.0 eta=0s\n%s"
                     % (what, last, want_total, err[-3000:]))
    return lines


def progress_run():
    """Small and fast: what the progress line and the summary say."""
    legacy = harness.Redis()
    recent = harness.Redis()
    mig = Migrate(legacy)
    now = int(time.time() * 1000)
    n_users, n_other = 400, 250
    cmds = [resp("ZADD", "play:u%d" % u, now - 1000 * (j + 1), "v%d" % j)
            for u in range(n_users) for j in range(3)]
    cmds += [resp("SET", "other:%d" % i, "x") for i in range(n_other)]
    # Deliveries: 20 keys, 10 of users without plays (phase 1 migrates those).
    cmds += [resp("ZADD", "dlv:u%d" % u, now - 500, "d1") for u in range(10)]
    cmds += [resp("ZADD", "dlv:only%d" % u, now - 500, "d1") for u in range(10)]
    pipe(legacy, b"".join(cmds))
    total = n_users + 20  # plays keys + delivery keys
    d = Dedupd(recent.addr)

    # A usage error: one line of usage and a pointer to --help, exit 2.
    p = subprocess.run([mig.exe, "--plays", "play:{user}", "--bogus"], capture_output=True,
                       text=True, timeout=30)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    if p.returncode != 2 or len(lines) > 4 or "--help" not in p.stderr or p.stdout:
        harness.fail("usage error: exit %d, %d lines on stderr:\n%s"
                     % (p.returncode, len(lines), p.stderr))
    p = subprocess.run([mig.exe], capture_output=True, text=True, timeout=30)
    if p.returncode != 2 or len(p.stderr.splitlines()) > 4 or "--plays" not in p.stderr:
        harness.fail("no --plays: exit %d\n%s" % (p.returncode, p.stderr))

    # An uninterrupted run, paced so that progress lines come on the way.
    ck = os.path.join(harness.tmpdir(), "ckpt")
    common = ("--deliveries", "dlv:{user}", "--checkpoint", ck, "--checkpoint-interval-s", "1",
              "--progress-s", "1", "--parallel", "4", "--scan-count", "50")
    t0 = time.monotonic()
    out, err, _ = mig.run(d.addr, *common, "--rate", "300")
    lines = check_ends_at_100(err, total, "first run")
    if 'total_from=count' not in err or not re.search(r'msg="counted keys" keys=%d ' % total, err):
        harness.fail("first run: the total was not counted from the source:\n%s" % err[-3000:])
    mid = [x for x in lines[:-1] if x.get("eta") not in ("?", None)]
    if not mid:
        harness.fail("first run: no progress line with an ETA before the end:\n%s" % err[-3000:])
    s1 = parse_summary(out)
    if s1["state"] != "complete" or int(s1["users"]) != n_users + 10:
        harness.fail("first run: %s" % s1)
    harness.log("first run: %d progress lines in %.1f s, e.g. %s; last %s"
                % (len(lines), time.monotonic() - t0, mid[0], lines[-1]))

    # Resumed when already finished: it did nothing and says so; the rate of
    # the migration is the rate of the runs that did it, not 0.
    out, err, _ = mig.run(d.addr, *common, "--resume")
    s2 = parse_summary(out)
    if (s2["run_entries"] != "0" or s2["run_entries_per_s"] != "-"
            or float(s2["entries_per_s"]) <= 0 or s2["entries"] != s1["entries"]
            or "nothing to migrate" not in err):
        harness.fail("resumed finished run: %s\n%s" % (s2, err[-2000:]))
    harness.log("resumed finished run: run_entries=%s run_entries_per_s=%s entries_per_s=%s"
                % (s2["run_entries"], s2["run_entries_per_s"], s2["entries_per_s"]))

    # SIGTERM part way, then a resume: the resumed run ends at 100 % of the
    # same total, and its rate counts its own entries over its own time.
    d2 = Dedupd(recent.addr)
    ck2 = os.path.join(harness.tmpdir(), "ckpt")
    common2 = ("--deliveries", "dlv:{user}", "--checkpoint", ck2, "--checkpoint-interval-s", "1",
               "--progress-s", "1", "--parallel", "4", "--scan-count", "50")
    p = mig.start(d2.addr, *common2, "--rate", "200")
    wait_checkpoint_progress(ck2, p, 100, 60)
    p.signal(signal.SIGTERM)
    if p.p.wait(60) != 3:
        harness.fail("SIGTERM: exit %s\n%s" % (p.p.returncode, p.output()[-2000:]))
    first = parse_summary(p.output())
    out, err, _ = mig.run(d2.addr, *common2, "--resume")
    check_ends_at_100(err, total, "resumed run")
    s3 = parse_summary(out)
    run_entries = int(s3["entries"]) - int(first["entries"])
    if (s3["state"] != "complete" or s3["entries"] != s1["entries"]
            or int(s3["run_entries"]) != run_entries or run_entries <= 0):
        harness.fail("resumed run: %s (first part %s)" % (s3, first))
    # run_time_s is printed to the ms: the rate lies within what +-0.5 ms
    # of it gives (a resumed run may take well under a second), +-20 %.
    t = float(s3["run_time_s"])
    got_rate = float(s3["run_entries_per_s"])
    lo = run_entries / (t + 0.0005) * 0.8
    hi = run_entries / max(t - 0.0005, 0.0001) * 1.2
    if not lo - 2.0 <= got_rate <= hi + 2.0:
        harness.fail("resumed run: run_entries_per_s %s, want %.0f-%.0f (%d entries in %s s)"
                     % (got_rate, lo, hi, run_entries, s3["run_time_s"]))
    harness.log("resumed run: %d of %s entries in %s s, %s entries/s"
                % (run_entries, s3["entries"], s3["run_time_s"], s3["run_entries_per_s"]))
    d.stop()
    d2.stop()
    harness.log("PASS")


def main():
    if sys.argv[1:] == ["progress"]:
        progress_run()
        return
    stubs = python_stubs()
    legacy = harness.Redis()
    recent = harness.Redis()
    mig = Migrate(legacy)
    now = int(time.time() * 1000)
    t0 = time.monotonic()
    n_in, n_exp, sample = seed_main(legacy, now)
    harness.log("seeded in %.1f s" % (time.monotonic() - t0))

    # 1. Uninterrupted run.
    d = Dedupd(recent.addr)
    argv = mig.argv(d.addr, "--parallel", "8")
    out, err, secs = mig.run(d.addr, "--parallel", "8")
    s1 = parse_summary(out)
    check_totals(s1, n_in, n_exp, "first run")
    harness.log("migrated %d users, %d entries (%d expired skipped) in %.1f s: %.0f entries/s"
                % (USERS, n_in, n_exp, secs, n_in / secs))
    harness.log("command: %s" % " ".join(argv))
    verify_all(mig, d.addr, n_in)
    check_old_not_filtered(stubs, d.addr, sample)
    d.stop()

    # 2. SIGTERM, resume, SIGKILL, resume.
    interrupted_run(mig, stubs, legacy, recent, n_in, n_exp, s1)

    # 3. Bad data.
    bad_data_run(mig, legacy, recent, stubs)
    harness.log("PASS")


if __name__ == "__main__":
    main()
