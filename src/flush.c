/* SPDX-License-Identifier: Apache-2.0
 *
 * flush.c - ingest's window slots and flush thread; see flush.h. Its log
 * lines are module=ingest, as operators know them.
 *
 * DESIGN
 *
 * The flusher owns slots[!active] while flush_busy is set (mu, cv); slots
 * swap only while it is idle, so windows are written, and offsets stored,
 * in consumption order. A failed write or durability flush is retried
 * with backoff and stores nothing; a full disk is such a failure
 * (history.h, "Full disk"), so ingest resumes by itself once there is
 * room, no offset past what is durable.
 *
 * Durability (ingest.durable): with flush windows skip RocksDB's WAL
 * (Kafka already is a durable log) and their offsets wait in the "written"
 * slot for the next durable point, a memtable flush, which covers every
 * write before it, so a stored offset never runs ahead of the disk
 * (make_durable). With wal windows go through the WAL without an fsync
 * each and the durable point fsyncs the WAL instead; memtables are then
 * flushed by RocksDB when full. With window a window's write is fsync'd
 * (history.sync) and its offsets are stored right after it. Commits are
 * asynchronous after every durable point or window.
 *
 * A slot holds at most one forget, last: the flusher writes the window,
 * then runs the forget, then stores the offsets, so plays before the
 * marker, pending or written, are deleted and the ones after it are in
 * the next window.
 */
#include "flush.h"

#include "dd.h"
#include "lag.h"
#include "log.h"
#include "sys.h"
#include "metrics.h"
#include "trace.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOD "ingest"
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

struct dd_flush {
    dd_history *h;
    const char *topic;             /* borrowed */
    dd_lag *lag;                   /* borrowed */
    dd_trace *trace;               /* NULL = none */
    rd_kafka_t *rk;                /* the consumer (dd_flush_set_consumer) */
    enum dd_flush_durable durable; /* ingest.durable */
    int64_t durable_ns;            /* ingest.durable_interval_ms, in ns */
    dd_history_batch *batch;

    struct dd_slot slots[2];
    int active; /* index of the slot being filled */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    int flush_busy;    /* the flusher holds slots[!active] */
    int flush_quit;
    int stopping;  /* the flusher gives up retrying failed writes */
    int abandoned; /* a window was dropped unwritten: store no more
                             offsets (flush thread only) */
    /* durable = flush or wal: offsets of windows written but not yet
     * durable (flush thread only; since_ns = when the oldest was written). */
    struct dd_slot written;
    int sync_req;             /* a durability flush is asked for */
    int syncing;              /* the flusher is running one */
    atomic_int lost_position; /* dd_flush_lose_position */
    pthread_t thr;
    bool started;

    struct {
        atomic_uint_least64_t duplicates, plays_written, messages_flushed, messages_durable,
            flushes, durable_flushes, write_errors, commit_errors, last_flush_ms, forgets;
    } st;
    struct dd_histogram flush_hist; /* window write durations, lock-free */
    struct dd_log_limit lim_write, lim_commit, lim_store;
};

#define INC(x) atomic_fetch_add_explicit(&f->st.x, 1, memory_order_relaxed)
#define ADD(x, n) atomic_fetch_add_explicit(&f->st.x, (n), memory_order_relaxed)
#define LOAD(x) atomic_load_explicit(&f->st.x, memory_order_relaxed)

/* ---- slots and the flush thread ------------------------------------------ */

/* Room in S for partitions [0, N) (at least 16), new ones set to -1.
 * 0 or DD_ERR_NOMEM (S's partitions unchanged). */
static int slot_reserve(struct dd_slot *s, size_t n)
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

