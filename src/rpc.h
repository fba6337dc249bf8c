/* SPDX-License-Identifier: Apache-2.0
 *
 * rpc.h - the gRPC front end, on grpc core's C API with protobuf-c
 * messages. It serves:
 *   dedup.v1.Dedup         Filter, RecordDelivery, RecordPlays, ForgetUser;
 *   grpc.health.v1.Health  Check;
 *   dedup.v1.Cluster       Status, SnapshotBegin, SnapshotRead (nodes of a
 *                          cluster ask each other; UNIMPLEMENTED on a
 *                          single node).
 * The server: workers, call slots, limits, shutdown. A call is checked
 * (auth.h), routed and maybe forwarded to another shard (forward.h),
 * else answered here (serve.h: decode, filter.h or record.h, encode; the
 * snapshot methods through snapshot.h). Knows nothing of storage details.
 *
 * Lifecycle: dd_rpc_new (binds rpc.listen) -> dd_rpc_start (threads, calls
 * pre-posted, health SERVING) -> dd_rpc_shutdown (health NOT_SERVING, stop
 * accepting, finish calls in flight for up to rpc.shutdown_grace_ms, cancel
 * the rest, drain and destroy the queues) -> dd_rpc_free. dd_rpc_new,
 * dd_rpc_start, dd_rpc_shutdown and dd_rpc_free are called from one thread
 * (main); dd_rpc_set_serving, dd_rpc_port and dd_rpc_get_stats from any.
 */
#ifndef DD_RPC_H
#define DD_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "auth.h"
#include "metrics.h"
#include "rpcstats.h"
#include "serve.h"

struct dd_recent_conf;

/* The front end's settings (rpc.* in conf/dedupd.conf). */
struct dd_rpc_conf {
    char *listen;               /* host:port for gRPC */
    uint32_t threads;           /* worker threads, one completion queue each */
    uint32_t prepost;           /* calls pre-posted per method per worker */
    uint32_t max_candidates;    /* Filter requests with more get RESOURCE_EXHAUSTED */
    uint32_t max_id_bytes;      /* longer user or item ids get INVALID_ARGUMENT */
    uint32_t max_message_bytes; /* largest request accepted */
    struct dd_auth_conf auth;   /* rpc.tls_cert, rpc.tls_key, rpc.tls_client_ca,
                                 * rpc.allow_*: auth.h (dd_rpc_conf_check) */
    uint32_t shutdown_grace_ms; /* time calls in flight get on shutdown */
    char *poller;               /* grpc poll strategy: poll or epoll1 (dd_rpc_process_init) */
    uint32_t spin_us;           /* a worker polls without blocking this long after a call */
    /* Hostile or broken clients (docs/design.md, "The front end",
     * "Hostile clients"; rpc.c's DESIGN, "Limits"). */
    uint32_t send_timeout_ms;            /* a reply not delivered this long after it is ready:
                                 * the call is cancelled and its slot re-posted */
    uint32_t max_streams_per_connection; /* HTTP/2 concurrent streams per connection */
    uint32_t max_buffer_mb;              /* grpc resource quota: all connections' buffers */
    uint32_t max_connection_idle_ms;     /* GOAWAY a connection with no call this long; 0 = never */
    uint32_t max_connection_age_ms;      /* GOAWAY a connection this old; 0 = never */
    uint32_t max_connection_age_grace_ms; /* calls then get this long before it closes */
    uint32_t keepalive_min_ms;            /* client pings closer than this (no data) are strikes;
                                 * after 2 the connection is closed; 0 = grpc's default */
    char *compression;                    /* "off": compressed requests get UNIMPLEMENTED; "on" */
};
typedef struct dd_history dd_history;
typedef struct dd_rpc dd_rpc;

