/* SPDX-License-Identifier: Apache-2.0
 *
 * history.h - per-(scene, user) played history in RocksDB: time segments of
 * Golomb-compressed filters (bloom.h), written as merge operands, expired
 * whole. Knows nothing of Kafka, gRPC or Redis. The stored format and its
 * guarantees: docs/design.md, "Stored history".
 *
 * DESIGN
 *
 * A filter cannot delete, so a user's history is cut by event time into
 * segments of segment_days (segment.h: the key layout, which makes one
 * user's segments one contiguous key range, and the day arithmetic), and a
 * segment expires whole once its newest day is past retention_days (see
 * struct dd_history_conf). Reads skip dead segments whatever compaction has
 * done; the compaction filter drops them for good.
 *
 * Writes read nothing: dd_history_write puts one merge operand per (scene,
 * user, segment) in one WriteBatch, and the merge operator (fold.h) unions
 * the operands into the segment's filter: near exact while the segment is
 * open, re-encoded at its final range once it has closed, so that the
 * union over a user's live segments stays within fp_rate.
 *
 * Reads are one batched MultiGet of the user's live segments within the
 * lookback, each filter then probed the cheapest way for its size
 * (dd_history_probe_any). A read that fails is an error, never "not seen".
 *
 * Damage: a value or operand that fails dedupd's own version, checksum or
 * bitstream (RocksDB's block checksums having passed: a bad copy, a bug, a
 * newer format after a rollback) is an error for its user, never an empty
 * history: the probe fails with DD_ERR_CORRUPT naming the segment, counted
 * (stats.corrupt_values, stats.damaged_reads) and logged with the key
 * (rate limited). Merges and compactions keep the damaged bytes (fold.h,
 * "Damaged values"), so later plays do not hide it; only the segment's
 * expiry drops it. Repair: dd_history_forget of the user (ForgetUser), or
 * the store replaced by a replica's copy. dd_history_scan_damaged lists
 * the damaged users (ddcheck -D).
 *
 * Full disk: writes and flushes are refused, reads go on, and the store
 * resumes by itself once there is room (see dd_history_write).
 *
 * Threads: a dd_history is safe to use from any number of threads at once
 * (RocksDB is); batches are not shared between threads.
 */
#ifndef DD_HISTORY_H
#define DD_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segment.h" /* DD_SCENE_MAX, DD_USER_MAX: the key format's limits */

struct dd_config_list;

/* The store's settings (history.* in conf/dedupd.conf). Strings are
 * borrowed for the call that takes them. A segment is live while its
 * newest day >= today - retention_days (whole UTC days); each stored item
 * carries its play's day (bloom.h, dated filters), so reads remember it
 * exactly retention_days full days (an undated item, stored before items
 * were dated, as of its segment's newest day: at most retention_days +
 * segment_days + 1). The live days touch at most S = ceil(retention_days
 * / segment_days) + 1 segments, so a closed segment is sized for
 * fp_rate / S (fold.h). */
struct dd_history_conf {
    char *path;                     /* RocksDB directory */
    uint32_t segment_days;          /* days per time segment */
    uint32_t retention_days;        /* plays are remembered at least this long */
    double fp_rate;                 /* union false-positive bound over a user's live segments */
    uint32_t max_successive_merges; /* pending merge operands per key in a memtable */
    uint64_t block_cache_mb;        /* RocksDB block cache */
    uint64_t
        index_cache_mb; /* decoded closed-segment filters kept between calls (icache.h); 0 = none */
    bool sync;          /* fsync the WAL on every write batch */
    uint64_t write_mbps;     /* flushes' and compactions' disk writes, Mbit/s; 0 = no limit */
    bool compaction_low_cpu; /* RocksDB's compaction threads at the lowest CPU priority */
    int64_t max_future_ms;   /* plays dated further ahead than this are rejected */
    uint64_t min_free_mb;    /* writes are refused while path's filesystem has less free */
    char *day_scenes;        /* retired alias: scenes whose day segments (written by earlier
                       * releases, segment.h) are still read; NULL or "" = none */
    bool must_exist;         /* refuse a path holding no store rather than create one (ddcheck) */
    uint32_t min_lookback_days; /* Filter's min_kept never shortens a lookback below this
                                 * (filter.h); past retention_days it is the retention */
    bool exact_days;            /* keep each play's day (lookbacks exact to the day); false: every
                      * new play as of its segment's newest day (fold.h, coarse) */
};

