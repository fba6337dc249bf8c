/* SPDX-License-Identifier: Apache-2.0
 *
 * deadletter.c - the plays topic's bad messages copied to the dead-letter
 * topic; see deadletter.h. Its log lines are module=ingest.
 */
#include "deadletter.h"

#include "dd.h"
#include "log.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOD "ingest"
#define FLUSH_MS 5000

struct dd_deadletter {
    dd_producer *p; /* a copies producer (producer.h) */
    char *topic, *source;
    void (*error)(void *ud, int err, const char *reason); /* the owner's, or NULL */
    void *error_ud;
    atomic_uint_least64_t delivered, errors;
    struct dd_log_limit lim;
};

/* librdkafka's errors go to the owner (ingest counts them for /readyz). */
static void on_error(void *ud, int err, const char *reason)
{
    dd_deadletter *d = ud;
    if (d->error) d->error(d->error_ud, err, reason);
}

/* The producer's delivery report (its poll thread). */
static void delivered(void *ud, const char *error)
{
    dd_deadletter *d = ud;
    if (error) {
        atomic_fetch_add_explicit(&d->errors, 1, memory_order_relaxed);
        dd_log_limited(&d->lim, 5000, DD_LOG_WARN, MOD,
                       "msg=\"dead-letter delivery failed\" topic=%s error=\"%s\"", d->topic,
                       error);
    } else {
        atomic_fetch_add_explicit(&d->delivered, 1, memory_order_relaxed);
    }
}

int dd_deadletter_new(dd_deadletter **out, const char *topic, const char *source,
                      const struct dd_config_list *kafka,
                      void (*error)(void *ud, int err, const char *reason), void *ud, char *err,
                      size_t errlen)
{
    *out = NULL;
    dd_deadletter *d = calloc(1, sizeof *d);
    if (!d || !(d->topic = strdup(topic)) || !(d->source = strdup(source))) {
        dd_deadletter_free(d);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }
    d->error = error;
    d->error_ud = ud;
    struct dd_producer_conf c = {.topic = topic,
                                 .timeout_ms = FLUSH_MS,
                                 .copies = true,
                                 .what = "the dead-letter producer",
                                 .hooks = {.delivered = delivered, .error = on_error, .ud = d}};
    int rc = dd_producer_new(&d->p, &c, kafka, err, errlen);
    if (rc != DD_OK) {
        dd_deadletter_free(d);
        return rc;
    }
    *out = d;
    return DD_OK;
}

const char *dd_deadletter_topic(const dd_deadletter *d)
{
    return d->topic;
}

void dd_deadletter_send(dd_deadletter *d, const rd_kafka_message_t *m, const char *reason)
{
    char part[16], off[24], err[256];
    snprintf(part, sizeof part, "%" PRId32, m->partition);
    snprintf(off, sizeof off, "%" PRId64, m->offset);
    const struct dd_producer_header h[] = {
        {"dd-reason", reason}, {"dd-topic", d->source}, {"dd-partition", part}, {"dd-offset", off}};
    if (dd_producer_copy(d->p, m->key, m->key_len, m->payload, m->len, h, DD_ARRAY_LEN(h), err,
                         sizeof err) != DD_OK) {
        atomic_fetch_add_explicit(&d->errors, 1, memory_order_relaxed);
        dd_log_limited(&d->lim, 5000, DD_LOG_WARN, MOD,
                       "msg=\"cannot produce to the dead-letter topic\" topic=%s error=\"%s\"",
                       d->topic, err);
    }
}

void dd_deadletter_flush(dd_deadletter *d)
{
    int left = 0;
    char err[128];
    if (dd_producer_flush(d->p, FLUSH_MS, &left, err, sizeof err) != DD_OK)
        dd_warn(MOD, "msg=\"dead-letter messages not delivered\" count=%d error=\"%s\"", left, err);
}

void dd_deadletter_free(dd_deadletter *d)
{
    if (!d) return;
    dd_producer_free(d->p);
    free(d->topic);
    free(d->source);
    free(d);
}

uint64_t dd_deadletter_delivered(const dd_deadletter *d)
{
    return d ? atomic_load_explicit(&d->delivered, memory_order_relaxed) : 0;
}

uint64_t dd_deadletter_errors(const dd_deadletter *d)
{
    return d ? atomic_load_explicit(&d->errors, memory_order_relaxed) : 0;
}
