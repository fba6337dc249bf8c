/* SPDX-License-Identifier: Apache-2.0
 *
 * test_fold.c - the history value codec, merge operator and compaction
 * filter (fold.h) called directly on byte strings, no RocksDB: operands
 * fold into one filter; an open segment keeps a base and a delta, folded
 * past its threshold; closed segments re-encoded (but not inside a read);
 * late plays onto a re-encoded base go to a split value; dead segments
 * emptied and dropped; damaged values and operands counted and kept in the
 * damaged form, never folded away; the partial merge collapses operands
 * into one.
 */
#include "bloom.h"
#include "buf.h"
#include "dd.h"
#include "fold.h"
#include "segment.h"
#include "testlib.h"
#include "fold_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* segment_days 7, retention 30, today day 20000: segment 2857 (days
 * 19999..20005) is open, 2855 (..19991) closed past the grace, 2851
 * (..19963) dead. */
#define TODAY INT64_C(20000)
#define SEG_OPEN 2857
#define SEG_CLOSED 2855
#define SEG_DEAD 2851

static int64_t fixed_clock(void *ud)
{
    (void)ud;
    return TODAY * DD_MS_PER_DAY + DD_MS_PER_DAY / 2;
}

static void fold_init(struct dd_fold *f)
{
    struct dd_segments g = {7, 30};
    dd_fold_init(f, &g, 0.01, fixed_clock, NULL);
}

static uint64_t item(const char *tag, uint64_t i)
{
    char id[64];
    int n = snprintf(id, sizeof id, "%s-%llu", tag, (unsigned long long)i);
    return dd_hash(id, (size_t)n);
}

/* N dated items (bloom.h), played today: inside SEG_OPEN's days (a
 * closed segment's fold reads them as its last day). */
static void items(uint64_t *h, const char *tag, size_t n)
{
    for (size_t i = 0; i < n; i++) h[i] = dd_bloom_dated(item(tag, i), (uint32_t)TODAY);
}

static size_t make_key(char *k, uint32_t seg)
{
    size_t n = dd_key_prefix((uint8_t *)k, "scene", 5, "user-1", 6);
    dd_key_put_segment((uint8_t *)k + n, seg);
    return n + 4;
}

/* Full merge of (EXISTING, the operands) for SEG; the result in OUT. */
static int merge(struct dd_fold *f, uint32_t seg, const struct dd_buf *existing,
                 const struct dd_buf *ops, int nops, struct dd_buf *out)
{
    char key[64];
    size_t klen = make_key(key, seg);
    const char *p[8];
    size_t l[8];
    for (int i = 0; i < nops; i++) {
        p[i] = (const char *)ops[i].data;
        l[i] = ops[i].len;
    }
    unsigned char ok = 0;
    size_t len = 0;
    char *v = dd_fold_full_merge(f, key, klen, existing ? (const char *)existing->data : NULL,
                                 existing ? existing->len : 0, p, l, nops, &ok, &len);
    REQUIRE(v != NULL);
    out->len = 0;
    REQUIRE(dd_buf_reserve(out, len + 1) == 0);
    memcpy(out->data, v, len);
    out->len = len;
    dd_fold_free_value(f, v, len);
    return ok;
}

/* A value parsed by dd_fold_parse_value. */
struct parsed {
    struct dd_bloom_view v[2];
    int nv;
    const char *a;
    size_t alen;
};
static int parse(const void *val, size_t len, struct parsed *p)
{
    p->nv = -1;
    return dd_fold_parse_value(val, len, p->v, &p->nv, &p->a, &p->alen);
}

/* One compaction filter call on SEG's key and VAL: returns its verdict (1:
 * drop); a changed value is in R (valid until the next call on CF). */
struct cf_out {
    char *v;
    size_t len;
    unsigned char changed;
};
static int cfilter_seg(void *cf, uint32_t seg, const struct dd_buf *val, struct cf_out *r)
{
    char key[64];
    size_t klen = make_key(key, seg);
    r->v = NULL;
    r->len = 0;
    r->changed = 9;
    return dd_fold_cfilter(cf, 1, key, klen, (const char *)val->data, val->len, &r->v, &r->len,
                           &r->changed);
}

