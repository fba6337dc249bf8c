/* SPDX-License-Identifier: Apache-2.0
 *
 * cluster_map.c - see cluster_map.h. Parsing and checking the map, auto
 * placement, a user's shard and the hashes nodes compare.
 */
#include "cluster_map.h"

#include "addr.h"
#include "dd.h"
#include "partition.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

bool dd_cluster_enabled(const struct dd_cluster_conf *conf)
{
    return conf->shards > 1 || strchr(conf->nodes, ',') != NULL;
}

void dd_cluster_map_free(struct dd_cluster_map *m)
{
    if (!m) return;
    if (m->addr) {
        for (uint32_t s = 0; s < m->shards; s++) {
            if (!m->addr[s]) continue;
            for (uint32_t r = 0; r < m->nreplicas[s]; r++) free(m->addr[s][r]);
            free(m->addr[s]);
        }
    }
    free(m->addr);
    free(m->nreplicas);
    memset(m, 0, sizeof *m);
}

/* "0".."max-1" -> *out; "auto" -> UINT32_MAX. */
static int parse_place(const char *key, const char *v, uint32_t max, uint32_t *out, char *err,
                       size_t errlen)
{
    if (strcmp(v, "auto") == 0) {
        *out = UINT32_MAX;
        return DD_OK;
    }
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (!v[0] || !isdigit((unsigned char)v[0]) || *end || errno || x >= max)
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "%s: \"%s\" is not \"auto\" nor a number below %" PRIu32, key, v, max);
    *out = (uint32_t)x;
    return DD_OK;
}

/* The ordinal a StatefulSet gives its pod: the digits after the last '-'
 * of HOSTNAME (the system's when NULL); -1 if there is none. */
static long host_ordinal(const char *hostname, char *name, size_t namelen)
{
    char buf[256];
    if (!hostname) {
        if (gethostname(buf, sizeof buf) != 0) return -1;
        buf[sizeof buf - 1] = '\0';
        hostname = buf;
    }
    snprintf(name, namelen, "%s", hostname);
    const char *dash = strrchr(hostname, '-');
    if (!dash || !dash[1]) return -1;
    char *end;
    errno = 0;
    long x = strtol(dash + 1, &end, 10);
    if (*end || errno || x < 0 || !isdigit((unsigned char)dash[1])) return -1;
    return x;
}

/* Split cluster.nodes into M->addr. */
static int parse_nodes(const struct dd_cluster_conf *c, struct dd_cluster_map *m, char *err,
                       size_t errlen)
{
    const char *key = "cluster.nodes";
    m->nreplicas = calloc(m->shards, sizeof *m->nreplicas);
    m->addr = calloc(m->shards, sizeof *m->addr);
    if (!m->nreplicas || !m->addr) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    if (!c->nodes[0]) {
        if (m->shards != 1)
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "%s: must list every node when cluster.shards is %" PRIu32, key,
                           m->shards);
        m->nreplicas[0] = 1;
        m->addr[0] = calloc(1, sizeof *m->addr[0]);
        if (!m->addr[0] || !(m->addr[0][0] = strdup("")))
            return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
        return DD_OK;
    }
    uint32_t s = 0;
    const char *p = c->nodes;
    for (;;) {
        if (s >= m->shards)
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "%s: lists more shards than cluster.shards=%" PRIu32
                           " (shards are separated by ';')",
                           key, m->shards);
        size_t shard_len = strcspn(p, ";");
        m->addr[s] = calloc(DD_CLUSTER_MAX_REPLICAS, sizeof *m->addr[s]);
        if (!m->addr[s]) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
        const char *q = p, *shard_end = p + shard_len;
        for (;;) {
            size_t n = strcspn(q, ",;");
            if (q + n > shard_end) n = (size_t)(shard_end - q);
            while (n && isspace((unsigned char)*q)) q++, n--;
            while (n && isspace((unsigned char)q[n - 1])) n--;
            if (m->nreplicas[s] == DD_CLUSTER_MAX_REPLICAS)
                return dd_fail(DD_ERR_INVALID, err, errlen,
                               "%s: shard %" PRIu32 " has more than %d replicas", key, s,
                               DD_CLUSTER_MAX_REPLICAS);
            char *a = strndup(q, n);
            if (!a) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
            m->addr[s][m->nreplicas[s]++] = a;
            uint16_t port;
            if (!n || dd_hostport_parse(a, NULL, 0, &port) != 0 || port == 0)
                return dd_fail(DD_ERR_INVALID, err, errlen,
                               "%s: \"%s\" (shard %" PRIu32 ") is not host:port", key, a, s);
            q += n;
            while (q < shard_end && isspace((unsigned char)*q)) q++;
            if (q >= shard_end) break;
            q++; /* ',' */
        }
        s++;
        if (!*shard_end) break;
        p = shard_end + 1;
    }
    if (s != m->shards)
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "%s: lists %" PRIu32 " shards, cluster.shards is %" PRIu32, key, s,
                       m->shards);
    for (uint32_t i = 0; i < m->shards; i++)
        for (uint32_t j = 0; j < m->nreplicas[i]; j++)
            for (uint32_t k = 0; k < m->shards; k++)
                for (uint32_t l = 0; l < m->nreplicas[k]; l++)
                    if ((k != i || l != j) && (k > i || (k == i && l > j)) &&
                        strcmp(m->addr[i][j], m->addr[k][l]) == 0)
                        return dd_fail(DD_ERR_INVALID, err, errlen, "%s: \"%s\" is listed twice",
                                       key, m->addr[i][j]);
    return DD_OK;
}

