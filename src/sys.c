/* SPDX-License-Identifier: Apache-2.0
 *
 * sys.c - see sys.h.
 */
#include "sys.h"

#include "dd.h"

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
