/* SPDX-License-Identifier: Apache-2.0
 *
 * test_bloom.c - the filter's promises: no false negatives, a measured
 * false-positive rate within 1.25x of the target at 10, 1,000 and 100,000
 * items, space near log2(1/fp) + 1.5 bits per item, exact re-encoding at a
 * smaller range, batch probe agreeing with single probes, and every
 * corruption detected.
 */
#include "bloom.h"
#include "buf.h"
#include "dd.h"
#include "testlib.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { return tl_splitmix64(&rng_state); }

/* Item ids as users send them, hashed with the real item hash. */
static uint64_t item_hash(const char *prefix, uint64_t i)
{
    char id[64];
    int n = snprintf(id, sizeof id, "%s-%llu", prefix, (unsigned long long)i);
    return dd_hash(id, (size_t)n);
}

static void test_fp_rate(size_t n, double target)
{
    uint64_t *h = malloc(n * sizeof *h);
    REQUIRE(h);
    for (size_t i = 0; i < n; i++) h[i] = item_hash("added", i);
    struct dd_buf buf = {0};
    CHECK_EQ_INT(dd_bloom_build(&buf, h, n, dd_bloom_range_for(n, target), NULL), DD_OK);
    struct dd_bloom_view v;
    REQUIRE(dd_bloom_parse(buf.data, buf.len, &v) == DD_OK);

    /* every added item is found, by the batch probe and (on a sample) by
     * the single-item path */
    uint64_t *sorted = malloc(n * sizeof *sorted), *stmp = malloc(n * sizeof *stmp);
    uint8_t *found = calloc(n, 1);
    REQUIRE(sorted && stmp && found);
    memcpy(sorted, h, n * sizeof *h);
    dd_bloom_sort_hashes(sorted, NULL, n, stmp, NULL);
    CHECK_EQ_INT(dd_bloom_probe_sorted(&v, sorted, n, found), DD_OK);
    size_t fneg = 0;
    for (size_t i = 0; i < n; i++) fneg += !found[i];
    for (size_t i = 0; i < n; i += 1 + n / 100) fneg += !dd_bloom_contains(&v, h[i]);
    CHECK_EQ_INT(fneg, 0);
    free(sorted);
    free(stmp);
    free(found);

    /* 1,000,000 never-added items, probed in sorted batches of 10,000 */
    const size_t probes = 1000000, batch = 10000;
    uint64_t *q = malloc(batch * sizeof *q), *tmp = malloc(batch * sizeof *tmp);
    uint8_t *hit = malloc(batch);
    REQUIRE(q && tmp && hit);
    size_t fpos = 0;
    for (size_t done = 0; done < probes; done += batch) {
        for (size_t i = 0; i < batch; i++) q[i] = item_hash("never", done + i);
        dd_bloom_sort_hashes(q, NULL, batch, tmp, NULL);
        memset(hit, 0, batch);
        CHECK_EQ_INT(dd_bloom_probe_sorted(&v, q, batch, hit), DD_OK);
        for (size_t i = 0; i < batch; i++) fpos += hit[i];
    }
    double fp = (double)fpos / (double)probes;
    double bits = 8.0 * (double)buf.len / (double)n;
    fprintf(stderr, "n=%zu target=%.4f measured fp=%.5f bits/item=%.2f (log2(1/fp)=%.2f)\n", n,
            target, fp, bits, log2(1.0 / target));
    CHECK_MSG(fp <= 1.25 * target, "fp %.5f > 1.25 x %.4f", fp, target);
    /* it is not oversized either: at least half the target is used */
    CHECK_MSG(fp >= 0.5 * target * (n < 100 ? 0.5 : 1.0), "fp %.5f far under target", fp);
    if (n >= 1000)
        CHECK_MSG(bits <= log2(1.0 / target) + 2.0, "%.2f bits/item", bits);
    dd_buf_free(&buf);
    free(h);
    free(q);
    free(tmp);
    free(hit);
}

