/* SPDX-License-Identifier: Apache-2.0
 *
 * bloom.c - Golomb-compressed single-hash bloom filter; see bloom.h for the
 * design and the serialized form.
 *
 * Bit order: the gap bitstream is written least-significant bit first into
 * consecutive bytes. A gap g with Rice parameter k is q = g >> k zero bits,
 * a one bit, then the k low bits of g. The reader keeps a 64-bit window and
 * finds the end of the unary part with one count-trailing-zeros.
 */
#include "bloom.h"
#include "candset.h"
#include "dd.h"

#include <endian.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define GCS_HEADER 12
#define DATED_HEADER 16
#define OPERAND_HEADER 8
#define TRAILER 4

/* ---- small byte helpers -------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t checksum(const uint8_t *p, size_t len)
{
    return (uint32_t)XXH3_64bits(p, len);
}

uint64_t dd_bloom_range_for(uint64_t n, double fp)
{
    if (n == 0) n = 1;
    if (!(fp > 0.0)) return DD_BLOOM_FULL_RANGE;
    if (fp > 1.0) fp = 1.0;
    double r = ceil((double)n / fp);
    if (r >= (double)DD_BLOOM_FULL_RANGE) return DD_BLOOM_FULL_RANGE;
    if (r < 1.0) return 1;
    return (uint64_t)r;
}

/* ---- sorting -------------------------------------------------------------- */

static void sort_u32(uint32_t *a, size_t n, uint32_t *tmp)
{
    if (n < 64) {
        for (size_t i = 1; i < n; i++) {
            uint32_t v = a[i];
            size_t j = i;
            while (j > 0 && a[j - 1] > v) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = v;
        }
        return;
    }
    uint32_t *src = a, *dst = tmp;
    for (int shift = 0; shift < 32; shift += 8) {
        size_t count[256] = {0};
        for (size_t i = 0; i < n; i++) count[(src[i] >> shift) & 0xff]++;
        size_t sum = 0;
        for (int b = 0; b < 256; b++) {
            size_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) dst[count[(src[i] >> shift) & 0xff]++] = src[i];
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    /* four passes: the result is back in a */
}

static size_t unique_u32(uint32_t *a, size_t n)
{
    if (n == 0) return 0;
    size_t w = 1;
    for (size_t i = 1; i < n; i++)
        if (a[i] != a[w - 1]) a[w++] = a[i];
    return w;
}

/* Three LSD passes of 11, 11 and 10 bits over h >> 32 (the only half that
 * fingerprints use), with the three histograms taken in one read pass. */
#define SORT_BITS 11
#define SORT_BUCKETS (1u << SORT_BITS)

/* Hashes are uniform, so for a batch without IDX one counting pass on the
 * top log2(n) bits (at most 13: the histogram stays on the stack) leaves
 * each key within a bucket of about one, and an insertion pass finishes:
 * two passes instead of four, without the LSD sort's 2,048-way scatter
 * that misses L1. Keys that are not uniform (crafted, or many equal)
 * would make the insertion quadratic, so it stops after 8 moves per key
 * on average and the LSD sort runs on the untouched input instead. Both are stable. Returns 0, or -1 after giving up. */
#define TOP_MAX_BITS 13
static int sort_top_bits(uint64_t *h, size_t n, uint64_t *tmp)
{
    int bits = 1;
    while (((size_t)1 << bits) < n && bits < TOP_MAX_BITS) bits++;
    const int shift = 64 - bits;
    uint32_t start[(1u << TOP_MAX_BITS) + 1];
    memset(start, 0, (((size_t)1 << bits) + 1) * sizeof *start);
    for (size_t i = 0; i < n; i++) start[(h[i] >> shift) + 1]++;
    for (size_t b = 1; b <= ((size_t)1 << bits); b++) start[b] += start[b - 1];
    for (size_t i = 0; i < n; i++) tmp[start[h[i] >> shift]++] = h[i];
    size_t budget = 8 * n;
    for (size_t i = 1; i < n; i++) {
        uint64_t v = tmp[i];
        if ((tmp[i - 1] >> 32) <= (v >> 32)) continue;
        size_t j = i;
        do {
            tmp[j] = tmp[j - 1];
            j--;
        } while (j > 0 && (tmp[j - 1] >> 32) > (v >> 32));
        tmp[j] = v;
        if (i - j > budget) return -1;
        budget -= i - j;
    }
    memcpy(h, tmp, n * sizeof *h);
    return 0;
}

void dd_bloom_sort_hashes(uint64_t *h, uint32_t *idx, size_t n, uint64_t *tmp_h, uint32_t *tmp_idx)
{
    if (!idx && n >= 64 && sort_top_bits(h, n, tmp_h) == 0) return;
    if (n < 64) {
        for (size_t i = 1; i < n; i++) {
            uint64_t v = h[i];
            uint32_t x = idx ? idx[i] : 0;
            size_t j = i;
            while (j > 0 && (h[j - 1] >> 32) > (v >> 32)) {
                h[j] = h[j - 1];
                if (idx) idx[j] = idx[j - 1];
                j--;
            }
            h[j] = v;
            if (idx) idx[j] = x;
        }
        return;
    }
    static const int shifts[3] = {32, 32 + SORT_BITS, 32 + 2 * SORT_BITS};
    uint32_t count[3][SORT_BUCKETS]; /* n < 2^32: callers sort candidate lists */
    memset(count, 0, sizeof count);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = h[i];
        count[0][(v >> shifts[0]) & (SORT_BUCKETS - 1)]++;
        count[1][(v >> shifts[1]) & (SORT_BUCKETS - 1)]++;
        count[2][(v >> shifts[2]) & (SORT_BUCKETS - 1)]++;
    }
    for (int p = 0; p < 3; p++) {
        uint32_t sum = 0;
        for (unsigned b = 0; b < SORT_BUCKETS; b++) {
            uint32_t c = count[p][b];
            count[p][b] = sum;
            sum += c;
        }
    }
    uint64_t *src = h, *dst = tmp_h;
    uint32_t *isrc = idx, *idst = tmp_idx;
    for (int p = 0; p < 3; p++) {
        uint32_t *cnt = count[p];
        int shift = shifts[p];
        if (idx) {
            for (size_t i = 0; i < n; i++) {
                size_t pos = cnt[(src[i] >> shift) & (SORT_BUCKETS - 1)]++;
                dst[pos] = src[i];
                idst[pos] = isrc[i];
            }
        } else {
            for (size_t i = 0; i < n; i++)
                dst[cnt[(src[i] >> shift) & (SORT_BUCKETS - 1)]++] = src[i];
        }
        uint64_t *t = src;
        src = dst;
        dst = t;
        uint32_t *ti = isrc;
        isrc = idst;
        idst = ti;
    }
    /* an odd number of passes leaves the result in the scratch arrays */
    memcpy(h, src, n * sizeof *h);
    if (idx) memcpy(idx, isrc, n * sizeof *idx);
}

