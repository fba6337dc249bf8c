/* SPDX-License-Identifier: Apache-2.0
 *
 * history.c - the per-(scene, user) played history in RocksDB (history.h):
 * key layout, time segments, the merge operator that folds raw-hash operands
 * into Golomb-compressed filters (bloom.h), the compaction filter that drops
 * expired segments and re-encodes closed ones, and the batched read.
 *
 * DESIGN (see history.h for the data model)
 *
 * Memory handed to RocksDB (verified against db/c.cc):
 *  - Merge operator: full_merge/partial_merge return a malloc'd buffer;
 *    RocksDB copies it into its own std::string and then calls our
 *    delete_value, which frees it. We never keep a pointer to it.
 *  - Compaction filter: RocksDB copies *new_value (std::string::assign) and
 *    never frees it. So each filter instance (created per compaction by a
 *    factory, used by one thread) owns one reusable buffer that *new_value
 *    points into; it is freed by the instance's destructor.
 *  - Options take ownership of the merge operator and the filter factory
 *    (shared_ptr) and of the filter policy; block-based table options are
 *    copied. Those are therefore never destroyed here after being set.
 *
 * Failure of a merge is fatal to a RocksDB compaction (background error), so
 * the merge operator only reports failure on out of memory; corrupt bases
 * and operands are counted and read as empty instead.
 *
 * Expired segments: a full merge of a dead segment yields an empty value
 * (no union is worth computing); the compaction filter drops dead segments
 * whatever their value; reads never ask for them. An empty value therefore
 * reads as an empty set, not as corruption.
 *
 * Late plays: RocksDB folds whatever operands a compaction holds; one that
 * reaches a closed segment's base may leave newer operands of the key in the
 * memtable or upper levels (bench_history saw 20% of a segment's keys get
 * such operands). Re-encoding sizes the filter for the count it saw, and a
 * re-encoded filter cannot take more items without raising its fp above
 * fp_rate / S. So a fold onto a re-encoded filter A keeps A as it is and
 * puts the new items (minus those A already answers for) in a second,
 * full-range filter B: a "split" value,
 *   u8 0xd5 | u8 0 | u16 0 | u32 LE len(A) | A | B      (A, B: bloom.h form)
 * whose fp is count(A)/range(A) + count(B)/2^32, i.e. still fp_rate / S.
 * The header has no checksum of its own; A and B have theirs, and parsing is
 * strict (tag, zero bytes, len(A) within the value, A and B both valid, B
 * at the full range), so a damaged header reads as corrupt. Late plays cost
 * the full-range price. To keep them few, re-encoding waits
 * REDUCE_GRACE_DAYS (3) after a segment closes, so that its last operands
 * have reached its base: this departs from history.h ("once closed") by
 * three days, which cost about 3/retention of the plays at the full range
 * (bench_history, segment_days 7: 1.95 bytes/play without the grace, 1.83
 * with it).
 *
 * Operands: dd_history_batch_add writes an operand of up to
 * DD_BLOOM_FPS_MAX (32) items as a fingerprint list (bloom.h: a tag, u32
 * h >> 32 each, a checksum: 9 bytes for one play) and a larger one as a
 * full-range filter (bloom.h GCS form at M = 2^32), not as raw hashes.
 * Both hold the same information as the hashes (every fingerprint, at every
 * range, is a function of h >> 32 only) and are deduplicated. Most ingest
 * operands are one or two plays of one user, where the list is less than
 * half the filter's size (21 bytes for one item: header and checksum) in
 * the memtable and in every SST that carries it; for large batches the
 * filter is smaller (10,000 items: 2.5 bytes each instead of 4) and a full
 * merge of one such operand with no base is a copy rather than a sort and
 * an encode. The partial merge (flushes and compactions that do not reach
 * the base) collapses operands into one operand by the same rule. Raw hash
 * operands (bloom.h operand form) are still read. Every form carries a
 * checksum.
 *
 * Reads: RocksDB 7.8's C API has no GetMergeOperands, so every Get of a key
 * that has operands above its base runs the full merge, and the result is
 * not kept: an active user's open segment (a base at the bottom, the day's
 * operands above it) is re-merged on every probe until a compaction reaches
 * the base. So the fold of an open segment is incremental: its value is a
 * split (A, B) too, A a full-range filter copied byte for byte and B a
 * small full-range delta that takes the new items (dd_bloom_union on B
 * only). B is folded into A (one exact full-range union) only when it holds
 * more than max(FOLD_MIN, count(A) / FOLD_DIV) = max(256, count(A)/8)
 * fingerprints, which bounds B's share of a read's decode and of the bytes
 * (items in both A and B cost B's bits until that fold). When the segment
 * closes, the merge operator or the compaction filter folds A u B and
 * re-encodes the result. Numbers (bench_history --read-merge, 10,000
 * candidates, sort included): 10,000 plays in one write after a restart 63
 * -> 32 ns per candidate; a base of 50,000 plus 20 operands of 20 plays
 * 150 -> 66 (a compacted 50,000: 56). A closed segment's operands are
 * folded at the full range too when the merge runs inside a read
 * (dd_history_probe sets a thread-local flag around its MultiGet): the
 * re-encoding at the final range is only worth its decode and encode when a
 * compaction keeps the result, and a read's result is thrown away (it was
 * ~5 % of dedupd's CPU under the Filter load generator).
 *
 * No per-user compaction: a user's many operands could be folded for good
 * by compacting the user's key range when a full merge sees many of them,
 * but the merge operator cannot start a compaction (it runs inside one, or
 * inside a Get), a manual CompactRange of one key range still rewrites every
 * L0 file (they span the whole key space) and blocks, and RocksDB already
 * bounds the operands of a key: a flush partial-merges them into one per L0
 * file, and ttl (a day) pushes them down to the base; in the memtable
 * max_successive_merges could fold them too, but it is off by default (a
 * memtable lookup per write halved ingest speed, and Kafka ingest flushes
 * the memtable every ingest.durable_interval_ms). So none is done.
 *
 * ttl and periodic compaction (BASE_OPTIONS) make the compaction filter see
 * every file within two days, so expiry and re-encoding do not wait for
 * write traffic.
 *
 * Logging of corrupt values is rate limited (one line per 10 s with the
 * key and a suppressed= count) rather than tracked per key: a per-key set
 * would be unbounded memory on the read path.
 */
#include "history.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rocksdb/c.h>

#include "arena.h"
#include "bloom.h"
#include "candset.h"
#include "config.h"
#include "dd.h"
#include "log.h"

#define MODULE "history"

/* Longest key: u8 + 255 + u16 + 65535 + u32. */
#define KEY_MAX (1 + 255 + 2 + 65535 + 4)
/* Probe fast path: keys this long and this many segments use the stack. */
#define PROBE_STACK_KEY 512
#define PROBE_STACK_SEGS 32
/* dd_history_probe_any looks every candidate up in each filter up to this
 * many filters; past it (only with a small history.segment_days), one sort
 * of the candidates and a merge per filter cost less. */
#define PROBE_INDEX_VIEWS 8

/* Days a closed segment stays at the full range before re-encoding. */
#define REDUCE_GRACE_DAYS 3

/* Set before the rocksdb.* pass-through (which may override them): non-bottom
 * files older than a day are pushed down (ttl), so operands meet their base
 * within days; every file goes through the compaction filter at least every
 * two days (periodic compaction), so segments expire and are re-encoded
 * without waiting for write traffic.
 * Not wal_compression: with kZSTD (experimental in RocksDB 7.8) the
 * million-play ingest test lost 14 % of its plays across a clean stop and
 * reopen, although it cut disk writes by a third. */
#define BASE_OPTIONS "ttl=86400;periodic_compaction_seconds=172800"

/* RocksDB's BottommostLevelCompaction::kForce: compaction filter and
 * re-encoding must see the bottom level too. */
#define COMPACT_BOTTOMMOST_FORCE 2

