/* SPDX-License-Identifier: Apache-2.0
 *
 * bloom.h - the per-segment set filter: a Golomb-compressed single-hash
 * bloom filter (Putze, Sanders, Singler, "Cache-, Hash- and Space-Efficient
 * Bloom Filters", 2007; the same structure as BIP158's Golomb-coded sets).
 * Pure code: no I/O, no users, no time.
 *
 * DESIGN
 *
 * Each item is its 64-bit hash h (dd_hash). A filter of "range" M holds the
 * sorted, distinct fingerprints f(h) = ((h >> 32) * M) >> 32, each in
 * [0, M), stored as Golomb-Rice coded gaps. A never-added item tests
 * positive with probability count / M, so sizing for (n, fp) is M = n / fp.
 *
 * Why not a classic or cache-blocked bloom: it needs 1.44*log2(1/fp) bits
 * per item, and its size is fixed when it is created, but a segment grows
 * by merge operands for weeks. This filter costs about log2(1/fp) + 1.5
 * bits per item, and one at the full range (M = 2^32, "exact form": fp is
 * count/2^32) can be re-encoded at any smaller range exactly, because
 * f_M'(h) = (f_2^32(h) * M') >> 32. So history keeps a segment at the full
 * range while it is open and re-encodes it at the optimal range for its
 * final count once it closes (fold.h).
 *
 * f is monotonic in h for every M, so a list of candidates sorted by h is
 * sorted by fingerprint for every filter: one pass over the gaps and the
 * candidates answers a whole batch (dd_bloom_probe_sorted), with no
 * allocation and no per-item decode into memory.
 *
 * Three serialized forms, each versioned or tagged and checksummed: the
 * filter (below, at DD_BLOOM_VERSION), the raw-hash operand
 * (dd_bloom_operand_encode) and the fingerprint list (DD_BLOOM_FPS_TAG).
 * The hash (dd_hash: XXH3-64, DD_HASH_SEED) is part of every one of them.
 */
#ifndef DD_BLOOM_H
#define DD_BLOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h" /* encoders append to a struct dd_buf */

/* A filter's serialized form (little-endian):
 *   u8  version  (DD_BLOOM_VERSION)
 *   u8  kind     (DD_BLOOM_KIND_GCS)
 *   u8  rice_k   (low bits per gap, 0..31)
 *   u8  flags    (0)
 *   u32 count    (distinct fingerprints)
 *   u32 range-1  (M - 1, so M = 2^32 fits)
 *   ... bitstream: per gap, (gap >> k) zero bits, a one bit, k low bits
 *   u32 checksum (low 32 bits of XXH3-64 over all preceding bytes)
 * The operand and fingerprint-list forms below use the same checksum. */
#define DD_BLOOM_VERSION 1
#define DD_BLOOM_KIND_GCS 1
#define DD_BLOOM_KIND_HASHES 2
#define DD_BLOOM_KIND_GCS_DAYS 3
#define DD_BLOOM_FULL_RANGE (UINT64_C(1) << 32)

/* A dated filter (kind DD_BLOOM_KIND_GCS_DAYS): a filter whose every
 * fingerprint carries the UTC day (days since 1970) of its newest play,
 * so that a read can ask "played since day D" exactly:
 *   u8  version  (DD_BLOOM_VERSION)
 *   u8  kind     (DD_BLOOM_KIND_GCS_DAYS)
 *   u8  rice_k
 *   u8  day_bits (W, 0..DD_BLOOM_DAY_BITS_MAX)
 *   u32 count, u32 range-1 (as above)
 *   u32 day0     (the oldest day)
 *   ... the gap bitstream, as above
 *   ... days: count x W bits, the I-th fingerprint's day - day0, least
 *       significant bit first, ceil(count * W / 8) bytes
 *   u32 checksum (over all preceding bytes)
 * The days sit apart from the gaps, so a read that needs no day (the whole
 * filter is inside its window) walks the gaps exactly as in an undated
 * filter, and one that does reads the day of a found fingerprint by its
 * position. W adapts to the filter's span of days: 0 bits when all its
 * plays are of one day, 5 for a 30-day segment's.
 *
 * A dated item is a hash whose low half is replaced by its day
 * (dd_bloom_dated): fingerprints use the high half only, so nothing of the
 * item is lost. */
#define DD_BLOOM_DAY_BITS_MAX 16
#define DD_BLOOM_DAY_SPAN_MAX ((UINT32_C(1) << DD_BLOOM_DAY_BITS_MAX) - 1)

static inline uint64_t dd_bloom_dated(uint64_t h, uint32_t day)
{
    return (h & UINT64_C(0xffffffff00000000)) | day;
}

