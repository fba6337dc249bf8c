/* SPDX-License-Identifier: Apache-2.0
 *
 * forward.c - sending a call on to a replica of its user's shard; see
 * forward.h.
 */
#include "forward.h"

#include "cluster.h"
#include "dd.h"
#include "log.h"
#include "unary.h"
#include "wire.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dd_forwarder {
    dd_cluster *cluster;
    grpc_slice md_from, md_map; /* our place and map hash, sent with forwarded calls */
    grpc_slice md_split;        /* the hash of the map ours splits; empty when none */
    int64_t timeout_ms;         /* cluster.forward_timeout_ms */
};

int dd_forwarder_new(dd_forwarder **out, dd_cluster *cl, char *err, size_t errlen)
{
    *out = NULL;
    dd_forwarder *fw = calloc(1, sizeof *fw);
    if (!fw) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    const struct dd_cluster_map *map = dd_cluster_get_map(cl);
    char place[32], hex[17], split[17];
    snprintf(place, sizeof place, "%" PRIu32 ".%" PRIu32, map->shard, map->replica);
    dd_cluster_map_hash_hex(map, hex);
    dd_cluster_map_split_hex(map, split);
    fw->cluster = cl;
    fw->md_from = grpc_slice_from_copied_string(place);
    fw->md_map = grpc_slice_from_copied_string(hex);
    fw->md_split = split[0] ? grpc_slice_from_copied_string(split) : grpc_empty_slice();
    fw->timeout_ms = dd_cluster_forward_timeout_ms(cl);
    *out = fw;
    return DD_OK;
}

void dd_forwarder_free(dd_forwarder *fw)
{
    if (!fw) return;
    grpc_slice_unref(fw->md_from);
    grpc_slice_unref(fw->md_map);
    grpc_slice_unref(fw->md_split);
    free(fw);
}

/* ---- metadata ------------------------------------------------------------ */

/* The value of metadata KEY in MD, or NULL. */
static const grpc_slice *md_get(const grpc_metadata_array *md, const char *key)
{
    for (size_t i = 0; i < md->count; i++)
        if (grpc_slice_str_cmp(md->metadata[i].key, key) == 0) return &md->metadata[i].value;
    return NULL;
}

/* Metadata KEY's value into OUT as a string ("" when absent or too long). */
static void md_copy(const grpc_metadata_array *md, const char *key, char *out, size_t outlen)
{
    const grpc_slice *v = md_get(md, key);
    out[0] = '\0';
    if (v && GRPC_SLICE_LENGTH(*v) < outlen) {
        memcpy(out, GRPC_SLICE_START_PTR(*v), GRPC_SLICE_LENGTH(*v));
        out[GRPC_SLICE_LENGTH(*v)] = '\0';
    }
}

bool dd_forward_has_header(const grpc_metadata_array *md)
{
    for (size_t i = 0; i < md->count; i++) {
        const grpc_slice k = md->metadata[i].key;
        /* A client's routing hash only narrows what is answered. */
        if (grpc_slice_str_cmp(k, DD_API_MD_MAP_HASH) == 0) continue;
        if (GRPC_SLICE_LENGTH(k) >= 7 && memcmp(GRPC_SLICE_START_PTR(k), "dedupd-", 7) == 0)
            return true;
    }
    return false;
}

/* ---- tries --------------------------------------------------------------- */

void dd_forward_init(struct dd_forward *f, dd_forwarder *fw)
{
    memset(f, 0, sizeof *f);
    f->fw = fw;
    dd_unary_init(&f->u);
}

/* Release the try in F (its call, its message sent and received, metadata). */
static void forward_reset(struct dd_forward *f)
{
    if (f->call) grpc_call_unref(f->call);
    f->call = NULL;
    if (f->u.send) grpc_byte_buffer_destroy(f->u.send);
    dd_unary_reset(&f->u);
}

void dd_forward_release(struct dd_forward *f)
{
    forward_reset(f);
}

void dd_forward_new_call(struct dd_forward *f)
{
    f->damaged_here = false;
}

/* Give back the shard's place F held, once the forward ended for good
 * (answered, or no replica left). */
