/* SPDX-License-Identifier: Apache-2.0
 *
 * rocksopt.c - the history store's RocksDB options and the reading of the
 * statistics they collect; see rocksopt.h.
 */
#include "rocksopt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rocksdb/c.h>

#include "dd.h"

/* Set before the rocksdb.* pass-through (which may override them): no ttl,
 * since every play touches the whole key range, so compactions already
 * carry operands down, and forcing the base level down daily rewrote the
 * whole bottom level each day (bench_aging); every file goes through the
 * compaction filter at least every 30 days (periodic compaction), a
 * backstop so that segments expire and are re-encoded in a store without
 * write traffic (under traffic compactions reach every file sooner; a
 * shorter period rewrote the whole store that often). RocksDB's info LOG is off (FATAL
 * only): Debian 12's librocksdb 7.8 is built with assertions, and a LOG
 * line after one that failed (a full disk) aborts the process; operators
 * who want the LOG set rocksdb.info_log_level and put it on another
 * filesystem with rocksdb.db_log_dir (README, "Full disk").
 * Not wal_compression: kZSTD is experimental in RocksDB 7.8, and with it
 * the million-play ingest test lost plays across a clean stop and reopen. */
#define BASE_OPTIONS "ttl=0;periodic_compaction_seconds=2592000;info_log_level=FATAL_LEVEL"

/* Apply the rocksdb.* pass-through list L to BASE into a new options object (*out). On a bad
 * option, find which key it is by trying each alone. */
static int apply_passthrough(rocksdb_options_t *base, const struct dd_config_list *l,
                             rocksdb_options_t **out, char *err, size_t errlen)
{
    size_t need = 1;
    for (size_t i = 0; i < l->len; i++) {
        /* RocksDB's option string parser accepts a rate limiter and drops
         * it, so an operator's limit would silently not apply. */
        if (!strcmp(l->items[i].key, "rate_limiter")) {
            dd_set_err(err, errlen,
                       "rocksdb.rate_limiter is accepted and ignored by RocksDB's "
                       "option parser: use history.write_mbps");
            return DD_ERR_INVALID;
        }
        need += strlen(l->items[i].key) + strlen(l->items[i].value) + 2;
    }
    char *s = malloc(need);
    if (!s) return DD_ERR_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < l->len; i++)
        o += (size_t)sprintf(s + o, "%s%s=%s", i ? ";" : "", l->items[i].key, l->items[i].value);
    s[o] = '\0';

    rocksdb_options_t *n = rocksdb_options_create();
    char *e = NULL;
    rocksdb_get_options_from_string(base, s, n, &e);
    free(s);
    if (!e) {
        *out = n;
        return 0;
    }
    rocksdb_options_destroy(n);
    for (size_t i = 0; i < l->len; i++) {
        const struct dd_config_kv *kv = &l->items[i];
        size_t len = strlen(kv->key) + strlen(kv->value) + 2;
        char *one = malloc(len);
        if (!one) break;
        snprintf(one, len, "%s=%s", kv->key, kv->value);
        rocksdb_options_t *t = rocksdb_options_create();
        char *e1 = NULL;
        rocksdb_get_options_from_string(base, one, t, &e1);
        rocksdb_options_destroy(t);
        free(one);
        if (e1) {
            dd_set_err(err, errlen, "rocksdb.%s: %s", kv->key, e1);
            rocksdb_free(e1);
            rocksdb_free(e);
            return DD_ERR_INVALID;
        }
    }
    dd_set_err(err, errlen, "rocksdb options: %s", e);
    rocksdb_free(e);
    return DD_ERR_INVALID;
}

