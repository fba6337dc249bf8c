/* SPDX-License-Identifier: Apache-2.0
 *
 * cluster.c - see cluster.h. The peers' states and the health thread that
 * keeps them, routing, replica choice, the forwarding caps, readiness and
 * the cluster's metrics.
 */
#include "cluster.h"

#include "dd.h"
#include "log.h"
#include "partition.h"
#include "sys.h"

#include "dedup.pb-c.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOD "cluster"

/* ---- the running cluster ----------------------------------------------- */

enum peer_state { PEER_UNKNOWN = 0, PEER_UP, PEER_DOWN };

/* Upper bounds of the forward latency buckets in seconds (+Inf implied). */
static const double fwd_bounds[] = {
    100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 1.0,
};

struct peer {
    uint32_t shard, replica;
    const char *addr;         /* the map's */
    char label[32];           /* "s.r" */
    grpc_channel *ch;         /* NULL for this node */
    _Atomic int state;        /* enum peer_state, from the last probe */
    atomic_bool unreachable;  /* the last probe got no answer: no connection, or none
                                * within its deadline (a peer that answered with an
                                * error is down but reachable) */
    atomic_bool ready;        /* the peer's own readiness */
    atomic_bool mismatch;     /* it would own other users than our map says */
    _Atomic int relation;     /* enum dd_cluster_relation of its map, when not a mismatch */
    atomic_bool nodes_differ; /* it lists other nodes (a rolling change) */
    _Atomic int64_t lag_ms;
    _Atomic int64_t last_ok_ms; /* wall clock of the last answered probe; 0 never */
    _Atomic int32_t partitions;
    _Atomic uint64_t fwd[DD_FWD_OUTCOME_COUNT];
    _Atomic uint64_t oversized; /* replies over a receive limit (probes and forwards) */
    /* The health thread's probe in flight. */
    grpc_call *call;
    struct dd_unary u;
    char why[160]; /* the health thread's; read under cl->mu */
};

/* Calls forwarded to one shard from this node (dd_cluster_forward_begin). */
struct shard_fwd {
    _Atomic uint32_t inflight;
    _Atomic uint64_t refused_full; /* past the cap */
    _Atomic uint64_t refused_down; /* every replica down at the last round */
};

