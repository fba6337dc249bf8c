/* SPDX-License-Identifier: Apache-2.0
 *
 * serve.c - one call answered here; see serve.h.
 */
#include "serve.h"

#include "arena.h"
#include "cluster.h"
#include "dd.h"
#include "filter.h"
#include "partition.h"
#include "record.h"
#include "wire.h"

#include "dedup.pb-c.h"
#include "health.pb-c.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

grpc_status_code dd_serve_status_of(int rc)
{
    switch (rc) {
    case DD_OK: return GRPC_STATUS_OK;
    case DD_ERR_INVALID: return GRPC_STATUS_INVALID_ARGUMENT;
    case DD_ERR_LIMIT: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case DD_ERR_NOMEM: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case DD_ERR_UNAVAILABLE: return GRPC_STATUS_UNAVAILABLE;
    case DD_ERR_CORRUPT: return GRPC_STATUS_UNAVAILABLE; /* damaged here: retryable elsewhere */
    case DD_ERR_TIMEOUT: return GRPC_STATUS_DEADLINE_EXCEEDED;
    default: return GRPC_STATUS_INTERNAL;
    }
}

/* Only grpc's public reader is used (no grpc_byte_buffer internals): a
 * first pass of peeks counts the slices and keeps a reference to the
 * first, which is all a one-slice request needs (the usual small call);
 * a request of several slices is copied in a second pass, into the arena,
 * as one contiguous run the decoders read. */
grpc_status_code dd_serve_request(dd_arena *arena, grpc_byte_buffer *bb, grpc_slice *hold,
                                  const uint8_t **data, size_t *len, char *msg, size_t msglen)
{
    grpc_slice_unref(*hold);
    *hold = grpc_empty_slice();
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) {
        snprintf(msg, msglen, "cannot read the request");
        return GRPC_STATUS_INVALID_ARGUMENT;
    }
    grpc_slice *sl;
    size_t n = 0, total = 0;
    while (grpc_byte_buffer_reader_peek(&r, &sl)) {
        /* A reference, so the bytes need neither the reader nor BB. */
        if (n++ == 0) *hold = grpc_slice_ref(*sl);
        total += GRPC_SLICE_LENGTH(*sl);
    }
    grpc_byte_buffer_reader_destroy(&r);
    if (n <= 1) {
        *data = GRPC_SLICE_START_PTR(*hold);
        *len = GRPC_SLICE_LENGTH(*hold);
        return GRPC_STATUS_OK;
    }
    grpc_slice_unref(*hold);
    *hold = grpc_empty_slice();
    uint8_t *buf = dd_arena_alloc(arena, total);
    if (!buf) {
        snprintf(msg, msglen, "out of memory for the request");
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    if (!grpc_byte_buffer_reader_init(&r, bb)) {
        snprintf(msg, msglen, "cannot read the request");
        return GRPC_STATUS_INVALID_ARGUMENT;
    }
    size_t off = 0;
    while (grpc_byte_buffer_reader_peek(&r, &sl)) {
        size_t l = GRPC_SLICE_LENGTH(*sl);
        if (l > total - off) l = total - off; /* the same bytes as the first pass */
        memcpy(buf + off, GRPC_SLICE_START_PTR(*sl), l);
        off += l;
    }
    grpc_byte_buffer_reader_destroy(&r);
    *data = buf;
    *len = off;
    return GRPC_STATUS_OK;
}

grpc_byte_buffer *dd_serve_pack(const ProtobufCMessage *m)
{
    size_t size = protobuf_c_message_get_packed_size(m);
    grpc_slice slice = grpc_slice_malloc(size);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(slice));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

/* The Filter response in a new byte buffer: one slice of the bound's
 * size (wire.h), trimmed to what was written. */