static void forward_release_place(struct dd_forward *f)
{
    if (!f->counted) return;
    dd_cluster_forward_end(f->fw->cluster, f->shard);
    f->counted = false;
}

/* How long one try of the second round may wait for its replica to
 * connect: longer than grpc's longest reconnect backoff on peer channels
 * (cluster.c), so a replica that is up is reached. */
#define PATIENT_TRY_MS 1500

/* Send the caller's request (its payload, as received) to the next
 * replica of f->shard. Returns 0 (a try is in flight) or
 * DD_ERR_UNAVAILABLE when no replica is left or the call cannot start.
 * Two rounds: the first fails fast on a replica whose channel is not
 * connected (so a dead replica costs nothing); when every replica failed
 * so, a second round waits for each in turn to connect, up to
 * PATIENT_TRY_MS: a peer that has just started, or one whose channel is
 * in reconnect backoff after a restart, fails fast although it is up. */
static int forward_try(struct dd_forward *f)
{
    dd_forwarder *fw = f->fw;
    for (;;) {
        grpc_channel *ch;
        f->replica = dd_cluster_pick(fw->cluster, f->shard, f->own, &f->tried, &ch, &f->behind);
        gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
        if (f->replica < 0) {
            if (f->patient || gpr_time_cmp(f->deadline, now) <= 0) return DD_ERR_UNAVAILABLE;
            f->patient = true;
            f->tried = 0;
            continue;
        }
        gpr_timespec deadline = f->deadline;
        if (f->patient) {
            gpr_timespec t = gpr_time_add(now, gpr_time_from_millis(PATIENT_TRY_MS, GPR_TIMESPAN));
            if (gpr_time_cmp(t, deadline) < 0) deadline = t;
        }
        f->call = grpc_channel_create_call(
            ch, f->c.call, GRPC_PROPAGATE_DEFAULTS, f->c.cq,
            grpc_slice_from_static_string(dd_api_method_path(f->c.method)), NULL, deadline, NULL);
        if (!f->call) continue;
        f->md[0].key = grpc_slice_from_static_string(DD_CLUSTER_MD_FROM);
        f->md[0].value = fw->md_from;
        f->md[1].key = grpc_slice_from_static_string(DD_CLUSTER_MD_MAP);
        f->md[1].value = fw->md_map;
        size_t nmd = 2;
        if (!GRPC_SLICE_IS_EMPTY(fw->md_split)) {
            f->md[nmd].key = grpc_slice_from_static_string(DD_CLUSTER_MD_SPLIT);
            f->md[nmd++].value = fw->md_split;
        }
        if (f->second_hop) {
            f->md[nmd].key = grpc_slice_from_static_string(DD_CLUSTER_MD_HOP2);
            f->md[nmd++].value = grpc_slice_from_static_string("1");
        }
        f->u.md = f->md;
        f->u.nmd = nmd;
        f->u.flags = f->patient ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
        /* grpc core moves the slices out of a message it sends: each try
         * sends its own copy (references to the same bytes). */
        f->u.send = grpc_byte_buffer_copy(f->c.payload);
        f->start_ns = dd_mono_ns();
        if (dd_unary_start(f->call, &f->u, f->c.tag) != GRPC_CALL_OK) {
            /* The parent is gone (cancelled): no other replica will do better. */
            forward_reset(f);
            return DD_ERR_UNAVAILABLE;
        }
        return DD_OK;
    }
}

/* Start forwarding C's call to SHARD: the state of a new forward, our
 * deadline from now. */
static void forward_begin(struct dd_forward *f, const struct dd_forward_call *c, uint32_t shard,
                          bool own, bool second_hop)
{
    f->c = *c;
    f->shard = shard;
    f->tried = 0;
    f->counted = false;
    f->own = own;
    f->second_hop = second_hop;
    f->patient = false;
    gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
    f->deadline = gpr_time_add(now, gpr_time_from_millis(f->fw->timeout_ms, GPR_TIMESPAN));
}

/* A copy of the Filter response BB with degraded = true (wire.h), or
 * NULL when BB cannot be read. */
