/* SPDX-License-Identifier: Apache-2.0
 *
 * ingest.c - Kafka play ingestion; see ingest.h for the contract.
 *
 * DESIGN
 *
 * The poll thread consumes, decodes and fills the active window slot, and
 * runs librdkafka's rebalance, commit and statistics callbacks; the flush
 * thread (flush.h) writes the other slot and stores and commits its
 * offsets once durable; the watch thread (assign.h) reads the partition
 * count. librdkafka's own threads only log.
 *
 * Memory stays bounded by two windows of window.max_bytes / 2 plus the
 * batch being written: a full window while the flusher is busy keeps its
 * message aside and pauses every partition until the swap (on_message).
 * Commits are asynchronous after every durable window and synchronous on
 * revoke and stop, so a crash replays about one window, not an
 * auto-commit interval.
 *
 * Forget markers end their window: the poll thread puts the marker last
 * in the active slot and hands the slot over at once, so it waits (kept,
 * partitions paused, as for a full window) while the flusher is busy.
 *
 * Where each partition starts and, in assign mode, which partitions are
 * taken is assign.h's (dd_assign_poll); the lag is lag.h's, told of
 * assignments, each partition's first message in a slot and its end.
 */
#include "ingest.h"

#include "assign.h"
#include "dd.h"
#include "deadletter.h"
#include "flush.h"
#include "kafka.h"
#include "lag.h"
#include "log.h"
#include "marker.h"
#include "metrics.h"
#include "partition.h"
#include "playevent.h"
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

struct dd_ingest {
    dd_history *h;
    char *topic;
    const char *format; /* static: "json" or "protobuf" */
    uint32_t flush_ms;
    size_t early_plays;  /* a window this full is written as soon as the
                             flusher is idle, before flush_ms */
    const char *durable; /* static: ingest.durable as applied, "flush", "wal" or "window" */
    int64_t durable_ns;  /* ingest.durable_interval_ms, in ns */

    rd_kafka_t *rk;        /* consumer */
    rd_kafka_topic_t *rkt; /* the topic, for metadata requests */
    dd_deadletter *dlq;    /* deadletter.h, or NULL (no ingest.dead_letter_topic) */
    dd_assign *as;         /* assign.h: group id, start offsets, assign mode, watch thread */

    /* Assign mode (conf->assign). */
    bool assign;
    uint32_t shards, shard;
    enum dd_partitioner partitioner;
    size_t max_user;                 /* a forget's user id, at most */
    const dd_marker_key *forget_key; /* markers must be signed with it; NULL = none applied */
    dd_playevent_decoder *dec;
    dd_trace *trace; /* NULL = no traces (dd_ingest_set_trace) */

    dd_flush *fl; /* flush.h: the two window slots and the flush thread */

    pthread_t poll_thr;
    int started, stopped;
    atomic_int stop;

    rd_kafka_message_t *kept; /* a message waiting for room, or NULL */
    uint32_t kept_epoch;      /* bumped whenever a message is kept */
    uint32_t *rewound;        /* per partition: kept_epoch when last rewound */
    size_t n_rewound;
    int paused;
    rd_kafka_queue_t *cq; /* the consumer queue (messages and events) */
    rd_kafka_message_t *mbatch[POLL_BATCH];

    struct {
        atomic_uint_least64_t messages, plays, bad[DD_INGEST_NBAD], expired, key_mismatch, commits,
            commit_errors, pauses, rebalances, kafka_errors, assigned;
        atomic_uint_least64_t pending_entries, pending_bytes; /* of the active window */
    } st;

    dd_lag *lag; /* lag.h: fed by the poll and flush threads */
    /* The last error librdkafka reported (error_cb), for /readyz while no
     * partition is assigned; under err_mu. */
    pthread_mutex_t err_mu;
    char kafka_err[200];
    int64_t kafka_err_ns; /* when; 0 = none yet */

    struct dd_log_limit lim_bad, lim_kafka, lim_commit, lim_store;
};

