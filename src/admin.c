/* SPDX-License-Identifier: Apache-2.0
 *
 * admin.c - see admin.h: the admin HTTP listener (libmicrohttpd), readiness,
 * sd_notify, and the collectors that render each module's stats as
 * Prometheus families.
 */
#include "admin.h"
#include "addr.h"
#include "config.h"
#include "dd.h"
#include "filter.h"
#include "history.h"
#include "ingest.h"
#include "log.h"
#include "recent.h"
#include "rpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

struct dd_admin {
    struct MHD_Daemon *httpd;
    int port;
    dd_metrics *metrics;
    bool ingest_required;
    uint32_t drain_ms;
    atomic_bool ready[DD_ADMIN_COMPONENT_COUNT];
    atomic_bool stopping;

    pthread_mutex_t lock;  /* guards ingest against /readyz asking it */
    dd_history *history;   /* attached modules: set and cleared by main only */
    dd_rpc *rpc;
    dd_ingest *ingest;     /* also read by /readyz and collect_plays: under lock */

    /* the watchdog thread, when WATCHDOG_USEC asked for one */
    pthread_t wd_thread;
    bool wd_running;
    uint64_t wd_usec;
    pthread_mutex_t wd_lock;
    pthread_cond_t wd_cond;
    bool wd_stop;
};

static const char *const component_names[DD_ADMIN_COMPONENT_COUNT] = {"store", "grpc",
                                                                         "ingest"};

/* ---- readiness ------------------------------------------------------- */

void dd_admin_set_ready(dd_admin *a, enum dd_admin_component c, bool ready)
{
    if ((unsigned)c < DD_ADMIN_COMPONENT_COUNT) atomic_store(&a->ready[c], ready);
}

static bool component_ready(dd_admin *a, int c)
{
    if (c != DD_ADMIN_INGEST) return atomic_load(&a->ready[c]);
    /* Ingest is ready while it has partitions: ask it. */
    pthread_mutex_lock(&a->lock);
    bool ok = atomic_load(&a->ready[c]) && a->ingest && dd_ingest_assigned(a->ingest);
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
        if (c == DD_ADMIN_INGEST && !a->ingest_required) continue;
        if (component_ready(a, c)) continue;
        static const char *const missing[DD_ADMIN_COMPONENT_COUNT] = {
            "store not open", "grpc not serving", "ingest has no partitions assigned"};
        if (why && off < whylen) {
            int n = snprintf(why + off, whylen - off, "%s%s", ok ? "not ready: " : ", ",
                             missing[c]);
            if (n > 0) off += (size_t)n;
        }
        ok = false;
    }
    if (ok && why) snprintf(why, whylen, "ready");
    return ok;
}