static grpc_byte_buffer *mark_degraded(grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return NULL;
    grpc_slice all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    size_t n = GRPC_SLICE_LENGTH(all);
    grpc_slice out = grpc_slice_malloc(n + DD_WIRE_DEGRADED_MARK);
    dd_wire_filter_response_mark_degraded(GRPC_SLICE_START_PTR(all), n, GRPC_SLICE_START_PTR(out));
    grpc_slice_unref(all);
    grpc_byte_buffer *res = grpc_raw_byte_buffer_create(&out, 1);
    grpc_slice_unref(out);
    return res;
}

enum dd_forward_end dd_forward_done(struct dd_forward *f, int ok, grpc_status_code *status,
                                    grpc_byte_buffer **reply, char *msg, size_t msglen)
{
    dd_forwarder *fw = f->fw;
    *reply = NULL;
    int64_t ns = dd_mono_ns() - f->start_ns;
    grpc_status_code st = ok ? f->u.status : GRPC_STATUS_UNAVAILABLE;
    /* The peer's text: passed on and logged only sanitized. */
    char details[200];
    dd_sanitize(details, sizeof details, (const char *)GRPC_SLICE_START_PTR(f->u.details),
                GRPC_SLICE_LENGTH(f->u.details));
    /* A reply over the peer channel's receive limit (cluster.h) was
     * dropped by grpc before it was held whole twice: a failed attempt of
     * that replica, as UNAVAILABLE is. */
    enum dd_cluster_outcome out = st == GRPC_STATUS_UNAVAILABLE         ? DD_FWD_UNAVAILABLE
                                  : st == GRPC_STATUS_DEADLINE_EXCEEDED ? DD_FWD_DEADLINE
                                  : st == GRPC_STATUS_CANCELLED         ? DD_FWD_CANCELLED
                                  : ok && dd_cluster_reply_too_large(st, f->u.details)
                                      ? DD_FWD_TOO_LARGE
                                      : DD_FWD_OK;
    dd_cluster_forwarded(fw->cluster, f->shard, f->replica, out, ns);
    /* A patient try that ran out of its own time, with the caller's time
     * left, is a replica that did not connect: try the next. */
    bool retry = out == DD_FWD_UNAVAILABLE || out == DD_FWD_TOO_LARGE ||
                 (out == DD_FWD_DEADLINE && f->patient &&
                  (!f->c.deadline_ns || dd_mono_ns() < f->c.deadline_ns));
    if (retry) {
        dd_debug("rpc",
                 "msg=\"replica unavailable; trying the next\" method=%s shard=%" PRIu32
                 " replica=%d detail=\"%s\"",
                 dd_api_method_path(f->c.method), f->shard, f->replica, details);
        int replica = f->replica;
        forward_reset(f);
        gpr_timespec now = gpr_now(f->deadline.clock_type);
        if (gpr_time_cmp(f->deadline, now) > 0 && forward_try(f) == DD_OK)
            return DD_FORWARD_PENDING;
        forward_release_place(f);
        /* No caught-up replica of our own shard answered: ours, degraded. */
        if (f->own) return DD_FORWARD_HERE_DEGRADED;
        *status = GRPC_STATUS_UNAVAILABLE;
        snprintf(msg, msglen, "no replica of shard %" PRIu32 " answered (last tried: replica %d)",
                 f->shard, replica);
        return DD_FORWARD_ANSWER;
    }
    *status = st;
    snprintf(msg, msglen, "%s", details);
    if (st == GRPC_STATUS_OK && f->u.recv) {
        if (f->c.method == DD_API_FILTER && f->behind) {
            *reply = mark_degraded(f->u.recv);
            if (!*reply) {
                *status = GRPC_STATUS_INTERNAL;
                snprintf(msg, msglen, "cannot read the replica's answer");
            }
        } else {
            *reply = f->u.recv;
            f->u.recv = NULL;
        }
    }
    forward_reset(f);
    forward_release_place(f);
    return DD_FORWARD_ANSWER;
}

/* ---- routing ------------------------------------------------------------- */

