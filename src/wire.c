/* SPDX-License-Identifier: Apache-2.0
 *
 * wire.c - FilterRequest decoded in place, FilterResponse encoded by hand;
 * see wire.h for what is accepted and why. Field numbers and wire types
 * are those of proto/dedup.proto, which fixes them for good.
 */
#include "wire.h"

#include "arena.h"
#include "dd.h"

#include "dedup.pb-c.h"

#include <endian.h>
#include <stdbool.h>
#include <string.h>

enum {
    WT_VARINT = 0,
    WT_64BIT = 1,
    WT_LEN = 2,
    WT_32BIT = 5,
};

/* FilterRequest fields. */
enum {
    F_USER_ID = 1,
    F_CANDIDATE_IDS = 2,
    F_SCENE = 3,
    F_LOOKBACK_DAYS = 4,
    F_MODE = 5,
    F_EXPLAIN = 6,
};

/* One field as scanned: its number, wire type, and the span of its value
 * (for length-delimited ones, the prefix included, and the payload). */
struct field {
    uint32_t num;
    unsigned wt;
    const uint8_t *val; /* value bytes as protobuf-c scans them */
    size_t val_len;
    const uint8_t *payload; /* WT_LEN: after the length prefix */
    size_t payload_len;
};

/* Scan the field at P (REM bytes left). Returns the bytes it takes, or 0
 * if it is malformed (protobuf-c's rules, wire.h). */
static size_t scan_field(const uint8_t *p, size_t rem, struct field *f)
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
    case WT_VARINT: {
        size_t m = rem < 10 ? rem : 10, i = 0;
        while (i < m && (p[i] & 0x80)) i++;
        if (i == m) return 0;
        f->val_len = i + 1;
        break;
    }
    case WT_64BIT:
        if (rem < 8) return 0;
        f->val_len = 8;
        break;
    case WT_32BIT:
        if (rem < 4) return 0;
        f->val_len = 4;
        break;
    case WT_LEN: {
        size_t m = rem < 5 ? rem : 5, i = 0;
        uint32_t v = 0;
        unsigned shift = 0;
        for (; i < m; i++) {
            v |= (uint32_t)(p[i] & 0x7f) << shift;
            shift += 7;
            if ((p[i] & 0x80) == 0) break;
        }
        if (i == m) return 0;
        size_t hdr = i + 1;
        if ((uint64_t)hdr + v > rem) return 0;
        f->payload = p + hdr;
        f->payload_len = v;
        f->val_len = hdr + v;
        break;
    }
    default:
        return 0; /* groups and the reserved types */
    }
    return used + f->val_len;
}

/* protobuf-c's parse_uint32 on the varint VAL of LEN bytes. */
static uint32_t varint_u32(const uint8_t *val, size_t len)
{
    uint32_t v = val[0] & 0x7f;
    if (len > 1) v |= (uint32_t)(val[1] & 0x7f) << 7;
    if (len > 2) v |= (uint32_t)(val[2] & 0x7f) << 14;
    if (len > 3) v |= (uint32_t)(val[3] & 0x7f) << 21;
    if (len > 4) v |= (uint32_t)val[4] << 28;
    return v;
}

/* The length strlen() gives on protobuf-c's NUL-terminated copy. */
static size_t c_len(const uint8_t *p, size_t len)
{
    const uint8_t *z = memchr(p, 0, len);
    return z ? (size_t)(z - p) : len;
}

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline bool has_zero_byte(uint64_t v)
{
    return ((v - UINT64_C(0x0101010101010101)) & ~v & UINT64_C(0x8080808080808080)) != 0;
}

/* c_len for an id of 8 to 16 bytes (the usual): two overlapping word
 * tests instead of a call. */
static inline size_t c_len_id(const uint8_t *p, size_t len)
{
    if (len >= 8 && len <= 16 && !has_zero_byte(load64(p)) && !has_zero_byte(load64(p + len - 8)))
        return len;
    return c_len(p, len);
}