static void operand(struct dd_buf *b, const uint64_t *h, size_t n)
{
    b->len = 0;
    REQUIRE(dd_fold_encode_operand(b, h, n) == 0);
}

static void test_operands_fold(void)
{
    struct dd_fold f;
    fold_init(&f);
    uint64_t h[300];
    items(h, "op", 300);
    struct dd_buf ops[2] = {{0}}, out = {0};
    operand(&ops[0], h, 3);       /* a fingerprint list */
    operand(&ops[1], h + 3, 100); /* a full-range filter */
    CHECK_EQ_INT(ops[0].data[0], DD_BLOOM_DFPS_TAG);
    CHECK_EQ_INT(ops[0].len, 1 + 3 * 8 + 4);
    CHECK(ops[1].data[0] == DD_BLOOM_VERSION);

    CHECK(merge(&f, SEG_OPEN, NULL, ops, 2, &out));
    struct parsed pv;
    CHECK_EQ_INT(parse(out.data, out.len, &pv), 0);
    CHECK_EQ_INT(pv.nv, 1);
    CHECK(pv.v[0].range == DD_BLOOM_FULL_RANGE);
    CHECK_EQ_INT(pv.v[0].count, 103);
    CHECK(value_has_all((char *)out.data, out.len, h, 103));
    CHECK_EQ_INT(f.merges, 1);
    CHECK_EQ_INT(f.corrupt_values, 0);

    /* One filter operand and no base: the value is that operand. */
    CHECK(merge(&f, SEG_OPEN, NULL, &ops[1], 1, &out));
    CHECK(out.len == ops[1].len && memcmp(out.data, ops[1].data, out.len) == 0);
    dd_buf_free(&ops[0]);
    dd_buf_free(&ops[1]);
    dd_buf_free(&out);
}

static void test_open_split_and_threshold(void)
{
    struct dd_fold f;
    fold_init(&f);
    static uint64_t base_h[1000], new_h[300];
    items(base_h, "base", 1000);
    items(new_h, "new", 300);
    struct dd_buf base = {0}, op = {0}, out = {0}, out2 = {0};
    REQUIRE(dd_bloom_build(&base, base_h, 1000, DD_BLOOM_FULL_RANGE, NULL) == 0);

    /* 10 new items: A is copied byte for byte, B holds the 10. */
    operand(&op, new_h, 10);
    CHECK(merge(&f, SEG_OPEN, &base, &op, 1, &out));
    struct parsed pv;
    CHECK_EQ_INT(parse(out.data, out.len, &pv), 0);
    CHECK_EQ_INT(pv.nv, 2);
    CHECK_EQ_INT(out.data[0], 0xd5);
    CHECK(pv.alen == base.len && memcmp(pv.a, base.data, pv.alen) == 0);
    CHECK_EQ_INT(pv.v[0].count, 1000);
    CHECK_EQ_INT(pv.v[1].count, 10);
    CHECK(pv.v[1].range == DD_BLOOM_FULL_RANGE);
    CHECK(value_has_all((char *)out.data, out.len, base_h, 1000));
    CHECK(value_has_all((char *)out.data, out.len, new_h, 10));

    /* 290 more: B would hold 300 > max(256, 1000 / 8): folded into one. */
    operand(&op, new_h + 10, 290);
    CHECK(merge(&f, SEG_OPEN, &out, &op, 1, &out2));
    CHECK_EQ_INT(parse(out2.data, out2.len, &pv), 0);
    CHECK_EQ_INT(pv.nv, 1);
    CHECK_EQ_INT(pv.v[0].count, 1300);
    CHECK(value_has_all((char *)out2.data, out2.len, new_h, 300));
    CHECK(value_has_all((char *)out2.data, out2.len, base_h, 1000));

    /* A damaged split header reads as corrupt. */
    out.data[2] = 1;
    CHECK_EQ_INT(parse(out.data, out.len, &pv),
                 DD_ERR_CORRUPT);
    out.data[2] = 0;
    out.data[4] ^= 1;   /* len(A) */
    CHECK_EQ_INT(parse(out.data, out.len, &pv),
                 DD_ERR_CORRUPT);
    /* The empty value (a dead segment's fold) is an empty set. */
    CHECK_EQ_INT(parse("", 0, &pv), 0);
    CHECK_EQ_INT(pv.nv, 0);
    dd_buf_free(&base);
    dd_buf_free(&op);
    dd_buf_free(&out);
    dd_buf_free(&out2);
}