/* The I-th ';'-separated entry of LIST, trimmed, into OUT (NUL-terminated,
 * cut to OUTLEN); returns how many entries LIST has. */
static uint32_t list_entry(const char *list, uint32_t i, char *out, size_t outlen)
{
    uint32_t n = 0;
    for (const char *p = list;; n++) {
        size_t len = strcspn(p, ";");
        if (n == i && out) {
            const char *q = p;
            while (len && isspace((unsigned char)*q)) q++, len--;
            while (len && isspace((unsigned char)q[len - 1])) len--;
            snprintf(out, outlen, "%.*s", (int)len, q);
        }
        if (!p[len]) return n + 1;
        p += len + 1;
    }
}

bool dd_cluster_shard_redis(const struct dd_cluster_conf *c, uint32_t shard, char *out,
                            size_t outlen)
{
    if (!c->redis[0]) return false;
    list_entry(c->redis, shard, out, outlen);
    return true;
}

/* The ownership hash: what decides which node owns a user (the shard
 * count and the partitioner). Two nodes that differ here would answer for
 * each other's users. */
static uint64_t map_hash(const struct dd_cluster_map *m)
{
    uint32_t head[2] = {m->shards, (uint32_t)m->partitioner};
    return XXH3_64bits(head, sizeof head);
}

/* The node list's hash: differs between nodes during a rolling change of
 * replicas, which is harmless (each forwards to the replicas it knows). */
static uint64_t nodes_hash(const struct dd_cluster_map *m)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (uint32_t s = 0; s < m->shards; s++) {
        XXH3_64bits_update(&st, ";", 1);
        for (uint32_t r = 0; r < m->nreplicas[s]; r++)
            XXH3_64bits_update(&st, m->addr[s][r], strlen(m->addr[s][r]) + 1);
    }
    return XXH3_64bits_digest(&st);
}

