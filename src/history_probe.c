/* SPDX-License-Identifier: Apache-2.0
 *
 * history_probe.c - the history store's reads (history.h): the batched
 * probes of a user's live segments (dd_history_probe,
 * dd_history_probe_any) and the scan for damaged values
 * (dd_history_scan_damaged). The store's state is history_int.h's.
 *
 * DESIGN
 *
 * One MultiGet per probe, of the user's segments that overlap the lookback
 * window; any merges RocksDB runs inside it are marked as reads
 * (dd_fold_reading), since their result is not kept. A probe that meets a
 * damaged value fails for that user, with a message naming the segment,
 * and counts it; the log of damaged values is rate limited rather than
 * kept per key, since a per-key set would be unbounded memory on the read
 * path.
 */
#include "history.h"
#include "history_int.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rocksdb/c.h>

#include "arena.h"
#include "bloom.h"
#include "candset.h"
#include "dd.h"
#include "fold.h"
#include "icache.h"
#include "log.h"
#include "segment.h"

#define MODULE "history"

/* Probe fast path: keys this long and this many segments use the stack. */
#define PROBE_STACK_KEY 512
#define PROBE_STACK_SEGS 32
/* dd_history_probe_any looks every candidate up in each filter up to this
 * many filters; past it (only with a small history.segment_days), one sort
 * of the candidates and a merge per filter cost less. */
#define PROBE_INDEX_VIEWS 8

/* ---- read ----------------------------------------------------------------- */

/* The filters of one probe: every view parsed out of the values read, with
 * the segment key each came from (for logging a corrupt one, and for its
 * segment and scene) and the day of the read. */
struct probe_views {
    struct dd_bloom_view *v;
    size_t *seg; /* v[i] came from key kp[seg[i]] */
    size_t n;
    const char *const *kp;
    const size_t *ks;
    const size_t *kscene; /* keys [kscene[s], kscene[s + 1]) are scene s's */
    int64_t day;          /* today, by the store's clock */
    uint32_t since;       /* the oldest day the read asks for */
};

/* Whether view V is dated and holds days before SINCE, so that its finds
 * must be checked day by day (bloom.h, dated filters). */
static bool partly_old(const struct dd_bloom_view *v, uint32_t since)
{
    return v->days && v->day0 < since;
}

/* What a probe does with the views it read (CTX is the caller's; it may
 * reorder V and SEG together, which are probe_read's own). Returns
 * 0 or DD_ERR_NOMEM (message in err). */
typedef int (*probe_fn)(dd_history *h, const struct probe_views *pv, void *ctx, char *err,
                        size_t errlen);

/* A probe met damage in the value of key KEY: count and log it, and say
 * so in ERR, naming the segment. Returns DD_ERR_CORRUPT. */
static int damaged(dd_history *h, const char *key, size_t klen, char *err, size_t errlen)
{
    uint32_t seg = 0;
    char hex[100];
    dd_fold_note_corrupt(&h->fold, "value", key, klen);
    atomic_fetch_add_explicit(&h->damaged_reads, 1, memory_order_relaxed);
    dd_key_segment(key, klen, &seg);
    dd_key_hex(hex, sizeof hex, key, klen);
    dd_set_err(err, errlen,
               "stored history damaged: segment %" PRIu32 " (key %s) fails "
               "dedupd's checksum",
               seg, hex);
    return DD_ERR_CORRUPT;
}

/* Read USER's live segments within LOOKBACK_DAYS in each of the NSCENES
 * SCENES in one MultiGet, parse their views and hand them all to FN at
 * once (the values stay pinned until it returns). Returns 0, DD_ERR_IO if
 * a read failed, DD_ERR_CORRUPT if a value is damaged (FN is then not
 * called: the user's history is not known) or FN's error. */