int dd_flush_mark(dd_flush *f, int32_t partition, int64_t offset, int64_t ts)
{
    struct dd_slot *s = &f->slots[f->active];
    if (partition < 0) return DD_ERR_INVALID;
    if (slot_reserve(s, (size_t)partition + 1) != DD_OK) return DD_ERR_NOMEM;
    if (s->next[partition] < 0) dd_lag_pending(f->lag, s == &f->slots[1], partition, offset, ts);
    s->next[partition] = offset + 1;
    s->last_ts[partition] = ts;
    if (s->messages++ == 0) s->since_ns = dd_mono_ns();
    return DD_OK;
}

/* Store the slot's offsets (its window is written) and reset them. */
static void slot_store(dd_flush *f, struct dd_slot *s)
{
    size_t n = 0;
    if (f->abandoned || atomic_load(&f->lost_position)) {
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
            dd_log_limited(&f->lim_store, 5000, DD_LOG_ERROR, MOD,
                           "msg=\"out of memory storing offsets; they are stored with the "
                           "next window\"");
            return; /* kept: the next window's store covers them */
        }
        for (size_t i = 0; i < s->nparts; i++)
            if (s->next[i] >= 0)
                rd_kafka_topic_partition_list_add(l, f->topic, (int32_t)i)->offset = s->next[i];
        rd_kafka_resp_err_t e = rd_kafka_offsets_store(f->rk, l);
        if (e) {
            for (int i = 0; i < l->cnt; i++)
                if (l->elems[i].err)
                    dd_log_limited(&f->lim_store, 5000, DD_LOG_WARN, MOD,
                                   "msg=\"offset not stored (partition no longer assigned)\" "
                                   "topic=%s partition=%" PRId32 " offset=%" PRId64 " error=\"%s\"",
                                   f->topic, l->elems[i].partition, l->elems[i].offset,
                                   rd_kafka_err2str(l->elems[i].err));
        }
        rd_kafka_topic_partition_list_destroy(l);
        for (size_t i = 0; i < s->nparts; i++) s->next[i] = -1;
    }
    s->messages = 0;
}

/* Commit the stored offsets asynchronously (commit_cb counts the result). */
static void commit_async(dd_flush *f)
{
    rd_kafka_resp_err_t e = rd_kafka_commit(f->rk, NULL, 1);
    if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        INC(commit_errors);
        dd_log_limited(&f->lim_commit, 5000, DD_LOG_WARN, MOD,
                       "msg=\"offset commit failed\" error=\"%s\"", rd_kafka_err2str(e));
    }
}

/* durable = flush or wal: S's window is written (not yet durable); move
 * its offsets to f->written, to be stored after the next durable point. An offset
 * that cannot be kept (out of memory) is simply not stored: the next
 * stored offset of its partition covers it, and until then a crash
 * replays it. */
static void slot_defer(dd_flush *f, struct dd_slot *s)
{
    struct dd_slot *d = &f->written;
    if (slot_reserve(d, s->nparts) != DD_OK)
        dd_log_limited(&f->lim_store, 5000, DD_LOG_ERROR, MOD,
                       "msg=\"out of memory keeping offsets; they are stored later\"");
    for (size_t i = 0; i < s->nparts && i < d->nparts; i++)
        if (s->next[i] >= 0) d->next[i] = s->next[i];
    for (size_t i = 0; i < s->nparts; i++) s->next[i] = -1;
    if (d->messages == 0) d->since_ns = dd_mono_ns();
    d->messages += s->messages;
    s->messages = 0;
}

/* The durable point: flush the memtables (durable = flush) or fsync the
 * WAL (wal), so every write so far becomes durable, then store the offsets
 * of the windows written before it and commit them asynchronously. Runs at
 * least every durable_interval_ms while offsets wait, and on revoke and
 * stop (dd_flush_sync). Flush thread only. 0, or DD_ERR_IO (logged,
 * offsets kept for the next try). */