struct dd_history {
    rocksdb_t *db;
    rocksdb_options_t *opts;           /* kept: owns the statistics object */
    rocksdb_column_family_handle_t *cf;
    rocksdb_readoptions_t *ropts;
    rocksdb_writeoptions_t *wopts;
    rocksdb_writeoptions_t *wopts_unlogged; /* no WAL: durable at the next flush */
    rocksdb_flushoptions_t *fopts;
    rocksdb_compactoptions_t *copts;
    rocksdb_cache_t *cache;

    struct dd_history_clock clock;
    uint32_t segment_days;
    uint32_t retention_days;
    int64_t max_future_ms;
    double fp_rate;
    double segment_fp;                 /* fp_rate / S: target of a closed segment */

    _Atomic uint64_t corrupt_values;
    _Atomic uint64_t segments_expired;
    _Atomic uint64_t segments_reduced;
    _Atomic uint64_t merges;
    _Atomic uint64_t merged_dead;      /* full merges that emptied a dead segment */
    _Atomic uint64_t writes;
    _Atomic uint64_t operands_written;
};

struct dd_history_batch {
    rocksdb_writebatch_t *wb;
    struct dd_buf key;                 /* scratch for one key */
    struct dd_buf val;                 /* scratch for one operand */
    uint32_t *fp;                      /* scratch for its fingerprints */
    size_t fp_cap;
    size_t operands;
    size_t bytes;
    bool unlogged;                     /* write without the WAL */
};

static struct dd_log_limit corrupt_log_limit;

/* ---- time and keys ------------------------------------------------------ */

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static int64_t now_ms(const dd_history *h)
{
    return h->clock.now_ms ? h->clock.now_ms(h->clock.ud) : dd_now_ms();
}

static int64_t today(const dd_history *h)
{
    return floor_div(now_ms(h), DD_MS_PER_DAY);
}

/* Newest day a segment holds. */
static int64_t segment_last_day(const dd_history *h, uint32_t seg)
{
    return (int64_t)seg * h->segment_days + h->segment_days - 1;
}

/* Oldest day still remembered: today - retention_days. A play on day d is
 * kept while day d + retention_days lasts, so at least retention_days full
 * days after it happened, whatever its time of day. */
static int64_t oldest_live_day(const dd_history *h, int64_t day)
{
    return day - (int64_t)h->retention_days;
}

static bool segment_dead(const dd_history *h, uint32_t seg, int64_t day)
{
    return segment_last_day(h, seg) < oldest_live_day(h, day);
}

/* Closed for re-encoding: no day of it can still be "today" or "yesterday"
 * (history.h), and REDUCE_GRACE_DAYS more have passed, so that its last
 * operands have had time to reach its base (see DESIGN, "Late plays"). */
static bool segment_closed(const dd_history *h, uint32_t seg, int64_t day)
{
    return segment_last_day(h, seg) < day - 1 - REDUCE_GRACE_DAYS;
}

static uint32_t day_segment(const dd_history *h, int64_t day)
{
    if (day < 0) return 0;
    int64_t s = day / h->segment_days;
    return s > UINT32_MAX ? UINT32_MAX : (uint32_t)s;
}

/* Write the user prefix (everything but the segment) into P; returns its
 * length. P has room for KEY_MAX bytes; lengths are checked by callers. */
static size_t key_prefix(uint8_t *p, const char *scene, size_t scene_len, const char *user,
                         size_t user_len)
{
    size_t n = 0;
    p[n++] = (uint8_t)scene_len;
    if (scene_len) memcpy(p + n, scene, scene_len);
    n += scene_len;
    p[n++] = (uint8_t)(user_len >> 8);
    p[n++] = (uint8_t)user_len;
    if (user_len) memcpy(p + n, user, user_len);
    return n + user_len;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The segment of a stored key: its last 4 bytes, once the key's own length
 * fields say the key is well formed. Returns false for foreign keys. */
static bool key_segment(const char *key, size_t len, uint32_t *seg)
{
    const uint8_t *k = (const uint8_t *)key;
    if (len < 1 + 2 + 4) return false;
    size_t slen = k[0];
    if (len < 1 + slen + 2 + 4) return false;
    size_t ulen = ((size_t)k[1 + slen] << 8) | k[2 + slen];
    if (len != 1 + slen + 2 + ulen + 4) return false;
    const uint8_t *s = k + len - 4;
    *seg = ((uint32_t)s[0] << 24) | ((uint32_t)s[1] << 16) | ((uint32_t)s[2] << 8) | s[3];
    return true;
}

/* Hex of up to 48 key bytes, for log lines. */
static void key_hex(char *out, size_t outlen, const char *key, size_t len)
{
    static const char hx[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < len && i < 48 && o + 3 < outlen; i++) {
        out[o++] = hx[(uint8_t)key[i] >> 4];
        out[o++] = hx[(uint8_t)key[i] & 15];
    }
    out[o] = '\0';
}

static void note_corrupt(dd_history *h, const char *what, const char *key, size_t klen)
{
    atomic_fetch_add_explicit(&h->corrupt_values, 1, memory_order_relaxed);
    char hex[100];
    key_hex(hex, sizeof hex, key, klen);
    dd_log_limited(&corrupt_log_limit, 10000, DD_LOG_WARN, MODULE,
                   "msg=\"corrupt %s read as empty\" key=%s", what, hex);
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
static int parse_value(const char *val, size_t len, struct dd_bloom_view v[2], int *nv,
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

/* Append a split value (A's bytes, then B = BBASE united with N hashes at
 * the full range) to OUT. 0, DD_ERR_CORRUPT (BBASE) or DD_ERR_NOMEM; OUT
 * unchanged on error. */
static int build_split(struct dd_buf *out, const char *a, size_t alen,
                       const struct dd_bloom_view *bbase, const uint64_t *hashes, size_t n)
{
    size_t keep = out->len;
    if (split_begin(out, a, alen) != 0) return DD_ERR_NOMEM;
    int rc = dd_bloom_union(out, bbase, DD_BLOOM_FULL_RANGE, hashes, n);
    if (rc != 0) out->len = keep;
    return rc;
}

/* Drop from HASHES (length *N) those filter V already answers for: they
 * need no second entry. Returns 0 or DD_ERR_NOMEM. */
static int drop_known(const struct dd_bloom_view *v, uint64_t *hashes, size_t *n)
{
    if (*n == 0) return 0;
    uint64_t *tmp = malloc(*n * sizeof *tmp);
    uint8_t *hit = calloc(*n, 1);
    if (!tmp || !hit) {
        free(tmp);
        free(hit);
        return DD_ERR_NOMEM;
    }
    dd_bloom_sort_hashes(hashes, NULL, *n, tmp, NULL);
    size_t w = 0;
    if (dd_bloom_probe_sorted(v, hashes, *n, hit) != 0) memset(hit, 0, *n);
    for (size_t i = 0; i < *n; i++)
        if (!hit[i]) hashes[w++] = hashes[i];
    *n = w;
    free(tmp);
    free(hit);
    return 0;
}

/* A growing array of item hashes. */
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

/* Append the items of full-range filter F as hashes: fingerprint << 32,
 * which has F's fingerprint at every range (bloom.h), so nothing is lost.
 * Returns 0, DD_ERR_CORRUPT (bitstream; V unchanged) or DD_ERR_NOMEM. */
static int hvec_add_filter(struct hvec *v, const struct dd_bloom_view *f)
{
    if (f->count == 0) return 0;
    uint32_t *fp = malloc(f->count * sizeof *fp);
    if (!fp || hvec_reserve(v, f->count) != 0) {
        free(fp);
        return DD_ERR_NOMEM;
    }
    int rc = dd_bloom_decode(f, fp);
    if (rc == 0) {
        for (uint32_t i = 0; i < f->count; i++) v->h[v->n + i] = (uint64_t)fp[i] << 32;
        v->n += f->count;
    }
    free(fp);
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
    (void)st; /* the state is the dd_history, freed by dd_history_close */
}

/* Set by dd_history_probe around its MultiGet: the merges RocksDB runs in
 * this thread meanwhile serve a read (see full_merge). */
static _Thread_local bool in_probe;

static void merge_delete_value(void *st, const char *value, size_t len)
{
    (void)st;
    (void)len;
    free((void *)value);
}

/* One merge operand: raw hashes (bloom.h operand), a fingerprint list or a
 * full-range filter. */
struct operand {
    bool is_filter;
    const uint8_t *raw;           /* raw: N little-endian u64 */
    const uint8_t *fps;           /* fingerprint list: N little-endian u32 */
    uint32_t n;
    struct dd_bloom_view f;       /* filter */
    const char *bytes;
    size_t len;
};

static int parse_operand(const char *p, size_t len, struct operand *o)
{
    o->bytes = p;
    o->len = len;
    o->is_filter = false;
    o->raw = o->fps = NULL;
    if (dd_bloom_fps_parse(p, len, &o->fps, &o->n) == 0) return 0;
    if (dd_bloom_operand_parse(p, len, &o->raw, &o->n) == 0) return 0;
    if (dd_bloom_parse(p, len, &o->f) == 0 && o->f.range == DD_BLOOM_FULL_RANGE) {
        o->is_filter = true;
        o->n = o->f.count;
        return 0;
    }
    return DD_ERR_CORRUPT;
}

/* Append the N hashes to OUT as one operand (see DESIGN, "Operands"): a
 * fingerprint list up to DD_BLOOM_FPS_MAX items, else a full-range filter
 * (SCRATCH as for dd_bloom_build). 0 or DD_ERR_NOMEM. */
static int encode_operand(struct dd_buf *out, const uint64_t *hashes, size_t n,
                          uint32_t *scratch)
{
    if (n <= DD_BLOOM_FPS_MAX) return dd_bloom_fps_encode(out, hashes, n);
    return dd_bloom_build(out, hashes, n, DD_BLOOM_FULL_RANGE, scratch);
}

/* Parse the NOPS operands into a malloc'd array (*out, *nout valid ones).
 * Corrupt operands are counted and skipped. 0 or DD_ERR_NOMEM. */
static int load_operands(dd_history *h, const char *key, size_t klen, const char *const *ops,
                         const size_t *lens, int nops, struct operand **out, int *nout)
{
    struct operand *o = malloc((nops > 0 ? (size_t)nops : 1) * sizeof *o);
    if (!o) return DD_ERR_NOMEM;
    int k = 0;
    for (int i = 0; i < nops; i++) {
        if (parse_operand(ops[i], lens[i], &o[k]) == 0) k++;
        else note_corrupt(h, "operand", key, klen);
    }
    *out = o;
    *nout = k;
    return 0;
}

/* Append every item of the N operands to V. An operand whose bitstream
 * fails (checksum passed) is counted and skipped. 0 or DD_ERR_NOMEM. */
static int operands_hashes(dd_history *h, const char *key, size_t klen,
                           const struct operand *o, int n, struct hvec *v)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) total += o[i].n;
    if (hvec_reserve(v, total) != 0) return DD_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        if (o[i].fps) {
            /* fingerprint << 32 has that fingerprint at every range */
            for (uint32_t j = 0; j < o[i].n; j++)
                v->h[v->n++] = (uint64_t)dd_bloom_fps_at(o[i].fps, j) << 32;
            continue;
        }
        if (!o[i].is_filter) {
            for (uint32_t j = 0; j < o[i].n; j++) v->h[v->n++] = dd_bloom_operand_at(o[i].raw, j);
            continue;
        }
        int rc = hvec_add_filter(v, &o[i].f);
        if (rc == DD_ERR_NOMEM) return rc;
        if (rc != 0) note_corrupt(h, "operand", key, klen);
    }
    return 0;
}

