/* SPDX-License-Identifier: Apache-2.0
 *
 * window.c - pending plays between flushes; see window.h for the design.
 */
#include "window.h"

#include "dd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define INIT_PLAYS 1024u
#define INIT_ENTRIES 256u
#define INIT_ARENA 4096u

struct entry {
    uint64_t keyhash;
    uint32_t key_off; /* arena: scene bytes then user bytes */
    uint32_t segment;
    uint32_t head;  /* newest play, NONE when empty */
    uint32_t count; /* plays in the chain */
    uint16_t user_len;
    uint8_t scene_len;
};

struct dd_window {
    const dd_history *h;
    uint64_t max_bytes;

    struct entry *entries;
    size_t n_entries, cap_entries;
    uint32_t *slots;  /* entry index + 1; 0 = empty */
    size_t cap_slots; /* power of two, >= 2 * cap_entries */
    uint64_t *play_hash;
    uint32_t *play_prev;
    size_t n_plays, cap_plays;
    char *arena;
    size_t arena_len, arena_cap;

    uint64_t *scratch; /* flush: one entry's hashes */
    size_t scratch_cap;
    uint32_t *order; /* flush: entry indexes in store key order */
    size_t order_cap;

    int hit_limit; /* a DD_ERR_LIMIT since the last clear */
    struct dd_window_stats st;
};

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

static uint64_t key_hash(const char *scene, size_t scene_len, const char *user, size_t user_len,
                         uint32_t segment)
{
    uint64_t k = dd_hash(user, user_len);
    if (scene_len) k ^= mix64(dd_hash(scene, scene_len) + scene_len);
    return mix64(k ^ ((uint64_t)segment << 8));
}

static uint64_t alloc_bytes(const dd_window *w)
{
    return (uint64_t)w->cap_entries * sizeof(struct entry) +
           (uint64_t)w->cap_slots * sizeof(uint32_t) +
           (uint64_t)w->cap_plays * (sizeof(uint64_t) + sizeof(uint32_t)) + w->arena_cap;
}

int dd_window_new(dd_window **out, const dd_history *h, uint64_t max_bytes)
{
    *out = NULL;
    if (!h || max_bytes < DD_WINDOW_MIN_BYTES) return DD_ERR_INVALID;
    dd_window *w = calloc(1, sizeof *w);
    if (!w) return DD_ERR_NOMEM;
    w->h = h;
    w->max_bytes = max_bytes;
    w->cap_entries = INIT_ENTRIES;
    w->cap_slots = INIT_ENTRIES * 2;
    w->cap_plays = INIT_PLAYS;
    w->arena_cap = INIT_ARENA;
    w->entries = malloc(w->cap_entries * sizeof *w->entries);
    w->slots = calloc(w->cap_slots, sizeof *w->slots);
    w->play_hash = malloc(w->cap_plays * sizeof *w->play_hash);
    w->play_prev = malloc(w->cap_plays * sizeof *w->play_prev);
    w->arena = malloc(w->arena_cap);
    if (!w->entries || !w->slots || !w->play_hash || !w->play_prev || !w->arena) {
        dd_window_free(w);
        return DD_ERR_NOMEM;
    }
    *out = w;
    return DD_OK;
}

void dd_window_free(dd_window *w)
{
    if (!w) return;
    free(w->entries);
    free(w->slots);
    free(w->play_hash);
    free(w->play_prev);
    free(w->arena);
    free(w->scratch);
    free(w->order);
    free(w);
}

/* Would growing one array from OLD to NEW bytes keep the window in bounds? */
static int fits(const dd_window *w, uint64_t old_bytes, uint64_t new_bytes)
{
    return alloc_bytes(w) - old_bytes + new_bytes <= w->max_bytes;
}

static int grow_plays(dd_window *w)
{
    size_t ncap = w->cap_plays * 2;
    if (ncap >= NONE) return DD_ERR_LIMIT;
    const size_t per = sizeof(uint64_t) + sizeof(uint32_t);
    if (!fits(w, (uint64_t)w->cap_plays * per, (uint64_t)ncap * per)) return DD_ERR_LIMIT;
    uint64_t *ph = realloc(w->play_hash, ncap * sizeof *ph);
    if (!ph) return DD_ERR_NOMEM;
    w->play_hash = ph;
    uint32_t *pp = realloc(w->play_prev, ncap * sizeof *pp);
    if (!pp) return DD_ERR_NOMEM; /* play_hash is merely larger: harmless */
    w->play_prev = pp;
    w->cap_plays = ncap;
    return DD_OK;
}

