/* SPDX-License-Identifier: Apache-2.0
 *
 * rpcstats.h - the front end's per-method counters: calls answered by
 * method and gRPC status, their latency, calls cancelled, replies
 * cancelled for rpc.send_timeout_ms and calls refused for stalled replies;
 * their snapshot for dd_rpc_get_stats (rpc.h) and the dedupd_rpc_*
 * families. Knows nothing of how calls are served.
 *
 * Every counter is a relaxed atomic (and a metrics.h histogram), written
 * by any worker and read by a scrape without a lock.
 */
#ifndef DD_RPCSTATS_H
#define DD_RPCSTATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "api.h"
#include "metrics.h"

/* One method's counters, as read (dd_rpc_get_stats, rpc.h); every one
 * monotonic since dd_rpcstats_init. */
struct dd_rpc_method_stats {
    const char *name;                        /* "/dedup.v1.Dedup/Filter", static */
    uint64_t by_status[DD_API_STATUS_COUNT]; /* calls answered, by grpc status */
    struct dd_histogram_snap latency;        /* seconds, from the call being
                                                    * matched to its status sent */
    uint64_t cancelled;                      /* calls the peer or deadline cancelled */
    uint64_t send_timeouts;                  /* of them, cancelled for rpc.send_timeout_ms */
    uint64_t stall_refusals;                 /* refused at once, or cancelled, because replies their
                                * connection did not take held their share of the slots */
};
struct dd_rpc_stats {
    struct dd_rpc_method_stats method[DD_API_METHOD_COUNT];
    uint64_t in_flight; /* calls being worked on now */
    bool serving;
};

/* The live counters, embedded in the server; members are rpcstats.c's. */
struct dd_rpcstats {
    struct {
        _Atomic uint64_t by_status[DD_API_STATUS_COUNT];
        struct dd_histogram latency; /* seconds: 50 us .. 1 s */
        _Atomic uint64_t cancelled;
        _Atomic uint64_t send_timeouts;
        _Atomic uint64_t stall_refusals;
    } m[DD_API_METHOD_COUNT];
};

/* Zero ST. Before any other use, on one thread. Cannot fail. */
void dd_rpcstats_init(struct dd_rpcstats *st);

/* A call of method M was answered with STATUS (other codes count as
 * UNKNOWN) after US microseconds; CANCELLED: by its peer or deadline.
 * Thread-safe; cannot fail. */
void dd_rpcstats_call(struct dd_rpcstats *st, enum dd_api_method m, int status, int64_t us,
                      bool cancelled);
/* A reply of M cancelled for rpc.send_timeout_ms; a call of M refused (or
 * its reply cancelled) for stalled replies. Thread-safe; cannot fail. */
void dd_rpcstats_send_timeout(struct dd_rpcstats *st, enum dd_api_method m);
void dd_rpcstats_stall_refusal(struct dd_rpcstats *st, enum dd_api_method m);

/* Copy ST's counters into OUT->method (the rest of OUT untouched). */
void dd_rpcstats_get(const struct dd_rpcstats *st, struct dd_rpc_stats *out);

/* Render S as the dedupd_rpc_* families (requests, duration, cancelled,
 * send timeouts, stall refusals, in flight). */
void dd_rpcstats_render(dd_prom *p, const struct dd_rpc_stats *s);

#endif
