/* SPDX-License-Identifier: Apache-2.0
 *
 * fold.c - the history value codec, merge operator and compaction filter
 * (fold.h).
 *
 * Memory handed to RocksDB (as db/c.cc does it):
 *  - Merge operator: the merges return a malloc'd buffer; RocksDB copies it
 *    into its own string and then calls dd_fold_free_value, which frees it.
 *    No pointer to it is kept.
 *  - Compaction filter: RocksDB copies *new_value and never frees it, so
 *    each instance (one per compaction, used by one thread) owns one
 *    reusable buffer that *new_value points into, freed with the instance.
 *  - RocksDB calls the full merge on every Get of a key with operands above
 *    its base and does not keep the result. That is why an open segment is
 *    a split value (a read copies A and re-encodes only the small B), and
 *    why a read never re-encodes a closed segment (dd_fold_reading).
 *
 * Damage (fold.h, "Damaged values"): the full merge sorts its inputs into
 * damaged pieces (a base or operand that fails its version, checksum or
 * bitstream, copied byte for byte) and intact ones, folds the intact ones
 * as it always did, and wraps the result with the pieces. Only that way
 * can the merge both succeed (a failed merge stops compactions) and never
 * turn damage into "nothing seen".
 */
#include "fold.h"

#include <stdlib.h>
#include <string.h>

#include "dd.h"
#include "log.h"

#define MODULE "history"

static struct dd_log_limit corrupt_log_limit;

static int64_t today(const struct dd_fold *fd)
{
    return dd_day_of_ms(fd->now_ms ? fd->now_ms(fd->clock_ud) : dd_now_ms());
}

void dd_fold_init(struct dd_fold *f, const struct dd_segments *g, double fp_rate,
                  int64_t (*now_ms)(void *ud), void *ud)
{
    memset(f, 0, sizeof *f);
    f->seg = *g;
    /* S: the most segments a user can have live */
    uint32_t s = (g->retention_days + g->segment_days - 1) / g->segment_days + 1;
    f->segment_fp = fp_rate / s;
    /* a day scene's user: one segment per live day */
    f->day_fp = fp_rate / ((double)g->retention_days + 1);
    f->now_ms = now_ms;
    f->clock_ud = ud;
}

/* A closed segment's target false-positive rate, by its kind (segment.h). */
static double segment_fp(const struct dd_fold *fd, uint32_t seg)
{
    return dd_segment_is_day(seg) ? fd->day_fp : fd->segment_fp;
}

/* The days segment SEG holds, [*FIRST, *LAST], clamped to what a dated
 * item carries. Undated items (written before dates were kept) take
 * *LAST: the newest day they can be of, so a read never misses them. */
static void segment_days(const struct dd_fold *fd, uint32_t seg, uint32_t *first, uint32_t *last)
{
    int64_t l = dd_segment_last_day(&fd->seg, seg);
    int64_t f = dd_segment_is_day(seg) ? l : l - (int64_t)fd->seg.segment_days + 1;
    *last = l < 0 ? 0 : l > UINT32_MAX ? UINT32_MAX : (uint32_t)l;
    *first = f < 0 ? 0 : f > UINT32_MAX ? UINT32_MAX : (uint32_t)f;
}

void dd_fold_note_corrupt(struct dd_fold *fd, const char *what, const char *key, size_t klen)
{
    atomic_fetch_add_explicit(&fd->corrupt_values, 1, memory_order_relaxed);
    char hex[100];
    dd_key_hex(hex, sizeof hex, key, klen);
    dd_log_limited(&corrupt_log_limit, 10000, DD_LOG_ERROR, MODULE,
                   "msg=\"damaged %s kept: its user's reads fail until it is repaired "
                   "(ForgetUser, or a copy from a replica)\" key=%s",
                   what, hex);
}

/* ---- values --------------------------------------------------------------- */

#define SPLIT_TAG 0xd5
#define SPLIT_HDR 8
/* A full-range delta B is folded into a full-range main filter A once it
 * holds more than max(FOLD_MIN, count(A) / FOLD_DIV) fingerprints. */
#define FOLD_MIN 256
#define FOLD_DIV 8

/* A stored value as up to two filters. Parsing is strict, since the split
 * header has no checksum of its own: the tag, three zero bytes, a len(A)
 * that fits, A and B each a valid filter (version, kind, checksum) and B at
 * the full range. A header damaged in any bit therefore fails (a wrong
 * len(A) moves both checksums). Returns 0 (*nv = 0 for the empty value of a
 * folded dead segment) or DD_ERR_CORRUPT. A's bytes are returned in A and
 * ALEN, for re-use by a fold. */