/* ---- bit writer / reader -------------------------------------------------- */

struct bitw {
    uint8_t *p;
    uint64_t acc;
    int n; /* bits in acc, < 8 between calls */
};

static inline void bw_put(struct bitw *w, uint64_t v, int nbits)
{
    /* nbits <= 32 and w->n < 8, so nothing is shifted out of acc */
    w->acc |= v << w->n;
    w->n += nbits;
    while (w->n >= 8) {
        *w->p++ = (uint8_t)w->acc;
        w->acc >>= 8;
        w->n -= 8;
    }
}

static inline void bw_gap(struct bitw *w, uint64_t gap, int k)
{
    uint64_t q = gap >> k;
    while (q >= 32) {
        bw_put(w, 0, 32);
        q -= 32;
    }
    bw_put(w, UINT64_C(1) << q, (int)q + 1);
    if (k) bw_put(w, gap & ((UINT64_C(1) << k) - 1), k);
}

static inline void bw_finish(struct bitw *w)
{
    if (w->n > 0) *w->p++ = (uint8_t)w->acc;
    w->acc = 0;
    w->n = 0;
}

/* The reader is a bit position into the stream plus a window W of the
 * stream's next AVAIL bits (the bits of W above AVAIL are zero). While 8
 * bytes can be loaded at pos / 8, one unaligned load refills the window to
 * at least 57 bits, and a gap is one count-trailing-zeros, one shift and one
 * mask; several gaps come out of one load. Near the end of the stream (its
 * last 8 bytes) it goes bit by bit, checking bounds. */
struct bitr {
    const uint8_t *bits;
    size_t nbytes;
    size_t fast_end; /* byte offsets below this can take an 8-byte load */
    uint64_t pos;    /* bits consumed */
    uint64_t w;      /* the next AVAIL bits of the stream */
    int avail;
};

static void br_init(struct bitr *r, const uint8_t *bits, size_t nbytes)
{
    r->bits = bits;
    r->nbytes = nbytes;
    r->fast_end = nbytes >= 8 ? nbytes - 7 : 0;
    r->pos = 0;
    r->w = 0;
    r->avail = 0;
}

static int br_bit(struct bitr *r)
{
    if ((r->pos >> 3) >= r->nbytes) return -1;
    int b = (r->bits[r->pos >> 3] >> (r->pos & 7)) & 1;
    r->pos++;
    return b;
}

static __attribute__((noinline)) int br_gap_slow(struct bitr *r, int k, uint64_t *gap)
{
    r->w = 0;
    r->avail = 0;
    uint64_t q = 0;
    int b;
    while ((b = br_bit(r)) == 0) {
        q++;
        if (q > DD_BLOOM_FULL_RANGE) return -1; /* no valid gap is this long */
    }
    if (b < 0) return -1;
    uint64_t low = 0;
    for (int i = 0; i < k; i++) {
        if ((b = br_bit(r)) < 0) return -1;
        low |= (uint64_t)b << i;
    }
    *gap = (q << k) | low;
    return 0;
}

/* Read one gap. Returns 0, or -1 if the stream ends first. */
static inline int br_gap(struct bitr *r, int k, uint64_t *gap)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (r->w != 0) {
            int tz = __builtin_ctzll(r->w);
            int need = tz + 1 + k;
            if (__builtin_expect(need < r->avail, 1)) {
                *gap = ((uint64_t)tz << k) | ((r->w >> (tz + 1)) & ((UINT64_C(1) << k) - 1));
                r->w >>= need;
                r->avail -= need;
                r->pos += (uint64_t)need;
                return 0;
            }
        }
        size_t byte = (size_t)(r->pos >> 3);
        if (byte >= r->fast_end) break;
        uint64_t w;
        memcpy(&w, r->bits + byte, 8);
        r->w = le64toh(w) >> (r->pos & 7);
        r->avail = 64 - (int)(r->pos & 7);
    }
    return br_gap_slow(r, k, gap);
}

/* ---- encoding -------------------------------------------------------------- */

static uint64_t stream_bits(const uint32_t *f, size_t n, int k)
{
    uint64_t bits = 0, prev = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t gap = f[i] - prev;
        bits += (gap >> k) + 1 + (uint64_t)k;
        prev = f[i];
    }
    return bits;
}

/* Bytes of COUNT packed W-bit days. */
static size_t day_bytes(uint64_t count, int w)
{
    return (size_t)((count * (uint64_t)w + 7) / 8);
}

/* Encode sorted, distinct fingerprints F[0..n) of RANGE, appending to OUT:
 * an undated filter when OFF is NULL, else a dated one whose I-th day is
 * DAY0 + OFF[I] (each below 2^W). */
