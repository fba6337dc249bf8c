/* SPDX-License-Identifier: Apache-2.0
 *
 * icache.h - decoded filters kept between calls: the dd_bloom_index of a
 * closed segment's filter, keyed by the filter's bytes, so that a heavy
 * user's Filter calls stop decoding the same tens of thousands of
 * fingerprints every time. Knows nothing of RocksDB or users.
 *
 * DESIGN
 *
 * Key: XXH3-128 of the filter's header fields and its bit stream. A
 * closed segment's filter does not change until a compaction rewrites it
 * (late plays go to a separate part), so equal bytes are the same filter
 * and no invalidation is needed: a rewritten filter has another key and
 * the old entry ages out. Open segments' filters change with every write
 * and are not cached (callers decide; see history.c).
 * Bounded: at most max_bytes of index memory (entries' own size), least
 * recently used first out. Sixteen shards, each a mutex over a chained
 * hash table and an LRU list; a miss decodes outside the lock, so one
 * slow decode blocks no other call. Entries in use are referenced and
 * never freed under their user; eviction skips them.
 */
#ifndef DD_ICACHE_H
#define DD_ICACHE_H

#include "bloom.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dd_icache dd_icache;
struct dd_icache_entry;

/* A cache of at most MAX_BYTES (> 0). Returns 0 or DD_ERR_NOMEM. */
int dd_icache_new(dd_icache **out, size_t max_bytes);
/* Frees the cache; every entry must have been released. NULL is a no-op. */
void dd_icache_free(dd_icache *c);

/* The index of V (a view dd_bloom_index_bytes accepts), from the cache or
 * decoded now and kept: *IX is valid until dd_icache_release(C, *REF).
 * An index larger than the whole cache is decoded into a private entry
 * that release frees. Returns 0, DD_ERR_CORRUPT (V does not decode: not
 * kept) or DD_ERR_NOMEM. Thread-safe. */
int dd_icache_get(dd_icache *c, const struct dd_bloom_view *v, struct dd_bloom_index *ix,
                  struct dd_icache_entry **ref);
void dd_icache_release(dd_icache *c, struct dd_icache_entry *ref);

struct dd_icache_stats {
    uint64_t hits, misses, evictions;
    uint64_t bytes, entries; /* now */
};
void dd_icache_get_stats(dd_icache *c, struct dd_icache_stats *out);

#endif
