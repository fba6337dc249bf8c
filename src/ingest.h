/* SPDX-License-Identifier: Apache-2.0
 *
 * ingest.h - the Kafka play consumer: a consumer-group member of
 * ingest.topic that decodes play events (playevent.h), gathers them in
 * windows (window.h), writes each window to the history store as one
 * batch, and only once that batch is durable (ingest.wal=false: after the
 * next memtable flush; true: through the WAL) stores and commits the
 * messages' offsets. Knows nothing of gRPC.
 *
 * Semantics (docs/design.md, "Ingest semantics"): at-least-once from Kafka,
 * idempotent into the filters. A crash or a partition moving loses no play:
 * whatever was not durable was not committed, and is consumed again.
 * A message that cannot be used (see struct dd_ingest_stats) is counted,
 * logged with topic, partition and offset (rate-limited), copied to
 * ingest.dead_letter_topic when one is set, and skipped: its offset
 * advances with the window it fell in.
 *
 * Threads: dd_ingest_start starts a poll thread (consumer poll, decode,
 * window, rebalance callbacks) and a flush thread (history write,
 * durability flush, offset store, commit). Every function here is called from one controlling
 * thread (main); dd_ingest_assigned and dd_ingest_get_stats may be called
 * from any thread at any time between new and free.
 */
#ifndef DD_INGEST_H
#define DD_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "history.h"
#include "window.h"

struct dd_config_list;

/* The consumer's settings (ingest.* in conf/dedupd.conf). */
struct dd_ingest_conf {
    bool enabled;               /* false: run without Kafka (main does not create one) */
    char *topic;
    char *format;               /* "json" or "protobuf" */
    char *dead_letter_topic;    /* "" = none */
    uint32_t max_id_bytes;      /* longer user or item ids are rejected */
    bool wal;                   /* write plays through RocksDB's WAL */
    uint32_t durable_interval_ms; /* wal=false: flush + commit at least this often */
};

typedef struct dd_ingest dd_ingest;

/* Create the consumer (and the dead-letter producer, if configured) from
 * CONF, WINDOW and every key of KAFKA, which is passed to librdkafka as
 * is, with dedupd's defaults (kafka.h).
 * Nothing connects yet. HISTORY is borrowed and must outlive the ingest;
 * CONF, WINDOW and KAFKA are only read during the call. Returns 0,
 * DD_ERR_INVALID (a bad setting: err names the key) or DD_ERR_NOMEM; *out
 * is NULL on error.
 * Free with dd_ingest_free. */
int dd_ingest_new(dd_ingest **out, const struct dd_ingest_conf *conf,
                  const struct dd_window_conf *window, const struct dd_config_list *kafka,
                  dd_history *history, char *err, size_t errlen);

/* Subscribe and start the poll and flush threads. Returns 0, DD_ERR_STATE
 * (already started), DD_ERR_UNAVAILABLE (subscribe failed) or DD_ERR_NOMEM
 * (threads); on error nothing runs and dd_ingest_free may follow. */
int dd_ingest_start(dd_ingest *in);

/* Stop consuming: flush and write what is pending, make it durable, store
 * and commit (synchronously) the offsets of what was written, leave the group, close
 * the consumer, flush the dead-letter producer (bounded wait). Blocks until
 * done. If the store cannot be written, the pending plays are not
 * committed (they are consumed again next time) and the failure is logged.
 * A no-op when not started or already stopped. */
void dd_ingest_stop(dd_ingest *in);

/* Stop (if running) and free everything. NULL is a no-op. */
void dd_ingest_free(dd_ingest *in);

/* Make every window written so far durable now (ingest.wal=false: flush
 * the memtables, store and commit the offsets) instead of at the next
 * ingest.durable_interval_ms, and wait for it. Windows still being filled
 * are not included. A no-op with ingest.wal=true or when not running.
 * Failures are counted (write_errors) and logged; the offsets then wait
 * for the next try. Waits for a window being written first, so it blocks
 * as long as a failing write is retried. Safe from any thread. */