static inline uint32_t dd_bloom_day_of(uint64_t dated)
{
    return (uint32_t)dated;
}

/* A parsed, validated filter. Points into the caller's bytes (borrowed):
 * valid while they are. */
struct dd_bloom_view {
    uint64_t range; /* M, 1 .. 2^32 */
    uint32_t count; /* distinct fingerprints */
    uint8_t rice_k;
    const uint8_t *bits; /* the gap bitstream */
    size_t nbits_bytes;
    const uint8_t *days; /* dated filters: the packed days; NULL: undated */
    uint32_t day0;       /* dated: the oldest day */
    uint8_t day_bits;    /* dated: W */
};

/* The day of V's I-th fingerprint (I < count). V must be dated. Cannot
 * fail. */
uint32_t dd_bloom_day_at(const struct dd_bloom_view *v, uint32_t i);

/* An upper bound of dated V's newest day (day0 + 2^W - 1). */
static inline uint32_t dd_bloom_day_max(const struct dd_bloom_view *v)
{
    return v->day0 + ((UINT32_C(1) << v->day_bits) - 1);
}

/* The range that gives false-positive rate FP for N items: ceil(N / FP),
 * clamped to [1, 2^32]. FP in (0, 1]. This function cannot fail. */
uint64_t dd_bloom_range_for(uint64_t n, double fp);

/* The fingerprint of hash H in a filter of range M. Cannot fail. */
static inline uint32_t dd_bloom_fingerprint(uint64_t h, uint64_t range)
{
    return (uint32_t)(((h >> 32) * range) >> 32);
}

/* Encode a filter of RANGE holding the N hashes (any order, duplicates
 * allowed) and append it to OUT. SCRATCH, if not NULL, is a caller buffer of
 * at least N uint32 to sort in (else one is allocated). Returns 0,
 * DD_ERR_INVALID (range 0 or > 2^32) or DD_ERR_NOMEM; on error OUT's length
 * is unchanged. */
int dd_bloom_build(struct dd_buf *out, const uint64_t *hashes, size_t n, uint64_t range,
                   uint32_t *scratch);

/* Encode a dated filter of RANGE holding the N dated items (any order,
 * repeats allowed: a fingerprint keeps its newest day) and append it to
 * OUT. Days older than the newest day less DD_BLOOM_DAY_SPAN_MAX are
 * stored as that day (newer: a read never misses them). Returns 0,
 * DD_ERR_INVALID (range) or DD_ERR_NOMEM; OUT's length unchanged on
 * error. */
int dd_bloom_build_dated(struct dd_buf *out, const uint64_t *dated, size_t n, uint64_t range);

/* Decode V's fingerprints, ascending, into OUT (room for v->count) as
 * dated items: fingerprint << 32 | day, the day UNDATED for an undated
 * filter. Returns 0 or DD_ERR_CORRUPT. */
int dd_bloom_decode_dated(const struct dd_bloom_view *v, uint32_t undated, uint64_t *out);

/* Append to OUT, as a dated filter, the union of BASE (NULL = empty; an
 * undated base's items are dated UNDATED; its range is kept, or
 * RANGE_IF_NEW when BASE is NULL) and the N dated items: a fingerprint in
 * both keeps the newer day. Returns 0, DD_ERR_INVALID, DD_ERR_CORRUPT
 * (BASE's bitstream) or DD_ERR_NOMEM; OUT's length unchanged on error. */
int dd_bloom_union_dated(struct dd_buf *out, const struct dd_bloom_view *base, uint32_t undated,
                         uint64_t range_if_new, const uint64_t *dated, size_t n);

/* Append to OUT full-range filter V re-encoded, dated, at NEW_RANGE
 * (fingerprints that meet keep the newest day; an undated V's days are
 * UNDATED). Exact only from the full range: V->range must be 2^32 and
 * NEW_RANGE <= 2^32, else DD_ERR_INVALID. Returns 0, DD_ERR_INVALID,
 * DD_ERR_CORRUPT or DD_ERR_NOMEM; OUT's length unchanged on error. */
int dd_bloom_reduce_dated(struct dd_buf *out, const struct dd_bloom_view *v, uint32_t undated,
                          uint64_t new_range);

/* Batch probe of dated V by day: as dd_bloom_probe_sorted, but a
 * fingerprint found counts only if its day is SINCE or later. Allocates
 * the decoded filter (DD_ERR_NOMEM). Returns 0, DD_ERR_CORRUPT,
 * DD_ERR_NOMEM or DD_ERR_INVALID (V undated). */
int dd_bloom_probe_sorted_since(const struct dd_bloom_view *v, const uint64_t *sorted, size_t n,
                                uint8_t *hit, uint32_t since);

