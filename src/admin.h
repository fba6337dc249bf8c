/* SPDX-License-Identifier: Apache-2.0
 *
 * admin.h - dedupd's operational face: the admin HTTP listener
 * (admin.listen: /metrics in Prometheus text format 0.0.4, /healthz,
 * /readyz), readiness as the components come up and go down (and its own
 * families, dedupd_ready and dedupd_component_ready), and the service
 * manager protocol (sd_notify READY / STOPPING / WATCHDOG). Each module
 * renders its own families (its dd_<module>_collect); admin only adds a
 * component's collector to the registry while the component is attached.
 *
 * DESIGN
 *
 * Threads: libmicrohttpd's pool of admin.threads answers requests; a
 * reaper thread closes connections past their deadline; a watchdog thread
 * exists only when systemd asked for one (WATCHDOG_USEC). Connections are
 * bounded in number and in time (admin.c, "Slow clients"), so clients that
 * trickle bytes cannot keep /healthz from answering.
 *
 * Lifetimes: attaching a module adds its collector to the metrics
 * registry, detaching removes it, and the registry's mutex keeps a
 * collector from running after its removal; the attached module and its
 * readiness probe are guarded by the admin's own mutex (taken after the
 * registry's, never around it). The one rule for main: attach after the
 * module is started, detach before it is freed. Collectors that are no
 * component's (plays.h) main adds to dd_admin_metrics itself.
 *
 * Ready (/readyz 200) = not stopping, and the store is open, and gRPC is
 * serving, and (when ingest.enabled) ingest has partitions assigned;
 * otherwise 503 with one line naming what is missing (with ingest, the
 * broker's last error when there is one). A ready component may be
 * degraded (full disk, Redis unreachable): /readyz stays 200, since Filter
 * still answers correctly or marks its answers degraded, and taking the
 * node out would move load onto nodes sharing the fault, and says "ready;
 * degraded: ...". gRPC health answers from the same function (rpc.h,
 * dd_rpc_set_ready), so it is NOT_SERVING exactly when /readyz is 503.
 * dedupd_component_ready has a sample per required component and per
 * attached optional one (redis). /healthz is 200 while the process
 * answers at all.
 */
#ifndef DD_ADMIN_H
#define DD_ADMIN_H

#include <stdbool.h>
#include <stddef.h>

#include "metrics.h"

/* The admin listener's settings (admin.* in conf/dedupd.conf). */
struct dd_admin_conf {
    char *listen;                    /* host:port for /metrics, /healthz, /readyz; "" = off */
    uint32_t drain_ms;               /* on shutdown: /readyz says 503 this long before gRPC stops */
    uint32_t threads;                /* libmicrohttpd worker threads (a pool when > 1) */
    uint32_t max_connections;        /* connections at once; more are refused */
    uint32_t max_connections_per_ip; /* connections at once from one address */
    uint32_t request_timeout_ms;     /* a connection that has not completed a request this
                                  * long after it opened (or after its last
                                  * request) is closed, however it trickles bytes */
    char *token_file;                /* file holding the bearer token the operator pages
                                 * (/why, /trace) want; "" = those pages answer 403 */
};
typedef struct dd_admin dd_admin;

enum dd_admin_component {
    DD_ADMIN_STORE = 0, /* the history store is open */
    DD_ADMIN_RPC,       /* the gRPC front end is serving */
    DD_ADMIN_INGEST,    /* the Kafka consumer has partitions (only when ingest.enabled) */
    DD_ADMIN_CLUSTER,   /* the node's place in the cluster holds (only once required) */
    DD_ADMIN_REDIS,     /* Redis answers (recent_watch.h); never required: reported in
                           * dedupd_component_ready while attached, and as "degraded" */
    DD_ADMIN_COMPONENT_COUNT,
};

/* Start the listener on conf->listen (host:port, [v6]:port; port 0
 * picks a free port; "" = no listener, readiness and sd_notify still
 * work) and, if the service manager set WATCHDOG_USEC for this process,
 * the watchdog thread. INGEST_REQUIRED (ingest.enabled): readiness also
 * waits for DD_ADMIN_INGEST. Nothing is ready yet: /readyz answers 503. Returns
 * 0, DD_ERR_INVALID (bad address) or DD_ERR_IO (cannot bind or start),
 * with a message naming admin.listen in err, DD_ERR_INVALID naming
 * admin.token_file (unreadable, or not a token: dd_admin_token_parse), or
 * DD_ERR_NOMEM; *out is NULL on error. Free with dd_admin_free. */
