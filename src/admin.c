/* SPDX-License-Identifier: Apache-2.0
 *
 * admin.c - see admin.h: the admin HTTP listener (libmicrohttpd), readiness
 * and its metrics, and sd_notify. The modules' families are their own
 * collectors'; this file only adds and removes them.
 *
 * Slow clients: libmicrohttpd's own timeout is an idle one, which every
 * trickled byte resets, so a client sending a header line a second would
 * hold a connection for ever. Connections are bounded in number
 * (admin.max_connections, admin.max_connections_per_ip; more are refused
 * at accept) and in time: a connection must complete a request within
 * admin.request_timeout_ms of opening (or of its previous request), else
 * the reaper shuts its socket down and libmicrohttpd closes it. A request
 * may use at most libmicrohttpd's connection memory limit (32 KiB).
 */
#include "admin.h"
#include "addr.h"
#include "dd.h"
#include "log.h"
#include "sys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

/* A thread that wakes periodically until told to stop: its state is
 * guarded by LOCK (the caller's), which the thread holds but while it
 * waits. */
struct ticker {
    pthread_t thread;
    pthread_mutex_t *lock;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC */
    bool running, stop;
};

/* Start FN(ARG) as T's thread. Returns DD_OK or DD_ERR_NOMEM. */
static int ticker_start(struct ticker *t, pthread_mutex_t *lock, void *(*fn)(void *), void *arg)
{
    if (dd_sys_cond_init_monotonic(&t->cond) != DD_OK) return DD_ERR_NOMEM;
    t->lock = lock;
    t->stop = false;
    if (pthread_create(&t->thread, NULL, fn, arg) != 0) {
        pthread_cond_destroy(&t->cond);
        return DD_ERR_NOMEM;
    }
    t->running = true;
    return DD_OK;
}

/* With T's lock held: wait NS nanoseconds, or less if told to stop.
 * Returns whether T is to stop. */
static bool ticker_wait(struct ticker *t, int64_t ns)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    ns += until.tv_nsec;
    until.tv_sec += (time_t)(ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    while (!t->stop && pthread_cond_timedwait(&t->cond, t->lock, &until) == 0) {
    }
    return t->stop;
}

/* Tell T's thread to stop and join it. A no-op if it never started. */
static void ticker_stop(struct ticker *t)
{
    if (!t->running) return;
    pthread_mutex_lock(t->lock);
    t->stop = true;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(t->lock);
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->cond);
    t->running = false;
}

struct dd_admin {
    struct MHD_Daemon *httpd;
    int port;
    dd_metrics *metrics;
    bool required[DD_ADMIN_COMPONENT_COUNT];
    uint32_t drain_ms;
    atomic_bool ready[DD_ADMIN_COMPONENT_COUNT];
    atomic_bool stopping;

    /* Attached modules, one per component. Set and cleared by main only;
     * /readyz and scrapes read module and probe under lock. */
    pthread_mutex_t lock;
    struct {
        void *module;
        dd_metrics_collect_fn collect;
        dd_admin_probe_fn probe;
        dd_admin_degraded_fn degraded;
        dd_admin_degraded_fn why; /* why not ready */
        const char *page_path;    /* static; NULL = no page */
        dd_admin_page_fn page;
    } attached[DD_ADMIN_COMPONENT_COUNT];

    /* Open connections, for the reaper ("Slow clients" above). An
     * entry is added when libmicrohttpd reports the connection started
     * and removed when it reports it closed, which it does before it
     * closes the socket: so under conn_lock an entry's fd is still the
     * connection's own. */
    pthread_mutex_t conn_lock;
    struct conn *conns;
    int64_t request_timeout_ns;
    struct ticker reaper;

    /* Handlers (dd_admin_set_handler): read-locked while one runs, so
     * that removing one waits for its calls. */
    pthread_rwlock_t hlock;
    bool hlock_ok;
    struct {
        const char *path;
        dd_admin_handler_fn fn;
        void *ud;
        bool operator;
    } handlers[4];
    char token[DD_ADMIN_TOKEN_MAX + 1]; /* admin.token_file's; "" = operator pages off */
    size_t token_len;

    /* the watchdog thread, when WATCHDOG_USEC asked for one */
    uint64_t wd_usec;
    pthread_mutex_t wd_lock;
    struct ticker wd;
};

