/* SPDX-License-Identifier: Apache-2.0
 *
 * history.c - the play history store (history.h): open and close, write
 * batches, forget, flush, compact and stats. The batched reads and the
 * damage scan are history_probe.c's, the RocksDB options rocksopt.h's;
 * the state both files share is history_int.h's. Keys and segments are
 * segment.h's; what a value holds and how operands fold into it (merge
 * operator, compaction filter) is fold.h's.
 *
 * DESIGN
 *
 * Ownership: the options take the merge operator and the compaction
 * filter factory (made over h->fold) and the filter policy; block-based
 * table options are copied. None of them is destroyed here once set, and
 * h (with its fold state) is freed only after the database is closed.
 *
 * No per-user compaction: the merge operator cannot start one (it runs
 * inside a compaction or a Get), a manual CompactRange of one key range
 * still rewrites every L0 file and blocks, and RocksDB already bounds a
 * key's operands (a flush partial-merges them per L0 file, compactions
 * carry them down to the base). max_successive_merges stays off by default: it adds a
 * memtable lookup to every write.
 */
#include "history.h"
#include "history_int.h"
#include "icache.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "be.h"
#include "buf.h"
#include "dd.h"
#include "fold.h"
#include "log.h"
#include "rocksopt.h"
#include "segment.h"
#include "sys.h"

#define MODULE "history"

/* RocksDB's BottommostLevelCompaction::kForce: compaction filter and
 * re-encoding must see the bottom level too. */
#define COMPACT_BOTTOMMOST_FORCE 2

struct dd_history_batch {
    rocksdb_writebatch_t *wb;
    struct dd_buf key; /* scratch for one key */
    struct dd_buf val; /* scratch for one operand */
    size_t operands;
    size_t bytes;
    bool unlogged; /* write without the WAL */
    bool nosync;   /* through the WAL, never fsync'd on the write */
};

/* ---- open / close --------------------------------------------------------- */

/* Walk LIST's comma separated scenes (blanks around each trimmed): FN is
 * called with each, in order. Returns 0 or DD_ERR_INVALID (message in
 * err) for an empty entry, one longer than DD_SCENE_MAX, or more than
 * DD_DAY_SCENES_MAX of them. */
static int day_scenes_walk(const char *list, void (*fn)(void *ud, const char *p, size_t len),
                           void *ud, char *err, size_t errlen)
{
    if (!list) return 0;
    const char *q = list;
    while (*q == ' ' || *q == '\t') q++;
    if (!*q) return 0;
    size_t n = 0;
    for (;;) {
        const char *end = strchr(q, ',');
        if (!end) end = q + strlen(q);
        const char *a = q, *b = end;
        while (a < b && (*a == ' ' || *a == '\t')) a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
        if (a == b) {
            dd_set_err(err, errlen, "history.day_scenes: empty scene in \"%s\"", list);
            return DD_ERR_INVALID;
        }
        if ((size_t)(b - a) > DD_SCENE_MAX) {
            dd_set_err(err, errlen, "history.day_scenes: a scene is longer than %d bytes",
                       DD_SCENE_MAX);
            return DD_ERR_INVALID;
        }
        if (++n > DD_DAY_SCENES_MAX) {
            dd_set_err(err, errlen, "history.day_scenes: more than %d scenes", DD_DAY_SCENES_MAX);
            return DD_ERR_INVALID;
        }
        if (fn) fn(ud, a, (size_t)(b - a));
        if (!*end) return 0;
        q = end + 1;
    }
}

int dd_history_check_day_scenes(const char *list, char *err, size_t errlen)
{
    return day_scenes_walk(list, NULL, NULL, err, errlen);
}

static void day_scene_add(void *ud, const char *p, size_t len)
{
    dd_history *h = ud;
    h->day[h->n_day].p = p;
    h->day[h->n_day].len = len;
    h->n_day++;
}

bool dd_history_day_scene(const dd_history *h, const char *scene, size_t scene_len)
{
    for (size_t i = 0; i < h->n_day; i++)
        if (h->day[i].len == scene_len && memcmp(h->day[i].p, scene, scene_len) == 0) return true;
    return false;
}

