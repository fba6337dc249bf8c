#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""ForgetUser with all_scenes in a cluster (issue 30): two shards of two
replicas, one devbroker, a Redis per shard.

1. A user of shard 1 with plays in three scenes and deliveries in a
   fourth, recorded through a node of shard 0 (forwarded): ForgetUser
   with all_scenes asked of shard 0's node is forwarded to shard 1, its
   reply lists the four scenes, and the all-scenes marker it produces
   reaches the other replica of shard 1, which forgets every scene too.
   Another user of the same shard keeps its plays.
2. The marker's encoding as proto/dedup.proto documents it, computed here:
   an all-scenes marker (dedupd-op forget-all-scenes) carrying a one-scene
   MAC is refused as unauthenticated on both replicas; one with the
   "dedupd forget all" MAC is applied on both.
"""
import hashlib
import hmac
import json
import struct
import subprocess
import time

import harness
import test_ingest_lib as il
from test_clients_lib import python_stubs

pb, pbg, grpc = python_stubs()
SHARDS, REPLICAS, PARTITIONS = 2, 2, 4


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def mac_v1(key, user, scene, at_ms):
    u, s = user.encode(), scene.encode()
    return hmac.new(key, b"dedupd forget v1" + struct.pack(">I", len(u)) + u +
                    struct.pack(">I", len(s)) + s + struct.pack(">q", at_ms),
                    hashlib.sha256).hexdigest()


def mac_all(key, user, at_ms):
    u = user.encode()
    return hmac.new(key, b"dedupd forget all" + struct.pack(">I", len(u)) + u +
                    struct.pack(">q", at_ms), hashlib.sha256).hexdigest()


def kcat_marker(broker, user, at_ms, mac):
    argv = ["kcat", "-P", "-b", broker.addr, "-t", "plays", "-K\t",
            "-X", "topic.partitioner=murmur2_random",
            "-H", "dedupd-op=forget-all-scenes", "-H", "dedupd-mac=" + mac]
    r = subprocess.run(argv, input="%s\t%s\n" % (user, json.dumps(
        {"user_id": user, "played_at_ms": at_ms})), capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "kcat: %s" % r.stderr)


class Node:
    def __init__(self, shard, replica, ports, broker, redis_list, nodes):
        self.label = "%d.%d" % (shard, replica)
        self.admin = harness.free_port()
        o = il.ingest_overrides(broker, group="dd-forget-all")
        o.update({"log.level": "info", "rpc.listen": "127.0.0.1:%d" % ports[shard][replica],
                  "admin.listen": "127.0.0.1:%d" % self.admin,
                  "cluster.shards": str(SHARDS), "cluster.shard": str(shard),
                  "cluster.replica": str(replica), "cluster.nodes": nodes,
                  "cluster.redis": redis_list, "cluster.partitioner": "murmur2_random",
                  "cluster.health_interval_ms": "200", "window.flush_ms": "100"})
        self.dd = harness.Dedupd(o, name="dd-%s" % self.label)
        self.channel = grpc.insecure_channel(self.dd.rpc_addr)
        self.stub = pbg.DedupStub(self.channel)

    def kept(self, user, scene, ids):
        return list(self.stub.Filter(pb.FilterRequest(user_id=user, scene=scene,
                                                      candidate_ids=ids), timeout=10).kept_ids)

    def wait(self, what, fn):
        harness.wait_until("%s: %s" % (self.label, what), fn, timeout=60, every=0.1)


def main():
    t0 = time.time()
    broker = harness.DevBroker(("plays:%d" % PARTITIONS,))
    redis = [harness.Redis() for _ in range(SHARDS)]
    ports = [[harness.free_port() for _ in range(REPLICAS)] for _ in range(SHARDS)]
    nodes = ";".join(",".join("127.0.0.1:%d" % p for p in s) for s in ports)
    redis_list = ";".join(r.addr for r in redis)
    cl = {(s, r): Node(s, r, ports, broker, redis_list, nodes)
          for s in range(SHARDS) for r in range(REPLICAS)}
    harness.wait_until("every node ready", lambda: all(
        harness.http_get(n.admin, "/readyz")[0] == 200 for n in cl.values()), timeout=120)
    parts = il.partitions_of(["fa-%d" % i for i in range(40)], PARTITIONS)
    shard1 = [u for u, p in sorted(parts.items()) if p % SHARDS == 1]
    check(len(shard1) >= 3, "users of shard 1: %s" % shard1)
    user, other, user2 = shard1[:3]
    entry, replicas = cl[(0, 0)], [cl[(1, 0)], cl[(1, 1)]]

    # ---- 1. forwarded, every scene, both replicas -----------------------------
    scenes = {"": ["a"], "feed": ["b"], "x*": ["c"]}
    for scene, ids in scenes.items():
        entry.stub.RecordPlays(pb.RecordPlaysRequest(
            user_id=user, scene=scene, plays=[pb.Play(item_id=i) for i in ids]), timeout=20)
    entry.stub.RecordPlays(pb.RecordPlaysRequest(
        user_id=other, scene="feed", plays=[pb.Play(item_id="b")]), timeout=20)
    entry.stub.RecordDelivery(pb.RecordDeliveryRequest(user_id=user, scene="push",
                                                       item_ids=["d"]), timeout=20)
    for n in replicas:
        for scene, ids in scenes.items():
            n.wait("%r's plays in %r" % (user, scene), lambda: n.kept(user, scene, ids) == [])
        n.wait("the other user's play", lambda: n.kept(other, "feed", ["b"]) == [])
    r = entry.stub.ForgetUser(pb.ForgetUserRequest(user_id=user, all_scenes=True), timeout=30)
    check(list(r.scenes) == ["", "feed", "push", "x*"],
          "forwarded ForgetUser all_scenes: scenes %s" % list(r.scenes))
    for n in replicas:
        for scene, ids in list(scenes.items()) + [("push", ["d"])]:
            n.wait("%r forgotten in %r" % (user, scene), lambda: n.kept(user, scene, ids) == ids)
    # A play of the user after the marker: once a replica has it, the
    # marker before it in the log has been applied there.
    entry.stub.RecordPlays(pb.RecordPlaysRequest(user_id=user, scene="z",
                                                 plays=[pb.Play(item_id="after")]), timeout=20)
    for n in replicas:
        n.wait("the play after the marker", lambda: n.kept(user, "z", ["after"]) == [])
        check(n.kept(other, "feed", ["b"]) == [], "%s: the other user was forgotten" % n.label)
        check(n.kept(user, "feed", ["b"]) == ["b"], "%s: a scene came back" % n.label)
        check(harness.metric_sum(n.admin, "dedupd_ingest_messages_total",
                                 ('result="unauthenticated_forget"',)) == 0,
              "%s: the produced all-scenes marker was not authenticated" % n.label)
    harness.log("forwarded ForgetUser all_scenes: 4 scenes, both replicas of shard 1")

    # ---- 2. the documented encoding, from outside --------------------------------
    with open(harness.forget_key_file(), "rb") as f:
        key = f.read()
    for scene in ("", "feed"):
        entry.stub.RecordPlays(pb.RecordPlaysRequest(
            user_id=user2, scene=scene, plays=[pb.Play(item_id="m")]), timeout=20)
    for n in replicas:
        n.wait("user2's plays", lambda: n.kept(user2, "feed", ["m"]) == [] and
               n.kept(user2, "", ["m"]) == [])
    now = int(time.time() * 1000)
    kcat_marker(broker, user2, now, mac_v1(key, user2, "", now))   # a one-scene MAC
    entry.stub.RecordPlays(pb.RecordPlaysRequest(user_id=user2, scene="z",
                                                 plays=[pb.Play(item_id="s1")]), timeout=20)
    for n in replicas:
        # The replica that served RecordPlays has the play before it
        # consumes the marker: wait for the marker's count instead.
        n.wait("the widened marker counted as unauthenticated", lambda: harness.metric_sum(
            n.admin, "dedupd_ingest_messages_total", ('result="unauthenticated_forget"',)) == 1)
        n.wait("the play after the forged marker", lambda: n.kept(user2, "z", ["s1"]) == [])
        check(n.kept(user2, "feed", ["m"]) == [], "%s: a one-scene MAC forgot all scenes"
              % n.label)
    kcat_marker(broker, user2, now + 1, mac_all(key, user2, now + 1))
    for n in replicas:
        for scene in ("", "feed", "z"):
            ids = ["s1"] if scene == "z" else ["m"]
            n.wait("the signed all-scenes marker in %r" % scene,
                   lambda: n.kept(user2, scene, ids) == ids)
    harness.log("all-scenes markers: a one-scene MAC refused, the documented MAC applied")
    for n in cl.values():
        n.channel.close()
        n.dd.stop()
    broker.stop()
    harness.log("PASS (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
