/* SPDX-License-Identifier: Apache-2.0
 *
 * record.c - see record.h. Validation messages name the request field (and
 * index) exactly as the proto spells it, because they reach the caller as
 * the gRPC status message.
 */
#include "record.h"

#include "api.h"
#include "arena.h"
#include "dd.h"
#include "history.h"
#include "log.h"
#include "metrics.h"
#include "producer.h"
#include "recent.h"
#include "trace.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct dd_record {
    dd_history *history;     /* borrowed, shared */
    dd_recent *recent;       /* borrowed, this thread's */
    dd_producer *producer;   /* borrowed, shared; NULL = single node */
    dd_trace *trace;         /* borrowed, shared; NULL = no traces */
    dd_history_batch *batch; /* reused by RecordPlays */
    uint32_t max_candidates;
    uint32_t max_id_bytes;
    int64_t max_future_ms;
};

static struct {
    _Atomic uint64_t history_errors, deliveries, plays, plays_expired;
} stats;

#define STAT_ADD(field, n) \
    atomic_fetch_add_explicit(&stats.field, (uint64_t)(n), memory_order_relaxed)

static struct dd_log_limit history_limit, produce_limit;

int dd_record_new(dd_record **out, const struct dd_record_conf *conf, dd_history *history,
                  dd_recent *recent, dd_producer *producer, char *err, size_t errlen)
{
    *out = NULL;
    dd_record *r = calloc(1, sizeof *r);
    if (!r) goto nomem;
    r->history = history;
    r->recent = recent;
    r->producer = producer;
    r->max_candidates = conf->max_items;
    r->max_id_bytes = conf->max_id_bytes;
    r->max_future_ms = dd_history_max_future_ms(history);
    r->batch = dd_history_batch_new();
    if (!r->batch) goto nomem;
    *out = r;
    return DD_OK;
nomem:
    dd_record_free(r);
    return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory creating a writer");
}

void dd_record_set_trace(dd_record *r, dd_trace *trace)
{
    r->trace = trace;
}

void dd_record_free(dd_record *r)
{
    if (!r) return;
    dd_history_batch_free(r->batch);
    free(r);
}

/* What every write request is checked for first: the user_id and scene
 * rules (api.h) on protobuf-c's C strings, and at most rpc.max_candidates
 * entries in its repeated FIELD (N of them). */
static int check_request(const dd_record *r, const char *user, size_t *user_len, const char *scene,
                         size_t *scene_len, const char *field, size_t n, char *err, size_t errlen)
{
    *user_len = strlen(user);
    *scene_len = strlen(scene);
    int rc = dd_api_check_user_scene(*user_len, *scene_len, r->max_id_bytes, err, errlen);
    if (rc) return rc;
    if (n > r->max_candidates)
        return dd_fail(DD_ERR_LIMIT, err, errlen,
                       "%s has %zu entries, more than rpc.max_candidates=%" PRIu32, field, n,
                       r->max_candidates);
    return DD_OK;
}

