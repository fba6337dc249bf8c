/* SPDX-License-Identifier: Apache-2.0
 *
 * filter.h - the Filter decision, on a decoded request: which candidates a
 * user has not seen. The writes that make items seen or unseen
 * (RecordDelivery, RecordPlays, ForgetUser) are record.h's.
 * No sockets, no gRPC: serve.c decodes (wire.h, or protobuf-c), calls this,
 * maps the returned code to a status (see below) and encodes.
 *
 * DESIGN
 *
 * A call hashes every id once (dd_hash) and gives each candidate one
 * reason byte, in request order, in passes that sort nothing:
 *   - in-request duplicates, found in this worker's candidate hash set
 *     (candset.h): the first occurrence stays, later ones are DUPLICATE;
 *   - history (dd_history_probe_any within lookback_days, to the day in a
 *     day scene: history.h): candidates
 *     still kept that it holds become PLAYED;
 *   - recent deliveries (recent.h): DELIVERED, also over PLAYED;
 *   - with min_kept, when fewer than min_kept would be kept: the lookback
 *     is shortened (lookback.h) from the ages the history probe recorded,
 *     and PLAYED candidates older than it are kept; never below
 *     history.min_lookback_days, never a DELIVERED or DUPLICATE one.
 * With also_scenes the history probe and the Redis fetch each cover the
 * request's scene and those in one read (dd_history_probe_scenes, one
 * MultiGet; dd_recent_fetch_begin_scenes, one pipeline).
 * Redis is asked before the hashing and answered after the history probe,
 * so its round trip overlaps the work. If Redis fails or times out the
 * call answers from the history alone (degraded); if the history cannot be
 * read, or is damaged for this user, the call fails (UNAVAILABLE): a seen
 * item is never reported unseen because the store could not be read.
 *
 * Ids are (pointer, length), so they can stay in the received gRPC bytes
 * (wire.h) or be protobuf-c's strings (dd_filter_run). Per-call arrays are
 * O(1) allocations from the caller's arena, none per candidate, so after
 * the first calls a call touches no malloc.
 *
 * A dd_filter belongs to one thread (it holds the candidates' table and the
 * buffer for recent hashes); the RPC layer owns one per worker.
 */
#ifndef DD_FILTER_H
#define DD_FILTER_H

#include <stddef.h>
#include <stdint.h>

#include "dedup.pb-c.h"

/* A decider's limits: rpc.max_candidates, rpc.max_id_bytes, recent.size. */
struct dd_filter_conf {
    uint32_t max_candidates; /* more candidates: DD_ERR_LIMIT */
    uint32_t max_id_bytes;   /* a longer user or item id: DD_ERR_INVALID */
    uint32_t recent_size;    /* deliveries Redis keeps per (scene, user) */
};

typedef struct dd_arena dd_arena;
typedef struct dd_history dd_history;
typedef struct dd_recent dd_recent;
typedef struct dd_filter dd_filter;

/* Create a filter over HISTORY (shared, borrowed) and RECENT (this
 * thread's connection, borrowed); CONF is copied. Both handles must
 * outlive the filter. Returns 0 or DD_ERR_NOMEM (message in err); *out is
 * NULL on error. Free with dd_filter_free. */
int dd_filter_new(dd_filter **out, const struct dd_filter_conf *conf, dd_history *history,
                  dd_recent *recent, char *err, size_t errlen);
void dd_filter_free(dd_filter *f); /* NULL is a no-op */

/* Return codes of the calls below and the gRPC status serve.c maps them to:
 *   0                   OK
 *   DD_ERR_INVALID      INVALID_ARGUMENT   (bad field; err names it)
 *   DD_ERR_LIMIT        RESOURCE_EXHAUSTED (too many entries; err names the field)
 *   DD_ERR_UNAVAILABLE  UNAVAILABLE        (history unreadable/unwritable, or
 *                                           Redis down where it is required)
 *   DD_ERR_CORRUPT      UNAVAILABLE        (this user's stored history is
 *                                           damaged, history.h: another
 *                                           replica may hold it intact)
 *   DD_ERR_TIMEOUT      DEADLINE_EXCEEDED  (the call's deadline passed)
 *   DD_ERR_NOMEM        RESOURCE_EXHAUSTED (the arena could not grow)
 * On any error the response must not be sent. Responses are initialised
 * here; their arrays live in ARENA (until its reset) and may point into
 * the request, which must outlive them. */

/* Most also_scenes a request may name (proto/dedup.proto). */
#define DD_FILTER_ALSO_MAX 8

/* One candidate id: LEN bytes at P (not NUL-terminated; borrowed). */
struct dd_filter_id {
    const char *p;
    size_t len;
};