static int make_durable(dd_flush *f)
{
    struct dd_slot *d = &f->written;
    if (d->messages == 0) return DD_OK;
    char err[512];
    int64_t t0 = dd_mono_ns();
    bool wal = f->durable == DD_DURABLE_WAL;
    int rc =
        wal ? dd_history_sync_wal(f->h, err, sizeof err) : dd_history_flush(f->h, err, sizeof err);
    if (rc != DD_OK) {
        INC(write_errors);
        dd_log_limited(&f->lim_write, 5000, DD_LOG_ERROR, MOD,
                       "msg=\"cannot %s; offsets not committed\" "
                       "messages=%" PRIu64 " error=\"%s\"",
                       wal ? "sync the WAL" : "flush written plays to SST files", d->messages, err);
        return rc;
    }
    uint64_t msgs = d->messages;
    ADD(messages_durable, msgs);
    INC(durable_flushes);
    slot_store(f, d);
    dd_debug(MOD, "msg=durable messages=%" PRIu64 " ms=%" PRId64 " messages_durable=%" PRIu64, msgs,
             (dd_mono_ns() - t0) / 1000000, LOAD(messages_durable));
    commit_async(f);
    return DD_OK;
}

static bool durable_due(const dd_flush *f, int64_t now)
{
    return f->written.messages && now - f->written.since_ns >= f->durable_ns;
}

/* Slot S's window is written and its forget done: count it, make it
 * visible to the lag, and store its offsets (durable = window) or keep
 * them for the next durable point. T0: when the write began. */
static void window_done(dd_flush *f, struct dd_slot *s, uint64_t written, int64_t t0)
{
    dd_trace_record_pending(f->trace, &s->trace); /* trace.h: after the write */
    ADD(plays_written, written);
    ADD(messages_flushed, s->messages);
    INC(flushes);
    struct dd_window_stats ws;
    dd_window_get_stats(s->w, &ws);
    ADD(duplicates, ws.duplicates - s->dups_seen);
    s->dups_seen = ws.duplicates;
    dd_lag_visible(f->lag, s == &f->slots[1], s->next, s->last_ts, s->nparts);
    uint64_t msgs = s->messages;
    bool now = f->durable == DD_DURABLE_WINDOW;
    if (now) {
        ADD(messages_durable, msgs);
        slot_store(f, s);
    } else {
        slot_defer(f, s);
    }
    dd_debug(MOD,
             "msg=flushed messages=%" PRIu64 " written=%" PRIu64 " ms=%" PRId64
             " messages_flushed=%" PRIu64 " plays_written=%" PRIu64,
             msgs, written, (dd_mono_ns() - t0) / 1000000, LOAD(messages_flushed),
             LOAD(plays_written));
    if (now) commit_async(f);
}

/* Put into the write batch the next offset of every partition S holds
 * messages of, so that the store records its position in the log in the
 * same write as the plays (history.h, "Log positions"). None once a window
 * was abandoned or a position lost (slot_store's rule). 0 or
 * DD_ERR_INVALID (a partition or offset out of range: not written, logged). */
static int put_offsets(dd_flush *f, const struct dd_slot *s)
{
    if (f->abandoned || atomic_load(&f->lost_position)) return DD_OK;
    for (size_t i = 0; i < s->nparts; i++) {
        if (s->next[i] < 0) continue;
        int rc = dd_history_batch_put_offset(f->batch, f->topic, (int32_t)i, s->next[i]);
        if (rc != DD_OK) {
            dd_log_limited(&f->lim_store, 5000, DD_LOG_ERROR, MOD,
                           "msg=\"cannot record an offset in the store\" topic=%s partition=%zu "
                           "offset=%" PRId64,
                           f->topic, i, s->next[i]);
            return rc;
        }
    }
    return DD_OK;
}

/* The forget S's window ends with, and S's offsets, in one write. A marker
 * the store refuses (the decoder lets no empty user through, so never) is
 * logged and skipped rather than retried for ever. */
