/* SPDX-License-Identifier: Apache-2.0
 *
 * fold_check.h - the fold.h check test_fold.c and tests/fuzz/fuzz_fold.c
 * share: whether a stored value still holds every item. Header only.
 */
#ifndef DD_TEST_FOLD_CHECK_H
#define DD_TEST_FOLD_CHECK_H

#include <stdlib.h>
#include <string.h>

#include "bloom.h"
#include "fold.h"

/* Whether every one of the N hashes is in the value (either filter); 0 if
 * the value does not parse (the damaged form does not: see
 * value_intact_has_all). */
static inline int value_has_all(const char *v, size_t len, const uint64_t *h, size_t n)
{
    struct dd_bloom_view fv[2];
    int nv;
    const char *a;
    size_t alen;
    if (dd_fold_parse_value(v, len, fv, &nv, &a, &alen) != 0) return 0;
    for (size_t i = 0; i < n; i++) {
        int found = 0;
        for (int j = 0; j < nv; j++) found |= dd_bloom_contains(&fv[j], h[i]);
        if (!found) return 0;
    }
    return 1;
}

/* The newest day at which dated item H is in value V (undated filters'
 * items as of day UNDATED), or -1 when it is not; -2 when V does not parse
 * or a filter fails to decode. */
static inline int64_t value_day_of(const char *v, size_t len, uint64_t h, uint32_t undated)
{
    struct dd_bloom_view fv[2];
    int nv;
    const char *a;
    size_t alen;
    if (dd_fold_parse_value(v, len, fv, &nv, &a, &alen) != 0) return -2;
    int64_t best = -1;
    for (int j = 0; j < nv; j++) {
        uint64_t *k = malloc((fv[j].count ? fv[j].count : 1) * sizeof *k);
        if (!k || dd_bloom_decode_dated(&fv[j], undated, k) != 0) {
            free(k);
            return -2;
        }
        uint64_t f = dd_bloom_fingerprint(h, fv[j].range);
        for (uint32_t i = 0; i < fv[j].count; i++)
            if (k[i] >> 32 == f && (int64_t)(uint32_t)k[i] > best) best = (uint32_t)k[i];
        free(k);
    }
    return best;
}

/* The same for the intact part of a value that may be in the damaged form
 * (fold.h, dd_fold_parse_damaged). */
static inline int value_intact_has_all(const char *v, size_t len, const uint64_t *h, size_t n)
{
    const char *d, *iv;
    size_t dl, ivl;
    if (dd_fold_parse_damaged(v, len, &d, &dl, &iv, &ivl) == 0)
        return value_has_all(iv, ivl, h, n);
    return value_has_all(v, len, h, n);
}

/* Whether V is in the damaged form and one of its pieces is BYTES
 * (BLEN of them), unchanged. */
static inline int damaged_holds(const char *v, size_t len, const void *bytes, size_t blen)
{
    const char *d, *iv;
    size_t dl, ivl;
    if (dd_fold_parse_damaged(v, len, &d, &dl, &iv, &ivl) != 0) return 0;
    for (size_t off = 0; off + 4 <= dl;) {
        const uint8_t *q = (const uint8_t *)d + off;
        size_t pl = (size_t)q[0] | (size_t)q[1] << 8 | (size_t)q[2] << 16 | (size_t)q[3] << 24;
        if (pl == blen && (blen == 0 || memcmp(q + 4, bytes, blen) == 0)) return 1;
        off += 4 + pl;
    }
    return 0;
}

#endif
