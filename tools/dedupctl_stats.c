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
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int scrape(const char *addr, int timeout_ms, dd_promtext **t, char *err, size_t errlen)
{
    char *body;
    size_t len;
    int status;
    int rc = dd_http_get(addr, "/metrics", timeout_ms, &status, &body, &len, err, errlen);
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

/* V, or null when it is not a number. */
static json_object *num(double v)
{
    return isnan(v) ? NULL : json_object_new_double(v);
}

int dedupctl_stats(const char *addr, int interval_ms, int timeout_ms, struct dedupctl_out *o,
                   char *err, size_t errlen)
{
    /* Text goes to a stream that drops it when the answer is JSON. */
    FILE *out = o->json ? fopen("/dev/null", "w") : o->f;
    if (!out) return dd_fail(DD_ERR_IO, err, errlen, "/dev/null: %s", strerror(errno));
    json_object *j = json_object_new_object(), *jm = json_object_new_object();
    if (!j || !jm) {
        json_object_put(j);
        json_object_put(jm);
        if (o->json) fclose(out);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }
    json_object_object_add(j, "methods", jm);
    dd_promtext *a = NULL, *b = NULL;
    err[0] = '\0';
    int rc = scrape(addr, timeout_ms, &a, err, errlen);
    if (rc) goto out;
    int64_t t0 = dd_mono_ns();
    struct timespec ts = {interval_ms / 1000, (long)(interval_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    rc = scrape(addr, timeout_ms, &b, err, errlen);
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
    json_object_object_add(j, "requests_per_s", num(all));
    for (size_t i = 0; i < DD_ARRAY_LEN(methods); i++) {
        double r = (dd_promtext_sum(b, req, "method", methods[i], NULL) -
                    dd_promtext_sum(a, req, "method", methods[i], NULL)) /
                   secs;
        fprintf(out, "  %-20s %.1f\n", methods[i], r);
        json_object_object_add(jm, methods[i], num(r));
    }
    fprintf(out, "%-22s %.1f\n", "errors/s (not OK)", all - ok);
    json_object_object_add(j, "errors_per_s", num(all - ok));
    double p99 = NAN;
    bool since_start = false;

    double ba[DD_HISTOGRAM_MAX_BOUNDS], bb[DD_HISTOGRAM_MAX_BOUNDS];
    struct dd_histogram_snap sa, sb, d;
    const char *dur = "dedupd_rpc_duration_seconds";
    if (dd_promtext_histogram(b, dur, "method", "Filter", bb, &sb) == DD_OK) {
        bool have_a = dd_promtext_histogram(a, dur, "method", "Filter", ba, &sa) == DD_OK &&
                      sa.nbounds == sb.nbounds;
        if (have_a) snap_sub(&d, &sa, &sb);
        if (have_a && d.count > 0) {
            p99 = dd_histogram_quantile(&d, 0.99) * 1e3;
            fprintf(out, "%-22s %.3f ms (last %.1f s, %llu calls)\n", "Filter p99", p99, secs,
                    (unsigned long long)d.count);
        } else if (sb.count > 0) {
            p99 = dd_histogram_quantile(&sb, 0.99) * 1e3;
            since_start = true;
            fprintf(out, "%-22s %.3f ms (since start, %llu calls; none in the last %.1f s)\n",
                    "Filter p99", p99, (unsigned long long)sb.count, secs);
        } else
            fprintf(out, "%-22s - (no calls yet)\n", "Filter p99");
    } else {
        fprintf(out, "%-22s - (not exported)\n", "Filter p99");
    }

    json_object_object_add(j, "filter_p99_ms", num(p99));
    json_object_object_add(j, "filter_p99_since_start", json_object_new_boolean(since_start));
    const char *deg = "dedupd_filter_degraded_total";
    double dtot = dd_promtext_sum(b, deg, NULL, NULL, NULL);
    double drate = (dtot - dd_promtext_sum(a, deg, NULL, NULL, NULL)) / secs;
    fprintf(out, "%-22s %.1f/s (%.0f since start)\n", "degraded answers", drate, dtot);
    json_object_object_add(j, "degraded_per_s", num(drate));
    json_object_object_add(j, "degraded_total", num(dtot));

    const char *ing = "dedupd_ingest_messages_total";
    size_t have_ingest = 0;
    double ib = dd_promtext_sum(b, ing, NULL, NULL, &have_ingest);
    if (have_ingest) {
        double bad = dd_promtext_sum(b, ing, NULL, NULL, NULL) -
                     dd_promtext_sum(b, ing, "result", "ok", NULL);
        double bad_a = dd_promtext_sum(a, ing, NULL, NULL, NULL) -
                       dd_promtext_sum(a, ing, "result", "ok", NULL);
        double irate = (ib - dd_promtext_sum(a, ing, NULL, NULL, NULL)) / secs;
        fprintf(out, "%-22s %.1f/s (bad %.1f/s)\n", "ingest messages", irate, (bad - bad_a) / secs);
        print_lag(out, b);
        size_t f1, f2, nparts = 0;
        double pu = dd_promtext_sum(b, "dedupd_window_pending_users", NULL, NULL, &f1);
        double pb = dd_promtext_sum(b, "dedupd_window_pending_bytes", NULL, NULL, &f2);
        if (f1 && f2) fprintf(out, "%-22s %.0f users, %.0f bytes\n", "pending window", pu, pb);
        json_object *ji = json_object_new_object();
        if (ji) {
            /* As print_lag: seconds where exported, else an older ms gauge. */
            double lag = dd_promtext_max(b, "dedupd_ingest_lag_seconds", NULL, NULL) * 1e3;
            if (isnan(lag)) lag = dd_promtext_max(b, "dedupd_ingest_lag_ms", NULL, NULL);
            double msgs = dd_promtext_sum(b, "dedupd_ingest_consumer_lag", NULL, NULL, &nparts);
            json_object_object_add(ji, "messages_per_s", num(irate));
            json_object_object_add(ji, "bad_per_s", num((bad - bad_a) / secs));
            json_object_object_add(ji, "lag_ms", num(lag >= 0 ? lag : NAN));
            json_object_object_add(ji, "consumer_lag_messages", num(nparts ? msgs : NAN));
            json_object_object_add(ji, "pending_users", num(f1 ? pu : NAN));
            json_object_object_add(ji, "pending_bytes", num(f2 ? pb : NAN));
        }
        json_object_object_add(j, "ingest", ji);
    } else {
        fprintf(out, "%-22s off\n", "ingest");
        json_object_object_add(j, "ingest", NULL);
    }

    char *body = NULL;
    size_t blen;
    int status;
    char e2[200];
    if (dd_http_get(addr, "/readyz", timeout_ms, &status, &body, &blen, e2, sizeof e2) == DD_OK) {
        while (blen && (body[blen - 1] == '\n' || body[blen - 1] == '\r')) body[--blen] = '\0';
        fprintf(out, "%-22s %s (%s)\n", "ready", status == 200 ? "yes" : "no", body);
        json_object_object_add(j, "ready", json_object_new_boolean(status == 200));
        json_object_object_add(j, "ready_detail", json_object_new_string(body));
        free(body);
    } else {
        fprintf(out, "%-22s unknown (%s)\n", "ready", e2);
        json_object_object_add(j, "ready", NULL);
        json_object_object_add(j, "ready_detail", json_object_new_string(e2));
    }
    if (o->json)
        fprintf(o->f, "%s\n",
                json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN |
                                                      JSON_C_TO_STRING_NOSLASHESCAPE));
    rc = DD_OK;
out:
    dd_promtext_free(a);
    dd_promtext_free(b);
    json_object_put(j);
    if (o->json) fclose(out);
    return rc;
}