/* Hand BUF's bytes to RocksDB (freed by merge_delete_value). A zero-length
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
 * N hashes; or, once B would exceed the fold threshold, the single filter
 * A u B. A (a full-range filter whose bytes are ABYTES) is copied as it
 * is unless folded. 0 or DD_ERR_NOMEM. */
static int merge_into_delta(dd_history *h, const char *key, size_t klen, struct dd_buf *out,
                            const struct dd_bloom_view *a, const char *abytes, size_t alen,
                            const struct dd_bloom_view *b0, struct hvec *hv)
{
    struct dd_buf b = {0};
    struct dd_bloom_view bv;
    int rc = dd_bloom_union(&b, b0, DD_BLOOM_FULL_RANGE, hv->h, hv->n);
    if (rc == DD_ERR_CORRUPT) {
        note_corrupt(h, "value", key, klen);
        rc = dd_bloom_union(&b, NULL, DD_BLOOM_FULL_RANGE, hv->h, hv->n);
    }
    if (rc == 0 && dd_bloom_parse(b.data, b.len, &bv) != 0) rc = DD_ERR_CORRUPT;
    if (rc != 0) {
        dd_buf_free(&b);
        return DD_ERR_NOMEM;   /* only out of memory is left: we just encoded B */
    }
    uint32_t limit = a->count / FOLD_DIV > FOLD_MIN ? a->count / FOLD_DIV : FOLD_MIN;
    if (bv.count <= limit) {
        rc = split_begin(out, abytes, alen);
        if (rc == 0) rc = buf_copy(out, b.data, b.len);
        dd_buf_free(&b);
        return rc;
    }
    /* Fold: A u B in one full-range filter. */
    hv->n = 0;
    rc = hvec_add_filter(hv, &bv);
    if (rc == 0) rc = dd_bloom_union(out, a, DD_BLOOM_FULL_RANGE, hv->h, hv->n);
    if (rc == DD_ERR_CORRUPT) {
        /* A's checksum held but its bitstream did not: A reads as empty
         * anyway, so B alone is the value. */
        note_corrupt(h, "value", key, klen);
        rc = buf_copy(out, b.data, b.len);
    }
    dd_buf_free(&b);
    return rc == 0 ? 0 : DD_ERR_NOMEM;
}

/* Append to OUT filter F (full range; its bytes FBYTES) re-encoded at its
 * final range, or copied when that is no smaller. 0 or DD_ERR_NOMEM. */
static int reduce_into(dd_history *h, struct dd_buf *out, const struct dd_bloom_view *f,
                       const void *fbytes, size_t flen)
{
    uint64_t r = dd_bloom_range_for(f->count, h->segment_fp);
    if (r < DD_BLOOM_FULL_RANGE) {
        size_t keep = out->len;
        int rc = dd_bloom_reduce(out, f, r);
        if (rc == 0) {
            atomic_fetch_add_explicit(&h->segments_reduced, 1, memory_order_relaxed);
            return 0;
        }
        out->len = keep;
        if (rc == DD_ERR_NOMEM) return rc;
        /* a bad bitstream: keep the exact form; reads count it */
    }
    return buf_copy(out, fbytes, flen);
}

/* The fold (see DESIGN, "Reads"): the value is kept as a main filter A and
 * a small full-range delta B, so that a read (which runs this on every Get
 * of a key with operands) copies A and re-encodes only B. */