/* Most scenes history.day_scenes may list. */
#define DD_DAY_SCENES_MAX 64

typedef struct dd_history dd_history;
typedef struct dd_history_batch dd_history_batch;

/* An injectable wall clock (tests move time). NULL means dd_now_ms(). */
struct dd_history_clock {
    int64_t (*now_ms)(void *ud);
    void *ud;
};

/* Open the store at conf->path with the ROCKSDB pass-through options
 * (NULL = none). CLOCK is copied; NULL = wall clock. A missing store is
 * created, with every missing parent directory of conf->path; with
 * conf->must_exist it is refused instead (DD_ERR_NOTFOUND, nothing
 * created). On error returns DD_ERR_INVALID (bad option), DD_ERR_NOTFOUND
 * or DD_ERR_IO with a message in err, and *out is NULL. Caller closes with
 * dd_history_close. */
int dd_history_open(dd_history **out, const struct dd_history_conf *conf,
                    const struct dd_config_list *rocksdb, const struct dd_history_clock *clock,
                    char *err, size_t errlen);

/* A consistent copy of the store in directory DIR (which must not exist),
 * taken while reads and writes go on: the memtables are flushed first (so
 * unlogged writes are in it) and the SST files are hard links where DIR
 * is on the same filesystem. The copy opens as a store of its own, log
 * positions (dd_history_get_offset) included. 0, or DD_ERR_IO with a
 * message in err. */
int dd_history_checkpoint(dd_history *h, const char *dir, char *err, size_t errlen);

/* history.path as opened. */
const char *dd_history_path(const dd_history *h);

/* Whether dd_history_open created the store (its directory held no
 * database): a node whose store is new must not resume from offsets a
 * lost store had committed (cluster.h). Cannot fail. */
bool dd_history_created(const dd_history *h);

/* Close the store: syncs the WAL and flushes the memtables first, so
 * unlogged writes are kept too (if that flush fails it is logged, and
 * unlogged writes since the last flush are lost). NULL is a no-op. */
void dd_history_close(dd_history *h);

/* Where SCENE's play dated AT_MS goes: its segment_days segment, in every
 * scene (history.day_scenes no longer writes day segments). Returns
 * DD_HISTORY_PLACE_OK with *segment set, DD_HISTORY_PLACE_EXPIRED (older
 * than the retention) or DD_HISTORY_PLACE_FUTURE (later than now +
 * history.max_future_ms). */
enum dd_history_place {
    DD_HISTORY_PLACE_OK = 0,
    DD_HISTORY_PLACE_EXPIRED = 1,
    DD_HISTORY_PLACE_FUTURE = 2,
};
enum dd_history_place dd_history_place(const dd_history *h, const char *scene, size_t scene_len,
                                       int64_t at_ms, uint32_t *segment);

/* Whether SCENE is listed in history.day_scenes (a retired alias: its day
 * segments written by earlier releases are still read). Cannot fail. */
bool dd_history_day_scene(const dd_history *h, const char *scene, size_t scene_len);

/* Check a history.day_scenes value: at most DD_DAY_SCENES_MAX comma
 * separated scenes of 1..DD_SCENE_MAX bytes, blanks around them ignored.
 * Returns 0, or DD_ERR_INVALID with a message in err. */
int dd_history_check_day_scenes(const char *list, char *err, size_t errlen);

/* history.max_future_ms as opened. Cannot fail. */
int64_t dd_history_max_future_ms(const dd_history *h);

/* history.min_lookback_days and history.retention_days as opened.
 * Cannot fail. */
uint32_t dd_history_min_lookback_days(const dd_history *h);
uint32_t dd_history_retention_days(const dd_history *h);

/* Current time by the store's clock, in ms. */
int64_t dd_history_now_ms(const dd_history *h);

/* Write batches. dd_history_batch_new returns NULL on out of memory;
 * dd_history_batch_free(NULL) is a no-op. */
dd_history_batch *dd_history_batch_new(void);
void dd_history_batch_free(dd_history_batch *b);
/* Forget everything added, keep the memory for reuse. */
void dd_history_batch_clear(dd_history_batch *b);
/* Item hash H of a play at AT_MS (>= 0) as dd_history_batch_add takes it:
 * H's high half, all a fingerprint uses, and the play's UTC day in the low
 * half (bloom.h, dd_bloom_dated). Cannot fail. */
