/* SPDX-License-Identifier: Apache-2.0
 *
 * metrics.c - see metrics.h: lock-free histograms, the Prometheus text
 * format 0.0.4 writer, and the registry of scrape-time collectors.
 */
#include "metrics.h"
#include "buildinfo.h"
#include "procstat.h"
#include "dd.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double dd_metrics_latency_bounds[DD_METRICS_LATENCY_BOUNDS_LEN] = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005,
    0.01,    0.025,  0.05,    0.1,    0.25,    0.5,   1,      2.5,    10,
};
const double dd_metrics_flush_bounds[DD_METRICS_FLUSH_BOUNDS_LEN] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60,
};
const double dd_metrics_count_bounds[DD_METRICS_COUNT_BOUNDS_LEN] = {
    1, 10, 100, 500, 1000, 2000, 3000, 5000, 7500, 10000, 20000, 100000,
};

/* ---- histograms ------------------------------------------------------ */

int dd_histogram_init(struct dd_histogram *h, const double *bounds, size_t nbounds)
{
    memset(h, 0, sizeof *h);
    if (nbounds > DD_HISTOGRAM_MAX_BOUNDS) return DD_ERR_INVALID;
    for (size_t i = 0; i < nbounds; i++) {
        if (!isfinite(bounds[i])) return DD_ERR_INVALID;
        if (i > 0 && !(bounds[i] > bounds[i - 1])) return DD_ERR_INVALID;
    }
    for (size_t i = 0; i <= nbounds; i++) atomic_init(&h->buckets[i], 0);
    double zero = 0.0;
    uint64_t bits;
    memcpy(&bits, &zero, sizeof bits);
    atomic_init(&h->sum_bits, bits);
    h->bounds = bounds;
    h->nbounds = nbounds;
    return DD_OK;
}

void dd_histogram_observe(struct dd_histogram *h, double v)
{
    /* Binary search for the first bound >= v; NaN compares false and so
     * falls through to the +Inf bucket. */
    size_t lo = 0, hi = h->nbounds;
    if (isnan(v)) {
        lo = h->nbounds;
    } else {
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (v <= h->bounds[mid])
                hi = mid;
            else
                lo = mid + 1;
        }
    }
    atomic_fetch_add_explicit(&h->buckets[lo], 1, memory_order_relaxed);
    if (isnan(v)) return;
    uint64_t old = atomic_load_explicit(&h->sum_bits, memory_order_relaxed), upd;
    do {
        double s;
        memcpy(&s, &old, sizeof s);
        s += v;
        memcpy(&upd, &s, sizeof upd);
    } while (!atomic_compare_exchange_weak_explicit(&h->sum_bits, &old, upd, memory_order_relaxed,
                                                    memory_order_relaxed));
}

void dd_histogram_snapshot(const struct dd_histogram *h, struct dd_histogram_snap *out)
{
    memset(out, 0, sizeof *out);
    out->bounds = h->bounds;
    out->nbounds = h->nbounds;
    uint64_t acc = 0;
    for (size_t i = 0; i <= h->nbounds; i++) {
        /* The atomics are not written through this pointer; the cast only
         * drops const for atomic_load on older compilers' prototypes. */
        acc += atomic_load_explicit((_Atomic uint64_t *)&h->buckets[i], memory_order_relaxed);
        out->buckets[i] = acc;
    }
    out->count = acc;
    uint64_t bits = atomic_load_explicit((_Atomic uint64_t *)&h->sum_bits, memory_order_relaxed);
    memcpy(&out->sum, &bits, sizeof out->sum);
}