int dd_admin_new(dd_admin **out, const struct dd_admin_conf *conf, bool ingest_required, char *err,
                 size_t errlen);

/* Stop the listener and the watchdog and free everything. Detach modules
 * first. NULL is a no-op. */
void dd_admin_free(dd_admin *a);

/* The bound TCP port; 0 when there is no listener. */
int dd_admin_port(const dd_admin *a);

/* The registry /metrics renders (borrowed; lives as long as A): other
 * modules may add collectors to it. */
dd_metrics *dd_admin_metrics(dd_admin *a);

/* Set one component's readiness by hand (dd_admin_attach does it for its
 * component; DD_ADMIN_INGEST also needs an attached ingest that has
 * partitions). Cannot fail. */
void dd_admin_set_ready(dd_admin *a, enum dd_admin_component c, bool ready);

/* Whether MODULE is up, asked by /readyz and dedupd_component_ready; called
 * under the admin's mutex, on the HTTP thread, so it must be quick. */
typedef bool (*dd_admin_probe_fn)(void *module);

/* Attach a started MODULE as component C: COLLECT(p, MODULE), if not NULL,
 * is added to /metrics, and C counts as ready while attached and, if PROBE
 * is not NULL, while PROBE(MODULE) is true. MODULE is borrowed until the
 * matching detach, which must come before it is freed; after detach no
 * scrape nor /readyz touches it and C is not ready. Returns 0 or
 * DD_ERR_NOMEM (nothing attached); attaching again replaces; a NULL
 * MODULE only detaches. Detach of nothing, or with a NULL A, is a no-op.
 * main attaches the history (dd_history_collect), ingest
 * (dd_ingest_collect, probe: it has partitions) and rpc (dd_rpc_collect). */
int dd_admin_attach(dd_admin *a, enum dd_admin_component c, void *module,
                    dd_metrics_collect_fn collect, dd_admin_probe_fn probe);
void dd_admin_detach(dd_admin *a, enum dd_admin_component c);

/* Whether the attached MODULE works only in part (the store: cannot
 * write); if so, writes a short reason into WHY and returns true. Called
 * like a probe, under the admin's mutex, on the HTTP thread. */
typedef bool (*dd_admin_degraded_fn)(void *module, char *why, size_t whylen);

/* Set component C's degraded check (NULL = none), kept across attach and
 * detach; /readyz adds "; degraded: WHY" to "ready" while it says so (the
 * status stays 200). Cannot fail. */
void dd_admin_set_degraded(dd_admin *a, enum dd_admin_component c, dd_admin_degraded_fn fn);

/* Whether /readyz would answer 200 now; if WHY is not NULL, a short text
 * ("ready", "ready; degraded: ...", "stopping", or what is missing) is
 * written into it. */
bool dd_admin_ready(dd_admin *a, char *why, size_t whylen);

/* Readiness also waits for component C (DD_ADMIN_CLUSTER is not
 * required until this is called). Call before serving. Cannot fail. */
void dd_admin_require(dd_admin *a, enum dd_admin_component c);

/* Set component C's reason for not being ready (NULL = the generic
 * "<component> not ready"), kept across attach and detach; called like a
 * probe while C is attached and not ready. Cannot fail. */
void dd_admin_set_why(dd_admin *a, enum dd_admin_component c, dd_admin_degraded_fn fn);

/* Serve PATH (e.g. "/cluster") while component C is attached: the body is
 * FN(module), a malloc'd JSON text the listener frees (NULL: 500). FN is
 * called under the admin's mutex on the HTTP thread. One page per
 * component; kept across attach and detach. Cannot fail. */
typedef char *(*dd_admin_page_fn)(void *module);
void dd_admin_set_page(dd_admin *a, enum dd_admin_component c, const char *path,
                       dd_admin_page_fn fn);