static void rehash(dd_window *w)
{
    size_t mask = w->cap_slots - 1;
    memset(w->slots, 0, w->cap_slots * sizeof *w->slots);
    for (size_t i = 0; i < w->n_entries; i++) {
        size_t s = (size_t)w->entries[i].keyhash & mask;
        while (w->slots[s]) s = (s + 1) & mask;
        w->slots[s] = (uint32_t)i + 1;
    }
}

static int grow_entries(dd_window *w)
{
    size_t ncap = w->cap_entries * 2, nslots = w->cap_slots * 2;
    if (ncap >= NONE / 2) return DD_ERR_LIMIT;
    uint64_t old =
        (uint64_t)w->cap_entries * sizeof(struct entry) + (uint64_t)w->cap_slots * sizeof(uint32_t);
    uint64_t new = (uint64_t)ncap * sizeof(struct entry) + (uint64_t)nslots * sizeof(uint32_t);
    if (!fits(w, old, new)) return DD_ERR_LIMIT;
    uint32_t *s = calloc(nslots, sizeof *s);
    if (!s) return DD_ERR_NOMEM;
    struct entry *e = realloc(w->entries, ncap * sizeof *e);
    if (!e) {
        free(s);
        return DD_ERR_NOMEM;
    }
    w->entries = e;
    w->cap_entries = ncap;
    free(w->slots);
    w->slots = s;
    w->cap_slots = nslots;
    rehash(w);
    return DD_OK;
}

static int grow_arena(dd_window *w, size_t need)
{
    size_t ncap = w->arena_cap;
    while (ncap - w->arena_len < need) ncap *= 2;
    if (ncap > UINT32_MAX) return DD_ERR_LIMIT;
    if (!fits(w, w->arena_cap, ncap)) return DD_ERR_LIMIT;
    char *a = realloc(w->arena, ncap);
    if (!a) return DD_ERR_NOMEM;
    w->arena = a;
    w->arena_cap = ncap;
    return DD_OK;
}

static int limit(dd_window *w, int rc)
{
    if (rc == DD_ERR_LIMIT) {
        w->st.limit_hits++;
        w->hit_limit = 1;
    }
    return rc;
}

