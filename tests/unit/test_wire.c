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
#include "wire.h"

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

/* Decode BUF both ways; 1 if they agree (both reject, or both accept
 * with the same content). */
static int agree(const uint8_t *buf, size_t len, int verbose)
{
    dd_arena_reset(arena);
    Dedup__V1__FilterRequest *pb = dedup__v1__filter_request__unpack(NULL, len, buf);
    struct dd_filter_query q;
    int rc = dd_wire_filter_request_decode(buf, len, arena, SIZE_MAX, &q);
    int ok = 1;
    if (!pb) {
        ok = rc == DD_ERR_INVALID;
        if (!ok && verbose) fprintf(stderr, "protobuf-c rejects, wire gives %d\n", rc);
        return ok;
    }
    if (rc != DD_OK) {
        if (verbose) fprintf(stderr, "protobuf-c accepts, wire gives %d\n", rc);
        dedup__v1__filter_request__free_unpacked(pb, NULL);
        return 0;
    }
    if (q.user_len != strlen(pb->user_id) || memcmp(q.user_id, pb->user_id, q.user_len) != 0)
        ok = 0;
    if (q.scene_len != strlen(pb->scene) || memcmp(q.scene, pb->scene, q.scene_len) != 0) ok = 0;
    if (q.lookback_days != pb->lookback_days || q.mode != (int32_t)pb->mode ||
        !q.explain != !pb->explain || q.n != pb->n_candidate_ids)
        ok = 0;
    for (size_t i = 0; ok && i < q.n; i++) {
        const char *id = pb->candidate_ids[i];
        if (q.ids[i].len != strlen(id) || memcmp(q.ids[i].p, id, q.ids[i].len) != 0) ok = 0;
    }
    if (!ok && verbose) fprintf(stderr, "decoded contents differ\n");
    dedup__v1__filter_request__free_unpacked(pb, NULL);
    return ok;
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
        CHECK_EQ_INT(dd_wire_filter_request_decode(b, len, arena, SIZE_MAX, &q), DD_OK);
        CHECK_EQ_INT(q.n, sizes[s]);
        CHECK_EQ_INT(q.lookback_days, 30);
        CHECK_EQ_INT(q.explain, 1);
        CHECK(q.user_len == 7 && memcmp(q.user_id, "user-42", 7) == 0);
        /* Over the limit: counted, ids not decoded. */
        if (sizes[s] > 1) {
            CHECK_EQ_INT(dd_wire_filter_request_decode(b, len, arena, 1, &q), DD_OK);
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
    /* The last-wins and NUL cases, checked by value, not only agreement. */
    struct dd_filter_query q;
    memcpy(m, b, len);
    memcpy(m + len, "\x0a\x01z\x20\xff\x01\x12\x02" "a\0", 10);
    dd_arena_reset(arena);
    CHECK_EQ_INT(dd_wire_filter_request_decode(m, len + 10, arena, SIZE_MAX, &q), DD_OK);
    CHECK(q.user_len == 1 && q.user_id[0] == 'z');
    CHECK_EQ_INT(q.lookback_days, 255);
    CHECK_EQ_INT(q.n, 4);
    CHECK(q.ids[3].len == 1 && q.ids[3].p[0] == 'a');
    free(m);
    free(b);
    free_ids(ids, 3);
}

/* The response dd_filter_run would build for Q and R. */
static void build_response(const struct dd_filter_query *q, const struct dd_filter_result *r,
                           char **idstr, Dedup__V1__FilterResponse *resp,
                           Dedup__V1__Removed *rm, Dedup__V1__Removed **rmp, uint32_t *idx,
                           char **kept)
{
    dedup__v1__filter_response__init(resp);
    if (q->mode == DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS) resp->kept_ids = kept;
    else resp->kept_indexes = idx;
    if (q->explain) resp->removed = rmp;
    for (size_t i = 0; i < q->n; i++) {
        if (r->reason[i] == 0) {
            if (resp->kept_ids) resp->kept_ids[resp->n_kept_ids++] = idstr[i];
            else resp->kept_indexes[resp->n_kept_indexes++] = (uint32_t)i;
        } else if (q->explain) {
            Dedup__V1__Removed *x = &rm[resp->n_removed];
            dedup__v1__removed__init(x);
            x->index = (uint32_t)i;
            x->reason = (Dedup__V1__Reason)r->reason[i];
            resp->removed[resp->n_removed++] = x;
        }
    }
    resp->degraded = r->degraded;
    resp->removed_played = r->played;
    resp->removed_delivered = r->delivered;
    resp->removed_duplicate = r->duplicate;
}

static void test_response_bytes(void)
{
    enum { N = 300 };
    static char *idstr[N];
    static struct dd_filter_id ids[N];
    static uint8_t reason[N];
    static Dedup__V1__Removed rm[N];
    static Dedup__V1__Removed *rmp[N];
    static uint32_t idx[N];
    static char *kept[N];
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
        for (size_t i = 0; i < q.n; i++) {
            reason[i] = (int)(next() % 4) < density ? (uint8_t)(1 + next() % 3) : 0;
            if (reason[i] == 1) r.played++;
            else if (reason[i] == 2) r.delivered++;
            else if (reason[i] == 3) r.duplicate++;
            else r.kept++;
        }
        r.degraded = (int)(next() % 2);
        Dedup__V1__FilterResponse resp;
        build_response(&q, &r, idstr, &resp, rm, rmp, idx, kept);
        size_t want = dedup__v1__filter_response__get_packed_size(&resp);
        size_t bound = dd_wire_filter_response_bound(&q, &r);
        /* Exactly the bound: ASan catches a write past it. */
        uint8_t *a = malloc(want + 1), *b = malloc(bound);
        REQUIRE(a && b);
        dedup__v1__filter_response__pack(&resp, a);
        size_t size = dd_wire_filter_response_size(&q, &r);
        size_t wrote = bound >= want ? dd_wire_filter_response_write(&q, &r, b) : 0;
        if (size != want || wrote != want || memcmp(a, b, want) != 0) {
            if (bad++ == 0)
                fprintf(stderr, "response differs: n %zu mode %d explain %d: size %zu bound %zu "
                        "wrote %zu want %zu\n", q.n, q.mode, q.explain, size, bound, wrote, want);
        }
        free(a);
        free(b);
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
    static Dedup__V1__Removed rm[N];
    static Dedup__V1__Removed *rmp[N];
    static uint32_t idx[N];
    static char *kept[N];
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
        for (size_t i = 0; i < N; i++) {
            reason[i] = (uint8_t)(next() % 5 == 0 ? 1 + next() % 3 : 0);
            if (reason[i] == 1) r.played++;
            else if (reason[i] == 2) r.delivered++;
            else if (reason[i] == 3) r.duplicate++;
            else r.kept++;
        }
        Dedup__V1__FilterResponse resp;
        build_response(&q, &r, idstr, &resp, rm, rmp, idx, kept);
        size_t want = dedup__v1__filter_response__get_packed_size(&resp);
        size_t bound = dd_wire_filter_response_bound(&q, &r);
        uint8_t *a = malloc(want), *b = malloc(bound);
        REQUIRE(a && b && bound >= want);
        dedup__v1__filter_response__pack(&resp, a);
        CHECK_EQ_INT(dd_wire_filter_response_write(&q, &r, b), want);
        CHECK(memcmp(a, b, want) == 0);
        free(a);
        free(b);
    }
}

int main(void)
{
    arena = dd_arena_new(0, 0);
    REQUIRE(arena);
    test_valid_and_truncated();
    test_garbage();
    test_unknown_and_odd_fields();
    test_response_bytes();
    test_response_large();
    dd_arena_free(arena);
    TEST_MAIN_END();
}