int dd_fold_parse_value(const char *val, size_t len, struct dd_bloom_view v[2], int *nv,
                        const char **a, size_t *alen)
{
    const uint8_t *p = (const uint8_t *)val;
    *nv = 0;
    if (len == 0) return 0;
    if (p[0] != SPLIT_TAG) {
        if (dd_bloom_parse(val, len, &v[0]) != 0) return DD_ERR_CORRUPT;
        *a = val;
        *alen = len;
        *nv = 1;
        return 0;
    }
    if (len < SPLIT_HDR || p[1] || p[2] || p[3]) return DD_ERR_CORRUPT;
    size_t la = (size_t)p[4] | (size_t)p[5] << 8 | (size_t)p[6] << 16 | (size_t)p[7] << 24;
    if (la > len - SPLIT_HDR) return DD_ERR_CORRUPT;
    if (dd_bloom_parse(val + SPLIT_HDR, la, &v[0]) != 0 ||
        dd_bloom_parse(val + SPLIT_HDR + la, len - SPLIT_HDR - la, &v[1]) != 0 ||
        v[1].range != DD_BLOOM_FULL_RANGE)
        return DD_ERR_CORRUPT;
    *a = val + SPLIT_HDR;
    *alen = la;
    *nv = 2;
    return 0;
}

/* Append a split header and A's bytes to OUT; B must follow. 0 or
 * DD_ERR_NOMEM (OUT unchanged). */
static int split_begin(struct dd_buf *out, const char *a, size_t alen)
{
    if (alen > UINT32_MAX) return DD_ERR_NOMEM;
    if (dd_buf_reserve(out, SPLIT_HDR + alen) != 0) return DD_ERR_NOMEM;
    uint8_t *p = out->data + out->len;
    p[0] = SPLIT_TAG;
    p[1] = p[2] = p[3] = 0;
    p[4] = (uint8_t)alen;
    p[5] = (uint8_t)(alen >> 8);
    p[6] = (uint8_t)(alen >> 16);
    p[7] = (uint8_t)(alen >> 24);
    memcpy(p + SPLIT_HDR, a, alen);
    out->len += SPLIT_HDR + alen;
    return 0;
}

/* Append a split value (A's bytes, then B = BBASE united with N dated
 * items at the full range, dated; BBASE's undated items as UNDATED) to OUT. 0, DD_ERR_CORRUPT (BBASE) or DD_ERR_NOMEM; OUT
 * unchanged on error. */
static int build_split(struct dd_buf *out, const char *a, size_t alen,
                       const struct dd_bloom_view *bbase, uint32_t undated, const uint64_t *hashes,
                       size_t n)
{
    size_t keep = out->len;
    if (split_begin(out, a, alen) != 0) return DD_ERR_NOMEM;
    int rc = dd_bloom_union_dated(out, bbase, undated, DD_BLOOM_FULL_RANGE, hashes, n);
    if (rc != 0) out->len = keep;
    return rc;
}

/* ---- damaged values ------------------------------------------------------ */

#define DAMAGED_HDR 8

