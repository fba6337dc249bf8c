/* SPDX-License-Identifier: Apache-2.0
 *
 * test_forward.c - forward.h without a cluster: which metadata makes a
 * call a forwarded one (every header the cluster sends is "dedupd-..."),
 * and the class such a call is judged by (auth.h, dd_auth_call_class):
 * a Dedup call with a forwarding header is the peers', Health/Check stays
 * open, the Cluster service is the peers' with or without one.
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
    grpc_metadata_array none = {0};
    CHECK(!dd_forward_has_header(&none));
}

static void test_call_class(void)
{
    for (int h = 0; h < 2; h++) {
        bool header = h;
        enum dd_auth_class dedup_read = header ? DD_AUTH_PEER : DD_AUTH_READ;
        enum dd_auth_class dedup_write = header ? DD_AUTH_PEER : DD_AUTH_WRITE;
        CHECK_EQ_INT(dd_auth_call_class(DD_API_FILTER, header), dedup_read);
        CHECK_EQ_INT(dd_auth_call_class(DD_API_RECORD_DELIVERY, header), dedup_write);
        CHECK_EQ_INT(dd_auth_call_class(DD_API_RECORD_PLAYS, header), dedup_write);
        CHECK_EQ_INT(dd_auth_call_class(DD_API_FORGET_USER, header), dedup_write);
        CHECK_EQ_INT(dd_auth_call_class(DD_API_HEALTH_CHECK, header), DD_AUTH_OPEN);
        CHECK_EQ_INT(dd_auth_call_class(DD_API_CLUSTER_STATUS, header), DD_AUTH_PEER);
        CHECK_EQ_INT(dd_auth_call_class(DD_API_SNAPSHOT_BEGIN, header), DD_AUTH_PEER);
        CHECK_EQ_INT(dd_auth_call_class(DD_API_SNAPSHOT_READ, header), DD_AUTH_PEER);
        CHECK_EQ_INT(dd_auth_call_class(DD_API_UNKNOWN, header), DD_AUTH_OPEN);
    }
}

int main(void)
{
    test_header();
    test_call_class();
    TEST_MAIN_END();
}
