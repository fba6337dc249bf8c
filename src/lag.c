/* SPDX-License-Identifier: Apache-2.0
 *
 * lag.c - the store's lag behind the plays topic; see lag.h.
 *
 * DESIGN
 *
 * A table per partition (struct plag) under one mutex, touched at window
 * granularity: the poll thread notes a partition's first message in each
 * window slot (pending since) and the end of the partition (caught up),
 * the flush thread what a written window made visible. Readers add the
 * high watermarks the callback gives, and note them too (plag_ms), so
 * the dates get finer the more often the lag is read.
 */
#include "lag.h"

#include "dd.h"
#include "kafka.h"
#include "metrics.h"
#include "sys.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One partition's lag state (mu). Offsets are "next to read". */
/* Watermark observations kept per partition (plag_ms). */
#define LAG_SEEN 16

struct plag {
    int64_t assigned_ms; /* wall clock of the assignment; 0 = not assigned here */
    int64_t visible;     /* every message before it is visible; -1 = not known */
    int64_t first_hi;    /* the high watermark first seen since the assignment; -1 = none */
    /* When this node first saw the log's end past offsets not yet visible:
     * (local wall clock, high watermark), oldest first, each past visible. */
    struct {
        int64_t ms, hi;
    } seen[LAG_SEEN];
    int nseen;
    int64_t visible_ts;    /* Kafka timestamp of the last message made visible; 0 = none */
    int64_t pending_ts[2]; /* per slot: timestamp of its first message of this partition */
    int64_t eof;           /* end reached while messages were pending; -1 = none */
    bool caught_up;        /* lag has been seen at 0 since the assignment */
    int64_t behind_since;  /* caught_up: wall clock when the end was first seen past
                           * visible, with nothing pending yet; 0 = not behind */
};

struct dd_lag {
    char *topic;
    dd_lag_watermark_fn watermark;
    void *watermark_ud;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC: a window became visible */
    struct plag *plag; /* by partition */
    size_t nplag;
    /* The consumer lag per partition from the last statistics. */
    int32_t *cons_part;
    int64_t *cons_val;
    size_t cons_n, cons_cap;
    atomic_int_least64_t cons_total;
};

int dd_lag_new(dd_lag **out, const char *topic, dd_lag_watermark_fn fn, void *ud)
{
    *out = NULL;
    dd_lag *l = calloc(1, sizeof *l);
    if (!l) return DD_ERR_NOMEM;
    if (!(l->topic = strdup(topic))) {
        free(l);
        return DD_ERR_NOMEM;
    }
    l->watermark = fn;
    l->watermark_ud = ud;
    atomic_init(&l->cons_total, -1);
    if (dd_sys_lock_init(&l->mu, &l->cv) != DD_OK) {
        free(l->topic);
        free(l);
        return DD_ERR_NOMEM;
    }
    *out = l;
    return DD_OK;
}

void dd_lag_free(dd_lag *l)
{
    if (!l) return;
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l->plag);
    free(l->cons_part);
    free(l->cons_val);
    free(l->topic);
    free(l);
}

/* PARTITION's entry, grown as needed (mu held); NULL when out of memory
 * or not a partition: its lag is then simply not tracked. */
static struct plag *plag_at(dd_lag *l, int32_t partition)
{
    if (partition < 0) return NULL;
    if ((size_t)partition >= l->nplag) {
        size_t n = (size_t)partition + 1 < 16 ? 16 : (size_t)partition + 1;
        struct plag *t = realloc(l->plag, n * sizeof *t);
        if (!t) return NULL;
        for (size_t i = l->nplag; i < n; i++)
            t[i] = (struct plag){.visible = -1, .eof = -1, .first_hi = -1};
        l->plag = t;
        l->nplag = n;
    }
    return &l->plag[partition];
}

void dd_lag_assign(dd_lag *l, int32_t partition, bool assigned)
{
    pthread_mutex_lock(&l->mu);
    struct plag *e = plag_at(l, partition);
    if (e)
        *e = (struct plag){
            .assigned_ms = assigned ? dd_now_ms() : 0, .visible = -1, .eof = -1, .first_hi = -1};
    pthread_mutex_unlock(&l->mu);
}

