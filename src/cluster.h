/* SPDX-License-Identifier: Apache-2.0
 *
 * cluster.h - shards and replicas on Kafka partitions: the static cluster
 * map ([cluster] in conf/dedupd.conf), which shard owns a user, the peers'
 * gRPC channels and states, and which replica a call for another shard
 * goes to. Forwarding itself (the asynchronous client call) is rpc.c's;
 * which partitions ingest consumes is ingest.h's. Knows nothing of
 * RocksDB, Redis or librdkafka.
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
 *   for each other's users find out and refuse; a probe also checks that
 *   the peer at an address is the shard the map says. Node lists may
 *   differ for a while (replicas being added, one pod at a time): that
 *   only changes where a node forwards, and is shown, not refused.
 * Peers: one grpc channel per peer, shared by every worker (grpc channels
 *   are thread-safe). A health thread asks every peer's
 *   dedup.v1.Cluster/Status each cluster.health_interval_ms: up or down,
 *   ingest lag, map hash. Replica choice reads those states without a
 *   lock (relaxed atomics): caught-up replicas first (round robin), then
 *   replicas that are behind (the answer is then degraded), then replicas
 *   the last probe found down (the probe may be stale). Peer channels are
 *   bounded (receive limits sized to each method, a memory quota each:
 *   "receive limits" below), and whatever a peer or caller says is shown
 *   or logged only through dd_sanitize (dd.h).
 * Lifecycle: dd_cluster_new (parse, channels) -> dd_cluster_start (health
 *   thread) -> dd_cluster_stop -> dd_cluster_free, from main's thread;
 *   everything else from any thread.
 */
#ifndef DD_CLUSTER_H
#define DD_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

#include <grpc/grpc.h>

/* The cluster's settings ([cluster] in conf/dedupd.conf). */
struct dd_cluster_conf {
    uint32_t shards;            /* N; 1 with one node = a single node, no cluster */
    char *shard;                /* this node's shard, "0".."N-1", or "auto" (dd_cluster_conf_check) */
    char *replica;              /* its index in the shard's replicas, or "auto" */
    char *nodes;                /* "a:1,b:1;c:1,d:1": shards by ';', replicas by ',' */
    char *partitioner;          /* the producers' partitioner, librdkafka's name */
    char *redis;                /* "a:6379;b:6379": each shard's Redis, by shard; "" = recent.redis */
    uint32_t max_lag_ms;        /* a replica further behind is "behind" */
    uint32_t health_interval_ms; /* how often each peer is probed */
    uint32_t forward_timeout_ms; /* a forwarded call's deadline when the caller's is later */
    uint32_t max_forward_inflight; /* calls forwarded to one shard in flight at once on this
                                    * node; 0 = auto (dd_cluster_forward_cap) */
    char *tls_ca;               /* PEM roots to verify peers by; "" = rpc.tls_client_ca,
                                 * else rpc.tls_cert itself */
    char *tls_server_name;      /* name peers' certificates are checked against; "" = the
                                 * host of the peer's address */
    char *forget_key_file;      /* the secret forget markers are signed with (marker.h);
                                 * required in a cluster; "" = none (a single node then
                                 * applies no marker from the topic) */
    char *bootstrap;            /* "none", or "peer": an empty store is first copied from a
                                 * live replica of this shard (snapshot.h) */
    uint32_t snapshot_mbps;     /* this node lends its store at most this fast; 0 = no limit */
    uint32_t snapshot_max_age_s; /* a checkpoint lent for copies is released this long
                                  * after it was made, however often it is read */
    uint32_t split_from;        /* resharding: this map splits one of that many shards
                                 * (0 = none); see "Resharding" below */
    uint32_t split_replicas;    /* auto with split_from: the replicas per shard when the
                                 * split was made (dd_cluster_auto_place); 0 = not set */
};

/* The limits of the map. */
#define DD_CLUSTER_MAX_SHARDS 1024
#define DD_CLUSTER_MAX_REPLICAS 16

/* The parsed map, with this node's place in it. Owned by whoever parsed it;
 * dd_cluster_map_free releases it. */
