/* SPDX-License-Identifier: Apache-2.0
 *
 * flush.h - ingest's two window slots and its flush thread: the poll
 * thread fills the active slot (a window plus, per partition, the next
 * offset of every message consumed into it); the flush thread writes the
 * other slot's window to the history store as one batch (with the
 * partitions' positions, history.h "Log positions"), runs the forget the
 * window ends with, makes it durable (ingest.durable), and only then stores
 * and commits its offsets. Knows nothing of how messages are decoded or
 * partitions assigned (ingest.h, assign.h).
 *
 * Memory stays bounded by two windows plus the batch being written: the
 * poll thread hands a slot over only while the flusher is idle
 * (dd_flush_idle, dd_flush_swap), and waits (pauses) otherwise.
 *
 * Threads: the flush thread (dd_flush_start) writes; the poll thread owns
 * the active slot and calls dd_flush_active, dd_flush_mark, dd_flush_swap
 * and dd_flush_lose_position; dd_flush_idle, dd_flush_wait, dd_flush_sync
 * and the getters are safe from any thread; new, set_*, start, give_up,
 * stop and free belong to the thread that owns the ingest.
 */
#ifndef DD_FLUSH_H
#define DD_FLUSH_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "history.h"
#include "lag.h"
#include "tracerec.h"
#include "window.h"

typedef struct dd_flush dd_flush;
typedef struct dd_trace dd_trace;

/* A window slot. The poll thread fills the active one's fields (through
 * dd_flush_mark for the offsets); the flush thread owns the other. */
struct dd_slot {
    dd_window *w;
    int64_t *next;    /* per partition: offset + 1 to store, -1 = none */
    int64_t *last_ts; /* per partition: Kafka timestamp of its last message here */
    size_t nparts;
    uint64_t messages;  /* consumed into this slot */
    int64_t since_ns;   /* monotonic time of its first message */
    uint64_t dups_seen; /* window duplicates already added to stats */
    /* A forget marker ends the slot: run after its window is written. */
    bool forget;
    bool fall;            /* the marker is for every scene of the user (fscene unused) */
    char *fscene, *fuser; /* DD_SCENE_MAX and max_user bytes */
    size_t fscene_len, fuser_len;
    /* Traced users' records of this window, written once it is. */
    struct dd_trace_pending trace;
};

/* How written windows become durable (ingest.durable; docs/design.md,
 * "Ingest semantics"). */
enum dd_flush_durable {
    DD_DURABLE_FLUSH = 0, /* unlogged; a durable point flushes the memtables */
    DD_DURABLE_WAL,       /* through the WAL, not fsync'd; a durable point fsyncs the WAL */
    DD_DURABLE_WINDOW,    /* through the WAL, fsync'd when history.sync; durable as written */
};

struct dd_flush_conf {
    dd_history *history;           /* borrowed, must outlive the flusher */
    const char *topic;             /* ingest.topic; borrowed likewise */
    dd_lag *lag;                   /* told what each written window made visible; borrowed */
    enum dd_flush_durable durable; /* ingest.durable */
    uint32_t durable_interval_ms;  /* flush, wal: a durable point at least this often */
    uint64_t window_bytes;         /* each slot's window.max_bytes / 2 */
    size_t max_user;               /* a forget's user id, at most */
};

/* Create both slots and the write batch. Returns 0 or DD_ERR_NOMEM; *out
 * is NULL on error. Free with dd_flush_free (stops it; NULL: no-op). */
int dd_flush_new(dd_flush **out, const struct dd_flush_conf *conf);
void dd_flush_free(dd_flush *f);
/* The consumer whose offsets are stored and committed (borrowed), and the
 * trace the windows' pending records go to (NULL = none). Before start. */
void dd_flush_set_consumer(dd_flush *f, rd_kafka_t *rk);
void dd_flush_set_trace(dd_flush *f, dd_trace *trace);

/* Start the flush thread: 0, DD_ERR_STATE or DD_ERR_NOMEM. */
int dd_flush_start(dd_flush *f);
/* From now on a failed write is given up, not retried: the window and its
 * offsets are dropped (never stored; consumed again after a restart) and
 * no offset is stored after it. Call before the last drain at stop. */
void dd_flush_give_up(dd_flush *f);
/* Let the flush thread finish what it holds and join it. */
void dd_flush_stop(dd_flush *f);

/* The slot being filled. Poll thread. */
struct dd_slot *dd_flush_active(dd_flush *f);
/* Message PARTITION/OFFSET with Kafka timestamp TS is in the active slot
 * (the lag is told of a partition's first one). Returns 0,
 * DD_ERR_INVALID (a negative partition) or DD_ERR_NOMEM. Poll thread. */
int dd_flush_mark(dd_flush *f, int32_t partition, int64_t offset, int64_t ts);
/* Whether the flush thread holds no slot. */
bool dd_flush_idle(dd_flush *f);
/* Hand the active slot to the idle flusher; returns the new active slot.
 * Poll thread, only when dd_flush_idle. */
struct dd_slot *dd_flush_swap(dd_flush *f);
/* Wait until the flush thread holds no slot. */
void dd_flush_wait(dd_flush *f);
/* Have the flusher make every written window durable and store its
 * offsets (durable = flush or wal; a no-op otherwise), and wait for it (and for a
 * window being written: it blocks as long as a failing write is retried). */
void dd_flush_sync(dd_flush *f);
/* A partition's position is past a message never processed: no offset
 * is stored from now on (a restart consumes it again). Poll thread. */
void dd_flush_lose_position(dd_flush *f);

/* Counters since new (struct dd_ingest_stats says what they mean). Safe
 * from any thread. */
struct dd_flush_stats {
    uint64_t duplicates, plays_written, messages_flushed, messages_durable, flushes,
        durable_flushes, write_errors, commit_errors, last_flush_ms, forgets;
};
void dd_flush_get_stats(const dd_flush *f, struct dd_flush_stats *out);

/* Render dedupd_ingest_forgets_total, dedupd_flush_duration_seconds,
 * dedupd_ingest_flushes_total, dedupd_ingest_durable_flushes_total,
 * dedupd_ingest_undurable_messages, dedupd_ingest_write_errors_total and
 * dedupd_ingest_duplicates_total (part of ingest's collector). */
typedef struct dd_prom dd_prom;
void dd_flush_collect(dd_prom *p, dd_flush *f);

#endif
