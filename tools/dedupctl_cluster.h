/* SPDX-License-Identifier: Apache-2.0
 *
 * dedupctl_cluster.h - `dedupctl cluster`: the cluster map as one node sees
 * it, from its admin listener's /cluster (cluster.h, dd_cluster_describe).
 */
#ifndef DEDUPCTL_CLUSTER_H
#define DEDUPCTL_CLUSTER_H

#include <stddef.h>
#include <stdio.h>

#include "dedupctl_out.h"

/* GET ADDR's /cluster and print to OUT: the map (shards, partitioner,
 * partition count, map hash), one line per node (shard.replica, address,
 * state, ready, ingest lag, partitions, calls forwarded to it by outcome,
 * why it is not ready), and where this node forwards each shard's calls.
 * Returns 0; DD_ERR_NOTFOUND when the node is not part of a cluster (404);
 * or an error as dd_http_get, or DD_ERR_INVALID for a reply that is not
 * the expected JSON, with a message in ERR. With OUT->json, /cluster's
 * JSON answer is printed as one line instead. */
int dedupctl_cluster(const char *addr, int timeout_ms, struct dedupctl_out *out, char *err,
                     size_t errlen);

#endif