#define INC(f) atomic_fetch_add_explicit(&in->st.f, 1, memory_order_relaxed)
#define ADD(f, n) atomic_fetch_add_explicit(&in->st.f, (n), memory_order_relaxed)
#define LOAD(f) atomic_load_explicit(&in->st.f, memory_order_relaxed)

/* ---- librdkafka callbacks --------------------------------------------- */

/* An error librdkafka reported, the consumer's or the dead-letter
 * producer's (its hook): counted, kept for /readyz, logged. */
static void error_cb_hook(void *opaque, int err, const char *reason)
{
    dd_ingest *in = opaque;
    INC(kafka_errors);
    /* Kept printable: the text reaches /readyz. */
    pthread_mutex_lock(&in->err_mu);
    snprintf(in->kafka_err, sizeof in->kafka_err, "%s: %s",
             rd_kafka_err2name((rd_kafka_resp_err_t)err), reason ? reason : "");
    for (char *c = in->kafka_err; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
    in->kafka_err_ns = dd_mono_ns();
    pthread_mutex_unlock(&in->err_mu);
    dd_log_limited(&in->lim_kafka, 5000,
                   err == RD_KAFKA_RESP_ERR__FATAL ? DD_LOG_ERROR : DD_LOG_WARN, MOD,
                   "msg=\"kafka error\" error=%s reason=\"%s\"",
                   rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    error_cb_hook(opaque, err, reason);
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

/* The topic's consumer lag, total and per partition, from librdkafka's
 * statistics (poll thread). */
static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    (void)rk;
    dd_ingest *in = opaque;
    dd_lag_stats(in->lag, json, len);
    return 0; /* librdkafka frees json */
}

/* The lag's watermark source (lag.h): librdkafka's cached high
 * watermark, no request. */
static int watermark(void *ud, int32_t partition, int64_t *hi)
{
    dd_ingest *in = ud;
    int64_t lo;
    return rd_kafka_get_watermark_offsets(in->rk, in->topic, partition, &lo, hi) != 0;
}

/* Every partition of ingest.topic in L (NULL: all) is (un)assigned. */
static void lag_assign_list(dd_ingest *in, const rd_kafka_topic_partition_list_t *l, bool assigned)
{
    if (!l) {
        dd_lag_unassign_all(in->lag);
        return;
    }
    for (int i = 0; i < l->cnt; i++)
        if (strcmp(l->elems[i].topic, in->topic) == 0)
            dd_lag_assign(in->lag, l->elems[i].partition, assigned);
}

/* ---- traces ------------------------------------------------------------ */

/* Keep a trace record of message M (a play of EV, or a forget marker) in
 * slot S until its window is written. Poll thread. */
static void trace_note(dd_ingest *in, struct dd_slot *s, const rd_kafka_message_t *m,
                       const struct dd_playevent *ev, bool forget, int64_t ts)
{
    struct dd_trace_rec r = {.kind = forget ? DD_TRACE_FORGET : DD_TRACE_PLAY,
                             .source = DD_TRACE_SRC_KAFKA,
                             .at_ms = forget ? ts : ev->played_at_ms,
                             .recorded_ms = 0,
                             .scene = ev->scene,
                             .scene_len = ev->scene_len,
                             .item = forget ? "" : ev->item,
                             .item_len = forget ? 0 : ev->item_len,
                             .topic = in->topic,
                             .topic_len = strlen(in->topic) > 255 ? 255 : strlen(in->topic),
                             .partition = m->partition,
                             .offset = m->offset};
    if (dd_trace_pending_add(&s->trace, ev->user, ev->user_len, &r) != DD_OK)
        dd_trace_dropped(in->trace, 1);
}

/* Hand the active slot to the (idle) flusher; the other becomes active.
 * A window is handed over when due (poll_main), full (on_message), to be
 * drained (revoke, stop), or holding early_plays while the flusher is idle
 * (poll_main): under heavy load windows are cut by size, so the flusher
 * never waits for a timer. */
static void swap(dd_ingest *in)
{
    struct dd_slot *s = dd_flush_swap(in->fl);
    atomic_store_explicit(&in->st.pending_entries, 0, memory_order_relaxed);
    atomic_store_explicit(&in->st.pending_bytes, dd_window_bytes(s->w), memory_order_relaxed);
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

/* WHY: more for the log line (" key=value", or ""). */
static void bad_message(dd_ingest *in, const rd_kafka_message_t *m, int reason, const char *why)
{
    INC(bad[reason]);
    dd_log_limited(&in->lim_bad, 5000, DD_LOG_WARN, MOD,
                   "msg=\"bad message skipped\" reason=%s topic=%s partition=%" PRId32
                   " offset=%" PRId64 "%s",
                   dd_ingest_bad_name(reason), in->topic, m->partition, m->offset, why);
    if (in->dlq) dd_deadletter_send(in->dlq, m, dd_ingest_bad_name(reason));
}

/* What add_play did with a play. */
enum add_result {
    ADD_ADDED,   /* in the window */
    ADD_EXPIRED, /* older than the retention: dropped, counted */
    ADD_FULL,    /* the window has no room: nothing changed, flush and try again */
    ADD_BAD,     /* refused: *BAD says why (enum dd_ingest_bad) */
};

/* Add EV's play to the active slot's window. */
static enum add_result add_play(dd_ingest *in, struct dd_slot *s, const struct dd_playevent *ev,
                                int *bad)
{
    uint64_t h = dd_hash(ev->item, ev->item_len);
    int rc =
        dd_window_add(s->w, ev->scene, ev->scene_len, ev->user, ev->user_len, h, ev->played_at_ms);
    if (rc == DD_ERR_LIMIT && dd_window_entries(s->w) == 0) {
        /* Empty yet full: give memory back from arrays grown for other
         * loads (a clear after a refusal shrinks them), try once more. */
        dd_window_clear(s->w);
        rc = dd_window_add(s->w, ev->scene, ev->scene_len, ev->user, ev->user_len, h,
                           ev->played_at_ms);
    }
    switch (rc) {
    case DD_ERR_LIMIT:
        if (dd_window_entries(s->w) > 0) return ADD_FULL; /* flush, then again */
        /* Not even an empty window holds it (ids near 64 KiB with a
         * small window.max_bytes): refuse it rather than stall. */
        *bad = DD_INGEST_BAD_ID_TOO_LONG;
        return ADD_BAD;
    case DD_WINDOW_FUTURE: *bad = DD_INGEST_BAD_FUTURE; return ADD_BAD;
    case DD_WINDOW_EXPIRED: INC(expired); return ADD_EXPIRED;
    case DD_WINDOW_ADDED:
        INC(plays);
        if (ev->key_mismatch) INC(key_mismatch);
        return ADD_ADDED;
    default:
        /* Lengths were checked by the decoder; out of memory while the
         * window grows: count as undecodable rather than stall. */
        *bad = DD_INGEST_BAD_UNDECODABLE;
        return ADD_BAD;
    }
}

/* Account for message M in the active slot. Returns 0, or DD_ERR_LIMIT
 * when it cannot be taken now (nothing changed; the caller keeps M): its
 * play does not fit, or it is a forget marker and the flusher is busy. */
static int process(dd_ingest *in, const rd_kafka_message_t *m)
{
    struct dd_slot *s = dd_flush_active(in->fl);
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(m, &tstype);
    if (ts <= 0) ts = dd_history_now_ms(in->h);
    struct dd_playevent ev;
    enum dd_playmsg_op op = DD_PLAYMSG_PLAY;
    char why[48];
    struct dd_playmsg_check chk = {in->forget_key, in->assign, (int)in->partitioner,
                                   dd_assign_count(in->as)};
    int bad = dd_playmsg_read(in->dec, m, ts, &chk, &ev, &op, why, sizeof why);
    bool cut = false;
    if (bad < 0 && (op == DD_PLAYMSG_FORGET || op == DD_PLAYMSG_FORGET_ALL)) {
        /* The marker ends its window, handed over at once: the flusher
         * must be idle to take it. */
        if (!dd_flush_idle(in->fl)) return DD_ERR_LIMIT;
        memcpy(s->fscene, ev.scene, ev.scene_len);
        memcpy(s->fuser, ev.user, ev.user_len);
        s->fscene_len = ev.scene_len;
        s->fuser_len = ev.user_len;
        s->fall = op == DD_PLAYMSG_FORGET_ALL;
        s->forget = cut = true;
        if (dd_trace_wanted(in->trace, ev.user, ev.user_len)) trace_note(in, s, m, &ev, true, ts);
    } else if (bad < 0) {
        enum add_result ar = add_play(in, s, &ev, &bad);
        if (ar == ADD_FULL) return DD_ERR_LIMIT;
        /* Untraced users: one atomic load while nobody is traced. */
        if (ar == ADD_ADDED && dd_trace_wanted(in->trace, ev.user, ev.user_len))
            trace_note(in, s, m, &ev, false, ts);
    }
    if (bad >= 0) bad_message(in, m, bad, why);
    INC(messages);
    atomic_store_explicit(&in->st.pending_entries, dd_window_entries(s->w), memory_order_relaxed);
    atomic_store_explicit(&in->st.pending_bytes, dd_window_bytes(s->w), memory_order_relaxed);
    if (dd_flush_mark(in->fl, m->partition, m->offset, ts) != DD_OK)
        dd_log_limited(&in->lim_store, 5000, DD_LOG_ERROR, MOD,
                       "msg=\"out of memory tracking offsets\" partition=%" PRId32, m->partition);
    if (cut) swap(in);
    return DD_OK;
}

/* Try the kept message again once the flusher is idle: as it is (a
 * marker, which the idle flusher takes), else in a fresh window. */
static void retry_kept(dd_ingest *in)
{
    if (!in->kept || !dd_flush_idle(in->fl)) return;
    if (process(in, in->kept) == DD_ERR_LIMIT) {
        if (dd_flush_active(in->fl)->messages) swap(in);
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
            dd_lag_eof(in->lag, m->partition, m->offset);
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
                dd_flush_lose_position(in->fl);
                dd_error(MOD,
                         "msg=\"cannot rewind a partition; no more offsets are stored "
                         "until restart\" partition=%" PRId32 " offset=%" PRId64 " error=\"%s\"",
                         m->partition, m->offset, e ? rd_kafka_error_string(e) : "out of memory");
            }
            if (e) rd_kafka_error_destroy(e);
        }
        rd_kafka_message_destroy(m);
        return;
    }
    if (process(in, m) == DD_ERR_LIMIT) {
        if (dd_flush_idle(in->fl)) {
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
    dd_flush_wait(in->fl);
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
            dd_flush_wait(in->fl);
        }
    }
    if (dd_flush_active(in->fl)->messages) {
        swap(in);
        dd_flush_wait(in->fl);
    }
    dd_flush_sync(in->fl);
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

bool dd_ingest_broker_error(dd_ingest *in, char *why, size_t whylen)
{
    pthread_mutex_lock(&in->err_mu);
    bool recent = in->kafka_err_ns &&
                  dd_mono_ns() - in->kafka_err_ns < (int64_t)DD_INGEST_BROKER_ERROR_S * 1000000000;
    if (recent && why && whylen) snprintf(why, whylen, "%s", in->kafka_err);
    pthread_mutex_unlock(&in->err_mu);
    return recent;
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
        int stored = dd_assign_from_store(in->as, parts);
        dd_info(MOD, "msg=\"partitions assigned\" count=%d protocol=%s from_store=%d", parts->cnt,
                coop ? "cooperative" : "eager", stored);
        if (coop)
            error = rd_kafka_incremental_assign(rk, parts);
        else
            e = rd_kafka_assign(rk, parts);
        if (!error && !e) {
            lag_assign_list(in, parts, true);
            dd_assign_store_start(in->as, parts);
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

static void *poll_main(void *arg)
{
    dd_ingest *in = arg;
    const int64_t flush_ns = (int64_t)in->flush_ms * 1000000;
    while (!atomic_load(&in->stop)) {
        int timeout = POLL_MS;
        struct dd_slot *s = dd_flush_active(in->fl);
        if (dd_assign_poll(in->as)) {
            INC(rebalances);
            update_assigned(in);
        }
        if (in->kept) {
            retry_kept(in);
        } else if (s->messages) {
            int64_t due = s->since_ns + flush_ns - dd_mono_ns();
            if (due <= 0) {
                if (dd_flush_idle(in->fl)) swap(in);
                timeout = 10; /* due: check again soon */
            } else if (dd_window_plays(s->w) >= in->early_plays) {
                /* A batch big enough to be worth a write, and the store is
                 * idle: write now rather than leave it idle until due. */
                if (dd_flush_idle(in->fl)) swap(in);
            } else if (due / 1000000 < timeout) {
                timeout = (int)(due / 1000000) + 1;
            }
        }
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

/* ---- construction ----------------------------------------------------------- */

/* The consumer (kafka.h has the settings); returns the handle, which
 * owns its conf, or NULL with err set. */
static rd_kafka_t *consumer_new(dd_ingest *in, const struct dd_config_list *kafka, char *err,
                                size_t errlen)
{
    char e[256];
    rd_kafka_conf_t *conf = dd_kafka_conf_new(RD_KAFKA_CONSUMER, kafka, err, errlen);
    if (!conf) return NULL;
    if (in->assign && rd_kafka_conf_set(conf, "group.id", dd_assign_group(in->as), e, sizeof e) !=
                          RD_KAFKA_CONF_OK) {
        dd_set_err(err, errlen, "kafka.group.id: %s", e);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    rd_kafka_conf_set_offset_commit_cb(conf, commit_cb);
    rd_kafka_conf_set_stats_cb(conf, stats_cb);
    rd_kafka_conf_set_opaque(conf, in);
    rd_kafka_conf_set_log_cb(conf, dd_kafka_log_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, e, sizeof e);
    if (!rk) {
        dd_set_err(err, errlen, "kafka: cannot create the consumer: %s", e);
        rd_kafka_conf_destroy(conf);
    }
    return rk;
}

/* ingest.durable as an enum dd_flush_durable (ingest.wal = true, the
 * older key, means window); -1 if unknown. */
static int durable_mode(const struct dd_ingest_conf *conf)
{
    if (conf->wal) return DD_DURABLE_WINDOW;
    if (!conf->durable || !strcmp(conf->durable, "flush")) return DD_DURABLE_FLUSH;
    if (!strcmp(conf->durable, "wal")) return DD_DURABLE_WAL;
    if (!strcmp(conf->durable, "window")) return DD_DURABLE_WINDOW;
    return -1;
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
    int durable = durable_mode(conf);
    if (durable < 0) {
        snprintf(err, errlen, "ingest.durable: flush, wal or window, not \"%s\"", conf->durable);
        return DD_ERR_INVALID;
    }
    static const char *const durable_names[] = {"flush", "wal", "window"};
    dd_ingest *in = calloc(1, sizeof *in);
    if (!in) goto nomem;
    int rc = DD_ERR_NOMEM;
    in->assign = conf->assign;
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
    in->durable = durable_names[durable];
    in->durable_ns = (int64_t)conf->durable_interval_ms * 1000000;
    in->format = fmt == DD_PLAYEVENT_JSON ? "json" : "protobuf";
    atomic_init(&in->stop, 0);
    /* The lock first: dd_ingest_free destroys it. */
    if (pthread_mutex_init(&in->err_mu, NULL) != 0) {
        free(in);
        goto nomem;
    }
    in->topic = strdup(conf->topic);
    if (!in->topic || dd_lag_new(&in->lag, in->topic, watermark, in) != DD_OK) goto err;
    struct dd_assign_conf ac = {
        in->topic,     conf->assign,      conf->shards,         conf->shard,
        conf->replica, conf->partitioner, conf->from_beginning, conf->accept_truncated_log};
    if ((rc = dd_assign_new(&in->as, &ac, kafka, history, in->lag, err, errlen)) != DD_OK)
        goto err_set;
    if ((rc = dd_playevent_decoder_new(&in->dec, (enum dd_playevent_format)fmt,
                                       conf->max_id_bytes)) != DD_OK) {
        snprintf(err, errlen,
                 rc == DD_ERR_INVALID ? "ingest.max_id_bytes: must be at least 1"
                                      : "out of memory");
        goto err_set;
    }
    rc = DD_ERR_NOMEM;
    struct dd_flush_conf fc = {
        history,    in->topic,   in->lag, (enum dd_flush_durable)durable, conf->durable_interval_ms,
        per_window, in->max_user};
    if (dd_flush_new(&in->fl, &fc) != DD_OK) goto err;
    rc = DD_ERR_INVALID;
    if (!(in->rk = consumer_new(in, kafka, err, errlen))) goto err_set;
    if (!(in->rkt = rd_kafka_topic_new(in->rk, in->topic, NULL))) {
        snprintf(err, errlen, "kafka: cannot create the topic handle: %s",
                 rd_kafka_err2str(rd_kafka_last_error()));
        goto err_set;
    }
    dd_assign_set_consumer(in->as, in->rk, in->rkt);
    dd_flush_set_consumer(in->fl, in->rk);
    if (conf->dead_letter_topic[0] &&
        (rc = dd_deadletter_new(&in->dlq, conf->dead_letter_topic, in->topic, kafka, error_cb_hook,
                                in, err, errlen)) != DD_OK)
        goto err_set;
    rc = DD_ERR_INVALID;
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
    dd_assign_set_partitions_check(in->as, ok, ud);
}

void dd_ingest_set_trace(dd_ingest *in, dd_trace *trace)
{
    in->trace = trace;
    dd_flush_set_trace(in->fl, trace);
}

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
    if (dd_assign_start(in->as) == DD_OK) {
        threads++;
        if (dd_flush_start(in->fl) == DD_OK) {
            threads++;
            if (pthread_create(&in->poll_thr, NULL, poll_main, in) == 0) threads++;
        }
    }
    if (threads < 3) {
        if (threads > 1) dd_flush_stop(in->fl);
        if (threads > 0) dd_assign_stop(in->as);
        if (!in->assign) rd_kafka_unsubscribe(in->rk);
        return DD_ERR_NOMEM;
    }
    in->started = 1;
    dd_info(MOD,
            "msg=started topic=%s format=%s flush_ms=%u durable=%s durable_interval_ms=%" PRId64
            " dead_letter_topic=%s mode=%s group=%s",
            in->topic, in->format, in->flush_ms, in->durable, in->durable_ns / 1000000,
            in->dlq ? dd_deadletter_topic(in->dlq) : "-", in->assign ? "assign" : "group",
            dd_assign_group(in->as));
    if (in->assign)
        dd_info(MOD,
                "msg=\"cluster mode: assigning this shard's partitions once the topic is "
                "found\" shards=%" PRIu32 " shard=%" PRIu32 " partitioner=%s",
                in->shards, in->shard, dd_partitioner_name(in->partitioner));
    return DD_OK;
}

static void log_stats(dd_ingest *in)
{
    struct dd_ingest_stats s;
    dd_ingest_get_stats(in, &s);
    dd_info(MOD,
            "msg=stopped messages=%" PRIu64 " messages_flushed=%" PRIu64
            " messages_durable=%" PRIu64 " durable_flushes=%" PRIu64 " plays=%" PRIu64
            " plays_written=%" PRIu64 " duplicates=%" PRIu64 " expired=%" PRIu64
            " bad_undecodable=%" PRIu64 " bad_empty_user=%" PRIu64 " bad_empty_item=%" PRIu64
            " bad_id_too_long=%" PRIu64 " bad_future=%" PRIu64 " bad_wrong_partition=%" PRIu64
            " bad_unauthenticated_forget=%" PRIu64 " forgets=%" PRIu64
            " partition_count_changes=%" PRIu64 " key_mismatch=%" PRIu64 " flushes=%" PRIu64
            " write_errors=%" PRIu64 " commits=%" PRIu64 " commit_errors=%" PRIu64
            " dead_lettered=%" PRIu64 " dead_letter_errors=%" PRIu64 " pauses=%" PRIu64
            " rebalances=%" PRIu64,
            s.messages, s.messages_flushed, s.messages_durable, s.durable_flushes, s.plays,
            s.plays_written, s.duplicates, s.expired, s.bad[DD_INGEST_BAD_UNDECODABLE],
            s.bad[DD_INGEST_BAD_EMPTY_USER], s.bad[DD_INGEST_BAD_EMPTY_ITEM],
            s.bad[DD_INGEST_BAD_ID_TOO_LONG], s.bad[DD_INGEST_BAD_FUTURE],
            s.bad[DD_INGEST_BAD_WRONG_PARTITION], s.bad[DD_INGEST_BAD_UNAUTHENTICATED_FORGET],
            s.forgets, s.partition_count_changes, s.key_mismatch, s.flushes, s.write_errors,
            s.commits, s.commit_errors, s.dead_lettered, s.dead_letter_errors, s.pauses,
            s.rebalances);
}

void dd_ingest_stop(dd_ingest *in)
{
    if (!in || !in->started || in->stopped) return;
    in->stopped = 1;
    dd_assign_stop(in->as);
    dd_flush_give_up(in->fl);
    atomic_store(&in->stop, 1);
    pthread_join(in->poll_thr, NULL);
    dd_flush_stop(in->fl);
    if (in->kept) {
        rd_kafka_message_destroy(in->kept);
        in->kept = NULL;
    }
    if (in->dlq) dd_deadletter_flush(in->dlq);
    log_stats(in);
}

void dd_ingest_free(dd_ingest *in)
{
    if (!in) return;
    dd_ingest_stop(in);
    if (in->cq) rd_kafka_queue_destroy(in->cq); /* before the handle */
    if (in->rkt) rd_kafka_topic_destroy(in->rkt);
    if (in->rk) rd_kafka_destroy(in->rk);
    dd_deadletter_free(in->dlq);
    dd_flush_free(in->fl);
    dd_playevent_decoder_free(in->dec);
    free(in->topic);
    pthread_mutex_destroy(&in->err_mu);
    dd_assign_free(in->as); /* its watch thread stopped with the ingest */
    dd_lag_free(in->lag);
    free(in->rewound);
    free(in);
}

void dd_ingest_sync(dd_ingest *in)
{
    if (!in->started || in->stopped) return;
    dd_flush_sync(in->fl);
}

bool dd_ingest_assigned(const dd_ingest *in)
{
    return atomic_load_explicit(&in->st.assigned, memory_order_relaxed) > 0;
}

bool dd_ingest_log_gap(dd_ingest *in, char *why, size_t whylen)
{
    return dd_assign_log_gap(in->as, why, whylen);
}

int32_t dd_ingest_partition_count(const dd_ingest *in)
{
    return dd_assign_partition_count(in->as);
}

bool dd_ingest_partitions_changed(const dd_ingest *in)
{
    return dd_assign_partitions_changed(in->as);
}

int dd_ingest_wait_visible(dd_ingest *in, int32_t partition, int64_t offset, int64_t deadline_ns)
{
    return dd_lag_wait_visible(in->lag, partition, offset, deadline_ns);
}

int64_t dd_ingest_lag_ms(const dd_ingest *in)
{
    int64_t worst;
    dd_lag_ms(in->lag, NULL, NULL, 0, &worst, NULL);
    return worst;
}

void dd_ingest_get_stats(const dd_ingest *in, struct dd_ingest_stats *out)
{
    memset(out, 0, sizeof *out);
    out->messages = LOAD(messages);
    out->plays = LOAD(plays);
    for (int i = 0; i < DD_INGEST_NBAD; i++) out->bad[i] = LOAD(bad[i]);
    out->expired = LOAD(expired);
    out->key_mismatch = LOAD(key_mismatch);
    struct dd_flush_stats fs;
    dd_flush_get_stats(in->fl, &fs);
    out->plays_written = fs.plays_written;
    out->messages_flushed = fs.messages_flushed;
    out->messages_durable = fs.messages_durable;
    out->durable_flushes = fs.durable_flushes;
    out->flushes = fs.flushes;
    out->write_errors = fs.write_errors;
    out->commits = LOAD(commits);
    out->commit_errors = LOAD(commit_errors) + fs.commit_errors;
    out->dead_lettered = dd_deadletter_delivered(in->dlq);
    out->dead_letter_errors = dd_deadletter_errors(in->dlq);
    out->pauses = LOAD(pauses);
    out->rebalances = LOAD(rebalances);
    out->kafka_errors = LOAD(kafka_errors);
    out->forgets = fs.forgets;
    struct dd_assign_stats as;
    dd_assign_get_stats(in->as, &as);
    out->log_gaps = as.log_gaps;
    out->partition_count_changes = as.count_changes;
    out->topic_partitions = as.topic_partitions;
    out->assigned_partitions = LOAD(assigned);
    out->consumer_lag = dd_lag_consumer_total(in->lag);
    out->last_flush_ms = fs.last_flush_ms;
    out->pending_entries = LOAD(pending_entries);
    out->pending_bytes = LOAD(pending_bytes);
    /* Mirrored from the windows by the flush thread after each write. */
    out->duplicates = fs.duplicates;
}

/* ---- metrics ---------------------------------------------------------- */

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

    dd_lag_collect(p, in->lag);
    dd_prom_family(p, "dedupd_ingest_assigned_partitions", "Partitions assigned here",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_ingest_assigned_partitions", NULL, 0, s.assigned_partitions);
    dd_prom_gauge(p, "dedupd_ingest_topic_partitions",
                  "The topic's partition count as last read from the broker (0 = not yet)",
                  s.topic_partitions);
    dd_prom_counter(p, "dedupd_ingest_partition_count_changes_total",
                    "Times the broker reported a new partition count for the topic",
                    s.partition_count_changes);
    dd_prom_family(p, "dedupd_window_pending_users",
                   "(scene, user, segment) entries pending in the window being filled",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_window_pending_users", NULL, 0, s.pending_entries);
    dd_prom_family(p, "dedupd_window_pending_bytes", "Bytes held by the window being filled",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_window_pending_bytes", NULL, 0, s.pending_bytes);
    dd_flush_collect(p, in->fl);
    dd_prom_counter(p, "dedupd_ingest_commits_total", "Offset commits that succeeded", s.commits);
    dd_prom_counter(p, "dedupd_ingest_commit_errors_total", "Offset commits that failed",
                    s.commit_errors);
    dd_prom_counter(p, "dedupd_ingest_dead_lettered_total",
                    "Bad messages copied to the dead-letter topic", s.dead_lettered);
    dd_prom_counter(p, "dedupd_ingest_dead_letter_errors_total",
                    "Bad messages that could not be copied to the dead-letter topic",
                    s.dead_letter_errors);
    dd_prom_counter(p, "dedupd_ingest_pauses_total", "Times consumption paused for the store",
                    s.pauses);
    dd_prom_counter(p, "dedupd_ingest_rebalances_total", "Partition assignment changes",
                    s.rebalances);
    dd_prom_counter(p, "dedupd_ingest_log_gaps_total",
                    "Partitions whose log starts after the store's position: plays missing",
                    s.log_gaps);
    dd_prom_counter(p, "dedupd_ingest_kafka_errors_total", "Errors reported by librdkafka",
                    s.kafka_errors);
}