/* Who may call what (rpc.allow_read, rpc.allow_write, rpc.allow_peer). A client's
 * identities are its certificate's subject common name and each of its
 * subject alternative names (DNS names, URIs, e-mail addresses, IP
 * addresses as text), as grpc reports them after verifying the certificate
 * against rpc.tls_client_ca (auth properties x509_common_name and
 * x509_subject_alternative_name). A list is one of:
 *   "*"       any client that got through the handshake (with mutual TLS:
 *             any holder of a certificate the CA signed; without it: any
 *             peer that can connect);
 *   ""        nobody (e.g. a read-only node: allow_write = "");
 *   "a, b"    clients with at least one identity equal, byte for byte, to
 *             an entry; entries are trimmed of surrounding blanks, must be
 *             non-empty and may not be "*". Only with rpc.tls_client_ca:
 *             without client certificates there is no identity to check.
 * The classes (auth.h, enum dd_auth_class):
 *   read   rpc.allow_read:  dedup.v1.Dedup/Filter;
 *   write  rpc.allow_write: dedup.v1.Dedup/RecordDelivery, RecordPlays,
 *                           ForgetUser;
 *   peer   rpc.allow_peer:  dedup.v1.Cluster/Status, SnapshotBegin and
 *                           SnapshotRead (a node's state, and a copy of
 *                           every user's history), and any Dedup call
 *                           carrying a forwarding header (dedupd-forwarded-by
 *                           and its kin, api.h): a forwarded call is
 *                           judged by rpc.allow_peer alone, since the node
 *                           that forwarded it judged its client;
 *   open   grpc.health.v1.Health/Check: any client that connects.
 * Readers and writers are not peers unless rpc.allow_peer names them. A
 * call the list does not allow is answered PERMISSION_DENIED, naming the
 * client and the key, before its request is decoded. Nodes of a cluster
 * call each other with their own certificate (rpc.tls_cert, peer.h),
 * so under mutual TLS rpc.allow_peer names the nodes' identities, and a
 * cluster under mutual TLS refuses rpc.allow_peer = "*" (any holder of a
 * certificate rpc.tls_client_ca signed, every reader and writer
 * included, could copy every user's history).
 *
 * dd_rpc_conf_check checks CONF alone (config.c calls it from
 * dd_config_validate, so dedupd -t catches it): rpc.tls_cert and
 * rpc.tls_key together; rpc.tls_client_ca only with them; the allow lists'
 * syntax and that identity lists need rpc.tls_client_ca; and that a
 * rpc.listen not on loopback (addr.h, dd_hostport_is_loopback) either
 * authenticates clients (rpc.tls_client_ca) or has rpc.allow_insecure =
 * true. Returns 0 or DD_ERR_INVALID with a message naming the keys. Reads
 * no file (dd_rpc_new does). */
int dd_rpc_conf_check(const struct dd_rpc_conf *conf, char *err, size_t errlen);

/* Process-wide gRPC settings, before grpc starts: rpc.poller becomes
 * GRPC_POLL_STRATEGY (overriding the environment), which grpc reads at its
 * first grpc_init. Call once, early in main, before any thread exists
 * (setenv is not safe against other threads' getenv). grpc's own log
 * (gpr_log) goes through dd_log from then on: module=grpc key=value lines,
 * grpc's ERROR as warn, at most one line per grpc source line per 10 s
 * (with suppressed=N). Returns 0 or DD_ERR_NOMEM (message in err).
 *
 * The two engines: with epoll1 (grpc's default) one thread at a time
 * polls every socket for all completion queues, so at low load the
 * thread that reads a call's bytes is usually not the worker whose queue
 * the call is matched to, and every call wakes a second thread. With poll
 * (ours) a connection is polled by the worker whose queue accepted it,
 * and its calls are matched to that queue first, so one thread reads and
 * answers each call; but a worker reads its connections only between
 * calls. Together with rpc.spin_us (the worker keeps polling for a while
 * after a call, see worker_main; at most usable CPUs - 1 workers at once) a
 * call that follows closely wakes no thread at all.
 *
 * So poll and a spin are the defaults: the goals are latency at low load
 * (no context switch between a call's read and its answer) and throughput
 * at saturation, where latency is queueing and the spin costs nothing; an
 * operator who cares more for the tail under overload sets epoll1 and
 * spin_us 0. */
int dd_rpc_process_init(const struct dd_rpc_conf *conf, char *err, size_t errlen);

/* Create the server for CONF (and RECENT for the workers' Redis
 * connections, which connect lazily), register its methods and bind
 * rpc.listen (port 0 picks a free port: see dd_rpc_port). With rpc.tls_cert
 * set, the PEM cert chain and rpc.tls_key are read now and the port serves
 * TLS only; with rpc.tls_client_ca too, the handshake fails unless the
 * client presents a certificate that CA signed. CONF must have passed
 * dd_rpc_conf_check (else DD_ERR_INVALID). HISTORY is borrowed and must
 * outlive the server, and so is CLUSTER (NULL = a single node): with it,
 * a Dedup call for a user of another shard is forwarded to a replica of
 * that shard (forward.h; docs/design.md, "Cluster", "Every node answers
 * every call"), a Filter whose user's history is
 * damaged here (history.h) to a caught-up replica of this node's own
 * shard before it is answered UNAVAILABLE, and dedup.v1.Cluster/Status answers
 * peers; PRODUCER (NULL = a single node; borrowed) is handed to every
 * worker's writer (record.h: RecordPlays and ForgetUser also go through
 * Kafka). Returns 0, or
 * DD_ERR_INVALID (bad address, unreadable TLS files), DD_ERR_IO (cannot
 * bind) or DD_ERR_NOMEM, with a message in err; *out is NULL on error.
 * Nothing is served until dd_rpc_start. Free with dd_rpc_free. */
typedef struct dd_cluster dd_cluster;
struct dd_producer;
int dd_rpc_new(dd_rpc **out, const struct dd_rpc_conf *conf, const struct dd_recent_conf *recent,
               dd_history *history, dd_cluster *cluster, struct dd_producer *producer, char *err,
               size_t errlen);

/* The snapshot server (snapshot.h, borrowed; outlives RPC) that answers
 * SnapshotBegin and SnapshotRead; without one they are UNIMPLEMENTED.
 * Before dd_rpc_start. */