struct conn {
    struct conn *prev, *next;
    int fd;
    int64_t since_ns; /* opened, or its last request completed */
    bool cut;         /* the reaper shut it down */
};

static const char *const component_names[DD_ADMIN_COMPONENT_COUNT] = {"store", "grpc", "ingest",
                                                                      "cluster", "redis"};

/* ---- readiness ------------------------------------------------------- */

void dd_admin_set_ready(dd_admin *a, enum dd_admin_component c, bool ready)
{
    if ((unsigned)c < DD_ADMIN_COMPONENT_COUNT) atomic_store(&a->ready[c], ready);
}

/* Ingest and cluster count only while attached; a component attached
 * with a probe is ready only while the probe says so (ingest: while it has
 * partitions). */
static bool component_ready(dd_admin *a, int c)
{
    if (!atomic_load(&a->ready[c])) return false;
    if (c != DD_ADMIN_INGEST && c != DD_ADMIN_CLUSTER && !a->attached[c].probe) return true;
    pthread_mutex_lock(&a->lock);
    void *m = a->attached[c].module;
    dd_admin_probe_fn probe = a->attached[c].probe;
    bool ok = m && (!probe || probe(m));
    pthread_mutex_unlock(&a->lock);
    return ok;
}

bool dd_admin_ready(dd_admin *a, char *why, size_t whylen)
{
    if (atomic_load(&a->stopping)) {
        if (why) snprintf(why, whylen, "stopping");
        return false;
    }
    bool ok = true;
    size_t off = 0;
    if (why && whylen) why[0] = '\0';
    for (int c = 0; c < DD_ADMIN_COMPONENT_COUNT; c++) {
        if (!a->required[c]) continue;
        if (component_ready(a, c)) continue;
        static const char *const missing[DD_ADMIN_COMPONENT_COUNT] = {
            "store not open", "grpc not serving", "ingest has no partitions assigned",
            "cluster not ready", "redis unreachable"};
        if (why && off < whylen) {
            char reason[384]; /* room for both ownerships of a refused store (owner.h) */
            snprintf(reason, sizeof reason, "%s", missing[c]);
            pthread_mutex_lock(&a->lock);
            if (a->attached[c].why && a->attached[c].module)
                a->attached[c].why(a->attached[c].module, reason, sizeof reason);
            pthread_mutex_unlock(&a->lock);
            int n = snprintf(why + off, whylen - off, "%s%s", ok ? "not ready: " : ", ", reason);
            if (n > 0) off += (size_t)n;
        }
        ok = false;
    }
    if (ok && why) {
        int n = snprintf(why, whylen, "ready");
        pthread_mutex_lock(&a->lock);
        for (int c = 0; c < DD_ADMIN_COMPONENT_COUNT; c++) {
            char note[128];
            if (n < 0 || (size_t)n >= whylen) break;
            if (a->attached[c].degraded && a->attached[c].module &&
                a->attached[c].degraded(a->attached[c].module, note, sizeof note))
                n += snprintf(why + n, whylen - (size_t)n, "; degraded: %s", note);
        }
        pthread_mutex_unlock(&a->lock);
    }
    return ok;
}

void dd_admin_set_degraded(dd_admin *a, enum dd_admin_component c, dd_admin_degraded_fn fn)
{
    if ((unsigned)c >= DD_ADMIN_COMPONENT_COUNT) return;
    pthread_mutex_lock(&a->lock);
    a->attached[c].degraded = fn;
    pthread_mutex_unlock(&a->lock);
}

void dd_admin_require(dd_admin *a, enum dd_admin_component c)
{
    if ((unsigned)c < DD_ADMIN_COMPONENT_COUNT) a->required[c] = true;
}

void dd_admin_set_why(dd_admin *a, enum dd_admin_component c, dd_admin_degraded_fn fn)
{
    if ((unsigned)c >= DD_ADMIN_COMPONENT_COUNT) return;
    pthread_mutex_lock(&a->lock);
    a->attached[c].why = fn;
    pthread_mutex_unlock(&a->lock);
}