static uint32_t le32_get(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void le32_put(uint8_t *p, uint32_t x)
{
    p[0] = (uint8_t)x;
    p[1] = (uint8_t)(x >> 8);
    p[2] = (uint8_t)(x >> 16);
    p[3] = (uint8_t)(x >> 24);
}

int dd_fold_parse_damaged(const char *val, size_t len, const char **d, size_t *dlen, const char **v,
                          size_t *vlen)
{
    const uint8_t *p = (const uint8_t *)val;
    if (len < DAMAGED_HDR || p[0] != DD_FOLD_DAMAGED_TAG || p[1] || p[2] || p[3])
        return DD_ERR_CORRUPT;
    size_t ld = le32_get(p + 4);
    if (ld == 0 || ld > len - DAMAGED_HDR) return DD_ERR_CORRUPT;
    /* The pieces must tile D exactly. */
    for (size_t off = 0; off < ld;) {
        if (ld - off < 4) return DD_ERR_CORRUPT;
        size_t pl = le32_get(p + DAMAGED_HDR + off);
        if (pl > ld - off - 4) return DD_ERR_CORRUPT;
        off += 4 + pl;
    }
    struct dd_bloom_view vv[2];
    int nv;
    const char *a;
    size_t alen;
    if (dd_fold_parse_value(val + DAMAGED_HDR + ld, len - DAMAGED_HDR - ld, vv, &nv, &a, &alen) !=
        0)
        return DD_ERR_CORRUPT;
    *d = val + DAMAGED_HDR;
    *dlen = ld;
    *v = val + DAMAGED_HDR + ld;
    *vlen = len - DAMAGED_HDR - ld;
    return 0;
}

/* Append one damaged piece (u32 LE length, the bytes as they are) to D.
 * 0 or DD_ERR_NOMEM (D unchanged). */
static int add_piece(struct dd_buf *d, const void *p, size_t len)
{
    if (len > UINT32_MAX - 4 || dd_buf_reserve(d, 4 + len) != 0) return DD_ERR_NOMEM;
    le32_put(d->data + d->len, (uint32_t)len);
    if (len) memcpy(d->data + d->len + 4, p, len);
    d->len += 4 + len;
    return 0;
}

/* OUT = the damaged form of pieces D around value V. 0 or DD_ERR_NOMEM. */
static int wrap_damaged(struct dd_buf *out, const struct dd_buf *d, const struct dd_buf *v)
{
    if (d->len > UINT32_MAX || v->len > SIZE_MAX - DAMAGED_HDR - d->len ||
        dd_buf_reserve(out, DAMAGED_HDR + d->len + v->len) != 0)
        return DD_ERR_NOMEM;
    uint8_t *p = out->data + out->len;
    p[0] = DD_FOLD_DAMAGED_TAG;
    p[1] = p[2] = p[3] = 0;
    le32_put(p + 4, (uint32_t)d->len);
    memcpy(p + DAMAGED_HDR, d->data, d->len);
    if (v->len) memcpy(p + DAMAGED_HDR + d->len, v->data, v->len);
    out->len += DAMAGED_HDR + d->len + v->len;
    return 0;
}

/* Whether the filter's bitstream decodes: 0, DD_ERR_CORRUPT or
 * DD_ERR_NOMEM. Each fingerprint costs at least its stop bit, so a count
 * larger than the bits is damage, found before allocating for it. */
static int check_filter(const struct dd_bloom_view *f)
{
    if (f->count == 0) return 0;
    if (f->count / 8 > f->nbits_bytes) return DD_ERR_CORRUPT;
    uint32_t *fp = malloc((size_t)f->count * sizeof *fp);
    if (!fp) return DD_ERR_NOMEM;
    int rc = dd_bloom_decode(f, fp) == 0 ? 0 : DD_ERR_CORRUPT;
    free(fp);
    return rc;
}

int dd_fold_check_value(const char *val, size_t len)
{
    struct dd_bloom_view v[2];
    int nv;
    const char *a;
    size_t alen;
    if (dd_fold_parse_value(val, len, v, &nv, &a, &alen) != 0) return DD_ERR_CORRUPT;
    for (int i = 0; i < nv; i++) {
        int rc = check_filter(&v[i]);
        if (rc != 0) return rc;
    }
    return 0;
}

/* Whether every day of dated filter V is within [FIRST, LAST]: its header's
 * bounds, else each day read. Cannot fail. */
static bool days_within(const struct dd_bloom_view *v, uint32_t first, uint32_t last)
{
    if (v->day0 < first) return false;
    if (dd_bloom_day_max(v) <= last) return true;
    for (uint32_t i = 0; i < v->count; i++)
        if (dd_bloom_day_at(v, i) > last) return false;
    return true;
}

/* Drop from the dated items HASHES (length *N) those filter V already
 * answers for with a day as new or newer (V's undated items are of day
 * UNDATED): they need no second entry. An item V holds with an older day
 * stays, so that its newer day is kept. Returns 0, DD_ERR_CORRUPT (V's
 * bitstream) or DD_ERR_NOMEM. */
static int drop_known(const struct dd_bloom_view *v, uint32_t undated, uint64_t *hashes, size_t *n)
{
    if (*n == 0 || v->count == 0) return 0;
    uint64_t *keys = malloc(v->count * sizeof *keys);
    if (!keys) return DD_ERR_NOMEM;
    int rc = dd_bloom_decode_dated(v, undated, keys);
    if (rc != 0) {
        free(keys);
        return DD_ERR_CORRUPT;
    }
    size_t w = 0;
    for (size_t i = 0; i < *n; i++) {
        uint64_t f = dd_bloom_fingerprint(hashes[i], v->range);
        size_t lo = 0, hi = v->count;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (keys[mid] >> 32 < f)
                lo = mid + 1;
            else
                hi = mid;
        }
        bool known = lo < v->count && keys[lo] >> 32 == f &&
                     (uint32_t)keys[lo] >= dd_bloom_day_of(hashes[i]);
        if (!known) hashes[w++] = hashes[i];
    }
    *n = w;
    free(keys);
    return 0;
}

/* A growing array of dated items (bloom.h, dd_bloom_dated). */
struct hvec {
    uint64_t *h;
    size_t n, cap;
};

static int hvec_reserve(struct hvec *v, size_t extra)
{
    if (extra <= v->cap - v->n) return 0;
    if (extra > SIZE_MAX / sizeof *v->h / 2 - v->n) return DD_ERR_NOMEM;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + extra) cap *= 2;
    uint64_t *p = realloc(v->h, cap * sizeof *p);
    if (!p) return DD_ERR_NOMEM;
    v->h = p;
    v->cap = cap;
    return 0;
}

/* Append the items of full-range filter F as dated items: fingerprint <<
 * 32 | day, which has F's fingerprint at every range (bloom.h), so nothing
 * is lost; an undated F's items are of day UNDATED. Returns 0,
 * DD_ERR_CORRUPT (bitstream; V unchanged) or DD_ERR_NOMEM. */
static int hvec_add_filter(struct hvec *v, const struct dd_bloom_view *f, uint32_t undated)
{
    if (f->count == 0) return 0;
    if (hvec_reserve(v, f->count) != 0) return DD_ERR_NOMEM;
    int rc = dd_bloom_decode_dated(f, undated, v->h + v->n);
    if (rc == 0) v->n += f->count;
    return rc;
}

/* ---- merge operator ------------------------------------------------------ */

static const char *merge_name(void *st)
{
    (void)st;
    return "dedupd.history.v1";
}

