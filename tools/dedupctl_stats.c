/* SPDX-License-Identifier: Apache-2.0
 *
 * dedupctl_stats.c - see dedupctl_stats.h: `dedupctl stats`, two scrapes of
 * an admin listener's /metrics and the numbers an operator wants first.
 */
#include "dedupctl_stats.h"
#include "dd.h"
#include "httpget.h"
#include "metrics.h"
#include "promtext.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int scrape(const char *addr, dd_promtext **t, char *err, size_t errlen)
{
    char *body;
    size_t len;
    int status;
    int rc = dd_http_get(addr, "/metrics", 5000, &status, &body, &len, err, errlen);
    if (rc) return rc;
    if (status != 200) {
        snprintf(err, errlen, "%s/metrics: HTTP %d", addr, status);
        free(body);
        return DD_ERR_INVALID;
    }
    char perrbuf[200];
    rc = dd_promtext_parse(body, len, t, perrbuf, sizeof perrbuf);
    free(body);
    if (rc) snprintf(err, errlen, "%s/metrics: %s", addr, perrbuf);
    return rc;
}

/* The difference of two cumulative snapshots with the same bounds. */
static void snap_sub(struct dd_histogram_snap *d, const struct dd_histogram_snap *a,
                     const struct dd_histogram_snap *b)
{
    *d = *b;
    for (size_t i = 0; i <= b->nbounds; i++)
        d->buckets[i] = b->buckets[i] >= a->buckets[i] ? b->buckets[i] - a->buckets[i] : 0;
    d->count = d->buckets[b->nbounds];
    d->sum = b->sum - a->sum;
}

/* The consumer lag line: in time from dedupd_ingest_lag_seconds where the
 * daemon exports it (absent: not known; a node of the release before
 * exports dedupd_ingest_lag_ms instead, negative when not known), and in
 * messages from dedupd_ingest_consumer_lag (per partition: their sum and
 * the worst). When neither is there, why: no partition assigned, or no
 * statistics yet (they come every kafka.statistics.interval.ms). */
static void print_lag(FILE *out, const dd_promtext *t)
{
    const char *label = "consumer lag";
    double ms = dd_promtext_max(t, "dedupd_ingest_lag_seconds", NULL, NULL) * 1e3; /* NaN: none */
    if (isnan(ms)) ms = dd_promtext_max(t, "dedupd_ingest_lag_ms", NULL, NULL);
    bool have_ms = !isnan(ms) && ms >= 0;
    const char *part = NULL;
    size_t nparts = 0;
    double msgs = dd_promtext_sum(t, "dedupd_ingest_consumer_lag", NULL, NULL, &nparts);
    double maxmsgs = dd_promtext_max(t, "dedupd_ingest_consumer_lag", "partition", &part);
    char msgs_txt[160] = "";
    if (nparts)
        snprintf(msgs_txt, sizeof msgs_txt,
                 "%.0f messages over %zu partitions (max %.0f on partition %s)", msgs, nparts,
                 maxmsgs, part ? part : "?");
    if (have_ms)
        fprintf(out, "%-22s %.0f ms behind%s%s\n", label, ms, nparts ? "; " : "", msgs_txt);
    else if (nparts)
        fprintf(out, "%-22s %s\n", label, msgs_txt);
    else {
        size_t f = 0;
        double assigned = dd_promtext_sum(t, "dedupd_ingest_assigned_partitions", NULL, NULL, &f);
        if (f && assigned > 0)
            fprintf(out,
                    "%-22s - (%.0f partitions assigned, no lag in librdkafka's statistics "
                    "yet: they come every kafka.statistics.interval.ms)\n",
                    label, assigned);
        else if (f)
            fprintf(out, "%-22s - (no partition assigned)\n", label);
        else
            fprintf(out, "%-22s - (no partition assigned or no statistics yet)\n", label);
    }
}

