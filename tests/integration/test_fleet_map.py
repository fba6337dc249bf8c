# SPDX-License-Identifier: Apache-2.0
"""What the client libraries stand on (issue 28), on one 2 x 2 fleet
(fleet.py: devbroker, plays:8, one redis-server per shard) and one single
node, with Python grpcio stubs:

1. Compact candidates: the same Filter requests sent as candidate_ids and
   as candidate_hashes (XXH3-64 with dedupd's seed, computed here with
   libxxhash) keep the same indexes and remove the same positions for the
   same reasons (played through Kafka, delivered through RecordDelivery,
   duplicates within the request), on every node: the owner's replicas and
   the other shard's, which forward the bytes unchanged. Both lists set is
   INVALID_ARGUMENT naming both.
2. ClusterMap: every node answers the same map (hash, partitioner,
   partition count, shards and addresses), itself marked self; a node
   paused with SIGSTOP shows not ready on the others within a few health
   intervals.
3. Stale maps: a call carrying dedupd-map-hash sent to a replica of the
   owner with the right hash is answered and forwards nothing; sent to a
   node of the other shard, or with another hash, it is refused
   FAILED_PRECONDITION with the node's hash in the trailing metadata,
   forwards nothing and is counted in dedupd_rpc_stale_map_total; without
   the metadata the call is forwarded as before.
4. A single node: ClusterMap of one shard of one replica, itself; hashes
   equal to ids; its own hash accepted, another refused.
"""
import ctypes
import time

import fleet
import harness
from test_clients_lib import Dedupd, python_stubs

pb, pbg, grpc = python_stubs()

SEED = 0x6464757064683031
MD = "dedupd-map-hash"
_xxh = ctypes.CDLL("libxxhash.so.0")
_xxh.XXH3_64bits_withSeed.restype = ctypes.c_uint64
_xxh.XXH3_64bits_withSeed.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]


def item_hash(item):
    b = item.encode()
    return _xxh.XXH3_64bits_withSeed(b, len(b), SEED)


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def stub(addr):
    return pbg.DedupStub(grpc.insecure_channel(addr))


def candidates(u):
    """Fresh, played, delivered, duplicates of each, a non-ASCII id; and
    the positions that must be kept."""
    c = ["fresh-%s-1" % u, "p-%s-0" % u, "d-%s-0" % u, "fresh-%s-2" % u, "p-%s-1" % u,
         "fresh-%s-1" % u, "d-%s-1" % u, "p-%s-0" % u, "fresh-%s-3" % u, "\u00e9l\u00e8ve-%s" % u,
         "d-%s-0" % u]
    return c, [0, 3, 8, 9]


def filter_both(st, u, ids, metadata=None):
    """(ids answer, hashes answer): explain on, mode IDS asked of the
    hashes (it must be ignored: the answer is kept_indexes)."""
    a = st.Filter(pb.FilterRequest(user_id=u, candidate_ids=ids, explain=True,
                                   mode=pb.RESPONSE_MODE_INDEXES), timeout=10, metadata=metadata)
    b = st.Filter(pb.FilterRequest(user_id=u, candidate_hashes=[item_hash(i) for i in ids],
                                   explain=True, mode=pb.RESPONSE_MODE_IDS), timeout=10,
                  metadata=metadata)
    return a, b


def same_answer(a, b, want, what):
    ra = [(r.index, r.reason) for r in a.removed]
    rb = [(r.index, r.reason) for r in b.removed]
    check(list(b.kept_ids) == [], "%s: hashes answered with ids %s" % (what, list(b.kept_ids)))
    check(list(a.kept_indexes) == want, "%s: ids kept %s, want %s" % (what, list(a.kept_indexes),
                                                                     want))
    check(list(b.kept_indexes) == want, "%s: hashes kept %s, want %s" % (what,
                                                                        list(b.kept_indexes), want))
    check(ra == rb, "%s: removed differ: ids %s hashes %s" % (what, ra, rb))
    check((a.removed_played, a.removed_delivered, a.removed_duplicate) ==
          (b.removed_played, b.removed_delivered, b.removed_duplicate),
          "%s: counters differ" % what)
    check(a.removed_played >= 1 and a.removed_delivered >= 1 and a.removed_duplicate >= 2,
          "%s: not every reason met: %s" % (what, a))


def refused(fn, what, want_hash):
    """FN() must fail FAILED_PRECONDITION with WANT_HASH trailing."""
    try:
        fn()
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION,
              "%s: %s %s" % (what, e.code(), e.details()))
        trail = dict(e.trailing_metadata() or ())
        check(trail.get(MD) == want_hash, "%s: trailing %s, want %s" % (what, trail, want_hash))
        return e.details()
    harness.fail("%s: answered, not refused" % what)