static void merge_state_destroy(void *st)
{
    (void)st; /* the dd_fold belongs to the store */
}

/* Set by dd_history_probe around its MultiGet: the merges RocksDB runs in
 * this thread meanwhile serve a read (see dd_fold_full_merge). */
static _Thread_local bool in_probe;

void dd_fold_reading(bool on)
{
    in_probe = on;
}

void dd_fold_free_value(void *st, const char *value, size_t len)
{
    (void)st;
    (void)len;
    free((void *)value);
}

/* One merge operand: raw hashes (bloom.h operand), a fingerprint list, a
 * dated fingerprint list or a full-range filter (dated or not). */
struct operand {
    bool is_filter;
    bool bad;            /* a filter whose bitstream failed: a damaged piece */
    const uint8_t *raw;  /* raw: N little-endian u64 */
    const uint8_t *fps;  /* fingerprint list: N little-endian u32 */
    const uint8_t *dfps; /* dated fingerprint list: N (u32, u32) */
    uint32_t n;
    struct dd_bloom_view f; /* filter */
    const char *bytes;
    size_t len;
};

static int parse_operand(const char *p, size_t len, struct operand *o)
{
    o->bytes = p;
    o->len = len;
    o->is_filter = false;
    o->bad = false;
    o->raw = o->fps = o->dfps = NULL;
    if (dd_bloom_dfps_parse(p, len, &o->dfps, &o->n) == 0) return 0;
    if (dd_bloom_fps_parse(p, len, &o->fps, &o->n) == 0) return 0;
    if (dd_bloom_operand_parse(p, len, &o->raw, &o->n) == 0) return 0;
    if (dd_bloom_parse(p, len, &o->f) == 0 && o->f.range == DD_BLOOM_FULL_RANGE) {
        o->is_filter = true;
        o->n = o->f.count;
        return 0;
    }
    return DD_ERR_CORRUPT;
}

/* Append the N dated items to OUT as one operand (fold.h, "Operand"): a
 * dated fingerprint list up to DD_BLOOM_FPS_MAX items, else a dated
 * full-range filter. 0 or DD_ERR_NOMEM. */
int dd_fold_encode_operand(struct dd_buf *out, const uint64_t *dated, size_t n)
{
    if (n <= DD_BLOOM_FPS_MAX) return dd_bloom_dfps_encode(out, dated, n);
    return dd_bloom_build_dated(out, dated, n, DD_BLOOM_FULL_RANGE);
}

/* Parse the NOPS operands into a malloc'd array (*out, *nout valid ones).
 * A damaged operand is counted and, with DMG, appended to it as a piece
 * (without: DD_ERR_CORRUPT, for the partial merge, which then fails and
 * RocksDB keeps the operands). 0, DD_ERR_CORRUPT or DD_ERR_NOMEM (*out
 * is then NULL). */
static int load_operands(struct dd_fold *fd, const char *key, size_t klen, const char *const *ops,
                         const size_t *lens, int nops, struct operand **out, int *nout,
                         struct dd_buf *dmg)
{
    *out = NULL;
    struct operand *o = malloc((nops > 0 ? (size_t)nops : 1) * sizeof *o);
    if (!o) return DD_ERR_NOMEM;
    int k = 0;
    for (int i = 0; i < nops; i++) {
        if (parse_operand(ops[i], lens[i], &o[k]) == 0) {
            k++;
            continue;
        }
        dd_fold_note_corrupt(fd, "operand", key, klen);
        int rc = dmg ? add_piece(dmg, ops[i], lens[i]) : DD_ERR_CORRUPT;
        if (rc != 0) {
            free(o);
            return rc;
        }
    }
    *out = o;
    *nout = k;
    return 0;
}

/* A dated item's day kept within its segment's days [FIRST, LAST]: a
 * writer's day outside them (a bug, or an undated hash's low bits) is
 * read as the nearest day of the segment, as the segment's key says. */
static uint64_t clamp_day(uint64_t dated, uint32_t first, uint32_t last)
{
    uint32_t d = dd_bloom_day_of(dated);
    return dd_bloom_dated(dated, d < first ? first : d > last ? last : d);
}

/* Append every item of the N operands to V, dated: undated operands'
 * items (written before dates were kept) as of day LAST, the dated ones'
 * days kept within [FIRST, LAST] (with F->coarse, all of day LAST). An
 * operand whose bitstream fails
 * (checksum passed) is counted, skipped and marked bad (a damaged piece).
 * 0 or DD_ERR_NOMEM. */
