/* SPDX-License-Identifier: Apache-2.0
 *
 * lookback.c - the lookback min_kept chooses; see lookback.h.
 */
#include "lookback.h"

uint32_t dd_lookback_choose(uint32_t span, uint32_t floor, uint32_t min_kept, size_t kept,
                            const uint32_t *by_age)
{
    if (kept >= min_kept || span <= floor) return span;
    uint64_t acc = kept;
    /* From L + 1 to L, the candidates of age L + 1 come back. */
    for (uint32_t l = span; l-- > floor;) {
        acc += by_age[l + 1];
        if (acc >= min_kept) return l;
    }
    return floor;
}