void dd_admin_set_page(dd_admin *a, enum dd_admin_component c, const char *path,
                       dd_admin_page_fn fn)
{
    if ((unsigned)c >= DD_ADMIN_COMPONENT_COUNT) return;
    pthread_mutex_lock(&a->lock);
    a->attached[c].page_path = path;
    a->attached[c].page = fn;
    pthread_mutex_unlock(&a->lock);
}

/* A component's page for URL, rendered under the lock: 1 and *BODY (NULL
 * on no memory) when URL is one, else 0. */
static int component_page(dd_admin *a, const char *url, char **body)
{
    int found = 0;
    pthread_mutex_lock(&a->lock);
    for (int c = 0; c < DD_ADMIN_COMPONENT_COUNT && !found; c++) {
        if (!a->attached[c].page_path || strcmp(a->attached[c].page_path, url) != 0) continue;
        if (!a->attached[c].module) break; /* not attached: not found */
        found = 1;
        *body = a->attached[c].page(a->attached[c].module);
    }
    pthread_mutex_unlock(&a->lock);
    return found;
}

void dd_admin_stopping(dd_admin *a)
{
    if (!a || atomic_exchange(&a->stopping, true)) return;
    sd_notify(0, "STOPPING=1\nSTATUS=stopping");
    if (a->drain_ms == 0) return;
    dd_info("admin", "msg=\"draining: not ready, still serving\" drain_ms=%u", a->drain_ms);
    dd_sleep_ms(a->drain_ms);
}

void dd_admin_service_ready(dd_admin *a)
{
    (void)a;
    sd_notify(0, "READY=1\nSTATUS=serving");
}

/* ---- collectors ------------------------------------------------------ */

