/* SPDX-License-Identifier: Apache-2.0
 *
 * owner.h - whose store it is: the ownership a store serves (topic,
 * partition count, partitioner, shards, shard, and the map it splits),
 * recorded in the store when it is created and checked at every open, so
 * that a swapped volume, a pod whose place moved or a store carried to
 * another deployment is refused instead of served as if it were this
 * node's.
 *
 * DESIGN
 *
 * The record (dd_owner_encode/decode, no I/O) is a versioned, checksummed
 * value under the store's reserved key 00 00 00 'M' (history.h holds):
 *
 *   "DDOW" | u8 version (1) | u8 topic length | topic | u32 partitions |
 *   u8 partitioner | u32 shards | u32 shard | u32 split_from | u64 XXH3-64
 *   of every byte before it; integers big-endian.
 *
 * It comes from disk, so every field is checked when read back. The
 * previous release kept an 8-byte id under the same key (cluster_map.h
 * dd_cluster_ownership_id) in cluster stores only, and no record in
 * single-node stores.
 *
 * The guard (dd_owner_guard_*) decides at open, once the store is open and
 * before anything serves from it:
 *   - a store this open created: the configuration's ownership is
 *     recorded;
 *   - the same ownership: served;
 *   - the parent of this node's split map (cluster.split_from: shards =
 *     split_from and shard = this shard mod split_from): served, and the
 *     sweep (sweep.h) drops the other shards' users and then records this
 *     node's ownership (dd_owner_guard_swept);
 *   - no record (only a store of the previous release has none), or its
 *     8-byte id equal to this node's: adopted once, with a log line;
 *   - anything else (another topic, partitioner, shard count or shard, a
 *     record that fails its checks): REFUSED. The node then serves nothing
 *     from the store: /readyz 503 and every gRPC call UNAVAILABLE
 *     (health: NOT_SERVING), both naming the two ownerships; dedupd_history_ownership_mismatch 1; the
 *     record is left as it is. Only an operator's take-over (dedupd
 *     --take-over, for one start) records this node's ownership instead.
 * The partition count is not known at open (ingest learns it from the
 * broker): a record without one gets it the first time it is known
 * (dd_owner_guard_partitions), and one that differs is refused then.
 *
 * Threads: new and free from main; dd_owner_guard_refused and the
 * collector from any thread (an atomic flag; the message is written once
 * before the flag is set); dd_owner_guard_partitions from ingest's watch
 * thread and dd_owner_guard_swept from the sweep's (one mutex).
 */
#ifndef DD_OWNER_H
#define DD_OWNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "history.h"
#include "metrics.h"

/* An ownership. */
struct dd_owner {
    char topic[DD_TOPIC_MAX + 1]; /* ingest.topic */
    int32_t partitions;           /* the topic's partition count; 0 = not known yet */
    int partitioner;              /* enum dd_partitioner (partition.h) */
    uint32_t shards, shard;       /* 1 and 0 for a single node */
    uint32_t split_from;          /* cluster.split_from; 0 = none */
};

#define DD_OWNER_VERSION 1
/* The largest encoded record. */
#define DD_OWNER_RECORD_MAX (4 + 1 + 1 + DD_TOPIC_MAX + 4 + 1 + 4 + 4 + 4 + 8)

/* Encode O into BUF (room for DD_OWNER_RECORD_MAX bytes). Returns the
 * length, or 0 when O is not a valid ownership (dd_owner_decode's checks). */
size_t dd_owner_encode(const struct dd_owner *o, uint8_t *buf);

/* Decode BUF[0..LEN) into *O. Returns 0, DD_ERR_CORRUPT (wrong length,
 * magic or checksum, a field out of range: a topic that is empty or not a
 * Kafka topic name, a negative partition count, an unknown partitioner,
 * shards outside 1..1024, shard >= shards, split_from that does not
 * divide shards), or DD_ERR_INVALID (a version this release does not
 * know), with a message in err; *O is then unchanged. */
int dd_owner_decode(const uint8_t *buf, size_t len, struct dd_owner *o, char *err, size_t errlen);

/* O as "shards=N shard=S[ split_from=M] topic=T partitions=P partitioner=X"
 * ("partitions=?" when not known). Cannot fail (cut to OUTLEN). */
void dd_owner_format(const struct dd_owner *o, char *out, size_t outlen);

/* How a stored ownership relates to the configured one. */
enum dd_owner_relation {
    DD_OWNER_SAME = 0, /* the same (a count 0 on either side matches any) */
    DD_OWNER_PARENT,   /* STORED is the parent of WANT's split (sweep.h) */
    DD_OWNER_OTHER,    /* anything else: refused */
};
enum dd_owner_relation dd_owner_relate(const struct dd_owner *stored, const struct dd_owner *want);

/* ---- the guard ----------------------------------------------------------- */

typedef struct dd_owner_guard dd_owner_guard;

/* Check store H (borrowed; outlives the guard) against WANT (copied), as
 * above. CREATED: dd_history_created(H). TAKE_OVER: record WANT whatever
 * the store held (the operator's explicit take-over; logged with the
 * ownership replaced). LEGACY_ID: this node's 8-byte id of the previous
 * release (dd_cluster_ownership_id) and LEGACY_PARENT the id of its
 * split's parent node (0: none); a single node passes 0 for both. A
 * refusal is not an error: 0 with the guard refused. Returns 0, or
 * DD_ERR_IO (the store cannot be read or written) or DD_ERR_NOMEM with a
 * message in err; *OUT is NULL on error. */
int dd_owner_guard_new(dd_owner_guard **out, dd_history *h, const struct dd_owner *want,
                       bool created, bool take_over, uint64_t legacy_id, uint64_t legacy_parent,
                       char *err, size_t errlen);
void dd_owner_guard_free(dd_owner_guard *g);

/* Whether the node must not serve from the store; if so WHY (may be
 * NULL) gets both ownerships and what to do. Any thread; cannot fail. */
bool dd_owner_guard_refused(const dd_owner_guard *g, char *why, size_t whylen);

/* The relation at open: DD_OWNER_PARENT while a split's sweep is owed. */
enum dd_owner_relation dd_owner_guard_relation(const dd_owner_guard *g);

/* The topic has N partitions (N > 0): compared with the record's count,
 * and recorded when the record has none. False when the node is refused
 * (now or before): ingest then assigns nothing. For ingest.h's partition
 * check (G is a dd_owner_guard). */
bool dd_owner_guard_partitions(void *g, int32_t n);

/* The split's sweep is done (sweep.h): record the configured ownership,
 * with partition count N (> 0). 0, DD_ERR_STATE (refused, or not a split:
 * nothing written) or DD_ERR_IO with a message. */
int dd_owner_guard_swept(dd_owner_guard *g, int32_t n, char *err, size_t errlen);

/* dedupd_history_ownership_mismatch (1 while refused). UD is the guard. */
void dd_owner_guard_collect(dd_prom *p, void *ud);

#endif
