/* SPDX-License-Identifier: Apache-2.0
 *
 * filter.c - see filter.h for the algorithm. Validation messages name the
 * request field (and index) exactly as the proto spells it, because they
 * reach the caller as the gRPC status message.
 */
#include "filter.h"

#include "api.h"
#include "arena.h"
#include "bloom.h"
#include "candset.h"
#include "dd.h"
#include "history.h"
#include "log.h"
#include "metrics.h"
#include "recent.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

struct dd_filter {
    dd_history *history;     /* borrowed, shared */
    dd_recent *recent;       /* borrowed, this thread's */
    uint64_t *recent_hashes; /* room for recent_cap */
    size_t recent_cap;
    struct dd_candset cands; /* first occurrences, see dd_filter_decide */
    uint32_t max_candidates;
    uint32_t max_id_bytes;
};

static struct {
    _Atomic uint64_t filter_calls, candidates, removed_played, removed_delivered, removed_duplicate,
        degraded, history_errors;
} stats;

/* Lock-free like the counters above (metrics.h). */
static struct dd_histogram candidates_hist = {.bounds = dd_metrics_count_bounds,
                                              .nbounds = DD_METRICS_COUNT_BOUNDS_LEN};

#define STAT_ADD(field, n) \
    atomic_fetch_add_explicit(&stats.field, (uint64_t)(n), memory_order_relaxed)

static struct dd_log_limit recent_limit, history_limit;

int dd_filter_new(dd_filter **out, const struct dd_filter_conf *conf, dd_history *history,
                  dd_recent *recent, char *err, size_t errlen)
{
    *out = NULL;
    dd_filter *f = calloc(1, sizeof *f);
    if (!f) goto nomem;
    f->history = history;
    f->recent = recent;
    f->max_candidates = conf->max_candidates;
    f->max_id_bytes = conf->max_id_bytes;
    /* A little more than recent.size: a set trimmed concurrently by another
     * writer may briefly hold one or two more. */
    f->recent_cap = (size_t)conf->recent_size + 16;
    f->recent_hashes = calloc(f->recent_cap, sizeof *f->recent_hashes);
    if (!f->recent_hashes) goto nomem;
    if (dd_candset_init(&f->cands, f->max_candidates < 20000 ? f->max_candidates : 20000) != DD_OK)
        goto nomem;
    *out = f;
    return DD_OK;
nomem:
    dd_filter_free(f);
    return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory creating a filter");
}

void dd_filter_free(dd_filter *f)
{
    if (!f) return;
    dd_candset_free(&f->cands);
    free(f->recent_hashes);
    free(f);
}

static bool past(int64_t deadline_ns)
{
    return deadline_ns && dd_mono_ns() >= deadline_ns;
}

/* dd_hash, inlined into the candidate loop (the same function: the hash
 * is part of the stored format, dd.h). */
static inline uint64_t hash_id(const char *p, size_t len)
{
    return XXH3_64bits_withSeed(p, len, DD_HASH_SEED);
}

/* How far ahead the duplicate pass prefetches its table slots: far enough
 * that the iterations in between hide most of a cache miss, near enough
 * that the prefetched lines are still in L1 when used. */
#define SEEN_AHEAD 16

static inline bool same_id(const struct dd_filter_id *a, const struct dd_filter_id *b)
{
    return a->len == b->len && memcmp(a->p, b->p, a->len) == 0;
}

int dd_filter_decide(dd_filter *f, dd_arena *arena, const struct dd_filter_query *q,
                     struct dd_filter_result *r, int64_t deadline_ns, char *err, size_t errlen)
{
    const size_t n = q->n;

    memset(r, 0, sizeof *r);
    int rc = dd_api_check_user_scene(q->user_len, q->scene_len, f->max_id_bytes, err, errlen);
    if (rc) return rc;
    const char *field = q->by_hash ? "candidate_hashes" : "candidate_ids";
    if (n > f->max_candidates)
        return dd_fail(DD_ERR_LIMIT, err, errlen,
                       "%s has %zu entries, more than rpc.max_candidates=%" PRIu32, field, n,
                       f->max_candidates);
    if (q->mode != DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS &&
        q->mode != DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES)
        return dd_fail(DD_ERR_INVALID, err, errlen, "mode %d is not a ResponseMode", (int)q->mode);
    if (past(deadline_ns)) return dd_fail(DD_ERR_TIMEOUT, err, errlen, "deadline exceeded");