/* A Filter request, decoded (wire.h) or taken from protobuf-c
 * (dd_filter_run). Every pointer is borrowed and must outlive the call and
 * its result. */
struct dd_filter_query {
    const char *user_id;
    size_t user_len;
    const char *scene;
    size_t scene_len;
    uint32_t lookback_days;
    int32_t mode;                   /* a Dedup__V1__ResponseMode, as received */
    int explain;                    /* fill the removed list */
    size_t n;                       /* candidates */
    const struct dd_filter_id *ids; /* n ids; may be NULL when n > rpc.max_candidates */
    /* Compact candidates (FilterRequest.candidate_hashes): n item hashes,
     * each what dd_hash gives for its id, instead of IDS (then NULL).
     * A hash is compared wherever its id's hash would be; equal hashes
     * are duplicates. Mode must then be RESPONSE_MODE_INDEXES (the
     * decoders set it). May be NULL when n > rpc.max_candidates. */
    const uint64_t *hashes;
    int by_hash;       /* the candidates are HASHES (also when that is NULL) */
    uint32_t min_kept; /* let old plays back in below this many kept (0: never) */
    size_t n_also;     /* also_scenes in the request, every one counted */
    struct dd_filter_id also[DD_FILTER_ALSO_MAX]; /* the first DD_FILTER_ALSO_MAX of them */
};

/* What Filter decided: one reason byte per candidate, in request order,
 * which the caller encodes (wire.h, or dd_filter_run's protobuf-c struct).
 * A candidate both delivered and played counts as DELIVERED. */
struct dd_filter_result {
    const uint8_t *reason; /* n entries: 0 kept, else a Dedup__V1__Reason; in the arena */
    size_t kept;           /* entries with reason 0 */
    uint32_t played, delivered, duplicate;
    int degraded;           /* answered without Redis */
    uint32_t lookback_used; /* the lookback applied, in days (lookback_used_days) */
    const uint8_t *scene;   /* with also_scenes and explain, n entries: where a PLAYED or
                             * DELIVERED candidate was found, 0 the request's scene, k its
                             * also[k - 1]; else NULL. In the arena */
};

/* Filter Q. DEADLINE_NS is a dd_mono_ns() time after which the call stops
 * working and returns DD_ERR_TIMEOUT (0 = no deadline); it is checked
 * before the Redis fetch and before the history probe. Scratch and
 * R->reason live in ARENA (until its reset). Returns 0 or an error code as
 * listed above (R is then unspecified).
 *
 * Order: dd_recent_fetch_begin (at most recent.size hashes), validate and
 * hash, duplicates, history, dd_recent_fetch_end; a call that fails in
 * between gives the fetch up (dd_recent_fetch_cancel). Duplicates: a hash
 * found in the table is confirmed on the id's bytes; one table access per
 * candidate costs less than a sort would. A recent hash is looked up in
 * the same table and marks every first occurrence with that hash
 * DELIVERED (later ones are DUPLICATE already). */
int dd_filter_decide(dd_filter *f, dd_arena *arena, const struct dd_filter_query *q,
                     struct dd_filter_result *r, int64_t deadline_ns, char *err, size_t errlen);

/* Filter on a protobuf-c request: dd_filter_decide, with RESP built in
 * ARENA (kept_ids point into REQ). Same deadline and return codes. */
int dd_filter_run(dd_filter *f, dd_arena *arena, const Dedup__V1__FilterRequest *req,
                  Dedup__V1__FilterResponse *resp, int64_t deadline_ns, char *err, size_t errlen);

/* Process-wide counters since start (atomic), for metrics. Cannot fail. */
struct dd_filter_stats {
    uint64_t filter_calls; /* Filter calls that returned OK */
    uint64_t candidates;   /* candidates in those calls */
    uint64_t removed_played;
    uint64_t removed_delivered;
    uint64_t removed_duplicate;
    uint64_t degraded;       /* Filter answers given without Redis */
    uint64_t history_errors; /* history reads that failed */
};
void dd_filter_get_stats(struct dd_filter_stats *out);

/* Candidates per Filter call answered OK, as a histogram over
 * dd_metrics_count_bounds (metrics.h), for /metrics. Cannot fail. */
struct dd_histogram_snap;
void dd_filter_get_candidates(struct dd_histogram_snap *out);

/* Render dedupd_filter_calls_total, _candidates_total, _candidates (the
 * histogram), _removed_total{reason} and _degraded_total from the
 * counters above. The history error count is not rendered here: the RPC
 * layer renders it with record.h's write errors as one family. */
typedef struct dd_prom dd_prom;
void dd_filter_collect(dd_prom *p);

#endif
