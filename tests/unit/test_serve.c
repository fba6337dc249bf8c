/* SPDX-License-Identifier: Apache-2.0
 *
 * test_serve.c - serve.h without a server: a request's bytes read through
 * grpc's public byte buffer reader (one slice in place, several copied
 * into the arena, none), so that a grpc whose reader behaves otherwise
 * fails here rather than in a call; dd
 * codes to gRPC statuses; a Dedup request refused on the wire.
 */
#include "arena.h"
#include "dd.h"
#include "serve.h"
#include "testlib.h"

#include "dedup.pb-c.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include <string.h>

static dd_arena *arena;

/* One slice: read in place (the pointer is the slice's own bytes, held by
 * a reference that outlives the buffer). */
static void test_one_slice(void)
{
    char text[200];
    memset(text, 'x', sizeof text); /* over grpc's inline size: a refcounted slice */
    grpc_slice sl = grpc_slice_from_copied_buffer(text, sizeof text);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    REQUIRE(bb);
    grpc_slice hold = grpc_empty_slice();
    const uint8_t *data = NULL;
    size_t len = 0;
    char msg[128] = "";
    CHECK_EQ_INT(dd_serve_request(arena, bb, &hold, &data, &len, msg, sizeof msg),
                 GRPC_STATUS_OK);
    CHECK_EQ_INT((int)len, (int)sizeof text);
    CHECK(data == GRPC_SLICE_START_PTR(sl)); /* in place, no copy */
    grpc_slice_unref(sl);
    grpc_byte_buffer_destroy(bb);
    /* The reference keeps the bytes after the buffer is gone. */
    CHECK(memcmp(data, text, sizeof text) == 0);
    grpc_slice_unref(hold);

    /* A small slice grpc keeps inline: the bytes are the held copy's. */
    sl = grpc_slice_from_copied_string("abc");
    bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    hold = grpc_empty_slice();
    CHECK_EQ_INT(dd_serve_request(arena, bb, &hold, &data, &len, msg, sizeof msg),
                 GRPC_STATUS_OK);
    grpc_byte_buffer_destroy(bb);
    CHECK_EQ_INT((int)len, 3);
    CHECK(memcmp(data, "abc", 3) == 0);
    grpc_slice_unref(hold);
}

/* Several slices: copied once into the arena, in order; the hold is
 * released and left empty. None: an empty request. */
static void test_slices(void)
{
    grpc_slice sl[3] = {grpc_slice_from_copied_string("first slice, "),
                        grpc_slice_from_copied_string("second, "),
                        grpc_slice_from_copied_string("and the third")};
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(sl, 3);
    for (int i = 0; i < 3; i++) grpc_slice_unref(sl[i]);
    grpc_slice hold = grpc_slice_from_copied_string("a previous call's hold, released");
    const uint8_t *data = NULL;
    size_t len = 0;
    char msg[128] = "";
    CHECK_EQ_INT(dd_serve_request(arena, bb, &hold, &data, &len, msg, sizeof msg),
                 GRPC_STATUS_OK);
    grpc_byte_buffer_destroy(bb);
    const char *want = "first slice, second, and the third";
    CHECK_EQ_INT((int)len, (int)strlen(want));
    CHECK(memcmp(data, want, len) == 0);
    CHECK(GRPC_SLICE_IS_EMPTY(hold));

    bb = grpc_raw_byte_buffer_create(NULL, 0);
    CHECK_EQ_INT(dd_serve_request(arena, bb, &hold, &data, &len, msg, sizeof msg),
                 GRPC_STATUS_OK);
    CHECK_EQ_INT((int)len, 0);
    CHECK(data != NULL);
    grpc_byte_buffer_destroy(bb);
    grpc_slice_unref(hold);
}

