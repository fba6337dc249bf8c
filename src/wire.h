/* SPDX-License-Identifier: Apache-2.0
 *
 * wire.h - the Filter RPC's messages straight from and to protobuf wire
 * bytes: dedup.v1.FilterRequest decoded in place (candidate ids stay where
 * gRPC received them) and dedup.v1.FilterResponse encoded into one buffer,
 * without building protobuf-c structs. The other RPCs are small and keep
 * protobuf-c (serve.c).
 *
 * DESIGN
 *
 * protobuf-c's unpack of a 10,000-candidate request makes 10,000
 * NUL-terminated copies of the ids, while the filter only hashes each id
 * and, in ids mode, sends some back. So the decoder walks the bytes once,
 * checking the framing of every field, reading the scalars and recording
 * (pointer, length) of each candidate in one arena array sized for the
 * most the bytes can hold; no second counting pass, no copy.
 *
 * It accepts and reads fields exactly as protobuf-c 1.4's unpack does
 * (tests/unit/test_wire.c and tests/fuzz/fuzz_wire.c compare both on the
 * same bytes), with one difference: every string must be valid UTF-8
 * without a NUL byte, as proto3 requires (see
 * dd_wire_filter_request_decode). The other RPCs' requests get the same
 * text check on their bytes before protobuf-c unpacks them.
 *
 * The response is the bytes protobuf_c_message_pack gives for the same
 * FilterResponse, written in one pass into a buffer of a bound's size
 * that the caller trims to the length written.
 *
 * Pure code: no I/O, no allocation but from the caller's arena.
 */
#ifndef DD_WIRE_H
#define DD_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "filter.h"
#include "text.h"

typedef struct dd_arena dd_arena;

/* Decode a dedup.v1.FilterRequest from DATA (LEN bytes, borrowed: the
 * query points into it, so it must outlive Q).
 *
 * Read as protobuf-c 1.4 reads it: a tag is a varint of at most 5 bytes;
 * wire types 3, 4 (groups), 6 and 7 are errors; unknown fields of the
 * other types are skipped; a length prefix is a varint of at most 5
 * bytes whose value is at most INT_MAX and fits the remaining bytes (its
 * fifth byte may carry bits past 32: protobuf-c refuses those); varints are
 * at most 10 bytes; strings (1, 2, 3) must be length-delimited;
 * lookback_days (4) and mode (5) must be varints, read as their low 32
 * bits; explain (6) is true when any byte of the field, as scanned, has a
 * low 7-bit set, whatever its wire type; candidate_hashes (7) is fixed64,
 * each hash in a field of wire type 1 or packed in length-delimited ones
 * (a whole number of 8-byte values; packed and unpacked may mix, in
 * order); a scalar given twice keeps the last value. Unlike protobuf-c, user_id, scene and every candidate id
 * must be valid UTF-8 (ids echoed back in kept_ids would fail the whole
 * call in C++, Java or Python clients) and hold no NUL byte (protobuf-c's
 * C strings cut there, so "victim\0x" read as "victim").
 *
 * Each field's place hangs on the previous one's length byte, so a walk
 * costs a load's latency per candidate: the usual run of plain candidate
 * fields takes a loop that does nothing else, and a run longer than 1 KiB
 * is walked as two chains at once, the second from a field start guessed
 * in the middle and kept only if the first chain lands exactly on it. The candidate array comes
 * from ARENA (with, for long requests, one scratch array of at most a
 * quarter as many entries, and one array of hashes when field 7 occurs:
 * the arena grows by less than 13 * LEN bytes),
 * only when there are at most MAX_IDS candidates; with more, q->ids is
 * NULL and q->n says how many there were (the filter rejects the request
 * on its count before reading ids). Time is linear in LEN.
 *
 * Compact candidates: when candidate_hashes holds any, q->n counts them,
 * q->hashes has them (NULL past MAX_IDS, like ids), q->ids is NULL and
 * q->mode is RESPONSE_MODE_INDEXES whatever the request said (the reply to
 * hashes is kept_indexes). Both candidate_ids and candidate_hashes set is
 * DD_ERR_INVALID, naming both (protobuf-c accepts it; dedupd does not
 * guess which list the caller meant).
 *
 * Returns 0,
 * DD_ERR_INVALID (not a valid FilterRequest, or a string that is not
 * UTF-8 or holds a NUL, or both candidate lists: WHY, when not NULL, gets
 * a message of at most WHY_CAP bytes naming it; Q is unspecified) or
 * DD_ERR_NOMEM. */
