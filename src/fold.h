/* SPDX-License-Identifier: Apache-2.0
 *
 * fold.h - how a history segment's value is stored and folded: the value
 * and operand codec, the RocksDB merge operator and the compaction filter.
 * Pure code over byte strings and a clock: no database is opened, and the
 * callbacks can be called directly (tests do).
 *
 * DESIGN
 *
 * An operand is one write's items for one (scene, user, segment): a bloom.h
 * fingerprint list of up to DD_BLOOM_FPS_MAX items, else a full-range
 * filter (raw-hash operands, bloom.h's operand form, are still read). Each
 * carries as much as the hashes themselves, since a fingerprint at any
 * range is a function of h >> 32 alone, so any operand folds exactly into
 * any filter. A value is one filter, or a split value of two (see
 * dd_fold_parse_value): a base and a small delta, so that a fold re-encodes
 * only the delta. Once a segment has closed (segment.h) the merge operator
 * and the compaction filter re-encode it at its final range, the smallest
 * that keeps a user's union of segments under fp_rate.
 *
 * Failure: a RocksDB merge failure is a background error that stops
 * compactions, so merges fail only on out of memory.
 *
 * Damaged values: a value or operand that fails its version, checksum or
 * bitstream is counted and logged (rate limited), and never folded away:
 * the full merge writes the damaged form (dd_fold_parse_damaged), which
 * carries the damaged bytes untouched beside the intact operands folded
 * into a valid value, so that every later read still sees the damage
 * (history.h: the read fails for that user) and nothing the user played is
 * silently forgotten. The partial merge refuses a damaged operand (RocksDB
 * keeps the operands; the full merge then keeps it). The compaction filter
 * keeps any value it cannot fold, damaged or of a newer format, and drops
 * damage only with its segment's expiry (or a user another node owns,
 * resharding). Repair is the user's deletion (ForgetUser) or another copy
 * of the store.
 *
 * Threads: one dd_fold is shared by every RocksDB thread (counters are
 * atomic); a compaction filter instance belongs to one compaction.
 */
#ifndef DD_FOLD_H
#define DD_FOLD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rocksdb/c.h>

#include "bloom.h"
#include "buf.h"
#include "segment.h"

/* The fold's state: geometry, clock and counters. Owned by the store,
 * which must outlive every RocksDB object made from it. */
/* Which users this node keeps (resharding: cluster.h dd_cluster_owns).
 * OWNS is called from compaction threads, for user ids of 1..DD_USER_MAX
 * bytes, and must be thread-safe and cheap; true keeps the user. */
struct dd_fold_owner {
    bool (*owns)(void *ud, const char *user, size_t len);
    void *ud;
};

struct dd_fold {
    struct dd_segments seg;
    double segment_fp; /* fp_rate / S: a closed segment's target */
    double day_fp;     /* fp_rate / (retention_days + 1): a day segment's */
    bool coarse;       /* history.exact_days = false: new items are dated their segment's newest
                  * day (a filter then stores no day bits); items already stored keep theirs */
    int64_t (*now_ms)(void *ud); /* NULL: dd_now_ms() */
    void *clock_ud;

    _Atomic uint64_t corrupt_values;   /* damaged values and operands met */
    _Atomic uint64_t damaged_merges;   /* full merges that kept damaged bytes (damaged form) */
    _Atomic uint64_t segments_expired; /* dropped by the compaction filter */
    _Atomic uint64_t segments_reduced; /* re-encoded at their final range */
    _Atomic uint64_t merges;           /* full merges run */
    _Atomic uint64_t merged_dead;      /* full merges that emptied a dead segment */
    _Atomic(const struct dd_fold_owner *) owner; /* NULL: every user is kept */
    _Atomic uint64_t segments_foreign; /* another node's users' segments dropped or emptied */
};

/* Initialise F for geometry G (both fields > 0) and FP_RATE in (0, 1),
 * with the clock NOW_MS(UD) (NULL: wall clock). Counters start at 0.
 * Cannot fail. */
void dd_fold_init(struct dd_fold *f, const struct dd_segments *g, double fp_rate,
                  int64_t (*now_ms)(void *ud), void *ud);

/* A stored value is empty (a dead segment's fold: reads as an empty set),
 * one bloom.h filter, or a split value of two filters
 *     u8 0xd5 | u8 0 | u16 0 | u32 LE len(A) | A | B
 * with B at the full range. While the segment is open, A is full range and
 * B a small delta, so a read-time fold copies A and re-encodes only B; B
 * is folded into A once it holds more than max(256, count(A) / 8) items.
 * Once the segment is closed (dd_segment_closed, segment.h), A u B is
 * re-encoded at range count * S / fp_rate (fp_rate / S per segment keeps
 * the union of a user's S live segments under fp_rate; a day segment's S
 * is retention_days + 1, segment.h); late plays onto a
 * re-encoded A go to a full-range B, since A cannot take more items
 * without raising its false-positive rate.
 *
 * Parse such a value into up to two filters. Parsing is strict, since the
 * split header has no checksum of its own: a header damaged in any bit
 * fails. Returns 0 with *NV = 0 (empty value), 1 or 2 views in V, A's
 * bytes in *A and *ALEN; or DD_ERR_CORRUPT. V points into VAL (borrowed). */
