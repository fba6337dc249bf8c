/* SPDX-License-Identifier: Apache-2.0
 *
 * assign.c - where the consumer starts and which partitions it takes; see
 * assign.h. Its log lines are module=ingest, as operators know them.
 */
#include "assign.h"

#include "dd.h"
#include "history.h"
#include "kafka.h"
#include "lag.h"
#include "log.h"
#include "sys.h"
#include "partition.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOD "ingest"
/* The partition count is read again this often once known, every
 * WATCH_RETRY_MS until then; a metadata request waits at most
 * METADATA_MS (it also bounds how long stop waits for the watcher). */
#define WATCH_MS 5000
#define WATCH_RETRY_MS 1000
#define METADATA_MS 2000

struct dd_assign {
    char *topic;
    char *group_id; /* the group offsets are committed under */
    dd_history *h;
    dd_lag *lag;
    rd_kafka_t *rk; /* the consumer (dd_assign_set_consumer) */
    rd_kafka_topic_t *rkt;
    bool assign;           /* assign mode (conf->assign) */
    bool from_beginning;   /* assign: ignore committed offsets (ingest.h) */
    bool accept_truncated; /* ingest.accept_truncated_log (ingest.h) */
    uint32_t shards, shard;
    enum dd_partitioner partitioner;
    bool (*partitions_ok)(void *ud, int32_t n); /* dd_assign_set_partitions_check */
    void *partitions_ud;
    /* Poll thread only. */
    int32_t assign_count; /* the count the partitions were assigned by */
    bool self_assigned;
    int64_t assign_retry_ns;
    atomic_int_least32_t partitions; /* dd_assign_partition_count */
    atomic_bool changed;             /* dd_assign_partitions_changed */
    atomic_bool log_gap;             /* dd_assign_log_gap */
    char gap_why[200];               /* written once, before log_gap is set */
    atomic_uint_least64_t log_gaps, count_changes, topic_partitions;
    /* The watch thread. */
    pthread_t watch_thr;
    pthread_mutex_t mu;
    pthread_cond_t watch_cv; /* CLOCK_MONOTONIC: wakes the watcher to quit */
    int watch_quit;
    bool started;
    struct dd_log_limit lim_meta, lim_assign, lim_store;
};

#define INC(f) atomic_fetch_add_explicit(&a->f, 1, memory_order_relaxed)

/* ---- the store's positions and the log's start ------------------------------ */

/* The log of PARTITION must still hold NEXT, the store's position in it
 * (STORED), or start at offset 0 when the store has none (!STORED, NEXT
 * 0): if it starts later, plays between them were dropped by the topic's
 * retention before this store had them (librdkafka would silently start
 * at the beginning). Logged, counted, and the node is not ready from then
 * on (dd_assign_log_gap). A watermark that cannot be read is logged and
 * not held against the store. */
static void check_log_start(dd_assign *a, int32_t partition, int64_t next, bool stored)
{
    int64_t lo = 0, hi = 0;
    rd_kafka_resp_err_t e =
        rd_kafka_query_watermark_offsets(a->rk, a->topic, partition, &lo, &hi, 5000);
    if (e) {
        dd_warn(MOD,
                "msg=\"cannot read where the log starts; not checked for a gap\" "
                "topic=%s partition=%" PRId32 " error=\"%s\"",
                a->topic, partition, rd_kafka_err2str(e));
        return;
    }
    if (next >= lo) return;
    if (a->accept_truncated) {
        dd_warn(MOD,
                "msg=\"the log starts after the store's position; accepted "
                "(ingest.accept_truncated_log)\" topic=%s partition=%" PRId32 " store_next=%" PRId64
                " log_start=%" PRId64 " stored=%s",
                a->topic, partition, next, lo, stored ? "yes" : "no");
        return;
    }
    INC(log_gaps);
    if (stored)
        dd_error(MOD,
                 "msg=\"the log starts after the store's position: the plays between are "
                 "gone from the topic and missing from this store; replace the store (a "
                 "copy from a replica: cluster.bootstrap = peer) or raise the topic's "
                 "retention\" topic=%s partition=%" PRId32 " store_next=%" PRId64
                 " log_start=%" PRId64,
                 a->topic, partition, next, lo);
    else
        dd_error(MOD,
                 "msg=\"the store has no position in a partition whose log no longer "
                 "starts at offset 0: the plays before the log's start are missing from "
                 "this store; copy a replica's store (cluster.bootstrap = peer), or declare "
                 "them not needed with ingest.accept_truncated_log = true\" topic=%s "
                 "partition=%" PRId32 " log_start=%" PRId64,
                 a->topic, partition, lo);
    if (!atomic_load(&a->log_gap)) {
        if (stored)
            snprintf(a->gap_why, sizeof a->gap_why,
                     "ingest: partition %" PRId32 " of %s starts at offset %" PRId64
                     ", after the store's %" PRId64 ": plays missing (see the log)",
                     partition, a->topic, lo, next);
        else
            snprintf(a->gap_why, sizeof a->gap_why,
                     "ingest: partition %" PRId32 " of %s starts at offset %" PRId64
                     " and the store has no position in it: plays missing (see the log)",
                     partition, a->topic, lo);
        atomic_store(&a->log_gap, true);
    }
}

