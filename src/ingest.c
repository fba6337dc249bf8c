/* SPDX-License-Identifier: Apache-2.0
 *
 * ingest.c - Kafka play ingestion; see ingest.h for the contract.
 *
 * DESIGN
 *
 * Two threads share two slots. A slot is a window plus, per partition, the
 * next offset of every message consumed while it was active, good or bad.
 * The poll thread consumes, decodes and fills the active slot, and runs
 * librdkafka's rebalance, commit and statistics callbacks. The flush thread
 * writes the other slot's window as one WriteBatch, retrying with backoff
 * (write_window), and stores and commits its offsets only once the write
 * is durable. The flusher owns its slot while flush_busy is set (mu, cv);
 * slots swap only while it is idle, so windows are written, and offsets
 * stored, in consumption order. librdkafka's own threads only log.
 * A failed write or durability flush is retried and stores nothing; a
 * full disk is such a failure (history.h, "Full disk"), so ingest resumes
 * by itself once there is room, no offset past what is durable.
 *
 * Durability: with ingest.wal = false (the default: Kafka already is a
 * durable log) windows skip RocksDB's WAL and their offsets wait in the
 * "written" slot for the next memtable flush, which covers every write
 * before it, so a stored offset never runs ahead of the disk
 * (make_durable). With wal = true a window's offsets are stored right
 * after its write.
 *
 * Memory stays bounded by two windows of window.max_bytes / 2 plus the
 * batch being written: a full window while the flusher is busy pauses
 * every partition until the swap (on_message). Commits are asynchronous
 * after every durable window and synchronous on revoke and stop, so a
 * crash replays about one window, not an auto-commit interval.
 *
 * Forget markers end their window: the poll thread puts the marker last
 * in the active slot and hands the slot over at once, so it waits (kept,
 * partitions paused, as for a full window) while the flusher is busy. The
 * flusher writes that window, then runs the forget, then stores the
 * offsets: plays before the marker, pending or written, are deleted; the
 * ones after it are in the next window. A slot holds at most one forget.
 *
 * The watch thread reads the topic's partition count from the broker
 * (a metadata request, which blocks, so not on the poll thread): every
 * second until known, then every WATCH_MS. In assign mode the poll thread
 * assigns its partitions once the count is known.
 *
 * Lag (dd_ingest_lag_ms): a table per partition under lag_mu, touched at
 * window granularity, never per message: the poll thread notes a
 * partition's first message in each slot (pending since) and the end of
 * the partition (librdkafka's partition EOF event: caught up), the
 * flusher what a written window made visible. Readers add the high
 * watermarks librdkafka caches.
 */
#include "ingest.h"

#include "buf.h"
#include "dd.h"
#include "kafka.h"
#include "log.h"
#include "marker.h"
#include "metrics.h"
#include "partition.h"
#include "playevent.h"
#include "sys.h"
#include "trace.h"
#include "window.h"

#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOD "ingest"
#define POLL_MS 100
/* Messages taken per rd_kafka_consume_batch_queue: one queue lock and one
 * clock read per batch instead of per message. */
#define POLL_BATCH 512
#define DLQ_FLUSH_MS 5000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
/* The partition count is read again this often once known, every
 * WATCH_RETRY_MS until then; a metadata request waits at most
 * METADATA_MS (it also bounds how long stop waits for the watcher). */
#define WATCH_MS 5000
#define WATCH_RETRY_MS 1000
#define METADATA_MS 2000
/* The header that makes a message of the plays topic an operation. */
#define OP_HEADER "dedupd-op"
/* Trace records of a window waiting for its write, at most (trace.h): a
 * traced user's plays beyond it are counted as dropped. */
#define TRACE_PENDING_MAX (1u << 20)

struct slot {
    dd_window *w;
    int64_t *next;        /* per partition: offset + 1 to store, -1 = none */
    int64_t *last_ts;     /* per partition: Kafka timestamp of its last message here */
    size_t nparts;
    uint64_t messages;    /* consumed into this slot */
    int64_t since_ns;     /* monotonic time of its first message */
    uint64_t dups_seen;   /* window duplicates already added to stats */
    /* A forget marker ends the slot: run after its window is written. */
    bool forget;
    char *fscene, *fuser; /* DD_SCENE_MAX and max_id_bytes bytes */
    size_t fscene_len, fuser_len;
    /* Traced users' records of this window, written once it is: entries
     * of u16 user length | user | u32 record length | record (trace.h). */
    struct dd_buf trace;
};

/* One partition's lag state (lag_mu). Offsets are "next to read". */
/* Watermark observations kept per partition (plag_ms). */
#define LAG_SEEN 16

struct plag {
    int64_t assigned_ms;  /* wall clock of the assignment; 0 = not assigned here */
    int64_t visible;      /* every message before it is visible; -1 = not known */
    int64_t first_hi;     /* the high watermark first seen since the assignment; -1 = none */
    /* When this node first saw the log's end past offsets not yet visible:
     * (local wall clock, high watermark), oldest first, each past visible. */
    struct {
        int64_t ms, hi;
    } seen[LAG_SEEN];
    int nseen;
    int64_t visible_ts;   /* Kafka timestamp of the last message made visible; 0 = none */
    int64_t pending_ts[2]; /* per slot: timestamp of its first message of this partition */
    int64_t eof;          /* end reached while messages were pending; -1 = none */
    bool caught_up;       /* lag has been seen at 0 since the assignment */
    int64_t behind_since; /* caught_up: wall clock when the end was first seen past
                           * visible, with nothing pending yet; 0 = not behind */
};

struct dd_ingest {
    dd_history *h;
    char *topic;
    char *dlq_topic;      /* NULL = none */
    const char *format;   /* static: "json" or "protobuf" */
    uint32_t flush_ms;
    size_t early_plays;   /* a window this full is written as soon as the
                             flusher is idle, before flush_ms */
    bool wal;             /* ingest.wal: windows through the WAL */
    int64_t durable_ns;   /* ingest.durable_interval_ms, in ns */

    atomic_bool log_gap;  /* dd_ingest_log_gap */
    char gap_why[200];    /* written once, before log_gap is set */
    rd_kafka_t *rk;       /* consumer */
    rd_kafka_topic_t *rkt; /* the topic, for metadata requests */
    rd_kafka_t *dlq;      /* producer, or NULL */
    char *group_id;       /* the group offsets are committed under */

    /* Assign mode (conf->assign). */
    bool assign;
    bool from_beginning;  /* assign: ignore committed offsets (ingest.h) */
    bool accept_truncated; /* ingest.accept_truncated_log (ingest.h) */
    bool (*partitions_ok)(void *ud, int32_t n); /* dd_ingest_set_partitions_check */
    void *partitions_ud;
    uint32_t shards, shard;
    enum dd_partitioner partitioner;
    int32_t assign_count; /* the count the partitions were assigned by (poll thread) */
    bool self_assigned;   /* poll thread */
    int64_t assign_retry_ns;
    atomic_int_least32_t partitions;  /* dd_ingest_partition_count */
    atomic_bool changed;  /* dd_ingest_partitions_changed */
    size_t max_user;      /* a forget's user id, at most */
    const dd_marker_key *forget_key; /* markers must be signed with it; NULL = none applied */
    dd_playevent_decoder *dec;
    dd_history_batch *batch;
    dd_trace *trace;      /* NULL = no traces (dd_ingest_set_trace) */

    struct slot slots[2];
    int active;           /* index of the slot being filled */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int flush_busy;       /* the flusher holds slots[!active] */
    int flush_quit;
    int stopping;         /* the flusher gives up retrying failed writes */
    int abandoned;        /* a window was dropped unwritten: store no more
                             offsets (flush thread only) */
    /* wal=false: offsets of windows written but not yet flushed to SST
     * files (flush thread only; since_ns = when the oldest was written). */
    struct slot written;
    int sync_req;         /* drain asks the flusher for a durability flush */
    int syncing;          /* the flusher is running one */

    pthread_t poll_thr, flush_thr, watch_thr;
    pthread_cond_t watch_cv; /* with mu: wakes the watcher to quit */
    int watch_quit;
    int started, stopped;
    atomic_int stop;

    rd_kafka_message_t *kept; /* a message waiting for room, or NULL */
    uint32_t kept_epoch;  /* bumped whenever a message is kept */
    uint32_t *rewound;    /* per partition: kept_epoch when last rewound */
    size_t n_rewound;
    atomic_int lost_position; /* a rewind failed: store no more offsets */
    int paused;
    rd_kafka_queue_t *cq; /* the consumer queue (messages and events) */
    rd_kafka_message_t *mbatch[POLL_BATCH];

    struct {
        atomic_uint_least64_t messages, plays, bad[DD_INGEST_NBAD], expired, key_mismatch,
            duplicates, plays_written, messages_flushed, messages_durable, flushes,
            durable_flushes, write_errors, commits, commit_errors,
            dead_lettered, dead_letter_errors, pauses, rebalances, log_gaps, kafka_errors,
            assigned, last_flush_ms, forgets, count_changes, topic_partitions;
        atomic_int_least64_t lag;
        atomic_uint_least64_t pending_entries, pending_bytes; /* of the active window */
    } st;
    struct dd_histogram flush_hist;  /* window write durations, lock-free */

    /* Per-partition lag from the last statistics: written by the poll
     * thread (stats_cb), read by scrapes. And the lag in ms (struct plag,
     * by partition). */
    pthread_mutex_t lag_mu;
    pthread_cond_t lag_cv;     /* CLOCK_MONOTONIC: a window became visible */
    int32_t *lag_part;
    int64_t *lag_val;
    size_t lag_n, lag_cap;
    struct plag *plag;
    size_t nplag;
    /* The last error librdkafka reported (error_cb), for /readyz while no
     * partition is assigned; also under lag_mu. */
    char kafka_err[200];
    int64_t kafka_err_ns;       /* when; 0 = none yet */

    struct dd_log_limit lim_bad, lim_kafka, lim_write, lim_commit, lim_dlq, lim_store, lim_meta,
        lim_assign;
};

static const char *const bad_names[DD_INGEST_NBAD] = {
    "undecodable", "empty_user", "empty_item", "id_too_long", "future", "wrong_partition",
    "unauthenticated_forget",
};

const char *dd_ingest_bad_name(int reason)
{
    if (reason < 0 || reason >= DD_INGEST_NBAD) return "unknown";
    return bad_names[reason];
}

#define INC(f) atomic_fetch_add_explicit(&in->st.f, 1, memory_order_relaxed)
#define ADD(f, n) atomic_fetch_add_explicit(&in->st.f, (n), memory_order_relaxed)
#define LOAD(f) atomic_load_explicit(&in->st.f, memory_order_relaxed)

/* ---- librdkafka callbacks --------------------------------------------- */

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    dd_ingest *in = opaque;
    INC(kafka_errors);
    /* Kept printable: the text reaches /readyz. */
    pthread_mutex_lock(&in->lag_mu);
    snprintf(in->kafka_err, sizeof in->kafka_err, "%s: %s",
             rd_kafka_err2name((rd_kafka_resp_err_t)err), reason ? reason : "");
    for (char *c = in->kafka_err; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
    in->kafka_err_ns = dd_mono_ns();
    pthread_mutex_unlock(&in->lag_mu);
    dd_log_limited(&in->lim_kafka, 5000,
                   err == RD_KAFKA_RESP_ERR__FATAL ? DD_LOG_ERROR : DD_LOG_WARN, MOD,
                   "msg=\"kafka error\" error=%s reason=\"%s\"",
                   rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

static void commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    (void)rk;
    dd_ingest *in = opaque;
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        INC(commits);
        dd_debug(MOD, "msg=committed partitions=%d", offsets ? offsets->cnt : 0);
    } else if (err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        INC(commit_errors);
        dd_log_limited(&in->lim_commit, 5000, DD_LOG_WARN, MOD,
                       "msg=\"offset commit failed\" error=\"%s\"", rd_kafka_err2str(err));
    }
}

/* One partition's lag into the list /metrics reads (lag_mu held). Out of
 * memory leaves the partition unlisted; the total stays right. */
static void lag_add(void *ud, int32_t partition, int64_t lag)
{
    dd_ingest *in = ud;
    if (in->lag_n == in->lag_cap) {
        size_t cap = in->lag_cap ? in->lag_cap * 2 : 16;
        int32_t *np = realloc(in->lag_part, cap * sizeof *np);
        if (np) in->lag_part = np;
        int64_t *nv = np ? realloc(in->lag_val, cap * sizeof *nv) : NULL;
        if (nv) in->lag_val = nv;
        if (!np || !nv) return;
        in->lag_cap = cap;
    }
    in->lag_part[in->lag_n] = partition;
    in->lag_val[in->lag_n++] = lag;
}