int dd_record_delivery(dd_record *w, dd_arena *arena, const Dedup__V1__RecordDeliveryRequest *req,
                       Dedup__V1__RecordDeliveryResponse *resp, char *err, size_t errlen)
{
    size_t user_len, scene_len;
    const size_t n = req->n_item_ids;

    dedup__v1__record_delivery_response__init(resp);
    int rc = check_request(w, req->user_id, &user_len, req->scene, &scene_len, "item_ids", n, err,
                           errlen);
    if (rc) return rc;
    if (n == 0) return dd_fail(DD_ERR_INVALID, err, errlen, "item_ids is empty");
    if (req->delivered_at_ms < 0)
        return dd_fail(DD_ERR_INVALID, err, errlen, "delivered_at_ms is negative (%" PRId64 ")",
                       (int64_t)req->delivered_at_ms);
    if (req->delivered_at_ms) {
        /* Refused, not clamped: a delivery dated ahead sorts above every
         * genuine one and pushes them out of the last recent.size, and a
         * clamped one would still sort above them until the clock caught
         * up; a caller whose clock is that far off should hear of it, as
         * RecordPlays' callers do. The bound is RecordPlays'. */
        int64_t now = dd_history_now_ms(w->history);
        if (req->delivered_at_ms - now > w->max_future_ms)
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "delivered_at_ms is %" PRId64
                           " ms in the future, more than history.max_future_ms=%" PRId64,
                           (int64_t)req->delivered_at_ms - now, w->max_future_ms);
    }
    size_t *lens = dd_arena_alloc(arena, n * sizeof *lens);
    if (!lens) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory for %zu item_ids", n);
    for (size_t i = 0; i < n; i++) {
        lens[i] = strlen(req->item_ids[i]);
        if (lens[i] == 0) return dd_fail(DD_ERR_INVALID, err, errlen, "item_ids[%zu] is empty", i);
        if (lens[i] > w->max_id_bytes)
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "item_ids[%zu] is %zu bytes, longer than rpc.max_id_bytes=%" PRIu32, i,
                           lens[i], w->max_id_bytes);
    }
    uint32_t size_after = 0;
    rc = dd_recent_record(w->recent, req->scene, scene_len, req->user_id, user_len,
                          (const char *const *)req->item_ids, lens, n, req->delivered_at_ms,
                          &size_after);
    if (rc != DD_OK)
        return dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "recent deliveries unavailable: %s",
                       dd_recent_errstr(w->recent)[0] ? dd_recent_errstr(w->recent)
                                                      : dd_strerror(rc));
    resp->recent_size = size_after;
    STAT_ADD(deliveries, n);
    if (dd_trace_wanted(w->trace, req->user_id, user_len)) {
        /* The time Redis was given (recent.c: 0 = its now). */
        int64_t at = req->delivered_at_ms ? req->delivered_at_ms : dd_now_ms();
        struct dd_trace_rec *recs = dd_arena_alloc(arena, n * sizeof *recs);
        if (!recs) {
            dd_trace_dropped(w->trace, n);
            return DD_OK;
        }
        for (size_t i = 0; i < n; i++)
            recs[i] = (struct dd_trace_rec){.kind = DD_TRACE_DELIVERY,
                                            .source = DD_TRACE_SRC_RECORD_DELIVERY,
                                            .at_ms = at,
                                            .scene = req->scene,
                                            .scene_len = scene_len,
                                            .item = req->item_ids[i],
                                            .item_len = lens[i],
                                            .partition = -1,
                                            .offset = -1};
        dd_trace_record(w->trace, req->user_id, user_len, recs, n);
    }
    return DD_OK;
}

/* A write done here that the shard's other replicas will not see: the
 * caller must retry (both halves are idempotent). The producer counts
 * these (dedupd_producer_calls_total). */
static int produce_failed(char *err, size_t errlen, const char *done, const char *why)
{
    dd_log_limited(&produce_limit, 10000, DD_LOG_ERROR, "record",
                   "msg=\"write not produced for the other replicas\" error=\"%s\"", why);
    return dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                   "%s, but not sent to the shard's other replicas (%s); the call is safe to "
                   "retry",
                   done, why);
}

struct seg_hash {
    uint64_t h;
    uint32_t seg;
};

static int cmp_seg_hash(const void *a, const void *b)
{
    const struct seg_hash *x = a, *y = b;
    if (x->seg != y->seg) return x->seg < y->seg ? -1 : 1;
    return (x->h > y->h) - (x->h < y->h);
}

/* The M plays of SH grouped by segment, ascending: their hashes into HS
 * (M entries), each segment's run start into *STARTS and the segment of
 * run i into (*SEGS)[i], *NRUNS runs (arrays in ARENA). Only the grouping
 * matters: the operand encoders sort and deduplicate their fingerprints
 * themselves (bloom.h), so the order within a run does not change a byte
 * written. A request's segments lie close together (a few segment_days
 * wide, or a day scene's days within the retention): one counting pass
 * over their range, which is cheaper than sorting the pairs (a quarter of
 * a bulk load's CPU per play was qsort's); a range much wider than the
 * request falls back to qsort. DD_OK or DD_ERR_NOMEM. */
