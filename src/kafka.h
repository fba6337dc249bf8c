/* SPDX-License-Identifier: Apache-2.0
 *
 * kafka.h - what dedupd asks of librdkafka beyond its API: a handle's
 * configuration built from the [kafka] pass-through section with dedupd's
 * own defaults, librdkafka's log levels in dedupd's log, the consumer lag
 * read out of librdkafka's statistics JSON, and a topic's partition count.
 * No threads, no state: ingest.c and producer.c own the handles.
 *
 * Consumer defaults that differ from librdkafka's unless the operator sets
 * them: partition.assignment.strategy=cooperative-sticky,
 * enable.auto.commit=false (commits follow durable writes),
 * auto.offset.reset=earliest, statistics.interval.ms=5000,
 * queued.min.messages=1000000. enable.auto.offset.store is always false:
 * offsets are stored only once the plays they cover are durable, so
 * setting it true is an error; enable.partition.eof is always true (the
 * ingest lag, ingest.h, learns from it that a partition is caught up), so
 * setting it false is an error. A producer (the dead-letter topic's,
 * producer.h's) gets every key but the consumer-only ones and
 * statistics.interval.ms.
 */
#ifndef DD_KAFKA_H
#define DD_KAFKA_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "dd.h"

/* A new configuration for a handle of TYPE from KAFKA (the pass-through
 * list; NULL = none), defaults applied as above. Returns it (the caller
 * sets callbacks and hands it to rd_kafka_new, or destroys it), or NULL
 * with a message naming the key ("kafka.<key>: ...") in err. */
rd_kafka_conf_t *dd_kafka_conf_new(rd_kafka_type_t type, const struct dd_config_list *kafka,
                                   char *err, size_t errlen);

/* A log_cb for rd_kafka_conf_set_log_cb: syslog levels 0-3 as error, 4
 * warn, 5-6 info, 7 debug, module=kafka. */
void dd_kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf);

/* Read the consumer lag of TOPIC's partitions from statistics JSON (LEN
 * bytes, not necessarily terminated): librdkafka's consumer_lag (messages
 * from the group's committed offset to the partition's end), or, for a
 * partition being fetched that has no committed offset in the group yet,
 * the messages from the consumer's position to the end (so a partition
 * that has received nothing since the group began counts 0, not unknown).
 * For each partition with a lag of 0 or more, EACH (if not NULL) is called
 * with its number and lag. Returns the sum, or -1 when the JSON cannot be
 * parsed or names no lag of TOPIC. */
int64_t dd_kafka_stats_lag(const char *json, size_t len, const char *topic,
                           void (*each)(void *ud, int32_t partition, int64_t lag), void *ud);

/* RKT's partition count, from a metadata request on RK that waits at most
 * TIMEOUT_MS (so not for a thread that must not block). Returns it (> 0),
 * or 0 when the request failed or the broker reports the topic with an
 * error (UNKNOWN_TOPIC_OR_PART: it does not exist), which is logged as a
 * warning through LIM (the caller's, one per caller: callers retry). */
struct dd_log_limit;
int32_t dd_kafka_partition_count(rd_kafka_t *rk, rd_kafka_topic_t *rkt, int timeout_ms,
                                 struct dd_log_limit *lim);

#endif
