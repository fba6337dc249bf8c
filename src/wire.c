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

#include <assert.h>
#include <endian.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
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

/* text_check from byte I on (a character boundary), byte by byte:
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
            if (c == 0xe0) lo = 0xa0;
            else if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            more = 3;
            if (c == 0xf0) lo = 0x90;
            else if (c == 0xf4) hi = 0x8f;
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

int dd_wire_text_check(const uint8_t *p, size_t len)
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
    if (len >= 4 && !(odd_bytes32(load32(p)) | odd_bytes32(load32(p + len - 4))))
        return DD_TEXT_OK;
    return text_check_slow(p, len, 0);
}

/* Any field but a plainly framed candidate id, at P (REM > 0 bytes
 * left): checks it, reads it into Q, or records a candidate in IDS while
 * *N < CAP; counts candidates in *N. Returns the bytes it takes, or 0 if
 * it is malformed. Out of line: the scan's registers would otherwise
 * crowd the candidate loop's. */
static __attribute__((noinline)) size_t other_field(const uint8_t *p, size_t rem,
                                                    struct dd_filter_query *q,
                                                    struct dd_filter_id *ids, size_t cap,
                                                    size_t *n)
{
    struct field f = {0};
    size_t used = scan_field(p, rem, &f);
    if (used == 0) return 0;
    switch (f.num) {
    case F_USER_ID:
    case F_SCENE:
        if (f.wt != WT_LEN) return 0;
        if (f.num == F_USER_ID) {
            q->user_id = (const char *)f.payload;
            q->user_len = f.payload_len;
        } else {
            q->scene = (const char *)f.payload;
            q->scene_len = f.payload_len;
        }
        break;
    case F_CANDIDATE_IDS:
        if (f.wt != WT_LEN) return 0;
        if (*n < cap) {
            ids[*n].p = (const char *)f.payload;
            ids[*n].len = f.payload_len;
        }
        ++*n;
        break;
    case F_LOOKBACK_DAYS:
    case F_MODE:
        if (f.wt != WT_VARINT) return 0;
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
    return used;
}

/* A candidate field's first byte when its tag takes one byte. */
#define CAND_KEY ((F_CANDIDATE_IDS << 3) | WT_LEN)
/* Bytes from a plain candidate field's start to the end of its id, at
 * most (one-byte tag, one-byte length, up to 127 bytes). */
#define PLAIN_MAX (2 + 127)
/* A run of plain candidates is walked by one chain for this many bytes
 * before the rest of it may take two: a split's fixed cost (sync_point's
 * look-around) is then paid at most once per WARM bytes of the request,
 * however many short runs other fields cut it into. */
#define WARM 1024
/* Spans shorter than this are not worth a second chain. */
#define SPLIT_MIN 4096

/* Record the plain candidate fields (one-byte tag, one-byte length) from
 * P on into IDS from index *NP while it is under CAP, as long as each
 * starts before SAFE (at most PLAIN_MAX - 1 bytes before the end, so that
 * none can overrun). Returns where it stopped, *NP updated. The loop
 * carries P and N only: each field's position hangs on the previous
 * one's length byte, a load's latency per id, and the rest runs beside
 * it. */
static inline const uint8_t *plain_ids(const uint8_t *p, const uint8_t *safe,
                                       struct dd_filter_id *ids, size_t *np, size_t cap)
{
    size_t n = *np;
    while (p < safe && n < cap) {
        size_t l = p[1];
        if (p[0] != CAND_KEY || l >= 0x80) break;
        ids[n].p = (const char *)(p + 2);
        ids[n].len = l;
        n++;
        p += 2 + l;
    }
    *np = n;
    return p;
}

/* Where a plain candidate field seems to start at or after FROM (before
 * SAFE, looking 256 bytes at most): a candidate key and a one-byte length,
 * with the next fields framed alike. NULL when none is found. Only a
 * guess: the caller checks it by parsing up to it. */
static const uint8_t *sync_point(const uint8_t *from, const uint8_t *safe)
{
    for (const uint8_t *x = from; x < safe && x < from + 256; x++) {
        const uint8_t *y = x;
        int ok = 1;
        for (int k = 0; ok && k < 4 && y < safe; k++) {
            if (y[0] != CAND_KEY || y[1] >= 0x80) ok = 0;
            else y += 2 + y[1];
        }
        if (ok) return x;
    }
    return NULL;
}

/* plain_ids over a long span in two chains at once: the span's second
 * half from a guessed field start S (sync_point), its ids into TMP (room
 * for TCAP), interleaved with the first half from P. When the first chain
 * lands exactly on S, the second one's ids are what a single chain would
 * have recorded from S, and are moved into place; otherwise (a wrong
 * guess, a field that is not plain, no room) they are dropped and the
 * caller goes on from where the first chain stopped. The second chain
 * walks no further than the first, so the work is at most twice the
 * bytes the call gets through. */
static const uint8_t *plain_ids_split(const uint8_t *p, const uint8_t *safe,
                                      struct dd_filter_id *ids, size_t *np, size_t cap,
                                      struct dd_filter_id *tmp, size_t tcap)
{
    size_t na = *np, nb = 0;
    const uint8_t *s = sync_point(p + (safe - p) / 2, safe);
    if (!s) return plain_ids(p, safe, ids, np, cap);
    /* Fields starting in [S, SAFE) take two bytes or more each. */
    size_t bcap = (size_t)(safe - s + 1) / 2;
    if (bcap > cap - na) bcap = cap - na;
    if (bcap > tcap) bcap = tcap;
    const uint8_t *a = p, *b = s;
    while (a < s && b < safe && na < cap && nb < bcap) {
        size_t la = a[1], lb = b[1];
        if ((a[0] ^ CAND_KEY) | (b[0] ^ CAND_KEY) | ((la | lb) & 0x80)) break;
        ids[na].p = (const char *)(a + 2);
        ids[na].len = la;
        na++;
        a += 2 + la;
        tmp[nb].p = (const char *)(b + 2);
        tmp[nb].len = lb;
        nb++;
        b += 2 + lb;
    }
    a = plain_ids(a, s, ids, &na, cap); /* S < SAFE: the first half alone */
    if (a != s || nb > cap - na) {
        *np = na;
        return a;
    }
    memcpy(ids + na, tmp, nb * sizeof *tmp);
    *np = na + nb;
    return plain_ids(b, safe, ids, np, cap); /* where the first chain ended first */
}

static void say(char *why, size_t why_cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(char *why, size_t why_cap, const char *fmt, ...)
{
    if (!why || why_cap == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_cap, fmt, ap);
    va_end(ap);
}

static const char *const text_problem[] = {
    [DD_TEXT_NUL] = "holds a NUL byte",
    [DD_TEXT_BAD_UTF8] = "is not valid UTF-8",
};

/* True when no byte of P[0, LEN) is zero or has its high bit set. Then
 * every string the bytes hold is ASCII without a NUL, whatever the
 * framing, so the per-id checks below can be skipped: the usual request
 * (ASCII ids shorter than 128 bytes, no zero scalar sent) passes this one
 * branch-free pass, which costs a fraction of checking 10,000 ids one by
 * one. */
static bool plain_text(const uint8_t *p, size_t len)
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

/* The decoded query's strings: valid UTF-8 without a NUL byte (wire.h). */
static int check_query_text(const struct dd_filter_query *q, char *why, size_t why_cap)
{
    int t = dd_wire_text_check((const uint8_t *)q->user_id, q->user_len);
    if (t) {
        say(why, why_cap, "user_id %s", text_problem[t]);
        return DD_ERR_INVALID;
    }
    t = dd_wire_text_check((const uint8_t *)q->scene, q->scene_len);
    if (t) {
        say(why, why_cap, "scene %s", text_problem[t]);
        return DD_ERR_INVALID;
    }
    for (size_t i = 0; q->ids && i < q->n; i++) {
        t = dd_wire_text_check((const uint8_t *)q->ids[i].p, q->ids[i].len);
        if (t) {
            say(why, why_cap, "candidate_ids[%zu] %s", i, text_problem[t]);
            return DD_ERR_INVALID;
        }
    }
    return DD_OK;
}

int dd_wire_filter_request_decode(const uint8_t *data, size_t len, dd_arena *arena,
                                  size_t max_ids, struct dd_filter_query *q, char *why,
                                  size_t why_cap)
{
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
    /* The second chain's scratch, taken once at the first split: a split
     * at P records ids starting in the last half of [P, SAFE), fewer than
     * len / 4 + 1 of them. */
    struct dd_filter_id *tmp = NULL;
    size_t tcap = cap < len / 4 + 1 ? cap : len / 4 + 1;
    const uint8_t *p = data, *const end = data + len;
    /* Plain candidates starting before SAFE end within the bytes. */
    const uint8_t *const safe = len >= PLAIN_MAX ? end - (PLAIN_MAX - 1) : data;
    size_t n = 0;
    while (p < end) {
        if (p < safe && n < cap) {
            const uint8_t *warm = safe - p > WARM ? p + WARM : safe;
            p = plain_ids(p, warm, ids, &n, cap);
            if (p >= warm && p < safe && n < cap) {
                /* A long run so far: the rest may take two chains. */
                if (safe - p >= SPLIT_MIN && !tmp && tcap)
                    if (!(tmp = dd_arena_alloc(arena, tcap * sizeof *tmp))) tcap = 0;
                if (safe - p >= SPLIT_MIN && tmp)
                    p = plain_ids_split(p, safe, ids, &n, cap, tmp, tcap);
                else
                    p = plain_ids(p, safe, ids, &n, cap);
            }
            if (p == end) break;
        }
        /* One field, checked in full: near the end, past CAP, or not a
         * plain candidate. */
        size_t rem = (size_t)(end - p);
        if (p[0] == CAND_KEY && rem >= 2 && p[1] < 0x80 && (size_t)p[1] <= rem - 2) {
            if (n < cap) {
                ids[n].p = (const char *)(p + 2);
                ids[n].len = p[1];
            }
            n++;
            p += 2 + (size_t)p[1];
            continue;
        }
        size_t used = other_field(p, rem, q, ids, cap, &n);
        if (used == 0) {
            say(why, why_cap, "request is not a valid dedup.v1.FilterRequest");
            return DD_ERR_INVALID;
        }
        p += used;
    }
    q->n = n;
    /* More than MAX_IDS: rejected on the count, ids not needed. */
    q->ids = n <= max_ids ? ids : NULL;
    if (plain_text(data, len)) return DD_OK;
    return check_query_text(q, why, why_cap);
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

/* At least kept_ids_size (exact for ids under 16 KiB: key, length, id),
 * summed without a branch on the reason (kept at random places would
 * mispredict it) nor a loop over the length's varint. */
static size_t kept_ids_bound(const struct dd_filter_query *q, const struct dd_filter_result *r)
{
    const uint8_t *reason = r->reason;
    const struct dd_filter_id *ids = q->ids;
    size_t n = q->n, s = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = ids[i].len;
        size_t f = 2 + l + (size_t)(l >= (1u << 7)) + 8 * (size_t)(l >= (1u << 14));
        s += f & ((size_t)(reason[i] != 0) - 1); /* all ones when kept */
    }
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
        s += kept_ids_bound(q, r);
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

/* Copy an id of L bytes: 8 to 16 (the usual) as two overlapping words
 * within the id, instead of a call. */
static inline void copy_id(uint8_t *d, const uint8_t *s, size_t l)
{
    if (l >= 8 && l <= 16) {
        uint64_t a = load64(s), b = load64(s + l - 8);
        memcpy(d, &a, 8);
        memcpy(d + l - 8, &b, 8);
    } else {
        memcpy(d, s, l);
    }
}

/* The kept ids as kept_ids fields at P; returns the end. */
static uint8_t *write_kept_ids(const struct dd_filter_query *q, const struct dd_filter_result *r,
                               uint8_t *p)
{
    const uint8_t *reason = r->reason;
    const struct dd_filter_id *ids = q->ids;
    size_t n = q->n;
    for (size_t i = 0; i < n; i++) {
        if (reason[i]) continue;
        size_t l = ids[i].len;
        *p++ = K_KEPT_IDS;
        if (l < 0x80) *p++ = (uint8_t)l;
        else p = put_varint(p, l);
        copy_id(p, (const uint8_t *)ids[i].p, l);
        p += l;
    }
    return p;
}

/* The packed kept_indexes field (R->kept > 0) at P; returns the end. May
 * store up to WRITE_SLACK bytes past it.
 *
 * The payload's length is known before it is written: indexes under 128
 * take one byte, under 16,384 two (all of them for the usual n), and only
 * the few below 128 and those from 16,384 on are counted; the rest are
 * R->kept less those. Each index is then stored whether kept or not and
 * kept by advancing (kept indexes sit at random places, so a branch on
 * each would mispredict),
 * in one loop per varint length. */
static uint8_t *write_kept_indexes(const struct dd_filter_query *q,
                                   const struct dd_filter_result *r, uint8_t *p)
{
    const uint8_t *reason = r->reason;
    size_t n = q->n;
    size_t n1 = n < (1u << 7) ? n : (1u << 7), n2 = n < (1u << 14) ? n : (1u << 14);
    size_t k1 = 0, k3 = 0, tail = 0; /* kept below n1; from n2 on, and their bytes */
    for (size_t i = 0; i < n1; i++) k1 += reason[i] == 0;
    for (size_t i = n2; i < n; i++) {
        size_t keep = reason[i] == 0;
        k3 += keep;
        tail += keep * varint_size(i);
    }
    size_t plen = k1 + 2 * (r->kept - k1 - k3) + tail;
    *p++ = K_KEPT_INDEXES;
    p = put_varint(p, plen);
    uint8_t *start = p;
    for (size_t i = 0; i < n1; i++) {
        *p = (uint8_t)i;
        p += reason[i] == 0;
    }
    for (size_t i = n1; i < n2;) {
        /* Per 128 indexes the high byte stays: only the low one counts. */
        size_t stop = (i | 0x7f) + 1 < n2 ? (i | 0x7f) + 1 : n2;
        unsigned v = (unsigned)(((i >> 7) << 8) | 0x80 | (i & 0x7f));
        for (; i < stop; i++, v++) {
            uint16_t w = htole16((uint16_t)v);
            memcpy(p, &w, 2);
            p += reason[i] == 0 ? 2 : 0;
        }
    }
    size_t i = n2;
    for (; i < n && i < (1u << 28); i++) {
        size_t l = put_varint28(p, (uint32_t)i);
        p += reason[i] == 0 ? l : 0;
    }
    for (; i < n; i++)
        if (reason[i] == 0) p = put_varint(p, i);
    /* R->kept is the count of zero reasons (filter.h). */
    assert((size_t)(p - start) == plen);
    (void)start;
    return p;
}

size_t dd_wire_filter_response_write(const struct dd_filter_query *q,
                                     const struct dd_filter_result *r, uint8_t *out)
{
    uint8_t *p = out;
    if (q->mode == DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS)
        p = write_kept_ids(q, r, p);
    else if (r->kept)
        p = write_kept_indexes(q, r, p);
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

/* ---- strings of the protobuf-c decoded requests ----------------------------- */

/* dd_wire_pb_text_check on one message's bytes; PATH names it ("" at the
 * top). */
static int pb_text_check(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                         int utf8, const char *path, int depth, char *why, size_t why_cap)
{
    unsigned count[16] = {0}; /* per field, for the index of a repeated one */
    const uint8_t *p = data, *end = data + len;
    while (p < end) {
        struct field f = {0};
        size_t used = scan_field(p, (size_t)(end - p), &f);
        if (used == 0) return DD_OK; /* protobuf-c rejects it */
        p += used;
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(d, f.num);
        if (!fd || f.wt != WT_LEN) continue;
        size_t k = (size_t)(fd - d->fields);
        unsigned idx = k < DD_ARRAY_LEN(count) ? count[k]++ : 0;
        char name[160];
        if (fd->label == PROTOBUF_C_LABEL_REPEATED)
            snprintf(name, sizeof name, "%s%s[%u]", path, fd->name, idx);
        else
            snprintf(name, sizeof name, "%s%s", path, fd->name);
        if (fd->type == PROTOBUF_C_TYPE_STRING) {
            int t = dd_wire_text_check(f.payload, f.payload_len);
            if (t == DD_TEXT_NUL || (t && utf8)) {
                say(why, why_cap, "%s %s", name, text_problem[t]);
                return DD_ERR_INVALID;
            }
        } else if (fd->type == PROTOBUF_C_TYPE_MESSAGE && depth < 8) {
            strncat(name, ".", sizeof name - strlen(name) - 1);
            int rc = pb_text_check(fd->descriptor, f.payload, f.payload_len, utf8, name,
                                   depth + 1, why, why_cap);
            if (rc) return rc;
        }
    }
    return DD_OK;
}

int dd_wire_pb_text_check(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                          int utf8, char *why, size_t why_cap)
{
    return pb_text_check(d, data, len, utf8, "", 0, why, why_cap);
}

size_t dd_wire_count_field(const uint8_t *data, size_t len, uint32_t num, size_t max)
{
    size_t n = 0, off = 0;
    struct field f;
    while (off < len && n <= max) {
        size_t used = scan_field(data + off, len - off, &f);
        if (used == 0) break; /* malformed: the decoder that follows says so */
        if (f.num == num) n++;
        off += used;
    }
    return n;
}

int dd_wire_bytes_field(const uint8_t *data, size_t len, uint32_t num, const uint8_t **val,
                        size_t *val_len)
{
    size_t off = 0;
    struct field f;
    int rc = DD_ERR_NOTFOUND;
    while (off < len) {
        size_t used = scan_field(data + off, len - off, &f);
        if (used == 0) return DD_ERR_NOTFOUND;
        if (f.num == num && f.wt == WT_LEN) {
            *val = f.payload;
            *val_len = f.payload_len;
            rc = DD_OK;
        }
        off += used;
    }
    return rc;
}
