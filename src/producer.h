/* SPDX-License-Identifier: Apache-2.0
 *
 * producer.h - the plays topic's producer for the writes that reach a
 * cluster node by gRPC instead of Kafka (RecordPlays, ForgetUser:
 * record.h): the node writes them locally and produces them here, so every
 * replica of the user's shard applies them from the log, in log order,
 * as it applies the trackers' plays. Knows nothing of gRPC or the store.
 *
 * DESIGN
 *
 * Messages: key = the user id; payload = a dedup.v1.PlayEvent in the
 *   topic's format (playevent.h, as ingest reads it). A play carries its
 *   item and its resolved time; a forget marker (ingest.h) has no item,
 *   the time it was made (now) and the headers "dedupd-op: forget" and,
 *   with conf->forget_key, "dedupd-mac": its MAC under that key
 *   (marker.h), without which no node applies it.
 * Partition: dd_partition_of(conf->partitioner, user, count) (partition.h),
 *   exactly the partition a producer configured with that partitioner
 *   chooses, so a user's plays from both sources share one partition and
 *   its order. COUNT is read from the broker's metadata by the poll thread
 *   at start, again whenever a delivery fails for an unknown topic or
 *   partition, and kept meanwhile; a call that finds it unknown waits for
 *   it, up to its deadline.
 * Delivery: librdkafka's idempotent producer, always (enable.idempotence
 *   = true, acks = all, whatever [kafka] says): retries neither duplicate
 *   nor reorder a partition's messages. message.timeout.ms is the call
 *   timeout (conf->timeout_ms), so a message whose caller was told it
 *   failed is not delivered long after. allow.auto.create.topics is
 *   false: a missing topic is an error, never a topic with the broker's
 *   default partition count.
 * Waiting: each call has a waiter on the heap with a reference count (the
 *   call's, one per message in flight; under the producer's mutex). The
 *   delivery report, run by the poll thread, drops its message's; the
 *   caller drops its own when it returns, whether everything was
 *   acknowledged or its deadline passed. The last reference frees the
 *   waiter, so a report never touches memory of a caller that gave up.
 * Copies (conf->copies): the same code path produces copies of consumed
 *   messages to another topic (ingest's dead letters, ingest.h): as [kafka]
 *   says, none of the settings above forced, no partition count read, each
 *   message to the partition librdkafka's partitioner picks for its key;
 *   dd_producer_copy queues and returns, and each delivery report goes to
 *   the conf's hooks.
 * Threads: a poll thread serves delivery reports and metadata reads. The
 *   functions below but new and free may be called from any number of
 *   threads at once.
 */
#ifndef DD_PRODUCER_H
#define DD_PRODUCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dd_config_list;
struct dd_marker_key;
typedef struct dd_prom dd_prom;
typedef struct dd_producer dd_producer;

/* What a copies producer reports, to its owner instead of its own log.
 * Both run on librdkafka's or the poll thread: they must be thread-safe
 * and must not call back into the producer. */
struct dd_producer_hooks {
    /* A copy's delivery report: ERROR NULL = delivered, else why not. */
    void (*delivered)(void *ud, const char *error);
    /* librdkafka's error callback: ERR its rd_kafka_resp_err_t, REASON its text. */
    void (*error)(void *ud, int err, const char *reason);
    void *ud;
};

struct dd_producer_conf {
    const char *topic;   /* the plays topic (ingest.topic); copies: their topic */
    const char *format;  /* "json" or "protobuf" (ingest.format); copies: unused */
    int partitioner;     /* enum dd_partitioner (partition.h) the play producers use;
                                 * copies: unused */
    uint32_t timeout_ms; /* a call's deadline when it gives none; >= 1. Copies: how
                                 * long dd_producer_free waits for queued ones */
    const struct dd_marker_key *forget_key; /* signs forget markers (marker.h); NULL =
                                 * markers go unsigned (and are not applied). Borrowed:
                                 * must outlive the producer */
    bool copies;                            /* a copies producer ("Copies" above) */
    const char *what;               /* names it in errors ("the dead-letter producer"); NULL =
                                 * "the producer" */
    struct dd_producer_hooks hooks; /* copies: where reports go; NULL functions = none */
};

