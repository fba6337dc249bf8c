/* SPDX-License-Identifier: Apache-2.0
 *
 * playmsg.h - what a consumed message of the plays topic is (ingest.h,
 * "Forget markers"): a play, or a forget marker (the "dedupd-op: forget"
 * header, or "forget-all-scenes" for every scene of the user, whose
 * payload then has no scene), decoded (playevent.h), a marker's "dedupd-mac" checked
 * (marker.h), and in assign mode its user checked against the partition
 * it came in (partition.h); or bad, with the reason ingest counts, logs
 * and dead-letters it under. Knows nothing of windows, offsets or the
 * store. No state: safe from any thread with its own decoder.
 */
#ifndef DD_PLAYMSG_H
#define DD_PLAYMSG_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "marker.h"
#include "playevent.h"

/* Bad messages, by reason (indexes of struct dd_ingest_stats.bad). */
enum dd_ingest_bad {
    DD_INGEST_BAD_UNDECODABLE = 0, /* not JSON / PlayEvent, wrong types, negative time */
    DD_INGEST_BAD_EMPTY_USER = 1,  /* no user id in payload nor key */
    DD_INGEST_BAD_EMPTY_ITEM = 2,
    DD_INGEST_BAD_ID_TOO_LONG = 3,     /* over ingest.max_id_bytes (scene: also 255) */
    DD_INGEST_BAD_FUTURE = 4,          /* later than now + history.max_future_ms */
    DD_INGEST_BAD_WRONG_PARTITION = 5, /* assign mode: the user belongs to another partition */
    DD_INGEST_BAD_UNAUTHENTICATED_FORGET = 6, /* a forget marker without a valid MAC, or
                                          * any marker when no key is set (marker.h) */
};
#define DD_INGEST_NBAD 7
/* "undecodable", "empty_user", "empty_item", "id_too_long", "future",
 * "wrong_partition", "unauthenticated_forget". */
const char *dd_ingest_bad_name(int reason);

/* What a good message asks for. */
enum dd_playmsg_op {
    DD_PLAYMSG_PLAY = 0,
    DD_PLAYMSG_FORGET = 1,
    DD_PLAYMSG_FORGET_ALL = 2, /* every scene of the user (dedupd-op forget-all-scenes) */
};

/* What a message is checked against. */
struct dd_playmsg_check {
    const dd_marker_key *forget_key; /* markers must be signed with it; NULL = none valid */
    bool assign;                     /* assign mode: check the user's partition */
    int partitioner;                 /* enum dd_partitioner (partition.h) the producers use */
    int32_t count;                   /* the partition count the partitions were assigned by */
};

/* Read M (Kafka timestamp TS, > 0: a play without a time gets it) with
 * DEC into *EV (pointing into M and DEC). Returns -1 for a good message,
 * its kind in *OP; else the reason (enum dd_ingest_bad), with more for
 * the log line in WHY (" key=value", or ""; WHYLEN >= 48). Cannot fail
 * otherwise. */
int dd_playmsg_read(dd_playevent_decoder *dec, const rd_kafka_message_t *m, int64_t ts,
                    const struct dd_playmsg_check *c, struct dd_playevent *ev,
                    enum dd_playmsg_op *op, char *why, size_t whylen);

#endif
