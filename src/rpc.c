/* SPDX-License-Identifier: Apache-2.0
 *
 * rpc.c - see rpc.h. The gRPC server on grpc core's C API.
 *
 * DESIGN
 *
 * Threads: rpc.threads workers, each blocked on its own completion queue.
 *   A worker owns everything a call needs: a Redis connection, a
 *   dd_filter, a dd_record and an arena, so a call takes no lock of ours;
 *   the history (RocksDB) and the allow lists (auth.h) are shared and
 *   read-only or thread-safe. Sockets are polled by each connection's own
 *   worker (rpc.poller = poll) or grpc's epoll1; after a call a worker
 *   polls without blocking for rpc.spin_us (dd_rpc_process_init says why).
 * Calls: each worker pre-posts rpc.prepost requests per method (plus
 *   generic ones, so an unknown method is answered UNIMPLEMENTED). A slot
 *   cycles REQUESTED -> checked (auth.h) and routed (forward.h) -> worked
 *   on synchronously (serve.h) or FORWARDING (its tries complete on the
 *   worker's queue, tagged by the slot's fwd_tag) -> SENDING (one batch:
 *   metadata, message, status) -> re-posted. The request is read in place
 *   where it can be (serve.h), Filter's decoded in place and its reply
 *   encoded in one pass (wire.h); the request's slice and the arena are
 *   released once the reply is built (release_request), so a call
 *   allocates nothing per candidate and an oversized one's memory goes
 *   back at once.
 * Limits: a call past its deadline is answered without being decoded; a
 *   reply not taken within rpc.send_timeout_ms is cancelled (sweep_sends),
 *   so no client holds a slot for long; a reply pending past a sixteenth
 *   of that is stalled, and a worker keeps at most half of a method's
 *   slots with stalled replies: one past that is cancelled, and a new call
 *   of a connection with a stalled reply is refused at once with its
 *   status alone, which HTTP/2 flow control does not hold. We chose a
 *   share of the slots over moving a sending call out of its slot (a
 *   fresh slot re-posted per reply in flight): the share needs no memory
 *   beyond the pre-posted slots and a fixed table of marked connections
 *   per worker (grpc_call_get_peer, asked only of stalled replies and,
 *   while a worker keeps its share, of new calls), where spare slots
 *   would need their own bound per connection and in total, and would
 *   still have to tell an honest burst of replies being written from a
 *   shut window by time. Forwarded calls hold their slot while the peer
 *   answers, so each shard gets at most cluster.max_forward_inflight of
 *   them at once from this node (dd_cluster_forward_begin), all shards
 *   together all but one slot, and a shard none while its replicas were
 *   all down at the last health round: the rest fail at once UNAVAILABLE,
 *   and this node's own calls always find a slot (forward.h). RecordPlays
 *   and RecordDelivery are refused on an item count taken on the wire,
 *   before protobuf-c allocates (serve.h); grpc's own limits bound
 *   streams, idle connections and buffers (dd_rpc_new).
 * Shutdown and stats: see dd_rpc_shutdown and dd_rpc_collect; counters
 *   are rpcstats.h's, relaxed atomics read without locks.
 * Why one file: everything here acts on the call slots' states (posting,
 *   answering, the send bounds' sweep, the forwarded calls' completions,
 *   the drain at shutdown); split further, each part would need the slot
 *   and worker structs, which stay private to this file.
 */
#include "rpc.h"

#include "addr.h"
#include "api.h"
#include "auth.h"
#include "arena.h"
#include "cluster.h"
#include "dd.h"
#include "filter.h"
#include "forward.h"
#include "log.h"
#include "metrics.h"
#include "recent.h"
#include "record.h"
#include "rpcstats.h"
#include "serve.h"
#include "snapshot.h"
#include "stream.h"
#include "wire.h"

#include "dedup.pb-c.h"
#include "health.pb-c.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum slot_state { SLOT_IDLE = 0, SLOT_REQUESTED, SLOT_FORWARDING, SLOT_SENDING };

/* What a completion queue event's tag points to: a slot (its request was
 * matched, or its answer sent) or a slot's forwarded call (forward.h). */
enum tag_kind { TAG_SLOT = 1, TAG_FORWARD };

struct worker;

/* One pre-posted call. Its address is the tag of its own events. */
struct slot {
    enum tag_kind kind; /* TAG_SLOT; first, so a tag's kind can be read */
    struct worker *w;
    enum dd_api_method method;
    enum slot_state state;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_call_details details; /* DD_API_UNKNOWN only */
    grpc_byte_buffer *payload;
    grpc_slice req; /* a reference to PAYLOAD's one slice while read in place */
    grpc_byte_buffer *reply;
    grpc_status_code status;
    int cancelled;
    int64_t start_ns;
    int64_t send_deadline_ns; /* SENDING: cancelled if still pending then */
    int send_cancelled;       /* SENDING: cancelled for rpc.send_timeout_ms */
    int64_t stall_at_ns;      /* SENDING: stalled if still pending then (sweep_sends) */
    bool stalled;             /* SENDING past stall_at_ns: counted in w->stalled */
    int64_t deadline_ns;      /* the caller's, on dd_mono_ns's clock; 0 = none */
    bool stale_map;           /* refused for a stale map: the trailing metadata has ours */
    grpc_metadata trailer;    /* that metadata while the status is sent (static slices) */
    enum tag_kind fwd_tag;    /* TAG_FORWARD: the tag of FWD's tries */
    struct dd_forward fwd;    /* FORWARDING (forward.h) */
};

/* A connection seen with a reply it did not take (sweep_sends), by the
 * hash of grpc_call_get_peer (its address and port): remembered until
 * UNTIL_NS. A fixed table per worker, so its memory is bounded whatever
 * the number of connections; the oldest mark makes room for a new one. */
#define STALL_MARKS 64
struct stall_mark {
    uint64_t peer; /* 0 = free */
    int64_t until_ns;
};

struct worker {
    dd_rpc *rpc;
    unsigned id;
    pthread_t thread;
    int thread_started;
    grpc_completion_queue *cq;
    dd_recent *recent;
    dd_filter *filter;
    dd_record *record;
    dd_arena *arena;
    struct slot *slots;
    size_t nslots;
    size_t outstanding;                  /* slots with an op pending on cq (REQUESTED or SENDING) */
    size_t sending;                      /* of them SENDING */
    int64_t next_sweep_ns;               /* when sweep_sends looks at the SENDING slots next */
    size_t stalled[DD_API_METHOD_COUNT]; /* SENDING slots whose reply is stalled, by method */
    struct stall_mark marks[STALL_MARKS]; /* connections with a stalled reply lately */
    int cq_shut;                          /* grpc_completion_queue_shutdown called on cq */
    char msg[512];                        /* the status message of the call in hand */
    struct dd_serve serve; /* answers calls here (serve.h): arena, filter, record, msg */
    bool damaged;          /* the last Filter dispatched met a damaged history (filter.h) */
};

struct dd_rpc {
    grpc_server *server;
    grpc_completion_queue *shutdown_cq;
    void *registered[DD_API_UNKNOWN]; /* grpc_server_register_method handles */
    struct worker *workers;
    unsigned nworkers;
    unsigned prepost;
    uint32_t max_candidates;           /* rpc.max_candidates: Filter ids decoded at most */
    struct dd_filter_conf filter_conf; /* every worker's decider's limits */
    struct dd_record_conf record_conf; /* every worker's writer's limits */
    uint32_t grace_ms;
    int64_t spin_ns;         /* rpc.spin_us */
    int64_t send_timeout_ns; /* rpc.send_timeout_ms */
    int64_t sweep_ns;        /* how often a worker looks for replies past it */
    int64_t stall_ns;        /* a reply pending this long is stalled (sweep_sends) */
    size_t stall_cap;        /* stalled replies a worker keeps per method: prepost / 2 */
    unsigned spin_max;       /* workers that may spin at once: usable CPUs - 1 */
    _Atomic unsigned spinning;
    int port;
    char *listen;
    const char *tls_mode;         /* "off", "server" or "mutual", for the log */
    bool open_to_all;             /* not loopback and no client certificates */
    dd_auth *auth;                /* who may call what; read-only once built */
    dd_cluster *cluster;          /* NULL: a single node, every call is served here */
    dd_forwarder *forwarder;      /* with a cluster: calls for other shards (forward.h) */
    dd_snapshot_server *snapshot; /* lends this store to new replicas; NULL: none */
    dd_stream *stream;            /* Health/Watch and reflection (stream.h) */
    struct dd_producer *producer;
    int started, shut_down;
    atomic_bool serving;
    bool (*ready)(void *ud); /* dd_rpc_set_ready: the node's readiness, or NULL */
    void *ready_ud;
    bool (*refused)(void *ud, char *why, size_t whylen); /* dd_rpc_set_refusal */
    void *refused_ud;
    atomic_bool stopping; /* do not re-post slots */
    atomic_bool drain;    /* server shutdown done: workers may close their queues */
    _Atomic uint64_t in_flight;
    struct dd_rpcstats stats;
    struct dd_serve_single single; /* dd_rpc_set_single: a single node's ClusterMap */
    char map_hash[17];             /* this node's map, what DD_API_MD_MAP_HASH must name */
    char split_hash[17];           /* the map its own splits (resharding); "" none */
    _Atomic uint64_t stale_map;    /* calls refused for a stale map */
};