/* Validate version, kind and checksum of a serialized filter and fill V.
 * Returns 0 or DD_ERR_CORRUPT (V untouched). */
int dd_bloom_parse(const void *data, size_t len, struct dd_bloom_view *v);

/* One item. Decodes from the start: O(count); for batches use
 * dd_bloom_probe_sorted. */
bool dd_bloom_contains(const struct dd_bloom_view *v, uint64_t h);

/* Batch probe. SORTED holds N hashes in ascending order of h >> 32 (the
 * low half does not matter: fingerprints use the high half only); for each i with a match, sets HIT[i] = 1 (leaves the others as
 * they are, so several filters can be OR'ed into one HIT array). Allocates
 * nothing. Returns 0, or DD_ERR_CORRUPT if the bitstream ends early or
 * decodes a fingerprint at or past the range (the hits set so far stand). */
int dd_bloom_probe_sorted(const struct dd_bloom_view *v, const uint64_t *sorted, size_t n,
                          uint8_t *hit);

/* A filter decoded for lookups in any order (dd_bloom_index_has): its
 * fingerprints, ascending, and a bucket index over them. Bucket b holds the
 * fingerprints f with (f * mul) >> 32 == b, where mul = nbuckets * 2^32 /
 * range (rounded down; monotonic in f, so each bucket is a run of FP), and
 * there are about two buckets per fingerprint, so a lookup reads two
 * adjacent START entries and the one or two fingerprints they point at.
 * Lives in caller memory of dd_bloom_index_bytes(); valid while it is. */
struct dd_bloom_index {
    uint64_t range;
    uint64_t mul;
    uint32_t count;
    uint32_t nbuckets;
    const uint32_t *fp;    /* count fingerprints + 2 padding entries */
    const uint32_t *start; /* nbuckets + 1: bucket b is fp[start[b] .. start[b+1]) */
};

/* The position in the indexed filter of hash H's fingerprint, or
 * UINT32_MAX when it holds none. Cannot fail. */
static inline uint32_t dd_bloom_index_find(struct dd_bloom_index ix, uint64_t h)
{
    uint32_t f = dd_bloom_fingerprint(h, ix.range);
    uint32_t b = (uint32_t)(((uint64_t)f * ix.mul) >> 32);
    for (uint32_t j = ix.start[b]; j < ix.start[b + 1]; j++)
        if (ix.fp[j] == f) return j;
    return UINT32_MAX;
}

/* Largest count an index is built for (larger filters: probe sorted). */
#define DD_BLOOM_INDEX_MAX_COUNT (UINT32_C(1) << 24)

/* Bytes of caller memory dd_bloom_index_build needs for V (4-byte
 * aligned), or 0 if V->count exceeds DD_BLOOM_INDEX_MAX_COUNT. Cannot fail. */
size_t dd_bloom_index_bytes(const struct dd_bloom_view *v);

/* Decode V into MEM (dd_bloom_index_bytes(V) bytes, 4-byte aligned) and
 * fill IX. Returns 0, DD_ERR_INVALID (count too large) or DD_ERR_CORRUPT
 * (the bitstream ends early, repeats or passes the range): IX is then
 * unusable. Allocates nothing. */
int dd_bloom_index_build(const struct dd_bloom_view *v, void *mem, struct dd_bloom_index *ix);

/* Whether hash H's fingerprint is in the indexed filter. Cannot fail.
 * Takes IX by value: a copy the caller keeps in registers over a loop
 * (through a pointer, every store to a hit array would reload it). */
static inline bool dd_bloom_index_has(struct dd_bloom_index ix, uint64_t h)
{
    uint32_t f = dd_bloom_fingerprint(h, ix.range);
    uint32_t b = (uint32_t)(((uint64_t)f * ix.mul) >> 32);
    uint32_t s = ix.start[b], d = ix.start[b + 1] - s;
    /* Buckets hold half a fingerprint on average and rarely more than two:
     * two compares combined without branches (a branch on an occupancy
     * this random mispredicts, and a misprediction stops the next
     * candidates' loads from overlapping), a loop for the rest. */
    uint32_t hit = ((uint32_t)(ix.fp[s] == f) & (uint32_t)(d >= 1)) |
                   ((uint32_t)(ix.fp[s + 1] == f) & (uint32_t)(d >= 2));
    if (__builtin_expect(d > 2, 0))
        for (uint32_t j = s + 2; j < s + d; j++) hit |= ix.fp[j] == f;
    return hit != 0;
}

