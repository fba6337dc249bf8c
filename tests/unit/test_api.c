/* SPDX-License-Identifier: Apache-2.0
 *
 * test_api.c - api.h: every method has its short name and its gRPC path,
 * the status names are grpc's (checked against grpc_status_code's values),
 * out-of-range values get a fixed name rather than a crash, and the
 * user/scene rules: empty user, user over the limit, scene over the key
 * format's DD_SCENE_MAX, each with a message naming the field.
 */
#include "api.h"
#include "dd.h"
#include "segment.h"
#include "testlib.h"

#include <grpc/status.h>
#include <string.h>

static void test_methods(void)
{
    CHECK_STR(dd_api_method_name(DD_API_FILTER), "Filter");
    CHECK_STR(dd_api_method_name(DD_API_FORGET_USER), "ForgetUser");
    CHECK_STR(dd_api_method_name(DD_API_UNKNOWN), "unknown");
    CHECK_STR(dd_api_method_path(DD_API_FILTER), DD_API_PATH_FILTER);
    CHECK_STR(dd_api_method_path(DD_API_RECORD_DELIVERY), DD_API_PATH_RECORD_DELIVERY);
    CHECK_STR(dd_api_method_path(DD_API_RECORD_PLAYS), DD_API_PATH_RECORD_PLAYS);
    CHECK_STR(dd_api_method_path(DD_API_FORGET_USER), DD_API_PATH_FORGET_USER);
    CHECK_STR(dd_api_method_path(DD_API_HEALTH_CHECK), DD_API_PATH_HEALTH_CHECK);
    /* Every path of the Dedup service starts with its name. */
    for (int m = DD_API_FILTER; m <= DD_API_FORGET_USER; m++) {
        const char *p = dd_api_method_path((enum dd_api_method)m);
        CHECK(p[0] == '/' && strncmp(p + 1, DD_API_SERVICE "/", strlen(DD_API_SERVICE) + 1) == 0);
        CHECK_STR(p + strlen(DD_API_SERVICE) + 2, dd_api_method_name((enum dd_api_method)m));
    }
}

static void test_status(void)
{
    CHECK_STR(dd_api_status_name(GRPC_STATUS_OK), "OK");
    CHECK_STR(dd_api_status_name(GRPC_STATUS_INVALID_ARGUMENT), "INVALID_ARGUMENT");
    CHECK_STR(dd_api_status_name(GRPC_STATUS_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
    CHECK_STR(dd_api_status_name(GRPC_STATUS_PERMISSION_DENIED), "PERMISSION_DENIED");
    CHECK_STR(dd_api_status_name(GRPC_STATUS_UNAVAILABLE), "UNAVAILABLE");
    CHECK_STR(dd_api_status_name(GRPC_STATUS_UNAUTHENTICATED), "UNAUTHENTICATED");
    CHECK_EQ_INT(DD_API_STATUS_COUNT, GRPC_STATUS_UNAUTHENTICATED + 1);
    CHECK_STR(dd_api_status_name(-1), "UNKNOWN_STATUS");
    CHECK_STR(dd_api_status_name(DD_API_STATUS_COUNT), "UNKNOWN_STATUS");
}

static void test_user_scene(void)
{
    char err[128];
    CHECK_EQ_INT(dd_api_check_user_scene(1, 0, 8, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_api_check_user_scene(8, DD_SCENE_MAX, 8, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_api_check_user_scene(0, 0, 8, err, sizeof err), DD_ERR_INVALID);
    CHECK_STR(err, "user_id is empty");
    CHECK_EQ_INT(dd_api_check_user_scene(9, 0, 8, err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "user_id is 9 bytes") && strstr(err, "rpc.max_id_bytes=8"));
    CHECK_EQ_INT(dd_api_check_user_scene(1, DD_SCENE_MAX + 1, 8, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK(strncmp(err, "scene is 256 bytes", 18) == 0);
}

int main(void)
{
    test_methods();
    test_status();
    test_user_scene();
    TEST_MAIN_END();
}