/* ---- settings ----------------------------------------------------------- */

int dd_rpc_conf_check(const struct dd_rpc_conf *conf, char *err, size_t errlen)
{
    return dd_auth_conf_check(&conf->auth, conf->listen, err, errlen);
}

/* ---- lifecycle ---------------------------------------------------------- */

static void worker_release(struct worker *w)
{
    if (w->slots) {
        for (size_t i = 0; i < w->nslots; i++) {
            grpc_metadata_array_destroy(&w->slots[i].md);
            grpc_call_details_destroy(&w->slots[i].details);
            grpc_slice_unref(w->slots[i].req);
            dd_forward_release(&w->slots[i].fwd);
        }
        free(w->slots);
        w->slots = NULL;
    }
    dd_record_free(w->record);
    w->record = NULL;
    dd_filter_free(w->filter);
    w->filter = NULL;
    dd_recent_free(w->recent);
    w->recent = NULL;
    dd_arena_free(w->arena);
    w->arena = NULL;
}

static int worker_init(dd_rpc *rpc, struct worker *w, unsigned id,
                       const struct dd_recent_conf *recent, dd_history *history, char *err,
                       size_t errlen)
{
    w->rpc = rpc;
    w->id = id;
    int rc = dd_recent_new(&w->recent, recent, err, errlen);
    if (rc != DD_OK) return rc;
    rc = dd_filter_new(&w->filter, &rpc->filter_conf, history, w->recent, err, errlen);
    if (rc != DD_OK) return rc;
    rc = dd_record_new(&w->record, &rpc->record_conf, history, w->recent, rpc->producer, err,
                       errlen);
    if (rc != DD_OK) return rc;
    w->arena = dd_arena_new(0, 0);
    w->serve = (struct dd_serve){.arena = w->arena,
                                 .filter = w->filter,
                                 .record = w->record,
                                 .cluster = rpc->cluster,
                                 .single = &rpc->single,
                                 .max_candidates = rpc->max_candidates,
                                 .msg = w->msg,
                                 .msglen = sizeof w->msg};
    w->nslots = (size_t)rpc->prepost * DD_API_METHOD_COUNT;
    w->slots = calloc(w->nslots, sizeof *w->slots);
    if (!w->arena || !w->slots) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    for (size_t i = 0; i < w->nslots; i++) {
        struct slot *s = &w->slots[i];
        s->kind = TAG_SLOT;
        s->w = w;
        s->method = (enum dd_api_method)(i / rpc->prepost);
        grpc_metadata_array_init(&s->md);
        grpc_call_details_init(&s->details);
        s->req = grpc_empty_slice();
        s->fwd_tag = TAG_FORWARD;
        dd_forward_init(&s->fwd, rpc->forwarder);
    }
    w->cq = grpc_completion_queue_create_for_next(NULL);
    if (!w->cq) return dd_fail(DD_ERR_NOMEM, err, errlen, "cannot create a completion queue");
    grpc_server_register_completion_queue(rpc->server, w->cq, NULL);
    return DD_OK;
}

/* grpc's own log lines (gpr_log), as dd_log lines of module=grpc: its
 * ERROR becomes warn (most are about a caller: a compressed request with
 * compression off, a bad frame), INFO info, DEBUG debug. Each source line
 * of grpc's (file and line, hashed into GRPC_LOG_LIMITS slots) writes at
 * most one line per GRPC_LOG_INTERVAL_MS with suppressed=N, so a client
 * repeating a bad call cannot flood the log. The text is grpc's, made
 * printable (dd_sanitize) and cut to a bounded length. Runs on any grpc
 * thread: dd_log_limited is thread-safe. */
#define GRPC_LOG_LIMITS 64
#define GRPC_LOG_INTERVAL_MS 10000
static struct dd_log_limit grpc_log_limits[GRPC_LOG_LIMITS];

static void grpc_log_line(gpr_log_func_args *args)
{
    enum dd_log_level level = args->severity == GPR_LOG_SEVERITY_ERROR  ? DD_LOG_WARN
                              : args->severity == GPR_LOG_SEVERITY_INFO ? DD_LOG_INFO
                                                                        : DD_LOG_DEBUG;
    if (!dd_log_enabled(level)) return;
    const char *file = args->file ? args->file : "";
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the file's name and the line */
    for (const char *c = base; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
    h = (h ^ (uint64_t)args->line) * 1099511628211ull;
    char msg[512], where[160];
    const char *m = args->message ? args->message : "";
    dd_sanitize(msg, sizeof msg, m, strlen(m));
    dd_sanitize(where, sizeof where, base, strlen(base));
    dd_log_limited(&grpc_log_limits[h % GRPC_LOG_LIMITS], GRPC_LOG_INTERVAL_MS, level, "grpc",
                   "msg=\"%s\" file=\"%s\" line=%d", msg, where, args->line);
}

int dd_rpc_process_init(const struct dd_rpc_conf *conf, char *err, size_t errlen)
{
    if (setenv("GRPC_POLL_STRATEGY", conf->poller, 1) != 0)
        return dd_fail(DD_ERR_NOMEM, err, errlen, "cannot set GRPC_POLL_STRATEGY: %s",
                       strerror(errno));
    gpr_set_log_function(grpc_log_line);
    return DD_OK;
}

/* CPUs this process may run on: its affinity mask, or the online count if
 * that cannot be read. At least 1. */
static unsigned usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return (unsigned)n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

/* Why grpc could not bind LISTEN, which it logs but does not return: bind
 * a socket of our own to it (no SO_REUSEPORT, as grpc's) and put the
 * error ("Address already in use": another process holds the port) in
 * WHY, or "" when that bind works or the address does not resolve. */
static void bind_error(const char *listen, char *why, size_t whylen)
{
    why[0] = '\0';
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int gai;
    if (dd_hostport_resolve(listen, &hints, &res, &gai) != DD_OK) return;
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
    if (fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) != 0)
        snprintf(why, whylen, "%s", strerror(errno));
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
}

/* Health/Watch's status of SERVICE (stream.h): the same answer as
 * Health/Check for "" and dedup.v1.Dedup (the node's readiness, what
 * /readyz says), SERVING for DD_API_LIVENESS_SERVICE until the server
 * shuts down (drain included),
 * SERVICE_UNKNOWN for anything else. */
static int stream_status(void *ud, const char *service)
{
    dd_rpc *rpc = ud;
    bool serving = atomic_load(&rpc->serving);
    if (!service[0] || strcmp(service, DD_API_SERVICE) == 0) {
        bool up = rpc->ready ? rpc->ready(rpc->ready_ud) : serving;
        return up ? DD_STREAM_SERVING : DD_STREAM_NOT_SERVING;
    }
    if (strcmp(service, DD_API_LIVENESS_SERVICE) == 0)
        return atomic_load(&rpc->stopping) ? DD_STREAM_NOT_SERVING : DD_STREAM_SERVING;
    return DD_STREAM_SERVICE_UNKNOWN;
}