double dd_histogram_quantile(const struct dd_histogram_snap *s, double q)
{
    if (s->count == 0 || !(q > 0.0) || q > 1.0) return NAN;
    double rank = q * (double)s->count;
    for (size_t i = 0; i <= s->nbounds; i++) {
        if ((double)s->buckets[i] < rank) continue;
        if (i == s->nbounds) /* in the +Inf bucket: the best we can say */
            return s->nbounds ? s->bounds[s->nbounds - 1] : NAN;
        double lower = i == 0 ? 0.0 : s->bounds[i - 1];
        double below = i == 0 ? 0.0 : (double)s->buckets[i - 1];
        double in = (double)s->buckets[i] - below;
        if (in <= 0.0) return s->bounds[i];
        if (i == 0 && s->bounds[0] <= 0.0) return s->bounds[0];
        return lower + (s->bounds[i] - lower) * ((rank - below) / in);
    }
    return NAN;
}

/* ---- the text format writer ----------------------------------------- */

struct dd_prom {
    char *buf;
    size_t len, cap;
    int err;
};

dd_prom *dd_prom_new(void)
{
    dd_prom *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->cap = 4096;
    p->buf = malloc(p->cap);
    if (!p->buf) {
        free(p);
        return NULL;
    }
    p->buf[0] = '\0';
    return p;
}

void dd_prom_free(dd_prom *p)
{
    if (!p) return;
    free(p->buf);
    free(p);
}

int dd_prom_err(const dd_prom *p)
{
    return p->err;
}

const char *dd_prom_data(const dd_prom *p, size_t *len)
{
    if (len) *len = p->len;
    return p->buf ? p->buf : "";
}

void dd_prom_reset(dd_prom *p)
{
    p->len = 0;
    p->err = DD_OK;
    if (p->buf) p->buf[0] = '\0';
}

char *dd_prom_take(dd_prom *p, size_t *len)
{
    if (p->err || !p->buf) {
        dd_prom_reset(p);
        return NULL;
    }
    char *out = p->buf;
    if (len) *len = p->len;
    p->buf = NULL;
    p->len = p->cap = 0;
    return out;
}

/* Make room for N more bytes plus the terminating NUL. */
static bool reserve(dd_prom *p, size_t n)
{
    if (p->err) return false;
    if (n > SIZE_MAX / 2 - p->len) {
        p->err = DD_ERR_NOMEM;
        return false;
    }
    if (p->len + n + 1 <= p->cap) return true;
    size_t cap = p->cap ? p->cap : 4096;
    while (cap < p->len + n + 1) cap *= 2;
    char *nb = realloc(p->buf, cap);
    if (!nb) {
        p->err = DD_ERR_NOMEM;
        return false;
    }
    p->buf = nb;
    p->cap = cap;
    return true;
}

static void put(dd_prom *p, const char *s, size_t n)
{
    if (!reserve(p, n)) return;
    memcpy(p->buf + p->len, s, n);
    p->len += n;
    p->buf[p->len] = '\0';
}

static void puts_(dd_prom *p, const char *s)
{
    put(p, s, strlen(s));
}

static void put_u64(dd_prom *p, uint64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%llu\n", (unsigned long long)v);
    put(p, tmp, (size_t)n); /* 20 digits and a newline always fit */
}

/* Escape for HELP text (backslash, newline) or, with QUOTE, label values
 * (also the double quote). */
static void put_escaped(dd_prom *p, const char *s, bool quote)
{
    const char *run = s;
    for (; *s; s++) {
        const char *rep = NULL;
        if (*s == '\\')
            rep = "\\\\";
        else if (*s == '\n')
            rep = "\\n";
        else if (quote && *s == '"')
            rep = "\\\"";
        if (!rep) continue;
        put(p, run, (size_t)(s - run));
        puts_(p, rep);
        run = s + 1;
    }
    put(p, run, (size_t)(s - run));
}

