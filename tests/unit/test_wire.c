/* SPDX-License-Identifier: Apache-2.0
 *
 * test_wire.c - wire.h against protobuf-c as the oracle: every request
 * protobuf-c unpacks, the in-place decoder reads the same way (ids, scalars,
 * last-wins, unknown fields skipped), every one it rejects (truncations,
 * flipped bytes, groups, wrong wire types) is rejected too; and the hand
 * encoded FilterResponse is byte for byte what protobuf_c_message_pack
 * gives.
 */
#include "testlib.h"

#include "arena.h"
#include "dd.h"
#include "filter.h"
#include "segment.h"
#include "text.h"
#include "wire.h"
#include "wire_oracle.h"

#include "dedup.pb-c.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dd_arena *arena;
static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Decode BUF both ways (wire_oracle.h); 1 if they agree. */
static int agree_max(const uint8_t *buf, size_t len, size_t max_ids, int verbose)
{
    return wo_request_agrees(arena, buf, len, max_ids, verbose);
}

/* dd_wire_filter_request_decode without a message. */
static int decode(const uint8_t *buf, size_t len, size_t max_ids, struct dd_filter_query *q)
{
    return dd_wire_filter_request_decode(buf, len, arena, max_ids, q, NULL, 0);
}

static int agree(const uint8_t *buf, size_t len, int verbose)
{
    return agree_max(buf, len, SIZE_MAX, verbose);
}

/* A request written field by field, for ids protobuf-c cannot pack (a
 * NUL inside) and fields in any order. */
struct wbuf {
    uint8_t *b;
    size_t len, cap;
};

static void w_bytes(struct wbuf *w, const void *p, size_t n)
{
    if (w->len + n > w->cap) {
        w->cap = (w->len + n) * 2 + 64;
        w->b = realloc(w->b, w->cap);
        REQUIRE(w->b);
    }
    memcpy(w->b + w->len, p, n);
    w->len += n;
}