/* The topic's lag, total and per partition, from librdkafka's statistics. */
static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    (void)rk;
    dd_ingest *in = opaque;
    pthread_mutex_lock(&in->lag_mu);
    in->lag_n = 0;
    int64_t lag = dd_kafka_stats_lag(json, len, in->topic, lag_add, in);
    pthread_mutex_unlock(&in->lag_mu);
    atomic_store_explicit(&in->st.lag, lag, memory_order_relaxed);
    return 0; /* librdkafka frees json */
}

/* ---- lag in ms ----------------------------------------------------------- */

/* PARTITION's entry, grown as needed (lag_mu held); NULL when out of
 * memory or not a partition: its lag is then simply not tracked. */
static struct plag *plag_at(dd_ingest *in, int32_t partition)
{
    if (partition < 0) return NULL;
    if ((size_t)partition >= in->nplag) {
        size_t n = (size_t)partition + 1 < 16 ? 16 : (size_t)partition + 1;
        struct plag *t = realloc(in->plag, n * sizeof *t);
        if (!t) return NULL;
        for (size_t i = in->nplag; i < n; i++)
            t[i] = (struct plag){.visible = -1, .eof = -1, .first_hi = -1};
        in->plag = t;
        in->nplag = n;
    }
    return &in->plag[partition];
}

/* PARTITION is assigned here from now (ASSIGNED), or not any more. */
static void lag_assign(dd_ingest *in, int32_t partition, bool assigned)
{
    pthread_mutex_lock(&in->lag_mu);
    struct plag *e = plag_at(in, partition);
    if (e)
        *e = (struct plag){.assigned_ms = assigned ? dd_now_ms() : 0, .visible = -1, .eof = -1,
                           .first_hi = -1};
    pthread_mutex_unlock(&in->lag_mu);
}

/* Every partition of ingest.topic in L (NULL: all) is (un)assigned. */
static void lag_assign_list(dd_ingest *in, const rd_kafka_topic_partition_list_t *l, bool assigned)
{
    if (!l) {
        pthread_mutex_lock(&in->lag_mu);
        for (size_t i = 0; i < in->nplag; i++)
            in->plag[i] = (struct plag){.visible = -1, .eof = -1, .first_hi = -1};
        pthread_mutex_unlock(&in->lag_mu);
        return;
    }
    for (int i = 0; i < l->cnt; i++)
        if (strcmp(l->elems[i].topic, in->topic) == 0)
            lag_assign(in, l->elems[i].partition, assigned);
}

/* E's log end was at least HI at NOW (this node's clock): noted when past
 * what is visible and past the last note (lag_mu held). When the notes
 * are full, the last one's offset grows instead: the newest offsets are
 * then dated earlier than they arrived, so the lag errs long, never short. */
static void lag_note(struct plag *e, int64_t now, int64_t hi)
{
    if (hi <= e->visible || (e->nseen && hi <= e->seen[e->nseen - 1].hi)) return;
    if (e->nseen < LAG_SEEN) {
        e->seen[e->nseen].ms = now;
        e->seen[e->nseen].hi = hi;
        e->nseen++;
    } else {
        e->seen[e->nseen - 1].hi = hi;
    }
}

/* Poll thread: the first message of PARTITION in slot IDX, at OFFSET with
 * Kafka timestamp TS. It is consumed now: the log reached past it by now,
 * a date for the lag (plag_ms) finer than the readers' watermark notes. */
static void lag_pending(dd_ingest *in, int idx, int32_t partition, int64_t offset, int64_t ts)
{
    pthread_mutex_lock(&in->lag_mu);
    struct plag *e = plag_at(in, partition);
    if (e && !e->pending_ts[idx]) e->pending_ts[idx] = ts > 0 ? ts : 1;
    if (e && e->assigned_ms) lag_note(e, dd_now_ms(), offset + 1);
    pthread_mutex_unlock(&in->lag_mu);
}

/* Poll thread: the consumer has read PARTITION up to its end, OFFSET.
 * With nothing pending, all of it is visible; else once what is pending
 * is (lag_visible). */
static void lag_eof(dd_ingest *in, int32_t partition, int64_t offset)
{
    pthread_mutex_lock(&in->lag_mu);
    struct plag *e = plag_at(in, partition);
    if (e && e->assigned_ms) {
        if (!e->pending_ts[0] && !e->pending_ts[1]) {
            if (offset > e->visible) e->visible = offset;
        } else if (offset > e->eof) {
            e->eof = offset;
        }
    }
    pthread_mutex_unlock(&in->lag_mu);
}

/* Flush thread: slot S's window is written (its messages are visible). */
static void lag_visible(dd_ingest *in, const struct slot *s)
{
    int idx = s == &in->slots[1];
    pthread_mutex_lock(&in->lag_mu);
    for (size_t i = 0; i < s->nparts && i < in->nplag; i++) {
        struct plag *e = &in->plag[i];
        if (s->next[i] < 0 || !e->assigned_ms) continue;
        if (s->next[i] > e->visible) e->visible = s->next[i];
        e->visible_ts = s->last_ts[i];
        e->pending_ts[idx] = 0;
        if (!e->pending_ts[!idx] && e->eof >= 0) {
            if (e->eof > e->visible) e->visible = e->eof;
            e->eof = -1;
        }
    }
    pthread_cond_broadcast(&in->lag_cv);
    pthread_mutex_unlock(&in->lag_mu);
}

/* E's lag at NOW by offsets, given HI, the high watermark librdkafka last
 * saw for the partition (lag_mu held). 0 when every message before HI is
 * visible. Otherwise the time since this node first saw the log's end past
 * the oldest message not yet visible, on this node's own clock: no
 * producer's or broker's clock enters it, so a producer whose clock is
 * ahead cannot make a node that is behind look caught up, nor one whose
 * clock is behind make a caught-up node look behind. The log that was
 * already there at the assignment cannot be dated that way: until the
 * node has made visible the end it first saw, the lag is unknown (-1),
 * which the cluster counts as behind. The notes are taken when the poll
 * thread consumes a partition's first message of a window and when the
 * lag is read (each health round, Status, scrape). */
static int64_t plag_ms(struct plag *e, int64_t hi, int64_t now)
{
    if (e->visible >= hi) {
        e->caught_up = true;
        e->nseen = 0;
        return 0;
    }
    if (e->first_hi < 0) e->first_hi = hi;
    lag_note(e, now, hi);
    int drop = 0;
    while (drop < e->nseen && e->seen[drop].hi <= e->visible) drop++;
    if (drop) {
        memmove(e->seen, e->seen + drop, (size_t)(e->nseen - drop) * sizeof e->seen[0]);
        e->nseen -= drop;
    }
    if (!e->caught_up && e->visible < e->first_hi) return -1;
    if (!e->nseen) return 0;
    return now > e->seen[0].ms ? now - e->seen[0].ms : 0;
}

/* E's lag at NOW by the Kafka timestamps of its messages (the producers'
 * CreateTime or the broker's LogAppendTime) against this node's clock:
 * information only (dedupd_ingest_event_lag_ms), never a decision, since
 * either clock may be off (lag_mu held). */
static int64_t plag_event_ms(struct plag *e, int64_t hi, int64_t now)
{
    if (e->visible >= hi) {
        e->behind_since = 0;
        return 0;
    }
    int64_t since = 0;
    for (int k = 0; k < 2; k++)
        if (e->pending_ts[k] && (!since || e->pending_ts[k] < since)) since = e->pending_ts[k];
    if (!since && e->caught_up) {
        /* New messages fetched but not consumed yet (a moment): measured
         * from when that was first seen, not from the last visible
         * message, which on a quiet partition may be long ago. */
        if (!e->behind_since) e->behind_since = now;
        since = e->behind_since;
    }
    if (!since) since = e->visible_ts ? e->visible_ts : e->assigned_ms;
    return now > since ? now - since : 0;
}

/* Fill up to CAP (partition, lag) pairs of the assigned partitions whose
 * lag is known; return how many there are, and in *WORST the node's lag
 * (-1 when nothing is assigned or a lag is unknown). *EVENT_WORST (may be
 * NULL): the largest lag by Kafka timestamps (plag_event_ms), -1 unknown. */
static size_t lags_ms(const dd_ingest *cin, int32_t *parts, int64_t *lags, size_t cap,
                      int64_t *worst, int64_t *event_worst)
{
    dd_ingest *in = (dd_ingest *)cin; /* the mutex, not the data, changes */
    size_t n = 0;
    bool unknown = false;
    int64_t max = -1, emax = -1, now = dd_now_ms();
    pthread_mutex_lock(&in->lag_mu);
    for (size_t i = 0; i < in->nplag; i++) {
        struct plag *e = &in->plag[i];
        if (!e->assigned_ms) continue;
        int64_t lo, hi;
        if (rd_kafka_get_watermark_offsets(in->rk, in->topic, (int32_t)i, &lo, &hi) || hi < 0) {
            unknown = true;
            continue;
        }
        int64_t l = plag_ms(e, hi, now);
        int64_t el = plag_event_ms(e, hi, now);
        if (el > emax) emax = el;
        if (l < 0) {
            unknown = true;
            continue;
        }
        if (l > max) max = l;
        if (n < cap) {
            parts[n] = (int32_t)i;
            lags[n] = l;
        }
        n++;
    }
    pthread_mutex_unlock(&in->lag_mu);
    *worst = unknown ? -1 : max;
    if (event_worst) *event_worst = emax;
    return n;
}

/* ---- slots and the flusher -------------------------------------------- */

/* Room in S for partitions [0, N) (at least 16), new ones set to -1.
 * 0 or DD_ERR_NOMEM (S's partitions unchanged). */
static int slot_reserve(struct slot *s, size_t n)
{
    if (n <= s->nparts) return DD_OK;
    if (n < 16) n = 16;
    int64_t *next = realloc(s->next, n * sizeof *next);
    if (!next) return DD_ERR_NOMEM;
    s->next = next;
    int64_t *ts = realloc(s->last_ts, n * sizeof *ts);
    if (!ts) return DD_ERR_NOMEM;
    s->last_ts = ts;
    for (size_t i = s->nparts; i < n; i++) {
        next[i] = -1;
        ts[i] = 0;
    }
    s->nparts = n;
    return DD_OK;
}

/* Message PARTITION/OFFSET, Kafka timestamp TS, is in the active slot S. */
static int slot_mark(dd_ingest *in, struct slot *s, int32_t partition, int64_t offset, int64_t ts)
{
    if (partition < 0) return DD_ERR_INVALID;
    if (slot_reserve(s, (size_t)partition + 1) != DD_OK) return DD_ERR_NOMEM;
    if (s->next[partition] < 0) lag_pending(in, s == &in->slots[1], partition, offset, ts);
    s->next[partition] = offset + 1;
    s->last_ts[partition] = ts;
    if (s->messages++ == 0) s->since_ns = dd_mono_ns();
    return DD_OK;
}

/* Store the slot's offsets (its window is written) and reset them. */
static void slot_store(dd_ingest *in, struct slot *s)
{
    size_t n = 0;
    if (in->abandoned || atomic_load(&in->lost_position)) {
        /* Offsets past a window that was never written must never be
         * stored: its plays are consumed again after the restart. */
        for (size_t i = 0; i < s->nparts; i++) s->next[i] = -1;
        s->messages = 0;
        return;
    }
    for (size_t i = 0; i < s->nparts; i++) n += s->next[i] >= 0;
    if (n) {
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)n);
        if (!l) {
            dd_log_limited(&in->lim_store, 5000, DD_LOG_ERROR, MOD,
                           "msg=\"out of memory storing offsets; they are stored with the "
                           "next window\"");
            return; /* kept: the next window's store covers them */
        }
        for (size_t i = 0; i < s->nparts; i++)
            if (s->next[i] >= 0)
                rd_kafka_topic_partition_list_add(l, in->topic, (int32_t)i)->offset = s->next[i];
        rd_kafka_resp_err_t e = rd_kafka_offsets_store(in->rk, l);
        if (e) {
            for (int i = 0; i < l->cnt; i++)
                if (l->elems[i].err)
                    dd_log_limited(&in->lim_store, 5000, DD_LOG_WARN, MOD,
                                   "msg=\"offset not stored (partition no longer assigned)\" "
                                   "topic=%s partition=%" PRId32 " offset=%" PRId64 " error=\"%s\"",
                                   in->topic, l->elems[i].partition, l->elems[i].offset,
                                   rd_kafka_err2str(l->elems[i].err));
        }
        rd_kafka_topic_partition_list_destroy(l);
        for (size_t i = 0; i < s->nparts; i++) s->next[i] = -1;
    }
    s->messages = 0;
}