    if (q->by_hash && q->mode != DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES)
        return dd_fail(DD_ERR_INVALID, err, errlen, "candidate_hashes are answered by index only");

    /* Per-call arrays: O(1) arena allocations, none per candidate. Hashes
     * given by the caller are used where they are. */
    uint64_t *hw = q->by_hash ? NULL : dd_arena_alloc(arena, n * sizeof *hw);
    const uint64_t *h = q->by_hash ? q->hashes : hw;
    uint8_t *reason = dd_arena_calloc(arena, n, 1);
    uint8_t *hit = dd_arena_calloc(arena, n, 1);
    struct dd_candset *cs = &f->cands;
    if ((n && !h) || !reason || !hit || dd_candset_begin(cs, h, n) != DD_OK)
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory for %zu candidates", n);
    r->reason = reason;

    /* 3 (begun): the recent deliveries are asked for first; the reply is
     * read after the history probe, so the round trip overlaps them. */
    int rrc = dd_recent_fetch_begin(f->recent, q->scene, q->scene_len, q->user_id, q->user_len,
                                    f->recent_cap);
    const bool asked = rrc == DD_OK;

    /* 1: validate and hash once (compact candidates come hashed). */
    const struct dd_filter_id *ids = q->ids;
    const uint32_t max_len = f->max_id_bytes;
    for (size_t i = 0; hw && i < n; i++) {
        size_t l = ids[i].len;
        if (l > max_len) {
            rc = dd_fail(DD_ERR_INVALID, err, errlen,
                         "candidate_ids[%zu] is %zu bytes, longer than rpc.max_id_bytes=%" PRIu32,
                         i, l, max_len);
            goto out;
        }
        hw[i] = hash_id(ids[i].p, l);
    }

