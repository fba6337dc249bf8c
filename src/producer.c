/* SPDX-License-Identifier: Apache-2.0
 *
 * producer.c - plays and forget markers to the plays topic; see producer.h.
 */
#include "producer.h"

#include "buf.h"
#include "dd.h"
#include "kafka.h"
#include "log.h"
#include "marker.h"
#include "metrics.h"
#include "partition.h"
#include "playevent.h"
#include "sys.h"

#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOD "producer"
#define POLL_MS 100
/* A metadata request waits at most this long; a failed one is tried again
 * after METADATA_RETRY_MS. */
#define METADATA_MS 2000
#define METADATA_RETRY_MS 1000
/* A full local queue is tried again this often until the deadline. */
#define QUEUE_FULL_WAIT_MS 10

/* One call's messages in flight (see producer.h, "Waiting"). Under p->mu. */
struct waiter {
    int refs;
    size_t pending; /* messages queued and not yet reported */
    size_t failed;
    rd_kafka_resp_err_t first_err;
    int64_t last_offset; /* the highest offset acknowledged; -1 none */
};

struct dd_producer {
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    enum dd_playevent_format format;
    enum dd_partitioner partitioner;
    int64_t timeout_ns;
    const dd_marker_key *forget_key; /* NULL: markers unsigned */
    bool copies;                     /* producer.h, "Copies" */
    struct dd_producer_hooks hooks;
    dd_producer_applied_fn applied; /* NULL: forget returns once acknowledged */
    void *applied_ud;

    pthread_mutex_t mu;
    pthread_cond_t cv;  /* CLOCK_MONOTONIC: reports, partition count, quit */
    int32_t partitions; /* 0 = not known */
    bool refresh;       /* read the partition count again */
    bool quit;
    pthread_t thr;

    struct {
        atomic_uint_least64_t delivered, failed, ok, unavailable, timeout;
    } st;
    struct dd_log_limit lim_meta, lim_fail, lim_kafka;
};

#define INC(f) atomic_fetch_add_explicit(&p->st.f, 1, memory_order_relaxed)
#define LOAD(f) atomic_load_explicit(&p->st.f, memory_order_relaxed)

static void waiter_unref(struct waiter *w)
{
    if (--w->refs == 0) free(w);
}

/* ---- librdkafka callbacks (poll thread) --------------------------------- */

