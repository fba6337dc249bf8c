/* SPDX-License-Identifier: Apache-2.0
 *
 * cluster_map.h - the static cluster map ([cluster] in conf/dedupd.conf):
 * its settings and their checks (the forwarding cap's against the call
 * slots included), the parsed map with this node's place in
 * it (cluster.shard = auto included), which shard owns a user, the hashes
 * nodes compare, and how two maps relate while resharding. Pure functions
 * of the configuration and the partition count: no I/O but the host name,
 * no threads, no grpc. The running cluster (peers' states, routing) is
 * cluster.h's. Knows nothing of peers, RocksDB, Redis or librdkafka.
 *
 * DESIGN
 *
 * Ownership: plays are keyed by user id, so a partition holds whole users;
 *   with N shards, shard s owns the partitions p with p mod N = s, and a
 *   user belongs to the shard of partition(user) as the producers'
 *   partitioner computes it (partition.h). The map (shards, each shard's
 *   replicas' addresses, the partitioner) is static configuration. The
 *   hash of what decides ownership (shards, partitioner) travels with
 *   every forwarded call and status probe, so two nodes that would answer
 *   for each other's users find out and refuse. Node lists may differ for
 *   a while (replicas being added, one pod at a time): their own hash only
 *   shows it.
 */
#ifndef DD_CLUSTER_MAP_H
#define DD_CLUSTER_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The cluster's settings ([cluster] in conf/dedupd.conf). */
struct dd_cluster_conf {
    uint32_t shards;     /* N; 1 with one node = a single node, no cluster */
    char *shard;         /* this node's shard, "0".."N-1", or "auto" (dd_cluster_conf_check) */
    char *replica;       /* its index in the shard's replicas, or "auto" */
    char *nodes;         /* "a:1,b:1;c:1,d:1": shards by ';', replicas by ',' */
    char *partitioner;   /* the producers' partitioner, librdkafka's name */
    char *redis;         /* "a:6379;b:6379": each shard's Redis, by shard; "" = recent.redis */
    uint32_t max_lag_ms; /* a replica further behind is "behind" */
    uint32_t health_interval_ms;   /* how often each peer is probed */
    uint32_t forward_timeout_ms;   /* a forwarded call's deadline when the caller's is later */
    uint32_t max_forward_inflight; /* calls forwarded to one shard in flight at once on this
                                    * node; 0 = auto (dd_cluster_forward_cap) */
    char *tls_ca;                  /* PEM roots to verify peers by; "" = rpc.tls_client_ca,
                                 * else rpc.tls_cert itself */
    char *tls_server_name;         /* name peers' certificates are checked against; "" = the
                                 * host of the peer's address */
    char *forget_key_file;         /* the secret forget markers are signed with (marker.h);
                                 * required in a cluster; "" = none (a single node then
                                 * applies no marker from the topic) */
    char *bootstrap;               /* "none", or "peer": an empty store is first copied from a
                                 * live replica of this shard (snapshot.h) */
    uint32_t snapshot_mbps;        /* this node lends its store at most this fast; 0 = no limit */
    uint32_t snapshot_max_age_s;   /* a checkpoint lent for copies is released this long
                                  * after it was made, however often it is read */
    uint32_t split_from;           /* resharding: this map splits one of that many shards
                                 * (0 = none); see "Resharding" below */
    uint32_t split_replicas;       /* auto with split_from: the replicas per shard when the
                                 * split was made (dd_cluster_auto_place); 0 = not set */
};

/* The limits of the map. */
#define DD_CLUSTER_MAX_SHARDS 1024
#define DD_CLUSTER_MAX_REPLICAS 16

/* The parsed map, with this node's place in it. Owned by whoever parsed it;
 * dd_cluster_map_free releases it. */
struct dd_cluster_map {
    uint32_t shards;
    uint32_t shard, replica; /* this node */
    uint32_t *nreplicas;     /* [shard] */
    char ***addr;            /* [shard][replica], host:port */
    int partitioner;         /* enum dd_partitioner (partition.h) */
    uint64_t hash;           /* ownership: of shards and partitioner; nodes that differ
                                 * here refuse each other */
    uint64_t nodes_hash;     /* of the node list: may differ while replicas are added */
    uint32_t split_from;     /* cluster.split_from; 0 = none */
    uint64_t split_hash;     /* the ownership hash of the map it splits; 0 = none */
};

/* Whether CONF describes a cluster (more than one shard or replica) rather
 * than today's single node. Only meaningful after dd_cluster_conf_check. */
bool dd_cluster_enabled(const struct dd_cluster_conf *conf);

/* Check CONF alone and parse it into MAP (NULL: check only): cluster.nodes
 * has exactly cluster.shards shards, each with 1..DD_CLUSTER_MAX_REPLICAS
 * host:port entries, no address twice; cluster.shard/replica are numbers
 * inside the map or "auto", which takes this node's place from HOSTNAME's
 * trailing "-ORDINAL" (a StatefulSet pod, "dedupd-5"), replica-major:
 * shard = ordinal mod N, replica = ordinal / N, with the same number of
 * replicas R in every shard (dd_cluster_auto_place: adding replicas
 * appends pods and moves none; with cluster.split_from, also
 * cluster.split_replicas, required); a known partitioner;
 * cluster.redis empty or one host:port per shard. With
 * cluster.shards = 1 and cluster.nodes empty, the single node: MAP gets
 * one shard of one replica with an empty address. HOSTNAME NULL = the
 * system's. Returns 0 or DD_ERR_INVALID (message names the key) or
 * DD_ERR_NOMEM. */