/* Commit the stored offsets asynchronously (commit_cb counts the result). */
static void commit_async(dd_ingest *in)
{
    rd_kafka_resp_err_t e = rd_kafka_commit(in->rk, NULL, 1);
    if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        INC(commit_errors);
        dd_log_limited(&in->lim_commit, 5000, DD_LOG_WARN, MOD,
                       "msg=\"offset commit failed\" error=\"%s\"", rd_kafka_err2str(e));
    }
}

/* wal=false: S's window is written (not yet durable); move its offsets to
 * in->written, to be stored after the next durability flush. An offset
 * that cannot be kept (out of memory) is simply not stored: the next
 * stored offset of its partition covers it, and until then a crash
 * replays it. */
static void slot_defer(dd_ingest *in, struct slot *s)
{
    struct slot *d = &in->written;
    if (slot_reserve(d, s->nparts) != DD_OK)
        dd_log_limited(&in->lim_store, 5000, DD_LOG_ERROR, MOD,
                       "msg=\"out of memory keeping offsets; they are stored later\"");
    for (size_t i = 0; i < s->nparts && i < d->nparts; i++)
        if (s->next[i] >= 0) d->next[i] = s->next[i];
    for (size_t i = 0; i < s->nparts; i++) s->next[i] = -1;
    if (d->messages == 0) d->since_ns = dd_mono_ns();
    d->messages += s->messages;
    s->messages = 0;
}

/* wal=false: flush the memtables (every write so far becomes durable),
 * then store the offsets of the windows written before it and commit them
 * asynchronously. Runs at least every durable_interval_ms while offsets
 * wait, and on revoke and stop (sync_flusher). Flush thread only. 0, or
 * DD_ERR_IO (logged, offsets kept for the next try). */
static int make_durable(dd_ingest *in)
{
    struct slot *d = &in->written;
    if (d->messages == 0) return DD_OK;
    char err[512];
    int64_t t0 = dd_mono_ns();
    int rc = dd_history_flush(in->h, err, sizeof err);
    if (rc != DD_OK) {
        INC(write_errors);
        dd_log_limited(&in->lim_write, 5000, DD_LOG_ERROR, MOD,
                       "msg=\"cannot flush written plays to SST files; offsets not committed\" "
                       "messages=%" PRIu64 " error=\"%s\"", d->messages, err);
        return rc;
    }
    uint64_t msgs = d->messages;
    ADD(messages_durable, msgs);
    INC(durable_flushes);
    slot_store(in, d);
    dd_debug(MOD, "msg=durable messages=%" PRIu64 " ms=%" PRId64 " messages_durable=%" PRIu64,
             msgs, (dd_mono_ns() - t0) / 1000000, LOAD(messages_durable));
    commit_async(in);
    return DD_OK;
}

static bool durable_due(const dd_ingest *in, int64_t now)
{
    return in->written.messages && now - in->written.since_ns >= in->durable_ns;
}

/* Slot S's window is written and its forget done: its traced users'
 * records follow (trace.h: after the main write; a failure is the
 * trace's to count, never the window's). */
static void trace_flush(dd_ingest *in, struct slot *s)
{
    const uint8_t *p = s->trace.data, *end = p + s->trace.len;
    while (p && end - p >= 6) {
        size_t ul = (size_t)p[0] << 8 | p[1];
        const uint8_t *u = p + 2;
        const uint8_t *q = u + ul;
        size_t vl = (size_t)q[0] << 24 | (size_t)q[1] << 16 | (size_t)q[2] << 8 | q[3];
        dd_trace_record_encoded(in->trace, (const char *)u, ul, q + 4, vl);
        p = q + 4 + vl;
    }
    s->trace.len = 0;
}

/* Keep a trace record of message M (a play of EV, or a forget marker) in
 * slot S until its window is written. Poll thread. */
static void trace_note(dd_ingest *in, struct slot *s, const rd_kafka_message_t *m,
                       const struct dd_playevent *ev, bool forget, int64_t ts)
{
    struct dd_trace_rec r = {
        .kind = forget ? DD_TRACE_FORGET : DD_TRACE_PLAY, .source = DD_TRACE_SRC_KAFKA,
        .at_ms = forget ? ts : ev->played_at_ms, .recorded_ms = 0,
        .scene = ev->scene, .scene_len = ev->scene_len,
        .item = forget ? "" : ev->item, .item_len = forget ? 0 : ev->item_len,
        .topic = in->topic, .topic_len = strlen(in->topic) > 255 ? 255 : strlen(in->topic),
        .partition = m->partition, .offset = m->offset};
    size_t need = 2 + ev->user_len + 4 + DD_TRACE_REC_MAX;
    if (ev->user_len > 65535 || s->trace.len + need > TRACE_PENDING_MAX + DD_TRACE_REC_MAX ||
        dd_buf_reserve(&s->trace, need) != DD_OK) {
        dd_trace_dropped(in->trace, 1);
        return;
    }
    uint8_t *p = s->trace.data + s->trace.len;
    size_t vl = dd_trace_encode(&r, p + 2 + ev->user_len + 4, DD_TRACE_REC_MAX);
    if (vl == 0) {
        dd_trace_dropped(in->trace, 1);
        return;
    }
    p[0] = (uint8_t)(ev->user_len >> 8);
    p[1] = (uint8_t)ev->user_len;
    memcpy(p + 2, ev->user, ev->user_len);
    uint8_t *q = p + 2 + ev->user_len;
    q[0] = (uint8_t)(vl >> 24);
    q[1] = (uint8_t)(vl >> 16);
    q[2] = (uint8_t)(vl >> 8);
    q[3] = (uint8_t)vl;
    s->trace.len += 2 + ev->user_len + 4 + vl;
}

/* Slot S's window is written and its forget done: count it, make it
 * visible to the lag, and store its offsets (wal) or keep them for the
 * next durability flush. T0: when the write began. */
static void window_done(dd_ingest *in, struct slot *s, uint64_t written, int64_t t0)
{
    trace_flush(in, s);
    ADD(plays_written, written);
    ADD(messages_flushed, s->messages);
    INC(flushes);
    struct dd_window_stats ws;
    dd_window_get_stats(s->w, &ws);
    ADD(duplicates, ws.duplicates - s->dups_seen);
    s->dups_seen = ws.duplicates;
    lag_visible(in, s);
    uint64_t msgs = s->messages;
    if (in->wal) {
        ADD(messages_durable, msgs);
        slot_store(in, s);
    } else {
        slot_defer(in, s);
    }
    dd_debug(MOD,
             "msg=flushed messages=%" PRIu64 " written=%" PRIu64 " ms=%" PRId64
             " messages_flushed=%" PRIu64 " plays_written=%" PRIu64,
             msgs, written, (dd_mono_ns() - t0) / 1000000, LOAD(messages_flushed),
             LOAD(plays_written));
    if (in->wal) commit_async(in);
}

/* Put into the write batch the next offset of every partition S holds
 * messages of, so that the store records its position in the log in the
 * same write as the plays (history.h, "Log positions"). None once a window
 * was abandoned or a position lost (slot_store's rule). 0 or
 * DD_ERR_INVALID (a partition or offset out of range: not written, logged). */
static int put_offsets(dd_ingest *in, const struct slot *s)
{
    if (in->abandoned || atomic_load(&in->lost_position)) return DD_OK;
    for (size_t i = 0; i < s->nparts; i++) {
        if (s->next[i] < 0) continue;
        int rc = dd_history_batch_put_offset(in->batch, in->topic, (int32_t)i, s->next[i]);
        if (rc != DD_OK) {
            dd_log_limited(&in->lim_store, 5000, DD_LOG_ERROR, MOD,
                           "msg=\"cannot record an offset in the store\" topic=%s partition=%zu "
                           "offset=%" PRId64, in->topic, i, s->next[i]);
            return rc;
        }
    }
    return DD_OK;
}

/* The forget S's window ends with, and S's offsets, in one write. A marker
 * the store refuses (the decoder lets no empty user through, so never) is
 * logged and skipped rather than retried for ever. */
static int write_forget(dd_ingest *in, struct slot *s, char *err, size_t errlen)
{
    dd_history_batch_clear(in->batch);
    if (dd_history_batch_forget(in->batch, s->fscene, s->fscene_len, s->fuser, s->fuser_len) !=
        DD_OK)
        dd_log_limited(&in->lim_write, 5000, DD_LOG_ERROR, MOD,
                       "msg=\"forget marker refused by the store; skipped\" user_bytes=%zu",
                       s->fuser_len);
    put_offsets(in, s);
    int rc = dd_history_write(in->h, in->batch, err, errlen);
    dd_history_batch_clear(in->batch);
    return rc;
}

/* Write the window of S (the flushing slot) with its offsets, or, if it
 * ends with a forget marker, the window and then the forget with the
 * offsets; each until it succeeds or the ingest is stopping; then
 * window_done. Called without in->mu. */