struct dd_cluster {
    struct dd_cluster_map map;
    char hash_hex[17];
    char split_hex[17]; /* "" when this map splits none */
    char nodes_hex[17];
    char self_label[32];
    struct peer *peers; /* every node of the map, shard-major */
    uint32_t *first;    /* [shard]: index of its first replica in peers */
    size_t npeers;
    struct dd_cluster_local local;
    int64_t max_lag_ms, interval_ms, forward_timeout_ms;
    uint32_t fwd_cap;       /* cluster.max_forward_inflight, or its automatic value */
    uint32_t fwd_total_cap; /* over all shards: a method's slots but one */
    _Atomic uint32_t fwd_total;
    struct shard_fwd *fwd;     /* [shard] */
    _Atomic uint32_t rr;       /* round robin over caught-up replicas */
    grpc_completion_queue *cq; /* the health thread's */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu; /* stop flag, the whys, mismatch text */
    pthread_cond_t cv;
    bool stop;
    _Atomic int64_t foreign_mismatch_until_ms; /* a caller's map differed (check_peer_map) */
    char foreign_why[200];
    struct dd_histogram fwd_latency;
    _Atomic uint64_t map_refusals; /* forwarded calls or probes refused for the map */
    atomic_bool self_behind;       /* this node's lag, as of the last health round */
    atomic_bool odd_one_out;       /* its map differs from as many peers as agree (last round) */
    atomic_bool settled;           /* dd_cluster_settled, as of the last health round */
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
        dd_error(MOD,
                 "msg=\"this node's cluster map differs from its peers'; refusing calls "
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

const struct dd_cluster_map *dd_cluster_get_map(const dd_cluster *cl)
{
    return &cl->map;
}
int64_t dd_cluster_forward_timeout_ms(const dd_cluster *cl)
{
    return cl->forward_timeout_ms;
}

static struct peer *peer_at(dd_cluster *cl, uint32_t shard, uint32_t replica)
{
    return &cl->peers[cl->first[shard] + replica];
}

int dd_cluster_new(dd_cluster **out, struct dd_cluster_map *map, const struct dd_cluster_conf *conf,
                   const struct dd_peer_conf *peer, uint32_t threads, uint32_t prepost,
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
    cl->fwd_cap =
        dd_cluster_forward_cap(conf->max_forward_inflight, cl->map.shards, threads, prepost);
    {
        uint64_t slots = (uint64_t)(threads ? threads : 1) * (prepost ? prepost : 1);
        cl->fwd_total_cap =
            slots > 1 ? (uint32_t)(slots - 1 < UINT32_MAX ? slots - 1 : UINT32_MAX) : 1;
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
    grpc_channel_credentials *creds = dd_peer_credentials(peer, err, errlen);
    if (!creds) {
        rc = DD_ERR_INVALID;
        goto err;
    }
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
            p->ch = dd_peer_channel_create(peer, creds, p->addr, DD_PEER_CLUSTER, err, errlen);
            if (!p->ch) {
                grpc_channel_credentials_release(creds);
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
                dd_error(MOD,
                         "msg=\"peer disagrees about the cluster map\" peer=%s addr=%s "
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
                dd_error(MOD,
                         "msg=\"peer sees another partition count of the plays topic; not "
                         "used\" peer=%s addr=%s ours=%" PRId32 " theirs=%" PRId32,
                         p->label, p->addr, ours, st->partition_count);
            else if (differ && !was)
                dd_error(MOD,
                         "msg=\"peer has another cluster map (shards or partitioner); not "
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
                dd_warn(MOD,
                        "msg=\"peer lists other nodes than this node (cluster.nodes)\" "
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
            if (prev == PEER_DOWN)
                dd_info(MOD, "msg=\"peer up\" peer=%s addr=%s", p->label, p->addr);
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
            grpc_event ev =
                grpc_completion_queue_next(cl->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
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
        while (!cl->stop && pthread_cond_timedwait(&cl->cv, &cl->mu, &until) == 0) {
        }
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
    dd_info(MOD,
            "msg=started shards=%" PRIu32 " shard=%" PRIu32 " replica=%" PRIu32
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
               GRPC_QUEUE_SHUTDOWN) {
        }
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
    if (atomic_load_explicit(&p->ready, memory_order_relaxed) && lag >= 0 && lag <= cl->max_lag_ms)
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
            "cluster map mismatch: node \"%s\" has map \"%s\", this node (%s) has %s", who, theirs,
            cl->self_label, cl->hash_hex);
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
            dd_set_err(why, whylen,
                       "cluster: catching up (lag %" PRId64 " ms; the next health "
                       "round decides)",
                       lag);
        else if (lag < 0)
            dd_set_err(why, whylen,
                       "cluster: ingest lag not known yet (high watermark not "
                       "known, or replaying the log found at assignment)");
        else
            dd_set_err(why, whylen,
                       "cluster: ingest %" PRId64 " ms behind (cluster.max_lag_ms=%" PRId64 ")",
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
        dd_set_err(why, whylen, "peer %s (%s) has another cluster map (%s); not used", first->label,
                   first->addr, first->why);
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

static const char *const outcome_names[DD_FWD_OUTCOME_COUNT] = {"ok", "unavailable", "deadline",
                                                                "cancelled", "too_large"};

const char *dd_cluster_outcome_name(enum dd_cluster_outcome o)
{
    return o >= 0 && o < DD_FWD_OUTCOME_COUNT ? outcome_names[o] : "unknown";
}

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
    for (uint32_t s = 0; s < cl->map.shards; s++)
        snprintf(shard[s], sizeof shard[s], "%" PRIu32, s);
    dd_prom_family(p, "dedupd_cluster_forward_inflight",
                   "Calls forwarded to a shard from this node in flight (capped by "
                   "cluster.max_forward_inflight)",
                   DD_PROM_GAUGE);
    for (uint32_t s = 0; s < cl->map.shards; s++) {
        struct dd_prom_label l = {"shard", shard[s]};
        dd_prom_sample_u64(p, "dedupd_cluster_forward_inflight", &l, 1,
                           atomic_load_explicit(&cl->fwd[s].inflight, memory_order_relaxed));
    }
    dd_prom_family(
        p, "dedupd_cluster_forward_refused_total",
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
        dd_prom_sample_u64(p, "dedupd_cluster_peer_map_mismatch", &l, 1,
                           atomic_load(&pe->mismatch));
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
    struct dd_prom_label l[] = {
        {"node", cl->self_label}, {"shards", shards}, {"map", cl->hash_hex}};
    dd_prom_sample_u64(p, "dedupd_cluster_node_info", l, 3, 1);
}

size_t dd_cluster_node_count(const dd_cluster *cl)
{
    return cl->npeers;
}

int64_t dd_cluster_max_lag_ms(const dd_cluster *cl)
{
    return cl->max_lag_ms;
}

void dd_cluster_node_get(dd_cluster *cl, size_t i, struct dd_cluster_node *out)
{
    memset(out, 0, sizeof *out);
    if (i >= cl->npeers) return;
    struct peer *p = &cl->peers[i];
    out->shard = p->shard;
    out->replica = p->replica;
    out->addr = p->addr;
    out->label = p->label;
    out->self = !p->ch;
    if (out->self) return;
    out->state = state_name(atomic_load(&p->state));
    out->ready = atomic_load(&p->ready);
    out->mismatch = atomic_load(&p->mismatch);
    int rel = atomic_load(&p->relation);
    out->relation =
        rel >= DD_MAP_SAME && rel <= DD_MAP_OTHER ? (enum dd_cluster_relation)rel : DD_MAP_OTHER;
    out->nodes_differ = atomic_load(&p->nodes_differ);
    out->lag_ms = atomic_load(&p->lag_ms);
    out->last_ok_ms = atomic_load(&p->last_ok_ms);
    out->partitions = atomic_load(&p->partitions);
    for (int k = 0; k < DD_FWD_OUTCOME_COUNT; k++) out->forwarded[k] = atomic_load(&p->fwd[k]);
    out->oversized = atomic_load(&p->oversized);
    pthread_mutex_lock(&cl->mu);
    snprintf(out->why, sizeof out->why, "%s", p->why);
    pthread_mutex_unlock(&cl->mu);
}

int dd_cluster_peek(dd_cluster *cl, uint32_t shard, bool *degraded)
{
    *degraded = false;
    if (shard >= cl->map.shards) return -1;
    int best = -1, best_tier = TIER_COUNT;
    for (uint32_t r = 0; r < cl->map.nreplicas[shard]; r++) {
        struct peer *p = peer_at(cl, shard, r);
        if (!p->ch) continue;
        int t = tier_of(cl, p);
        if (t >= 0 && t < best_tier) best = (int)r, best_tier = t;
    }
    *degraded = best >= 0 && best_tier >= TIER_BEHIND;
    return best;
}