int dedupctl_stats(const char *addr, int interval_ms, FILE *out, char *err, size_t errlen)
{
    dd_promtext *a = NULL, *b = NULL;
    err[0] = '\0';
    int rc = scrape(addr, &a, err, errlen);
    if (rc) return rc;
    int64_t t0 = dd_mono_ns();
    struct timespec ts = {interval_ms / 1000, (long)(interval_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    rc = scrape(addr, &b, err, errlen);
    if (rc) goto out;
    double secs = (double)(dd_mono_ns() - t0) / 1e9;
    if (secs <= 0) secs = 1e-9;

    static const char *const methods[] = {"Filter", "RecordDelivery", "RecordPlays", "ForgetUser"};
    const char *req = "dedupd_rpc_requests_total";
    double all =
        (dd_promtext_sum(b, req, NULL, NULL, NULL) - dd_promtext_sum(a, req, NULL, NULL, NULL)) /
        secs;
    double ok = (dd_promtext_sum(b, req, "code", "OK", NULL) -
                 dd_promtext_sum(a, req, "code", "OK", NULL)) /
                secs;
    fprintf(out, "%-22s %.1f\n", "requests/s", all);
    for (size_t i = 0; i < DD_ARRAY_LEN(methods); i++) {
        double r = (dd_promtext_sum(b, req, "method", methods[i], NULL) -
                    dd_promtext_sum(a, req, "method", methods[i], NULL)) /
                   secs;
        fprintf(out, "  %-20s %.1f\n", methods[i], r);
    }
    fprintf(out, "%-22s %.1f\n", "errors/s (not OK)", all - ok);

    double ba[DD_HISTOGRAM_MAX_BOUNDS], bb[DD_HISTOGRAM_MAX_BOUNDS];
    struct dd_histogram_snap sa, sb, d;
    const char *dur = "dedupd_rpc_duration_seconds";
    if (dd_promtext_histogram(b, dur, "method", "Filter", bb, &sb) == DD_OK) {
        bool have_a = dd_promtext_histogram(a, dur, "method", "Filter", ba, &sa) == DD_OK &&
                      sa.nbounds == sb.nbounds;
        if (have_a) snap_sub(&d, &sa, &sb);
        if (have_a && d.count > 0)
            fprintf(out, "%-22s %.3f ms (last %.1f s, %llu calls)\n", "Filter p99",
                    dd_histogram_quantile(&d, 0.99) * 1e3, secs, (unsigned long long)d.count);
        else if (sb.count > 0)
            fprintf(out, "%-22s %.3f ms (since start, %llu calls; none in the last %.1f s)\n",
                    "Filter p99", dd_histogram_quantile(&sb, 0.99) * 1e3,
                    (unsigned long long)sb.count, secs);
        else
            fprintf(out, "%-22s - (no calls yet)\n", "Filter p99");
    } else {
        fprintf(out, "%-22s - (not exported)\n", "Filter p99");
    }

    const char *deg = "dedupd_filter_degraded_total";
    double dtot = dd_promtext_sum(b, deg, NULL, NULL, NULL);
    fprintf(out, "%-22s %.1f/s (%.0f since start)\n", "degraded answers",
            (dtot - dd_promtext_sum(a, deg, NULL, NULL, NULL)) / secs, dtot);

    const char *ing = "dedupd_ingest_messages_total";
    size_t have_ingest = 0;
    double ib = dd_promtext_sum(b, ing, NULL, NULL, &have_ingest);
    if (have_ingest) {
        double bad = dd_promtext_sum(b, ing, NULL, NULL, NULL) -
                     dd_promtext_sum(b, ing, "result", "ok", NULL);
        double bad_a = dd_promtext_sum(a, ing, NULL, NULL, NULL) -
                       dd_promtext_sum(a, ing, "result", "ok", NULL);
        fprintf(out, "%-22s %.1f/s (bad %.1f/s)\n", "ingest messages",
                (ib - dd_promtext_sum(a, ing, NULL, NULL, NULL)) / secs, (bad - bad_a) / secs);
        print_lag(out, b);
        size_t f1, f2;
        double pu = dd_promtext_sum(b, "dedupd_window_pending_users", NULL, NULL, &f1);
        double pb = dd_promtext_sum(b, "dedupd_window_pending_bytes", NULL, NULL, &f2);
        if (f1 && f2) fprintf(out, "%-22s %.0f users, %.0f bytes\n", "pending window", pu, pb);
    } else {
        fprintf(out, "%-22s off\n", "ingest");
    }

    char *body = NULL;
    size_t blen;
    int status;
    char e2[200];
    if (dd_http_get(addr, "/readyz", 5000, &status, &body, &blen, e2, sizeof e2) == DD_OK) {
        while (blen && (body[blen - 1] == '\n' || body[blen - 1] == '\r')) body[--blen] = '\0';
        fprintf(out, "%-22s %s (%s)\n", "ready", status == 200 ? "yes" : "no", body);
        free(body);
    } else {
        fprintf(out, "%-22s unknown (%s)\n", "ready", e2);
    }
    rc = DD_OK;
out:
    dd_promtext_free(a);
    dd_promtext_free(b);
    return rc;
}