static grpc_byte_buffer *filter_reply(const struct dd_filter_query *q,
                                      const struct dd_filter_result *r)
{
    grpc_slice slice = grpc_slice_malloc(dd_wire_filter_response_bound(q, r));
    size_t size = dd_wire_filter_response_write(q, r, GRPC_SLICE_START_PTR(slice));
    GRPC_SLICE_SET_LENGTH(slice, size);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

grpc_status_code dd_serve_bad_message(const struct dd_serve *sv, const char *type)
{
    snprintf(sv->msg, sv->msglen, "request is not a valid %s", type);
    return GRPC_STATUS_INVALID_ARGUMENT;
}

/* 1 (SV's message set) if a string field of the message of type D in DATA
 * holds a NUL byte or, when UTF8, is not UTF-8 (wire.h): checked on the
 * wire bytes, as protobuf-c's C strings would be cut at the NUL. UTF-8 is
 * not asked of ForgetUser, so that an id stored before the check (or
 * from Kafka) can still be forgotten. */
static int bad_strings(const struct dd_serve *sv, const ProtobufCMessageDescriptor *d,
                       const uint8_t *data, size_t len, int utf8)
{
    return dd_wire_pb_text_check(d, data, len, utf8, sv->msg, sv->msglen) != DD_OK;
}

/* Whether the request in DATA repeats field NUM (named NAME in the
 * proto) more than rpc.max_candidates times, counted on the wire before
 * protobuf-c allocates a struct per element: record.h would refuse the
 * request on its count anyway, but only after the decoder had spent memory
 * many times the request's size (empty elements are two bytes each). The
 * message is record.h's. */
static bool too_many(const struct dd_serve *sv, const uint8_t *data, size_t len, uint32_t num,
                     const char *name)
{
    size_t max = sv->max_candidates;
    size_t n = dd_wire_count_field(data, len, num, max);
    if (n <= max) return false;
    snprintf(sv->msg, sv->msglen, "%s has more than rpc.max_candidates=%zu entries", name, max);
    return true;
}

/* ClusterMap's answer (serve.h), its arrays in SV's arena. */
static grpc_status_code cluster_map(const struct dd_serve *sv, bool up, bool serving,
                                    grpc_byte_buffer **reply)
{
    Dedup__V1__ClusterMapResponse resp = DEDUP__V1__CLUSTER_MAP_RESPONSE__INIT;
    struct dd_cluster_self self;
    uint32_t nshards = 1;
    size_t nnodes = 1;
    if (sv->cluster) {
        const struct dd_cluster_map *map = dd_cluster_get_map(sv->cluster);
        dd_cluster_get_self(sv->cluster, &self);
        nshards = map->shards;
        nnodes = dd_cluster_node_count(sv->cluster);
        resp.map_hash = self.map_hash;
        resp.partitioner = (char *)dd_partitioner_name((enum dd_partitioner)map->partitioner);
        resp.partition_count = self.partition_count > 0 ? (uint32_t)self.partition_count : 0;
        resp.split_from = map->split_from;
        resp.split_hash = self.split_hash;
        int64_t max_lag = dd_cluster_max_lag_ms(sv->cluster);
        resp.max_lag_ms = max_lag > 0 && max_lag <= UINT32_MAX ? (uint32_t)max_lag : 0;
    } else if (sv->single) {
        int32_t parts = sv->single->partitions ? sv->single->partitions(sv->single->ud) : 0;
        resp.map_hash = (char *)sv->single->map_hash;
        resp.partitioner = (char *)sv->single->partitioner;
        resp.partition_count = parts > 0 ? (uint32_t)parts : 0;
    }
    Dedup__V1__ShardInfo *shards = dd_arena_calloc(sv->arena, nshards, sizeof *shards);
    Dedup__V1__ShardInfo **shardp = dd_arena_calloc(sv->arena, nshards, sizeof *shardp);
    Dedup__V1__ReplicaInfo *reps = dd_arena_calloc(sv->arena, nnodes, sizeof *reps);
    Dedup__V1__ReplicaInfo **repp = dd_arena_calloc(sv->arena, nnodes, sizeof *repp);
    if (!shards || !shardp || !reps || !repp) {
        snprintf(sv->msg, sv->msglen, "out of memory for the map");
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    for (uint32_t s = 0; s < nshards; s++) {
        dedup__v1__shard_info__init(&shards[s]);
        shards[s].shard = s;
        shardp[s] = &shards[s];
    }
    /* Nodes come shard-major (cluster.h), so each shard's replicas are a
     * run of REPP. */
    for (size_t i = 0; i < nnodes; i++) {
        Dedup__V1__ReplicaInfo *r = &reps[i];
        dedup__v1__replica_info__init(r);
        repp[i] = r;
        uint32_t shard = 0;
        if (sv->cluster) {
            struct dd_cluster_node node;
            dd_cluster_node_get(sv->cluster, i, &node);
            shard = node.shard < nshards ? node.shard : nshards - 1;
            r->replica = node.replica;
            r->address = (char *)node.addr;
            r->self = node.self;
            if (node.self) {
                r->ready = self.ready && serving;
                r->lag_ms = self.lag_ms;
            } else {
                r->ready = !node.mismatch && node.ready && strcmp(node.state, "up") == 0;
                r->lag_ms = node.lag_ms;
            }
        } else {
            r->address = sv->single ? (char *)sv->single->address : "";
            r->self = 1;
            r->ready = up;
            r->lag_ms = sv->single && sv->single->lag_ms ? sv->single->lag_ms(sv->single->ud) : -1;
        }
        if (!shards[shard].replicas) shards[shard].replicas = &repp[i];
        shards[shard].n_replicas++;
    }
    resp.n_shards = nshards;
    resp.shards = shardp;
    *reply = dd_serve_pack(&resp.base);
    return GRPC_STATUS_OK;
}

grpc_status_code dd_serve_call(const struct dd_serve *sv, enum dd_api_method m, const uint8_t *data,
                               size_t len, int64_t deadline_ns, bool degraded, bool up,
                               bool serving, bool *damaged, grpc_byte_buffer **reply)
{
    ProtobufCAllocator *al = dd_arena_allocator(sv->arena);
    int rc;

    *damaged = false;
    switch (m) {
    case DD_API_FILTER: {
        /* The hot path: decoded in place and encoded by hand (wire.h). */
        struct dd_filter_query q;
        rc = dd_wire_filter_request_decode(data, len, sv->arena, sv->max_candidates, &q, sv->msg,
                                           sv->msglen);
        if (rc == DD_ERR_INVALID) return GRPC_STATUS_INVALID_ARGUMENT;
        if (rc != DD_OK) {
            snprintf(sv->msg, sv->msglen, "out of memory for the request");
            return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        struct dd_filter_result r;
        rc = dd_filter_decide(sv->filter, sv->arena, &q, &r, deadline_ns, sv->msg, sv->msglen);
        *damaged = rc == DD_ERR_CORRUPT;
        if (degraded) r.degraded = 1; /* a cluster node behind its own shard (forward.h) */
        if (rc == DD_OK) *reply = filter_reply(&q, &r);
        return dd_serve_status_of(rc);
    }
    case DD_API_RECORD_DELIVERY: {
        if (too_many(sv, data, len, 2, "item_ids")) return GRPC_STATUS_RESOURCE_EXHAUSTED;
        if (bad_strings(sv, &dedup__v1__record_delivery_request__descriptor, data, len, 1))
            return GRPC_STATUS_INVALID_ARGUMENT;
        Dedup__V1__RecordDeliveryRequest *req =
            dedup__v1__record_delivery_request__unpack(al, len, data);
        if (!req) return dd_serve_bad_message(sv, "dedup.v1.RecordDeliveryRequest");
        Dedup__V1__RecordDeliveryResponse resp;
        rc = dd_record_delivery(sv->record, sv->arena, req, &resp, sv->msg, sv->msglen);
        if (rc == DD_OK) *reply = dd_serve_pack(&resp.base);
        return dd_serve_status_of(rc);
    }
    case DD_API_RECORD_PLAYS: {
        if (too_many(sv, data, len, 2, "plays")) return GRPC_STATUS_RESOURCE_EXHAUSTED;
        if (bad_strings(sv, &dedup__v1__record_plays_request__descriptor, data, len, 1))
            return GRPC_STATUS_INVALID_ARGUMENT;
        Dedup__V1__RecordPlaysRequest *req = dedup__v1__record_plays_request__unpack(al, len, data);
        if (!req) return dd_serve_bad_message(sv, "dedup.v1.RecordPlaysRequest");
        Dedup__V1__RecordPlaysResponse resp;
        rc = dd_record_plays(sv->record, sv->arena, req, &resp, sv->msg, sv->msglen);
        if (rc == DD_OK) *reply = dd_serve_pack(&resp.base);
        return dd_serve_status_of(rc);
    }
    case DD_API_FORGET_USER: {
        if (bad_strings(sv, &dedup__v1__forget_user_request__descriptor, data, len, 0))
            return GRPC_STATUS_INVALID_ARGUMENT;
        Dedup__V1__ForgetUserRequest *req = dedup__v1__forget_user_request__unpack(al, len, data);
        if (!req) return dd_serve_bad_message(sv, "dedup.v1.ForgetUserRequest");
        Dedup__V1__ForgetUserResponse resp;
        rc = dd_record_forget(sv->record, sv->arena, req, &resp, sv->msg, sv->msglen);
        if (rc == DD_OK) *reply = dd_serve_pack(&resp.base);
        return dd_serve_status_of(rc);
    }
    case DD_API_HEALTH_CHECK: {
        Grpc__Health__V1__HealthCheckRequest *req =
            grpc__health__v1__health_check_request__unpack(al, len, data);
        if (!req) return dd_serve_bad_message(sv, "grpc.health.v1.HealthCheckRequest");
        bool liveness = strcmp(req->service, DD_API_LIVENESS_SERVICE) == 0;
        if (req->service[0] && strcmp(req->service, DD_API_SERVICE) != 0 && !liveness) {
            snprintf(sv->msg, sv->msglen, "unknown service \"%.200s\"", req->service);
            return GRPC_STATUS_NOT_FOUND;
        }
        /* liveness: this worker answered, however unready the node is */
        if (liveness) up = true;
        Grpc__Health__V1__HealthCheckResponse resp;
        grpc__health__v1__health_check_response__init(&resp);
        resp.status = up ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                         : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
        *reply = dd_serve_pack(&resp.base);
        return GRPC_STATUS_OK;
    }
    case DD_API_CLUSTER_STATUS: {
        if (!sv->cluster) {
            snprintf(sv->msg, sv->msglen, "this node is not part of a cluster");
            return GRPC_STATUS_UNIMPLEMENTED;
        }
        Dedup__V1__NodeStatusRequest *req = dedup__v1__node_status_request__unpack(al, len, data);
        if (!req) return dd_serve_bad_message(sv, "dedup.v1.NodeStatusRequest");
        /* Answered either way, so that the asker sees the difference too;
         * a difference makes this node not ready for a while. */
        char ignored[256];
        dd_cluster_check_peer_map(sv->cluster, req->map_hash, req->split_hash, req->from, NULL,
                                  ignored, sizeof ignored);
        struct dd_cluster_self self;
        dd_cluster_get_self(sv->cluster, &self);
        Dedup__V1__NodeStatus resp = DEDUP__V1__NODE_STATUS__INIT;
        resp.shard = self.shard;
        resp.replica = self.replica;
        resp.map_hash = self.map_hash;
        resp.nodes_hash = self.nodes_hash;
        resp.split_hash = self.split_hash;
        resp.ready = self.ready && serving;
        resp.lag_ms = self.lag_ms;
        resp.partition_count = self.partition_count;
        resp.why = serving ? self.why : "not serving";
        *reply = dd_serve_pack(&resp.base);
        return GRPC_STATUS_OK;
    }
    case DD_API_CLUSTER_MAP: {
        Dedup__V1__ClusterMapRequest *req = dedup__v1__cluster_map_request__unpack(al, len, data);
        if (!req) return dd_serve_bad_message(sv, "dedup.v1.ClusterMapRequest");
        return cluster_map(sv, up, serving, reply);
    }
    default: break;
    }
    snprintf(sv->msg, sv->msglen, "method not implemented");
    return GRPC_STATUS_UNIMPLEMENTED;
}
