/* SPDX-License-Identifier: Apache-2.0
 *
 * serve.h - one call answered here, from its request's bytes to its reply:
 * the bytes out of grpc's byte buffer (in place when they are one slice),
 * the checks on the wire before a decoder allocates, the decode, the
 * decision (filter.h for Filter, record.h for the writes, the node's own
 * state for Health/Check and Cluster/Status), the reply packed into a byte
 * buffer, and dd's error codes mapped to gRPC statuses. Knows nothing of
 * call slots, workers, deadlines' clocks or forwarding (rpc.h,
 * forward.h); the snapshot methods are rpc.c's.
 *
 * Memory: everything a call decodes lives in the caller's arena (and, for
 * a request of one slice, in grpc's bytes, held by a slice reference);
 * a reply is a new grpc byte buffer of one slice, owned by the caller.
 * Thread-safety: a struct dd_serve belongs to one worker.
 */
#ifndef DD_SERVE_H
#define DD_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "api.h"

typedef struct dd_arena dd_arena;
typedef struct dd_filter dd_filter;
typedef struct dd_record dd_record;
typedef struct dd_cluster dd_cluster;
typedef struct ProtobufCMessage ProtobufCMessage;

/* What ClusterMap answers on a single node (no cluster): one shard of
 * one replica, itself. Filled before the server starts; read-only then. */
struct dd_serve_single {
    char map_hash[17];               /* the single node's map (cluster_map.h), 16 hex digits */
    const char *partitioner;         /* cluster.partitioner, librdkafka's name; static */
    char address[300];               /* host:port it serves gRPC on */
    int32_t (*partitions)(void *ud); /* the plays topic's partitions, 0 unknown; NULL: no ingest */
    int64_t (*lag_ms)(void *ud);     /* ingest lag, -1 unknown; NULL: no ingest */
    void *ud;
};

/* What one worker answers calls with; every member borrowed. */
struct dd_serve {
    dd_arena *arena; /* the call's memory; reset by the caller after a reply */
    dd_filter *filter;
    dd_record *record;
    dd_cluster *cluster;                  /* NULL: a single node (Cluster/Status UNIMPLEMENTED) */
    const struct dd_serve_single *single; /* ClusterMap without a cluster; NULL: unknown */
    uint32_t max_candidates; /* rpc.max_candidates: Filter ids and repeated items at most */
    char *msg;               /* the status message of the call in hand */
    size_t msglen;
};

/* The gRPC status for dd error code RC (dd.h): INVALID -> INVALID_ARGUMENT,
 * LIMIT and NOMEM -> RESOURCE_EXHAUSTED, UNAVAILABLE and CORRUPT (damaged
 * here: retryable elsewhere) -> UNAVAILABLE, TIMEOUT -> DEADLINE_EXCEEDED,
 * anything else INTERNAL. Cannot fail. */
grpc_status_code dd_serve_status_of(int rc);

/* The bytes of request BB (borrowed) into *DATA and *LEN, through grpc's
 * public reader: in place when BB is one slice (a reference to it is kept
 * in *HOLD, which the caller releases with grpc_slice_unref once the
 * bytes are not needed; *HOLD is released first and must be a slice or
 * grpc_empty_slice()), else copied once into ARENA (*HOLD empty). The
 * bytes are BB's as they are: grpc's server inflates a compressed request
 * before the call is matched (rpc.compression = on). Returns
 * GRPC_STATUS_OK, or INVALID_ARGUMENT (grpc's reader refused BB) or
 * RESOURCE_EXHAUSTED (no arena memory) with a message in MSG. */
grpc_status_code dd_serve_request(dd_arena *arena, grpc_byte_buffer *bb, grpc_slice *hold,
                                  const uint8_t **data, size_t *len, char *msg, size_t msglen);

/* M packed into a new byte buffer of one slice (the caller owns it). */
grpc_byte_buffer *dd_serve_pack(const ProtobufCMessage *m);

/* INVALID_ARGUMENT with "request is not a valid TYPE" in SV's message. */
grpc_status_code dd_serve_bad_message(const struct dd_serve *sv, const char *type);

/* Answer method M (a Dedup method, Health/Check or Cluster/Status) for the
 * request in DATA (LEN bytes): wire checks, decode, decide, encode.
 * DEADLINE_NS (dd_mono_ns's clock, 0 = none) bounds Filter's Redis fetch;
 * DEGRADED marks a Filter answer degraded (this node is behind); UP is
 * what Health/Check answers (SERVING or NOT_SERVING) and, on a single
 * node, whether ClusterMap shows it ready; SERVING whether Cluster/Status
 * and a cluster node's ClusterMap report this node ready. ClusterMap
 * answers from the cluster (cluster.h: its map, each peer's last probe,
 * this node's own state) or, without one, from SV->single. Returns the status; on OK *REPLY
 * is set (owned by the caller); otherwise SV's message says why. *DAMAGED:
 * a Filter met this user's damaged history (filter.h, DD_ERR_CORRUPT).
 * Any other method is UNIMPLEMENTED. */
grpc_status_code dd_serve_call(const struct dd_serve *sv, enum dd_api_method m, const uint8_t *data,
                               size_t len, int64_t deadline_ns, bool degraded, bool up,
                               bool serving, bool *damaged, grpc_byte_buffer **reply);

#endif