int dd_window_add(dd_window *w, const char *scene, size_t scene_len, const char *user,
                  size_t user_len, uint64_t item, int64_t at_ms)
{
    if (scene_len > UINT8_MAX || user_len == 0 || user_len > UINT16_MAX) return DD_ERR_INVALID;
    uint32_t seg;
    switch (dd_history_place(w->h, scene, scene_len, at_ms, &seg)) {
    case DD_HISTORY_PLACE_OK: break;
    case DD_HISTORY_PLACE_EXPIRED: w->st.expired++; return DD_WINDOW_EXPIRED;
    case DD_HISTORY_PLACE_FUTURE: w->st.future++; return DD_WINDOW_FUTURE;
    }
    item = dd_history_dated(item, at_ms);
    uint64_t kh = key_hash(scene, scene_len, user, user_len, seg);
    size_t mask = w->cap_slots - 1, s = (size_t)kh & mask;
    struct entry *e = NULL;
    for (; w->slots[s]; s = (s + 1) & mask) {
        struct entry *c = &w->entries[w->slots[s] - 1];
        if (c->keyhash == kh && c->segment == seg && c->scene_len == scene_len &&
            c->user_len == user_len && memcmp(w->arena + c->key_off, scene, scene_len) == 0 &&
            memcmp(w->arena + c->key_off + scene_len, user, user_len) == 0) {
            e = c;
            break;
        }
    }
    if (e && e->head != NONE && w->play_hash[e->head] == item) {
        w->st.duplicates++;
        w->st.plays_added++;
        return DD_WINDOW_ADDED;
    }
    /* Make room for everything first, so a refusal changes nothing. */
    int rc;
    if (w->n_plays == w->cap_plays && (rc = grow_plays(w)) != DD_OK) return limit(w, rc);
    if (!e) {
        size_t klen = scene_len + user_len;
        if (w->arena_cap - w->arena_len < klen && (rc = grow_arena(w, klen)) != DD_OK)
            return limit(w, rc);
        if (w->n_entries == w->cap_entries) {
            if ((rc = grow_entries(w)) != DD_OK) return limit(w, rc);
            mask = w->cap_slots - 1;
            for (s = (size_t)kh & mask; w->slots[s]; s = (s + 1) & mask) {
            }
        }
        e = &w->entries[w->n_entries];
        e->keyhash = kh;
        e->key_off = (uint32_t)w->arena_len;
        e->segment = seg;
        e->head = NONE;
        e->count = 0;
        e->user_len = (uint16_t)user_len;
        e->scene_len = (uint8_t)scene_len;
        if (scene_len) memcpy(w->arena + w->arena_len, scene, scene_len);
        memcpy(w->arena + w->arena_len + scene_len, user, user_len);
        w->arena_len += klen;
        w->slots[s] = (uint32_t)++w->n_entries;
    }
    uint32_t p = (uint32_t)w->n_plays++;
    w->play_hash[p] = item;
    w->play_prev[p] = e->head;
    e->head = p;
    e->count++;
    w->st.plays_added++;
    return DD_WINDOW_ADDED;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Sort and make unique; returns the distinct count. */
static size_t sort_unique(uint64_t *v, size_t n)
{
    if (n <= 16) {
        for (size_t i = 1; i < n; i++) {
            uint64_t x = v[i];
            size_t j = i;
            for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
            v[j] = x;
        }
    } else {
        qsort(v, n, sizeof *v, cmp_u64);
    }
    size_t u = n ? 1 : 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] != v[u - 1]) v[u++] = v[i];
    return u;
}

/* Give back half of an array that was under a quarter used, once the window
 * has hit its limit; a failed shrink keeps the larger array. */
static void shrink(dd_window *w)
{
    if (w->cap_plays > INIT_PLAYS && w->n_plays < w->cap_plays / 4) {
        size_t ncap = w->cap_plays / 2;
        uint64_t *ph = realloc(w->play_hash, ncap * sizeof *ph);
        uint32_t *pp = ph ? realloc(w->play_prev, ncap * sizeof *pp) : NULL;
        if (ph) w->play_hash = ph;
        if (pp) {
            w->play_prev = pp;
            w->cap_plays = ncap;
        }
    }
    if (w->cap_entries > INIT_ENTRIES && w->n_entries < w->cap_entries / 4) {
        size_t ncap = w->cap_entries / 2, nslots = w->cap_slots / 2;
        uint32_t *s = realloc(w->slots, nslots * sizeof *s);
        if (s) {
            w->slots = s;
            w->cap_slots = nslots;
            struct entry *e = realloc(w->entries, ncap * sizeof *e);
            if (e) w->entries = e;
            w->cap_entries = ncap; /* the old block is at least as large */
            memset(w->slots, 0, w->cap_slots * sizeof *w->slots);
        }
    }
    if (w->arena_cap > INIT_ARENA && w->arena_len < w->arena_cap / 4) {
        char *a = realloc(w->arena, w->arena_cap / 2);
        if (a) {
            w->arena = a;
            w->arena_cap /= 2;
        }
    }
}

void dd_window_clear(dd_window *w)
{
    size_t mask = w->cap_slots - 1;
    if (w->n_entries < w->cap_slots / 16) {
        /* Few entries: find and clear only their slots. */
        for (size_t i = 0; i < w->n_entries; i++) {
            size_t s = (size_t)w->entries[i].keyhash & mask;
            while (w->slots[s] != (uint32_t)i + 1) s = (s + 1) & mask;
            w->slots[s] = 0;
        }
    } else {
        memset(w->slots, 0, w->cap_slots * sizeof *w->slots);
    }
    if (w->hit_limit) shrink(w);
    w->n_entries = 0;
    w->n_plays = 0;
    w->arena_len = 0;
    w->hit_limit = 0;
}