static void test_corrupt_counted(void)
{
    struct dd_fold f;
    fold_init(&f);
    uint64_t h[5];
    items(h, "c", 5);
    struct dd_buf ops[2] = {{0}}, out = {0}, bad = {0};
    operand(&ops[0], h, 5);
    REQUIRE(dd_buf_reserve(&ops[1], 16) == 0);
    memcpy(ops[1].data, "garbage-operand!", 16);
    ops[1].len = 16;
    CHECK(merge(&f, SEG_OPEN, NULL, ops, 2, &out));
    CHECK_EQ_INT(f.corrupt_values, 1);
    CHECK_EQ_INT(f.damaged_merges, 1);
    /* the damaged form: the operand kept, the intact items beside it */
    CHECK(!value_has_all((char *)out.data, out.len, h, 5));
    CHECK(value_intact_has_all((char *)out.data, out.len, h, 5));
    CHECK(damaged_holds((char *)out.data, out.len, ops[1].data, ops[1].len));

    /* A base whose checksum fails: counted, kept, the operands beside it. */
    REQUIRE(dd_bloom_build(&bad, h, 3, DD_BLOOM_FULL_RANGE, NULL) == 0);
    bad.data[bad.len - 1] ^= 0x40;
    CHECK(merge(&f, SEG_OPEN, &bad, &ops[0], 1, &out));
    CHECK_EQ_INT(f.corrupt_values, 2);
    struct parsed pv;
    CHECK_EQ_INT(parse(out.data, out.len, &pv), DD_ERR_CORRUPT);
    CHECK(damaged_holds((char *)out.data, out.len, bad.data, bad.len));
    const char *d, *v;
    size_t dl, vl;
    REQUIRE(dd_fold_parse_damaged((char *)out.data, out.len, &d, &dl, &v, &vl) == 0);
    CHECK_EQ_INT(dl, 4 + bad.len);
    CHECK_EQ_INT(parse(v, vl, &pv), 0);
    CHECK_EQ_INT(pv.nv, 1);
    CHECK_EQ_INT(pv.v[0].count, 5);
    CHECK_EQ_INT(dd_fold_check_value((char *)out.data, out.len), DD_ERR_CORRUPT);
    CHECK_EQ_INT(dd_fold_check_value(v, vl), 0);

    /* The compaction filter keeps a corrupt value as it is and counts it. */
    void *cf = dd_fold_cfilter_new(&f);
    REQUIRE(cf != NULL);
    struct cf_out r;
    CHECK_EQ_INT(cfilter_seg(cf, SEG_CLOSED, &bad, &r), 0);
    CHECK_EQ_INT(r.changed, 0);
    CHECK_EQ_INT(f.corrupt_values, 3);
    dd_fold_cfilter_destroy(cf);
    dd_buf_free(&ops[0]);
    dd_buf_free(&ops[1]);
    dd_buf_free(&out);
    dd_buf_free(&bad);
}

/* The damaged form's header is checked as strictly as the split value's:
 * any field damaged and it is no damaged form (a later merge then keeps
 * it whole, as one piece). */
