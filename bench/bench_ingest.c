/* SPDX-License-Identifier: Apache-2.0
 *
 * bench_ingest.c - Kafka ingest's three figures, end to end through a real
 * Kafka-protocol broker (librdkafka's mock cluster, in process, over TCP
 * loopback) into a real history store, with dedupd's defaults unless told:
 *
 *   1. throughput: PLAYS JSON play messages (default 2,000,000) of USERS
 *      distinct users (default 1,000,000) are produced first; then ingest
 *      starts and the clock runs from the moment partitions are assigned to
 *      the moment every play is durable and its offset stored: with the
 *      default ingest.durable=flush, every window written and then flushed
 *      to SST files (dd_ingest_sync, rather than waiting for the next
 *      ingest.durable_interval_ms); with wal, every window written through
 *      the WAL and the WAL fsync'd (dd_ingest_sync); with window, every
 *      window written through the WAL (fsync'd when history.sync). plays/s.
 *   2. RocksDB bytes written per play during that ingest (history stats:
 *      WAL + flush + compaction writes), and each of the three; and the
 *      process's CPU time per play (broker and producer threads included).
 *   3. produce-to-filterable latency: a producer thread sends RATE plays/s
 *      (default 50,000) for SECONDS (default 10) to new users; every 100th
 *      play is sampled and probed with dd_history_probe until it is seen;
 *      p50/p99/max of (first seen - produce call).
 *
 *   4. with --traced N: what traces (trace.h) cost users who are not
 *      traced: the same plays ingested again, by fresh consumer groups, with
 *      trace.users empty (A) and with N traced users none of whom is in the
 *      load (B), alternated A B A B, each timed to "every window written";
 *      plays/s of each and B/A.
 *
 *   bench_ingest [--plays N] [--users N] [--partitions N] [--rate N]
 *                [--seconds N] [--traced N] [--dir PATH] [--bootstrap ADDR]
 *                [-o section.key=value]...
 *
 * --bootstrap ADDR: a real Kafka cluster instead of the mock; its topic
 * "plays" must exist with --partitions partitions and be empty
 * (bench/run_ingest_kafka.py starts Apache Kafka and does that). The
 * consumer group is named after the process id and the time, so a second
 * run on the same broker consumes from the beginning of its own plays.
 *
 * BENCH_DEBUG=1 in the environment logs at debug level (every window
 * written and every durability flush, with their durations).
 *
 * Goals (issue 3): >= 300,000 plays/s on 2 cores, <= 24 bytes written per
 * play, p99 <= 3 s. Not a test: it prints figures; it exits non-zero only if
 * something fails or a sampled play is never seen.
 */
#include "bloom.h"
#include "config.h"
#include "dd.h"
#include "history.h"
#include "ingest.h"
#include "log.h"
#include "trace.h"
#include "util.h"

#include <ftw.h>
#include <sys/resource.h>
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TOPIC "plays"
#define SAMPLE_EVERY 100
#define MAX_SAMPLES 100000

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "bench_ingest: %s: %s\n", what, detail);
    exit(1);
}

static double secs(int64_t ns) { return (double)ns / 1e9; }

/* User + system CPU time of the whole process so far, in seconds. */
static double cpu_secs(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static rd_kafka_t *new_producer(const char *bootstrap)
{
    char e[512];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    static const char *const kv[][2] = {
        {"linger.ms", "20"},
        {"batch.num.messages", "10000"},
        {"queue.buffering.max.messages", "2000000"},
        {"queue.buffering.max.kbytes", "2097151"},
        {"compression.codec", "lz4"},
    };
    if (rd_kafka_conf_set(c, "bootstrap.servers", bootstrap, e, sizeof e)) die("conf", e);
    for (size_t i = 0; i < DD_ARRAY_LEN(kv); i++)
        if (rd_kafka_conf_set(c, kv[i][0], kv[i][1], e, sizeof e)) die("conf", e);
    rd_kafka_t *p = rd_kafka_new(RD_KAFKA_PRODUCER, c, e, sizeof e);
    if (!p) die("producer", e);
    return p;
}

static int play_json(char *buf, size_t cap, uint64_t user, uint64_t item, int64_t at_ms,
                     char *key, size_t keycap, int *keylen)
{
    *keylen = snprintf(key, keycap, "user%07" PRIu64, user);
    if (at_ms)
        return snprintf(buf, cap, "{\"user_id\":\"%s\",\"item_id\":\"item%" PRIu64
                                  "\",\"played_at_ms\":%" PRId64 "}", key, item, at_ms);
    return snprintf(buf, cap, "{\"user_id\":\"%s\",\"item_id\":\"item%" PRIu64 "\"}", key, item);
}

static void produce(rd_kafka_t *p, const char *payload, int len, const char *key, int keylen)
{
    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            p, RD_KAFKA_V_TOPIC(TOPIC), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_VALUE((void *)payload, (size_t)len),
            RD_KAFKA_V_KEY((void *)key, (size_t)keylen), RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(p, 10);
            continue;
        }
        if (e) die("produce", rd_kafka_err2str(e));
        return;
    }
}