def test_fleet():
    t0 = time.time()
    f = fleet.Fleet()
    stubs = [stub(a) for a in f.addrs]
    users = ["fm-user-%d" % i for i in range(12)]
    owner = f.owners(users)
    by_shard = {s: [u for u in users if owner[u] == s] for s in range(2)}
    check(all(len(v) >= 2 for v in by_shard.values()), "users by shard: %s" % by_shard)
    f.produce([(u, "p-%s-%d" % (u, k)) for u in users for k in range(2)])
    for u in users:  # forwarded by node 0 when not its own
        stubs[0].RecordDelivery(pb.RecordDeliveryRequest(user_id=u, item_ids=["d-%s-0" % u,
                                                                               "d-%s-1" % u]),
                                timeout=10)

    def ingested():
        for i in range(4):
            for u in users:
                r = stubs[i].Filter(pb.FilterRequest(user_id=u, candidate_ids=["p-%s-1" % u]),
                                    timeout=10)
                if list(r.kept_ids):
                    return False
        return True
    harness.wait_until("plays ingested on every node", ingested, timeout=60, every=0.1)
    harness.log("fleet ready with plays and deliveries in %.1fs" % (time.time() - t0))

    # ---- 1. compact candidates ---------------------------------------------
    t1 = time.time()
    for i in range(4):
        for u in users:
            ids, want = candidates(u)
            a, b = filter_both(stubs[i], u, ids)
            same_answer(a, b, want, "node %d user %s (owner shard %d)" % (i, u, owner[u]))
    try:
        stubs[1].Filter(pb.FilterRequest(user_id=users[0], candidate_ids=["x"],
                                         candidate_hashes=[1]), timeout=10)
        harness.fail("both candidate lists answered")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "candidate_ids" in e.details()
              and "candidate_hashes" in e.details(), "both lists: %s %s" % (e.code(),
                                                                            e.details()))
    harness.log("1. hashes = ids on 4 nodes x %d users in %.1fs" % (len(users), time.time() - t1))

    # ---- 2. ClusterMap -------------------------------------------------------
    t2 = time.time()
    maps = [s.ClusterMap(pb.ClusterMapRequest(), timeout=10) for s in stubs]
    h = maps[0].map_hash
    check(len(h) == 16 and all(c in "0123456789abcdef" for c in h), "map_hash %r" % h)
    for i, m in enumerate(maps):
        check(m.map_hash == h, "node %d map_hash %s, node 0 %s" % (i, m.map_hash, h))
        check(m.partitioner == "murmur2_random" and m.partition_count == 8,
              "node %d: %s %d" % (i, m.partitioner, m.partition_count))
        check(m.split_from == 0 and m.split_hash == "" and m.max_lag_ms == 3000,
              "node %d split/lag: %s" % (i, m))
        check([s.shard for s in m.shards] == [0, 1], "node %d shards %s" % (i, m.shards))
        addrs = [r.address for s in m.shards for r in s.replicas]
        check(addrs == f.addrs, "node %d addresses %s, want %s" % (i, addrs, f.addrs))
        reps = [r for s in m.shards for r in s.replicas]
        check([r.replica for r in reps] == [0, 1, 0, 1], "node %d replicas %s" % (i, reps))
        check([r.self for r in reps] == [j == i for j in range(4)], "node %d self flags" % i)
    harness.wait_until("every node sees every replica ready", lambda: all(
        all(r.ready for s in st.ClusterMap(pb.ClusterMapRequest(), timeout=10).shards
            for r in s.replicas) for st in stubs), timeout=30, every=0.1)

    def ready_seen_by_0(node):
        m = stubs[0].ClusterMap(pb.ClusterMapRequest(), timeout=10)
        return [r for s in m.shards for r in s.replicas][node].ready
    f.stop(3)
    t_stop = time.time()
    harness.wait_until("node 3 shown not ready", lambda: not ready_seen_by_0(3), timeout=15,
                       every=0.05)
    harness.log("2. a paused node shown not ready after %.2fs (health interval %d ms)"
                % (time.time() - t_stop, f.health_interval_ms))
    f.cont(3)
    harness.wait_until("node 3 ready again", lambda: ready_seen_by_0(3), timeout=30, every=0.05)
    harness.log("2. ClusterMap in %.1fs" % (time.time() - t2))

    # ---- 3. stale maps -------------------------------------------------------
    t3 = time.time()
    md = ((MD, h),)
    fwd0 = f.forwarded_total()
    stale0 = sum(f.metric(i, "dedupd_rpc_stale_map_total") for i in range(4))
    for u in users:
        ids, want = candidates(u)
        for r in range(2):
            own = stubs[f.node_index(owner[u], r)]
            a, b = filter_both(own, u, ids, metadata=md)
            same_answer(a, b, want, "pinned to the owner: user %s replica %d" % (u, r))
            own.RecordDelivery(pb.RecordDeliveryRequest(user_id=u, item_ids=["d-%s-0" % u]),
                               timeout=10, metadata=md)
    check(f.forwarded_total() == fwd0, "calls with the right map were forwarded: %d -> %d"
          % (fwd0, f.forwarded_total()))
    refusals = 0
    for u in users[:4]:
        other = stubs[f.node_index(1 - owner[u], 0)]
        d = refused(lambda: other.Filter(pb.FilterRequest(user_id=u, candidate_ids=["x"]),
                                         timeout=10, metadata=md), "wrong node, Filter", h)
        check("shard %d" % owner[u] in d, "wrong node's message: %s" % d)
        refused(lambda: other.RecordDelivery(pb.RecordDeliveryRequest(user_id=u, item_ids=["x"]),
                                             timeout=10, metadata=md), "wrong node, delivery", h)
        refused(lambda: other.RecordPlays(pb.RecordPlaysRequest(
            user_id=u, plays=[pb.Play(item_id="x")]), timeout=10, metadata=md),
            "wrong node, plays", h)
        refused(lambda: other.ForgetUser(pb.ForgetUserRequest(user_id=u), timeout=10,
                                         metadata=md), "wrong node, forget", h)
        own = stubs[f.node_index(owner[u], 1)]
        bad = "0123456789abcdef" if h != "0123456789abcdef" else "fedcba9876543210"
        refused(lambda: own.Filter(pb.FilterRequest(user_id=u, candidate_ids=["x"]), timeout=10,
                                   metadata=((MD, bad),)), "wrong hash", h)
        refused(lambda: own.Filter(pb.FilterRequest(user_id=u, candidate_ids=["x"]), timeout=10,
                                   metadata=((MD, "nonsense"),)), "not a hash", h)
        refusals += 6
    check(f.forwarded_total() == fwd0, "refused calls were forwarded: %d -> %d"
          % (fwd0, f.forwarded_total()))
    stale1 = sum(f.metric(i, "dedupd_rpc_stale_map_total") for i in range(4))
    check(stale1 - stale0 == refusals, "dedupd_rpc_stale_map_total went %d -> %d, want +%d"
          % (stale0, stale1, refusals))
    # Upper-case hex is the same hash.
    u = by_shard[0][0]
    stubs[f.node_index(0, 0)].Filter(pb.FilterRequest(user_id=u, candidate_ids=["x"]),
                                     timeout=10, metadata=((MD, h.upper()),))
    # Without the metadata: forwarded as before.
    stubs[f.node_index(1, 0)].Filter(pb.FilterRequest(user_id=u, candidate_ids=["x"]),
                                     timeout=10)
    check(f.forwarded_total() == fwd0 + 1, "a call without the metadata was not forwarded")
    harness.log("3. stale maps in %.1fs" % (time.time() - t3))


