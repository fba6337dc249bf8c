/* SPDX-License-Identifier: Apache-2.0
 *
 * wire.c - FilterRequest decoded in place, FilterResponse encoded by hand;
 * see wire.h for what is accepted and why. Field numbers and wire types
 * are those of proto/dedup.proto, which fixes them for good.
 */
#include "wire.h"

#include "arena.h"
#include "dd.h"
#include "pbfield.h"
#include "segment.h"
#include "text.h"

#include "dedup.pb-c.h"

#include <assert.h>
#include <endian.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* FilterRequest fields. */
enum {
    F_USER_ID = 1,
    F_CANDIDATE_IDS = 2,
    F_SCENE = 3,
    F_LOOKBACK_DAYS = 4,
    F_MODE = 5,
    F_EXPLAIN = 6,
    F_CANDIDATE_HASHES = 7,
    F_MIN_KEPT = 8,
    F_ALSO_SCENES = 9,
};

/* candidate_hashes as they are read: an array taken from the arena at the
 * first one, with room for CAP (the most the bytes can hold, at most
 * max_ids); N counts them all, also past CAP. */
struct hash_acc {
    dd_arena *arena;
    uint64_t *h;
    size_t cap, n;
    int nomem; /* the array could not be allocated */
};

/* Record the LEN / 8 little-endian hashes at P into A. */
static void add_hashes(struct hash_acc *a, const uint8_t *p, size_t len)
{
    size_t k = len / 8;
    if (k && !a->h && a->cap && !a->nomem) {
        a->h = dd_arena_alloc(a->arena, a->cap * sizeof *a->h);
        if (!a->h) a->nomem = 1;
    }
    size_t fit = a->h && a->n < a->cap ? a->cap - a->n : 0;
    if (fit > k) fit = k;
#if __BYTE_ORDER == __LITTLE_ENDIAN
    /* The wire's order is the host's: one copy (10,000 hashes: 80 KB). */
    if (fit) memcpy(a->h + a->n, p, fit * 8);
#else
    for (size_t i = 0; i < fit; i++) {
        uint64_t v;
        memcpy(&v, p + 8 * i, 8);
        a->h[a->n + i] = le64toh(v);
    }
#endif
    a->n += k; /* every one counted, also past CAP */
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

/* Any field but a plainly framed candidate id, at P (REM > 0 bytes
 * left): checks it, reads it into Q, or records a candidate in IDS while
 * *N < CAP; counts candidates in *N. Returns the bytes it takes, or 0 if
 * it is malformed. Out of line: the scan's registers would otherwise
 * crowd the candidate loop's. */
static __attribute__((noinline)) size_t other_field(const uint8_t *p, size_t rem,
                                                    struct dd_filter_query *q,
                                                    struct dd_filter_id *ids, size_t cap, size_t *n,
                                                    struct hash_acc *ha)
{
    struct dd_pb_field f = {0};
    size_t used = dd_pb_scan_field(p, rem, &f);
    if (used == 0) return 0;
    switch (f.num) {
    case F_USER_ID:
    case F_SCENE:
        if (f.wt != DD_PB_WT_LEN) return 0;
        if (f.num == F_USER_ID) {
            q->user_id = (const char *)f.payload;
            q->user_len = f.payload_len;
        } else {
            q->scene = (const char *)f.payload;
            q->scene_len = f.payload_len;
        }
        break;
    case F_CANDIDATE_IDS:
        if (f.wt != DD_PB_WT_LEN) return 0;
        if (*n < cap) {
            ids[*n].p = (const char *)f.payload;
            ids[*n].len = f.payload_len;
        }
        ++*n;
        break;
    case F_LOOKBACK_DAYS:
    case F_MODE:
    case F_MIN_KEPT:
        if (f.wt != DD_PB_WT_VARINT) return 0;
        if (f.num == F_LOOKBACK_DAYS)
            q->lookback_days = varint_u32(f.val, f.val_len);
        else if (f.num == F_MIN_KEPT)
            q->min_kept = varint_u32(f.val, f.val_len);
        else
            q->mode = (int32_t)varint_u32(f.val, f.val_len);
        break;
    case F_ALSO_SCENES:
        if (f.wt != DD_PB_WT_LEN) return 0;
        /* every one counted, the first DD_FILTER_ALSO_MAX kept: the
         * filter refuses more */
        if (q->n_also < DD_FILTER_ALSO_MAX) {
            q->also[q->n_also].p = (const char *)f.payload;
            q->also[q->n_also].len = f.payload_len;
        }
        q->n_also++;
        break;
    case F_EXPLAIN: {
        int b = 0;
        for (size_t i = 0; i < f.val_len; i++)
            if (f.val[i] & 0x7f) b = 1;
        q->explain = b;
        break;
    }
    case F_CANDIDATE_HASHES:
        /* fixed64, one per field or packed (a whole number of them), as
         * protobuf-c reads a repeated fixed64; any other wire type is an
         * error there too. */
        if (f.wt == DD_PB_WT_64BIT)
            add_hashes(ha, f.val, 8);
        else if (f.wt == DD_PB_WT_LEN && f.payload_len % 8 == 0)
            add_hashes(ha, f.payload, f.payload_len);
        else
            return 0;
        break;
    default: break; /* unknown: skipped */
    }
    return used;
}

/* A candidate field's first byte when its tag takes one byte. */
#define CAND_KEY ((F_CANDIDATE_IDS << 3) | DD_PB_WT_LEN)
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
            if (y[0] != CAND_KEY || y[1] >= 0x80)
                ok = 0;
            else
                y += 2 + y[1];
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

/* The decoded query's strings: valid UTF-8 without a NUL byte (wire.h). */
static int check_query_text(const struct dd_filter_query *q, char *why, size_t why_cap)
{
    int t = dd_text_check((const uint8_t *)q->user_id, q->user_len);
    if (t) {
        say(why, why_cap, "user_id %s", dd_text_problem(t));
        return DD_ERR_INVALID;
    }
    t = dd_text_check((const uint8_t *)q->scene, q->scene_len);
    if (t) {
        say(why, why_cap, "scene %s", dd_text_problem(t));
        return DD_ERR_INVALID;
    }
    for (size_t k = 0; k < q->n_also && k < DD_FILTER_ALSO_MAX; k++) {
        t = dd_text_check((const uint8_t *)q->also[k].p, q->also[k].len);
        if (t) {
            say(why, why_cap, "also_scenes[%zu] %s", k, dd_text_problem(t));
            return DD_ERR_INVALID;
        }
    }
    for (size_t i = 0; q->ids && i < q->n; i++) {
        t = dd_text_check((const uint8_t *)q->ids[i].p, q->ids[i].len);
        if (t) {
            say(why, why_cap, "candidate_ids[%zu] %s", i, dd_text_problem(t));
            return DD_ERR_INVALID;
        }
    }
    return DD_OK;
}

int dd_wire_filter_request_decode(const uint8_t *data, size_t len, dd_arena *arena, size_t max_ids,
                                  struct dd_filter_query *q, char *why, size_t why_cap)
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
    /* Each hash takes 8 bytes or more (9 unpacked). */
    struct hash_acc ha = {.arena = arena, .cap = len / 8 < max_ids ? len / 8 : max_ids};
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
        size_t used = other_field(p, rem, q, ids, cap, &n, &ha);
        if (used == 0) {
            say(why, why_cap, "request is not a valid dedup.v1.FilterRequest");
            return DD_ERR_INVALID;
        }
        p += used;
    }
    if (ha.nomem) return DD_ERR_NOMEM;
    if (n && ha.n) {
        say(why, why_cap, "candidate_ids and candidate_hashes are both set; send one of them");
        return DD_ERR_INVALID;
    }
    if (ha.n) {
        /* Compact candidates: the reply is kept_indexes whatever mode says. */
        q->n = ha.n;
        q->by_hash = 1;
        q->hashes = ha.n <= max_ids ? ha.h : NULL;
        q->mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES;
    } else {
        q->n = n;
        /* More than MAX_IDS: rejected on the count, ids not needed. */
        q->ids = n <= max_ids ? ids : NULL;
    }
    if (dd_text_plain(data, len)) return DD_OK;
    return check_query_text(q, why, why_cap);
}

