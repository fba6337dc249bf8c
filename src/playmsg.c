/* SPDX-License-Identifier: Apache-2.0
 *
 * playmsg.c - a consumed message of the plays topic; see playmsg.h.
 */
#include "playmsg.h"

#include "dd.h"
#include "partition.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The header that makes a message of the plays topic an operation. */
#define OP_HEADER "dedupd-op"

static const char *const bad_names[DD_INGEST_NBAD] = {
    "undecodable",
    "empty_user",
    "empty_item",
    "id_too_long",
    "future",
    "wrong_partition",
    "unauthenticated_forget",
};

const char *dd_ingest_bad_name(int reason)
{
    if (reason < 0 || reason >= DD_INGEST_NBAD) return "unknown";
    return bad_names[reason];
}

enum op { OP_PLAY, OP_FORGET, OP_FORGET_ALL, OP_UNKNOWN };

static enum op message_op(const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *hdrs;
    const void *v;
    size_t n;
    if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(hdrs, OP_HEADER, &v, &n) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return OP_PLAY;
    if (n == 6 && v && memcmp(v, "forget", 6) == 0) return OP_FORGET;
    if (n == sizeof DD_MARKER_OP_ALL - 1 && v && memcmp(v, DD_MARKER_OP_ALL, n) == 0)
        return OP_FORGET_ALL;
    return OP_UNKNOWN;
}

/* Whether forget marker M (decoded into EV) is signed with the key
 * (marker.h): its dedupd-mac header over EV's user, scene and time. */
static enum dd_marker_check marker_check(const dd_marker_key *key, const rd_kafka_message_t *m,
                                         const struct dd_playevent *ev, bool all)
{
    rd_kafka_headers_t *hdrs;
    const void *mac = NULL;
    size_t n = 0;
    if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(hdrs, DD_MARKER_HEADER, &mac, &n) != RD_KAFKA_RESP_ERR_NO_ERROR)
        mac = NULL;
    else if (!mac)
        mac = ""; /* a header without a value: present, malformed */
    if (all) return dd_marker_verify_all(key, ev->user, ev->user_len, ev->played_at_ms, mac, n);
    return dd_marker_verify(key, ev->user, ev->user_len, ev->scene, ev->scene_len, ev->played_at_ms,
                            mac, n);
}

static int bad_reason(int status)
{
    switch (status) {
    case DD_PLAYEVENT_OK: return -1;
    case DD_PLAYEVENT_EMPTY_USER: return DD_INGEST_BAD_EMPTY_USER;
    case DD_PLAYEVENT_EMPTY_ITEM: return DD_INGEST_BAD_EMPTY_ITEM;
    case DD_PLAYEVENT_ID_TOO_LONG: return DD_INGEST_BAD_ID_TOO_LONG;
    default: return DD_INGEST_BAD_UNDECODABLE;
    }
}

int dd_playmsg_read(dd_playevent_decoder *dec, const rd_kafka_message_t *m, int64_t ts,
                    const struct dd_playmsg_check *c, struct dd_playevent *ev,
                    enum dd_playmsg_op *op, char *why, size_t whylen)
{
    enum op o = message_op(m);
    int st = o == OP_PLAY ? dd_playevent_decode(dec, m->payload, m->len, m->key, m->key_len, ts, ev)
             : o == OP_FORGET || o == OP_FORGET_ALL
                 ? dd_playevent_decode_forget(dec, m->payload, m->len, m->key, m->key_len, ev)
                 : DD_PLAYEVENT_UNDECODABLE;
    /* The all-scenes MAC covers no scene: one in the payload would be
     * unsigned, so it is refused rather than ignored. */
    if (st == DD_PLAYEVENT_OK && o == OP_FORGET_ALL && ev->scene_len) st = DD_PLAYEVENT_UNDECODABLE;
    int bad = bad_reason(st);
    int32_t want = -1;
    enum dd_marker_check mc = DD_MARKER_VALID;
    if (bad < 0 && (o == OP_FORGET || o == OP_FORGET_ALL) &&
        (mc = marker_check(c->forget_key, m, ev, o == OP_FORGET_ALL)) != DD_MARKER_VALID)
        bad = DD_INGEST_BAD_UNAUTHENTICATED_FORGET;
    if (bad < 0 && c->assign) {
        /* A cluster node owns users by the producers' partitioner: a play
         * elsewhere would be stored where no call for its user comes. */
        want =
            dd_partition_of((enum dd_partitioner)c->partitioner, ev->user, ev->user_len, c->count);
        if (want != m->partition) bad = DD_INGEST_BAD_WRONG_PARTITION;
    }
    why[0] = '\0';
    if (bad == DD_INGEST_BAD_WRONG_PARTITION)
        snprintf(why, whylen, " user_partition=%" PRId32, want);
    else if (bad == DD_INGEST_BAD_UNAUTHENTICATED_FORGET)
        snprintf(why, whylen, " mac=\"%s\"", dd_marker_strerror(mc));
    *op = o == OP_FORGET       ? DD_PLAYMSG_FORGET
          : o == OP_FORGET_ALL ? DD_PLAYMSG_FORGET_ALL
                               : DD_PLAYMSG_PLAY;
    return bad;
}
