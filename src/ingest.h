/* SPDX-License-Identifier: Apache-2.0
 *
 * ingest.h - the Kafka play consumer: it consumes ingest.topic, decodes
 * play events (playevent.h), gathers them in windows (window.h), writes
 * each window to the history store as one batch, and only once that batch
 * is durable (ingest.durable: flush, after the next memtable flush; wal,
 * after the next WAL sync; window, as written) stores and commits the
 * messages' offsets. Knows nothing
 * of gRPC.
 *
 * Semantics (docs/design.md, "Ingest semantics"): at-least-once from Kafka,
 * idempotent into the filters. A crash or a partition moving loses no play:
 * whatever was not durable was not committed, and is consumed again.
 * Each window's write batch also records, per partition, the next offset
 * to read (dd_history_batch_put_offset), so the store's position is made
 * durable with its plays; on assignment (both modes below) a partition
 * starts there when the store has a position for it, else from its
 * committed offset, as before.
 * A message that cannot be used (see struct dd_ingest_stats) is counted,
 * logged with topic, partition and offset (rate-limited), copied to
 * ingest.dead_letter_topic when one is set, and skipped: its offset
 * advances with the window it fell in.
 *
 * Two ways to get partitions:
 *   - group (the default): a member of the consumer group kafka.group.id,
 *     partitions assigned and moved by the group's rebalancing.
 *   - assign (a cluster node, conf->assign): no group membership. Once
 *     the topic's partition count is known (read from the broker, retried
 *     every second while the topic is missing: not ready meanwhile), the
 *     consumer assigns itself the partitions p with p % shards == shard,
 *     each from its committed offset (kafka.auto.offset.reset without
 *     one), and never gives them up. Offsets are committed under the group
 *     id "<kafka.group.id>.s<shard>.r<replica>", so each replica keeps its
 *     own offsets and Kafka's tools show each one's lag under its name. A
 *     play whose user id the producers' partitioner (conf->partitioner)
 *     maps to another partition than the one it came in is a producer's
 *     error: bad (DD_INGEST_BAD_WRONG_PARTITION), never stored, since no
 *     Filter call for that user reaches this shard.
 * In both, the topic's partition count is read again every 5 s; in assign
 * mode a change (partitions added: users move between partitions) is
 * logged as an error, counted, and reported from then on by
 * dd_ingest_partitions_changed until restart, while the partitions owned
 * at assignment stay consumed (and checked against the count at
 * assignment).
 *
 * Forget markers: a message of ingest.topic with the header
 * "dedupd-op: forget" whose payload is a PlayEvent (ingest.format) with a
 * user id (the payload's, else the key), a scene ("" is the default
 * scene) and no item id deletes every play of that (scene, user)
 * (dd_history_forget) in log order: the plays of its partition consumed
 * before it are gone, those after it are kept. The marker ends the window
 * it falls in; the flush thread runs the forget right after writing that
 * window and before the window's offsets are stored, so the marker's
 * offset is committed only once the forget is durable, and a crash
 * replays the plays before it and the forget again, in order. A marker
 * with an item id, or with another dedupd-op value, is undecodable. A
 * marker is applied only when conf->forget_key is set and its
 * "dedupd-mac" header is the MAC of its user, scene and time (the
 * PlayEvent's played_at_ms) under that key (marker.h); any other is
 * DD_INGEST_BAD_UNAUTHENTICATED_FORGET: counted, logged (rate-limited,
 * with what was wrong), dead-lettered, not applied.
 *
 * Threads: dd_ingest_start starts a poll thread (consumer poll, decode,
 * window, assignment, rebalance callbacks: ingest.c), a flush thread
 * (history write, forgets, durability flush, offset store, commit:
 * flush.h) and a watch thread (the topic's partition count: assign.h);
 * with a dead-letter topic, dd_ingest_new starts the dead-letter
 * producer's poll thread (deadletter.h, producer.h). Every function here is called
 * from one controlling thread (main), except those said to be safe from
 * any thread, which may be called at any time between new and free.
 */
#ifndef DD_INGEST_H
#define DD_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "history.h"
#include "playmsg.h"
#include "window.h"

struct dd_config_list;
struct dd_marker_key;

/* The consumer's settings (ingest.* in conf/dedupd.conf). */
struct dd_ingest_conf {
    bool enabled; /* false: run without Kafka (main does not create one) */
    char *topic;
    char *format;                 /* "json" or "protobuf" */
    char *dead_letter_topic;      /* "" = none */
    uint32_t max_id_bytes;        /* longer user or item ids are rejected */
    char *durable;                /* "flush", "wal" or "window" (ingest.durable) */
    bool wal;                     /* true: as durable = window (the older key) */
    uint32_t durable_interval_ms; /* flush, wal: a durable point + commit at least this often */
    /* Set by main from [cluster] (cluster.h), not operator keys. */
    bool assign; /* self-assign partitions p with p % shards == shard, no group */
    uint32_t shards, shard, replica; /* assign: shards >= 1, shard < shards */
    int partitioner;           /* assign: enum dd_partitioner (partition.h) the producers use */
    bool from_beginning;       /* assign: the store is new (dd_history_created): start every
                           * partition at its beginning, not at offsets committed for a
                           * store that was lost (a replaced volume) */
    bool accept_truncated_log; /* ingest.accept_truncated_log: assign mode, a partition
                                * with no stored position may start past offset 0 */
    const struct dd_marker_key *forget_key; /* forget markers must be signed with it
                           * (marker.h); NULL = none: no marker is applied. Borrowed:
                           * must outlive the ingest */
};