int dd_cluster_conf_check(const struct dd_cluster_conf *c, const char *hostname,
                          struct dd_cluster_map *out, char *err, size_t errlen)
{
    struct dd_cluster_map m = {0};
    int rc;
    m.shards = c->shards;
    if (m.shards < 1 || m.shards > DD_CLUSTER_MAX_SHARDS) {
        rc = dd_fail(DD_ERR_INVALID, err, errlen, "cluster.shards: must be 1..%d",
                     DD_CLUSTER_MAX_SHARDS);
        goto done;
    }
    enum dd_partitioner part;
    if (dd_partitioner_parse(c->partitioner, &part) != DD_OK) {
        rc = dd_fail(DD_ERR_INVALID, err, errlen, "cluster.partitioner: unknown partitioner \"%s\"",
                     c->partitioner);
        goto done;
    }
    m.partitioner = (int)part;
    if ((rc = parse_nodes(c, &m, err, errlen)) != DD_OK) goto done;
    if ((rc = parse_place("cluster.shard", c->shard, m.shards, &m.shard, err, errlen)) != DD_OK)
        goto done;
    if ((rc = parse_place("cluster.replica", c->replica, DD_CLUSTER_MAX_REPLICAS, &m.replica, err,
                          errlen)) != DD_OK)
        goto done;
    if ((m.shard == UINT32_MAX) != (m.replica == UINT32_MAX)) {
        rc = dd_fail(DD_ERR_INVALID, err, errlen,
                     "cluster.shard and cluster.replica: \"auto\" must be given to both");
        goto done;
    }
    if (m.shard == UINT32_MAX) {
        uint32_t r = m.nreplicas[0];
        for (uint32_t s = 1; s < m.shards; s++)
            if (m.nreplicas[s] != r) {
                rc = dd_fail(DD_ERR_INVALID, err, errlen,
                             "cluster.shard = auto: every shard of cluster.nodes needs the same "
                             "number of replicas (shard 0 has %" PRIu32 ", shard %" PRIu32
                             " has %" PRIu32 ")",
                             r, s, m.nreplicas[s]);
                goto done;
            }
        /* checked before the host name, so that dedupd -t refuses it anywhere */
        if (c->split_from && (c->split_replicas == 0 || c->split_replicas > r)) {
            rc = dd_fail(DD_ERR_INVALID, err, errlen,
                         "cluster.split_replicas: with cluster.shard = auto and "
                         "cluster.split_from, give the replicas per shard when the split was "
                         "made (1..%" PRIu32 "): without it, adding replicas would move pods "
                         "to other shards",
                         r);
            goto done;
        }
        char name[256];
        long ord = host_ordinal(hostname, name, sizeof name);
        if (ord < 0 || (uint64_t)ord >= (uint64_t)m.shards * r) {
            rc = dd_fail(DD_ERR_INVALID, err, errlen,
                         "cluster.shard = auto: host name \"%s\" does not end in -N with N below "
                         "%" PRIu32 " (shards x replicas; ordinal = replica x shards + shard)",
                         name, m.shards * r);
            goto done;
        }
        /* Replica-major, and after a split the old map's pods first
         * (dd_cluster_auto_place): adding replicas or splitting appends
         * pods and moves none. */
        if (dd_cluster_auto_place(m.shards, r, c->split_from, c->split_replicas, (uint32_t)ord,
                                  &m.shard, &m.replica) != DD_OK) {
            rc = dd_fail(DD_ERR_INVALID, err, errlen,
                         "cluster.split_from: %" PRIu32 " must divide cluster.shards (%" PRIu32
                         ") and be smaller (N -> 2N: split_from = N)",
                         c->split_from, m.shards);
            goto done;
        }
    }
    if (m.replica >= m.nreplicas[m.shard]) {
        rc = dd_fail(DD_ERR_INVALID, err, errlen,
                     "cluster.replica: %" PRIu32 " but shard %" PRIu32
                     " of cluster.nodes has %" PRIu32 " replica(s)",
                     m.replica, m.shard, m.nreplicas[m.shard]);
        goto done;
    }
    if (c->redis[0]) {
        uint32_t n = list_entry(c->redis, 0, NULL, 0);
        if (n != m.shards) {
            rc = dd_fail(DD_ERR_INVALID, err, errlen,
                         "cluster.redis: lists %" PRIu32
                         " Redis addresses, cluster.shards is %" PRIu32,
                         n, m.shards);
            goto done;
        }
        for (uint32_t s = 0; s < n; s++) {
            char a[300];
            uint16_t port;
            list_entry(c->redis, s, a, sizeof a);
            if (dd_hostport_parse(a, NULL, 0, &port) != 0 || port == 0) {
                rc = dd_fail(DD_ERR_INVALID, err, errlen,
                             "cluster.redis: \"%s\" (shard %" PRIu32 ") is not host:port", a, s);
                goto done;
            }
        }
    }
    if (c->split_from) {
        if (c->split_from >= m.shards || m.shards % c->split_from != 0) {
            rc = dd_fail(DD_ERR_INVALID, err, errlen,
                         "cluster.split_from: %" PRIu32 " must divide cluster.shards (%" PRIu32
                         ") and be smaller (N -> 2N: split_from = N)",
                         c->split_from, m.shards);
            goto done;
        }
        struct dd_cluster_map old = {.shards = c->split_from, .partitioner = m.partitioner};
        m.split_from = c->split_from;
        m.split_hash = map_hash(&old);
    }
    m.hash = map_hash(&m);
    m.nodes_hash = nodes_hash(&m);
    rc = DD_OK;
done:
    if (rc == DD_OK && out)
        *out = m;
    else
        dd_cluster_map_free(&m);
    return rc;
}