static void write_window(dd_ingest *in, struct slot *s)
{
    char err[512];
    int64_t backoff = BACKOFF_MIN_MS, t0 = dd_mono_ns();
    uint64_t written = 0;
    bool in_store = false; /* the window is written; the forget may remain */
    for (;;) {
        int rc = DD_OK;
        if (!in_store) {
            t0 = dd_mono_ns();
            dd_history_batch_clear(in->batch);
            if (!s->forget) put_offsets(in, s);
            rc = dd_window_flush(s->w, in->h, in->batch, &written, err, sizeof err);
            if (rc == DD_OK) {
                in_store = true;
                dd_histogram_observe(&in->flush_hist, (double)(dd_mono_ns() - t0) / 1e9);
                atomic_store_explicit(&in->st.last_flush_ms,
                                      (uint64_t)((dd_mono_ns() - t0) / 1000000),
                                      memory_order_relaxed);
            }
        }
        if (rc == DD_OK && s->forget) {
            rc = write_forget(in, s, err, sizeof err);
            if (rc == DD_OK) {
                s->forget = false;
                INC(forgets);
                dd_debug(MOD, "msg=forgotten forgets=%" PRIu64, LOAD(forgets));
            }
        }
        if (rc == DD_OK) {
            window_done(in, s, written, t0);
            return;
        }
        INC(write_errors);
        pthread_mutex_lock(&in->mu);
        int giving_up = in->stopping;
        pthread_mutex_unlock(&in->mu);
        dd_log_limited(&in->lim_write, 5000, DD_LOG_ERROR, MOD,
                       "msg=\"cannot %s%s\" plays=%zu error=\"%s\"",
                       in_store ? "forget a user's plays (marker)" : "write plays",
                       giving_up ? "; not committed, they are consumed again at restart"
                                 : "; retrying",
                       dd_window_plays(s->w), err);
        if (giving_up) break;
        dd_sleep_ms(backoff);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    /* Stopping with a broken store: drop the window (and forget) and its
     * offsets (never stored, so never committed), and store none after
     * them. */
    dd_window_clear(s->w);
    s->forget = false;
    s->trace.len = 0; /* never written: no trace of it either */
    in->abandoned = 1;
    slot_store(in, s);
}

static void *flush_main(void *arg)
{
    dd_ingest *in = arg;
    pthread_mutex_lock(&in->mu);
    for (;;) {
        int64_t now = dd_mono_ns();
        if (in->sync_req || durable_due(in, now)) {
            /* Durability first, so a stream of windows cannot starve it. */
            in->syncing = 1;
            in->sync_req = 0;
            pthread_mutex_unlock(&in->mu);
            if (make_durable(in) != DD_OK) in->written.since_ns = dd_mono_ns(); /* retry later */
            pthread_mutex_lock(&in->mu);
            in->syncing = 0;
            pthread_cond_broadcast(&in->cv);
            continue;
        }
        if (in->flush_busy) {
            struct slot *s = &in->slots[!in->active];
            pthread_mutex_unlock(&in->mu);
            write_window(in, s);
            pthread_mutex_lock(&in->mu);
            in->flush_busy = 0;
            pthread_cond_broadcast(&in->cv);
            continue;
        }
        if (in->flush_quit) break;
        if (in->written.messages) {
            int64_t at = in->written.since_ns + in->durable_ns;
            struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
            pthread_cond_timedwait(&in->cv, &in->mu, &ts); /* cv runs on CLOCK_MONOTONIC */
        } else {
            pthread_cond_wait(&in->cv, &in->mu);
        }
    }
    pthread_mutex_unlock(&in->mu);
    return NULL;
}

static int flusher_idle(dd_ingest *in)
{
    pthread_mutex_lock(&in->mu);
    int idle = !in->flush_busy;
    pthread_mutex_unlock(&in->mu);
    return idle;
}

static void wait_flusher(dd_ingest *in)
{
    pthread_mutex_lock(&in->mu);
    while (in->flush_busy) pthread_cond_wait(&in->cv, &in->mu);
    pthread_mutex_unlock(&in->mu);
}

/* Have the flusher make every written window durable and store its
 * offsets (wal=false; a no-op otherwise), and wait for it. */
static void sync_flusher(dd_ingest *in)
{
    pthread_mutex_lock(&in->mu);
    in->sync_req = 1;
    pthread_cond_broadcast(&in->cv);
    while (in->sync_req || in->syncing || in->flush_busy) pthread_cond_wait(&in->cv, &in->mu);
    pthread_mutex_unlock(&in->mu);
}

/* Hand the active slot to the (idle) flusher; the other becomes active.
 * A window is handed over when due (poll_main), full (on_message), to be
 * drained (revoke, stop), or holding early_plays while the flusher is idle
 * (poll_main): under heavy load windows are cut by size, so the flusher
 * never waits for a timer. */
static void swap(dd_ingest *in)
{
    pthread_mutex_lock(&in->mu);
    in->active = !in->active;
    in->flush_busy = 1;
    atomic_store_explicit(&in->st.pending_entries, 0, memory_order_relaxed);
    atomic_store_explicit(&in->st.pending_bytes, dd_window_bytes(in->slots[in->active].w),
                          memory_order_relaxed);
    pthread_cond_broadcast(&in->cv);
    pthread_mutex_unlock(&in->mu);
}

/* ---- pause / resume ---------------------------------------------------- */

static void set_paused(dd_ingest *in, int pause)
{
    rd_kafka_topic_partition_list_t *a = NULL;
    if (rd_kafka_assignment(in->rk, &a) == RD_KAFKA_RESP_ERR_NO_ERROR && a) {
        if (a->cnt > 0) {
            rd_kafka_resp_err_t e = pause ? rd_kafka_pause_partitions(in->rk, a)
                                          : rd_kafka_resume_partitions(in->rk, a);
            if (e)
                dd_warn(MOD, "msg=\"cannot %s partitions\" error=\"%s\"",
                        pause ? "pause" : "resume", rd_kafka_err2str(e));
        }
        rd_kafka_topic_partition_list_destroy(a);
    }
    if (pause && !in->paused) {
        INC(pauses);
        dd_debug(MOD, "msg=\"store behind: consumption paused\"");
    }
    in->paused = pause;
}

/* ---- messages ------------------------------------------------------------ */

static void dead_letter(dd_ingest *in, const rd_kafka_message_t *m, const char *reason)
{
    if (!in->dlq) return;
    char part[16], off[24];
    snprintf(part, sizeof part, "%" PRId32, m->partition);
    snprintf(off, sizeof off, "%" PRId64, m->offset);
    rd_kafka_resp_err_t e = rd_kafka_producev(
        in->dlq, RD_KAFKA_V_TOPIC(in->dlq_topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_VALUE(m->payload, m->len), RD_KAFKA_V_KEY(m->key, m->key_len),
        RD_KAFKA_V_HEADER("dd-reason", reason, -1),
        RD_KAFKA_V_HEADER("dd-topic", in->topic, -1), RD_KAFKA_V_HEADER("dd-partition", part, -1),
        RD_KAFKA_V_HEADER("dd-offset", off, -1), RD_KAFKA_V_END);
    if (e) {
        INC(dead_letter_errors);
        dd_log_limited(&in->lim_dlq, 5000, DD_LOG_WARN, MOD,
                       "msg=\"cannot produce to the dead-letter topic\" topic=%s error=\"%s\"",
                       in->dlq_topic, rd_kafka_err2str(e));
    }
}

static void dlq_delivery_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    dd_ingest *in = opaque;
    if (m->err) {
        INC(dead_letter_errors);
        dd_log_limited(&in->lim_dlq, 5000, DD_LOG_WARN, MOD,
                       "msg=\"dead-letter delivery failed\" topic=%s error=\"%s\"",
                       in->dlq_topic, rd_kafka_err2str(m->err));
    } else {
        INC(dead_lettered);
    }
}

/* WHY: more for the log line (" key=value", or ""). */
static void bad_message(dd_ingest *in, const rd_kafka_message_t *m, int reason, const char *why)
{
    INC(bad[reason]);
    dd_log_limited(&in->lim_bad, 5000, DD_LOG_WARN, MOD,
                   "msg=\"bad message skipped\" reason=%s topic=%s partition=%" PRId32
                   " offset=%" PRId64 "%s",
                   bad_names[reason], in->topic, m->partition, m->offset, why);
    dead_letter(in, m, bad_names[reason]);
}

/* What a message of the plays topic asks for: its dedupd-op header. */
enum op { OP_PLAY, OP_FORGET, OP_UNKNOWN };

static enum op message_op(const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *hdrs;
    const void *v;
    size_t n;
    if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(hdrs, OP_HEADER, &v, &n) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return OP_PLAY;
    return n == 6 && v && memcmp(v, "forget", 6) == 0 ? OP_FORGET : OP_UNKNOWN;
}

/* Whether forget marker M (decoded into EV) is signed with the key
 * (marker.h): its dedupd-mac header over EV's user, scene and time. */
static enum dd_marker_check marker_check(dd_ingest *in, const rd_kafka_message_t *m,
                                         const struct dd_playevent *ev)
{
    rd_kafka_headers_t *hdrs;
    const void *mac = NULL;
    size_t n = 0;
    if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(hdrs, DD_MARKER_HEADER, &mac, &n) != RD_KAFKA_RESP_ERR_NO_ERROR)
        mac = NULL;
    else if (!mac)
        mac = ""; /* a header without a value: present, malformed */
    return dd_marker_verify(in->forget_key, ev->user, ev->user_len, ev->scene, ev->scene_len,
                            ev->played_at_ms, mac, n);
}

static int bad_reason(int status)
{
    switch (status) {
    case DD_PLAYEVENT_OK: return -1;
    case DD_PLAYEVENT_EMPTY_USER: return DD_INGEST_BAD_EMPTY_USER;
    case DD_PLAYEVENT_EMPTY_ITEM: return DD_INGEST_BAD_EMPTY_ITEM;
    case DD_PLAYEVENT_ID_TOO_LONG: return DD_INGEST_BAD_ID_TOO_LONG;
    default: return DD_INGEST_BAD_UNDECODABLE;
    }
}

/* Add EV's play to the active slot's window. Returns -1 (added, expired:
 * *ADDED says which), a bad reason, or DD_ERR_LIMIT when it does not fit
 * (nothing changed). */
static int add_play(dd_ingest *in, struct slot *s, const struct dd_playevent *ev, bool *added)
{
    uint64_t h = dd_hash(ev->item, ev->item_len);
    int rc = dd_window_add(s->w, ev->scene, ev->scene_len, ev->user, ev->user_len, h,
                           ev->played_at_ms);
    if (rc == DD_ERR_LIMIT && dd_window_entries(s->w) == 0) {
        /* Empty yet full: give memory back from arrays grown for other
         * loads (a clear after a refusal shrinks them), try once more. */
        dd_window_clear(s->w);
        rc = dd_window_add(s->w, ev->scene, ev->scene_len, ev->user, ev->user_len, h,
                           ev->played_at_ms);
    }
    switch (rc) {
    case DD_ERR_LIMIT:
        if (dd_window_entries(s->w) > 0) return rc; /* flush, then again */
        /* Not even an empty window holds it (ids near 64 KiB with a
         * small window.max_bytes): refuse it rather than stall. */
        return DD_INGEST_BAD_ID_TOO_LONG;
    case DD_WINDOW_FUTURE: return DD_INGEST_BAD_FUTURE;
    case DD_WINDOW_EXPIRED: INC(expired); return -1;
    case DD_WINDOW_ADDED:
        *added = true;
        INC(plays);
        if (ev->key_mismatch) INC(key_mismatch);
        return -1;
    default:
        /* Lengths were checked by the decoder; out of memory while the
         * window grows: count as undecodable rather than stall. */
        return DD_INGEST_BAD_UNDECODABLE;
    }
}

/* Account for message M in the active slot. Returns 0, or DD_ERR_LIMIT
 * when it cannot be taken now (nothing changed; the caller keeps M): its
 * play does not fit, or it is a forget marker and the flusher is busy. */
static int process(dd_ingest *in, const rd_kafka_message_t *m)
{
    struct slot *s = &in->slots[in->active];
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(m, &tstype);
    if (ts <= 0) ts = dd_history_now_ms(in->h);
    struct dd_playevent ev;
    enum op op = message_op(m);
    int st = op == OP_PLAY ? dd_playevent_decode(in->dec, m->payload, m->len, m->key,
                                                 m->key_len, ts, &ev)
           : op == OP_FORGET ? dd_playevent_decode_forget(in->dec, m->payload, m->len, m->key,
                                                          m->key_len, &ev)
           : DD_PLAYEVENT_UNDECODABLE;
    int bad = bad_reason(st);
    int32_t want = -1;
    enum dd_marker_check mc = DD_MARKER_VALID;
    if (bad < 0 && op == OP_FORGET && (mc = marker_check(in, m, &ev)) != DD_MARKER_VALID)
        bad = DD_INGEST_BAD_UNAUTHENTICATED_FORGET;
    if (bad < 0 && in->assign) {
        /* A cluster node owns users by the producers' partitioner: a play
         * elsewhere would be stored where no call for its user comes. */
        want = dd_partition_of(in->partitioner, ev.user, ev.user_len, in->assign_count);
        if (want != m->partition) bad = DD_INGEST_BAD_WRONG_PARTITION;
    }
    bool cut = false;
    if (bad < 0 && op == OP_FORGET) {
        /* The marker ends its window, handed over at once: the flusher
         * must be idle to take it. */
        if (!flusher_idle(in)) return DD_ERR_LIMIT;
        memcpy(s->fscene, ev.scene, ev.scene_len);
        memcpy(s->fuser, ev.user, ev.user_len);
        s->fscene_len = ev.scene_len;
        s->fuser_len = ev.user_len;
        s->forget = cut = true;
        if (dd_trace_wanted(in->trace, ev.user, ev.user_len)) trace_note(in, s, m, &ev, true, ts);
    } else if (bad < 0) {
        bool added = false;
        bad = add_play(in, s, &ev, &added);
        if (bad == DD_ERR_LIMIT) return bad;
        /* Untraced users: one atomic load while nobody is traced. */
        if (added && dd_trace_wanted(in->trace, ev.user, ev.user_len))
            trace_note(in, s, m, &ev, false, ts);
    }
    if (bad >= 0) {
        char why[48] = "";
        if (bad == DD_INGEST_BAD_WRONG_PARTITION)
            snprintf(why, sizeof why, " user_partition=%" PRId32, want);
        else if (bad == DD_INGEST_BAD_UNAUTHENTICATED_FORGET)
            snprintf(why, sizeof why, " mac=\"%s\"", dd_marker_strerror(mc));
        bad_message(in, m, bad, why);
    }
    INC(messages);
    atomic_store_explicit(&in->st.pending_entries, dd_window_entries(s->w), memory_order_relaxed);
    atomic_store_explicit(&in->st.pending_bytes, dd_window_bytes(s->w), memory_order_relaxed);
    if (slot_mark(in, s, m->partition, m->offset, ts) != DD_OK)
        dd_log_limited(&in->lim_store, 5000, DD_LOG_ERROR, MOD,
                       "msg=\"out of memory tracking offsets\" partition=%" PRId32,
                       m->partition);
    if (cut) swap(in);
    return DD_OK;
}

/* Try the kept message again once the flusher is idle: as it is (a
 * marker, which the idle flusher takes), else in a fresh window. */
static void retry_kept(dd_ingest *in)
{
    if (!in->kept || !flusher_idle(in)) return;
    if (process(in, in->kept) == DD_ERR_LIMIT) {
        if (in->slots[in->active].messages) swap(in);
        if (process(in, in->kept) == DD_ERR_LIMIT) return; /* fresh window still full: wait */
    }
    rd_kafka_message_destroy(in->kept);
    in->kept = NULL;
    if (in->paused) set_paused(in, 0);
}

/* True the first time PARTITION is seen while the current kept message
 * waits (kept_epoch), false after. A partition that cannot be tracked (out
 * of memory growing the array) cannot have been seen before: true. */
