/* SPDX-License-Identifier: Apache-2.0
 *
 * test_candset.c - candset.h on its own: the set's size, repeats not
 * added, growth past the first size, a new call forgetting the last one's
 * members, and the generation wrap clearing the table. The probe of bloom
 * filters through the set is tested with the other probes
 * (test_bloom_probe.c).
 */
#include "candset.h"
#include "dd.h"
#include "testlib.h"

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) { return tl_splitmix64(&rng_state); }

/* The set itself: repeats are not added, it grows past its first size,
 * a new call forgets the last one's members, and when the generation
 * wraps the table is cleared (a slot of generation 1 from long ago must
 * not read as a member). */
static void test_candset(void)
{
    enum { N = 5000 };
    uint64_t *h = malloc(N * sizeof *h);
    REQUIRE(h);
    for (size_t i = 0; i < N; i++) h[i] = (i % 10 == 9) ? h[i - 3] : rnd();
    struct dd_candset cs;
    REQUIRE(dd_candset_init(&cs, 10) == DD_OK);
    CHECK_EQ_INT(cs.mask + 1, 1024);
    REQUIRE(dd_candset_begin(&cs, h, N) == DD_OK);
    CHECK(cs.mask + 1 >= 2 * N);
    size_t added = 0;
    for (uint32_t i = 0; i < N; i++) added += (size_t)dd_candset_add(&cs, i);
    CHECK_EQ_INT(added, N - N / 10);
    /* the next call: the same hashes are new again */
    REQUIRE(dd_candset_begin(&cs, h, 100) == DD_OK);
    CHECK_EQ_INT(cs.mask + 1, 1024);
    CHECK_EQ_INT(dd_candset_add(&cs, 0), 1);
    CHECK_EQ_INT(dd_candset_add(&cs, 0), 0);
    /* wrap: a slot left at generation 1 would match the first call after */
    cs.slot[dd_candset_home(&cs, h[1])].gen = 1;
    cs.slot[dd_candset_home(&cs, h[1])].pos = 1;
    cs.slot[dd_candset_home(&cs, h[1])].hi = (uint32_t)(h[1] >> 32);
    cs.gen = UINT32_MAX;
    REQUIRE(dd_candset_begin(&cs, h, 100) == DD_OK);
    CHECK_EQ_INT(cs.gen, 1);
    CHECK_EQ_INT(dd_candset_add(&cs, 1), 1);
    dd_candset_free(&cs);
    dd_candset_free(&cs); /* zeroed: a no-op */
    free(h);
}

int main(void)
{
    test_candset();
    TEST_MAIN_END();
}