/* Create the producer from CONF (strings copied) and every key of KAFKA
 * ([kafka], passed to librdkafka as kafka.h says for producers; NULL =
 * none), and start its poll thread, which reads the topic's partition
 * count in the background. Returns 0, DD_ERR_INVALID (a bad setting: err
 * names it) or DD_ERR_NOMEM; *out is NULL on error. Free with
 * dd_producer_free. */
int dd_producer_new(dd_producer **out, const struct dd_producer_conf *conf,
                    const struct dd_config_list *kafka, char *err, size_t errlen);

/* Produce N plays of USER in SCENE ("" = the default scene): ITEMS[i]
 * played at PLAYED_AT_MS[i] (ms since the epoch, > 0: the caller resolves
 * "now"). All go to USER's partition, in order. Ids are C strings that
 * passed the API's checks (api.h). Returns 0 once every message is
 * acknowledged by the broker (acks = all), DD_ERR_UNAVAILABLE as soon as
 * one failed or could not be queued (message in err), DD_ERR_TIMEOUT when
 * DEADLINE_NS (dd_mono_ns clock; 0 = now + conf timeout) passes first,
 * DD_ERR_INVALID (a negative time) or DD_ERR_NOMEM. After an error some
 * of the plays may still be delivered: producing them again is harmless
 * (plays are idempotent). N = 0 returns 0 at once. */
int dd_producer_plays(dd_producer *p, const char *user, const char *scene, const char *const *items,
                      const int64_t *played_at_ms, size_t n, int64_t deadline_ns, char *err,
                      size_t errlen);

/* Produce a forget marker for (SCENE, USER) into USER's partition; the
 * same returns as dd_producer_plays. With an applied hook
 * (dd_producer_set_applied), it then waits, within the same deadline,
 * until this node's own ingest has applied the marker: the forget is then
 * done here in log order, so plays recorded here after it returns are
 * never deleted by it (a local delete would be undone by plays still in
 * the log before the marker, and would delete plays recorded after it
 * once ingest reached it). DD_ERR_TIMEOUT when it was not applied in time;
 * DD_ERR_UNAVAILABLE when this node does not consume that partition. */
typedef int (*dd_producer_applied_fn)(void *ud, int32_t partition, int64_t offset,
                                      int64_t deadline_ns);
/* Set the hook that waits for this node's ingest to apply a message it
 * produced (main wires dd_ingest_wait_visible). Call before any call. */
void dd_producer_set_applied(dd_producer *p, dd_producer_applied_fn fn, void *ud);
int dd_producer_forget(dd_producer *p, const char *user, const char *scene, int64_t deadline_ns,
                       char *err, size_t errlen);
/* The same with an all-scenes marker (marker.h; dedupd-op
 * forget-all-scenes, scene ""): every replica deletes USER's plays in every
 * scene its store holds, in log order. */
int dd_producer_forget_all(dd_producer *p, const char *user, int64_t deadline_ns, char *err,
                           size_t errlen);

/* A header of a copied message: NAME and its VALUE, C strings. */
struct dd_producer_header {
    const char *name, *value;
};

/* Copies producer: queue a copy of a message, KEY (KEY_LEN bytes, NULL =
 * none) and VALUE (LEN bytes), both copied, with the N headers H, to the
 * conf's topic. Returns at once: 0 (queued; its delivery report goes to
 * hooks.delivered), DD_ERR_UNAVAILABLE (not queued: librdkafka's reason
 * in err) or DD_ERR_NOMEM. Any thread. */
int dd_producer_copy(dd_producer *p, const void *key, size_t key_len, const void *value, size_t len,
                     const struct dd_producer_header *h, size_t n, char *err, size_t errlen);

/* Wait up to TIMEOUT_MS for every queued message to be delivered or
 * failed. Returns 0, or DD_ERR_TIMEOUT with *LEFT (may be NULL) how many
 * were still queued and librdkafka's reason in err: those are purged then,
 * their reports served as failures. Any thread; no call may be queuing
 * meanwhile. */
int dd_producer_flush(dd_producer *p, int timeout_ms, int *left, char *err, size_t errlen);

/* The partition count in use; 0 = not known yet. Cannot fail. */
int32_t dd_producer_partitions(dd_producer *p);

/* Stop the poll thread, wait (up to the call timeout) for messages still
 * queued, and free everything. No call may be running. NULL is a no-op. */
void dd_producer_free(dd_producer *p);

/* A metrics.h collector for UD (a dd_producer *): dedupd_producer_*. */
void dd_producer_collect(dd_prom *p, void *ud);

#endif