/* N added, M queried: N * 8 >= M takes the merge path of the batch probe,
 * a smaller N the galloping one; both must agree with single probes. */
static void test_probe_matches_contains(size_t n)
{
    const size_t m = 20000;
    uint64_t *h = malloc(n * sizeof *h), *q = malloc(m * sizeof *q), *t = malloc(m * sizeof *t);
    uint32_t *idx = malloc(m * sizeof *idx), *tidx = malloc(m * sizeof *tidx);
    uint8_t *hit = calloc(m, 1);
    REQUIRE(h && q && t && idx && tidx && hit);
    for (size_t i = 0; i < n; i++) h[i] = rnd();
    struct dd_buf buf = {0};
    REQUIRE(dd_bloom_build(&buf, h, n, 1u << 20, NULL) == DD_OK);
    struct dd_bloom_view v;
    REQUIRE(dd_bloom_parse(buf.data, buf.len, &v) == DD_OK);
    /* half the queries are members, some repeated */
    for (size_t i = 0; i < m; i++) {
        q[i] = (i % 2) ? h[rnd() % n] : rnd();
        idx[i] = (uint32_t)i;
    }
    uint64_t *orig = malloc(m * sizeof *orig);
    REQUIRE(orig);
    memcpy(orig, q, m * sizeof *q);
    dd_bloom_sort_hashes(q, idx, m, t, tidx);
    int sorted = 1, mapped = 1;
    for (size_t i = 0; i < m; i++) {
        if (i && (q[i - 1] >> 32) > (q[i] >> 32)) sorted = 0;
        if (orig[idx[i]] != q[i]) mapped = 0;
    }
    CHECK(sorted);
    CHECK(mapped);
    CHECK_EQ_INT(dd_bloom_probe_sorted(&v, q, m, hit), DD_OK);
    size_t disagree = 0, members_missed = 0;
    for (size_t i = 0; i < m; i++) {
        if ((hit[i] != 0) != dd_bloom_contains(&v, q[i])) disagree++;
        if (idx[i] % 2 && !hit[i]) members_missed++;
    }
    CHECK_EQ_INT(disagree, 0);
    CHECK_EQ_INT(members_missed, 0);
    dd_buf_free(&buf);
    free(h); free(q); free(t); free(idx); free(tidx); free(hit); free(orig);
}

