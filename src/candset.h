/* SPDX-License-Identifier: Apache-2.0
 *
 * candset.h - one call's candidates as a hash set: the table Filter finds
 * in-request duplicates with (filter.c), and the one a full-range bloom
 * filter is probed against, fingerprint by fingerprint
 * (dd_bloom_probe_candset, bloom.h). Pure code: no I/O.
 *
 * DESIGN
 *
 * Open addressing with linear probing over the candidates' 64-bit hashes
 * (dd_hash). A slot holds a candidate position and the high half of its
 * hash (the whole hash stays in the caller's array, HASH[pos]), 12 bytes:
 * a probe by fingerprint reads slots only, and the duplicate pass loads a
 * hash only when the high halves are equal. A slot is in use
 * when it carries this call's generation number: starting a call is one
 * increment, never a clear (but once per 2^32 calls). The table has at
 * least two slots per candidate (a power of two, 1,024 at least) and
 * grows to the largest call seen: 768 KiB for 20,000 candidates (the
 * default rpc.max_candidates), one table per worker.
 *
 * The home slot depends on the hash's high 32 bits only, which is all a
 * full-range filter's fingerprint is (bloom.h): a fingerprint f finds the
 * candidates whose hash has f as its high half at home(f << 32). Those
 * bits are multiplied by a random odd salt first, so that ids crafted to
 * share hash bits (the hash's seed is public) do not pile into one run.
 *
 * Members are what the caller inserted: Filter inserts first occurrences
 * only (a repeat of an id is DUPLICATE, not looked up), dd_candset_add
 * every distinct hash. A struct dd_candset belongs to one thread.
 */
#ifndef DD_CANDSET_H
#define DD_CANDSET_H

#include <stddef.h>
#include <stdint.h>

struct dd_candset_slot {
    uint32_t gen; /* the call that filled it (0: never) */
    uint32_t pos; /* candidate position */
    uint32_t hi;  /* its hash's high half */
};

struct dd_candset {
    struct dd_candset_slot *slot;
    const uint64_t *hash; /* this call's hashes by position (the caller's) */
    size_t n;             /* this call's candidates */
    uint64_t salt;        /* odd, random */
    uint32_t mask;        /* this call's slots - 1 */
    uint32_t cap_mask;    /* allocated slots - 1 */
    uint32_t gen;         /* this call's generation */
};

/* An empty set with room for N candidates (more are allocated as calls
 * need them) and a random salt. Returns 0 or DD_ERR_NOMEM. */
int dd_candset_init(struct dd_candset *s, size_t n);
void dd_candset_free(struct dd_candset *s); /* leaves it zeroed; zeroed is a no-op */

/* Start a call over the N hashes in HASH (borrowed until the next begin):
 * the set is empty, with at least 2N slots (1,024 at least). Returns 0, or
 * DD_ERR_NOMEM (growing failed; the set is then empty for no call: begin
 * again). */
int dd_candset_begin(struct dd_candset *s, const uint64_t *hash, size_t n);

/* The home slot of hash H: a function of H's high half only. */
static inline uint32_t dd_candset_home(const struct dd_candset *s, uint64_t h)
{
    return (uint32_t)(((h >> 32) * s->salt) >> 32) & s->mask;
}

/* Insert position POS (< n) unless a member has the same hash. Returns 1
 * if inserted, 0 if its hash was a member already. Cannot fail. (Filter
 * runs its own loop, which also compares the ids' bytes.) */
int dd_candset_add(struct dd_candset *s, uint32_t pos);

#endif
