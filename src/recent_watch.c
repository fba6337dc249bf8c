/* SPDX-License-Identifier: Apache-2.0
 *
 * recent_watch.c - see recent_watch.h.
 */
#include "recent_watch.h"

#include "dd.h"
#include "sys.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dd_recent_watch {
    dd_recent *r; /* used by the thread only (and by new before it) */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC; signalled to stop */
    bool stop;
    bool up;       /* the last PING's outcome, under mu */
    char why[200]; /* its error, under mu */
};

/* PING once and store the outcome. */
static void check(dd_recent_watch *w)
{
    int rc = dd_recent_ping(w->r);
    char why[sizeof w->why] = "";
    if (rc != DD_OK) {
        const char *e = dd_recent_errstr(w->r);
        snprintf(why, sizeof why, "%s", e[0] ? e : dd_strerror(rc));
        /* The text reaches /readyz: printable only. */
        for (char *c = why; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
    }
    pthread_mutex_lock(&w->mu);
    w->up = rc == DD_OK;
    memcpy(w->why, why, sizeof why);
    pthread_mutex_unlock(&w->mu);
}

static void *watch_main(void *arg)
{
    dd_recent_watch *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = until.tv_nsec + (int64_t)DD_RECENT_WATCH_INTERVAL_MS * 1000000;
        until.tv_sec += (time_t)(ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
        while (!w->stop && pthread_cond_timedwait(&w->cond, &w->mu, &until) == 0) {
        }
        if (w->stop) break;
        pthread_mutex_unlock(&w->mu);
        check(w);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int dd_recent_watch_new(dd_recent_watch **out, const struct dd_recent_conf *conf, char *err,
                        size_t errlen)
{
    *out = NULL;
    dd_recent_watch *w = calloc(1, sizeof *w);
    if (!w) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    int rc = dd_recent_new(&w->r, conf, err, errlen);
    if (rc != DD_OK) {
        free(w);
        return rc;
    }
    bool locks = dd_sys_lock_init(&w->mu, &w->cond) == DD_OK;
    if (!locks) goto err;
    check(w);
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) goto err;
    *out = w;
    return DD_OK;
err:
    if (locks) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cond);
    }
    dd_recent_free(w->r);
    free(w);
    return dd_fail(DD_ERR_NOMEM, err, errlen, "cannot start the Redis watch thread");
}

void dd_recent_watch_free(dd_recent_watch *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mu);
    dd_recent_free(w->r);
    free(w);
}

bool dd_recent_watch_up(dd_recent_watch *w, char *why, size_t whylen)
{
    pthread_mutex_lock(&w->mu);
    bool up = w->up;
    if (!up && why && whylen) snprintf(why, whylen, "%s", w->why);
    pthread_mutex_unlock(&w->mu);
    return up;
}