void dd_lag_unassign_all(dd_lag *l)
{
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->nplag; i++)
        l->plag[i] = (struct plag){.visible = -1, .eof = -1, .first_hi = -1};
    pthread_mutex_unlock(&l->mu);
}

/* E's log end was at least HI at NOW (this node's clock): noted when past
 * what is visible and past the last note (mu held). When the notes
 * are full, the last one's offset grows instead: the newest offsets are
 * then dated earlier than they arrived, so the lag errs long, never short. */
static void lag_note(struct plag *e, int64_t now, int64_t hi)
{
    if (hi <= e->visible || (e->nseen && hi <= e->seen[e->nseen - 1].hi)) return;
    if (e->nseen < LAG_SEEN) {
        e->seen[e->nseen].ms = now;
        e->seen[e->nseen].hi = hi;
        e->nseen++;
    } else {
        e->seen[e->nseen - 1].hi = hi;
    }
}

/* Consumed now: the log reached past OFFSET by now, a date for the lag
 * (plag_ms) finer than the readers' watermark notes. */
void dd_lag_pending(dd_lag *l, int idx, int32_t partition, int64_t offset, int64_t ts)
{
    pthread_mutex_lock(&l->mu);
    struct plag *e = plag_at(l, partition);
    if (e && !e->pending_ts[idx]) e->pending_ts[idx] = ts > 0 ? ts : 1;
    if (e && e->assigned_ms) lag_note(e, dd_now_ms(), offset + 1);
    pthread_mutex_unlock(&l->mu);
}

void dd_lag_eof(dd_lag *l, int32_t partition, int64_t offset)
{
    pthread_mutex_lock(&l->mu);
    struct plag *e = plag_at(l, partition);
    if (e && e->assigned_ms) {
        if (!e->pending_ts[0] && !e->pending_ts[1]) {
            if (offset > e->visible) e->visible = offset;
        } else if (offset > e->eof) {
            e->eof = offset;
        }
    }
    pthread_mutex_unlock(&l->mu);
}

