# SPDX-License-Identifier: Apache-2.0
"""Issue 26, case 6: forget markers are authenticated (proto/dedup.proto,
"Forget marker"; src/marker.h).

Real servers only: the devbroker, a redis-server, two dedupd replicas of
one shard, and one single node. Markers are produced with kcat (unsigned,
or with a MAC header of our own making) and with tests/tools/ddproduce -f
(signed with the cluster's key file).

1. `dedupd -t` refuses a cluster configuration without
   cluster.forget_key_file, and one whose key file is too short; it warns
   about a world-readable key file and accepts it.
2. On both replicas, a user's plays stay filtered after an unsigned marker,
   a marker signed with another key, and markers whose MAC has the wrong
   length or whose signed time differs: each is counted as
   dedupd_ingest_messages_total{result="unauthenticated_forget"} and
   dead-lettered. A marker signed with the cluster's key then deletes the
   plays on both replicas.
3. ForgetUser through gRPC on one replica deletes the user's plays on both
   (the marker dedupd produces is signed).
4. A single node without a key applies no marker from the topic, signed or
   not.
"""
import hashlib
import hmac
import json
import os
import struct
import subprocess
import time

import harness
import test_ingest_lib as il
from test_clients_lib import python_stubs

pb, pbg, grpc = python_stubs()

KEY = b"fleet-forget-test-key: 0123456789abcdef0123456789abcdef\n"


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def forget_mac(key, user, scene, at_ms):
    """The MAC proto/dedup.proto defines, computed here independently."""
    u, s = user.encode(), scene.encode()
    msg = (b"dedupd forget v1" + struct.pack(">I", len(u)) + u + struct.pack(">I", len(s)) + s +
           struct.pack(">q", at_ms))
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def key_file(data, mode=0o600):
    path = os.path.join(harness.tmpdir("dedupd-key-"), "forget.key")
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def kcat(broker, topic, key, payload, headers=()):
    argv = ["kcat", "-P", "-b", broker.addr, "-t", topic, "-K\t",
            "-X", "topic.partitioner=murmur2_random"]
    for h in headers:
        argv += ["-H", h]
    r = subprocess.run(argv, input="%s\t%s\n" % (key, payload), capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 0, "kcat: %s" % r.stderr)


def marker(broker, topic, user, headers, at_ms=None, scene=""):
    ev = {"user_id": user, "scene": scene}
    if at_ms is not None:
        ev["played_at_ms"] = at_ms
    kcat(broker, topic, user, json.dumps(ev), ("dedupd-op=forget",) + tuple(headers))


def plays(broker, topic, user, items):
    for i in items:
        kcat(broker, topic, user, json.dumps({"user_id": user, "item_id": i}))


def ddproduce_forget(broker, topic, keypath, user, scene=""):
    r = subprocess.run([harness.build_path("tests", "tools", "ddproduce"), "-b", broker.addr,
                        "-t", topic, "-F", "json", "-X", "partitioner=murmur2_random",
                        "-f", keypath],
                       input="%s\t%s\n" % (user, scene), capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 0, "ddproduce -f: %s %s" % (r.stdout, r.stderr))



def unauth(port):
    return harness.metric_sum(port, "dedupd_ingest_messages_total", ('result="unauthenticated_forget"',))


class Node:
    def __init__(self, name, overrides):
        self.admin = harness.free_port()
        overrides = dict(overrides, **{"admin.listen": "127.0.0.1:%d" % self.admin})
        self.dd = harness.Dedupd(overrides, name=name)
        self.channel = grpc.insecure_channel(self.dd.rpc_addr)
        self.stub = pbg.DedupStub(self.channel)
        self.name = name

    def kept(self, user, items):
        r = self.stub.Filter(pb.FilterRequest(user_id=user, candidate_ids=items), timeout=10)
        return list(r.kept_ids)

    def wait_filtered(self, user, items, what):
        harness.wait_until("%s: %s" % (self.name, what),
                           lambda: self.kept(user, items) == [], timeout=60, every=0.2)

    def wait_kept(self, user, items, what):
        harness.wait_until("%s: %s" % (self.name, what),
                           lambda: self.kept(user, items) == items, timeout=60, every=0.2)