/* ---- handlers: pages with arguments, methods and writes ----------------
 *
 * A handler serves one path (e.g. "/why") for GET, HEAD, POST and DELETE
 * (other methods: 405), with the request's query arguments (URL-decoded
 * by libmicrohttpd; a value may hold any byte but NUL: see dd_admin_arg).
 *
 * An OPERATOR page (user data or writes: /why, /trace) is not a side door
 * for whatever runs on the host or in a browser there. Its checks, in
 * order, before the handler runs:
 *   1. the client's address is loopback (127.0.0.0/8, ::1, ::ffff:127.x),
 *      else 403: a non-loopback admin.listen (for Prometheus) does not
 *      open user data to the network (`kubectl exec ... dedupctl` still
 *      comes from loopback);
 *   2. admin.token_file is set, else 403 naming it (the pages are off);
 *   3. the request is not a browser's cross-site one: any Origin header,
 *      or Sec-Fetch-Site other than "none" or "same-origin", is 403 (the
 *      admin listener serves no page a browser should call it from);
 *   4. a write (POST, DELETE) carries a Content-Type that no HTML form can
 *      send (not application/x-www-form-urlencoded, multipart/form-data
 *      or text/plain; dedupctl sends application/json), else 415;
 *   5. "Authorization: Bearer TOKEN" with the file's token (compared in
 *      constant time), else 401.
 * A browser form can neither set Authorization nor a JSON content type,
 * and a page of another origin cannot read the answers; 3 and 4 hold even
 * against a token that leaked. Refusals are {"error": "..."}.
 *
 * A handler runs on an HTTP thread, without the admin's locks, possibly in
 * several threads at once, and may block (bounded by its own timeouts);
 * admin.request_timeout_ms does not interrupt it. */
typedef struct dd_admin_request dd_admin_request;

/* "GET", "HEAD", "POST" or "DELETE". Static. */
const char *dd_admin_method(const dd_admin_request *r);

/* The first value of query argument KEY (NULL when absent; "" for "?KEY"
 * or "?KEY="), LEN bytes in *LEN (NULL: not wanted); borrowed for the
 * call. A value cut short by a NUL byte (%00) counts as absent: ids with
 * NUL are not ids any API call accepts. */
const char *dd_admin_arg(const dd_admin_request *r, const char *key, size_t *len);

/* Call FN(UD, value, len) for each value of KEY, in request order (NUL
 * cut values skipped). Returns how many values FN got. */
size_t dd_admin_args(const dd_admin_request *r, const char *key,
                     void (*fn)(void *ud, const char *v, size_t len), void *ud);

/* FN answers R: a malloc'd body (the listener frees it; NULL: 500 "out of
 * memory"), *STATUS (set to 200 before the call) and *CONTENT_TYPE
 * (static; "application/json" before the call). */
typedef char *(*dd_admin_handler_fn)(void *ud, const dd_admin_request *r, unsigned *status,
                                     const char **content_type);

/* Serve PATH (static string) with FN(UD, ...) until set again; FN NULL
 * removes it, waiting for calls of it in flight to return, so UD may be
 * freed after. OPERATOR: the checks above. At most 4 handlers. Returns 0
 * or DD_ERR_LIMIT. */
int dd_admin_set_handler(dd_admin *a, const char *path, dd_admin_handler_fn fn, void *ud,
                         bool operator);

/* The token in admin.token_file's text TEXT (surrounding blanks and line
 * ends dropped) into OUT (OUT_CAP bytes): 16 to DD_ADMIN_TOKEN_MAX
 * printable ASCII characters without a space. Returns 0 or DD_ERR_INVALID
 * with a message naming admin.token_file. */
#define DD_ADMIN_TOKEN_MAX 512
int dd_admin_token_parse(const char *text, char *out, size_t out_cap, char *err, size_t errlen);

/* Tell the service manager the daemon is serving (READY=1; a no-op
 * without NOTIFY_SOCKET). Call once the store is open and gRPC serves. */
void dd_admin_service_ready(dd_admin *a);

/* Shutdown begins: from now on /readyz answers 503 "stopping" whatever the
 * components say, and the service manager is told STOPPING=1; then this
 * waits admin.drain_ms (the components still serve meanwhile) so that load
 * balancers polling /readyz stop routing here before gRPC stops. Call it
 * first on SIGTERM, before anything stops. Idempotent (only the first call
 * waits); NULL is a no-op. */
void dd_admin_stopping(dd_admin *a);

#endif
