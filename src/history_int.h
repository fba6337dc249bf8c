/* SPDX-License-Identifier: Apache-2.0
 *
 * history_int.h - the history store's state, shared by the files of the
 * history module alone (history.c: open, close, writes, forget, flush,
 * compact, stats; history_probe.c: the batched reads and the damage
 * scan). Nothing outside them includes it: history.h is the contract.
 *
 * Threads: the fields set at open are read-only after it; the counters
 * and flags are atomics; fold's state is fold.h's (its counters atomics).
 */
#ifndef DD_HISTORY_INT_H
#define DD_HISTORY_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <rocksdb/c.h>

#include "dd.h"
#include "fold.h"
#include "history.h"
#include "icache.h"

struct dd_history {
    rocksdb_t *db;
    rocksdb_options_t *opts; /* kept: owns the statistics object */
    rocksdb_column_family_handle_t *cf;
    rocksdb_readoptions_t *ropts;
    rocksdb_writeoptions_t *wopts;
    rocksdb_writeoptions_t *wopts_unlogged; /* no WAL: durable at the next flush */
    rocksdb_writeoptions_t *wopts_nosync;   /* WAL, no fsync: durable at the next WAL sync */
    rocksdb_flushoptions_t *fopts;
    rocksdb_compactoptions_t *copts;
    rocksdb_cache_t *cache;

    struct dd_history_clock clock;
    int64_t max_future_ms;
    uint32_t min_lookback_days; /* history.min_lookback_days: min_kept's floor */
    struct dd_fold fold;        /* the merge operator's and filter's state */

    _Atomic uint64_t writes;
    _Atomic uint64_t operands_written;

    /* Full disk (history.h, "Full disk"). */
    char *path;              /* history.path, for statvfs */
    uint64_t min_free_bytes; /* history.min_free_mb; 0 = no reserve */
    atomic_bool no_space;    /* the last write was refused or failed for lack of space */
    atomic_bool wal_failed;  /* a WAL append failed: refuse writes until restart */
    bool created;            /* this open created the store (no CURRENT file before) */
    /* history.day_scenes, parsed: views into day_buf */
    char *day_buf;
    size_t n_day;
    struct {
        const char *p;
        size_t len;
    } day[DD_DAY_SCENES_MAX];
    _Atomic uint64_t errors_no_space;
    _Atomic uint64_t errors_other;
    struct dd_fold_owner owner;     /* published through fold.owner once set */
    dd_icache *icache;              /* decoded closed filters; NULL = none */
    _Atomic uint64_t damaged_reads; /* probes refused for a damaged value */
    atomic_bool compact_cancelled;  /* dd_history_cancel_compact */
};

/* Now by the store's clock (history.h, struct dd_history_clock). */
static inline int64_t now_ms(const dd_history *h)
{
    return h->clock.now_ms ? h->clock.now_ms(h->clock.ud) : dd_now_ms();
}

#endif
