/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_bloom.c - damaged filters through every bloom.h decoder. The input
 * builds a filter (a range byte, a count byte, 8 bytes per hash), then
 * damages it (pairs of position and XOR byte, a truncation or extension)
 * and puts a valid checksum back, so the damage reaches the bitstream
 * decoders instead of stopping at dd_bloom_parse. For a view that parses:
 *   - accept/reject: the checked decode (dd_bloom_decode), the index build,
 *     the candset probe (full range) and the sorted probe given a last
 *     candidate at the range's top (so it reads every gap) all agree;
 *   - on an accepted filter, every decoder answers membership alike: for the
 *     built hashes and fuzz probes, contains, the sorted probe, the index
 *     and the candset probe give what the decoded fingerprints say.
 * The count byte's top bit builds a dated filter instead (days from the
 * hashes' low bits, spans up to 2^16 days): a damaged one that parses
 * must decode its days within [day0, day0 + 2^W) without reading past the
 * value, the dated decode and the probe by day agree with the undated
 * ones, and the index finds each fingerprint at its position.
 */
#include "fuzz.h"

#include "bloom.h"
#include "buf.h"
#include "candset.h"
#include "dd.h"

#include <xxhash.h>

#define NHASH_MAX 64
#define NPROBE (NHASH_MAX * 2 + 1)

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz in = {data, size};
    uint8_t rb = fz_u8(&in);
    uint8_t nb = fz_u8(&in);
    const int dated = nb & 0x80;
    size_t n = (nb & 0x7f) % (NHASH_MAX + 1);
    uint64_t h[NHASH_MAX];
    for (size_t i = 0; i < n; i++) h[i] = fz_u64(&in);
    /* full range, or a small one (fingerprints collide; short gaps) */
    uint64_t range = rb & 1 ? DD_BLOOM_FULL_RANGE : (uint64_t)1 + ((uint64_t)rb << (rb % 24));
    struct dd_buf b = {0};
    if (dated) {
        uint64_t d[NHASH_MAX];
        for (size_t i = 0; i < n; i++)
            d[i] = dd_bloom_dated(h[i], 20000 + (uint32_t)(h[i] >> 16 & 0xffff) % (rb + 1u) * 257u);
        FUZZ_CHECK(dd_bloom_build_dated(&b, d, n, range) == 0);
    } else {
        FUZZ_CHECK(dd_bloom_build(&b, h, n, range, NULL) == 0);
    }

    /* damage: up to 8 (position, xor) pairs, then a new length */
    int ndmg = fz_u8(&in) % 9;
    for (int d = 0; d < ndmg; d++) {
        size_t pos = fz_u8(&in) % b.len;
        b.data[pos] ^= fz_u8(&in);
    }
    uint8_t lb = fz_u8(&in);
    size_t len = b.len;
    if (lb & 0x80) {
        size_t cut = lb & 0x7f;
        len = cut + 4 >= len ? 4 : len - cut;
    } else if (lb & 0x40) {
        size_t grow = lb & 0x3f;
        FUZZ_CHECK(dd_buf_reserve(&b, grow) == 0);
        memset(b.data + b.len, 0xa5, grow);
        len += grow;
    }
    if (len >= 4) {
        uint32_t sum = (uint32_t)XXH3_64bits(b.data, len - 4);
        for (int i = 0; i < 4; i++) b.data[len - 4 + i] = (uint8_t)(sum >> (8 * i));
    }
    /* an exact-size copy: a read past the end is ASan's */
    uint8_t *val = malloc(len ? len : 1);
    FUZZ_CHECK(val);
    memcpy(val, b.data, len);
    dd_buf_free(&b);

    struct dd_bloom_view v;
    if (dd_bloom_parse(val, len, &v) != 0) {
        free(val);
        return 0;
    }
    /* Every gap takes at least one bit: a larger count cannot decode, and
     * is not given memory for. */
    int possible = (uint64_t)v.count <= (uint64_t)v.nbits_bytes * 8;
    uint32_t *fps = possible ? malloc(((size_t)v.count + 1) * sizeof *fps) : NULL;
    FUZZ_CHECK(fps || !possible);
    int ok = possible && dd_bloom_decode(&v, fps) == 0;
    if (ok) /* the checked decode gives a strictly ascending list within the range */
        for (uint32_t i = 0; i < v.count; i++)
            FUZZ_CHECK(fps[i] < v.range && (i == 0 || fps[i - 1] < fps[i]));
    uint64_t *dk = possible ? malloc(((size_t)v.count + 1) * sizeof *dk) : NULL;
    FUZZ_CHECK(dk || !possible);
    if (possible) FUZZ_CHECK((dd_bloom_decode_dated(&v, 7, dk) == 0) == ok);
    if (ok)
        for (uint32_t i = 0; i < v.count; i++) {
            FUZZ_CHECK(dk[i] >> 32 == fps[i]);
            uint32_t day = dd_bloom_day_of(dk[i]);
            if (v.days)
                FUZZ_CHECK(day >= v.day0 && day <= dd_bloom_day_max(&v) &&
                           day == dd_bloom_day_at(&v, i));
            else
                FUZZ_CHECK(day == 7);
        }

    /* probes: the built hashes, fuzz hashes, and one at the top of the range */
    uint64_t probe[NPROBE], tmp[NPROBE];
    size_t np = 0;
    for (size_t i = 0; i < n; i++) probe[np++] = h[i];
    while (np < NPROBE - 1 && in.left >= 8) probe[np++] = fz_u64(&in);
    probe[np++] = UINT64_MAX;
    dd_bloom_sort_hashes(probe, NULL, np, tmp, NULL);

    uint8_t hit_sorted[NPROBE] = {0};
    int rs = dd_bloom_probe_sorted(&v, probe, np, hit_sorted);
    if ((rs == 0) != ok && v.count)
        fprintf(stderr, "range %llu count %u k %u: decode %s, probe_sorted %s\n",
                (unsigned long long)v.range, v.count, v.rice_k, ok ? "accepts" : "rejects",
                rs == 0 ? "accepts" : "rejects");
    FUZZ_CHECK((rs == 0) == ok || v.count == 0);

    size_t ixb = possible ? dd_bloom_index_bytes(&v) : 0;
    struct dd_bloom_index ix;
    void *mem = ixb ? malloc(ixb) : NULL;
    int ri = -1;
    if (mem) {
        ri = dd_bloom_index_build(&v, mem, &ix);
        FUZZ_CHECK((ri == 0) == ok);
    }

    uint8_t hit_cs[NPROBE] = {0};
    int rc_cs = -1;
    struct dd_candset cs = {0};
    if (v.range == DD_BLOOM_FULL_RANGE) {
        FUZZ_CHECK(dd_candset_init(&cs, np) == 0);
        FUZZ_CHECK(dd_candset_begin(&cs, probe, np) == 0);
        for (uint32_t i = 0; i < np; i++) dd_candset_add(&cs, i);
        rc_cs = dd_bloom_probe_candset(&v, &cs, hit_cs);
        FUZZ_CHECK((rc_cs == 0) == ok);
    }

    if (ok) {
        for (size_t i = 0; i < np; i++) {
            uint32_t f = dd_bloom_fingerprint(probe[i], v.range);
            int want = v.count && bsearch(&f, fps, v.count, sizeof *fps, cmp_u32) != NULL;
            FUZZ_CHECK(dd_bloom_contains(&v, probe[i]) == want);
            FUZZ_CHECK(hit_sorted[i] == want);
            if (ri == 0) FUZZ_CHECK(dd_bloom_index_has(ix, probe[i]) == want);
            if (ri == 0) {
                uint32_t pos = dd_bloom_index_find(ix, probe[i]);
                FUZZ_CHECK(want ? pos < v.count && fps[pos] == f : pos == UINT32_MAX);
            }
            /* the candset holds each distinct hash once: its first position
             * (dd_bloom_sort_hashes orders by the high half only, so equal
             * hashes need not be adjacent) */
            size_t first = 0;
            while (probe[first] != probe[i]) first++;
            if (rc_cs == 0 && first == i) FUZZ_CHECK(hit_cs[i] == want);
        }
    }
    if (ok && v.days) {
        /* by day: a find counts from its day on */
        uint32_t since =
            v.day0 + (uint32_t)(probe[0] % ((uint64_t)dd_bloom_day_max(&v) - v.day0 + 2));
        uint8_t hit_d[NPROBE] = {0};
        FUZZ_CHECK(dd_bloom_probe_sorted_since(&v, probe, np, hit_d, since) == 0);
        for (size_t i = 0; i < np; i++) {
            uint32_t f = dd_bloom_fingerprint(probe[i], v.range);
            const uint32_t *at = v.count ? bsearch(&f, fps, v.count, sizeof *fps, cmp_u32) : NULL;
            int want = at && dd_bloom_day_at(&v, (uint32_t)(at - fps)) >= since;
            FUZZ_CHECK(hit_d[i] == want);
        }
    }
    free(dk);
    dd_candset_free(&cs);
    free(mem);
    free(fps);
    free(val);
    return 0;
}