static int probe_read(dd_history *h, const struct dd_history_scene *scenes, size_t nscenes,
                      const char *user, size_t user_len, uint32_t lookback_days, probe_fn fn,
                      void *ctx, char *err, size_t errlen)
{
    int64_t now = now_ms(h);
    int64_t day = dd_day_of_ms(now);
    uint32_t span = lookback_days == 0 || lookback_days > h->fold.seg.retention_days
                        ? h->fold.seg.retention_days
                        : lookback_days;
    /* day - span, as oldest_live_day: the window covers the last SPAN full
     * days and the part of today that has passed */
    int64_t oldest = day - (int64_t)span;
    const uint32_t since = oldest < 0 ? 0 : oldest > UINT32_MAX ? UINT32_MAX : (uint32_t)oldest;
    /* Plays may be dated up to max_future_ms ahead (and a day of skew). */
    int64_t ahead = h->max_future_ms > DD_MS_PER_DAY ? h->max_future_ms : DD_MS_PER_DAY;
    int64_t newest = dd_day_of_ms(now + ahead);
    if (newest < 0) return 0;
    uint32_t first = dd_segment_of_day(&h->fold.seg, oldest < 0 ? 0 : oldest);
    uint32_t last = dd_segment_of_day(&h->fold.seg, newest);
    size_t ncoarse = (size_t)(last - first) + 1;
    /* A day scene's day segments follow; its segment_days segments are
     * still read (those written before it was listed, until they expire). */
    uint32_t first_day = dd_day_segment(oldest);
    size_t ndays = (size_t)(dd_day_segment(newest) - first_day) + 1;
    size_t kscene[DD_HISTORY_SCENES_MAX + 1];
    size_t nseg = 0, scene_max = 0;
    for (size_t s = 0; s < nscenes; s++) {
        kscene[s] = nseg;
        nseg += ncoarse;
        if (h->n_day && dd_history_day_scene(h, scenes[s].p, scenes[s].len)) nseg += ndays;
        if (scenes[s].len > scene_max) scene_max = scenes[s].len;
    }
    kscene[nscenes] = nseg;

    size_t plen_max = 1 + scene_max + 2 + user_len;
    size_t klen = plen_max + 4;

    /* Common case on the stack; huge ids or tiny segment_days on the heap. */
    char kstack[PROBE_STACK_SEGS * PROBE_STACK_KEY];
    const char *kp_stack[PROBE_STACK_SEGS];
    size_t ks_stack[PROBE_STACK_SEGS];
    rocksdb_pinnableslice_t *v_stack[PROBE_STACK_SEGS];
    char *e_stack[PROBE_STACK_SEGS];
    struct dd_bloom_view view_stack[2 * PROBE_STACK_SEGS];
    size_t seg_stack[2 * PROBE_STACK_SEGS];
    char *kbuf = kstack;
    const char **kp = kp_stack;
    size_t *ks = ks_stack;
    rocksdb_pinnableslice_t **vals = v_stack;
    char **errs = e_stack;
    struct dd_bloom_view *views = view_stack;
    size_t *vseg = seg_stack;
    void *heap = NULL;
    if (nseg > PROBE_STACK_SEGS || klen > PROBE_STACK_KEY) {
        size_t per = 2 * sizeof(struct dd_bloom_view) + 2 * sizeof(size_t) + sizeof(char *) +
                     sizeof(size_t) + sizeof(void *) + sizeof(char *);
        if (nseg <= SIZE_MAX / (per + klen)) heap = malloc(nseg * (per + klen));
        if (!heap) {
            dd_set_err(err, errlen, "out of memory");
            return DD_ERR_NOMEM;
        }
        char *p = heap;
        views = (struct dd_bloom_view *)(void *)p;
        p += 2 * nseg * sizeof *views;
        vseg = (size_t *)(void *)p;
        p += 2 * nseg * sizeof *vseg;
        kp = (const char **)(void *)p;
        p += nseg * sizeof *kp;
        ks = (size_t *)(void *)p;
        p += nseg * sizeof *ks;
        vals = (rocksdb_pinnableslice_t **)(void *)p;
        p += nseg * sizeof *vals;
        errs = (char **)(void *)p;
        p += nseg * sizeof *errs;
        kbuf = p;
    }

    for (size_t s = 0; s < nscenes; s++) {
        char *k0 = kbuf + kscene[s] * klen;
        size_t plen = dd_key_prefix((uint8_t *)k0, scenes[s].p, scenes[s].len, user, user_len);
        for (size_t i = kscene[s]; i < kscene[s + 1]; i++) {
            char *k = kbuf + i * klen;
            size_t j = i - kscene[s];
            if (k != k0) memcpy(k, k0, plen);
            dd_key_put_segment((uint8_t *)k + plen, j < ncoarse
                                                        ? first + (uint32_t)j
                                                        : first_day + (uint32_t)(j - ncoarse));
            kp[i] = k;
            ks[i] = plen + 4;
        }
    }
    dd_fold_reading(true); /* merges run in this thread, inside the MultiGet */
    /* One scene's keys are in order; several scenes' are not (by the
     * scene's length, then its bytes), and RocksDB sorts them. */
    rocksdb_batched_multi_get_cf(h->db, h->ropts, h->cf, nseg, kp, ks, vals, errs, nscenes == 1);
    dd_fold_reading(false);

    int rc = 0;
    size_t nv = 0;
    for (size_t i = 0; i < nseg; i++) {
        if (errs[i]) {
            if (rc == 0) dd_set_err(err, errlen, "read: %s", errs[i]);
            rc = DD_ERR_IO;
            rocksdb_free(errs[i]);
        }
        if (!vals[i] || rc != 0) continue;
        size_t vlen;
        const char *v = rocksdb_pinnableslice_value(vals[i], &vlen);
        struct dd_bloom_view pair[2];
        int k;
        const char *a;
        size_t alen;
        if (dd_fold_parse_value(v, vlen, pair, &k, &a, &alen) != 0) {
            rc = damaged(h, kp[i], ks[i], err, errlen);
            continue;
        }
        /* Empty filters are left out, and dated ones whose every day is
         * older than the window; the other one of a split still counts. */
        for (int j = 0; j < k; j++) {
            if (pair[j].count == 0) continue;
            if (pair[j].days && dd_bloom_day_max(&pair[j]) < since) continue;
            views[nv] = pair[j];
            vseg[nv++] = i;
        }
    }
    if (rc == 0 && nv > 0) {
        struct probe_views pv = {views, vseg, nv, kp, ks, kscene, day, since};
        rc = fn(h, &pv, ctx, err, errlen);
    }
    for (size_t i = 0; i < nseg; i++) rocksdb_pinnableslice_destroy(vals[i]);
    free(heap);
    return rc;
}

