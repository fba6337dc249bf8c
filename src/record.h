/* SPDX-License-Identifier: Apache-2.0
 *
 * record.h - the Dedup writes, on decoded messages: the calls that make
 * items seen (RecordDelivery to recent deliveries in Redis, RecordPlays to
 * the history store) or unseen (ForgetUser, both stores). Filter, which
 * reads what these write, is filter.h's.
 * No sockets, no gRPC: serve.c decodes with protobuf-c, calls these, maps
 * the returned code to a status and encodes.
 *
 * DESIGN
 *
 * A dd_record belongs to one thread: it holds a history write batch that
 * RecordPlays reuses, so a call allocates nothing but from the caller's
 * arena. The RPC layer owns one per worker, next to that worker's
 * dd_filter and Redis connection. RecordPlays sorts its plays by segment
 * so that each segment gets one merge operand, and writes the whole
 * request in one batch: it is all written or none of it. Every play is
 * validated before anything is written, so one bad play rejects the
 * request. ForgetUser deletes plays before deliveries and is idempotent,
 * so a caller told UNAVAILABLE retries it whole.
 *
 * On a cluster node (a dd_producer given) the writes that bypass Kafka
 * also go to the plays topic (producer.h), for the shard's other
 * replicas: RecordPlays produces the plays it wrote, after the local
 * write; ForgetUser produces a forget marker (ingest.h) and returns once
 * this node's ingest applied it, so that it takes effect here in log
 * order. A call succeeds only once both halves are durable. A failed produce leaves the local write in
 * place and answers UNAVAILABLE; both halves are idempotent, so the
 * caller retries the whole call.
 *
 * Counters are process-wide relaxed atomics, as in filter.h.
 */
#ifndef DD_RECORD_H
#define DD_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "dedup.pb-c.h"

/* A writer's limits: rpc.max_candidates (items per request) and
 * rpc.max_id_bytes. */
struct dd_record_conf {
    uint32_t max_items;    /* more items in one request: DD_ERR_LIMIT */
    uint32_t max_id_bytes; /* a longer user or item id: DD_ERR_INVALID */
};

typedef struct dd_arena dd_arena;
typedef struct dd_history dd_history;
typedef struct dd_recent dd_recent;
typedef struct dd_producer dd_producer;
typedef struct dd_prom dd_prom;
typedef struct dd_record dd_record;

/* Create a writer over HISTORY (shared, borrowed), RECENT (this thread's
 * connection, borrowed) and PRODUCER (shared, borrowed; NULL = a single
 * node: nothing is produced); CONF is copied. The handles must outlive
 * the writer. Returns 0 or DD_ERR_NOMEM (message in err); *out is NULL on
 * error. Free with dd_record_free (NULL is a no-op). */
int dd_record_new(dd_record **out, const struct dd_record_conf *conf, dd_history *history,
                  dd_recent *recent, dd_producer *producer, char *err, size_t errlen);
void dd_record_free(dd_record *r);

/* Keep traces (trace.h) of the traced users' writes done by R: each
 * RecordPlays play stored (source RecordPlays, its resolved time), each
 * RecordDelivery id (source RecordDelivery, the delivery time Redis got),
 * each ForgetUser (source ForgetUser, now), recorded after the write
 * succeeded; a trace failure never fails the call (the trace counts it).
 * TRACE is borrowed and must outlive R; NULL (the default) = none.
 * Untraced users cost one dd_trace_wanted per call. Cannot fail. */
typedef struct dd_trace dd_trace;
void dd_record_set_trace(dd_record *r, dd_trace *trace);

/* The calls below return 0 or, with a message naming the request field in
 * err, the codes of filter.h (DD_ERR_INVALID, DD_ERR_LIMIT,
 * DD_ERR_UNAVAILABLE, DD_ERR_NOMEM), which serve.c maps to the same gRPC
 * statuses. On error the response must not be sent. Responses are
 * initialised here. */

/* RecordDelivery: the ids go to recent deliveries (dd_recent_record);
 * delivered_at_ms 0 = now. Redis down or timing out: DD_ERR_UNAVAILABLE
 * (nothing was recorded, or not for sure). Empty item_ids is
 * DD_ERR_INVALID, and so is a delivered_at_ms more than
 * history.max_future_ms ahead of the history's clock (it would push
 * genuine deliveries out of the last recent.size). Scratch lives in
 * ARENA. */
int dd_record_delivery(dd_record *r, dd_arena *arena, const Dedup__V1__RecordDeliveryRequest *req,
                       Dedup__V1__RecordDeliveryResponse *resp, char *err, size_t errlen);

/* RecordPlays: every play is validated first (a bad one rejects the whole
 * request, nothing written); played_at_ms 0 = now by the history's clock;
 * plays older than the retention are counted in resp->expired and
 * skipped; a play dated more than history.max_future_ms ahead is
 * DD_ERR_INVALID naming plays[i].played_at_ms. The rest go in one batch,
 * one operand per segment, and are durable and visible to the next Filter
 * when this returns 0. A write error is DD_ERR_UNAVAILABLE. With a
 * producer the accepted plays, with their resolved times, are then
 * produced (within the producer's timeout); if that fails the call is
 * DD_ERR_UNAVAILABLE, its message saying the plays were written here and
 * the call is safe to retry. Scratch lives in ARENA. */
int dd_record_plays(dd_record *r, dd_arena *arena, const Dedup__V1__RecordPlaysRequest *req,
                    Dedup__V1__RecordPlaysResponse *resp, char *err, size_t errlen);

/* ForgetUser: delete the user's plays, then deliveries. With a producer
 * (a cluster): delete deliveries, then produce a forget marker and wait
 * until this node's ingest has applied it (producer.h says why the plays
 * are not deleted here directly). Any of them failing is
 * DD_ERR_UNAVAILABLE or DD_ERR_TIMEOUT (the call is idempotent: retry it).
 * With req->all_scenes (req->scene must be "": else DD_ERR_INVALID) the
 * same for every scene: the history's (dd_history_user_scenes) and
 * Redis' (dd_recent_forget_all); a cluster produces one all-scenes marker.
 * resp->scenes lists the scenes forgotten (proto/dedup.proto), in ARENA. */
int dd_record_forget(dd_record *r, dd_arena *arena, const Dedup__V1__ForgetUserRequest *req,
                     Dedup__V1__ForgetUserResponse *resp, char *err, size_t errlen);

/* Process-wide counters since start (atomic), for metrics. Cannot fail. */
struct dd_record_stats {
    uint64_t history_errors; /* history writes that failed */
    uint64_t deliveries;     /* item ids recorded by RecordDelivery */
    uint64_t plays;          /* plays written by RecordPlays */
    uint64_t plays_expired;  /* plays skipped as older than the retention */
};
void dd_record_get_stats(struct dd_record_stats *out);

/* Render dedupd_deliveries_recorded_total. (Plays are rendered with
 * Kafka's, by plays.h; history errors with Filter's, by rpc.c.) */
void dd_record_collect(dd_prom *p);

#endif
