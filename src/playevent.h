/* SPDX-License-Identifier: Apache-2.0
 *
 * playevent.h - decode one Kafka play message (JSON or protobuf
 * dedup.v1.PlayEvent) into (scene, user, item, played_at_ms), and check it;
 * and encode one, as dedupd's own producer writes them (producer.h).
 * Pure: no I/O, no clock, no Kafka; the caller passes the message key and
 * timestamp.
 *
 * Rules (the operator's contract, also in conf/dedupd.conf):
 *   - JSON: an object with user_id|userId, item_id|itemId (strings, or
 *     integers taken as their decimal text), played_at_ms|playedAtMs (an
 *     integer, or a string of digits as proto3 JSON writes int64), scene
 *     (string; missing = ""). Other fields are ignored. Parsed with yajl
 *     (no comments, UTF-8 checked, at most 16 levels deep); trailing bytes
 *     other than white space are an error.
 *   - protobuf: dedup.v1.PlayEvent (proto/dedup.proto).
 *   - user: the payload's user id when not empty, else the message key (the
 *     producer's partitioning key is the user id). When both are present
 *     and differ the payload wins - it is what the tracker said about the
 *     play - and the event is flagged (key_mismatch) so it can be counted:
 *     it means the producer partitions by something else, which breaks the
 *     "a partition holds whole users" layout but loses no play.
 *   - played_at_ms: missing or 0 -> the message timestamp (msg_ts_ms).
 *     Negative -> undecodable.
 *   - ids: user and item must not be empty; user, item and scene must not
 *     be longer than max_id_bytes (scene also not over 255 bytes), and
 *     must be valid UTF-8 without a NUL byte, as the API's strings are
 *     (wire.h); otherwise the event is undecodable.
 * The caller checks the time against the store (too far in the future,
 * expired).
 *
 * Threads: a decoder is used by one thread at a time.
 */
#ifndef DD_PLAYEVENT_H
#define DD_PLAYEVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dd_playevent_decoder dd_playevent_decoder;

enum dd_playevent_format {
    DD_PLAYEVENT_JSON = 0,
    DD_PLAYEVENT_PROTOBUF = 1,
};

/* Why a message was refused; DD_PLAYEVENT_OK when it was not. */
enum dd_playevent_status {
    DD_PLAYEVENT_OK = 0,
    DD_PLAYEVENT_UNDECODABLE = 1, /* not the format, wrong field types, bad time */
    DD_PLAYEVENT_EMPTY_USER = 2,  /* no user id in the payload nor the key */
    DD_PLAYEVENT_EMPTY_ITEM = 3,
    DD_PLAYEVENT_ID_TOO_LONG = 4, /* user, item or scene over the limit */
};
#define DD_PLAYEVENT_NSTATUS 5

/* A short static name ("ok", "undecodable", "empty_user", "empty_item",
 * "id_too_long"), never NULL; unknown values give "unknown". */
const char *dd_playevent_status_name(int status);

/* "json" or "protobuf" -> the format, or -1. */
int dd_playevent_format_parse(const char *s);

/* A decoded play. The pointers are borrowed from the decoder (or from the
 * key passed in) and valid until its next decode or free; ids are bytes,
 * not NUL-terminated. */
struct dd_playevent {
    const char *scene;
    size_t scene_len;
    const char *user;
    size_t user_len;
    const char *item;
    size_t item_len;
    int64_t played_at_ms;
    bool key_mismatch; /* payload user and message key both present, differ */
};

/* Create a decoder for FORMAT whose ids may be at most MAX_ID_BYTES long.
 * Returns 0, DD_ERR_INVALID (format, max_id_bytes 0) or DD_ERR_NOMEM;
 * *out is NULL on error. Free with dd_playevent_decoder_free. */
int dd_playevent_decoder_new(dd_playevent_decoder **out, enum dd_playevent_format format,
                             uint32_t max_id_bytes);

/* Free the decoder and the last decoded event's memory. NULL is a no-op. */
void dd_playevent_decoder_free(dd_playevent_decoder *d);

/* Decode PAYLOAD (LEN bytes) with message KEY (KEY_LEN bytes; NULL/0 when
 * the message has none) and timestamp MSG_TS_MS into EV. Returns a
 * dd_playevent_status; EV is filled only on DD_PLAYEVENT_OK. Never
 * crashes on any input. Memory of the previous event is reused. */
int dd_playevent_decode(dd_playevent_decoder *d, const void *payload, size_t len, const void *key,
                        size_t key_len, int64_t msg_ts_ms, struct dd_playevent *ev);

/* The same for the payload of a forget marker (ingest.h): the same rules,
 * except that the item id must be empty (DD_PLAYEVENT_UNDECODABLE
 * otherwise); EV's item is then "" and its played_at_ms means nothing. */
int dd_playevent_decode_forget(dd_playevent_decoder *d, const void *payload, size_t len,
                               const void *key, size_t key_len, struct dd_playevent *ev);

/* Append to OUT a PlayEvent in FORMAT as the decoder reads it: USER, ITEM
 * (empty for a forget marker), PLAYED_AT_MS (0: left out) and SCENE, ids
 * of LEN bytes each. The ids are written as given: the caller has checked
 * them (valid UTF-8 without NUL, as the API's strings are); JSON escapes
 * '"', '\\' and control characters. Returns 0, or DD_ERR_NOMEM (OUT
 * unchanged) or DD_ERR_INVALID (a negative time, an unknown format). */
struct dd_buf;
int dd_playevent_encode(struct dd_buf *out, enum dd_playevent_format format, const char *user,
                        size_t user_len, const char *item, size_t item_len, int64_t played_at_ms,
                        const char *scene, size_t scene_len);

#endif