typedef struct dd_ingest dd_ingest;

/* Create the consumer (and the dead-letter producer, if configured) from
 * CONF, WINDOW and every key of KAFKA, which is passed to librdkafka as
 * is, with dedupd's defaults (kafka.h); in assign mode group.id is
 * replaced by the derived one (above), and kafka.group.id must be set.
 * Nothing connects yet. HISTORY is borrowed and must outlive the ingest;
 * CONF, WINDOW and KAFKA are only read during the call. Returns 0,
 * DD_ERR_INVALID (a bad setting: err names the key) or DD_ERR_NOMEM; *out
 * is NULL on error.
 * Free with dd_ingest_free. */
int dd_ingest_new(dd_ingest **out, const struct dd_ingest_conf *conf,
                  const struct dd_window_conf *window, const struct dd_config_list *kafka,
                  dd_history *history, char *err, size_t errlen);

/* Keep traces (trace.h) of the traced users' plays and forget markers:
 * each is noted with its topic, partition and offset when consumed and
 * written to TRACE (borrowed; must outlive the ingest) right after its
 * window (and forget) is written, in log order; a window dropped unwritten
 * at stop drops its records too, and a window replayed after a crash
 * records its plays again. At most 1 MiB of records wait per window (more
 * are counted as dropped). Untraced users cost one dd_trace_wanted per
 * message. Call before dd_ingest_start; NULL (the default) = none. */
typedef struct dd_trace dd_trace;
void dd_ingest_set_trace(dd_ingest *in, dd_trace *trace);

/* Call OK(UD, n) once, from the watch thread, when the topic's partition
 * count N is first known, before anything is assigned by it: false (the
 * store's ownership differs, owner.h) keeps the count unpublished, so that
 * assign mode assigns nothing and the node stays not ready. Call before
 * dd_ingest_start; NULL (the default) = none. */
void dd_ingest_set_partitions_check(dd_ingest *in, bool (*ok)(void *ud, int32_t n), void *ud);

/* Subscribe (group mode; assign mode assigns once the partition count is
 * known) and start the threads. Returns 0, DD_ERR_STATE (already
 * started), DD_ERR_UNAVAILABLE (subscribe failed) or DD_ERR_NOMEM
 * (threads); on error nothing runs and dd_ingest_free may follow. */
int dd_ingest_start(dd_ingest *in);

/* Stop consuming: flush and write what is pending, make it durable, store
 * and commit (synchronously) the offsets of what was written, leave the
 * group (if a member), close the consumer, flush the dead-letter
 * producer (bounded wait). Blocks until
 * done. If the store cannot be written, the pending plays are not
 * committed (they are consumed again next time) and the failure is logged.
 * A no-op when not started or already stopped. */
void dd_ingest_stop(dd_ingest *in);

/* Wait until the message at OFFSET of PARTITION has been applied here (its
 * window written, a forget marker's delete done): read-your-writes for a
 * message this node produced (producer.h). Returns 0, DD_ERR_TIMEOUT at
 * DEADLINE_NS (dd_mono_ns clock), or DD_ERR_STATE when PARTITION is not
 * assigned here. Any thread. */
int dd_ingest_wait_visible(dd_ingest *in, int32_t partition, int64_t offset, int64_t deadline_ns);

/* Stop (if running) and free everything. NULL is a no-op. */
void dd_ingest_free(dd_ingest *in);

/* Make every window written so far durable now (ingest.durable = flush:
 * flush the memtables; wal: fsync the WAL; then store and commit the
 * offsets) instead of at the next ingest.durable_interval_ms, and wait for
 * it. Windows still being filled are not included. A no-op with durable =
 * window (or ingest.wal = true) or when not running.
 * Failures are counted (write_errors) and logged; the offsets then wait
 * for the next try. Waits for a window being written first, so it blocks
 * as long as a failing write is retried. Safe from any thread. */
void dd_ingest_sync(dd_ingest *in);

/* True while at least one partition of ingest.topic is assigned to this
 * consumer (for /readyz). Safe from any thread. */
bool dd_ingest_assigned(const dd_ingest *in);

/* Whether librdkafka reported an error (a broker down or unreachable,
 * authentication, a missing topic: its error callback) in the last
 * DD_INGEST_BROKER_ERROR_S seconds; if so its name and text, printable
 * ASCII, go into WHY (may be NULL). /readyz adds it to "ingest has no
 * partitions assigned". Safe from any thread. */
