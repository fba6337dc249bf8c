/* SPDX-License-Identifier: Apache-2.0
 *
 * rpcstats.c - the front end's per-method counters; see rpcstats.h.
 */
#include "rpcstats.h"

#include "dd.h"

#include <string.h>

/* Upper bounds of the latency buckets in seconds (+Inf implied). */
static const double latency_bounds[] = {
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 1.0,
};

void dd_rpcstats_init(struct dd_rpcstats *st)
{
    memset(st, 0, sizeof *st);
    for (int m = 0; m < DD_API_METHOD_COUNT; m++)
        dd_histogram_init(&st->m[m].latency, latency_bounds, DD_ARRAY_LEN(latency_bounds));
}

void dd_rpcstats_call(struct dd_rpcstats *st, enum dd_api_method m, int status, int64_t us,
                      bool cancelled)
{
    if (us < 0) us = 0;
    /* grpc's UNKNOWN (2) for a code outside the table */
    unsigned code = (unsigned)status < DD_API_STATUS_COUNT ? (unsigned)status : 2u;
    atomic_fetch_add_explicit(&st->m[m].by_status[code], 1, memory_order_relaxed);
    /* Whole microseconds, as a call's latency has always been counted. */
    dd_histogram_observe(&st->m[m].latency, (double)us / 1e6);
    if (cancelled) atomic_fetch_add_explicit(&st->m[m].cancelled, 1, memory_order_relaxed);
}

void dd_rpcstats_send_timeout(struct dd_rpcstats *st, enum dd_api_method m)
{
    atomic_fetch_add_explicit(&st->m[m].send_timeouts, 1, memory_order_relaxed);
}

void dd_rpcstats_stall_refusal(struct dd_rpcstats *st, enum dd_api_method m)
{
    atomic_fetch_add_explicit(&st->m[m].stall_refusals, 1, memory_order_relaxed);
}

void dd_rpcstats_get(const struct dd_rpcstats *st, struct dd_rpc_stats *out)
{
    for (int m = 0; m < DD_API_METHOD_COUNT; m++) {
        struct dd_rpc_method_stats *o = &out->method[m];
        memset(o, 0, sizeof *o);
        o->name = dd_api_method_path(m);
        for (int c = 0; c < DD_API_STATUS_COUNT; c++)
            o->by_status[c] = atomic_load_explicit(&st->m[m].by_status[c], memory_order_relaxed);
        dd_histogram_snapshot(&st->m[m].latency, &o->latency);
        o->cancelled = atomic_load_explicit(&st->m[m].cancelled, memory_order_relaxed);
        o->send_timeouts = atomic_load_explicit(&st->m[m].send_timeouts, memory_order_relaxed);
        o->stall_refusals = atomic_load_explicit(&st->m[m].stall_refusals, memory_order_relaxed);
    }
}

void dd_rpcstats_render(dd_prom *p, const struct dd_rpc_stats *sp)
{
    const struct dd_rpc_stats s = *sp;
    dd_prom_family(p, "dedupd_rpc_requests_total", "gRPC calls answered, by method and status",
                   DD_PROM_COUNTER);
    for (int m = 0; m < DD_API_METHOD_COUNT; m++) {
        for (int c = 0; c < DD_API_STATUS_COUNT; c++) {
            uint64_t v = s.method[m].by_status[c];
            /* OK is always there for the Dedup methods (rates start at 0);
             * other codes appear once they happen. */
            if (v == 0 && !(c == 0 && m <= DD_API_FORGET_USER)) continue;
            struct dd_prom_label l[] = {{"method", dd_api_method_name(m)},
                                        {"code", dd_api_status_name(c)}};
            dd_prom_sample_u64(p, "dedupd_rpc_requests_total", l, 2, v);
        }
    }
    dd_prom_family(p, "dedupd_rpc_duration_seconds",
                   "gRPC call latency, from the call being matched to its status sent",
                   DD_PROM_HISTOGRAM);
    for (int m = 0; m < DD_API_METHOD_COUNT; m++) {
        const struct dd_histogram_snap *h = &s.method[m].latency;
        if (h->count == 0 && m > DD_API_FORGET_USER) continue;
        struct dd_prom_label l = {"method", dd_api_method_name(m)};
        dd_prom_histogram(p, "dedupd_rpc_duration_seconds", &l, 1, h);
    }
    dd_prom_family(p, "dedupd_rpc_cancelled_total",
                   "gRPC calls cancelled by the peer or their deadline", DD_PROM_COUNTER);
    for (int m = 0; m <= DD_API_FORGET_USER; m++) {
        struct dd_prom_label l = {"method", dd_api_method_name(m)};
        dd_prom_sample_u64(p, "dedupd_rpc_cancelled_total", &l, 1, s.method[m].cancelled);
    }
    dd_prom_family(p, "dedupd_rpc_send_timeouts_total",
                   "gRPC calls cancelled because the peer did not take the reply within "
                   "rpc.send_timeout_ms",
                   DD_PROM_COUNTER);
    for (int m = 0; m <= DD_API_FORGET_USER; m++) {
        struct dd_prom_label l = {"method", dd_api_method_name(m)};
        dd_prom_sample_u64(p, "dedupd_rpc_send_timeouts_total", &l, 1, s.method[m].send_timeouts);
    }
    dd_prom_family(p, "dedupd_rpc_stall_refusals_total",
                   "gRPC calls refused at once, or cancelled, because replies their connection "
                   "did not take (HTTP/2 window shut) already held their share of the call slots",
                   DD_PROM_COUNTER);
    for (int m = 0; m <= DD_API_FORGET_USER; m++) {
        struct dd_prom_label l = {"method", dd_api_method_name(m)};
        dd_prom_sample_u64(p, "dedupd_rpc_stall_refusals_total", &l, 1, s.method[m].stall_refusals);
    }
    dd_prom_gauge(p, "dedupd_rpc_in_flight", "gRPC calls being worked on", s.in_flight);
}