static void test_union_and_reduce(void)
{
    const size_t n = 3000;
    uint64_t *h = malloc(n * sizeof *h);
    REQUIRE(h);
    /* dated items (the fold's only kind), all of one day: no day bits, so
     * the sizes below are the fingerprints' (test_dated covers the days) */
    for (size_t i = 0; i < n; i++) h[i] = dd_bloom_dated(rnd(), 20000);
    /* build in three unions from nothing, at the full range */
    struct dd_buf a = {0}, b = {0}, c = {0};
    REQUIRE(dd_bloom_union_dated(&a, NULL, 0, DD_BLOOM_FULL_RANGE, h, 1000) == DD_OK);
    struct dd_bloom_view va, vb, vc;
    REQUIRE(dd_bloom_parse(a.data, a.len, &va) == DD_OK);
    CHECK_EQ_INT(va.range, DD_BLOOM_FULL_RANGE);
    REQUIRE(dd_bloom_union_dated(&b, &va, 0, 0, h + 1000, 2000) == DD_OK);
    REQUIRE(dd_bloom_parse(b.data, b.len, &vb) == DD_OK);
    /* re-adding what is there changes nothing (idempotent ingest) */
    REQUIRE(dd_bloom_union_dated(&c, &vb, 0, 0, h, 500) == DD_OK);
    CHECK_EQ_INT(c.len, b.len);
    CHECK(memcmp(c.data, b.data, b.len) == 0);

    /* the union equals a build of everything, byte for byte */
    struct dd_buf whole = {0};
    REQUIRE(dd_bloom_build_dated(&whole, h, n, DD_BLOOM_FULL_RANGE) == DD_OK);
    CHECK_EQ_INT(whole.len, b.len);
    CHECK(whole.len == b.len && memcmp(whole.data, b.data, b.len) == 0);

    /* reducing the full-range filter equals building at the small range */
    uint64_t small = dd_bloom_range_for(n, 0.0025);
    struct dd_buf red = {0}, direct = {0};
    REQUIRE(dd_bloom_reduce_dated(&red, &vb, 0, small) == DD_OK);
    REQUIRE(dd_bloom_build_dated(&direct, h, n, small) == DD_OK);
    CHECK_EQ_INT(red.len, direct.len);
    CHECK(red.len == direct.len && memcmp(red.data, direct.data, red.len) == 0);
    CHECK_MSG(red.len < b.len / 2, "reduced %zu vs full %zu bytes", red.len, b.len);
    REQUIRE(dd_bloom_parse(red.data, red.len, &vc) == DD_OK);
    size_t missed = 0;
    for (size_t i = 0; i < n; i++) missed += !dd_bloom_contains(&vc, h[i]);
    CHECK_EQ_INT(missed, 0);
    /* only the full range can be reduced exactly */
    struct dd_buf again = {0};
    CHECK_EQ_INT(dd_bloom_reduce_dated(&again, &vc, 0, small / 2), DD_ERR_INVALID);
    CHECK_EQ_INT(again.len, 0);
    /* a union into a reduced filter keeps its range */
    uint64_t extra = rnd();
    REQUIRE(dd_bloom_union_dated(&again, &vc, 0, DD_BLOOM_FULL_RANGE, &extra, 1) == DD_OK);
    struct dd_bloom_view vd;
    REQUIRE(dd_bloom_parse(again.data, again.len, &vd) == DD_OK);
    CHECK_EQ_INT(vd.range, small);
    CHECK(dd_bloom_contains(&vd, extra));

    dd_buf_free(&a); dd_buf_free(&b); dd_buf_free(&c); dd_buf_free(&whole);
    dd_buf_free(&red); dd_buf_free(&direct); dd_buf_free(&again);
    free(h);
}

static void test_empty_and_tiny(void)
{
    struct dd_buf buf = {0};
    REQUIRE(dd_bloom_build(&buf, NULL, 0, 1000, NULL) == DD_OK);
    struct dd_bloom_view v;
    REQUIRE(dd_bloom_parse(buf.data, buf.len, &v) == DD_OK);
    CHECK_EQ_INT(v.count, 0);
    CHECK(!dd_bloom_contains(&v, 42));
    uint64_t q = 42;
    uint8_t hit = 0;
    CHECK_EQ_INT(dd_bloom_probe_sorted(&v, &q, 1, &hit), DD_OK);
    CHECK_EQ_INT(hit, 0);
    CHECK_EQ_INT(buf.len, 16); /* header + checksum, nothing else */

    /* the extremes of the hash space */
    uint64_t edge[] = {0, UINT64_MAX, UINT64_C(1) << 32, (UINT64_C(1) << 32) - 1};
    struct dd_buf e = {0};
    REQUIRE(dd_bloom_build(&e, edge, 4, DD_BLOOM_FULL_RANGE, NULL) == DD_OK);
    REQUIRE(dd_bloom_parse(e.data, e.len, &v) == DD_OK);
    for (size_t i = 0; i < 4; i++) CHECK(dd_bloom_contains(&v, edge[i]));
    CHECK_EQ_INT(v.count, 3); /* 0 and 2^32-1 share a high half */
    CHECK_EQ_INT(dd_bloom_range_for(0, 0.01), 100);
    CHECK_EQ_INT(dd_bloom_range_for(UINT64_C(1) << 40, 0.01), DD_BLOOM_FULL_RANGE);
    struct dd_buf bad = {0};
    CHECK_EQ_INT(dd_bloom_build(&bad, edge, 4, 0, NULL), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_bloom_build(&bad, edge, 4, DD_BLOOM_FULL_RANGE + 1, NULL), DD_ERR_INVALID);
    dd_buf_free(&buf);
    dd_buf_free(&e);
}