void dd_admin_stopping(dd_admin *a)
{
    if (!a || atomic_exchange(&a->stopping, true)) return;
    sd_notify(0, "STOPPING=1\nSTATUS=stopping");
    if (a->drain_ms == 0) return;
    dd_info("admin", "msg=\"draining: not ready, still serving\" drain_ms=%u", a->drain_ms);
    struct timespec ts = {(time_t)(a->drain_ms / 1000), (long)(a->drain_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
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
    dd_prom_family(p, "dedupd_component_ready", "1 when the component is up",
                   DD_PROM_GAUGE);
    for (int c = 0; c < DD_ADMIN_COMPONENT_COUNT; c++) {
        if (c == DD_ADMIN_INGEST && !a->ingest_required) continue;
        struct dd_prom_label l = {"component", component_names[c]};
        dd_prom_sample_u64(p, "dedupd_component_ready", &l, 1, component_ready(a, c));
    }
}

static void counter(dd_prom *p, const char *name, const char *help, uint64_t v)
{
    dd_prom_family(p, name, help, DD_PROM_COUNTER);
    dd_prom_sample_u64(p, name, NULL, 0, v);
}

static void collect_history(dd_prom *p, void *ud)
{
    struct dd_history_stats s;
    dd_history_get_stats(ud, &s);
    counter(p, "dedupd_history_bytes_written_total",
            "Bytes RocksDB wrote (WAL, flushes and compactions)", s.bytes_written);
    counter(p, "dedupd_history_wal_bytes_total", "Bytes written to the RocksDB WAL",
            s.wal_bytes);
    dd_prom_family(p, "dedupd_history_live_sst_bytes", "Bytes of live SST files",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_history_live_sst_bytes", NULL, 0, s.live_sst_bytes);
    counter(p, "dedupd_history_block_cache_hits_total", "Block cache hits",
            s.block_cache_hits);
    counter(p, "dedupd_history_block_cache_misses_total", "Block cache misses",
            s.block_cache_misses);
    uint64_t lookups = s.block_cache_hits + s.block_cache_misses;
    dd_prom_family(p, "dedupd_history_block_cache_hit_ratio",
                   "Block cache hits / lookups since start (NaN before any lookup)",
                   DD_PROM_GAUGE);
    dd_prom_sample_f64(p, "dedupd_history_block_cache_hit_ratio", NULL, 0,
                       lookups ? (double)s.block_cache_hits / (double)lookups : NAN);
    counter(p, "dedupd_history_corrupt_values_total",
            "Stored values that failed their version or checksum (read as empty)",
            s.corrupt_values);
    counter(p, "dedupd_history_segments_expired_total",
            "Segments dropped by compaction as past the retention", s.segments_expired);
    counter(p, "dedupd_history_segments_reduced_total",
            "Closed segments re-encoded at their final size", s.segments_reduced);
    counter(p, "dedupd_history_merges_total", "Full merges run by the merge operator",
            s.merges);
    counter(p, "dedupd_history_writes_total", "Write batches written", s.writes);
    counter(p, "dedupd_history_operands_written_total", "Merge operands written",
            s.operands_written);
}

static const char *const grpc_codes[DD_RPC_STATUS_COUNT] = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
};
static const char *const rpc_methods[DD_RPC_METHOD_COUNT] = {
    "Filter", "RecordDelivery", "RecordPlays", "ForgetUser", "HealthCheck", "unknown",
};

/* rpc.h gives latency bounds in microseconds, the last being +Inf. */
static double rpc_bounds[DD_RPC_LATENCY_BUCKETS - 1];
static pthread_once_t rpc_bounds_once = PTHREAD_ONCE_INIT;
static void init_rpc_bounds(void)
{
    for (size_t i = 0; i + 1 < DD_RPC_LATENCY_BUCKETS; i++)
        rpc_bounds[i] = (double)dd_rpc_latency_bounds_us[i] / 1e6;
}

static void collect_rpc(dd_prom *p, void *ud)
{
    struct dd_rpc_stats s;
    dd_rpc_get_stats(ud, &s);
    pthread_once(&rpc_bounds_once, init_rpc_bounds);

    dd_prom_family(p, "dedupd_rpc_requests_total", "gRPC calls answered, by method and status",
                   DD_PROM_COUNTER);
    for (int m = 0; m < DD_RPC_METHOD_COUNT; m++) {
        for (int c = 0; c < DD_RPC_STATUS_COUNT; c++) {
            uint64_t v = s.method[m].by_status[c];
            /* OK is always there for the Dedup methods (rates start at 0);
             * other codes appear once they happen. */
            if (v == 0 && !(c == 0 && m <= DD_RPC_FORGET_USER)) continue;
            struct dd_prom_label l[] = {{"method", rpc_methods[m]}, {"code", grpc_codes[c]}};
            dd_prom_sample_u64(p, "dedupd_rpc_requests_total", l, 2, v);
        }
    }
    dd_prom_family(p, "dedupd_rpc_duration_seconds",
                   "gRPC call latency, from the call being matched to its status sent",
                   DD_PROM_HISTOGRAM);
    for (int m = 0; m < DD_RPC_METHOD_COUNT; m++) {
        struct dd_histogram_snap h = {.bounds = rpc_bounds, .nbounds = DD_RPC_LATENCY_BUCKETS - 1};
        uint64_t acc = 0;
        for (size_t i = 0; i < DD_RPC_LATENCY_BUCKETS; i++) {
            acc += s.method[m].latency[i];
            h.buckets[i] = acc;
        }
        h.count = acc;
        h.sum = (double)s.method[m].latency_sum_us / 1e6;
        if (acc == 0 && m > DD_RPC_FORGET_USER) continue;
        struct dd_prom_label l = {"method", rpc_methods[m]};
        dd_prom_histogram(p, "dedupd_rpc_duration_seconds", &l, 1, &h);
    }
    dd_prom_family(p, "dedupd_rpc_cancelled_total",
                   "gRPC calls cancelled by the peer or their deadline", DD_PROM_COUNTER);
    for (int m = 0; m <= DD_RPC_FORGET_USER; m++) {
        struct dd_prom_label l = {"method", rpc_methods[m]};
        dd_prom_sample_u64(p, "dedupd_rpc_cancelled_total", &l, 1, s.method[m].cancelled);
    }
    dd_prom_family(p, "dedupd_rpc_in_flight", "gRPC calls being worked on", DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_rpc_in_flight", NULL, 0, s.in_flight);

    struct dd_filter_stats f;
    dd_filter_get_stats(&f);
    counter(p, "dedupd_filter_calls_total", "Filter calls answered OK", f.filter_calls);
    counter(p, "dedupd_filter_candidates_total", "Candidates in Filter calls answered OK",
            f.candidates);
    struct dd_histogram_snap ch;
    dd_filter_get_candidates(&ch);
    dd_prom_family(p, "dedupd_filter_candidates", "Candidates per Filter call answered OK",
                   DD_PROM_HISTOGRAM);
    dd_prom_histogram(p, "dedupd_filter_candidates", NULL, 0, &ch);
    dd_prom_family(p, "dedupd_filter_removed_total", "Candidates removed by Filter, by reason",
                   DD_PROM_COUNTER);
    static const struct dd_prom_label played = {"reason", "played"},
                                      delivered = {"reason", "delivered"},
                                      duplicate = {"reason", "duplicate"};
    dd_prom_sample_u64(p, "dedupd_filter_removed_total", &played, 1, f.removed_played);
    dd_prom_sample_u64(p, "dedupd_filter_removed_total", &delivered, 1, f.removed_delivered);
    dd_prom_sample_u64(p, "dedupd_filter_removed_total", &duplicate, 1, f.removed_duplicate);
    counter(p, "dedupd_filter_degraded_total",
            "Filter answers given without recent deliveries (Redis unavailable)", f.degraded);
    counter(p, "dedupd_filter_history_errors_total",
            "History reads or writes that failed in RPC calls", f.history_errors);
    counter(p, "dedupd_deliveries_recorded_total", "Item ids recorded by RecordDelivery",
            f.deliveries);

    struct dd_recent_stats r;
    dd_recent_get_stats(&r);
    dd_prom_family(p, "dedupd_recent_errors_total", "Redis errors, by kind", DD_PROM_COUNTER);
    static const struct dd_prom_label timeout = {"kind", "timeout"},
                                      connection = {"kind", "connection"},
                                      reply = {"kind", "reply"};
    dd_prom_sample_u64(p, "dedupd_recent_errors_total", &timeout, 1, r.timeouts);
    dd_prom_sample_u64(p, "dedupd_recent_errors_total", &connection, 1, r.connection_errors);
    dd_prom_sample_u64(p, "dedupd_recent_errors_total", &reply, 1, r.reply_errors);
    counter(p, "dedupd_recent_reconnects_total", "Redis reconnections", r.reconnects);

}

/* Plays reach the store two ways, RecordPlays and Kafka: one family pair
 * with a "source" label, so one collector, registered for the admin's
 * lifetime (filter stats are process-wide; ingest is read under lock). */
static void collect_plays(dd_prom *p, void *ud)
{
    dd_admin *a = ud;
    struct dd_filter_stats f;
    dd_filter_get_stats(&f);
    struct dd_ingest_stats in;
    pthread_mutex_lock(&a->lock);
    bool have_ingest = a->ingest != NULL;
    if (have_ingest) dd_ingest_get_stats(a->ingest, &in);
    pthread_mutex_unlock(&a->lock);
    static const struct dd_prom_label rpc = {"source", "rpc"}, kafka = {"source", "kafka"};
    dd_prom_family(p, "dedupd_plays_written_total",
                   "Plays written to the history store (ingest: distinct per window)",
                   DD_PROM_COUNTER);
    dd_prom_sample_u64(p, "dedupd_plays_written_total", &rpc, 1, f.plays);
    if (have_ingest) dd_prom_sample_u64(p, "dedupd_plays_written_total", &kafka, 1,
                                        in.plays_written);
    dd_prom_family(p, "dedupd_plays_expired_total",
                   "Plays dropped as older than the retention", DD_PROM_COUNTER);
    dd_prom_sample_u64(p, "dedupd_plays_expired_total", &rpc, 1, f.plays_expired);
    if (have_ingest) dd_prom_sample_u64(p, "dedupd_plays_expired_total", &kafka, 1, in.expired);
}

#define MAX_LAG_PARTITIONS 4096

static void collect_ingest(dd_prom *p, void *ud)
{
    dd_ingest *in = ud;
    struct dd_ingest_stats s;
    dd_ingest_get_stats(in, &s);
    dd_prom_family(p, "dedupd_ingest_messages_total",
                   "Kafka messages consumed, by result (ok, expired, or why it was bad)",
                   DD_PROM_COUNTER);
    uint64_t bad = 0;
    for (int i = 0; i < DD_INGEST_NBAD; i++) bad += s.bad[i];
    uint64_t ok = s.messages >= bad + s.expired ? s.messages - bad - s.expired : 0;
    struct dd_prom_label l = {"result", "ok"};
    dd_prom_sample_u64(p, "dedupd_ingest_messages_total", &l, 1, ok);
    l.value = "expired";
    dd_prom_sample_u64(p, "dedupd_ingest_messages_total", &l, 1, s.expired);
    for (int i = 0; i < DD_INGEST_NBAD; i++) {
        l.value = dd_ingest_bad_name(i);
        dd_prom_sample_u64(p, "dedupd_ingest_messages_total", &l, 1, s.bad[i]);
    }

    /* Per-partition lag: a scrape-time copy; the arrays are static because
     * scrapes are serialised by the registry mutex. */
    static int32_t parts[MAX_LAG_PARTITIONS];
    static int64_t lags[MAX_LAG_PARTITIONS];
    size_t n = dd_ingest_get_partition_lags(in, parts, lags, MAX_LAG_PARTITIONS);
    if (n > MAX_LAG_PARTITIONS) n = MAX_LAG_PARTITIONS;
    dd_prom_family(p, "dedupd_ingest_consumer_lag",
                   "Messages behind the partition's end, by assigned partition "
                   "(librdkafka statistics)", DD_PROM_GAUGE);
    for (size_t i = 0; i < n; i++) {
        char num[16];
        snprintf(num, sizeof num, "%d", (int)parts[i]);
        struct dd_prom_label pl = {"partition", num};
        dd_prom_sample_u64(p, "dedupd_ingest_consumer_lag", &pl, 1, (uint64_t)lags[i]);
    }
    dd_prom_family(p, "dedupd_ingest_assigned_partitions", "Partitions assigned here",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_ingest_assigned_partitions", NULL, 0,
                       s.assigned_partitions);
    dd_prom_family(p, "dedupd_window_pending_users",
                   "(scene, user, segment) entries pending in the window being filled",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_window_pending_users", NULL, 0, s.pending_entries);
    dd_prom_family(p, "dedupd_window_pending_bytes", "Bytes held by the window being filled",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_window_pending_bytes", NULL, 0, s.pending_bytes);
    struct dd_histogram_snap fh;
    dd_ingest_get_flush_histogram(in, &fh);
    dd_prom_family(p, "dedupd_flush_duration_seconds",
                   "Duration of window writes to the history store", DD_PROM_HISTOGRAM);
    dd_prom_histogram(p, "dedupd_flush_duration_seconds", NULL, 0, &fh);
    counter(p, "dedupd_ingest_flushes_total", "Windows written", s.flushes);
    counter(p, "dedupd_ingest_durable_flushes_total",
            "Memtable flushes that made written windows durable (ingest.wal=false)",
            s.durable_flushes);
    dd_prom_family(p, "dedupd_ingest_undurable_messages",
                   "Messages written (filterable) but not yet durable: their offsets are "
                   "not committed, a crash now would consume them again",
                   DD_PROM_GAUGE);
    dd_prom_sample_u64(p, "dedupd_ingest_undurable_messages", NULL, 0,
                       s.messages_flushed >= s.messages_durable
                           ? s.messages_flushed - s.messages_durable : 0);
    counter(p, "dedupd_ingest_write_errors_total", "Window writes that failed (retried)",
            s.write_errors);
    counter(p, "dedupd_ingest_commits_total", "Offset commits that succeeded", s.commits);
    counter(p, "dedupd_ingest_commit_errors_total", "Offset commits that failed",
            s.commit_errors);
    counter(p, "dedupd_ingest_dead_lettered_total", "Bad messages copied to the dead-letter topic",
            s.dead_lettered);
    counter(p, "dedupd_ingest_dead_letter_errors_total",
            "Bad messages that could not be copied to the dead-letter topic",
            s.dead_letter_errors);
    counter(p, "dedupd_ingest_duplicates_total", "Plays already pending in their window",
            s.duplicates);
    counter(p, "dedupd_ingest_pauses_total", "Times consumption paused for the store",
            s.pauses);
    counter(p, "dedupd_ingest_rebalances_total", "Partition assignment changes", s.rebalances);
    counter(p, "dedupd_ingest_kafka_errors_total", "Errors reported by librdkafka",
            s.kafka_errors);
}

/* ---- attach / detach ------------------------------------------------- */

/* Point *SLOT at M, moving collector FN from the old module to the new
 * one. Only main calls attach and detach, so the slots need no lock; a
 * scrape reaches a module only through the registry, whose mutex makes
 * dd_metrics_remove wait for a running scrape. */
static int attach(dd_admin *a, void **slot, void *m, dd_metrics_collect_fn fn)
{
    if (*slot) dd_metrics_remove(a->metrics, fn, *slot);
    *slot = NULL;
    if (!m) return DD_OK;
    int rc = dd_metrics_add(a->metrics, fn, m);
    if (rc == DD_OK) *slot = m;
    return rc;
}

int dd_admin_attach_history(dd_admin *a, dd_history *h)
{
    int rc = attach(a, (void **)&a->history, h, collect_history);
    dd_admin_set_ready(a, DD_ADMIN_STORE, rc == DD_OK && h);
    return rc;
}

void dd_admin_detach_history(dd_admin *a)
{
    if (!a) return;
    dd_admin_set_ready(a, DD_ADMIN_STORE, false);
    attach(a, (void **)&a->history, NULL, collect_history);
}

int dd_admin_attach_rpc(dd_admin *a, dd_rpc *rpc)
{
    int rc = attach(a, (void **)&a->rpc, rpc, collect_rpc);
    dd_admin_set_ready(a, DD_ADMIN_RPC, rc == DD_OK && rpc);
    return rc;
}

void dd_admin_detach_rpc(dd_admin *a)
{
    if (!a) return;
    dd_admin_set_ready(a, DD_ADMIN_RPC, false);
    attach(a, (void **)&a->rpc, NULL, collect_rpc);
}

int dd_admin_attach_ingest(dd_admin *a, dd_ingest *in)
{
    dd_admin_detach_ingest(a);
    if (!in) return DD_OK;
    int rc = dd_metrics_add(a->metrics, collect_ingest, in);
    if (rc != DD_OK) return rc;
    pthread_mutex_lock(&a->lock);
    a->ingest = in;
    pthread_mutex_unlock(&a->lock);
    dd_admin_set_ready(a, DD_ADMIN_INGEST, true);
    return DD_OK;
}

void dd_admin_detach_ingest(dd_admin *a)
{
    if (!a) return;
    dd_admin_set_ready(a, DD_ADMIN_INGEST, false);
    /* Never hold a->lock while calling into the registry: a scrape holds
     * the registry mutex and then takes a->lock (collect_plays). */
    pthread_mutex_lock(&a->lock);
    dd_ingest *in = a->ingest;
    a->ingest = NULL;
    pthread_mutex_unlock(&a->lock);
    if (in) dd_metrics_remove(a->metrics, collect_ingest, in);
}

dd_metrics *dd_admin_metrics(dd_admin *a) { return a->metrics; }

int dd_admin_port(const dd_admin *a) { return a->port; }

/* ---- HTTP ------------------------------------------------------------ */

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, char *body,
                             size_t len, enum MHD_ResponseMemoryMode mode,
                             const char *content_type)
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

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status,
                                  const char *text)
{
    return reply(conn, status, (char *)text, strlen(text), MHD_RESPMEM_MUST_COPY,
                 "text/plain; charset=utf-8");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version,
                              const char *upload_data, size_t *upload_data_size,
                              void **req_cls)
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
        char why[160];
        bool ok = dd_admin_ready(a, why, sizeof why - 1);
        strcat(why, "\n");
        return reply_text(conn, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, why);
    }
    if (strcmp(url, "/") == 0)
        return reply_text(conn, MHD_HTTP_OK, "dedupd admin: /metrics /healthz /readyz\n");
    return reply_text(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics /healthz /readyz\n");
}

/* Bind ADDR ourselves so a failure says why (MHD only says it failed). */
static int listen_on(const char *addr, int *fd_out, bool *v6, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
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
    while (!a->wd_stop) {
        pthread_mutex_unlock(&a->wd_lock);
        sd_notify(0, "WATCHDOG=1");
        pthread_mutex_lock(&a->wd_lock);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = (int64_t)until.tv_nsec + period_ns;
        until.tv_sec += (time_t)(ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
        while (!a->wd_stop && pthread_cond_timedwait(&a->wd_cond, &a->wd_lock, &until) == 0) {
        }
    }
    pthread_mutex_unlock(&a->wd_lock);
    return NULL;
}

static int start_watchdog(dd_admin *a, char *err, size_t errlen)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return DD_OK;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) goto nomem;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&a->wd_cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) goto nomem;
    a->wd_usec = usec;
    if (pthread_create(&a->wd_thread, NULL, watchdog_main, a) != 0) {
        pthread_cond_destroy(&a->wd_cond);
        goto nomem;
    }
    a->wd_running = true;
    dd_info("admin", "msg=\"systemd watchdog on\" interval_ms=%llu",
            (unsigned long long)(usec / 1000));
    return DD_OK;
nomem:
    snprintf(err, errlen, "cannot start the watchdog thread");
    return DD_ERR_NOMEM;
}

