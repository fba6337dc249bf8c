/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_fold.c - history's stored values through the merge operator and
 * the compaction filter (fold.h, on byte strings as test_fold.c calls
 * them). First byte: the segment (open, closed, dead), whether the merges
 * serve a read, and the mode.
 *   Intact inputs: the rest is read as up to 6 hash lists (a count byte,
 *   then 8 bytes per hash: its high half the item, its low byte the day,
 *   from 3 days before the segment's first to 6 after its last), encoded
 *   as dated operands, and optionally one as an existing value (an undated
 *   full-range filter, as earlier releases wrote, or a fold's result). A
 *   full merge, a partial merge then a full merge, and the compaction
 *   filter on the result must never lose an item nor make its day older:
 *   every hash is still contained, with a day at least its own kept within
 *   the segment's days (an undated value's items: the segment's last day;
 *   a dead segment folds to the empty value instead).
 *   Damaged base (mode bit 16, intact inputs): the existing value has one
 *   byte flipped (or is a few raw bytes). If it no longer parses, the full
 *   merge must give the damaged form (fold.h), holding the damaged bytes
 *   unchanged as a piece and every operand's item in its intact part; a
 *   second merge of that with the operands again must keep both; the
 *   compaction filter must keep it unchanged (a dead segment: dropped,
 *   and its merge empty).
 *   Raw bytes: the rest is split into an existing value and an operand as
 *   they are. The full merge must still succeed and give a value that
 *   parses, plain or in the damaged form; the compaction filter must keep
 *   or drop it without crashing.
 */
#include "fuzz.h"

#include "bloom.h"
#include "buf.h"
#include "dd.h"
#include "fold.h"
#include "segment.h"
#include "fold_check.h"

#define TODAY INT64_C(20000)
#define NOPS_MAX 6
#define NHASH_MAX 48

static int64_t fixed_clock(void *ud)
{
    (void)ud;
    return TODAY * DD_MS_PER_DAY + DD_MS_PER_DAY / 2;
}

/* segment_days 7, retention 30, day 20000: 2857 open, 2855 closed past the
 * grace, 2851 dead (as test_fold.c). */
static const uint32_t segs[3] = {2857, 2855, 2851};

/* Whether value V holds each of the N dated items with a day at least
 * WANT[i] (undated filters' items as of day LAST). */
static int keeps_days(const struct dd_buf *v, const uint64_t *h, const uint32_t *want, size_t n,
                      uint32_t last)
{
    for (size_t i = 0; i < n; i++)
        if (value_day_of((const char *)v->data, v->len, h[i], last) < (int64_t)want[i]) return 0;
    return 1;
}

/* Full merge; the result copied into OUT. Must succeed (fold.h: only out
 * of memory fails it). */
static void full_merge(struct dd_fold *f, const char *key, size_t klen, const char *ex,
                       size_t exlen, const char *const *ops, const size_t *lens, int nops,
                       struct dd_buf *out)
{
    unsigned char ok = 0;
    size_t len = 0;
    char *v = dd_fold_full_merge(f, key, klen, ex, exlen, ops, lens, nops, &ok, &len);
    FUZZ_CHECK(v && ok);
    out->len = 0;
    FUZZ_CHECK(dd_buf_reserve(out, len + 1) == 0);
    memcpy(out->data, v, len);
    out->len = len;
    dd_fold_free_value(f, v, len);
}

/* The compaction filter on VAL: 1 if dropped; a changed value in OUT. */
static int cfilter(struct dd_fold *f, const char *key, size_t klen, const struct dd_buf *val,
                   struct dd_buf *out, int *changed)
{
    void *cf = dd_fold_cfilter_new(f);
    FUZZ_CHECK(cf);
    char *nv = NULL;
    size_t nlen = 0;
    unsigned char ch = 0;
    int drop = dd_fold_cfilter(cf, 1, key, klen, (const char *)val->data, val->len, &nv, &nlen,
                               &ch);
    *changed = !drop && ch;
    out->len = 0;
    if (*changed) {
        FUZZ_CHECK(dd_buf_reserve(out, nlen + 1) == 0);
        memcpy(out->data, nv, nlen);
        out->len = nlen;
    }
    dd_fold_cfilter_destroy(cf);
    return drop;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct dd_fold fold;
    static int init;
    if (!init) {
        struct dd_segments g = {7, 30};
        dd_fold_init(&fold, &g, 0.01, fixed_clock, NULL);
        init = 1;
    }
    struct fz in = {data, size};
    uint8_t mode = fz_u8(&in);
    int which = mode % 3;
    char key[64];
    size_t klen = dd_key_prefix((uint8_t *)key, "scene", 5, "user-1", 6);
    dd_key_put_segment((uint8_t *)key + klen, segs[which]);
    klen += 4;
    dd_fold_reading(mode & 4);

    struct dd_buf res = {0}, res2 = {0}, cfout = {0}, ex = {0};
    struct dd_buf ops[NOPS_MAX] = {{0}};
    const char *p[NOPS_MAX];
    size_t l[NOPS_MAX];
    int changed;

    if (mode & 8) { /* raw bytes */
        size_t half = in.left / 2;
        p[0] = (const char *)in.p + half;
        l[0] = in.left - half;
        full_merge(&fold, key, klen, (const char *)in.p, half, p, l, 1, &res);
        struct dd_bloom_view fv[2];
        int nv;
        const char *a, *d, *iv;
        size_t alen, dl, ivl;
        FUZZ_CHECK(dd_fold_parse_value((const char *)res.data, res.len, fv, &nv, &a, &alen) == 0 ||
                   dd_fold_parse_damaged((const char *)res.data, res.len, &d, &dl, &iv, &ivl) == 0);
        FUZZ_CHECK(dd_buf_reserve(&ex, half + 1) == 0);
        memcpy(ex.data, in.p, half);
        ex.len = half;
        if (!cfilter(&fold, key, klen, &ex, &cfout, &changed) && changed)
            FUZZ_CHECK(dd_fold_parse_value((const char *)cfout.data, cfout.len, fv, &nv, &a,
                                           &alen) == 0);
        goto out;
    }
    int damage = mode & 16;

    uint64_t all[(NOPS_MAX + 1) * NHASH_MAX];
    uint32_t want[(NOPS_MAX + 1) * NHASH_MAX];
    size_t nall = 0;
    const uint32_t first = segs[which] * 7, last = first + 6;
    int nops = 1 + fz_u8(&in) % NOPS_MAX;
    int exkind = fz_u8(&in) % 3; /* none, a full-range filter, a fold's result */
    size_t nops_all = 0; /* the operands' hashes: all[0 .. nops_all) */
    if (damage && exkind == 0) exkind = 1;
    for (int g = 0; g < nops + (exkind != 0); g++) {
        size_t n = fz_u8(&in) % (NHASH_MAX + 1);
        uint64_t *h = all + nall;
        for (size_t i = 0; i < n; i++) {
            uint64_t x = fz_u64(&in);
            uint32_t day = first - 3 + (uint32_t)(x & 0xff) % 16;
            h[i] = dd_bloom_dated(x, day);
            want[nall + i] = g < nops || exkind == 2 ? (day < first  ? first
                                                        : day > last ? last
                                                                     : day)
                                                     : last;
        }
        nall += n;
        if (g < nops) nops_all = nall;
        if (g < nops) {
            FUZZ_CHECK(dd_fold_encode_operand(&ops[g], h, n) == 0);
            p[g] = (const char *)ops[g].data;
            l[g] = ops[g].len;
        } else if (exkind == 1) {
            FUZZ_CHECK(dd_bloom_build(&ex, h, n, DD_BLOOM_FULL_RANGE, NULL) == 0);
        } else {
            struct dd_buf op = {0};
            FUZZ_CHECK(dd_fold_encode_operand(&op, h, n) == 0);
            const char *op1 = (const char *)op.data;
            full_merge(&fold, key, klen, NULL, 0, &op1, &op.len, 1, &ex);
            dd_buf_free(&op);
        }
    }
    const char *exp = exkind ? (const char *)ex.data : NULL;
    size_t exlen = exkind ? ex.len : 0;
    int dead = which == 2;

    if (damage) {
        struct dd_bloom_view fv[2];
        int nv;
        const char *a;
        size_t alen;
        uint8_t at = fz_u8(&in), bit = fz_u8(&in);
        if (ex.len) ex.data[at % ex.len] ^= (uint8_t)(1u << (bit % 8));
        if (dd_fold_parse_value((const char *)ex.data, ex.len, fv, &nv, &a, &alen) != 0) {
            full_merge(&fold, key, klen, exp, exlen, p, l, nops, &res);
            if (dead) {
                FUZZ_CHECK(res.len == 0);
            } else {
                FUZZ_CHECK(damaged_holds((const char *)res.data, res.len, exp, exlen));
                FUZZ_CHECK(value_intact_has_all((const char *)res.data, res.len, all, nops_all));
                /* the damaged form as the base of the next merge */
                const char *r1 = (const char *)res.data;
                size_t r1len = res.len;
                full_merge(&fold, key, klen, r1, r1len, p, l, nops, &res2);
                FUZZ_CHECK(damaged_holds((const char *)res2.data, res2.len, exp, exlen));
                FUZZ_CHECK(value_intact_has_all((const char *)res2.data, res2.len, all,
                                                nops_all));
            }
            int drop = cfilter(&fold, key, klen, dead ? &ex : &res, &cfout, &changed);
            FUZZ_CHECK(drop == dead);
            FUZZ_CHECK(!changed);
            goto out;
        }
        /* the flip left a valid value (a reserved bit of the header is
         * not one: parsing is strict), so nothing to check here */
        goto out;
    }

    full_merge(&fold, key, klen, exp, exlen, p, l, nops, &res);
    if (dead)
        FUZZ_CHECK(res.len == 0);
    else
        FUZZ_CHECK(value_has_all((const char *)res.data, res.len, all, nall));
    if (!dead) FUZZ_CHECK(keeps_days(&res, all, want, nall, last));

    unsigned char ok = 0;
    size_t plen = 0;
    char *pv = dd_fold_partial_merge(&fold, key, klen, p, l, nops, &ok, &plen);
    if (ok) {
        FUZZ_CHECK(pv);
        const char *pp = pv;
        full_merge(&fold, key, klen, exp, exlen, &pp, &plen, 1, &res2);
        if (dead)
            FUZZ_CHECK(res2.len == 0);
        else
            FUZZ_CHECK(value_has_all((const char *)res2.data, res2.len, all, nall));
        if (!dead) FUZZ_CHECK(keeps_days(&res2, all, want, nall, last));
    }
    if (pv) dd_fold_free_value(&fold, pv, plen);

    int drop = cfilter(&fold, key, klen, &res, &cfout, &changed);
    if (!dead) FUZZ_CHECK(!drop);
    if (changed) FUZZ_CHECK(value_has_all((const char *)cfout.data, cfout.len, all, nall));
    if (changed) FUZZ_CHECK(keeps_days(&cfout, all, want, nall, last));

out:
    dd_fold_reading(false);
    dd_buf_free(&res);
    dd_buf_free(&res2);
    dd_buf_free(&cfout);
    dd_buf_free(&ex);
    for (int i = 0; i < NOPS_MAX; i++) dd_buf_free(&ops[i]);
    return 0;
}