struct probe_sorted_ctx {
    const uint64_t *sorted;
    size_t n;
    uint8_t *hit;
};

/* Each view merged with the sorted candidates (dd_bloom_probe_sorted).
 * 0, or DD_ERR_CORRUPT for a bitstream that fails (checksum passed). */
static int probe_sorted(dd_history *h, const struct probe_views *pv, void *ctx, char *err,
                        size_t errlen)
{
    const struct probe_sorted_ctx *c = ctx;
    for (size_t j = 0; j < pv->n; j++) {
        int rc = partly_old(&pv->v[j], pv->since)
                     ? dd_bloom_probe_sorted_since(&pv->v[j], c->sorted, c->n, c->hit, pv->since)
                     : dd_bloom_probe_sorted(&pv->v[j], c->sorted, c->n, c->hit);
        if (rc == DD_ERR_NOMEM) {
            dd_set_err(err, errlen, "out of memory probing %zu candidates", c->n);
            return rc;
        }
        if (rc != 0) return damaged(h, pv->kp[pv->seg[j]], pv->ks[pv->seg[j]], err, errlen);
    }
    return 0;
}

int dd_history_probe(dd_history *h, const char *scene, size_t scene_len, const char *user,
                     size_t user_len, uint32_t lookback_days, const uint64_t *sorted, size_t n,
                     uint8_t *hit, char *err, size_t errlen)
{
    if (scene_len > DD_SCENE_MAX || user_len > DD_USER_MAX) {
        dd_set_err(err, errlen, "scene or user id too long");
        return DD_ERR_INVALID;
    }
    if (n == 0) return 0;
    struct probe_sorted_ctx c = {sorted, n, hit};
    struct dd_history_scene sc = {scene, scene_len};
    return probe_read(h, &sc, 1, user, user_len, lookback_days, probe_sorted, &c, err, errlen);
}