static void w_varint(struct wbuf *w, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    while (v >= 0x80) {
        t[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    t[n++] = (uint8_t)v;
    w_bytes(w, t, n);
}

/* A length-delimited field NUM. */
static void w_field(struct wbuf *w, unsigned num, const void *p, size_t n)
{
    w_varint(w, (uint64_t)num << 3 | 2);
    w_varint(w, n);
    w_bytes(w, p, n);
}

static void w_filler(struct wbuf *w, size_t i)
{
    char id[32];
    int l = snprintf(id, sizeof id, i % 5 == 1 ? "delivered-%zu" : "video-%zu", 1000000 + i * 13);
    w_field(w, 2, id, (size_t)l);
}

static uint8_t *pack_request(const Dedup__V1__FilterRequest *r, size_t *len)
{
    *len = dedup__v1__filter_request__get_packed_size(r);
    uint8_t *b = malloc(*len + 64); /* room for appended fields */
    REQUIRE(b);
    dedup__v1__filter_request__pack(r, b);
    return b;
}

/* A request with N candidates of varied lengths (0 to 300 bytes: one- and
 * two-byte length prefixes), some repeated, some with a NUL inside. */
static uint8_t *make_request(size_t n, size_t *len, char ***ids_out)
{
    char **ids = calloc(n ? n : 1, sizeof *ids);
    REQUIRE(ids);
    for (size_t i = 0; i < n; i++) {
        size_t l = (i % 7 == 3) ? 130 + i % 170 : i % 17;
        ids[i] = malloc(l + 1);
        REQUIRE(ids[i]);
        for (size_t j = 0; j < l; j++) ids[i][j] = (char)('a' + (i + j) % 26);
        ids[i][l] = '\0';
    }
    if (n > 5) strcpy(ids[5], ids[4]);
    Dedup__V1__FilterRequest r;
    dedup__v1__filter_request__init(&r);
    r.user_id = "user-42";
    r.scene = "feed";
    r.lookback_days = 30;
    r.mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES;
    r.explain = 1;
    r.n_candidate_ids = n;
    r.candidate_ids = ids;
    uint8_t *b = pack_request(&r, len);
    *ids_out = ids;
    return b;
}

static void free_ids(char **ids, size_t n)
{
    for (size_t i = 0; i < n; i++) free(ids[i]);
    free(ids);
}

static void test_valid_and_truncated(void)
{
    size_t sizes[] = {0, 1, 2, 40};
    for (size_t s = 0; s < DD_ARRAY_LEN(sizes); s++) {
        size_t len;
        char **ids;
        uint8_t *b = make_request(sizes[s], &len, &ids);
        CHECK(agree(b, len, 1));
        dd_arena_reset(arena);
        struct dd_filter_query q;
        CHECK_EQ_INT(decode(b, len, SIZE_MAX, &q), DD_OK);
        CHECK_EQ_INT(q.n, sizes[s]);
        CHECK_EQ_INT(q.lookback_days, 30);
        CHECK_EQ_INT(q.explain, 1);
        CHECK(q.user_len == 7 && memcmp(q.user_id, "user-42", 7) == 0);
        /* Over the limit: counted, ids not decoded. */
        if (sizes[s] > 1) {
            CHECK_EQ_INT(decode(b, len, 1, &q), DD_OK);
            CHECK_EQ_INT(q.n, sizes[s]);
            CHECK(q.ids == NULL);
        }
        int bad = 0;
        for (size_t t = 0; t < len; t++)
            if (!agree(b, t, bad == 0)) bad++;
        CHECK_EQ_INT(bad, 0);
        free(b);
        free_ids(ids, sizes[s]);
    }
}

static void test_garbage(void)
{
    size_t len;
    char **ids;
    uint8_t *b = make_request(40, &len, &ids);
    uint8_t *m = malloc(len);
    REQUIRE(m);
    int bad = 0, rejected = 0;
    for (int it = 0; it < 30000; it++) {
        memcpy(m, b, len);
        int flips = 1 + (int)(next() % 4);
        for (int f = 0; f < flips; f++) m[next() % len] = (uint8_t)next();
        size_t l = next() % 4 == 0 ? next() % (len + 1) : len;
        Dedup__V1__FilterRequest *pb = dedup__v1__filter_request__unpack(NULL, l, m);
        if (!pb) rejected++;
        else dedup__v1__filter_request__free_unpacked(pb, NULL);
        if (!agree(m, l, bad == 0)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(rejected > 1000); /* the mutations did reach the error paths */
    /* Pure noise. */
    for (int it = 0; it < 20000; it++) {
        size_t l = next() % 64;
        for (size_t i = 0; i < l; i++) m[i] = (uint8_t)next();
        if (!agree(m, l, bad == 0)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    free(m);
    free(b);
    free_ids(ids, 40);
}

/* A length prefix whose fifth byte carries bits past 32: protobuf-c reads
 * it into a size_t and refuses it (over INT_MAX), so must the decoder,
 * which once read it as 32 bits (0 here). Found by fuzz_wire. */
static void test_long_length_prefix(void)
{
    static const uint8_t user[] = {0x0a, 0x80, 0x80, 0x80, 0x80, 0x40};
    static const uint8_t cand[] = {0x12, 0x01, 'a', 0x12, 0x81, 0x80, 0x80, 0x80, 0x10};
    static const uint8_t big_ok[] = {0x0a, 0x80, 0x80, 0x80, 0x80, 0x00}; /* 0, padded */
    CHECK(agree(user, sizeof user, 1));
    CHECK(agree(cand, sizeof cand, 1));
    CHECK(agree(big_ok, sizeof big_ok, 1));
}

/* min_kept (8) and also_scenes (9) read as protobuf-c reads them; every
 * also_scenes entry counted, the first DD_FILTER_ALSO_MAX kept. */
static void test_min_kept_also_scenes(void)
{
    char *also[12] = {"follow", "", "x", "a", "b", "c", "d", "e", "f", "g", "h", "i"};
    for (size_t na = 0; na <= 12; na += 3) {
        Dedup__V1__FilterRequest r;
        dedup__v1__filter_request__init(&r);
        r.user_id = "u";
        r.scene = "home";
        r.min_kept = na ? 300000 : 0;
        r.also_scenes = also;
        r.n_also_scenes = na;
        char *ids[] = {"a", "b"};
        r.candidate_ids = ids;
        r.n_candidate_ids = 2;
        size_t len;
        uint8_t *b = pack_request(&r, &len);
        CHECK_MSG(agree(b, len, 1), "%zu also_scenes", na);
        struct dd_filter_query q;
        dd_arena_reset(arena);
        CHECK_EQ_INT(decode(b, len, SIZE_MAX, &q), DD_OK);
        CHECK_EQ_INT(q.n_also, na);
        CHECK_EQ_INT(q.min_kept, r.min_kept);
        if (na) CHECK(q.also[0].len == 6 && memcmp(q.also[0].p, "follow", 6) == 0);
        free(b);
    }
    /* an also_scenes entry that is not UTF-8 is refused, naming it */
    static const uint8_t bad[] = {0x0a, 1, 'u', 0x4a, 2, 0xc3, 0x28};
    struct dd_filter_query q;
    char why[128] = "";
    dd_arena_reset(arena);
    CHECK_EQ_INT(dd_wire_filter_request_decode(bad, sizeof bad, arena, 10, &q, why, sizeof why),
                 DD_ERR_INVALID);
    CHECK(strstr(why, "also_scenes[0]") != NULL);
}

static void test_unknown_and_odd_fields(void)
{
    size_t len;
    char **ids;
    uint8_t *b = make_request(3, &len, &ids);
    static const uint8_t extras[][16] = {
        {2, 0x48, 0x05},                                    /* field 9 varint */
        {9, 0x49, 1, 2, 3, 4, 5, 6, 7, 8},                  /* field 9 64-bit */
        {4, 0x4a, 2, 'h', 'i'},                             /* field 9 bytes */
        {5, 0x4d, 1, 2, 3, 4},                              /* field 9 32-bit */
        {4, 0xc2, 0x3e, 1, 'x'},                            /* field 1000, 2-byte tag */
        {3, 0x20, 0xff, 0x01},                              /* lookback_days again: last wins */
        {6, 0x20, 0xff, 0xff, 0xff, 0xff, 0x7f},            /* lookback_days, 5-byte varint */
        {2, 0x28, 0x07},                                    /* mode 7 (not a ResponseMode) */
        {3, 0x32, 1, 0x00},                                 /* explain as bytes, zero */
        {3, 0x0a, 1, 'z'},                                  /* user_id again: last wins */
        {4, 0x12, 2, 'a', 0},                               /* a candidate with a NUL */
        {2, 0x4b, 0x4c},                                    /* field 9 group: rejected */
        {3, 0x08, 0x01, 0x00},                              /* user_id as varint: rejected */
        {2, 0x10, 0x01},                                    /* candidate as varint: rejected */
        {2, 0x21, 0x01},                                    /* lookback as 64-bit: rejected */
        {2, 0x4e, 0x00},                                    /* wire type 6: rejected */
        {6, 0x12, 0xff, 0xff, 0xff, 0xff},                  /* length prefix too long */
    };
    uint8_t *m = malloc(len + 32);
    REQUIRE(m);
    for (size_t e = 0; e < DD_ARRAY_LEN(extras); e++) {
        size_t el = extras[e][0];
        memcpy(m, b, len);
        memcpy(m + len, extras[e] + 1, el);
        CHECK_MSG(agree(m, len + el, 1), "extra field %zu", e);
        /* and in front */
        memcpy(m, extras[e] + 1, el);
        memcpy(m + el, b, len);
        CHECK_MSG(agree(m, len + el, 1), "extra field %zu in front", e);
    }
    /* The last-wins case, checked by value, not only agreement. */
    struct dd_filter_query q;
    memcpy(m, b, len);
    memcpy(m + len, "\x0a\x01z\x20\xff\x01\x12\x02" "ab", 10);
    dd_arena_reset(arena);
    CHECK_EQ_INT(decode(m, len + 10, SIZE_MAX, &q), DD_OK);
    CHECK(q.user_len == 1 && q.user_id[0] == 'z');
    CHECK_EQ_INT(q.lookback_days, 255);
    CHECK_EQ_INT(q.n, 4);
    CHECK(q.ids[3].len == 2 && q.ids[3].p[0] == 'a');
    /* A NUL inside: rejected, not cut (protobuf-c reads "a"). */
    memcpy(m + len + 8, "a\0", 2);
    char why[128] = "";
    dd_arena_reset(arena);
    CHECK_EQ_INT(dd_wire_filter_request_decode(m, len + 10, arena, SIZE_MAX, &q, why, sizeof why),
                 DD_ERR_INVALID);
    CHECK_STR(why, "candidate_ids[3] holds a NUL byte");
    free(m);
    free(b);
    free_ids(ids, 3);
}

/* Ids of every length from 0 to 40, without a NUL and with one at every
 * place (and all NULs), first, in the middle and last of requests long
 * enough for every decoding path (plain runs, two chains, checked
 * fields): read whole, or rejected naming the id when it holds a NUL
 * (protobuf-c would cut it there, merging distinct ids). */
static void test_id_lengths_and_nuls(void)
{
    static const size_t where[] = {0, 150, 300, 599};
    static const uint8_t fill[] = {'a', 0x01, '~', 0x7f, 0x12, 'Z'};
    int bad = 0, n_req = 0;
    for (size_t l = 0; l <= 40; l++) {
        for (size_t k = 0; k <= l + 1; k++) { /* NUL at k - 1; 0: none; l + 1: all */
            for (size_t wi = 0; wi < DD_ARRAY_LEN(where); wi++) {
                uint8_t id[40];
                for (size_t j = 0; j < l; j++) id[j] = fill[(j + k + wi) % DD_ARRAY_LEN(fill)];
                if (k == l + 1) memset(id, 0, l);
                else if (k > 0) id[k - 1] = 0;
                struct wbuf w = {0};
                w_field(&w, 1, "user-7", 6);
                for (size_t i = 0; i < 600; i++) {
                    if (i == where[wi]) w_field(&w, 2, id, l);
                    else w_filler(&w, i);
                }
                w_field(&w, 3, "feed", 4);
                if (!agree(w.b, w.len, bad == 0)) {
                    if (bad++ == 0) fprintf(stderr, "id length %zu, NUL case %zu, at %zu\n", l, k,
                                            where[wi]);
                }
                /* Checked by value too. */
                dd_arena_reset(arena);
                struct dd_filter_query q;
                char why[128] = "", want[128];
                int rc = dd_wire_filter_request_decode(w.b, w.len, arena, SIZE_MAX, &q, why,
                                                       sizeof why);
                if (k == 0 || l == 0) {
                    CHECK_EQ_INT(rc, DD_OK);
                    CHECK(q.n == 600 && q.ids[where[wi]].len == l);
                } else {
                    snprintf(want, sizeof want, "candidate_ids[%zu] holds a NUL byte", where[wi]);
                    CHECK_EQ_INT(rc, DD_ERR_INVALID);
                    CHECK_STR(why, want);
                }
                free(w.b);
                n_req++;
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(n_req > 3000);
}

/* dd_text_check against the code point oracle: every string of up to
 * 2 bytes, strings of 3 and 4 bytes from the bytes around each range's
 * edges, and random mixes of ASCII and multibyte sequences (valid, cut,
 * overlong, surrogates, past U+10FFFF) of every length to 40, so that
 * the 8- and 4-byte ASCII tests meet them at every offset. */
static void test_text_check(void)
{
    static const uint8_t edge[] = {0x00, 0x01, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0,
                                   0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed,
                                   0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff};
    enum { E = DD_ARRAY_LEN(edge) };
    int bad = 0;
    uint8_t s[48];
    for (unsigned v = 0; v < 65536 + 256 + 1; v++) {
        size_t l = v < 65536 ? 2 : v < 65536 + 256 ? 1 : 0;
        s[0] = (uint8_t)v;
        s[1] = (uint8_t)(v >> 8);
        if (l == 1) s[0] = (uint8_t)(v - 65536);
        if ((dd_text_check(s, l) == DD_TEXT_OK) != ref_text_ok(s, l)) bad++;
    }
    for (size_t a = 0; a < E; a++)
        for (size_t b = 0; b < E; b++)
            for (size_t c = 0; c < E; c++)
                for (size_t d = 0; d <= E; d++) {
                    size_t l = d == E ? 3 : 4;
                    s[0] = edge[a], s[1] = edge[b], s[2] = edge[c], s[3] = d < E ? edge[d] : 0;
                    if ((dd_text_check(s, l) == DD_TEXT_OK) != ref_text_ok(s, l)) bad++;
                }
    static const char *const pieces[] = {"a", "Z", "~", "\xc3\xa9", "\xe2\x82\xac",
                                         "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf", "\xed\x9f\xbf",
                                         "\xc0\x80", "\xe0\x80\x80", "\xed\xa0\x80",
                                         "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\x80",
                                         "\xc3", "\xe2\x82", "\0"};
    for (int it = 0; it < 200000; it++) {
        size_t want = next() % 41, l = 0;
        int rare = (int)(next() % 4); /* 0: all ASCII */
        while (l < want) {
            size_t k = rare && next() % 8 == 0 ? next() % DD_ARRAY_LEN(pieces) : next() % 3;
            size_t pl = k == DD_ARRAY_LEN(pieces) - 1 ? 1 : strlen(pieces[k]);
            if (l + pl > sizeof s) break;
            memcpy(s + l, pieces[k], pl);
            l += pl;
        }
        int t = dd_text_check(s, l);
        if ((t == DD_TEXT_OK) != ref_text_ok(s, l) || (t == DD_TEXT_NUL && !memchr(s, 0, l))) {
            if (bad++ == 0) fprintf(stderr, "text_check differs on a string of %zu bytes\n", l);
        }
    }
    CHECK_EQ_INT(bad, 0);
}

/* Filter requests with a string that is not UTF-8: rejected naming the
 * field (and the candidate's index); valid multibyte ids read whole. */
static void test_request_utf8(void)
{
    static const struct {
        unsigned field;
        size_t len;
        const char *bytes;
        const char *want;
    } cases[] = {
        {1, 6, "user-\xff", "user_id is not valid UTF-8"},
        {3, 6, "sc\xc0\x80ne", "scene is not valid UTF-8"},
        {2, 10, "item-\xed\xa0\x80-x", "candidate_ids[7] is not valid UTF-8"},
        {2, 2, "\xe2\x82", "candidate_ids[7] is not valid UTF-8"},
        {1, 2, "u\0", "user_id holds a NUL byte"},
        {3, 1, "\0", "scene holds a NUL byte"},
        {2, 10, "\xc3\xa9t\xc3\xa9-\xf0\x9f\x98\x80", NULL},
    };
    for (size_t c = 0; c < DD_ARRAY_LEN(cases); c++) {
        size_t bl = cases[c].len;
        struct wbuf w = {0};
        if (cases[c].field != 1) w_field(&w, 1, "user-1", 6);
        for (size_t i = 0; i < 10; i++) {
            if (i == 7 && cases[c].field == 2) w_field(&w, 2, cases[c].bytes, bl);
            else w_filler(&w, i);
        }
        if (cases[c].field != 2) w_field(&w, cases[c].field, cases[c].bytes, bl);
        CHECK_MSG(agree(w.b, w.len, 1), "utf-8 case %zu", c);
        dd_arena_reset(arena);
        struct dd_filter_query q;
        char why[128] = "";
        int rc = dd_wire_filter_request_decode(w.b, w.len, arena, SIZE_MAX, &q, why, sizeof why);
        if (cases[c].want) {
            CHECK_EQ_INT(rc, DD_ERR_INVALID);
            CHECK_STR(why, cases[c].want);
        } else {
            CHECK_EQ_INT(rc, DD_OK);
            CHECK(q.n == 10 && q.ids[7].len == bl && memcmp(q.ids[7].p, cases[c].bytes, bl) == 0);
        }
        free(w.b);
    }
}

/* A request made to defeat the fast paths: tiny unknown fields, each
 * before a few candidates (each unknown field stops the plain run, the
 * candidates after it look like a run to split), 1 MiB of them. The
 * decode must stay linear: the arena, which once grew by a scratch array
 * of a quarter of the rest of the request per unknown field (some 34 GB
 * for 16 MiB), now grows by less than 12 bytes per request byte. Work is
 * measured in arena bytes, not time, so it cannot flake. */
static void test_hostile_linear(void)
{
    for (int kind = 0; kind < 3; kind++) {
        struct wbuf w = {0};
        w_field(&w, 1, "user-1", 6);
        size_t i = 0;
        while (w.len < ((size_t)1 << 20)) {
            if (kind == 0) w_bytes(&w, "\x78\x01", 2);          /* unknown field 15, varint 1 */
            else if (kind == 1) w_bytes(&w, "\x20\x1e", 2);     /* lookback_days 30 */
            else w_field(&w, 2, "x\x12\x01", 3);                /* framing-like bytes in an id */
            for (int k = 0; k < 5; k++) w_filler(&w, i++);
            if (kind == 2 && i % 50 == 0) for (int k = 0; k < 300; k++) w_filler(&w, i++);
        }
        dd_arena_reset(arena);
        struct dd_filter_query q;
        CHECK_EQ_INT(decode(w.b, w.len, SIZE_MAX, &q), DD_OK);
        CHECK_MSG(dd_arena_used(arena) < 12 * w.len + 64, "kind %d: arena %zu for %zu bytes",
                  kind, dd_arena_used(arena), w.len);
        CHECK(q.n >= i);
        CHECK(agree(w.b, w.len, 1));
        free(w.b);
    }
}

/* Random large requests whose ids hold bytes that look like candidate
 * framing (0x12 and a small byte: a second chain guessing its start in
 * the middle of the request can land inside an id), NULs now and then,
 * lengths over 127 (two-byte prefixes), other fields between candidates,
 * and limits on the count below, at and above it. */
static void test_large_random(void)
{
    static const uint8_t alphabet[] = {0x12, 0x01, 0x05, 'a', 'b', 0x12, 0x03};
    int bad = 0;
    for (int it = 0; it < 300; it++) {
        size_t n = 200 + next() % 3000;
        unsigned nul_per_10k = (unsigned)(next() % 3 == 0 ? 0 : next() % 200);
        unsigned long_per_100 = (unsigned)(next() % 3);
        unsigned other_per_1k = (unsigned)(next() % 2 == 0 ? 0 : 1 + next() % 5);
        struct wbuf w = {0};
        if (next() % 2) w_field(&w, 1, "user-1", 6);
        for (size_t i = 0; i < n; i++) {
            uint8_t id[200];
            size_t l = next() % 100 < long_per_100 ? 120 + next() % 80 : next() % 24;
            for (size_t j = 0; j < l; j++) {
                id[j] = alphabet[next() % DD_ARRAY_LEN(alphabet)];
                if (next() % 10000 < nul_per_10k) id[j] = 0;
            }
            w_field(&w, 2, id, l);
            if (next() % 1000 < other_per_1k) {
                switch (next() % 4) {
                case 0: w_field(&w, 3, "s\x12\x01", 3); break;
                case 1: w_bytes(&w, "\x20\x1e", 2); break;   /* lookback_days 30 */
                case 2: w_bytes(&w, "\x48\x00", 2); break;   /* unknown varint 0 */
                default: w_field(&w, 9, "\x12\x02zz", 4); break;
                }
            }
        }
        size_t limits[] = {SIZE_MAX, n, n - 1, n / 2};
        for (size_t m = 0; m < DD_ARRAY_LEN(limits); m++)
            if (!agree_max(w.b, w.len, limits[m], bad == 0)) {
                if (bad++ == 0) fprintf(stderr, "large request %d, limit %zu\n", it, limits[m]);
            }
        free(w.b);
    }
    CHECK_EQ_INT(bad, 0);
}

/* A large plain request (two chains), mutated and truncated. */
static void test_large_garbage(void)
{
    struct wbuf w = {0};
    w_field(&w, 1, "user-9", 6);
    for (size_t i = 0; i < 1500; i++) w_filler(&w, i);
    w_bytes(&w, "\x28\x01", 2);
    CHECK(agree(w.b, w.len, 1));
    uint8_t *m = malloc(w.len);
    REQUIRE(m);
    int bad = 0, rejected = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(m, w.b, w.len);
        int flips = 1 + (int)(next() % 4);
        for (int f = 0; f < flips; f++) m[next() % w.len] = (uint8_t)next();
        size_t l = next() % 4 == 0 ? next() % (w.len + 1) : w.len;
        Dedup__V1__FilterRequest *pb = dedup__v1__filter_request__unpack(NULL, l, m);
        if (!pb) rejected++;
        else dedup__v1__filter_request__free_unpacked(pb, NULL);
        if (!agree(m, l, bad == 0)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(rejected > 100);
    free(m);
    free(w.b);
}

static void test_response_bytes(void)
{
    enum { N = 300 };
    static char *idstr[N];
    static struct dd_filter_id ids[N];
    static uint8_t reason[N], where[N];
    static char long_scene[DD_SCENE_MAX + 1];
    memset(long_scene, 's', DD_SCENE_MAX); /* a body past 127 bytes */
    for (size_t i = 0; i < N; i++) {
        size_t l = i % 5 == 0 ? 200 : i % 13;
        idstr[i] = malloc(l + 1);
        REQUIRE(idstr[i]);
        memset(idstr[i], 'a' + (int)(i % 26), l);
        idstr[i][l] = '\0';
        ids[i].p = idstr[i];
        ids[i].len = l;
    }
    int bad = 0;
    for (int it = 0; it < 400; it++) {
        struct dd_filter_query q = {.user_id = "u", .user_len = 1, .scene = "", .n = next() % (N + 1),
                                    .ids = ids};
        q.mode = (int32_t)(next() % 2);
        q.explain = (int)(next() % 2);
        struct dd_filter_result r = {.reason = reason};
        int density = (int)(next() % 5); /* 0: nothing removed ... 4: everything */
        for (size_t i = 0; i < q.n; i++)
            reason[i] = (int)(next() % 4) < density ? (uint8_t)(1 + next() % 3) : 0;
        wo_tally(&r, reason, q.n);
        r.degraded = (int)(next() % 2);
        r.lookback_used = next() % 3 == 0 ? 0 : (uint32_t)(next() % 400);
        /* also_scenes: Removed names the scene (filter.h, r.scene) */
        if (next() % 2) {
            const char *names[] = {"follow", "", long_scene};
            q.scene = next() % 2 ? "home" : "";
            q.scene_len = strlen(q.scene);
            q.n_also = 1 + next() % DD_FILTER_ALSO_MAX;
            for (size_t k = 0; k < q.n_also; k++)
                q.also[k] = (struct dd_filter_id){names[k % 3], strlen(names[k % 3])};
            for (size_t i = 0; i < q.n; i++) where[i] = (uint8_t)(next() % (q.n_also + 1));
            r.scene = where;
        }
        if (!wo_response_matches(&q, &r, idstr)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    for (size_t i = 0; i < N; i++) free(idstr[i]);
}

/* Indexes past 16,383 take three varint bytes: a 20,000-candidate answer
 * in indexes mode, with explain, is still byte for byte protobuf-c's, in
 * a buffer of exactly the bound. */
static void test_response_large(void)
{
    enum { N = 20000 };
    static char *idstr[N];
    static struct dd_filter_id ids[N];
    static uint8_t reason[N];
    static char one[] = "x";
    for (size_t i = 0; i < N; i++) {
        idstr[i] = one;
        ids[i].p = one;
        ids[i].len = 1;
    }
    for (int explain = 0; explain < 2; explain++) {
        struct dd_filter_query q = {.user_id = "u", .user_len = 1, .scene = "", .n = N,
                                    .ids = ids, .explain = explain,
                                    .mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES};
        struct dd_filter_result r = {.reason = reason};
        for (size_t i = 0; i < N; i++)
            reason[i] = (uint8_t)(next() % 5 == 0 ? 1 + next() % 3 : 0);
        wo_tally(&r, reason, N);
        CHECK(wo_response_matches(&q, &r, idstr));
    }
}

/* Kept indexes around where their varints grow (1 byte below 128, 2 below
 * 16,384, 3 below 2^21, 4 from there): every count and kept pattern that
 * puts the first or last kept index, or the end, on either side of one. */
static void test_response_index_boundaries(void)
{
    static const size_t counts[] = {1, 2, 127, 128, 129, 130, 255, 256, 16383, 16384, 16385,
                                    16386, 20000, (1u << 21) + 2};
    enum { PATTERNS = 8 };
    size_t nmax = counts[DD_ARRAY_LEN(counts) - 1];
    uint8_t *reason = malloc(nmax);
    char **idstr = malloc(nmax * sizeof *idstr);
    struct dd_filter_id *ids = malloc(nmax * sizeof *ids);
    static char one[] = "x";
    REQUIRE(reason && idstr && ids);
    for (size_t i = 0; i < nmax; i++) {
        idstr[i] = one;
        ids[i].p = one;
        ids[i].len = 1;
    }
    int bad = 0;
    for (size_t c = 0; c < DD_ARRAY_LEN(counts); c++) {
        size_t n = counts[c];
        for (int pat = 0; pat < PATTERNS; pat++) {
            struct dd_filter_result r = {.reason = reason, .degraded = pat & 1};
            for (size_t i = 0; i < n; i++) {
                int keep;
                switch (pat) {
                case 0: keep = 1; break;                                  /* all */
                case 1: keep = 0; break;                                  /* none */
                case 2: keep = next() % 5 != 0; break;                    /* 80 % */
                case 3: keep = i == 0; break;                             /* index 0 only */
                case 4: keep = i == n - 1; break;                         /* the last only */
                case 5: keep = i % 2 == 1; break;                         /* odd ones */
                case 6: keep = (i >= 126 && i <= 129) || (i >= 16382 && i <= 16385) ||
                               (i >= (1u << 21) - 1); break;              /* around each edge */
                default: keep = next() % 50 == 0; break;                  /* 2 % */
                }
                reason[i] = keep ? 0 : (uint8_t)(1 + next() % 3);
            }
            wo_tally(&r, reason, n);
            for (int explain = 0; explain < 2; explain++) {
                if (explain && n > 20000) continue; /* protobuf-c's side gets slow */
                struct dd_filter_query q = {.user_id = "u", .user_len = 1, .scene = "", .n = n,
                                            .ids = ids, .explain = explain,
                                            .mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES};
                if (!wo_response_matches(&q, &r, idstr) && bad++ == 0)
                    fprintf(stderr, "indexes: n %zu pattern %d explain %d\n", n, pat, explain);
                /* ids mode on the same decision, for the counts that stay quick */
                q.mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS;
                if (n <= 20000 && !wo_response_matches(&q, &r, idstr) && bad++ == 0)
                    fprintf(stderr, "ids: n %zu pattern %d explain %d\n", n, pat, explain);
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
    free(reason);
    free(idstr);
    free(ids);
}

/* Kept ids of every length from 0 to 40 and around the length prefix's
 * growth (127, 128, 16,383, 16,384, and 40 more past it, more than the
 * bound's fixed slack could hide), in ids mode: copied whole, their length
 * prefixes right, the bound enough. */
static void test_response_id_lengths(void)
{
    enum { LONG = 40 };
    static const size_t extra[] = {127, 128, 129, 16383, 16384, 16385};
    enum { N = 41 + DD_ARRAY_LEN(extra) + LONG };
    static char *idstr[N];
    static struct dd_filter_id ids[N];
    static uint8_t reason[N];
    for (size_t i = 0; i < N; i++) {
        size_t l = i < 41 ? i : i < 41 + DD_ARRAY_LEN(extra) ? extra[i - 41] : 16384 + i;
        idstr[i] = malloc(l + 1);
        REQUIRE(idstr[i]);
        for (size_t j = 0; j < l; j++) idstr[i][j] = (char)('A' + (i * 7 + j) % 50);
        idstr[i][l] = '\0';
        ids[i].p = idstr[i];
        ids[i].len = l;
    }
    int bad = 0;
    for (int it = 0; it < 200; it++) {
        struct dd_filter_query q = {.user_id = "u", .user_len = 1, .scene = "", .n = N,
                                    .ids = ids, .explain = it % 2,
                                    .mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS};
        struct dd_filter_result r = {.reason = reason};
        for (size_t i = 0; i < N; i++)
            reason[i] = it == 0 || next() % 4 ? 0 : (uint8_t)(1 + next() % 3);
        wo_tally(&r, reason, N);
        if (!wo_response_matches(&q, &r, idstr)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    for (size_t i = 0; i < N; i++) free(idstr[i]);
}

/* dd_text_pb_check of W as a message of type D: 1 if it gives
 * DD_OK for WANT NULL, else DD_ERR_INVALID with the message WANT. */
static int pb_check_is(const ProtobufCMessageDescriptor *d, const struct wbuf *w, size_t len,
                       int utf8, const char *want)
{
    char why[128] = "";
    int rc = dd_text_pb_check(d, w->b, len, utf8, why, sizeof why);
    if (!want) return rc == DD_OK;
    if (rc == DD_ERR_INVALID && strcmp(why, want) == 0) return 1;
    fprintf(stderr, "pb_text_check: %d \"%s\", want \"%s\"\n", rc, why, want);
    return 0;
}

/* The other RPCs' requests, checked on their wire bytes before protobuf-c
 * unpacks them: a NUL (which protobuf-c's C string would cut at) or, when
 * asked, bad UTF-8 in any string field, nested ones included, is named;
 * clean requests and malformed ones (left to protobuf-c) pass. */
static void test_pb_text_check(void)
{
    const ProtobufCMessageDescriptor *forget = &dedup__v1__forget_user_request__descriptor,
                                     *delivery = &dedup__v1__record_delivery_request__descriptor,
                                     *plays = &dedup__v1__record_plays_request__descriptor;
    struct wbuf w = {0};
    w_field(&w, 1, "victim\0x", 8);
    w_field(&w, 2, "item-1", 6);
    CHECK(pb_check_is(forget, &w, w.len, 0, "user_id holds a NUL byte"));
    w.len = 0;
    w_field(&w, 1, "user-\xff", 6);
    CHECK(pb_check_is(forget, &w, w.len, 0, NULL));
    CHECK(pb_check_is(forget, &w, w.len, 1, "user_id is not valid UTF-8"));
    w.len = 0;
    w_field(&w, 1, "u", 1);
    w_field(&w, 2, "a", 1);
    w_field(&w, 2, "b\0c", 3);
    CHECK(pb_check_is(delivery, &w, w.len, 1, "item_ids[1] holds a NUL byte"));
    /* RecordPlays: plays[1].item_id, inside a nested Play. */
    w.len = 0;
    struct wbuf play = {0};
    w_field(&play, 1, "ok", 2);
    w_bytes(&play, "\x10\x05", 2); /* played_at_ms 5 */
    w_field(&w, 1, "u", 1);
    w_field(&w, 2, play.b, play.len);
    play.len = 0;
    w_field(&play, 1, "\xe2\x82", 2);
    w_field(&w, 2, play.b, play.len);
    w_field(&w, 3, "feed", 4);
    CHECK(pb_check_is(plays, &w, w.len, 1, "plays[1].item_id is not valid UTF-8"));
    /* A bulk load's call: 5,000 plays, the bad one named by its index
     * wherever it is; a field after them by its own name; the message cut
     * to WHY's size as snprintf cuts it. */
    for (int bad = 0; bad < 3; bad++) {
        w.len = 0;
        w_field(&w, 1, "u", 1);
        for (int i = 0; i < 5000; i++) {
            const char *id = "ok";
            size_t id_len = 2;
            if (bad == 0 && i == 4321) id = "x\0y", id_len = 3;
            if (bad == 1 && i == 4999) id = "\xff", id_len = 1;
            play.len = 0;
            w_field(&play, 1, id, id_len);
            w_bytes(&play, "\x10\x05", 2);
            w_field(&w, 2, play.b, play.len);
        }
        w_field(&w, 3, bad == 2 ? "fe\0d" : "feed", 4);
        static const char *const want[] = {"plays[4321].item_id holds a NUL byte",
                                           "plays[4999].item_id is not valid UTF-8",
                                           "scene holds a NUL byte"};
        CHECK(pb_check_is(plays, &w, w.len, 1, want[bad]));
        CHECK(pb_check_is(plays, &w, w.len, 0, bad == 1 ? NULL : want[bad]));
        char cut[12] = "";
        CHECK_EQ_INT(dd_text_pb_check(plays, w.b, w.len, 1, cut, sizeof cut), DD_ERR_INVALID);
        CHECK_STR(cut, bad == 2 ? "scene holds" : bad ? "plays[4999]" : "plays[4321]");
    }
    /* Clean, 5,000 plays (the last round's scene made text): passed. */
    memcpy(w.b + w.len - 4, "feed", 4);
    CHECK(pb_check_is(plays, &w, w.len, 1, NULL));
    /* Clean, and truncated (protobuf-c's to reject): passed. */
    w.len = 0;
    w_field(&w, 1, "\xc3\xa9l\xc3\xa8ve", 7);
    w_field(&w, 2, "x", 1);
    w_bytes(&w, "\x20\x01", 2);
    for (size_t l = 0; l <= w.len; l++) CHECK(pb_check_is(delivery, &w, l, 1, NULL));
    free(w.b);
    free(play.b);
}

/* dd_wire_count_field counts a repeated field on the wire, stops past
 * MAX, and stops at a malformed field. */
static void test_count_field(void)
{
    /* RecordPlaysRequest: user_id "u", then empty plays (0x12 0x00),
     * scene "s" in between. */
    uint8_t m[64];
    size_t n = 0;
    m[n++] = 0x0a; m[n++] = 1; m[n++] = 'u';
    for (int i = 0; i < 5; i++) { m[n++] = 0x12; m[n++] = 0; }
    m[n++] = 0x1a; m[n++] = 1; m[n++] = 's';
    for (int i = 0; i < 3; i++) { m[n++] = 0x12; m[n++] = 2; m[n++] = 0x0a; m[n++] = 0; }
    CHECK_EQ_INT(dd_wire_count_field(m, n, 2, 100), 8);
    CHECK_EQ_INT(dd_wire_count_field(m, n, 1, 100), 1);
    CHECK_EQ_INT(dd_wire_count_field(m, n, 7, 100), 0);
    CHECK_EQ_INT(dd_wire_count_field(m, n, 2, 8), 8);
    CHECK_EQ_INT(dd_wire_count_field(m, n, 2, 7), 8);  /* past MAX: MAX + 1 */
    CHECK_EQ_INT(dd_wire_count_field(m, n, 2, 3), 4);
    CHECK_EQ_INT(dd_wire_count_field(m, n, 2, 0), 1);
    CHECK_EQ_INT(dd_wire_count_field(m, 0, 2, 10), 0);
    /* A length past the end stops the count where it is. */
    uint8_t bad[] = {0x12, 0, 0x12, 0, 0x12, 9, 'x'};
    CHECK_EQ_INT(dd_wire_count_field(bad, sizeof bad, 2, 10), 2);
    /* A nested field 2 (inside a play) is not counted. */
    uint8_t nested[] = {0x12, 2, 0x10, 5};
    CHECK_EQ_INT(dd_wire_count_field(nested, sizeof nested, 2, 10), 1);
}

/* The user id a cluster routes by: the last occurrence of field 1, found
 * without decoding the rest; absent, malformed before it, or of another
 * wire type is NOTFOUND (the decoder that follows rejects the message or
 * sees an empty id). Checked against protobuf-c on the same bytes. */
static void test_bytes_field(void)
{
    const uint8_t *v;
    size_t n;
    static const uint8_t one[] = {0x0a, 2, 'u', '1', 0x12, 1, 'a', 0x12, 1, 'b'};
    CHECK_EQ_INT(dd_wire_bytes_field(one, sizeof one, 1, &v, &n), DD_OK);
    CHECK(n == 2 && memcmp(v, "u1", 2) == 0);
    static const uint8_t last[] = {0x0a, 1, 'x', 0x12, 1, 'a', 0x0a, 3, 'y', 'y', 'y'};
    CHECK_EQ_INT(dd_wire_bytes_field(last, sizeof last, 1, &v, &n), DD_OK);
    CHECK(n == 3 && memcmp(v, "yyy", 3) == 0);
    Dedup__V1__FilterRequest *req = dedup__v1__filter_request__unpack(NULL, sizeof last, last);
    REQUIRE(req);
    CHECK_STR(req->user_id, "yyy");
    dedup__v1__filter_request__free_unpacked(req, NULL);
    static const uint8_t none[] = {0x12, 1, 'a', 0x20, 3};
    CHECK_EQ_INT(dd_wire_bytes_field(none, sizeof none, 1, &v, &n), DD_ERR_NOTFOUND);
    static const uint8_t varint[] = {0x08, 1};
    CHECK_EQ_INT(dd_wire_bytes_field(varint, sizeof varint, 1, &v, &n), DD_ERR_NOTFOUND);
    static const uint8_t cut[] = {0x0a, 5, 'u'};
    CHECK_EQ_INT(dd_wire_bytes_field(cut, sizeof cut, 1, &v, &n), DD_ERR_NOTFOUND);
    static const uint8_t after_bad[] = {0x0a, 1, 'u', 0x4e, 0};
    CHECK_EQ_INT(dd_wire_bytes_field(after_bad, sizeof after_bad, 1, &v, &n), DD_ERR_NOTFOUND);
    CHECK_EQ_INT(dd_wire_bytes_field(NULL, 0, 1, &v, &n), DD_ERR_NOTFOUND);
}

/* A replica's FilterResponse marked degraded: protobuf-c reads the same
 * answer with degraded = true, whether the replica said degraded or not,
 * and for the empty response (every field at its default). */
static void test_response_mark_degraded(void)
{
    static char *kept[] = {"a", "bb", "ccc"};
    uint32_t idx[] = {0, 7, 300};
    for (int mode = 0; mode < 3; mode++) {
        for (int was = 0; was < 2; was++) {
            Dedup__V1__FilterResponse in = DEDUP__V1__FILTER_RESPONSE__INIT;
            if (mode == 1) {
                in.n_kept_ids = 3;
                in.kept_ids = kept;
            } else if (mode == 2) {
                in.n_kept_indexes = 3;
                in.kept_indexes = idx;
            }
            in.degraded = was;
            in.removed_played = 5;
            in.removed_duplicate = mode;
            size_t len = protobuf_c_message_get_packed_size(&in.base);
            uint8_t buf[256], out[256 + DD_WIRE_DEGRADED_MARK];
            REQUIRE(len <= sizeof buf);
            protobuf_c_message_pack(&in.base, buf);
            size_t n = dd_wire_filter_response_mark_degraded(buf, len, out);
            CHECK_EQ_INT((int)n, (int)(len + DD_WIRE_DEGRADED_MARK));
            CHECK(memcmp(out, buf, len) == 0);
            Dedup__V1__FilterResponse *r = dedup__v1__filter_response__unpack(NULL, n, out);
            REQUIRE(r);
            CHECK(r->degraded);
            CHECK_EQ_INT((int)r->n_kept_ids, (int)in.n_kept_ids);
            for (size_t i = 0; i < r->n_kept_ids; i++) CHECK_STR(r->kept_ids[i], kept[i]);
            CHECK_EQ_INT((int)r->n_kept_indexes, (int)in.n_kept_indexes);
            for (size_t i = 0; i < r->n_kept_indexes; i++)
                CHECK_EQ_INT((int)r->kept_indexes[i], (int)idx[i]);
            CHECK_EQ_INT((int)r->removed_played, 5);
            CHECK_EQ_INT((int)r->removed_duplicate, mode);
            dedup__v1__filter_response__free_unpacked(r, NULL);
        }
    }
}

/* A fixed64 field NUM holding V, unpacked (wire type 1). */
static void w_fixed64(struct wbuf *w, unsigned num, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    w_varint(w, (uint64_t)num << 3 | 1);
    w_bytes(w, b, 8);
}

/* Packed fixed64 field NUM holding the N values of V. */
static void w_packed64(struct wbuf *w, unsigned num, const uint64_t *v, size_t n)
{
    w_varint(w, (uint64_t)num << 3 | 2);
    w_varint(w, 8 * n);
    for (size_t k = 0; k < n; k++) {
        uint8_t b[8];
        for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v[k] >> (8 * i));
        w_bytes(w, b, 8);
    }
}

/* candidate_hashes (7): packed, unpacked and both mixed, read in order as
 * protobuf-c reads them; answered by index whatever mode says; counted
 * past the limit like ids; both lists at once refused naming both; a
 * packed field that is not a whole number of hashes, or another wire
 * type, rejected as protobuf-c does; mutations agree with protobuf-c. */
static void test_candidate_hashes(void)
{
    uint64_t hv[300];
    for (size_t i = 0; i < DD_ARRAY_LEN(hv); i++) hv[i] = next();
    hv[7] = hv[3]; /* a duplicate is the filter's business, not the decoder's */
    for (int form = 0; form < 3; form++) { /* packed, unpacked, mixed */
        struct wbuf w = {0};
        w_field(&w, 1, "user-9", 6);
        w_varint(&w, 5 << 3), w_varint(&w, 0); /* mode ids: ignored */
        if (form == 0) {
            w_packed64(&w, 7, hv, 200);
            w_packed64(&w, 7, hv + 200, 100);
        } else {
            for (size_t i = 0; i < 300; i++) {
                if (form == 2 && i % 50 == 10) {
                    w_packed64(&w, 7, hv + i, 20);
                    i += 19;
                } else {
                    w_fixed64(&w, 7, hv[i]);
                }
            }
        }
        w_field(&w, 3, "feed", 4);
        w_bytes(&w, "\x30\x01", 2); /* explain */
        CHECK_MSG(agree(w.b, w.len, 1), "form %d", form);
        dd_arena_reset(arena);
        struct dd_filter_query q;
        REQUIRE(decode(w.b, w.len, SIZE_MAX, &q) == DD_OK);
        CHECK(q.by_hash && q.n == 300 && q.ids == NULL && q.hashes);
        CHECK(q.hashes && memcmp(q.hashes, hv, sizeof hv) == 0);
        CHECK_EQ_INT(q.mode, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES);
        CHECK(q.explain && q.scene_len == 4);
        /* Over the limit: counted, not kept. */
        dd_arena_reset(arena);
        REQUIRE(decode(w.b, w.len, 299, &q) == DD_OK);
        CHECK(q.by_hash && q.n == 300 && q.hashes == NULL && q.ids == NULL);
        CHECK(agree_max(w.b, w.len, 299, 1));
        /* Every truncation and some mutations agree with protobuf-c. */
        int bad = 0;
        for (size_t t = 0; t < w.len; t++)
            if (!agree(w.b, t, bad == 0)) bad++;
        uint8_t *m = malloc(w.len);
        REQUIRE(m);
        for (int it = 0; it < 5000; it++) {
            memcpy(m, w.b, w.len);
            for (int f = 0; f < 1 + (int)(next() % 3); f++) m[next() % w.len] = (uint8_t)next();
            if (!agree(m, w.len, bad == 0)) bad++;
        }
        CHECK_EQ_INT(bad, 0);
        free(m);
        /* With a candidate id as well: refused, naming both fields. */
        w_field(&w, 2, "video-1", 7);
        CHECK(agree(w.b, w.len, 1));
        char why[128] = "";
        dd_arena_reset(arena);
        CHECK_EQ_INT(dd_wire_filter_request_decode(w.b, w.len, arena, SIZE_MAX, &q, why,
                                                   sizeof why),
                     DD_ERR_INVALID);
        CHECK_STR(why, "candidate_ids and candidate_hashes are both set; send one of them");
        free(w.b);
    }
    static const uint8_t odd[][12] = {
        {3, 0x3a, 1, 0x00},                 /* packed, 1 byte: not a whole hash */
        {11, 0x3a, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9}, /* packed, 9 bytes */
        {2, 0x38, 0x01},                    /* as a varint */
        {5, 0x3d, 1, 2, 3, 4},              /* as 32-bit */
        {5, 0x39, 1, 2, 3, 4},              /* 64-bit, cut short */
        {2, 0x3a, 0x00},                    /* packed, empty: no hashes */
    };
    for (size_t e = 0; e < DD_ARRAY_LEN(odd); e++) {
        struct wbuf w = {0};
        w_field(&w, 1, "u", 1);
        w_bytes(&w, odd[e] + 1, odd[e][0]);
        CHECK_MSG(agree(w.b, w.len, 1), "odd hash field %zu", e);
        struct dd_filter_query q;
        dd_arena_reset(arena);
        int rc = decode(w.b, w.len, SIZE_MAX, &q);
        CHECK_EQ_INT(rc, e == 5 ? DD_OK : DD_ERR_INVALID);
        if (e == 5) CHECK(!q.by_hash && q.n == 0);
        free(w.b);
    }
}

int main(void)
{
    arena = dd_arena_new(0, 0);
    REQUIRE(arena);
    test_valid_and_truncated();
    test_garbage();
    test_unknown_and_odd_fields();
    test_min_kept_also_scenes();
    test_long_length_prefix();
    test_response_bytes();
    test_response_large();
    test_id_lengths_and_nuls();
    test_text_check();
    test_request_utf8();
    test_hostile_linear();
    test_pb_text_check();
    test_large_random();
    test_large_garbage();
    test_response_index_boundaries();
    test_response_id_lengths();
    test_count_field();
    test_bytes_field();
    test_response_mark_degraded();
    test_candidate_hashes();
    dd_arena_free(arena);
    TEST_MAIN_END();
}