void dd_lag_visible(dd_lag *l, int idx, const int64_t *next, const int64_t *last_ts, size_t n)
{
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < n && i < l->nplag; i++) {
        struct plag *e = &l->plag[i];
        if (next[i] < 0 || !e->assigned_ms) continue;
        if (next[i] > e->visible) e->visible = next[i];
        e->visible_ts = last_ts[i];
        e->pending_ts[idx] = 0;
        if (!e->pending_ts[!idx] && e->eof >= 0) {
            if (e->eof > e->visible) e->visible = e->eof;
            e->eof = -1;
        }
    }
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int dd_lag_wait_visible(dd_lag *l, int32_t partition, int64_t offset, int64_t deadline_ns)
{
    int rc = DD_OK;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (partition < 0 || (size_t)partition >= l->nplag || !l->plag[partition].assigned_ms) {
            rc = DD_ERR_STATE;
            break;
        }
        if (l->plag[partition].visible > offset) break;
        if (dd_mono_ns() >= deadline_ns) {
            rc = DD_ERR_TIMEOUT;
            break;
        }
        struct timespec ts = {(time_t)(deadline_ns / 1000000000), (long)(deadline_ns % 1000000000)};
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

/* E's lag at NOW by offsets, given HI, the high watermark librdkafka last
 * saw for the partition (mu held). 0 when every message before HI is
 * visible. Otherwise the time since this node first saw the log's end past
 * the oldest message not yet visible, on this node's own clock: no
 * producer's or broker's clock enters it, so a producer whose clock is
 * ahead cannot make a node that is behind look caught up, nor one whose
 * clock is behind make a caught-up node look behind. The log that was
 * already there at the assignment cannot be dated that way: until the
 * node has made visible the end it first saw, the lag is unknown (-1),
 * which the cluster counts as behind. The notes are taken when the poll
 * thread consumes a partition's first message of a window and when the
 * lag is read (each health round, Status, scrape). */
static int64_t plag_ms(struct plag *e, int64_t hi, int64_t now)
{
    if (e->visible >= hi) {
        e->caught_up = true;
        e->nseen = 0;
        return 0;
    }
    if (e->first_hi < 0) e->first_hi = hi;
    lag_note(e, now, hi);
    int drop = 0;
    while (drop < e->nseen && e->seen[drop].hi <= e->visible) drop++;
    if (drop) {
        memmove(e->seen, e->seen + drop, (size_t)(e->nseen - drop) * sizeof e->seen[0]);
        e->nseen -= drop;
    }
    if (!e->caught_up && e->visible < e->first_hi) return -1;
    if (!e->nseen) return 0;
    return now > e->seen[0].ms ? now - e->seen[0].ms : 0;
}

/* E's lag at NOW by the Kafka timestamps of its messages (the producers'
 * CreateTime or the broker's LogAppendTime) against this node's clock:
 * information only (dedupd_ingest_event_lag_seconds), never a decision, since
 * either clock may be off (mu held). */
static int64_t plag_event_ms(struct plag *e, int64_t hi, int64_t now)
{
    if (e->visible >= hi) {
        e->behind_since = 0;
        return 0;
    }
    int64_t since = 0;
    for (int k = 0; k < 2; k++)
        if (e->pending_ts[k] && (!since || e->pending_ts[k] < since)) since = e->pending_ts[k];
    if (!since && e->caught_up) {
        /* New messages fetched but not consumed yet (a moment): measured
         * from when that was first seen, not from the last visible
         * message, which on a quiet partition may be long ago. */
        if (!e->behind_since) e->behind_since = now;
        since = e->behind_since;
    }
    if (!since) since = e->visible_ts ? e->visible_ts : e->assigned_ms;
    return now > since ? now - since : 0;
}

size_t dd_lag_ms(dd_lag *l, int32_t *parts, int64_t *lags, size_t cap, int64_t *worst,
                 int64_t *event_worst)
{
    size_t n = 0;
    bool unknown = false;
    int64_t max = -1, emax = -1, now = dd_now_ms();
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->nplag; i++) {
        struct plag *e = &l->plag[i];
        if (!e->assigned_ms) continue;
        int64_t hi;
        if (l->watermark(l->watermark_ud, (int32_t)i, &hi) || hi < 0) {
            unknown = true;
            continue;
        }
        int64_t ms = plag_ms(e, hi, now);
        int64_t el = plag_event_ms(e, hi, now);
        if (el > emax) emax = el;
        if (ms < 0) {
            unknown = true;
            continue;
        }
        if (ms > max) max = ms;
        if (n < cap) {
            parts[n] = (int32_t)i;
            lags[n] = ms;
        }
        n++;
    }
    pthread_mutex_unlock(&l->mu);
    *worst = unknown ? -1 : max;
    if (event_worst) *event_worst = emax;
    return n;
}

/* ---- the consumer lag (librdkafka's statistics) ---------------------------- */

/* One partition's lag into the list /metrics reads (mu held). Out of
 * memory leaves the partition unlisted; the total stays right. */
static void cons_add(void *ud, int32_t partition, int64_t lag)
{
    dd_lag *l = ud;
    if (l->cons_n == l->cons_cap) {
        size_t cap = l->cons_cap ? l->cons_cap * 2 : 16;
        int32_t *np = realloc(l->cons_part, cap * sizeof *np);
        if (np) l->cons_part = np;
        int64_t *nv = np ? realloc(l->cons_val, cap * sizeof *nv) : NULL;
        if (nv) l->cons_val = nv;
        if (!np || !nv) return;
        l->cons_cap = cap;
    }
    l->cons_part[l->cons_n] = partition;
    l->cons_val[l->cons_n++] = lag;
}

void dd_lag_stats(dd_lag *l, const char *json, size_t len)
{
    pthread_mutex_lock(&l->mu);
    l->cons_n = 0;
    int64_t total = dd_kafka_stats_lag(json, len, l->topic, cons_add, l);
    pthread_mutex_unlock(&l->mu);
    atomic_store_explicit(&l->cons_total, total, memory_order_relaxed);
}

int64_t dd_lag_consumer_total(const dd_lag *l)
{
    return atomic_load_explicit(&l->cons_total, memory_order_relaxed);
}

size_t dd_lag_consumer(dd_lag *l, int32_t *parts, int64_t *lags, size_t cap)
{
    pthread_mutex_lock(&l->mu);
    size_t n = l->cons_n;
    for (size_t i = 0; i < n && i < cap; i++) {
        parts[i] = l->cons_part[i];
        lags[i] = l->cons_val[i];
    }
    pthread_mutex_unlock(&l->mu);
    return n;
}