static void collect_process(dd_prom *p, void *ud)
{
    dd_admin *a = ud;
    bool ready = dd_admin_ready(a, NULL, 0);
    dd_prom_family(p, "dedupd_ready", "1 when /readyz answers 200", DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_ready", NULL, 0, ready);
    dd_prom_family(p, "dedupd_component_ready", "1 when the component is up", DD_PROM_GAUGE);
    for (int c = 0; c < DD_ADMIN_COMPONENT_COUNT; c++) {
        if (!a->required[c]) {
            pthread_mutex_lock(&a->lock);
            bool attached = a->attached[c].module != NULL;
            pthread_mutex_unlock(&a->lock);
            if (!attached) continue;
        }
        struct dd_prom_label l = {"component", component_names[c]};
        dd_prom_sample_u64(p, "dedupd_component_ready", &l, 1, component_ready(a, c));
    }
}

/* ---- attach / detach ------------------------------------------------- */

int dd_admin_attach(dd_admin *a, enum dd_admin_component c, void *module,
                    dd_metrics_collect_fn collect, dd_admin_probe_fn probe)
{
    dd_admin_detach(a, c);
    if (!module) return DD_OK;
    if (collect) {
        int rc = dd_metrics_add(a->metrics, collect, module);
        if (rc != DD_OK) return rc;
    }
    pthread_mutex_lock(&a->lock);
    a->attached[c].module = module;
    a->attached[c].collect = collect;
    a->attached[c].probe = probe;
    pthread_mutex_unlock(&a->lock);
    dd_admin_set_ready(a, c, true);
    return DD_OK;
}

void dd_admin_detach(dd_admin *a, enum dd_admin_component c)
{
    if (!a || (unsigned)c >= DD_ADMIN_COMPONENT_COUNT) return;
    dd_admin_set_ready(a, c, false);
    /* Never hold a->lock while calling into the registry: a scrape holds
     * the registry mutex and then takes a->lock (component_ready). */
    pthread_mutex_lock(&a->lock);
    void *m = a->attached[c].module;
    dd_metrics_collect_fn collect = a->attached[c].collect;
    a->attached[c].module = NULL;
    a->attached[c].collect = NULL;
    a->attached[c].probe = NULL;
    pthread_mutex_unlock(&a->lock);
    if (m && collect) dd_metrics_remove(a->metrics, collect, m);
}

dd_metrics *dd_admin_metrics(dd_admin *a)
{
    return a->metrics;
}

int dd_admin_port(const dd_admin *a)
{
    return a->port;
}

/* ---- handlers ---------------------------------------------------------- */

struct dd_admin_request {
    struct MHD_Connection *conn;
    const char *method;
};

const char *dd_admin_method(const dd_admin_request *r)
{
    return r->method;
}

struct arg_walk {
    const char *key;
    void (*fn)(void *ud, const char *v, size_t len);
    void *ud;
    size_t n;
    bool first_only;
};

static enum MHD_Result arg_visit(void *cls, enum MHD_ValueKind kind, const char *key,
                                 size_t key_size, const char *value, size_t value_size)
{
    struct arg_walk *w = cls;
    (void)kind;
    if (!key || key_size != strlen(w->key) || memcmp(key, w->key, key_size) != 0) return MHD_YES;
    if (!value) {
        value = "";
        value_size = 0;
    }
    if (memchr(value, '\0', value_size) || strlen(value) != value_size) return MHD_YES;
    w->fn(w->ud, value, value_size);
    w->n++;
    return w->first_only ? MHD_NO : MHD_YES;
}

size_t dd_admin_args(const dd_admin_request *r, const char *key,
                     void (*fn)(void *ud, const char *v, size_t len), void *ud)
{
    struct arg_walk w = {key, fn, ud, 0, false};
    MHD_get_connection_values_n(r->conn, MHD_GET_ARGUMENT_KIND, arg_visit, &w);
    return w.n;
}

struct first_arg {
    const char *v;
    size_t len;
};

static void take_first(void *ud, const char *v, size_t len)
{
    struct first_arg *f = ud;
    f->v = v;
    f->len = len;
}

const char *dd_admin_arg(const dd_admin_request *r, const char *key, size_t *len)
{
    struct first_arg f = {NULL, 0};
    struct arg_walk w = {key, take_first, &f, 0, true};
    MHD_get_connection_values_n(r->conn, MHD_GET_ARGUMENT_KIND, arg_visit, &w);
    if (len) *len = f.len;
    return f.v;
}

int dd_admin_set_handler(dd_admin *a, const char *path, dd_admin_handler_fn fn, void *ud,
                         bool operator)
{
    if (!a->hlock_ok) return DD_ERR_STATE;
    pthread_rwlock_wrlock(&a->hlock);
    int rc = DD_ERR_LIMIT;
    for (size_t i = 0; i < DD_ARRAY_LEN(a->handlers); i++) {
        if (a->handlers[i].path && strcmp(a->handlers[i].path, path) != 0) continue;
        a->handlers[i].path = fn ? path : NULL;
        a->handlers[i].fn = fn;
        a->handlers[i].ud = ud;
        a->handlers[i].operator= operator;
        rc = DD_OK;
        break;
    }
    if (rc != DD_OK && !fn) rc = DD_OK; /* removing what is not there */
    pthread_rwlock_unlock(&a->hlock);
    return rc;
}

/* Whether the client of CONN has a loopback address. */
static bool client_loopback(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (!sa) return false;
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *v6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(v6)) return true;
        return IN6_IS_ADDR_V4MAPPED(v6) && v6->s6_addr[12] == 127;
    }
    return false;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, char *body, size_t len,
                             enum MHD_ResponseMemoryMode mode, const char *content_type);
static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, const char *text);

int dd_admin_token_parse(const char *text, char *out, size_t out_cap, char *err, size_t errlen)
{
    const char *b = text, *e = text + strlen(text);
    while (b < e && (*b == ' ' || *b == '\t' || *b == '\r' || *b == '\n')) b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) e--;
    size_t n = (size_t)(e - b);
    if (n < 16 || n > DD_ADMIN_TOKEN_MAX || n >= out_cap)
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "admin.token_file: the token is %zu bytes; want 16 to %d", n,
                       DD_ADMIN_TOKEN_MAX);
    for (size_t i = 0; i < n; i++)
        if (b[i] < 0x21 || b[i] > 0x7e)
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "admin.token_file: the token holds byte 0x%02x at %zu (want one "
                           "line of printable ASCII without spaces)",
                           (unsigned char)b[i], i);
    memcpy(out, b, n);
    out[n] = '\0';
    return DD_OK;
}

/* Whether the N bytes at P equal the token, in time that depends only on N
 * and the token's length. */