static void test_damaged_form_strict(void)
{
    struct dd_fold f;
    fold_init(&f);
    uint64_t h[10];
    items(h, "df", 10);
    struct dd_buf bad = {0}, op = {0}, out = {0}, m = {0}, out2 = {0};
    REQUIRE(dd_buf_reserve(&bad, 5) == 0);
    memcpy(bad.data, "\x01junk", 5);
    bad.len = 5;
    operand(&op, h, 10);
    CHECK(merge(&f, SEG_OPEN, &bad, &op, 1, &out));
    const char *d, *v;
    size_t dl, vl;
    REQUIRE(dd_fold_parse_damaged((char *)out.data, out.len, &d, &dl, &v, &vl) == 0);
    CHECK_EQ_INT(out.data[0], DD_FOLD_DAMAGED_TAG);
    for (int c = 0; c < 7; c++) {
        m.len = 0;
        REQUIRE(dd_buf_reserve(&m, out.len) == 0);
        memcpy(m.data, out.data, out.len);
        m.len = out.len;
        switch (c) {
        case 0: m.data[1] = 1; break;                   /* reserved */
        case 1: m.data[4] = (uint8_t)(dl + 1); break;   /* len(D) */
        case 2: m.data[4] = (uint8_t)(dl - 1); break;
        case 3: m.data[4] = 0; break;                   /* no piece */
        case 4: m.data[8] = 9; break;                   /* the piece's length */
        case 5: m.data[m.len - 1] ^= 1; break;          /* V's checksum */
        case 6: m.len = 7; break;                       /* shorter than the header */
        }
        CHECK_MSG(dd_fold_parse_damaged((char *)m.data, m.len, &d, &dl, &v, &vl) != 0,
                  "damage %d accepted", c);
        /* a merge keeps it whole */
        CHECK(merge(&f, SEG_OPEN, &m, &op, 1, &out2));
        CHECK_MSG(damaged_holds((char *)out2.data, out2.len, m.data, m.len), "damage %d lost", c);
        CHECK(value_intact_has_all((char *)out2.data, out2.len, h, 10));
    }
    dd_buf_free(&bad);
    dd_buf_free(&op);
    dd_buf_free(&out);
    dd_buf_free(&out2);
    dd_buf_free(&m);
}

/* Whether NEEDLE's bytes appear unchanged in HAY. */
static int holds_bytes(const struct dd_buf *hay, const struct dd_buf *needle)
{
    if (needle->len == 0 || hay->len < needle->len) return 0;
    for (size_t i = 0; i + needle->len <= hay->len; i++)
        if (memcmp(hay->data + i, needle->data, needle->len) == 0) return 1;
    return 0;
}

/* Damage is never folded away (fold.h, "Damaged values"): a base that
 * fails its checksum, merged with operands, gives a value that reads as
 * damaged, carries the damaged bytes untouched and the operands' items
 * intact; later merges keep both; in an open, a closed (re-encoded) and a
 * read's merge alike. A damaged operand is kept the same way, and makes a
 * partial merge fail (RocksDB then keeps the operands). The compaction
 * filter keeps a damaged value unless its segment is dead. */