static bool rewind_once(dd_ingest *in, int32_t partition)
{
    if (partition < 0) return false;
    if ((size_t)partition >= in->n_rewound) {
        size_t n = (size_t)partition + 1 < 64 ? 64 : (size_t)partition + 1;
        uint32_t *r = realloc(in->rewound, n * sizeof *r);
        if (!r) return true;
        memset(r + in->n_rewound, 0, (n - in->n_rewound) * sizeof *r);
        in->rewound = r;
        in->n_rewound = n;
    }
    if (in->rewound[partition] == in->kept_epoch) return false;
    in->rewound[partition] = in->kept_epoch;
    return true;
}

/* Poll thread: account for M, or, when the active window is full and the
 * flusher busy, keep M aside and pause every partition; polling goes on
 * (heartbeats, rebalances) and retry_kept adds M after the swap. */
static void on_message(dd_ingest *in, rd_kafka_message_t *m)
{
    if (m->err) {
        /* Caught up with the partition (the lag's 0). Not while a message
         * waits, kept or rewound: the end is past it. */
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF && !in->kept)
            lag_eof(in, m->partition, m->offset);
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            INC(kafka_errors);
            dd_log_limited(&in->lim_kafka, 5000, DD_LOG_WARN, MOD,
                           "msg=\"consumer error\" topic=%s partition=%" PRId32 " error=\"%s\"",
                           m->rkt ? rd_kafka_topic_name(m->rkt) : "-", m->partition,
                           rd_kafka_message_errstr(m));
        }
        rd_kafka_message_destroy(m);
        return;
    }
    if (in->kept) {
        /* A message arrived while one waits for room (later in the same
         * batch, or a partition assigned after the pause): rewind its
         * partition to it, to be fetched again, and pause it. Only the
         * first such message of a partition: the ones after it come again
         * anyway, and seeking to them would skip it. */
        if (rewind_once(in, m->partition)) {
            rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
            rd_kafka_error_t *e = NULL;
            if (l) {
                rd_kafka_topic_partition_list_add(l, in->topic, m->partition)->offset = m->offset;
                e = rd_kafka_seek_partitions(in->rk, l, 0);
                rd_kafka_pause_partitions(in->rk, l);
                rd_kafka_topic_partition_list_destroy(l);
            }
            if (!l || e) {
                /* Its position is past a message never processed: storing
                 * any later offset could skip it, so store none from now
                 * on; a restart consumes it again. */
                atomic_store(&in->lost_position, 1);
                dd_error(MOD, "msg=\"cannot rewind a partition; no more offsets are stored "
                              "until restart\" partition=%" PRId32 " offset=%" PRId64 " error=\"%s\"",
                         m->partition, m->offset, e ? rd_kafka_error_string(e) : "out of memory");
            }
            if (e) rd_kafka_error_destroy(e);
        }
        rd_kafka_message_destroy(m);
        return;
    }
    if (process(in, m) == DD_ERR_LIMIT) {
        if (flusher_idle(in)) {
            swap(in);
            if (process(in, m) != DD_ERR_LIMIT) {
                rd_kafka_message_destroy(m);
                return;
            }
        }
        in->kept = m;
        in->kept_epoch++;
        set_paused(in, 1);
        return;
    }
    rd_kafka_message_destroy(m);
}

/* Write everything consumed so far, make it durable (offsets stored) and
 * wait for it; DROP_PARTITIONS (may be NULL) lists partitions leaving: a
 * kept message of one of them is dropped unprocessed (its offset is not
 * stored, the next owner reads it). */
static void drain(dd_ingest *in, const rd_kafka_topic_partition_list_t *drop_partitions)
{
    wait_flusher(in);
    if (in->kept) {
        int drop = 0;
        for (int i = 0; drop_partitions && i < drop_partitions->cnt; i++)
            drop |= drop_partitions->elems[i].partition == in->kept->partition &&
                    strcmp(drop_partitions->elems[i].topic, in->topic) == 0;
        if (drop) {
            rd_kafka_message_destroy(in->kept);
            in->kept = NULL;
        } else {
            retry_kept(in); /* the flusher is idle: this adds it (swapping as needed) */
            wait_flusher(in);
        }
    }
    if (in->slots[in->active].messages) {
        swap(in);
        wait_flusher(in);
    }
    sync_flusher(in);
}

static void commit_sync(dd_ingest *in)
{
    rd_kafka_resp_err_t e = rd_kafka_commit(in->rk, NULL, 0);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
        INC(commits);
    } else if (e != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        INC(commit_errors);
        dd_warn(MOD, "msg=\"offset commit failed\" error=\"%s\"", rd_kafka_err2str(e));
    }
}

static void update_assigned(dd_ingest *in)
{
    rd_kafka_topic_partition_list_t *a = NULL;
    uint64_t n = 0;
    if (rd_kafka_assignment(in->rk, &a) == RD_KAFKA_RESP_ERR_NO_ERROR && a) {
        n = (uint64_t)a->cnt;
        rd_kafka_topic_partition_list_destroy(a);
    }
    atomic_store_explicit(&in->st.assigned, n, memory_order_relaxed);
}

/* The log of PARTITION must still hold NEXT, the store's position in it
 * (STORED), or start at offset 0 when the store has none (!STORED, NEXT
 * 0): if it starts later, plays between them were dropped by the topic's
 * retention before this store had them (librdkafka would silently start
 * at the beginning). Logged, counted, and the node is not ready from then
 * on (dd_ingest_log_gap). A watermark that cannot be read is logged and
 * not held against the store. */
static void check_log_start(dd_ingest *in, int32_t partition, int64_t next, bool stored)
{
    int64_t lo = 0, hi = 0;
    rd_kafka_resp_err_t e =
        rd_kafka_query_watermark_offsets(in->rk, in->topic, partition, &lo, &hi, 5000);
    if (e) {
        dd_warn(MOD, "msg=\"cannot read where the log starts; not checked for a gap\" "
                     "topic=%s partition=%" PRId32 " error=\"%s\"",
                in->topic, partition, rd_kafka_err2str(e));
        return;
    }
    if (next >= lo) return;
    if (in->accept_truncated) {
        dd_warn(MOD, "msg=\"the log starts after the store's position; accepted "
                     "(ingest.accept_truncated_log)\" topic=%s partition=%" PRId32
                     " store_next=%" PRId64 " log_start=%" PRId64 " stored=%s",
                in->topic, partition, next, lo, stored ? "yes" : "no");
        return;
    }
    INC(log_gaps);
    if (stored)
        dd_error(MOD, "msg=\"the log starts after the store's position: the plays between are "
                      "gone from the topic and missing from this store; replace the store (a "
                      "copy from a replica: cluster.bootstrap = peer) or raise the topic's "
                      "retention\" topic=%s partition=%" PRId32 " store_next=%" PRId64
                      " log_start=%" PRId64, in->topic, partition, next, lo);
    else
        dd_error(MOD, "msg=\"the store has no position in a partition whose log no longer "
                      "starts at offset 0: the plays before the log's start are missing from "
                      "this store; copy a replica's store (cluster.bootstrap = peer), or declare "
                      "them not needed with ingest.accept_truncated_log = true\" topic=%s "
                      "partition=%" PRId32 " log_start=%" PRId64, in->topic, partition, lo);
    if (!atomic_load(&in->log_gap)) {
        if (stored)
            snprintf(in->gap_why, sizeof in->gap_why,
                     "ingest: partition %" PRId32 " of %s starts at offset %" PRId64
                     ", after the store's %" PRId64 ": plays missing (see the log)",
                     partition, in->topic, lo, next);
        else
            snprintf(in->gap_why, sizeof in->gap_why,
                     "ingest: partition %" PRId32 " of %s starts at offset %" PRId64
                     " and the store has no position in it: plays missing (see the log)",
                     partition, in->topic, lo);
        atomic_store(&in->log_gap, true);
    }
}

bool dd_ingest_broker_error(dd_ingest *in, char *why, size_t whylen)
{
    pthread_mutex_lock(&in->lag_mu);
    bool recent = in->kafka_err_ns &&
                  dd_mono_ns() - in->kafka_err_ns < (int64_t)DD_INGEST_BROKER_ERROR_S * 1000000000;
    if (recent && why && whylen) snprintf(why, whylen, "%s", in->kafka_err);
    pthread_mutex_unlock(&in->lag_mu);
    return recent;
}

bool dd_ingest_log_gap(dd_ingest *in, char *why, size_t whylen)
{
    if (!atomic_load(&in->log_gap)) return false;
    if (why && whylen) snprintf(why, whylen, "%s", in->gap_why);
    return true;
}

/* Start each partition of L at the next offset the store recorded for it,
 * where it has one: the store's own position wins over committed offsets,
 * since it was written with the plays (history.h, "Log positions"). The
 * others keep the offset L has (committed, or the beginning for a new
 * store): a store written before offsets were kept, or a partition never
 * consumed here. A store that cannot be read is logged and falls back the
 * same way. Returns how many start from the store. */
static int offsets_from_store(dd_ingest *in, rd_kafka_topic_partition_list_t *l)
{
    int n = 0;
    for (int i = 0; i < l->cnt; i++) {
        int64_t next;
        char err[256];
        int rc = dd_history_get_offset(in->h, in->topic, l->elems[i].partition, &next, err,
                                       sizeof err);
        if (rc == DD_OK) {
            l->elems[i].offset = next;
            n++;
            check_log_start(in, l->elems[i].partition, next, true);
        } else if (rc == DD_ERR_NOTFOUND && in->assign) {
            /* A cluster node's store without a position here (a new store,
             * or a copy that lacks this partition) is complete only from
             * the log's offset 0, whatever the group committed. */
            l->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
            check_log_start(in, l->elems[i].partition, 0, false);
        } else if (rc != DD_ERR_NOTFOUND) {
            dd_error(MOD, "msg=\"cannot read the store's offset; starting from the committed "
                          "one\" topic=%s partition=%" PRId32 " error=\"%s\"",
                     in->topic, l->elems[i].partition, err);
        }
    }
    return n;
}

/* Store, as librdkafka's next offset to commit, each partition of L whose
 * start is a concrete offset: it came from the store's recorded position
 * (offsets_from_store), so everything before it is durable already.
 * Without it, a partition assigned with an explicit offset has neither a
 * committed nor a stored offset in librdkafka until the next window is
 * durable, and its lag (dd_kafka_stats_lag) could only be counted from
 * the consumed position, as if plays still in a window were stored. A
 * partition that fails is logged and counted from the log start instead. */
static void store_start_offsets(dd_ingest *in, const rd_kafka_topic_partition_list_t *l)
{
    int n = 0;
    for (int i = 0; i < l->cnt; i++) n += l->elems[i].offset >= 0;
    if (!n) return;
    rd_kafka_topic_partition_list_t *c = rd_kafka_topic_partition_list_new(n);
    if (!c) return; /* the lag is then counted from the log start: larger, never smaller */
    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].offset >= 0)
            rd_kafka_topic_partition_list_add(c, l->elems[i].topic, l->elems[i].partition)->offset =
                l->elems[i].offset;
    if (rd_kafka_offsets_store(in->rk, c) != RD_KAFKA_RESP_ERR_NO_ERROR)
        dd_log_limited(&in->lim_store, 5000, DD_LOG_WARN, MOD,
                       "msg=\"start offsets not stored; lag counted from the log start\" "
                       "topic=%s", in->topic);
    rd_kafka_topic_partition_list_destroy(c);
}

/* On revoke: drain, commit synchronously, then release, so the next owner
 * starts after every play written here. A lost assignment still writes
 * (idempotent) but commits nothing. */
static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    dd_ingest *in = opaque;
    int coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    rd_kafka_error_t *error = NULL;
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
    INC(rebalances);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        int stored = offsets_from_store(in, parts);
        dd_info(MOD, "msg=\"partitions assigned\" count=%d protocol=%s from_store=%d",
                parts->cnt, coop ? "cooperative" : "eager", stored);
        if (coop)
            error = rd_kafka_incremental_assign(rk, parts);
        else
            e = rd_kafka_assign(rk, parts);
        if (!error && !e) {
            lag_assign_list(in, parts, true);
            store_start_offsets(in, parts);
        }
        if (!error && !e && in->paused && parts->cnt > 0) rd_kafka_pause_partitions(rk, parts);
    } else if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        int lost = rd_kafka_assignment_lost(rk);
        dd_info(MOD, "msg=\"partitions revoked\" count=%d lost=%s protocol=%s", parts->cnt,
                lost ? "yes" : "no", coop ? "cooperative" : "eager");
        drain(in, parts);
        if (!lost) commit_sync(in);
        if (coop)
            error = rd_kafka_incremental_unassign(rk, parts);
        else
            e = rd_kafka_assign(rk, NULL);
        lag_assign_list(in, coop ? parts : NULL, false);
        if (in->paused && !in->kept) set_paused(in, 0);
    } else {
        dd_error(MOD, "msg=\"rebalance failed\" error=\"%s\"", rd_kafka_err2str(err));
        drain(in, parts);
        e = rd_kafka_assign(rk, NULL);
        lag_assign_list(in, NULL, false);
    }
    if (error) {
        dd_error(MOD, "msg=\"cannot change the assignment\" error=\"%s\"",
                 rd_kafka_error_string(error));
        rd_kafka_error_destroy(error);
    } else if (e) {
        dd_error(MOD, "msg=\"cannot change the assignment\" error=\"%s\"", rd_kafka_err2str(e));
    }
    update_assigned(in);
}

