/* SPDX-License-Identifier: Apache-2.0
 *
 * forward.h - a Dedup call for a user this node does not serve, sent on to
 * a replica of the owning shard: the route (by the request's user_id on
 * the wire), the tries over the shard's replicas within one deadline, the
 * metadata a forwarded call carries and the checks a forwarded call meets,
 * and the replica's answer handed back (marked degraded through wire.h when
 * the replica was behind). Which shard owns a user, which replica to try
 * and the per-shard places are cluster.h's; the client call is the unary
 * helper's (dd_unary_*). Knows nothing of call slots, workers or what the
 * methods do (rpc.h's): the caller hands in its call and gets back what to
 * do with it.
 *
 * DESIGN
 *
 * A forwarded call is an asynchronous client call on the caller's own
 * completion queue, whose parent is the caller's call, so grpc propagates
 * the caller's deadline and cancellation and the worker goes on with
 * other calls while the peer answers; the caller's slot is held until
 * then. The payload goes as it came (a copy of the byte buffer per try:
 * references to the same bytes). A try ends UNAVAILABLE (the peer is gone,
 * refused or over the receive limit) -> the next replica while our
 * deadline (cluster.forward_timeout_ms, or the caller's if earlier)
 * allows; any other status is the answer, passed on as it came. Two
 * rounds: the first fails fast on a replica whose channel is not
 * connected; when every replica failed so, a second round waits for each
 * in turn to connect (PATIENT_TRY_MS). Each caller's call holds one of its
 * shard's places (dd_cluster_forward_begin) whatever its retries, so a
 * slow shard holds at most its cap of this node's slots.
 *
 * Threads: one dd_forwarder per node, read-only once built, shared by
 * every worker; a struct dd_forward per call slot, touched only by the
 * thread that owns the slot's completion queue.
 */
#ifndef DD_FORWARD_H
#define DD_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "api.h"
#include "cluster.h"
#include "unary.h"

/* What every forwarded call of this node carries (its place, its map's
 * hash, the hash of the map it splits) and cluster.forward_timeout_ms. */
typedef struct dd_forwarder dd_forwarder;

/* Build the forwarder of CL (borrowed; must outlive it). Returns 0 or
 * DD_ERR_NOMEM (message in err; *out NULL). Free with dd_forwarder_free
 * (NULL is a no-op) once no call is forwarded any more. */
int dd_forwarder_new(dd_forwarder **out, dd_cluster *cl, char *err, size_t errlen);
void dd_forwarder_free(dd_forwarder *fw);

/* Whether MD holds a header of the cluster's own (every one is named
 * "dedupd-...", cluster.h), which only a peer may send (auth.h: such a
 * call is judged by rpc.allow_peer). A client's DD_API_MD_MAP_HASH is not
 * one: it can only get the call refused. Cannot fail. */
bool dd_forward_has_header(const grpc_metadata_array *md);

/* The caller's call, as forward needs it; every pointer borrowed, and
 * valid until the forward ended (dd_forward_done returned something other
 * than DD_FORWARD_PENDING). */
struct dd_forward_call {
    grpc_call *call;               /* the parent of every try */
    enum dd_api_method method;     /* a Dedup method (DD_API_FILTER .. DD_API_FORGET_USER) */
    const grpc_metadata_array *md; /* the metadata it came with */
    grpc_byte_buffer *payload;     /* its request, sent on as it came */
    int64_t deadline_ns;           /* the caller's, on dd_mono_ns's clock; 0 = none */
    grpc_completion_queue *cq;     /* where each try completes, with TAG */
    void *tag;
};

/* One call slot's forwarding state: embedded in the slot, so forwarding
 * allocates nothing per call but what grpc does. Its members are
 * forward.c's; the caller only inits, releases and passes it. */
struct dd_forward {
    dd_forwarder *fw;
    struct dd_forward_call c; /* the caller's call being forwarded */
    grpc_call *call;          /* the try in flight */
    uint32_t shard;
    uint32_t tried;        /* replicas tried, a bit each */
    int replica;           /* the one being tried */
    bool behind;           /* it was behind when chosen: answer degraded */
    bool own;              /* our own shard (we are behind, or damaged here):
                                 * caught-up replicas only, else served here */
    bool patient;          /* second round: wait for a connection */
    bool second_hop;       /* forwarded to us by a node of the map ours splits */
    bool damaged_here;     /* dd_forward_damaged was asked for this call */
    bool counted;          /* holds one of the shard's places */
    int64_t start_ns;      /* of this try */
    gpr_timespec deadline; /* ours; grpc takes the earlier of it and the caller's */
    grpc_metadata md[4];
    struct dd_unary u;
};