static bool partition_error(rd_kafka_resp_err_t e)
{
    return e == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION || e == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
           e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    dd_producer *p = opaque;
    struct waiter *w = m->_private;
    if (p->copies) {
        if (m->err)
            INC(failed);
        else
            INC(delivered);
        if (p->hooks.delivered)
            p->hooks.delivered(p->hooks.ud, m->err ? rd_kafka_err2str(m->err) : NULL);
        return;
    }
    if (m->err) {
        INC(failed);
        dd_log_limited(&p->lim_fail, 5000, DD_LOG_WARN, MOD,
                       "msg=\"delivery failed\" topic=%s partition=%" PRId32 " error=\"%s\"",
                       rd_kafka_topic_name(m->rkt), m->partition, rd_kafka_err2str(m->err));
    } else {
        INC(delivered);
    }
    pthread_mutex_lock(&p->mu);
    if (!m->err && m->offset > w->last_offset) w->last_offset = m->offset;
    if (m->err) {
        if (partition_error(m->err)) p->refresh = true;
        if (w->failed++ == 0) w->first_err = m->err;
    }
    w->pending--;
    waiter_unref(w);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    dd_producer *p = opaque;
    if (p->hooks.error) {
        p->hooks.error(p->hooks.ud, err, reason);
        return;
    }
    /* A fatal error (the idempotent producer's invariants broken) fails
     * every later message: the calls answer UNAVAILABLE until restart. */
    dd_log_limited(&p->lim_kafka, 5000,
                   err == RD_KAFKA_RESP_ERR__FATAL ? DD_LOG_ERROR : DD_LOG_WARN, MOD,
                   "msg=\"kafka error\" error=%s reason=\"%s\"",
                   rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* ---- the poll thread ------------------------------------------------------ */

static void *poll_main(void *arg)
{
    dd_producer *p = arg;
    int64_t next_read = 0;
    pthread_mutex_lock(&p->mu);
    while (!p->quit) {
        bool read = !p->copies && (p->refresh || p->partitions == 0) && dd_mono_ns() >= next_read;
        pthread_mutex_unlock(&p->mu);
        if (read) {
            int32_t n = dd_kafka_partition_count(p->rk, p->rkt, METADATA_MS, &p->lim_meta);
            next_read = dd_mono_ns() + (int64_t)METADATA_RETRY_MS * 1000000;
            pthread_mutex_lock(&p->mu);
            if (n > 0) {
                if (n != p->partitions)
                    dd_info(MOD,
                            "msg=\"partition count\" topic=%s partitions=%" PRId32 " was=%" PRId32,
                            rd_kafka_topic_name(p->rkt), n, p->partitions);
                p->partitions = n;
                p->refresh = false;
                pthread_cond_broadcast(&p->cv);
            }
            pthread_mutex_unlock(&p->mu);
        }
        rd_kafka_poll(p->rk, POLL_MS); /* delivery reports: dr_cb */
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- calls ------------------------------------------------------------------ */

/* Wait on p->cv until DEADLINE (mu held). False once it has passed. */
static bool wait_until(dd_producer *p, int64_t deadline)
{
    if (dd_mono_ns() >= deadline) return false;
    struct timespec ts = {.tv_sec = deadline / 1000000000, .tv_nsec = deadline % 1000000000};
    pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    return true;
}

/* Queue one message (PAYLOAD copied) for W into PARTITION, waiting while
 * the local queue is full, up to DEADLINE. MAC: a forget marker's
 * dedupd-mac header (marker.h), NULL for a play; "" sends the marker
 * unsigned (no key). ALL: the marker is for every scene (dedupd-op
 * forget-all-scenes). */
static rd_kafka_resp_err_t send_one(dd_producer *p, struct waiter *w, int32_t partition,
                                    const char *user, const struct dd_buf *payload, const char *mac,
                                    bool all, int64_t deadline)
{
    size_t ulen = strlen(user);
    const char *op = all ? DD_MARKER_OP_ALL : "forget";
    size_t oplen = strlen(op);
    for (;;) {
        rd_kafka_resp_err_t e;
        if (mac && mac[0])
            e = rd_kafka_producev(p->rk, RD_KAFKA_V_RKT(p->rkt), RD_KAFKA_V_PARTITION(partition),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_KEY(user, ulen),
                                  RD_KAFKA_V_VALUE(payload->data, payload->len),
                                  RD_KAFKA_V_HEADER("dedupd-op", op, (ssize_t)oplen),
                                  RD_KAFKA_V_HEADER(DD_MARKER_HEADER, mac, DD_MARKER_MAC_HEX),
                                  RD_KAFKA_V_OPAQUE(w), RD_KAFKA_V_END);
        else if (mac)
            e = rd_kafka_producev(p->rk, RD_KAFKA_V_RKT(p->rkt), RD_KAFKA_V_PARTITION(partition),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_KEY(user, ulen),
                                  RD_KAFKA_V_VALUE(payload->data, payload->len),
                                  RD_KAFKA_V_HEADER("dedupd-op", op, (ssize_t)oplen),
                                  RD_KAFKA_V_OPAQUE(w), RD_KAFKA_V_END);
        else
            e = rd_kafka_producev(p->rk, RD_KAFKA_V_RKT(p->rkt), RD_KAFKA_V_PARTITION(partition),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_KEY(user, ulen),
                                  RD_KAFKA_V_VALUE(payload->data, payload->len),
                                  RD_KAFKA_V_OPAQUE(w), RD_KAFKA_V_END);
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) return e;
        int64_t until = dd_mono_ns() + (int64_t)QUEUE_FULL_WAIT_MS * 1000000;
        pthread_mutex_lock(&p->mu);
        bool more = wait_until(p, until < deadline ? until : deadline);
        pthread_mutex_unlock(&p->mu);
        if (!more) return e;
    }
}

/* Produce N plays (FORGET false) or one marker (true) for USER in SCENE;
 * ALL: the marker is for every scene (SCENE is then ""). */
static int produce(dd_producer *p, const char *user, const char *scene, const char *const *items,
                   const int64_t *at, size_t n, bool forget, bool all, int64_t deadline,
                   int32_t *partition_out, int64_t *offset_out, char *err, size_t errlen)
{
    if (n == 0) return DD_OK;
    if (!deadline) deadline = dd_mono_ns() + p->timeout_ns;
    pthread_mutex_lock(&p->mu);
    while (p->partitions == 0 && wait_until(p, deadline)) {
    }
    int32_t count = p->partitions;
    pthread_mutex_unlock(&p->mu);
    if (count == 0) {
        INC(timeout);
        return dd_fail(DD_ERR_TIMEOUT, err, errlen,
                       "the plays topic's partition count is not known yet (no metadata from "
                       "Kafka)");
    }
    int32_t partition = dd_partition_of(p->partitioner, user, strlen(user), count);
    struct waiter *w = calloc(1, sizeof *w);
    if (!w) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    w->refs = 1;
    w->last_offset = -1;
    struct dd_buf b = {0};
    int rc = DD_OK;
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
    /* A marker carries the time it was made, which its MAC covers. */
    int64_t forget_at = forget ? dd_now_ms() : 0;
    char mac[DD_MARKER_MAC_HEX + 1] = "";
    if (forget && p->forget_key &&
        (all ? dd_marker_sign_all(p->forget_key, user, strlen(user), forget_at, mac)
             : dd_marker_sign(p->forget_key, user, strlen(user), scene, strlen(scene), forget_at,
                              mac)) != DD_OK)
        rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory (signing the forget marker)");
    for (size_t i = 0; i < n && rc == DD_OK; i++) {
        b.len = 0;
        rc = dd_playevent_encode(&b, p->format, user, strlen(user), forget ? "" : items[i],
                                 forget ? 0 : strlen(items[i]), forget ? forget_at : at[i], scene,
                                 strlen(scene));
        if (rc == DD_ERR_NOMEM) {
            dd_set_err(err, errlen, "out of memory");
            break;
        }
        if (rc != DD_OK) {
            dd_set_err(err, errlen, "plays[%zu]: played_at_ms is negative", i);
            break;
        }
        pthread_mutex_lock(&p->mu);
        w->refs++;
        w->pending++;
        pthread_mutex_unlock(&p->mu);
        e = send_one(p, w, partition, user, &b, forget ? mac : NULL, all, deadline);
        if (e) {
            pthread_mutex_lock(&p->mu);
            w->refs--;
            w->pending--;
            pthread_mutex_unlock(&p->mu);
            rc = e == RD_KAFKA_RESP_ERR__QUEUE_FULL ? DD_ERR_TIMEOUT : DD_ERR_UNAVAILABLE;
            dd_set_err(err, errlen, "cannot produce to %s: %s", rd_kafka_topic_name(p->rkt),
                       rd_kafka_err2str(e));
        }
    }
    dd_buf_free(&b);
    pthread_mutex_lock(&p->mu);
    while (rc == DD_OK && w->pending && !w->failed && wait_until(p, deadline)) {
    }
    if (rc == DD_OK && w->failed)
        rc = dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                     "%zu of %zu messages to %s not delivered: "
                     "%s",
                     w->failed, n, rd_kafka_topic_name(p->rkt), rd_kafka_err2str(w->first_err));
    else if (rc == DD_OK && w->pending)
        rc = dd_fail(DD_ERR_TIMEOUT, err, errlen,
                     "%zu of %zu messages to %s not acknowledged "
                     "by the deadline",
                     w->pending, n, rd_kafka_topic_name(p->rkt));
    if (partition_out) *partition_out = partition;
    if (offset_out) *offset_out = w->last_offset;
    waiter_unref(w);
    pthread_mutex_unlock(&p->mu);
    if (rc == DD_OK)
        INC(ok);
    else if (rc == DD_ERR_TIMEOUT)
        INC(timeout);
    else
        INC(unavailable);
    return rc;
}

int dd_producer_plays(dd_producer *p, const char *user, const char *scene, const char *const *items,
                      const int64_t *played_at_ms, size_t n, int64_t deadline_ns, char *err,
                      size_t errlen)
{
    return produce(p, user, scene, items, played_at_ms, n, false, false, deadline_ns, NULL, NULL,
                   err, errlen);
}

static int forget(dd_producer *p, const char *user, const char *scene, bool all,
                  int64_t deadline_ns, char *err, size_t errlen)
{
    if (!deadline_ns) deadline_ns = dd_mono_ns() + p->timeout_ns;
    int32_t partition = -1;
    int64_t offset = -1;
    int rc = produce(p, user, scene, NULL, NULL, 1, true, all, deadline_ns, &partition, &offset,
                     err, errlen);
    if (rc != DD_OK || !p->applied) return rc;
    rc = p->applied(p->applied_ud, partition, offset, deadline_ns);
    if (rc == DD_ERR_TIMEOUT)
        return dd_fail(DD_ERR_TIMEOUT, err, errlen,
                       "the forget marker (partition %" PRId32 " offset %" PRId64
                       ") was not applied here by the deadline",
                       partition, offset);
    if (rc != DD_OK)
        return dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                       "the forget marker (partition %" PRId32
                       ") cannot be applied here: this node does not consume that partition",
                       partition);
    return DD_OK;
}

int dd_producer_forget(dd_producer *p, const char *user, const char *scene, int64_t deadline_ns,
                       char *err, size_t errlen)
{
    return forget(p, user, scene, false, deadline_ns, err, errlen);
}

int dd_producer_forget_all(dd_producer *p, const char *user, int64_t deadline_ns, char *err,
                           size_t errlen)
{
    return forget(p, user, "", true, deadline_ns, err, errlen);
}

int dd_producer_copy(dd_producer *p, const void *key, size_t key_len, const void *value, size_t len,
                     const struct dd_producer_header *h, size_t n, char *err, size_t errlen)
{
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(n);
    if (!hdrs) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    for (size_t i = 0; i < n; i++) rd_kafka_header_add(hdrs, h[i].name, -1, h[i].value, -1);
    rd_kafka_resp_err_t e =
        rd_kafka_producev(p->rk, RD_KAFKA_V_RKT(p->rkt), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_VALUE((void *)value, len), RD_KAFKA_V_KEY(key, key_len),
                          RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
    if (e) {
        rd_kafka_headers_destroy(hdrs); /* owned by librdkafka only once queued */
        return dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "%s", rd_kafka_err2str(e));
    }
    return DD_OK;
}

int dd_producer_flush(dd_producer *p, int timeout_ms, int *left, char *err, size_t errlen)
{
    rd_kafka_resp_err_t e = rd_kafka_flush(p->rk, timeout_ms);
    if (!e) return DD_OK;
    if (left) *left = rd_kafka_outq_len(p->rk);
    dd_set_err(err, errlen, "%s", rd_kafka_err2str(e));
    rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_flush(p->rk, 1000);
    return DD_ERR_TIMEOUT;
}

void dd_producer_set_applied(dd_producer *p, dd_producer_applied_fn fn, void *ud)
{
    p->applied = fn;
    p->applied_ud = ud;
}

int32_t dd_producer_partitions(dd_producer *p)
{
    pthread_mutex_lock(&p->mu);
    int32_t n = p->partitions;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* ---- lifecycle ------------------------------------------------------------ */

int dd_producer_new(dd_producer **out, const struct dd_producer_conf *conf,
                    const struct dd_config_list *kafka, char *err, size_t errlen)
{
    *out = NULL;
    int fmt = conf->copies ? DD_PLAYEVENT_JSON : dd_playevent_format_parse(conf->format);
    if (fmt < 0)
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "ingest.format: \"%s\" is not json or "
                       "protobuf",
                       conf->format);
    if (!conf->topic[0]) return dd_fail(DD_ERR_INVALID, err, errlen, "ingest.topic: empty");
    if (!conf->copies && !dd_partitioner_name((enum dd_partitioner)conf->partitioner))
        return dd_fail(DD_ERR_INVALID, err, errlen, "cluster.partitioner: unknown (%d)",
                       conf->partitioner);
    if (conf->timeout_ms == 0)
        return dd_fail(DD_ERR_INVALID, err, errlen, "producer timeout: must be at least 1 ms");
    dd_producer *p = calloc(1, sizeof *p);
    if (!p) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    p->format = (enum dd_playevent_format)fmt;
    p->partitioner = (enum dd_partitioner)conf->partitioner;
    p->timeout_ns = (int64_t)conf->timeout_ms * 1000000;
    p->forget_key = conf->forget_key;
    p->copies = conf->copies;
    p->hooks = conf->hooks;
    if (dd_sys_lock_init(&p->mu, &p->cv) != DD_OK) {
        free(p);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }

    int rc = DD_ERR_INVALID;
    char e[512], timeout[16];
    snprintf(timeout, sizeof timeout, "%" PRIu32, conf->timeout_ms);
    rd_kafka_conf_t *kc = dd_kafka_conf_new(RD_KAFKA_PRODUCER, kafka, err, errlen);
    if (!kc) goto fail;
    /* Not the operator's to change: see producer.h, "Delivery". */
    static const char *const fixed[][2] = {
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"allow.auto.create.topics", "false"},
    };
    for (size_t i = 0; !p->copies && i < DD_ARRAY_LEN(fixed) + 1; i++) {
        const char *k = i < DD_ARRAY_LEN(fixed) ? fixed[i][0] : "message.timeout.ms";
        const char *v = i < DD_ARRAY_LEN(fixed) ? fixed[i][1] : timeout;
        if (rd_kafka_conf_set(kc, k, v, e, sizeof e) != RD_KAFKA_CONF_OK) {
            dd_set_err(err, errlen, "kafka.%s: %s", k, e);
            rd_kafka_conf_destroy(kc);
            goto fail;
        }
    }
    rd_kafka_conf_set_dr_msg_cb(kc, dr_cb);
    rd_kafka_conf_set_error_cb(kc, error_cb);
    rd_kafka_conf_set_log_cb(kc, dd_kafka_log_cb);
    rd_kafka_conf_set_opaque(kc, p);
    if (!(p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, e, sizeof e))) {
        dd_set_err(err, errlen, "kafka: cannot create %s: %s",
                   conf->what ? conf->what : "the producer", e);
        rd_kafka_conf_destroy(kc);
        goto fail;
    }
    if (!(p->rkt = rd_kafka_topic_new(p->rk, conf->topic, NULL))) {
        dd_set_err(err, errlen, "kafka: cannot create the topic handle: %s",
                   rd_kafka_err2str(rd_kafka_last_error()));
        goto fail;
    }
    if (pthread_create(&p->thr, NULL, poll_main, p) != 0) {
        rc = DD_ERR_NOMEM;
        dd_set_err(err, errlen, "cannot start the producer's thread");
        goto fail;
    }
    if (!p->copies)
        dd_info(MOD, "msg=started topic=%s format=%s partitioner=%s timeout_ms=%" PRIu32,
                conf->topic, conf->format, dd_partitioner_name(p->partitioner), conf->timeout_ms);
    *out = p;
    return DD_OK;