static int operands_hashes(struct dd_fold *fd, const char *key, size_t klen, struct operand *o,
                           int n, struct hvec *v, uint32_t first, uint32_t last)
{
    if (fd->coarse) first = last; /* history.exact_days = false: all as of LAST */
    size_t total = 0;
    for (int i = 0; i < n; i++) total += o[i].n;
    if (hvec_reserve(v, total) != 0) return DD_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        if (o[i].dfps) {
            for (uint32_t j = 0; j < o[i].n; j++)
                v->h[v->n++] = clamp_day(dd_bloom_dfps_at(o[i].dfps, j), first, last);
            continue;
        }
        if (o[i].fps) {
            /* fingerprint << 32 has that fingerprint at every range */
            for (uint32_t j = 0; j < o[i].n; j++)
                v->h[v->n++] = (uint64_t)dd_bloom_fps_at(o[i].fps, j) << 32 | last;
            continue;
        }
        if (!o[i].is_filter) {
            for (uint32_t j = 0; j < o[i].n; j++)
                v->h[v->n++] = dd_bloom_dated(dd_bloom_operand_at(o[i].raw, j), last);
            continue;
        }
        size_t from = v->n;
        int rc = hvec_add_filter(v, &o[i].f, last);
        for (size_t j = from; rc == 0 && o[i].f.days && j < v->n; j++)
            v->h[j] = clamp_day(v->h[j], first, last);
        if (rc == DD_ERR_NOMEM) return rc;
        if (rc != 0 && !o[i].bad) {
            o[i].bad = true;
            dd_fold_note_corrupt(fd, "operand", key, klen);
        }
    }
    return 0;
}

/* Hand BUF's bytes to RocksDB (freed by dd_fold_free_value). A zero-length
 * result still needs a valid pointer. */
static char *give(struct dd_buf *buf, size_t *len)
{
    if (!buf->data && dd_buf_reserve(buf, 1) != 0) return NULL;
    char *p = (char *)buf->data;
    *len = buf->len;
    buf->data = NULL;
    buf->len = buf->cap = 0;
    return p;
}

static int buf_copy(struct dd_buf *out, const void *p, size_t len)
{
    if (dd_buf_reserve(out, len) != 0) return DD_ERR_NOMEM;
    if (len) memcpy(out->data + out->len, p, len);
    out->len += len;
    return 0;
}

/* OUT = the split value (A, B) where B = B0 (may be NULL) united with the
 * N dated items (undated ones of A and B0 as of day UNDATED); or, once B would exceed the fold threshold, the single filter
 * A u B. A (a full-range filter whose bytes are ABYTES) is copied as it
 * is unless folded. 0, DD_ERR_CORRUPT (A's or B0's bitstream: the caller
 * keeps the base as a damaged piece) or DD_ERR_NOMEM. */
static int merge_into_delta(struct dd_buf *out, const struct dd_bloom_view *a, const char *abytes,
                            size_t alen, const struct dd_bloom_view *b0, uint32_t undated,
                            struct hvec *hv)
{
    struct dd_buf b = {0};
    struct dd_bloom_view bv;
    int rc = dd_bloom_union_dated(&b, b0, undated, DD_BLOOM_FULL_RANGE, hv->h, hv->n);
    if (rc == 0 && dd_bloom_parse(b.data, b.len, &bv) != 0) rc = DD_ERR_NOMEM;
    if (rc != 0) {
        dd_buf_free(&b);
        return rc;
    }
    uint32_t limit = a->count / FOLD_DIV > FOLD_MIN ? a->count / FOLD_DIV : FOLD_MIN;
    if (bv.count <= limit) {
        rc = split_begin(out, abytes, alen);
        if (rc == 0) rc = buf_copy(out, b.data, b.len);
        dd_buf_free(&b);
        return rc;
    }
    /* Fold: A u B in one full-range filter. B was just encoded, so a
     * CORRUPT here is A's. */
    hv->n = 0;
    rc = hvec_add_filter(hv, &bv, undated);
    if (rc == DD_ERR_CORRUPT) rc = DD_ERR_NOMEM;
    if (rc == 0) rc = dd_bloom_union_dated(out, a, undated, DD_BLOOM_FULL_RANGE, hv->h, hv->n);
    dd_buf_free(&b);
    return rc;
}

/* Append to OUT filter F (full range; its bytes FBYTES) re-encoded at its
 * final range, or copied when that is no smaller. 0, DD_ERR_CORRUPT (F's
 * bitstream; OUT unchanged) or DD_ERR_NOMEM. */
static int reduce_into(struct dd_fold *fd, uint32_t seg, struct dd_buf *out,
                       const struct dd_bloom_view *f, const void *fbytes, size_t flen)
{
    uint64_t r = dd_bloom_range_for(f->count, segment_fp(fd, seg));
    if (r < DD_BLOOM_FULL_RANGE) {
        size_t keep = out->len;
        uint32_t first, last;
        segment_days(fd, seg, &first, &last);
        int rc = dd_bloom_reduce_dated(out, f, last, r);
        if (rc == 0) {
            atomic_fetch_add_explicit(&fd->segments_reduced, 1, memory_order_relaxed);
            return 0;
        }
        out->len = keep;
        return rc == DD_ERR_NOMEM ? rc : DD_ERR_CORRUPT;
    }
    return buf_copy(out, fbytes, flen);
}

bool dd_fold_foreign(struct dd_fold *f, const char *key, size_t klen)
{
    const struct dd_fold_owner *o = atomic_load_explicit(&f->owner, memory_order_acquire);
    const char *user;
    size_t ulen;
    if (!o || !dd_key_user(key, klen, &user, &ulen) || ulen == 0) return false;
    return !o->owns(o->ud, user, ulen);
}

