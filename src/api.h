/* SPDX-License-Identifier: Apache-2.0
 *
 * api.h - the names of the API dedupd serves, in one place: the methods
 * (short name for metrics and logs, full path for gRPC), the gRPC status
 * code names, and the user_id / scene rules every Dedup call shares. The
 * server (rpc.c, metrics), the client library and the tools use these
 * tables, so a method or status is spelled the same everywhere.
 */
#ifndef DD_API_H
#define DD_API_H

#include <stddef.h>
#include <stdint.h>

/* The methods, in the order the server counts them. */
enum dd_api_method {
    DD_API_FILTER = 0,
    DD_API_RECORD_DELIVERY,
    DD_API_RECORD_PLAYS,
    DD_API_FORGET_USER,
    DD_API_HEALTH_CHECK,
    DD_API_CLUSTER_STATUS, /* dedup.v1.Cluster/Status: nodes of a cluster ask each other */
    DD_API_SNAPSHOT_BEGIN, /* dedup.v1.Cluster/SnapshotBegin: a new replica asks a peer */
    DD_API_SNAPSHOT_READ,  /* dedup.v1.Cluster/SnapshotRead: ... and copies its store */
    DD_API_CLUSTER_MAP,    /* dedup.v1.Dedup/ClusterMap: clients read the fleet's map */
    DD_API_UNKNOWN,        /* any other method (the server answers UNIMPLEMENTED) */
    DD_API_METHOD_COUNT,
};

/* The full paths, for tables that need them as constants. */
#define DD_API_PATH_FILTER "/dedup.v1.Dedup/Filter"
#define DD_API_PATH_RECORD_DELIVERY "/dedup.v1.Dedup/RecordDelivery"
#define DD_API_PATH_RECORD_PLAYS "/dedup.v1.Dedup/RecordPlays"
#define DD_API_PATH_FORGET_USER "/dedup.v1.Dedup/ForgetUser"
#define DD_API_PATH_HEALTH_CHECK "/grpc.health.v1.Health/Check"
#define DD_API_PATH_CLUSTER_STATUS "/dedup.v1.Cluster/Status"
#define DD_API_PATH_SNAPSHOT_BEGIN "/dedup.v1.Cluster/SnapshotBegin"
#define DD_API_PATH_SNAPSHOT_READ "/dedup.v1.Cluster/SnapshotRead"
#define DD_API_PATH_CLUSTER_MAP "/dedup.v1.Dedup/ClusterMap"

/* The service the Dedup methods belong to, as health checks name it. */
#define DD_API_SERVICE "dedup.v1.Dedup"
/* The health service name for liveness probes: SERVING whenever a gRPC
 * worker answers, however unready the node is, drain included
 * (Kubernetes' livenessProbe; readiness is "" or DD_API_SERVICE). */
#define DD_API_LIVENESS_SERVICE "liveness"

/* The metadata keys of a forwarded call: the sender's place ("s.r") and
 * its map hash. A call that carries DD_CLUSTER_MD_FROM is never forwarded
 * again, but once while resharding (cluster_map.h, "resharding"). Every header
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

/* A client's, not a peer's (it grants nothing, so it is no peer header):
 * the map hash a client routed a Dedup call by (ClusterMap), 16 hex
 * digits. A node whose map differs, or that does not own the call's user
 * under it, refuses the call FAILED_PRECONDITION with its own hash in the
 * trailing metadata under the same key, and forwards nothing (rpc.h). */
#define DD_API_MD_MAP_HASH "dedupd-map-hash"

/* "Filter", ..., "HealthCheck", "ClusterStatus", "unknown"; NULL outside the enum. Static. */
const char *dd_api_method_name(enum dd_api_method m);

/* "/dedup.v1.Dedup/Filter", ..., "/grpc.health.v1.Health/Check", and
 * "unknown" for DD_API_UNKNOWN; NULL outside the enum. Static. */
const char *dd_api_method_path(enum dd_api_method m);

/* gRPC status codes 0 (OK) .. 16 (UNAUTHENTICATED). */
#define DD_API_STATUS_COUNT 17

/* "OK", "CANCELLED", ... as grpc spells them; "UNKNOWN_STATUS" for any
 * other CODE. Static. */
const char *dd_api_status_name(int code);

/* The rules on user_id and scene that every Dedup call checks, on their
 * lengths: user_id not empty and at most MAX_ID_BYTES (rpc.max_id_bytes),
 * scene at most DD_SCENE_MAX (segment.h: the key format's limit). Returns 0 or DD_ERR_INVALID with
 * the field named in err (the text reaches the caller as the status
 * message). */
int dd_api_check_user_scene(size_t user_len, size_t scene_len, uint32_t max_id_bytes, char *err,
                            size_t errlen);

#endif