/* ---- the poll thread ------------------------------------------------------ */

/* A new store: commit each partition's beginning (its low watermark) for
 * this node's group at once, so that a restart before the first durable
 * commit also starts from the beginning, not from offsets committed for
 * the store that was lost. A failure is logged: the window until the
 * first commit (ingest.durable_interval_ms) stays open then. */
static void reset_committed(dd_ingest *in, const rd_kafka_topic_partition_list_t *assigned)
{
    rd_kafka_topic_partition_list_t *c = rd_kafka_topic_partition_list_copy(assigned);
    if (!c) return;
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int i = 0; i < c->cnt && !e; i++) {
        int64_t lo, hi;
        e = rd_kafka_query_watermark_offsets(in->rk, in->topic, c->elems[i].partition, &lo, &hi,
                                             5000);
        c->elems[i].offset = lo;
    }
    if (!e) e = rd_kafka_commit(in->rk, c, 0);
    if (e)
        dd_warn(MOD, "msg=\"new store: cannot reset the group's offsets to the beginning; a "
                     "restart before the first commit would resume at the old ones\" "
                     "group=%s error=\"%s\"", in->group_id, rd_kafka_err2str(e));
    else
        dd_info(MOD, "msg=\"new store: the group's offsets reset to the beginning\" group=%s",
                in->group_id);
    rd_kafka_topic_partition_list_destroy(c);
}

/* Assign mode: once the watcher knows the partition count, assign this
 * shard's partitions from their committed offsets (from their beginning
 * when the store is new), for good. Retried a
 * second later if librdkafka refuses. */