void dd_ingest_sync(dd_ingest *in);

/* True while at least one partition of ingest.topic is assigned to this
 * member (for /readyz). */
bool dd_ingest_assigned(const dd_ingest *in);

/* Bad messages, by reason (indexes of struct dd_ingest_stats.bad). */
enum dd_ingest_bad {
    DD_INGEST_BAD_UNDECODABLE = 0, /* not JSON / PlayEvent, wrong types, negative time */
    DD_INGEST_BAD_EMPTY_USER = 1,  /* no user id in payload nor key */
    DD_INGEST_BAD_EMPTY_ITEM = 2,
    DD_INGEST_BAD_ID_TOO_LONG = 3, /* over ingest.max_id_bytes (scene: also 255) */
    DD_INGEST_BAD_FUTURE = 4,      /* later than now + history.max_future_ms */
};
#define DD_INGEST_NBAD 5
/* "undecodable", "empty_user", "empty_item", "id_too_long", "future". */
const char *dd_ingest_bad_name(int reason);

/* Counters since dd_ingest_new, read atomically one by one. */
struct dd_ingest_stats {
    uint64_t messages;        /* messages consumed (good and bad) */
    uint64_t plays;           /* plays accepted into a window */
    uint64_t bad[DD_INGEST_NBAD];
    uint64_t expired;         /* plays older than the retention, dropped */
    uint64_t key_mismatch;    /* payload user differs from the message key (kept) */
    uint64_t duplicates;      /* plays already pending in their window */
    uint64_t plays_written;   /* distinct plays written to the store */
    uint64_t messages_flushed; /* messages whose window is written (visible) */
    uint64_t messages_durable; /* messages whose plays are durable (offsets stored) */
    uint64_t flushes;         /* windows written */
    uint64_t durable_flushes; /* ingest.wal=false: memtable flushes that made windows durable */
    uint64_t write_errors;    /* failed store writes or durability flushes (retried) */
    uint64_t commits;         /* successful offset commits */
    uint64_t commit_errors;
    uint64_t dead_lettered;   /* bad messages produced to the dead-letter topic */
    uint64_t dead_letter_errors;
    uint64_t pauses;          /* times consumption paused for the store */
    uint64_t rebalances;      /* assignment changes (assign or revoke) */
    uint64_t kafka_errors;    /* errors reported by librdkafka */
    uint64_t assigned_partitions; /* now */
    int64_t consumer_lag;     /* sum over assigned partitions; -1 unknown */
    uint64_t last_flush_ms;   /* duration of the last window write */
    uint64_t pending_entries; /* now: (scene, user, segment) entries in the window being filled */
    uint64_t pending_bytes;   /* now: bytes allocated by that window */
};
void dd_ingest_get_stats(const dd_ingest *in, struct dd_ingest_stats *out);

/* A metrics.h collector for UD (a dd_ingest *): renders dedupd_ingest_*,
 * dedupd_window_pending_* and dedupd_flush_duration_seconds from the
 * getters here. Call it only from a collector registry (metrics.h), which
 * serialises scrapes: it keeps its per-partition scratch in static
 * storage. The plays families are plays.h's. */
typedef struct dd_prom dd_prom;
void dd_ingest_collect(dd_prom *p, void *ud);

/* Consumer lag per partition of ingest.topic assigned here, as of the last
 * librdkafka statistics (statistics.interval.ms): up to CAP pairs
 * (PARTITIONS[i], LAGS[i]) are filled; returns how many there are (may be
 * more than CAP). Partitions whose lag is unknown are left out. Cannot
 * fail. */
size_t dd_ingest_get_partition_lags(const dd_ingest *in, int32_t *partitions, int64_t *lags,
                                    size_t cap);

/* Durations of successful window writes, in seconds, as a histogram over
 * dd_metrics_flush_bounds (metrics.h). Cannot fail. */
struct dd_histogram_snap;
void dd_ingest_get_flush_histogram(const dd_ingest *in, struct dd_histogram_snap *out);

#endif
