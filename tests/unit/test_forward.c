/* SPDX-License-Identifier: Apache-2.0
 *
 * test_forward.c - forward.h without a cluster: which metadata makes a
 * call a forwarded one (every header the cluster sends is "dedupd-..."),
 * and which calls with one are forwarded calls (auth.h,
 * dd_auth_forwarded): a Dedup call's, judged by the peers' list;
 * Health/Check stays open, the Cluster service is the peers' anyway.
 */
#include "api.h"
#include "auth.h"
#include "forward.h"
#include "testlib.h"

#include <grpc/grpc.h>
#include <grpc/slice.h>

static bool has(const char *key)
{
    grpc_metadata md[2];
    md[0].key = grpc_slice_from_static_string("user-agent");
    md[0].value = grpc_slice_from_static_string("grpc-c");
    md[1].key = grpc_slice_from_static_string(key);
    md[1].value = grpc_slice_from_static_string("0.1");
    grpc_metadata_array a = {.count = 2, .capacity = 2, .metadata = md};
    return dd_forward_has_header(&a);
}

static void test_header(void)
{
    CHECK(has(DD_CLUSTER_MD_FROM));
    CHECK(has(DD_CLUSTER_MD_MAP));
    CHECK(has(DD_CLUSTER_MD_SPLIT));
    CHECK(has(DD_CLUSTER_MD_HOP2));
    CHECK(has("dedupd-anything-else"));
    CHECK(!has("dedupd"));
    CHECK(!has("x-dedupd-forwarded-by"));
    CHECK(!has("grpc-timeout"));
    /* A client's routing hash is no peer's header (it only narrows). */
    CHECK(!has(DD_API_MD_MAP_HASH));
    CHECK(has("dedupd-map-hash-x"));
    grpc_metadata_array none = {0};
    CHECK(!dd_forward_has_header(&none));
}

static void test_forwarded(void)
{
    for (int h = 0; h < 2; h++) {
        bool header = h;
        CHECK(dd_auth_forwarded(DD_API_FILTER, header) == header);
        CHECK(dd_auth_forwarded(DD_API_RECORD_DELIVERY, header) == header);
        CHECK(dd_auth_forwarded(DD_API_RECORD_PLAYS, header) == header);
        CHECK(dd_auth_forwarded(DD_API_FORGET_USER, header) == header);
        CHECK(!dd_auth_forwarded(DD_API_HEALTH_CHECK, header));
        CHECK(!dd_auth_forwarded(DD_API_CLUSTER_STATUS, header));
        CHECK(!dd_auth_forwarded(DD_API_SNAPSHOT_BEGIN, header));
        CHECK(!dd_auth_forwarded(DD_API_SNAPSHOT_READ, header));
        CHECK(!dd_auth_forwarded(DD_API_CLUSTER_MAP, header));
        CHECK(!dd_auth_forwarded(DD_API_UNKNOWN, header));
    }
    /* The Cluster service is the peers' with or without a header. */
    CHECK_EQ_INT(dd_auth_class_of(DD_API_SNAPSHOT_BEGIN), DD_AUTH_PEER);
    CHECK_EQ_INT(dd_auth_class_of(DD_API_SNAPSHOT_READ), DD_AUTH_PEER);
    CHECK_EQ_INT(dd_auth_class_of(DD_API_CLUSTER_STATUS), DD_AUTH_PEER);
    /* The clients' map is read-class, as Filter. */
    CHECK_EQ_INT(dd_auth_class_of(DD_API_CLUSTER_MAP), DD_AUTH_READ);
}

int main(void)
{
    test_header();
    test_forwarded();
    TEST_MAIN_END();
}