static bool token_equal(const dd_admin *a, const char *p, size_t n)
{
    unsigned char diff = (unsigned char)(n != a->token_len);
    for (size_t i = 0; i < a->token_len; i++)
        diff |= (unsigned char)(a->token[i] ^ (i < n ? p[i] : 0));
    return diff == 0;
}

/* Whether content type CT (NULL: none) is one an HTML form can send. */
static bool form_type(const char *ct)
{
    static const char *const forms[] = {"application/x-www-form-urlencoded", "multipart/form-data",
                                        "text/plain"};
    if (!ct) return false;
    while (*ct == ' ') ct++;
    for (size_t i = 0; i < DD_ARRAY_LEN(forms); i++) {
        size_t n = strlen(forms[i]);
        if (strncasecmp(ct, forms[i], n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' '))
            return true;
    }
    return false;
}

static enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned status, const char *text);

/* The operator page checks (admin.h, "An OPERATOR page"): 1 and *RET when
 * the request is refused, else 0. */
static int operator_refused(dd_admin *a, struct MHD_Connection *conn, const char *method,
                            enum MHD_Result *ret)
{
    static struct dd_log_limit lim;
    const char *why = NULL;
    unsigned status = MHD_HTTP_FORBIDDEN;
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    const char *site = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-Fetch-Site");
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    bool write = strcmp(method, "POST") == 0 || strcmp(method, "DELETE") == 0;
    if (!client_loopback(conn)) {
        why = "forbidden: this page answers loopback clients only";
    } else if (!a->token_len) {
        why = "forbidden: /why and /trace are off: set admin.token_file to a file holding a "
              "token, and send it as \"Authorization: Bearer TOKEN\" (dedupctl "
              "--admin-token-file)";
    } else if (origin || (site && strcmp(site, "none") != 0 && strcmp(site, "same-origin") != 0)) {
        why = "forbidden: a browser's cross-site request (Origin or Sec-Fetch-Site)";
    } else if (write && (!ct || form_type(ct))) {
        status = MHD_HTTP_UNSUPPORTED_MEDIA_TYPE;
        why = "a write wants Content-Type: application/json (a form's content type is refused)";
    } else if (!auth || strncasecmp(auth, "Bearer ", 7) != 0 ||
               !token_equal(a, auth + 7, strlen(auth + 7))) {
        status = MHD_HTTP_UNAUTHORIZED;
        why = auth ? "unauthorized: wrong token (admin.token_file)"
                   : "unauthorized: send \"Authorization: Bearer TOKEN\" with the token in "
                     "admin.token_file (dedupctl --admin-token-file)";
    }
    if (!why) return 0;
    if (status != MHD_HTTP_FORBIDDEN || a->token_len)
        dd_log_limited(&lim, 10000, DD_LOG_WARN, "admin",
                       "msg=\"operator page refused\" status=%u reason=\"%s\"", status, why);
    *ret = reply_error(conn, status, why);
    return 1;
}

/* Serve URL with its handler, if one has it: 1 and *RET, else 0. */
static int run_handler(dd_admin *a, struct MHD_Connection *conn, const char *url,
                       const char *method, enum MHD_Result *ret)
{
    if (!a->hlock_ok) return 0;
    pthread_rwlock_rdlock(&a->hlock);
    int found = 0;
    for (size_t i = 0; i < DD_ARRAY_LEN(a->handlers) && !found; i++) {
        if (!a->handlers[i].path || strcmp(a->handlers[i].path, url) != 0) continue;
        found = 1;
        static const char *const methods[] = {"GET", "HEAD", "POST", "DELETE"};
        const char *m = NULL;
        for (size_t j = 0; j < DD_ARRAY_LEN(methods); j++)
            if (strcmp(method, methods[j]) == 0) m = methods[j];
        if (!m) {
            *ret = reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET, POST and DELETE\n");
            break;
        }
        if (a->handlers[i].operator&& operator_refused(a, conn, m, ret)) break;
        dd_admin_request r = {conn, m};
        unsigned status = MHD_HTTP_OK;
        const char *ctype = "application/json";
        char *body = a->handlers[i].fn(a->handlers[i].ud, &r, &status, &ctype);
        if (!body)
            *ret = reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
        else
            *ret = reply(conn, status, body, strlen(body), MHD_RESPMEM_MUST_FREE, ctype);
    }
    pthread_rwlock_unlock(&a->hlock);
    return found;
}

