/* SPDX-License-Identifier: Apache-2.0
 *
 * text.h - the one rule every id and string dedupd accepts follows,
 * whether it came through gRPC (wire, rpc), Kafka (playevent), an
 * operator's page (why) or a legacy set (the migration tool): valid UTF-8
 * without a NUL byte, as proto3 requires of strings. A NUL would cut
 * protobuf-c's C strings ("victim\0x" read as "victim"); bytes that are
 * not UTF-8, echoed back in kept_ids, would fail the whole call in C++,
 * Java and Python clients.
 *
 * Pure code: no I/O, no allocation, safe from any thread. It knows
 * nothing of what the strings mean or which call carried them.
 */
#ifndef DD_TEXT_H
#define DD_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ProtobufCMessageDescriptor ProtobufCMessageDescriptor;

/* What dd_text_check finds in a string. */
enum { DD_TEXT_OK = 0, DD_TEXT_NUL = 1, DD_TEXT_BAD_UTF8 = 2 };

/* P[0..LEN) as a string field's value: DD_TEXT_OK if valid UTF-8 (RFC
 * 3629: no overlong forms, surrogates or code points past U+10FFFF)
 * without a NUL byte, else the first problem met. ASCII goes 8 bytes at a
 * time. */
int dd_text_check(const uint8_t *p, size_t len);

/* The words for a problem dd_text_check found, to follow a field's name
 * in a message ("holds a NUL byte", "is not valid UTF-8"). Static. */
const char *dd_text_problem(int t);

/* True when no byte of P[0, LEN) is zero or has its high bit set. Then
 * every string the bytes hold is ASCII without a NUL, whatever the
 * framing, so per-string checks can be skipped: the usual Filter request
 * (ASCII ids shorter than 128 bytes, no zero scalar sent) passes this one
 * branch-free pass, which costs a fraction of checking 10,000 ids one by
 * one. */
bool dd_text_plain(const uint8_t *p, size_t len);

/* The string fields of the message of type D in DATA (LEN bytes), nested
 * messages included, before protobuf_c_message_unpack (whose C strings
 * would cut them at a NUL): DD_ERR_INVALID if one holds a NUL byte or,
 * when UTF8, is not valid UTF-8, with WHY (may be NULL) naming the field
 * ("item_ids[3] holds a NUL byte"); else 0 (malformed bytes too: the
 * unpack rejects them). Fields are framed as protobuf-c frames them
 * (pbfield.h). */
int dd_text_pb_check(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len, int utf8,
                     char *why, size_t why_cap);

#endif
