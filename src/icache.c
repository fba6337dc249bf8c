/* SPDX-License-Identifier: Apache-2.0
 *
 * icache.c - decoded closed-segment filters kept between calls (icache.h).
 */
#include "icache.h"

#include "dd.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define NSHARDS 16
#define MIN_BUCKETS 256

struct dd_icache_entry {
    XXH128_hash_t key;
    uint64_t range;
    uint32_t count;
    int refs;                            /* under the shard's lock */
    bool cached;                         /* in the table (else private: freed on release) */
    size_t bytes;                        /* what it counts against the budget */
    struct dd_icache_entry *chain;       /* the bucket's next */
    struct dd_icache_entry *prev, *next; /* LRU: head = most recent */
    struct dd_bloom_index ix;
    uint32_t mem[]; /* the index's memory */
};

struct shard {
    pthread_mutex_t mu;
    struct dd_icache_entry **table;
    size_t nbuckets, entries, bytes;
    struct dd_icache_entry *head, *tail;
};

struct dd_icache {
    size_t shard_max; /* budget per shard */
    struct shard sh[NSHARDS];
    _Atomic uint64_t hits, misses, evictions;
};

int dd_icache_new(dd_icache **out, size_t max_bytes)
{
    *out = NULL;
    dd_icache *c = calloc(1, sizeof *c);
    if (!c) return DD_ERR_NOMEM;
    c->shard_max = max_bytes / NSHARDS ? max_bytes / NSHARDS : 1;
    for (int i = 0; i < NSHARDS; i++) {
        struct shard *s = &c->sh[i];
        pthread_mutex_init(&s->mu, NULL);
        s->nbuckets = MIN_BUCKETS;
        s->table = calloc(s->nbuckets, sizeof *s->table);
        if (!s->table) {
            dd_icache_free(c);
            return DD_ERR_NOMEM;
        }
    }
    *out = c;
    return DD_OK;
}

void dd_icache_free(dd_icache *c)
{
    if (!c) return;
    for (int i = 0; i < NSHARDS; i++) {
        struct shard *s = &c->sh[i];
        for (struct dd_icache_entry *e = s->head, *n; e; e = n) {
            n = e->next;
            free(e);
        }
        free(s->table);
        pthread_mutex_destroy(&s->mu);
    }
    free(c);
}

static XXH128_hash_t key_of(const struct dd_bloom_view *v)
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    uint64_t head[3] = {v->range, v->count, v->rice_k};
    XXH3_128bits_update(&st, head, sizeof head);
    XXH3_128bits_update(&st, v->bits, v->nbits_bytes);
    return XXH3_128bits_digest(&st);
}

static size_t bucket_of(const struct shard *s, XXH128_hash_t k)
{
    return (size_t)(k.low64 % s->nbuckets);
}

