/* SPDX-License-Identifier: Apache-2.0
 *
 * promtext.h - the reading side of the Prometheus text format 0.0.4: a
 * strict parser (what dedupd's own /metrics must satisfy) and lookups over
 * the parsed samples. It does no I/O (hiredis' read.c is the model);
 * httpget.h fetches the text, and dedupctl_stats.c (tools/) is the report
 * built on both.
 */
#ifndef DD_PROMTEXT_H
#define DD_PROMTEXT_H

#include <stddef.h>

#include "metrics.h"

typedef struct dd_promtext dd_promtext;

struct dd_promtext_label {
    char *name;
    char *value; /* unescaped */
};

struct dd_promtext_sample {
    char *name;                       /* as written, e.g. x_bucket */
    const char *family;               /* the family it belongs to, e.g. x */
    struct dd_promtext_label *labels; /* le included for buckets */
    size_t nlabels;
    double value;
};

/* Parse TEXT (LEN bytes, need not be NUL-terminated). Strict: every sample
 * must belong to a family announced by "# TYPE" before it (histogram
 * samples by their _bucket/_sum/_count suffix); a family's samples are
 * contiguous; each histogram series has ascending le values ending with
 * le="+Inf", non-decreasing counts, then _sum and _count, with _count equal
 * to the +Inf bucket; names and label names are well formed; values parse.
 * Returns 0 with *OUT set (free with dd_promtext_free), DD_ERR_INVALID
 * with "line N: why" in ERR, or DD_ERR_NOMEM; *OUT is NULL on error. */
int dd_promtext_parse(const char *text, size_t len, dd_promtext **out, char *err, size_t errlen);
void dd_promtext_free(dd_promtext *t); /* NULL is a no-op */

/* Samples in input order. Borrowed from T. */
size_t dd_promtext_count(const dd_promtext *t);
const struct dd_promtext_sample *dd_promtext_sample(const dd_promtext *t, size_t i);

/* The type of family NAME as announced by # TYPE ("counter", "gauge",
 * "histogram", "summary", "untyped"), or NULL if not announced. Borrowed. */
const char *dd_promtext_type(const dd_promtext *t, const char *name);

/* Sum of the samples named NAME whose label LABEL equals VALUE (LABEL NULL:
 * every sample named NAME). *FOUND (if not NULL) = how many matched.
 * 0 when none did. */
double dd_promtext_sum(const dd_promtext *t, const char *name, const char *label, const char *value,
                       size_t *found);

/* Largest sample named NAME (any labels), and in *LABEL_VALUE (if not NULL)
 * the value of its label LABEL (borrowed; NULL if absent). NaN if none. */
double dd_promtext_max(const dd_promtext *t, const char *name, const char *label,
                       const char **label_value);

/* The histogram family NAME summed over the series whose label LABEL equals
 * VALUE (LABEL NULL: all series), into OUT (cumulative buckets, count, sum;
 * OUT->bounds points into BOUNDS, room for DD_HISTOGRAM_MAX_BOUNDS).
 * Returns 0, DD_ERR_NOTFOUND (no such series) or DD_ERR_INVALID (series
 * with different bounds, or too many bounds). */
int dd_promtext_histogram(const dd_promtext *t, const char *name, const char *label,
                          const char *value, double *bounds, struct dd_histogram_snap *out);

#endif