/* Filters with fewer fingerprints decode faster than a cache lookup is
 * worth (the key hashes the whole filter) and stay out of the cache. */
#define ICACHE_MIN_COUNT 2048

struct probe_any_ctx {
    const struct dd_candset *cs;
    uint8_t *hit;
    dd_arena *arena;
};

/* The candidates of C as sort keys: each hash's high half (all a
 * fingerprint uses) and its position, so that hits in sorted order map
 * back; sorted (dd_bloom_sort_hashes), in C's arena. NULL: out of memory. */
static uint64_t *sorted_positions(const struct probe_any_ctx *c)
{
    const size_t n = c->cs->n;
    uint64_t *key = dd_arena_alloc(c->arena, n * sizeof *key);
    uint64_t *tmp = dd_arena_alloc(c->arena, n * sizeof *tmp);
    if (!key || !tmp) return NULL;
    for (size_t i = 0; i < n; i++) key[i] = (c->cs->hash[i] & UINT64_C(0xffffffff00000000)) | i;
    dd_bloom_sort_hashes(key, NULL, n, tmp, NULL);
    return key;
}

/* The age in days of a find of day DAY on TODAY: 0 for today or later (a
 * play may be dated ahead), below DD_HISTORY_AGE_NONE. */
static uint16_t age_of(int64_t today, int64_t day)
{
    int64_t a = today - day;
    if (a < 0) a = 0;
    return a >= DD_HISTORY_AGE_NONE ? DD_HISTORY_AGE_NONE - 1 : (uint16_t)a;
}

/* Mark candidate I as found at age AG in scene SCENE when that is newer
 * than its mark (or as new, from a scene of a lower index). WHERE may be
 * NULL. */
static void mark_find(uint16_t *age, uint8_t *where, uint32_t i, uint16_t ag, uint8_t scene)
{
    if (ag < age[i] || (ag == age[i] && where && scene < where[i])) {
        age[i] = ag;
        if (where) where[i] = scene;
    }
}

/* Index of view J: the cache's for a closed segment's large filter
 * (icache.h: an open one changes with every write), else decoded into the
 * arena. *REF is the cache entry to release (NULL: none). Returns DD_OK,
 * DD_ERR_NOMEM or DD_ERR_CORRUPT. */
static int view_index(dd_history *h, const struct dd_bloom_view *v, dd_arena *arena,
                      struct dd_bloom_index *ix, struct dd_icache_entry **ref)
{
    *ref = NULL;
    if (h->icache && v->range != DD_BLOOM_FULL_RANGE && v->count >= ICACHE_MIN_COUNT)
        return dd_icache_get(h->icache, v, ix, ref);
    void *mem = dd_arena_alloc(arena, dd_bloom_index_bytes(v));
    if (!mem) return DD_ERR_NOMEM;
    return dd_bloom_index_build(v, mem, ix) != 0 ? DD_ERR_CORRUPT : DD_OK;
}

/* Dated view J (bloom.h), day by day: every member of the candidate set
 * found in it with a day of PV->since or later is set in C->HIT and, with
 * AGE, gets the age (today - day) and, with WHERE, the scene SCENE of that
 * find when it is newer than the member's mark (or as new, from a scene
 * of a lower index). A filter too large to index (over
 * DD_BLOOM_INDEX_MAX_COUNT) is read whole, as of its newest day: more
 * removed, never less. Returns 0, DD_ERR_NOMEM or DD_ERR_CORRUPT (message
 * in err). */
