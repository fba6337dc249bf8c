/* SPDX-License-Identifier: Apache-2.0
 *
 * test_bloom_probe.c - dd_bloom_probe_sorted on each of its three paths (a
 * filter much smaller than the batch, somewhat smaller, as large or
 * larger: bloom.c), at the full range and a reduced one, across the
 * decoded-chunk boundaries of the third: every answer must be
 * dd_bloom_contains's, so no added item is missed (no false negative) and
 * no hit is invented. Also repeated candidates (equal fingerprints),
 * candidates past the filter's last fingerprint or before its first, and
 * a stream shorter than its count (DD_ERR_CORRUPT, no read past its end:
 * run under ASan in CI).
 * And the decoded index (dd_bloom_index_build / dd_bloom_index_has) on the
 * same filters: every answer is dd_bloom_contains's, crowded buckets (more
 * than the two compared without a loop) included, and a short stream is
 * DD_ERR_CORRUPT.
 * And the candidate-set probe of full-range filters (candset.h,
 * dd_bloom_probe_candset) on the same filters and candidates: a member is
 * hit exactly when dd_bloom_contains says so, a repeat (not a member) is
 * never touched, runs of candidates sharing a high half (longer than the
 * two slots compared without a loop) included; a short stream is
 * DD_ERR_CORRUPT; the set's generations wrap and its table grows.
 */
#include "bloom.h"
#include "candset.h"
#include "dd.h"
#include "testlib.h"

#include <stdint.h>
#include <string.h>
#include <xxhash.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) { return tl_splitmix64(&rng_state); }

/* A filter of M random items at RANGE, probed with N sorted candidates:
 * a third members, some of them repeated, the rest random; every answer
 * is compared with dd_bloom_contains. */
