/* SPDX-License-Identifier: Apache-2.0
 *
 * cluster.c - see cluster.h. The map, the peers' states and the health
 * thread that keeps them.
 */
#include "cluster.h"

#include "addr.h"
#include "dd.h"
#include "log.h"
#include "partition.h"
#include "rpc.h"
#include "snapshot.h"
#include "sys.h"

#include "dedup.pb-c.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define MOD "cluster"

/* ---- the map ------------------------------------------------------------ */

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
                        return dd_fail(DD_ERR_INVALID, err, errlen,
                                       "%s: \"%s\" is listed twice", key, m->addr[i][j]);
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
    if ((rc = parse_place("cluster.replica", c->replica, DD_CLUSTER_MAX_REPLICAS, &m.replica,
                          err, errlen)) != DD_OK)
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
                         "to other shards", r);
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
                         ") and be smaller (N -> 2N: split_from = N)", c->split_from, m.shards);
            goto done;
        }
    }
    if (m.replica >= m.nreplicas[m.shard]) {
        rc = dd_fail(DD_ERR_INVALID, err, errlen,
                     "cluster.replica: %" PRIu32 " but shard %" PRIu32 " of cluster.nodes has %" PRIu32
                     " replica(s)",
                     m.replica, m.shard, m.nreplicas[m.shard]);
        goto done;
    }
    if (c->redis[0]) {
        uint32_t n = list_entry(c->redis, 0, NULL, 0);
        if (n != m.shards) {
            rc = dd_fail(DD_ERR_INVALID, err, errlen,
                         "cluster.redis: lists %" PRIu32 " Redis addresses, cluster.shards is %" PRIu32,
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

/* ---- the running cluster ----------------------------------------------- */

enum peer_state { PEER_UNKNOWN = 0, PEER_UP, PEER_DOWN };

/* Upper bounds of the forward latency buckets in seconds (+Inf implied). */
static const double fwd_bounds[] = {
    100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 1.0,
};

struct peer {
    uint32_t shard, replica;
    const char *addr;          /* the map's */
    char label[32];            /* "s.r" */
    grpc_channel *ch;          /* NULL for this node */
    _Atomic int state;         /* enum peer_state, from the last probe */
    atomic_bool unreachable;   /* the last probe got no answer: no connection, or none
                                * within its deadline (a peer that answered with an
                                * error is down but reachable) */
    atomic_bool ready;         /* the peer's own readiness */
    atomic_bool mismatch;      /* it would own other users than our map says */
    _Atomic int relation;      /* enum dd_cluster_relation of its map, when not a mismatch */
    atomic_bool nodes_differ;  /* it lists other nodes (a rolling change) */
    _Atomic int64_t lag_ms;
    _Atomic int64_t last_ok_ms; /* wall clock of the last answered probe; 0 never */
    _Atomic int32_t partitions;
    _Atomic uint64_t fwd[DD_FWD_OUTCOME_COUNT];
    _Atomic uint64_t oversized; /* replies over a receive limit (probes and forwards) */
    /* The health thread's probe in flight. */
    grpc_call *call;
    struct dd_unary u;
    char why[160];             /* the health thread's; read under cl->mu */
};

/* Calls forwarded to one shard from this node (dd_cluster_forward_begin). */
struct shard_fwd {
    _Atomic uint32_t inflight;
    _Atomic uint64_t refused_full;  /* past the cap */
    _Atomic uint64_t refused_down;  /* every replica down at the last round */
};

struct dd_cluster {
    struct dd_cluster_map map;
    char hash_hex[17];
    char split_hex[17];        /* "" when this map splits none */
    char nodes_hex[17];
    char self_label[32];
    struct peer *peers;        /* every node of the map, shard-major */
    uint32_t *first;           /* [shard]: index of its first replica in peers */
    size_t npeers;
    struct dd_cluster_local local;
    int64_t max_lag_ms, interval_ms, forward_timeout_ms;
    uint32_t fwd_cap;          /* cluster.max_forward_inflight, or its automatic value */
    uint32_t fwd_total_cap;    /* over all shards: a method's slots but one */
    _Atomic uint32_t fwd_total;
    struct shard_fwd *fwd;     /* [shard] */
    _Atomic uint32_t rr;       /* round robin over caught-up replicas */
    grpc_completion_queue *cq; /* the health thread's */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;        /* stop flag, the whys, mismatch text */
    pthread_cond_t cv;
    bool stop;
    _Atomic int64_t foreign_mismatch_until_ms; /* a caller's map differed (check_peer_map) */
    char foreign_why[200];
    struct dd_histogram fwd_latency;
    _Atomic uint64_t map_refusals; /* forwarded calls or probes refused for the map */
    atomic_bool self_behind;   /* this node's lag, as of the last health round */
    atomic_bool odd_one_out;   /* its map differs from as many peers as agree (last round) */
    atomic_bool settled;       /* dd_cluster_settled, as of the last health round */
    _Atomic int32_t settled_partitions; /* the partition count it was settled with */
    _Atomic uint64_t unsettled_rounds;
};

bool dd_cluster_self_behind(const dd_cluster *cl)
{
    return atomic_load_explicit(&cl->self_behind, memory_order_relaxed);
}

static void map_votes(dd_cluster *cl, size_t *disagree, size_t *agree, const struct peer **first);

/* How a map with ownership hash HASH that splits SPLIT ("" or NULL: none)
 * relates to ours. */
static enum dd_cluster_relation relation_of(const dd_cluster *cl, const char *hash,
                                            const char *split)
{
    if (strcmp(hash, cl->hash_hex) == 0) return DD_MAP_SAME;
    if (cl->split_hex[0] && strcmp(hash, cl->split_hex) == 0) return DD_MAP_OLDER;
    if (split && split[0] && strcmp(split, cl->hash_hex) == 0) return DD_MAP_NEWER;
    return DD_MAP_OTHER;
}

/* Every peer answered the last round with our own map, and the partition
 * count is known and unchanged. */
static bool compute_settled(dd_cluster *cl)
{
    int32_t n = cl->local.partitions ? cl->local.partitions(cl->local.ud) : 0;
    if (n <= 0) return false;
    if (cl->local.partitions_changed && cl->local.partitions_changed(cl->local.ud)) return false;
    for (size_t i = 0; i < cl->npeers; i++) {
        struct peer *p = &cl->peers[i];
        if (!p->ch) continue;
        if (atomic_load(&p->state) != PEER_UP || atomic_load(&p->mismatch) ||
            atomic_load(&p->relation) != DD_MAP_SAME)
            return false;
    }
    return true;
}

/* Refresh self_behind and odd_one_out (each health round, and at start). */
static void update_self(dd_cluster *cl)
{
    size_t disagree, agree;
    const struct peer *first;
    map_votes(cl, &disagree, &agree, &first);
    bool odd = disagree && disagree >= agree;
    bool was = atomic_exchange(&cl->odd_one_out, odd);
    if (odd && !was)
        dd_error(MOD, "msg=\"this node's cluster map differs from its peers'; refusing calls "
                      "until they agree\" disagree=%zu agree=%zu",
                 disagree, agree);
    else if (!odd && was)
        dd_info(MOD, "msg=\"cluster map agreed again; serving\"");
    bool settled = compute_settled(cl);
    if (!settled) atomic_fetch_add(&cl->unsettled_rounds, 1);
    /* dd_cluster_owns reads the count from here, never from ingest: the
     * compaction threads that call it may outlive ingest. */
    atomic_store(&cl->settled_partitions,
                 settled && cl->local.partitions ? cl->local.partitions(cl->local.ud) : 0);
    atomic_store(&cl->settled, settled);
    int64_t lag = cl->local.lag_ms ? cl->local.lag_ms(cl->local.ud) : -1;
    bool behind = lag < 0 || lag > cl->max_lag_ms;
    if (atomic_exchange(&cl->self_behind, behind) != behind)
        dd_info(MOD, "msg=\"%s\" lag_ms=%" PRId64 " max_lag_ms=%" PRId64,
                behind ? "this node is behind: calls of its shard go to caught-up replicas"
                       : "this node has caught up",
                lag, cl->max_lag_ms);
}

const struct dd_cluster_map *dd_cluster_get_map(const dd_cluster *cl) { return &cl->map; }
int64_t dd_cluster_forward_timeout_ms(const dd_cluster *cl) { return cl->forward_timeout_ms; }

static struct peer *peer_at(dd_cluster *cl, uint32_t shard, uint32_t replica)
{
    return &cl->peers[cl->first[shard] + replica];
}

/* The credentials peers are called with: TLS with our own certificate as
 * client certificate when rpc.tls_cert is set, else plaintext. */
static grpc_channel_credentials *peer_credentials(const struct dd_cluster_conf *c,
                                                  const struct dd_rpc_conf *rpc, char *err,
                                                  size_t errlen)
{
    if (!rpc->tls_cert[0]) return grpc_insecure_credentials_create();
    const char *ca = c->tls_ca[0] ? c->tls_ca : rpc->tls_client_ca[0] ? rpc->tls_client_ca
                                                                       : rpc->tls_cert;
    char *roots = dd_read_file(ca, err, errlen);
    char *cert = roots ? dd_read_file(rpc->tls_cert, err, errlen) : NULL;
    char *key = cert ? dd_read_file(rpc->tls_key, err, errlen) : NULL;
    grpc_channel_credentials *creds = NULL;
    if (key) {
        grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
        creds = grpc_ssl_credentials_create(roots, &pair, NULL, NULL);
        if (!creds) dd_set_err(err, errlen, "cannot build TLS credentials for peers from %s", ca);
    }
    free(roots);
    free(cert);
    if (key) {
        memset(key, 0, strlen(key));
        free(key);
    }
    return creds;
}

/* ---- receive limits ------------------------------------------------------
 *
 * A peer's reply is read whole into memory before anything here sees it,
 * so every peer channel bounds what it receives by what the method can
 * legitimately answer: a reply over the limit fails the call in grpc
 * (RESOURCE_EXHAUSTED, "Received message larger than max") and counts as
 * a failed attempt of that peer. One channel to each peer serves the
 * status probes and the forwarded calls over one connection; its limit is
 * the largest forwarded answer (Filter's), and a service config on the
 * channel gives each smaller method its own lower limit (grpc applies the
 * lower of the two). The copy channel (dd_cluster_channel_new) is bounded
 * the same way by the snapshot methods' sizes. */

/* The size of V as a protobuf varint. */
static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

/* The most a Status, RecordDelivery, RecordPlays or ForgetUser reply can
 * take: a NodeStatus is two varints, three 16-digit hashes, a count and a
 * reason under 200 bytes; the others a few varints. */
#define SMALL_REPLY_MAX 4096

size_t dd_cluster_filter_reply_max(uint32_t max_candidates, uint32_t max_id_bytes)
{
    /* Each candidate is either kept (an id: key, length, bytes; or an
     * index in the packed list: at most 5 bytes) or removed (with explain:
     * a Removed of key, length, index varint and reason varint). */
    size_t id = 1 + varint_len(max_id_bytes) + max_id_bytes;
    size_t removed = 1 + 1 + (1 + varint_len(max_candidates)) + (1 + 1);
    size_t per = id > removed ? id : removed;
    if (per < 5) per = 5;
    /* The packed indexes' key and length, degraded, three counts. */
    size_t fixed = (1 + 10) + 2 + 3 * (1 + 5);
    if ((size_t)max_candidates > (SIZE_MAX - fixed) / per) return SIZE_MAX;
    return (size_t)max_candidates * per + fixed;
}

size_t dd_cluster_manifest_reply_max(void)
{
    /* A SnapshotFile: name (key, length, at most DD_SNAPSHOT_NAME_MAX
     * bytes), size and checksum varints; in the manifest each is a
     * length-delimited field. The id is under 48 bytes, ready a bool. */
    size_t file = 1 + varint_len(DD_SNAPSHOT_NAME_MAX) + DD_SNAPSHOT_NAME_MAX + 2 * (1 + 10);
    return (size_t)DD_SNAPSHOT_FILES_MAX * (1 + varint_len(file) + file) + (1 + 1 + 48) + 2;
}

size_t dd_cluster_chunk_reply_max(void)
{
    /* data (key, length, at most DD_SNAPSHOT_CHUNK_MAX bytes), retry. */
    return 1 + varint_len(DD_SNAPSHOT_CHUNK_MAX) + DD_SNAPSHOT_CHUNK_MAX + (1 + 5);
}

static int clamp_int(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

/* The memory grpc may hold for one peer channel's connection (its read
 * buffers, and a reply being received): grpc reads a whole message before
 * its size limit is checked, so without a quota a peer could still make
 * this node hold one huge reply for a moment. Under pressure grpc cancels
 * that connection's calls (a failed attempt of that peer). Room for two of
 * the largest replies and the connection's own buffers. */
static size_t peer_quota_bytes(size_t reply_max)
{
    size_t q = reply_max < (SIZE_MAX - (8u << 20)) / 2 ? 2 * reply_max + (8u << 20) : SIZE_MAX;
    return q < (16u << 20) ? 16u << 20 : q;
}

/* The service config of a peer channel: per-method receive limits below
 * the channel's own. Into BUF; false if it does not fit (cannot happen). */
static bool peer_service_config(char *buf, size_t len, bool copy)
{
    int n;
    if (copy)
        n = snprintf(buf, len,
                     "{\"methodConfig\":[{\"name\":[{\"service\":\"dedup.v1.Cluster\","
                     "\"method\":\"SnapshotRead\"}],\"maxResponseMessageBytes\":%d},"
                     "{\"name\":[{\"service\":\"dedup.v1.Cluster\",\"method\":\"Status\"}],"
                     "\"maxResponseMessageBytes\":%d}]}",
                     clamp_int(dd_cluster_chunk_reply_max()), SMALL_REPLY_MAX);
    else
        n = snprintf(buf, len,
                     "{\"methodConfig\":[{\"name\":["
                     "{\"service\":\"dedup.v1.Cluster\",\"method\":\"Status\"},"
                     "{\"service\":\"dedup.v1.Dedup\",\"method\":\"RecordDelivery\"},"
                     "{\"service\":\"dedup.v1.Dedup\",\"method\":\"RecordPlays\"},"
                     "{\"service\":\"dedup.v1.Dedup\",\"method\":\"ForgetUser\"}],"
                     "\"maxResponseMessageBytes\":%d}]}",
                     SMALL_REPLY_MAX);
    return n > 0 && (size_t)n < len;
}

/* The settings of every channel to a peer, into ARGS (room for 10); their
 * count. Strings are borrowed from CONF and SC (the service config, made
 * by peer_service_config), QUOTA too (the channel takes its own
 * reference). COPY: the channel of a copy (snapshot.h),
 * else the probes' and forwarded calls'. */
static size_t channel_args(const struct dd_cluster_conf *conf, const struct dd_rpc_conf *rpc,
                           bool copy, char *sc, grpc_resource_quota *quota, grpc_arg *args)
{
    /* Reconnect soon after a peer comes back (grpc's default backoff grows
     * to 2 minutes); we retry on the next replica ourselves, so grpc's own
     * retries are off. */
    size_t nargs = 0;
#define INT_ARG(k, v)                                                                    \
    do {                                                                                 \
        args[nargs].type = GRPC_ARG_INTEGER;                                             \
        args[nargs].key = (char *)(k);                                                   \
        args[nargs].value.integer = (v);                                                 \
        nargs++;                                                                         \
    } while (0)
    INT_ARG(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    INT_ARG(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    INT_ARG(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    INT_ARG(GRPC_ARG_ENABLE_RETRIES, 0);
    /* The limits below are ours: no service config from DNS replaces them. */
    INT_ARG(GRPC_ARG_SERVICE_CONFIG_DISABLE_RESOLUTION, 1);
    INT_ARG(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
            clamp_int(copy ? dd_cluster_manifest_reply_max()
                           : dd_cluster_filter_reply_max(rpc->max_candidates, rpc->max_id_bytes)));
#undef INT_ARG
    args[nargs].type = GRPC_ARG_STRING;
    args[nargs].key = (char *)GRPC_ARG_SERVICE_CONFIG;
    args[nargs].value.string = sc;
    nargs++;
    args[nargs].type = GRPC_ARG_POINTER;
    args[nargs].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
    args[nargs].value.pointer.p = quota;
    args[nargs].value.pointer.vtable = grpc_resource_quota_arg_vtable();
    nargs++;
    if (conf->tls_server_name[0] && rpc->tls_cert[0]) {
        args[nargs].type = GRPC_ARG_STRING;
        args[nargs].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[nargs].value.string = conf->tls_server_name;
        nargs++;
    }
    return nargs;
}

grpc_channel *dd_cluster_channel_new(const struct dd_cluster_conf *conf,
                                     const struct dd_rpc_conf *rpc, const char *addr, char *err,
                                     size_t errlen)
{
    char sc[1024];
    if (!peer_service_config(sc, sizeof sc, true)) {
        dd_set_err(err, errlen, "cannot build the peer channel's service config");
        return NULL;
    }
    grpc_channel_credentials *creds = peer_credentials(conf, rpc, err, errlen);
    if (!creds) return NULL;
    grpc_resource_quota *quota = grpc_resource_quota_create(NULL);
    grpc_resource_quota_resize(quota, peer_quota_bytes(dd_cluster_manifest_reply_max()));
    grpc_arg args[10];
    size_t nargs = channel_args(conf, rpc, true, sc, quota, args);
    grpc_channel_args chargs = {.num_args = nargs, .args = args};
    grpc_channel *ch = grpc_channel_create(addr, creds, &chargs);
    grpc_resource_quota_unref(quota);
    grpc_channel_credentials_release(creds);
    if (!ch) dd_set_err(err, errlen, "cannot create a channel to %s", addr);
    return ch;
}

int dd_cluster_new(dd_cluster **out, struct dd_cluster_map *map,
                   const struct dd_cluster_conf *conf, const struct dd_rpc_conf *rpc,
                   const struct dd_cluster_local *local, char *err, size_t errlen)
{
    *out = NULL;
    dd_cluster *cl = calloc(1, sizeof *cl);
    if (!cl) {
        dd_cluster_map_free(map);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }
    cl->map = *map;
    memset(map, 0, sizeof *map);
    grpc_init();
    pthread_mutex_init(&cl->mu, NULL);
    pthread_cond_init(&cl->cv, NULL);
    dd_histogram_init(&cl->fwd_latency, fwd_bounds, DD_ARRAY_LEN(fwd_bounds));
    dd_cluster_map_hash_hex(&cl->map, cl->hash_hex);
    dd_cluster_map_split_hex(&cl->map, cl->split_hex);
    snprintf(cl->nodes_hex, sizeof cl->nodes_hex, "%016" PRIx64, cl->map.nodes_hash);
    snprintf(cl->self_label, sizeof cl->self_label, "%" PRIu32 ".%" PRIu32, cl->map.shard,
             cl->map.replica);
    cl->local = *local;
    cl->max_lag_ms = conf->max_lag_ms;
    cl->interval_ms = conf->health_interval_ms ? conf->health_interval_ms : 1000;
    cl->forward_timeout_ms = conf->forward_timeout_ms ? conf->forward_timeout_ms : 5000;
    atomic_init(&cl->self_behind, true);
    int rc = DD_ERR_NOMEM;
    cl->fwd_cap = dd_cluster_forward_cap(conf->max_forward_inflight, cl->map.shards,
                                         rpc->threads, rpc->prepost);
    {
        uint64_t slots = (uint64_t)(rpc->threads ? rpc->threads : 1) *
                         (rpc->prepost ? rpc->prepost : 1);
        cl->fwd_total_cap = slots > 1 ? (uint32_t)(slots - 1 < UINT32_MAX ? slots - 1 : UINT32_MAX)
                                      : 1;
    }
    cl->fwd = calloc(cl->map.shards, sizeof *cl->fwd);
    cl->first = calloc(cl->map.shards, sizeof *cl->first);
    for (uint32_t s = 0; s < cl->map.shards; s++) {
        if (cl->first) cl->first[s] = (uint32_t)cl->npeers;
        cl->npeers += cl->map.nreplicas[s];
    }
    cl->peers = calloc(cl->npeers, sizeof *cl->peers);
    if (!cl->first || !cl->peers || !cl->fwd) {
        dd_fail(rc, err, errlen, "out of memory");
        goto err;
    }
    grpc_channel_credentials *creds = peer_credentials(conf, rpc, err, errlen);
    if (!creds) {
        rc = DD_ERR_INVALID;
        goto err;
    }
    char sc[1024];
    if (!peer_service_config(sc, sizeof sc, false)) {
        grpc_channel_credentials_release(creds);
        dd_fail(DD_ERR_INVALID, err, errlen, "cannot build the peer channels' service config");
        rc = DD_ERR_INVALID;
        goto err;
    }
    size_t quota_bytes =
        peer_quota_bytes(dd_cluster_filter_reply_max(rpc->max_candidates, rpc->max_id_bytes));
    size_t i = 0;
    for (uint32_t s = 0; s < cl->map.shards; s++) {
        for (uint32_t r = 0; r < cl->map.nreplicas[s]; r++, i++) {
            struct peer *p = &cl->peers[i];
            p->shard = s;
            p->replica = r;
            p->addr = cl->map.addr[s][r];
            snprintf(p->label, sizeof p->label, "%" PRIu32 ".%" PRIu32, s, r);
            atomic_init(&p->lag_ms, -1);
            dd_unary_init(&p->u);
            if (s == cl->map.shard && r == cl->map.replica) continue;
            /* A quota of its own: one peer's pressure cancels only its calls. */
            grpc_resource_quota *quota = grpc_resource_quota_create(NULL);
            grpc_resource_quota_resize(quota, quota_bytes);
            grpc_arg args[10];
            size_t nargs = channel_args(conf, rpc, false, sc, quota, args);
            grpc_channel_args chargs = {.num_args = nargs, .args = args};
            p->ch = grpc_channel_create(p->addr, creds, &chargs);
            grpc_resource_quota_unref(quota);
            if (!p->ch) {
                grpc_channel_credentials_release(creds);
                dd_fail(rc, err, errlen, "cannot create a channel to %s", p->addr);
                goto err;
            }
        }
    }
    grpc_channel_credentials_release(creds);
    cl->cq = grpc_completion_queue_create_for_next(NULL);
    if (!cl->cq) {
        dd_fail(rc, err, errlen, "cannot create a completion queue");
        goto err;
    }
    *out = cl;
    return DD_OK;
err:
    dd_cluster_free(cl);
    return rc;
}

/* ---- probes ------------------------------------------------------------- */

void dd_unary_init(struct dd_unary *u)
{
    memset(u, 0, sizeof *u);
    grpc_metadata_array_init(&u->md_in);
    grpc_metadata_array_init(&u->trailers);
    u->details = grpc_empty_slice();
}

void dd_unary_reset(struct dd_unary *u)
{
    if (u->recv) grpc_byte_buffer_destroy(u->recv);
    grpc_metadata_array_destroy(&u->md_in);
    grpc_metadata_array_destroy(&u->trailers);
    grpc_slice_unref(u->details);
    dd_unary_init(u);
}

grpc_call_error dd_unary_start(grpc_call *call, struct dd_unary *u, void *tag)
{
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = u->nmd;
    ops[0].data.send_initial_metadata.metadata = (grpc_metadata *)u->md;
    ops[0].flags = u->flags;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = u->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &u->md_in;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &u->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &u->trailers;
    ops[5].data.recv_status_on_client.status = &u->status;
    ops[5].data.recv_status_on_client.status_details = &u->details;
    return grpc_call_start_batch(call, ops, 6, tag, NULL);
}

/* Start a Status call to P on the health thread's queue; its tag is P. */
static void probe_start(dd_cluster *cl, struct peer *p, gpr_timespec deadline)
{
    Dedup__V1__NodeStatusRequest req = DEDUP__V1__NODE_STATUS_REQUEST__INIT;
    req.map_hash = cl->hash_hex;
    req.split_hash = cl->split_hex;
    req.from = cl->self_label;
    uint8_t buf[160];
    size_t n = dedup__v1__node_status_request__get_packed_size(&req);
    if (n > sizeof buf) return; /* cannot happen: two short strings */
    dedup__v1__node_status_request__pack(&req, buf);
    grpc_slice sl = grpc_slice_from_copied_buffer((const char *)buf, n);
    p->u.send = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    /* Wait for a connection within the round's deadline rather than fail
     * fast: a channel connects only while a call on it is pending and its
     * queue is polled (rpc.poller = poll), so a peer only probed, never
     * forwarded to, would otherwise stay "down" after any failed connect. */
    p->u.flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    p->call = grpc_channel_create_call(p->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cl->cq,
                                       grpc_slice_from_static_string(DD_API_PATH_CLUSTER_STATUS),
                                       NULL, deadline, NULL);
    if (!p->call || dd_unary_start(p->call, &p->u, p) != GRPC_CALL_OK) {
        /* Counted as a failed probe at once. */
        if (p->call) grpc_call_unref(p->call);
        p->call = NULL;
        grpc_byte_buffer_destroy(p->u.send);
        p->u.send = NULL;
    }
}

static void set_down(struct peer *p, const char *why)
{
    int was = atomic_exchange(&p->state, PEER_DOWN);
    if (was != PEER_DOWN)
        dd_warn(MOD, "msg=\"peer down\" peer=%s addr=%s reason=\"%s\"", p->label, p->addr, why);
    atomic_store(&p->ready, false);
}

/* Whether DETAILS starts with the literal PREFIX. */
#define SLICE_STARTS(details, prefix)                                                    \
    (GRPC_SLICE_LENGTH(details) >= sizeof(prefix) - 1 &&                                 \
     memcmp(GRPC_SLICE_START_PTR(details), prefix, sizeof(prefix) - 1) == 0)

bool dd_cluster_reply_too_large(grpc_status_code status, grpc_slice details)
{
    /* grpc's words: the size limit, and the memory quota's reclaimer. */
    return status == GRPC_STATUS_RESOURCE_EXHAUSTED &&
           (SLICE_STARTS(details, "Received message larger than max") ||
            SLICE_STARTS(details, "Buffers full"));
}

/* P's reply to a WHAT (a method's short name) was over its receive limit:
 * counted, and logged at most every few seconds over all peers. */
static void peer_oversized(struct peer *p, const char *what, grpc_slice details)
{
    static struct dd_log_limit lim;
    atomic_fetch_add_explicit(&p->oversized, 1, memory_order_relaxed);
    char d[128];
    dd_sanitize(d, sizeof d, (const char *)GRPC_SLICE_START_PTR(details),
                GRPC_SLICE_LENGTH(details));
    dd_log_limited(&lim, 5000, DD_LOG_WARN, MOD,
                   "msg=\"peer's reply larger than its receive limit; a failed attempt\" "
                   "peer=%s addr=%s method=%s detail=\"%s\"",
                   p->label, p->addr, what, d);
}

/* Copy the peer's string S (NULL as "") sanitized into OUT. */
#define PEER_TEXT(out, s) dd_sanitize((out), sizeof(out), (s) ? (s) : "", (s) ? strlen(s) : 0)

/* A probe of P finished (OK = the batch completed): read its answer.
 * Everything the peer said that is shown or logged is sanitized first:
 * a peer's text reaches /readyz, /cluster and the log only escaped and
 * bounded. */
static void probe_done(dd_cluster *cl, struct peer *p, int ok)
{
    char why[160] = "";
    Dedup__V1__NodeStatus *st = NULL;
    /* No answer at all: forwarded calls would wait for theirs too. An
     * answer with an error (a peer that does not allow this node) is
     * passed on to callers as it comes. */
    atomic_store(&p->unreachable, !ok || p->u.status == GRPC_STATUS_UNAVAILABLE ||
                                      p->u.status == GRPC_STATUS_DEADLINE_EXCEEDED);
    if (!ok || p->u.status != GRPC_STATUS_OK || !p->u.recv) {
        char d[120];
        dd_sanitize(d, sizeof d, (const char *)GRPC_SLICE_START_PTR(p->u.details),
                    GRPC_SLICE_LENGTH(p->u.details));
        snprintf(why, sizeof why, "status %d: %s", ok ? (int)p->u.status : -1, d);
        if (ok && dd_cluster_reply_too_large(p->u.status, p->u.details))
            peer_oversized(p, "ClusterStatus", p->u.details);
        set_down(p, why);
    } else {
        grpc_byte_buffer_reader r;
        if (grpc_byte_buffer_reader_init(&r, p->u.recv)) {
            grpc_slice all = grpc_byte_buffer_reader_readall(&r);
            grpc_byte_buffer_reader_destroy(&r);
            st = dedup__v1__node_status__unpack(NULL, GRPC_SLICE_LENGTH(all),
                                                GRPC_SLICE_START_PTR(all));
            grpc_slice_unref(all);
        }
        int32_t ours = cl->local.partitions ? cl->local.partitions(cl->local.ud) : 0;
        if (!st || st->shard != p->shard) {
            /* The address serves another shard than the map says: it
             * would answer for other users. */
            if (st)
                snprintf(why, sizeof why, "it says it is of shard %" PRIu32 ", the map says %s",
                         st->shard, p->label);
            else
                snprintf(why, sizeof why, "its status cannot be decoded");
            bool was = atomic_exchange(&p->mismatch, true);
            if (!was)
                dd_error(MOD, "msg=\"peer disagrees about the cluster map\" peer=%s addr=%s "
                              "reason=\"%s\"",
                         p->label, p->addr, why);
            atomic_store(&p->state, PEER_UP);
            atomic_store(&p->ready, false);
        } else {
            char theirs[40], their_why[120];
            PEER_TEXT(theirs, st->map_hash);
            PEER_TEXT(their_why, st->why);
            enum dd_cluster_relation rel = relation_of(cl, st->map_hash, st->split_hash);
            /* The partition count decides ownership as the shard count
             * does: a peer that sees another count for the topic would
             * answer for other users (0 = not known yet, on either side). */
            bool parts = rel == DD_MAP_SAME && ours > 0 && st->partition_count > 0 &&
                         st->partition_count != ours;
            bool differ = rel == DD_MAP_OTHER || parts;
            bool was = atomic_exchange(&p->mismatch, differ);
            int rel_was = atomic_exchange(&p->relation, differ ? DD_MAP_SAME : (int)rel);
            if (parts && !was)
                dd_error(MOD, "msg=\"peer sees another partition count of the plays topic; not "
                              "used\" peer=%s addr=%s ours=%" PRId32 " theirs=%" PRId32,
                         p->label, p->addr, ours, st->partition_count);
            else if (differ && !was)
                dd_error(MOD, "msg=\"peer has another cluster map (shards or partitioner); not "
                              "used\" peer=%s addr=%s ours=%s theirs=\"%s\"",
                         p->label, p->addr, cl->hash_hex, theirs);
            else if (!differ && was)
                dd_info(MOD, "msg=\"peer agrees about the cluster map again\" peer=%s", p->label);
            if (!differ && (int)rel != rel_was)
                dd_info(MOD, "msg=\"%s\" peer=%s addr=%s",
                        rel == DD_MAP_OLDER   ? "resharding: peer runs the map this one splits"
                        : rel == DD_MAP_NEWER ? "resharding: peer runs a map that splits this one"
                                              : "peer runs this node's map",
                        p->label, p->addr);
            bool nodes = strcmp(st->nodes_hash, cl->nodes_hex) != 0 || st->replica != p->replica;
            bool nodes_was = atomic_exchange(&p->nodes_differ, nodes);
            if (nodes && !nodes_was)
                dd_warn(MOD, "msg=\"peer lists other nodes than this node (cluster.nodes)\" "
                             "peer=%s addr=%s its_place=%" PRIu32 ".%" PRIu32,
                        p->label, p->addr, st->shard, st->replica);
            if (parts)
                snprintf(why, sizeof why,
                         "it sees %" PRId32 " partitions of the plays topic, this node %" PRId32,
                         st->partition_count, ours);
            else if (differ)
                snprintf(why, sizeof why, "cluster map %s differs", theirs);
            else if (!st->ready)
                snprintf(why, sizeof why, "%s", their_why);
            atomic_store(&p->lag_ms, st->lag_ms);
            atomic_store(&p->partitions, st->partition_count);
            atomic_store(&p->ready, st->ready);
            atomic_store(&p->last_ok_ms, dd_now_ms());
            int prev = atomic_exchange(&p->state, PEER_UP);
            if (prev == PEER_DOWN) dd_info(MOD, "msg=\"peer up\" peer=%s addr=%s", p->label, p->addr);
        }
        if (st) dedup__v1__node_status__free_unpacked(st, NULL);
    }
    pthread_mutex_lock(&cl->mu);
    snprintf(p->why, sizeof p->why, "%s", why);
    pthread_mutex_unlock(&cl->mu);
    if (p->call) grpc_call_unref(p->call);
    p->call = NULL;
    grpc_byte_buffer_destroy(p->u.send);
    dd_unary_reset(&p->u);
}

/* Each round probes every peer at once and waits for every answer (each
 * bounded by the round's deadline), then sleeps out the interval. */
static void *health_main(void *arg)
{
    dd_cluster *cl = arg;
    for (;;) {
        int64_t start = dd_mono_ns();
        update_self(cl);
        gpr_timespec deadline = gpr_time_add(
            gpr_now(GPR_CLOCK_MONOTONIC),
            gpr_time_from_millis(cl->interval_ms < 2000 ? cl->interval_ms : 2000, GPR_TIMESPAN));
        size_t pending = 0;
        for (size_t i = 0; i < cl->npeers; i++) {
            struct peer *p = &cl->peers[i];
            if (!p->ch) continue;
            probe_start(cl, p, deadline);
            if (p->call)
                pending++;
            else
                set_down(p, "cannot start a call");
        }
        while (pending) {
            grpc_event ev = grpc_completion_queue_next(cl->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                                       NULL);
            if (ev.type != GRPC_OP_COMPLETE) break;
            probe_done(cl, ev.tag, ev.success);
            pending--;
        }
        update_self(cl);
        pthread_mutex_lock(&cl->mu);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t left_ns = start + cl->interval_ms * 1000000 - dd_mono_ns();
        if (left_ns < 0) left_ns = 0;
        until.tv_sec += left_ns / 1000000000;
        until.tv_nsec += left_ns % 1000000000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        while (!cl->stop && pthread_cond_timedwait(&cl->cv, &cl->mu, &until) == 0) {}
        bool stop = cl->stop;
        pthread_mutex_unlock(&cl->mu);
        if (stop) break;
    }
    return NULL;
}

int dd_cluster_start(dd_cluster *cl, char *err, size_t errlen)
{
    if (cl->started) return dd_fail(DD_ERR_STATE, err, errlen, "the cluster is already started");
    pthread_cond_destroy(&cl->cv);
    (void)dd_sys_cond_init_monotonic(&cl->cv); /* glibc's pthread_cond_init does not fail */
    if (pthread_create(&cl->thread, NULL, health_main, cl) != 0)
        return dd_fail(DD_ERR_NOMEM, err, errlen, "cannot start the cluster health thread");
    cl->started = true;
    dd_info(MOD, "msg=started shards=%" PRIu32 " shard=%" PRIu32 " replica=%" PRIu32
                 " nodes=%zu partitioner=%s map=%s",
            cl->map.shards, cl->map.shard, cl->map.replica, cl->npeers,
            dd_partitioner_name((enum dd_partitioner)cl->map.partitioner), cl->hash_hex);
    return DD_OK;
}

void dd_cluster_stop(dd_cluster *cl)
{
    if (!cl || !cl->started) return;
    pthread_mutex_lock(&cl->mu);
    cl->stop = true;
    pthread_cond_signal(&cl->cv);
    pthread_mutex_unlock(&cl->mu);
    pthread_join(cl->thread, NULL);
    cl->started = false;
}

void dd_cluster_free(dd_cluster *cl)
{
    if (!cl) return;
    dd_cluster_stop(cl);
    if (cl->cq) {
        grpc_completion_queue_shutdown(cl->cq);
        while (grpc_completion_queue_next(cl->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {}
        grpc_completion_queue_destroy(cl->cq);
    }
    for (size_t i = 0; cl->peers && i < cl->npeers; i++) {
        struct peer *p = &cl->peers[i];
        if (p->ch) grpc_channel_destroy(p->ch);
        dd_unary_reset(&p->u);
    }
    free(cl->peers);
    free(cl->first);
    free(cl->fwd);
    dd_cluster_map_free(&cl->map);
    pthread_mutex_destroy(&cl->mu);
    pthread_cond_destroy(&cl->cv);
    free(cl);
    grpc_shutdown();
}

/* ---- routing ------------------------------------------------------------ */

int dd_cluster_route(dd_cluster *cl, const char *user, size_t len, uint32_t *shard, bool *local,
                     char *err, size_t errlen)
{
    if (atomic_load_explicit(&cl->odd_one_out, memory_order_relaxed))
        return dd_fail(DD_ERR_STATE, err, errlen,
                       "this node's cluster map (shards, partitioner) differs from its peers': "
                       "it answers no call until they agree (see its log and /readyz)");
    int32_t n = cl->local.partitions ? cl->local.partitions(cl->local.ud) : 0;
    if (n <= 0)
        return dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                       "this node does not know the plays topic's partition count yet");
    if (cl->local.partitions_changed && cl->local.partitions_changed(cl->local.ud))
        return dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                       "the plays topic's partition count changed: this node no longer knows "
                       "which users it owns (restart the cluster with a new map)");
    *shard = dd_cluster_shard_of(&cl->map, user, len, n, NULL);
    *local = *shard == cl->map.shard;
    return DD_OK;
}

/* The tiers of replica choice, best first. */
enum { TIER_GOOD = 0, TIER_UNKNOWN, TIER_BEHIND, TIER_DOWN, TIER_COUNT };

static int tier_of(const dd_cluster *cl, struct peer *p)
{
    if (atomic_load_explicit(&p->mismatch, memory_order_relaxed)) return -1;
    int st = atomic_load_explicit(&p->state, memory_order_relaxed);
    if (st == PEER_UNKNOWN) return TIER_UNKNOWN;
    if (st == PEER_DOWN) return TIER_DOWN;
    int64_t lag = atomic_load_explicit(&p->lag_ms, memory_order_relaxed);
    if (atomic_load_explicit(&p->ready, memory_order_relaxed) && lag >= 0 &&
        lag <= cl->max_lag_ms)
        return TIER_GOOD;
    return TIER_BEHIND;
}

int dd_cluster_pick(dd_cluster *cl, uint32_t shard, bool good_only, uint32_t *tried,
                    grpc_channel **channel, bool *behind)
{
    uint32_t n = cl->map.nreplicas[shard];
    uint32_t start = atomic_fetch_add_explicit(&cl->rr, 1, memory_order_relaxed) % n;
    int best = -1, best_tier = TIER_COUNT;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t r = (start + k) % n;
        struct peer *p = peer_at(cl, shard, r);
        if (!p->ch || (*tried & (1u << r))) continue;
        int t = tier_of(cl, p);
        if (good_only && t != TIER_GOOD) continue;
        if (t >= 0 && t < best_tier) {
            best = (int)r;
            best_tier = t;
        }
    }
    if (best < 0) return -1;
    *tried |= 1u << best;
    *channel = peer_at(cl, shard, (uint32_t)best)->ch;
    *behind = best_tier >= TIER_BEHIND;
    return best;
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

/* Every replica of SHARD but this node was down and unreachable at the
 * last health round (false when it has none: dd_cluster_pick then finds
 * none). */
static bool shard_down(const dd_cluster *cl, uint32_t shard)
{
    uint32_t n = cl->map.nreplicas[shard], peers = 0;
    for (uint32_t r = 0; r < n; r++) {
        const struct peer *p = &cl->peers[cl->first[shard] + r];
        if (!p->ch) continue;
        peers++;
        if (atomic_load_explicit(&p->state, memory_order_relaxed) != PEER_DOWN ||
            !atomic_load_explicit(&p->unreachable, memory_order_relaxed))
            return false;
    }
    return peers > 0;
}

int dd_cluster_forward_begin(dd_cluster *cl, uint32_t shard, char *err, size_t errlen)
{
    if (shard >= cl->map.shards)
        return dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "shard %" PRIu32 " is not in the map",
                       shard);
    struct shard_fwd *f = &cl->fwd[shard];
    /* A shard nobody reached at the last round costs nothing: its calls
     * would each wait for their whole deadline on a replica that may be
     * stopped with its connections open. */
    if (shard_down(cl, shard)) {
        atomic_fetch_add_explicit(&f->refused_down, 1, memory_order_relaxed);
        return dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                       "every replica of shard %" PRIu32 " was unreachable at the last health "
                       "round: its calls fail at once until a round reaches one (retry later)",
                       shard);
    }
    uint32_t n = atomic_fetch_add_explicit(&f->inflight, 1, memory_order_relaxed);
    if (n >= cl->fwd_cap) {
        atomic_fetch_sub_explicit(&f->inflight, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&f->refused_full, 1, memory_order_relaxed);
        return dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                       "shard %" PRIu32 " already has cluster.max_forward_inflight=%" PRIu32
                       " calls forwarded from this node in flight (its replicas are slow): "
                       "refused at once (retry later)",
                       shard, cl->fwd_cap);
    }
    /* With more shards than slots, the automatic cap of 1 each could
     * still add up to every slot: the total keeps one for our own. */
    n = atomic_fetch_add_explicit(&cl->fwd_total, 1, memory_order_relaxed);
    if (n < cl->fwd_total_cap) return DD_OK;
    atomic_fetch_sub_explicit(&cl->fwd_total, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&f->inflight, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&f->refused_full, 1, memory_order_relaxed);
    return dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                   "calls forwarded from this node to other shards hold all but one of its "
                   "call slots (rpc.threads x rpc.prepost); shard %" PRIu32 "'s call refused "
                   "at once (cluster.max_forward_inflight; retry later)",
                   shard);
}

void dd_cluster_forward_end(dd_cluster *cl, uint32_t shard)
{
    if (shard >= cl->map.shards) return;
    atomic_fetch_sub_explicit(&cl->fwd[shard].inflight, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&cl->fwd_total, 1, memory_order_relaxed);
}

void dd_cluster_forwarded(dd_cluster *cl, uint32_t shard, int replica,
                          enum dd_cluster_outcome outcome, int64_t ns)
{
    if (replica < 0 || shard >= cl->map.shards || (uint32_t)replica >= cl->map.nreplicas[shard])
        return;
    struct peer *p = peer_at(cl, shard, (uint32_t)replica);
    atomic_fetch_add_explicit(&p->fwd[outcome], 1, memory_order_relaxed);
    if (outcome == DD_FWD_TOO_LARGE)
        peer_oversized(p, "forwarded", grpc_slice_from_static_string("over the receive limit"));
    /* The peer's state is the probes' alone: an UNAVAILABLE answer may be
     * the peer's own (its Redis is down), not the peer being gone. */
    if (outcome == DD_FWD_OK) dd_histogram_observe(&cl->fwd_latency, (double)ns / 1e9);
}

int dd_cluster_check_peer_map(dd_cluster *cl, const char *hash_hex, const char *split_hex,
                              const char *from, enum dd_cluster_relation *rel, char *err,
                              size_t errlen)
{
    enum dd_cluster_relation r = relation_of(cl, hash_hex, split_hex);
    if (rel) *rel = r;
    if (r != DD_MAP_OTHER) return DD_OK;
    static struct dd_log_limit lim;
    atomic_fetch_add_explicit(&cl->map_refusals, 1, memory_order_relaxed);
    /* Both strings are the caller's: shown in /readyz and logged only
     * sanitized and cut short. */
    char who[32], theirs[32];
    PEER_TEXT(who, from);
    PEER_TEXT(theirs, hash_hex);
    dd_fail(DD_ERR_STATE, err, errlen,
            "cluster map mismatch: node \"%s\" has map \"%s\", this node (%s) has %s", who,
            theirs, cl->self_label, cl->hash_hex);
    pthread_mutex_lock(&cl->mu);
    snprintf(cl->foreign_why, sizeof cl->foreign_why, "%s", err);
    pthread_mutex_unlock(&cl->mu);
    atomic_store(&cl->foreign_mismatch_until_ms, dd_now_ms() + 3 * cl->interval_ms + 1000);
    char esc[300];
    dd_log_limited(&lim, 5000, DD_LOG_ERROR, MOD, "msg=\"refused: %s\"",
                   dd_sanitize(esc, sizeof esc, err, strlen(err)));
    return DD_ERR_STATE;
}

/* Peers that disagree about the map, and peers that answered and agree. */
static void map_votes(dd_cluster *cl, size_t *disagree, size_t *agree, const struct peer **first)
{
    *disagree = *agree = 0;
    *first = NULL;
    for (size_t i = 0; i < cl->npeers; i++) {
        const struct peer *p = &cl->peers[i];
        if (!p->ch) continue;
        if (atomic_load(&p->mismatch)) {
            if (!*first) *first = p;
            (*disagree)++;
        } else if (atomic_load(&p->state) == PEER_UP) {
            (*agree)++;
        }
    }
}

bool dd_cluster_ready(dd_cluster *cl, char *why, size_t whylen)
{
    int32_t n = cl->local.partitions ? cl->local.partitions(cl->local.ud) : 0;
    if (n <= 0) {
        dd_set_err(why, whylen, "cluster: partition count of the plays topic not known yet");
        return false;
    }
    if (cl->local.partitions_changed && cl->local.partitions_changed(cl->local.ud)) {
        dd_set_err(why, whylen, "cluster: the plays topic's partition count changed");
        return false;
    }
    /* The odd one out is the node whose map differs from at least as many
     * peers as agree with it: it stops, the others keep serving (and do
     * not forward to it). */
    size_t disagree, agree;
    const struct peer *first;
    map_votes(cl, &disagree, &agree, &first);
    if (disagree && disagree >= agree) {
        /* first->why is this node's own text (peer strings in it sanitized). */
        pthread_mutex_lock(&cl->mu);
        dd_set_err(why, whylen,
                   "cluster: %zu peer(s) have another cluster map than this node (e.g. %s at %s: "
                   "%s), %zu agree",
                   disagree, first->label, first->addr, first->why, agree);
        pthread_mutex_unlock(&cl->mu);
        return false;
    }
    /* The health round's verdict, not a fresh reading: routing uses it
     * (own-shard calls go elsewhere while behind), so readiness must not
     * say caught up before routing does. */
    int64_t lag = cl->local.lag_ms ? cl->local.lag_ms(cl->local.ud) : -1;
    if (dd_cluster_self_behind(cl)) {
        if (lag >= 0 && lag <= cl->max_lag_ms)
            dd_set_err(why, whylen, "cluster: catching up (lag %" PRId64 " ms; the next health "
                                    "round decides)", lag);
        else if (lag < 0)
            dd_set_err(why, whylen, "cluster: ingest lag not known yet (high watermark not "
                                    "known, or replaying the log found at assignment)");
        else
            dd_set_err(why, whylen, "cluster: ingest %" PRId64 " ms behind (cluster.max_lag_ms=%" PRId64 ")",
                       lag, cl->max_lag_ms);
        return false;
    }
    return true;
}

bool dd_cluster_degraded(dd_cluster *cl, char *why, size_t whylen)
{
    size_t disagree, agree;
    const struct peer *first;
    map_votes(cl, &disagree, &agree, &first);
    if (disagree) {
        pthread_mutex_lock(&cl->mu);
        dd_set_err(why, whylen, "peer %s (%s) has another cluster map (%s); not used",
                   first->label, first->addr, first->why);
        pthread_mutex_unlock(&cl->mu);
        return true;
    }
    for (size_t i = 0; i < cl->npeers; i++) {
        const struct peer *p = &cl->peers[i];
        int rel = atomic_load(&p->relation);
        if (p->ch && !atomic_load(&p->mismatch) && rel != DD_MAP_SAME) {
            dd_set_err(why, whylen, "resharding: peer %s (%s) runs %s", p->label, p->addr,
                       rel == DD_MAP_OLDER ? "the map this node's splits (cluster.split_from)"
                                           : "a map that splits this node's");
            return true;
        }
    }
    for (size_t i = 0; i < cl->npeers; i++) {
        const struct peer *p = &cl->peers[i];
        if (p->ch && atomic_load(&p->nodes_differ)) {
            dd_set_err(why, whylen, "peer %s (%s) lists other nodes in cluster.nodes", p->label,
                       p->addr);
            return true;
        }
    }
    if (dd_now_ms() < atomic_load(&cl->foreign_mismatch_until_ms)) {
        pthread_mutex_lock(&cl->mu);
        dd_set_err(why, whylen, "refused a call: %s", cl->foreign_why);
        pthread_mutex_unlock(&cl->mu);
        return true;
    }
    return false;
}

bool dd_cluster_owns(void *ud, const char *user, size_t len)
{
    dd_cluster *cl = ud;
    if (!atomic_load_explicit(&cl->settled, memory_order_acquire)) return true;
    int32_t n = atomic_load_explicit(&cl->settled_partitions, memory_order_relaxed);
    if (n <= 0) return true;
    return dd_cluster_shard_of(&cl->map, user, len, n, NULL) == cl->map.shard;
}

bool dd_cluster_settled(dd_cluster *cl, uint64_t *rounds)
{
    if (rounds) *rounds = atomic_load(&cl->unsettled_rounds);
    return atomic_load(&cl->settled);
}

void dd_cluster_get_self(dd_cluster *cl, struct dd_cluster_self *out)
{
    memset(out, 0, sizeof *out);
    out->shard = cl->map.shard;
    out->replica = cl->map.replica;
    memcpy(out->map_hash, cl->hash_hex, sizeof out->map_hash);
    memcpy(out->split_hash, cl->split_hex, sizeof out->split_hash);
    memcpy(out->nodes_hash, cl->nodes_hex, sizeof out->nodes_hash);
    out->lag_ms = cl->local.lag_ms ? cl->local.lag_ms(cl->local.ud) : -1;
    out->partition_count = cl->local.partitions ? cl->local.partitions(cl->local.ud) : 0;
    out->ready = dd_cluster_ready(cl, out->why, sizeof out->why);
    if (out->ready) out->why[0] = '\0';
}

/* ---- the operator's view ------------------------------------------------ */

static const char *state_name(int st)
{
    return st == PEER_UP ? "up" : st == PEER_DOWN ? "down" : "unknown";
}

static const char *const outcome_names[DD_FWD_OUTCOME_COUNT] = {
    "ok", "unavailable", "deadline", "cancelled", "too_large"};

void dd_cluster_collect(dd_prom *p, void *ud)
{
    dd_cluster *cl = ud;
    dd_prom_family(p, "dedupd_cluster_forwarded_total",
                   "Calls forwarded to a peer, by peer (shard.replica) and outcome",
                   DD_PROM_COUNTER);
    for (size_t i = 0; i < cl->npeers; i++) {
        struct peer *pe = &cl->peers[i];
        if (!pe->ch) continue;
        for (int o = 0; o < DD_FWD_OUTCOME_COUNT; o++) {
            struct dd_prom_label l[] = {{"peer", pe->label}, {"outcome", outcome_names[o]}};
            dd_prom_sample_u64(p, "dedupd_cluster_forwarded_total", l, 2,
                               atomic_load_explicit(&pe->fwd[o], memory_order_relaxed));
        }
    }
    char shard[DD_CLUSTER_MAX_SHARDS][12];
    for (uint32_t s = 0; s < cl->map.shards; s++) snprintf(shard[s], sizeof shard[s], "%" PRIu32, s);
    dd_prom_family(p, "dedupd_cluster_forward_inflight",
                   "Calls forwarded to a shard from this node in flight (capped by "
                   "cluster.max_forward_inflight)",
                   DD_PROM_GAUGE);
    for (uint32_t s = 0; s < cl->map.shards; s++) {
        struct dd_prom_label l = {"shard", shard[s]};
        dd_prom_sample_u64(p, "dedupd_cluster_forward_inflight", &l, 1,
                           atomic_load_explicit(&cl->fwd[s].inflight, memory_order_relaxed));
    }
    dd_prom_family(p, "dedupd_cluster_forward_refused_total",
                   "Calls for a shard refused at once, by shard and reason: inflight "
                   "(cluster.max_forward_inflight reached) or down (every replica unreachable at the "
                   "last health round)",
                   DD_PROM_COUNTER);
    for (uint32_t s = 0; s < cl->map.shards; s++) {
        struct dd_prom_label full[] = {{"shard", shard[s]}, {"reason", "inflight"}};
        dd_prom_sample_u64(p, "dedupd_cluster_forward_refused_total", full, 2,
                           atomic_load_explicit(&cl->fwd[s].refused_full, memory_order_relaxed));
        struct dd_prom_label down[] = {{"shard", shard[s]}, {"reason", "down"}};
        dd_prom_sample_u64(p, "dedupd_cluster_forward_refused_total", down, 2,
                           atomic_load_explicit(&cl->fwd[s].refused_down, memory_order_relaxed));
    }
    struct dd_histogram_snap h;
    dd_histogram_snapshot(&cl->fwd_latency, &h);
    dd_prom_family(p, "dedupd_cluster_forward_duration_seconds",
                   "Forwarded calls that a peer answered, from the request sent to the answer",
                   DD_PROM_HISTOGRAM);
    dd_prom_histogram(p, "dedupd_cluster_forward_duration_seconds", NULL, 0, &h);
    dd_prom_family(p, "dedupd_cluster_peer_up",
                   "1 when the last status probe of the peer was answered", DD_PROM_GAUGE);
    for (size_t i = 0; i < cl->npeers; i++) {
        struct peer *pe = &cl->peers[i];
        if (!pe->ch) continue;
        struct dd_prom_label l = {"peer", pe->label};
        dd_prom_sample_u64(p, "dedupd_cluster_peer_up", &l, 1, atomic_load(&pe->state) == PEER_UP);
    }
    dd_prom_family(p, "dedupd_cluster_peer_ready", "1 when the peer said it was ready",
                   DD_PROM_GAUGE);
    for (size_t i = 0; i < cl->npeers; i++) {
        struct peer *pe = &cl->peers[i];
        if (!pe->ch) continue;
        struct dd_prom_label l = {"peer", pe->label};
        dd_prom_sample_u64(p, "dedupd_cluster_peer_ready", &l, 1, atomic_load(&pe->ready));
    }
    dd_prom_family(p, "dedupd_cluster_peer_lag_seconds",
                   "The peer's ingest lag as it last reported it (-1 = unknown)", DD_PROM_GAUGE);
    for (size_t i = 0; i < cl->npeers; i++) {
        struct peer *pe = &cl->peers[i];
        if (!pe->ch) continue;
        struct dd_prom_label l = {"peer", pe->label};
        int64_t lag = atomic_load(&pe->lag_ms);
        dd_prom_sample_f64(p, "dedupd_cluster_peer_lag_seconds", &l, 1,
                           lag < 0 ? -1.0 : (double)lag / 1e3);
    }
    dd_prom_family(p, "dedupd_cluster_peer_map_mismatch",
                   "1 while the peer's cluster map differs from this node's", DD_PROM_GAUGE);
    for (size_t i = 0; i < cl->npeers; i++) {
        struct peer *pe = &cl->peers[i];
        if (!pe->ch) continue;
        struct dd_prom_label l = {"peer", pe->label};
        dd_prom_sample_u64(p, "dedupd_cluster_peer_map_mismatch", &l, 1, atomic_load(&pe->mismatch));
    }
    dd_prom_family(p, "dedupd_cluster_peer_oversized_total",
                   "Replies of the peer (status probes and forwarded calls) over this node's "
                   "receive limit or memory quota for it: each a failed attempt",
                   DD_PROM_COUNTER);
    for (size_t i = 0; i < cl->npeers; i++) {
        struct peer *pe = &cl->peers[i];
        if (!pe->ch) continue;
        struct dd_prom_label l = {"peer", pe->label};
        dd_prom_sample_u64(p, "dedupd_cluster_peer_oversized_total", &l, 1,
                           atomic_load_explicit(&pe->oversized, memory_order_relaxed));
    }
    dd_prom_counter(p, "dedupd_cluster_map_refusals_total",
                    "Forwarded calls and probes refused because the sender's map differed",
                    atomic_load(&cl->map_refusals));
    char why[8];
    dd_prom_gauge(p, "dedupd_cluster_ready", "1 when this node is ready for the cluster",
                  dd_cluster_ready(cl, why, sizeof why));
    dd_prom_family(p, "dedupd_cluster_node_info", "This node's place in the cluster map",
                   DD_PROM_GAUGE);
    char shards[16];
    snprintf(shards, sizeof shards, "%" PRIu32, cl->map.shards);
    struct dd_prom_label l[] = {{"node", cl->self_label}, {"shards", shards}, {"map", cl->hash_hex}};
    dd_prom_sample_u64(p, "dedupd_cluster_node_info", l, 3, 1);
}

char *dd_cluster_describe(dd_cluster *cl)
{
    json_object *root = json_object_new_object();
    if (!root) return NULL;
    struct dd_cluster_self self;
    dd_cluster_get_self(cl, &self);
    json_object_object_add(root, "shards", json_object_new_int64(cl->map.shards));
    json_object_object_add(root, "shard", json_object_new_int64(self.shard));
    json_object_object_add(root, "replica", json_object_new_int64(self.replica));
    json_object_object_add(root, "map_hash", json_object_new_string(cl->hash_hex));
    json_object_object_add(root, "split_from", json_object_new_int64(cl->map.split_from));
    json_object_object_add(root, "settled", json_object_new_boolean(atomic_load(&cl->settled)));
    json_object_object_add(root, "nodes_hash", json_object_new_string(cl->nodes_hex));
    json_object_object_add(root, "partitioner",
                           json_object_new_string(dd_partitioner_name(
                               (enum dd_partitioner)cl->map.partitioner)));
    json_object_object_add(root, "partition_count", json_object_new_int64(self.partition_count));
    json_object_object_add(root, "max_lag_ms", json_object_new_int64(cl->max_lag_ms));
    json_object *nodes = json_object_new_array();
    int64_t now = dd_now_ms();
    for (size_t i = 0; i < cl->npeers; i++) {
        struct peer *p = &cl->peers[i];
        json_object *o = json_object_new_object();
        bool self_node = !p->ch;
        json_object_object_add(o, "node", json_object_new_string(p->label));
        json_object_object_add(o, "shard", json_object_new_int64(p->shard));
        json_object_object_add(o, "replica", json_object_new_int64(p->replica));
        json_object_object_add(o, "addr", json_object_new_string(p->addr));
        json_object_object_add(o, "self", json_object_new_boolean(self_node));
        json_object *parts = json_object_new_array();
        int32_t n = self_node ? self.partition_count : atomic_load(&p->partitions);
        for (int32_t q = 0; q < n; q++)
            if ((uint32_t)q % cl->map.shards == p->shard)
                json_object_array_add(parts, json_object_new_int(q));
        json_object_object_add(o, "partitions", parts);
        if (self_node) {
            json_object_object_add(o, "state", json_object_new_string("self"));
            json_object_object_add(o, "ready", json_object_new_boolean(self.ready));
            json_object_object_add(o, "lag_ms", json_object_new_int64(self.lag_ms));
            json_object_object_add(o, "behind", json_object_new_boolean(dd_cluster_self_behind(cl)));
            json_object_object_add(o, "why", json_object_new_string(self.why));
        } else {
            json_object_object_add(o, "state", json_object_new_string(state_name(atomic_load(&p->state))));
            json_object_object_add(o, "ready", json_object_new_boolean(atomic_load(&p->ready)));
            json_object_object_add(o, "lag_ms", json_object_new_int64(atomic_load(&p->lag_ms)));
            json_object_object_add(o, "map_mismatch", json_object_new_boolean(atomic_load(&p->mismatch)));
            static const char *const rel_names[] = {"same", "older", "newer", "other"};
            int rel = atomic_load(&p->relation);
            json_object_object_add(o, "map_relation",
                                   json_object_new_string(rel_names[rel >= 0 && rel < 4 ? rel : 3]));
            json_object_object_add(o, "nodes_differ", json_object_new_boolean(atomic_load(&p->nodes_differ)));
            int64_t last = atomic_load(&p->last_ok_ms);
            json_object_object_add(o, "last_seen_ms_ago", json_object_new_int64(last ? now - last : -1));
            pthread_mutex_lock(&cl->mu);
            json_object_object_add(o, "why", json_object_new_string(p->why));
            pthread_mutex_unlock(&cl->mu);
            json_object *fwd = json_object_new_object();
            for (int k = 0; k < DD_FWD_OUTCOME_COUNT; k++)
                json_object_object_add(fwd, outcome_names[k],
                                       json_object_new_int64((int64_t)atomic_load(&p->fwd[k])));
            json_object_object_add(o, "forwarded", fwd);
            json_object_object_add(o, "oversized_replies",
                                   json_object_new_int64((int64_t)atomic_load(&p->oversized)));
        }
        json_object_array_add(nodes, o);
    }
    json_object_object_add(root, "nodes", nodes);
    /* Where this node would send each shard's calls now (no counter moved). */
    json_object *route = json_object_new_array();
    for (uint32_t s = 0; s < cl->map.shards; s++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "shard", json_object_new_int64(s));
        if (s == cl->map.shard) {
            json_object_object_add(o, "to", json_object_new_string("local"));
        } else {
            int best = -1, best_tier = TIER_COUNT;
            for (uint32_t r = 0; r < cl->map.nreplicas[s]; r++) {
                int t = tier_of(cl, peer_at(cl, s, r));
                if (t >= 0 && t < best_tier) best = (int)r, best_tier = t;
            }
            json_object_object_add(o, "to", best < 0 ? json_object_new_string("none")
                                                     : json_object_new_string(peer_at(cl, s, (uint32_t)best)->label));
            json_object_object_add(o, "degraded", json_object_new_boolean(best_tier >= TIER_BEHIND && best >= 0));
        }
        json_object_array_add(route, o);
    }
    json_object_object_add(root, "forward", route);
    char *s = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
    json_object_put(root);
    return s;
}