static void test_damaged_kept(void)
{
    struct dd_fold f;
    fold_init(&f);
    uint64_t h[200], late[40];
    items(h, "dk", 200);
    items(late, "dk-late", 40);
    struct dd_buf bad = {0}, ops[2] = {{0}}, out = {0}, out2 = {0}, junk = {0};
    REQUIRE(dd_bloom_build(&bad, h, 150, DD_BLOOM_FULL_RANGE, NULL) == 0);
    bad.data[bad.len / 2] ^= 0x08;   /* the checksum no longer matches */
    operand(&ops[0], h + 150, 30);
    operand(&ops[1], late, 40);
    struct parsed pv;
    static const uint32_t segs[2] = {SEG_OPEN, SEG_CLOSED};
    for (int reading = 0; reading < 2; reading++) {
        dd_fold_reading(reading);
        for (int s = 0; s < 2; s++) {
            uint64_t corrupt = f.corrupt_values;
            CHECK(merge(&f, segs[s], &bad, &ops[0], 1, &out));
            CHECK_MSG(parse(out.data, out.len, &pv) != 0, "damaged base read as a value, seg %u",
                      segs[s]);
            CHECK_MSG(holds_bytes(&out, &bad), "damaged bytes lost, seg %u", segs[s]);
            CHECK(f.corrupt_values > corrupt);
            /* the next merge keeps the damage and folds the new items */
            CHECK(merge(&f, segs[s], &out, &ops[1], 1, &out2));
            CHECK(parse(out2.data, out2.len, &pv) != 0);
            CHECK_MSG(holds_bytes(&out2, &bad), "damaged bytes lost on the second merge, seg %u",
                      segs[s]);
        }
    }
    dd_fold_reading(false);

    /* A damaged operand beside an intact base: kept too. */
    REQUIRE(dd_buf_reserve(&junk, 16) == 0);
    memcpy(junk.data, "\x01\x02junk-operand!", 16);
    junk.len = 16;
    struct dd_buf base = {0};
    CHECK(merge(&f, SEG_OPEN, NULL, &ops[0], 1, &base));
    struct dd_buf two[2] = {ops[1], junk};
    CHECK(merge(&f, SEG_OPEN, &base, two, 2, &out));
    CHECK(parse(out.data, out.len, &pv) != 0);
    CHECK(holds_bytes(&out, &junk));

    /* The partial merge fails rather than drop a damaged operand. */
    char key[64];
    size_t klen = make_key(key, SEG_OPEN);
    const char *p[2] = {(char *)ops[1].data, (char *)junk.data};
    size_t l[2] = {ops[1].len, junk.len};
    unsigned char ok = 1;
    size_t len = 0;
    char *v = dd_fold_partial_merge(&f, key, klen, p, l, 2, &ok, &len);
    CHECK_EQ_INT(ok, 0);
    dd_fold_free_value(&f, v, len);

    /* The compaction filter keeps damage in live segments, drops it in
     * dead ones. */
    void *cf = dd_fold_cfilter_new(&f);
    REQUIRE(cf != NULL);
    struct cf_out r;
    CHECK(merge(&f, SEG_CLOSED, &bad, &ops[0], 1, &out));
    CHECK_EQ_INT(cfilter_seg(cf, SEG_CLOSED, &out, &r), 0);
    CHECK(r.changed == 0 || (holds_bytes(&(struct dd_buf){(uint8_t *)r.v, r.len, r.len}, &bad)));
    CHECK_EQ_INT(cfilter_seg(cf, SEG_OPEN, &bad, &r), 0);
    CHECK_EQ_INT(r.changed, 0);
    CHECK_EQ_INT(cfilter_seg(cf, SEG_DEAD, &out, &r), 1);
    dd_fold_cfilter_destroy(cf);
    /* A dead segment's merge empties it, damage included. */
    CHECK(merge(&f, SEG_DEAD, &bad, &ops[0], 1, &out));
    CHECK_EQ_INT(out.len, 0);

    dd_buf_free(&bad);
    dd_buf_free(&ops[0]);
    dd_buf_free(&ops[1]);
    dd_buf_free(&out);
    dd_buf_free(&out2);
    dd_buf_free(&junk);
    dd_buf_free(&base);
}

static void test_dead_segments(void)
{
    struct dd_fold f;
    fold_init(&f);
    uint64_t h[4];
    items(h, "dead", 4);
    struct dd_buf op = {0}, out = {0};
    operand(&op, h, 4);
    CHECK(merge(&f, SEG_DEAD, NULL, &op, 1, &out));
    CHECK_EQ_INT(out.len, 0);
    CHECK_EQ_INT(f.merged_dead, 1);

    void *cf = dd_fold_cfilter_new(&f);
    REQUIRE(cf != NULL);
    struct cf_out r;
    CHECK_EQ_INT(cfilter_seg(cf, SEG_DEAD, &op, &r), 1);
    CHECK_EQ_INT(f.segments_expired, 1);
    /* Live segments and foreign keys are kept. */
    CHECK_EQ_INT(cfilter_seg(cf, SEG_OPEN, &op, &r), 0);
    CHECK_EQ_INT(r.changed, 0);
    CHECK_EQ_INT(dd_fold_cfilter(cf, 1, "foreign", 7, (char *)op.data, op.len, &r.v, &r.len,
                                 &r.changed), 0);
    CHECK_EQ_INT(f.segments_expired, 1);
    dd_fold_cfilter_destroy(cf);
    dd_buf_free(&op);
    dd_buf_free(&out);
}