static void probe_case(size_t m, size_t n, uint64_t range)
{
    uint64_t *h = malloc((m ? m : 1) * sizeof *h), *q = malloc(n * sizeof *q),
             *t = malloc(n * sizeof *t);
    uint8_t *hit = calloc(n, 1), *member = calloc(n, 1);
    REQUIRE(h && q && t && hit && member);
    for (size_t i = 0; i < m; i++) h[i] = rnd();
    struct dd_buf buf = {0};
    REQUIRE(dd_bloom_build(&buf, h, m, range, NULL) == DD_OK);
    struct dd_bloom_view v;
    REQUIRE(dd_bloom_parse(buf.data, buf.len, &v) == DD_OK);
    for (size_t i = 0; i < n; i++) {
        if (m && i % 3 == 0)
            q[i] = h[rnd() % m];
        else if (m && i % 7 == 1 && i > 1)
            q[i] = q[i - 1]; /* a repeat: equal fingerprints side by side */
        else if (i % 11 >= 2 && i % 11 <= 5 && i > 0)
            /* another hash with the same high half: a run in the set */
            q[i] = (q[i - 1] & UINT64_C(0xffffffff00000000)) | (rnd() & 0xffffffffu);
        else
            q[i] = rnd();
    }
    dd_bloom_sort_hashes(q, NULL, n, t, NULL);
    /* membership by the sorted values, after the sort */
    size_t members = 0;
    if (m) {
        uint64_t *hs = malloc(m * sizeof *hs), *ht = malloc(m * sizeof *ht);
        REQUIRE(hs && ht);
        memcpy(hs, h, m * sizeof *h);
        dd_bloom_sort_hashes(hs, NULL, m, ht, NULL);
        for (size_t i = 0; i < n; i++) {
            size_t lo = 0, hi = m;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if ((hs[mid] >> 32) < (q[i] >> 32)) lo = mid + 1;
                else hi = mid;
            }
            for (size_t j = lo; j < m && (hs[j] >> 32) == (q[i] >> 32); j++)
                if (hs[j] == q[i]) member[i] = 1;
            members += member[i];
        }
        free(hs);
        free(ht);
    }
    CHECK_EQ_INT(dd_bloom_probe_sorted(&v, q, n, hit), DD_OK);
    /* the index, on the same candidates */
    size_t ibytes = dd_bloom_index_bytes(&v);
    CHECK(ibytes >= ((size_t)v.count + 2) * sizeof(uint32_t));
    uint32_t *mem = malloc(ibytes);
    REQUIRE(mem);
    struct dd_bloom_index ix;
    CHECK_EQ_INT(dd_bloom_index_build(&v, mem, &ix), DD_OK);
    size_t idisagree = 0;
    for (size_t i = 0; i < n; i++)
        if (dd_bloom_index_has(ix, q[i]) != (hit[i] != 0)) idisagree++;
    CHECK_MSG(idisagree == 0, "m=%zu n=%zu range=%llu: %zu index answers differ", m, n,
              (unsigned long long)range, idisagree);
    free(mem);
    /* the candidate set, full range only: members as hit, repeats untouched */
    struct dd_candset cs;
    REQUIRE(dd_candset_init(&cs, 16) == DD_OK);
    REQUIRE(dd_candset_begin(&cs, q, n) == DD_OK);
    uint8_t *in = calloc(n, 1), *chit = calloc(n, 1);
    REQUIRE(in && chit);
    for (size_t i = 0; i < n; i++) in[i] = (uint8_t)dd_candset_add(&cs, (uint32_t)i);
    if (range == DD_BLOOM_FULL_RANGE) {
        CHECK_EQ_INT(dd_bloom_probe_candset(&v, &cs, chit), DD_OK);
        size_t cdisagree = 0, touched = 0;
        for (size_t i = 0; i < n; i++) {
            if (in[i]) cdisagree += (chit[i] != 0) != (hit[i] != 0);
            else touched += chit[i] != 0;
        }
        CHECK_MSG(cdisagree == 0, "m=%zu n=%zu: %zu candidate-set answers differ", m, n,
                  cdisagree);
        CHECK_EQ_INT(touched, 0);
    } else {
        CHECK_EQ_INT(dd_bloom_probe_candset(&v, &cs, chit), DD_ERR_INVALID);
    }
    dd_candset_free(&cs);
    free(in);
    free(chit);
    size_t disagree = 0, missed = 0;
    for (size_t i = 0; i < n; i++) {
        if ((hit[i] != 0) != dd_bloom_contains(&v, q[i])) disagree++;
        if (member[i] && !hit[i]) missed++;
    }
    CHECK_MSG(disagree == 0, "m=%zu n=%zu range=%llu: %zu answers differ from contains", m, n,
              (unsigned long long)range, disagree);
    CHECK_MSG(missed == 0, "m=%zu n=%zu range=%llu: %zu of %zu members missed", m, n,
              (unsigned long long)range, missed, members);
    CHECK(m == 0 || members >= n / 3);
    dd_buf_free(&buf);
    free(h); free(q); free(t); free(hit); free(member);
}

static void test_paths(void)
{
    static const size_t ms[] = {0, 1, 3, 500, 1249, 1250, 2000, 4999, 5000, 4096, 4097,
                                10000, 12289, 50000};
    static const uint64_t ranges[] = {DD_BLOOM_FULL_RANGE, 0 /* m / 0.01 */};
    for (size_t r = 0; r < DD_ARRAY_LEN(ranges); r++)
        for (size_t i = 0; i < DD_ARRAY_LEN(ms); i++) {
            uint64_t range = ranges[r] ? ranges[r] : dd_bloom_range_for(ms[i] ? ms[i] : 1, 0.01);
            probe_case(ms[i], 10000, range);
        }
    /* tiny batches against big filters, and a batch of one */
    probe_case(10000, 1, DD_BLOOM_FULL_RANGE);
    probe_case(10000, 63, DD_BLOOM_FULL_RANGE);
    probe_case(10000, 65, dd_bloom_range_for(10000, 0.01));
    probe_case(100, 200, 1000); /* a crowded range: many equal fingerprints */
}

