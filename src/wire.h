/* SPDX-License-Identifier: Apache-2.0
 *
 * wire.h - the Filter RPC's messages straight from and to protobuf wire
 * bytes: dedup.v1.FilterRequest decoded in place (candidate ids stay where
 * gRPC received them) and dedup.v1.FilterResponse encoded into one buffer,
 * without building protobuf-c structs. The other RPCs are small and keep
 * protobuf-c (rpc.c).
 *
 * DESIGN
 *
 * protobuf_c_message_unpack of a 10,000-candidate request makes 10,000
 * NUL-terminated copies of the ids, a large share of dedupd's CPU at
 * saturation;
 * the filter only needs to hash each id and, in ids mode, send some back.
 * So the decoder walks the bytes once, checking the framing of every
 * field, reading the scalars and recording (pointer, length) of each
 * candidate in one arena array sized for the most the bytes can hold
 * (len / 2, at most max_ids), so no second counting pass is needed.
 *
 * Each field's place hangs on the previous one's length byte, so a walk
 * costs a load's latency per candidate whatever else it does. The usual
 * candidate fields (one-byte tag and length, 10,000 in a row) therefore
 * take a loop that does nothing else: memchr finds the next NUL byte
 * first (ids wholly before it need no cutting), and a long run is walked
 * as two chains at once, the second from a field start guessed in the
 * middle and kept only if the first chain lands exactly on it (its ids go
 * through an arena scratch array, then into place). Everything else (a
 * NUL near, other fields, past max_ids) is checked field by field.
 *
 * What it accepts and how it reads fields is protobuf-c 1.4's unpack,
 * which it replaces (tests/unit/test_wire.c checks both on the same bytes,
 * garbage and truncations included):
 *   - a tag is a varint of at most 5 bytes; wire types 3, 4 (groups), 6
 *     and 7 are errors; unknown fields of the other types are skipped;
 *   - a length prefix is a varint of at most 5 bytes, read as 32 bits,
 *     and must fit the remaining bytes; varints are at most 10 bytes;
 *   - strings (1, 2, 3) must be length-delimited; lookback_days (4) and
 *     mode (5) must be varints, read as their low 32 bits; explain (6) is
 *     true when any byte of the field, as scanned, has a low 7-bit set,
 *     whatever its wire type; a scalar given twice keeps the last value;
 *   - a string is cut at its first NUL byte, as the C string protobuf-c
 *     hands out was by strlen().
 *
 * The response is the bytes protobuf_c_message_pack gives for the same
 * FilterResponse (fields in number order, packed kept_indexes, zero
 * scalars and an index 0 omitted), written in one pass into a buffer of
 * a bound's size (one branch-free pass over the ids in ids mode, O(1) in
 * indexes mode): the caller trims the buffer to the length written.
 * Sizing exactly first took a pass over the reasons of its own. The
 * packed indexes' length is known up front without one: below 16,384
 * candidates every index takes one byte under 128 and two above, so only
 * the first 128 reasons are counted; the indexes are stored whether kept
 * or not and kept by advancing (no branch to mispredict).
 */
#ifndef DD_WIRE_H
#define DD_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "filter.h"

typedef struct dd_arena dd_arena;

/* Decode a dedup.v1.FilterRequest from DATA (LEN bytes, borrowed: the
 * query points into it, so it must outlive Q). The candidate array comes
 * from ARENA (with, for long requests, a scratch array of at most as many
 * entries), only when there are at most MAX_IDS candidates; with more,
 * q->ids is NULL and q->n says how many there were (the filter rejects
 * the request on its count before reading ids). Returns 0,
 * DD_ERR_INVALID (not a valid FilterRequest; Q is unspecified) or
 * DD_ERR_NOMEM. */
int dd_wire_filter_request_decode(const uint8_t *data, size_t len, dd_arena *arena,
                                  size_t max_ids, struct dd_filter_query *q);

/* Bytes of the encoded FilterResponse for query Q and its result R (as
 * dd_filter_decide left them). Cannot fail. */
size_t dd_wire_filter_response_size(const struct dd_filter_query *q,
                                    const struct dd_filter_result *r);

/* Bytes OUT needs for dd_wire_filter_response_write(Q, R, OUT): at least
 * the response's size plus what the writer may store past its end. One
 * pass over the ids in ids mode, O(1) otherwise. R->kept must be the
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

/* How many times field NUM occurs at the top level of the message in DATA
 * (LEN bytes), counting no further than MAX + 1, so a caller can refuse a
 * request by its repeated field's count before a full decoder (protobuf-c,
 * which allocates per element) runs: one pass, no allocation. Counting
 * stops at the first malformed field; the decoder that follows rejects
 * that message. Cannot fail. */
size_t dd_wire_count_field(const uint8_t *data, size_t len, uint32_t num, size_t max);

#endif