int dd_fold_parse_value(const char *val, size_t len, struct dd_bloom_view v[2], int *nv,
                        const char **a, size_t *alen);

/* The damaged form of a value: damage kept beside what is intact,
 *     u8 DD_FOLD_DAMAGED_TAG | u8 0 | u16 0 | u32 LE len(D) | D | V
 * where D is one or more pieces, each u32 LE len | the damaged bytes as
 * they were stored (a value or an operand, which may itself be an older
 * damaged form), and V a value as above (empty, one filter or a split
 * value) holding every intact item. The tag is no filter version, no
 * operand tag and not the split tag, so dd_fold_parse_value refuses the
 * form: whatever reads a value sees damage. Parsing is as strict as for
 * the split value: the pieces must tile D and V must parse.
 *
 * Returns 0 with D's bytes (the pieces) in *D, *DLEN and V's in *V, *VLEN
 * (pointing into VAL, borrowed), or DD_ERR_CORRUPT when VAL is not a well
 * formed damaged form. */
#define DD_FOLD_DAMAGED_TAG 0xdb
int dd_fold_parse_damaged(const char *val, size_t len, const char **d, size_t *dlen, const char **v,
                          size_t *vlen);

/* Whether stored value VAL is intact, checked to the last bit (every
 * filter's bitstream decoded: a scan, not a read path): 0, DD_ERR_CORRUPT
 * (damaged, including the damaged form) or DD_ERR_NOMEM. */
int dd_fold_check_value(const char *val, size_t len);

/* Append the N dated items (bloom.h, dd_bloom_dated: each hash's high
 * half with its play's UTC day; any order, repeats allowed, an item keeps
 * its newest day) to OUT as one operand. Returns 0 or DD_ERR_NOMEM. */
int dd_fold_encode_operand(struct dd_buf *out, const uint64_t *dated, size_t n);

/* Count a damaged WHAT ("value", "operand") of KEY and log it with the
 * key, at most one line per 10 s. Cannot fail. */
void dd_fold_note_corrupt(struct dd_fold *f, const char *what, const char *key, size_t klen);

/* Whether stored key KEY is a segment of a user F's owner (if any) says
 * is not this node's. Cannot fail. */
bool dd_fold_foreign(struct dd_fold *f, const char *key, size_t klen);

/* Mark the merges this thread runs from now on as serving a read (ON) or
 * not: a read's merge result is thrown away, so it never re-encodes a
 * closed segment (a decode and an encode that buy nothing there). */
void dd_fold_reading(bool on);

/* The merge operator's callbacks (ST is a struct dd_fold), RocksDB's C
 * signatures. Each returns a malloc'd value for dd_fold_free_value and sets
 * *SUCCESS; the full merge fails only on out of memory (damage in its
 * inputs gives the damaged form), the partial merge on any problem, a
 * damaged operand included (RocksDB then keeps the operands). A full merge of a dead
 * segment, or outside a read of a user F's owner says is not this node's,
 * yields an empty value (the compaction filter drops it at the next
 * compaction: RocksDB filters a merge's result only then). */
char *dd_fold_full_merge(void *st, const char *key, size_t klen, const char *existing,
                         size_t existing_len, const char *const *ops, const size_t *lens, int nops,
                         unsigned char *success, size_t *new_len);
char *dd_fold_partial_merge(void *st, const char *key, size_t klen, const char *const *ops,
                            const size_t *lens, int nops, unsigned char *success, size_t *new_len);
void dd_fold_free_value(void *st, const char *value, size_t len);

/* A compaction filter instance over F (one per compaction: it owns the
 * buffer *NEW_VALUE points into). dd_fold_cfilter returns 1 to drop a dead
 * segment or a segment of a user F's owner says is not this node's;
 * re-encodes a closed full-range one (*CHANGED = 1, *NEW_VALUE
 * valid until the next call); keeps anything else as it is, foreign keys,
 * damaged values and the damaged form included. dd_fold_cfilter_new returns NULL on out of
 * memory; dd_fold_cfilter_destroy frees the instance. */
void *dd_fold_cfilter_new(struct dd_fold *f);
unsigned char dd_fold_cfilter(void *st, int level, const char *key, size_t klen, const char *val,
                              size_t vlen, char **new_value, size_t *new_len,
                              unsigned char *changed);
void dd_fold_cfilter_destroy(void *st);

/* RocksDB objects over F, for rocksdb_options_set_merge_operator and
 * rocksdb_options_set_compaction_filter_factory (the options then own
 * them). F is borrowed: it must outlive the database. */
rocksdb_mergeoperator_t *dd_fold_merge_operator(struct dd_fold *f);
rocksdb_compactionfilterfactory_t *dd_fold_filter_factory(struct dd_fold *f);

#endif