static void test_closed_reencoded(void)
{
    struct dd_fold f;
    fold_init(&f);
    static uint64_t h[500];
    items(h, "closed", 500);
    struct dd_buf op = {0}, out = {0};
    operand(&op, h, 500);
    struct parsed pv;

    /* Inside a read a closed segment folds at the full range. */
    dd_fold_reading(true);
    CHECK(merge(&f, SEG_CLOSED, NULL, &op, 1, &out));
    dd_fold_reading(false);
    CHECK_EQ_INT(parse(out.data, out.len, &pv), 0);
    CHECK(pv.v[0].range == DD_BLOOM_FULL_RANGE);
    CHECK_EQ_INT(f.segments_reduced, 0);

    /* Outside one it is re-encoded at count * S / fp_rate (S = 6). */
    CHECK(merge(&f, SEG_CLOSED, NULL, &op, 1, &out));
    CHECK_EQ_INT(parse(out.data, out.len, &pv), 0);
    CHECK_EQ_INT(pv.nv, 1);
    CHECK(pv.v[0].range == dd_bloom_range_for(500, 0.01 / 6));
    CHECK_EQ_INT(f.segments_reduced, 1);
    CHECK(value_has_all((char *)out.data, out.len, h, 500));

    /* Late plays onto the re-encoded A: a split with only the new items in
     * B; items A already answers for add nothing. */
    struct dd_buf late = {0}, out2 = {0};
    uint64_t mix[3] = {h[0], item("late", 0), item("late", 1)};
    operand(&late, mix, 3);
    CHECK(merge(&f, SEG_CLOSED, &out, &late, 1, &out2));
    CHECK_EQ_INT(parse(out2.data, out2.len, &pv), 0);
    CHECK_EQ_INT(pv.nv, 2);
    CHECK(pv.alen == out.len && memcmp(pv.a, out.data, pv.alen) == 0);
    CHECK_EQ_INT(pv.v[1].count, 2);
    CHECK(value_has_all((char *)out2.data, out2.len, mix, 3));
    operand(&late, h, 1);
    CHECK(merge(&f, SEG_CLOSED, &out, &late, 1, &out2));
    CHECK(out2.len == out.len && memcmp(out2.data, out.data, out.len) == 0);
    dd_buf_free(&late);
    dd_buf_free(&out2);

    /* The compaction filter re-encodes a closed full-range value... */
    struct dd_buf full = {0};
    REQUIRE(dd_bloom_build(&full, h, 500, DD_BLOOM_FULL_RANGE, NULL) == 0);
    void *cf = dd_fold_cfilter_new(&f);
    REQUIRE(cf != NULL);
    struct cf_out r;
    CHECK_EQ_INT(cfilter_seg(cf, SEG_CLOSED, &full, &r), 0);
    CHECK_EQ_INT(r.changed, 1);
    CHECK(r.len < full.len);
    CHECK_EQ_INT(parse(r.v, r.len, &pv), 0);
    CHECK(pv.v[0].range == dd_bloom_range_for(500, 0.01 / 6));
    CHECK(value_has_all(r.v, r.len, h, 500));
    CHECK_EQ_INT(f.segments_reduced, 2);

    /* ...and folds a split one that closed while open (A u B), then
     * re-encodes it; an open segment's value is left alone. */
    struct dd_buf base = {0}, op10 = {0}, split = {0};
    REQUIRE(dd_bloom_build(&base, h, 400, DD_BLOOM_FULL_RANGE, NULL) == 0);
    operand(&op10, h + 400, 100);
    CHECK(merge(&f, SEG_OPEN, &base, &op10, 1, &split));
    CHECK_EQ_INT(parse(split.data, split.len, &pv), 0);
    REQUIRE(pv.nv == 2);
    CHECK_EQ_INT(cfilter_seg(cf, SEG_CLOSED, &split, &r), 0);
    CHECK_EQ_INT(r.changed, 1);
    CHECK_EQ_INT(parse(r.v, r.len, &pv), 0);
    CHECK_EQ_INT(pv.nv, 1);
    /* sized for A u B's 500 (fingerprints may collide at that range) */
    CHECK(pv.v[0].range == dd_bloom_range_for(500, 0.01 / 6));
    CHECK(value_has_all(r.v, r.len, h, 500));
    CHECK_EQ_INT(f.segments_reduced, 3);
    CHECK_EQ_INT(cfilter_seg(cf, SEG_OPEN, &split, &r), 0);
    CHECK_EQ_INT(r.changed, 0);
    dd_fold_cfilter_destroy(cf);
    dd_buf_free(&base);
    dd_buf_free(&op10);
    dd_buf_free(&split);
    dd_buf_free(&full);
    dd_buf_free(&op);
    dd_buf_free(&out);
}