/* Fold the intact operands OP into the intact value BASE (NULL: none) as
 * the segment's state says (fold.h, "Value"), appending the result to
 * OUT. An operand whose bitstream fails is marked bad and left out; a
 * single filter operand taken as it is but failing to re-encode is too.
 * Returns 0, DD_ERR_CORRUPT (BASE's bitstream failed: the caller keeps
 * BASE as a damaged piece and folds again without it; OUT is then to be
 * discarded) or DD_ERR_NOMEM. */
static int fold_into(struct dd_fold *fd, const char *key, size_t klen, uint32_t seg, bool closed,
                     const char *base, size_t blen, struct operand *op, int nop, struct dd_buf *out)
{
    struct dd_buf one = {0};
    struct hvec hv = {0};
    struct dd_bloom_view bv[2];
    int nb = 0, rc = 0;
    const char *a_bytes = NULL;
    size_t a_len = 0;
    uint32_t first, last;
    segment_days(fd, seg, &first, &last);
    if (fd->coarse) first = last; /* history.exact_days = false */
    if (base && dd_fold_parse_value(base, blen, bv, &nb, &a_bytes, &a_len) != 0)
        return DD_ERR_CORRUPT;

    if (nb > 0 && bv[0].range != DD_BLOOM_FULL_RANGE) {
        /* A is final: late items go to the full-range part (fold.h) */
        rc = operands_hashes(fd, key, klen, op, nop, &hv, first, last);
        if (rc == 0) rc = drop_known(&bv[0], last, hv.h, &hv.n);
        if (rc == 0 && hv.n == 0)
            rc = buf_copy(out, base, blen);
        else if (rc == 0)
            rc = build_split(out, a_bytes, a_len, nb == 2 ? &bv[1] : NULL, last, hv.h, hv.n);
    } else if (nb > 0 && !closed) {
        /* Open segment, A at the full range: new items go to B. */
        rc = operands_hashes(fd, key, klen, op, nop, &hv, first, last);
        if (rc == 0 && hv.n == 0)
            rc = buf_copy(out, base, blen);
        else if (rc == 0)
            rc = merge_into_delta(out, &bv[0], a_bytes, a_len, nb == 2 ? &bv[1] : NULL, last, &hv);
    } else {
        /* No base, or a full-range base of a closed segment: one filter,
         * re-encoded at its final range if the segment is closed. A single
         * filter operand is that filter already. */
        struct dd_bloom_view fv;
        const void *fbytes;
        size_t flen;
        /* (dated, with every day inside the segment's: else its days are
         * clamped as the union does) */
        bool as_is = nb == 0 && nop == 1 && op[0].is_filter &&
                     (!op[0].f.days || days_within(&op[0].f, first, last));
        if (as_is) {
            fv = op[0].f;
            fbytes = op[0].bytes;
            flen = op[0].len;
        } else {
            rc = operands_hashes(fd, key, klen, op, nop, &hv, first, last);
            if (rc == 0 && nb == 2) rc = hvec_add_filter(&hv, &bv[1], last);
            if (rc == 0)
                rc = dd_bloom_union_dated(&one, nb ? &bv[0] : NULL, last, DD_BLOOM_FULL_RANGE, hv.h,
                                          hv.n);
            /* with no base, a CORRUPT is impossible: only memory is left */
            if (rc == DD_ERR_CORRUPT && nb == 0) rc = DD_ERR_NOMEM;
            if (rc == 0 && dd_bloom_parse(one.data, one.len, &fv) != 0) rc = DD_ERR_NOMEM;
            fbytes = one.data;
            flen = one.len;
        }
        if (rc == 0 && closed) {
            rc = reduce_into(fd, seg, out, &fv, fbytes, flen);
            if (rc == DD_ERR_CORRUPT) {
                if (as_is && !op[0].bad) {
                    op[0].bad = true;
                    dd_fold_note_corrupt(fd, "operand", key, klen);
                }
                rc = as_is ? 0 : DD_ERR_NOMEM; /* ours was just encoded */
            }
        } else if (rc == 0) {
            rc = buf_copy(out, fbytes, flen);
        }
    }
    free(hv.h);
    dd_buf_free(&one);
    return rc;
}

/* The fold (fold.h, "Value"; the top of this file): the value is kept as
 * a main filter A and a small full-range delta B, so that a read (which
 * runs this on every Get of a key with operands) copies A and re-encodes
 * only B. Damage is sorted out first and wrapped around the result. */