/* Candidates all above the filter's last fingerprint, and all below its
 * first: nothing is hit, nothing is read past the stream. */
static void test_outside(void)
{
    enum { M = 6000, N = 8000 };
    uint64_t *h = malloc(M * sizeof *h), *q = malloc(N * sizeof *q);
    uint8_t *hit = calloc(N, 1);
    REQUIRE(h && q && hit);
    for (size_t i = 0; i < M; i++) h[i] = (rnd() >> 2) + (UINT64_C(1) << 62); /* [2^62, 2^63) */
    struct dd_buf buf = {0};
    REQUIRE(dd_bloom_build(&buf, h, M, DD_BLOOM_FULL_RANGE, NULL) == DD_OK);
    struct dd_bloom_view v;
    REQUIRE(dd_bloom_parse(buf.data, buf.len, &v) == DD_OK);
    for (size_t i = 0; i < N; i++) q[i] = (UINT64_C(1) << 63) + ((uint64_t)i << 32); /* above */
    CHECK_EQ_INT(dd_bloom_probe_sorted(&v, q, N, hit), DD_OK);
    size_t hits = 0;
    for (size_t i = 0; i < N; i++) hits += hit[i];
    CHECK_EQ_INT(hits, 0);
    for (size_t i = 0; i < N; i++) q[i] = (uint64_t)i << 32; /* below */
    CHECK_EQ_INT(dd_bloom_probe_sorted(&v, q, N, hit), DD_OK);
    for (size_t i = 0; i < N; i++) hits += hit[i];
    CHECK_EQ_INT(hits, 0);
    dd_buf_free(&buf);
    free(h); free(q); free(hit);
}

/* A view whose count claims more gaps than its bits hold (dd_bloom_parse
 * refuses such a value; the probe must not trust it either): every path
 * returns DD_ERR_CORRUPT and reads only the stream's bytes, which sit in
 * a buffer of exactly their size. */
static void test_short_stream(void)
{
    enum { M = 9000, N = 10000 };
    uint64_t *h = malloc(M * sizeof *h), *q = malloc(N * sizeof *q), *t = malloc(N * sizeof *t);
    uint8_t *hit = calloc(N, 1);
    REQUIRE(h && q && t && hit);
    for (size_t i = 0; i < M; i++) h[i] = rnd();
    for (size_t i = 0; i < N; i++) q[i] = rnd();
    dd_bloom_sort_hashes(q, NULL, N, t, NULL);
    static const uint64_t ranges[] = {DD_BLOOM_FULL_RANGE, 900000};
    for (size_t r = 0; r < DD_ARRAY_LEN(ranges); r++) {
        struct dd_buf buf = {0};
        REQUIRE(dd_bloom_build(&buf, h, M, ranges[r], NULL) == DD_OK);
        struct dd_bloom_view v;
        REQUIRE(dd_bloom_parse(buf.data, buf.len, &v) == DD_OK);
        uint8_t *bits = malloc(v.nbits_bytes);
        REQUIRE(bits);
        memcpy(bits, v.bits, v.nbits_bytes);
        struct dd_bloom_view lie = v;
        lie.bits = bits;
        lie.count = v.count + 1000; /* merge paths: the stream runs out */
        CHECK_EQ_INT(dd_bloom_probe_sorted(&lie, q, N, hit), DD_ERR_CORRUPT);
        lie.count = v.count + 2000; /* the highest 1,000: decoded to the end */
        CHECK_EQ_INT(dd_bloom_probe_sorted(&lie, q + N - 1000, 1000, hit), DD_ERR_CORRUPT);
        lie.count = 3 * N; /* the chunked path for sure */
        CHECK_EQ_INT(dd_bloom_probe_sorted(&lie, q, N, hit), DD_ERR_CORRUPT);
        lie.nbits_bytes = v.nbits_bytes / 2; /* half the stream, the true count */
        lie.count = v.count;
        CHECK_EQ_INT(dd_bloom_probe_sorted(&lie, q, N, hit), DD_ERR_CORRUPT);
        /* the index: too many gaps claimed, then half the stream */
        struct dd_bloom_index ix;
        lie.count = v.count + 1000;
        lie.nbits_bytes = v.nbits_bytes;
        uint32_t *mem = malloc(dd_bloom_index_bytes(&lie));
        REQUIRE(mem);
        CHECK_EQ_INT(dd_bloom_index_build(&lie, mem, &ix), DD_ERR_CORRUPT);
        lie.count = v.count;
        lie.nbits_bytes = v.nbits_bytes / 2;
        CHECK_EQ_INT(dd_bloom_index_build(&lie, mem, &ix), DD_ERR_CORRUPT);
        free(mem);
        /* the candidate set: half the stream, then too many gaps claimed */
        if (ranges[r] == DD_BLOOM_FULL_RANGE) {
            struct dd_candset cs;
            REQUIRE(dd_candset_init(&cs, N) == DD_OK);
            REQUIRE(dd_candset_begin(&cs, q, N) == DD_OK);
            for (uint32_t i = 0; i < N; i++) dd_candset_add(&cs, i);
            CHECK_EQ_INT(dd_bloom_probe_candset(&lie, &cs, hit), DD_ERR_CORRUPT);
            lie.count = v.count + 1000;
            lie.nbits_bytes = v.nbits_bytes;
            CHECK_EQ_INT(dd_bloom_probe_candset(&lie, &cs, hit), DD_ERR_CORRUPT);
            dd_candset_free(&cs);
        }
        free(bits);
        dd_buf_free(&buf);
    }
    free(h); free(q); free(t); free(hit);
}