static void test_partial_merge(void)
{
    struct dd_fold f;
    fold_init(&f);
    uint64_t h[40];
    items(h, "pm", 40);
    struct dd_buf ops[2] = {{0}};
    operand(&ops[0], h, 5);
    operand(&ops[1], h + 3, 5);     /* overlaps 2 */
    const char *p[2] = {(char *)ops[0].data, (char *)ops[1].data};
    size_t l[2] = {ops[0].len, ops[1].len};
    char key[64];
    size_t klen = make_key(key, SEG_OPEN);
    unsigned char ok = 0;
    size_t len = 0;
    char *v = dd_fold_partial_merge(&f, key, klen, p, l, 2, &ok, &len);
    REQUIRE(v != NULL);
    CHECK(ok);
    const uint8_t *fps;
    uint32_t n = 0;
    CHECK_EQ_INT(dd_bloom_dfps_parse(v, len, &fps, &n), 0);
    CHECK_EQ_INT(n, 8);
    dd_fold_free_value(&f, v, len);

    /* Past DD_BLOOM_FPS_MAX items: a full-range filter. */
    operand(&ops[0], h, 20);
    operand(&ops[1], h + 20, 20);
    p[0] = (char *)ops[0].data;
    p[1] = (char *)ops[1].data;
    l[0] = ops[0].len;
    l[1] = ops[1].len;
    v = dd_fold_partial_merge(&f, key, klen, p, l, 2, &ok, &len);
    REQUIRE(v != NULL);
    CHECK(ok);
    struct dd_bloom_view fv;
    CHECK_EQ_INT(dd_bloom_parse(v, len, &fv), 0);
    CHECK(fv.range == DD_BLOOM_FULL_RANGE);
    CHECK_EQ_INT(fv.count, 40);
    dd_fold_free_value(&f, v, len);
    dd_buf_free(&ops[0]);
    dd_buf_free(&ops[1]);
}

/* Dated items through the fold: a fingerprint keeps its newest day across
 * operands; operands written before dates were kept (undated) read as the
 * segment's last day, and fold with dated ones into a dated value; a day
 * outside the segment's days is read as its nearest day; a late play onto
 * a re-encoded segment is kept when it is newer than the day the segment
 * holds for it, and dropped when not; the compaction filter's re-encoding
 * keeps every day. */