/* ---- metrics ---------------------------------------------------------------- */

#define MAX_LAG_PARTITIONS 4096

/* One gauge sample per partition: PARTS[i] = LAGS[i] * SCALE, i < N. */
/* Milliseconds as Prometheus's seconds, the one conversion every lag
 * family uses: a partition's lag and the node's (its largest) then print
 * alike (ms * 1e-3 and ms / 1e3 differ in the last digit for many ms). */
static double seconds(int64_t ms)
{
    return (double)ms / 1e3;
}

/* One sample per partition: the count as is (MS false) or milliseconds
 * as seconds. */
static void per_partition(dd_prom *p, const char *name, const int32_t *parts, const int64_t *lags,
                          size_t n, bool ms)
{
    for (size_t i = 0; i < n; i++) {
        char num[16];
        snprintf(num, sizeof num, "%d", (int)parts[i]);
        struct dd_prom_label pl = {"partition", num};
        if (!ms)
            dd_prom_sample_u64(p, name, &pl, 1, (uint64_t)lags[i]);
        else
            dd_prom_sample_f64(p, name, &pl, 1, seconds(lags[i]));
    }
}

void dd_lag_collect(dd_prom *p, dd_lag *l)
{
    /* A scrape-time copy; static because scrapes are serialised by the
     * registry mutex. */
    static int32_t parts[MAX_LAG_PARTITIONS];
    static int64_t lags[MAX_LAG_PARTITIONS];
    size_t n = dd_lag_consumer(l, parts, lags, MAX_LAG_PARTITIONS);
    if (n > MAX_LAG_PARTITIONS) n = MAX_LAG_PARTITIONS;
    dd_prom_family(p, "dedupd_ingest_consumer_lag",
                   "Messages behind the partition's end, by assigned partition "
                   "(librdkafka statistics)",
                   DD_PROM_GAUGE);
    per_partition(p, "dedupd_ingest_consumer_lag", parts, lags, n, false);
    int64_t worst, event_worst;
    n = dd_lag_ms(l, parts, lags, MAX_LAG_PARTITIONS, &worst, &event_worst);
    if (n > MAX_LAG_PARTITIONS) n = MAX_LAG_PARTITIONS;
    /* Seconds, Prometheus's base unit. An unknown lag is never a value:
     * its partition is left out, the node's lag and the event lag are
     * absent, and dedupd_ingest_lag_known says which. */
    dd_prom_family(p, "dedupd_ingest_partition_lag_seconds",
                   "How far behind the store is, in seconds, by assigned partition whose lag is "
                   "known: 0 when every message before the high watermark is visible, else how "
                   "long ago this node first saw the log's end past the oldest message not yet "
                   "visible (its own clock)",
                   DD_PROM_GAUGE);
    per_partition(p, "dedupd_ingest_partition_lag_seconds", parts, lags, n, true);
    dd_prom_gauge(p, "dedupd_ingest_lag_known",
                  "1 when partitions are assigned and every one's lag is known "
                  "(dedupd_ingest_lag_seconds is then exported), else 0",
                  worst >= 0 ? 1 : 0);
    if (worst >= 0) {
        dd_prom_family(
            p, "dedupd_ingest_lag_seconds",
            "The largest partition lag in seconds (dedupd_ingest_partition_lag_seconds); "
            "absent while dedupd_ingest_lag_known is 0",
            DD_PROM_GAUGE);
        dd_prom_sample_f64(p, "dedupd_ingest_lag_seconds", NULL, 0, seconds(worst));
    }
    if (event_worst >= 0) {
        dd_prom_family(p, "dedupd_ingest_event_lag_seconds",
                       "Information only: the largest partition lag in seconds measured from the "
                       "Kafka timestamps (producer or broker clock) of messages not yet visible; "
                       "readiness and forwarding use dedupd_ingest_lag_seconds; absent while "
                       "unknown",
                       DD_PROM_GAUGE);
        dd_prom_sample_f64(p, "dedupd_ingest_event_lag_seconds", NULL, 0, seconds(event_worst));
    }
}
