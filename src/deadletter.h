/* SPDX-License-Identifier: Apache-2.0
 *
 * deadletter.h - copies of the plays topic's bad messages to
 * ingest.dead_letter_topic (ingest.h): the message's key and payload as
 * they came, with the headers dd-reason (enum dd_ingest_bad's name),
 * dd-topic, dd-partition and dd-offset. Sent through a copies producer
 * (producer.h, "Copies"): fire and forget, each delivery counted
 * (dedupd_ingest_dead_lettered_total, dedupd_ingest_dead_letter_errors_total)
 * and a failure logged (module=ingest, rate-limited). Knows nothing of
 * why a message is bad.
 *
 * Threads: dd_deadletter_send from ingest's poll thread; reports arrive
 * on the producer's poll thread; the getters are safe from any thread.
 */
#ifndef DD_DEADLETTER_H
#define DD_DEADLETTER_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "producer.h"

struct dd_config_list;
typedef struct dd_deadletter dd_deadletter;

/* Copies to TOPIC of messages consumed from SOURCE (both copied), with
 * [kafka] (KAFKA) as librdkafka's settings. ERROR (may be NULL) gets
 * librdkafka's errors, as producer.h's hooks.error. Returns 0,
 * DD_ERR_INVALID (a bad setting, err says which) or DD_ERR_NOMEM; *out is
 * NULL on error. Free with dd_deadletter_free (NULL is a no-op). */
int dd_deadletter_new(dd_deadletter **out, const char *topic, const char *source,
                      const struct dd_config_list *kafka,
                      void (*error)(void *ud, int err, const char *reason), void *ud, char *err,
                      size_t errlen);

/* The dead-letter topic. Static while D lives. */
const char *dd_deadletter_topic(const dd_deadletter *d);

/* Queue a copy of M with REASON in dd-reason. A copy that cannot be queued
 * is counted as an error and logged. Cannot fail otherwise. */
void dd_deadletter_send(dd_deadletter *d, const rd_kafka_message_t *m, const char *reason);

/* At stop: wait up to 5 s for the copies still queued; those left are
 * logged ("dead-letter messages not delivered") and dropped. */
void dd_deadletter_flush(dd_deadletter *d);

void dd_deadletter_free(dd_deadletter *d);

/* Copies delivered, and copies that could not be queued or delivered. */
uint64_t dd_deadletter_delivered(const dd_deadletter *d);
uint64_t dd_deadletter_errors(const dd_deadletter *d);

#endif
