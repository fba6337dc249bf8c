/* SPDX-License-Identifier: Apache-2.0
 *
 * metrics.h - the pieces dedupd's Prometheus metrics are made of: a
 * lock-free histogram that any module can embed in its own stats struct, a
 * writer for the Prometheus text exposition format 0.0.4, and a registry of
 * collectors that the admin listener runs at scrape time.
 *
 * DESIGN
 *
 * Modules keep their own counters (atomics in their stats structs, read by
 * their *_get_stats getters); nothing on a hot path knows about Prometheus.
 * At scrape time each registered collector reads its module's getter and
 * writes families through a dd_prom writer. So the hot path costs one
 * relaxed atomic add per counter and, for a histogram, one bucket search
 * plus three atomic adds; a scrape costs whatever the getters cost.
 *
 * Threads: dd_histogram_observe may run on any number of threads at once
 * without a lock. A dd_prom writer belongs to one thread. The registry
 * takes a mutex around dd_metrics_render and dd_metrics_add/remove, so a
 * collector removed by dd_metrics_remove is never running once that call
 * returns: remove a module's collector before freeing the module.
 */
#ifndef DD_METRICS_H
#define DD_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* ---- histograms ------------------------------------------------------ */

#define DD_HISTOGRAM_MAX_BOUNDS 32

/* A histogram with fixed upper bounds (Prometheus "le", ascending, +Inf
 * implied). Embed it anywhere; initialise with dd_histogram_init. Bucket
 * counts are per bucket (not cumulative); the renderer accumulates. */
struct dd_histogram {
    const double *bounds; /* borrowed, static storage: nbounds ascending bounds */
    size_t nbounds;
    _Atomic uint64_t buckets[DD_HISTOGRAM_MAX_BOUNDS + 1]; /* last one: above every bound */
    _Atomic uint64_t sum_bits; /* the double sum of observations, as its bits */
};

/* A consistent-enough copy of a histogram for rendering or arithmetic.
 * count is the sum of the buckets, so the +Inf bucket always equals it. */
struct dd_histogram_snap {
    const double *bounds;
    size_t nbounds;
    uint64_t buckets[DD_HISTOGRAM_MAX_BOUNDS + 1]; /* cumulative: buckets[i] = obs <= bounds[i] */
    uint64_t count;
    double sum;
};

/* Bucket sets used by dedupd (static; pass with their _LEN). */
extern const double dd_metrics_latency_bounds[]; /* seconds, 50 us .. 10 s */
#define DD_METRICS_LATENCY_BOUNDS_LEN 18
extern const double dd_metrics_flush_bounds[]; /* seconds, 1 ms .. 60 s */
#define DD_METRICS_FLUSH_BOUNDS_LEN 14
extern const double dd_metrics_count_bounds[]; /* candidates per call, 1 .. 100,000 */
#define DD_METRICS_COUNT_BOUNDS_LEN 12

/* Zero H and give it BOUNDS (borrowed, must outlive H, strictly ascending,
 * finite). Returns 0, or DD_ERR_INVALID (more than DD_HISTOGRAM_MAX_BOUNDS
 * or not ascending; H is then unusable). */
int dd_histogram_init(struct dd_histogram *h, const double *bounds, size_t nbounds);

/* Count one observation V. Lock-free, allocates nothing, cannot fail. NaN
 * lands in the +Inf bucket and is not added to the sum. */
void dd_histogram_observe(struct dd_histogram *h, double v);

/* Copy H into OUT (cumulative buckets). Concurrent observations may or may
 * not be included; count always equals the last cumulative bucket. */
void dd_histogram_snapshot(const struct dd_histogram *h, struct dd_histogram_snap *out);

/* The Q quantile (0 < Q <= 1) by linear interpolation inside the bucket,
 * as Prometheus' histogram_quantile does. NaN when the snapshot is empty;
 * the highest finite bound when Q falls in the +Inf bucket. */
double dd_histogram_quantile(const struct dd_histogram_snap *s, double q);

/* ---- the text format writer ----------------------------------------- */

typedef struct dd_prom dd_prom;

