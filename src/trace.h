/* SPDX-License-Identifier: Apache-2.0
 *
 * trace.h - plain records of what happened to a few chosen users: every
 * play (with its source: Kafka topic/partition/offset, or RecordPlays),
 * delivery and forget of a traced user, with their times, so that an
 * operator can say why an item was removed (why.h). The filters hold no
 * ids; these records do, for the users under investigation only.
 *
 * DESIGN
 *
 * Store: a RocksDB database of its own at trace.path, so it never touches
 * the history store's format, options or compaction. Keys:
 *
 *   record:  u16 BE len(user) | user | u64 BE time_ms | u32 BE seq
 *   meta:    0x00 0x00 | 'u' | user      a traced user (struct below)
 *            0x00 0x00 | 'x' | user      a config user removed at run time
 *
 * A record key's user is never empty (every API call refuses an empty
 * user_id), so its first two bytes are never 0x0000 and the meta keys
 * cannot collide with a record (a prefix of 0xFF would: a user of 65,280
 * bytes or more starts with 0xFF). time_ms is the event's own time (the
 * play's, the delivery's, the forget's), so one user's records are one key
 * range in time order; seq (a process-wide counter) keeps records of the
 * same millisecond apart. Values are versioned, length-checked and carry a
 * checksum (dd_trace_decode); the disk is read as hostile: a record that
 * fails is counted, logged once in a while and skipped.
 *
 * Bounds: at most trace.max_users users; per user at most
 * trace.max_records records (when a write passes it, the oldest are
 * deleted, down to max_records - max_records/16 so that the prefix scan
 * this needs runs once per max_records/16 writes); records older than
 * trace.retention_days (by their time_ms) are skipped on read and dropped
 * by a compaction filter. Stopping a user's trace deletes its records.
 *
 * Durability: records are written without RocksDB's WAL (durable at the
 * next memtable flush and at close; a crash may lose the last ones: a
 * trace is a diagnostic aid, not the history), and never while the
 * filesystem has less than min_free_mb free: RocksDB 7.8 cannot recover
 * from a failed WAL append (history.h, "Full disk"), and a trace must
 * never take the daemon down. Changes to the set of traced users go
 * through the WAL, fsync'd, under the same reserve.
 *
 * The set of traced users = trace.users (config) plus run-time additions
 * (dd_trace_add) minus run-time removals (dd_trace_remove), persisted in
 * the meta keys, each with the time its tracing began ("since"). At open:
 * a config user without a meta entry gets one (since = now), unless a 'x'
 * marker says it was removed at run time; an entry that came from the
 * config and is no longer in it is removed (with its records).
 *
 * Lookup on hot paths (dd_trace_wanted) is lock-free: an immutable hash
 * set published through an atomic pointer, NULL while nobody is traced,
 * so that the check for an untraced user costs one atomic load and a
 * branch when the list is empty. Otherwise a reader announces itself in a
 * counter (one atomic add and one subtract around a hash lookup) and a
 * writer that swapped in a new set waits until the counter reads zero
 * before it frees the old one: readers hold it for a lookup only, so the
 * wait is short, and memory stays bounded by one set (a deferred free
 * until shutdown would grow with every add and remove).
 *
 * Threads: every function is safe from any thread. Writes of records and
 * changes of the set are serialised by one mutex (traced users are few);
 * dd_trace_wanted takes no lock.
 */
#ifndef DD_TRACE_H
#define DD_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tracerec.h"

/* The trace's settings (trace.* in conf/dedupd.conf). */
struct dd_trace_conf {
    char *path;              /* RocksDB directory of the trace store */
    char *users;             /* comma-separated user ids traced from the start */
    uint32_t retention_days; /* records older than this (by their time) are dropped */
    uint32_t max_records;    /* per user; the oldest go first */
    uint32_t max_users;      /* dd_trace_add beyond it: DD_ERR_LIMIT */
    /* Set by dd_config_trace_conf from history.* and rpc.*, not operator keys. */
    uint64_t min_free_mb;  /* history.min_free_mb: no write below this free */
    uint32_t max_id_bytes; /* rpc.max_id_bytes: the longest user id */
};

/* Check CONF alone (dd_config_validate calls it): each id in trace.users
 * not empty (blanks around commas are trimmed) and at most MAX_ID_BYTES,
 * no more ids than trace.max_users, trace.path not empty. Returns 0 or
 * DD_ERR_INVALID with a message naming the key. */
int dd_trace_conf_check(const struct dd_trace_conf *conf, uint32_t max_id_bytes, char *err,
                        size_t errlen);

/* ---- the set of traced users, alone (for tests and benchmarks) -------- */

/* An immutable hash set of user ids, as dd_trace publishes it. */
typedef struct dd_trace_set dd_trace_set;
/* Build a set of the N ids USERS[i] (LENS[i] bytes; copied; duplicates
 * count once). Returns NULL on out of memory. Free with
 * dd_trace_set_free (NULL is a no-op). */
dd_trace_set *dd_trace_set_new(const char *const *users, const size_t *lens, size_t n);
void dd_trace_set_free(dd_trace_set *s);
/* Whether USER is in S; its index (0 .. size-1, in the order given,
 * duplicates skipped) in *IDX if not NULL. Cannot fail. */
bool dd_trace_set_has(const dd_trace_set *s, const char *user, size_t len, size_t *idx);
size_t dd_trace_set_size(const dd_trace_set *s);

/* ---- the trace store ---------------------------------------------------- */

typedef struct dd_trace dd_trace;

/* An injectable wall clock (tests move time). NULL means dd_now_ms(). */
struct dd_trace_clock {
    int64_t (*now_ms)(void *ud);
    void *ud;
};