static int group_by_segment(dd_arena *arena, struct seg_hash *sh, size_t m, uint64_t *hs,
                            size_t **starts, uint32_t **segs, size_t *nruns)
{
    uint32_t lo = sh[0].seg, hi = sh[0].seg;
    for (size_t i = 1; i < m; i++) {
        if (sh[i].seg < lo) lo = sh[i].seg;
        if (sh[i].seg > hi) hi = sh[i].seg;
    }
    const size_t range = (size_t)(hi - lo) + 1;
    if (range > 2 * m + 64) {
        qsort(sh, m, sizeof *sh, cmp_seg_hash);
        size_t runs = 0;
        for (size_t i = 0; i < m; i++) runs += i == 0 || sh[i].seg != sh[i - 1].seg;
        *starts = dd_arena_alloc(arena, (runs + 1) * sizeof **starts);
        *segs = dd_arena_alloc(arena, runs * sizeof **segs);
        if (!*starts || !*segs) return DD_ERR_NOMEM;
        size_t r = 0;
        for (size_t i = 0; i < m; i++) {
            if (i == 0 || sh[i].seg != sh[i - 1].seg) {
                (*starts)[r] = i;
                (*segs)[r++] = sh[i].seg;
            }
            hs[i] = sh[i].h;
        }
        (*starts)[runs] = m;
        *nruns = runs;
        return DD_OK;
    }
    size_t *at = dd_arena_alloc(arena, range * sizeof *at);
    if (!at) return DD_ERR_NOMEM;
    memset(at, 0, range * sizeof *at);
    for (size_t i = 0; i < m; i++) at[sh[i].seg - lo]++;
    size_t runs = 0;
    for (size_t k = 0; k < range; k++) runs += at[k] != 0;
    *starts = dd_arena_alloc(arena, (runs + 1) * sizeof **starts);
    *segs = dd_arena_alloc(arena, runs * sizeof **segs);
    if (!*starts || !*segs) return DD_ERR_NOMEM;
    size_t sum = 0, r = 0;
    for (size_t k = 0; k < range; k++) {
        size_t c = at[k];
        if (!c) continue;
        (*starts)[r] = sum;
        (*segs)[r++] = lo + (uint32_t)k;
        at[k] = sum;
        sum += c;
    }
    (*starts)[runs] = m;
    for (size_t i = 0; i < m; i++) hs[at[sh[i].seg - lo]++] = sh[i].h;
    *nruns = runs;
    return DD_OK;
}

