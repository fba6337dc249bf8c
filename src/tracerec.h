/* SPDX-License-Identifier: Apache-2.0
 *
 * tracerec.h - a trace record (trace.h) and its bytes: the record codec
 * and key layout the trace store keeps (trace.h, "Store"), and the pending
 * buffer of encoded records a caller keeps until the write they describe
 * is done. Knows nothing of RocksDB or which users are traced.
 *
 * No state: every function is safe from any thread; a dd_trace_pending is
 * its owner's, not thread-safe.
 */
#ifndef DD_TRACEREC_H
#define DD_TRACEREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

enum dd_trace_kind {
    DD_TRACE_PLAY = 1,
    DD_TRACE_DELIVERY = 2,
    DD_TRACE_FORGET = 3,
};
#define DD_TRACE_NKINDS 3

enum dd_trace_source {
    DD_TRACE_SRC_KAFKA = 1, /* topic, partition, offset */
    DD_TRACE_SRC_RECORD_PLAYS = 2,
    DD_TRACE_SRC_RECORD_DELIVERY = 3,
    DD_TRACE_SRC_FORGET_USER = 4,
};

/* "play", "delivery", "forget"; "RecordPlays", "kafka", ...; "?" for
 * values outside the enums. Static. */
const char *dd_trace_kind_name(int kind);
const char *dd_trace_source_name(int source);

/* One record. Strings are (pointer, length), borrowed. */
struct dd_trace_rec {
    int kind;            /* enum dd_trace_kind */
    int source;          /* enum dd_trace_source */
    int64_t at_ms;       /* the event's time: played, delivered, forgotten */
    int64_t recorded_ms; /* when dedupd wrote it (0 on write: now) */
    const char *scene;   /* <= 255 bytes */
    size_t scene_len;
    const char *item; /* empty for a forget; <= 65535 bytes */
    size_t item_len;
    const char *topic; /* Kafka only; <= 255 bytes */
    size_t topic_len;
    int32_t partition; /* Kafka only, else -1 */
    int64_t offset;    /* Kafka only, else -1 */
    uint32_t seq;      /* read back from the key (dd_trace_scan) */
};

/* The largest encoded record. */
#define DD_TRACE_REC_MAX (40 + 255 + 65535 + 255)

/* Encode R into OUT (CAP bytes). Returns the encoded length, or 0 when a
 * field is out of range (kind, source, lengths, negative at_ms) or CAP is
 * too small. Cannot fail otherwise. */
size_t dd_trace_encode(const struct dd_trace_rec *r, uint8_t *out, size_t cap);

/* Decode the value V (LEN bytes) into R, whose strings then point into V.
 * Returns 0, or DD_ERR_CORRUPT when the version, a length, an enum or the
 * checksum is wrong (R is then unspecified). Never reads outside V. */
int dd_trace_decode(const uint8_t *v, size_t len, struct dd_trace_rec *r);

/* A record's key: at most 2 + 65535 + 12 bytes into OUT (CAP). Returns the
 * length, or 0 (user empty or too long, CAP too small). */
size_t dd_trace_key(uint8_t *out, size_t cap, const char *user, size_t user_len, int64_t at_ms,
                    uint32_t seq);

/* Parse a record key: the user (pointing into KEY), time and seq. Returns
 * 0, or DD_ERR_CORRUPT when KEY is not a record key (a meta key, or a
 * length that does not fit). */
int dd_trace_key_parse(const uint8_t *key, size_t len, const char **user, size_t *user_len,
                       int64_t *at_ms, uint32_t *seq);

/* ---- records pending a write --------------------------------------- */

/* Encoded records of (user, record) kept in order until written
 * (dd_trace_record_pending, trace.h): entries of u16 BE user length |
 * user | u32 BE record length | record (dd_trace_encode). Zero-initialise
 * ({0}); free with dd_trace_pending_free. */
struct dd_trace_pending {
    struct dd_buf b;
};

/* A record is refused once about this many bytes wait in one buffer (the
 * last one taken may pass it by its own length). */
#define DD_TRACE_PENDING_MAX (1u << 20)

/* Append record R of USER (USER_LEN <= 65535). Returns 0, DD_ERR_LIMIT
 * (DD_TRACE_PENDING_MAX reached), DD_ERR_INVALID (USER too long, or R
 * does not encode) or DD_ERR_NOMEM; on error P is unchanged and the
 * caller counts the record as dropped (dd_trace_dropped). */
int dd_trace_pending_add(struct dd_trace_pending *p, const char *user, size_t user_len,
                         const struct dd_trace_rec *r);

/* The entry at *POS (start at 0): its user and encoded record, pointing
 * into P; *POS moves past it. False at the end. Cannot fail. */
bool dd_trace_pending_next(const struct dd_trace_pending *p, size_t *pos, const char **user,
                           size_t *user_len, const uint8_t **v, size_t *len);

/* Drop every entry (the memory is kept). */
void dd_trace_pending_clear(struct dd_trace_pending *p);
/* Free P's memory; P is then empty. */
void dd_trace_pending_free(struct dd_trace_pending *p);

#endif