int dd_wire_filter_request_decode(const uint8_t *data, size_t len, dd_arena *arena, size_t max_ids,
                                  struct dd_filter_query *q, char *why, size_t why_cap);

/* The text rule on the other RPCs' requests, which protobuf-c unpacks:
 * dd_text_pb_check (text.h), under the name rpc.c calls. */
static inline int dd_wire_pb_text_check(const ProtobufCMessageDescriptor *d, const uint8_t *data,
                                        size_t len, int utf8, char *why, size_t why_cap)
{
    return dd_text_pb_check(d, data, len, utf8, why, why_cap);
}

/* Bytes of the encoded FilterResponse for query Q and its result R (as
 * dd_filter_decide left them): fields in number order, packed
 * kept_indexes, zero scalars and an index 0 omitted, as protobuf-c packs
 * them. Cannot fail. */
size_t dd_wire_filter_response_size(const struct dd_filter_query *q,
                                    const struct dd_filter_result *r);

/* Bytes OUT needs for dd_wire_filter_response_write(Q, R, OUT): at least
 * the response's size plus what the writer may store past its end. One
 * pass over the ids in ids mode, O(1) otherwise: below 16,384 candidates
 * every index takes one byte under 128 and two above, so the packed
 * indexes' length needs only the first 128 reasons counted. R->kept must be the
 * number of zero reasons (filter.h). Cannot fail. */
size_t dd_wire_filter_response_bound(const struct dd_filter_query *q,
                                     const struct dd_filter_result *r);

/* Encode that response into OUT, which has room for
 * dd_wire_filter_response_bound(Q, R) bytes (contents past the returned
 * length are unspecified); returns the bytes of the response, which are
 * dd_wire_filter_response_size(Q, R). R->kept as for the bound (checked
 * by an assert in indexes mode). Cannot fail. */
size_t dd_wire_filter_response_write(const struct dd_filter_query *q,
                                     const struct dd_filter_result *r, uint8_t *out);

/* A FilterResponse received from a replica (RESP, LEN bytes, as the
 * replica encoded it) with degraded = true, for an answer of a replica
 * that was behind: protobuf keeps the last occurrence of a scalar field,
 * so the field is appended rather than the message decoded and encoded
 * again. Writes LEN + DD_WIRE_DEGRADED_MARK bytes into OUT (not
 * overlapping RESP) and returns that count. Cannot fail. */
#define DD_WIRE_DEGRADED_MARK 2
size_t dd_wire_filter_response_mark_degraded(const uint8_t *resp, size_t len, uint8_t *out);

/* How many times field NUM occurs at the top level of the message in DATA
 * (LEN bytes), counting no further than MAX + 1, so a caller can refuse a
 * request by its repeated field's count before a full decoder (protobuf-c,
 * which allocates per element) runs: one pass, no allocation. Counting
 * stops at the first malformed field; the decoder that follows rejects
 * that message. Cannot fail. */
size_t dd_wire_count_field(const uint8_t *data, size_t len, uint32_t num, size_t max);

/* The bytes of length-delimited field NUM at the top level of the message
 * in DATA, as a decoder would keep them (the last occurrence wins): sets
 * *VAL (pointing into DATA) and *VAL_LEN and returns 0; DD_ERR_NOTFOUND
 * when the field is absent (proto3's empty string) or the message is
 * malformed anywhere (the decoder that follows rejects it). One pass,
 * no allocation. The cluster routes a call by its user_id with it
 * without decoding the rest. */
int dd_wire_bytes_field(const uint8_t *data, size_t len, uint32_t num, const uint8_t **val,
                        size_t *val_len);

#endif