char *dd_fold_full_merge(void *st, const char *key, size_t klen, const char *existing,
                         size_t existing_len, const char *const *ops, const size_t *lens, int nops,
                         unsigned char *success, size_t *new_len)
{
    struct dd_fold *fd = st;
    struct dd_buf out = {0}, body = {0}, dmg = {0};
    struct operand *op = NULL;
    int nop = 0, rc;
    uint32_t seg = 0;
    bool have_seg = dd_key_segment(key, klen, &seg);
    int64_t day = today(fd);

    *success = 0;
    *new_len = 0;
    atomic_fetch_add_explicit(&fd->merges, 1, memory_order_relaxed);

    bool dead = have_seg && dd_segment_dead(&fd->seg, seg, day);
    if (dead || (have_seg && !in_probe && dd_fold_foreign(fd, key, klen))) {
        atomic_fetch_add_explicit(dead ? &fd->merged_dead : &fd->segments_foreign, 1,
                                  memory_order_relaxed);
        char *p = give(&out, new_len);
        if (p) *success = 1;
        return p;
    }
    /* A Get's merge result is thrown away after the read, so re-encoding a
     * closed segment there (a decode and an encode of the whole filter, on
     * every probe until a compaction keeps the fold) buys nothing: reads
     * fold it as if open, at the full range, which answers the same items
     * with fewer false positives. */
    bool closed = have_seg && dd_segment_closed(&fd->seg, seg, day) && !in_probe;

    /* The base: intact, the damaged form (its pieces carried over, its
     * value folded on), or damaged as a whole. */
    const char *base = NULL, *d, *v;
    size_t blen = 0, dl, vl;
    if (existing && existing_len) {
        struct dd_bloom_view bv[2];
        int nb;
        if (dd_fold_parse_value(existing, existing_len, bv, &nb, &d, &dl) == 0) {
            base = existing;
            blen = existing_len;
        } else if (dd_fold_parse_damaged(existing, existing_len, &d, &dl, &v, &vl) == 0) {
            if (buf_copy(&dmg, d, dl) != 0) goto nomem;
            base = v;
            blen = vl;
        } else {
            dd_fold_note_corrupt(fd, "value", key, klen);
            if (add_piece(&dmg, existing, existing_len) != 0) goto nomem;
        }
    }
    if (load_operands(fd, key, klen, ops, lens, nops, &op, &nop, &dmg) != 0) goto nomem;
    rc = fold_into(fd, key, klen, seg, closed, base, blen, op, nop, &body);
    if (rc == DD_ERR_CORRUPT) {
        /* The base's checksum held but its bitstream did not. */
        dd_fold_note_corrupt(fd, "value", key, klen);
        if (add_piece(&dmg, base, blen) != 0) goto nomem;
        body.len = 0;
        rc = fold_into(fd, key, klen, seg, closed, NULL, 0, op, nop, &body);
    }
    if (rc != 0) goto nomem; /* without a base only out of memory is left */
    for (int i = 0; i < nop; i++)
        if (op[i].bad && add_piece(&dmg, op[i].bytes, op[i].len) != 0) goto nomem;
    if (dmg.len == 0) {
        out = body;
        body = (struct dd_buf){0};
    } else {
        if (wrap_damaged(&out, &dmg, &body) != 0) goto nomem;
        atomic_fetch_add_explicit(&fd->damaged_merges, 1, memory_order_relaxed);
    }
    free(op);
    dd_buf_free(&body);
    dd_buf_free(&dmg);
    char *p = give(&out, new_len);
    if (p) *success = 1;
    return p;

nomem:
    free(op);
    dd_buf_free(&out);
    dd_buf_free(&body);
    dd_buf_free(&dmg);
    dd_log_limited(&corrupt_log_limit, 10000, DD_LOG_ERROR, MODULE,
                   "msg=\"merge failed: out of memory\"");
    /* RocksDB assigns from the returned pointer even on failure. */
    return malloc(1);
}

/* Partial merge (flushes and compactions above the base): operands into one
 * operand, deduplicated: a fingerprint list while there are few items, else
 * a full-range filter (about a third of the raw size), which a later full
 * merge with no base takes as it is. Failing here
 * is harmless (RocksDB keeps the operands), so any problem just says "not
 * merged": a damaged operand thus reaches the full merge, which keeps it. */
char *dd_fold_partial_merge(void *st, const char *key, size_t klen, const char *const *ops,
                            const size_t *lens, int nops, unsigned char *success, size_t *new_len)
{
    struct dd_fold *fd = st;
    struct hvec hv = {0};
    struct operand *op = NULL;
    int nop = 0;
    struct dd_buf out = {0};

    *success = 0;
    *new_len = 0;
    bool bad = false;
    uint32_t seg = 0, first, last;
    dd_key_segment(key, klen, &seg);
    segment_days(fd, seg, &first, &last);
    if (load_operands(fd, key, klen, ops, lens, nops, &op, &nop, NULL) == 0 &&
        operands_hashes(fd, key, klen, op, nop, &hv, first, last) == 0) {
        for (int i = 0; i < nop; i++) bad |= op[i].bad;
    } else {
        bad = true;
    }
    if (!bad && dd_fold_encode_operand(&out, hv.h, hv.n) == 0) {
        free(hv.h);
        free(op);
        char *p = give(&out, new_len);
        if (p) *success = 1;
        return p;
    }
    free(hv.h);
    free(op);
    dd_buf_free(&out);
    return malloc(1);
}

/* ---- compaction filter ---------------------------------------------------- */

struct cfilter {
    struct dd_fold *fold;
    struct dd_buf buf; /* *new_value points here until the next call */
};