typedef struct dd_snapshot_server dd_snapshot_server;
void dd_rpc_set_snapshot(dd_rpc *rpc, dd_snapshot_server *s);

/* Start serving: rpc.threads workers, each with its own completion queue,
 * Redis connection and arena, with rpc.prepost calls pre-posted per method.
 * Health becomes SERVING. A non-loopback rpc.listen without client
 * certificates (allowed by rpc.allow_insecure) is logged as a warning. Returns 0, DD_ERR_STATE (already started) or
 * DD_ERR_NOMEM / DD_ERR_IO (a thread or call could not be created; the
 * server is then shut down and only dd_rpc_free remains to be called). */
int dd_rpc_start(dd_rpc *rpc, char *err, size_t errlen);

/* Hand TRACE (trace.h; borrowed, must outlive the server; NULL = none)
 * to every worker's writer (dd_record_set_trace). Call between dd_rpc_new
 * and dd_rpc_start. Cannot fail. */
typedef struct dd_trace dd_trace;
void dd_rpc_set_trace(dd_rpc *rpc, dd_trace *trace);

/* The bound TCP port (the real one when rpc.listen asked for port 0). */
int dd_rpc_port(const dd_rpc *rpc);

/* Whether the front end serves: true from dd_rpc_start until
 * dd_rpc_set_serving(false) or shutdown. Without dd_rpc_set_ready it is
 * what grpc.health.v1.Health/Check answers for "" and "dedup.v1.Dedup"
 * (SERVING / NOT_SERVING). Cannot fail. */
void dd_rpc_set_serving(dd_rpc *rpc, bool serving);
bool dd_rpc_serving(const dd_rpc *rpc);

/* Health/Check answers SERVING exactly when READY(UD) is true: main passes
 * the admin's readiness (/readyz 200), whose gRPC component is
 * dd_rpc_serving, so that health and /readyz never disagree. READY is
 * called on a worker thread per health check and must be quick and
 * thread-safe. Before dd_rpc_start. Cannot fail. */
void dd_rpc_set_ready(dd_rpc *rpc, bool (*ready)(void *ud), void *ud);

/* A single node's ClusterMap (serve.h, struct dd_serve_single; copied):
 * its map hash, partitioner and ingest's partition count and lag. An
 * empty address is filled with rpc.listen's host and the bound port.
 * The map hash is also what the single node checks a call's
 * DD_API_MD_MAP_HASH against (below); a cluster node takes both from its
 * cluster instead. Before dd_rpc_start. Cannot fail.
 *
 * Stale maps: a Dedup call (Filter, RecordDelivery, RecordPlays,
 * ForgetUser) carrying DD_API_MD_MAP_HASH (api.h) was routed by a client's
 * map. It is answered here when that hash is this node's map hash, or,
 * resharding, the hash of the map this node's splits (cluster.split_from:
 * a client that read the older map), and this node's shard owns the
 * call's user under its own map (a node behind answers a Filter
 * degraded). Otherwise it is answered FAILED_PRECONDITION with this
 * node's map hash in the trailing metadata under the same key, counted in
 * dedupd_rpc_stale_map_total, and never forwarded. Without the metadata a
 * call is routed as before (forward.h). */
void dd_rpc_set_single(dd_rpc *rpc, const struct dd_serve_single *single);

/* Every call but health checks (which answer what /readyz says:
 * NOT_SERVING then) and the Cluster service's too, once its caller is
 * authorized, is answered UNAVAILABLE with REFUSED's message
 * while REFUSED(UD, msg, len) is true (the store is not this node's:
 * owner.h). REFUSED is called by every worker for every call, so it must
 * be quick and thread-safe; UD must outlive the server. Call before
 * dd_rpc_start. Cannot fail. */
void dd_rpc_set_refusal(dd_rpc *rpc, bool (*refused)(void *ud, char *why, size_t whylen), void *ud);

/* Health NOT_SERVING, stop accepting calls, let calls in flight finish for
 * up to rpc.shutdown_grace_ms, cancel the rest, stop the workers and
 * destroy the queues. Idempotent; a no-op before dd_rpc_start. Cannot
 * fail. */
void dd_rpc_shutdown(dd_rpc *rpc);

/* Shut down if needed and free everything. NULL is a no-op. */
void dd_rpc_free(dd_rpc *rpc);

/* Per-method counters for /metrics (struct dd_rpc_stats, rpcstats.h),
 * indexed by enum dd_api_method (api.h), with the calls in flight and
 * whether the server serves. Every counter is a monotonic atomic since
 * dd_rpc_new; reading them takes no lock. */
/* Copy the counters into OUT. Cannot fail. */
void dd_rpc_get_stats(const dd_rpc *rpc, struct dd_rpc_stats *out);

/* A metrics.h collector for UD (a dd_rpc *): renders dedupd_rpc_*, then
 * the families of what the calls do (filter.h's, the history errors of
 * Filter and record.h together, record.h's, recent.h's) and
 * dedupd_rpc_stale_map_total. The rpc_* latency buckets are 50 us .. 1 s. */
void dd_rpc_collect(dd_prom *p, void *ud);

#endif