static void test_status_of(void)
{
    CHECK_EQ_INT(dd_serve_status_of(DD_OK), GRPC_STATUS_OK);
    CHECK_EQ_INT(dd_serve_status_of(DD_ERR_INVALID), GRPC_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_INT(dd_serve_status_of(DD_ERR_LIMIT), GRPC_STATUS_RESOURCE_EXHAUSTED);
    CHECK_EQ_INT(dd_serve_status_of(DD_ERR_NOMEM), GRPC_STATUS_RESOURCE_EXHAUSTED);
    CHECK_EQ_INT(dd_serve_status_of(DD_ERR_UNAVAILABLE), GRPC_STATUS_UNAVAILABLE);
    CHECK_EQ_INT(dd_serve_status_of(DD_ERR_CORRUPT), GRPC_STATUS_UNAVAILABLE);
    CHECK_EQ_INT(dd_serve_status_of(DD_ERR_TIMEOUT), GRPC_STATUS_DEADLINE_EXCEEDED);
    CHECK_EQ_INT(dd_serve_status_of(DD_ERR_IO), GRPC_STATUS_INTERNAL);
}

/* Refusals that come before any store is touched (no filter or record is
 * needed): too many items counted on the wire, bad text, an unknown
 * method, Cluster/Status on a single node, health. */
static void test_refusals(void)
{
    char msg[256] = "";
    struct dd_serve sv = {.arena = arena, .max_candidates = 2, .msg = msg, .msglen = sizeof msg};
    grpc_byte_buffer *reply = NULL;
    bool damaged = true;
    /* RecordDeliveryRequest{user_id "u", item_ids "a","b","c"} */
    static const uint8_t three[] = {0x0a, 1, 'u', 0x12, 1, 'a', 0x12, 1, 'b', 0x12, 1, 'c'};
    CHECK_EQ_INT(dd_serve_call(&sv, DD_API_RECORD_DELIVERY, three, sizeof three, 0, false, false,
                               false, &damaged, &reply),
                 GRPC_STATUS_RESOURCE_EXHAUSTED);
    CHECK(strstr(msg, "rpc.max_candidates=2") != NULL);
    CHECK(!damaged && !reply);
    /* ForgetUserRequest{user_id "u\0"}: a NUL is refused on the wire. */
    static const uint8_t nul[] = {0x0a, 2, 'u', 0};
    CHECK_EQ_INT(dd_serve_call(&sv, DD_API_FORGET_USER, nul, sizeof nul, 0, false, false, false,
                               &damaged, &reply),
                 GRPC_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_INT(dd_serve_call(&sv, DD_API_UNKNOWN, nul, 0, 0, false, false, false, &damaged,
                               &reply),
                 GRPC_STATUS_UNIMPLEMENTED);
    CHECK_EQ_INT(dd_serve_call(&sv, DD_API_CLUSTER_STATUS, nul, 0, 0, false, false, false,
                               &damaged, &reply),
                 GRPC_STATUS_UNIMPLEMENTED);
    CHECK(!reply);
    CHECK_EQ_INT(dd_serve_call(&sv, DD_API_HEALTH_CHECK, nul, 0, 0, false, true, true, &damaged,
                               &reply),
                 GRPC_STATUS_OK);
    CHECK(reply != NULL);
    if (reply) grpc_byte_buffer_destroy(reply);
    dd_arena_reset(arena);
}

static int32_t eight(void *ud)
{
    (void)ud;
    return 8;
}

static int64_t lag(void *ud)
{
    return *(int64_t *)ud;
}

/* ClusterMap on a single node: one shard of one replica, itself, with
 * what dd_serve_single says and the readiness the caller passes; a
 * request that is not a ClusterMapRequest is refused. */
static void test_cluster_map_single(void)
{
    char msg[256] = "";
    int64_t lag_ms = 42;
    struct dd_serve_single single = {.map_hash = "00112233aabbccdd",
                                     .partitioner = "fnv1a",
                                     .address = "127.0.0.1:7000",
                                     .partitions = eight,
                                     .lag_ms = lag,
                                     .ud = &lag_ms};
    struct dd_serve sv = {.arena = arena, .single = &single, .msg = msg, .msglen = sizeof msg};
    grpc_byte_buffer *reply = NULL;
    bool damaged = false;
    for (int up = 0; up < 2; up++) {
        CHECK_EQ_INT(dd_serve_call(&sv, DD_API_CLUSTER_MAP, (const uint8_t *)"", 0, 0, false, up,
                                   true, &damaged, &reply),
                     GRPC_STATUS_OK);
        REQUIRE(reply);
        grpc_byte_buffer_reader r;
        REQUIRE(grpc_byte_buffer_reader_init(&r, reply));
        grpc_slice all = grpc_byte_buffer_reader_readall(&r);
        grpc_byte_buffer_reader_destroy(&r);
        Dedup__V1__ClusterMapResponse *m = dedup__v1__cluster_map_response__unpack(
            NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
        REQUIRE(m);
        CHECK_STR(m->map_hash, "00112233aabbccdd");
        CHECK_STR(m->partitioner, "fnv1a");
        CHECK_EQ_INT(m->partition_count, 8);
        CHECK_EQ_INT(m->split_from, 0);
        REQUIRE(m->n_shards == 1 && m->shards[0]->n_replicas == 1);
        CHECK_EQ_INT(m->shards[0]->shard, 0);
        const Dedup__V1__ReplicaInfo *ri = m->shards[0]->replicas[0];
        CHECK_STR(ri->address, "127.0.0.1:7000");
        CHECK(ri->self && ri->replica == 0 && ri->lag_ms == 42);
        CHECK_EQ_INT(ri->ready, up);
        dedup__v1__cluster_map_response__free_unpacked(m, NULL);
        grpc_slice_unref(all);
        grpc_byte_buffer_destroy(reply);
        reply = NULL;
        dd_arena_reset(arena);
    }
    static const uint8_t group[] = {0x0b};
    CHECK_EQ_INT(dd_serve_call(&sv, DD_API_CLUSTER_MAP, group, sizeof group, 0, false, true, true,
                               &damaged, &reply),
                 GRPC_STATUS_INVALID_ARGUMENT);
    CHECK(!reply);
    dd_arena_reset(arena);
}

int main(void)
{
    grpc_init();
    arena = dd_arena_new(0, 0);
    REQUIRE(arena);
    test_one_slice();
    test_slices();
    test_status_of();
    test_refusals();
    test_cluster_map_single();
    dd_arena_free(arena);
    grpc_shutdown();
    TEST_MAIN_END();
}
