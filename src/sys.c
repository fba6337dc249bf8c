/* SPDX-License-Identifier: Apache-2.0
 *
 * sys.c - see sys.h.
 */
#include "sys.h"

#include "dd.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

int dd_sys_cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return DD_ERR_NOMEM;
    int rc = DD_ERR_NOMEM;
    if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(cv, &ca) == 0)
        rc = DD_OK;
    pthread_condattr_destroy(&ca);
    return rc;
}

int dd_sys_lock_init(pthread_mutex_t *mu, pthread_cond_t *cv)
{
    if (pthread_mutex_init(mu, NULL) != 0) return DD_ERR_NOMEM;
    if (dd_sys_cond_init_monotonic(cv) != DD_OK) {
        pthread_mutex_destroy(mu);
        return DD_ERR_NOMEM;
    }
    return DD_OK;
}

uint64_t dd_sys_free_bytes(const char *path, uint64_t *size)
{
    struct statvfs v;
    if (statvfs(path, &v) != 0) {
        if (size) *size = UINT64_MAX;
        return UINT64_MAX;
    }
    if (size) *size = (uint64_t)v.f_blocks * (uint64_t)v.f_frsize;
    return (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
}

int dd_sys_mkdir_parents(const char *path, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof dir) return dd_fail(DD_ERR_INVALID, err, errlen, "%s: path too long", path);
    memcpy(dir, path, n + 1);
    while (n > 0 && dir[n - 1] == '/') dir[--n] = '\0'; /* "a/b/" is "a/b" */
    char *last = strrchr(dir, '/');
    if (!last || last == dir) return DD_OK; /* no parent to create, or "/" */
    *last = '\0';
    /* Each prefix in turn: EEXIST is fine when it is a directory. */
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return dd_fail(DD_ERR_IO, err, errlen, "cannot create directory %s: %s", dir,
                           strerror(errno));
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return dd_fail(DD_ERR_IO, err, errlen, "%s: not a directory", dir);
        if (c == '\0') break;
        *p = c;
    }
    return DD_OK;
}