/* Index limits: a count past DD_BLOOM_INDEX_MAX_COUNT needs 0 bytes and
 * is refused (the caller probes sorted instead); an empty filter indexes
 * and finds nothing. */
static void test_index_limits(void)
{
    struct dd_bloom_view v = {.range = DD_BLOOM_FULL_RANGE, .count = DD_BLOOM_INDEX_MAX_COUNT + 1};
    struct dd_bloom_index ix;
    uint32_t mem[8];
    CHECK_EQ_INT(dd_bloom_index_bytes(&v), 0);
    CHECK_EQ_INT(dd_bloom_index_build(&v, mem, &ix), DD_ERR_INVALID);
    struct dd_buf buf = {0};
    REQUIRE(dd_bloom_build(&buf, NULL, 0, 1000, NULL) == DD_OK);
    REQUIRE(dd_bloom_parse(buf.data, buf.len, &v) == DD_OK);
    REQUIRE(dd_bloom_index_bytes(&v) <= sizeof mem);
    CHECK_EQ_INT(dd_bloom_index_build(&v, mem, &ix), DD_OK);
    size_t hits = 0;
    for (int i = 0; i < 1000; i++) hits += dd_bloom_index_has(ix, rnd());
    CHECK_EQ_INT(hits, 0);
    dd_buf_free(&buf);
}

/* A GCS filter of range RANGE and rice parameter K holding the gaps that
 * make FPS[0..n) (any values: damaged ones included), with a good
 * checksum, so only the stream's content is wrong. Into BUF; its length. */
