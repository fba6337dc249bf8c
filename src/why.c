/* SPDX-License-Identifier: Apache-2.0
 *
 * why.c - see why.h: /why and /trace on the admin listener.
 */
#include "why.h"

#include "api.h"
#include "arena.h"
#include "bloom.h"
#include "cluster.h"
#include "dd.h"
#include "history.h"
#include "log.h"
#include "text.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOD "why"
/* A /why call's whole budget for Redis and the store. */
#define WHY_DEADLINE_NS INT64_C(10000000000)

struct dd_why {
    struct dd_why_conf conf;
    dd_history *history;
    dd_trace *trace;
    dd_cluster *cluster;
    pthread_mutex_t mu; /* one request at a time: */
    dd_recent *recent;
    dd_filter *filter;
    dd_arena *arena;
};

int dd_why_new(dd_why **out, const struct dd_why_conf *conf, const struct dd_recent_conf *recent,
               dd_history *history, dd_trace *trace, dd_cluster *cluster, char *err, size_t errlen)
{
    *out = NULL;
    dd_why *w = calloc(1, sizeof *w);
    if (!w) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    w->conf = *conf;
    w->history = history;
    w->trace = trace;
    w->cluster = cluster;
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        free(w);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }
    int rc = dd_recent_new(&w->recent, recent, err, errlen);
    if (rc == DD_OK) rc = dd_filter_new(&w->filter, &conf->filter, history, w->recent, err, errlen);
    if (rc == DD_OK && !(w->arena = dd_arena_new(0, 0)))
        rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    if (rc != DD_OK) {
        dd_why_free(w);
        return rc;
    }
    *out = w;
    return DD_OK;
}