int dd_cluster_auto_place(uint32_t n, uint32_t r, uint32_t m, uint32_t r0, uint32_t ord,
                          uint32_t *shard, uint32_t *replica)
{
    if (n < 1 || r < 1 || (uint64_t)ord >= (uint64_t)n * r) return DD_ERR_INVALID;
    if (m == 0) {
        *shard = ord % n;
        *replica = ord / n;
        return DD_OK;
    }
    if (m >= n || n % m != 0 || r0 < 1 || r0 > r) return DD_ERR_INVALID;
    if (ord < m * r0) {
        *shard = ord % m;
        *replica = ord / m;
    } else if (ord < n * r0) {
        uint32_t j = ord - m * r0, fresh = n - m;
        *shard = m + j % fresh;
        *replica = j / fresh;
    } else {
        uint32_t j = ord - n * r0;
        *shard = j % n;
        *replica = r0 + j / n;
    }
    return DD_OK;
}

void dd_cluster_map_hash_hex(const struct dd_cluster_map *m, char out[17])
{
    snprintf(out, 17, "%016" PRIx64, m->hash);
}

void dd_cluster_map_split_hex(const struct dd_cluster_map *m, char out[17])
{
    if (m->split_from)
        snprintf(out, 17, "%016" PRIx64, m->split_hash);
    else
        out[0] = '\0';
}

uint64_t dd_cluster_ownership_id(const struct dd_cluster_map *m)
{
    uint32_t v[4] = {0x6f776e31u /* "own1": a version */, m->shards, m->shard,
                     (uint32_t)m->partitioner};
    return XXH3_64bits(v, sizeof v);
}

uint32_t dd_cluster_source_shard(const struct dd_cluster_map *m)
{
    return m->split_from && m->shard >= m->split_from ? m->shard % m->split_from : m->shard;
}

uint32_t dd_cluster_shard_of(const struct dd_cluster_map *m, const char *user, size_t len,
                             int32_t partitions, int32_t *partition)
{
    int32_t p = dd_partition_of((enum dd_partitioner)m->partitioner, user, len, partitions);
    if (p < 0) p = 0; /* an empty key: never a valid user id (api.h) */
    if (partition) *partition = p;
    return (uint32_t)p % m->shards;
}

uint32_t dd_cluster_forward_cap(uint32_t conf_value, uint32_t shards, uint32_t threads,
                                uint32_t prepost)
{
    if (conf_value) return conf_value;
    uint64_t slots = (uint64_t)(threads ? threads : 1) * (prepost ? prepost : 1);
    uint64_t others = shards > 1 ? shards - 1 : 1;
    uint64_t cap = slots / (2 * others);
    return cap ? (uint32_t)(cap < UINT32_MAX ? cap : UINT32_MAX) : 1;
}

int dd_cluster_forward_cap_check(uint32_t value, uint32_t shards, uint32_t threads,
                                 uint32_t prepost, char *err, size_t errlen)
{
    if (!value) return DD_OK;
    uint64_t slots = (uint64_t)(threads ? threads : 1) * (prepost ? prepost : 1);
    uint64_t others = shards > 1 ? shards - 1 : 1;
    if ((uint64_t)value * others < slots) return DD_OK;
    return dd_fail(DD_ERR_INVALID, err, errlen,
                   "cluster.max_forward_inflight: %" PRIu32 " calls for each of %" PRIu64
                   " other shard(s) would take all %" PRIu64 " call slots of a method "
                   "(rpc.threads x rpc.prepost), leaving this node's own calls none; "
                   "set it below %" PRIu64 " or 0 (auto)",
                   value, others, slots, (slots + others - 1) / others);
}
