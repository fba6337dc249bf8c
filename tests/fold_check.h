/* SPDX-License-Identifier: Apache-2.0
 *
 * fold_check.h - the fold.h check test_fold.c and tests/fuzz/fuzz_fold.c
 * share: whether a stored value still holds every item. Header only.
 */
#ifndef DD_TEST_FOLD_CHECK_H
#define DD_TEST_FOLD_CHECK_H

#include "bloom.h"
#include "fold.h"

/* Whether every one of the N hashes is in the value (either filter); 0 if
 * the value does not parse. */
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

#endif
