/* SPDX-License-Identifier: Apache-2.0
 *
 * cluster_page.h - the operator's page of the running cluster (admin's
 * /cluster, dedupctl cluster): the map, every node's last known state and
 * where each shard's calls would go now, as JSON. Reads the cluster only
 * through cluster.h; knows nothing of HTTP (admin's).
 */
#ifndef DD_CLUSTER_PAGE_H
#define DD_CLUSTER_PAGE_H

#include "cluster.h"

/* The page for CL, into a malloc'd string (the caller frees it); NULL on
 * no memory. From any thread. */
char *dd_cluster_describe(dd_cluster *cl);

#endif