static int encode_core(struct dd_buf *out, const uint32_t *f, size_t n, uint64_t range,
                       const uint32_t *off, uint32_t day0, int w)
{
    if (n > UINT32_MAX || range == 0 || range > DD_BLOOM_FULL_RANGE) return DD_ERR_INVALID;
    /* The best Rice parameter for geometric gaps of mean mu is near
     * log2(mu * ln 2); try the neighbours too and keep the smallest. */
    int k = 0;
    uint64_t best = 0;
    if (n > 0) {
        double mu = (double)range / (double)n;
        int k0 = (int)floor(log2(mu * 0.6931471805599453));
        if (k0 < 0) k0 = 0;
        if (k0 > 31) k0 = 31;
        best = UINT64_MAX;
        for (int c = k0 - 1; c <= k0 + 1; c++) {
            if (c < 0 || c > 31) continue;
            uint64_t b = stream_bits(f, n, c);
            if (b < best) {
                best = b;
                k = c;
            }
        }
    }
    const size_t header = off ? DATED_HEADER : GCS_HEADER;
    const size_t payload = (size_t)((best + 7) / 8), dbytes = off ? day_bytes(n, w) : 0;
    size_t total = header + payload + dbytes + TRAILER;
    int rc = dd_buf_reserve(out, total);
    if (rc) return rc;
    uint8_t *start = out->data + out->len;
    start[0] = DD_BLOOM_VERSION;
    start[1] = off ? DD_BLOOM_KIND_GCS_DAYS : DD_BLOOM_KIND_GCS;
    start[2] = (uint8_t)k;
    start[3] = off ? (uint8_t)w : 0;
    put_u32(start + 4, (uint32_t)n);
    put_u32(start + 8, (uint32_t)(range - 1));
    if (off) put_u32(start + 12, day0);
    struct bitw bw = {.p = start + header};
    uint64_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        bw_gap(&bw, f[i] - prev, k);
        prev = f[i];
    }
    bw_finish(&bw);
    if (off) {
        uint8_t *d = start + header + payload;
        memset(d, 0, dbytes);
        for (size_t i = 0; i < n && w > 0; i++) {
            uint64_t bit = (uint64_t)i * (uint64_t)w;
            uint32_t x = off[i] << (bit & 7);
            for (size_t b = (size_t)(bit >> 3); x; b++, x >>= 8) d[b] |= (uint8_t)x;
        }
    }
    put_u32(start + header + payload + dbytes, checksum(start, header + payload + dbytes));
    out->len += total;
    return DD_OK;
}

static int encode_sorted(struct dd_buf *out, const uint32_t *f, size_t n, uint64_t range)
{
    return encode_core(out, f, n, range, NULL, 0, 0);
}

/* Encode KEYS[0..n) (fingerprint << 32 | day, sorted by fingerprint, one
 * per fingerprint) of RANGE as a dated filter. */
static int encode_keys(struct dd_buf *out, const uint64_t *keys, size_t n, uint64_t range)
{
    uint32_t newest = 0;
    for (size_t i = 0; i < n; i++)
        if ((uint32_t)keys[i] > newest) newest = (uint32_t)keys[i];
    const uint32_t floor_day = newest > DD_BLOOM_DAY_SPAN_MAX ? newest - DD_BLOOM_DAY_SPAN_MAX : 0;
    uint32_t day0 = newest;
    for (size_t i = 0; i < n; i++) {
        uint32_t d = (uint32_t)keys[i] < floor_day ? floor_day : (uint32_t)keys[i];
        if (d < day0) day0 = d;
    }
    int w = 0;
    while (w < DD_BLOOM_DAY_BITS_MAX && ((newest - day0) >> w) != 0) w++;
    uint32_t *mem = malloc((n ? 2 * n : 1) * sizeof *mem);
    if (!mem) return DD_ERR_NOMEM;
    uint32_t *f = mem, *off = mem + n;
    for (size_t i = 0; i < n; i++) {
        uint32_t d = (uint32_t)keys[i] < floor_day ? floor_day : (uint32_t)keys[i];
        f[i] = (uint32_t)(keys[i] >> 32);
        off[i] = d - day0;
    }
    int rc = encode_core(out, f, n, range, off, day0, w);
    free(mem);
    return rc;
}

/* Sort KEYS (fingerprint << 32 | day) by fingerprint and keep one per
 * fingerprint, its newest day. TMP has room for N. Returns the count. */
static size_t sort_unique_keys(uint64_t *keys, size_t n, uint64_t *tmp)
{
    dd_bloom_sort_hashes(keys, NULL, n, tmp, NULL);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (w > 0 && (keys[w - 1] >> 32) == (keys[i] >> 32)) {
            if ((uint32_t)keys[i] > (uint32_t)keys[w - 1]) keys[w - 1] = keys[i];
            continue;
        }
        keys[w++] = keys[i];
    }
    return w;
}

int dd_bloom_build_dated(struct dd_buf *out, const uint64_t *dated, size_t n, uint64_t range)
{
    if (range == 0 || range > DD_BLOOM_FULL_RANGE) return DD_ERR_INVALID;
    if (n > SIZE_MAX / (2 * sizeof(uint64_t))) return DD_ERR_NOMEM;
    uint64_t *keys = malloc((n ? 2 * n : 1) * sizeof *keys);
    if (!keys) return DD_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        keys[i] = (uint64_t)dd_bloom_fingerprint(dated[i], range) << 32 | (uint32_t)dated[i];
    size_t m = sort_unique_keys(keys, n, keys + n);
    int rc = encode_keys(out, keys, m, range);
    free(keys);
    return rc;
}

int dd_bloom_build(struct dd_buf *out, const uint64_t *hashes, size_t n, uint64_t range,
                   uint32_t *scratch)
{
    if (range == 0 || range > DD_BLOOM_FULL_RANGE) return DD_ERR_INVALID;
    if (n > SIZE_MAX / (2 * sizeof(uint32_t))) return DD_ERR_NOMEM;
    uint32_t *own = NULL, *f = scratch;
    uint32_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!f) f = own = malloc((n ? n : 1) * sizeof *f);
    if (!f || !tmp) {
        free(own);
        free(tmp);
        return DD_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) f[i] = dd_bloom_fingerprint(hashes[i], range);
    sort_u32(f, n, tmp);
    size_t m = unique_u32(f, n);
    int rc = encode_sorted(out, f, m, range);
    free(own);
    free(tmp);
    return rc;
}

static void reader_init(struct bitr *r, const struct dd_bloom_view *v)
{
    br_init(r, v->bits, v->nbits_bytes);
}