/* One scene of an all-scenes marker's user, into the batch. */
struct forget_all {
    dd_history_batch *b;
    const char *user;
    size_t user_len;
};
static int forget_scene(void *ud, const char *scene, size_t scene_len)
{
    struct forget_all *fa = ud;
    return dd_history_batch_forget(fa->b, scene, scene_len, fa->user, fa->user_len);
}

static int write_forget(dd_flush *f, struct dd_slot *s, char *err, size_t errlen)
{
    dd_history_batch_clear(f->batch);
    int frc;
    if (s->fall) {
        /* Every scene the store holds for the user now: the window before
         * the marker is written already, so its plays are found too. */
        struct forget_all fa = {f->batch, s->fuser, s->fuser_len};
        frc = dd_history_user_scenes(f->h, s->fuser, s->fuser_len, forget_scene, &fa, err, errlen);
        if (frc == DD_ERR_IO || frc == DD_ERR_NOMEM) return frc; /* retried */
    } else {
        frc = dd_history_batch_forget(f->batch, s->fscene, s->fscene_len, s->fuser, s->fuser_len);
    }
    if (frc != DD_OK)
        dd_log_limited(&f->lim_write, 5000, DD_LOG_ERROR, MOD,
                       "msg=\"forget marker refused by the store; skipped\" user_bytes=%zu",
                       s->fuser_len);
    put_offsets(f, s);
    int rc = dd_history_write(f->h, f->batch, err, errlen);
    dd_history_batch_clear(f->batch);
    return rc;
}

/* Write the window of S (the flushing slot) with its offsets, or, if it
 * ends with a forget marker, the window and then the forget with the
 * offsets; each until it succeeds or the ingest is stopping; then
 * window_done. Called without f->mu. */