bool dd_assign_log_gap(dd_assign *a, char *why, size_t whylen)
{
    if (!atomic_load(&a->log_gap)) return false;
    if (why && whylen) snprintf(why, whylen, "%s", a->gap_why);
    return true;
}

/* Each partition of L starts at the next offset the store recorded for
 * it, where it has one: the store's own position wins over committed offsets,
 * since it was written with the plays (history.h, "Log positions"). The
 * others keep the offset L has (committed, or the beginning for a new
 * store): a store written before offsets were kept, or a partition never
 * consumed here. A store that cannot be read is logged and falls back the
 * same way. Returns how many start from the store. */
int dd_assign_from_store(dd_assign *a, rd_kafka_topic_partition_list_t *l)
{
    int n = 0;
    for (int i = 0; i < l->cnt; i++) {
        int64_t next;
        char err[256];
        int rc =
            dd_history_get_offset(a->h, a->topic, l->elems[i].partition, &next, err, sizeof err);
        if (rc == DD_OK) {
            l->elems[i].offset = next;
            n++;
            check_log_start(a, l->elems[i].partition, next, true);
        } else if (rc == DD_ERR_NOTFOUND && a->assign) {
            /* A cluster node's store without a position here (a new store,
             * or a copy that lacks this partition) is complete only from
             * the log's offset 0, whatever the group committed. */
            l->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
            check_log_start(a, l->elems[i].partition, 0, false);
        } else if (rc != DD_ERR_NOTFOUND) {
            dd_error(MOD,
                     "msg=\"cannot read the store's offset; starting from the committed "
                     "one\" topic=%s partition=%" PRId32 " error=\"%s\"",
                     a->topic, l->elems[i].partition, err);
        }
    }
    return n;
}

/* Store, as librdkafka's next offset to commit, each partition of L whose
 * start is a concrete offset: it came from the store's recorded position
 * (dd_assign_from_store), so everything before it is durable already.
 * Without it, a partition assigned with an explicit offset has neither a
 * committed nor a stored offset in librdkafka until the next window is
 * durable, and its lag (dd_kafka_stats_lag) could only be counted from
 * the consumed position, as if plays still in a window were stored. A
 * partition that fails is logged and counted from the log start instead. */
void dd_assign_store_start(dd_assign *a, const rd_kafka_topic_partition_list_t *l)
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
    if (rd_kafka_offsets_store(a->rk, c) != RD_KAFKA_RESP_ERR_NO_ERROR)
        dd_log_limited(&a->lim_store, 5000, DD_LOG_WARN, MOD,
                       "msg=\"start offsets not stored; lag counted from the log start\" "
                       "topic=%s",
                       a->topic);
    rd_kafka_topic_partition_list_destroy(c);
}

/* ---- assign mode -------------------------------------------------------------- */

/* A new store: commit each partition's beginning (its low watermark) for
 * this node's group at once, so that a restart before the first durable
 * commit also starts from the beginning, not from offsets committed for
 * the store that was lost. A failure is logged: the window until the
 * first commit (ingest.durable_interval_ms) stays open then. */
static void reset_committed(dd_assign *a, const rd_kafka_topic_partition_list_t *assigned)
{
    rd_kafka_topic_partition_list_t *c = rd_kafka_topic_partition_list_copy(assigned);
    if (!c) return;
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int i = 0; i < c->cnt && !e; i++) {
        int64_t lo, hi;
        e = rd_kafka_query_watermark_offsets(a->rk, a->topic, c->elems[i].partition, &lo, &hi,
                                             5000);
        c->elems[i].offset = lo;
    }
    if (!e) e = rd_kafka_commit(a->rk, c, 0);
    if (e)
        dd_warn(MOD,
                "msg=\"new store: cannot reset the group's offsets to the beginning; a "
                "restart before the first commit would resume at the old ones\" "
                "group=%s error=\"%s\"",
                a->group_id, rd_kafka_err2str(e));
    else
        dd_info(MOD, "msg=\"new store: the group's offsets reset to the beginning\" group=%s",
                a->group_id);
    rd_kafka_topic_partition_list_destroy(c);
}