/* ---- response ------------------------------------------------------------- */

/* FilterResponse field keys (number << 3 | wire type), all one byte. */
enum {
    K_KEPT_IDS = (1 << 3) | DD_PB_WT_LEN,
    K_KEPT_INDEXES = (2 << 3) | DD_PB_WT_LEN,
    K_REMOVED = (3 << 3) | DD_PB_WT_LEN,
    K_DEGRADED = (4 << 3) | DD_PB_WT_VARINT,
    K_REMOVED_PLAYED = (5 << 3) | DD_PB_WT_VARINT,
    K_REMOVED_DELIVERED = (6 << 3) | DD_PB_WT_VARINT,
    K_REMOVED_DUPLICATE = (7 << 3) | DD_PB_WT_VARINT,
    K_LOOKBACK_USED = (8 << 3) | DD_PB_WT_VARINT,
    K_REMOVED_INDEX = (1 << 3) | DD_PB_WT_VARINT,  /* in Removed */
    K_REMOVED_REASON = (2 << 3) | DD_PB_WT_VARINT, /* in Removed */
    K_REMOVED_SCENE = (3 << 3) | DD_PB_WT_LEN,     /* in Removed */
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

/* The scene Removed entry I names (filter.h, r->scene): its length in
 * *LEN, NULL when none (no also_scenes, a duplicate, or ""). */
static inline const char *removed_scene(const struct dd_filter_query *q,
                                        const struct dd_filter_result *r, size_t i, size_t *len)
{
    *len = 0;
    if (!r->scene || r->reason[i] == DEDUP__V1__REASON__REASON_DUPLICATE) return NULL;
    uint8_t s = r->scene[i];
    const char *p = s ? q->also[s - 1].p : q->scene;
    *len = s ? q->also[s - 1].len : q->scene_len;
    return *len ? p : NULL;
}

/* Size of one Removed message's body: index (omitted when 0), reason and
 * scene (omitted when empty). */
static inline size_t removed_body(size_t index, uint8_t reason, size_t scene_len)
{
    return (index ? 1 + varint_size(index) : 0) + (reason ? 1 + varint_size(reason) : 0) +
           (scene_len ? 1 + varint_size(scene_len) + scene_len : 0);
}

static size_t scalars_size(const struct dd_filter_result *r)
{
    size_t s = 0;
    if (r->degraded) s += 2;
    if (r->played) s += 1 + varint_size(r->played);
    if (r->delivered) s += 1 + varint_size(r->delivered);
    if (r->duplicate) s += 1 + varint_size(r->duplicate);
    if (r->lookback_used) s += 1 + varint_size(r->lookback_used);
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
            size_t sl;
            removed_scene(q, r, i, &sl);
            size_t b = removed_body(i, r->reason[i], sl);
            s += 1 + varint_size(b) + b;
        }
    }
    return s;
}