int dd_bloom_parse(const void *data, size_t len, struct dd_bloom_view *v)
{
    const uint8_t *p = data;
    if (!p || len < GCS_HEADER + TRAILER) return DD_ERR_CORRUPT;
    if (p[0] != DD_BLOOM_VERSION || p[2] > 31) return DD_ERR_CORRUPT;
    const bool dated = p[1] == DD_BLOOM_KIND_GCS_DAYS;
    if (dated ? p[3] > DD_BLOOM_DAY_BITS_MAX || len < DATED_HEADER + TRAILER
              : p[1] != DD_BLOOM_KIND_GCS || p[3] != 0)
        return DD_ERR_CORRUPT;
    if (get_u32(p + len - TRAILER) != checksum(p, len - TRAILER)) return DD_ERR_CORRUPT;
    uint32_t count = get_u32(p + 4);
    uint64_t range = (uint64_t)get_u32(p + 8) + 1;
    const size_t header = dated ? DATED_HEADER : GCS_HEADER;
    const size_t dbytes = dated ? day_bytes(count, p[3]) : 0;
    if (dbytes > len - header - TRAILER) return DD_ERR_CORRUPT;
    size_t nbytes = len - header - TRAILER - dbytes;
    /* every gap takes at least k + 1 bits */
    if (count > range || (uint64_t)count * (p[2] + 1u) > (uint64_t)nbytes * 8)
        return DD_ERR_CORRUPT;
    /* day0 + an offset must not pass the last day a u32 holds: a day that
     * wrapped would read as an old one */
    if (dated && (uint64_t)get_u32(p + 12) + ((UINT64_C(1) << p[3]) - 1) > UINT32_MAX)
        return DD_ERR_CORRUPT;
    v->range = range;
    v->count = count;
    v->rice_k = p[2];
    v->bits = p + header;
    v->nbits_bytes = nbytes;
    v->days = dated ? p + header + nbytes : NULL;
    v->day0 = dated ? get_u32(p + 12) : 0;
    v->day_bits = dated ? p[3] : 0;
    return DD_OK;
}

uint32_t dd_bloom_day_at(const struct dd_bloom_view *v, uint32_t i)
{
    const int w = v->day_bits;
    if (w == 0) return v->day0;
    const uint64_t bit = (uint64_t)i * (uint64_t)w;
    const size_t end = day_bytes(v->count, w);
    uint32_t x = 0;
    for (size_t b = (size_t)(bit >> 3), s = 0; s < 24 && b < end; b++, s += 8)
        x |= (uint32_t)v->days[b] << s;
    return v->day0 + ((x >> (bit & 7)) & ((UINT32_C(1) << w) - 1));
}

int dd_bloom_decode(const struct dd_bloom_view *v, uint32_t *out)
{
    struct bitr r;
    reader_init(&r, v);
    uint64_t cur = 0, gap;
    for (uint32_t i = 0; i < v->count; i++) {
        if (br_gap(&r, v->rice_k, &gap) != 0) return DD_ERR_CORRUPT;
        cur += gap;
        if (cur >= v->range || (i > 0 && gap == 0)) return DD_ERR_CORRUPT;
        out[i] = (uint32_t)cur;
    }
    return DD_OK;
}

/* Buckets for COUNT fingerprints: about two each (see bloom.h). */
static uint32_t index_buckets(uint32_t count)
{
    return 2 * count + 1;
}

size_t dd_bloom_index_bytes(const struct dd_bloom_view *v)
{
    if (v->count > DD_BLOOM_INDEX_MAX_COUNT) return 0;
    return ((size_t)v->count + 2 + (size_t)index_buckets(v->count) + 1) * sizeof(uint32_t);
}

/* Decode V's fingerprints in order and call EACH(CTX, I, F) on the I-th,
 * F. Returns 0, or DD_ERR_CORRUPT when the stream ends early, repeats a
 * fingerprint or passes the range (EACH has then seen the ones before).
 * Always inlined with a constant EACH, which is inlined in turn: each
 * user gets its own loop.
 *
 * The decode is one serial chain (window, count zeros, shift), so its
 * state lives in locals, not in a struct bitr whose address escapes to
 * the slow path (that kept it in memory: a store and a reload on every
 * gap). W holds the stream's next AVAIL bits (higher bits zero); a gap
 * that does not fit refills it with one unaligned load. EACH's work does
 * not feed the next gap, so it overlaps the chain. The last 8 bytes of
 * the stream, and a gap longer than a window, go through br_gap from
 * where this stopped. */
static inline __attribute__((always_inline)) int
gcs_walk(const struct dd_bloom_view *v, void (*each)(void *ctx, uint32_t i, uint32_t f), void *ctx)
{
    const uint32_t count = v->count;
    const uint64_t range = v->range;
    const uint8_t *bits = v->bits;
    const size_t fast_end = v->nbits_bytes >= 8 ? v->nbits_bytes - 7 : 0;
    const int k = v->rice_k;
    const uint64_t kmask = (UINT64_C(1) << k) - 1;
    uint64_t pos = 0, w = 0, cur = 0, gap;
    int avail = 0;
    uint32_t i = 0;
    for (; i < count; i++) {
        int tz = __builtin_ctzll(w | (UINT64_C(1) << 63));
        int need = tz + 1 + k;
        if (need > avail) {
            size_t byte = (size_t)(pos >> 3);
            if (byte >= fast_end) break;
            uint64_t x;
            memcpy(&x, bits + byte, 8);
            w = le64toh(x) >> (pos & 7);
            avail = 64 - (int)(pos & 7);
            tz = __builtin_ctzll(w | (UINT64_C(1) << 63));
            need = tz + 1 + k;
            if (need > avail) break;
        }
        gap = ((uint64_t)tz << k) | ((w >> tz >> 1) & kmask);
        w = w >> (need - 1) >> 1; /* need may be 64 */
        avail -= need;
        pos += (uint64_t)need;
        cur += gap;
        if (cur >= range || (i > 0 && gap == 0)) return DD_ERR_CORRUPT;
        each(ctx, i, (uint32_t)cur);
    }
    if (i < count) {
        struct bitr r;
        reader_init(&r, v);
        r.pos = pos;
        for (; i < count; i++) {
            if (br_gap(&r, k, &gap) != 0) return DD_ERR_CORRUPT;
            cur += gap;
            if (cur >= range || (i > 0 && gap == 0)) return DD_ERR_CORRUPT;
            each(ctx, i, (uint32_t)cur);
        }
    }
    return DD_OK;
}