int dd_rocksopt_new(rocksdb_options_t **out, rocksdb_cache_t **cache_out,
                    const struct dd_rocksopt_conf *conf, const struct dd_config_list *rocksdb,
                    rocksdb_mergeoperator_t *merge, rocksdb_compactionfilterfactory_t *filter,
                    char *err, size_t errlen)
{
    *out = NULL;
    *cache_out = NULL;
    rocksdb_options_t *base = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(base, 1);
    rocksdb_options_set_create_missing_column_families(base, 1);
    rocksdb_options_increase_parallelism(base, 2);
    rocksdb_options_set_level_compaction_dynamic_level_bytes(base, 1);
    rocksdb_options_set_max_successive_merges(base, conf->max_successive_merges);
    /* LZ4 above the bottom level, where fresh flushes hold small operands
     * whose blocks compress well (keys, 8-byte sequence/type trailers).
     * None at the bottom, which holds the folded filters: Golomb-coded
     * bits do not compress, so LZ4 there would only add a decompression to
     * every read. */
    rocksdb_options_set_compression(base, rocksdb_lz4_compression);
    rocksdb_options_set_bottommost_compression(base, rocksdb_no_compression);
    /* 16 MiB memtables (RocksDB: 64): ingest inserts each window as a
     * sorted run, and a skiplist not much larger than the run is walked
     * mostly in cache; the price is more, smaller L0 files. */
    rocksdb_options_set_write_buffer_size(base, 16u << 20);
    /* Compact L0 at 8 files (RocksDB: 4): half as many rewrites of the
     * level below, whose uncompressed filters are most of what a
     * compaction writes. A read may meet a few more L0 files; their
     * whole-key bloom filters are pinned in the cache. */
    rocksdb_options_set_level0_file_num_compaction_trigger(base, 8);
    /* An 8 MiB base level in 2 MiB files (RocksDB: 256 and 64): each flush
     * spans every user's keys, so L0 is compacted with the whole base
     * level; a base near L0's size, in files small enough that moving one
     * down rewrites a slice of the level below, not all of it (bench_aging). */
    rocksdb_options_set_max_bytes_for_level_base(base, 8u << 20);
    rocksdb_options_set_target_file_size_base(base, 2u << 20);
    rocksdb_options_set_keep_log_file_num(base, 5);
    rocksdb_options_set_max_log_file_size(base, 16u << 20);

    /* Options own these from here on (shared_ptr in c.cc). */
    rocksdb_options_set_merge_operator(base, merge);
    rocksdb_options_set_compaction_filter_factory(base, filter);

    /* Reads are whole-key MultiGets of 4-5 keys: a whole-key bloom filter
     * answers "no such segment" without touching data blocks, and keeps
     * users with no history cheap. No prefix extractor: nothing seeks. */
    uint64_t cache_bytes = conf->block_cache_mb << 20;
    rocksdb_cache_t *cache = rocksdb_cache_create_lru(cache_bytes ? (size_t)cache_bytes : 1);

    rocksdb_block_based_table_options_t *t = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_cache(t, cache);
    rocksdb_block_based_options_set_filter_policy(t, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_block_based_options_set_whole_key_filtering(t, 1);
    rocksdb_block_based_options_set_cache_index_and_filter_blocks(t, 1);
    rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(t, 1);
    /* 32 KiB blocks (RocksDB: 4): a user's live segments are adjacent keys,
     * so on a cache miss one block read holds the whole history of most
     * users, active ones included; larger blocks save few more reads and
     * cost more per read (bench_cold). */
    rocksdb_block_based_options_set_block_size(t, 32 * 1024);
    rocksdb_block_based_options_set_format_version(t, 5);
    rocksdb_options_set_block_based_table_factory(base, t);
    rocksdb_block_based_options_destroy(t); /* the factory copied them */

    rocksdb_options_t *tuned = rocksdb_options_create();
    char *e = NULL;
    rocksdb_get_options_from_string(base, BASE_OPTIONS, tuned, &e);
    rocksdb_options_destroy(base);
    if (e) {
        dd_set_err(err, errlen, "rocksdb built-in options: %s", e);
        rocksdb_free(e);
        rocksdb_options_destroy(tuned);
        rocksdb_cache_destroy(cache);
        return DD_ERR_INVALID;
    }
    rocksdb_options_t *opts = NULL;
    int rc = apply_passthrough(tuned, rocksdb, &opts, err, errlen);
    rocksdb_options_destroy(tuned);
    if (rc != 0) {
        if (rc == DD_ERR_NOMEM) dd_set_err(err, errlen, "out of memory");
        rocksdb_cache_destroy(cache);
        return rc;
    }
    rocksdb_options_enable_statistics(opts);
    if (conf->write_mbps) {
        /* Options keep the limiter (a shared_ptr in c.cc). */
        rocksdb_ratelimiter_t *rl =
            rocksdb_ratelimiter_create((int64_t)(conf->write_mbps * 1000000 / 8), 100 * 1000, 10);
        rocksdb_options_set_ratelimiter(opts, rl);
        rocksdb_ratelimiter_destroy(rl);
    }
    if (conf->compaction_low_cpu) {
        /* The default Env is the process's: every store in it shares its
         * thread pools, so this lowers all their compaction threads. */
        rocksdb_env_t *env = rocksdb_create_default_env();
        rocksdb_env_lower_thread_pool_cpu_priority(env);
        rocksdb_env_destroy(env);
    }
    *out = opts;
    *cache_out = cache;
    return 0;
}

uint64_t dd_rocksopt_ticker(const char *text, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = text; (p = strstr(p, name)) != NULL; p += nl) {
        if ((p == text || p[-1] == '\n') && strncmp(p + nl, " COUNT : ", 9) == 0)
            return strtoull(p + nl + 9, NULL, 10);
    }
    return 0;
}

uint64_t dd_rocksopt_histogram_sum(const char *text, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = text; (p = strstr(p, name)) != NULL; p += nl) {
        if ((p != text && p[-1] != '\n') || p[nl] != ' ') continue;
        const char *eol = strchr(p, '\n');
        const char *sum = strstr(p, " SUM : ");
        if (sum && (!eol || sum < eol)) return strtoull(sum + 7, NULL, 10);
    }
    return 0;
}