int dd_wire_filter_request_decode(const uint8_t *data, size_t len, dd_arena *arena,
                                  size_t max_ids, struct dd_filter_query *q)
{
    struct field f = {0};
    size_t n = 0;

    memset(q, 0, sizeof *q);
    q->user_id = "";
    q->scene = "";
    /* Room for every candidate the bytes can hold (each takes at least a
     * tag and a length byte), but never more than MAX_IDS: one pass then
     * checks the framing, reads the scalars and records the ids, instead
     * of a counting pass and a second walk over the same bytes. The
     * arena's memory is only touched where ids are written. */
    size_t cap = len / 2 < max_ids ? len / 2 : max_ids;
    struct dd_filter_id *ids = dd_arena_alloc(arena, cap * sizeof *ids);
    if (!ids) return DD_ERR_NOMEM;
    for (size_t off = 0; off < len;) {
        const uint8_t *p = data + off;
        if (p[0] == ((F_CANDIDATE_IDS << 3) | WT_LEN) && len - off >= 2 && p[1] < 0x80 &&
            (size_t)p[1] <= len - off - 2) {
            /* The common case: a one-byte tag, a one-byte length. */
            if (n < cap) {
                ids[n].p = (const char *)(p + 2);
                ids[n].len = c_len_id(p + 2, p[1]);
            }
            n++;
            off += 2 + (size_t)p[1];
            continue;
        }
        size_t used = scan_field(p, len - off, &f);
        if (used == 0) return DD_ERR_INVALID;
        off += used;
        switch (f.num) {
        case F_USER_ID:
        case F_SCENE:
            if (f.wt != WT_LEN) return DD_ERR_INVALID;
            if (f.num == F_USER_ID) {
                q->user_id = (const char *)f.payload;
                q->user_len = c_len(f.payload, f.payload_len);
            } else {
                q->scene = (const char *)f.payload;
                q->scene_len = c_len(f.payload, f.payload_len);
            }
            break;
        case F_CANDIDATE_IDS:
            if (f.wt != WT_LEN) return DD_ERR_INVALID;
            if (n < cap) {
                ids[n].p = (const char *)f.payload;
                ids[n].len = c_len_id(f.payload, f.payload_len);
            }
            n++;
            break;
        case F_LOOKBACK_DAYS:
        case F_MODE:
            if (f.wt != WT_VARINT) return DD_ERR_INVALID;
            if (f.num == F_LOOKBACK_DAYS)
                q->lookback_days = varint_u32(f.val, f.val_len);
            else
                q->mode = (int32_t)varint_u32(f.val, f.val_len);
            break;
        case F_EXPLAIN: {
            int b = 0;
            for (size_t i = 0; i < f.val_len; i++)
                if (f.val[i] & 0x7f) b = 1;
            q->explain = b;
            break;
        }
        default:
            break; /* unknown: skipped */
        }
    }
    q->n = n;
    /* More than MAX_IDS: rejected on the count, ids not needed. */
    q->ids = n <= max_ids ? ids : NULL;
    return DD_OK;
}

/* ---- response ------------------------------------------------------------- */

/* FilterResponse field keys (number << 3 | wire type), all one byte. */
enum {
    K_KEPT_IDS = (1 << 3) | WT_LEN,
    K_KEPT_INDEXES = (2 << 3) | WT_LEN,
    K_REMOVED = (3 << 3) | WT_LEN,
    K_DEGRADED = (4 << 3) | WT_VARINT,
    K_REMOVED_PLAYED = (5 << 3) | WT_VARINT,
    K_REMOVED_DELIVERED = (6 << 3) | WT_VARINT,
    K_REMOVED_DUPLICATE = (7 << 3) | WT_VARINT,
    K_REMOVED_INDEX = (1 << 3) | WT_VARINT,  /* in Removed */
    K_REMOVED_REASON = (2 << 3) | WT_VARINT, /* in Removed */
};

static inline size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Size of one Removed message's body: index (omitted when 0) and reason. */
static inline size_t removed_body(size_t index, uint8_t reason)
{
    return (index ? 1 + varint_size(index) : 0) + (reason ? 1 + varint_size(reason) : 0);
}

static size_t scalars_size(const struct dd_filter_result *r)
{
    size_t s = 0;
    if (r->degraded) s += 2;
    if (r->played) s += 1 + varint_size(r->played);
    if (r->delivered) s += 1 + varint_size(r->delivered);
    if (r->duplicate) s += 1 + varint_size(r->duplicate);
    return s;
}

/* Bytes of the packed kept_indexes payload. */
static size_t indexes_payload(const struct dd_filter_query *q, const struct dd_filter_result *r)
{
    size_t s = 0;
    for (size_t i = 0; i < q->n; i++)
        if (r->reason[i] == 0) s += varint_size(i);
    return s;
}

/* Bytes of the kept_ids fields. */
static size_t kept_ids_size(const struct dd_filter_query *q, const struct dd_filter_result *r)
{
    size_t s = 0;
    for (size_t i = 0; i < q->n; i++)
        if (r->reason[i] == 0) s += 1 + varint_size(q->ids[i].len) + q->ids[i].len;
    return s;
}