struct dd_cluster_map {
    uint32_t shards;
    uint32_t shard, replica;    /* this node */
    uint32_t *nreplicas;        /* [shard] */
    char ***addr;               /* [shard][replica], host:port */
    int partitioner;            /* enum dd_partitioner (partition.h) */
    uint64_t hash;              /* ownership: of shards and partitioner; nodes that differ
                                 * here refuse each other */
    uint64_t nodes_hash;        /* of the node list: may differ while replicas are added */
    uint32_t split_from;        /* cluster.split_from; 0 = none */
    uint64_t split_hash;        /* the ownership hash of the map it splits; 0 = none */
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
 * more (rpc.c). Once no peer runs another map, each node drops the users
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

/* ---- the running cluster ------------------------------------------------ */

typedef struct dd_cluster dd_cluster;

/* What the cluster asks of this node's ingest (main wires ingest.h). Each
 * function may be NULL (unknown) and is called from any thread. */
struct dd_cluster_local {
    int32_t (*partitions)(void *ud);     /* the topic's partition count, 0 = not known yet */
    bool (*partitions_changed)(void *ud);/* the count changed while running */
    int64_t (*lag_ms)(void *ud);         /* this node's ingest lag, -1 = unknown */
    void *ud;
};

struct dd_rpc_conf;

/* Build the running cluster for MAP (taken over: freed with the cluster)
 * and CONF; RPC gives the TLS files (peers are called over TLS with
 * rpc.tls_cert/rpc.tls_key as client certificate when rpc.tls_cert is
 * set: the peers' rpc.allow_peer names its identity, auth.h). One channel per peer, created now (connections open lazily).
 * Returns 0, DD_ERR_INVALID (unreadable TLS file) or DD_ERR_NOMEM. */
int dd_cluster_new(dd_cluster **out, struct dd_cluster_map *map,
                   const struct dd_cluster_conf *conf, const struct dd_rpc_conf *rpc,
                   const struct dd_cluster_local *local, char *err, size_t errlen);
int dd_cluster_start(dd_cluster *cl, char *err, size_t errlen);

/* A channel to peer ADDR with the credentials and settings dd_cluster_new
 * gives its own, for a copy before the cluster runs (snapshot.h): its
 * receive limits are those of SnapshotBegin (dd_cluster_manifest_reply_max)
 * and SnapshotRead (dd_cluster_chunk_reply_max). NULL with a message in
 * err. Destroy with grpc_channel_destroy. */
grpc_channel *dd_cluster_channel_new(const struct dd_cluster_conf *conf,
                                     const struct dd_rpc_conf *rpc, const char *addr, char *err,
                                     size_t errlen);
void dd_cluster_stop(dd_cluster *cl);

/* Receive limits of peer channels (a reply over one fails the call in
 * grpc, RESOURCE_EXHAUSTED, and is a failed attempt of that peer): the
 * largest FilterResponse this node could produce for a request of
 * MAX_CANDIDATES ids of at most MAX_ID_BYTES each (rpc.max_candidates,
 * rpc.max_id_bytes; SIZE_MAX on overflow), the largest SnapshotManifest
 * (DD_SNAPSHOT_FILES_MAX files) and the largest SnapshotChunk
 * (DD_SNAPSHOT_CHUNK_MAX bytes). Status and the other forwarded methods'
 * replies are limited to a few KiB. In bytes of the encoded message. */
size_t dd_cluster_filter_reply_max(uint32_t max_candidates, uint32_t max_id_bytes);
size_t dd_cluster_manifest_reply_max(void);
size_t dd_cluster_chunk_reply_max(void);

/* Whether a call to a peer failed because its reply was over the channel's
 * receive limit or its memory quota (grpc's RESOURCE_EXHAUSTED "Received
 * message larger than max" or "Buffers full"). Cannot fail. */
bool dd_cluster_reply_too_large(grpc_status_code status, grpc_slice details);
void dd_cluster_free(dd_cluster *cl);

const struct dd_cluster_map *dd_cluster_get_map(const dd_cluster *cl);
/* cluster.forward_timeout_ms. */
int64_t dd_cluster_forward_timeout_ms(const dd_cluster *cl);

/* Where a call for USER goes. Returns 0 and sets *shard (and *local when
 * this node's shard); DD_ERR_UNAVAILABLE with a message when the
 * partition count is not known yet or has changed (the node must not
 * guess); DD_ERR_STATE when this node is the odd one out about the map
 * (dd_cluster_ready): it refuses every call rather than answer for users
 * its peers think are theirs. */
int dd_cluster_route(dd_cluster *cl, const char *user, size_t len, uint32_t *shard, bool *local,
                     char *err, size_t errlen);

/* A replica of SHARD to forward to, never this node, skipping the
 * replicas in the bit set *TRIED (which gets the choice added); with
 * GOOD_ONLY only a caught-up one. Returns the peer's index in the shard,
 * or -1 when none is left. *BEHIND: the replica was behind (or down) when
 * chosen, so the answer must say degraded. *CHANNEL is the peer's channel
 * (borrowed, lives as long as CL). */
int dd_cluster_pick(dd_cluster *cl, uint32_t shard, bool good_only, uint32_t *tried,
                    grpc_channel **channel, bool *behind);

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

/* Take one of SHARD's forwarded-call places before forwarding a call to
 * it. Returns 0 (the caller gives it back with dd_cluster_forward_end
 * once the call ended, whatever the outcome, retries included) or
 * DD_ERR_UNAVAILABLE with a message naming the shard, without waiting:
 * SHARD already has the cap's calls in flight from this node
 * (cluster.max_forward_inflight), or calls to all shards together hold
 * all but one of a method's slots (THREADS x PREPOST), or every replica of it (but this node)
 * went unanswered at the last health round (no connection, or no answer
 * within the probe's deadline: a stopped node), until a round reaches
 * one; a replica that answered with an error is still called. Each
 * refusal is counted (dedupd_cluster_forward_refused_total). Lock-free;
 * from any thread. */
int dd_cluster_forward_begin(dd_cluster *cl, uint32_t shard, char *err, size_t errlen);
void dd_cluster_forward_end(dd_cluster *cl, uint32_t shard);

/* Whether this node's own ingest was more than cluster.max_lag_ms behind
 * (or its lag unknown) at the last health round: its own shard's calls
 * then go to a caught-up replica if there is one, else are answered here
 * as degraded. A relaxed load; cannot fail. */
bool dd_cluster_self_behind(const dd_cluster *cl);

/* How a forwarded call ended, for /metrics. */
enum dd_cluster_outcome {
    DD_FWD_OK = 0,          /* the peer answered (any status but UNAVAILABLE) */
    DD_FWD_UNAVAILABLE,     /* UNAVAILABLE or no connection: the next replica was tried */
    DD_FWD_DEADLINE,        /* the caller's deadline passed */
    DD_FWD_CANCELLED,       /* the caller went away */
    DD_FWD_TOO_LARGE,       /* the reply was over the receive limit: the next replica
                             * was tried (counted in dedupd_cluster_peer_oversized_total too) */
    DD_FWD_OUTCOME_COUNT
};
void dd_cluster_forwarded(dd_cluster *cl, uint32_t shard, int replica,
                          enum dd_cluster_outcome outcome, int64_t ns);

/* How a peer's map relates to ours. */
enum dd_cluster_relation {
    DD_MAP_SAME = 0,     /* the same ownership */
    DD_MAP_OLDER,        /* the map ours splits (cluster.split_from): resharding */
    DD_MAP_NEWER,        /* a map that splits ours: resharding */
    DD_MAP_OTHER,        /* a stranger: refused */
};

/* A forwarded call or a status probe carries the sender's map hash and
 * the hash of the map it splits ("" none); 0 when they are the same map
 * or one splits the other (*REL, may be NULL, says which), else
 * DD_ERR_STATE with a message (counted, logged at most every few
 * seconds, and shown by dd_cluster_degraded for a while). */
int dd_cluster_check_peer_map(dd_cluster *cl, const char *hash_hex, const char *split_hex,
                              const char *from, enum dd_cluster_relation *rel, char *err,
                              size_t errlen);

/* Whether this node keeps USER's history (the compaction filter asks:
 * history.h dd_history_set_owner). False only while ownership is
 * settled (dd_cluster_settled) and USER belongs to another shard; true
 * whenever anything is unknown, so that nothing is dropped on a guess.
 * Lock-free; from any thread; reads only CL's own memory (never ingest's),
 * so it may be called until dd_cluster_free, after dd_cluster_stop. */
bool dd_cluster_owns(void *cl, const char *user, size_t len);

/* Settled: the partition count is known and unchanged, and at the last
 * health round every peer answered with this node's own map (none
 * older, newer or other). *ROUNDS (may be NULL) counts the rounds that
 * were not settled since start: a sweep that saw it unchanged before and
 * after ran settled throughout. */
bool dd_cluster_settled(dd_cluster *cl, uint64_t *rounds);

/* This node's own state, as Status answers it. */
struct dd_cluster_self {
    uint32_t shard, replica;
    char map_hash[17];
    char split_hash[17];     /* "" when this map splits none */
    char nodes_hash[17];
    bool ready;
    int64_t lag_ms;          /* -1 unknown */
    int32_t partition_count; /* 0 unknown */
    char why[320];           /* when not ready */
};
void dd_cluster_get_self(dd_cluster *cl, struct dd_cluster_self *out);

/* Ready for the cluster (admin.h's probe): the partition count is known
 * and unchanged, this node is not the odd one out about the map (fewer
 * peers disagree with it than agree), and its ingest is within
 * cluster.max_lag_ms. Else false with WHY. */
bool dd_cluster_ready(dd_cluster *cl, char *why, size_t whylen);

/* Ready but something is off (admin.h's degraded check): a peer of the
 * map disagrees about it (and is not forwarded to), a peer runs the map
 * this one splits or one that splits it (resharding in progress), or a
 * caller with another map was refused in the last few health intervals. */
bool dd_cluster_degraded(dd_cluster *cl, char *why, size_t whylen);

/* The metadata keys of a forwarded call: the sender's place ("s.r") and
 * its map hash. A call that carries DD_CLUSTER_MD_FROM is never forwarded
 * again, but once while resharding (see "resharding" above). Every header
 * a node sends is named "dedupd-...": a call carrying one is judged by
 * rpc.allow_peer (auth.h), so a client that is not a peer cannot pose as a
 * forwarding node. */
#define DD_CLUSTER_MD_FROM "dedupd-forwarded-by"
#define DD_CLUSTER_MD_MAP "dedupd-cluster-map"
/* The hash of the map the sender's splits (resharding), when it has one. */
#define DD_CLUSTER_MD_SPLIT "dedupd-cluster-split"
/* Set on a call forwarded a second time (resharding): never forwarded
 * again. */
#define DD_CLUSTER_MD_HOP2 "dedupd-forwarded-twice"

/* One unary client call to a peer, as one batch: send metadata MD[0..NMD),
 * the message SEND (borrowed; kept by the caller until the batch
 * completes) and close; receive metadata, the answer (RECV, owned here)
 * and the status. Used by the health probes and by rpc.c's forwarding. */
struct dd_unary {
    const grpc_metadata *md;
    size_t nmd;
    uint32_t flags;             /* GRPC_INITIAL_METADATA_* of the send (wait for ready) */
    grpc_byte_buffer *send;
    grpc_metadata_array md_in, trailers;
    grpc_byte_buffer *recv;
    grpc_status_code status;
    grpc_slice details;
};
/* Empty U (no allocation); dd_unary_reset releases what a finished batch
 * left in it and empties it again. Cannot fail. */
void dd_unary_init(struct dd_unary *u);
void dd_unary_reset(struct dd_unary *u);
/* Start U's batch on CALL with TAG; grpc's result. */
grpc_call_error dd_unary_start(grpc_call *call, struct dd_unary *u, void *tag);

/* A metrics.h collector for UD (a dd_cluster *): dedupd_cluster_*. */
void dd_cluster_collect(dd_prom *p, void *ud);

/* The map and every peer's last known state as JSON (admin /cluster,
 * dedupctl cluster), into a malloc'd string (*out); NULL on no memory. */
char *dd_cluster_describe(dd_cluster *cl);

#endif