/* Assign mode: once the watcher knows the partition count, assign this
 * shard's partitions from their committed offsets (from their beginning
 * when the store is new), for good. Retried a
 * second later if librdkafka refuses. */
bool dd_assign_poll(dd_assign *a)
{
    if (!a->assign || a->self_assigned) return false;
    int32_t n = atomic_load(&a->partitions);
    if (n <= 0 || dd_mono_ns() < a->assign_retry_ns) return false;
    a->assign_retry_ns = dd_mono_ns() + (int64_t)WATCH_RETRY_MS * 1000000;
    rd_kafka_topic_partition_list_t *l =
        rd_kafka_topic_partition_list_new((int)(n / (int32_t)a->shards + 1));
    if (!l) return false;
    char list[256] = "";
    size_t len = 0;
    for (int32_t p = (int32_t)a->shard; p < n; p += (int32_t)a->shards) {
        rd_kafka_topic_partition_list_add(l, a->topic, p)->offset =
            a->from_beginning ? RD_KAFKA_OFFSET_BEGINNING : RD_KAFKA_OFFSET_STORED;
        if (len < sizeof list - 16)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%" PRId32, len ? "," : "", p);
        else if (len < sizeof list - 4)
            len += (size_t)snprintf(list + len, sizeof list - len, "...");
    }
    if (l->cnt == 0) {
        dd_error(MOD,
                 "msg=\"this shard owns no partition of the topic\" topic=%s partitions=%" PRId32
                 " shards=%" PRIu32 " shard=%" PRIu32,
                 a->topic, n, a->shards, a->shard);
        a->self_assigned = true; /* never ready: the map does not fit the topic */
        rd_kafka_topic_partition_list_destroy(l);
        return false;
    }
    int stored = dd_assign_from_store(a, l);
    if (atomic_load(&a->log_gap)) {
        /* Consuming would write positions past the gap, and the next start
         * would find none: nothing is assigned until the store is replaced
         * or the gap declared (ingest.accept_truncated_log). */
        dd_error(MOD, "msg=\"a log gap: not consuming (see above)\" topic=%s", a->topic);
        a->self_assigned = true;
        rd_kafka_topic_partition_list_destroy(l);
        return false;
    }
    rd_kafka_resp_err_t e = rd_kafka_assign(a->rk, l);
    if (e) {
        dd_log_limited(&a->lim_assign, 5000, DD_LOG_ERROR, MOD,
                       "msg=\"cannot assign partitions; retrying\" error=\"%s\"",
                       rd_kafka_err2str(e));
    } else {
        a->assign_count = n;
        a->self_assigned = true;
        for (int i = 0; i < l->cnt; i++) dd_lag_assign(a->lag, l->elems[i].partition, true);
        dd_assign_store_start(a, l);
        dd_info(MOD,
                "msg=\"partitions assigned\" count=%d protocol=assign partitions=%s "
                "topic_partitions=%" PRId32 " group=%s from_store=%d",
                l->cnt, list, n, a->group_id, stored);
        if (a->from_beginning) reset_committed(a, l);
    }
    rd_kafka_topic_partition_list_destroy(l);
    return !e;
}

/* ---- the watch thread ------------------------------------------------------------ */

/* The broker says the topic has N partitions (N > 0); *LAST is the count
 * seen before (0 = none). */
static void note_partition_count(dd_assign *a, int32_t n, int32_t *last)
{
    atomic_store_explicit(&a->topic_partitions, (uint64_t)n, memory_order_relaxed);
    if (*last == 0) {
        /* The store's ownership records or compares the count (owner.h):
         * on a mismatch the count is never published, so nothing is
         * assigned (assign mode). */
        if (a->partitions_ok && !a->partitions_ok(a->partitions_ud, n)) {
            dd_error(MOD,
                     "msg=\"the store's ownership differs from the topic's: not "
                     "consuming\" topic=%s partitions=%" PRId32,
                     a->topic, n);
            *last = n;
            return;
        }
        atomic_store(&a->partitions, n);
        dd_info(MOD, "msg=\"topic found\" topic=%s partitions=%" PRId32, a->topic, n);
    } else if (n != *last) {
        INC(count_changes);
        if (a->assign) {
            /* Users moved between partitions: the partitions this node
             * owns no longer hold all of its users. Nothing here can fix
             * that (the cluster must be resized), so keep what is owned
             * and say so until restart. */
            atomic_store(&a->changed, true);
            dd_error(MOD,
                     "msg=\"the topic's partition count changed: users have moved between "
                     "partitions; still consuming the partitions assigned at start\" topic=%s "
                     "was=%" PRId32 " now=%" PRId32 " assigned_by=%" PRId32,
                     a->topic, *last, n, atomic_load(&a->partitions));
        } else {
            atomic_store(&a->partitions, n);
            dd_info(MOD,
                    "msg=\"the topic's partition count changed (the group rebalances)\" "
                    "topic=%s was=%" PRId32 " now=%" PRId32,
                    a->topic, *last, n);
        }
    }
    *last = n;
}