/* ---- the latency phase ---------------------------------------------------- */

struct sample {
    char user[32];
    uint64_t item;     /* hash */
    int64_t sent_ns;
    int64_t seen_ns;   /* 0 until seen */
};

struct latency {
    rd_kafka_t *producer;
    uint64_t rate, seconds, user_base;
    struct sample *s;
    atomic_size_t n;   /* samples published by the producer */
    atomic_uint_fast64_t produced; /* messages handed to the producer */
    atomic_int done;
};

/* Where produce-to-filterable time is spent: every 100 ms the main loop
 * counts the messages between each stage and the next (a backlog B at rate
 * R is B / R seconds of delay, by Little's law). Producer: handed to
 * librdkafka but not yet acknowledged by the broker (rd_kafka_outq_len);
 * fetch: acknowledged but not yet consumed by ingest; window: consumed but
 * not yet written to the store (filterable). */
struct stage_backlog {
    uint64_t n;             /* samples */
    double sum[3], max[3];  /* producer, fetch, window */
};

static void stage_sample(struct stage_backlog *b, const struct latency *L, dd_ingest *in,
                         const struct dd_ingest_stats *base)
{
    struct dd_ingest_stats st;
    dd_ingest_get_stats(in, &st);
    double produced = (double)atomic_load(&L->produced);
    double unacked = (double)rd_kafka_outq_len(L->producer);
    double consumed = (double)(st.messages - base->messages);
    double written = (double)(st.plays_written - base->plays_written);
    double v[3] = {unacked, produced - unacked - consumed, consumed - written};
    for (int i = 0; i < 3; i++) {
        if (v[i] < 0) v[i] = 0;
        b->sum[i] += v[i];
        if (v[i] > b->max[i]) b->max[i] = v[i];
    }
    b->n++;
}

static void *latency_producer(void *arg)
{
    struct latency *L = arg;
    char buf[256], key[32];
    uint64_t total = L->rate * L->seconds;
    int64_t t0 = dd_mono_ns();
    for (uint64_t i = 0; i < total; i++) {
        int keylen;
        int len = play_json(buf, sizeof buf, L->user_base + i, i, 0, key, sizeof key, &keylen);
        int64_t now = dd_mono_ns();
        produce(L->producer, buf, len, key, keylen);
        atomic_store(&L->produced, i + 1);
        if (i % SAMPLE_EVERY == 0) {
            size_t k = atomic_load(&L->n);
            if (k < MAX_SAMPLES) {
                char item[32];
                int il = snprintf(item, sizeof item, "item%" PRIu64, i);
                snprintf(L->s[k].user, sizeof L->s[k].user, "%s", key);
                L->s[k].item = dd_hash(item, (size_t)il);
                L->s[k].sent_ns = now;
                L->s[k].seen_ns = 0;
                atomic_store(&L->n, k + 1);
            }
        }
        if ((i & 255) == 0) rd_kafka_poll(L->producer, 0);
        int64_t ahead = (int64_t)((double)(i + 1) * 1e9 / (double)L->rate) - (dd_mono_ns() - t0);
        if (ahead > 1000000) {
            struct timespec ts = {0, (long)ahead};
            nanosleep(&ts, NULL);
        }
    }
    rd_kafka_flush(L->producer, 30000);
    atomic_store(&L->done, 1);
    return NULL;
}

