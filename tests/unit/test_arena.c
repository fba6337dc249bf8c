/* SPDX-License-Identifier: Apache-2.0
 *
 * test_arena.c - arena.h: allocations are 8-byte aligned, distinct and
 * writable, zero-size ones unique; calloc zeroes and refuses overflow; a
 * call that needed several chunks leaves one chunk that serves the same
 * call again without growing; past the retain limit a reset goes back to
 * the initial size; protobuf-c messages unpack through the arena's
 * allocator and are freed by the reset.
 */
#include "arena.h"
#include "dd.h"
#include "dedup.pb-c.h"
#include "testlib.h"

#include <stdint.h>
#include <string.h>

static void test_alloc(void)
{
    dd_arena *a = dd_arena_new(256, 0);
    REQUIRE(a);
    char *prev = NULL;
    for (size_t size = 0; size < 100; size++) {
        char *p = dd_arena_alloc(a, size);
        REQUIRE(p);
        CHECK(((uintptr_t)p & 7) == 0);
        CHECK(p != prev);
        memset(p, 0xab, size);
        prev = p;
    }
    CHECK(dd_arena_chunks(a) > 1);      /* 256 bytes could not hold it all */
    CHECK(dd_arena_alloc(a, SIZE_MAX) == NULL);
    CHECK(dd_arena_alloc(a, SIZE_MAX - 3) == NULL);
    CHECK(dd_arena_alloc(a, 8) != NULL); /* still usable after a refusal */
    dd_arena_free(a);
    dd_arena_free(NULL);
}

static void test_calloc(void)
{
    dd_arena *a = dd_arena_new(64, 0);
    REQUIRE(a);
    unsigned char *p = dd_arena_alloc(a, 1000);
    REQUIRE(p);
    memset(p, 0xff, 1000);
    dd_arena_reset(a); /* the same bytes may come back: calloc must zero them */
    unsigned char *z = dd_arena_calloc(a, 250, 4);
    REQUIRE(z);
    int zero = 1;
    for (size_t i = 0; i < 1000; i++) zero &= z[i] == 0;
    CHECK(zero);
    CHECK(dd_arena_calloc(a, SIZE_MAX / 2, 4) == NULL);
    CHECK(dd_arena_calloc(a, 0, 16) != NULL);
    dd_arena_free(a);
}

static void test_reset_keeps_one_chunk(void)
{
    dd_arena *a = dd_arena_new(1024, 1 << 20);
    REQUIRE(a);
    for (int i = 0; i < 50; i++) REQUIRE(dd_arena_alloc(a, 1000));
    size_t used = dd_arena_used(a);
    CHECK_EQ_INT(used, 50 * 1000);
    CHECK(dd_arena_chunks(a) > 1);
    dd_arena_reset(a);
    CHECK_EQ_INT(dd_arena_used(a), 0);
    CHECK_EQ_INT(dd_arena_chunks(a), 1);
    /* The same call again fits the one chunk. */
    for (int i = 0; i < 50; i++) REQUIRE(dd_arena_alloc(a, 1000));
    CHECK_EQ_INT(dd_arena_chunks(a), 1);
    dd_arena_free(a);
}

static void test_retain_limit(void)
{
    dd_arena *a = dd_arena_new(1024, 4096);
    REQUIRE(a);
    REQUIRE(dd_arena_alloc(a, 100000));
    dd_arena_reset(a);
    CHECK_EQ_INT(dd_arena_chunks(a), 1);
    /* Back to the initial chunk: 2,000 bytes do not fit in it. */
    REQUIRE(dd_arena_alloc(a, 1000));
    CHECK_EQ_INT(dd_arena_chunks(a), 1);
    REQUIRE(dd_arena_alloc(a, 1000));
    CHECK_EQ_INT(dd_arena_chunks(a), 2);
    dd_arena_free(a);
}

static void test_protobuf_allocator(void)
{
    Dedup__V1__FilterRequest req = DEDUP__V1__FILTER_REQUEST__INIT;
    char *cands[] = {"v1", "v2", "v3"};
    req.user_id = "alice";
    req.n_candidate_ids = 3;
    req.candidate_ids = cands;
    size_t len = dedup__v1__filter_request__get_packed_size(&req);
    uint8_t buf[256];
    REQUIRE(len <= sizeof buf);
    dedup__v1__filter_request__pack(&req, buf);

    dd_arena *a = dd_arena_new(0, 0);
    REQUIRE(a);
    Dedup__V1__FilterRequest *m =
        dedup__v1__filter_request__unpack(dd_arena_allocator(a), len, buf);
    REQUIRE(m);
    CHECK_STR(m->user_id, "alice");
    CHECK_EQ_INT(m->n_candidate_ids, 3);
    CHECK_STR(m->candidate_ids[2], "v3");
    CHECK(dd_arena_used(a) > 0);
    dd_arena_reset(a); /* frees the message: no *_free_unpacked */
    CHECK_EQ_INT(dd_arena_used(a), 0);
    dd_arena_free(a);
}

int main(void)
{
    test_alloc();
    test_calloc();
    test_reset_keeps_one_chunk();
    test_retain_limit();
    test_protobuf_allocator();
    TEST_MAIN_END();
}