static int probe_dated(dd_history *h, const struct probe_views *pv, size_t j,
                       const struct probe_any_ctx *c, uint16_t *age, uint8_t *where, uint8_t scene,
                       char *err, size_t errlen)
{
    const struct dd_bloom_view *v = &pv->v[j];
    const size_t n = c->cs->n;
    const uint64_t *hashes = c->cs->hash;
    uint8_t *hit = c->hit;
    if (dd_bloom_index_bytes(v) == 0) {
        struct dd_bloom_view whole = *v;
        whole.days = NULL;
        uint8_t *mine = dd_arena_calloc(c->arena, n, 1);
        uint64_t *key = sorted_positions(c);
        if (!mine || !key) goto nomem;
        if (dd_bloom_probe_sorted(&whole, key, n, mine) != 0)
            return damaged(h, pv->kp[pv->seg[j]], pv->ks[pv->seg[j]], err, errlen);
        const uint16_t ag = age_of(pv->day, dd_bloom_day_max(v));
        for (size_t x = 0; x < n; x++) {
            if (!mine[x]) continue;
            uint32_t i = (uint32_t)key[x];
            hit[i] = 1;
            if (age) mark_find(age, where, i, ag, scene);
        }
        return 0;
    }
    struct dd_bloom_index ix;
    struct dd_icache_entry *ref;
    int rc = view_index(h, v, c->arena, &ix, &ref);
    if (rc == DD_ERR_NOMEM) goto nomem;
    if (rc != DD_OK) return damaged(h, pv->kp[pv->seg[j]], pv->ks[pv->seg[j]], err, errlen);
    const struct dd_bloom_index cix = ix;
    const uint32_t since = pv->since;
    for (size_t i = 0; i < n; i++) {
        uint32_t pos = dd_bloom_index_find(cix, hashes[i]);
        if (pos == UINT32_MAX) continue;
        uint32_t d = dd_bloom_day_at(v, pos);
        if (d < since) continue;
        hit[i] = 1;
        if (age) mark_find(age, where, (uint32_t)i, age_of(pv->day, d), scene);
    }
    dd_icache_release(h->icache, ref);
    return 0;
nomem:
    dd_set_err(err, errlen, "out of memory probing %zu candidates", n);
    return DD_ERR_NOMEM;
}

/* See dd_history_probe_any. Full-range views (open segments and closed
 * ones not yet re-encoded) holding at most 2/5 as many fingerprints as
 * there are candidates: each fingerprint looked up in the candidate set,
 * so they cost their count. The others: up to PROBE_INDEX_VIEWS of them
 * each decoded into an index and every candidate looked up in it; past
 * that, one sort of the candidates and a sorted merge per view.
 * A lookup in the set (a random slot in a table several times the batch)
 * costs more than one in an index (two adjacent u32), so a view pays for
 * the index's n lookups only once it holds a sizeable share of n
 * fingerprints. 2/5 is taken as the point where the two ways cost the same;
 * bench/bench_probe compares them, for retuning. */
static int probe_any(dd_history *h, const struct probe_views *pv, void *ctx, char *err,
                     size_t errlen)
{
    const struct probe_any_ctx *c = ctx;
    const size_t n = c->cs->n;
    const uint64_t *hashes = c->cs->hash;
    size_t left = 0; /* views not at the full range, moved to the front */
    bool index = true;
    struct dd_bloom_view *v = pv->v;
    for (size_t j = 0; j < pv->n; j++) {
        if (partly_old(&v[j], pv->since)) {
            int rc = probe_dated(h, pv, j, c, NULL, NULL, 0, err, errlen);
            if (rc != 0) return rc;
            continue;
        }
        if (v[j].range == DD_BLOOM_FULL_RANGE && (uint64_t)v[j].count * 5 <= (uint64_t)n * 2) {
            if (dd_bloom_probe_candset(&v[j], c->cs, c->hit) != 0)
                return damaged(h, pv->kp[pv->seg[j]], pv->ks[pv->seg[j]], err, errlen);
            continue;
        }
        index = index && dd_bloom_index_bytes(&v[j]) != 0;
        v[left] = v[j];
        pv->seg[left++] = pv->seg[j];
    }
    if (left == 0) return 0;
    if (index && left <= PROBE_INDEX_VIEWS) {
        for (size_t j = 0; j < left; j++) {
            struct dd_bloom_index ix;
            struct dd_icache_entry *ref;
            int rc = view_index(h, &v[j], c->arena, &ix, &ref);
            if (rc == DD_ERR_NOMEM) goto nomem;
            if (rc != DD_OK) return damaged(h, pv->kp[pv->seg[j]], pv->ks[pv->seg[j]], err, errlen);
            const struct dd_bloom_index cix = ix;
            uint8_t *hit = c->hit;
            for (size_t i = 0; i < n; i++) hit[i] |= (uint8_t)dd_bloom_index_has(cix, hashes[i]);
            dd_icache_release(h->icache, ref);
        }
        return 0;
    }
    uint64_t *key = sorted_positions(c);
    uint8_t *shit = dd_arena_calloc(c->arena, n, 1);
    if (!key || !shit) goto nomem;
    struct probe_views rest = {v, pv->seg, left, pv->kp, pv->ks, pv->kscene, pv->day, pv->since};
    struct probe_sorted_ctx sc = {key, n, shit};
    int rc = probe_sorted(h, &rest, &sc, err, errlen);
    for (size_t a = 0; a < n; a++) c->hit[(uint32_t)key[a]] |= shit[a];
    return rc;
nomem:
    dd_set_err(err, errlen, "out of memory probing %zu candidates", n);
    return DD_ERR_NOMEM;
}

