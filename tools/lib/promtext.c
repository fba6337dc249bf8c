/* SPDX-License-Identifier: Apache-2.0
 *
 * promtext.c - see promtext.h: a strict Prometheus text format 0.0.4
 * parser and lookups over what it parsed.
 */
#include "promtext.h"
#include "dd.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct family {
    char *name;
    char *type;
};

struct dd_promtext {
    struct dd_promtext_sample *samples;
    size_t n, cap;
    struct family *fams;
    size_t nfams, capfams;
};

/* The histogram series being checked. */
struct hist_state {
    char *key; /* labels other than le, rendered; NULL: none open */
    double last_le;
    double last_count;
    double inf_count;
    bool seen_inf, seen_sum, seen_count;
};

struct parser {
    dd_promtext *t;
    size_t line;
    char *err;
    size_t errlen;
    struct family *cur; /* family whose samples may follow */
    struct hist_state h;
};

static int perr(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(struct parser *ps, const char *fmt, ...)
{
    if (ps->err && ps->errlen) {
        int n = snprintf(ps->err, ps->errlen, "line %zu: ", ps->line);
        if (n >= 0 && (size_t)n < ps->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return DD_ERR_INVALID;
}

static int nomem(struct parser *ps)
{
    if (ps->err && ps->errlen) snprintf(ps->err, ps->errlen, "out of memory");
    return DD_ERR_NOMEM;
}

static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static bool name_start(int c)
{
    return isalpha(c) || c == '_' || c == ':';
}
static bool name_char(int c)
{
    return isalnum(c) || c == '_' || c == ':';
}

/* Length of the metric (or, with LABEL, label) name at S; 0 if none. */
static size_t name_len(const char *s, const char *end, bool label)
{
    size_t n = 0;
    if (s >= end || !name_start((unsigned char)*s) || (label && *s == ':')) return 0;
    while (s + n < end && name_char((unsigned char)s[n]) && !(label && s[n] == ':')) n++;
    return n;
}

static struct family *find_family(dd_promtext *t, const char *name, size_t n)
{
    for (size_t i = 0; i < t->nfams; i++)
        if (strlen(t->fams[i].name) == n && memcmp(t->fams[i].name, name, n) == 0)
            return &t->fams[i];
    return NULL;
}

/* A histogram series must be complete before another series or family. */
static int close_hist(struct parser *ps)
{
    struct hist_state *h = &ps->h;
    if (!h->key) return DD_OK;
    int rc = DD_OK;
    if (!h->seen_inf)
        rc = perr(ps, "histogram %s{%s} has no le=\"+Inf\" bucket", ps->cur->name, h->key);
    else if (!h->seen_sum)
        rc = perr(ps, "histogram %s{%s} has no _sum", ps->cur->name, h->key);
    else if (!h->seen_count)
        rc = perr(ps, "histogram %s{%s} has no _count", ps->cur->name, h->key);
    free(h->key);
    memset(h, 0, sizeof *h);
    return rc;
}

/* Announce family NAME (N bytes) of type TY (TN bytes; NULL: not yet known). */
static int add_family(struct parser *ps, const char *name, size_t n, const char *ty, size_t tn)
{
    int rc = close_hist(ps);
    if (rc) return rc;
    dd_promtext *t = ps->t;
    if (t->nfams == t->capfams) {
        size_t cap = t->capfams ? t->capfams * 2 : 32;
        struct family *nf = realloc(t->fams, cap * sizeof *nf);
        if (!nf) return nomem(ps);
        /* Samples point at family names, not at the array: safe to move. */
        t->fams = nf;
        t->capfams = cap;
    }
    struct family *f = &t->fams[t->nfams];
    f->name = dupn(name, n);
    f->type = ty ? dupn(ty, tn) : NULL;
    if (!f->name || (ty && !f->type)) {
        free(f->name);
        free(f->type);
        return nomem(ps);
    }
    t->nfams++;
    ps->cur = f;
    return DD_OK;
}

static int comment(struct parser *ps, const char *s, const char *end)
{
    /* "# HELP name ..." or "# TYPE name type"; other comments are ignored. */
    s++;
    while (s < end && *s == ' ') s++;
    bool help = end - s >= 4 && memcmp(s, "HELP", 4) == 0;
    bool type = end - s >= 4 && memcmp(s, "TYPE", 4) == 0;
    if (!help && !type) return DD_OK;
    s += 4;
    if (s >= end || *s != ' ') return DD_OK;
    while (s < end && *s == ' ') s++;
    size_t n = name_len(s, end, false);
    if (n == 0) return perr(ps, "bad metric name after # %s", help ? "HELP" : "TYPE");
    struct family *f = find_family(ps->t, s, n);
    if (f && f != ps->cur) return perr(ps, "family %.*s appears twice", (int)n, s);
    const char *name = s;
    s += n;
    if (help) {
        if (s < end && *s != ' ') return perr(ps, "bad metric name after # HELP");
        return f ? DD_OK : add_family(ps, name, n, NULL, 0);
    }
    if (s >= end || *s != ' ') return perr(ps, "# TYPE %.*s without a type", (int)n, name);
    while (s < end && *s == ' ') s++;
    const char *ty = s;
    size_t tn = (size_t)(end - s);
    while (tn && ty[tn - 1] == ' ') tn--;
    static const char *const types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
    bool ok = false;
    for (size_t i = 0; i < DD_ARRAY_LEN(types); i++)
        if (strlen(types[i]) == tn && memcmp(types[i], ty, tn) == 0) ok = true;
    if (!ok) return perr(ps, "unknown type \"%.*s\"", (int)tn, ty);
    if (!f) return add_family(ps, name, n, ty, tn);
    if (f->type) return perr(ps, "second # TYPE for %.*s", (int)n, name);
    f->type = dupn(ty, tn);
    return f->type ? DD_OK : nomem(ps);
}

static void free_sample(struct dd_promtext_sample *s)
{
    free(s->name);
    for (size_t i = 0; i < s->nlabels; i++) {
        free(s->labels[i].name);
        free(s->labels[i].value);
    }
    free(s->labels);
}

static int parse_labels(struct parser *ps, const char **sp, const char *end,
                        struct dd_promtext_sample *smp)
{
    const char *s = *sp + 1; /* past '{' */
    size_t cap = 0;
    for (;;) {
        while (s < end && *s == ' ') s++;
        if (s < end && *s == '}') break;
        size_t n = name_len(s, end, true);
        if (n == 0) return perr(ps, "bad label name");
        for (size_t i = 0; i < smp->nlabels; i++)
            if (strlen(smp->labels[i].name) == n && memcmp(smp->labels[i].name, s, n) == 0)
                return perr(ps, "label %.*s appears twice", (int)n, s);
        const char *lname = s;
        s += n;
        if (s + 1 >= end || s[0] != '=' || s[1] != '"') return perr(ps, "expected =\" after label");
        s += 2;
        /* Unescaped length is at most the escaped one. */
        const char *v = s;
        while (s < end && *s != '"') {
            if (*s == '\\') s++;
            s++;
        }
        if (s >= end) return perr(ps, "unterminated label value");
        char *val = malloc((size_t)(s - v) + 1);
        if (!val) return nomem(ps);
        size_t k = 0;
        for (const char *q = v; q < s; q++) {
            if (*q != '\\') {
                val[k++] = *q;
                continue;
            }
            q++;
            if (*q == 'n')
                val[k++] = '\n';
            else if (*q == '\\' || *q == '"')
                val[k++] = *q;
            else {
                free(val);
                return perr(ps, "bad escape \\%c in label value", *q);
            }
        }
        val[k] = '\0';
        s++; /* closing quote */
        if (smp->nlabels == cap) {
            cap = cap ? cap * 2 : 4;
            struct dd_promtext_label *nl = realloc(smp->labels, cap * sizeof *nl);
            if (!nl) {
                free(val);
                return nomem(ps);
            }
            smp->labels = nl;
        }
        smp->labels[smp->nlabels].name = dupn(lname, n);
        smp->labels[smp->nlabels].value = val;
        if (!smp->labels[smp->nlabels].name) {
            free(val);
            return nomem(ps);
        }
        smp->nlabels++;
        while (s < end && *s == ' ') s++;
        if (s < end && *s == ',') {
            s++;
            continue;
        }
        if (s < end && *s == '}') break;
        return perr(ps, "expected , or } in labels");
    }
    *sp = s + 1;
    return DD_OK;
}

static bool has_suffix(const char *s, size_t n, const char *suf, size_t *base)
{
    size_t k = strlen(suf);
    if (n <= k || memcmp(s + n - k, suf, k) != 0) return false;
    *base = n - k;
    return true;
}

/* Render the labels other than le, to tell histogram series apart. */
static char *series_key(const struct dd_promtext_sample *smp)
{
    size_t need = 1;
    for (size_t i = 0; i < smp->nlabels; i++)
        need += strlen(smp->labels[i].name) + strlen(smp->labels[i].value) + 4;
    char *k = malloc(need), *w = k;
    if (!k) return NULL;
    *w = '\0';
    for (size_t i = 0; i < smp->nlabels; i++) {
        if (strcmp(smp->labels[i].name, "le") == 0) continue;
        w +=
            sprintf(w, "%s%s=\"%s\"", w == k ? "" : ",", smp->labels[i].name, smp->labels[i].value);
    }
    return k;
}

static const char *label_of(const struct dd_promtext_sample *smp, const char *name)
{
    for (size_t i = 0; i < smp->nlabels; i++)
        if (strcmp(smp->labels[i].name, name) == 0) return smp->labels[i].value;
    return NULL;
}

static int check_hist(struct parser *ps, struct dd_promtext_sample *smp, const char *suffix)
{
    struct hist_state *h = &ps->h;
    char *key = series_key(smp);
    if (!key) return nomem(ps);
    int rc = DD_OK;
    bool same = h->key && strcmp(h->key, key) == 0;
    if (strcmp(suffix, "_bucket") == 0) {
        const char *le = label_of(smp, "le");
        if (!le) {
            rc = perr(ps, "%s without an le label", smp->name);
            goto out;
        }
        char *e;
        double lev = strtod(le, &e);
        if (*le == '\0' || *e != '\0' || isnan(lev)) {
            rc = perr(ps, "bad le=\"%s\"", le);
            goto out;
        }
        if (!same) {
            if ((rc = close_hist(ps))) goto out;
            h->key = key;
            key = NULL;
            h->last_le = -INFINITY;
            h->last_count = 0;
        } else if (h->seen_inf) {
            rc = perr(ps, "bucket after le=\"+Inf\" in %s", smp->name);
            goto out;
        }
        if (!(lev > h->last_le)) {
            rc = perr(ps, "le values not ascending in %s", smp->name);
            goto out;
        }
        if (smp->value < h->last_count) {
            rc = perr(ps, "bucket counts decrease in %s", smp->name);
            goto out;
        }
        h->last_le = lev;
        h->last_count = smp->value;
        if (isinf(lev)) {
            h->seen_inf = true;
            h->inf_count = smp->value;
        }
    } else {
        if (!same || !h->seen_inf) {
            rc = perr(ps, "%s before the buckets of its series ending in le=\"+Inf\"", smp->name);
            goto out;
        }
        if (label_of(smp, "le")) {
            rc = perr(ps, "%s with an le label", smp->name);
            goto out;
        }
        if (strcmp(suffix, "_sum") == 0) {
            if (h->seen_sum) rc = perr(ps, "second %s in one series", smp->name);
            h->seen_sum = true;
        } else {
            if (h->seen_count)
                rc = perr(ps, "second %s in one series", smp->name);
            else if (smp->value != h->inf_count)
                rc = perr(ps, "%s = %g but the +Inf bucket is %g", smp->name, smp->value,
                          h->inf_count);
            h->seen_count = true;
        }
    }
out:
    free(key);
    return rc;
}

static int sample(struct parser *ps, const char *s, const char *end)
{
    size_t n = name_len(s, end, false);
    if (n == 0) return perr(ps, "bad metric name");
    struct family *f = ps->cur;
    const char *suffix = NULL;
    if (!f || !f->type) return perr(ps, "sample %.*s has no # TYPE before it", (int)n, s);
    size_t base = n;
    if (strcmp(f->type, "histogram") == 0) {
        if (has_suffix(s, n, "_bucket", &base))
            suffix = "_bucket";
        else if (has_suffix(s, n, "_sum", &base))
            suffix = "_sum";
        else if (has_suffix(s, n, "_count", &base))
            suffix = "_count";
        if (!suffix)
            return perr(ps, "histogram sample %.*s is not _bucket, _sum or _count", (int)n, s);
    } else if (strcmp(f->type, "summary") == 0) {
        if (!has_suffix(s, n, "_sum", &base) && !has_suffix(s, n, "_count", &base)) base = n;
    }
    if (strlen(f->name) != base || memcmp(f->name, s, base) != 0)
        return perr(ps, "sample %.*s is not of family %s (no # TYPE, or not contiguous)", (int)n, s,
                    f->name);
    dd_promtext *t = ps->t;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        struct dd_promtext_sample *ns = realloc(t->samples, cap * sizeof *ns);
        if (!ns) return nomem(ps);
        t->samples = ns;
        t->cap = cap;
    }
    struct dd_promtext_sample *smp = &t->samples[t->n];
    memset(smp, 0, sizeof *smp);
    smp->family = f->name;
    smp->name = dupn(s, n);
    if (!smp->name) return nomem(ps);
    int rc;
    s += n;
    if (s < end && *s == '{' && (rc = parse_labels(ps, &s, end, smp))) goto bad;
    if (s >= end || *s != ' ') {
        rc = perr(ps, "expected a space before the value of %s", smp->name);
        goto bad;
    }
    while (s < end && *s == ' ') s++;
    const char *v = s;
    while (s < end && *s != ' ') s++;
    char tmp[64];
    if (s == v || (size_t)(s - v) >= sizeof tmp) {
        rc = perr(ps, "bad value for %s", smp->name);
        goto bad;
    }
    memcpy(tmp, v, (size_t)(s - v));
    tmp[s - v] = '\0';
    char *e;
    errno = 0;
    smp->value = strtod(tmp, &e);
    if (*e != '\0') {
        rc = perr(ps, "bad value \"%s\" for %s", tmp, smp->name);
        goto bad;
    }
    while (s < end && *s == ' ') s++;
    if (s < end) { /* optional timestamp: an integer */
        const char *ts = s;
        if (*s == '-') s++;
        while (s < end && isdigit((unsigned char)*s)) s++;
        while (s < end && *s == ' ') s++;
        if (s != end || ts == s) {
            rc = perr(ps, "junk after the value of %s", smp->name);
            goto bad;
        }
    }
    if (suffix && (rc = check_hist(ps, smp, suffix))) goto bad;
    t->n++;
    return DD_OK;
bad:
    free_sample(smp);
    return rc;
}

int dd_promtext_parse(const char *text, size_t len, dd_promtext **out, char *err, size_t errlen)
{
    *out = NULL;
    struct parser ps = {.err = err, .errlen = errlen};
    ps.t = calloc(1, sizeof *ps.t);
    if (!ps.t) return nomem(&ps);
    int rc = DD_OK;
    const char *p = text, *end = text + len;
    while (p < end && rc == DD_OK) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        ps.line++;
        const char *s = p;
        while (s < le && (*s == ' ' || *s == '\t')) s++;
        const char *e = le;
        if (e > s && e[-1] == '\r') e--;
        if (s == e)
            rc = DD_OK;
        else if (*s == '#')
            rc = comment(&ps, s, e);
        else
            rc = sample(&ps, s, e);
        p = nl ? nl + 1 : end;
    }
    if (rc == DD_OK && ps.cur) rc = close_hist(&ps);
    free(ps.h.key);
    if (rc) {
        dd_promtext_free(ps.t);
        return rc;
    }
    *out = ps.t;
    return DD_OK;
}

void dd_promtext_free(dd_promtext *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) free_sample(&t->samples[i]);
    for (size_t i = 0; i < t->nfams; i++) {
        free(t->fams[i].name);
        free(t->fams[i].type);
    }
    free(t->samples);
    free(t->fams);
    free(t);
}