/* Bytes a Removed entry takes at most without a scene: key, length (the
 * body is under 128 bytes), index key and a varint of up to 5 bytes,
 * reason key and value; a scene adds its key, a length of up to 2 bytes
 * (DD_SCENE_MAX) and its bytes, and may make the body's length 2 bytes. */
#define REMOVED_MAX (1 + 1 + 1 + 5 + 1 + 1)
#define REMOVED_SCENE_MAX (1 + 1 + 2 + DD_SCENE_MAX)
/* Scalars at most: degraded (2) and four u32 fields (1 + 5 each). */
#define SCALARS_MAX (2 + 4 * (1 + 5))
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
    if (q->explain) s += (q->n - r->kept) * (REMOVED_MAX + (r->scene ? REMOVED_SCENE_MAX : 0));
    return s;
}

/* V (< 2^28) as a varint at P, storing 4 bytes whatever its length:
 * returns its length. No branch, so the caller can keep or drop it by
 * how far it advances. */
static inline size_t put_varint28(uint8_t *p, uint32_t v)
{
    uint32_t w = (v & 0x7f) | ((v << 1) & 0x7f00) | ((v << 2) & 0x7f0000) | ((v << 3) & 0x7f000000);
    size_t len =
        1 + (size_t)(v >= (1u << 7)) + (size_t)(v >= (1u << 14)) + (size_t)(v >= (1u << 21));
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
        if (l < 0x80)
            *p++ = (uint8_t)l;
        else
            p = put_varint(p, l);
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
            size_t sl;
            const char *sc = removed_scene(q, r, i, &sl);
            *p++ = K_REMOVED;
            p = put_varint(p, removed_body(i, why, sl));
            if (i) {
                *p++ = K_REMOVED_INDEX;
                p = put_varint(p, i);
            }
            *p++ = K_REMOVED_REASON;
            p = put_varint(p, why);
            if (sc) {
                *p++ = K_REMOVED_SCENE;
                p = put_varint(p, sl);
                memcpy(p, sc, sl);
                p += sl;
            }
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
    if (r->lookback_used) {
        *p++ = K_LOOKBACK_USED;
        p = put_varint(p, r->lookback_used);
    }
    return (size_t)(p - out);
}

size_t dd_wire_filter_response_mark_degraded(const uint8_t *resp, size_t len, uint8_t *out)
{
    if (len) memcpy(out, resp, len);
    out[len] = K_DEGRADED;
    out[len + 1] = 1;
    return len + DD_WIRE_DEGRADED_MARK;
}

size_t dd_wire_count_field(const uint8_t *data, size_t len, uint32_t num, size_t max)
{
    size_t n = 0, off = 0;
    struct dd_pb_field f;
    while (off < len && n <= max) {
        size_t used = dd_pb_scan_field(data + off, len - off, &f);
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
    struct dd_pb_field f;
    int rc = DD_ERR_NOTFOUND;
    while (off < len) {
        size_t used = dd_pb_scan_field(data + off, len - off, &f);
        if (used == 0) return DD_ERR_NOTFOUND;
        if (f.num == num && f.wt == DD_PB_WT_LEN) {
            *val = f.payload;
            *val_len = f.payload_len;
            rc = DD_OK;
        }
        off += used;
    }
    return rc;
}