/* Full-range filters only (V->range 2^32, so a fingerprint is a hash's
 * high half): decode V once and, for each fingerprint, look the members
 * of CS (candset.h) with that high half up in CS's table, setting HIT[pos]
 * = 1 for each (leaving the others as they are). Its cost follows V's
 * count, not CS's size: one decode step and one table read per
 * fingerprint, and a light user's filter costs a few lookups however many
 * candidates there are. Allocates nothing. Returns 0, DD_ERR_INVALID (V is
 * not full-range) or DD_ERR_CORRUPT (as dd_bloom_index_build; the hits set
 * before the damage stand). */
struct dd_candset;
int dd_bloom_probe_candset(const struct dd_bloom_view *v, const struct dd_candset *cs,
                           uint8_t *hit);

/* Decode the fingerprints, ascending, into OUT (room for v->count).
 * Returns 0 or DD_ERR_CORRUPT. */
int dd_bloom_decode(const struct dd_bloom_view *v, uint32_t *out);

/* An operand (a batch of raw hashes: earlier versions wrote these as merge
 * operands, and fold.c still reads them):
 *   u8 version, u8 kind (DD_BLOOM_KIND_HASHES), u16 0, u32 count,
 *   count x u64 hash, u32 checksum (as for a filter)
 * Operands: append the N hashes as one operand to OUT (0 or DD_ERR_NOMEM);
 * parse one back (0 or DD_ERR_CORRUPT), pointing *HASHES into DATA (the u64
 * are little-endian and may be unaligned: read them with dd_bloom_operand_at). */
int dd_bloom_operand_encode(struct dd_buf *out, const uint64_t *hashes, size_t n);
int dd_bloom_operand_parse(const void *data, size_t len, const uint8_t **hashes, uint32_t *n);
uint64_t dd_bloom_operand_at(const uint8_t *hashes, uint32_t i);

/* A fingerprint list, the small merge operand: most windows hold one or
 * two plays of a user, and a full-range filter of one item costs 21 bytes,
 * this 9:
 *   u8  DD_BLOOM_FPS_TAG (not a version, so no other form starts with it)
 *   n x u32 full-range fingerprint (h >> 32), strictly ascending, n <= 32
 *   u32 checksum (as for a filter)
 * n follows from the length. At the full range a fingerprint is the
 * filter's own, so a list merges into any filter exactly.
 *
 * Encode the N hashes (any order, duplicates allowed; N <=
 * DD_BLOOM_FPS_MAX) as a list and append it to OUT (0, DD_ERR_INVALID for
 * N too large, or DD_ERR_NOMEM); parse one back (0 or DD_ERR_CORRUPT: tag,
 * length, checksum or order), pointing *FPS into DATA; read the I-th
 * fingerprint (unaligned little-endian u32). */
#define DD_BLOOM_FPS_TAG 0xf5
#define DD_BLOOM_FPS_MAX 32
int dd_bloom_fps_encode(struct dd_buf *out, const uint64_t *hashes, size_t n);
int dd_bloom_fps_parse(const void *data, size_t len, const uint8_t **fps, uint32_t *n);
uint32_t dd_bloom_fps_at(const uint8_t *fps, uint32_t i);

/* A dated fingerprint list, the small merge operand of dated items:
 *   u8  DD_BLOOM_DFPS_TAG
 *   n x (u32 full-range fingerprint, u32 day), fingerprints strictly
 *       ascending, n <= DD_BLOOM_FPS_MAX
 *   u32 checksum
 * Encode the N dated items (any order; a repeated fingerprint keeps its
 * newest day): 0, DD_ERR_INVALID (N too large) or DD_ERR_NOMEM. Parse: 0
 * or DD_ERR_CORRUPT, *ITEMS pointing into DATA; the I-th as a dated item
 * (fingerprint << 32 | day). */
#define DD_BLOOM_DFPS_TAG 0xf6
int dd_bloom_dfps_encode(struct dd_buf *out, const uint64_t *dated, size_t n);
int dd_bloom_dfps_parse(const void *data, size_t len, const uint8_t **items, uint32_t *n);
uint64_t dd_bloom_dfps_at(const uint8_t *items, uint32_t i);

/* Sort N hashes in place, ascending by h >> 32, stable (a top-bits
 * bucket pass plus insertion when IDX is NULL and the hashes are uniform,
 * else LSD radix), moving IDX[i] along with H[i] when IDX is not NULL. TMP_H and TMP_IDX
 * (when IDX is given) have room for N. Allocates nothing; cannot fail.
 * Prepares dd_bloom_probe_sorted's input; IDX maps hits back to positions. */
void dd_bloom_sort_hashes(uint64_t *h, uint32_t *idx, size_t n, uint64_t *tmp_h, uint32_t *tmp_idx);

#endif