int dd_record_plays(dd_record *w, dd_arena *arena, const Dedup__V1__RecordPlaysRequest *req,
                    Dedup__V1__RecordPlaysResponse *resp, char *err, size_t errlen)
{
    size_t user_len, scene_len;
    const size_t n = req->n_plays;

    dedup__v1__record_plays_response__init(resp);
    int rc =
        check_request(w, req->user_id, &user_len, req->scene, &scene_len, "plays", n, err, errlen);
    if (rc) return rc;
    if (n == 0) return DD_OK;

    struct seg_hash *sh = dd_arena_alloc(arena, n * sizeof *sh);
    /* With a producer: the accepted plays again, as they are produced. */
    const char **items = w->producer ? dd_arena_alloc(arena, n * sizeof *items) : NULL;
    int64_t *ats = w->producer ? dd_arena_alloc(arena, n * sizeof *ats) : NULL;
    if (!sh || (w->producer && (!items || !ats)))
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory for %zu plays", n);
    /* A traced user: the stored plays again, recorded after the write. */
    struct dd_trace_rec *trecs = NULL;
    if (dd_trace_wanted(w->trace, req->user_id, user_len) &&
        !(trecs = dd_arena_alloc(arena, n * sizeof *trecs)))
        dd_trace_dropped(w->trace, n);
    const int64_t now = dd_history_now_ms(w->history);
    size_t m = 0;
    uint32_t expired = 0;
    for (size_t i = 0; i < n; i++) {
        const Dedup__V1__Play *p = req->plays[i];
        size_t l = strlen(p->item_id);
        if (l == 0) return dd_fail(DD_ERR_INVALID, err, errlen, "plays[%zu].item_id is empty", i);
        if (l > w->max_id_bytes)
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "plays[%zu].item_id is %zu bytes, longer than rpc.max_id_bytes=%" PRIu32,
                           i, l, w->max_id_bytes);
        if (p->played_at_ms < 0)
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "plays[%zu].played_at_ms is negative (%" PRId64 ")", i,
                           (int64_t)p->played_at_ms);
        int64_t at = p->played_at_ms ? p->played_at_ms : now;
        uint32_t seg = 0;
        switch (dd_history_place(w->history, req->scene, scene_len, at, &seg)) {
        case DD_HISTORY_PLACE_OK:
            sh[m].h = dd_history_dated(dd_hash(p->item_id, l), at);
            sh[m].seg = seg;
            if (items) {
                items[m] = p->item_id;
                ats[m] = at;
            }
            if (trecs)
                trecs[m] = (struct dd_trace_rec){.kind = DD_TRACE_PLAY,
                                                 .source = DD_TRACE_SRC_RECORD_PLAYS,
                                                 .at_ms = at,
                                                 .scene = req->scene,
                                                 .scene_len = scene_len,
                                                 .item = p->item_id,
                                                 .item_len = l,
                                                 .partition = -1,
                                                 .offset = -1};
            m++;
            break;
        case DD_HISTORY_PLACE_EXPIRED: expired++; break;
        case DD_HISTORY_PLACE_FUTURE:
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "plays[%zu].played_at_ms is %" PRId64
                           " ms in the future, more than history.max_future_ms=%" PRId64,
                           i, at - now, w->max_future_ms);
        }
    }

    if (m) {
        /* One operand per segment: group the hashes by segment, then hand
         * each run to the batch. The hashes are copied out contiguously
         * (reusing the front of the same arena block would alias). */
        uint64_t *hs = dd_arena_alloc(arena, m * sizeof *hs);
        size_t *starts = NULL, nruns = 0;
        uint32_t *segs = NULL;
        if (!hs || group_by_segment(arena, sh, m, hs, &starts, &segs, &nruns) != DD_OK)
            return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory for %zu plays", n);
        dd_history_batch_clear(w->batch);
        for (size_t r = 0; r < nruns; r++) {
            rc = dd_history_batch_add(w->batch, req->scene, scene_len, req->user_id, user_len,
                                      segs[r], hs + starts[r], starts[r + 1] - starts[r]);
            if (rc != DD_OK) {
                dd_history_batch_clear(w->batch);
                return dd_fail(rc == DD_ERR_NOMEM ? DD_ERR_NOMEM : DD_ERR_INVALID, err, errlen,
                               "cannot batch plays: %s", dd_strerror(rc));
            }
        }
        char herr[256];
        rc = dd_history_write(w->history, w->batch, herr, sizeof herr);
        dd_history_batch_clear(w->batch);
        if (rc != DD_OK) {
            STAT_ADD(history_errors, 1);
            dd_log_limited(&history_limit, 10000, DD_LOG_ERROR, "record",
                           "msg=\"history write failed\" error=\"%s\"", herr);
            return dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "history cannot be written: %s", herr);
        }
    }
    resp->accepted = (uint32_t)m;
    resp->expired = expired;
    STAT_ADD(plays, m);
    STAT_ADD(plays_expired, expired);
    if (trecs && m) dd_trace_record(w->trace, req->user_id, user_len, trecs, m);
    if (w->producer && m) {
        char perr[256];
        rc = dd_producer_plays(w->producer, req->user_id, req->scene, items, ats, m, 0, perr,
                               sizeof perr);
        if (rc != DD_OK) return produce_failed(err, errlen, "plays written here", perr);
    }
    return DD_OK;
}