struct index_ctx {
    uint32_t *fp, *start;
    uint64_t mul;
};

/* The bucket counts ride along with the decode. */
static inline __attribute__((always_inline)) void index_put(void *ctx, uint32_t i, uint32_t f)
{
    struct index_ctx *c = ctx;
    c->fp[i] = f;
    c->start[(((uint64_t)f * c->mul) >> 32) + 1]++;
}

struct dated_ctx {
    const struct dd_bloom_view *v;
    uint32_t undated;
    uint64_t *out;
};

static inline __attribute__((always_inline)) void dated_put(void *ctx, uint32_t i, uint32_t f)
{
    struct dated_ctx *c = ctx;
    c->out[i] = (uint64_t)f << 32 | (c->v->days ? dd_bloom_day_at(c->v, i) : c->undated);
}

int dd_bloom_decode_dated(const struct dd_bloom_view *v, uint32_t undated, uint64_t *out)
{
    struct dated_ctx c = {v, undated, out};
    return gcs_walk(v, dated_put, &c);
}

int dd_bloom_index_build(const struct dd_bloom_view *v, void *mem, struct dd_bloom_index *ix)
{
    if (v->count > DD_BLOOM_INDEX_MAX_COUNT) return DD_ERR_INVALID;
    const uint32_t count = v->count, nb = index_buckets(count);
    const uint64_t range = v->range;
    /* nb * 2^32 / range: f < range, so (f * mul) >> 32 < nb, and
     * f * mul < nb * 2^32 <= 2^58 does not overflow. */
    const uint64_t mul = ((uint64_t)nb << 32) / range;
    uint32_t *fp = mem, *start = fp + count + 2;
    memset(start, 0, ((size_t)nb + 1) * sizeof *start);
    struct index_ctx c = {fp, start, mul};
    int rc = gcs_walk(v, index_put, &c);
    if (rc != DD_OK) return rc;
    fp[count] = fp[count + 1] = 0;
    for (uint32_t b = 1; b <= nb; b++) start[b] += start[b - 1];
    ix->range = range;
    ix->mul = mul;
    ix->count = count;
    ix->nbuckets = nb;
    ix->fp = fp;
    ix->start = start;
    return DD_OK;
}

/* Fingerprints decoded before a round of lookups: 4 KiB, in L1. */
#define CANDSET_CHUNK 1024

struct candset_ctx {
    struct dd_candset cs;
    uint8_t *hit;
    uint32_t nf;
    uint32_t f[CANDSET_CHUNK];
};

/* A if C (0 or 1), else B, without a branch. */
static inline uint8_t *select_ptr(uint32_t c, uint8_t *a, uint8_t *b)
{
    const uintptr_t m = (uintptr_t)0 - (uintptr_t)c;
    return (uint8_t *)(((uintptr_t)a & m) | ((uintptr_t)b & ~m));
}

/* Mark the members of the candidate set whose hash's high half is one of
 * the NF fingerprints in C->F. The home slot and the next one are read
 * and compared without branches (a branch on an occupancy this random
 * mispredicts); a slot not in use, or another high half, matches nothing.
 * A run past two slots (rare at two slots per candidate) is walked with a
 * loop. */
static __attribute__((noinline)) void candset_mark(struct candset_ctx *c)
{
    /* Locals: a store through HIT may alias anything behind C, which
     * would reload the set's fields on every lookup. */
    const struct dd_candset cs = c->cs;
    const struct dd_candset_slot *t = cs.slot;
    uint8_t *hit = c->hit;
    const uint32_t m = cs.mask, gen = cs.gen, nf = c->nf;
    uint8_t sink;
    for (uint32_t j = 0; j < nf; j++) {
        const uint32_t f = c->f[j];
        uint32_t s = dd_candset_home(&cs, (uint64_t)f << 32);
        const struct dd_candset_slot a = t[s], b = t[(s + 1) & m];
        const uint32_t ua = a.gen == gen, ub = ua & (b.gen == gen);
        const uint32_t ma = ua & (a.hi == f), mb = ub & (b.hi == f);
        const uint32_t pa = a.pos & (0u - ma), pb = b.pos & (0u - mb);
        /* A store of 1 through a selected pointer, not hit[p] |= match:
         * most lookups match nothing, and their read-modify-writes of one
         * shared byte chained every lookup to the one before. Selected
         * with masks: as ternaries they were compiled to branches. */
        *select_ptr(ma, hit + pa, &sink) = 1;
        *select_ptr(mb, hit + pb, &sink) = 1;
        if (__builtin_expect(ub, 0))
            for (s = (s + 2) & m; t[s].gen == gen; s = (s + 1) & m)
                if (t[s].hi == f) hit[t[s].pos] = 1;
    }
    c->nf = 0;
}

/* The decode fills a chunk, then the lookups run over it: a loop of
 * independent loads, kept apart from the decode's serial chain and its
 * refill branch, whose mispredictions would also discard the lookups in
 * flight. */
static inline __attribute__((always_inline)) void candset_put(void *ctx, uint32_t i, uint32_t f)
{
    (void)i;
    struct candset_ctx *c = ctx;
    c->f[c->nf++] = f;
    if (__builtin_expect(c->nf == CANDSET_CHUNK, 0)) candset_mark(c);
}

int dd_bloom_probe_candset(const struct dd_bloom_view *v, const struct dd_candset *cs, uint8_t *hit)
{
    if (v->range != DD_BLOOM_FULL_RANGE) return DD_ERR_INVALID;
    if (cs->n == 0) return DD_OK;
    struct candset_ctx c;
    c.cs = *cs;
    c.hit = hit;
    c.nf = 0;
    int rc = gcs_walk(v, candset_put, &c);
    candset_mark(&c); /* the hits of a damaged stream's good part stand */
    return rc;
}