int dd_history_probe_any(dd_history *h, const char *scene, size_t scene_len, const char *user,
                         size_t user_len, uint32_t lookback_days, const struct dd_candset *cands,
                         uint8_t *hit, dd_arena *arena, char *err, size_t errlen)
{
    struct dd_history_scene sc = {scene, scene_len};
    return dd_history_probe_scenes(h, &sc, 1, user, user_len, lookback_days, cands, hit, NULL, NULL,
                                   arena, err, errlen);
}

struct probe_marked_ctx {
    struct probe_any_ctx any;
    uint16_t *age;
    uint8_t *where;
};

/* The scene index of key I. */
static uint8_t key_scene(const struct probe_views *pv, size_t i)
{
    uint8_t s = 0;
    while (pv->kscene[s + 1] <= i) s++;
    return s;
}

/* The age of view J: today less its segment's newest day, 0 for today or
 * later (segment.h: an open segment's newest day may be ahead). */
static uint16_t view_age(dd_history *h, const struct probe_views *pv, size_t j)
{
    uint32_t seg = 0;
    size_t i = pv->seg[j];
    dd_key_segment(pv->kp[i], pv->ks[i], &seg);
    return age_of(pv->day, dd_segment_last_day(&h->fold.seg, seg));
}

/* dd_history_probe_scenes with marks: the views in groups of one (age,
 * scene), newest first, each group probed as probe_any probes (into HIT),
 * then every member found and not marked yet gets the group's age and
 * scene. So a member's mark is its newest find. */
static int probe_marked(dd_history *h, const struct probe_views *pv, void *ctx, char *err,
                        size_t errlen)
{
    struct probe_marked_ctx *c = ctx;
    const size_t n = c->any.cs->n;
    uint32_t *key = dd_arena_alloc(c->any.arena, pv->n * sizeof *key);
    if (!key) {
        dd_set_err(err, errlen, "out of memory probing %zu candidates", n);
        return DD_ERR_NOMEM;
    }
    /* Dated views to the end (their finds are marked day by day, after
     * the undated groups), the others keyed by their age and scene. */
    size_t nund = 0;
    for (size_t j = 0; j < pv->n; j++) {
        if (pv->v[j].days) continue;
        struct dd_bloom_view v = pv->v[j];
        size_t sg = pv->seg[j];
        pv->v[j] = pv->v[nund];
        pv->seg[j] = pv->seg[nund];
        pv->v[nund] = v;
        pv->seg[nund++] = sg;
    }
    for (size_t j = 0; j < nund; j++)
        key[j] = (uint32_t)view_age(h, pv, j) << 8 | key_scene(pv, pv->seg[j]);
    /* Insertion sort by key, moving views and their keys together: a
     * user's views are a few, or a few hundred with day scenes. */
    for (size_t j = 1; j < nund; j++) {
        uint32_t k = key[j];
        struct dd_bloom_view v = pv->v[j];
        size_t sg = pv->seg[j], m = j;
        for (; m > 0 && key[m - 1] > k; m--) {
            key[m] = key[m - 1];
            pv->v[m] = pv->v[m - 1];
            pv->seg[m] = pv->seg[m - 1];
        }
        key[m] = k;
        pv->v[m] = v;
        pv->seg[m] = sg;
    }
    uint8_t *hit = c->any.hit;
    for (size_t j = 0; j < nund;) {
        size_t e = j + 1;
        while (e < nund && key[e] == key[j]) e++;
        struct probe_views g = {pv->v + j, pv->seg + j, e - j,   pv->kp,
                                pv->ks,    pv->kscene,  pv->day, pv->since};
        int rc = probe_any(h, &g, &c->any, err, errlen);
        if (rc != 0) return rc;
        const uint16_t a = (uint16_t)(key[j] >> 8);
        const uint8_t s = (uint8_t)key[j];
        for (size_t i = 0; i < n; i++)
            if (hit[i] && c->age[i] == DD_HISTORY_AGE_NONE) {
                c->age[i] = a;
                if (c->where) c->where[i] = s;
            }
        j = e;
    }
    for (size_t j = nund; j < pv->n; j++) {
        int rc = probe_dated(h, pv, j, &c->any, c->age, c->where, key_scene(pv, pv->seg[j]), err,
                             errlen);
        if (rc != 0) return rc;
    }
    return 0;
}