static void self_assign(dd_ingest *in)
{
    int32_t n = atomic_load(&in->partitions);
    if (n <= 0 || dd_mono_ns() < in->assign_retry_ns) return;
    in->assign_retry_ns = dd_mono_ns() + (int64_t)WATCH_RETRY_MS * 1000000;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(
        (int)(n / (int32_t)in->shards + 1));
    if (!l) return;
    char list[256] = "";
    size_t len = 0;
    for (int32_t p = (int32_t)in->shard; p < n; p += (int32_t)in->shards) {
        rd_kafka_topic_partition_list_add(l, in->topic, p)->offset =
            in->from_beginning ? RD_KAFKA_OFFSET_BEGINNING : RD_KAFKA_OFFSET_STORED;
        if (len < sizeof list - 16)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%" PRId32, len ? "," : "",
                                    p);
        else if (len < sizeof list - 4)
            len += (size_t)snprintf(list + len, sizeof list - len, "...");
    }
    if (l->cnt == 0) {
        dd_error(MOD, "msg=\"this shard owns no partition of the topic\" topic=%s partitions=%"
                 PRId32 " shards=%" PRIu32 " shard=%" PRIu32, in->topic, n, in->shards, in->shard);
        in->self_assigned = true; /* never ready: the map does not fit the topic */
        rd_kafka_topic_partition_list_destroy(l);
        return;
    }
    int stored = offsets_from_store(in, l);
    if (atomic_load(&in->log_gap)) {
        /* Consuming would write positions past the gap, and the next start
         * would find none: nothing is assigned until the store is replaced
         * or the gap declared (ingest.accept_truncated_log). */
        dd_error(MOD, "msg=\"a log gap: not consuming (see above)\" topic=%s", in->topic);
        in->self_assigned = true;
        rd_kafka_topic_partition_list_destroy(l);
        return;
    }
    rd_kafka_resp_err_t e = rd_kafka_assign(in->rk, l);
    if (e) {
        dd_log_limited(&in->lim_assign, 5000, DD_LOG_ERROR, MOD,
                       "msg=\"cannot assign partitions; retrying\" error=\"%s\"",
                       rd_kafka_err2str(e));
    } else {
        in->assign_count = n;
        in->self_assigned = true;
        INC(rebalances);
        lag_assign_list(in, l, true);
        store_start_offsets(in, l);
        update_assigned(in);
        dd_info(MOD, "msg=\"partitions assigned\" count=%d protocol=assign partitions=%s "
                "topic_partitions=%" PRId32 " group=%s from_store=%d", l->cnt, list, n,
                in->group_id, stored);
        if (in->from_beginning) reset_committed(in, l);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

static void *poll_main(void *arg)
{
    dd_ingest *in = arg;
    const int64_t flush_ns = (int64_t)in->flush_ms * 1000000;
    while (!atomic_load(&in->stop)) {
        int timeout = POLL_MS;
        struct slot *s = &in->slots[in->active];
        if (in->assign && !in->self_assigned) self_assign(in);
        if (in->kept) {
            retry_kept(in);
        } else if (s->messages) {
            int64_t due = s->since_ns + flush_ns - dd_mono_ns();
            if (due <= 0) {
                if (flusher_idle(in)) swap(in);
                timeout = 10; /* due: check again soon */
            } else if (dd_window_plays(s->w) >= in->early_plays) {
                /* A batch big enough to be worth a write, and the store is
                 * idle: write now rather than leave it idle until due. */
                if (flusher_idle(in)) swap(in);
            } else if (due / 1000000 < timeout) {
                timeout = (int)(due / 1000000) + 1;
            }
        }
        if (in->dlq) rd_kafka_poll(in->dlq, 0);
        /* Messages and events (rebalance, errors, statistics: their
         * callbacks run inside this call) from the consumer queue. */
        ssize_t n = rd_kafka_consume_batch_queue(in->cq, timeout, in->mbatch, POLL_BATCH);
        if (n < 0) {
            dd_log_limited(&in->lim_kafka, 5000, DD_LOG_WARN, MOD,
                           "msg=\"consume failed\" error=\"%s\"",
                           rd_kafka_err2str(rd_kafka_last_error()));
            dd_sleep_ms(timeout);
            continue;
        }
        for (ssize_t i = 0; i < n; i++) on_message(in, in->mbatch[i]);
    }
    /* Final flush and commit while still a member; then leave the group
     * (close runs the revoke callback: drain again, commit, release). */
    drain(in, NULL);
    commit_sync(in);
    rd_kafka_resp_err_t e = rd_kafka_consumer_close(in->rk);
    if (e) dd_warn(MOD, "msg=\"consumer close\" error=\"%s\"", rd_kafka_err2str(e));
    atomic_store_explicit(&in->st.assigned, 0, memory_order_relaxed);
    lag_assign_list(in, NULL, false);
    return NULL;
}

/* ---- the watch thread ------------------------------------------------------ */

/* The broker says the topic has N partitions (N > 0); *LAST is the count
 * seen before (0 = none). */
static void note_partition_count(dd_ingest *in, int32_t n, int32_t *last)
{
    atomic_store_explicit(&in->st.topic_partitions, (uint64_t)n, memory_order_relaxed);
    if (*last == 0) {
        /* The store's ownership records or compares the count (owner.h):
         * on a mismatch the count is never published, so nothing is
         * assigned (assign mode). */
        if (in->partitions_ok && !in->partitions_ok(in->partitions_ud, n)) {
            dd_error(MOD, "msg=\"the store's ownership differs from the topic's: not "
                          "consuming\" topic=%s partitions=%" PRId32, in->topic, n);
            *last = n;
            return;
        }
        atomic_store(&in->partitions, n);
        dd_info(MOD, "msg=\"topic found\" topic=%s partitions=%" PRId32, in->topic, n);
    } else if (n != *last) {
        INC(count_changes);
        if (in->assign) {
            /* Users moved between partitions: the partitions this node
             * owns no longer hold all of its users. Nothing here can fix
             * that (the cluster must be resized), so keep what is owned
             * and say so until restart. */
            atomic_store(&in->changed, true);
            dd_error(MOD, "msg=\"the topic's partition count changed: users have moved between "
                     "partitions; still consuming the partitions assigned at start\" topic=%s "
                     "was=%" PRId32 " now=%" PRId32 " assigned_by=%" PRId32, in->topic, *last, n,
                     atomic_load(&in->partitions));
        } else {
            atomic_store(&in->partitions, n);
            dd_info(MOD, "msg=\"the topic's partition count changed (the group rebalances)\" "
                    "topic=%s was=%" PRId32 " now=%" PRId32, in->topic, *last, n);
        }
    }
    *last = n;
}

static void *watch_main(void *arg)
{
    dd_ingest *in = arg;
    int32_t last = 0;
    pthread_mutex_lock(&in->mu);
    while (!in->watch_quit) {
        pthread_mutex_unlock(&in->mu);
        int32_t n = dd_kafka_partition_count(in->rk, in->rkt, METADATA_MS, &in->lim_meta);
        if (n > 0) note_partition_count(in, n, &last);
        int64_t at = dd_mono_ns() + (int64_t)(last ? WATCH_MS : WATCH_RETRY_MS) * 1000000;
        struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
        pthread_mutex_lock(&in->mu);
        while (!in->watch_quit && pthread_cond_timedwait(&in->watch_cv, &in->mu, &ts) == 0) {}
    }
    pthread_mutex_unlock(&in->mu);
    return NULL;
}

static void stop_watch(dd_ingest *in)
{
    pthread_mutex_lock(&in->mu);
    in->watch_quit = 1;
    pthread_cond_broadcast(&in->watch_cv);
    pthread_mutex_unlock(&in->mu);
    pthread_join(in->watch_thr, NULL);
}

/* ---- construction ----------------------------------------------------------- */

/* The consumer or the dead-letter producer (kafka.h has the settings);
 * returns the handle, which owns its conf, or NULL with err set. */
static rd_kafka_t *kafka_new(dd_ingest *in, rd_kafka_type_t type,
                             const struct dd_config_list *kafka, char *err, size_t errlen)
{
    char e[256];
    rd_kafka_conf_t *conf = dd_kafka_conf_new(type, kafka, err, errlen);
    if (!conf) return NULL;
    if (type == RD_KAFKA_CONSUMER && in->assign &&
        rd_kafka_conf_set(conf, "group.id", in->group_id, e, sizeof e) != RD_KAFKA_CONF_OK) {
        dd_set_err(err, errlen, "kafka.group.id: %s", e);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    if (type == RD_KAFKA_CONSUMER) {
        rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
        rd_kafka_conf_set_offset_commit_cb(conf, commit_cb);
        rd_kafka_conf_set_stats_cb(conf, stats_cb);
    } else {
        rd_kafka_conf_set_dr_msg_cb(conf, dlq_delivery_cb);
    }
    rd_kafka_conf_set_opaque(conf, in);
    rd_kafka_conf_set_log_cb(conf, dd_kafka_log_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    rd_kafka_t *rk = rd_kafka_new(type, conf, e, sizeof e);
    if (!rk) {
        dd_set_err(err, errlen, "kafka: cannot create the %s: %s",
                   type == RD_KAFKA_CONSUMER ? "consumer" : "dead-letter producer", e);
        rd_kafka_conf_destroy(conf);
    }
    return rk;
}

/* A condition variable on CLOCK_MONOTONIC (deadlines are dd_mono_ns). */
static int cond_init_mono(pthread_cond_t *cv)
{
    return dd_sys_cond_init_monotonic(cv); /* 0 or -1 (DD_ERR_NOMEM) */
}

/* The assign mode settings, and the group id offsets are committed under
 * into *GROUP (malloc'd): kafka.group.id, or in assign mode
 * "<kafka.group.id>.s<shard>.r<replica>". 0, DD_ERR_INVALID or
 * DD_ERR_NOMEM, with err set. */
static int group_of(const struct dd_ingest_conf *conf, const struct dd_config_list *kafka,
                    char **group, char *err, size_t errlen)
{
    const char *g = "";
    for (size_t i = 0; kafka && i < kafka->len; i++)
        if (strcmp(kafka->items[i].key, "group.id") == 0) g = kafka->items[i].value;
    if (!conf->assign) {
        *group = strdup(g);
    } else {
        if (conf->shards == 0 || conf->shard >= conf->shards)
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "cluster.shard: %" PRIu32 " is not below cluster.shards (%" PRIu32 ")",
                           conf->shard, conf->shards);
        if (!dd_partitioner_name((enum dd_partitioner)conf->partitioner))
            return dd_fail(DD_ERR_INVALID, err, errlen, "cluster.partitioner: unknown (%d)",
                           conf->partitioner);
        if (!g[0])
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "kafka.group.id: must be set (a cluster node commits its offsets "
                           "under <group.id>.s<shard>.r<replica>)");
        size_t n = strlen(g) + 32;
        if ((*group = malloc(n)))
            snprintf(*group, n, "%s.s%" PRIu32 ".r%" PRIu32, g, conf->shard, conf->replica);
    }
    return *group ? DD_OK : dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
}

int dd_ingest_new(dd_ingest **out, const struct dd_ingest_conf *conf,
                  const struct dd_window_conf *window, const struct dd_config_list *kafka,
                  dd_history *history, char *err, size_t errlen)
{
    *out = NULL;
    int fmt = dd_playevent_format_parse(conf->format);
    if (fmt < 0) {
        snprintf(err, errlen, "ingest.format: \"%s\" is not json or protobuf", conf->format);
        return DD_ERR_INVALID;
    }
    if (!conf->topic[0]) {
        snprintf(err, errlen, "ingest.topic: must not be empty");
        return DD_ERR_INVALID;
    }
    uint64_t per_window = window->max_bytes / 2;
    if (per_window < DD_WINDOW_MIN_BYTES) {
        snprintf(err, errlen, "window.max_bytes: at least %u", 2 * DD_WINDOW_MIN_BYTES);
        return DD_ERR_INVALID;
    }
    if (window->flush_ms == 0) {
        snprintf(err, errlen, "window.flush_ms: must be at least 1");
        return DD_ERR_INVALID;
    }
    char *group = NULL;
    int rc = group_of(conf, kafka, &group, err, errlen);
    if (rc != DD_OK) return rc;
    dd_ingest *in = calloc(1, sizeof *in);
    if (!in) {
        free(group);
        goto nomem;
    }
    rc = DD_ERR_NOMEM;
    in->group_id = group;
    in->assign = conf->assign;
    in->from_beginning = conf->from_beginning;
    in->accept_truncated = conf->accept_truncated_log;
    in->shards = conf->shards;
    in->shard = conf->shard;
    in->partitioner = (enum dd_partitioner)conf->partitioner;
    in->max_user = conf->max_id_bytes < DD_USER_MAX ? conf->max_id_bytes : DD_USER_MAX;
    in->forget_key = conf->forget_key;
    in->h = history;
    in->flush_ms = window->flush_ms;
    /* About a quarter of a window (some 64 bytes a play): 131,072 plays
     * at the default window.max_bytes. */
    in->early_plays = (size_t)(per_window / 256);
    in->wal = conf->wal;
    in->durable_ns = (int64_t)conf->durable_interval_ms * 1000000;
    in->format = fmt == DD_PLAYEVENT_JSON ? "json" : "protobuf";
    atomic_init(&in->stop, 0);
    atomic_init(&in->partitions, 0);
    atomic_init(&in->changed, false);
    atomic_store(&in->st.lag, -1);
    /* The locks first, by hand: dd_ingest_free destroys all of them. */
    int locks = 0;
    if (pthread_mutex_init(&in->mu, NULL) == 0) {
        locks++;
        if (cond_init_mono(&in->cv) == 0) {
            locks++;
            if (cond_init_mono(&in->watch_cv) == 0) {
                locks++;
                if (pthread_mutex_init(&in->lag_mu, NULL) == 0) {
                    locks++;
                    if (cond_init_mono(&in->lag_cv) == 0) locks++;
                }
            }
        }
    }
    if (locks < 5) {
        if (locks > 3) pthread_mutex_destroy(&in->lag_mu);
        if (locks > 2) pthread_cond_destroy(&in->watch_cv);
        if (locks > 1) pthread_cond_destroy(&in->cv);
        if (locks > 0) pthread_mutex_destroy(&in->mu);
        free(in->group_id);
        free(in);
        goto nomem;
    }
    dd_histogram_init(&in->flush_hist, dd_metrics_flush_bounds, DD_METRICS_FLUSH_BOUNDS_LEN);
    in->topic = strdup(conf->topic);
    if (!in->topic) goto err;
    if (conf->dead_letter_topic[0] && !(in->dlq_topic = strdup(conf->dead_letter_topic)))
        goto err;
    if ((rc = dd_playevent_decoder_new(&in->dec, (enum dd_playevent_format)fmt,
                                       conf->max_id_bytes)) != DD_OK) {
        snprintf(err, errlen, rc == DD_ERR_INVALID ? "ingest.max_id_bytes: must be at least 1"
                                                   : "out of memory");
        goto err_set;
    }
    rc = DD_ERR_NOMEM;
    if (!(in->batch = dd_history_batch_new())) goto err;
    dd_history_batch_set_unlogged(in->batch, !in->wal);
    for (int i = 0; i < 2; i++) {
        struct slot *s = &in->slots[i];
        if (dd_window_new(&s->w, history, per_window) != DD_OK ||
            !(s->fscene = malloc(DD_SCENE_MAX)) || !(s->fuser = malloc(in->max_user)))
            goto err;
    }
    rc = DD_ERR_INVALID;
    if (!(in->rk = kafka_new(in, RD_KAFKA_CONSUMER, kafka, err, errlen))) goto err_set;
    if (!(in->rkt = rd_kafka_topic_new(in->rk, in->topic, NULL))) {
        snprintf(err, errlen, "kafka: cannot create the topic handle: %s",
                 rd_kafka_err2str(rd_kafka_last_error()));
        goto err_set;
    }
    if (in->dlq_topic &&
        !(in->dlq = kafka_new(in, RD_KAFKA_PRODUCER, kafka, err, errlen)))
        goto err_set;
    /* Every event (rebalance, errors, stats) through the consumer queue,
     * which the poll thread reads in batches. */
    rd_kafka_resp_err_t e = rd_kafka_poll_set_consumer(in->rk);
    if (e) {
        snprintf(err, errlen, "kafka: %s", rd_kafka_err2str(e));
        goto err_set;
    }
    if (!(in->cq = rd_kafka_queue_get_consumer(in->rk))) {
        snprintf(err, errlen, "kafka: no consumer queue");
        goto err_set;
    }
    *out = in;
    return DD_OK;
nomem:
    snprintf(err, errlen, "out of memory");
    return DD_ERR_NOMEM;
err:
    snprintf(err, errlen, "out of memory");
err_set:
    dd_ingest_free(in);
    return rc;
}

void dd_ingest_set_partitions_check(dd_ingest *in, bool (*ok)(void *ud, int32_t n), void *ud)
{
    in->partitions_ok = ok;
    in->partitions_ud = ud;
}

void dd_ingest_set_trace(dd_ingest *in, dd_trace *trace) { in->trace = trace; }

int dd_ingest_start(dd_ingest *in)
{
    if (in->started) return DD_ERR_STATE;
    if (!in->assign) {
        rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
        if (!sub) return DD_ERR_NOMEM;
        rd_kafka_topic_partition_list_add(sub, in->topic, RD_KAFKA_PARTITION_UA);
        rd_kafka_resp_err_t e = rd_kafka_subscribe(in->rk, sub);
        rd_kafka_topic_partition_list_destroy(sub);
        if (e) {
            dd_error(MOD, "msg=\"cannot subscribe\" topic=%s error=\"%s\"", in->topic,
                     rd_kafka_err2str(e));
            return DD_ERR_UNAVAILABLE;
        }
    }
    int threads = 0;
    if (pthread_create(&in->watch_thr, NULL, watch_main, in) == 0) {
        threads++;
        if (pthread_create(&in->flush_thr, NULL, flush_main, in) == 0) {
            threads++;
            if (pthread_create(&in->poll_thr, NULL, poll_main, in) == 0) threads++;
        }
    }
    if (threads < 3) {
        if (threads > 1) {
            pthread_mutex_lock(&in->mu);
            in->flush_quit = 1;
            pthread_cond_broadcast(&in->cv);
            pthread_mutex_unlock(&in->mu);
            pthread_join(in->flush_thr, NULL);
        }
        if (threads > 0) stop_watch(in);
        if (!in->assign) rd_kafka_unsubscribe(in->rk);
        return DD_ERR_NOMEM;
    }
    in->started = 1;
    dd_info(MOD, "msg=started topic=%s format=%s flush_ms=%u wal=%s durable_interval_ms=%" PRId64
            " dead_letter_topic=%s mode=%s group=%s", in->topic, in->format, in->flush_ms,
            in->wal ? "true" : "false", in->durable_ns / 1000000,
            in->dlq_topic ? in->dlq_topic : "-", in->assign ? "assign" : "group", in->group_id);
    if (in->assign)
        dd_info(MOD, "msg=\"cluster mode: assigning this shard's partitions once the topic is "
                "found\" shards=%" PRIu32 " shard=%" PRIu32 " partitioner=%s", in->shards,
                in->shard, dd_partitioner_name(in->partitioner));
    return DD_OK;
}

static void log_stats(dd_ingest *in)
{
    struct dd_ingest_stats s;
    dd_ingest_get_stats(in, &s);
    dd_info(MOD,
            "msg=stopped messages=%" PRIu64 " messages_flushed=%" PRIu64
            " messages_durable=%" PRIu64 " durable_flushes=%" PRIu64 " plays=%" PRIu64
            " plays_written=%" PRIu64
            " duplicates=%" PRIu64 " expired=%" PRIu64 " bad_undecodable=%" PRIu64
            " bad_empty_user=%" PRIu64 " bad_empty_item=%" PRIu64 " bad_id_too_long=%" PRIu64
            " bad_future=%" PRIu64 " bad_wrong_partition=%" PRIu64
            " bad_unauthenticated_forget=%" PRIu64 " forgets=%" PRIu64
            " partition_count_changes=%" PRIu64 " key_mismatch=%" PRIu64 " flushes=%" PRIu64
            " write_errors=%" PRIu64 " commits=%" PRIu64 " commit_errors=%" PRIu64
            " dead_lettered=%" PRIu64 " dead_letter_errors=%" PRIu64 " pauses=%" PRIu64
            " rebalances=%" PRIu64,
            s.messages, s.messages_flushed, s.messages_durable, s.durable_flushes, s.plays,
            s.plays_written, s.duplicates, s.expired,
            s.bad[DD_INGEST_BAD_UNDECODABLE], s.bad[DD_INGEST_BAD_EMPTY_USER],
            s.bad[DD_INGEST_BAD_EMPTY_ITEM], s.bad[DD_INGEST_BAD_ID_TOO_LONG],
            s.bad[DD_INGEST_BAD_FUTURE], s.bad[DD_INGEST_BAD_WRONG_PARTITION],
            s.bad[DD_INGEST_BAD_UNAUTHENTICATED_FORGET], s.forgets,
            s.partition_count_changes, s.key_mismatch, s.flushes, s.write_errors, s.commits,
            s.commit_errors, s.dead_lettered, s.dead_letter_errors, s.pauses, s.rebalances);
}

void dd_ingest_stop(dd_ingest *in)
{
    if (!in || !in->started || in->stopped) return;
    in->stopped = 1;
    stop_watch(in);
    pthread_mutex_lock(&in->mu);
    in->stopping = 1;
    pthread_mutex_unlock(&in->mu);
    atomic_store(&in->stop, 1);
    pthread_join(in->poll_thr, NULL);
    pthread_mutex_lock(&in->mu);
    in->flush_quit = 1;
    pthread_cond_broadcast(&in->cv);
    pthread_mutex_unlock(&in->mu);
    pthread_join(in->flush_thr, NULL);
    if (in->kept) {
        rd_kafka_message_destroy(in->kept);
        in->kept = NULL;
    }
    if (in->dlq) {
        rd_kafka_resp_err_t e = rd_kafka_flush(in->dlq, DLQ_FLUSH_MS);
        if (e)
            dd_warn(MOD, "msg=\"dead-letter messages not delivered\" count=%d error=\"%s\"",
                    rd_kafka_outq_len(in->dlq), rd_kafka_err2str(e));
    }
    log_stats(in);
}

void dd_ingest_free(dd_ingest *in)
{
    if (!in) return;
    dd_ingest_stop(in);
    if (in->cq) rd_kafka_queue_destroy(in->cq); /* before the handle */
    if (in->rkt) rd_kafka_topic_destroy(in->rkt);
    if (in->rk) rd_kafka_destroy(in->rk);
    if (in->dlq) rd_kafka_destroy(in->dlq);
    for (int i = 0; i < 2; i++) {
        dd_window_free(in->slots[i].w);
        free(in->slots[i].next);
        free(in->slots[i].last_ts);
        free(in->slots[i].fscene);
        free(in->slots[i].fuser);
        dd_buf_free(&in->slots[i].trace);
    }
    free(in->written.next);
    free(in->written.last_ts);
    free(in->group_id);
    dd_history_batch_free(in->batch);
    dd_playevent_decoder_free(in->dec);
    free(in->topic);
    free(in->dlq_topic);
    pthread_cond_destroy(&in->cv);
    pthread_cond_destroy(&in->watch_cv);
    pthread_mutex_destroy(&in->mu);
    pthread_mutex_destroy(&in->lag_mu);
    pthread_cond_destroy(&in->lag_cv);
    free(in->rewound);
    free(in->lag_part);
    free(in->lag_val);
    free(in->plag);
    free(in);
}

void dd_ingest_sync(dd_ingest *in)
{
    if (!in->started || in->stopped) return;
    sync_flusher(in);
}

bool dd_ingest_assigned(const dd_ingest *in)
{
    return atomic_load_explicit(&in->st.assigned, memory_order_relaxed) > 0;
}

int32_t dd_ingest_partition_count(const dd_ingest *in)
{
    return atomic_load(&in->partitions);
}

bool dd_ingest_partitions_changed(const dd_ingest *in)
{
    return atomic_load(&in->changed);
}

int dd_ingest_wait_visible(dd_ingest *in, int32_t partition, int64_t offset,
                           int64_t deadline_ns)
{
    int rc = DD_OK;
    pthread_mutex_lock(&in->lag_mu);
    for (;;) {
        if (partition < 0 || (size_t)partition >= in->nplag || !in->plag[partition].assigned_ms) {
            rc = DD_ERR_STATE;
            break;
        }
        if (in->plag[partition].visible > offset) break;
        if (dd_mono_ns() >= deadline_ns) {
            rc = DD_ERR_TIMEOUT;
            break;
        }
        struct timespec ts = {(time_t)(deadline_ns / 1000000000), (long)(deadline_ns % 1000000000)};
        pthread_cond_timedwait(&in->lag_cv, &in->lag_mu, &ts);
    }
    pthread_mutex_unlock(&in->lag_mu);
    return rc;
}

int64_t dd_ingest_lag_ms(const dd_ingest *in)
{
    int64_t worst;
    lags_ms(in, NULL, NULL, 0, &worst, NULL);
    return worst;
}

size_t dd_ingest_get_partition_lag_ms(const dd_ingest *in, int32_t *partitions,
                                      int64_t *lags_ms_out, size_t cap)
{
    int64_t worst;
    return lags_ms(in, partitions, lags_ms_out, cap, &worst, NULL);
}

void dd_ingest_get_stats(const dd_ingest *in, struct dd_ingest_stats *out)
{
    memset(out, 0, sizeof *out);
    out->messages = LOAD(messages);
    out->plays = LOAD(plays);
    for (int i = 0; i < DD_INGEST_NBAD; i++) out->bad[i] = LOAD(bad[i]);
    out->expired = LOAD(expired);
    out->key_mismatch = LOAD(key_mismatch);
    out->plays_written = LOAD(plays_written);
    out->messages_flushed = LOAD(messages_flushed);
    out->messages_durable = LOAD(messages_durable);
    out->durable_flushes = LOAD(durable_flushes);
    out->flushes = LOAD(flushes);
    out->write_errors = LOAD(write_errors);
    out->commits = LOAD(commits);
    out->commit_errors = LOAD(commit_errors);
    out->dead_lettered = LOAD(dead_lettered);
    out->dead_letter_errors = LOAD(dead_letter_errors);
    out->pauses = LOAD(pauses);
    out->rebalances = LOAD(rebalances);
    out->log_gaps = LOAD(log_gaps);
    out->kafka_errors = LOAD(kafka_errors);
    out->forgets = LOAD(forgets);
    out->partition_count_changes = LOAD(count_changes);
    out->topic_partitions = LOAD(topic_partitions);
    out->assigned_partitions = LOAD(assigned);
    out->consumer_lag = atomic_load_explicit(&in->st.lag, memory_order_relaxed);
    out->last_flush_ms = LOAD(last_flush_ms);
    out->pending_entries = LOAD(pending_entries);
    out->pending_bytes = LOAD(pending_bytes);
    /* Mirrored from the windows by the flush thread after each write. */
    out->duplicates = LOAD(duplicates);
}

size_t dd_ingest_get_partition_lags(const dd_ingest *in, int32_t *partitions, int64_t *lags,
                                    size_t cap)
{
    dd_ingest *m = (dd_ingest *)in; /* the mutex, not the data, changes */
    pthread_mutex_lock(&m->lag_mu);
    size_t n = m->lag_n;
    for (size_t i = 0; i < n && i < cap; i++) {
        partitions[i] = m->lag_part[i];
        lags[i] = m->lag_val[i];
    }
    pthread_mutex_unlock(&m->lag_mu);
    return n;
}

void dd_ingest_get_flush_histogram(const dd_ingest *in, struct dd_histogram_snap *out)
{
    dd_histogram_snapshot(&in->flush_hist, out);
}

/* ---- metrics ---------------------------------------------------------- */

#define MAX_LAG_PARTITIONS 4096

void dd_ingest_collect(dd_prom *p, void *ud)
{
    dd_ingest *in = ud;
    struct dd_ingest_stats s;
    dd_ingest_get_stats(in, &s);
    dd_prom_family(p, "dedupd_ingest_messages_total",
                   "Kafka messages consumed, by result (ok, expired, or why it was bad)",
                   DD_PROM_COUNTER);
    uint64_t bad = 0;
    for (int i = 0; i < DD_INGEST_NBAD; i++) bad += s.bad[i];
    uint64_t ok = s.messages >= bad + s.expired ? s.messages - bad - s.expired : 0;
    struct dd_prom_label l = {"result", "ok"};
    dd_prom_sample_u64(p, "dedupd_ingest_messages_total", &l, 1, ok);
    l.value = "expired";
    dd_prom_sample_u64(p, "dedupd_ingest_messages_total", &l, 1, s.expired);
    for (int i = 0; i < DD_INGEST_NBAD; i++) {
        l.value = dd_ingest_bad_name(i);
        dd_prom_sample_u64(p, "dedupd_ingest_messages_total", &l, 1, s.bad[i]);
    }

    /* Per-partition lag: a scrape-time copy; the arrays are static because
     * scrapes are serialised by the registry mutex. */
    static int32_t parts[MAX_LAG_PARTITIONS];
    static int64_t lags[MAX_LAG_PARTITIONS];
    size_t n = dd_ingest_get_partition_lags(in, parts, lags, MAX_LAG_PARTITIONS);
    if (n > MAX_LAG_PARTITIONS) n = MAX_LAG_PARTITIONS;
    dd_prom_family(p, "dedupd_ingest_consumer_lag",
                   "Messages behind the partition's end, by assigned partition "
                   "(librdkafka statistics)", DD_PROM_GAUGE);
    for (size_t i = 0; i < n; i++) {
        char num[16];
        snprintf(num, sizeof num, "%d", (int)parts[i]);
        struct dd_prom_label pl = {"partition", num};
        dd_prom_sample_u64(p, "dedupd_ingest_consumer_lag", &pl, 1, (uint64_t)lags[i]);
    }
    dd_prom_family(p, "dedupd_ingest_assigned_partitions", "Partitions assigned here",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_ingest_assigned_partitions", NULL, 0,
                       s.assigned_partitions);
    /* The lag in ms, per partition and the node's (ingest.h). */
    int64_t worst, event_worst;
    n = lags_ms(in, parts, lags, MAX_LAG_PARTITIONS, &worst, &event_worst);
    if (n > MAX_LAG_PARTITIONS) n = MAX_LAG_PARTITIONS;
    dd_prom_family(p, "dedupd_ingest_partition_lag_ms",
                   "How far behind the store is, by assigned partition: 0 when every message "
                   "before the high watermark is visible, else how long ago this node first "
                   "saw the log's end past the oldest message not yet visible (its own clock)",
                   DD_PROM_GAUGE);
    for (size_t i = 0; i < n; i++) {
        char num[16];
        snprintf(num, sizeof num, "%d", (int)parts[i]);
        struct dd_prom_label pl = {"partition", num};
        dd_prom_sample_u64(p, "dedupd_ingest_partition_lag_ms", &pl, 1, (uint64_t)lags[i]);
    }
    dd_prom_family(p, "dedupd_ingest_lag_ms",
                   "The largest partition lag in ms; -1 until partitions are assigned and "
                   "their high watermarks known", DD_PROM_GAUGE);
    dd_prom_sample_f64(p, "dedupd_ingest_lag_ms", NULL, 0, (double)worst);
    dd_prom_family(p, "dedupd_ingest_event_lag_ms",
                   "Information only: the largest partition lag measured from the Kafka "
                   "timestamps (producer or broker clock) of messages not yet visible; "
                   "readiness and forwarding use dedupd_ingest_lag_ms", DD_PROM_GAUGE);
    dd_prom_sample_f64(p, "dedupd_ingest_event_lag_ms", NULL, 0, (double)event_worst);
    dd_prom_gauge(p, "dedupd_ingest_topic_partitions",
                  "The topic's partition count as last read from the broker (0 = not yet)",
                  s.topic_partitions);
    dd_prom_counter(p, "dedupd_ingest_partition_count_changes_total",
                    "Times the broker reported a new partition count for the topic",
                    s.partition_count_changes);
    dd_prom_counter(p, "dedupd_ingest_forgets_total",
                    "Forget markers applied (a user's plays in a scene deleted)", s.forgets);
    dd_prom_family(p, "dedupd_window_pending_users",
                   "(scene, user, segment) entries pending in the window being filled",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_window_pending_users", NULL, 0, s.pending_entries);
    dd_prom_family(p, "dedupd_window_pending_bytes", "Bytes held by the window being filled",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_window_pending_bytes", NULL, 0, s.pending_bytes);
    struct dd_histogram_snap fh;
    dd_ingest_get_flush_histogram(in, &fh);
    dd_prom_family(p, "dedupd_flush_duration_seconds",
                   "Duration of window writes to the history store", DD_PROM_HISTOGRAM);
    dd_prom_histogram(p, "dedupd_flush_duration_seconds", NULL, 0, &fh);
    dd_prom_counter(p, "dedupd_ingest_flushes_total", "Windows written", s.flushes);
    dd_prom_counter(p, "dedupd_ingest_durable_flushes_total",
            "Memtable flushes that made written windows durable (ingest.wal=false)",
            s.durable_flushes);
    dd_prom_family(p, "dedupd_ingest_undurable_messages",
                   "Messages written (filterable) but not yet durable: their offsets are "
                   "not committed, a crash now would consume them again",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_ingest_undurable_messages", NULL, 0,
                       s.messages_flushed >= s.messages_durable
                           ? s.messages_flushed - s.messages_durable : 0);
    dd_prom_counter(p, "dedupd_ingest_write_errors_total", "Window writes that failed (retried)",
            s.write_errors);
    dd_prom_counter(p, "dedupd_ingest_commits_total", "Offset commits that succeeded", s.commits);
    dd_prom_counter(p, "dedupd_ingest_commit_errors_total", "Offset commits that failed",
            s.commit_errors);
    dd_prom_counter(p, "dedupd_ingest_dead_lettered_total", "Bad messages copied to the dead-letter topic",
            s.dead_lettered);
    dd_prom_counter(p, "dedupd_ingest_dead_letter_errors_total",
            "Bad messages that could not be copied to the dead-letter topic",
            s.dead_letter_errors);
    dd_prom_counter(p, "dedupd_ingest_duplicates_total", "Plays already pending in their window",
            s.duplicates);
    dd_prom_counter(p, "dedupd_ingest_pauses_total", "Times consumption paused for the store",
            s.pauses);
    dd_prom_counter(p, "dedupd_ingest_rebalances_total", "Partition assignment changes", s.rebalances);
    dd_prom_counter(p, "dedupd_ingest_log_gaps_total",
                    "Partitions whose log starts after the store's position: plays missing",
                    s.log_gaps);
    dd_prom_counter(p, "dedupd_ingest_kafka_errors_total", "Errors reported by librdkafka",
            s.kafka_errors);
}