static void lru_unlink(struct shard *s, struct dd_icache_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        s->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        s->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push(struct shard *s, struct dd_icache_entry *e)
{
    e->prev = NULL;
    e->next = s->head;
    if (s->head)
        s->head->prev = e;
    else
        s->tail = e;
    s->head = e;
}

static struct dd_icache_entry *find(struct shard *s, XXH128_hash_t k, const struct dd_bloom_view *v)
{
    for (struct dd_icache_entry *e = s->table[bucket_of(s, k)]; e; e = e->chain)
        if (XXH128_isEqual(e->key, k) && e->range == v->range && e->count == v->count) return e;
    return NULL;
}

static void table_remove(struct shard *s, struct dd_icache_entry *e)
{
    struct dd_icache_entry **pp = &s->table[bucket_of(s, e->key)];
    while (*pp != e) pp = &(*pp)->chain;
    *pp = e->chain;
}

/* Double the table when it averages more than one entry a bucket; on no
 * memory it stays (chains grow, nothing breaks). */
static void maybe_grow(struct shard *s)
{
    if (s->entries <= s->nbuckets) return;
    size_t nb = s->nbuckets * 2;
    struct dd_icache_entry **t = calloc(nb, sizeof *t);
    if (!t) return;
    for (size_t b = 0; b < s->nbuckets; b++)
        for (struct dd_icache_entry *e = s->table[b], *n; e; e = n) {
            n = e->chain;
            size_t i = (size_t)(e->key.low64 % nb);
            e->chain = t[i];
            t[i] = e;
        }
    free(s->table);
    s->table = t;
    s->nbuckets = nb;
}

/* Evict least recently used entries nobody holds until S fits MAX. */
static void evict(dd_icache *c, struct shard *s)
{
    for (struct dd_icache_entry *e = s->tail, *p; e && s->bytes > c->shard_max; e = p) {
        p = e->prev;
        if (e->refs) continue;
        lru_unlink(s, e);
        table_remove(s, e);
        s->entries--;
        s->bytes -= e->bytes;
        free(e);
        atomic_fetch_add_explicit(&c->evictions, 1, memory_order_relaxed);
    }
}

int dd_icache_get(dd_icache *c, const struct dd_bloom_view *v, struct dd_bloom_index *ix,
                  struct dd_icache_entry **ref)
{
    XXH128_hash_t k = key_of(v);
    struct shard *s = &c->sh[k.high64 % NSHARDS];
    pthread_mutex_lock(&s->mu);
    struct dd_icache_entry *e = find(s, k, v);
    if (e) {
        e->refs++;
        lru_unlink(s, e);
        lru_push(s, e);
        pthread_mutex_unlock(&s->mu);
        atomic_fetch_add_explicit(&c->hits, 1, memory_order_relaxed);
        *ix = e->ix;
        *ref = e;
        return DD_OK;
    }
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add_explicit(&c->misses, 1, memory_order_relaxed);

    size_t mb = dd_bloom_index_bytes(v);
    if (mb == 0) return DD_ERR_CORRUPT;
    e = malloc(sizeof *e + mb);
    if (!e) return DD_ERR_NOMEM;
    memset(e, 0, sizeof *e);
    if (dd_bloom_index_build(v, e->mem, &e->ix) != 0) {
        free(e);
        return DD_ERR_CORRUPT;
    }
    e->key = k;
    e->range = v->range;
    e->count = v->count;
    e->bytes = sizeof *e + mb;
    e->refs = 1;
    pthread_mutex_lock(&s->mu);
    struct dd_icache_entry *other = find(s, k, v);
    if (other) {
        /* Decoded by another call meanwhile: use that one. */
        other->refs++;
        pthread_mutex_unlock(&s->mu);
        free(e);
        *ix = other->ix;
        *ref = other;
        return DD_OK;
    }
    if (e->bytes <= c->shard_max) {
        e->cached = true;
        size_t b = bucket_of(s, k);
        e->chain = s->table[b];
        s->table[b] = e;
        lru_push(s, e);
        s->entries++;
        s->bytes += e->bytes;
        maybe_grow(s);
        evict(c, s);
    }
    pthread_mutex_unlock(&s->mu);
    *ix = e->ix;
    *ref = e;
    return DD_OK;
}

void dd_icache_release(dd_icache *c, struct dd_icache_entry *e)
{
    if (!e) return;
    if (!e->cached) {
        free(e);
        return;
    }
    struct shard *s = &c->sh[e->key.high64 % NSHARDS];
    pthread_mutex_lock(&s->mu);
    e->refs--;
    if (e->refs == 0 && s->bytes > c->shard_max) evict(c, s);
    pthread_mutex_unlock(&s->mu);
}

void dd_icache_get_stats(dd_icache *c, struct dd_icache_stats *out)
{
    memset(out, 0, sizeof *out);
    out->hits = atomic_load_explicit(&c->hits, memory_order_relaxed);
    out->misses = atomic_load_explicit(&c->misses, memory_order_relaxed);
    out->evictions = atomic_load_explicit(&c->evictions, memory_order_relaxed);
    for (int i = 0; i < NSHARDS; i++) {
        struct shard *s = &c->sh[i];
        pthread_mutex_lock(&s->mu);
        out->bytes += s->bytes;
        out->entries += s->entries;
        pthread_mutex_unlock(&s->mu);
    }
}
