/* SPDX-License-Identifier: Apache-2.0
 *
 * plays.c - see plays.h.
 */
#include "plays.h"

#include "dd.h"
#include "ingest.h"
#include "metrics.h"
#include "record.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct dd_plays {
    pthread_mutex_t lock; /* guards ingest */
    dd_ingest *ingest;    /* borrowed; NULL when Kafka ingest is off or gone */
};

int dd_plays_new(dd_plays **out)
{
    *out = NULL;
    dd_plays *pl = calloc(1, sizeof *pl);
    if (!pl) return DD_ERR_NOMEM;
    if (pthread_mutex_init(&pl->lock, NULL) != 0) {
        free(pl);
        return DD_ERR_NOMEM;
    }
    *out = pl;
    return DD_OK;
}

void dd_plays_free(dd_plays *pl)
{
    if (!pl) return;
    pthread_mutex_destroy(&pl->lock);
    free(pl);
}

void dd_plays_set_ingest(dd_plays *pl, dd_ingest *in)
{
    pthread_mutex_lock(&pl->lock);
    pl->ingest = in;
    pthread_mutex_unlock(&pl->lock);
}

void dd_plays_collect(dd_prom *p, void *ud)
{
    dd_plays *pl = ud;
    struct dd_record_stats r;
    dd_record_get_stats(&r);
    struct dd_ingest_stats in;
    pthread_mutex_lock(&pl->lock);
    bool have_ingest = pl->ingest != NULL;
    if (have_ingest) dd_ingest_get_stats(pl->ingest, &in);
    pthread_mutex_unlock(&pl->lock);
    static const struct dd_prom_label rpc = {"source", "rpc"}, kafka = {"source", "kafka"};
    dd_prom_family(p, "dedupd_plays_written_total",
                   "Plays written to the history store (ingest: distinct per window)",
                   DD_PROM_COUNTER);
    dd_prom_sample_u64(p, "dedupd_plays_written_total", &rpc, 1, r.plays);
    if (have_ingest)
        dd_prom_sample_u64(p, "dedupd_plays_written_total", &kafka, 1, in.plays_written);
    dd_prom_family(p, "dedupd_plays_expired_total", "Plays dropped as older than the retention",
                   DD_PROM_COUNTER);
    dd_prom_sample_u64(p, "dedupd_plays_expired_total", &rpc, 1, r.plays_expired);
    if (have_ingest) dd_prom_sample_u64(p, "dedupd_plays_expired_total", &kafka, 1, in.expired);
}