size_t dd_promtext_count(const dd_promtext *t)
{
    return t->n;
}

const struct dd_promtext_sample *dd_promtext_sample(const dd_promtext *t, size_t i)
{
    return i < t->n ? &t->samples[i] : NULL;
}

const char *dd_promtext_type(const dd_promtext *t, const char *name)
{
    struct family *f = find_family((dd_promtext *)t, name, strlen(name));
    return f ? f->type : NULL;
}

static bool matches(const struct dd_promtext_sample *smp, const char *name, const char *label,
                    const char *value)
{
    if (strcmp(smp->name, name) != 0) return false;
    if (!label) return true;
    const char *v = label_of(smp, label);
    return v && value && strcmp(v, value) == 0;
}

double dd_promtext_sum(const dd_promtext *t, const char *name, const char *label, const char *value,
                       size_t *found)
{
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (!matches(&t->samples[i], name, label, value)) continue;
        sum += t->samples[i].value;
        k++;
    }
    if (found) *found = k;
    return sum;
}

double dd_promtext_max(const dd_promtext *t, const char *name, const char *label,
                       const char **label_value)
{
    double best = NAN;
    if (label_value) *label_value = NULL;
    for (size_t i = 0; i < t->n; i++) {
        const struct dd_promtext_sample *smp = &t->samples[i];
        if (strcmp(smp->name, name) != 0) continue;
        if (isnan(best) || smp->value > best) {
            best = smp->value;
            if (label_value) *label_value = label ? label_of(smp, label) : NULL;
        }
    }
    return best;
}