/* ---- HTTP ------------------------------------------------------------ */

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, char *body, size_t len,
                             enum MHD_ResponseMemoryMode mode, const char *content_type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, const char *text)
{
    return reply(conn, status, (char *)text, strlen(text), MHD_RESPMEM_MUST_COPY,
                 "text/plain; charset=utf-8");
}

/* {"error": TEXT} (TEXT has no character JSON must escape but '"'), with
 * the Bearer challenge on a 401. */
static enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned status, const char *text)
{
    char body[512];
    size_t o = (size_t)snprintf(body, sizeof body, "{\"error\": \"");
    for (const char *p = text; *p && o + 4 < sizeof body; p++) {
        if (*p == '"' || *p == '\\') body[o++] = '\\';
        body[o++] = *p;
    }
    snprintf(body + o, sizeof body - o, "\"}\n");
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer realm=\"dedupd admin\"");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    dd_admin *a = cls;
    (void)version;
    (void)upload_data;
    /* The first call for a request only announces its headers. */
    if (*req_cls == NULL) {
        *req_cls = a;
        return MHD_YES;
    }
    if (*upload_data_size) { /* a body we do not want */
        *upload_data_size = 0;
        return MHD_YES;
    }
    enum MHD_Result hret;
    if (run_handler(a, conn, url, method, &hret)) return hret;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n");
    if (strcmp(url, "/metrics") == 0) {
        dd_prom *p = dd_prom_new();
        if (!p) return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
        int rc = dd_metrics_render(a->metrics, p);
        size_t len = 0;
        char *body = rc == DD_OK ? dd_prom_take(p, &len) : NULL;
        dd_prom_free(p);
        if (!body) {
            static struct dd_log_limit lim;
            dd_log_limited(&lim, 10000, DD_LOG_ERROR, "admin",
                           "msg=\"cannot render metrics\" error=\"%s\"",
                           dd_strerror(rc ? rc : DD_ERR_NOMEM));
            return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
        }
        return reply(conn, MHD_HTTP_OK, body, len, MHD_RESPMEM_MUST_FREE,
                     "text/plain; version=0.0.4; charset=utf-8");
    }
    if (strcmp(url, "/healthz") == 0) return reply_text(conn, MHD_HTTP_OK, "ok\n");
    if (strcmp(url, "/readyz") == 0) {
        char why[512];
        bool ok = dd_admin_ready(a, why, sizeof why - 1);
        strcat(why, "\n");
        return reply_text(conn, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, why);
    }
    char *page = NULL;
    if (component_page(a, url, &page)) {
        if (!page) return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
        return reply(conn, MHD_HTTP_OK, page, strlen(page), MHD_RESPMEM_MUST_FREE,
                     "application/json");
    }
    if (strcmp(url, "/") == 0)
        return reply_text(conn, MHD_HTTP_OK, "dedupd admin: /metrics /healthz /readyz\n");
    return reply_text(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics /healthz /readyz\n");
}

/* Bind ADDR ourselves so a failure says why (MHD only says it failed). */
static int listen_on(const char *addr, int *fd_out, bool *v6, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai;
    if (dd_hostport_resolve(addr, &hints, &res, &gai) != DD_OK) {
        if (gai)
            snprintf(err, errlen, "admin.listen: %s: %s", addr, gai_strerror(gai));
        else
            snprintf(err, errlen, "admin.listen: \"%s\" is not host:port", addr);
        return DD_ERR_INVALID;
    }
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 64) != 0) {
        snprintf(err, errlen, "admin.listen: cannot listen on %s: %s", addr, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(res);
        return DD_ERR_IO;
    }
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    *fd_out = fd;
    return DD_OK;
}

/* ---- watchdog -------------------------------------------------------- */

static void *watchdog_main(void *arg)
{
    dd_admin *a = arg;
    /* Ping at half the interval, as sd_watchdog_enabled(3) advises. */
    int64_t period_ns = (int64_t)(a->wd_usec / 2) * 1000;
    pthread_mutex_lock(&a->wd_lock);
    do {
        pthread_mutex_unlock(&a->wd_lock);
        sd_notify(0, "WATCHDOG=1");
        pthread_mutex_lock(&a->wd_lock);
    } while (!ticker_wait(&a->wd, period_ns));
    pthread_mutex_unlock(&a->wd_lock);
    return NULL;
}