int dd_rpc_new(dd_rpc **out, const struct dd_rpc_conf *conf, const struct dd_recent_conf *recent,
               dd_history *history, dd_cluster *cluster, struct dd_producer *producer, char *err,
               size_t errlen)
{
    *out = NULL;
    grpc_init();
    dd_rpc *rpc = calloc(1, sizeof *rpc);
    if (!rpc) {
        grpc_shutdown();
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }
    rpc->producer = producer;
    int rc = dd_rpc_conf_check(conf, err, errlen);
    if (rc != DD_OK) {
        free(rpc);
        grpc_shutdown();
        return rc;
    }
    rc = DD_ERR_NOMEM;
    rpc->nworkers = conf->threads ? conf->threads : 1;
    rpc->prepost = conf->prepost ? conf->prepost : 1;
    rpc->filter_conf =
        (struct dd_filter_conf){conf->max_candidates, conf->max_id_bytes, recent->size};
    rpc->record_conf = (struct dd_record_conf){conf->max_candidates, conf->max_id_bytes};
    rpc->grace_ms = conf->shutdown_grace_ms;
    rpc->spin_ns = (int64_t)conf->spin_us * 1000;
    rpc->send_timeout_ns = (int64_t)(conf->send_timeout_ms ? conf->send_timeout_ms : 1) * 1000000;
    /* A reply still pending after a sixteenth of the timeout is stalled
     * (its peer's window is shut, or it does not read); sweep_sends looks
     * twice as often, so one is found at most half that late, and a stuck
     * reply is cancelled at most 1/32 of the timeout late. */
    rpc->stall_ns = rpc->send_timeout_ns / 16;
    rpc->sweep_ns = rpc->stall_ns / 2 > 0 ? rpc->stall_ns / 2 : 1;
    rpc->stall_cap = rpc->prepost / 2;
    {
        /* Spinning workers leave a core for the busy ones, the kernel and
         * whatever shares the machine: at most cores - 1 spin at once,
         * counting the CPUs this process may run on (a cpuset or taskset
         * smaller than the machine), not the machine's. */
        unsigned cores = usable_cpus();
        rpc->spin_max = cores > 1 ? cores - 1 : 0;
    }
    atomic_init(&rpc->spinning, 0);
    rpc->max_candidates = conf->max_candidates;
    rpc->cluster = cluster;
    if (cluster) {
        dd_cluster_map_hash_hex(dd_cluster_get_map(cluster), rpc->map_hash);
        dd_cluster_map_split_hex(dd_cluster_get_map(cluster), rpc->split_hash);
    }
    atomic_init(&rpc->stale_map, 0);
    atomic_init(&rpc->serving, false);
    atomic_init(&rpc->stopping, false);
    atomic_init(&rpc->drain, false);
    atomic_init(&rpc->in_flight, 0);
    dd_rpcstats_init(&rpc->stats);
    rpc->listen = strdup(conf->listen);
    if (!rpc->listen) {
        dd_fail(rc, err, errlen, "out of memory");
        goto err;
    }
    const struct dd_tls_conf *tls = &conf->auth.tls;
    rpc->tls_mode = !tls->cert[0] ? "off" : tls->client_ca[0] ? "mutual" : "server";
    rpc->open_to_all = !tls->client_ca[0] && !dd_hostport_is_loopback(conf->listen);
    if ((rc = dd_auth_new(&rpc->auth, &conf->auth, err, errlen)) != DD_OK) goto err;
    if (cluster && (rc = dd_forwarder_new(&rpc->forwarder, cluster, err, errlen)) != DD_OK)
        goto err;
    rc = DD_ERR_NOMEM;

    /* Flow-control settings are grpc's defaults on purpose: a larger stream
     * window (grpc.http2.lookahead_bytes), bigger frames, a larger minimum
     * TCP read chunk or no BDP probe each make a large Filter cost more
     * server CPU and save no time, because BDP probing already opens the
     * window past the largest request. The limits below bound what one
     * client can hold (rpc.h's conf, rpc.c's DESIGN). */
    grpc_arg args[11];
    size_t nargs = 0;
#define INT_ARG(k, v) \
    do { \
        args[nargs].type = GRPC_ARG_INTEGER; \
        args[nargs].key = (char *)(k); \
        args[nargs].value.integer = (v) > INT_MAX ? INT_MAX : (int)(v); \
        nargs++; \
    } while (0)
    INT_ARG(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, conf->max_message_bytes);
    INT_ARG(GRPC_ARG_MAX_CONCURRENT_STREAMS, conf->max_streams_per_connection);
    /* One daemon per port: grpc sets SO_REUSEPORT on its listeners by
     * default, which lets a second dedupd bind the same port and the
     * kernel split new connections between the two stores. Off, the
     * second one's bind fails with EADDRINUSE and it exits. */
    INT_ARG(GRPC_ARG_ALLOW_REUSEPORT, 0);
    if (conf->max_connection_idle_ms)
        INT_ARG(GRPC_ARG_MAX_CONNECTION_IDLE_MS, conf->max_connection_idle_ms);
    if (conf->max_connection_age_ms) {
        INT_ARG(GRPC_ARG_MAX_CONNECTION_AGE_MS, conf->max_connection_age_ms);
        INT_ARG(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, conf->max_connection_age_grace_ms);
    }
    if (conf->keepalive_min_ms) {
        INT_ARG(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, conf->keepalive_min_ms);
        INT_ARG(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
    }
    /* Compression off: only identity is enabled, and grpc core answers a
     * request in any other encoding UNIMPLEMENTED before it reaches us, so
     * nobody makes the server inflate a small message into a large one.
     * On: grpc's limit on a received message applies to the decompressed
     * size. */
    INT_ARG(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET,
            strcmp(conf->compression, "on") == 0 ? (1u << GRPC_COMPRESS_ALGORITHMS_COUNT) - 1
                                                 : 1u << GRPC_COMPRESS_NONE);
#undef INT_ARG
    /* The resource quota bounds the memory grpc's transport accounts to
     * it over all connections (read buffers, frames not yet handed on):
     * under pressure grpc core reads less and shrinks its windows rather
     * than grow. The server keeps its own reference. */
    grpc_resource_quota *quota = grpc_resource_quota_create("dedupd");
    if (!quota) {
        dd_fail(rc, err, errlen, "cannot create the gRPC resource quota");
        goto err;
    }
    grpc_resource_quota_resize(quota, (size_t)conf->max_buffer_mb << 20);
    args[nargs].type = GRPC_ARG_POINTER;
    args[nargs].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
    args[nargs].value.pointer.p = quota;
    args[nargs].value.pointer.vtable = grpc_resource_quota_arg_vtable();
    nargs++;
    grpc_channel_args chargs = {.num_args = nargs, .args = args};
    rpc->server = grpc_server_create(&chargs, NULL);
    grpc_resource_quota_unref(quota);
    if (!rpc->server) {
        dd_fail(rc, err, errlen, "cannot create the gRPC server");
        goto err;
    }
    for (int m = 0; m < DD_API_UNKNOWN; m++) {
        rpc->registered[m] = grpc_server_register_method(
            rpc->server, dd_api_method_path(m), NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (!rpc->registered[m]) {
            rc = DD_ERR_INVALID;
            dd_fail(rc, err, errlen, "cannot register %s", dd_api_method_path(m));
            goto err;
        }
    }

    if ((rc = dd_stream_new(&rpc->stream, rpc->server, stream_status, rpc, err, errlen)) != DD_OK)
        goto err;
    rc = DD_ERR_NOMEM;

    /* Shutdown notification only: never polled for I/O. */
    grpc_completion_queue_attributes attr = {
        .version = 1, .cq_completion_type = GRPC_CQ_NEXT, .cq_polling_type = GRPC_CQ_NON_POLLING};
    rpc->shutdown_cq =
        grpc_completion_queue_create(grpc_completion_queue_factory_lookup(&attr), &attr, NULL);
    if (!rpc->shutdown_cq) {
        dd_fail(rc, err, errlen, "cannot create a completion queue");
        goto err;
    }
    grpc_server_register_completion_queue(rpc->server, rpc->shutdown_cq, NULL);

    rpc->workers = calloc(rpc->nworkers, sizeof *rpc->workers);
    if (!rpc->workers) {
        dd_fail(rc, err, errlen, "out of memory");
        goto err;
    }
    for (unsigned i = 0; i < rpc->nworkers; i++) {
        rc = worker_init(rpc, &rpc->workers[i], i, recent, history, err, errlen);
        if (rc != DD_OK) goto err;
    }

    grpc_server_credentials *creds = dd_auth_credentials(&conf->auth.tls, err, errlen);
    if (!creds) {
        rc = DD_ERR_INVALID;
        goto err;
    }
    rpc->port = grpc_server_add_http2_port(rpc->server, rpc->listen, creds);
    grpc_server_credentials_release(creds);
    if (rpc->port <= 0) {
        char why[128];
        bind_error(rpc->listen, why, sizeof why);
        rc = DD_ERR_IO;
        dd_fail(rc, err, errlen, "rpc.listen: cannot listen on %s%s%s", rpc->listen,
                why[0] ? ": " : "", why);
        goto err;
    }
    *out = rpc;
    return DD_OK;

err:
    dd_rpc_free(rpc);
    return rc;
}

int dd_rpc_port(const dd_rpc *rpc)
{
    return rpc->port;
}

void dd_rpc_set_trace(dd_rpc *rpc, dd_trace *trace)
{
    for (size_t i = 0; i < rpc->nworkers; i++)
        if (rpc->workers[i].record) dd_record_set_trace(rpc->workers[i].record, trace);
}

void dd_rpc_set_serving(dd_rpc *rpc, bool serving)
{
    atomic_store(&rpc->serving, serving);
}

bool dd_rpc_serving(const dd_rpc *rpc)
{
    return atomic_load(&rpc->serving);
}

void dd_rpc_set_single(dd_rpc *rpc, const struct dd_serve_single *single)
{
    rpc->single = *single;
    if (!rpc->single.address[0]) {
        char host[256];
        if (dd_hostport_parse(rpc->listen, host, sizeof host, NULL) == DD_HOSTPORT_OK)
            dd_hostport_format(rpc->single.address, sizeof rpc->single.address, host,
                               (unsigned)rpc->port);
    }
    if (!rpc->cluster) memcpy(rpc->map_hash, single->map_hash, sizeof rpc->map_hash);
}

void dd_rpc_set_ready(dd_rpc *rpc, bool (*ready)(void *ud), void *ud)
{
    rpc->ready = ready;
    rpc->ready_ud = ud;
}

void dd_rpc_set_refusal(dd_rpc *rpc, bool (*refused)(void *ud, char *why, size_t whylen), void *ud)
{
    rpc->refused = refused;
    rpc->refused_ud = ud;
}

/* ---- calls -------------------------------------------------------------- */

static int post(struct slot *s)
{
    dd_rpc *rpc = s->w->rpc;
    grpc_call_error e;

    s->call = NULL;
    s->payload = NULL;
    s->reply = NULL;
    s->cancelled = 0;
    s->state = SLOT_REQUESTED;
    if (s->method == DD_API_UNKNOWN)
        e = grpc_server_request_call(rpc->server, &s->call, &s->details, &s->md, s->w->cq, s->w->cq,
                                     s);
    else
        e = grpc_server_request_registered_call(rpc->server, rpc->registered[s->method], &s->call,
                                                &s->deadline, &s->md, &s->payload, s->w->cq,
                                                s->w->cq, s);
    if (e != GRPC_CALL_OK) {
        s->state = SLOT_IDLE;
        dd_error("rpc", "msg=\"cannot pre-post a call\" method=%s error=\"%s\"",
                 dd_api_method_path(s->method), grpc_call_error_to_string(e));
        return DD_ERR_STATE;
    }
    s->w->outstanding++;
    return DD_OK;
}

/* SnapshotBegin and SnapshotRead (snapshot.h): a replica of this node's
 * shard, with the same map, copies this store. */
static grpc_status_code snapshot_call(struct worker *w, enum dd_api_method m, const uint8_t *data,
                                      size_t len, grpc_byte_buffer **reply)
{
    ProtobufCAllocator *al = dd_arena_allocator(w->arena);
    dd_rpc *rpc = w->rpc;
    if (!rpc->cluster || !rpc->snapshot) {
        snprintf(w->msg, sizeof w->msg, "this node is not part of a cluster");
        return GRPC_STATUS_UNIMPLEMENTED;
    }
    int rc;
    if (m == DD_API_SNAPSHOT_BEGIN) {
        Dedup__V1__SnapshotBeginRequest *req =
            dedup__v1__snapshot_begin_request__unpack(al, len, data);
        if (!req) return dd_serve_bad_message(&w->serve, "dedup.v1.SnapshotBeginRequest");
        enum dd_cluster_relation rel;
        if (dd_cluster_check_peer_map(rpc->cluster, req->map_hash, req->split_hash, req->from, &rel,
                                      w->msg, sizeof w->msg) != DD_OK)
            return GRPC_STATUS_FAILED_PRECONDITION;
        /* The lending rule is snapshot.h's. */
        if (dd_snapshot_may_lend(dd_cluster_get_map(rpc->cluster), rel, req->shard,
                                 req->asker_shard, w->msg, sizeof w->msg) != DD_OK)
            return GRPC_STATUS_FAILED_PRECONDITION;
        struct dd_snapshot_manifest man;
        rc = dd_snapshot_begin(rpc->snapshot, &man, w->msg, sizeof w->msg);
        if (rc != DD_OK)
            return rc == DD_ERR_NOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_UNAVAILABLE;
        Dedup__V1__SnapshotManifest resp = DEDUP__V1__SNAPSHOT_MANIFEST__INIT;
        Dedup__V1__SnapshotFile *fs = dd_arena_alloc(w->arena, (man.n + 1) * sizeof *fs);
        Dedup__V1__SnapshotFile **fp = dd_arena_alloc(w->arena, (man.n + 1) * sizeof *fp);
        if (!fs || !fp) {
            dd_snapshot_manifest_free(&man);
            snprintf(w->msg, sizeof w->msg, "out of memory for the manifest");
            return GRPC_STATUS_RESOURCE_EXHAUSTED;
        }
        resp.id = man.id;
        resp.ready = man.ready;
        for (size_t i = 0; i < man.n; i++) {
            dedup__v1__snapshot_file__init(&fs[i]);
            fs[i].name = man.files[i].name;
            fs[i].size = man.files[i].size;
            fs[i].xxh3 = man.files[i].xxh3;
            fp[i] = &fs[i];
        }
        resp.n_files = man.n;
        resp.files = fp;
        *reply = dd_serve_pack(&resp.base);
        dd_snapshot_manifest_free(&man);
        return GRPC_STATUS_OK;
    }
    Dedup__V1__SnapshotReadRequest *req = dedup__v1__snapshot_read_request__unpack(al, len, data);
    if (!req) return dd_serve_bad_message(&w->serve, "dedup.v1.SnapshotReadRequest");
    size_t max = req->max_bytes && req->max_bytes < DD_SNAPSHOT_CHUNK_MAX ? req->max_bytes
                                                                          : DD_SNAPSHOT_CHUNK_MAX;
    uint8_t *buf = dd_arena_alloc(w->arena, max);
    if (!buf) {
        snprintf(w->msg, sizeof w->msg, "out of memory for the chunk");
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    size_t n = 0;
    uint32_t retry = 0;
    rc = dd_snapshot_read(rpc->snapshot, req->id, req->name, req->offset, max, buf, &n, &retry,
                          w->msg, sizeof w->msg);
    if (rc == DD_ERR_NOTFOUND) return GRPC_STATUS_NOT_FOUND;
    if (rc == DD_ERR_INVALID) return GRPC_STATUS_OUT_OF_RANGE;
    if (rc != DD_OK) return GRPC_STATUS_INTERNAL;
    Dedup__V1__SnapshotChunk resp = DEDUP__V1__SNAPSHOT_CHUNK__INIT;
    resp.data.data = buf;
    resp.data.len = n;
    resp.retry_after_ms = retry;
    *reply = dd_serve_pack(&resp.base);
    return GRPC_STATUS_OK;
}

/* Decode, decide, encode (serve.h; the snapshot methods here). Returns the
 * status; on OK *reply is set. */
static grpc_status_code dispatch(struct worker *w, enum dd_api_method m, const uint8_t *data,
                                 size_t len, int64_t deadline_ns, bool degraded,
                                 grpc_byte_buffer **reply)
{
    dd_rpc *rpc = w->rpc;
    if (m == DD_API_SNAPSHOT_BEGIN || m == DD_API_SNAPSHOT_READ)
        return snapshot_call(w, m, data, len, reply);
    bool serving = atomic_load(&rpc->serving);
    /* One source of truth for health: what /readyz says (dd_rpc_set_ready),
     * asked only of health checks. */
    bool up = (m == DD_API_HEALTH_CHECK || m == DD_API_CLUSTER_MAP) &&
              (rpc->ready ? rpc->ready(rpc->ready_ud) : serving);
    return dd_serve_call(&w->serve, m, data, len, deadline_ns, degraded, up, serving, &w->damaged,
                         reply);
}

/* The call's batch is done (or could not start): release it, re-post. */
static void finish(struct worker *w, struct slot *s, int batch_ok)
{
    dd_rpc *rpc = w->rpc;
    dd_rpcstats_call(&rpc->stats, s->method, s->status, (dd_mono_ns() - s->start_ns) / 1000,
                     !batch_ok || s->cancelled);
    if (s->reply) grpc_byte_buffer_destroy(s->reply);
    s->reply = NULL;
    if (s->payload) grpc_byte_buffer_destroy(s->payload);
    s->payload = NULL;
    grpc_call_unref(s->call);
    s->call = NULL;
    grpc_metadata_array_destroy(&s->md);
    grpc_metadata_array_init(&s->md);
    if (s->method == DD_API_UNKNOWN) {
        grpc_call_details_destroy(&s->details);
        grpc_call_details_init(&s->details);
    }
    atomic_fetch_sub(&rpc->in_flight, 1);
    if (s->stalled) w->stalled[s->method]--;
    s->stalled = false;
    s->state = SLOT_IDLE;
    w->outstanding--;
    w->sending--;
    if (!atomic_load(&rpc->stopping)) post(s);
}

/* The call's request bytes are not needed any more: release the slice
 * they were read in place from (serve.h, dd_serve_request) and let the
 * arena go back to its steady size now rather than at the next call, so
 * a worker that served one oversized call does not sit on its memory. */
static void release_request(struct worker *w, struct slot *s)
{
    grpc_slice_unref(s->req);
    s->req = grpc_empty_slice();
    dd_arena_reset(w->arena);
}

/* Send S's answer: s->status, REPLY (owned from now on; NULL for none) and,
 * unless OK, w->msg as the status message; one batch, tag S. */
static void respond(struct worker *w, struct slot *s, grpc_byte_buffer *reply)
{
    dd_rpc *rpc = w->rpc;
    if (s->status != GRPC_STATUS_OK && s->status != GRPC_STATUS_NOT_FOUND &&
        s->status != GRPC_STATUS_INVALID_ARGUMENT && s->status != GRPC_STATUS_UNIMPLEMENTED)
        dd_debug("rpc", "msg=\"call failed\" method=%s status=%d detail=\"%s\"",
                 dd_api_method_path(s->method), (int)s->status, w->msg);

    grpc_op ops[4];
    size_t nops = 0;
    memset(ops, 0, sizeof ops);
    ops[nops].op = GRPC_OP_SEND_INITIAL_METADATA;
    nops++;
    if (reply) {
        s->reply = reply;
        ops[nops].op = GRPC_OP_SEND_MESSAGE;
        ops[nops].data.send_message.send_message = reply;
        nops++;
    }
    grpc_slice details = grpc_empty_slice();
    int have_details = s->status != GRPC_STATUS_OK && w->msg[0];
    if (have_details) details = grpc_slice_from_copied_string(w->msg);
    ops[nops].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[nops].data.send_status_from_server.status = s->status;
    ops[nops].data.send_status_from_server.status_details = have_details ? &details : NULL;
    if (s->stale_map) {
        /* The map this node routes by, so the client knows to read it
         * again (rpc.h). Static slices: the hash lives as long as RPC. */
        s->trailer.key = grpc_slice_from_static_string(DD_API_MD_MAP_HASH);
        s->trailer.value = grpc_slice_from_static_string(rpc->map_hash);
        ops[nops].data.send_status_from_server.trailing_metadata_count = 1;
        ops[nops].data.send_status_from_server.trailing_metadata = &s->trailer;
    }
    nops++;
    ops[nops].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[nops].data.recv_close_on_server.cancelled = &s->cancelled;
    nops++;

    s->state = SLOT_SENDING;
    int64_t now = dd_mono_ns();
    s->send_deadline_ns = now + rpc->send_timeout_ns;
    s->stall_at_ns = now + rpc->stall_ns;
    s->stalled = false;
    s->send_cancelled = 0;
    w->sending++;
    grpc_call_error e = grpc_call_start_batch(s->call, ops, nops, s, NULL);
    /* status_details is not kept past start_batch. */
    grpc_slice_unref(details);
    /* The reply owns its bytes. */
    release_request(w, s);
    if (e != GRPC_CALL_OK) {
        dd_error("rpc", "msg=\"cannot answer a call\" method=%s error=\"%s\"",
                 dd_api_method_path(s->method), grpc_call_error_to_string(e));
        finish(w, s, 0);
    }
}

/* ---- forwarding (forward.h) --------------------------------------------- */

/* S's call as forward.h takes it: its tries complete on W's queue. */
static struct dd_forward_call forward_call(struct worker *w, struct slot *s)
{
    return (struct dd_forward_call){.call = s->call,
                                    .method = s->method,
                                    .md = &s->md,
                                    .payload = s->payload,
                                    .deadline_ns = s->deadline_ns,
                                    .cq = w->cq,
                                    .tag = &s->fwd_tag};
}

/* Answer a forwarded call: its payload is not needed any more. */
static void respond_forwarded(struct worker *w, struct slot *s, grpc_byte_buffer *reply)
{
    if (s->payload) grpc_byte_buffer_destroy(s->payload);
    s->payload = NULL;
    respond(w, s, reply);
}

static void serve_here(struct worker *w, struct slot *s, const uint8_t *data, size_t len,
                       bool degraded);

/* A try of S's forwarded call completed (OK: its batch succeeded): wait
 * for the next replica, answer, or serve the call here, degraded. */
static void forward_done(struct worker *w, struct slot *s, int ok)
{
    w->outstanding--;
    grpc_byte_buffer *reply = NULL;
    switch (dd_forward_done(&s->fwd, ok, &s->status, &reply, w->msg, sizeof w->msg)) {
    case DD_FORWARD_PENDING: w->outstanding++; return;
    case DD_FORWARD_HERE_DEGRADED: serve_here(w, s, NULL, 0, true); return;
    case DD_FORWARD_ANSWER: respond_forwarded(w, s, reply); return;
    }
}

/* A Filter served here met this user's damaged history: ask a caught-up
 * replica of our own shard once (dd_forward_damaged). Returns true when
 * the slot now waits for the replica; false to answer here. */
static bool damaged_elsewhere(struct worker *w, struct slot *s)
{
    if (!w->damaged || !w->rpc->forwarder) return false;
    struct dd_forward_call c = forward_call(w, s);
    if (!dd_forward_damaged(&s->fwd, &c)) return false;
    s->state = SLOT_FORWARDING;
    w->outstanding++;
    release_request(w, s);
    return true;
}

/* Serve S's call here: decode, decide, encode, answer. DATA/LEN are its
 * request bytes when already at hand (NULL: read from the payload);
 * DEGRADED marks a Filter answer degraded. */
static void serve_here(struct worker *w, struct slot *s, const uint8_t *data, size_t len,
                       bool degraded)
{
    grpc_byte_buffer *reply = NULL;
    w->damaged = false;
    s->status =
        data ? GRPC_STATUS_OK
             : dd_serve_request(w->arena, s->payload, &s->req, &data, &len, w->msg, sizeof w->msg);
    if (s->status == GRPC_STATUS_OK)
        s->status = dispatch(w, s->method, data, len, s->deadline_ns, degraded, &reply);
    if (s->status == GRPC_STATUS_UNAVAILABLE && damaged_elsewhere(w, s)) return;
    /* The decoded request lives in the arena: the payload can go now. */
    grpc_byte_buffer_destroy(s->payload);
    s->payload = NULL;
    respond(w, s, reply);
}

/* ---- replies a connection does not take ------------------------------- */

/* The connection CALL came on, as a non-zero hash of grpc_call_get_peer
 * (address and port: one TCP connection). Allocates (grpc's string), so
 * it is asked only of stalled replies and, while a worker has its share
 * of those, of new calls. */
static uint64_t peer_of(grpc_call *call)
{
    char *peer = grpc_call_get_peer(call);
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const char *p = peer; p && *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    gpr_free(peer);
    return h ? h : 1;
}

/* How long a connection stays marked after its last stalled or refused
 * call: longer than one send timeout, so that a hostile client that waits
 * out its cancelled calls and sends a new burst is still known. */
#define STALL_MARK_TIMEOUTS 4

static void mark_peer(struct worker *w, uint64_t peer, int64_t now)
{
    struct stall_mark *slot = &w->marks[0];
    for (size_t i = 0; i < STALL_MARKS; i++) {
        struct stall_mark *m = &w->marks[i];
        if (m->peer == peer) {
            slot = m;
            break;
        }
        if (m->until_ns < slot->until_ns) slot = m;
    }
    slot->peer = peer;
    slot->until_ns = now + STALL_MARK_TIMEOUTS * w->rpc->send_timeout_ns;
}

static bool peer_marked(const struct worker *w, uint64_t peer, int64_t now)
{
    for (size_t i = 0; i < STALL_MARKS; i++)
        if (w->marks[i].peer == peer && w->marks[i].until_ns > now) return true;
    return false;
}

/* Whether S's call must be refused at once, because this worker already
 * keeps its share of stalled replies of the method (rpc->stall_cap) and
 * the call's connection is one that left a reply untaken lately: its
 * answer would most likely hold a slot too. Calls of other connections
 * are served. */
static bool refuse_stalling(struct worker *w, struct slot *s)
{
    dd_rpc *rpc = w->rpc;
    size_t n = w->stalled[s->method];
    if (n == 0 || n < rpc->stall_cap) return false;
    int64_t now = dd_mono_ns();
    uint64_t peer = peer_of(s->call);
    if (!peer_marked(w, peer, now)) return false;
    mark_peer(w, peer, now);
    dd_rpcstats_stall_refusal(&rpc->stats, s->method);
    s->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
    snprintf(w->msg, sizeof w->msg,
             "this connection leaves replies untaken (its HTTP/2 window stays shut) and they "
             "already hold their share of this server's call slots: refused at once "
             "(rpc.send_timeout_ms)");
    return true;
}

/* The value of metadata KEY in MD, or NULL. */
static const grpc_slice *md_value(const grpc_metadata_array *md, const char *key)
{
    for (size_t i = 0; i < md->count; i++)
        if (grpc_slice_str_cmp(md->metadata[i].key, key) == 0) return &md->metadata[i].value;
    return NULL;
}

/* Whether V is the 16 hex digits of HEX (lower case), in either case. */
static bool same_hash(const grpc_slice *v, const char *hex)
{
    if (!hex[0] || GRPC_SLICE_LENGTH(*v) != 16) return false;
    const uint8_t *p = GRPC_SLICE_START_PTR(*v);
    for (size_t i = 0; i < 16; i++) {
        uint8_t c = p[i] >= 'A' && p[i] <= 'F' ? (uint8_t)(p[i] - 'A' + 'a') : p[i];
        if (c != (uint8_t)hex[i]) return false;
    }
    return true;
}

/* S's call refused for a stale map: FAILED_PRECONDITION, this node's map
 * hash in the trailing metadata (respond), counted. */
static enum dd_route refuse_stale(struct worker *w, struct slot *s)
{
    s->status = GRPC_STATUS_FAILED_PRECONDITION;
    s->stale_map = true;
    atomic_fetch_add_explicit(&w->rpc->stale_map, 1, memory_order_relaxed);
    return DD_ROUTE_ERROR;
}

/* S's call carries the map hash its client routed it by (rpc.h, "Stale
 * maps"): served here, or refused; never forwarded. DATA/LEN: its
 * request. */
static enum dd_route route_pinned(struct worker *w, struct slot *s, const uint8_t *data, size_t len)
{
    dd_rpc *rpc = w->rpc;
    const grpc_slice *v = md_value(&s->md, DD_API_MD_MAP_HASH);
    if (!same_hash(v, rpc->map_hash) && !same_hash(v, rpc->split_hash)) {
        char esc[40];
        size_t vl = GRPC_SLICE_LENGTH(*v);
        snprintf(
            w->msg, sizeof w->msg,
            "stale cluster map: the call was routed by map \"%s\", this node's is %s "
            "(read ClusterMap again)",
            dd_sanitize(esc, sizeof esc, (const char *)GRPC_SLICE_START_PTR(*v), vl < 32 ? vl : 32),
            rpc->map_hash);
        return refuse_stale(w, s);
    }
    if (!rpc->cluster) return DD_ROUTE_HERE; /* a single node owns every user */
    const uint8_t *user = NULL;
    size_t user_len = 0;
    /* A missing user id: the call is served here and fails its checks. */
    if (dd_wire_bytes_field(data, len, 1, &user, &user_len) != DD_OK) return DD_ROUTE_HERE;
    uint32_t shard;
    bool local;
    int rc = dd_cluster_route(rpc->cluster, (const char *)user, user_len, &shard, &local, w->msg,
                              sizeof w->msg);
    if (rc == DD_ERR_STATE) return refuse_stale(w, s);
    if (rc != DD_OK) {
        s->status = GRPC_STATUS_UNAVAILABLE;
        return DD_ROUTE_ERROR;
    }
    if (!local) {
        snprintf(w->msg, sizeof w->msg,
                 "stale cluster map: this user is of shard %" PRIu32 " under map %s, and this "
                 "node is of shard %" PRIu32 " (read ClusterMap again)",
                 shard, rpc->map_hash, dd_cluster_get_map(rpc->cluster)->shard);
        return refuse_stale(w, s);
    }
    return dd_cluster_self_behind(rpc->cluster) ? DD_ROUTE_HERE_DEGRADED : DD_ROUTE_HERE;
}

/* A call was matched to slot S: work on it (or forward it) and start its
 * answer. */
static void handle(struct worker *w, struct slot *s)
{
    dd_rpc *rpc = w->rpc;

    s->start_ns = dd_mono_ns();
    s->deadline_ns = 0;
    s->stale_map = false;
    dd_forward_new_call(&s->fwd);
    atomic_fetch_add(&rpc->in_flight, 1);
    w->msg[0] = '\0';

    gpr_timespec deadline = s->method == DD_API_UNKNOWN ? s->details.deadline : s->deadline;
    gpr_timespec now = gpr_now(deadline.clock_type);
    if (refuse_stalling(w, s)) {
        /* Answered with its status alone: HEADERS, which HTTP/2 flow
         * control does not hold, so the slot comes back at once. */
        if (s->payload) grpc_byte_buffer_destroy(s->payload);
        s->payload = NULL;
    } else if (gpr_time_cmp(deadline, now) <= 0) {
        s->status = GRPC_STATUS_DEADLINE_EXCEEDED;
        snprintf(w->msg, sizeof w->msg, "deadline exceeded before the call was worked on");
    } else if (s->method == DD_API_UNKNOWN) {
        char *name = grpc_slice_to_c_string(s->details.method);
        snprintf(w->msg, sizeof w->msg, "unknown method %.300s", name ? name : "?");
        gpr_free(name);
        s->status = GRPC_STATUS_UNIMPLEMENTED;
    } else if ((s->status =
                    dd_auth_call(w->rpc->auth, s->call, s->method,
                                 dd_auth_forwarded(s->method, dd_forward_has_header(&s->md)),
                                 w->msg, sizeof w->msg)) != GRPC_STATUS_OK) {
        /* message set by authorize; the payload is never looked at */
    } else if (s->method != DD_API_HEALTH_CHECK && rpc->refused &&
               rpc->refused(rpc->refused_ud, w->msg, sizeof w->msg)) {
        /* the store is not this node's (owner.h): nothing is served; health
         * answers NOT_SERVING, as /readyz says 503 */
        s->status = GRPC_STATUS_UNAVAILABLE;
    } else if (!s->payload) {
        s->status = GRPC_STATUS_INVALID_ARGUMENT;
        snprintf(w->msg, sizeof w->msg, "no request message");
    } else {
        if (gpr_time_cmp(deadline, gpr_inf_future(deadline.clock_type)) != 0) {
            gpr_timespec left = gpr_time_sub(deadline, now);
            /* Far-off deadlines (> 1 day) are as good as none. */
            if (left.tv_sec < 86400)
                s->deadline_ns = s->start_ns + (int64_t)left.tv_sec * 1000000000 + left.tv_nsec;
        }
        bool pinned = s->method <= DD_API_FORGET_USER && md_value(&s->md, DD_API_MD_MAP_HASH);
        if ((!rpc->cluster && !pinned) || s->method > DD_API_FORGET_USER) {
            serve_here(w, s, NULL, 0, false);
            return;
        }
        const uint8_t *data;
        size_t len;
        s->status =
            dd_serve_request(w->arena, s->payload, &s->req, &data, &len, w->msg, sizeof w->msg);
        struct dd_forward_call c = forward_call(w, s);
        enum dd_route routed = DD_ROUTE_ERROR;
        if (s->status == GRPC_STATUS_OK && pinned)
            routed = route_pinned(w, s, data, len);
        else if (s->status == GRPC_STATUS_OK)
            routed = dd_forward_route(&s->fwd, &c, data, len, &s->status, w->msg, sizeof w->msg);
        if (routed == DD_ROUTE_FORWARDED) {
            /* The payload goes to the peer as it came; nothing of the
             * arena is kept while the peer answers. */
            s->state = SLOT_FORWARDING;
            w->outstanding++;
            release_request(w, s);
            return;
        }
        if (routed != DD_ROUTE_ERROR) {
            serve_here(w, s, data, len, routed == DD_ROUTE_HERE_DEGRADED);
            return;
        }
        grpc_byte_buffer_destroy(s->payload);
        s->payload = NULL;
    }
    respond(w, s, NULL);
}

/* A reply the peer does not take (its HTTP/2 window stays shut, or it
 * never reads) keeps its slot SENDING: with no deadline of its own, for as
 * long as the connection lives, and calls waiting for a slot are matched
 * in arrival order, so a hostile peer's queued calls would take each slot
 * as it comes back. Two bounds:
 * - every SENDING slot past its send deadline (rpc.send_timeout_ms after
 *   its batch started) has its call cancelled (send_timeouts);
 * - a reply still pending after rpc->stall_ns is stalled: its connection
 *   is marked (mark_peer), and a worker keeps at most rpc->stall_cap
 *   stalled replies per method (half its slots): one past that is
 *   cancelled at once, and while the worker keeps its share, a new call
 *   from a marked connection is refused at once (refuse_stalling) with a
 *   status alone, which flow control does not hold. So other connections'
 *   calls always have half the slots, and a hostile peer's queue drains
 *   at the speed of refusals, not of send timeouts (stall_refusals).
 * A cancelled batch completes and finish() re-posts the slot;
 * grpc_call_cancel_with_status is safe with the batch pending; a slot is
 * cancelled once. */
static void sweep_sends(struct worker *w, int64_t now)
{
    static struct dd_log_limit limit, stall_limit;
    dd_rpc *rpc = w->rpc;
    for (size_t i = 0; i < w->nslots; i++) {
        struct slot *s = &w->slots[i];
        if (s->state != SLOT_SENDING || s->send_cancelled) continue;
        if (now >= s->send_deadline_ns) {
            s->send_cancelled = 1;
            grpc_call_cancel_with_status(s->call, GRPC_STATUS_DEADLINE_EXCEEDED,
                                         "reply not taken within rpc.send_timeout_ms", NULL);
            dd_rpcstats_send_timeout(&rpc->stats, s->method);
            dd_log_limited(&limit, 10000, DD_LOG_WARN, "rpc",
                           "msg=\"reply not taken in time; call cancelled\" method=%s "
                           "send_timeout_ms=%" PRId64,
                           dd_api_method_path(s->method), rpc->send_timeout_ns / 1000000);
            continue;
        }
        if (s->stalled || now < s->stall_at_ns) continue;
        s->stalled = true;
        w->stalled[s->method]++;
        mark_peer(w, peer_of(s->call), now);
        if (w->stalled[s->method] <= rpc->stall_cap) continue;
        s->send_cancelled = 1;
        grpc_call_cancel_with_status(s->call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                     "reply not taken while replies of this server's other "
                                     "calls that were not taken hold their share of its call "
                                     "slots",
                                     NULL);
        dd_rpcstats_stall_refusal(&rpc->stats, s->method);
        dd_log_limited(&stall_limit, 10000, DD_LOG_WARN, "rpc",
                       "msg=\"replies not taken hold a share of the call slots; calls of their "
                       "connections refused\" method=%s stalled=%zu",
                       dd_api_method_path(s->method), w->stalled[s->method]);
    }
}

/* Once the server's shutdown is done (drain), a worker shuts its own queue
 * down when nothing of its own is pending there any more: the shutdown tag
 * does not wait for calls a worker still holds (after
 * grpc_server_cancel_all_calls it comes at once), and a batch started on a
 * queue already shut down is a fatal error in grpc core. Not before the
 * tag: the worker queues are the server's pollsets, and closing the
 * connections during shutdown needs them polled. The timeout lets an idle
 * worker notice the flag. */
#define WORKER_TICK_MS 200

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    dd_rpc *rpc = w->rpc;
    const int64_t spin_ns = rpc->spin_ns;
    int64_t spin_until = 0;
    bool spinning = false; /* this worker holds one of rpc->spin_max */
    for (;;) {
        /* rpc.spin_us: for a while after a call, poll without blocking,
         * so that this thread (and its CPU) does not go idle between calls
         * that follow closely; if no more than spin_max workers do. */
        if (spin_ns && dd_mono_ns() < spin_until) {
            unsigned n = atomic_load(&rpc->spinning);
            while (!spinning && n < rpc->spin_max)
                spinning = atomic_compare_exchange_weak(&rpc->spinning, &n, n + 1);
        } else if (spinning) {
            atomic_fetch_sub(&rpc->spinning, 1);
            spinning = false;
        }
        /* While replies are being sent, wake for the next sweep. */
        int64_t tick_ns = (int64_t)WORKER_TICK_MS * 1000000;
        if (w->sending && rpc->sweep_ns < tick_ns) tick_ns = rpc->sweep_ns;
        gpr_timespec until = spinning ? gpr_time_0(GPR_CLOCK_MONOTONIC)
                                      : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                     gpr_time_from_nanos(tick_ns, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(w->cq, until, NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type == GRPC_OP_COMPLETE) {
            if (spin_ns) spin_until = dd_mono_ns() + spin_ns;
            if (*(enum tag_kind *)ev.tag == TAG_FORWARD) {
                struct slot *fs = (struct slot *)((char *)ev.tag - offsetof(struct slot, fwd_tag));
                forward_done(w, fs, ev.success);
                goto next;
            }
            struct slot *s = ev.tag;
            if (s->state == SLOT_REQUESTED && !ev.success) {
                /* The server is shutting down: never to be matched. */
                s->state = SLOT_IDLE;
                w->outstanding--;
            } else if (s->state == SLOT_REQUESTED) {
                handle(w, s);
            } else if (s->state == SLOT_SENDING) {
                finish(w, s, ev.success);
            }
        }
    next:
        if (w->sending) {
            int64_t now = dd_mono_ns();
            if (now >= w->next_sweep_ns) {
                sweep_sends(w, now);
                w->next_sweep_ns = now + rpc->sweep_ns;
            }
        }
        if (!w->cq_shut && w->outstanding == 0 && atomic_load(&w->rpc->drain)) {
            grpc_completion_queue_shutdown(w->cq);
            w->cq_shut = 1;
        }
    }
    if (spinning) atomic_fetch_sub(&rpc->spinning, 1);
    return NULL;
}

void dd_rpc_set_snapshot(dd_rpc *rpc, dd_snapshot_server *s)
{
    rpc->snapshot = s;
}

int dd_rpc_start(dd_rpc *rpc, char *err, size_t errlen)
{
    if (rpc->started)
        return dd_fail(DD_ERR_STATE, err, errlen, "the RPC server is already started");
    rpc->started = 1;
    grpc_server_start(rpc->server);
    for (unsigned i = 0; i < rpc->nworkers; i++) {
        struct worker *w = &rpc->workers[i];
        for (size_t j = 0; j < w->nslots; j++) {
            if (post(&w->slots[j]) != DD_OK) {
                dd_fail(DD_ERR_IO, err, errlen, "cannot pre-post %s calls",
                        dd_api_method_path(w->slots[j].method));
                goto err;
            }
        }
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            dd_fail(DD_ERR_NOMEM, err, errlen, "cannot start RPC worker %u", i);
            goto err;
        }
        w->thread_started = 1;
    }
    if (dd_stream_start(rpc->stream, err, errlen) != DD_OK) goto err;
    atomic_store(&rpc->serving, true);
    dd_info("rpc",
            "msg=started listen=\"%s\" port=%d tls=%s threads=%u prepost=%u spin_us=%" PRId64
            " spin_max=%u",
            rpc->listen, rpc->port, rpc->tls_mode, rpc->nworkers, rpc->prepost, rpc->spin_ns / 1000,
            rpc->spin_ns ? rpc->spin_max : 0);
    /* Only rpc.allow_insecure lets dd_rpc_conf_check pass this. */
    if (rpc->open_to_all)
        dd_warn("rpc",
                "msg=\"%s on a non-loopback address: any peer that can connect may call "
                "every method\" listen=\"%s\" setting=rpc.allow_insecure",
                strcmp(rpc->tls_mode, "off") == 0 ? "plaintext" : "TLS without client certificates",
                rpc->listen);
    return DD_OK;
err:
    dd_rpc_shutdown(rpc);
    return DD_ERR_IO;
}

/* Health NOT_SERVING and the stopping flag (so slots are not re-posted),
 * grpc_server_shutdown_and_notify on a separate non-polling queue, wait up
 * to rpc.shutdown_grace_ms for the tag, else grpc_server_cancel_all_calls
 * and wait again. The tag does not wait for calls a worker still holds,
 * so each worker finishes what it holds (a cancelled call's batch fails at
 * once; a call stuck in Redis or RocksDB ends within recent.timeout_ms or
 * the store's own time), and when none of its slots has an op pending it
 * shuts its own queue down and drains it. Then the workers are joined and
 * the server and queues destroyed. */
void dd_rpc_shutdown(dd_rpc *rpc)
{
    if (!rpc || !rpc->started || rpc->shut_down) return;
    rpc->shut_down = 1;
    atomic_store(&rpc->serving, false);
    atomic_store(&rpc->stopping, true);
    dd_info("rpc",
            "msg=\"shutting down\" health=NOT_SERVING in_flight=%" PRIu64 " grace_ms=%" PRIu32,
            atomic_load(&rpc->in_flight), rpc->grace_ms);

    /* Watchers see NOT_SERVING and every stream ends, so none holds the
     * server's shutdown for its grace. */
    dd_stream_stop(rpc->stream);
    int shutdown_tag;
    grpc_server_shutdown_and_notify(rpc->server, rpc->shutdown_cq, &shutdown_tag);
    gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                      gpr_time_from_millis(rpc->grace_ms, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_next(rpc->shutdown_cq, until, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        dd_warn("rpc", "msg=\"grace period over; cancelling calls\" in_flight=%" PRIu64,
                atomic_load(&rpc->in_flight));
        grpc_server_cancel_all_calls(rpc->server);
        ev =
            grpc_completion_queue_next(rpc->shutdown_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    }

    /* Workers finish the calls they hold, then shut their queues down
     * and return (see worker_main). */
    atomic_store(&rpc->drain, true);
    dd_stream_drain(rpc->stream);
    for (unsigned i = 0; i < rpc->nworkers; i++) {
        struct worker *w = &rpc->workers[i];
        if (w->thread_started) {
            pthread_join(w->thread, NULL);
            w->thread_started = 0;
        } else if (w->cq && !w->cq_shut) {
            /* Never ran (start failed part way): its only events are the
             * killed requests; drain them here. */
            grpc_completion_queue_shutdown(w->cq);
            w->cq_shut = 1;
            grpc_event e;
            do {
                e = grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
            } while (e.type != GRPC_QUEUE_SHUTDOWN);
        }
    }
    dd_info("rpc", "msg=stopped");
}

void dd_rpc_free(dd_rpc *rpc)
{
    if (!rpc) return;
    dd_rpc_shutdown(rpc);
    if (rpc->server) {
        if (!rpc->started) {
            /* Never started: shutdown still has to be notified before
             * destroy; with no calls it completes at once. */
            int tag;
            if (rpc->shutdown_cq) {
                grpc_server_shutdown_and_notify(rpc->server, rpc->shutdown_cq, &tag);
                grpc_completion_queue_next(rpc->shutdown_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                           NULL);
            }
        }
        grpc_server_destroy(rpc->server);
    }
    dd_stream_free(rpc->stream);
    if (rpc->workers) {
        for (unsigned i = 0; i < rpc->nworkers; i++) {
            struct worker *w = &rpc->workers[i];
            if (w->cq) {
                if (!rpc->started) {
                    grpc_completion_queue_shutdown(w->cq);
                    grpc_event e;
                    do {
                        e = grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                                       NULL);
                    } while (e.type != GRPC_QUEUE_SHUTDOWN);
                }
                grpc_completion_queue_destroy(w->cq);
            }
            worker_release(w);
        }
        free(rpc->workers);
    }
    if (rpc->shutdown_cq) {
        grpc_completion_queue_shutdown(rpc->shutdown_cq);
        grpc_event e;
        do {
            e = grpc_completion_queue_next(rpc->shutdown_cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                           NULL);
        } while (e.type != GRPC_QUEUE_SHUTDOWN);
        grpc_completion_queue_destroy(rpc->shutdown_cq);
    }
    free(rpc->listen);
    dd_auth_free(rpc->auth);
    dd_forwarder_free(rpc->forwarder);
    free(rpc);
    grpc_shutdown();
}

void dd_rpc_get_stats(const dd_rpc *rpc, struct dd_rpc_stats *out)
{
    memset(out, 0, sizeof *out);
    dd_rpcstats_get(&rpc->stats, out);
    out->in_flight = atomic_load_explicit(&rpc->in_flight, memory_order_relaxed);
    out->serving = atomic_load(&rpc->serving);
}

void dd_rpc_collect(dd_prom *p, void *ud)
{
    struct dd_rpc_stats s;
    dd_rpc_get_stats(ud, &s);

    dd_rpcstats_render(p, &s);

    /* The calls' own families, then one for the store errors both kinds of
     * call meet (Filter reads, the writes write), then Redis's. */
    dd_filter_collect(p);
    struct dd_filter_stats f;
    dd_filter_get_stats(&f);
    struct dd_record_stats w;
    dd_record_get_stats(&w);
    dd_prom_counter(p, "dedupd_filter_history_errors_total",
                    "History reads or writes that failed in RPC calls",
                    f.history_errors + w.history_errors);
    dd_record_collect(p);
    dd_recent_collect(p);
    dd_rpc *rpc = ud;
    dd_prom_counter(p, "dedupd_rpc_stale_map_total",
                    "Calls routed by a client's stale cluster map (dedupd-map-hash), refused "
                    "FAILED_PRECONDITION",
                    atomic_load_explicit(&rpc->stale_map, memory_order_relaxed));
    if (rpc->snapshot) {
        /* The store lent to new replicas (snapshot.h), through this server. */
        uint64_t bytes, throttled;
        dd_snapshot_server_counts(rpc->snapshot, &bytes, &throttled);
        dd_prom_counter(p, "dedupd_snapshot_sent_bytes_total",
                        "Bytes of this store's checkpoints sent to replicas copying it", bytes);
        dd_prom_counter(p, "dedupd_snapshot_throttled_total",
                        "Snapshot reads answered 'ask again' by cluster.snapshot_mbps", throttled);
    }
}
