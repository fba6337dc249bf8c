/* SPDX-License-Identifier: Apache-2.0
 *
 * plays.h - the dedupd_plays_written_total and dedupd_plays_expired_total
 * families. Plays reach the history store two ways, RecordPlays (counted
 * by record.h, process-wide) and Kafka ingest (counted by each dd_ingest),
 * and Prometheus wants each family's samples together, with a "source"
 * label; so one collector reads both counts.
 *
 * DESIGN
 *
 * The "rpc" samples are always there; the "kafka" ones while an ingest is
 * set. The ingest is borrowed: dd_plays_set_ingest(pl, NULL) must come
 * before it is freed. The pointer is guarded by the collector's own mutex,
 * which a scrape takes inside the registry's (metrics.h) and which is
 * never held around a registry call, so the two cannot deadlock.
 */
#ifndef DD_PLAYS_H
#define DD_PLAYS_H

typedef struct dd_ingest dd_ingest;
typedef struct dd_prom dd_prom;
typedef struct dd_plays dd_plays;

/* A collector with no ingest set. Returns 0 or DD_ERR_NOMEM (*out NULL).
 * Free with dd_plays_free (NULL is a no-op) once it is out of every
 * registry. */
int dd_plays_new(dd_plays **out);
void dd_plays_free(dd_plays *pl);

/* Count IN's plays too from now on (NULL: stop counting any ingest's).
 * Once this returns, no scrape reads the previous ingest. Cannot fail. */
void dd_plays_set_ingest(dd_plays *pl, dd_ingest *in);

/* The metrics.h collector; UD is a dd_plays *. */
void dd_plays_collect(dd_prom *p, void *ud);

#endif
