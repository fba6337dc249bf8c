/* SPDX-License-Identifier: Apache-2.0
 *
 * api.c - see api.h.
 */
#include "api.h"

#include "dd.h"
#include "segment.h" /* DD_SCENE_MAX */

#include <inttypes.h>

static const struct {
    const char *name, *path;
} methods[DD_API_METHOD_COUNT] = {
    [DD_API_FILTER] = {"Filter", DD_API_PATH_FILTER},
    [DD_API_RECORD_DELIVERY] = {"RecordDelivery", DD_API_PATH_RECORD_DELIVERY},
    [DD_API_RECORD_PLAYS] = {"RecordPlays", DD_API_PATH_RECORD_PLAYS},
    [DD_API_FORGET_USER] = {"ForgetUser", DD_API_PATH_FORGET_USER},
    [DD_API_HEALTH_CHECK] = {"HealthCheck", DD_API_PATH_HEALTH_CHECK},
    [DD_API_CLUSTER_STATUS] = {"ClusterStatus", DD_API_PATH_CLUSTER_STATUS},
    [DD_API_SNAPSHOT_BEGIN] = {"SnapshotBegin", DD_API_PATH_SNAPSHOT_BEGIN},
    [DD_API_SNAPSHOT_READ] = {"SnapshotRead", DD_API_PATH_SNAPSHOT_READ},
    [DD_API_CLUSTER_MAP] = {"ClusterMap", DD_API_PATH_CLUSTER_MAP},
    [DD_API_UNKNOWN] = {"unknown", "unknown"},
};

const char *dd_api_method_name(enum dd_api_method m)
{
    return (unsigned)m < DD_API_METHOD_COUNT ? methods[m].name : NULL;
}

const char *dd_api_method_path(enum dd_api_method m)
{
    return (unsigned)m < DD_API_METHOD_COUNT ? methods[m].path : NULL;
}

const char *dd_api_status_name(int code)
{
    static const char *const names[DD_API_STATUS_COUNT] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (code < 0 || code >= DD_API_STATUS_COUNT) return "UNKNOWN_STATUS";
    return names[code];
}

int dd_api_check_user_scene(size_t user_len, size_t scene_len, uint32_t max_id_bytes, char *err,
                            size_t errlen)
{
    if (user_len == 0) return dd_fail(DD_ERR_INVALID, err, errlen, "user_id is empty");
    if (user_len > max_id_bytes)
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "user_id is %zu bytes, longer than rpc.max_id_bytes=%" PRIu32, user_len,
                       max_id_bytes);
    if (scene_len > DD_SCENE_MAX)
        return dd_fail(DD_ERR_INVALID, err, errlen, "scene is %zu bytes, longer than %d", scene_len,
                       DD_SCENE_MAX);
    return DD_OK;
}