    /* 2: look for an earlier occurrence. The table holds first
     * occurrences, by position; a slot is in use when its generation is
     * this call's. Its slots are random accesses into a table of 12-byte
     * slots, two to four per candidate, which the transport and the
     * previous call have usually pushed out of this core's caches: each
     * home slot is prefetched SEEN_AHEAD candidates early, so the misses
     * overlap (which is why this pass runs after every hash is known). */
    struct dd_candset_slot *seen = cs->slot;
    const uint32_t gen = cs->gen, mask = cs->mask;
    uint32_t dup = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + SEEN_AHEAD < n)
            __builtin_prefetch(&seen[dd_candset_home(cs, h[i + SEEN_AHEAD])], 1);
        const uint64_t x = h[i];
        for (uint32_t s = dd_candset_home(cs, x);; s = (s + 1) & mask) {
            if (seen[s].gen != gen) {
                seen[s].gen = gen;
                seen[s].pos = (uint32_t)i;
                seen[s].hi = (uint32_t)(x >> 32);
                break;
            }
            uint32_t j = seen[s].pos;
            /* Ids are confirmed on their bytes; hashes are all there is. */
            if (seen[s].hi == (uint32_t)(x >> 32) && h[j] == x &&
                (!ids || same_id(&ids[j], &ids[i]))) {
                reason[i] = DEDUP__V1__REASON__REASON_DUPLICATE;
                dup++;
                break;
            }
        }
    }

    /* 4: history. Every candidate is probed, duplicates too: duplicates
     * are few, and their lookups cost less than compacting the list. */
    uint32_t played = 0;
    if (n) {
        if (past(deadline_ns)) {
            rc = dd_fail(DD_ERR_TIMEOUT, err, errlen, "deadline exceeded");
            goto out;
        }
        char herr[256];
        int hrc = dd_history_probe_any(f->history, q->scene, q->scene_len, q->user_id, q->user_len,
                                       q->lookback_days, cs, hit, arena, herr, sizeof herr);
        if (hrc == DD_ERR_NOMEM) {
            rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory for %zu candidates", n);
            goto out;
        }
        if (hrc != DD_OK) {
            STAT_ADD(history_errors, 1);
            dd_log_limited(&history_limit, 10000, DD_LOG_ERROR, "filter",
                           "msg=\"history read failed\" error=\"%s\"", herr);
            /* damage is this user's alone: the caller may ask a replica */
            rc = dd_fail(hrc == DD_ERR_CORRUPT ? DD_ERR_CORRUPT : DD_ERR_UNAVAILABLE, err, errlen,
                         "history cannot be read: %s", herr);
            goto out;
        }
        /* Stored for every candidate rather than branched on: hits are at
         * random places and a branch on them mispredicts. */
        for (size_t i = 0; i < n; i++) {
            uint8_t y = (uint8_t)((hit[i] != 0) & (reason[i] == 0));
            reason[i] |= (uint8_t)(y * DEDUP__V1__REASON__REASON_PLAYED);
            played += y;
        }
    }

    /* 3 (ended): recent deliveries, if Redis answered. A first occurrence
     * with a delivered hash is DELIVERED, also when it was found played. */
    uint32_t delivered = 0;
    size_t nrecent = 0;
    if (asked) rrc = dd_recent_fetch_end(f->recent, f->recent_hashes, f->recent_cap, &nrecent);
    if (rrc != DD_OK) {
        r->degraded = 1;
        nrecent = 0;
        STAT_ADD(degraded, 1);
        dd_log_limited(&recent_limit, 10000, DD_LOG_WARN, "filter",
                       "msg=\"recent deliveries unavailable; answering from history\" "
                       "error=\"%s\" detail=\"%s\"",
                       dd_strerror(rrc), dd_recent_errstr(f->recent));
    }
    for (size_t x = 0; x < nrecent; x++) {
        /* Every first occurrence with this hash matches: the hash is what
         * is compared, as for plays. */
        uint64_t rh = f->recent_hashes[x];
        for (uint32_t s = dd_candset_home(cs, rh); seen[s].gen == gen; s = (s + 1) & mask) {
            uint32_t i = seen[s].pos;
            if (h[i] != rh || reason[i] == DEDUP__V1__REASON__REASON_DELIVERED) continue;
            played -= reason[i] == DEDUP__V1__REASON__REASON_PLAYED;
            reason[i] = DEDUP__V1__REASON__REASON_DELIVERED;
            delivered++;
        }
    }

    r->played = played;
    r->delivered = delivered;
    r->duplicate = dup;
    r->kept = n - ((size_t)dup + delivered + played);

    STAT_ADD(filter_calls, 1);
    STAT_ADD(candidates, n);
    dd_histogram_observe(&candidates_hist, (double)n);
    STAT_ADD(removed_played, played);
    STAT_ADD(removed_delivered, delivered);
    STAT_ADD(removed_duplicate, dup);
    return DD_OK;

out:
    if (asked) dd_recent_fetch_cancel(f->recent);
    return rc;
}