def test_single():
    t = time.time()
    redis = harness.Redis()
    dd = Dedupd(redis.addr)
    st = stub(dd.addr)
    m = st.ClusterMap(pb.ClusterMapRequest(), timeout=10)
    check(len(m.map_hash) == 16 and m.partitioner == "murmur2_random" and
          m.partition_count == 0 and m.split_from == 0, "single map: %s" % m)
    check(len(m.shards) == 1 and m.shards[0].shard == 0 and len(m.shards[0].replicas) == 1,
          "single shards: %s" % m)
    r = m.shards[0].replicas[0]
    check(r.self and r.ready and r.replica == 0 and r.address == dd.addr,
          "single replica: %s (addr %s)" % (r, dd.addr))
    u = "solo"
    st.RecordPlays(pb.RecordPlaysRequest(user_id=u, plays=[pb.Play(item_id="p-%s-%d" % (u, k))
                                                           for k in range(2)]), timeout=10)
    st.RecordDelivery(pb.RecordDeliveryRequest(user_id=u, item_ids=["d-%s-0" % u,
                                                                    "d-%s-1" % u]), timeout=10)
    ids, want = candidates(u)
    a, b = filter_both(st, u, ids)
    same_answer(a, b, want, "single node")
    a, b = filter_both(st, u, ids, metadata=((MD, m.map_hash),))
    same_answer(a, b, want, "single node, pinned")
    refused(lambda: st.Filter(pb.FilterRequest(user_id=u, candidate_ids=["x"]), timeout=10,
                              metadata=((MD, "00000000000000ff"),)), "single, wrong hash",
            m.map_hash)
    dd.stop()
    harness.log("4. single node in %.1fs" % (time.time() - t))


if __name__ == "__main__":
    start = time.time()
    test_single()
    test_fleet()
    harness.log("PASS in %.1fs" % (time.time() - start))