/* A traced user's ForgetUser, once done. */
static void trace_forget(dd_record *w, const char *user, size_t user_len, const char *scene,
                         size_t scene_len)
{
    if (!dd_trace_wanted(w->trace, user, user_len)) return;
    struct dd_trace_rec r = {.kind = DD_TRACE_FORGET,
                             .source = DD_TRACE_SRC_FORGET_USER,
                             .at_ms = dd_history_now_ms(w->history),
                             .scene = scene,
                             .scene_len = scene_len,
                             .partition = -1,
                             .offset = -1};
    dd_trace_record(w->trace, user, user_len, &r, 1);
}

/* The scenes a ForgetUser removed: sorted, each once, in the arena. */
struct scene_set {
    dd_arena *arena;
    char **v;
    size_t n, cap;
};

static int scene_add(void *ud, const char *scene, size_t scene_len)
{
    struct scene_set *ss = ud;
    size_t lo = 0, hi = ss->n;
    while (lo < hi) { /* binary search for the place; equal: already there */
        size_t mid = (lo + hi) / 2;
        size_t ml = strlen(ss->v[mid]);
        int c = memcmp(ss->v[mid], scene, ml < scene_len ? ml : scene_len);
        if (c == 0) c = ml < scene_len ? -1 : ml > scene_len ? 1 : 0;
        if (c == 0) return DD_OK;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (ss->n == ss->cap) {
        size_t cap = ss->cap ? 2 * ss->cap : 8;
        char **v = dd_arena_calloc(ss->arena, cap, sizeof *v);
        if (!v) return DD_ERR_NOMEM;
        if (ss->n) memcpy(v, ss->v, ss->n * sizeof *v);
        ss->v = v;
        ss->cap = cap;
    }
    char *copy = dd_arena_alloc(ss->arena, scene_len + 1);
    if (!copy) return DD_ERR_NOMEM;
    if (scene_len) memcpy(copy, scene, scene_len);
    copy[scene_len] = '\0';
    memmove(ss->v + lo + 1, ss->v + lo, (ss->n - lo) * sizeof *ss->v);
    ss->v[lo] = copy;
    ss->n++;
    return DD_OK;
}

static int recent_failed(dd_record *w, int rc, const char *what, char *err, size_t errlen)
{
    if (rc == DD_ERR_NOMEM) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    return dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "%srecent deliveries unavailable: %s", what,
                   dd_recent_errstr(w->recent)[0] ? dd_recent_errstr(w->recent) : dd_strerror(rc));
}

/* ForgetUser with all_scenes: every scene in the history and in Redis. */
static int forget_all(dd_record *w, dd_arena *arena, const Dedup__V1__ForgetUserRequest *req,
                      size_t user_len, Dedup__V1__ForgetUserResponse *resp, char *err,
                      size_t errlen)
{
    struct scene_set ss = {.arena = arena};
    char herr[256];
    /* The history's scenes first: on a cluster node the plays go through
     * the log, and these are the scenes this replica's marker will find. */
    int rc = dd_history_user_scenes(w->history, req->user_id, user_len, scene_add, &ss, herr,
                                    sizeof herr);
    if (rc == DD_ERR_NOMEM) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    if (rc != DD_OK) {
        STAT_ADD(history_errors, 1);
        return dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "history cannot be read: %s", herr);
    }
    size_t n_history = ss.n;
    if (w->producer) {
        rc = dd_recent_forget_all(w->recent, req->user_id, user_len, scene_add, &ss);
        if (rc != DD_OK) return recent_failed(w, rc, "", err, errlen);
        char perr[256];
        rc = dd_producer_forget_all(w->producer, req->user_id, 0, perr, sizeof perr);
        if (rc != DD_OK)
            return dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                           "deliveries forgotten, plays not yet: %s; the call is safe to retry",
                           perr);
    } else {
        /* Plays first, then deliveries, as for one scene: the list holds
         * only the history's scenes until Redis' are added. */
        for (size_t i = 0; i < n_history; i++) {
            const char *scene = ss.v[i];
            rc = dd_history_forget(w->history, scene, strlen(scene), req->user_id, user_len, herr,
                                   sizeof herr);
            if (rc != DD_OK) {
                STAT_ADD(history_errors, 1);
                return dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "history cannot be written: %s",
                               herr);
            }
        }
        rc = dd_recent_forget_all(w->recent, req->user_id, user_len, scene_add, &ss);
        if (rc != DD_OK) return recent_failed(w, rc, "plays forgotten, but ", err, errlen);
    }
    for (size_t i = 0; i < ss.n; i++)
        trace_forget(w, req->user_id, user_len, ss.v[i], strlen(ss.v[i]));
    resp->scenes = ss.v;
    resp->n_scenes = ss.n;
    return DD_OK;
}

