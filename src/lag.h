/* SPDX-License-Identifier: Apache-2.0
 *
 * lag.h - how far the store is behind the plays topic, per partition
 * assigned here: the lag in milliseconds by offsets (dd_lag_ms, what
 * readiness and forwarding use), the lag by the messages' Kafka timestamps
 * (information only), the consumer lag in messages from librdkafka's
 * statistics, and waiting until a message is visible. Ingest (ingest.h)
 * feeds it at window granularity, never per message. Knows nothing of the
 * store, windows or librdkafka's handles: the high watermarks come from a
 * callback.
 *
 * Offsets are "next to read". A partition's lag is 0 when every message
 * before its high watermark is visible (its window written); otherwise how
 * long ago, on this node's own clock, the log's end was first seen past the
 * oldest message not yet visible. The log already there at the assignment
 * has no such date: until the partition has made visible the end it first
 * saw, its lag is unknown (-1). No producer's or broker's clock enters it.
 *
 * Threads: one mutex guards everything. Writers: the poll thread
 * (dd_lag_assign, dd_lag_unassign_all, dd_lag_pending, dd_lag_eof,
 * dd_lag_stats) and the flush thread (dd_lag_visible). Readers: any thread
 * (dd_lag_ms, dd_lag_consumer, dd_lag_consumer_total, dd_lag_wait_visible,
 * dd_lag_collect), which also note the watermarks they read. Every
 * function may be called from any thread between new and free; the split
 * above is who calls what.
 */
#ifndef DD_LAG_H
#define DD_LAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dd_lag dd_lag;
typedef struct dd_prom dd_prom;

/* PARTITION's high watermark into *HI: 0, or non-zero when not known yet
 * (ingest: rd_kafka_get_watermark_offsets, the cached value, no request).
 * Called with the lag's mutex held: it must not call back into the lag. */
typedef int (*dd_lag_watermark_fn)(void *ud, int32_t partition, int64_t *hi);

/* A lag for TOPIC (copied; the consumer lag is read for it from the
 * statistics) with the watermark source FN(UD). Returns 0 or DD_ERR_NOMEM;
 * *out is NULL on error. Free with dd_lag_free (NULL is a no-op). */
int dd_lag_new(dd_lag **out, const char *topic, dd_lag_watermark_fn fn, void *ud);
void dd_lag_free(dd_lag *l);

/* PARTITION is assigned here from now (ASSIGNED: its state starts afresh,
 * lag unknown) or not any more. Out of memory leaves it untracked. */
void dd_lag_assign(dd_lag *l, int32_t partition, bool assigned);
/* No partition is assigned here any more. */
void dd_lag_unassign_all(dd_lag *l);

/* Window slot IDX (0 or 1) took its first message of PARTITION, at OFFSET
 * with Kafka timestamp TS (<= 0: none): the log reached past it by now. */
void dd_lag_pending(dd_lag *l, int idx, int32_t partition, int64_t offset, int64_t ts);

/* The consumer read PARTITION up to its end, OFFSET (librdkafka's
 * partition EOF): with nothing pending all of it is visible, else once
 * what is pending is. */
void dd_lag_eof(dd_lag *l, int32_t partition, int64_t offset);

/* Slot IDX's window is written: for each partition i < N with NEXT[i] >=
 * 0, every message before NEXT[i] is visible, the last with Kafka
 * timestamp LAST_TS[i]. Wakes dd_lag_wait_visible. */
void dd_lag_visible(dd_lag *l, int idx, const int64_t *next, const int64_t *last_ts, size_t n);

/* Wait until the message at OFFSET of PARTITION is visible. Returns 0,
 * DD_ERR_TIMEOUT at DEADLINE_NS (dd_mono_ns clock), or DD_ERR_STATE when
 * PARTITION is not assigned here. */
int dd_lag_wait_visible(dd_lag *l, int32_t partition, int64_t offset, int64_t deadline_ns);

/* Up to CAP pairs (PARTS[i], LAGS[i]) of the assigned partitions whose lag
 * in ms is known; returns how many there are (may be more than CAP).
 * *WORST: the node's lag (the largest; -1 when nothing is assigned or a
 * lag is unknown); *EVENT_WORST (may be NULL): the largest lag by Kafka
 * timestamps, -1 unknown. Wall clock (dd_now_ms) differences only. */
size_t dd_lag_ms(dd_lag *l, int32_t *parts, int64_t *lags, size_t cap, int64_t *worst,
                 int64_t *event_worst);

/* librdkafka's statistics JSON (LEN bytes): the consumer lag of the topic,
 * total and per partition, replaces the last (kafka.h,
 * dd_kafka_stats_lag). */
void dd_lag_stats(dd_lag *l, const char *json, size_t len);
/* The consumer lag from the last statistics, summed over the assigned
 * partitions; -1 unknown. */
int64_t dd_lag_consumer_total(const dd_lag *l);
/* The same per partition: up to CAP pairs; returns how many there are. */
size_t dd_lag_consumer(dd_lag *l, int32_t *parts, int64_t *lags, size_t cap);

/* Render dedupd_ingest_consumer_lag, dedupd_ingest_partition_lag_seconds
 * (partitions whose lag is known), dedupd_ingest_lag_known,
 * dedupd_ingest_lag_seconds (absent while unknown) and
 * dedupd_ingest_event_lag_seconds (absent while unknown). Only from a
 * collector registry (metrics.h), which serialises scrapes: the
 * per-partition scratch is static. */
void dd_lag_collect(dd_prom *p, dd_lag *l);

#endif
