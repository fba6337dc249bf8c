/* SPDX-License-Identifier: Apache-2.0
 *
 * cluster_page.c - see cluster_page.h. The /cluster page, from what
 * cluster.h shows of the running cluster.
 */
#include "cluster_page.h"

#include "dd.h"
#include "partition.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *dd_cluster_describe(dd_cluster *cl)
{
    json_object *root = json_object_new_object();
    if (!root) return NULL;
    const struct dd_cluster_map *map = dd_cluster_get_map(cl);
    struct dd_cluster_self self;
    dd_cluster_get_self(cl, &self);
    json_object_object_add(root, "shards", json_object_new_int64(map->shards));
    json_object_object_add(root, "shard", json_object_new_int64(self.shard));
    json_object_object_add(root, "replica", json_object_new_int64(self.replica));
    json_object_object_add(root, "map_hash", json_object_new_string(self.map_hash));
    json_object_object_add(root, "split_from", json_object_new_int64(map->split_from));
    json_object_object_add(root, "settled", json_object_new_boolean(dd_cluster_settled(cl, NULL)));
    json_object_object_add(root, "nodes_hash", json_object_new_string(self.nodes_hash));
    json_object_object_add(
        root, "partitioner",
        json_object_new_string(dd_partitioner_name((enum dd_partitioner)map->partitioner)));
    json_object_object_add(root, "partition_count", json_object_new_int64(self.partition_count));
    json_object_object_add(root, "max_lag_ms", json_object_new_int64(dd_cluster_max_lag_ms(cl)));
    json_object *nodes = json_object_new_array();
    int64_t now = dd_now_ms();
    size_t count = dd_cluster_node_count(cl);
    for (size_t i = 0; i < count; i++) {
        struct dd_cluster_node p;
        dd_cluster_node_get(cl, i, &p);
        json_object *o = json_object_new_object();
        json_object_object_add(o, "node", json_object_new_string(p.label));
        json_object_object_add(o, "shard", json_object_new_int64(p.shard));
        json_object_object_add(o, "replica", json_object_new_int64(p.replica));
        json_object_object_add(o, "addr", json_object_new_string(p.addr));
        json_object_object_add(o, "self", json_object_new_boolean(p.self));
        json_object *parts = json_object_new_array();
        int32_t n = p.self ? self.partition_count : p.partitions;
        for (int32_t q = 0; q < n; q++)
            if ((uint32_t)q % map->shards == p.shard)
                json_object_array_add(parts, json_object_new_int(q));
        json_object_object_add(o, "partitions", parts);
        if (p.self) {
            json_object_object_add(o, "state", json_object_new_string("self"));
            json_object_object_add(o, "ready", json_object_new_boolean(self.ready));
            json_object_object_add(o, "lag_ms", json_object_new_int64(self.lag_ms));
            json_object_object_add(o, "behind",
                                   json_object_new_boolean(dd_cluster_self_behind(cl)));
            json_object_object_add(o, "why", json_object_new_string(self.why));
        } else {
            json_object_object_add(o, "state", json_object_new_string(p.state));
            json_object_object_add(o, "ready", json_object_new_boolean(p.ready));
            json_object_object_add(o, "lag_ms", json_object_new_int64(p.lag_ms));
            json_object_object_add(o, "map_mismatch", json_object_new_boolean(p.mismatch));
            static const char *const rel_names[] = {"same", "older", "newer", "other"};
            json_object_object_add(o, "map_relation",
                                   json_object_new_string(rel_names[p.relation]));
            json_object_object_add(o, "nodes_differ", json_object_new_boolean(p.nodes_differ));
            json_object_object_add(o, "last_seen_ms_ago",
                                   json_object_new_int64(p.last_ok_ms ? now - p.last_ok_ms : -1));
            json_object_object_add(o, "why", json_object_new_string(p.why));
            json_object *fwd = json_object_new_object();
            for (int k = 0; k < DD_FWD_OUTCOME_COUNT; k++)
                json_object_object_add(fwd, dd_cluster_outcome_name((enum dd_cluster_outcome)k),
                                       json_object_new_int64((int64_t)p.forwarded[k]));
            json_object_object_add(o, "forwarded", fwd);
            json_object_object_add(o, "oversized_replies",
                                   json_object_new_int64((int64_t)p.oversized));
        }
        json_object_array_add(nodes, o);
    }
    json_object_object_add(root, "nodes", nodes);
    /* Where this node would send each shard's calls now (no counter moved). */
    json_object *route = json_object_new_array();
    for (uint32_t s = 0; s < map->shards; s++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "shard", json_object_new_int64(s));
        if (s == map->shard) {
            json_object_object_add(o, "to", json_object_new_string("local"));
        } else {
            bool degraded;
            int best = dd_cluster_peek(cl, s, &degraded);
            char label[32];
            snprintf(label, sizeof label, "%" PRIu32 ".%d", s, best);
            json_object_object_add(o, "to", json_object_new_string(best < 0 ? "none" : label));
            json_object_object_add(o, "degraded", json_object_new_boolean(degraded));
        }
        json_object_array_add(route, o);
    }
    json_object_object_add(root, "forward", route);
    char *s = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
    json_object_put(root);
    return s;
}