/* The shortest decimal that reads back as V (15 digits usually suffice). */
static void put_double(dd_prom *p, double v)
{
    if (isnan(v)) {
        puts_(p, "NaN");
        return;
    }
    if (isinf(v)) {
        puts_(p, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    char tmp[40];
    snprintf(tmp, sizeof tmp, "%.15g", v);
    if (strtod(tmp, NULL) != v) snprintf(tmp, sizeof tmp, "%.17g", v);
    puts_(p, tmp);
}

void dd_prom_family(dd_prom *p, const char *name, const char *help, enum dd_prom_type type)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    puts_(p, "# HELP ");
    puts_(p, name);
    puts_(p, " ");
    put_escaped(p, help, false);
    puts_(p, "\n# TYPE ");
    puts_(p, name);
    puts_(p, " ");
    puts_(p, types[type]);
    puts_(p, "\n");
}

/* NAME SUFFIX {labels[, le="LE"]} then a space. */
static void put_series(dd_prom *p, const char *name, const char *suffix,
                       const struct dd_prom_label *labels, size_t nlabels, const double *le)
{
    puts_(p, name);
    if (suffix) puts_(p, suffix);
    if (nlabels == 0 && !le) {
        puts_(p, " ");
        return;
    }
    puts_(p, "{");
    for (size_t i = 0; i < nlabels; i++) {
        if (i) puts_(p, ",");
        puts_(p, labels[i].name);
        puts_(p, "=\"");
        put_escaped(p, labels[i].value ? labels[i].value : "", true);
        puts_(p, "\"");
    }
    if (le) {
        puts_(p, nlabels ? ",le=\"" : "le=\"");
        put_double(p, *le);
        puts_(p, "\"");
    }
    puts_(p, "} ");
}

void dd_prom_counter(dd_prom *p, const char *name, const char *help, uint64_t value)
{
    dd_prom_family(p, name, help, DD_PROM_COUNTER);
    dd_prom_sample_u64(p, name, NULL, 0, value);
}

void dd_prom_gauge(dd_prom *p, const char *name, const char *help, uint64_t value)
{
    dd_prom_family(p, name, help, DD_PROM_GAUGE);
    dd_prom_sample_u64(p, name, NULL, 0, value);
}

void dd_prom_sample_u64(dd_prom *p, const char *name, const struct dd_prom_label *labels,
                        size_t nlabels, uint64_t value)
{
    put_series(p, name, NULL, labels, nlabels, NULL);
    put_u64(p, value);
}

void dd_prom_sample_f64(dd_prom *p, const char *name, const struct dd_prom_label *labels,
                        size_t nlabels, double value)
{
    put_series(p, name, NULL, labels, nlabels, NULL);
    put_double(p, value);
    puts_(p, "\n");
}

void dd_prom_histogram(dd_prom *p, const char *name, const struct dd_prom_label *labels,
                       size_t nlabels, const struct dd_histogram_snap *s)
{
    for (size_t i = 0; i < s->nbounds; i++) {
        put_series(p, name, "_bucket", labels, nlabels, &s->bounds[i]);
        put_u64(p, s->buckets[i]);
    }
    const double inf = INFINITY;
    put_series(p, name, "_bucket", labels, nlabels, &inf);
    put_u64(p, s->count);
    put_series(p, name, "_sum", labels, nlabels, NULL);
    put_double(p, s->sum);
    puts_(p, "\n");
    put_series(p, name, "_count", labels, nlabels, NULL);
    put_u64(p, s->count);
}

/* ---- the collector registry ---------------------------------------- */

struct collector {
    dd_metrics_collect_fn fn;
    void *ud;
};

struct dd_metrics {
    pthread_mutex_t lock;
    struct collector *cs;
    size_t n, cap;
    int64_t start_ms; /* wall clock at creation */
    int64_t start_ns; /* monotonic, for uptime */
};

int dd_metrics_new(dd_metrics **out)
{
    *out = NULL;
    dd_metrics *m = calloc(1, sizeof *m);
    if (!m) return DD_ERR_NOMEM;
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        return DD_ERR_NOMEM;
    }
    m->start_ms = dd_now_ms();
    m->start_ns = dd_mono_ns();
    *out = m;
    return DD_OK;
}

void dd_metrics_free(dd_metrics *m)
{
    if (!m) return;
    pthread_mutex_destroy(&m->lock);
    free(m->cs);
    free(m);
}