/* The store's key order (segment.h: u8 len(scene) | scene | u16 BE
 * len(user) | user | u32 BE segment, compared bytewise). */
static int cmp_key(const void *a, const void *b, void *arg)
{
    const dd_window *w = arg;
    const struct entry *x = &w->entries[*(const uint32_t *)a];
    const struct entry *y = &w->entries[*(const uint32_t *)b];
    if (x->scene_len != y->scene_len) return x->scene_len < y->scene_len ? -1 : 1;
    const char *kx = w->arena + x->key_off, *ky = w->arena + y->key_off;
    int c = memcmp(kx, ky, x->scene_len);
    if (c) return c;
    if (x->user_len != y->user_len) return x->user_len < y->user_len ? -1 : 1;
    c = memcmp(kx + x->scene_len, ky + y->scene_len, x->user_len);
    if (c) return c;
    return (x->segment > y->segment) - (x->segment < y->segment);
}

int dd_window_flush(dd_window *w, dd_history *h, dd_history_batch *b, uint64_t *written, char *err,
                    size_t errlen)
{
    if (written) *written = 0;
    if (w->n_entries == 0) {
        int rc = dd_history_write(h, b, err, errlen);
        dd_history_batch_clear(b);
        return rc;
    }
    /* Write in key order: RocksDB's memtable skiplist inserts a sorted run
     * far faster than random keys (each insert starts from the last one's
     * position), which is most of a flush's cost. */
    if (w->order_cap < w->n_entries) {
        uint32_t *o = realloc(w->order, w->cap_entries * sizeof *o);
        if (!o) {
            snprintf(err, errlen, "out of memory ordering %zu entries", w->n_entries);
            dd_history_batch_clear(b);
            return DD_ERR_NOMEM;
        }
        w->order = o;
        w->order_cap = w->cap_entries;
    }
    for (size_t i = 0; i < w->n_entries; i++) w->order[i] = (uint32_t)i;
    qsort_r(w->order, w->n_entries, sizeof *w->order, cmp_key, w);
    uint64_t total = 0, dups = 0;
    for (size_t i = 0; i < w->n_entries; i++) {
        const struct entry *e = &w->entries[w->order[i]];
        if (e->count > w->scratch_cap) {
            size_t ncap = w->scratch_cap ? w->scratch_cap : 64;
            while (ncap < e->count) ncap *= 2;
            uint64_t *s = realloc(w->scratch, ncap * sizeof *s);
            if (!s) {
                snprintf(err, errlen, "out of memory sorting %u plays", e->count);
                dd_history_batch_clear(b);
                return DD_ERR_NOMEM;
            }
            w->scratch = s;
            w->scratch_cap = ncap;
        }
        size_t n = 0;
        for (uint32_t p = e->head; p != NONE; p = w->play_prev[p])
            w->scratch[n++] = w->play_hash[p];
        size_t u = sort_unique(w->scratch, n);
        const char *key = w->arena + e->key_off;
        int rc = dd_history_batch_add(b, key, e->scene_len, key + e->scene_len, e->user_len,
                                      e->segment, w->scratch, u);
        if (rc != DD_OK) {
            snprintf(err, errlen, "cannot add to the write batch: %s", dd_strerror(rc));
            dd_history_batch_clear(b);
            return rc;
        }
        total += u;
        dups += n - u;
    }
    int rc = dd_history_write(h, b, err, errlen);
    dd_history_batch_clear(b);
    if (rc != DD_OK) return rc;
    w->st.hashes_written += total;
    w->st.duplicates += dups;
    w->st.flushes++;
    if (written) *written = total;
    dd_window_clear(w);
    return DD_OK;
}

size_t dd_window_plays(const dd_window *w)
{
    return w->n_plays;
}

size_t dd_window_entries(const dd_window *w)
{
    return w->n_entries;
}

uint64_t dd_window_bytes(const dd_window *w)
{
    return alloc_bytes(w) + (uint64_t)w->scratch_cap * sizeof(uint64_t) +
           (uint64_t)w->order_cap * sizeof(uint32_t);
}

void dd_window_get_stats(const dd_window *w, struct dd_window_stats *out)
{
    *out = w->st;
}