int dd_cluster_conf_check(const struct dd_cluster_conf *conf, const char *hostname,
                          struct dd_cluster_map *map, char *err, size_t errlen);
void dd_cluster_map_free(struct dd_cluster_map *map);

/* cluster.shard = auto: the place of StatefulSet pod ORDINAL in a map of
 * SHARDS shards of REPLICAS replicas each. Without a split (SPLIT_FROM 0)
 * replica-major: shard = ordinal mod N, replica = ordinal / N. With
 * SPLIT_FROM = M and SPLIT_REPLICAS = R0 (the replicas per shard when the
 * split was made, 1..REPLICAS): ordinals below M x R0 keep their places of
 * the M-shard map, the next (N - M) x R0 take shards M..N-1 replica-major,
 * and those after take replicas R0.. of every shard replica-major, so that
 * neither the split nor adding replicas after it moves a pod. Returns 0,
 * or DD_ERR_INVALID when ORDINAL >= N x REPLICAS or the arguments do not
 * describe such a map. */
int dd_cluster_auto_place(uint32_t shards, uint32_t replicas, uint32_t split_from,
                          uint32_t split_replicas, uint32_t ordinal, uint32_t *shard,
                          uint32_t *replica);

/* cluster.redis's entry for SHARD into OUT (true), or false when
 * cluster.redis is "" (recent.redis applies). CONF passed
 * dd_cluster_conf_check. */
bool dd_cluster_shard_redis(const struct dd_cluster_conf *conf, uint32_t shard, char *out,
                            size_t outlen);

/* The map's hash as 16 lower-case hex digits and a NUL. */
void dd_cluster_map_hash_hex(const struct dd_cluster_map *map, char out[17]);
/* The hash of the map MAP splits (cluster.split_from), the same way; ""
 * when it splits none. */
void dd_cluster_map_split_hex(const struct dd_cluster_map *map, char out[17]);

/* ---- resharding --------------------------------------------------------
 *
 * N -> kN shards (k >= 2; 2N in practice) without a new generation: shard
 * s of kN owns the partitions p with p mod kN = s, a subset of shard
 * s mod N's under N. The new map sets cluster.split_from = N and keeps
 * every old node at its shard number; the new shards' nodes copy a store
 * of their parent shard s mod N (cluster.bootstrap = peer) and then
 * consume only their own partitions from the offsets inside it. While old
 * and new maps run side by side they are peers, not strangers: a node
 * accepts calls and probes from a map its own splits (older) or from one
 * that splits its own (newer, recognised by the split hash it sends).
 * Each node routes by its own map, so every call reaches a node that
 * holds the user: an old node holds every user of its old shard, a new
 * one its own. A call a node of the older map forwarded to a node of the
 * newer map that does not own it under the newer map is forwarded once
 * more (forward.h). Once no peer runs another map, each node drops the users
 * it no longer owns (dd_cluster_owns, sweep.h). */

/* A 64-bit id of the users node (SHARD of MAP) owns: shards, shard and
 * partitioner. A store records the id it holds (history.h holds). */
uint64_t dd_cluster_ownership_id(const struct dd_cluster_map *map);

/* The shard a node of MAP with an empty store copies when no other
 * replica of its own shard lends it a store: for a new shard of a split
 * (shard >= split_from) its parent shard, shard mod split_from; else its
 * own. Cannot fail. */
uint32_t dd_cluster_source_shard(const struct dd_cluster_map *map);

/* Which shard owns user USER[0..LEN) when the topic has PARTITIONS
 * partitions (> 0): partition(user) mod shards. Sets *partition if not NULL. */
uint32_t dd_cluster_shard_of(const struct dd_cluster_map *map, const char *user, size_t len,
                             int32_t partitions, int32_t *partition);

/* The per-shard cap cluster.max_forward_inflight gives, or its automatic
 * value (0): half of a method's call slots on this node (THREADS x
 * PREPOST, rpc.h) shared by the other shards, at least 1. So while
 * other shards' replicas are slow, this node's own calls find a slot.
 * Cannot fail. */
uint32_t dd_cluster_forward_cap(uint32_t conf_value, uint32_t shards, uint32_t threads,
                                uint32_t prepost);

/* Check cluster.max_forward_inflight (VALUE) against the call slots of a
 * method (THREADS x PREPOST): with SHARDS shards, every other shard's cap
 * together must leave this node at least one slot of its own. 0 (auto)
 * always passes. Returns 0 or DD_ERR_INVALID with a message naming the
 * key. */
int dd_cluster_forward_cap_check(uint32_t value, uint32_t shards, uint32_t threads,
                                 uint32_t prepost, char *err, size_t errlen);

/* How a peer's map relates to ours. */
enum dd_cluster_relation {
    DD_MAP_SAME = 0, /* the same ownership */
    DD_MAP_OLDER,    /* the map ours splits (cluster.split_from): resharding */
    DD_MAP_NEWER,    /* a map that splits ours: resharding */
    DD_MAP_OTHER,    /* a stranger: refused */
};

#endif