static void write_window(dd_flush *f, struct dd_slot *s)
{
    char err[512];
    int64_t backoff = BACKOFF_MIN_MS, t0 = dd_mono_ns();
    uint64_t written = 0;
    bool in_store = false; /* the window is written; the forget may remain */
    for (;;) {
        int rc = DD_OK;
        if (!in_store) {
            t0 = dd_mono_ns();
            dd_history_batch_clear(f->batch);
            if (!s->forget) put_offsets(f, s);
            rc = dd_window_flush(s->w, f->h, f->batch, &written, err, sizeof err);
            if (rc == DD_OK) {
                in_store = true;
                dd_histogram_observe(&f->flush_hist, (double)(dd_mono_ns() - t0) / 1e9);
                atomic_store_explicit(&f->st.last_flush_ms,
                                      (uint64_t)((dd_mono_ns() - t0) / 1000000),
                                      memory_order_relaxed);
            }
        }
        if (rc == DD_OK && s->forget) {
            rc = write_forget(f, s, err, sizeof err);
            if (rc == DD_OK) {
                s->forget = s->fall = false;
                INC(forgets);
                dd_debug(MOD, "msg=forgotten forgets=%" PRIu64, LOAD(forgets));
            }
        }
        if (rc == DD_OK) {
            window_done(f, s, written, t0);
            return;
        }
        INC(write_errors);
        pthread_mutex_lock(&f->mu);
        int giving_up = f->stopping;
        pthread_mutex_unlock(&f->mu);
        dd_log_limited(
            &f->lim_write, 5000, DD_LOG_ERROR, MOD, "msg=\"cannot %s%s\" plays=%zu error=\"%s\"",
            in_store ? "forget a user's plays (marker)" : "write plays",
            giving_up ? "; not committed, they are consumed again at restart" : "; retrying",
            dd_window_plays(s->w), err);
        if (giving_up) break;
        dd_sleep_ms(backoff);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    /* Stopping with a broken store: drop the window (and forget) and its
     * offsets (never stored, so never committed), and store none after
     * them. */
    dd_window_clear(s->w);
    s->forget = s->fall = false;
    dd_trace_pending_clear(&s->trace); /* never written: no trace of it either */
    f->abandoned = 1;
    slot_store(f, s);
}

static void *flush_main(void *arg)
{
    dd_flush *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        int64_t now = dd_mono_ns();
        if (f->sync_req || durable_due(f, now)) {
            /* Durability first, so a stream of windows cannot starve it. */
            f->syncing = 1;
            f->sync_req = 0;
            pthread_mutex_unlock(&f->mu);
            if (make_durable(f) != DD_OK) f->written.since_ns = dd_mono_ns(); /* retry later */
            pthread_mutex_lock(&f->mu);
            f->syncing = 0;
            pthread_cond_broadcast(&f->cv);
            continue;
        }
        if (f->flush_busy) {
            struct dd_slot *s = &f->slots[!f->active];
            pthread_mutex_unlock(&f->mu);
            write_window(f, s);
            pthread_mutex_lock(&f->mu);
            f->flush_busy = 0;
            pthread_cond_broadcast(&f->cv);
            continue;
        }
        if (f->flush_quit) break;
        if (f->written.messages) {
            int64_t at = f->written.since_ns + f->durable_ns;
            struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
            pthread_cond_timedwait(&f->cv, &f->mu, &ts); /* cv runs on CLOCK_MONOTONIC */
        } else {
            pthread_cond_wait(&f->cv, &f->mu);
        }
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

bool dd_flush_idle(dd_flush *f)
{
    pthread_mutex_lock(&f->mu);
    bool idle = !f->flush_busy;
    pthread_mutex_unlock(&f->mu);
    return idle;
}

void dd_flush_wait(dd_flush *f)
{
    pthread_mutex_lock(&f->mu);
    while (f->flush_busy) pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
}

void dd_flush_sync(dd_flush *f)
{
    pthread_mutex_lock(&f->mu);
    f->sync_req = 1;
    pthread_cond_broadcast(&f->cv);
    while (f->sync_req || f->syncing || f->flush_busy) pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
}

struct dd_slot *dd_flush_swap(dd_flush *f)
{
    pthread_mutex_lock(&f->mu);
    f->active = !f->active;
    f->flush_busy = 1;
    struct dd_slot *s = &f->slots[f->active];
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return s;
}

/* ---- lifecycle ------------------------------------------------------------- */

static void slot_free(struct dd_slot *s)
{
    dd_window_free(s->w);
    free(s->next);
    free(s->last_ts);
    free(s->fscene);
    free(s->fuser);
    dd_trace_pending_free(&s->trace);
}

int dd_flush_new(dd_flush **out, const struct dd_flush_conf *conf)
{
    *out = NULL;
    dd_flush *f = calloc(1, sizeof *f);
    if (!f) return DD_ERR_NOMEM;
    f->h = conf->history;
    f->topic = conf->topic;
    f->lag = conf->lag;
    f->durable = conf->durable;
    f->durable_ns = (int64_t)conf->durable_interval_ms * 1000000;
    atomic_init(&f->lost_position, 0);
    dd_histogram_init(&f->flush_hist, dd_metrics_flush_bounds, DD_METRICS_FLUSH_BOUNDS_LEN);
    if (dd_sys_lock_init(&f->mu, &f->cv) != DD_OK) {
        free(f);
        return DD_ERR_NOMEM;
    }
    *out = f;
    if (!(f->batch = dd_history_batch_new())) goto nomem;
    dd_history_batch_set_unlogged(f->batch, f->durable == DD_DURABLE_FLUSH);
    dd_history_batch_set_nosync(f->batch, f->durable == DD_DURABLE_WAL);
    for (int i = 0; i < 2; i++) {
        struct dd_slot *s = &f->slots[i];
        if (dd_window_new(&s->w, conf->history, conf->window_bytes) != DD_OK ||
            !(s->fscene = malloc(DD_SCENE_MAX)) || !(s->fuser = malloc(conf->max_user)))
            goto nomem;
    }
    return DD_OK;
nomem:
    dd_flush_free(f);
    *out = NULL;
    return DD_ERR_NOMEM;
}

void dd_flush_set_consumer(dd_flush *f, rd_kafka_t *rk)
{
    f->rk = rk;
}

void dd_flush_set_trace(dd_flush *f, dd_trace *trace)
{
    f->trace = trace;
}

int dd_flush_start(dd_flush *f)
{
    if (f->started) return DD_ERR_STATE;
    if (pthread_create(&f->thr, NULL, flush_main, f) != 0) return DD_ERR_NOMEM;
    f->started = true;
    return DD_OK;
}

void dd_flush_give_up(dd_flush *f)
{
    pthread_mutex_lock(&f->mu);
    f->stopping = 1;
    pthread_mutex_unlock(&f->mu);
}

void dd_flush_stop(dd_flush *f)
{
    if (!f || !f->started) return;
    pthread_mutex_lock(&f->mu);
    f->flush_quit = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thr, NULL);
    f->started = false;
}

void dd_flush_free(dd_flush *f)
{
    if (!f) return;
    dd_flush_stop(f);
    for (int i = 0; i < 2; i++) slot_free(&f->slots[i]);
    free(f->written.next);
    free(f->written.last_ts);
    dd_history_batch_free(f->batch);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* ---- the poll thread's side ---------------------------------------------------- */

struct dd_slot *dd_flush_active(dd_flush *f)
{
    return &f->slots[f->active];
}

void dd_flush_lose_position(dd_flush *f)
{
    atomic_store(&f->lost_position, 1);
}

void dd_flush_get_stats(const dd_flush *f, struct dd_flush_stats *out)
{
    out->duplicates = LOAD(duplicates);
    out->plays_written = LOAD(plays_written);
    out->messages_flushed = LOAD(messages_flushed);
    out->messages_durable = LOAD(messages_durable);
    out->flushes = LOAD(flushes);
    out->durable_flushes = LOAD(durable_flushes);
    out->write_errors = LOAD(write_errors);
    out->commit_errors = LOAD(commit_errors);
    out->last_flush_ms = LOAD(last_flush_ms);
    out->forgets = LOAD(forgets);
}

/* ---- metrics ------------------------------------------------------------------ */

void dd_flush_collect(dd_prom *p, dd_flush *f)
{
    uint64_t durable = LOAD(messages_durable), flushed = LOAD(messages_flushed);
    dd_prom_counter(p, "dedupd_ingest_forgets_total",
                    "Forget markers applied (a user's plays in a scene deleted)", LOAD(forgets));
    struct dd_histogram_snap fh;
    dd_histogram_snapshot(&f->flush_hist, &fh);
    dd_prom_family(p, "dedupd_flush_duration_seconds",
                   "Duration of window writes to the history store", DD_PROM_HISTOGRAM);
    dd_prom_histogram(p, "dedupd_flush_duration_seconds", NULL, 0, &fh);
    dd_prom_counter(p, "dedupd_ingest_flushes_total", "Windows written", LOAD(flushes));
    dd_prom_counter(p, "dedupd_ingest_durable_flushes_total",
                    "Durable points that made written windows durable: memtable flushes "
                    "(ingest.durable=flush) or WAL syncs (wal)",
                    LOAD(durable_flushes));
    dd_prom_family(p, "dedupd_ingest_undurable_messages",
                   "Messages written (filterable) but not yet durable: their offsets are "
                   "not committed, a crash now would consume them again",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_ingest_undurable_messages", NULL, 0,
                       flushed >= durable ? flushed - durable : 0);
    dd_prom_counter(p, "dedupd_ingest_write_errors_total", "Window writes that failed (retried)",
                    LOAD(write_errors));
    dd_prom_counter(p, "dedupd_ingest_duplicates_total", "Plays already pending in their window",
                    LOAD(duplicates));
}