static void test_corruption(void)
{
    uint64_t h[200];
    for (size_t i = 0; i < 200; i++) h[i] = rnd();
    struct dd_buf buf = {0};
    REQUIRE(dd_bloom_build(&buf, h, 200, 200000, NULL) == DD_OK);
    struct dd_bloom_view v;
    /* every single flipped bit is caught by version, kind or checksum */
    size_t undetected = 0;
    for (size_t i = 0; i < buf.len; i++)
        for (int bit = 0; bit < 8; bit++) {
            buf.data[i] ^= (uint8_t)(1u << bit);
            if (dd_bloom_parse(buf.data, buf.len, &v) == DD_OK) undetected++;
            buf.data[i] ^= (uint8_t)(1u << bit);
        }
    CHECK_EQ_INT(undetected, 0);
    /* every truncation too */
    size_t truncated_ok = 0;
    for (size_t len = 0; len < buf.len; len++)
        if (dd_bloom_parse(buf.data, len, &v) == DD_OK) truncated_ok++;
    CHECK_EQ_INT(truncated_ok, 0);
    CHECK_EQ_INT(dd_bloom_parse(NULL, 0, &v), DD_ERR_CORRUPT);
    /* an operand is not a filter, and the other way round */
    struct dd_buf op = {0};
    REQUIRE(dd_bloom_operand_encode(&op, h, 200) == DD_OK);
    CHECK_EQ_INT(dd_bloom_parse(op.data, op.len, &v), DD_ERR_CORRUPT);
    const uint8_t *hp;
    uint32_t n;
    CHECK_EQ_INT(dd_bloom_operand_parse(buf.data, buf.len, &hp, &n), DD_ERR_CORRUPT);
    /* operand round trip and corruption */
    REQUIRE(dd_bloom_operand_parse(op.data, op.len, &hp, &n) == DD_OK);
    CHECK_EQ_INT(n, 200);
    size_t wrong = 0;
    for (uint32_t i = 0; i < n; i++) wrong += dd_bloom_operand_at(hp, i) != h[i];
    CHECK_EQ_INT(wrong, 0);
    op.data[20] ^= 4;
    CHECK_EQ_INT(dd_bloom_operand_parse(op.data, op.len, &hp, &n), DD_ERR_CORRUPT);
    CHECK_EQ_INT(dd_bloom_operand_parse(op.data, op.len - 1, &hp, &n), DD_ERR_CORRUPT);
    /* a header that passes the checksum but claims more gaps than its bits
     * hold is rejected too (a bug elsewhere must not become an overread) */
    struct dd_buf lie = {0};
    REQUIRE(dd_bloom_build(&lie, h, 10, 1000, NULL) == DD_OK);
    lie.data[4] = 200; /* count */
    uint32_t ck = (uint32_t)XXH3_64bits(lie.data, lie.len - 4);
    memcpy(lie.data + lie.len - 4, &ck, 4); /* little-endian host */
    CHECK_EQ_INT(dd_bloom_parse(lie.data, lie.len, &v), DD_ERR_CORRUPT);
    dd_buf_free(&buf);
    dd_buf_free(&op);
    dd_buf_free(&lie);
}

/* Fingerprint lists: round trip (sorted, deduplicated, h >> 32), merged
 * into a filter they answer like it, and no corruption gets through. */
