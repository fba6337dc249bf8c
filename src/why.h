/* SPDX-License-Identifier: Apache-2.0
 *
 * why.h - the operator's questions about one user, served on the admin
 * listener (admin.h handlers, loopback clients only): "why was this item
 * removed?" (GET /why) and the list of traced users (GET, POST, DELETE
 * /trace). dedupctl's `why` and `trace` commands call these.
 *
 * DESIGN
 *
 * /why?user=U&scene=S&lookback=D&item=I&item=J... decides the items with
 * the real Filter code (filter.h, dd_filter_decide on a dd_filter of its
 * own, with its own Redis connection), so that its verdicts agree with
 * Filter's, and adds what Filter does not say: the history probe alone
 * (so a delivered item that was also played says so), the delivery time
 * from Redis (the sorted set's score), and, for a traced user (trace.h),
 * the trace records: when and from where an item was played (Kafka topic,
 * partition, offset; or RecordPlays), delivered, or forgotten. Verdicts
 * per item (dd_why_explain):
 *   kept         Filter keeps it (with the trace's note if it was played
 *                and forgotten, or played outside the lookback/retention);
 *   duplicate    an earlier candidate of the request has the same id;
 *   delivered    in Redis' recent deliveries, with the delivery time;
 *   played       the filter says so: with the time and source of the
 *                trace record; without one, for a traced user, "false
 *                positive of the filter" when the trace covers every day
 *                the history can still hold, else "played before
 *                tracing began (since T), or dated before what the trace
 *                keeps, or a false positive"; for an
 *                untraced user, that no trace is kept.
 * A play is forgotten when a forget of its scene was recorded after it
 * (by the time dedupd recorded them, in the order it wrote them).
 *
 * One request at a time per dd_why (a mutex around the filter, the Redis
 * connection and the arena): the admin listener serves operators, not
 * traffic. In a cluster a node answers only for users of its own shard;
 * others get 421 naming the user's shard and its nodes (no forwarding:
 * ask one of those nodes' admin listeners).
 */
#ifndef DD_WHY_H
#define DD_WHY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "admin.h"
#include "filter.h"
#include "recent.h"
#include "trace.h"

typedef struct dd_why dd_why;
typedef struct dd_cluster dd_cluster;

/* What the answers need of the configuration. */
struct dd_why_conf {
    struct dd_filter_conf filter; /* rpc.max_candidates, rpc.max_id_bytes, recent.size */
    uint32_t history_days;        /* retention_days + segment_days + 1: the oldest day
                                    * the history may still answer for */
    uint32_t trace_retention_days;
};

/* Create the answerer over HISTORY, TRACE and CLUSTER (NULL: a single
 * node), all borrowed and outliving it; RECENT is the Redis to ask (a
 * connection of its own, lazy). Returns 0, DD_ERR_INVALID (bad Redis
 * address) or DD_ERR_NOMEM with a message in err; *out NULL on error. */
int dd_why_new(dd_why **out, const struct dd_why_conf *conf, const struct dd_recent_conf *recent,
               dd_history *history, dd_trace *trace, dd_cluster *cluster, char *err, size_t errlen);
void dd_why_free(dd_why *w); /* NULL is a no-op */

/* The admin handlers (admin.h, dd_admin_handler_fn; UD = the dd_why):
 *   GET  /why?user=U[&scene=S][&lookback=D][&min_kept=K][&also_scene=A...]&item=I...
 *        200 {"user","scene","also_scenes","lookback_days","min_kept",
 *             "lookback_used_days","traced","since_ms","since","note","degraded",
 *             "items":[{"item","index","verdict","detail","time_ms","time",
 *                       "source","history","recent","scene"}...]}
 *        (an item's "scene": where a played or delivered one was found, as
 *        Filter's explain names it; null for the others)
 *   GET  /trace               200 {"users":[{"user","since_ms","since","from_config"}],
 *                                  "max_users"}
 *   POST /trace?user=U        200 {"user","added","since_ms","since"}
 *   DELETE /trace?user=U      200 {"user","removed":true}
 * Errors: {"error": "..."} with 400 (bad argument), 404 (not traced),
 * 405 (method), 409 (trace.max_users), 421 (another shard's user), 503
 * (history, Redis for a traced add, or no space). Times are UTC ISO-8601
 * with milliseconds ("2024-10-04T12:00:00.000Z"). */
char *dd_why_page(void *ud, const dd_admin_request *r, unsigned *status, const char **content_type);
char *dd_why_trace_page(void *ud, const dd_admin_request *r, unsigned *status,
                        const char **content_type);

/* ---- the verdict, alone (for tests) ---------------------------------------- */

/* What is known of the user. */
struct dd_why_user {
    bool traced;
    int64_t since_ms; /* when its trace began */
    int64_t now_ms;
    int64_t trace_retention_ms;
    int64_t history_ms; /* how far back the history may answer */
};

/* What is known of one item. Trace records are borrowed. */
struct dd_why_item {
    uint8_t reason;                       /* Filter's: 0 kept, else a Dedup__V1__Reason */
    uint32_t first_index;                 /* DUPLICATE: the first candidate with this id */
    bool history;                         /* the history probe says played */
    int64_t delivered_ms;                 /* Redis' time of its delivery; 0 = not there */
    const struct dd_trace_rec *play;      /* latest traced play not forgotten */
    const struct dd_trace_rec *forgotten; /* latest traced play a forget undid */
    int64_t forget_ms;                    /* that forget's time */
    const struct dd_trace_rec *delivery;  /* latest traced delivery */
    uint32_t let_back;                    /* kept though played: min_kept shortened the
                                           * lookback to this many days (0: not so) */
};

struct dd_why_verdict {
    const char *verdict; /* "kept", "duplicate", "delivered", "played" (static) */
    char detail[400];
    int64_t time_ms;  /* -1: none known */
    char source[320]; /* "" when none: "kafka plays/3@1234", "RecordPlays", ... */
};

/* The verdict on IT for user U. Cannot fail. */
void dd_why_explain(const struct dd_why_user *u, const struct dd_why_item *it,
                    struct dd_why_verdict *out);

/* MS as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC) into OUT (at least 32 bytes). */
void dd_why_iso8601(int64_t ms, char *out, size_t outlen);

#endif