/* Empty F for forwarder FW (NULL: a single node; dd_forward_route is
 * then never called). No allocation; cannot fail. dd_forward_release
 * frees what a try left, once the slot is done with for good. */
void dd_forward_init(struct dd_forward *f, dd_forwarder *fw);
void dd_forward_release(struct dd_forward *f);

/* A new call came to F's slot: forget the last one's damaged mark.
 * Cannot fail. */
void dd_forward_new_call(struct dd_forward *f);

/* What dd_forward_route decided. */
enum dd_route {
    DD_ROUTE_ERROR = -1,    /* answer with *status and msg */
    DD_ROUTE_HERE = 0,      /* serve it here */
    DD_ROUTE_HERE_DEGRADED, /* serve it here, a Filter answer degraded: this
                                 * node is behind and no caught-up replica of its
                                 * shard could be called */
    DD_ROUTE_FORWARDED,     /* a try is in flight: its completion comes to
                                 * C->cq with C->tag; pass it to dd_forward_done */
};

/* Route C's call by the user_id in its request DATA (LEN bytes; field 1
 * of every Dedup request, read with dd_wire_bytes_field, nothing else
 * decoded). A call of this node's shard is served here, unless this node
 * is behind: then a caught-up replica of its own shard is asked. A call
 * forwarded to us (DD_CLUSTER_MD_FROM) is checked (the sender's map agrees
 * with ours or one splits the other, else FAILED_PRECONDITION) and never
 * forwarded again, but once while resharding (DD_CLUSTER_MD_HOP2). A call
 * of another shard takes one of its places (dd_cluster_forward_begin;
 * refused at once UNAVAILABLE when the shard is full or down) and goes to
 * its first replica. A missing user_id is served here (the method's own
 * checks refuse it). On DD_ROUTE_ERROR, *STATUS and MSG (MSGLEN bytes) say
 * how to answer. */
enum dd_route dd_forward_route(struct dd_forward *f, const struct dd_forward_call *c,
                               const uint8_t *data, size_t len, grpc_status_code *status, char *msg,
                               size_t msglen);

/* A Filter served here met this user's damaged history (history.h): ask a
 * caught-up replica of our own shard once, whose copy the damage did not
 * reach. Not for a call forwarded to us (its sender tries the next replica
 * on our UNAVAILABLE), nor twice for one call. Returns true when a try is
 * in flight (as DD_ROUTE_FORWARDED; when no replica answers,
 * dd_forward_done says DD_FORWARD_HERE_DEGRADED and the call, served here
 * again, answers UNAVAILABLE); false to answer here. */
bool dd_forward_damaged(struct dd_forward *f, const struct dd_forward_call *c);

/* What to do once a try completed. */
enum dd_forward_end {
    DD_FORWARD_PENDING = 0,   /* the next replica is being tried: wait again */
    DD_FORWARD_ANSWER,        /* answer with *status, *reply (owned by the caller,
                                 * NULL for none) and, unless OK, msg */
    DD_FORWARD_HERE_DEGRADED, /* no caught-up replica of our own shard answered:
                                 * serve the call here, a Filter answer degraded */
};

/* F's try completed (OK: its batch succeeded). UNAVAILABLE, an answer over
 * the receive limit, or a patient try out of its own time with the
 * caller's left moves on to the next replica while the deadline allows;
 * anything else is the answer, the peer's status and its text (sanitized,
 * dd_sanitize) passed on, a Filter answer marked degraded when the replica
 * was behind. Each try is counted (dd_cluster_forwarded) and the shard's
 * place is given back once the forward ended. */
enum dd_forward_end dd_forward_done(struct dd_forward *f, int ok, grpc_status_code *status,
                                    grpc_byte_buffer **reply, char *msg, size_t msglen);

#endif