static int start_watchdog(dd_admin *a, char *err, size_t errlen)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return DD_OK;
    a->wd_usec = usec;
    if (ticker_start(&a->wd, &a->wd_lock, watchdog_main, a) != DD_OK) {
        snprintf(err, errlen, "cannot start the watchdog thread");
        return DD_ERR_NOMEM;
    }
    dd_info("admin", "msg=\"systemd watchdog on\" interval_ms=%llu",
            (unsigned long long)(usec / 1000));
    return DD_OK;
}

/* ---- slow clients ---------------------------------------------------- */

static void notify_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                              enum MHD_ConnectionNotificationCode toe)
{
    dd_admin *a = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct conn *c = calloc(1, sizeof *c);
        /* Out of memory: this connection has only the idle timeout. */
        if (!c || !ci) {
            free(c);
            *socket_context = NULL;
            return;
        }
        c->fd = ci->connect_fd;
        c->since_ns = dd_mono_ns();
        pthread_mutex_lock(&a->conn_lock);
        c->next = a->conns;
        if (a->conns) a->conns->prev = c;
        a->conns = c;
        pthread_mutex_unlock(&a->conn_lock);
        *socket_context = c;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        struct conn *c = *socket_context;
        if (!c) return;
        pthread_mutex_lock(&a->conn_lock);
        if (c->prev)
            c->prev->next = c->next;
        else
            a->conns = c->next;
        if (c->next) c->next->prev = c->prev;
        pthread_mutex_unlock(&a->conn_lock);
        free(c);
        *socket_context = NULL;
    }
}

/* A request was answered (or failed): the connection's next request gets
 * a deadline of its own. */
static void notify_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                             enum MHD_RequestTerminationCode toe)
{
    dd_admin *a = cls;
    (void)con_cls;
    (void)toe;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn *c = ci ? ci->socket_context : NULL;
    if (!c) return;
    pthread_mutex_lock(&a->conn_lock);
    c->since_ns = dd_mono_ns();
    pthread_mutex_unlock(&a->conn_lock);
}

/* Every quarter of admin.request_timeout_ms (at most 250 ms), shut down
 * the sockets of connections past their deadline. shutdown(2), not
 * close: the fd stays libmicrohttpd's, which sees end of file and closes
 * the connection in its own thread. */