enum dd_prom_type {
    DD_PROM_COUNTER,
    DD_PROM_GAUGE,
    DD_PROM_HISTOGRAM,
};

struct dd_prom_label {
    const char *name;  /* [a-zA-Z_][a-zA-Z0-9_]* */
    const char *value; /* any UTF-8; escaped on output */
};

/* A growable text buffer. NULL on out of memory. dd_prom_free(NULL) is a
 * no-op. */
dd_prom *dd_prom_new(void);
void dd_prom_free(dd_prom *p);

/* Start family NAME: writes its "# HELP" and "# TYPE" lines. Every sample
 * of the family must follow before the next family starts. HELP is escaped
 * (backslash, newline). */
void dd_prom_family(dd_prom *p, const char *name, const char *help, enum dd_prom_type type);

/* One sample line: NAME{labels} VALUE. NAME is the family name (or, for
 * histograms, written by dd_prom_histogram). The _u64 form prints an exact
 * integer; the _f64 form prints NaN, +Inf, -Inf or a round-trippable
 * decimal. LABELS may be NULL when NLABELS is 0. */
void dd_prom_sample_u64(dd_prom *p, const char *name, const struct dd_prom_label *labels,
                        size_t nlabels, uint64_t value);
void dd_prom_sample_f64(dd_prom *p, const char *name, const struct dd_prom_label *labels,
                        size_t nlabels, double value);

/* A whole family of one unlabelled sample: dd_prom_family, then
 * NAME VALUE. Most of dedupd's counters and gauges are such. */
void dd_prom_counter(dd_prom *p, const char *name, const char *help, uint64_t value);
void dd_prom_gauge(dd_prom *p, const char *name, const char *help, uint64_t value);

/* The samples of one histogram series: NAME_bucket{labels,le="..."} for
 * every bound and le="+Inf", then NAME_sum and NAME_count. */
void dd_prom_histogram(dd_prom *p, const char *name, const struct dd_prom_label *labels,
                       size_t nlabels, const struct dd_histogram_snap *s);

/* Errors are sticky (hiredis style): once a write fails for lack of
 * memory, every later write is a no-op and dd_prom_err returns
 * DD_ERR_NOMEM; otherwise 0. */
int dd_prom_err(const dd_prom *p);

/* The text written so far (NUL-terminated; borrowed, valid until the next
 * write, reset or free) and its length without the NUL. */
const char *dd_prom_data(const dd_prom *p, size_t *len);

/* Take the buffer: returns it (caller frees with free()) and leaves P
 * empty. NULL if P is in error (P is then reset). */
char *dd_prom_take(dd_prom *p, size_t *len);

/* Empty P and clear its error, keeping the memory. */
void dd_prom_reset(dd_prom *p);

/* ---- the collector registry ---------------------------------------- */

typedef struct dd_metrics dd_metrics;

/* A collector writes complete families for one module. It is called under
 * the registry mutex, on the scraping thread, and must not block for long. */
typedef void (*dd_metrics_collect_fn)(dd_prom *p, void *ud);

/* A registry with dedupd's process families (dedupd_build_info,
 * dedupd_start_time_seconds, dedupd_uptime_seconds) and the standard
 * process_* families (procstat.h; each left out while unreadable) built
 * in. Returns 0 or
 * DD_ERR_NOMEM (*out NULL). Free with dd_metrics_free (NULL is a no-op);
 * no collector may run after, nor during, that call. */
int dd_metrics_new(dd_metrics **out);
void dd_metrics_free(dd_metrics *m);

/* Add FN(UD) to the collectors, run in order of addition. Returns 0 or
 * DD_ERR_NOMEM (registry unchanged). */
int dd_metrics_add(dd_metrics *m, dd_metrics_collect_fn fn, void *ud);

/* Remove the collector added with the same FN and UD. Once this returns
 * it is not running and will not run again. Returns 0 or DD_ERR_NOTFOUND. */
int dd_metrics_remove(dd_metrics *m, dd_metrics_collect_fn fn, void *ud);

/* Reset P and write every family: the built-in ones, then each collector's.
 * Returns 0 or DD_ERR_NOMEM. */
int dd_metrics_render(dd_metrics *m, dd_prom *p);

#endif