static char *full_merge(void *st, const char *key, size_t klen, const char *existing,
                        size_t existing_len, const char *const *ops, const size_t *lens,
                        int nops, unsigned char *success, size_t *new_len)
{
    dd_history *h = st;
    struct dd_buf out = {0}, one = {0};
    struct hvec hv = {0};
    struct operand *op = NULL;
    int nop = 0, rc;
    uint32_t seg = 0;
    bool have_seg = key_segment(key, klen, &seg);
    int64_t day = today(h);

    *success = 0;
    *new_len = 0;
    atomic_fetch_add_explicit(&h->merges, 1, memory_order_relaxed);

    if (have_seg && segment_dead(h, seg, day)) {
        atomic_fetch_add_explicit(&h->merged_dead, 1, memory_order_relaxed);
        char *p = give(&out, new_len);
        if (p) *success = 1;
        return p;
    }
    /* A Get's merge result is thrown away after the read, so re-encoding a
     * closed segment there (a decode and an encode of the whole filter, on
     * every probe until a compaction keeps the fold) buys nothing: reads
     * fold it as if open, at the full range, which answers the same items
     * with fewer false positives. */
    bool closed = have_seg && segment_closed(h, seg, day) && !in_probe;

    struct dd_bloom_view bv[2];
    int nb = 0;
    const char *a_bytes = NULL;
    size_t a_len = 0;
    if (existing && parse_value(existing, existing_len, bv, &nb, &a_bytes, &a_len) != 0) {
        note_corrupt(h, "value", key, klen);
        nb = 0;
    }
    if (load_operands(h, key, klen, ops, lens, nops, &op, &nop) != 0) goto nomem;

    if (nb > 0 && bv[0].range != DD_BLOOM_FULL_RANGE) {
        /* A is final: late items go to the full-range part (see DESIGN) */
        if (operands_hashes(h, key, klen, op, nop, &hv) != 0) goto nomem;
        if (drop_known(&bv[0], hv.h, &hv.n) != 0) goto nomem;
        if (hv.n == 0) {
            if (buf_copy(&out, existing, existing_len) != 0) goto nomem;
        } else {
            rc = build_split(&out, a_bytes, a_len, nb == 2 ? &bv[1] : NULL, hv.h, hv.n);
            if (rc == DD_ERR_CORRUPT) {
                note_corrupt(h, "value", key, klen);
                rc = build_split(&out, a_bytes, a_len, NULL, hv.h, hv.n);
            }
            if (rc != 0) goto nomem;
        }
    } else if (nb > 0 && !closed) {
        /* Open segment, A at the full range: new items go to B. */
        if (operands_hashes(h, key, klen, op, nop, &hv) != 0) goto nomem;
        if (hv.n == 0) {
            if (buf_copy(&out, existing, existing_len) != 0) goto nomem;
        } else if (merge_into_delta(h, key, klen, &out, &bv[0], a_bytes, a_len,
                                    nb == 2 ? &bv[1] : NULL, &hv) != 0) {
            goto nomem;
        }
    } else {
        /* No base, or a full-range base of a closed segment: one filter,
         * re-encoded at its final range if the segment is closed. A single
         * filter operand is that filter already. */
        struct dd_bloom_view fv;
        const void *fbytes;
        size_t flen;
        if (nb == 0 && nop == 1 && op[0].is_filter) {
            fv = op[0].f;
            fbytes = op[0].bytes;
            flen = op[0].len;
        } else {
            if (operands_hashes(h, key, klen, op, nop, &hv) != 0) goto nomem;
            if (nb == 2) {
                rc = hvec_add_filter(&hv, &bv[1]);
                if (rc == DD_ERR_NOMEM) goto nomem;
                if (rc != 0) note_corrupt(h, "value", key, klen);
            }
            rc = dd_bloom_union(&one, nb ? &bv[0] : NULL, DD_BLOOM_FULL_RANGE, hv.h, hv.n);
            if (rc == DD_ERR_CORRUPT) {
                /* Checksum passed but the bitstream did not: still corrupt. */
                note_corrupt(h, "value", key, klen);
                one.len = 0;
                rc = dd_bloom_union(&one, NULL, DD_BLOOM_FULL_RANGE, hv.h, hv.n);
            }
            if (rc != 0 || dd_bloom_parse(one.data, one.len, &fv) != 0) goto nomem;
            fbytes = one.data;
            flen = one.len;
        }
        if (closed) {
            if (reduce_into(h, &out, &fv, fbytes, flen) != 0) goto nomem;
        } else if (fbytes == one.data) {
            out = one;
            one = (struct dd_buf){0};
        } else if (buf_copy(&out, fbytes, flen) != 0) {
            goto nomem;
        }
    }
    free(hv.h);
    free(op);
    dd_buf_free(&one);
    char *p = give(&out, new_len);
    if (p) *success = 1;
    return p;

nomem:
    free(hv.h);
    free(op);
    dd_buf_free(&out);
    dd_buf_free(&one);
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
 * merged". */
static char *partial_merge(void *st, const char *key, size_t klen, const char *const *ops,
                           const size_t *lens, int nops, unsigned char *success,
                           size_t *new_len)
{
    dd_history *h = st;
    struct hvec hv = {0};
    struct operand *op = NULL;
    int nop = 0;
    struct dd_buf out = {0};

    *success = 0;
    *new_len = 0;
    if (load_operands(h, key, klen, ops, lens, nops, &op, &nop) == 0 &&
        operands_hashes(h, key, klen, op, nop, &hv) == 0 &&
        encode_operand(&out, hv.h, hv.n, NULL) == 0) {
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
    dd_history *h;
    struct dd_buf buf;   /* *new_value points here until the next call */
};

static const char *cfilter_name(void *st)
{
    (void)st;
    return "dedupd.history.expire.v1";
}

static void cfilter_destroy(void *st)
{
    struct cfilter *f = st;
    dd_buf_free(&f->buf);
    free(f);
}

static unsigned char cfilter_filter(void *st, int level, const char *key, size_t klen,
                                    const char *val, size_t vlen, char **new_value,
                                    size_t *new_len, unsigned char *changed)
{
    struct cfilter *f = st;
    dd_history *h = f->h;
    uint32_t seg;
    (void)level;

    *changed = 0;
    if (!key_segment(key, klen, &seg)) return 0;
    int64_t day = today(h);
    if (segment_dead(h, seg, day)) {
        atomic_fetch_add_explicit(&h->segments_expired, 1, memory_order_relaxed);
        return 1;
    }
    if (!segment_closed(h, seg, day) || vlen == 0) return 0;

    struct dd_bloom_view vv[2];
    int nv;
    const char *a;
    size_t alen;
    if (parse_value(val, vlen, vv, &nv, &a, &alen) != 0) {
        /* Kept as is: it reads as empty, and the next fold replaces it. A
         * value from a newer format must not be destroyed by a rollback. */
        note_corrupt(h, "value", key, klen);
        return 0;
    }
    if (nv == 0 || vv[0].range != DD_BLOOM_FULL_RANGE) return 0;
    f->buf.len = 0;
    bool reduced = true;
    if (nv == 1) {
        uint64_t r = dd_bloom_range_for(vv[0].count, h->segment_fp);
        if (r >= DD_BLOOM_FULL_RANGE) return 0;
        if (dd_bloom_reduce(&f->buf, &vv[0], r) != 0) return 0; /* keep the exact form */
    } else {
        /* A split value of a segment that closed while open: fold A u B
         * (exact, both at the full range), then re-encode. On any failure
         * the value is kept as it is: it still answers every item. */
        struct hvec hv = {0};
        struct dd_buf one = {0};
        struct dd_bloom_view fv;
        int rc = hvec_add_filter(&hv, &vv[1]);
        if (rc == 0) rc = dd_bloom_union(&one, &vv[0], DD_BLOOM_FULL_RANGE, hv.h, hv.n);
        if (rc == 0) rc = dd_bloom_parse(one.data, one.len, &fv);
        free(hv.h);
        if (rc == 0) {
            uint64_t r = dd_bloom_range_for(fv.count, h->segment_fp);
            reduced = r < DD_BLOOM_FULL_RANGE;
            rc = reduced ? dd_bloom_reduce(&f->buf, &fv, r) : buf_copy(&f->buf, one.data, one.len);
        }
        dd_buf_free(&one);
        if (rc != 0) return 0;
    }
    *new_value = (char *)f->buf.data;
    *new_len = f->buf.len;
    *changed = 1;
    if (reduced) atomic_fetch_add_explicit(&h->segments_reduced, 1, memory_order_relaxed);
    return 0;
}

static rocksdb_compactionfilter_t *cfilter_create(void *st,
                                                  rocksdb_compactionfiltercontext_t *ctx)
{
    (void)ctx;
    struct cfilter *f = calloc(1, sizeof *f);
    if (!f) {
        dd_error(MODULE, "msg=\"out of memory: compaction runs without expiry\"");
        return NULL;
    }
    f->h = st;
    return rocksdb_compactionfilter_create(f, cfilter_destroy, cfilter_filter, cfilter_name);
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

/* ---- open / close --------------------------------------------------------- */

/* Apply cfg->rocksdb to BASE into a new options object (*out). On a bad
 * option, find which key it is by trying each alone. */
static int apply_passthrough(rocksdb_options_t *base, const struct dd_config_list *l,
                             rocksdb_options_t **out, char *err, size_t errlen)
{
    size_t need = 1;
    for (size_t i = 0; i < l->len; i++)
        need += strlen(l->items[i].key) + strlen(l->items[i].value) + 2;
    char *s = malloc(need);
    if (!s) return DD_ERR_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < l->len; i++)
        o += (size_t)sprintf(s + o, "%s%s=%s", i ? ";" : "", l->items[i].key,
                             l->items[i].value);
    s[o] = '\0';

    rocksdb_options_t *n = rocksdb_options_create();
    char *e = NULL;
    rocksdb_get_options_from_string(base, s, n, &e);
    free(s);
    if (!e) {
        *out = n;
        return 0;
    }
    rocksdb_options_destroy(n);
    for (size_t i = 0; i < l->len; i++) {
        const struct dd_config_kv *kv = &l->items[i];
        size_t len = strlen(kv->key) + strlen(kv->value) + 2;
        char *one = malloc(len);
        if (!one) break;
        snprintf(one, len, "%s=%s", kv->key, kv->value);
        rocksdb_options_t *t = rocksdb_options_create();
        char *e1 = NULL;
        rocksdb_get_options_from_string(base, one, t, &e1);
        rocksdb_options_destroy(t);
        free(one);
        if (e1) {
            dd_set_err(err, errlen, "rocksdb.%s: %s", kv->key, e1);
            rocksdb_free(e1);
            rocksdb_free(e);
            return DD_ERR_INVALID;
        }
    }
    dd_set_err(err, errlen, "rocksdb options: %s", e);
    rocksdb_free(e);
    return DD_ERR_INVALID;
}

int dd_history_open(dd_history **out, const struct dd_config *cfg,
                    const struct dd_history_clock *clock, char *err, size_t errlen)
{
    *out = NULL;
    const char *bad = NULL;
    if (cfg->history.segment_days == 0) bad = "history.segment_days";
    else if (cfg->history.retention_days == 0) bad = "history.retention_days";
    else if (!(cfg->history.fp_rate > 0 && cfg->history.fp_rate < 1)) bad = "history.fp_rate";
    else if (cfg->history.max_future_ms < 0) bad = "history.max_future_ms";
    else if (!cfg->history.path || !cfg->history.path[0]) bad = "history.path";
    if (bad) {
        dd_set_err(err, errlen, "%s: invalid value", bad);
        return DD_ERR_INVALID;
    }

    dd_history *h = calloc(1, sizeof *h);
    if (!h) {
        dd_set_err(err, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    if (clock) h->clock = *clock;
    h->segment_days = cfg->history.segment_days;
    h->retention_days = cfg->history.retention_days;
    h->max_future_ms = cfg->history.max_future_ms;
    h->fp_rate = cfg->history.fp_rate;
    uint32_t s = (h->retention_days + h->segment_days - 1) / h->segment_days + 1;
    h->segment_fp = h->fp_rate / s;

    int rc = DD_ERR_IO;
    rocksdb_options_t *base = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(base, 1);
    rocksdb_options_set_create_missing_column_families(base, 1);
    rocksdb_options_increase_parallelism(base, 2);
    rocksdb_options_set_level_compaction_dynamic_level_bytes(base, 1);
    rocksdb_options_set_max_successive_merges(base, cfg->history.max_successive_merges);
    /* LZ4 above the bottom level, where fresh flushes hold small operands
     * whose blocks compress well (keys, 8-byte sequence/type trailers):
     * bench_ingest wrote 24.9 bytes per play without it, 15.8 with it.
     * None at the bottom, which holds the folded filters: they do not
     * compress, and there LZ4 cost reads (bench_history: 48-51 -> 70-78 ns
     * per candidate; bytes on disk were the same within run-to-run
     * variation). */
    rocksdb_options_set_compression(base, rocksdb_lz4_compression);
    rocksdb_options_set_bottommost_compression(base, rocksdb_no_compression);
    /* 16 MiB memtables (RocksDB: 64): ingest inserts each window as a
     * sorted run, and a skiplist not much larger than the run is walked
     * mostly in cache. bench_ingest: 197,000 -> 326,000 plays/s, at the
     * cost of more, smaller L0 files. */
    rocksdb_options_set_write_buffer_size(base, 16u << 20);
    /* Compact L0 at 8 files (RocksDB: 4): half as many rewrites of the
     * level below, whose uncompressed filters are most of what a
     * compaction writes (bench_ingest, 6 M plays: 33 -> 23 bytes written
     * per play, 211,000 -> 316,000 plays/s). A read may meet a few more
     * L0 files; their whole-key bloom filters are pinned in the cache. */
    rocksdb_options_set_level0_file_num_compaction_trigger(base, 8);
    rocksdb_options_set_keep_log_file_num(base, 5);
    rocksdb_options_set_max_log_file_size(base, 16u << 20);

    /* Options own these from here on (shared_ptr in c.cc). */
    rocksdb_options_set_merge_operator(base,
        rocksdb_mergeoperator_create(h, merge_state_destroy, full_merge, partial_merge,
                                     merge_delete_value, merge_name));
    rocksdb_options_set_compaction_filter_factory(base,
        rocksdb_compactionfilterfactory_create(h, cfactory_destroy, cfilter_create,
                                               cfactory_name));

    /* Reads are whole-key MultiGets of 4-5 keys: a whole-key bloom filter
     * answers "no such segment" without touching data blocks, and keeps
     * users with no history cheap. No prefix extractor: nothing seeks. */
    uint64_t cache_bytes = cfg->history.block_cache_mb << 20;
    h->cache = rocksdb_cache_create_lru(cache_bytes ? (size_t)cache_bytes : 1);
    rocksdb_block_based_table_options_t *t = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_cache(t, h->cache);
    rocksdb_block_based_options_set_filter_policy(t, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_block_based_options_set_whole_key_filtering(t, 1);
    rocksdb_block_based_options_set_cache_index_and_filter_blocks(t, 1);
    rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(t, 1);
    rocksdb_block_based_options_set_block_size(t, 16 * 1024);
    rocksdb_block_based_options_set_format_version(t, 5);
    rocksdb_options_set_block_based_table_factory(base, t);
    rocksdb_block_based_options_destroy(t);   /* the factory copied them */

    rocksdb_options_t *tuned = rocksdb_options_create();
    char *e = NULL;
    rocksdb_get_options_from_string(base, BASE_OPTIONS, tuned, &e);
    rocksdb_options_destroy(base);
    if (e) {
        dd_set_err(err, errlen, "rocksdb built-in options: %s", e);
        rocksdb_free(e);
        rocksdb_options_destroy(tuned);
        rc = DD_ERR_INVALID;
        goto fail;
    }
    rocksdb_options_t *opts = NULL;
    rc = apply_passthrough(tuned, &cfg->rocksdb, &opts, err, errlen);
    rocksdb_options_destroy(tuned);
    if (rc != 0) {
        if (rc == DD_ERR_NOMEM) dd_set_err(err, errlen, "out of memory");
        goto fail;
    }
    rocksdb_options_enable_statistics(opts);
    h->opts = opts;

    const char *cf_names[1] = {"default"};
    const rocksdb_options_t *cf_opts[1] = {opts};
    rocksdb_column_family_handle_t *cfs[1] = {NULL};
    h->db = rocksdb_open_column_families(opts, cfg->history.path, 1, cf_names, cf_opts, cfs, &e);
    if (e) {
        dd_set_err(err, errlen, "%s: %s", cfg->history.path, e);
        rocksdb_free(e);
        h->db = NULL;
        rc = DD_ERR_IO;
        goto fail;
    }
    h->cf = cfs[0];

    h->ropts = rocksdb_readoptions_create();
    h->wopts = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(h->wopts, cfg->history.sync ? 1 : 0);
    h->wopts_unlogged = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(h->wopts_unlogged, 1);
    h->fopts = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(h->fopts, 1);
    h->copts = rocksdb_compactoptions_create();
    rocksdb_compactoptions_set_bottommost_level_compaction(h->copts, COMPACT_BOTTOMMOST_FORCE);
    rocksdb_compactoptions_set_exclusive_manual_compaction(h->copts, 0);
    *out = h;
    return 0;

fail:
    dd_history_close(h);
    return rc;
}

void dd_history_close(dd_history *h)
{
    if (!h) return;
    if (h->db && h->fopts) {
        /* A clean stop leaves nothing to the WAL: sync it, then write the
         * memtables to SST files, so a restart needs no replay and does not
         * depend on the WAL's tail (rocksdb_close alone does neither while
         * the WAL is on). Failures are logged; the WAL still holds the data. */
        char *e = NULL;
        rocksdb_flush_wal(h->db, 1, &e);
        if (!e) rocksdb_flush(h->db, h->fopts, &e);
        if (e) {
            dd_error("history", "msg=\"flush on close failed; the WAL has the data\" error=\"%s\"",
                     e);
            rocksdb_free(e);
        }
    }
    if (h->cf) rocksdb_column_family_handle_destroy(h->cf);
    if (h->db) rocksdb_close(h->db);
    /* After the db: the options hold the merge operator and filter factory
     * whose state is h, and the statistics. */
    if (h->opts) rocksdb_options_destroy(h->opts);
    if (h->ropts) rocksdb_readoptions_destroy(h->ropts);
    if (h->wopts) rocksdb_writeoptions_destroy(h->wopts);
    if (h->wopts_unlogged) rocksdb_writeoptions_destroy(h->wopts_unlogged);
    if (h->fopts) rocksdb_flushoptions_destroy(h->fopts);
    if (h->copts) rocksdb_compactoptions_destroy(h->copts);
    if (h->cache) rocksdb_cache_destroy(h->cache);
    free(h);
}

/* ---- time ----------------------------------------------------------------- */

int64_t dd_history_now_ms(const dd_history *h)
{
    return now_ms(h);
}

enum dd_history_place dd_history_place(const dd_history *h, int64_t at_ms, uint32_t *segment)
{
    int64_t now = now_ms(h);
    if (at_ms > now + h->max_future_ms) return DD_HISTORY_PLACE_FUTURE;
    int64_t day = floor_div(at_ms, DD_MS_PER_DAY);
    int64_t tday = floor_div(now, DD_MS_PER_DAY);
    if (day < 0 || day < oldest_live_day(h, tday)) return DD_HISTORY_PLACE_EXPIRED;
    *segment = day_segment(h, day);
    return DD_HISTORY_PLACE_OK;
}

/* ---- batches -------------------------------------------------------------- */

dd_history_batch *dd_history_batch_new(void)
{
    dd_history_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->wb = rocksdb_writebatch_create();
    if (!b->wb || dd_buf_reserve(&b->key, KEY_MAX) != 0) {
        dd_history_batch_free(b);
        return NULL;
    }
    return b;
}

void dd_history_batch_free(dd_history_batch *b)
{
    if (!b) return;
    if (b->wb) rocksdb_writebatch_destroy(b->wb);
    dd_buf_free(&b->key);
    dd_buf_free(&b->val);
    free(b->fp);
    free(b);
}

void dd_history_batch_clear(dd_history_batch *b)
{
    rocksdb_writebatch_clear(b->wb);
    b->operands = 0;
    b->bytes = 0;
}

int dd_history_batch_add(dd_history_batch *b, const char *scene, size_t scene_len,
                         const char *user, size_t user_len, uint32_t segment,
                         const uint64_t *hashes, size_t n)
{
    if (scene_len > 255 || user_len > 65535 || n > UINT32_MAX) return DD_ERR_INVALID;
    if (n == 0) return 0;
    size_t klen = key_prefix(b->key.data, scene, scene_len, user, user_len);
    put_be32(b->key.data + klen, segment);
    klen += 4;
    if (n > b->fp_cap) {
        if (n > SIZE_MAX / sizeof *b->fp) return DD_ERR_NOMEM;
        uint32_t *fp = realloc(b->fp, n * sizeof *fp);
        if (!fp) return DD_ERR_NOMEM;
        b->fp = fp;
        b->fp_cap = n;
    }
    /* The operand is a fingerprint list when small, else a full-range
     * filter (see DESIGN, "Operands"). */
    b->val.len = 0;
    if (encode_operand(&b->val, hashes, n, b->fp) != 0) return DD_ERR_NOMEM;
    rocksdb_writebatch_merge(b->wb, (const char *)b->key.data, klen,
                             (const char *)b->val.data, b->val.len);
    b->operands++;
    b->bytes += klen + b->val.len;
    return 0;
}

void dd_history_batch_set_unlogged(dd_history_batch *b, bool unlogged)
{
    b->unlogged = unlogged;
}

size_t dd_history_batch_operands(const dd_history_batch *b)
{
    return b->operands;
}

size_t dd_history_batch_bytes(const dd_history_batch *b)
{
    return b->bytes;
}

int dd_history_write(dd_history *h, dd_history_batch *b, char *err, size_t errlen)
{
    if (b->operands == 0) return 0;
    char *e = NULL;
    rocksdb_write(h->db, b->unlogged ? h->wopts_unlogged : h->wopts, b->wb, &e);
    if (e) {
        dd_set_err(err, errlen, "write: %s", e);
        rocksdb_free(e);
        return DD_ERR_IO;
    }
    atomic_fetch_add_explicit(&h->writes, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->operands_written, b->operands, memory_order_relaxed);
    return 0;
}

/* ---- read ----------------------------------------------------------------- */

/* The filters of one probe: every view parsed out of the values read, with
 * the segment key each came from (for logging a corrupt one). */
struct probe_views {
    struct dd_bloom_view *v;
    size_t *seg; /* v[i] came from key kp[seg[i]] */
    size_t n;
    const char *const *kp;
    const size_t *ks;
};

/* What a probe does with the views it read (CTX is the caller's; it may
 * reorder V and SEG together, which are probe_read's own). Returns
 * 0 or DD_ERR_NOMEM (message in err). */
typedef int (*probe_fn)(dd_history *h, const struct probe_views *pv, void *ctx, char *err,
                        size_t errlen);

/* Read (SCENE, USER)'s live segments within LOOKBACK_DAYS in one
 * MultiGet, parse their views and hand them all to FN at once (the values
 * stay pinned until it returns). Corrupt values are counted and left out.
 * Returns 0, DD_ERR_IO if a read failed (FN is then not called) or FN's
 * error. */
static int probe_read(dd_history *h, const char *scene, size_t scene_len, const char *user,
                      size_t user_len, uint32_t lookback_days, probe_fn fn, void *ctx, char *err,
                      size_t errlen)
{
    int64_t now = now_ms(h);
    int64_t day = floor_div(now, DD_MS_PER_DAY);
    uint32_t span = lookback_days == 0 || lookback_days > h->retention_days
                        ? h->retention_days : lookback_days;
    /* day - span, as oldest_live_day: the window covers the last SPAN full
     * days and the part of today that has passed */
    int64_t oldest = day - (int64_t)span;
    /* Plays may be dated up to max_future_ms ahead (and a day of skew). */
    int64_t ahead = h->max_future_ms > DD_MS_PER_DAY ? h->max_future_ms : DD_MS_PER_DAY;
    int64_t newest = floor_div(now + ahead, DD_MS_PER_DAY);
    if (newest < 0) return 0;
    uint32_t first = day_segment(h, oldest < 0 ? 0 : oldest);
    uint32_t last = day_segment(h, newest);
    size_t nseg = (size_t)(last - first) + 1;

    size_t plen_max = 1 + scene_len + 2 + user_len;
    size_t klen = plen_max + 4;

    /* Common case on the stack; huge ids or tiny segment_days on the heap. */
    char kstack[PROBE_STACK_SEGS * PROBE_STACK_KEY];
    const char *kp_stack[PROBE_STACK_SEGS];
    size_t ks_stack[PROBE_STACK_SEGS];
    rocksdb_pinnableslice_t *v_stack[PROBE_STACK_SEGS];
    char *e_stack[PROBE_STACK_SEGS];
    struct dd_bloom_view view_stack[2 * PROBE_STACK_SEGS];
    size_t seg_stack[2 * PROBE_STACK_SEGS];
    char *kbuf = kstack;
    const char **kp = kp_stack;
    size_t *ks = ks_stack;
    rocksdb_pinnableslice_t **vals = v_stack;
    char **errs = e_stack;
    struct dd_bloom_view *views = view_stack;
    size_t *vseg = seg_stack;
    void *heap = NULL;
    if (nseg > PROBE_STACK_SEGS || klen > PROBE_STACK_KEY) {
        size_t per = 2 * sizeof(struct dd_bloom_view) + 2 * sizeof(size_t) + sizeof(char *) +
                     sizeof(size_t) + sizeof(void *) + sizeof(char *);
        if (nseg <= SIZE_MAX / (per + klen)) heap = malloc(nseg * (per + klen));
        if (!heap) {
            dd_set_err(err, errlen, "out of memory");
            return DD_ERR_NOMEM;
        }
        char *p = heap;
        views = (struct dd_bloom_view *)(void *)p;
        p += 2 * nseg * sizeof *views;
        vseg = (size_t *)(void *)p;
        p += 2 * nseg * sizeof *vseg;
        kp = (const char **)(void *)p;
        p += nseg * sizeof *kp;
        ks = (size_t *)(void *)p;
        p += nseg * sizeof *ks;
        vals = (rocksdb_pinnableslice_t **)(void *)p;
        p += nseg * sizeof *vals;
        errs = (char **)(void *)p;
        p += nseg * sizeof *errs;
        kbuf = p;
    }

    size_t plen = key_prefix((uint8_t *)kbuf, scene, scene_len, user, user_len);
    for (size_t i = 0; i < nseg; i++) {
        char *k = kbuf + i * klen;
        if (i) memcpy(k, kbuf, plen);
        put_be32((uint8_t *)k + plen, first + (uint32_t)i);
        kp[i] = k;
        ks[i] = klen;
    }
    in_probe = true; /* merges run in this thread, inside the MultiGet */
    rocksdb_batched_multi_get_cf(h->db, h->ropts, h->cf, nseg, kp, ks, vals, errs, true);
    in_probe = false;

    int rc = 0;
    size_t nv = 0;
    for (size_t i = 0; i < nseg; i++) {
        if (errs[i]) {
            if (rc == 0) dd_set_err(err, errlen, "read: %s", errs[i]);
            rc = DD_ERR_IO;
            rocksdb_free(errs[i]);
        }
        if (!vals[i] || rc != 0) continue;
        size_t vlen;
        const char *v = rocksdb_pinnableslice_value(vals[i], &vlen);
        struct dd_bloom_view pair[2];
        int k;
        const char *a;
        size_t alen;
        if (parse_value(v, vlen, pair, &k, &a, &alen) != 0) {
            note_corrupt(h, "value", kp[i], ks[i]);
            continue;
        }
        /* Empty filters are left out; the other one of a split still counts. */
        for (int j = 0; j < k; j++) {
            if (pair[j].count == 0) continue;
            views[nv] = pair[j];
            vseg[nv++] = i;
        }
    }
    if (rc == 0 && nv > 0) {
        struct probe_views pv = {views, vseg, nv, kp, ks};
        rc = fn(h, &pv, ctx, err, errlen);
    }
    for (size_t i = 0; i < nseg; i++) rocksdb_pinnableslice_destroy(vals[i]);
    free(heap);
    return rc;
}

struct probe_sorted_ctx {
    const uint64_t *sorted;
    size_t n;
    uint8_t *hit;
};

/* Each view merged with the sorted candidates (dd_bloom_probe_sorted). */
static int probe_sorted(dd_history *h, const struct probe_views *pv, void *ctx, char *err,
                        size_t errlen)
{
    (void)err;
    (void)errlen;
    const struct probe_sorted_ctx *c = ctx;
    for (size_t j = 0; j < pv->n; j++)
        if (dd_bloom_probe_sorted(&pv->v[j], c->sorted, c->n, c->hit) != 0)
            note_corrupt(h, "value", pv->kp[pv->seg[j]], pv->ks[pv->seg[j]]);
    return 0;
}

int dd_history_probe(dd_history *h, const char *scene, size_t scene_len, const char *user,
                     size_t user_len, uint32_t lookback_days, const uint64_t *sorted,
                     size_t n, uint8_t *hit, char *err, size_t errlen)
{
    if (scene_len > 255 || user_len > 65535) {
        dd_set_err(err, errlen, "scene or user id too long");
        return DD_ERR_INVALID;
    }
    if (n == 0) return 0;
    struct probe_sorted_ctx c = {sorted, n, hit};
    return probe_read(h, scene, scene_len, user, user_len, lookback_days, probe_sorted, &c, err,
                      errlen);
}

struct probe_any_ctx {
    const struct dd_candset *cs;
    uint8_t *hit;
    dd_arena *arena;
};

/* See dd_history_probe_any. Full-range views (open segments and closed
 * ones not yet re-encoded) holding at most 2/5 as many fingerprints as
 * there are candidates: each fingerprint looked up in the candidate set,
 * so they cost their count. The others: up to PROBE_INDEX_VIEWS of them
 * each decoded into an index and every candidate looked up in it; past
 * that, one sort of the candidates and a sorted merge per view.
 * A lookup in the set (a random slot in 12 bytes times 3.3 per
 * candidate) costs about twice one in an index (two adjacent u32 in 12
 * bytes per fingerprint), so a view pays for the index's n lookups once
 * it holds more than about 0.4 n fingerprints (build/bench/bench_probe
 * prints where the two cross): two 5,000-fingerprint
 * views against 10,000 candidates, the two ways alternated call by call
 * in one process with 4 MiB evicted before each, probed (after the
 * duplicate pass) in 124-151 us indexed and 129-157 us through the set
 * (3 runs); two of 3,500, 120-193 and 107-181 (2 runs); two of 1,500, 73
 * and 35; two of 500, 60 and 13. */
static int probe_any(dd_history *h, const struct probe_views *pv, void *ctx, char *err,
                     size_t errlen)
{
    const struct probe_any_ctx *c = ctx;
    const size_t n = c->cs->n;
    const uint64_t *hashes = c->cs->hash;
    size_t left = 0; /* views not at the full range, moved to the front */
    bool index = true;
    struct dd_bloom_view *v = pv->v;
    for (size_t j = 0; j < pv->n; j++) {
        if (v[j].range == DD_BLOOM_FULL_RANGE && (uint64_t)v[j].count * 5 <= (uint64_t)n * 2) {
            if (dd_bloom_probe_candset(&v[j], c->cs, c->hit) != 0)
                note_corrupt(h, "value", pv->kp[pv->seg[j]], pv->ks[pv->seg[j]]);
            continue;
        }
        index = index && dd_bloom_index_bytes(&v[j]) != 0;
        v[left] = v[j];
        pv->seg[left++] = pv->seg[j];
    }
    if (left == 0) return 0;
    if (index && left <= PROBE_INDEX_VIEWS) {
        for (size_t j = 0; j < left; j++) {
            void *mem = dd_arena_alloc(c->arena, dd_bloom_index_bytes(&v[j]));
            if (!mem) goto nomem;
            struct dd_bloom_index ix;
            if (dd_bloom_index_build(&v[j], mem, &ix) != 0) {
                note_corrupt(h, "value", pv->kp[pv->seg[j]], pv->ks[pv->seg[j]]);
                continue;
            }
            const struct dd_bloom_index cix = ix;
            uint8_t *hit = c->hit;
            for (size_t i = 0; i < n; i++) hit[i] |= (uint8_t)dd_bloom_index_has(cix, hashes[i]);
        }
        return 0;
    }
    /* Keys: the high half (all a fingerprint uses) and the candidate's
     * position, so hits in sorted order map back. */
    uint64_t *key = dd_arena_alloc(c->arena, n * sizeof *key);
    uint64_t *tmp = dd_arena_alloc(c->arena, n * sizeof *tmp);
    uint8_t *shit = dd_arena_calloc(c->arena, n, 1);
    if (!key || !tmp || !shit) goto nomem;
    for (size_t i = 0; i < n; i++) key[i] = (hashes[i] & UINT64_C(0xffffffff00000000)) | i;
    dd_bloom_sort_hashes(key, NULL, n, tmp, NULL);
    struct probe_views rest = {v, pv->seg, left, pv->kp, pv->ks};
    struct probe_sorted_ctx sc = {key, n, shit};
    probe_sorted(h, &rest, &sc, err, errlen);
    for (size_t a = 0; a < n; a++) c->hit[(uint32_t)key[a]] |= shit[a];
    return 0;
nomem:
    dd_set_err(err, errlen, "out of memory probing %zu candidates", n);
    return DD_ERR_NOMEM;
}

int dd_history_probe_any(dd_history *h, const char *scene, size_t scene_len, const char *user,
                         size_t user_len, uint32_t lookback_days, const struct dd_candset *cands,
                         uint8_t *hit, dd_arena *arena, char *err, size_t errlen)
{
    if (scene_len > 255 || user_len > 65535) {
        dd_set_err(err, errlen, "scene or user id too long");
        return DD_ERR_INVALID;
    }
    if (cands->n > UINT32_MAX) {
        dd_set_err(err, errlen, "%zu candidates: too many", cands->n);
        return DD_ERR_INVALID;
    }
    if (cands->n == 0) return 0;
    struct probe_any_ctx c = {cands, hit, arena};
    return probe_read(h, scene, scene_len, user, user_len, lookback_days, probe_any, &c, err,
                      errlen);
}

/* ---- forget, flush, compact ----------------------------------------------- */

int dd_history_forget(dd_history *h, const char *scene, size_t scene_len, const char *user,
                      size_t user_len, char *err, size_t errlen)
{
    if (scene_len > 255 || user_len > 65535) {
        dd_set_err(err, errlen, "scene or user id too long");
        return DD_ERR_INVALID;
    }
    size_t klen = 1 + scene_len + 2 + user_len + 5;
    uint8_t *b = malloc(2 * klen);
    if (!b) {
        dd_set_err(err, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    /* [prefix|00000000, prefix|ffffffff|00): every segment of this user and
     * nothing else, since the prefix carries the user's length. */
    uint8_t *lo = b, *hi = b + klen;
    size_t plen = key_prefix(lo, scene, scene_len, user, user_len);
    put_be32(lo + plen, 0);
    memcpy(hi, lo, plen);
    put_be32(hi + plen, UINT32_MAX);
    hi[plen + 4] = 0;

    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_writebatch_delete_range(wb, (const char *)lo, plen + 4, (const char *)hi, plen + 5);
    char *e = NULL;
    rocksdb_write(h->db, h->wopts, wb, &e);
    rocksdb_writebatch_destroy(wb);
    free(b);
    if (e) {
        dd_set_err(err, errlen, "forget: %s", e);
        rocksdb_free(e);
        return DD_ERR_IO;
    }
    return 0;
}

int dd_history_flush(dd_history *h, char *err, size_t errlen)
{
    char *e = NULL;
    rocksdb_flush(h->db, h->fopts, &e);
    if (e) {
        dd_set_err(err, errlen, "flush: %s", e);
        rocksdb_free(e);
        return DD_ERR_IO;
    }
    return 0;
}

static uint64_t background_errors(dd_history *h)
{
    uint64_t v = 0;
    if (rocksdb_property_int(h->db, "rocksdb.background-errors", &v) != 0) v = 0;
    return v;
}

int dd_history_compact(dd_history *h, char *err, size_t errlen)
{
    /* The C API's compact_range reports no status: a failed compaction
     * shows as a new background error. */
    uint64_t bg = background_errors(h);
    for (int pass = 0; pass < 2; pass++) {
        uint64_t dead = atomic_load_explicit(&h->merged_dead, memory_order_relaxed);
        rocksdb_compact_range_opt(h->db, h->copts, NULL, 0, NULL, 0);
        if (background_errors(h) != bg) {
            dd_set_err(err, errlen, "compaction failed (see the RocksDB LOG)");
            return DD_ERR_IO;
        }
        /* Operands of a dead segment fold into an empty value during the
         * pass; the compaction filter sees that value only in the next one. */
        if (atomic_load_explicit(&h->merged_dead, memory_order_relaxed) == dead) break;
    }
    return 0;
}

/* ---- stats ---------------------------------------------------------------- */

/* A ticker from RocksDB's statistics text: "NAME COUNT : N". */
static uint64_t ticker(const char *text, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = text; (p = strstr(p, name)) != NULL; p += nl) {
        if ((p == text || p[-1] == '\n') && strncmp(p + nl, " COUNT : ", 9) == 0)
            return strtoull(p + nl + 9, NULL, 10);
    }
    return 0;
}

void dd_history_get_stats(dd_history *h, struct dd_history_stats *out)
{
    memset(out, 0, sizeof *out);
    out->corrupt_values = atomic_load_explicit(&h->corrupt_values, memory_order_relaxed);
    out->segments_expired = atomic_load_explicit(&h->segments_expired, memory_order_relaxed);
    out->segments_reduced = atomic_load_explicit(&h->segments_reduced, memory_order_relaxed);
    out->merges = atomic_load_explicit(&h->merges, memory_order_relaxed);
    out->writes = atomic_load_explicit(&h->writes, memory_order_relaxed);
    out->operands_written = atomic_load_explicit(&h->operands_written, memory_order_relaxed);
    uint64_t v;
    if (rocksdb_property_int(h->db, "rocksdb.live-sst-files-size", &v) == 0)
        out->live_sst_bytes = v;
    char *s = rocksdb_options_statistics_get_string(h->opts);
    if (s) {
        /* What the store wrote to disk: WAL, flushes and compactions. */
        out->wal_bytes = ticker(s, "rocksdb.wal.bytes");
        out->flush_bytes = ticker(s, "rocksdb.flush.write.bytes");
        out->compaction_bytes = ticker(s, "rocksdb.compact.write.bytes");
        out->bytes_written = out->wal_bytes + out->flush_bytes + out->compaction_bytes;
        out->block_cache_hits = ticker(s, "rocksdb.block.cache.hit");
        out->block_cache_misses = ticker(s, "rocksdb.block.cache.miss");
        rocksdb_free(s);
    }
}

/* ---- metrics ---------------------------------------------------------- */

/* Included here rather than at the top: this collector is the only part of
 * the store that knows the Prometheus writer. */
#include "metrics.h"

#include <math.h>

void dd_history_collect(struct dd_prom *p, void *h)
{
    struct dd_history_stats s;
    dd_history_get_stats(h, &s);
    dd_prom_counter(p, "dedupd_history_bytes_written_total",
            "Bytes RocksDB wrote (WAL, flushes and compactions)", s.bytes_written);
    dd_prom_counter(p, "dedupd_history_wal_bytes_total", "Bytes written to the RocksDB WAL",
            s.wal_bytes);
    dd_prom_gauge(p, "dedupd_history_live_sst_bytes", "Bytes of live SST files",
                  s.live_sst_bytes);
    dd_prom_counter(p, "dedupd_history_block_cache_hits_total", "Block cache hits",
            s.block_cache_hits);
    dd_prom_counter(p, "dedupd_history_block_cache_misses_total", "Block cache misses",
            s.block_cache_misses);
    uint64_t lookups = s.block_cache_hits + s.block_cache_misses;
    dd_prom_family(p, "dedupd_history_block_cache_hit_ratio",
                   "Block cache hits / lookups since start (NaN before any lookup)",
                   DD_PROM_GAUGE);
    dd_prom_sample_f64(p, "dedupd_history_block_cache_hit_ratio", NULL, 0,
                       lookups ? (double)s.block_cache_hits / (double)lookups : NAN);
    dd_prom_counter(p, "dedupd_history_corrupt_values_total",
            "Stored values that failed their version or checksum (read as empty)",
            s.corrupt_values);
    dd_prom_counter(p, "dedupd_history_segments_expired_total",
            "Segments dropped by compaction as past the retention", s.segments_expired);
    dd_prom_counter(p, "dedupd_history_segments_reduced_total",
            "Closed segments re-encoded at their final size", s.segments_reduced);
    dd_prom_counter(p, "dedupd_history_merges_total", "Full merges run by the merge operator",
            s.merges);
    dd_prom_counter(p, "dedupd_history_writes_total", "Write batches written", s.writes);
    dd_prom_counter(p, "dedupd_history_operands_written_total", "Merge operands written",
            s.operands_written);
}
