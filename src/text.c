/* SPDX-License-Identifier: Apache-2.0
 *
 * text.c - see text.h.
 */
#include "text.h"

#include "dd.h"
#include "pbfield.h"

#include <protobuf-c/protobuf-c.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdio.h>
#include <string.h>

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint32_t load32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Non-zero when a byte of V is zero (exact: no false positives in
 * whether, only in which byte, which is not asked). */
static inline uint64_t zero_bytes64(uint64_t v)
{
    return (v - UINT64_C(0x0101010101010101)) & ~v & UINT64_C(0x8080808080808080);
}

static inline uint32_t zero_bytes32(uint32_t v)
{
    return (v - UINT32_C(0x01010101)) & ~v & UINT32_C(0x80808080);
}

/* A byte of V with its high bit set or zero: non-zero if so. */
static inline uint64_t odd_bytes64(uint64_t v)
{
    return (v & UINT64_C(0x8080808080808080)) | zero_bytes64(v);
}

static inline uint32_t odd_bytes32(uint32_t v)
{
    return (v & UINT32_C(0x80808080)) | zero_bytes32(v);
}

/* dd_text_check from byte I on (a character boundary), byte by byte:
 * UTF-8 as RFC 3629 and Unicode's table 3-7 have it (no overlong forms,
 * surrogates or code points past U+10FFFF). */
static int text_check_slow(const uint8_t *p, size_t len, size_t i)
{
    while (i < len) {
        uint8_t c = p[i];
        if (c < 0x80) {
            if (c == 0) return DD_TEXT_NUL;
            i++;
            continue;
        }
        size_t more;
        uint8_t lo = 0x80, hi = 0xbf; /* the second byte's range */
        if (c >= 0xc2 && c <= 0xdf) {
            more = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            more = 2;
            if (c == 0xe0)
                lo = 0xa0;
            else if (c == 0xed)
                hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            more = 3;
            if (c == 0xf0)
                lo = 0x90;
            else if (c == 0xf4)
                hi = 0x8f;
        } else {
            return DD_TEXT_BAD_UTF8;
        }
        if (len - i - 1 < more || p[i + 1] < lo || p[i + 1] > hi) return DD_TEXT_BAD_UTF8;
        for (size_t k = 2; k <= more; k++)
            if ((p[i + k] & 0xc0) != 0x80) return DD_TEXT_BAD_UTF8;
        i += 1 + more;
    }
    return DD_TEXT_OK;
}

int dd_text_check(const uint8_t *p, size_t len)
{
    /* ASCII without a NUL, 8 (or 4) bytes at a time; the last word
     * overlaps the one before. The first word that is not goes byte by
     * byte from its start, a character boundary. */
    if (len >= 8) {
        size_t i = 0;
        for (; i + 8 <= len; i += 8)
            if (odd_bytes64(load64(p + i))) return text_check_slow(p, len, i);
        if (i < len && odd_bytes64(load64(p + len - 8))) return text_check_slow(p, len, i);
        return DD_TEXT_OK;
    }
    if (len >= 4 && !(odd_bytes32(load32(p)) | odd_bytes32(load32(p + len - 4)))) return DD_TEXT_OK;
    return text_check_slow(p, len, 0);
}

const char *dd_text_problem(int t)
{
    switch (t) {
    case DD_TEXT_OK: return "is text";
    case DD_TEXT_NUL: return "holds a NUL byte";
    default: return "is not valid UTF-8";
    }
}

bool dd_text_plain(const uint8_t *p, size_t len)
{
    size_t i = 0;
#ifdef __SSE2__
    /* 32 bytes an iteration: OR the bytes (high bits) and the zero-byte
     * masks, test once at the end. */
    __m128i hi = _mm_setzero_si128(), nul = _mm_setzero_si128();
    const __m128i zero = _mm_setzero_si128();
    for (; i + 32 <= len; i += 32) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(p + i + 16));
        hi = _mm_or_si128(hi, _mm_or_si128(a, b));
        nul = _mm_or_si128(nul, _mm_or_si128(_mm_cmpeq_epi8(a, zero), _mm_cmpeq_epi8(b, zero)));
    }
    if (_mm_movemask_epi8(_mm_or_si128(hi, nul))) return false;
#endif
    uint64_t any = 0;
    for (; i + 8 <= len; i += 8) any |= odd_bytes64(load64(p + i));
    for (; i < len; i++) any |= (p[i] & 0x80) | (p[i] == 0);
    return any == 0;
}

/* ---- strings of the protobuf-c decoded messages ----------------------------- */

/* Where a string field sits: its field in each enclosing message,
 * outermost first, as a chain from the innermost up. Kept as descriptors
 * and indexes and written out only when a field fails: formatting the name
 * of every field checked ("plays[4999].item_id") cost more than the check
 * itself on a 5,000-play RecordPlays (docs/benchmarks.md, "Bulk writes"). */
struct pb_path {
    const struct pb_path *up; /* the enclosing message's field; NULL at the top */
    const ProtobufCFieldDescriptor *fd;
    unsigned idx; /* its index, when repeated */
};

/* P's name ("plays[1].item_id") into BUF (CAP bytes, CAP > 0); returns the
 * length written, truncated as snprintf truncates. */
static size_t pb_path_name(const struct pb_path *p, char *buf, size_t cap)
{
    size_t n = p->up ? pb_path_name(p->up, buf, cap) : 0;
    if (p->up && n + 1 < cap) buf[n++] = '.';
    int w = p->fd->label == PROTOBUF_C_LABEL_REPEATED
                ? snprintf(buf + n, cap - n, "%s[%u]", p->fd->name, p->idx)
                : snprintf(buf + n, cap - n, "%s", p->fd->name);
    if (w > 0) n += (size_t)w;
    return n < cap ? n : cap - 1;
}

/* dd_text_pb_check on one message's bytes; UP is the field it sits in
 * (NULL at the top). */
static int pb_text_check(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                         int utf8, const struct pb_path *up, int depth, char *why, size_t why_cap)
{
    unsigned count[16] = {0}; /* per field, for the index of a repeated one */
    const uint8_t *p = data, *end = data + len;
    while (p < end) {
        struct dd_pb_field f = {0};
        size_t used = dd_pb_scan_field(p, (size_t)(end - p), &f);
        if (used == 0) return DD_OK; /* protobuf-c rejects it */
        p += used;
        if (f.wt != DD_PB_WT_LEN) continue; /* no string or message: not looked up */
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(d, f.num);
        if (!fd) continue;
        size_t k = (size_t)(fd - d->fields);
        struct pb_path here = {up, fd, k < DD_ARRAY_LEN(count) ? count[k]++ : 0};
        if (fd->type == PROTOBUF_C_TYPE_STRING) {
            int t = dd_text_check(f.payload, f.payload_len);
            if (t == DD_TEXT_NUL || (t && utf8)) {
                if (why && why_cap) {
                    char name[160];
                    pb_path_name(&here, name, sizeof name);
                    snprintf(why, why_cap, "%s %s", name, dd_text_problem(t));
                }
                return DD_ERR_INVALID;
            }
        } else if (fd->type == PROTOBUF_C_TYPE_MESSAGE && depth < 8) {
            int rc = pb_text_check(fd->descriptor, f.payload, f.payload_len, utf8, &here, depth + 1,
                                   why, why_cap);
            if (rc) return rc;
        }
    }
    return DD_OK;
}

int dd_text_pb_check(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len, int utf8,
                     char *why, size_t why_cap)
{
    return pb_text_check(d, data, len, utf8, NULL, 0, why, why_cap);
}