static void test_dated_fold(void)
{
    struct dd_fold f;
    fold_init(&f);
    const uint64_t x = item("d", 1), y = item("d", 2), z = item("d", 3), w = item("d", 4);
    struct dd_buf ops[4] = {{0}}, out = {0}, out2 = {0};

    /* open segment 2857: days 19999..20005 */
    uint64_t old[2] = {x, y}; /* raw hashes, as an earlier release wrote */
    REQUIRE(dd_bloom_fps_encode(&ops[0], old, 2) == DD_OK);
    uint64_t d1[2] = {dd_bloom_dated(x, 20001), dd_bloom_dated(z, 20000)};
    uint64_t d2[3] = {dd_bloom_dated(z, 20002), dd_bloom_dated(w, 10), dd_bloom_dated(y, 30000)};
    operand(&ops[1], d1, 2);
    operand(&ops[2], d2, 3);
    CHECK(merge(&f, SEG_OPEN, NULL, ops, 3, &out));
    struct parsed pv;
    REQUIRE(parse(out.data, out.len, &pv) == 0 && pv.nv == 1);
    CHECK(pv.v[0].days != NULL);
    CHECK_EQ_INT(value_day_of((char *)out.data, out.len, x, 0), 20005); /* undated: last */
    CHECK_EQ_INT(value_day_of((char *)out.data, out.len, y, 0), 20005); /* clamped down */
    CHECK_EQ_INT(value_day_of((char *)out.data, out.len, z, 0), 20002); /* the newer */
    CHECK_EQ_INT(value_day_of((char *)out.data, out.len, w, 0), 19999); /* clamped up */

    /* closed segment 2855 (days 19985..19991), re-encoded by the fold */
    uint64_t c1[3] = {dd_bloom_dated(x, 19986), dd_bloom_dated(y, 19990), dd_bloom_dated(z, 19985)};
    operand(&ops[3], c1, 3);
    CHECK(merge(&f, SEG_CLOSED, NULL, &ops[3], 1, &out));
    REQUIRE(parse(out.data, out.len, &pv) == 0 && pv.nv == 1);
    CHECK(pv.v[0].range < DD_BLOOM_FULL_RANGE);
    CHECK_EQ_INT(value_day_of((char *)out.data, out.len, x, 0), 19986);
    CHECK_EQ_INT(value_day_of((char *)out.data, out.len, y, 0), 19990);
    /* late plays: x newer (kept, in the delta), y older (nothing to add) */
    uint64_t late[2] = {dd_bloom_dated(x, 19989), dd_bloom_dated(y, 19987)};
    operand(&ops[0], late, 2);
    CHECK(merge(&f, SEG_CLOSED, &out, &ops[0], 1, &out2));
    REQUIRE(parse(out2.data, out2.len, &pv) == 0);
    CHECK_EQ_INT(pv.nv, 2);
    CHECK_EQ_INT(pv.v[1].count, 1);
    CHECK_EQ_INT(value_day_of((char *)out2.data, out2.len, x, 0), 19989);
    CHECK_EQ_INT(value_day_of((char *)out2.data, out2.len, y, 0), 19990);
    uint64_t late_old[1] = {dd_bloom_dated(y, 19987)};
    operand(&ops[0], late_old, 1);
    CHECK(merge(&f, SEG_CLOSED, &out, &ops[0], 1, &out2));
    CHECK(out2.len == out.len && memcmp(out2.data, out.data, out.len) == 0);

    /* the compaction filter re-encodes a closed full-range dated value
     * (here: folded as a read would, at the full range) keeping the days */
    dd_fold_reading(true);
    CHECK(merge(&f, SEG_CLOSED, NULL, &ops[3], 1, &out));
    dd_fold_reading(false);
    REQUIRE(parse(out.data, out.len, &pv) == 0 && pv.v[0].range == DD_BLOOM_FULL_RANGE);
    void *cf = dd_fold_cfilter_new(&f);
    REQUIRE(cf);
    struct cf_out r;
    CHECK_EQ_INT(cfilter_seg(cf, SEG_CLOSED, &out, &r), 0);
    CHECK(r.changed);
    CHECK_EQ_INT(value_day_of(r.v, r.len, x, 0), 19986);
    CHECK_EQ_INT(value_day_of(r.v, r.len, y, 0), 19990);
    CHECK_EQ_INT(value_day_of(r.v, r.len, z, 0), 19985);
    dd_fold_cfilter_destroy(cf);
    for (int i = 0; i < 4; i++) dd_buf_free(&ops[i]);
    dd_buf_free(&out);
    dd_buf_free(&out2);
}

int main(void)
{
    test_dated_fold();
    test_operands_fold();
    test_open_split_and_threshold();
    test_corrupt_counted();
    test_damaged_form_strict();
    test_dead_segments();
    test_closed_reencoded();
    test_partial_merge();
    test_damaged_kept();
    TEST_MAIN_END();
}
