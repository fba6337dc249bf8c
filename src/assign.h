/* SPDX-License-Identifier: Apache-2.0
 *
 * assign.h - where ingest's consumer starts in each partition and, in a
 * cluster, which partitions it takes (ingest.h, "Two ways to get
 * partitions"): the group id offsets are committed under, the store's
 * positions (history.h, "Log positions") and the check that the log still
 * holds them (the log gap), assign mode's self-assignment of the shard's
 * partitions, and the watch thread that reads the topic's partition count
 * from the broker. Knows nothing of windows, messages or the flusher.
 *
 * The watch thread reads the count every second until known, then every
 * 5 s (a metadata request blocks, so not on the poll thread). The first
 * count is checked by the partitions check (dd_assign_set_partitions_check)
 * before it is published; in assign mode a later change is logged, counted
 * and sticky (dd_assign_partitions_changed), in group mode it is followed.
 *
 * Threads: dd_assign_from_store, dd_assign_store_start, dd_assign_poll and
 * dd_assign_count run on ingest's poll thread (rebalance callbacks
 * included); the watch thread writes the partition count; the getters said
 * to be so are safe from any thread; the rest is called from the thread
 * that owns the ingest (new, set_*, start, stop, free).
 */
#ifndef DD_ASSIGN_H
#define DD_ASSIGN_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "history.h"
#include "lag.h"

struct dd_config_list;
typedef struct dd_assign dd_assign;

/* ingest.h's settings that decide the partitions (struct dd_ingest_conf). */
struct dd_assign_conf {
    const char *topic;
    bool assign; /* self-assign p % shards == shard, no group */
    uint32_t shards, shard, replica;
    int partitioner;           /* enum dd_partitioner (partition.h) */
    bool from_beginning;       /* assign: a new store, start at each log's beginning */
    bool accept_truncated_log; /* a missing start of the log is not a gap */
};

/* Check CONF and derive the group id from KAFKA's group.id (ingest.h:
 * "<group.id>.s<shard>.r<replica>" in assign mode, which requires it).
 * HISTORY and LAG are borrowed and must outlive it. Returns 0,
 * DD_ERR_INVALID (err names the key) or DD_ERR_NOMEM; *out is NULL on
 * error. Free with dd_assign_free (NULL is a no-op). */
int dd_assign_new(dd_assign **out, const struct dd_assign_conf *conf,
                  const struct dd_config_list *kafka, dd_history *history, dd_lag *lag, char *err,
                  size_t errlen);
void dd_assign_free(dd_assign *a);

/* The group id offsets are committed under. Static while A lives. */
const char *dd_assign_group(const dd_assign *a);

/* The consumer and its topic handle (borrowed), before dd_assign_start
 * and before any poll-thread call. */
void dd_assign_set_consumer(dd_assign *a, rd_kafka_t *rk, rd_kafka_topic_t *rkt);
/* ingest.h, dd_ingest_set_partitions_check. Before dd_assign_start. */
void dd_assign_set_partitions_check(dd_assign *a, bool (*ok)(void *ud, int32_t n), void *ud);

/* Start the watch thread: 0, DD_ERR_STATE (started) or DD_ERR_NOMEM. */
int dd_assign_start(dd_assign *a);
/* Stop and join it (a metadata request in flight bounds the wait). A
 * no-op when not started. */
void dd_assign_stop(dd_assign *a);

/* Start each partition of L at the store's recorded position where it has
 * one; in assign mode one without starts at the log's beginning. Each such
 * start is checked against the log's start (a gap: logged, counted,
 * dd_assign_log_gap). Returns how many start from the store. */
int dd_assign_from_store(dd_assign *a, rd_kafka_topic_partition_list_t *l);
/* Store, as the consumer's next offsets, each concrete start of L (so its
 * consumer lag counts from there). Failures are logged. */
void dd_assign_store_start(dd_assign *a, const rd_kafka_topic_partition_list_t *l);

/* Assign mode, poll thread, every loop: once the partition count is known,
 * assign this shard's partitions (from the store's positions, committed
 * offsets, or the beginning for a new store; the lag is told), for good;
 * retried a second later if librdkafka refuses. True when it assigned
 * just now. Not in assign mode, or once done: false at once. */
bool dd_assign_poll(dd_assign *a);
/* The count the partitions were assigned by; 0 before. Poll thread. */
int32_t dd_assign_count(const dd_assign *a);

/* ingest.h's getters of the same names. Safe from any thread. */
bool dd_assign_log_gap(dd_assign *a, char *why, size_t whylen);
int32_t dd_assign_partition_count(const dd_assign *a);
bool dd_assign_partitions_changed(const dd_assign *a);

/* Counters since new (struct dd_ingest_stats has what they mean). Safe
 * from any thread. */
struct dd_assign_stats {
    uint64_t log_gaps, count_changes, topic_partitions;
};
void dd_assign_get_stats(const dd_assign *a, struct dd_assign_stats *out);

#endif