uint64_t dd_history_dated(uint64_t h, int64_t at_ms);

/* Add the N dated items (dd_history_dated) of (SCENE, USER) in SEGMENT as
 * one merge operand: a bloom.h dated fingerprint list (up to
 * DD_BLOOM_FPS_MAX items) or a dated full-range filter (fold.h; older
 * undated operands are still read). Repeats keep the newest day. A day
 * outside SEGMENT's days is read as the segment's nearest day.
 * Ids are bytes (not NUL-terminated): scene <= DD_SCENE_MAX bytes, user <=
 * DD_USER_MAX.
 * Returns 0, DD_ERR_INVALID (lengths) or DD_ERR_NOMEM (b unchanged). */
int dd_history_batch_add(dd_history_batch *b, const char *scene, size_t scene_len, const char *user,
                         size_t user_len, uint32_t segment, const uint64_t *hashes, size_t n);
/* Add to B the deletion of every segment of (SCENE, USER), as
 * dd_history_forget does, to be written with the rest of the batch.
 * Returns 0 or DD_ERR_INVALID (lengths; an empty user id). */
int dd_history_batch_forget(dd_history_batch *b, const char *scene, size_t scene_len,
                            const char *user, size_t user_len);

/* Log positions kept in the store. A consumer records in the batch that
 * writes a message's plays the next offset to read of that message's
 * partition, so the store and its position in the log are written (and
 * made durable) together: after a crash the store's position is never
 * ahead of its plays. The key is outside the history's key space (a scene
 * "" and a user "" that no call accepts, with a length no segment key has):
 * reads, forgets and the compaction filter never meet it.
 *
 * Add to B: TOPIC's PARTITION is consumed up to NEXT (the next offset to
 * read, >= 0). TOPIC is 1..DD_TOPIC_MAX bytes. Returns 0 or
 * DD_ERR_INVALID. */
#define DD_TOPIC_MAX 249
int dd_history_batch_put_offset(dd_history_batch *b, const char *topic, int32_t partition,
                                int64_t next);

/* The next offset of TOPIC's PARTITION recorded in the store: 0 with *NEXT
 * set, DD_ERR_NOTFOUND when none is (a store written before offsets were
 * kept, or a partition never consumed here), DD_ERR_CORRUPT (the value is
 * not 8 bytes or negative: logged, to be treated as none), or DD_ERR_IO
 * (message in err). */
int dd_history_get_offset(dd_history *h, const char *topic, int32_t partition, int64_t *next,
                          char *err, size_t errlen);

/* Ownership (resharding, cluster_map.h). OWNS (NULL: none) decides which
 * users this node keeps: from now on compactions drop, and full merges
 * outside reads empty, the segments of every user it says are not this
 * node's (counted as segments_foreign). Reads are not filtered: callers
 * route a foreign user's calls elsewhere. OWNS and UD must stay valid
 * until dd_history_set_owner(h, NULL, NULL) returns and no compaction
 * runs any more (dd_history_close). Cannot fail. */
void dd_history_set_owner(dd_history *h, bool (*owns)(void *ud, const char *user, size_t len),
                          void *ud);

/* The store's ownership record (owner.h encodes and checks it), kept in
 * the store's reserved key space like the offsets: which users the store
 * holds. dd_history_get_holds copies the stored bytes into BUF (room for
 * CAP) and their count into *LEN: 0, DD_ERR_NOTFOUND (never recorded),
 * DD_ERR_CORRUPT (longer than CAP; BUF untouched) or DD_ERR_IO.
 * dd_history_put_holds writes V[0..LEN) durably: 0 or DD_ERR_IO (also
 * while the store refuses writes). Messages in err. */
int dd_history_get_holds(dd_history *h, uint8_t *buf, size_t cap, size_t *len, char *err,
                         size_t errlen);
int dd_history_put_holds(dd_history *h, const uint8_t *v, size_t len, char *err, size_t errlen);

/* Write this batch without the WAL (default: with it). An unlogged write is
 * visible to every later probe at once but durable only once a later
 * dd_history_flush() returns 0 (or the store is closed cleanly): a crash
 * before that loses it. For writers that can replay what they wrote, as
 * Kafka ingest does (it commits offsets only after that flush); history.sync
 * does not apply. Kept across dd_history_batch_clear. Cannot fail. */