static void test_fps(void)
{
    uint64_t h[DD_BLOOM_FPS_MAX + 1];
    for (size_t i = 0; i < DD_ARRAY_LEN(h); i++) h[i] = dd_hash(&i, sizeof i);
    h[3] = h[7] ^ 0xffffu; /* same high half as h[7]: one fingerprint */
    struct dd_buf b = {0};
    CHECK_EQ_INT(dd_bloom_fps_encode(&b, h, DD_BLOOM_FPS_MAX + 1), DD_ERR_INVALID);
    CHECK_EQ_INT((int)b.len, 0);
    REQUIRE(dd_bloom_fps_encode(&b, h, DD_BLOOM_FPS_MAX) == DD_OK);
    CHECK_EQ_INT((int)b.len, 1 + 4 * (DD_BLOOM_FPS_MAX - 1) + 4);
    const uint8_t *fp;
    uint32_t n;
    REQUIRE(dd_bloom_fps_parse(b.data, b.len, &fp, &n) == DD_OK);
    CHECK_EQ_INT((int)n, DD_BLOOM_FPS_MAX - 1);
    size_t missing = 0, unsorted = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i && dd_bloom_fps_at(fp, i) <= dd_bloom_fps_at(fp, i - 1)) unsorted++;
    }
    for (size_t k = 0; k < DD_BLOOM_FPS_MAX; k++) {
        uint32_t want = (uint32_t)(h[k] >> 32);
        bool found = false;
        for (uint32_t i = 0; i < n; i++) found |= dd_bloom_fps_at(fp, i) == want;
        missing += !found;
    }
    CHECK_EQ_INT((int)missing, 0);
    CHECK_EQ_INT((int)unsorted, 0);
    /* one play: 9 bytes */
    struct dd_buf one = {0};
    REQUIRE(dd_bloom_fps_encode(&one, h, 1) == DD_OK);
    CHECK_EQ_INT((int)one.len, 9);
    /* not a filter nor a hash operand, and they are not lists */
    struct dd_bloom_view v;
    const uint8_t *hp;
    CHECK_EQ_INT(dd_bloom_parse(b.data, b.len, &v), DD_ERR_CORRUPT);
    CHECK_EQ_INT(dd_bloom_operand_parse(b.data, b.len, &hp, &n), DD_ERR_CORRUPT);
    struct dd_buf f = {0};
    REQUIRE(dd_bloom_build(&f, h, 5, DD_BLOOM_FULL_RANGE, NULL) == DD_OK);
    CHECK_EQ_INT(dd_bloom_fps_parse(f.data, f.len, &fp, &n), DD_ERR_CORRUPT);
    /* every single-bit flip and every truncation is detected */
    size_t undetected = 0, truncated_ok = 0;
    for (size_t i = 0; i < b.len; i++)
        for (int bit = 0; bit < 8; bit++) {
            b.data[i] ^= (uint8_t)(1u << bit);
            if (dd_bloom_fps_parse(b.data, b.len, &fp, &n) == DD_OK) undetected++;
            b.data[i] ^= (uint8_t)(1u << bit);
        }
    for (size_t len = 0; len < b.len; len++)
        if (dd_bloom_fps_parse(b.data, len, &fp, &n) == DD_OK) truncated_ok++;
    CHECK_EQ_INT((int)undetected, 0);
    CHECK_EQ_INT((int)truncated_ok, 0);
    /* out of order with a valid checksum is still refused */
    struct dd_buf two = {0};
    REQUIRE(dd_bloom_fps_encode(&two, h, 2) == DD_OK);
    uint8_t tmp[4];
    memcpy(tmp, two.data + 1, 4);
    memmove(two.data + 1, two.data + 5, 4);
    memcpy(two.data + 5, tmp, 4);
    uint32_t ck = (uint32_t)XXH3_64bits(two.data, two.len - 4);
    memcpy(two.data + two.len - 4, &ck, 4); /* little-endian host */
    CHECK_EQ_INT(dd_bloom_fps_parse(two.data, two.len, &fp, &n), DD_ERR_CORRUPT);
    dd_buf_free(&b);
    dd_buf_free(&one);
    dd_buf_free(&f);
    dd_buf_free(&two);
}

