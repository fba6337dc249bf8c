/* SPDX-License-Identifier: Apache-2.0
 *
 * dedupctl_cluster.c - see dedupctl_cluster.h.
 */
#include "dedupctl_cluster.h"

#include "dd.h"
#include "httpget.h"

#include <inttypes.h>
#include <stdbool.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

/* OBJ[KEY] as text ("-" when missing). */
static const char *str_of(json_object *obj, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v) || !v) return "-";
    return json_object_get_string(v);
}

static int64_t int_of(json_object *obj, const char *key, int64_t dflt)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v) || !v) return dflt;
    return json_object_get_int64(v);
}

/* The partitions of NODE as "0,2,4,6" into BUF. */
static void partitions_text(json_object *node, char *buf, size_t len)
{
    json_object *parts;
    buf[0] = '\0';
    if (!json_object_object_get_ex(node, "partitions", &parts) ||
        !json_object_is_type(parts, json_type_array))
        return;
    size_t off = 0, n = json_object_array_length(parts);
    for (size_t i = 0; i < n && off < len; i++) {
        int w = snprintf(buf + off, len - off, "%s%d", i ? "," : "",
                         json_object_get_int(json_object_array_get_idx(parts, i)));
        if (w < 0) break;
        off += (size_t)w;
    }
    if (!n) snprintf(buf, len, "-");
}

int dedupctl_cluster(const char *addr, int timeout_ms, struct dedupctl_out *o, char *err,
                     size_t errlen)
{
    FILE *out = o->f;
    int status;
    char *body;
    size_t len;
    int rc = dd_http_get(addr, "/cluster", timeout_ms, &status, &body, &len, err, errlen);
    if (rc != DD_OK) return rc;
    if (status != 200) o->http_status = status;
    if (status == 404) {
        free(body);
        return dd_fail(DD_ERR_NOTFOUND, err, errlen,
                       "%s is not part of a cluster (no /cluster; cluster.shards = 1 and one node)",
                       addr);
    }
    json_object *root = status == 200 ? json_tokener_parse(body) : NULL;
    if (!root) {
        rc = dd_fail(DD_ERR_INVALID, err, errlen, "%s/cluster answered %d: %.200s", addr, status,
                     body);
        free(body);
        return rc;
    }
    free(body);
    if (o->json) {
        fprintf(out, "%s\n",
                json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(root);
        return DD_OK;
    }
    json_object *nodes, *fwd;
    if (!json_object_object_get_ex(root, "nodes", &nodes) ||
        !json_object_is_type(nodes, json_type_array)) {
        json_object_put(root);
        return dd_fail(DD_ERR_INVALID, err, errlen, "%s/cluster: no node list", addr);
    }
    fprintf(out, "cluster: %s shards, partitioner %s, %s partitions, map %s; this node %s.%s\n",
            str_of(root, "shards"), str_of(root, "partitioner"), str_of(root, "partition_count"),
            str_of(root, "map_hash"), str_of(root, "shard"), str_of(root, "replica"));
    if (int_of(root, "split_from", 0) > 0)
        fprintf(out, "resharding: this map splits %s shards (cluster.split_from); %s\n",
                str_of(root, "split_from"),
                strcmp(str_of(root, "settled"), "true") == 0
                    ? "settled: every peer runs this map"
                    : "not settled: a peer runs another map or is not answering");
    size_t n = json_object_array_length(nodes);
    int aw = 7; /* "ADDRESS"; pod DNS names are long */
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(str_of(json_object_array_get_idx(nodes, i), "addr"));
        if (l > (size_t)aw) aw = l > 200 ? 200 : (int)l;
    }
    fprintf(out, "%-6s %-*s %-8s %-5s %8s  %-16s %-14s %s\n", "NODE", aw, "ADDRESS", "STATE",
            "READY", "LAG_MS", "PARTITIONS", "FWD ok/unav", "NOTE");
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(nodes, i), *f;
        char parts[128], fw[32] = "-";
        partitions_text(o, parts, sizeof parts);
        if (json_object_object_get_ex(o, "forwarded", &f))
            snprintf(fw, sizeof fw, "%" PRId64 "/%" PRId64, int_of(f, "ok", 0),
                     int_of(f, "unavailable", 0));
        int64_t lag = int_of(o, "lag_ms", -1);
        char lagbuf[24] = "-";
        if (lag >= 0) snprintf(lagbuf, sizeof lagbuf, "%" PRId64, lag);
        json_object *mm;
        const char *note = str_of(o, "why");
        if (json_object_object_get_ex(o, "map_mismatch", &mm) && json_object_get_boolean(mm))
            note = "ANOTHER CLUSTER MAP";
        else if (strcmp(str_of(o, "map_relation"), "older") == 0)
            note = "resharding: runs the map this one splits";
        else if (strcmp(str_of(o, "map_relation"), "newer") == 0)
            note = "resharding: runs a map that splits this one";
        else if (json_object_object_get_ex(o, "nodes_differ", &mm) && json_object_get_boolean(mm))
            note = "lists other nodes";
        fprintf(out, "%-6s %-*s %-8s %-5s %8s  %-16s %-14s %s\n", str_of(o, "node"), aw,
                str_of(o, "addr"), str_of(o, "state"),
                strcmp(str_of(o, "ready"), "true") == 0 ? "yes" : "no", lagbuf, parts, fw,
                strcmp(note, "-") == 0 ? "" : note);
    }
    if (json_object_object_get_ex(root, "forward", &fwd) &&
        json_object_is_type(fwd, json_type_array)) {
        fprintf(out, "forwarding:");
        size_t m = json_object_array_length(fwd);
        for (size_t i = 0; i < m; i++) {
            json_object *o = json_object_array_get_idx(fwd, i), *d;
            bool degraded =
                json_object_object_get_ex(o, "degraded", &d) && json_object_get_boolean(d);
            fprintf(out, "%s shard %s -> %s%s", i ? ";" : "", str_of(o, "shard"), str_of(o, "to"),
                    degraded ? " (behind: answers degraded)" : "");
        }
        fputc('\n', out);
    }
    json_object_put(root);
    return DD_OK;
}