void dd_history_batch_set_unlogged(dd_history_batch *b, bool unlogged);
/* Write this batch through the WAL but never fsync it on the write, whatever
 * history.sync says: it survives a crash of dedupd (the WAL is in the page
 * cache) but is durable against a power loss only once a later
 * dd_history_sync_wal() or dd_history_flush() returns 0 (or the store is
 * closed cleanly). For writers that can replay what they wrote, as Kafka
 * ingest does with ingest.durable = wal (it commits offsets only after the
 * sync). Ignored for an unlogged batch. Kept across dd_history_batch_clear.
 * Cannot fail. */
void dd_history_batch_set_nosync(dd_history_batch *b, bool nosync);
/* Operands (merge operands only) and approximate bytes in the batch. */
size_t dd_history_batch_operands(const dd_history_batch *b);
size_t dd_history_batch_bytes(const dd_history_batch *b);

/* Write the batch atomically (fsync'd when history.sync). On return 0 the
 * plays are visible to every later probe and durable (unless the batch is
 * unlogged: then durable after the next dd_history_flush). DD_ERR_IO with a
 * message in err otherwise (nothing of the batch may be assumed written).
 * The batch is left as it was.
 *
 * Full disk: writes and flushes are refused (DD_ERR_IO, "no space left on
 * device: ...") while the filesystem of history.path has less than
 * history.min_free_mb free (statvfs before each), and a write that RocksDB
 * fails with ENOSPC is reported the same way. Reads go on. RocksDB stops
 * writing after a failed flush or compaction (its background error) and,
 * through its default SstFileManager, resumes by itself about every 5 s
 * once there is room again (RocksDB 7.8's C API has no rocksdb_resume);
 * unlogged writes still in the memtables are kept and flushed then. The
 * reserve exists because RocksDB 7.8 cannot recover from a failed
 * write-ahead log append: the log writer keeps the error and Debian's
 * build (assertions on) aborts at its next use. After such a failure
 * ("wal_failed") every write is refused until a restart, and close skips
 * the WAL sync. RocksDB's info LOG is off by default
 * (info_log_level=FATAL_LEVEL) for the same reason: a LOG line after a
 * failed one aborts the process. */
int dd_history_write(dd_history *h, dd_history_batch *b, char *err, size_t errlen);

/* Probe: for the N hashes in SORTED (ascending by h >> 32: see
 * dd_bloom_sort_hashes) set HIT[i] = 1 for those in (SCENE, USER)'s live
 * segments that overlap the last LOOKBACK_DAYS days: today and the
 * LOOKBACK_DAYS days before it, counted as the retention is (0 = the whole
 * retention; larger than retention is the whole retention), exact to the
 * day: a dated filter (bloom.h) whose days all fall in the window is
 * probed whole, one with older days too is probed by day
 * (dd_bloom_probe_sorted_since), one with none in it is not probed. An
 * undated filter (stored before items were dated) counts as its
 * segment's newest day: read whole when that day is in the window, so its
 * plays up to segment_days older than the lookback may still be reported.
 * One sorted pass per filter (dd_bloom_probe_sorted).
 * HIT entries of items not found are left as they were. Returns 0,
 * DD_ERR_IO if the store could not be read, or DD_ERR_CORRUPT if a value
 * read is damaged (message in err, naming the segment): callers must not
 * treat either as "not seen". */
int dd_history_probe(dd_history *h, const char *scene, size_t scene_len, const char *user,
                     size_t user_len, uint32_t lookback_days, const uint64_t *sorted, size_t n,
                     uint8_t *hit, char *err, size_t errlen);

/* The same for the candidates in CANDS (candset.h), in any order, as
 * Filter has them: sets HIT[pos] = 1 for each member found; positions
 * that are not members (Filter's repeats) may be set or not. Full-range
 * filters (open segments) of at most 2/5 the batch's size are walked
 * once, each fingerprint looked up in CANDS (dd_bloom_probe_candset), so
 * they cost their own count: a light user's few plays are a few lookups,
 * however many candidates there are. A dated filter with days before the
 * window is decoded into an index and each candidate's find checked by
 * its day. The others are each decoded into an
 * index (dd_bloom_index) and every hash looked up in it, or, past 8 of
 * them (only with a small segment_days), merged with the hashes sorted
 * once. Scratch (an index: about 12 bytes per stored play of the user)
 * comes from ARENA and stays there until its reset. Returns 0, DD_ERR_IO
 * or DD_ERR_CORRUPT (as above), DD_ERR_INVALID (lengths, or more than
 * 2^32 - 1 candidates)
 * or DD_ERR_NOMEM (the arena could not grow; message in err). */