static void *reaper_main(void *arg)
{
    dd_admin *a = arg;
    int64_t tick_ns = a->request_timeout_ns / 4;
    if (tick_ns > 250000000) tick_ns = 250000000;
    pthread_mutex_lock(&a->conn_lock);
    while (!ticker_wait(&a->reaper, tick_ns)) {
        int64_t now = dd_mono_ns();
        unsigned cut = 0;
        for (struct conn *c = a->conns; c; c = c->next) {
            if (c->cut || now - c->since_ns < a->request_timeout_ns) continue;
            shutdown(c->fd, SHUT_RDWR);
            c->cut = true;
            cut++;
        }
        if (cut)
            dd_debug("admin", "msg=\"closed connections past admin.request_timeout_ms\" count=%u",
                     cut);
    }
    pthread_mutex_unlock(&a->conn_lock);
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------- */

int dd_admin_new(dd_admin **out, const struct dd_admin_conf *conf, bool ingest_required, char *err,
                 size_t errlen)
{
    *out = NULL;
    dd_admin *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    int rc = DD_ERR_NOMEM;
    bool lock_ok = false, wd_lock_ok = false, conn_lock_ok = false;
    for (int c = 0; c < DD_ADMIN_COMPONENT_COUNT; c++) atomic_init(&a->ready[c], false);
    atomic_init(&a->stopping, false);
    a->required[DD_ADMIN_STORE] = a->required[DD_ADMIN_RPC] = true;
    a->required[DD_ADMIN_INGEST] = ingest_required;
    a->drain_ms = conf->drain_ms;
    if (pthread_mutex_init(&a->lock, NULL) != 0) goto err;
    lock_ok = true;
    if (pthread_mutex_init(&a->wd_lock, NULL) != 0) goto err;
    wd_lock_ok = true;
    if (pthread_mutex_init(&a->conn_lock, NULL) != 0) goto err;
    conn_lock_ok = true;
    if (pthread_rwlock_init(&a->hlock, NULL) != 0) goto err;
    a->hlock_ok = true;
    a->request_timeout_ns =
        (int64_t)(conf->request_timeout_ms ? conf->request_timeout_ms : 1) * 1000000;
    if (conf->token_file && conf->token_file[0]) {
        char *text = dd_read_file(conf->token_file, err, errlen);
        if (!text) {
            char e2[256];
            snprintf(e2, sizeof e2, "%s", err);
            snprintf(err, errlen, "admin.token_file: %s", e2);
            rc = DD_ERR_INVALID;
            goto err_msg;
        }
        rc = dd_admin_token_parse(text, a->token, sizeof a->token, err, errlen);
        memset(text, 0, strlen(text));
        free(text);
        if (rc != DD_OK) goto err_msg;
        a->token_len = strlen(a->token);
        rc = DD_ERR_NOMEM;
    }
    if ((rc = dd_metrics_new(&a->metrics)) != DD_OK) goto err;
    if ((rc = dd_metrics_add(a->metrics, collect_process, a)) != DD_OK) goto err;

    if (conf->listen[0]) {
        int fd;
        bool v6;
        if ((rc = listen_on(conf->listen, &fd, &v6, err, errlen)) != DD_OK) goto err_msg;
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
        if (v6) flags |= MHD_USE_IPv6;
        /* The idle timeout (whole seconds) no longer than the deadline;
         * the reaper enforces the deadline itself. */
        unsigned idle_s = (conf->request_timeout_ms + 999) / 1000;
        a->httpd = MHD_start_daemon(
            flags, 0, NULL, NULL, handle, a, MHD_OPTION_LISTEN_SOCKET, fd,
            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(conf->threads ? conf->threads : 1),
            MHD_OPTION_CONNECTION_TIMEOUT, idle_s, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)conf->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned)conf->max_connections_per_ip, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
            (size_t)32768, MHD_OPTION_NOTIFY_CONNECTION, notify_connection, a,
            MHD_OPTION_NOTIFY_COMPLETED, notify_completed, a, MHD_OPTION_END);
        if (!a->httpd) {
            close(fd);
            snprintf(err, errlen, "admin.listen: cannot start the HTTP server on %s", conf->listen);
            rc = DD_ERR_IO;
            goto err_msg;
        }
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(a->httpd, MHD_DAEMON_INFO_BIND_PORT);
        a->port = info ? info->port : 0;
        if (a->port == 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
                a->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                         : ((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    if (a->httpd && ticker_start(&a->reaper, &a->conn_lock, reaper_main, a) != DD_OK) {
        snprintf(err, errlen, "admin.listen: cannot start the connection reaper");
        rc = DD_ERR_NOMEM;
        goto err_msg;
    }
    if ((rc = start_watchdog(a, err, errlen)) != DD_OK) goto err_msg;
    *out = a;
    return DD_OK;
err:
    snprintf(err, errlen, "out of memory");
err_msg:
    ticker_stop(&a->reaper);
    if (a->httpd) MHD_stop_daemon(a->httpd);
    if (conn_lock_ok) pthread_mutex_destroy(&a->conn_lock);
    if (a->hlock_ok) pthread_rwlock_destroy(&a->hlock);
    dd_metrics_free(a->metrics);
    if (wd_lock_ok) pthread_mutex_destroy(&a->wd_lock);
    if (lock_ok) pthread_mutex_destroy(&a->lock);
    free(a);
    return rc;
}

void dd_admin_free(dd_admin *a)
{
    if (!a) return;
    ticker_stop(&a->wd);
    ticker_stop(&a->reaper);
    /* Joins its threads, closing every connection (each reported closed,
     * so the list is empty after): no request runs after. */
    if (a->httpd) MHD_stop_daemon(a->httpd);
    pthread_mutex_destroy(&a->conn_lock);
    if (a->hlock_ok) pthread_rwlock_destroy(&a->hlock);
    dd_metrics_free(a->metrics);
    pthread_mutex_destroy(&a->wd_lock);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