/* Dated filters: every fingerprint keeps its newest day, at any day
 * width (0 bits for one day, up to 16), through build, union and reduce;
 * days older than the newest less 2^16 - 1 are stored as that (newer);
 * the probe by day counts only finds of the day asked or later; damage in
 * the days is caught by the checksum, and a bad width by the parser. */
static void test_dated(void)
{
    enum { N = 3000 };
    static uint64_t d[N], sorted[N], tmp[N];
    static uint8_t hit[N];
    static const uint32_t spans[] = {1, 2, 30, 1000, 65536};
    for (size_t s = 0; s < sizeof spans / sizeof spans[0]; s++) {
        for (size_t i = 0; i < N; i++)
            d[i] = dd_bloom_dated(item_hash("dated", i), 20000 + (uint32_t)(rnd() % spans[s]));
        struct dd_buf b = {0};
        REQUIRE(dd_bloom_build_dated(&b, d, N, DD_BLOOM_FULL_RANGE) == DD_OK);
        struct dd_bloom_view v;
        REQUIRE(dd_bloom_parse(b.data, b.len, &v) == DD_OK);
        CHECK(v.days != NULL);
        CHECK_EQ_INT(v.count, N);
        int w = 0;
        while (((spans[s] - 1) >> w) != 0) w++;
        CHECK_MSG(v.day_bits <= w, "span %u: %u bits", spans[s], v.day_bits);
        uint64_t *k = malloc(N * sizeof *k);
        REQUIRE(k);
        CHECK_EQ_INT(dd_bloom_decode_dated(&v, 7, k), DD_OK);
        uint32_t newest = 0;
        for (size_t i = 0; i < N; i++)
            if (dd_bloom_day_of(d[i]) > newest) newest = dd_bloom_day_of(d[i]);
        size_t bad = 0;
        for (size_t i = 0; i < N; i++) {
            /* k is sorted by fingerprint: find d[i] */
            size_t j = 0;
            while (j < N && k[j] >> 32 != d[i] >> 32) j++;
            uint32_t want = dd_bloom_day_of(d[i]);
            if (newest - want > DD_BLOOM_DAY_SPAN_MAX) want = newest - DD_BLOOM_DAY_SPAN_MAX;
            bad += j == N || dd_bloom_day_of(k[j]) != want;
        }
        CHECK_EQ_INT(bad, 0);
        /* by day: exactly the items of SINCE or later */
        memcpy(sorted, d, sizeof d);
        dd_bloom_sort_hashes(sorted, NULL, N, tmp, NULL);
        uint32_t since = 20000 + spans[s] / 2;
        memset(hit, 0, sizeof hit);
        CHECK_EQ_INT(dd_bloom_probe_sorted_since(&v, sorted, N, hit, since), DD_OK);
        bad = 0;
        for (size_t i = 0; i < N; i++) bad += hit[i] != (dd_bloom_day_of(sorted[i]) >= since);
        CHECK_EQ_INT(bad, 0);

        /* union: a newer day wins, an older one does not */
        uint64_t two[2] = {dd_bloom_dated(d[0], 1), dd_bloom_dated(d[1], newest + 5)};
        struct dd_buf u = {0};
        CHECK_EQ_INT(dd_bloom_union_dated(&u, &v, 0, 0, two, 2), DD_OK);
        struct dd_bloom_view uv;
        REQUIRE(dd_bloom_parse(u.data, u.len, &uv) == DD_OK);
        uint64_t *uk = malloc(N * sizeof *uk);
        REQUIRE(uk && uv.count == N);
        CHECK_EQ_INT(dd_bloom_decode_dated(&uv, 0, uk), DD_OK);
        for (size_t j = 0; j < N; j++) {
            if (uk[j] >> 32 == d[0] >> 32) CHECK(dd_bloom_day_of(uk[j]) >= 20000);
            if (uk[j] >> 32 == d[1] >> 32) CHECK_EQ_INT(dd_bloom_day_of(uk[j]), newest + 5);
        }
        /* reduce: fingerprints that meet keep the newest day */
        struct dd_buf r = {0};
        uint64_t range = dd_bloom_range_for(N, 0.05);
        CHECK_EQ_INT(dd_bloom_reduce_dated(&r, &v, 0, range), DD_OK);
        struct dd_bloom_view rv;
        REQUIRE(dd_bloom_parse(r.data, r.len, &rv) == DD_OK);
        uint64_t *rk = malloc(N * sizeof *rk);
        REQUIRE(rk);
        CHECK_EQ_INT(dd_bloom_decode_dated(&rv, 0, rk), DD_OK);
        bad = 0;
        for (size_t i = 0; i < N; i++) {
            uint32_t f = dd_bloom_fingerprint(d[i], range), got = 0;
            for (uint32_t j = 0; j < rv.count; j++)
                if (rk[j] >> 32 == f) got = dd_bloom_day_of(rk[j]);
            uint32_t want = dd_bloom_day_of(d[i]);
            if (newest - want > DD_BLOOM_DAY_SPAN_MAX) want = newest - DD_BLOOM_DAY_SPAN_MAX;
            bad += got < want;
        }
        CHECK_EQ_INT(bad, 0);
        /* damage in the days fails the checksum */
        if (v.day_bits > 0) {
            size_t off = (size_t)(v.days - b.data);
            b.data[off] ^= 1;
            CHECK_EQ_INT(dd_bloom_parse(b.data, b.len, &v), DD_ERR_CORRUPT);
            b.data[off] ^= 1;
            /* a width over 16 bits is refused (checksum fixed up) */
            b.data[3] = DD_BLOOM_DAY_BITS_MAX + 1;
            uint32_t ck = (uint32_t)XXH3_64bits(b.data, b.len - 4);
            memcpy(b.data + b.len - 4, &ck, 4);
            CHECK_EQ_INT(dd_bloom_parse(b.data, b.len, &v), DD_ERR_CORRUPT);
        }
        free(k);
        free(uk);
        free(rk);
        dd_buf_free(&b);
        dd_buf_free(&u);
        dd_buf_free(&r);
    }
    /* a day0 whose span would pass 2^32 - 1 (a day read back would wrap to
     * an old one) is refused, checksum fixed up */
    {
        for (size_t i = 0; i < 10; i++)
            d[i] = dd_bloom_dated(item_hash("wrap", i), 20000 + (uint32_t)i);
        struct dd_buf b = {0};
        REQUIRE(dd_bloom_build_dated(&b, d, 10, DD_BLOOM_FULL_RANGE) == DD_OK);
        struct dd_bloom_view v;
        REQUIRE(dd_bloom_parse(b.data, b.len, &v) == DD_OK && v.day_bits == 4);
        const uint32_t top = UINT32_MAX - 14; /* day0 + 15 passes UINT32_MAX */
        memcpy(b.data + 12, &top, 4);       /* little-endian host */
        uint32_t ck = (uint32_t)XXH3_64bits(b.data, b.len - 4);
        memcpy(b.data + b.len - 4, &ck, 4);
        CHECK_EQ_INT(dd_bloom_parse(b.data, b.len, &v), DD_ERR_CORRUPT);
        const uint32_t edge = UINT32_MAX - 15; /* day0 + 15 is UINT32_MAX: fine */
        memcpy(b.data + 12, &edge, 4);
        ck = (uint32_t)XXH3_64bits(b.data, b.len - 4);
        memcpy(b.data + b.len - 4, &ck, 4);
        CHECK_EQ_INT(dd_bloom_parse(b.data, b.len, &v), DD_OK);
        dd_buf_free(&b);
    }
    /* one day: no day bits at all, 4 bytes more than undated */
    for (size_t i = 0; i < 100; i++) d[i] = dd_bloom_dated(item_hash("one", i), 20000);
    struct dd_buf a = {0}, b = {0};
    REQUIRE(dd_bloom_build_dated(&a, d, 100, DD_BLOOM_FULL_RANGE) == DD_OK);
    REQUIRE(dd_bloom_build(&b, d, 100, DD_BLOOM_FULL_RANGE, NULL) == DD_OK);
    CHECK_EQ_INT(a.len, b.len + 4);
    /* an undated filter reads as the day it is given */
    struct dd_bloom_view v;
    REQUIRE(dd_bloom_parse(b.data, b.len, &v) == DD_OK);
    CHECK(v.days == NULL);
    uint64_t k[100];
    CHECK_EQ_INT(dd_bloom_decode_dated(&v, 12345, k), DD_OK);
    CHECK_EQ_INT(dd_bloom_day_of(k[0]), 12345);
    CHECK_EQ_INT(dd_bloom_probe_sorted_since(&v, d, 1, hit, 0), DD_ERR_INVALID);
    dd_buf_free(&a);
    dd_buf_free(&b);
}