int dd_history_probe_scenes(dd_history *h, const struct dd_history_scene *scenes, size_t nscenes,
                            const char *user, size_t user_len, uint32_t lookback_days,
                            const struct dd_candset *cands, uint8_t *hit, uint16_t *age,
                            uint8_t *where, dd_arena *arena, char *err, size_t errlen)
{
    if (nscenes == 0 || nscenes > DD_HISTORY_SCENES_MAX) {
        dd_set_err(err, errlen, "%zu scenes: want 1 to %d", nscenes, DD_HISTORY_SCENES_MAX);
        return DD_ERR_INVALID;
    }
    for (size_t s = 0; s < nscenes; s++)
        if (scenes[s].len > DD_SCENE_MAX) {
            dd_set_err(err, errlen, "scene or user id too long");
            return DD_ERR_INVALID;
        }
    if (user_len > DD_USER_MAX) {
        dd_set_err(err, errlen, "scene or user id too long");
        return DD_ERR_INVALID;
    }
    if (cands->n > UINT32_MAX) {
        dd_set_err(err, errlen, "%zu candidates: too many", cands->n);
        return DD_ERR_INVALID;
    }
    if (cands->n == 0) return 0;
    if (!age && !where) {
        struct probe_any_ctx c = {cands, hit, arena};
        return probe_read(h, scenes, nscenes, user, user_len, lookback_days, probe_any, &c, err,
                          errlen);
    }
    /* Members found before this call (the caller's HIT) are not marked:
     * marks start from a clear array of the probe's own. */
    uint16_t *mine = age ? age : dd_arena_alloc(arena, cands->n * sizeof *mine);
    uint8_t *found = dd_arena_calloc(arena, cands->n, 1);
    if (!mine || !found) {
        dd_set_err(err, errlen, "out of memory probing %zu candidates", cands->n);
        return DD_ERR_NOMEM;
    }
    for (size_t i = 0; i < cands->n; i++) mine[i] = DD_HISTORY_AGE_NONE;
    struct probe_marked_ctx c = {{cands, found, arena}, mine, where};
    int rc = probe_read(h, scenes, nscenes, user, user_len, lookback_days, probe_marked, &c, err,
                        errlen);
    for (size_t i = 0; i < cands->n; i++) hit[i] |= found[i];
    return rc;
}

/* ---- a user's scenes -------------------------------------------------------- */

/* The smallest key above every key that begins with the LEN bytes at P
 * (rewritten in place): the last byte below 0xff incremented, the rest cut.
 * Returns the new length; 0 when there is none (all 0xff). */
static size_t prefix_successor(uint8_t *p, size_t len)
{
    while (len > 0 && p[len - 1] == 0xff) len--;
    if (len > 0) p[len - 1]++;
    return len;
}

/* A whole-store scan (forget-all's scenes, the damage scan): an iterator
 * that leaves the block cache alone; merges it runs serve a read, their
 * result is not kept. scan_close ends it and returns the iterator's read
 * error if it had one (DD_ERR_IO, in ERR), else RC. */