int dd_promtext_histogram(const dd_promtext *t, const char *name, const char *label,
                          const char *value, double *bounds, struct dd_histogram_snap *out)
{
    char bname[256], sname[256];
    if ((size_t)snprintf(bname, sizeof bname, "%s_bucket", name) >= sizeof bname ||
        (size_t)snprintf(sname, sizeof sname, "%s_sum", name) >= sizeof sname)
        return DD_ERR_INVALID;
    memset(out, 0, sizeof *out);
    out->bounds = bounds;
    /* The parser guarantees each series is contiguous, ascending and ends
     * with +Inf; the first series fixes the bounds, the others must match.
     * Cumulative counts of different series add up bucket by bucket. */
    size_t nb = 0, k = 0, series = 0;
    bool fixed = false;
    for (size_t i = 0; i < t->n; i++) {
        const struct dd_promtext_sample *smp = &t->samples[i];
        if (matches(smp, sname, label, value)) {
            out->sum += smp->value;
            continue;
        }
        if (!matches(smp, bname, label, value)) continue;
        const char *le = label_of(smp, "le");
        double lev = le ? strtod(le, NULL) : NAN;
        if (isnan(lev)) return DD_ERR_INVALID;
        uint64_t v = smp->value > 0 ? (uint64_t)smp->value : 0;
        if (isinf(lev)) {
            if (fixed && k != nb) return DD_ERR_INVALID;
            fixed = true;
            out->buckets[nb] += v;
            out->count += v;
            series++;
            k = 0;
            continue;
        }
        if (!fixed) {
            if (nb == DD_HISTOGRAM_MAX_BOUNDS) return DD_ERR_INVALID;
            bounds[nb++] = lev;
        } else if (k >= nb || bounds[k] != lev) {
            return DD_ERR_INVALID;
        }
        out->buckets[k++] += v;
    }
    out->nbounds = nb;
    return series ? DD_OK : DD_ERR_NOTFOUND;
}