typedef struct dd_arena dd_arena;
struct dd_candset;
int dd_history_probe_any(dd_history *h, const char *scene, size_t scene_len, const char *user,
                         size_t user_len, uint32_t lookback_days, const struct dd_candset *cands,
                         uint8_t *hit, dd_arena *arena, char *err, size_t errlen);

/* The same probe over several scenes of one user at once, in one
 * MultiGet of every scene's live segments within the lookback (each scene
 * read as dd_history_probe_any reads it: a day scene's day segments too):
 * HIT[pos] = 1 for each member of CANDS found in any of the NSCENES (1 to
 * DD_HISTORY_SCENES_MAX) scenes. SCENES[i] are LEN bytes at P, borrowed.
 *
 * And, when AGE or WHERE is not NULL, for each member: AGE[pos] the age
 * in days (today - day, 0 for today or a later day) of the newest day it
 * was found in, DD_HISTORY_AGE_NONE when it was not found; WHERE[pos] the
 * index into SCENES of that newest find (ties: the lowest index), left as
 * it was when not found. A dated item counts as its own day, an undated
 * filter as its segment's newest day (segment.h: a read with lookback L
 * reads it exactly when that day is within L days), a day segment as its
 * day: so a read with a lookback of L would have found exactly the
 * members of AGE <= L, and the caller can choose a shorter lookback
 * without a second read (lookback.h). Undated filters are probed in
 * groups of one (age, scene) as dd_history_probe_any probes them, then
 * the members each group found are marked; each dated filter is probed by
 * index, each find marked with its day. Scratch from ARENA. Returns as
 * dd_history_probe_any, DD_ERR_INVALID also for NSCENES out of range. */
#define DD_HISTORY_SCENES_MAX 9
#define DD_HISTORY_AGE_NONE UINT16_MAX
struct dd_history_scene {
    const char *p;
    size_t len;
};
int dd_history_probe_scenes(dd_history *h, const struct dd_history_scene *scenes, size_t nscenes,
                            const char *user, size_t user_len, uint32_t lookback_days,
                            const struct dd_candset *cands, uint8_t *hit, uint16_t *age,
                            uint8_t *where, dd_arena *arena, char *err, size_t errlen);

/* Delete all of (SCENE, USER)'s segments, damaged ones included (which
 * repairs the user: it then reads as new). Durable like dd_history_write.
 * Returns 0 or DD_ERR_IO. */
int dd_history_forget(dd_history *h, const char *scene, size_t scene_len, const char *user,
                      size_t user_len, char *err, size_t errlen);

/* The scenes in which USER (1..DD_USER_MAX bytes) has any stored segment,
 * live or dead: FN(UD, scene, scene_len) once per scene, in key order,
 * the scene valid for the call only; a non-zero return stops the walk and
 * is returned. Costs two seeks per scene in the store (no scan of other
 * users' keys), so it suits ForgetUser with all_scenes and forget
 * markers for all scenes, not a hot path. Returns 0, FN's return,
 * DD_ERR_INVALID (user length) or DD_ERR_IO (message in err). Safe from
 * any thread. */
typedef int (*dd_history_scene_fn)(void *ud, const char *scene, size_t scene_len);
int dd_history_user_scenes(dd_history *h, const char *user, size_t user_len, dd_history_scene_fn fn,
                           void *ud, char *err, size_t errlen);

/* Whether writes are accepted now. If not, a short reason ("no space left
 * on device (N MiB free, history.min_free_mb=M)", or the WAL failure that
 * needs a restart) is written into WHY (may be NULL). After a write was
 * refused for lack of space this checks again (free space, then an empty
 * unlogged write that RocksDB refuses while it is stopped), so the answer
 * turns true by itself once RocksDB has resumed. Safe from any thread. */
bool dd_history_writable(dd_history *h, char *why, size_t whylen);

/* dd_history_flush writes the memtables to SST files (fsync'd) and waits:
 * on 0, every write that returned before the call is durable, unlogged
 * ones included. dd_history_compact compacts the whole key space (tests,
 * benchmarks, operators). Return 0 or DD_ERR_IO. */