static void *watch_main(void *arg)
{
    dd_assign *a = arg;
    int32_t last = 0;
    pthread_mutex_lock(&a->mu);
    while (!a->watch_quit) {
        pthread_mutex_unlock(&a->mu);
        int32_t n = dd_kafka_partition_count(a->rk, a->rkt, METADATA_MS, &a->lim_meta);
        if (n > 0) note_partition_count(a, n, &last);
        int64_t at = dd_mono_ns() + (int64_t)(last ? WATCH_MS : WATCH_RETRY_MS) * 1000000;
        struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
        pthread_mutex_lock(&a->mu);
        while (!a->watch_quit && pthread_cond_timedwait(&a->watch_cv, &a->mu, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

void dd_assign_stop(dd_assign *a)
{
    if (!a || !a->started) return;
    a->started = false;
    pthread_mutex_lock(&a->mu);
    a->watch_quit = 1;
    pthread_cond_broadcast(&a->watch_cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->watch_thr, NULL);
}

/* ---- lifecycle and getters --------------------------------------------------------- */

/* The assign mode settings, and the group id offsets are committed under
 * into *GROUP (malloc'd): kafka.group.id, or in assign mode
 * "<kafka.group.id>.s<shard>.r<replica>". 0, DD_ERR_INVALID or
 * DD_ERR_NOMEM, with err set. */
static int group_of(const struct dd_assign_conf *conf, const struct dd_config_list *kafka,
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

int dd_assign_new(dd_assign **out, const struct dd_assign_conf *conf,
                  const struct dd_config_list *kafka, dd_history *history, dd_lag *lag, char *err,
                  size_t errlen)
{
    *out = NULL;
    char *group = NULL;
    int rc = group_of(conf, kafka, &group, err, errlen);
    if (rc != DD_OK) return rc;
    dd_assign *a = calloc(1, sizeof *a);
    if (!a || !(a->topic = strdup(conf->topic))) {
        free(a);
        free(group);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }
    a->group_id = group;
    a->h = history;
    a->lag = lag;
    a->assign = conf->assign;
    a->from_beginning = conf->from_beginning;
    a->accept_truncated = conf->accept_truncated_log;
    a->shards = conf->shards;
    a->shard = conf->shard;
    a->partitioner = (enum dd_partitioner)conf->partitioner;
    atomic_init(&a->partitions, 0);
    atomic_init(&a->changed, false);
    atomic_init(&a->log_gap, false);
    if (dd_sys_lock_init(&a->mu, &a->watch_cv) != DD_OK) {
        free(a->topic);
        free(a->group_id);
        free(a);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }
    *out = a;
    return DD_OK;
}

void dd_assign_set_consumer(dd_assign *a, rd_kafka_t *rk, rd_kafka_topic_t *rkt)
{
    a->rk = rk;
    a->rkt = rkt;
}

void dd_assign_set_partitions_check(dd_assign *a, bool (*ok)(void *ud, int32_t n), void *ud)
{
    a->partitions_ok = ok;
    a->partitions_ud = ud;
}

int dd_assign_start(dd_assign *a)
{
    if (a->started) return DD_ERR_STATE;
    a->watch_quit = 0;
    if (pthread_create(&a->watch_thr, NULL, watch_main, a) != 0) return DD_ERR_NOMEM;
    a->started = true;
    return DD_OK;
}

void dd_assign_free(dd_assign *a)
{
    if (!a) return;
    dd_assign_stop(a);
    pthread_cond_destroy(&a->watch_cv);
    pthread_mutex_destroy(&a->mu);
    free(a->topic);
    free(a->group_id);
    free(a);
}

const char *dd_assign_group(const dd_assign *a)
{
    return a->group_id;
}

int32_t dd_assign_count(const dd_assign *a)
{
    return a->assign_count;
}

int32_t dd_assign_partition_count(const dd_assign *a)
{
    return atomic_load(&a->partitions);
}

bool dd_assign_partitions_changed(const dd_assign *a)
{
    return atomic_load(&a->changed);
}

void dd_assign_get_stats(const dd_assign *a, struct dd_assign_stats *out)
{
    out->log_gaps = atomic_load_explicit(&a->log_gaps, memory_order_relaxed);
    out->count_changes = atomic_load_explicit(&a->count_changes, memory_order_relaxed);
    out->topic_partitions = atomic_load_explicit(&a->topic_partitions, memory_order_relaxed);
}
