/* SPDX-License-Identifier: Apache-2.0
 *
 * test_icache.c - the decoded-filter cache: hits answer as the filter
 * does, the byte bound holds with entries in use kept, a filter larger
 * than the cache is still answered, a corrupt one is refused, and threads
 * share it.
 */
#include "bloom.h"
#include "buf.h"
#include "dd.h"
#include "icache.h"
#include "testlib.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

static uint64_t item(uint64_t tag, uint64_t i)
{
    uint64_t v[2] = {tag, i};
    return XXH3_64bits(v, sizeof v);
}

/* A closed-segment-like filter of N items of TAG in OUT, parsed into V. */
static void make(struct dd_buf *out, struct dd_bloom_view *v, uint64_t tag, size_t n)
{
    uint64_t *h = malloc(n * sizeof *h);
    REQUIRE(h);
    for (size_t i = 0; i < n; i++) h[i] = item(tag, i);
    out->len = 0;
    REQUIRE(dd_bloom_build(out, h, n, dd_bloom_range_for(n, 0.0025), NULL) == DD_OK);
    REQUIRE(dd_bloom_parse(out->data, out->len, v) == DD_OK);
    free(h);
}

/* Every item of TAG is in IX, and about the fp rate of others. */
static void check_answers(struct dd_bloom_index ix, uint64_t tag, size_t n)
{
    size_t in = 0, fp = 0;
    for (size_t i = 0; i < n; i++) in += dd_bloom_index_has(ix, item(tag, i));
    for (size_t i = 0; i < 20000; i++) fp += dd_bloom_index_has(ix, item(tag + 1000, i));
    CHECK_EQ_INT(in, n);
    CHECK(fp < 200);
}

static void test_hits_and_bound(void)
{
    dd_icache *c = NULL;
    REQUIRE(dd_icache_new(&c, 2u << 20) == DD_OK); /* 128 KiB a shard */
    struct dd_buf b[8] = {{0}};
    struct dd_bloom_view v[8];
    for (int k = 0; k < 8; k++) make(&b[k], &v[k], (uint64_t)k + 1, 4000);
    struct dd_bloom_index ix;
    struct dd_icache_entry *ref;
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 8; k++) {
            REQUIRE(dd_icache_get(c, &v[k], &ix, &ref) == DD_OK);
            check_answers(ix, (uint64_t)k + 1, 4000);
            dd_icache_release(c, ref);
        }
    struct dd_icache_stats st;
    dd_icache_get_stats(c, &st);
    CHECK_EQ_INT(st.misses, 8);
    CHECK_EQ_INT(st.hits, 16);
    CHECK(st.bytes > 0 && st.bytes <= 2u << 20);

    /* the same bytes elsewhere are the same filter: a hit */
    struct dd_buf copy = {0};
    REQUIRE(dd_buf_reserve(&copy, b[0].len) == 0);
    memcpy(copy.data, b[0].data, b[0].len);
    copy.len = b[0].len;
    struct dd_bloom_view vc;
    REQUIRE(dd_bloom_parse(copy.data, copy.len, &vc) == DD_OK);
    REQUIRE(dd_icache_get(c, &vc, &ix, &ref) == DD_OK);
    dd_icache_release(c, ref);
    dd_icache_get_stats(c, &st);
    CHECK_EQ_INT(st.hits, 17);

    /* many more filters than fit: the bound holds, entries in use stay valid */
    struct dd_icache_entry *held;
    struct dd_bloom_index hix;
    REQUIRE(dd_icache_get(c, &v[3], &hix, &held) == DD_OK);
    struct dd_buf t = {0};
    struct dd_bloom_view tv;
    for (int k = 0; k < 200; k++) {
        make(&t, &tv, 100 + (uint64_t)k, 3000);
        REQUIRE(dd_icache_get(c, &tv, &ix, &ref) == DD_OK);
        check_answers(ix, 100 + (uint64_t)k, 3000);
        dd_icache_release(c, ref);
        dd_icache_get_stats(c, &st);
        CHECK(st.bytes <= (2u << 20) + 64 * 1024); /* a held entry may keep one shard over */
    }
    CHECK(st.evictions > 0);
    check_answers(hix, 4, 4000);
    dd_icache_release(c, held);

    /* larger than a shard's share: answered, not kept */
    make(&t, &tv, 999, 60000);
    REQUIRE(dd_icache_get(c, &tv, &ix, &ref) == DD_OK);
    check_answers(ix, 999, 60000);
    dd_icache_release(c, ref);
    dd_icache_get_stats(c, &st);
    CHECK(st.bytes <= 2u << 20);

    /* a corrupt stream is refused, not kept */
    struct dd_bloom_view bad = v[1];
    bad.nbits_bytes = 3;
    uint64_t misses = st.misses;
    CHECK_EQ_INT(dd_icache_get(c, &bad, &ix, &ref), DD_ERR_CORRUPT);
    dd_icache_get_stats(c, &st);
    CHECK_EQ_INT(st.misses, misses + 1);

    for (int k = 0; k < 8; k++) dd_buf_free(&b[k]);
    dd_buf_free(&copy);
    dd_buf_free(&t);
    dd_icache_free(c);
}

struct worker {
    dd_icache *c;
    struct dd_bloom_view *v;
    int bad;
};

static void *hammer(void *arg)
{
    struct worker *w = arg;
    for (int r = 0; r < 300; r++) {
        int k = r % 6;
        struct dd_bloom_index ix;
        struct dd_icache_entry *ref;
        if (dd_icache_get(w->c, &w->v[k], &ix, &ref) != DD_OK) {
            w->bad++;
            continue;
        }
        for (size_t i = 0; i < 3000; i += 97)
            if (!dd_bloom_index_has(ix, item((uint64_t)k + 50, i))) w->bad++;
        dd_icache_release(w->c, ref);
    }
    return NULL;
}

static void test_threads(void)
{
    dd_icache *c = NULL;
    REQUIRE(dd_icache_new(&c, 256 * 1024) == DD_OK); /* smaller than the set: evictions race */
    struct dd_buf b[6] = {{0}};
    struct dd_bloom_view v[6];
    for (int k = 0; k < 6; k++) make(&b[k], &v[k], (uint64_t)k + 50, 3000);
    pthread_t th[4];
    struct worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){c, v, 0};
        REQUIRE(pthread_create(&th[i], NULL, hammer, &w[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(w[i].bad, 0);
    }
    for (int k = 0; k < 6; k++) dd_buf_free(&b[k]);
    dd_icache_free(c);
}

int main(void)
{
    test_hits_and_bound();
    test_threads();
    TEST_MAIN_END();
}
