/* SPDX-License-Identifier: Apache-2.0
 *
 * sweep.c - dropping the users a node no longer owns after resharding
 * (sweep.h).
 */
#include "sweep.h"

#include "cluster.h"
#include "dd.h"
#include "history.h"
#include "log.h"
#include "owner.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define MOD "sweep"

/* How often the thread looks whether the cluster is settled, and how long
 * it waits after a failed compaction. */
#define SWEEP_POLL_MS 1000
#define SWEEP_RETRY_MS 60000

struct dd_sweep {
    dd_history *h;
    dd_cluster *cl;
    dd_owner_guard *owner; /* records this node's ownership once swept */
    pthread_t thread;
    atomic_bool stop;
};

/* Sleep MS in short steps; false when asked to stop. */
static bool nap(dd_sweep *s, int64_t ms)
{
    for (int64_t left = ms; left > 0; left -= 100) {
        if (atomic_load(&s->stop)) return false;
        dd_sleep_ms(left < 100 ? left : 100);
    }
    return !atomic_load(&s->stop);
}

static void *sweep_main(void *arg)
{
    dd_sweep *s = arg;
    bool said = false;
    while (nap(s, SWEEP_POLL_MS)) {
        uint64_t before, after;
        if (!dd_cluster_settled(s->cl, &before)) {
            if (!said)
                dd_info(MOD, "msg=\"the store may hold other shards' users; they are dropped once "
                             "every peer runs this node's cluster map\"");
            said = true;
            continue;
        }
        struct dd_history_stats st0, st1;
        dd_history_get_stats(s->h, &st0);
        dd_info(MOD, "msg=\"cluster settled: compacting the store to drop other shards' users\"");
        int64_t t0 = dd_mono_ns();
        char err[256];
        int rc = dd_history_compact(s->h, err, sizeof err);
        if (rc == DD_ERR_STATE) break; /* stopping */
        if (rc != DD_OK) {
            dd_warn(MOD, "msg=\"compaction failed; trying again later\" error=\"%s\"", err);
            if (!nap(s, SWEEP_RETRY_MS)) break;
            continue;
        }
        if (!dd_cluster_settled(s->cl, &after) || after != before) {
            dd_info(MOD, "msg=\"the cluster map changed during the compaction; again once "
                         "settled\"");
            continue;
        }
        struct dd_cluster_self self;
        dd_cluster_get_self(s->cl, &self);
        rc = dd_owner_guard_swept(s->owner, self.partition_count, err, sizeof err);
        if (rc == DD_ERR_STATE) break; /* refused meanwhile (the partition count): kept as is */
        if (rc != DD_OK) {
            dd_warn(MOD,
                    "msg=\"cannot record the store's ownership; trying again later\" "
                    "error=\"%s\"",
                    err);
            if (!nap(s, SWEEP_RETRY_MS)) break;
            continue;
        }
        dd_history_get_stats(s->h, &st1);
        dd_info(MOD,
                "msg=\"store holds only this shard's users now\" segments_dropped=%" PRIu64
                " seconds=%.1f",
                st1.segments_foreign - st0.segments_foreign, (double)(dd_mono_ns() - t0) / 1e9);
        break;
    }
    return NULL;
}

int dd_sweep_start(dd_sweep **out, dd_history *h, dd_cluster *cl, dd_owner_guard *owner, char *err,
                   size_t errlen)
{
    *out = NULL;
    /* Only a copy of the split's parent holds other shards' users; a store
     * of any other ownership is refused (owner.h), never swept. */
    if (dd_owner_guard_refused(owner, NULL, 0) || dd_owner_guard_relation(owner) != DD_OWNER_PARENT)
        return DD_OK;
    dd_sweep *s = calloc(1, sizeof *s);
    if (!s) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    s->h = h;
    s->cl = cl;
    s->owner = owner;
    if (pthread_create(&s->thread, NULL, sweep_main, s) != 0) {
        free(s);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "cannot start the sweep thread");
    }
    *out = s;
    return DD_OK;
}

void dd_sweep_stop(dd_sweep *s)
{
    if (!s) return;
    atomic_store(&s->stop, true);
    dd_history_cancel_compact(s->h);
    pthread_join(s->thread, NULL);
    free(s);
}