void dd_why_free(dd_why *w)
{
    if (!w) return;
    dd_filter_free(w->filter);
    dd_recent_free(w->recent);
    dd_arena_free(w->arena);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* ---- verdicts ------------------------------------------------------------------ */

void dd_why_iso8601(int64_t ms, char *out, size_t outlen)
{
    time_t s = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    int frac = (int)(ms - (int64_t)s * 1000);
    struct tm tm;
    if (!gmtime_r(&s, &tm)) {
        snprintf(out, outlen, "?");
        return;
    }
    snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

static void source_text(const struct dd_trace_rec *r, char *out, size_t outlen)
{
    if (r->source == DD_TRACE_SRC_KAFKA)
        snprintf(out, outlen, "kafka %.*s/%" PRId32 "@%" PRId64, (int)r->topic_len, r->topic,
                 r->partition, r->offset);
    else
        snprintf(out, outlen, "%s", dd_trace_source_name(r->source));
}

void dd_why_explain(const struct dd_why_user *u, const struct dd_why_item *it,
                    struct dd_why_verdict *out)
{
    char t1[40], t2[40];
    out->time_ms = -1;
    out->source[0] = '\0';
    out->detail[0] = '\0';
    switch (it->reason) {
    case DEDUP__V1__REASON__REASON_DUPLICATE:
        out->verdict = "duplicate";
        snprintf(out->detail, sizeof out->detail,
                 "duplicate in the request (the same id at index %" PRIu32 ")", it->first_index);
        return;
    case DEDUP__V1__REASON__REASON_DELIVERED:
        out->verdict = "delivered";
        if (it->delivered_ms > 0)
            out->time_ms = it->delivered_ms;
        else if (it->delivery)
            out->time_ms = it->delivery->at_ms;
        snprintf(out->source, sizeof out->source, "RecordDelivery");
        snprintf(out->detail, sizeof out->detail,
                 "delivered recently (among the last deliveries "
                 "kept in Redis)%s",
                 it->history ? "; the filter says played too" : "");
        return;
    case DEDUP__V1__REASON__REASON_PLAYED:
        out->verdict = "played";
        if (it->play) {
            out->time_ms = it->play->at_ms;
            source_text(it->play, out->source, sizeof out->source);
            snprintf(out->detail, sizeof out->detail, "played");
            return;
        }
        if (!u->traced) {
            snprintf(out->detail, sizeof out->detail,
                     "played, the filter says (no trace is kept for this user: when and from "
                     "where is unknown, and it may be a false positive of the filter)");
            return;
        }
        {
            /* The trace covers [cover, now]; the history may hold plays
             * from [now - history_ms, now]. */
            int64_t by_retention = u->now_ms - u->trace_retention_ms;
            int64_t cover = u->since_ms > by_retention ? u->since_ms : by_retention;
            if (cover <= u->now_ms - u->history_ms) {
                snprintf(out->detail, sizeof out->detail,
                         "false positive of the filter (no traced play of it, and the trace "
                         "covers every day the history holds)");
            } else {
                /* Either bound may be why: a play recorded before the trace
                 * began, or one dated before what the trace keeps. */
                dd_why_iso8601(u->since_ms, t1, sizeof t1);
                dd_why_iso8601(by_retention, t2, sizeof t2);
                snprintf(out->detail, sizeof out->detail,
                         "no traced play of it: played before tracing began (since %s), or "
                         "dated before %s (trace.retention_days=%" PRId64 "), or a false "
                         "positive of the filter",
                         t1, t2, u->trace_retention_ms / DD_MS_PER_DAY);
            }
        }
        return;
    default:
        out->verdict = "kept";
        if (it->forgotten) {
            dd_why_iso8601(it->forgotten->at_ms, t1, sizeof t1);
            dd_why_iso8601(it->forget_ms, t2, sizeof t2);
            out->time_ms = it->forgotten->at_ms;
            source_text(it->forgotten, out->source, sizeof out->source);
            snprintf(out->detail, sizeof out->detail, "kept (played at %s, then forgotten at %s)",
                     t1, t2);
        } else if (it->play) {
            dd_why_iso8601(it->play->at_ms, t1, sizeof t1);
            out->time_ms = it->play->at_ms;
            source_text(it->play, out->source, sizeof out->source);
            snprintf(out->detail, sizeof out->detail,
                     "kept (played at %s: outside the lookback or the history's retention)", t1);
        } else {
            snprintf(out->detail, sizeof out->detail, "kept");
        }
        return;
    }
}

/* ---- JSON helpers ----------------------------------------------------------------- */

static char *json_take(json_object *o)
{
    char *s = NULL;
    if (o) {
        const char *t = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
        if (t) s = strdup(t);
        json_object_put(o);
    }
    return s;
}

/* {"error": MSG} with STATUS. */
static char *error_page(unsigned *status, unsigned code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static char *error_page(unsigned *status, unsigned code, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *status = code;
    json_object *o = json_object_new_object();
    if (!o) return NULL;
    json_object_object_add(o, "error", json_object_new_string(msg));
    return json_take(o);
}

static void add_time(json_object *o, const char *ms_key, const char *iso_key, int64_t ms)
{
    if (ms < 0) {
        json_object_object_add(o, ms_key, NULL);
        json_object_object_add(o, iso_key, NULL);
        return;
    }
    char iso[40];
    dd_why_iso8601(ms, iso, sizeof iso);
    json_object_object_add(o, ms_key, json_object_new_int64(ms));
    json_object_object_add(o, iso_key, json_object_new_string(iso));
}

/* Whether V (LEN bytes) is text the gRPC API takes in a string field
 * (text.h: UTF-8 without NUL); if not, *PAGE is a 400 naming FIELD, as
 * gRPC's INVALID_ARGUMENT names it. */
static bool bad_text(const char *field, const char *v, size_t len, unsigned *status, char **page)
{
    int t = dd_text_check((const uint8_t *)v, len);
    if (t == DD_TEXT_OK) return false;
    *page = error_page(status, 400, "%s: %s", field,
                       t == DD_TEXT_NUL ? "holds a NUL byte" : "is not valid UTF-8");
    return true;
}

/* The user argument, checked as every API call checks it. NULL: *PAGE is
 * the error answer. */
static const char *user_arg(dd_why *w, const dd_admin_request *r, size_t *len, unsigned *status,
                            char **page)
{
    const char *u = dd_admin_arg(r, "user", len);
    char err[200];
    if (!u) {
        *page = error_page(status, 400, "user: missing (?user=USER)");
        return NULL;
    }
    if (dd_api_check_user_scene(*len, 0, w->conf.filter.max_id_bytes, err, sizeof err) != DD_OK) {
        *page = error_page(status, 400, "%s", err);
        return NULL;
    }
    if (bad_text("user", u, *len, status, page)) return NULL;
    return u;
}

/* In a cluster: NULL when this node owns USER's shard, else *PAGE (421
 * naming the shard and its nodes, or 503). */
static bool not_here(dd_why *w, const char *user, size_t len, unsigned *status, char **page)
{
    if (!w->cluster) return false;
    uint32_t shard;
    bool local;
    char err[300];
    if (dd_cluster_route(w->cluster, user, len, &shard, &local, err, sizeof err) != DD_OK) {
        *page = error_page(status, 503, "cannot tell this user's shard now: %s", err);
        return true;
    }
    if (local) return false;
    const struct dd_cluster_map *m = dd_cluster_get_map(w->cluster);
    char nodes[400] = "";
    size_t off = 0;
    for (uint32_t i = 0; i < m->nreplicas[shard] && off < sizeof nodes; i++) {
        int n = snprintf(nodes + off, sizeof nodes - off, "%s%s", i ? ", " : "", m->addr[shard][i]);
        if (n < 0) break;
        off += (size_t)n;
    }
    *page = error_page(status, 421,
                       "this user belongs to shard %" PRIu32 " (nodes %s); this node serves shard "
                       "%" PRIu32 ": ask the admin listener of one of that shard's nodes",
                       shard, nodes, m->shard);
    return true;
}

/* ---- /trace --------------------------------------------------------------------------- */

static void list_one(void *ud, const char *user, size_t len, const struct dd_trace_user *info)
{
    json_object *arr = ud, *o = json_object_new_object();
    if (!o) return;
    json_object_object_add(o, "user", json_object_new_string_len(user, (int)len));
    add_time(o, "since_ms", "since", info->since_ms);
    json_object_object_add(o, "from_config", json_object_new_boolean(info->from_config));
    json_object_array_add(arr, o);
}

char *dd_why_trace_page(void *ud, const dd_admin_request *r, unsigned *status,
                        const char **content_type)
{
    dd_why *w = ud;
    (void)content_type;
    const char *m = dd_admin_method(r);
    char *page = NULL;
    if (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0) {
        json_object *o = json_object_new_object(), *arr = json_object_new_array();
        if (!o || !arr) {
            json_object_put(o);
            json_object_put(arr);
            return NULL;
        }
        dd_trace_list(w->trace, list_one, arr);
        json_object_object_add(o, "users", arr);
        struct dd_trace_stats st;
        dd_trace_get_stats(w->trace, &st);
        json_object_object_add(o, "count", json_object_new_int64((int64_t)st.users));
        return json_take(o);
    }
    size_t len;
    const char *user = user_arg(w, r, &len, status, &page);
    if (!user) return page;
    if (not_here(w, user, len, status, &page)) return page;
    char err[300];
    json_object *o = json_object_new_object();
    if (!o) return NULL;
    json_object_object_add(o, "user", json_object_new_string_len(user, (int)len));
    if (strcmp(m, "POST") == 0) {
        bool added;
        int rc = dd_trace_add(w->trace, user, len, &added, err, sizeof err);
        if (rc != DD_OK) {
            json_object_put(o);
            return error_page(status,
                              rc == DD_ERR_INVALID ? 400
                              : rc == DD_ERR_LIMIT ? 409
                                                   : 503,
                              "%s", err);
        }
        struct dd_trace_user info;
        dd_trace_get_user(w->trace, user, len, &info);
        json_object_object_add(o, "added", json_object_new_boolean(added));
        add_time(o, "since_ms", "since", info.since_ms);
        return json_take(o);
    }
    /* DELETE */
    int rc = dd_trace_remove(w->trace, user, len, err, sizeof err);
    if (rc != DD_OK) {
        json_object_put(o);
        return error_page(status, rc == DD_ERR_NOTFOUND ? 404 : 503, "%s", err);
    }
    json_object_object_add(o, "removed", json_object_new_boolean(true));
    return json_take(o);
}

/* ---- /why ------------------------------------------------------------------------------- */

struct items {
    dd_arena *arena;
    struct dd_filter_id *ids;
    size_t n, cap;
    bool nomem;
};

static void add_item(void *ud, const char *v, size_t len)
{
    struct items *it = ud;
    if (it->nomem) return;
    if (it->n == it->cap) {
        size_t cap = it->cap ? it->cap * 2 : 64;
        struct dd_filter_id *ids = dd_arena_alloc(it->arena, cap * sizeof *ids);
        if (!ids) {
            it->nomem = true;
            return;
        }
        if (it->n) memcpy(ids, it->ids, it->n * sizeof *ids);
        it->ids = ids;
        it->cap = cap;
    }
    it->ids[it->n].p = v;
    it->ids[it->n++].len = len;
}

/* The request's distinct items by hash, for matching trace records. */
struct lookup {
    const struct dd_filter_id *ids;
    const uint64_t *h;
    int32_t *slot; /* index into ids, -1 empty */
    size_t mask;
};

static long lookup_find(const struct lookup *l, const char *item, size_t len)
{
    uint64_t h = dd_hash(item, len);
    for (size_t i = h & l->mask;; i = (i + 1) & l->mask) {
        int32_t k = l->slot[i];
        if (k < 0) return -1;
        if (l->h[k] == h && l->ids[k].len == len && memcmp(l->ids[k].p, item, len) == 0) return k;
    }
}

/* Per distinct item (by its first index): the trace's findings. Records
 * are copied into the arena (a scan's records live only for the call). */
struct found {
    struct dd_trace_rec *play, *forgotten, *delivery;
};

struct scan_state {
    const char *scene;
    size_t scene_len;
    dd_arena *arena;
    const struct lookup *lk;
    struct found *f;
    /* pass 1: the last forget of the scene, in recorded order */
    bool have_forget;
    int64_t forget_rec_ms, forget_at_ms;
    uint32_t forget_seq;
    bool pass2;
    bool nomem;
};

static bool after_forget(const struct scan_state *s, const struct dd_trace_rec *r)
{
    if (!s->have_forget) return true;
    if (r->recorded_ms != s->forget_rec_ms) return r->recorded_ms > s->forget_rec_ms;
    return r->seq > s->forget_seq;
}

static struct dd_trace_rec *keep(struct scan_state *s, const struct dd_trace_rec *r)
{
    struct dd_trace_rec *c = dd_arena_alloc(s->arena, sizeof *c);
    char *b = dd_arena_alloc(s->arena, r->item_len + r->topic_len + 1);
    if (!c || !b) {
        s->nomem = true;
        return NULL;
    }
    *c = *r;
    memcpy(b, r->item, r->item_len);
    memcpy(b + r->item_len, r->topic, r->topic_len);
    c->item = b;
    c->topic = b + r->item_len;
    c->scene = NULL;
    c->scene_len = 0;
    return c;
}

static int scan_one(void *ud, const struct dd_trace_rec *r)
{
    struct scan_state *s = ud;
    if (r->scene_len != s->scene_len || memcmp(r->scene, s->scene, s->scene_len) != 0) return 0;
    if (!s->pass2) {
        if (r->kind == DD_TRACE_FORGET && (!s->have_forget || after_forget(s, r))) {
            s->have_forget = true;
            s->forget_rec_ms = r->recorded_ms;
            s->forget_seq = r->seq;
            s->forget_at_ms = r->at_ms;
        }
        return 0;
    }
    if (r->kind == DD_TRACE_FORGET) return 0;
    long k = lookup_find(s->lk, r->item, r->item_len);
    if (k < 0) return 0;
    struct found *f = &s->f[k];
    struct dd_trace_rec **slot = r->kind == DD_TRACE_DELIVERY ? &f->delivery
                                 : after_forget(s, r)         ? &f->play
                                                              : &f->forgotten;
    /* Oldest first: a later record of the same item replaces. */
    if (!*slot || r->at_ms >= (*slot)->at_ms) {
        struct dd_trace_rec *c = keep(s, r);
        if (c) *slot = c;
    }
    return s->nomem ? 1 : 0;
}

/* Parse a decimal u32; -1 on anything else. */
static long long parse_u32(const char *v, size_t len)
{
    if (len == 0 || len > 10) return -1;
    long long x = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9') return -1;
        x = x * 10 + (v[i] - '0');
    }
    return x > UINT32_MAX ? -1 : x;
}

static char *why_locked(dd_why *w, const dd_admin_request *r, unsigned *status)
{
    char *page = NULL, err[400];
    size_t ulen, slen = 0, llen = 0;
    const char *user = user_arg(w, r, &ulen, status, &page);
    if (!user) return page;
    const char *scene = dd_admin_arg(r, "scene", &slen);
    if (!scene) scene = "";
    if (dd_api_check_user_scene(ulen, slen, w->conf.filter.max_id_bytes, err, sizeof err) != DD_OK)
        return error_page(status, 400, "%s", err);
    if (bad_text("scene", scene, slen, status, &page)) return page;
    const char *lb = dd_admin_arg(r, "lookback", &llen);
    long long lookback = lb ? parse_u32(lb, llen) : 0;
    if (lookback < 0) return error_page(status, 400, "lookback: want a number of days");
    if (not_here(w, user, ulen, status, &page)) return page;

    struct items its = {.arena = w->arena};
    dd_admin_args(r, "item", add_item, &its);
    if (its.nomem) return NULL;
    if (its.n == 0) return error_page(status, 400, "item: at least one (&item=ID, repeatable)");
    size_t n = its.n;
    for (size_t i = 0; i < n; i++)
        if (bad_text("item", its.ids[i].p, its.ids[i].len, status, &page)) return page;

    /* Filter's own decision. */
    struct dd_filter_query q = {user, ulen,    scene, slen, (uint32_t)lookback, 0, 1,
                                n,    its.ids, NULL,  0};
    struct dd_filter_result res;
    int rc = dd_filter_decide(w->filter, w->arena, &q, &res, dd_mono_ns() + WHY_DEADLINE_NS, err,
                              sizeof err);
    if (rc != DD_OK)
        return error_page(status, rc == DD_ERR_INVALID || rc == DD_ERR_LIMIT ? 400 : 503, "%s",
                          err);

    /* The history alone, for every item (a delivered one may be played too). */
    uint64_t *h = dd_arena_alloc(w->arena, n * sizeof *h),
             *sh = dd_arena_alloc(w->arena, n * sizeof *sh);
    uint64_t *tmp = dd_arena_alloc(w->arena, n * sizeof *tmp);
    uint32_t *idx = dd_arena_alloc(w->arena, n * sizeof *idx);
    uint32_t *tidx = dd_arena_alloc(w->arena, n * sizeof *tidx);
    uint8_t *hit = dd_arena_alloc(w->arena, n);
    uint32_t *first = dd_arena_alloc(w->arena, n * sizeof *first);
    struct found *fd = dd_arena_alloc(w->arena, n * sizeof *fd);
    size_t cap = 8;
    while (cap < 2 * n) cap *= 2;
    int32_t *slots = dd_arena_alloc(w->arena, cap * sizeof *slots);
    if (!h || !sh || !tmp || !idx || !tidx || !hit || !first || !fd || !slots) return NULL;
    for (size_t i = 0; i < n; i++) {
        h[i] = sh[i] = dd_hash(its.ids[i].p, its.ids[i].len);
        idx[i] = (uint32_t)i;
        hit[i] = 0;
    }
    memset(fd, 0, n * sizeof *fd);
    dd_bloom_sort_hashes(sh, idx, n, tmp, tidx);
    uint8_t *shit = dd_arena_alloc(w->arena, n);
    if (!shit) return NULL;
    memset(shit, 0, n);
    rc = dd_history_probe(w->history, scene, slen, user, ulen, (uint32_t)lookback, sh, n, shit, err,
                          sizeof err);
    if (rc != DD_OK) return error_page(status, 503, "history: %s", err);
    for (size_t i = 0; i < n; i++) hit[idx[i]] = shit[i];

    /* Distinct items, and each one's first index. */
    struct lookup lk = {its.ids, h, slots, cap - 1};
    for (size_t i = 0; i < cap; i++) slots[i] = -1;
    for (size_t i = 0; i < n; i++) {
        long k = lookup_find(&lk, its.ids[i].p, its.ids[i].len);
        if (k >= 0) {
            first[i] = (uint32_t)k;
            continue;
        }
        size_t j = h[i] & lk.mask;
        while (slots[j] >= 0) j = (j + 1) & lk.mask;
        slots[j] = (int32_t)i;
        first[i] = (uint32_t)i;
    }

    /* Redis with times (recent.size at most). */
    size_t rcap = w->conf.filter.recent_size, rn = 0;
    uint64_t *rh = dd_arena_alloc(w->arena, (rcap ? rcap : 1) * sizeof *rh);
    int64_t *rt = dd_arena_alloc(w->arena, (rcap ? rcap : 1) * sizeof *rt);
    if (!rh || !rt) return NULL;
    bool redis_ok =
        dd_recent_fetch_times(w->recent, scene, slen, user, ulen, rh, rt, rcap, &rn) == DD_OK;

    /* The trace. */
    struct dd_trace_user info = {0};
    dd_trace_get_user(w->trace, user, ulen, &info);
    struct scan_state ss = {
        .scene = scene, .scene_len = slen, .arena = w->arena, .lk = &lk, .f = fd};
    if (info.traced) {
        rc = dd_trace_scan(w->trace, user, ulen, scan_one, &ss, err, sizeof err);
        ss.pass2 = true;
        if (rc == DD_OK) rc = dd_trace_scan(w->trace, user, ulen, scan_one, &ss, err, sizeof err);
        if (rc != DD_OK) return error_page(status, 503, "trace: %s", err);
        if (ss.nomem) return NULL;
    }

    json_object *root = json_object_new_object(), *arr = json_object_new_array();
    if (!root || !arr) {
        json_object_put(root);
        json_object_put(arr);
        return NULL;
    }
    json_object_object_add(root, "user", json_object_new_string_len(user, (int)ulen));
    json_object_object_add(root, "scene", json_object_new_string_len(scene, (int)slen));
    json_object_object_add(root, "lookback_days", json_object_new_int64(lookback));
    json_object_object_add(root, "traced", json_object_new_boolean(info.traced));
    add_time(root, "since_ms", "since", info.traced ? info.since_ms : -1);
    json_object_object_add(
        root, "note",
        json_object_new_string(info.traced ? "traced: plays, deliveries and forgets are recorded"
                                           : "no trace is kept for this user: the filter's and "
                                             "Redis' verdicts only"));
    json_object_object_add(root, "degraded", json_object_new_boolean(res.degraded || !redis_ok));
    struct dd_why_user u = {info.traced, info.since_ms, dd_trace_now_ms(w->trace),
                            dd_trace_retention_ms(w->trace),
                            (int64_t)w->conf.history_days * DD_MS_PER_DAY};
    for (size_t i = 0; i < n; i++) {
        struct found *f = &fd[first[i]];
        struct dd_why_item it = {res.reason[i], first[i],     hit[i] != 0,     0,
                                 f->play,       f->forgotten, ss.forget_at_ms, f->delivery};
        bool in_recent = false;
        for (size_t j = 0; j < rn; j++)
            if (rh[j] == h[i]) {
                if (!in_recent) it.delivered_ms = rt[j];
                in_recent = true;
            }
        struct dd_why_verdict v;
        dd_why_explain(&u, &it, &v);
        json_object *o = json_object_new_object();
        if (!o) continue;
        json_object_object_add(o, "item",
                               json_object_new_string_len(its.ids[i].p, (int)its.ids[i].len));
        json_object_object_add(o, "index", json_object_new_int64((int64_t)i));
        json_object_object_add(o, "verdict", json_object_new_string(v.verdict));
        json_object_object_add(o, "detail", json_object_new_string(v.detail));
        add_time(o, "time_ms", "time", v.time_ms);
        json_object_object_add(o, "source", v.source[0] ? json_object_new_string(v.source) : NULL);
        json_object_object_add(o, "history", json_object_new_boolean(it.history));
        json_object_object_add(o, "recent", json_object_new_boolean(in_recent));
        json_object_array_add(arr, o);
    }
    json_object_object_add(root, "items", arr);
    return json_take(root);
}

char *dd_why_page(void *ud, const dd_admin_request *r, unsigned *status, const char **content_type)
{
    dd_why *w = ud;
    (void)content_type;
    const char *m = dd_admin_method(r);
    if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0)
        return error_page(status, 405, "/why: only GET");
    pthread_mutex_lock(&w->mu);
    char *page = why_locked(w, r, status);
    dd_arena_reset(w->arena);
    pthread_mutex_unlock(&w->mu);
    return page;
}