#define DD_INGEST_BROKER_ERROR_S 60
bool dd_ingest_broker_error(dd_ingest *in, char *why, size_t whylen);

/* A partition assigned here starts in the log after the position its
 * store recorded for it (the topic's retention dropped plays before this
 * store had them: a node down longer than the retention, or a copy older
 * than it), or, in assign mode, the store has no position for it and its
 * log no longer starts at offset 0 (a new store, or a copy that lacks the
 * partition): the store misses those plays for good. True from then until
 * restart, with what and what to do in WHY (may be NULL); the node must
 * not be ready, and in assign mode nothing is consumed (so the next start
 * finds the gap again). ingest.accept_truncated_log declares such plays
 * not needed: no gap then (logged). Safe from any thread. */
bool dd_ingest_log_gap(dd_ingest *in, char *why, size_t whylen);

/* The topic's partition count: in assign mode the count the partitions
 * were assigned by (it stays, even after a change); in group mode the
 * last count read. 0 = not known yet. Safe from any thread. */
int32_t dd_ingest_partition_count(const dd_ingest *in);

/* Assign mode: true once the broker has reported a partition count other
 * than the one at assignment; sticky until restart. Always false in group
 * mode, where the group's rebalancing follows new partitions. Safe from
 * any thread. */
bool dd_ingest_partitions_changed(const dd_ingest *in);

/* How far behind the log the store is, in milliseconds; -1 = unknown
 * (nothing assigned yet, a partition's high watermark not known yet, or a
 * partition still replaying the log it found when assigned). It is the
 * largest lag of the partitions assigned here, judged by offsets: a
 * partition's lag is 0 when every message before its high watermark (as
 * librdkafka last saw it: rd_kafka_get_watermark_offsets, no request) is
 * visible, i.e. its window written to the store; otherwise how long ago,
 * on this node's own clock, it first saw the log's end past the oldest
 * message not yet visible. The log already there at the assignment has no
 * such date: until the partition has made visible the end it first saw,
 * its lag is unknown. No producer's or broker's clock enters this figure
 * (the Kafka timestamps give dedupd_ingest_event_lag_seconds, information
 * only). Wall clock (dd_now_ms) differences only. Safe from any thread. */
int64_t dd_ingest_lag_ms(const dd_ingest *in);

/* Bad messages, by reason: enum dd_ingest_bad and dd_ingest_bad_name are
 * playmsg.h's. */

/* Counters since dd_ingest_new, read atomically one by one. Safe from any
 * thread. */
struct dd_ingest_stats {
    uint64_t messages; /* messages consumed (good and bad) */
    uint64_t plays;    /* plays accepted into a window */
    uint64_t bad[DD_INGEST_NBAD];
    uint64_t expired;          /* plays older than the retention, dropped */
    uint64_t key_mismatch;     /* payload user differs from the message key (kept) */
    uint64_t duplicates;       /* plays already pending in their window */
    uint64_t plays_written;    /* distinct plays written to the store */
    uint64_t messages_flushed; /* messages whose window is written (visible) */
    uint64_t messages_durable; /* messages whose plays are durable (offsets stored) */
    uint64_t flushes;          /* windows written */
    uint64_t durable_flushes;  /* durable points (memtable flushes or WAL syncs) */
    uint64_t write_errors;     /* failed store writes or durability flushes (retried) */
    uint64_t commits;          /* successful offset commits */
    uint64_t commit_errors;
    uint64_t dead_lettered; /* bad messages produced to the dead-letter topic */
    uint64_t dead_letter_errors;
    uint64_t pauses;       /* times consumption paused for the store */
    uint64_t rebalances;   /* assignment changes (assign or revoke) */
    uint64_t log_gaps;     /* partitions whose log starts after the store's position */
    uint64_t kafka_errors; /* errors reported by librdkafka */
    uint64_t forgets;      /* forget markers applied (durable writes of dd_history_forget) */
    uint64_t partition_count_changes; /* times the broker reported a new partition count */
    uint64_t topic_partitions;        /* now: the partition count last read, 0 unknown */
    uint64_t assigned_partitions;     /* now */
    int64_t consumer_lag;             /* sum over assigned partitions; -1 unknown */
    uint64_t last_flush_ms;           /* duration of the last window write */
    uint64_t pending_entries; /* now: (scene, user, segment) entries in the window being filled */
    uint64_t pending_bytes;   /* now: bytes allocated by that window */
};
void dd_ingest_get_stats(const dd_ingest *in, struct dd_ingest_stats *out);

/* A metrics.h collector for UD (a dd_ingest *): renders dedupd_ingest_*
 * (the lag families are lag.h's; dedupd_ingest_lag_seconds is absent
 * while unknown), dedupd_window_pending_* and dedupd_flush_duration_seconds.
 * Call it only from a collector registry (metrics.h), which serialises
 * scrapes: the lag keeps its per-partition scratch in static storage.
 * The plays families are plays.h's. */
typedef struct dd_prom dd_prom;
void dd_ingest_collect(dd_prom *p, void *ud);

#endif