int dd_history_flush(dd_history *h, char *err, size_t errlen);
/* dd_history_sync_wal fsyncs the WAL: on 0, every logged write that
 * returned before the call is durable (nosync ones included; unlogged ones
 * are not). Refused as writes are (full disk, a failed WAL). 0 or
 * DD_ERR_IO. */
int dd_history_sync_wal(dd_history *h, char *err, size_t errlen);
int dd_history_compact(dd_history *h, char *err, size_t errlen);
/* Make a dd_history_compact running in another thread return soon (with
 * DD_ERR_STATE) and refuse later ones: before closing a store a thread
 * may still be compacting. Cannot fail. */
void dd_history_cancel_compact(dd_history *h);

/* Walk the whole store and call FN(UD, scene, user, segment) for each live
 * segment whose value is damaged (dd_fold_check_value: every filter
 * decoded; operands above a value are folded first), with pointers into
 * the store valid for the call only. For operators (ddcheck -D): it reads
 * every key. *VALUES (may be NULL) gets the number of live segment values
 * checked. Returns 0, FN's non-zero return (the walk stops), DD_ERR_IO or
 * DD_ERR_NOMEM (message in err). */
typedef int (*dd_history_damaged_fn)(void *ud, const char *scene, size_t scene_len,
                                     const char *user, size_t user_len, uint32_t segment);
int dd_history_scan_damaged(dd_history *h, dd_history_damaged_fn fn, void *ud, uint64_t *values,
                            char *err, size_t errlen);

/* Counters since open, for metrics. Cannot fail. */
struct dd_history_stats {
    uint64_t corrupt_values;   /* damaged values/operands met (version, checksum, bitstream) */
    uint64_t damaged_reads;    /* probes refused (DD_ERR_CORRUPT) for a damaged value */
    uint64_t damaged_merges;   /* full merges that kept damaged bytes (fold.h) */
    uint64_t segments_expired; /* dropped by the compaction filter */
    uint64_t segments_reduced; /* closed segments re-encoded at their final range */
    uint64_t segments_foreign; /* other nodes' users' segments dropped (dd_history_set_owner) */
    uint64_t merges;           /* full merges run */
    uint64_t writes;           /* batches written */
    uint64_t operands_written;
    uint64_t bytes_written; /* RocksDB's bytes written, WAL included */
    uint64_t wal_bytes;
    uint64_t wal_syncs;        /* fsyncs of the WAL (per synced write, or dd_history_sync_wal) */
    uint64_t flush_bytes;      /* of them: memtable flushes */
    uint64_t compaction_bytes; /* of them: compactions */
    uint64_t
        compaction_cpu_micros; /* CPU time RocksDB's compactions used (merges and filter included) */
    uint64_t live_sst_bytes;
    uint64_t pending_compaction_bytes; /* RocksDB's estimate of what compaction must rewrite */
    uint64_t block_cache_hits;
    uint64_t block_cache_misses;
    uint64_t index_cache_hits;   /* decoded filters found in the index cache */
    uint64_t index_cache_misses; /* decoded and kept */
    uint64_t index_cache_bytes;  /* now */
    uint64_t free_bytes;         /* now: free on history.path's filesystem (UINT64_MAX unknown) */
    uint64_t fs_size_bytes;      /* now: that filesystem's size (UINT64_MAX unknown) */
    uint64_t write_errors_no_space; /* writes and flushes refused or failed for lack of space */
    uint64_t write_errors_other;    /* other failed writes and flushes */
    bool writable;                  /* as of the last write (dd_history_writable re-checks) */
    bool wal_failed;                /* a WAL append failed: writes need a restart */
};
void dd_history_get_stats(dd_history *h, struct dd_history_stats *out);

/* RocksDB's integer property NAME ("rocksdb.num-running-compactions",
 * "rocksdb.estimate-pending-compaction-bytes", ...; RocksDB's
 * DB::Properties) into *OUT. Returns 0, or DD_ERR_NOTFOUND when RocksDB
 * has no integer property of that name. Cheap: no statistics are
 * formatted. */
int dd_history_property_int(dd_history *h, const char *name, uint64_t *out);

/* A metrics.h collector for H (a dd_history *): renders the
 * dedupd_history_* families from dd_history_get_stats. */
struct dd_prom;
void dd_history_collect(struct dd_prom *p, void *h);

#endif