fail:
    if (p->rkt) rd_kafka_topic_destroy(p->rkt);
    if (p->rk) rd_kafka_destroy(p->rk);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return rc;
}

void dd_producer_free(dd_producer *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thr, NULL);
    /* Messages still queued get their reports here (their waiters'
     * callers are gone: the reports only drop references). Those that
     * cannot be delivered in time are purged, and their reports served
     * too, so that every waiter is freed. */
    int left = 0;
    char err[128];
    if (dd_producer_flush(p, (int)(p->timeout_ns / 1000000), &left, err, sizeof err) != DD_OK)
        dd_warn(MOD, "msg=\"messages not delivered at stop\" count=%d error=\"%s\"", left, err);
    rd_kafka_topic_destroy(p->rkt);
    rd_kafka_destroy(p->rk);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void dd_producer_collect(dd_prom *pr, void *ud)
{
    dd_producer *p = ud;
    dd_prom_family(pr, "dedupd_producer_messages_total",
                   "Messages produced to the plays topic for gRPC writes, by delivery result",
                   DD_PROM_COUNTER);
    struct dd_prom_label l = {"result", "delivered"};
    dd_prom_sample_u64(pr, "dedupd_producer_messages_total", &l, 1, LOAD(delivered));
    l.value = "failed";
    dd_prom_sample_u64(pr, "dedupd_producer_messages_total", &l, 1, LOAD(failed));
    dd_prom_family(pr, "dedupd_producer_calls_total",
                   "Produce calls (a RecordPlays' plays, a forget marker), by result",
                   DD_PROM_COUNTER);
    l.value = "ok";
    dd_prom_sample_u64(pr, "dedupd_producer_calls_total", &l, 1, LOAD(ok));
    l.value = "unavailable";
    dd_prom_sample_u64(pr, "dedupd_producer_calls_total", &l, 1, LOAD(unavailable));
    l.value = "timeout";
    dd_prom_sample_u64(pr, "dedupd_producer_calls_total", &l, 1, LOAD(timeout));
    dd_prom_gauge(pr, "dedupd_producer_partitions",
                  "The plays topic's partition count the producer routes by (0 = not known)",
                  (uint64_t)dd_producer_partitions(p));
}
