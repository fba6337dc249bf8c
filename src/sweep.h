/* SPDX-License-Identifier: Apache-2.0
 *
 * sweep.h - after a change of ownership (resharding, cluster_map.h), drop from
 * the store the users this node no longer owns, once, as soon as the
 * change is complete.
 *
 * DESIGN
 *
 * The store records which ownership it holds (owner.h). Only a store
 * whose record is the parent of this node's split map (cluster.split_from:
 * a copy of the parent shard's store, or an old node restarted under the
 * split map) holds other nodes' users; any other ownership is refused at
 * open and never swept, so the evidence of a swapped volume stays. A
 * thread waits until the cluster is settled (dd_cluster_settled: every
 * peer runs this node's map, so no node of the older map needs what this
 * one holds, and a rollback stays possible until then), runs a full
 * compaction, during which the compaction filter drops every segment
 * dd_cluster_owns refuses (history.h dd_history_set_owner), and records
 * this node's ownership (dd_owner_guard_swept) if the cluster stayed
 * settled throughout; otherwise it tries again. Without the sweep the
 * same keys would go at the periodic compactions anyway; the sweep frees
 * the space now.
 *
 * Lifecycle: dd_sweep_start after the cluster and the store's owner are
 * set; dd_sweep_stop before the store closes (it cancels a compaction in
 * progress).
 */
#ifndef DD_SWEEP_H
#define DD_SWEEP_H

#include <stddef.h>

typedef struct dd_history dd_history;
typedef struct dd_cluster dd_cluster;
typedef struct dd_sweep dd_sweep;
typedef struct dd_owner_guard dd_owner_guard;

/* Start a sweep of H when OWNER says H is a copy of the split's parent
 * (*OUT is then a running sweep; NULL when none is needed). All three are
 * borrowed until dd_sweep_stop. Returns 0, or DD_ERR_NOMEM with a message
 * in err. */
int dd_sweep_start(dd_sweep **out, dd_history *h, dd_cluster *cl, dd_owner_guard *owner, char *err,
                   size_t errlen);

/* Stop the sweep (a compaction in progress is cancelled: see
 * dd_history_cancel_compact, after which H compacts no more manually),
 * join its thread and free it. NULL is a no-op. */
void dd_sweep_stop(dd_sweep *s);

#endif