static const char *cfilter_name(void *st)
{
    (void)st;
    return "dedupd.history.expire.v1";
}

void dd_fold_cfilter_destroy(void *st)
{
    struct cfilter *f = st;
    dd_buf_free(&f->buf);
    free(f);
}

unsigned char dd_fold_cfilter(void *st, int level, const char *key, size_t klen, const char *val,
                              size_t vlen, char **new_value, size_t *new_len,
                              unsigned char *changed)
{
    struct cfilter *f = st;
    struct dd_fold *fd = f->fold;
    uint32_t seg;
    (void)level;

    *changed = 0;
    if (!dd_key_segment(key, klen, &seg)) return 0;
    int64_t day = today(fd);
    if (dd_segment_dead(&fd->seg, seg, day)) {
        atomic_fetch_add_explicit(&fd->segments_expired, 1, memory_order_relaxed);
        return 1;
    }
    if (dd_fold_foreign(fd, key, klen)) {
        atomic_fetch_add_explicit(&fd->segments_foreign, 1, memory_order_relaxed);
        return 1;
    }
    if (!dd_segment_closed(&fd->seg, seg, day) || vlen == 0) return 0;

    struct dd_bloom_view vv[2];
    int nv;
    const char *a;
    size_t alen;
    if (dd_fold_parse_value(val, vlen, vv, &nv, &a, &alen) != 0) {
        /* Damaged (or the damaged form, or a newer format after a
         * rollback): kept as it is, byte for byte. Its reads fail until
         * the user is forgotten or the store replaced; only expiry, above,
         * drops it. */
        const char *d, *v;
        size_t dl, vl;
        if (dd_fold_parse_damaged(val, vlen, &d, &dl, &v, &vl) != 0)
            dd_fold_note_corrupt(fd, "value", key, klen);
        return 0;
    }
    if (nv == 0 || vv[0].range != DD_BLOOM_FULL_RANGE) return 0;
    f->buf.len = 0;
    bool reduced = true;
    uint32_t first, last;
    segment_days(fd, seg, &first, &last);
    if (nv == 1) {
        uint64_t r = dd_bloom_range_for(vv[0].count, segment_fp(fd, seg));
        if (r >= DD_BLOOM_FULL_RANGE) return 0;
        if (dd_bloom_reduce_dated(&f->buf, &vv[0], last, r) != 0)
            return 0; /* keep the exact form */
    } else {
        /* A split value of a segment that closed while open: fold A u B
         * (exact, both at the full range), then re-encode. On any failure
         * the value is kept as it is: it still answers every item. */
        struct hvec hv = {0};
        struct dd_buf one = {0};
        struct dd_bloom_view fv;
        int rc = hvec_add_filter(&hv, &vv[1], last);
        if (rc == 0) rc = dd_bloom_union_dated(&one, &vv[0], last, DD_BLOOM_FULL_RANGE, hv.h, hv.n);
        if (rc == 0) rc = dd_bloom_parse(one.data, one.len, &fv);
        free(hv.h);
        if (rc == 0) {
            uint64_t r = dd_bloom_range_for(fv.count, segment_fp(fd, seg));
            reduced = r < DD_BLOOM_FULL_RANGE;
            rc = reduced ? dd_bloom_reduce_dated(&f->buf, &fv, last, r)
                         : buf_copy(&f->buf, one.data, one.len);
        }
        dd_buf_free(&one);
        if (rc != 0) return 0;
    }
    *new_value = (char *)f->buf.data;
    *new_len = f->buf.len;
    *changed = 1;
    if (reduced) atomic_fetch_add_explicit(&fd->segments_reduced, 1, memory_order_relaxed);
    return 0;
}

static rocksdb_compactionfilter_t *cfilter_create(void *st, rocksdb_compactionfiltercontext_t *ctx)
{
    (void)ctx;
    struct cfilter *f = dd_fold_cfilter_new(st);
    if (!f) {
        dd_error(MODULE, "msg=\"out of memory: compaction runs without expiry\"");
        return NULL;
    }
    return rocksdb_compactionfilter_create(f, dd_fold_cfilter_destroy, dd_fold_cfilter,
                                           cfilter_name);
}

static const char *cfactory_name(void *st)
{
    (void)st;
    return "dedupd.history.expire.factory.v1";
}

static void cfactory_destroy(void *st)
{
    (void)st;
}

void *dd_fold_cfilter_new(struct dd_fold *fold)
{
    struct cfilter *f = calloc(1, sizeof *f);
    if (f) f->fold = fold;
    return f;
}

rocksdb_mergeoperator_t *dd_fold_merge_operator(struct dd_fold *f)
{
    return rocksdb_mergeoperator_create(f, merge_state_destroy, dd_fold_full_merge,
                                        dd_fold_partial_merge, dd_fold_free_value, merge_name);
}

rocksdb_compactionfilterfactory_t *dd_fold_filter_factory(struct dd_fold *f)
{
    return rocksdb_compactionfilterfactory_create(f, cfactory_destroy, cfilter_create,
                                                  cfactory_name);
}