static rocksdb_iterator_t *scan_open(dd_history *h, rocksdb_readoptions_t **ro)
{
    *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_fill_cache(*ro, 0);
    dd_fold_reading(true);
    return rocksdb_create_iterator_cf(h->db, *ro, h->cf);
}

static int scan_close(rocksdb_iterator_t *it, rocksdb_readoptions_t *ro, int rc, char *err,
                      size_t errlen)
{
    dd_fold_reading(false);
    char *e = NULL;
    rocksdb_iter_get_error(it, &e);
    if (e) {
        rc = dd_fail(DD_ERR_IO, err, errlen, "read: %s", e);
        rocksdb_free(e);
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    return rc;
}

int dd_history_user_scenes(dd_history *h, const char *user, size_t user_len, dd_history_scene_fn fn,
                           void *ud, char *err, size_t errlen)
{
    if (user_len == 0 || user_len > DD_USER_MAX)
        return dd_fail(DD_ERR_INVALID, err, errlen, "user id empty or too long");
    uint8_t *key = malloc(1 + DD_SCENE_MAX + 2 + user_len);
    if (!key) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    uint8_t scene[1 + DD_SCENE_MAX];
    int rc = 0;
    rocksdb_readoptions_t *ro;
    rocksdb_iterator_t *it = scan_open(h, &ro);
    /* Keys begin u8 len(scene) | scene, so each scene is one key range:
     * seek to the first key of a scene, then to (scene, user), then past
     * the scene. */
    rocksdb_iter_seek_to_first(it);
    while (rc == 0 && rocksdb_iter_valid(it)) {
        size_t klen;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &klen);
        size_t sl = k[0];
        if (klen < 1 + sl) { /* not a segment key: no scene to take */
            rocksdb_iter_next(it);
            continue;
        }
        memcpy(scene, k, 1 + sl);
        size_t plen = dd_key_prefix(key, (const char *)scene + 1, sl, user, user_len);
        rocksdb_iter_seek(it, (const char *)key, plen);
        if (rocksdb_iter_valid(it)) {
            size_t l2;
            const char *k2 = rocksdb_iter_key(it, &l2);
            uint32_t seg;
            if (l2 == plen + 4 && memcmp(k2, key, plen) == 0 && dd_key_segment(k2, l2, &seg))
                rc = fn(ud, (const char *)scene + 1, sl);
        }
        size_t next = prefix_successor(scene, 1 + sl);
        if (next == 0) break;
        rocksdb_iter_seek(it, (const char *)scene, next);
    }
    rc = scan_close(it, ro, rc, err, errlen);
    free(key);
    return rc;
}

/* ---- damage scan ---------------------------------------------------------- */

int dd_history_scan_damaged(dd_history *h, dd_history_damaged_fn fn, void *ud, uint64_t *values,
                            char *err, size_t errlen)
{
    int64_t day = dd_day_of_ms(now_ms(h));
    uint64_t n = 0;
    int rc = 0;
    rocksdb_readoptions_t *ro;
    rocksdb_iterator_t *it = scan_open(h, &ro);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const char *key = rocksdb_iter_key(it, &klen);
        const char *user, *scene = key + 1;
        size_t ulen;
        uint32_t seg;
        if (!dd_key_segment(key, klen, &seg) || !dd_key_user(key, klen, &user, &ulen) ||
            ulen == 0 || dd_segment_dead(&h->fold.seg, seg, day))
            continue;
        n++;
        const char *val = rocksdb_iter_value(it, &vlen);
        int c = dd_fold_check_value(val, vlen);
        if (c == DD_ERR_NOMEM) {
            rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory checking a value");
            break;
        }
        if (c == 0) continue;
        atomic_fetch_add_explicit(&h->fold.corrupt_values, 1, memory_order_relaxed);
        rc = fn(ud, scene, (uint8_t)key[0], user, ulen, seg);
        if (rc != 0) break;
    }
    rc = scan_close(it, ro, rc, err, errlen);
    if (values) *values = n;
    return rc;
}