bool dd_bloom_contains(const struct dd_bloom_view *v, uint64_t h)
{
    uint32_t want = dd_bloom_fingerprint(h, v->range);
    struct bitr r;
    reader_init(&r, v);
    uint64_t cur = 0, gap;
    for (uint32_t i = 0; i < v->count; i++) {
        if (br_gap(&r, v->rice_k, &gap) != 0) return false;
        cur += gap;
        if (cur == want) return true;
        if (cur > want) return false;
    }
    return false;
}

/* First index >= LO whose fingerprint is >= F: gallop, then bisect. F is
 * 64-bit so that "above X" can be asked as ">= X + 1" for any u32 X. */
static size_t lower_bound_fp(const uint64_t *s, size_t lo, size_t n, uint64_t range, uint64_t f)
{
    size_t hi = lo, step = 1;
    while (hi < n && dd_bloom_fingerprint(s[hi], range) < f) {
        lo = hi + 1;
        hi += step;
        step *= 2;
    }
    if (hi > n) hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (dd_bloom_fingerprint(s[mid], range) < f)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Three ways through dd_bloom_probe_sorted, by the filter's count m
 * against the batch's n:
 *   m < n/8:  walk the filter, galloping through the candidates; its cost
 *             follows the filter's size;
 *   m < n/2:  walk the candidates, decoding a gap whenever the filter is
 *             behind: the "decode another?" branch is mostly not taken
 *             and predicts well;
 *   else:     that branch is as random as the gaps (about one
 *             misprediction per candidate), so the filter is decoded
 *             PROBE_CHUNK fingerprints at a time into a stack buffer and
 *             merged with the candidates by merge4: four independent
 *             branch-free merges interleaved, each advancing by comparison
 *             results, so the CPU overlaps their load-compare chains. What
 *             is left is mostly the Golomb decode, a serial chain
 *             (position, load, count zeros).
 */
#define PROBE_CHUNK 4096

/* Fingerprint of candidate I; FULL (range 2^32) is constant at each call
 * site, so the multiply is gone from the full-range loops. */
#define CAND_FP(i) (full ? (uint32_t)(sorted[i] >> 32) : dd_bloom_fingerprint(sorted[i], range))

/* Merge candidates SORTED[I..E) (ascending) with the fingerprints F[J..),
 * marking equal ones; F must hold a fingerprint >= every candidate's, so
 * J stays in F. Returns nothing: the chain ends when I reaches E. */
static inline __attribute__((always_inline)) void merge1(const uint64_t *sorted, size_t i, size_t e,
                                                         const uint32_t *f, size_t j,
                                                         uint64_t range, bool full, uint8_t *hit)
{
    while (i < e) {
        uint32_t a = CAND_FP(i), b = f[j];
        hit[i] |= (uint8_t)(a == b);
        i += a <= b; /* equal: the next candidate may be equal too */
        j += a > b;
    }
}

/* First index in F[0..C) whose value is >= X. */
static size_t lower_bound_u32(const uint32_t *f, size_t c, uint32_t x)
{
    size_t lo = 0, len = c;
    while (len > 0) {
        size_t half = len / 2;
        if (f[lo + half] < x) {
            lo += half + 1;
            len -= half + 1;
        } else {
            len = half;
        }
    }
    return lo;
}

/* Merge candidates SORTED[I..E), all <= F[C-1], with F[0..C): cut into
 * four runs of candidates, each started at its own place in F (a binary
 * search), and the four advanced in one loop until one ends; the others
 * finish alone. */
static inline __attribute__((always_inline)) void merge4(const uint64_t *sorted, size_t i, size_t e,
                                                         const uint32_t *f, size_t c,
                                                         uint64_t range, bool full, uint8_t *hit)
{
    size_t len = e - i;
    if (len < 64) {
        merge1(sorted, i, e, f, lower_bound_u32(f, c, i < e ? CAND_FP(i) : 0), range, full, hit);
        return;
    }
    size_t i0 = i, i1 = i + len / 4, i2 = i + len / 2, i3 = i + 3 * (len / 4);
    size_t e0 = i1, e1 = i2, e2 = i3, e3 = e;
    size_t j0 = lower_bound_u32(f, c, CAND_FP(i0)), j1 = lower_bound_u32(f, c, CAND_FP(i1));
    size_t j2 = lower_bound_u32(f, c, CAND_FP(i2)), j3 = lower_bound_u32(f, c, CAND_FP(i3));
#define STEP(q) \
    do { \
        uint32_t a = CAND_FP(i##q), b = f[j##q]; \
        hit[i##q] |= (uint8_t)(a == b); \
        i##q += a <= b; \
        j##q += a > b; \
    } while (0)
    while (i0 < e0 && i1 < e1 && i2 < e2 && i3 < e3) {
        STEP(0);
        STEP(1);
        STEP(2);
        STEP(3);
    }
#undef STEP
    merge1(sorted, i0, e0, f, j0, range, full, hit);
    merge1(sorted, i1, e1, f, j1, range, full, hit);
    merge1(sorted, i2, e2, f, j2, range, full, hit);
    merge1(sorted, i3, e3, f, j3, range, full, hit);
}

/* Where a probe stops before the stream's end (the candidates ran out),
 * what it has not read is not checked, but one thing is known without
 * reading: a fingerprint at the range's top must be the last. So LEFT
 * more after CUR = range - 1 is a damaged stream, as dd_bloom_decode would
 * find: every probe that read up to the top answers as the full decode. */
static inline int tail_ok(uint64_t cur, uint32_t left, uint64_t range)
{
    return left == 0 || cur + 1 < range ? DD_OK : DD_ERR_CORRUPT;
}

/* The third way (above): decode a chunk, merge the candidates it covers. */
static inline __attribute__((always_inline)) int probe_chunked(struct bitr *r, uint32_t count,
                                                               const uint64_t *sorted, size_t n,
                                                               uint64_t range, bool full, int k,
                                                               uint8_t *hit)
{
    uint32_t f[PROBE_CHUNK];
    uint64_t cur = 0, gap;
    uint32_t left = count;
    size_t i = 0;
    while (left > 0 && i < n) {
        size_t c = left < PROBE_CHUNK ? left : PROBE_CHUNK;
        uint64_t repeat = 0; /* a zero gap but the stream's first: a repeat */
        for (size_t t = 0; t < c; t++) {
            if (br_gap(r, k, &gap) != 0) return DD_ERR_CORRUPT;
            repeat |= (uint64_t)(gap == 0) & (uint64_t)(t != 0 || left != count);
            cur += gap;
            f[t] = (uint32_t)cur;
        }
        /* Past the range or repeated only in a damaged stream (cur only
         * grows): checked before any of the chunk is used. */
        if (cur >= range || repeat) return DD_ERR_CORRUPT;
        left -= (uint32_t)c;
        /* first candidate above the chunk's last fingerprint (once a chunk) */
        size_t e = lower_bound_fp(sorted, i, n, range, (uint64_t)f[c - 1] + 1);
        merge4(sorted, i, e, f, c, range, full, hit);
        i = e;
    }
    return tail_ok(cur, left, range);
}

int dd_bloom_probe_sorted(const struct dd_bloom_view *v, const uint64_t *sorted, size_t n,
                          uint8_t *hit)
{
    if (v->count == 0 || n == 0) return DD_OK;
    struct bitr r;
    reader_init(&r, v);
    uint32_t left = v->count;
    uint64_t cur = 0, gap;
    const uint64_t range = v->range;
    const int k = v->rice_k;
    if ((uint64_t)v->count * 8 < n) {
        size_t i = 0;
        while (left > 0) {
            if (br_gap(&r, k, &gap) != 0) return DD_ERR_CORRUPT;
            if (gap == 0 && left != v->count) return DD_ERR_CORRUPT; /* a repeat */
            left--;
            cur += gap;
            if (cur >= range) return DD_ERR_CORRUPT;
            i = lower_bound_fp(sorted, i, n, range, (uint32_t)cur);
            while (i < n && dd_bloom_fingerprint(sorted[i], range) == cur) hit[i++] = 1;
            if (i >= n) break;
        }
        return tail_ok(cur, left, range);
    }
    if ((uint64_t)v->count * 2 >= n) {
        if (range == DD_BLOOM_FULL_RANGE)
            return probe_chunked(&r, v->count, sorted, n, range, true, k, hit);
        return probe_chunked(&r, v->count, sorted, n, range, false, k, hit);
    }
    if (br_gap(&r, k, &gap) != 0) return DD_ERR_CORRUPT;
    cur = gap;
    left--;
    if (cur >= range) return DD_ERR_CORRUPT;
    for (size_t i = 0; i < n; i++) {
        uint64_t want = dd_bloom_fingerprint(sorted[i], range);
        while (cur < want) {
            if (left == 0) return DD_OK; /* every later candidate is larger */
            if (br_gap(&r, k, &gap) != 0) return DD_ERR_CORRUPT;
            cur += gap;
            left--;
            if (gap == 0 || cur >= range) return DD_ERR_CORRUPT; /* repeat, or past the range */
        }
        if (cur == want) hit[i] = 1;
    }
    return tail_ok(cur, left, range);
}

#undef CAND_FP

int dd_bloom_union_dated(struct dd_buf *out, const struct dd_bloom_view *base, uint32_t undated,
                         uint64_t range_if_new, const uint64_t *dated, size_t n)
{
    uint64_t range = base ? base->range : range_if_new;
    if (range == 0 || range > DD_BLOOM_FULL_RANGE) return DD_ERR_INVALID;
    size_t na = base ? base->count : 0;
    if (n > SIZE_MAX / sizeof(uint64_t) / 4 - na) return DD_ERR_NOMEM;
    /* keys: the base's, then the new items'; TMP to sort in */
    uint64_t *keys = malloc((2 * (na + n) + 1) * sizeof *keys);
    if (!keys) return DD_ERR_NOMEM;
    int rc = base ? dd_bloom_decode_dated(base, undated, keys) : DD_OK;
    if (rc == DD_OK) {
        for (size_t i = 0; i < n; i++)
            keys[na + i] =
                (uint64_t)dd_bloom_fingerprint(dated[i], range) << 32 | (uint32_t)dated[i];
        size_t m = sort_unique_keys(keys, na + n, keys + na + n);
        rc = encode_keys(out, keys, m, range);
    }
    free(keys);
    return rc;
}

int dd_bloom_reduce_dated(struct dd_buf *out, const struct dd_bloom_view *v, uint32_t undated,
                          uint64_t new_range)
{
    if (v->range != DD_BLOOM_FULL_RANGE || new_range == 0 || new_range > DD_BLOOM_FULL_RANGE)
        return DD_ERR_INVALID;
    uint64_t *keys = malloc((v->count ? v->count : 1) * sizeof *keys);
    if (!keys) return DD_ERR_NOMEM;
    int rc = dd_bloom_decode_dated(v, undated, keys);
    if (rc == DD_OK) {
        /* the fingerprint at NEW_RANGE keeps the order; ones that meet are
         * adjacent and keep the newest day */
        size_t m = 0;
        for (uint32_t i = 0; i < v->count; i++) {
            uint64_t f = ((keys[i] >> 32) * new_range) >> 32, d = (uint32_t)keys[i];
            if (m > 0 && keys[m - 1] >> 32 == f) {
                if (d > (uint32_t)keys[m - 1]) keys[m - 1] = f << 32 | d;
                continue;
            }
            keys[m++] = f << 32 | d;
        }
        rc = encode_keys(out, keys, m, new_range);
    }
    free(keys);
    return rc;
}

int dd_bloom_probe_sorted_since(const struct dd_bloom_view *v, const uint64_t *sorted, size_t n,
                                uint8_t *hit, uint32_t since)
{
    if (!v->days) return DD_ERR_INVALID;
    if (v->count == 0 || n == 0) return DD_OK;
    uint32_t *f = malloc(v->count * sizeof *f);
    if (!f) return DD_ERR_NOMEM;
    int rc = dd_bloom_decode(v, f);
    if (rc == DD_OK) {
        size_t j = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t want = dd_bloom_fingerprint(sorted[i], v->range);
            while (j < v->count && f[j] < want) j++;
            if (j == v->count) break;
            if (f[j] == want && dd_bloom_day_at(v, (uint32_t)j) >= since) hit[i] = 1;
        }
    }
    free(f);
    return rc;
}

int dd_bloom_operand_encode(struct dd_buf *out, const uint64_t *hashes, size_t n)
{
    if (n > UINT32_MAX || n > (SIZE_MAX - OPERAND_HEADER - TRAILER) / 8) return DD_ERR_INVALID;
    size_t total = OPERAND_HEADER + n * 8 + TRAILER;
    int rc = dd_buf_reserve(out, total);
    if (rc) return rc;
    uint8_t *p = out->data + out->len;
    p[0] = DD_BLOOM_VERSION;
    p[1] = DD_BLOOM_KIND_HASHES;
    p[2] = p[3] = 0;
    put_u32(p + 4, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        uint64_t le = htole64(hashes[i]);
        memcpy(p + OPERAND_HEADER + i * 8, &le, 8);
    }
    put_u32(p + OPERAND_HEADER + n * 8, checksum(p, OPERAND_HEADER + n * 8));
    out->len += total;
    return DD_OK;
}

int dd_bloom_operand_parse(const void *data, size_t len, const uint8_t **hashes, uint32_t *n)
{
    const uint8_t *p = data;
    if (!p || len < OPERAND_HEADER + TRAILER) return DD_ERR_CORRUPT;
    if (p[0] != DD_BLOOM_VERSION || p[1] != DD_BLOOM_KIND_HASHES || p[2] || p[3])
        return DD_ERR_CORRUPT;
    uint32_t count = get_u32(p + 4);
    if ((uint64_t)count * 8 != (uint64_t)len - OPERAND_HEADER - TRAILER) return DD_ERR_CORRUPT;
    if (get_u32(p + len - TRAILER) != checksum(p, len - TRAILER)) return DD_ERR_CORRUPT;
    *hashes = p + OPERAND_HEADER;
    *n = count;
    return DD_OK;
}

uint64_t dd_bloom_operand_at(const uint8_t *hashes, uint32_t i)
{
    uint64_t v;
    memcpy(&v, hashes + (size_t)i * 8, 8);
    return le64toh(v);
}

int dd_bloom_fps_encode(struct dd_buf *out, const uint64_t *hashes, size_t n)
{
    if (n > DD_BLOOM_FPS_MAX) return DD_ERR_INVALID;
    uint32_t f[DD_BLOOM_FPS_MAX], tmp[DD_BLOOM_FPS_MAX];
    for (size_t i = 0; i < n; i++) f[i] = (uint32_t)(hashes[i] >> 32);
    sort_u32(f, n, tmp);
    size_t m = unique_u32(f, n);
    size_t total = 1 + m * 4 + TRAILER;
    int rc = dd_buf_reserve(out, total);
    if (rc) return rc;
    uint8_t *p = out->data + out->len;
    p[0] = DD_BLOOM_FPS_TAG;
    for (size_t i = 0; i < m; i++) put_u32(p + 1 + i * 4, f[i]);
    put_u32(p + 1 + m * 4, checksum(p, 1 + m * 4));
    out->len += total;
    return DD_OK;
}

/* Check a list form: TAG, then items of STRIDE bytes each led by a u32
 * fingerprint, strictly ascending, at most DD_BLOOM_FPS_MAX, then the
 * checksum. Returns the item count, or -1. */
static long parse_list(const uint8_t *p, size_t len, uint8_t tag, size_t stride)
{
    if (!p || len < 1 + TRAILER || p[0] != tag || (len - 1 - TRAILER) % stride) return -1;
    size_t m = (len - 1 - TRAILER) / stride;
    if (m > DD_BLOOM_FPS_MAX) return -1;
    if (get_u32(p + len - TRAILER) != checksum(p, len - TRAILER)) return -1;
    for (size_t i = 1; i < m; i++)
        if (get_u32(p + 1 + i * stride) <= get_u32(p + 1 + (i - 1) * stride)) return -1;
    return (long)m;
}

int dd_bloom_fps_parse(const void *data, size_t len, const uint8_t **fps, uint32_t *n)
{
    long m = parse_list(data, len, DD_BLOOM_FPS_TAG, 4);
    if (m < 0) return DD_ERR_CORRUPT;
    *fps = (const uint8_t *)data + 1;
    *n = (uint32_t)m;
    return DD_OK;
}

uint32_t dd_bloom_fps_at(const uint8_t *fps, uint32_t i)
{
    return get_u32(fps + (size_t)i * 4);
}

int dd_bloom_dfps_encode(struct dd_buf *out, const uint64_t *dated, size_t n)
{
    if (n > DD_BLOOM_FPS_MAX) return DD_ERR_INVALID;
    uint64_t k[DD_BLOOM_FPS_MAX], tmp[DD_BLOOM_FPS_MAX];
    if (n) memcpy(k, dated, n * sizeof *k); /* at the full range a dated item is its key */
    size_t m = sort_unique_keys(k, n, tmp);
    size_t total = 1 + m * 8 + TRAILER;
    int rc = dd_buf_reserve(out, total);
    if (rc) return rc;
    uint8_t *p = out->data + out->len;
    p[0] = DD_BLOOM_DFPS_TAG;
    for (size_t i = 0; i < m; i++) {
        put_u32(p + 1 + i * 8, (uint32_t)(k[i] >> 32));
        put_u32(p + 5 + i * 8, (uint32_t)k[i]);
    }
    put_u32(p + 1 + m * 8, checksum(p, 1 + m * 8));
    out->len += total;
    return DD_OK;
}

int dd_bloom_dfps_parse(const void *data, size_t len, const uint8_t **items, uint32_t *n)
{
    long m = parse_list(data, len, DD_BLOOM_DFPS_TAG, 8);
    if (m < 0) return DD_ERR_CORRUPT;
    *items = (const uint8_t *)data + 1;
    *n = (uint32_t)m;
    return DD_OK;
}

uint64_t dd_bloom_dfps_at(const uint8_t *items, uint32_t i)
{
    return (uint64_t)get_u32(items + (size_t)i * 8) << 32 | get_u32(items + (size_t)i * 8 + 4);
}
