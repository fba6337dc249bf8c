/* SPDX-License-Identifier: Apache-2.0
 *
 * cluster.h - the running cluster: the peers' states and the health
 * thread that keeps them, where a call for a user goes and which replica
 * of another shard it is forwarded to, the caps on calls forwarded at
 * once, readiness, and the cluster's metrics. The map itself (settings,
 * a user's shard, the hashes) is cluster_map.h's; the channels to peers
 * and the call on them are peer.h's; forwarding itself (the asynchronous
 * client call) is forward.h's; the /cluster page is cluster_page.h's; which
 * partitions ingest consumes is ingest.h's. Knows nothing of RocksDB,
 * Redis or librdkafka.
 *
 * DESIGN
 *
 * Map checks: the ownership hash (cluster_map.h) travels with every
 *   forwarded call and status probe, so two nodes that would answer for
 *   each other's users find out and refuse; a probe also checks that the
 *   peer at an address is the shard the map says. Node lists may differ
 *   for a while (replicas being added, one pod at a time): that only
 *   changes where a node forwards, and is shown, not refused.
 * Peers: one grpc channel per peer (peer.h), shared by every worker (grpc
 *   channels are thread-safe). A health thread asks every peer's
 *   dedup.v1.Cluster/Status each cluster.health_interval_ms: up or down,
 *   ingest lag, map hash. Replica choice reads those states without a
 *   lock (relaxed atomics): caught-up replicas first (round robin), then
 *   replicas that are behind (the answer is then degraded), then replicas
 *   the last probe found down (the probe may be stale). Peer channels are
 *   bounded (peer.h: receive limits sized to each method, a memory quota
 *   each), and whatever a peer or caller says is shown or logged only
 *   through dd_sanitize (dd.h).
 * Lifecycle: dd_cluster_new (channels) -> dd_cluster_start (health
 *   thread) -> dd_cluster_stop -> dd_cluster_free, from main's thread;
 *   everything else from any thread.
 */
#ifndef DD_CLUSTER_H
#define DD_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "api.h"
#include "cluster_map.h"
#include "metrics.h"
#include "peer.h"

/* ---- the running cluster ------------------------------------------------ */

typedef struct dd_cluster dd_cluster;

/* What the cluster asks of this node's ingest (main wires ingest.h). Each
 * function may be NULL (unknown) and is called from any thread. */
struct dd_cluster_local {
    int32_t (*partitions)(void *ud);      /* the topic's partition count, 0 = not known yet */
    bool (*partitions_changed)(void *ud); /* the count changed while running */
    int64_t (*lag_ms)(void *ud);          /* this node's ingest lag, -1 = unknown */
    void *ud;
};

/* Build the running cluster for MAP (taken over: freed with the cluster)
 * and CONF: one channel per peer (peer.h, DD_PEER_CLUSTER, built from
 * PEER), created now (connections open lazily). THREADS x PREPOST
 * (rpc.threads, rpc.prepost) are a method's call slots, which the calls
 * forwarded at once share (dd_cluster_forward_begin). Returns 0,
 * DD_ERR_INVALID (unreadable TLS file) or DD_ERR_NOMEM. */
int dd_cluster_new(dd_cluster **out, struct dd_cluster_map *map, const struct dd_cluster_conf *conf,
                   const struct dd_peer_conf *peer, uint32_t threads, uint32_t prepost,
                   const struct dd_cluster_local *local, char *err, size_t errlen);
int dd_cluster_start(dd_cluster *cl, char *err, size_t errlen);
void dd_cluster_stop(dd_cluster *cl);
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
    DD_FWD_OK = 0,      /* the peer answered (any status but UNAVAILABLE) */
    DD_FWD_UNAVAILABLE, /* UNAVAILABLE or no connection: the next replica was tried */
    DD_FWD_DEADLINE,    /* the caller's deadline passed */
    DD_FWD_CANCELLED,   /* the caller went away */
    DD_FWD_TOO_LARGE,   /* the reply was over the receive limit: the next replica
                             * was tried (counted in dedupd_cluster_peer_oversized_total too) */
    DD_FWD_OUTCOME_COUNT
};
/* "ok", "unavailable", ... as dedupd_cluster_forwarded_total labels O;
 * "unknown" outside the enum. Static. */
const char *dd_cluster_outcome_name(enum dd_cluster_outcome o);
void dd_cluster_forwarded(dd_cluster *cl, uint32_t shard, int replica,
                          enum dd_cluster_outcome outcome, int64_t ns);

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
    char split_hash[17]; /* "" when this map splits none */
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

/* The metadata keys of a forwarded call (DD_CLUSTER_MD_*) are api.h's:
 * auth.h judges a call that carries one. */

/* A metrics.h collector for UD (a dd_cluster *): dedupd_cluster_*. */
void dd_cluster_collect(dd_prom *p, void *ud);

/* ---- the operator's view (cluster_page.h) --------------------------- */

/* One node of the map as this node last saw it. */
struct dd_cluster_node {
    uint32_t shard, replica;
    const char *addr;                  /* the map's; lives as long as the cluster */
    const char *label;                 /* "s.r"; lives as long as the cluster */
    bool self;                         /* this node: the fields below are not set */
    const char *state;                 /* "up", "down" or "unknown", from the last probe */
    bool ready;                        /* the peer's own readiness */
    bool mismatch;                     /* it would own other users than our map says */
    enum dd_cluster_relation relation; /* of its map, when not a mismatch */
    bool nodes_differ;                 /* it lists other nodes */
    int64_t lag_ms;                    /* as it last reported it; -1 unknown */
    int64_t last_ok_ms;                /* wall clock of the last answered probe; 0 never */
    int32_t partitions;                /* the partition count it sees; 0 unknown */
    uint64_t forwarded[DD_FWD_OUTCOME_COUNT];
    uint64_t oversized; /* replies over a receive limit */
    char why[160];      /* the last probe's finding, sanitized */
};

/* The number of nodes in the map (this one included); node I of them
 * (shard-major) into *OUT. Relaxed loads: each field is as fresh as the
 * last health round. Cannot fail. */
size_t dd_cluster_node_count(const dd_cluster *cl);
void dd_cluster_node_get(dd_cluster *cl, size_t i, struct dd_cluster_node *out);

/* The replica of SHARD a call would go to now (as dd_cluster_pick, no
 * counter moved, nothing tried yet): its index, or -1 when none would
 * take it; *DEGRADED when it is behind or down. Cannot fail. */
int dd_cluster_peek(dd_cluster *cl, uint32_t shard, bool *degraded);

/* cluster.max_lag_ms. */
int64_t dd_cluster_max_lag_ms(const dd_cluster *cl);

#endif