/* Dated fingerprint lists: a repeated fingerprint keeps its newest day;
 * order, length and checksum checked. */
static void test_dfps(void)
{
    uint64_t d[4] = {dd_bloom_dated(item_hash("l", 1), 9), dd_bloom_dated(item_hash("l", 2), 3),
                     dd_bloom_dated(item_hash("l", 1), 11), dd_bloom_dated(item_hash("l", 1), 10)};
    struct dd_buf b = {0};
    CHECK_EQ_INT(dd_bloom_dfps_encode(&b, d, 4), DD_OK);
    CHECK_EQ_INT(b.data[0], DD_BLOOM_DFPS_TAG);
    CHECK_EQ_INT(b.len, 1 + 2 * 8 + 4);
    const uint8_t *p;
    uint32_t n;
    CHECK_EQ_INT(dd_bloom_dfps_parse(b.data, b.len, &p, &n), DD_OK);
    CHECK_EQ_INT(n, 2);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t x = dd_bloom_dfps_at(p, i);
        if (x >> 32 == d[0] >> 32) CHECK_EQ_INT(dd_bloom_day_of(x), 11);
        if (x >> 32 == d[1] >> 32) CHECK_EQ_INT(dd_bloom_day_of(x), 3);
    }
    CHECK_EQ_INT(dd_bloom_dfps_parse(b.data, b.len - 1, &p, &n), DD_ERR_CORRUPT);
    b.data[5] ^= 1;
    CHECK_EQ_INT(dd_bloom_dfps_parse(b.data, b.len, &p, &n), DD_ERR_CORRUPT);
    /* no items (a partial merge of empty operands): NULL is fine */
    struct dd_buf e = {0};
    CHECK_EQ_INT(dd_bloom_dfps_encode(&e, NULL, 0), DD_OK);
    CHECK_EQ_INT(e.len, 1 + 4);
    CHECK_EQ_INT(dd_bloom_dfps_parse(e.data, e.len, &p, &n), DD_OK);
    CHECK_EQ_INT(n, 0);
    dd_buf_free(&e);
    uint64_t many[DD_BLOOM_FPS_MAX + 1] = {0};
    CHECK_EQ_INT(dd_bloom_dfps_encode(&b, many, DD_BLOOM_FPS_MAX + 1), DD_ERR_INVALID);
    dd_buf_free(&b);
}

int main(void)
{
    test_dated();
    test_dfps();
    test_fps();
    test_fp_rate(10, 0.01);
    test_fp_rate(1000, 0.01);
    test_fp_rate(100000, 0.01);
    test_fp_rate(1000, 0.001);
    test_fp_rate(100000, 0.0025);
    test_probe_matches_contains(5000);
    test_probe_matches_contains(500);
    test_probe_matches_contains(3);
    test_union_and_reduce();
    test_empty_and_tiny();
    test_corruption();
    TEST_MAIN_END();
}