def run_t(overrides):
    argv = [harness.build_path("src", "dedupd"), "-t"]
    for k, v in overrides.items():
        argv += ["-o", "%s=%s" % (k, v)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def check_config():
    base = {"ingest.enabled": "true", "kafka.bootstrap.servers": "127.0.0.1:1",
            "kafka.group.id": "g", "cluster.shards": "1", "cluster.shard": "0",
            "cluster.replica": "0", "cluster.nodes": "127.0.0.1:7001,127.0.0.1:7002"}
    r = run_t(base)
    check(r.returncode != 0 and "cluster.forget_key_file" in r.stderr,
          "dedupd -t accepted a cluster without cluster.forget_key_file: rc=%d %s%s"
          % (r.returncode, r.stdout, r.stderr))
    harness.log("no key file: refused:", r.stderr.strip())
    r = run_t(dict(base, **{"cluster.forget_key_file": key_file(b"short")}))
    check(r.returncode != 0 and "cluster.forget_key_file" in r.stderr,
          "dedupd -t accepted a 5-byte key: rc=%d %s%s" % (r.returncode, r.stdout, r.stderr))
    harness.log("short key: refused:", r.stderr.strip())
    missing = os.path.join(harness.tmpdir("dedupd-key-"), "missing.key")
    r = run_t(dict(base, **{"cluster.forget_key_file": missing}))
    check(r.returncode != 0 and "cluster.forget_key_file" in r.stderr,
          "dedupd -t accepted a missing key file: rc=%d %s%s" % (r.returncode, r.stdout, r.stderr))
    r = run_t(dict(base, **{"cluster.forget_key_file": key_file(KEY, 0o644)}))
    check(r.returncode == 0 and "world" in r.stderr,
          "world-readable key: rc=%d, no warning: %s%s" % (r.returncode, r.stdout, r.stderr))
    harness.log("world-readable key: accepted with a warning:", r.stderr.strip())


def main():
    check_config()

    broker = harness.DevBroker(("plays:4", "plays-dlq:1", "solo:2"))
    redis = harness.Redis()
    keypath = key_file(KEY)
    ports = [harness.free_port() for _ in range(2)]
    nodes_s = ",".join("127.0.0.1:%d" % p for p in ports)
    nodes = []
    for r in range(2):
        o = il.ingest_overrides(broker, group="dd-forget")
        o.update({"log.level": "info", "rpc.listen": "127.0.0.1:%d" % ports[r],
                  "cluster.shards": "1", "cluster.shard": "0", "cluster.replica": str(r),
                  "cluster.nodes": nodes_s, "cluster.forget_key_file": keypath,
                  "cluster.health_interval_ms": "200", "recent.redis": redis.addr,
                  "ingest.dead_letter_topic": "plays-dlq", "window.flush_ms": "100"})
        nodes.append(Node("dd-r%d" % r, o))
    harness.wait_until("both replicas ready",
                       lambda: all(harness.http_get(n.admin, "/readyz")[0] == 200 for n in nodes),
                       timeout=60)

    # ---- 2. unsigned and forged markers are not applied ---------------------
    user, items = "victim-1", ["v-%d" % i for i in range(5)]
    plays(broker, "plays", user, items)
    for n in nodes:
        n.wait_filtered(user, items, "the plays are filtered")
    now = int(time.time() * 1000)
    bad = [("unsigned", [], None),
           ("another key", ["dedupd-mac=" + forget_mac(b"x" * 40, user, "", now)], now),
           ("a short MAC", ["dedupd-mac=" + forget_mac(KEY, user, "", now)[:62]], now),
           ("a MAC over another time", ["dedupd-mac=" + forget_mac(KEY, user, "", now)], now + 1),
           ("a MAC over another scene", ["dedupd-mac=" + forget_mac(KEY, user, "x", now)], now)]
    for what, headers, at in bad:
        marker(broker, "plays", user, headers, at)
    # A play of the same user (same partition) after the markers: once it
    # is filtered, every marker before it in the log has been consumed.
    plays(broker, "plays", user, ["sentinel"])
    for n in nodes:
        n.wait_filtered(user, ["sentinel"], "the play after the markers is ingested")
        kept = n.kept(user, items)
        check(kept == [], "%s: an unauthenticated marker deleted the plays: kept %s"
              % (n.name, kept))
        got = unauth(n.admin)
        check(got == len(bad), "%s: unauthenticated_forget = %s, want %d" % (n.name, got, len(bad)))
        check("reason=unauthenticated_forget" in n.dd.run_log(),
              "%s: no log line for the unauthenticated markers" % n.name)
    harness.log("%d unauthenticated markers refused on both replicas, plays still filtered"
                % len(bad))
    for n in nodes:
        harness.wait_until("%s: the markers dead-lettered" % n.name,
                           lambda: harness.metric_sum(n.admin, "dedupd_ingest_dead_lettered_total") >= len(bad),
                           timeout=30)
    r = subprocess.run(["kcat", "-C", "-b", broker.addr, "-t", "plays-dlq", "-o", "beginning",
                        "-e", "-q", "-f", "%h\n"], capture_output=True, text=True, timeout=60)
    dead = [l for l in r.stdout.splitlines() if "dd-reason=unauthenticated_forget" in l]
    check(r.returncode == 0 and len(dead) == 2 * len(bad),
          "dead-letter topic: %d unauthenticated markers, want %d: %r %s"
          % (len(dead), 2 * len(bad), r.stdout, r.stderr))

    # A marker signed with the cluster's key is applied on both.
    ddproduce_forget(broker, "plays", keypath, user)
    for n in nodes:
        n.wait_kept(user, items + ["sentinel"], "the signed marker deleted the plays")
        check(unauth(n.admin) == len(bad), "%s: the signed marker was counted as bad" % n.name)
    harness.log("the signed marker deleted the plays on both replicas")

    # ---- 3. ForgetUser through gRPC: its marker is signed -------------------
    user2, items2 = "victim-2", ["w-%d" % i for i in range(5)]
    plays(broker, "plays", user2, items2)
    for n in nodes:
        n.wait_filtered(user2, items2, "user2's plays are filtered")
    nodes[0].stub.ForgetUser(pb.ForgetUserRequest(user_id=user2), timeout=20)
    check(nodes[0].kept(user2, items2) == items2, "ForgetUser returned before its forget")
    nodes[1].wait_kept(user2, items2, "ForgetUser on the other replica deleted the plays")
    for n in nodes:
        check(unauth(n.admin) == len(bad), "%s: the produced marker was not authenticated"
              % n.name)
    harness.log("ForgetUser deleted the plays on both replicas")
    for n in nodes:
        n.channel.close()
        n.dd.stop()

    # ---- 4. a single node without a key applies no marker -------------------
    o = il.ingest_overrides(broker, group="dd-solo", **{"ingest.topic": "solo",
                                                        "window.flush_ms": "100"})
    solo = Node("dd-solo", o)
    user3, items3 = "victim-3", ["s-%d" % i for i in range(5)]
    plays(broker, "solo", user3, items3)
    solo.wait_filtered(user3, items3, "the plays are filtered")
    marker(broker, "solo", user3, [])
    ddproduce_forget(broker, "solo", keypath, user3)
    plays(broker, "solo", user3, ["sentinel"])
    solo.wait_filtered(user3, ["sentinel"], "the play after the markers is ingested")
    kept = solo.kept(user3, items3)
    check(kept == [], "a single node without a key applied a marker: kept %s" % kept)
    check(unauth(solo.admin) == 2, "single node: unauthenticated_forget = %s, want 2"
          % unauth(solo.admin))
    harness.log("a single node without a key applied neither marker")
    solo.channel.close()
    solo.dd.stop()
    broker.stop()
    redis.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