enum dd_route dd_forward_route(struct dd_forward *f, const struct dd_forward_call *c,
                               const uint8_t *data, size_t len, grpc_status_code *status, char *msg,
                               size_t msglen)
{
    dd_cluster *cl = f->fw->cluster;
    const uint8_t *user = NULL;
    size_t user_len = 0;
    /* A missing user id: the call is served here and fails its checks. */
    if (dd_wire_bytes_field(data, len, 1, &user, &user_len) != DD_OK) return DD_ROUTE_HERE;
    uint32_t shard;
    bool local;
    int rc = dd_cluster_route(cl, (const char *)user, user_len, &shard, &local, msg, msglen);
    if (rc != DD_OK) {
        *status = rc == DD_ERR_STATE ? GRPC_STATUS_FAILED_PRECONDITION : GRPC_STATUS_UNAVAILABLE;
        return DD_ROUTE_ERROR;
    }
    const grpc_slice *from = md_get(c->md, DD_CLUSTER_MD_FROM);
    bool second_hop = false;
    if (from) {
        /* Forwarded to us: only if we agree on the map with the sender
         * (or one map splits the other: resharding), and never forwarded
         * again, but for one case: a node of the map ours splits sent us
         * a user its map gives our old shard and ours gives a new one. */
        char hex[40] = "", split[40] = "", who[40] = "", who_esc[48];
        md_copy(c->md, DD_CLUSTER_MD_MAP, hex, sizeof hex);
        md_copy(c->md, DD_CLUSTER_MD_SPLIT, split, sizeof split);
        md_copy(c->md, DD_CLUSTER_MD_FROM, who, sizeof who);
        enum dd_cluster_relation rel;
        if (dd_cluster_check_peer_map(cl, hex, split, who, &rel, msg, msglen) != DD_OK) {
            *status = GRPC_STATUS_FAILED_PRECONDITION;
            return DD_ROUTE_ERROR;
        }
        if (!local && (rel != DD_MAP_OLDER || md_get(c->md, DD_CLUSTER_MD_HOP2))) {
            *status = GRPC_STATUS_FAILED_PRECONDITION;
            snprintf(msg, msglen,
                     "forwarded by node \"%s\" for shard %" PRIu32
                     ", but this node is of shard %" PRIu32,
                     dd_sanitize(who_esc, sizeof who_esc, who, strlen(who)), shard,
                     dd_cluster_get_map(cl)->shard);
            return DD_ROUTE_ERROR;
        }
        /* The sender chose us: answer, and say so if we are behind. */
        if (local) return dd_cluster_self_behind(cl) ? DD_ROUTE_HERE_DEGRADED : DD_ROUTE_HERE;
        second_hop = true;
    }
    bool behind_here = local && dd_cluster_self_behind(cl);
    if (local && !behind_here) return DD_ROUTE_HERE;
    forward_begin(f, c, shard, local, second_hop);
    /* A slow shard holds at most its cap of this node's slots, and one
     * whose replicas are all down none: its calls fail at once (ours are
     * answered here, degraded), so this node's own calls find a slot. */
    if (dd_cluster_forward_begin(cl, shard, msg, msglen) != DD_OK) {
        if (f->own) return DD_ROUTE_HERE_DEGRADED;
        *status = GRPC_STATUS_UNAVAILABLE;
        return DD_ROUTE_ERROR;
    }
    f->counted = true;
    if (forward_try(f) == DD_OK) return DD_ROUTE_FORWARDED;
    forward_release_place(f);
    if (f->own) return DD_ROUTE_HERE_DEGRADED;
    *status = GRPC_STATUS_UNAVAILABLE;
    snprintf(msg, msglen, "no replica of shard %" PRIu32 " can be called", shard);
    return DD_ROUTE_ERROR;
}

bool dd_forward_damaged(struct dd_forward *f, const struct dd_forward_call *c)
{
    if (!f->fw || c->method != DD_API_FILTER || f->damaged_here ||
        md_get(c->md, DD_CLUSTER_MD_FROM))
        return false;
    forward_begin(f, c, dd_cluster_get_map(f->fw->cluster)->shard, true, false);
    f->damaged_here = true;
    /* once per damaged call, not under cluster.max_forward_inflight */
    return forward_try(f) == DD_OK;
}