static void stop_watchdog(dd_admin *a)
{
    if (!a->wd_running) return;
    pthread_mutex_lock(&a->wd_lock);
    a->wd_stop = true;
    pthread_cond_signal(&a->wd_cond);
    pthread_mutex_unlock(&a->wd_lock);
    pthread_join(a->wd_thread, NULL);
    pthread_cond_destroy(&a->wd_cond);
    a->wd_running = false;
}

/* ---- lifecycle ------------------------------------------------------- */

int dd_admin_new(dd_admin **out, const struct dd_config *cfg, char *err, size_t errlen)
{
    *out = NULL;
    dd_admin *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    int rc = DD_ERR_NOMEM;
    bool lock_ok = false, wd_lock_ok = false;
    for (int c = 0; c < DD_ADMIN_COMPONENT_COUNT; c++) atomic_init(&a->ready[c], false);
    atomic_init(&a->stopping, false);
    a->ingest_required = cfg->ingest.enabled;
    a->drain_ms = cfg->admin.drain_ms;
    if (pthread_mutex_init(&a->lock, NULL) != 0) goto err;
    lock_ok = true;
    if (pthread_mutex_init(&a->wd_lock, NULL) != 0) goto err;
    wd_lock_ok = true;
    if ((rc = dd_metrics_new(&a->metrics)) != DD_OK) goto err;
    if ((rc = dd_metrics_add(a->metrics, collect_process, a)) != DD_OK) goto err;
    if ((rc = dd_metrics_add(a->metrics, collect_plays, a)) != DD_OK) goto err;

    if (cfg->admin.listen[0]) {
        int fd;
        bool v6;
        if ((rc = listen_on(cfg->admin.listen, &fd, &v6, err, errlen)) != DD_OK) goto err_msg;
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
        if (v6) flags |= MHD_USE_IPv6;
        a->httpd = MHD_start_daemon(flags, 0, NULL, NULL, handle, a,
                                    MHD_OPTION_LISTEN_SOCKET, fd,
                                    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                                    MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                                    MHD_OPTION_END);
        if (!a->httpd) {
            close(fd);
            snprintf(err, errlen, "admin.listen: cannot start the HTTP server on %s",
                     cfg->admin.listen);
            rc = DD_ERR_IO;
            goto err_msg;
        }
        const union MHD_DaemonInfo *info =
            MHD_get_daemon_info(a->httpd, MHD_DAEMON_INFO_BIND_PORT);
        a->port = info ? info->port : 0;
        if (a->port == 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
                a->port = ntohs(ss.ss_family == AF_INET6
                                    ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                    : ((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    if ((rc = start_watchdog(a, err, errlen)) != DD_OK) goto err_msg;
    *out = a;
    return DD_OK;
err:
    snprintf(err, errlen, "out of memory");
err_msg:
    if (a->httpd) MHD_stop_daemon(a->httpd);
    dd_metrics_free(a->metrics);
    if (wd_lock_ok) pthread_mutex_destroy(&a->wd_lock);
    if (lock_ok) pthread_mutex_destroy(&a->lock);
    free(a);
    return rc;
}

void dd_admin_free(dd_admin *a)
{
    if (!a) return;
    stop_watchdog(a);
    if (a->httpd) MHD_stop_daemon(a->httpd); /* joins its thread: no request runs after */
    dd_metrics_free(a->metrics);
    pthread_mutex_destroy(&a->wd_lock);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
