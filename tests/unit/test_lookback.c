/* SPDX-License-Identifier: Apache-2.0
 *
 * test_lookback.c - the lookback min_kept chooses (lookback.h): the oldest
 * plays come back first, never within the floor, and the longest lookback
 * that keeps min_kept wins; checked against a brute force over random
 * age histograms.
 */
#include "lookback.h"
#include "testlib.h"

/* Kept at lookback L: KEPT and every candidate older than L. */
static uint64_t kept_at(uint32_t span, size_t kept, const uint32_t *by_age, uint32_t l)
{
    uint64_t k = kept;
    for (uint32_t a = l + 1; a <= span; a++) k += by_age[a];
    return k;
}

static void test_cases(void)
{
    uint32_t by_age[31] = {0};
    /* Enough kept already: the request's lookback. */
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 5, 5, by_age), 30);
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 0, 0, by_age), 30);
    /* Plays 30, 20 and 10 days ago, 2 each; nothing kept. */
    by_age[30] = 2;
    by_age[20] = 2;
    by_age[10] = 2;
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 2, 0, by_age), 29); /* the oldest day comes back */
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 1, 0, by_age), 29);
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 3, 0, by_age), 19);
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 4, 0, by_age), 19);
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 6, 0, by_age), 9);
    /* More than the plays older than the floor: the floor. */
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 7, 0, by_age), 7);
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 100, 0, by_age), 7);
    /* Kept candidates count. */
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 3, 1, by_age), 29);
    /* A play within the floor never comes back. */
    by_age[5] = 50;
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 20, 0, by_age), 7);
    /* Played exactly at the floor's edge: age 8 comes back at 7, age 7
     * does not. */
    uint32_t edge[31] = {0};
    edge[8] = 1;
    edge[7] = 1;
    CHECK_EQ_INT(dd_lookback_choose(30, 7, 1, 0, edge), 7);
    CHECK_EQ_INT(kept_at(30, 0, edge, 7), 1);
    /* A request's lookback at or under the floor is never shortened. */
    CHECK_EQ_INT(dd_lookback_choose(7, 7, 10, 0, by_age), 7);
    CHECK_EQ_INT(dd_lookback_choose(3, 7, 10, 0, by_age), 3);
    /* Floor 0: today's plays stay, yesterday's may come back. */
    uint32_t z[3] = {4, 4, 0};
    CHECK_EQ_INT(dd_lookback_choose(2, 0, 4, 0, z), 0);
    CHECK_EQ_INT(dd_lookback_choose(2, 0, 5, 0, z), 0);
}

/* Random histograms: the choice is the longest lookback in [floor, span]
 * keeping min_kept, else the floor. */
static void test_random(void)
{
    uint64_t seed = 31;
    uint32_t by_age[92];
    for (int round = 0; round < 20000; round++) {
        uint32_t span = (uint32_t)(tl_splitmix64(&seed) % 91);
        uint32_t floor = (uint32_t)(tl_splitmix64(&seed) % 12);
        for (uint32_t a = 0; a <= span; a++)
            by_age[a] = tl_splitmix64(&seed) % 4 == 0 ? (uint32_t)(tl_splitmix64(&seed) % 5) : 0;
        size_t kept = (size_t)(tl_splitmix64(&seed) % 4);
        uint32_t min_kept = (uint32_t)(tl_splitmix64(&seed) % 30);
        uint32_t want = span;
        if (kept < min_kept && span > floor) {
            want = floor;
            for (uint32_t l = span; l-- > floor;)
                if (kept_at(span, kept, by_age, l) >= min_kept) {
                    want = l;
                    break;
                }
        }
        uint32_t got = dd_lookback_choose(span, floor, min_kept, kept, by_age);
        CHECK_MSG(got == want, "span %u floor %u min_kept %u kept %zu: %u, want %u", span, floor,
                  min_kept, kept, got, want);
        if (got != want) break;
    }
}

int main(void)
{
    test_cases();
    test_random();
    TEST_MAIN_END();
}
