/* SPDX-License-Identifier: Apache-2.0
 *
 * sys.h: the monotonic condition variable, alone and with its mutex,
 * times out on dd_mono_ns's clock; free bytes of a real path are known and of a missing one are
 * UINT64_MAX (which refuses nothing); the missing directories above a
 * path are made.
 */
#include "testlib.h"

#include "dd.h"
#include "sys.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void test_cond_monotonic(void)
{
    pthread_cond_t cv;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    CHECK_EQ_INT(dd_sys_cond_init_monotonic(&cv), DD_OK);
    /* A deadline 20 ms ahead on CLOCK_MONOTONIC: had the variable kept the
     * default (wall) clock, a monotonic reading, decades behind the wall
     * clock, would be long past and the wait would not last. */
    int64_t at = dd_mono_ns() + 20 * 1000000;
    struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
    pthread_mutex_lock(&mu);
    int rc;
    while ((rc = pthread_cond_timedwait(&cv, &mu, &ts)) == 0) {
    }
    pthread_mutex_unlock(&mu);
    CHECK_EQ_INT(rc, ETIMEDOUT);
    CHECK(dd_mono_ns() >= at);
    pthread_cond_destroy(&cv);
}

/* The pair: the mutex works and the variable waits on the monotonic
 * clock, as above. */
static void test_lock_init(void)
{
    pthread_mutex_t mu;
    pthread_cond_t cv;
    CHECK_EQ_INT(dd_sys_lock_init(&mu, &cv), DD_OK);
    int64_t at = dd_mono_ns() + 20 * 1000000;
    struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
    CHECK_EQ_INT(pthread_mutex_lock(&mu), 0);
    int rc;
    while ((rc = pthread_cond_timedwait(&cv, &mu, &ts)) == 0) {
    }
    CHECK_EQ_INT(pthread_mutex_unlock(&mu), 0);
    CHECK_EQ_INT(rc, ETIMEDOUT);
    CHECK(dd_mono_ns() >= at);
    pthread_cond_destroy(&cv);
    pthread_mutex_destroy(&mu);
}

static void test_free_bytes(void)
{
    uint64_t size = 0;
    uint64_t f = dd_sys_free_bytes(".", &size);
    CHECK(f != UINT64_MAX);
    CHECK(size != UINT64_MAX);
    CHECK(f <= size);
    CHECK_EQ_INT(dd_sys_free_bytes(".", NULL) != UINT64_MAX, 1);
    size = 0;
    CHECK(dd_sys_free_bytes("/nonexistent/dedupd-test", &size) == UINT64_MAX);
    CHECK(size == UINT64_MAX);
}

/* dd_sys_mkdir_parents: every missing level above the last, never the
 * last; a file in the way is an error naming it. */
static void test_mkdir_parents(void)
{
    char root[256], p[512], err[256] = "";
    struct stat st;
    tl_tmpdir(root, sizeof root, "sys");
    snprintf(p, sizeof p, "%s/a/b/c/store", root);
    CHECK_EQ_INT(dd_sys_mkdir_parents(p, err, sizeof err), DD_OK);
    snprintf(p, sizeof p, "%s/a/b/c", root);
    CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
    snprintf(p, sizeof p, "%s/a/b/c/store", root);
    CHECK(stat(p, &st) != 0); /* the last level is the caller's */
    CHECK_EQ_INT(dd_sys_mkdir_parents(p, err, sizeof err), DD_OK); /* again: all there */
    snprintf(p, sizeof p, "%s/a/b/c/store/", root);
    CHECK_EQ_INT(dd_sys_mkdir_parents(p, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_sys_mkdir_parents("store", err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_sys_mkdir_parents("/store", err, sizeof err), DD_OK);
    snprintf(p, sizeof p, "%s/file", root);
    FILE *f = fopen(p, "w");
    REQUIRE(f != NULL);
    fclose(f);
    snprintf(p, sizeof p, "%s/file/x/store", root);
    CHECK_EQ_INT(dd_sys_mkdir_parents(p, err, sizeof err), DD_ERR_IO);
    CHECK_MSG(strstr(err, "/file") != NULL, "%s", err);
    tl_rm_tree(root);
}

int main(void)
{
    test_mkdir_parents();
    test_cond_monotonic();
    test_lock_init();
    test_free_bytes();
    TEST_MAIN_END();
}