/* Wait until IN has written (made visible) PLAYS messages, started at T0. */
static void wait_written(dd_ingest *in, uint64_t plays, int64_t t0)
{
    struct dd_ingest_stats st;
    for (;;) {
        dd_ingest_get_stats(in, &st);
        if (st.messages_flushed >= plays) return;
        if (secs(dd_mono_ns() - t0) > 900) die("ingest", "not done after 900 s");
        sleep_ms(2);
    }
}

/* Ingest the topic again with a fresh consumer GROUP and TRACE (NULL:
 * none) until PLAYS messages are written (visible); returns plays/s. */
static double ingest_pass(struct dd_config *cfg, dd_history *h, dd_trace *trace, const char *group,
                          uint64_t plays)
{
    char err[512];
    if (dd_config_set(cfg, "kafka.group.id", group, err, sizeof err) != DD_OK) die("kafka", err);
    dd_ingest *in = NULL;
    if (dd_ingest_new(&in, &cfg->ingest, &cfg->window, &cfg->kafka, h, err, sizeof err) != DD_OK)
        die("ingest", err);
    dd_ingest_set_trace(in, trace);
    if (dd_ingest_start(in) != DD_OK) die("ingest", "cannot start");
    while (!dd_ingest_assigned(in)) sleep_ms(5);
    int64_t t0 = dd_mono_ns();
    wait_written(in, plays, t0);
    double el = secs(dd_mono_ns() - t0);
    dd_ingest_free(in);
    return (double)plays / el;
}

/* Phase 4: trace.users empty (A) against N traced users, none in the load
 * (B), alternated. */
static void trace_cost(struct dd_config *cfg, dd_history *h, const char *dir, uint64_t n,
                       uint64_t plays)
{
    char err[512], path[700];
    size_t cap = (size_t)n * 16 + 1, off = 0;
    char *users = malloc(cap);
    if (!users) die("traced", "out of memory");
    users[0] = '\0';
    for (uint64_t i = 0; i < n; i++)
        off += (size_t)snprintf(users + off, cap - off, "%straced%06" PRIu64, i ? "," : "", i);
    snprintf(path, sizeof path, "%s/trace-empty", dir);
    struct dd_trace_conf tc = {path, "", 30, 10000, (uint32_t)(n > 1000 ? n : 1000), 0, 256};
    dd_trace *empty = NULL, *full = NULL;
    if (dd_trace_open(&empty, &tc, NULL, err, sizeof err) != DD_OK) die("trace", err);
    snprintf(path, sizeof path, "%s/trace-full", dir);
    tc.users = users;
    if (dd_trace_open(&full, &tc, NULL, err, sizeof err) != DD_OK) die("trace", err);
    /* The check alone, as ingest calls it: untraced ids of the load's
     * shape, empty set against N users. */
    enum { IDS = 1 << 20, CALLS = 10 * IDS };
    char(*ids)[16] = malloc(IDS * sizeof *ids);
    if (!ids) die("trace", "out of memory");
    for (uint64_t i = 0; i < IDS; i++) snprintf(ids[i], sizeof ids[i], "user%07" PRIu64, i);
    double ns[2];
    uint64_t hits = 0;
    for (int k = 0; k < 2; k++) {
        dd_trace *t = k ? full : empty;
        int64_t t0 = dd_mono_ns();
        for (uint64_t i = 0; i < CALLS; i++) hits += dd_trace_wanted(t, ids[i & (IDS - 1)], 11);
        ns[k] = (double)(dd_mono_ns() - t0) / CALLS;
    }
    free(ids);
    if (hits) die("trace", "an untraced user was found traced");
    printf("trace check per message (dd_trace_wanted of an untraced user): trace.users empty "
           "%.1f ns, %" PRIu64 " traced users %.1f ns\n", ns[0], n, ns[1]);

    /* A B B A A B B A: the store grows with every pass, so each kind gets
     * early and late passes alike. */
    static const int order[] = {0, 1, 1, 0, 0, 1, 1, 0};
    double sum[2] = {0, 0}, rate[DD_ARRAY_LEN(order)];
    for (size_t r = 0; r < DD_ARRAY_LEN(order); r++) {
        char g[32];
        snprintf(g, sizeof g, "bench-%c%zu", order[r] ? 'b' : 'a', r);
        rate[r] = ingest_pass(cfg, h, order[r] ? full : empty, g, plays);
        sum[order[r]] += rate[r];
    }
    struct dd_trace_stats ts;
    dd_trace_get_stats(full, &ts);
    printf("trace cost for untraced users (the plays ingested again by fresh groups, each pass "
           "to every window written; A = trace.users empty, B = %" PRIu64 " traced users not "
           "in the load), plays/s in the order run:", n);
    for (size_t r = 0; r < DD_ARRAY_LEN(order); r++)
        printf(" %c %.0f", order[r] ? 'B' : 'A', rate[r]);
    printf("; mean B/A %.3f; trace records written: %" PRIu64 "\n", sum[1] / sum[0],
           ts.records[0]);
    dd_trace_close(empty);
    dd_trace_close(full);
    free(users);
}