/* Open (creating if missing) the store at conf->path, load the set of
 * traced users and reconcile it with trace.users (above). CONF is copied;
 * CLOCK too (NULL = wall clock). Returns 0, DD_ERR_INVALID (CONF fails
 * dd_trace_conf_check), DD_ERR_IO (RocksDB, message in err) or
 * DD_ERR_NOMEM; *out is NULL on error. Close with dd_trace_close. */
int dd_trace_open(dd_trace **out, const struct dd_trace_conf *conf,
                  const struct dd_trace_clock *clock, char *err, size_t errlen);

/* Flush the memtables (records written since the last flush are durable
 * only after it) and close. NULL is a no-op. */
void dd_trace_close(dd_trace *t);

/* Whether USER is traced: the hot-path check. One atomic load and a
 * branch while nobody is traced; otherwise a hash lookup between two
 * atomic counter updates. T NULL: false. Lock-free; cannot fail. */
bool dd_trace_wanted(dd_trace *t, const char *user, size_t len);

/* Record the N records RECS of USER (one write). Only if USER is traced
 * (checked again under the writers' lock: a concurrent dd_trace_remove
 * wins); records older than trace.retention_days are skipped. Returns 0
 * (written, or nothing to write), DD_ERR_NOTFOUND (not traced) or an
 * error: invalid record (DD_ERR_INVALID), no space (DD_ERR_LIMIT),
 * RocksDB (DD_ERR_IO), DD_ERR_NOMEM. Every error is counted
 * (dedupd_trace_errors_total) and logged at most every 10 s, so callers
 * may ignore the code: a trace never fails the operation it describes. */
int dd_trace_record(dd_trace *t, const char *user, size_t user_len, const struct dd_trace_rec *recs,
                    size_t n);

/* Record every entry of P (tracerec.h: records kept until the write they
 * describe is done, as ingest keeps a window's) with dd_trace_record, in
 * order, and empty P. Errors are counted and logged as dd_trace_record's;
 * T NULL: P is only emptied. Cannot fail. */
void dd_trace_record_pending(dd_trace *t, struct dd_trace_pending *p);

/* Count a record that could not even be kept for writing (a full buffer
 * in a caller): dedupd_trace_errors_total{kind="dropped"}. Cannot fail. */
void dd_trace_dropped(dd_trace *t, uint64_t n);

/* Start tracing USER at run time (persisted; since = now). *ADDED (if not
 * NULL) says whether it was new: adding a traced user changes nothing and
 * returns 0. Returns 0, DD_ERR_INVALID (empty or longer than
 * rpc.max_id_bytes), DD_ERR_LIMIT (trace.max_users reached, or no space),
 * DD_ERR_IO or DD_ERR_NOMEM, with a message in err. */
int dd_trace_add(dd_trace *t, const char *user, size_t len, bool *added, char *err, size_t errlen);

/* Stop tracing USER (persisted, also for a trace.users entry) and delete
 * its records. Returns 0, DD_ERR_NOTFOUND (not traced), DD_ERR_LIMIT (no
 * space), DD_ERR_IO or DD_ERR_NOMEM, with a message in err. */
int dd_trace_remove(dd_trace *t, const char *user, size_t len, char *err, size_t errlen);

/* What is known of a traced user. */
struct dd_trace_user {
    bool traced;
    bool from_config; /* in trace.users (else added at run time) */
    int64_t since_ms; /* when its tracing began */
};
/* Fill *OUT for USER (traced = false when it is not). Cannot fail. */
void dd_trace_get_user(dd_trace *t, const char *user, size_t len, struct dd_trace_user *out);

/* Call FN for each traced user, in no particular order, under the
 * writers' lock (FN must not call back into T). USER is borrowed for the
 * call. Returns the number of users. */
typedef void (*dd_trace_user_fn)(void *ud, const char *user, size_t len,
                                 const struct dd_trace_user *info);
size_t dd_trace_list(dd_trace *t, dd_trace_user_fn fn, void *ud);

/* Call FN for each live record of USER, oldest first (by time, then seq),
 * at most trace.max_records * 2 of them; records that fail to decode are
 * counted and skipped, expired ones skipped. FN returning non-zero stops
 * the scan. The record is borrowed for the call. Returns 0 or DD_ERR_IO
 * (message in err). */
typedef int (*dd_trace_rec_fn)(void *ud, const struct dd_trace_rec *rec);
int dd_trace_scan(dd_trace *t, const char *user, size_t len, dd_trace_rec_fn fn, void *ud,
                  char *err, size_t errlen);

/* trace.retention_days as opened, in ms. */
int64_t dd_trace_retention_ms(const dd_trace *t);
/* Now by the trace's clock. */
int64_t dd_trace_now_ms(const dd_trace *t);

/* Compact the whole store (the compaction filter drops expired records),
 * for tests and operators. Returns 0 or DD_ERR_IO. */
int dd_trace_compact(dd_trace *t, char *err, size_t errlen);

/* Counters since open. Cannot fail. */
struct dd_trace_stats {
    uint64_t users;                    /* now */
    uint64_t records[DD_TRACE_NKINDS]; /* written, by kind - 1 */
    uint64_t errors_write;             /* failed writes (RocksDB, space, memory) */
    uint64_t errors_dropped;           /* records a caller could not keep */
    uint64_t errors_corrupt;           /* stored records that failed to decode */
    uint64_t trimmed;                  /* records deleted for trace.max_records */
};
void dd_trace_get_stats(dd_trace *t, struct dd_trace_stats *out);

/* A metrics.h collector for UD (a dd_trace *): dedupd_trace_users,
 * dedupd_trace_records_total{kind}, dedupd_trace_errors_total{kind}. */
struct dd_prom;
void dd_trace_collect(struct dd_prom *p, void *ud);

#endif