int dd_filter_run(dd_filter *f, dd_arena *arena, const Dedup__V1__FilterRequest *req,
                  Dedup__V1__FilterResponse *resp, int64_t deadline_ns, char *err, size_t errlen)
{
    dedup__v1__filter_response__init(resp);
    if (req->n_candidate_ids && req->n_candidate_hashes)
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "candidate_ids and candidate_hashes are both set; send one of them");
    const bool by_hash = req->n_candidate_hashes > 0;
    const size_t n = by_hash ? req->n_candidate_hashes : req->n_candidate_ids;
    struct dd_filter_query q = {
        .user_id = req->user_id,
        .user_len = strlen(req->user_id),
        .scene = req->scene,
        .scene_len = strlen(req->scene),
        .lookback_days = req->lookback_days,
        .mode = (int32_t)req->mode,
        .explain = req->explain,
        .n = n,
    };
    struct dd_filter_result r;

    if (by_hash) {
        q.by_hash = 1;
        q.mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES;
        q.hashes = n <= f->max_candidates ? req->candidate_hashes : NULL;
    } else if (n <= f->max_candidates) {
        struct dd_filter_id *ids = dd_arena_alloc(arena, n * sizeof *ids);
        if (!ids) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory for %zu candidates", n);
        for (size_t i = 0; i < n; i++) {
            ids[i].p = req->candidate_ids[i];
            ids[i].len = strlen(req->candidate_ids[i]);
        }
        q.ids = ids;
    }
    int rc = dd_filter_decide(f, arena, &q, &r, deadline_ns, err, errlen);
    if (rc != DD_OK) return rc;

    size_t removed = n - r.kept;
    if (q.mode == DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS) {
        resp->kept_ids = dd_arena_alloc(arena, r.kept * sizeof *resp->kept_ids);
        if (!resp->kept_ids) goto nomem;
    } else {
        resp->kept_indexes = dd_arena_alloc(arena, r.kept * sizeof *resp->kept_indexes);
        if (!resp->kept_indexes) goto nomem;
    }
    Dedup__V1__Removed *rm = NULL;
    if (q.explain) {
        rm = dd_arena_alloc(arena, removed * sizeof *rm);
        resp->removed = dd_arena_alloc(arena, removed * sizeof *resp->removed);
        if (!rm || !resp->removed) goto nomem;
    }
    for (size_t i = 0; i < n; i++) {
        if (r.reason[i] == 0) {
            if (resp->kept_ids)
                resp->kept_ids[resp->n_kept_ids++] = req->candidate_ids[i];
            else
                resp->kept_indexes[resp->n_kept_indexes++] = (uint32_t)i;
        } else if (rm) {
            Dedup__V1__Removed *x = &rm[resp->n_removed];
            dedup__v1__removed__init(x);
            x->index = (uint32_t)i;
            x->reason = (Dedup__V1__Reason)r.reason[i];
            resp->removed[resp->n_removed++] = x;
        }
    }
    resp->degraded = r.degraded;
    resp->removed_played = r.played;
    resp->removed_delivered = r.delivered;
    resp->removed_duplicate = r.duplicate;
    return DD_OK;

nomem:
    return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory for %zu candidates", n);
}

void dd_filter_get_stats(struct dd_filter_stats *out)
{
#define LOAD(field) out->field = atomic_load_explicit(&stats.field, memory_order_relaxed)
    LOAD(filter_calls);
    LOAD(candidates);
    LOAD(removed_played);
    LOAD(removed_delivered);
    LOAD(removed_duplicate);
    LOAD(degraded);
    LOAD(history_errors);
#undef LOAD
}

void dd_filter_get_candidates(struct dd_histogram_snap *out)
{
    dd_histogram_snapshot(&candidates_hist, out);
}

void dd_filter_collect(dd_prom *p)
{
    struct dd_filter_stats f;
    dd_filter_get_stats(&f);
    dd_prom_counter(p, "dedupd_filter_calls_total", "Filter calls answered OK", f.filter_calls);
    dd_prom_counter(p, "dedupd_filter_candidates_total", "Candidates in Filter calls answered OK",
                    f.candidates);
    struct dd_histogram_snap ch;
    dd_filter_get_candidates(&ch);
    dd_prom_family(p, "dedupd_filter_candidates", "Candidates per Filter call answered OK",
                   DD_PROM_HISTOGRAM);
    dd_prom_histogram(p, "dedupd_filter_candidates", NULL, 0, &ch);
    dd_prom_family(p, "dedupd_filter_removed_total", "Candidates removed by Filter, by reason",
                   DD_PROM_COUNTER);
    static const struct dd_prom_label played = {"reason", "played"},
                                      delivered = {"reason", "delivered"},
                                      duplicate = {"reason", "duplicate"};
    dd_prom_sample_u64(p, "dedupd_filter_removed_total", &played, 1, f.removed_played);
    dd_prom_sample_u64(p, "dedupd_filter_removed_total", &delivered, 1, f.removed_delivered);
    dd_prom_sample_u64(p, "dedupd_filter_removed_total", &duplicate, 1, f.removed_duplicate);
    dd_prom_counter(p, "dedupd_filter_degraded_total",
                    "Filter answers given without recent deliveries (Redis unavailable)",
                    f.degraded);
}