int dd_history_open(dd_history **out, const struct dd_history_conf *conf,
                    const struct dd_config_list *rocksdb, const struct dd_history_clock *clock,
                    char *err, size_t errlen)
{
    static const struct dd_config_list no_options;
    *out = NULL;
    if (!rocksdb) rocksdb = &no_options;
    const char *bad = NULL;
    if (conf->segment_days == 0)
        bad = "history.segment_days";
    else if (conf->retention_days == 0)
        bad = "history.retention_days";
    else if (!(conf->fp_rate > 0 && conf->fp_rate < 1))
        bad = "history.fp_rate";
    else if (conf->max_future_ms < 0)
        bad = "history.max_future_ms";
    else if (!conf->path || !conf->path[0])
        bad = "history.path";
    if (bad) {
        dd_set_err(err, errlen, "%s: invalid value", bad);
        return DD_ERR_INVALID;
    }
    if (dd_history_check_day_scenes(conf->day_scenes, err, errlen) != 0) return DD_ERR_INVALID;

    dd_history *h = calloc(1, sizeof *h);
    if (!h) {
        dd_set_err(err, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    if (clock) h->clock = *clock;
    h->max_future_ms = conf->max_future_ms;
    /* A floor past the retention keeps every play removed: the retention. */
    h->min_lookback_days = conf->min_lookback_days < conf->retention_days ? conf->min_lookback_days
                                                                          : conf->retention_days;
    h->min_free_bytes = conf->min_free_mb > UINT64_MAX >> 20 ? UINT64_MAX : conf->min_free_mb << 20;
    if (!(h->path = strdup(conf->path))) {
        free(h);
        dd_set_err(err, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    if (conf->day_scenes && !(h->day_buf = strdup(conf->day_scenes))) {
        free(h->path);
        free(h);
        dd_set_err(err, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    (void)day_scenes_walk(h->day_buf, day_scene_add, h, NULL, 0); /* checked above */
    struct dd_segments g = {conf->segment_days, conf->retention_days};
    dd_fold_init(&h->fold, &g, conf->fp_rate, h->clock.now_ms, h->clock.ud);
    h->fold.coarse = !conf->exact_days;

    if (conf->index_cache_mb &&
        dd_icache_new(&h->icache, (size_t)(conf->index_cache_mb << 20)) != DD_OK) {
        dd_set_err(err, errlen, "out of memory for the index cache");
        dd_history_close(h);
        return DD_ERR_NOMEM;
    }
    int rc = DD_ERR_IO;
    struct dd_rocksopt_conf oc = {conf->max_successive_merges, conf->block_cache_mb,
                                  conf->write_mbps, conf->compaction_low_cpu};
    rocksdb_options_t *opts = NULL;
    rc = dd_rocksopt_new(&opts, &h->cache, &oc, rocksdb, dd_fold_merge_operator(&h->fold),
                         dd_fold_filter_factory(&h->fold), err, errlen);
    if (rc != 0) goto fail;
    h->opts = opts;
    char *e = NULL;

    const char *cf_names[1] = {"default"};
    const rocksdb_options_t *cf_opts[1] = {opts};
    rocksdb_column_family_handle_t *cfs[1] = {NULL};
    {
        /* Every RocksDB database has a CURRENT file; none: this open creates it. */
        size_t n = strlen(conf->path) + sizeof "/CURRENT";
        char *current = malloc(n);
        if (!current) {
            rc = DD_ERR_NOMEM;
            dd_set_err(err, errlen, "out of memory");
            goto fail;
        }
        snprintf(current, n, "%s/CURRENT", conf->path);
        h->created = access(current, F_OK) != 0 && errno == ENOENT;
        free(current);
    }
    /* Checked before RocksDB sees the path: its open creates the
     * directory (and its LOG) even without create_if_missing. */
    if (h->created && conf->must_exist) {
        rc = dd_fail(DD_ERR_NOTFOUND, err, errlen, "%s: no store there (no CURRENT file)",
                     conf->path);
        goto fail;
    }
    rocksdb_options_set_create_if_missing(opts, !conf->must_exist);
    if (!conf->must_exist) {
        char e[300];
        if ((rc = dd_sys_mkdir_parents(conf->path, e, sizeof e)) != DD_OK) {
            dd_set_err(err, errlen, "%s: %s", conf->path, e);
            goto fail;
        }
    }
    h->db = rocksdb_open_column_families(opts, conf->path, 1, cf_names, cf_opts, cfs, &e);
    if (e) {
        dd_set_err(err, errlen, "%s: %s", conf->path, e);
        rocksdb_free(e);
        h->db = NULL;
        rc = DD_ERR_IO;
        goto fail;
    }
    h->cf = cfs[0];

    h->ropts = rocksdb_readoptions_create();
    h->wopts = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(h->wopts, conf->sync ? 1 : 0);
    h->wopts_unlogged = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(h->wopts_unlogged, 1);
    h->wopts_nosync = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(h->wopts_nosync, 0);
    h->fopts = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(h->fopts, 1);
    h->copts = rocksdb_compactoptions_create();
    rocksdb_compactoptions_set_bottommost_level_compaction(h->copts, COMPACT_BOTTOMMOST_FORCE);
    rocksdb_compactoptions_set_exclusive_manual_compaction(h->copts, 0);
    *out = h;
    return 0;

fail:
    dd_history_close(h);
    return rc;
}

void dd_history_close(dd_history *h)
{
    if (!h) return;
    if (atomic_load(&h->wal_failed)) {
        /* Syncing a WAL writer that failed aborts inside RocksDB 7.8; only
         * unlogged plays are lost, which their writer replays (ingest). */
        dd_error(MODULE, "msg=\"closing without a final flush: the write-ahead log failed\"");
    } else if (h->db && h->fopts) {
        /* A clean stop leaves nothing to the WAL: sync it, then write the
         * memtables to SST files, so a restart needs no replay and does not
         * depend on the WAL's tail (rocksdb_close alone does neither while
         * the WAL is on). Failures are logged; the WAL still holds the data. */
        char *e = NULL;
        rocksdb_flush_wal(h->db, 1, &e);
        if (!e) rocksdb_flush(h->db, h->fopts, &e);
        if (e) {
            dd_error("history", "msg=\"flush on close failed; the WAL has the data\" error=\"%s\"",
                     e);
            rocksdb_free(e);
        }
    }
    if (h->cf) rocksdb_column_family_handle_destroy(h->cf);
    if (h->db) rocksdb_close(h->db);
    /* After the db: the options hold the merge operator and filter factory
     * whose state is h, and the statistics. */
    if (h->opts) rocksdb_options_destroy(h->opts);
    if (h->ropts) rocksdb_readoptions_destroy(h->ropts);
    if (h->wopts) rocksdb_writeoptions_destroy(h->wopts);
    if (h->wopts_unlogged) rocksdb_writeoptions_destroy(h->wopts_unlogged);
    if (h->wopts_nosync) rocksdb_writeoptions_destroy(h->wopts_nosync);
    if (h->fopts) rocksdb_flushoptions_destroy(h->fopts);
    if (h->copts) rocksdb_compactoptions_destroy(h->copts);
    if (h->cache) rocksdb_cache_destroy(h->cache);
    dd_icache_free(h->icache);
    free(h->path);
    free(h->day_buf);
    free(h);
}

/* ---- time ----------------------------------------------------------------- */

int64_t dd_history_max_future_ms(const dd_history *h)
{
    return h->max_future_ms;
}

uint32_t dd_history_min_lookback_days(const dd_history *h)
{
    return h->min_lookback_days;
}

uint32_t dd_history_retention_days(const dd_history *h)
{
    return h->fold.seg.retention_days;
}

int64_t dd_history_now_ms(const dd_history *h)
{
    return now_ms(h);
}

enum dd_history_place dd_history_place(const dd_history *h, const char *scene, size_t scene_len,
                                       int64_t at_ms, uint32_t *segment)
{
    int64_t now = now_ms(h);
    if (at_ms > now + h->max_future_ms) return DD_HISTORY_PLACE_FUTURE;
    int64_t day = dd_day_of_ms(at_ms);
    int64_t tday = dd_day_of_ms(now);
    if (day < 0 || day < dd_segment_oldest_live_day(&h->fold.seg, tday))
        return DD_HISTORY_PLACE_EXPIRED;
    /* Every scene's plays are dated within their segment_days segment
     * (history.day_scenes no longer writes day segments: they are read
     * until they expire). */
    (void)scene;
    (void)scene_len;
    *segment = dd_segment_of_day(&h->fold.seg, day);
    return DD_HISTORY_PLACE_OK;
}

/* ---- writability ---------------------------------------------------------- */

/* Short: /readyz shows it. RocksDB 7.8 cannot reuse a WAL writer that
 * failed (history.h, "Full disk"). */
#define WAL_FAILED_MSG "no space left on device: the WAL failed; restart dedupd to write again"

/* Free bytes on history.path's filesystem; UINT64_MAX when unknown (then
 * nothing is refused for it). The filesystem's size goes into *SIZE when
 * SIZE is not NULL (UINT64_MAX when unknown). */
static uint64_t free_bytes(const dd_history *h, uint64_t *size)
{
    return dd_sys_free_bytes(h->path, size);
}

/* Whether a write must be refused now (the WAL failed, or less than
 * history.min_free_mb free); if so the reason goes into WHY. No counting. */
static bool refused(dd_history *h, char *why, size_t whylen)
{
    if (atomic_load(&h->wal_failed)) {
        dd_set_err(why, whylen, "%s", WAL_FAILED_MSG);
        return true;
    }
    if (h->min_free_bytes == 0) return false;
    uint64_t f = free_bytes(h, NULL);
    if (f >= h->min_free_bytes) return false;
    dd_set_err(why, whylen,
               "no space left on device (%" PRIu64
               " MiB free under %s, history.min_free_mb=%" PRIu64 ")",
               f >> 20, h->path, h->min_free_bytes >> 20);
    return true;
}

/* Before a write or flush: 0, or DD_ERR_IO (counted, message in err). */
static int check_writable(dd_history *h, char *err, size_t errlen)
{
    if (!refused(h, err, errlen)) return DD_OK;
    atomic_store(&h->no_space, true);
    atomic_fetch_add_explicit(&h->errors_no_space, 1, memory_order_relaxed);
    return DD_ERR_IO;
}

/* RocksDB failed WHAT with E (freed by the caller). LOGGED: the write went
 * through the WAL. Counts it, marks the store short of space if it was
 * ENOSPC (and the WAL failed if the error names a WAL file, *.log), and
 * returns DD_ERR_IO with a message in err. */
static int write_failed(dd_history *h, const char *what, const char *e, bool logged, char *err,
                        size_t errlen)
{
    if (!strstr(e, "No space left on device")) {
        atomic_fetch_add_explicit(&h->errors_other, 1, memory_order_relaxed);
        dd_set_err(err, errlen, "%s: %s", what, e);
        return DD_ERR_IO;
    }
    atomic_store(&h->no_space, true);
    atomic_fetch_add_explicit(&h->errors_no_space, 1, memory_order_relaxed);
    if (logged && strstr(e, ".log: ") && !atomic_exchange(&h->wal_failed, true))
        dd_error(MODULE,
                 "msg=\"write-ahead log append failed for lack of space; writes are "
                 "refused until restart\" error=\"%s\"",
                 e);
    dd_set_err(err, errlen, "no space left on device (%s: %s)", what, e);
    return DD_ERR_IO;
}

/* A write or flush succeeded: the store is writable (again). */
static void note_written(dd_history *h)
{
    if (atomic_load_explicit(&h->no_space, memory_order_relaxed) &&
        atomic_exchange(&h->no_space, false))
        dd_info(MODULE, "msg=\"store writable again\"");
}

bool dd_history_writable(dd_history *h, char *why, size_t whylen)
{
    if (refused(h, why, whylen)) return false;
    if (!atomic_load(&h->no_space)) return true;
    /* Refused or failed for lack of space before, and there is room now:
     * RocksDB may still be stopped by its background error until its
     * SstFileManager resumes it. An empty unlogged write touches neither
     * the WAL nor the data, but RocksDB refuses it while stopped. */
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    char *e = NULL;
    rocksdb_write(h->db, h->wopts_unlogged, wb, &e);
    rocksdb_writebatch_destroy(wb);
    if (e) {
        dd_set_err(why, whylen, "no space left on device (not resumed yet: %s)", e);
        rocksdb_free(e);
        return false;
    }
    note_written(h);
    return true;
}

/* ---- batches -------------------------------------------------------------- */

dd_history_batch *dd_history_batch_new(void)
{
    dd_history_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->wb = rocksdb_writebatch_create();
    if (!b->wb || dd_buf_reserve(&b->key, DD_KEY_MAX) != 0) {
        dd_history_batch_free(b);
        return NULL;
    }
    return b;
}

void dd_history_batch_free(dd_history_batch *b)
{
    if (!b) return;
    if (b->wb) rocksdb_writebatch_destroy(b->wb);
    dd_buf_free(&b->key);
    dd_buf_free(&b->val);
    free(b);
}

void dd_history_batch_clear(dd_history_batch *b)
{
    rocksdb_writebatch_clear(b->wb);
    b->operands = 0;
    b->bytes = 0;
}

uint64_t dd_history_dated(uint64_t h, int64_t at_ms)
{
    int64_t day = dd_day_of_ms(at_ms);
    return dd_bloom_dated(h, day < 0 ? 0 : day > UINT32_MAX ? UINT32_MAX : (uint32_t)day);
}

int dd_history_batch_add(dd_history_batch *b, const char *scene, size_t scene_len, const char *user,
                         size_t user_len, uint32_t segment, const uint64_t *hashes, size_t n)
{
    if (scene_len > DD_SCENE_MAX || user_len > DD_USER_MAX || n > UINT32_MAX) return DD_ERR_INVALID;
    if (n == 0) return 0;
    size_t klen = dd_key_prefix(b->key.data, scene, scene_len, user, user_len);
    dd_key_put_segment(b->key.data + klen, segment);
    klen += 4;
    /* The operand is a fingerprint list when small, else a full-range
     * filter (fold.h, "Operand"). */
    b->val.len = 0;
    if (dd_fold_encode_operand(&b->val, hashes, n) != 0) return DD_ERR_NOMEM;
    rocksdb_writebatch_merge(b->wb, (const char *)b->key.data, klen, (const char *)b->val.data,
                             b->val.len);
    b->operands++;
    b->bytes += klen + b->val.len;
    return 0;
}

/* The deleted range of (SCENE, USER): [prefix|00000000, prefix|ffffffff|00),
 * every segment of this user and nothing else, since the prefix carries
 * the user's length. LO and HI have room for DD_KEY_MAX + 1 bytes; returns
 * the length of LO (HI's is one more). */
static size_t forget_range(uint8_t *lo, uint8_t *hi, const char *scene, size_t scene_len,
                           const char *user, size_t user_len)
{
    size_t plen = dd_key_prefix(lo, scene, scene_len, user, user_len);
    dd_key_put_segment(lo + plen, 0);
    memcpy(hi, lo, plen);
    dd_key_put_segment(hi + plen, UINT32_MAX);
    hi[plen + 4] = 0;
    return plen + 4;
}

int dd_history_batch_forget(dd_history_batch *b, const char *scene, size_t scene_len,
                            const char *user, size_t user_len)
{
    if (scene_len > DD_SCENE_MAX || user_len > DD_USER_MAX || user_len == 0) return DD_ERR_INVALID;
    if (dd_buf_reserve(&b->val, DD_KEY_MAX + 1) != 0) return DD_ERR_NOMEM;
    size_t n = forget_range(b->key.data, b->val.data, scene, scene_len, user, user_len);
    rocksdb_writebatch_delete_range(b->wb, (const char *)b->key.data, n, (const char *)b->val.data,
                                    n + 1);
    b->bytes += 2 * n + 1;
    return 0;
}

/* Offsets' keys: 00 00 00 | 'K' | topic | 00 | u32 BE partition. As a
 * history key it would be scene "" and user "", with a length (at least 10)
 * that no segment key of that user has (7). */
#define OFFSET_TAG 'K'
static size_t offset_key(uint8_t *k, const char *topic, size_t topic_len, int32_t partition)
{
    k[0] = k[1] = k[2] = 0;
    k[3] = OFFSET_TAG;
    memcpy(k + 4, topic, topic_len);
    k[4 + topic_len] = 0;
    dd_key_put_segment(k + 5 + topic_len, (uint32_t)partition);
    return 9 + topic_len;
}

int dd_history_batch_put_offset(dd_history_batch *b, const char *topic, int32_t partition,
                                int64_t next)
{
    size_t tl = topic ? strlen(topic) : 0;
    if (tl == 0 || tl > DD_TOPIC_MAX || partition < 0 || next < 0) return DD_ERR_INVALID;
    size_t n = offset_key(b->key.data, topic, tl, partition);
    uint8_t v[8];
    dd_be64_store(v, (uint64_t)next); /* be.h */
    rocksdb_writebatch_put(b->wb, (const char *)b->key.data, n, (const char *)v, sizeof v);
    b->bytes += n + sizeof v;
    return 0;
}

int dd_history_get_offset(dd_history *h, const char *topic, int32_t partition, int64_t *next,
                          char *err, size_t errlen)
{
    size_t tl = topic ? strlen(topic) : 0;
    if (tl == 0 || tl > DD_TOPIC_MAX || partition < 0) {
        dd_set_err(err, errlen, "bad topic or partition");
        return DD_ERR_INVALID;
    }
    uint8_t k[9 + DD_TOPIC_MAX];
    size_t n = offset_key(k, topic, tl, partition);
    char *e = NULL;
    size_t vlen = 0;
    char *v = rocksdb_get_cf(h->db, h->ropts, h->cf, (const char *)k, n, &vlen, &e);
    if (e) {
        dd_set_err(err, errlen, "read: %s", e);
        rocksdb_free(e);
        return DD_ERR_IO;
    }
    if (!v) return DD_ERR_NOTFOUND;
    uint64_t x = 0;
    int rc = DD_ERR_CORRUPT;
    if (vlen == 8) {
        x = dd_be64_load((const uint8_t *)v);
        if (x <= INT64_MAX) {
            *next = (int64_t)x;
            rc = 0;
        }
    }
    rocksdb_free(v);
    if (rc != 0) {
        atomic_fetch_add_explicit(&h->fold.corrupt_values, 1, memory_order_relaxed);
        dd_set_err(err, errlen, "stored offset of %s/%" PRId32 " is corrupt (%zu bytes)", topic,
                   partition, vlen);
    }
    return rc;
}

void dd_history_set_owner(dd_history *h, bool (*owns)(void *ud, const char *user, size_t len),
                          void *ud)
{
    if (!owns) {
        atomic_store_explicit(&h->fold.owner, NULL, memory_order_release);
        return;
    }
    /* Set once per store (history.h): the slot is written before it is
     * published and never while published. */
    h->owner.owns = owns;
    h->owner.ud = ud;
    atomic_store_explicit(&h->fold.owner, &h->owner, memory_order_release);
}

/* The holds key: 00 00 00 | 'M', outside every segment key's layout (too
 * short) and apart from the offsets' ('K'). */
static const char holds_key[4] = {0, 0, 0, 'M'};

int dd_history_get_holds(dd_history *h, uint8_t *buf, size_t cap, size_t *len, char *err,
                         size_t errlen)
{
    char *e = NULL;
    size_t vlen = 0;
    char *v = rocksdb_get_cf(h->db, h->ropts, h->cf, holds_key, sizeof holds_key, &vlen, &e);
    if (e) {
        dd_set_err(err, errlen, "read: %s", e);
        rocksdb_free(e);
        return DD_ERR_IO;
    }
    if (!v) return DD_ERR_NOTFOUND;
    int rc = DD_ERR_CORRUPT;
    if (vlen <= cap) {
        if (vlen) memcpy(buf, v, vlen);
        *len = vlen;
        rc = 0;
    } else {
        dd_set_err(err, errlen, "the stored ownership is corrupt (%zu bytes)", vlen);
    }
    rocksdb_free(v);
    return rc;
}

int dd_history_put_holds(dd_history *h, const uint8_t *v, size_t len, char *err, size_t errlen)
{
    if (check_writable(h, err, errlen) != DD_OK) return DD_ERR_IO;
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(wo, 1);
    char *e = NULL;
    rocksdb_put_cf(h->db, wo, h->cf, holds_key, sizeof holds_key, (const char *)v, len, &e);
    rocksdb_writeoptions_destroy(wo);
    if (e) {
        dd_set_err(err, errlen, "write: %s", e);
        rocksdb_free(e);
        return DD_ERR_IO;
    }
    return 0;
}

void dd_history_batch_set_unlogged(dd_history_batch *b, bool unlogged)
{
    b->unlogged = unlogged;
}

void dd_history_batch_set_nosync(dd_history_batch *b, bool nosync)
{
    b->nosync = nosync;
}

size_t dd_history_batch_operands(const dd_history_batch *b)
{
    return b->operands;
}

size_t dd_history_batch_bytes(const dd_history_batch *b)
{
    return b->bytes;
}

int dd_history_write(dd_history *h, dd_history_batch *b, char *err, size_t errlen)
{
    if (rocksdb_writebatch_count(b->wb) == 0) return 0;
    if (check_writable(h, err, errlen) != DD_OK) return DD_ERR_IO;
    char *e = NULL;
    rocksdb_write(h->db,
                  b->unlogged ? h->wopts_unlogged
                  : b->nosync ? h->wopts_nosync
                              : h->wopts,
                  b->wb, &e);
    if (e) {
        int rc = write_failed(h, "write", e, !b->unlogged, err, errlen);
        rocksdb_free(e);
        return rc;
    }
    note_written(h);
    atomic_fetch_add_explicit(&h->writes, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->operands_written, b->operands, memory_order_relaxed);
    return 0;
}

/* ---- forget, flush, compact ----------------------------------------------- */

int dd_history_forget(dd_history *h, const char *scene, size_t scene_len, const char *user,
                      size_t user_len, char *err, size_t errlen)
{
    if (scene_len > DD_SCENE_MAX || user_len > DD_USER_MAX || user_len == 0) {
        dd_set_err(err, errlen, "scene or user id too long, or user id empty");
        return DD_ERR_INVALID;
    }
    size_t klen = 1 + scene_len + 2 + user_len + 5;
    uint8_t *b = malloc(2 * klen);
    if (!b) {
        dd_set_err(err, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    uint8_t *lo = b, *hi = b + klen;
    size_t plen = forget_range(lo, hi, scene, scene_len, user, user_len) - 4;

    if (check_writable(h, err, errlen) != DD_OK) {
        free(b);
        return DD_ERR_IO;
    }
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_writebatch_delete_range(wb, (const char *)lo, plen + 4, (const char *)hi, plen + 5);
    char *e = NULL;
    rocksdb_write(h->db, h->wopts, wb, &e);
    rocksdb_writebatch_destroy(wb);
    free(b);
    if (e) {
        int rc = write_failed(h, "forget", e, true, err, errlen);
        rocksdb_free(e);
        return rc;
    }
    note_written(h);
    return 0;
}

int dd_history_checkpoint(dd_history *h, const char *dir, char *err, size_t errlen)
{
    char *e = NULL;
    rocksdb_checkpoint_t *cp = rocksdb_checkpoint_object_create(h->db, &e);
    if (cp) rocksdb_checkpoint_create(cp, dir, 0 /* always flush first */, &e);
    if (cp) rocksdb_checkpoint_object_destroy(cp);
    if (e) {
        dd_set_err(err, errlen, "checkpoint into %s: %s", dir, e);
        rocksdb_free(e);
        return DD_ERR_IO;
    }
    return 0;
}

const char *dd_history_path(const dd_history *h)
{
    return h->path;
}

int dd_history_flush(dd_history *h, char *err, size_t errlen)
{
    if (check_writable(h, err, errlen) != DD_OK) return DD_ERR_IO;
    char *e = NULL;
    rocksdb_flush(h->db, h->fopts, &e);
    if (e) {
        int rc = write_failed(h, "flush", e, false, err, errlen);
        rocksdb_free(e);
        return rc;
    }
    note_written(h);
    return 0;
}

int dd_history_sync_wal(dd_history *h, char *err, size_t errlen)
{
    /* Refused once the WAL failed: syncing a failed WAL writer aborts
     * inside RocksDB 7.8 (see dd_history_close). */
    if (check_writable(h, err, errlen) != DD_OK) return DD_ERR_IO;
    char *e = NULL;
    rocksdb_flush_wal(h->db, 1, &e);
    if (e) {
        int rc = write_failed(h, "WAL sync", e, true, err, errlen);
        rocksdb_free(e);
        return rc;
    }
    note_written(h);
    return 0;
}

static uint64_t background_errors(dd_history *h)
{
    uint64_t v = 0;
    if (rocksdb_property_int(h->db, "rocksdb.background-errors", &v) != 0) v = 0;
    return v;
}

/* dd_history_cancel_compact was called (message in err). */
static bool compact_cancelled(dd_history *h, char *err, size_t errlen)
{
    if (!atomic_load(&h->compact_cancelled)) return false;
    dd_set_err(err, errlen, "compaction cancelled: the store is closing");
    return true;
}

int dd_history_compact(dd_history *h, char *err, size_t errlen)
{
    /* The C API's compact_range reports no status: a failed compaction
     * shows as a new background error. */
    uint64_t bg = background_errors(h);
    for (int pass = 0; pass < 2; pass++) {
        if (compact_cancelled(h, err, errlen)) return DD_ERR_STATE;
        uint64_t dead = atomic_load_explicit(&h->fold.merged_dead, memory_order_relaxed);
        uint64_t foreign = atomic_load_explicit(&h->fold.segments_foreign, memory_order_relaxed);
        rocksdb_compact_range_opt(h->db, h->copts, NULL, 0, NULL, 0);
        if (compact_cancelled(h, err, errlen)) return DD_ERR_STATE;
        if (background_errors(h) != bg) {
            dd_set_err(err, errlen, "compaction failed (see the RocksDB LOG)");
            return DD_ERR_IO;
        }
        /* Operands of a dead (or foreign) segment fold into an empty value
         * during the pass; the compaction filter sees that value only in
         * the next one. */
        if (atomic_load_explicit(&h->fold.merged_dead, memory_order_relaxed) == dead &&
            atomic_load_explicit(&h->fold.segments_foreign, memory_order_relaxed) == foreign)
            break;
    }
    return 0;
}

void dd_history_cancel_compact(dd_history *h)
{
    atomic_store(&h->compact_cancelled, true);
    rocksdb_disable_manual_compaction(h->db);
}

/* ---- stats ---------------------------------------------------------------- */

int dd_history_property_int(dd_history *h, const char *name, uint64_t *out)
{
    return rocksdb_property_int(h->db, name, out) == 0 ? 0 : DD_ERR_NOTFOUND;
}

void dd_history_get_stats(dd_history *h, struct dd_history_stats *out)
{
    memset(out, 0, sizeof *out);
    out->corrupt_values = atomic_load_explicit(&h->fold.corrupt_values, memory_order_relaxed);
    out->damaged_reads = atomic_load_explicit(&h->damaged_reads, memory_order_relaxed);
    out->damaged_merges = atomic_load_explicit(&h->fold.damaged_merges, memory_order_relaxed);
    out->segments_expired = atomic_load_explicit(&h->fold.segments_expired, memory_order_relaxed);
    out->segments_reduced = atomic_load_explicit(&h->fold.segments_reduced, memory_order_relaxed);
    out->segments_foreign = atomic_load_explicit(&h->fold.segments_foreign, memory_order_relaxed);
    if (h->icache) {
        struct dd_icache_stats is;
        dd_icache_get_stats(h->icache, &is);
        out->index_cache_hits = is.hits;
        out->index_cache_misses = is.misses;
        out->index_cache_bytes = is.bytes;
    }
    out->merges = atomic_load_explicit(&h->fold.merges, memory_order_relaxed);
    out->writes = atomic_load_explicit(&h->writes, memory_order_relaxed);
    out->operands_written = atomic_load_explicit(&h->operands_written, memory_order_relaxed);
    uint64_t v;
    if (rocksdb_property_int(h->db, "rocksdb.live-sst-files-size", &v) == 0)
        out->live_sst_bytes = v;
    if (rocksdb_property_int(h->db, "rocksdb.estimate-pending-compaction-bytes", &v) == 0)
        out->pending_compaction_bytes = v;
    out->free_bytes = free_bytes(h, &out->fs_size_bytes);
    out->write_errors_no_space = atomic_load_explicit(&h->errors_no_space, memory_order_relaxed);
    out->write_errors_other = atomic_load_explicit(&h->errors_other, memory_order_relaxed);
    out->wal_failed = atomic_load(&h->wal_failed);
    out->writable = !out->wal_failed && !atomic_load(&h->no_space);
    char *s = rocksdb_options_statistics_get_string(h->opts);
    if (s) {
        /* What the store wrote to disk: WAL, flushes and compactions. */
        out->wal_bytes = dd_rocksopt_ticker(s, "rocksdb.wal.bytes");
        out->wal_syncs = dd_rocksopt_ticker(s, "rocksdb.wal.synced");
        out->flush_bytes = dd_rocksopt_ticker(s, "rocksdb.flush.write.bytes");
        out->compaction_bytes = dd_rocksopt_ticker(s, "rocksdb.compact.write.bytes");
        out->compaction_cpu_micros =
            dd_rocksopt_histogram_sum(s, "rocksdb.compaction.times.cpu_micros");
        out->bytes_written = out->wal_bytes + out->flush_bytes + out->compaction_bytes;
        out->block_cache_hits = dd_rocksopt_ticker(s, "rocksdb.block.cache.hit");
        out->block_cache_misses = dd_rocksopt_ticker(s, "rocksdb.block.cache.miss");
        rocksdb_free(s);
    }
}

/* ---- metrics ---------------------------------------------------------- */

/* Included here rather than at the top: this collector is the only part of
 * the store that knows the Prometheus writer. */
#include "metrics.h"

#include <math.h>

void dd_history_collect(struct dd_prom *p, void *h)
{
    struct dd_history_stats s;
    bool writable = dd_history_writable(h, NULL, 0); /* re-checks after a refusal */
    dd_history_get_stats(h, &s);
    dd_prom_counter(p, "dedupd_history_bytes_written_total",
                    "Bytes RocksDB wrote (WAL, flushes and compactions)", s.bytes_written);
    dd_prom_counter(p, "dedupd_history_wal_bytes_total", "Bytes written to the RocksDB WAL",
                    s.wal_bytes);
    dd_prom_gauge(p, "dedupd_history_live_sst_bytes", "Bytes of live SST files", s.live_sst_bytes);
    dd_prom_gauge(p, "dedupd_history_pending_compaction_bytes",
                  "Bytes RocksDB estimates compaction must rewrite to bring every level "
                  "under its target size",
                  s.pending_compaction_bytes);
    dd_prom_counter(p, "dedupd_history_block_cache_hits_total", "Block cache hits",
                    s.block_cache_hits);
    dd_prom_counter(p, "dedupd_history_block_cache_misses_total", "Block cache misses",
                    s.block_cache_misses);
    uint64_t lookups = s.block_cache_hits + s.block_cache_misses;
    dd_prom_family(p, "dedupd_history_block_cache_hit_ratio",
                   "Block cache hits / lookups since start (NaN before any lookup)", DD_PROM_GAUGE);
    dd_prom_sample_f64(p, "dedupd_history_block_cache_hit_ratio", NULL, 0,
                       lookups ? (double)s.block_cache_hits / (double)lookups : NAN);
    dd_prom_counter(p, "dedupd_history_index_cache_hits_total",
                    "Closed-segment filters found decoded in the index cache", s.index_cache_hits);
    dd_prom_counter(p, "dedupd_history_index_cache_misses_total",
                    "Closed-segment filters decoded and kept in the index cache",
                    s.index_cache_misses);
    dd_prom_gauge(p, "dedupd_history_index_cache_bytes",
                  "Memory held by the index cache (history.index_cache_mb bounds it)",
                  s.index_cache_bytes);
    dd_prom_counter(p, "dedupd_history_corrupt_values_total",
                    "Damaged stored values and operands met (failed their version, checksum or "
                    "bitstream) by reads, merges and compactions",
                    s.corrupt_values);
    dd_prom_counter(p, "dedupd_history_damaged_reads_total",
                    "Reads refused because a value of the user's history is damaged (Filter "
                    "answers UNAVAILABLE for that user)",
                    s.damaged_reads);
    dd_prom_counter(p, "dedupd_history_damaged_merges_total",
                    "Full merges that kept damaged bytes beside the intact items rather than "
                    "fold them away",
                    s.damaged_merges);
    dd_prom_counter(p, "dedupd_history_segments_expired_total",
                    "Segments dropped by compaction as past the retention", s.segments_expired);
    dd_prom_counter(p, "dedupd_history_segments_reduced_total",
                    "Closed segments re-encoded at their final size", s.segments_reduced);
    dd_prom_counter(p, "dedupd_history_segments_foreign_total",
                    "Segments of users this node no longer owns (resharding) dropped or emptied",
                    s.segments_foreign);
    dd_prom_counter(p, "dedupd_history_merges_total", "Full merges run by the merge operator",
                    s.merges);
    dd_prom_counter(p, "dedupd_history_writes_total", "Write batches written", s.writes);
    dd_prom_counter(p, "dedupd_history_operands_written_total", "Merge operands written",
                    s.operands_written);
    dd_prom_gauge(p, "dedupd_history_writable",
                  "1 while the store accepts writes; 0 while it refuses them (see "
                  "dedupd_history_write_errors_total and the log)",
                  writable);
    dd_prom_gauge(p, "dedupd_history_wal_failed",
                  "1 after a write-ahead log append failed for lack of space: restart needed",
                  s.wal_failed);
    if (s.free_bytes != UINT64_MAX)
        dd_prom_gauge(p, "dedupd_history_free_bytes",
                      "Bytes free on the filesystem of history.path", s.free_bytes);
    if (s.fs_size_bytes != UINT64_MAX)
        dd_prom_gauge(p, "dedupd_history_filesystem_size_bytes",
                      "Size of the filesystem of history.path, bytes", s.fs_size_bytes);
    dd_prom_family(p, "dedupd_history_write_errors_total",
                   "Writes and flushes refused or failed, by kind (no_space: below "
                   "history.min_free_mb or ENOSPC)",
                   DD_PROM_COUNTER);
    struct dd_prom_label kind = {"kind", "no_space"};
    dd_prom_sample_u64(p, "dedupd_history_write_errors_total", &kind, 1, s.write_errors_no_space);
    kind.value = "other";
    dd_prom_sample_u64(p, "dedupd_history_write_errors_total", &kind, 1, s.write_errors_other);
}

bool dd_history_created(const dd_history *h)
{
    return h->created;
}