static size_t craft(uint8_t *buf, size_t cap, uint64_t range, int k, const uint64_t *fps, size_t n)
{
    memset(buf, 0, cap);
    buf[0] = DD_BLOOM_VERSION;
    buf[1] = DD_BLOOM_KIND_GCS;
    buf[2] = (uint8_t)k;
    for (int b = 0; b < 4; b++) buf[4 + b] = (uint8_t)(n >> (8 * b));
    for (int b = 0; b < 4; b++) buf[8 + b] = (uint8_t)((range - 1) >> (8 * b));
    uint64_t pos = 0, prev = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t gap = fps[i] - prev;
        prev = fps[i];
        pos += gap >> k; /* zero bits */
        buf[12 + pos / 8] |= (uint8_t)(1u << (pos % 8));
        pos++;
        for (int b = 0; b < k; b++, pos++)
            if ((gap >> b) & 1) buf[12 + pos / 8] |= (uint8_t)(1u << (pos % 8));
    }
    size_t len = 12 + (size_t)((pos + 7) / 8) + 4;
    REQUIRE(len <= cap);
    uint32_t sum = (uint32_t)XXH3_64bits(buf, len - 4);
    for (int b = 0; b < 4; b++) buf[len - 4 + b] = (uint8_t)(sum >> (8 * b));
    return len;
}

/* Streams that pass the checksum but not the format: a repeated
 * fingerprint, one past the range, one after the range's top. The checked
 * decode rejects each; so must the sorted probe on each of its three ways
 * (few fingerprints, about as many as candidates, in between) when the
 * candidates reach the top of the range, which makes it read every gap
 * the decode does. */
static void test_damaged_streams_agree(void)
{
    const uint64_t range = 1000;
    const uint64_t repeat[] = {5, 40, 40, 700, 900};
    const uint64_t past[] = {5, 40, 300, 700, 1003};
    const uint64_t after_top[] = {5, 40, 300, 999, 999 + 8};
    const uint64_t *bad[] = {repeat, past, after_top};
    const size_t ncand[] = {60, 4, 20}; /* 5 x 8 < 60; 5 x 2 >= 4; else */
    uint8_t buf[256];
    uint64_t cand[64];
    for (size_t b = 0; b < DD_ARRAY_LEN(bad); b++) {
        size_t len = craft(buf, sizeof buf, range, 3, bad[b], 5);
        struct dd_bloom_view v;
        REQUIRE(dd_bloom_parse(buf, len, &v) == DD_OK);
        uint32_t out[5];
        CHECK_EQ_INT(dd_bloom_decode(&v, out), DD_ERR_CORRUPT);
        for (size_t w = 0; w < DD_ARRAY_LEN(ncand); w++) {
            size_t n = ncand[w];
            for (size_t i = 0; i + 1 < n; i++) cand[i] = rnd() >> 1; /* below the top */
            cand[n - 1] = UINT64_MAX;                                  /* fingerprint 999 */
            uint64_t tmp[64];
            dd_bloom_sort_hashes(cand, NULL, n, tmp, NULL);
            uint8_t hit[64] = {0};
            CHECK_MSG(dd_bloom_probe_sorted(&v, cand, n, hit) == DD_ERR_CORRUPT,
                      "stream %zu, %zu candidates", b, n);
        }
    }
    /* The same shapes intact are accepted, and answer as contains does. */
    const uint64_t good[] = {5, 40, 300, 700, 999};
    size_t len = craft(buf, sizeof buf, range, 3, good, 5);
    struct dd_bloom_view v;
    REQUIRE(dd_bloom_parse(buf, len, &v) == DD_OK);
    for (size_t w = 0; w < DD_ARRAY_LEN(ncand); w++) {
        size_t n = ncand[w];
        for (size_t i = 0; i + 1 < n; i++) cand[i] = rnd() >> 1;
        cand[n - 1] = UINT64_MAX;
        uint64_t tmp[64];
        dd_bloom_sort_hashes(cand, NULL, n, tmp, NULL);
        uint8_t hit[64] = {0};
        CHECK_EQ_INT(dd_bloom_probe_sorted(&v, cand, n, hit), DD_OK);
        for (size_t i = 0; i < n; i++) CHECK(hit[i] == dd_bloom_contains(&v, cand[i]));
        CHECK(hit[n - 1] == 1);
    }
}

int main(void)
{
    test_damaged_streams_agree();
    test_index_limits();
    test_paths();
    test_outside();
    test_short_stream();
    TEST_MAIN_END();
}
