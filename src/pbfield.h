/* SPDX-License-Identifier: Apache-2.0
 *
 * pbfield.h - one protobuf field's framing, scanned exactly as protobuf-c
 * 1.4's unpack scans it: the tag, the wire type, the span of the value.
 * wire.c walks FilterRequest with it and text.c walks any message's string
 * fields with it, so both accept the bytes protobuf-c accepts.
 *
 * Header only (the scan sits in wire.c's decode loop). Pure code: no I/O,
 * no allocation; it knows nothing of which message it reads.
 */
#ifndef DD_PBFIELD_H
#define DD_PBFIELD_H

#include <stddef.h>
#include <stdint.h>

/* Wire types. */
enum {
    DD_PB_WT_VARINT = 0,
    DD_PB_WT_64BIT = 1,
    DD_PB_WT_LEN = 2,
    DD_PB_WT_32BIT = 5,
};

/* One field as scanned: its number, wire type, and the span of its value
 * (for length-delimited ones, the prefix included, and the payload). */
struct dd_pb_field {
    uint32_t num;
    unsigned wt;
    const uint8_t *val; /* value bytes as protobuf-c scans them */
    size_t val_len;
    const uint8_t *payload; /* DD_PB_WT_LEN: after the length prefix */
    size_t payload_len;
};

/* Scan the field at P (REM bytes left). Returns the bytes it takes, or 0
 * if it is malformed: protobuf-c 1.4's rules (wire.h has them in full). */
static inline size_t dd_pb_scan_field(const uint8_t *p, size_t rem, struct dd_pb_field *f)
{
    /* Tag: at most 5 bytes, 32 bits kept; a first byte with a zero field
     * number is rejected even when more bytes follow (protobuf-c 1.4). */
    if ((p[0] & 0xf8) == 0) return 0;
    size_t max = rem < 5 ? rem : 5, used = 0;
    uint32_t tag = (uint32_t)(p[0] & 0x7f) >> 3;
    f->wt = p[0] & 7;
    if ((p[0] & 0x80) == 0) {
        used = 1;
    } else {
        unsigned shift = 4;
        for (size_t i = 1; i < max; i++) {
            if (p[i] & 0x80) {
                tag |= (uint32_t)(p[i] & 0x7f) << shift;
                shift += 7;
            } else {
                tag |= (uint32_t)p[i] << shift;
                used = i + 1;
                break;
            }
        }
        if (used == 0) return 0;
    }
    f->num = tag;
    p += used;
    rem -= used;
    f->val = p;
    switch (f->wt) {
    case DD_PB_WT_VARINT: {
        size_t m = rem < 10 ? rem : 10, i = 0;
        while (i < m && (p[i] & 0x80)) i++;
        if (i == m) return 0;
        f->val_len = i + 1;
        break;
    }
    case DD_PB_WT_64BIT:
        if (rem < 8) return 0;
        f->val_len = 8;
        break;
    case DD_PB_WT_32BIT:
        if (rem < 4) return 0;
        f->val_len = 4;
        break;
    case DD_PB_WT_LEN: {
        size_t m = rem < 5 ? rem : 5, i = 0;
        uint64_t v = 0;
        unsigned shift = 0;
        for (; i < m; i++) {
            v |= (uint64_t)(p[i] & 0x7f) << shift;
            shift += 7;
            if ((p[i] & 0x80) == 0) break;
        }
        if (i == m) return 0;
        /* protobuf-c reads the prefix into a size_t and refuses a length
         * over INT_MAX (its fifth byte can carry bits past 32). */
        if (v > INT32_MAX) return 0;
        size_t hdr = i + 1;
        if ((uint64_t)hdr + v > rem) return 0;
        f->payload = p + hdr;
        f->payload_len = v;
        f->val_len = hdr + v;
        break;
    }
    default: return 0; /* groups and the reserved types */
    }
    return used + f->val_len;
}

#endif