size_t dd_wire_filter_response_size(const struct dd_filter_query *q,
                                    const struct dd_filter_result *r)
{
    size_t s = scalars_size(r);
    if (q->mode == DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS) {
        s += kept_ids_size(q, r);
    } else if (r->kept) {
        size_t p = indexes_payload(q, r);
        s += 1 + varint_size(p) + p;
    }
    if (q->explain) {
        for (size_t i = 0; i < q->n; i++) {
            if (r->reason[i] == 0) continue;
            size_t b = removed_body(i, r->reason[i]);
            s += 1 + varint_size(b) + b;
        }
    }
    return s;
}

/* Bytes a Removed entry takes at most: key, length (the body is under 128
 * bytes), index key and a varint of up to 5 bytes, reason key and value. */
#define REMOVED_MAX (1 + 1 + 1 + 5 + 1 + 1)
/* Scalars at most: degraded (2) and three u32 counters (1 + 5 each). */
#define SCALARS_MAX (2 + 3 * (1 + 5))
/* The writer may store up to this many bytes past the end of what it
 * writes (a 4-byte varint store at its end). */
#define WRITE_SLACK 4

size_t dd_wire_filter_response_bound(const struct dd_filter_query *q,
                                     const struct dd_filter_result *r)
{
    size_t s = SCALARS_MAX + WRITE_SLACK;
    if (q->mode == DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS)
        s += kept_ids_size(q, r);
    else
        s += 1 + 5 + r->kept * varint_size(q->n);
    if (q->explain) s += (q->n - r->kept) * REMOVED_MAX;
    return s;
}

/* V (< 2^28) as a varint at P, storing 4 bytes whatever its length:
 * returns its length. No branch, so the caller can keep or drop it by
 * how far it advances. */
static inline size_t put_varint28(uint8_t *p, uint32_t v)
{
    uint32_t w = (v & 0x7f) | ((v << 1) & 0x7f00) | ((v << 2) & 0x7f0000) | ((v << 3) & 0x7f000000);
    size_t len = 1 + (size_t)(v >= (1u << 7)) + (size_t)(v >= (1u << 14)) +
                 (size_t)(v >= (1u << 21));
    w |= UINT32_C(0x808080) >> (8 * (4 - len)); /* continuation bits but on the last */
    w = htole32(w);
    memcpy(p, &w, 4);
    return len;
}

size_t dd_wire_filter_response_write(const struct dd_filter_query *q,
                                     const struct dd_filter_result *r, uint8_t *out)
{
    uint8_t *p = out;
    if (q->mode == DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS) {
        for (size_t i = 0; i < q->n; i++) {
            if (r->reason[i]) continue;
            *p++ = K_KEPT_IDS;
            p = put_varint(p, q->ids[i].len);
            memcpy(p, q->ids[i].p, q->ids[i].len);
            p += q->ids[i].len;
        }
    } else if (r->kept) {
        /* One pass: the indexes go 5 bytes after the key (room for any
         * length prefix), each written whether kept or not and kept by
         * advancing (80 % kept at random places mispredicted a branch);
         * then the payload moves back to just after its real prefix. */
        *p++ = K_KEPT_INDEXES;
        uint8_t *start = p + 5, *w = start;
        if (q->n <= (1u << 28)) {
            for (size_t i = 0; i < q->n; i++) {
                size_t l = put_varint28(w, (uint32_t)i);
                w += r->reason[i] == 0 ? l : 0;
            }
        } else {
            for (size_t i = 0; i < q->n; i++)
                if (r->reason[i] == 0) w = put_varint(w, i);
        }
        size_t plen = (size_t)(w - start);
        p = put_varint(p, plen);
        memmove(p, start, plen);
        p += plen;
    }
    if (q->explain) {
        for (size_t i = 0; i < q->n; i++) {
            uint8_t why = r->reason[i];
            if (why == 0) continue;
            *p++ = K_REMOVED;
            p = put_varint(p, removed_body(i, why));
            if (i) {
                *p++ = K_REMOVED_INDEX;
                p = put_varint(p, i);
            }
            *p++ = K_REMOVED_REASON;
            p = put_varint(p, why);
        }
    }
    if (r->degraded) {
        *p++ = K_DEGRADED;
        *p++ = 1;
    }
    if (r->played) {
        *p++ = K_REMOVED_PLAYED;
        p = put_varint(p, r->played);
    }
    if (r->delivered) {
        *p++ = K_REMOVED_DELIVERED;
        p = put_varint(p, r->delivered);
    }
    if (r->duplicate) {
        *p++ = K_REMOVED_DUPLICATE;
        p = put_varint(p, r->duplicate);
    }
    return (size_t)(p - out);
}