int dd_metrics_add(dd_metrics *m, dd_metrics_collect_fn fn, void *ud)
{
    int rc = DD_OK;
    pthread_mutex_lock(&m->lock);
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        struct collector *cs = realloc(m->cs, cap * sizeof *cs);
        if (!cs) {
            rc = DD_ERR_NOMEM;
            goto out;
        }
        m->cs = cs;
        m->cap = cap;
    }
    m->cs[m->n].fn = fn;
    m->cs[m->n].ud = ud;
    m->n++;
out:
    pthread_mutex_unlock(&m->lock);
    return rc;
}

int dd_metrics_remove(dd_metrics *m, dd_metrics_collect_fn fn, void *ud)
{
    int rc = DD_ERR_NOTFOUND;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n; i++) {
        if (m->cs[i].fn != fn || m->cs[i].ud != ud) continue;
        memmove(&m->cs[i], &m->cs[i + 1], (m->n - i - 1) * sizeof m->cs[0]);
        m->n--;
        rc = DD_OK;
        break;
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

/* The standard process_* families (procstat.h), named and typed as every
 * Prometheus client library exports them; one that cannot be read now is
 * left out rather than given a made-up value. */
static void process_families(dd_prom *p)
{
    struct dd_procstat ps;
    dd_procstat_read(&ps);
    if (ps.have & DD_PROCSTAT_CPU) {
        dd_prom_family(p, "process_cpu_seconds_total",
                       "Total user and system CPU time spent in seconds", DD_PROM_COUNTER);
        dd_prom_sample_f64(p, "process_cpu_seconds_total", NULL, 0, ps.cpu_seconds);
    }
    if (ps.have & DD_PROCSTAT_MEM) {
        dd_prom_gauge(p, "process_resident_memory_bytes", "Resident memory size in bytes",
                      ps.resident_bytes);
        dd_prom_gauge(p, "process_virtual_memory_bytes", "Virtual memory size in bytes",
                      ps.virtual_bytes);
    }
    if (ps.have & DD_PROCSTAT_START) {
        dd_prom_family(p, "process_start_time_seconds",
                       "Start time of the process since unix epoch in seconds", DD_PROM_GAUGE);
        dd_prom_sample_f64(p, "process_start_time_seconds", NULL, 0, ps.start_time_seconds);
    }
    if (ps.have & DD_PROCSTAT_FDS)
        dd_prom_gauge(p, "process_open_fds", "Number of open file descriptors", ps.open_fds);
    if (ps.have & DD_PROCSTAT_MAXFD)
        dd_prom_gauge(p, "process_max_fds", "Maximum number of open file descriptors", ps.max_fds);
}

int dd_metrics_render(dd_metrics *m, dd_prom *p)
{
    dd_prom_reset(p);
    pthread_mutex_lock(&m->lock);
    /* The labels are what --version prints (buildinfo.h). */
    struct dd_buildinfo_item it[DD_BUILDINFO_MAX];
    struct dd_prom_label build[DD_BUILDINFO_MAX];
    size_t nb = dd_buildinfo(it);
    for (size_t i = 0; i < nb; i++) build[i] = (struct dd_prom_label){it[i].name, it[i].value};
    dd_prom_family(p, "dedupd_build_info",
                   "dedupd version, git revision and library versions (always 1)", DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_build_info", build, nb, 1);
    dd_prom_family(p, "dedupd_start_time_seconds", "Start time of the process since the epoch",
                   DD_PROM_GAUGE);
    dd_prom_sample_f64(p, "dedupd_start_time_seconds", NULL, 0, (double)m->start_ms / 1e3);
    dd_prom_family(p, "dedupd_uptime_seconds", "Seconds since the process started", DD_PROM_GAUGE);
    dd_prom_sample_f64(p, "dedupd_uptime_seconds", NULL, 0,
                       (double)(dd_mono_ns() - m->start_ns) / 1e9);
    process_families(p);
    for (size_t i = 0; i < m->n; i++) m->cs[i].fn(p, m->cs[i].ud);
    pthread_mutex_unlock(&m->lock);
    return dd_prom_err(p);
}
