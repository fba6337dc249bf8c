/* SPDX-License-Identifier: Apache-2.0
 *
 * rocksopt.h - the history store's RocksDB options: dedupd's tuning of
 * RocksDB for merge-operand writes and whole-key MultiGets, the built-in
 * option string, the operator's rocksdb.* pass-through on top of them,
 * the block cache, the write rate limit and the compaction threads'
 * priority; and the reading of the statistics text the options collect.
 * Knows nothing of keys, values or users (segment.h, fold.h, history.h).
 */
#ifndef DD_ROCKSOPT_H
#define DD_ROCKSOPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rocksdb/c.h>

struct dd_config_list;

/* The history settings that shape the options (history.h's struct
 * dd_history_conf documents each). */
struct dd_rocksopt_conf {
    uint32_t max_successive_merges; /* history.max_successive_merges */
    uint64_t block_cache_mb;        /* history.block_cache_mb */
    uint64_t write_mbps;            /* history.write_mbps; 0 = no limit */
    bool compaction_low_cpu;        /* history.compaction_low_cpu */
};

/* Build the options of the history store from CONF and the pass-through
 * list ROCKSDB (rocksdb.*, applied last, so it may override dedupd's
 * choices; never NULL). The options take MERGE and FILTER at once,
 * whatever the outcome: the caller keeps their state alive until the
 * options are destroyed. Statistics are enabled. With
 * history.compaction_low_cpu the process's default Env is changed, which
 * every store in the process shares.
 * Returns 0 with *OUT (caller destroys with rocksdb_options_destroy, after
 * closing the database) and *CACHE (the block cache the table options
 * point to; caller destroys with rocksdb_cache_destroy after the options);
 * or DD_ERR_INVALID (a bad or unsupported rocksdb.* key: err names it, as
 * "rocksdb.KEY: ...") or DD_ERR_NOMEM, with *OUT and *CACHE NULL. */
int dd_rocksopt_new(rocksdb_options_t **out, rocksdb_cache_t **cache,
                    const struct dd_rocksopt_conf *conf, const struct dd_config_list *rocksdb,
                    rocksdb_mergeoperator_t *merge, rocksdb_compactionfilterfactory_t *filter,
                    char *err, size_t errlen);

/* A ticker in TEXT (rocksdb_options_statistics_get_string's output, a line
 * "NAME COUNT : N"); 0 when absent. Cannot fail. */
uint64_t dd_rocksopt_ticker(const char *text, const char *name);

/* The SUM of histogram NAME in TEXT (a line "NAME P50 : x ... COUNT : n
 * SUM : N"); 0 when absent. Cannot fail. */
uint64_t dd_rocksopt_histogram_sum(const char *text, const char *name);

#endif