int dd_record_forget(dd_record *w, dd_arena *arena, const Dedup__V1__ForgetUserRequest *req,
                     Dedup__V1__ForgetUserResponse *resp, char *err, size_t errlen)
{
    size_t user_len, scene_len;

    dedup__v1__forget_user_response__init(resp);
    int rc = check_request(w, req->user_id, &user_len, req->scene, &scene_len, "", 0, err, errlen);
    if (rc) return rc;
    if (req->all_scenes) {
        if (scene_len)
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "scene is \"%.*s\" with all_scenes: give one or the other",
                           (int)(scene_len > 64 ? 64 : scene_len), req->scene);
        return forget_all(w, arena, req, user_len, resp, err, errlen);
    }
    resp->scenes = dd_arena_alloc(arena, sizeof *resp->scenes);
    if (!resp->scenes) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    resp->scenes[0] = req->scene;
    resp->n_scenes = 1;
    if (w->producer) {
        /* A cluster: deliveries in the shard's Redis here; plays through
         * the log, which every replica (this one included, before this
         * returns) applies in order (producer.h). */
        rc = dd_recent_forget(w->recent, req->scene, scene_len, req->user_id, user_len);
        if (rc != DD_OK) return recent_failed(w, rc, "", err, errlen);
        char perr[256];
        rc = dd_producer_forget(w->producer, req->user_id, req->scene, 0, perr, sizeof perr);
        if (rc != DD_OK)
            return dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                           "deliveries forgotten, plays not yet: %s; the call is safe to retry",
                           perr);
        trace_forget(w, req->user_id, user_len, req->scene, scene_len);
        return DD_OK;
    }
    char herr[256];
    rc = dd_history_forget(w->history, req->scene, scene_len, req->user_id, user_len, herr,
                           sizeof herr);
    if (rc != DD_OK) {
        STAT_ADD(history_errors, 1);
        return dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "history cannot be written: %s", herr);
    }
    rc = dd_recent_forget(w->recent, req->scene, scene_len, req->user_id, user_len);
    if (rc != DD_OK) return recent_failed(w, rc, "plays forgotten, but ", err, errlen);
    trace_forget(w, req->user_id, user_len, req->scene, scene_len);
    return DD_OK;
}

void dd_record_get_stats(struct dd_record_stats *out)
{
#define LOAD(field) out->field = atomic_load_explicit(&stats.field, memory_order_relaxed)
    LOAD(history_errors);
    LOAD(deliveries);
    LOAD(plays);
    LOAD(plays_expired);
#undef LOAD
}

void dd_record_collect(dd_prom *p)
{
    struct dd_record_stats s;
    dd_record_get_stats(&s);
    dd_prom_counter(p, "dedupd_deliveries_recorded_total", "Item ids recorded by RecordDelivery",
                    s.deliveries);
}