int main(int argc, char **argv)
{
    uint64_t plays = 2000000, users = 1000000, partitions = 64, rate = 50000, seconds = 10;
    uint64_t traced = 0;
    char dir[512] = "";
    char err[512];
    struct dd_config cfg;
    if (dd_config_init(&cfg) != DD_OK) die("config", "out of memory");
    static const struct option opts[] = {
        {"plays", required_argument, NULL, 'n'}, {"users", required_argument, NULL, 'u'},
        {"partitions", required_argument, NULL, 'p'}, {"rate", required_argument, NULL, 'r'},
        {"seconds", required_argument, NULL, 's'}, {"dir", required_argument, NULL, 'd'},
        {"traced", required_argument, NULL, 't'}, {"bootstrap", required_argument, NULL, 'b'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    const char *external = NULL;
    while ((opt = getopt_long(argc, argv, "n:u:p:r:s:d:o:t:b:", opts, NULL)) != -1) {
        switch (opt) {
        case 'n': plays = strtoull(optarg, NULL, 10); break;
        case 'u': users = strtoull(optarg, NULL, 10); break;
        case 'p': partitions = strtoull(optarg, NULL, 10); break;
        case 'r': rate = strtoull(optarg, NULL, 10); break;
        case 's': seconds = strtoull(optarg, NULL, 10); break;
        case 'd': snprintf(dir, sizeof dir, "%s", optarg); break;
        case 't': traced = strtoull(optarg, NULL, 10); break;
        case 'b': external = optarg; break;
        case 'o': {
            char *eq = strchr(optarg, '=');
            if (!eq) die("-o", "expected section.key=value");
            *eq = '\0';
            if (dd_config_set(&cfg, optarg, eq + 1, err, sizeof err) != DD_OK) die(optarg, err);
            break;
        }
        default:
            fprintf(stderr, "usage: bench_ingest [--plays N] [--users N] [--partitions N] "
                            "[--rate N] [--seconds N] [--traced N] [--dir PATH] "
                            "[--bootstrap ADDR] [-o k=v]...\n");
            return 2;
        }
    }
    if (!plays || !users || !partitions || !rate || !seconds) die("options", "must be > 0");
    int own_dir = !dir[0];
    if (own_dir) {
        snprintf(dir, sizeof dir, "/tmp/dd-bench-ingest-XXXXXX");
        if (!mkdtemp(dir)) die("mkdtemp", "failed");
    }
    char path[600];
    snprintf(path, sizeof path, "%s/db", dir);
    if (dd_config_set(&cfg, "history.path", path, err, sizeof err) != DD_OK) die("path", err);
    dd_log_set_level(getenv("BENCH_DEBUG") ? DD_LOG_DEBUG : DD_LOG_WARN);

    /* The broker: the mock in this process, or a real one. */
    char e[512];
    rd_kafka_t *mrk = NULL;
    rd_kafka_mock_cluster_t *mc = NULL;
    const char *bootstrap = external;
    char group[64] = "bench";
    if (!external) {
        rd_kafka_conf_t *mconf = rd_kafka_conf_new();
        mrk = rd_kafka_new(RD_KAFKA_PRODUCER, mconf, e, sizeof e);
        if (!mrk) die("mock handle", e);
        mc = rd_kafka_mock_cluster_new(mrk, 1);
        if (!mc) die("mock cluster", "cannot create");
        if (rd_kafka_mock_topic_create(mc, TOPIC, (int)partitions, 1)) die("topic", "cannot create");
        bootstrap = rd_kafka_mock_cluster_bootstraps(mc);
    } else {
        snprintf(group, sizeof group, "bench-%ld-%lld", (long)getpid(), (long long)dd_now_ms());
    }
    if (dd_config_set(&cfg, "kafka.bootstrap.servers", bootstrap, err, sizeof err) != DD_OK ||
        dd_config_set(&cfg, "kafka.group.id", group, err, sizeof err) != DD_OK)
        die("kafka", err);

    printf("bench_ingest: broker %s, %" PRIu64 " plays, %" PRIu64 " users, %" PRIu64
           " partitions, ingest.durable=%s, history.sync=%s, window.flush_ms=%u, window.max_bytes=%" PRIu64 "\n",
           external ? "external" : "mock", plays, users, partitions,
           cfg.ingest.wal ? "window" : cfg.ingest.durable,
           cfg.history.sync ? "true" : "false", cfg.window.flush_ms,
           cfg.window.max_bytes);

    /* 1. Produce everything first. */
    rd_kafka_t *prod = new_producer(bootstrap);
    char buf[256], key[32];
    uint64_t x = 0x9e3779b97f4a7c15u;
    int64_t now_ms = dd_now_ms();
    int64_t t0 = dd_mono_ns();
    for (uint64_t i = 0; i < plays; i++) {
        /* Every user at least once, then random users. */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t u = i < users ? (i * 2654435761u) % users : x % users;
        int keylen;
        int len = play_json(buf, sizeof buf, u, x, now_ms, key, sizeof key, &keylen);
        produce(prod, buf, len, key, keylen);
        if ((i & 4095) == 0) rd_kafka_poll(prod, 0);
    }
    if (rd_kafka_flush(prod, 120000)) die("produce", "not every message delivered");
    printf("produced %" PRIu64 " plays in %.2f s\n", plays, secs(dd_mono_ns() - t0));

    /* 2. Ingest them. */
    dd_history *h = NULL;
    if (dd_history_open(&h, &cfg.history, &cfg.rocksdb, NULL, err, sizeof err) != DD_OK) die("history", err);
    dd_ingest *in = NULL;
    if (dd_ingest_new(&in, &cfg.ingest, &cfg.window, &cfg.kafka, h, err, sizeof err) != DD_OK) die("ingest", err);
    struct dd_history_stats hs0, hs1;
    dd_history_get_stats(h, &hs0);
    if (dd_ingest_start(in) != DD_OK) die("ingest", "cannot start");
    while (!dd_ingest_assigned(in)) sleep_ms(5);
    t0 = dd_mono_ns();
    double cpu0 = cpu_secs();
    wait_written(in, plays, t0);
    struct dd_ingest_stats st;
    double el_written = secs(dd_mono_ns() - t0);
    /* Durable: with ingest.durable=flush or wal the last windows wait for
     * the next durable point; run it now rather than wait
     * durable_interval_ms. */
    dd_ingest_sync(in);
    dd_ingest_get_stats(in, &st);
    if (st.messages_durable < plays) die("ingest", "plays written but not made durable");
    double el = secs(dd_mono_ns() - t0);
    double cpu = cpu_secs() - cpu0;
    dd_history_get_stats(h, &hs1);
    uint64_t bw = hs1.bytes_written - hs0.bytes_written, wal = hs1.wal_bytes - hs0.wal_bytes;
    printf("ingest: %" PRIu64 " plays durable in %.2f s = %.0f plays/s (goal >= 300000); "
           "written (filterable) after %.2f s; %" PRIu64 " windows, last write %" PRIu64
           " ms, %" PRIu64 " durability flushes, %" PRIu64 " pauses\n",
           st.plays_written, el, (double)plays / el, el_written, st.flushes, st.last_flush_ms,
           st.durable_flushes, st.pauses);
    printf("rocksdb bytes written: %.1f per play (goal <= 24): WAL %.1f, flushes %.1f, "
           "compactions %.1f\n",
           (double)bw / (double)plays, (double)wal / (double)plays,
           (double)(hs1.flush_bytes - hs0.flush_bytes) / (double)plays,
           (double)(hs1.compaction_bytes - hs0.compaction_bytes) / (double)plays);
    printf("cpu: %.2f s user+sys for the whole process (broker included) = %.2f us per play, "
           "%.2f cores busy\n", cpu, cpu * 1e6 / (double)plays, cpu / el);

    /* 3. Latency at a steady rate. */
    struct latency L = {.producer = prod, .rate = rate, .seconds = seconds,
                        .user_base = users + 1};
    L.s = calloc(MAX_SAMPLES, sizeof *L.s);
    if (!L.s) die("samples", "out of memory");
    atomic_init(&L.n, 0);
    atomic_init(&L.produced, 0);
    atomic_init(&L.done, 0);
    struct dd_ingest_stats base;
    dd_ingest_get_stats(in, &base);
    struct stage_backlog stages = {0};
    int64_t next_stage_ns = dd_mono_ns();
    pthread_t thr;
    if (pthread_create(&thr, NULL, latency_producer, &L) != 0) die("thread", "cannot start");
    size_t next_unseen = 0, seen = 0;
    int64_t deadline = 0;
    for (;;) {
        size_t n = atomic_load(&L.n);
        for (size_t k = next_unseen; k < n; k++) {
            if (L.s[k].seen_ns) continue;
            uint8_t hit = 0;
            if (dd_history_probe(h, "", 0, L.s[k].user, strlen(L.s[k].user), 0, &L.s[k].item, 1,
                                 &hit, err, sizeof err) != DD_OK)
                die("probe", err);
            if (hit) {
                L.s[k].seen_ns = dd_mono_ns();
                seen++;
            }
        }
        while (next_unseen < n && L.s[next_unseen].seen_ns) next_unseen++;
        if (!atomic_load(&L.done) && dd_mono_ns() >= next_stage_ns) {
            stage_sample(&stages, &L, in, &base);
            next_stage_ns += INT64_C(100000000);
        }
        if (atomic_load(&L.done)) {
            if (!deadline) deadline = dd_mono_ns() + INT64_C(30000000000);
            if (next_unseen == atomic_load(&L.n) || dd_mono_ns() > deadline) break;
        }
        sleep_ms(1);
    }
    pthread_join(thr, NULL);
    size_t n = atomic_load(&L.n);
    int64_t *lat = malloc((n ? n : 1) * sizeof *lat);
    if (!lat) die("latency", "out of memory");
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        if (L.s[k].seen_ns) lat[m++] = L.s[k].seen_ns - L.s[k].sent_ns;
    qsort(lat, m, sizeof *lat, bench_cmp_i64);
    int rc = 0;
    if (m < n) {
        fprintf(stderr, "bench_ingest: %zu of %zu sampled plays never seen\n", n - m, n);
        rc = 1;
    }
    if (m)
        printf("latency produce->filterable at %" PRIu64 " plays/s: p50 %.0f ms, p99 %.0f ms "
               "(goal <= 3000), max %.0f ms over %zu samples\n",
               rate, lat[m / 2] / 1e6, lat[(m * 99) / 100] / 1e6, lat[m - 1] / 1e6, m);
    if (stages.n) {
        static const char *const names[3] = {"producer (unacknowledged)",
                                             "fetch (acknowledged, not consumed)",
                                             "window (consumed, not filterable)"};
        printf("where the delay sits while producing (%" PRIu64 " samples, every 100 ms; "
               "messages behind, and as seconds at %" PRIu64 " plays/s):\n",
               stages.n, rate);
        for (int i = 0; i < 3; i++)
            printf("  %-36s mean %9.0f (%.2f s)  max %9.0f (%.2f s)\n", names[i],
                   stages.sum[i] / (double)stages.n,
                   stages.sum[i] / (double)stages.n / (double)rate, stages.max[i],
                   stages.max[i] / (double)rate);
    }

    dd_ingest_free(in);
    if (traced) trace_cost(&cfg, h, dir, traced, plays);
    dd_history_close(h);
    rd_kafka_destroy(prod);
    if (mc) rd_kafka_mock_cluster_destroy(mc);
    if (mrk) rd_kafka_destroy(mrk);
    free(lat);
    free(L.s);
    dd_config_free(&cfg);
    if (own_dir) bench_rm_tree(dir);
    return rc;
}
