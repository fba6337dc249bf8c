/* SPDX-License-Identifier: Apache-2.0
 *
 * dedupd-migrate - copy legacy Redis sorted sets of played ids (member = item
 * id, score = play time) into a running dedupd through RecordPlays, and the
 * most recent legacy deliveries through RecordDelivery; online, resumable,
 * rate-limited and verifiable. See scripts/migrate/README.md.
 *
 * DESIGN
 *
 * Threads. The main thread SCANs the legacy keys page by page (MATCH built
 * from the pattern, never KEYS) and owns the checkpoint and the progress
 * line. --parallel workers each hold their own hiredis connection and
 * dd_client; a worker takes one key (one user) at a time, reads its set
 * with ZSCAN (so a huge set arrives in pieces), sends RecordPlays in
 * batches with the original play times, then the user's recent deliveries.
 * A signal thread turns SIGINT/SIGTERM into a stop request; a second signal
 * exits at once (the last checkpoint written is still valid).
 *
 * Pages and the checkpoint. Up to MAX_PAGES SCAN pages are in flight so the
 * workers do not idle behind one heavy user. Pages retire strictly in SCAN
 * order, and only when every user of the page is done; retiring a page adds
 * its counters to the committed totals and moves the checkpoint cursor to
 * the cursor after it. The checkpoint therefore always names a SCAN position
 * before which every user is migrated: a resume re-sends at most the pages
 * that were in flight (harmless: re-adding a play changes nothing), never
 * skips one, and its counters count each page once.
 *
 * Phases. Phase 0 scans the plays keys (and migrates each user's deliveries
 * with them); phase 1, only with --deliveries, scans the delivery keys for
 * users that have no plays key.
 *
 * Errors. Bad legacy data is counted by reason and skipped. Transient
 * failures (Redis I/O, LOADING; dedupd UNAVAILABLE, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED, ABORTED) are retried with backoff for --retry-s; past
 * that the run stops with a checkpoint, to be resumed. A permanent RPC error
 * for one user (e.g. INVALID_ARGUMENT) is logged, counted as a failed user,
 * and makes the exit code 1.
 *
 * Lock: one mutex (run.mu) guards the page ring, the committed checkpoint
 * state, the rate limiter and the stop flags; nothing slow runs under it
 * except the copy of counters.
 */
#include "buildinfo.h"
#include "client.h"
#include "dd.h"
#include "log.h"
#include "migrate.h"

#include <hiredis/hiredis.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MOD "migrate"
#define MAX_PAGES 4
#define MAX_PARALLEL 256
#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 3

/* ---------------------------------------------------------------- options */

struct opts {
    char *source_host;
    int source_port;
    const char *source_password;
    int source_db;
    int source_timeout_ms;
    const char *plays;
    const char *deliveries;
    const char *scene;
    const char *target;
    struct dd_client_tls tls; /* ca NULL: plaintext */
    int64_t score_scale;
    uint32_t retention_days;
    uint32_t recent_size;
    const char *checkpoint;
    bool resume;
    double rate;
    int parallel;
    int batch;
    int scan_count;
    int zscan_count;
    uint64_t total;
    uint64_t verify_n;
    bool verify_only;
    int verify_chunk;
    int verify_print;
    bool dry_run;
    int timeout_ms;
    int retry_s;
    int progress_s;
    int checkpoint_s;
    int64_t max_future_ms;
    uint32_t max_id_bytes;
    uint64_t seed;
};

#define USAGE_LINE "usage: dedupd-migrate --plays PATTERN [options]\n"

/* --help: every option (man/gen_man.py makes dedupd-migrate(1) from it). */
static void usage(FILE *f)
{
    fprintf(f,
        USAGE_LINE
        "source (the legacy Redis):\n"
        "  --source HOST:PORT        legacy Redis (default 127.0.0.1:6379)\n"
        "  --source-password PW      AUTH password\n"
        "  --source-db N             database number (default 0)\n"
        "  --source-timeout-ms MS    per Redis command (default 5000)\n"
        "  --plays PATTERN           played-ids key pattern, e.g. 'play:{user}' (required)\n"
        "  --deliveries PATTERN      delivered-ids key pattern, e.g. 'dlv:{user}'\n"
        "  --score-unit ms|s         unit of the legacy scores (default ms)\n"
        "target (a running dedupd):\n"
        "  --target ADDR             dedupd gRPC address (default 127.0.0.1:50051)\n"
        "  --tls-ca FILE             TLS: the CA of the server's certificate (PEM)\n"
        "  --tls-cert FILE, --tls-key FILE\n"
        "                            TLS: this client's certificate and key, for a\n"
        "                            dedupd with rpc.tls_client_ca (in rpc.allow_write)\n"
        "  --tls-name NAME           TLS: check the server's certificate for NAME\n"
        "  --scene SCENE             scene to write into (default \"\")\n"
        "  --retention-days N        skip plays older than this (default 90)\n"
        "  --recent-size N           deliveries per user to copy (default 100)\n"
        "  --batch N                 plays per RecordPlays call (default 1000)\n"
        "  --timeout-ms MS           deadline per call (default 10000)\n"
        "  --max-future-s S          scores later than now + S are out of range (default 3600)\n"
        "  --max-id-bytes N          longer members are bad data (default 256)\n"
        "run:\n"
        "  --checkpoint FILE         SCAN cursor + counters, rewritten every few seconds\n"
        "  --resume                  continue from --checkpoint\n"
        "  --checkpoint-interval-s S (default 5)\n"
        "  --rate USERS/S            at most this many users per second (default: no limit)\n"
        "  --parallel N              worker threads, each with its own connections (default 8)\n"
        "  --scan-count N            SCAN COUNT hint (default 1000)\n"
        "  --zscan-count N           ZSCAN COUNT hint (default 1000)\n"
        "  --total N                 keys expected, for the percentage and ETA (default:\n"
        "                            counted by a SCAN of the matching keys first)\n"
        "  --progress-s S            log interval when stderr is not a terminal (default 5)\n"
        "  --retry-s S               give up on an unreachable server after S (default 30)\n"
        "  --dry-run                 read and count, write nothing\n"
        "verification:\n"
        "  --verify N                afterwards, check N random users with Filter\n"
        "  --verify-only             skip the migration, only verify\n"
        "  --verify-chunk N          candidates per Filter call (default 1000)\n"
        "  --verify-print N          misses printed at most (default 100)\n"
        "  --seed N                  seed of the random sample\n"
        "  -h, --help                this help\n"
        "  --version                 version, git revision and library versions\n"
        "exit codes: 0 ok; 1 failed (fatal error, failed users or verify misses);\n"
        "            2 usage; 3 interrupted (checkpoint written: rerun with --resume)\n");
}

/* A mistake on the command line: the usage line and where the rest is. */
static int usage_error(void)
{
    fputs(USAGE_LINE "Try 'dedupd-migrate --help' for more information.\n", stderr);
    return EXIT_USAGE;
}

enum {
    O_SOURCE = 1000, O_SOURCE_PASSWORD, O_SOURCE_DB, O_SOURCE_TIMEOUT, O_PLAYS, O_DELIVERIES,
    O_SCORE_UNIT, O_SCENE, O_TARGET, O_RETENTION, O_RECENT, O_CHECKPOINT, O_RESUME, O_RATE,
    O_PARALLEL, O_BATCH, O_SCAN_COUNT, O_ZSCAN_COUNT, O_TOTAL, O_VERIFY, O_VERIFY_ONLY,
    O_VERIFY_CHUNK, O_VERIFY_PRINT, O_DRY_RUN, O_TIMEOUT, O_RETRY, O_PROGRESS, O_CKPT_INTERVAL,
    O_MAX_FUTURE, O_MAX_ID, O_SEED, O_HELP, O_TLS_CA, O_TLS_CERT, O_TLS_KEY, O_TLS_NAME,
    O_VERSION,
};

static const struct option long_opts[] = {
    {"source", required_argument, NULL, O_SOURCE},
    {"source-password", required_argument, NULL, O_SOURCE_PASSWORD},
    {"source-db", required_argument, NULL, O_SOURCE_DB},
    {"source-timeout-ms", required_argument, NULL, O_SOURCE_TIMEOUT},
    {"plays", required_argument, NULL, O_PLAYS},
    {"deliveries", required_argument, NULL, O_DELIVERIES},
    {"score-unit", required_argument, NULL, O_SCORE_UNIT},
    {"scene", required_argument, NULL, O_SCENE},
    {"target", required_argument, NULL, O_TARGET},
    {"tls-ca", required_argument, NULL, O_TLS_CA},
    {"tls-cert", required_argument, NULL, O_TLS_CERT},
    {"tls-key", required_argument, NULL, O_TLS_KEY},
    {"tls-name", required_argument, NULL, O_TLS_NAME},
    {"retention-days", required_argument, NULL, O_RETENTION},
    {"recent-size", required_argument, NULL, O_RECENT},
    {"checkpoint", required_argument, NULL, O_CHECKPOINT},
    {"resume", no_argument, NULL, O_RESUME},
    {"checkpoint-interval-s", required_argument, NULL, O_CKPT_INTERVAL},
    {"rate", required_argument, NULL, O_RATE},
    {"parallel", required_argument, NULL, O_PARALLEL},
    {"batch", required_argument, NULL, O_BATCH},
    {"scan-count", required_argument, NULL, O_SCAN_COUNT},
    {"zscan-count", required_argument, NULL, O_ZSCAN_COUNT},
    {"total", required_argument, NULL, O_TOTAL},
    {"verify", required_argument, NULL, O_VERIFY},
    {"verify-only", no_argument, NULL, O_VERIFY_ONLY},
    {"verify-chunk", required_argument, NULL, O_VERIFY_CHUNK},
    {"verify-print", required_argument, NULL, O_VERIFY_PRINT},
    {"dry-run", no_argument, NULL, O_DRY_RUN},
    {"timeout-ms", required_argument, NULL, O_TIMEOUT},
    {"retry-s", required_argument, NULL, O_RETRY},
    {"progress-s", required_argument, NULL, O_PROGRESS},
    {"max-future-s", required_argument, NULL, O_MAX_FUTURE},
    {"max-id-bytes", required_argument, NULL, O_MAX_ID},
    {"seed", required_argument, NULL, O_SEED},
    {"help", no_argument, NULL, O_HELP},
    {"version", no_argument, NULL, O_VERSION},
    {NULL, 0, NULL, 0},
};

static int parse_uint(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < min || v > max) {
        fprintf(stderr, "dedupd-migrate: --%s: want an integer from %" PRIu64 " to %" PRIu64
                        ", got '%s'\n", name, min, max, s);
        return -1;
    }
    *out = v;
    return 0;
}

#define UINT_OPT(name, min, max, dst) do { \
        uint64_t v_; \
        if (parse_uint(name, optarg, min, max, &v_) != 0) return -1; \
        dst = v_; \
    } while (0)

static int parse_opts(struct opts *o, int argc, char **argv)
{
    *o = (struct opts){
        .source_port = 6379, .source_timeout_ms = 5000, .scene = "", .target = "127.0.0.1:50051",
        .score_scale = 1, .retention_days = 90, .recent_size = 100, .parallel = 8,
        .batch = 1000, .scan_count = 1000, .zscan_count = 1000, .verify_chunk = 1000,
        .verify_print = 100, .timeout_ms = 10000, .retry_s = 30, .progress_s = 5,
        .checkpoint_s = 5, .max_future_ms = 3600 * 1000, .max_id_bytes = 256,
    };
    const char *source = "127.0.0.1:6379";
    bool seeded = false;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
        switch (opt) {
        case O_SOURCE: source = optarg; break;
        case O_SOURCE_PASSWORD: o->source_password = optarg; break;
        case O_SOURCE_DB: UINT_OPT("source-db", 0, 1000000, o->source_db); break;
        case O_SOURCE_TIMEOUT: UINT_OPT("source-timeout-ms", 1, 3600000, o->source_timeout_ms); break;
        case O_PLAYS: o->plays = optarg; break;
        case O_DELIVERIES: o->deliveries = optarg; break;
        case O_SCORE_UNIT:
            if (strcmp(optarg, "ms") == 0) o->score_scale = 1;
            else if (strcmp(optarg, "s") == 0) o->score_scale = 1000;
            else {
                fprintf(stderr, "dedupd-migrate: --score-unit: want ms or s, got '%s'\n", optarg);
                return -1;
            }
            break;
        case O_SCENE: o->scene = optarg; break;
        case O_TARGET: o->target = optarg; break;
        case O_TLS_CA: o->tls.ca = optarg; break;
        case O_TLS_CERT: o->tls.cert = optarg; break;
        case O_TLS_KEY: o->tls.key = optarg; break;
        case O_TLS_NAME: o->tls.server_name = optarg; break;
        case O_RETENTION: UINT_OPT("retention-days", 1, 36500, o->retention_days); break;
        case O_RECENT: UINT_OPT("recent-size", 1, 10000, o->recent_size); break;
        case O_CHECKPOINT: o->checkpoint = optarg; break;
        case O_RESUME: o->resume = true; break;
        case O_CKPT_INTERVAL: UINT_OPT("checkpoint-interval-s", 1, 3600, o->checkpoint_s); break;
        case O_RATE: {
            char *end;
            errno = 0;
            o->rate = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(o->rate > 0) || o->rate > 1e9) {
                fprintf(stderr, "dedupd-migrate: --rate: want users per second > 0, got '%s'\n",
                        optarg);
                return -1;
            }
            break;
        }
        case O_PARALLEL: UINT_OPT("parallel", 1, MAX_PARALLEL, o->parallel); break;
        case O_BATCH: UINT_OPT("batch", 1, 100000, o->batch); break;
        case O_SCAN_COUNT: UINT_OPT("scan-count", 1, 1000000, o->scan_count); break;
        case O_ZSCAN_COUNT: UINT_OPT("zscan-count", 1, 1000000, o->zscan_count); break;
        case O_TOTAL: UINT_OPT("total", 1, UINT64_MAX, o->total); break;
        case O_VERIFY: UINT_OPT("verify", 1, 100000000, o->verify_n); break;
        case O_VERIFY_ONLY: o->verify_only = true; break;
        case O_VERIFY_CHUNK: UINT_OPT("verify-chunk", 1, 100000, o->verify_chunk); break;
        case O_VERIFY_PRINT: UINT_OPT("verify-print", 0, 1000000, o->verify_print); break;
        case O_DRY_RUN: o->dry_run = true; break;
        case O_TIMEOUT: UINT_OPT("timeout-ms", 1, 3600000, o->timeout_ms); break;
        case O_RETRY: UINT_OPT("retry-s", 0, 86400, o->retry_s); break;
        case O_PROGRESS: UINT_OPT("progress-s", 1, 3600, o->progress_s); break;
        case O_MAX_FUTURE: UINT_OPT("max-future-s", 0, 86400 * 365, o->max_future_ms);
            o->max_future_ms *= 1000; break;
        case O_MAX_ID: UINT_OPT("max-id-bytes", 1, 65536, o->max_id_bytes); break;
        case O_SEED: UINT_OPT("seed", 0, UINT64_MAX, o->seed); seeded = true; break;
        case O_HELP:
        case 'h': usage(stdout); exit(0);
        case O_VERSION: dd_buildinfo_print(stdout, "dedupd-migrate"); exit(0);
        default: return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "dedupd-migrate: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!o->plays) {
        fprintf(stderr, "dedupd-migrate: --plays PATTERN is required\n");
        return -1;
    }
    if ((o->tls.cert || o->tls.key || o->tls.server_name) && !o->tls.ca) {
        fprintf(stderr, "dedupd-migrate: --tls-cert, --tls-key and --tls-name need --tls-ca\n");
        return -1;
    }
    if (!o->tls.cert != !o->tls.key) {
        fprintf(stderr, "dedupd-migrate: --tls-cert and --tls-key go together\n");
        return -1;
    }
    if (o->resume && !o->checkpoint) {
        fprintf(stderr, "dedupd-migrate: --resume needs --checkpoint FILE\n");
        return -1;
    }
    if (o->verify_only && !o->verify_n) {
        fprintf(stderr, "dedupd-migrate: --verify-only needs --verify N\n");
        return -1;
    }
    const char *colon = strrchr(source, ':');
    uint64_t port;
    if (!colon || colon == source || parse_uint("source", colon + 1, 1, 65535, &port) != 0) {
        fprintf(stderr, "dedupd-migrate: --source: want HOST:PORT, got '%s'\n", source);
        return -1;
    }
    o->source_port = (int)port;
    o->source_host = strndup(source, (size_t)(colon - source));
    if (!o->source_host) return -1;
    if (!seeded) o->seed = (uint64_t)dd_now_ms() ^ ((uint64_t)getpid() << 32);
    return 0;
}

/* -------------------------------------------------------------- run state */

struct page {
    redisReply *reply;        /* the SCAN reply; owns the keys */
    redisReply **keys;
    size_t nkeys;
    size_t next_job;          /* next key to hand out */
    size_t done;              /* keys finished */
    int phase;
    char next_cursor[MIG_CURSOR_MAX];
    struct mig_stats st;      /* of the finished keys */
};

struct vstats {
    uint64_t sampled, checked, skipped, items, misses, errors, degraded, printed;
};

struct run {
    const struct opts *o;
    struct mig_pattern plays, deliveries;
    bool has_deliveries;

    pthread_mutex_t mu;
    pthread_cond_t cv_work;   /* workers: a job or a stop */
    pthread_cond_t cv_main;   /* main: a page finished, or the newest page ran dry */
    struct page pages[MAX_PAGES];
    unsigned head, count;
    int scan_phase;
    char scan_cursor[MIG_CURSOR_MAX];
    bool all_scanned;
    bool finished;            /* no more pages: idle workers exit */
    atomic_bool stop;         /* signal or fatal: finish the current user, take no more */
    atomic_bool interrupted;
    bool fatal;
    char fatal_msg[512];
    int64_t next_slot_ns;     /* rate limiter */
    atomic_uint_fast64_t retries;

    struct mig_checkpoint cp; /* committed state */
    struct mig_stats base;    /* cp.stats when this run started */
    int64_t base_elapsed_ms;
    int64_t start_ns;
    uint64_t total;           /* keys of every phase, for the percentage and ETA; 0 = unknown */
    const char *total_from;   /* "count" (SCANned first), "given" (--total) or "none" */
    bool tty;

    /* verify */
    char **sample;
    size_t nsample;
    atomic_size_t next_sample;
    struct vstats v;
};

static bool stopping(struct run *R)
{
    return atomic_load(&R->stop);
}

static void set_fatal(struct run *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_fatal(struct run *R, const char *fmt, ...)
{
    pthread_mutex_lock(&R->mu);
    if (!R->fatal) {
        R->fatal = true;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(R->fatal_msg, sizeof R->fatal_msg, fmt, ap);
        va_end(ap);
    }
    atomic_store(&R->stop, true);
    pthread_cond_broadcast(&R->cv_work);
    pthread_cond_broadcast(&R->cv_main);
    pthread_mutex_unlock(&R->mu);
}

/* Sleep MS, waking early on a stop request. */
static void nap(struct run *R, int64_t ms)
{
    int64_t until = dd_mono_ns() + ms * 1000000;
    for (;;) {
        int64_t left = until - dd_mono_ns();
        if (left <= 0 || stopping(R)) return;
        if (left > 100000000) left = 100000000;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)left};
        nanosleep(&ts, NULL);
    }
}

/* ----------------------------------------------------------------- source */

struct source {
    const struct opts *o;
    redisContext *c;
};

static int source_connect(struct source *s, char *err, size_t errlen)
{
    const struct opts *o = s->o;
    struct timeval tv = {.tv_sec = o->source_timeout_ms / 1000,
                         .tv_usec = (o->source_timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(o->source_host, o->source_port, tv);
    if (!c || c->err) {
        snprintf(err, errlen, "connect to %s:%d: %s", o->source_host, o->source_port,
                 c ? c->errstr : "out of memory");
        redisFree(c);
        return -1;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        snprintf(err, errlen, "set timeout on %s:%d", o->source_host, o->source_port);
        redisFree(c);
        return -1;
    }
    redisReply *r = NULL;
    if (o->source_password && *o->source_password) {
        r = redisCommand(c, "AUTH %s", o->source_password);
        if (!r || r->type == REDIS_REPLY_ERROR) goto fail;
        freeReplyObject(r);
    }
    if (o->source_db) {
        r = redisCommand(c, "SELECT %d", o->source_db);
        if (!r || r->type == REDIS_REPLY_ERROR) goto fail;
        freeReplyObject(r);
    }
    s->c = c;
    return 0;
fail:
    snprintf(err, errlen, "%s:%d: %s", o->source_host, o->source_port,
             r ? r->str : c->errstr);
    if (r) freeReplyObject(r);
    redisFree(c);
    return -1;
}

static bool transient_redis_error(const char *msg)
{
    return strncmp(msg, "LOADING", 7) == 0 || strncmp(msg, "BUSY", 4) == 0 ||
           strncmp(msg, "TRYAGAIN", 8) == 0 || strncmp(msg, "MASTERDOWN", 10) == 0;
}

/* A command, reconnecting and retrying on I/O errors for --retry-s. Returns
 * the reply (error replies included, except transient ones), or NULL when
 * the run is stopping (then stop is set; fatal too if we gave up). */
static redisReply *source_cmd(struct run *R, struct source *s, const char *fmt, ...)
{
    int64_t start = dd_mono_ns();
    int64_t backoff = 100;
    char last[256] = "";
    for (;;) {
        if (stopping(R)) return NULL;
        if (!s->c && source_connect(s, last, sizeof last) != 0) goto retry;
        va_list ap;
        va_start(ap, fmt);
        redisReply *r = redisvCommand(s->c, fmt, ap);
        va_end(ap);
        if (r && !(r->type == REDIS_REPLY_ERROR && transient_redis_error(r->str))) return r;
        if (r) {
            snprintf(last, sizeof last, "%s", r->str);
            freeReplyObject(r);
        } else {
            snprintf(last, sizeof last, "%s", s->c->errstr);
            redisFree(s->c);
            s->c = NULL;
        }
    retry:
        if (dd_mono_ns() - start > (int64_t)R->o->retry_s * 1000000000) {
            set_fatal(R, "legacy Redis %s:%d: %s (gave up after %ds)", R->o->source_host,
                      R->o->source_port, last, R->o->retry_s);
            return NULL;
        }
        atomic_fetch_add(&R->retries, 1);
        static struct dd_log_limit lim;
        dd_log_limited(&lim, 2000, DD_LOG_WARN, MOD, "msg=\"legacy Redis failed; retrying\" error=\"%s\"",
                       last);
        nap(R, backoff);
        backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
    }
}

/* ----------------------------------------------------------------- target */

enum call_kind { CALL_PLAYS, CALL_DELIVERY, CALL_FILTER };
#define CALL_ABORT 1 /* stopping: the user is not finished */

static bool retryable(int rc)
{
    return rc == DD_ERR_UNAVAILABLE || rc == DD_ERR_TIMEOUT || rc == DD_ERR_LIMIT ||
           rc == DD_ERR_STATE;
}

/* One RPC with retries. Returns 0, CALL_ABORT, or a permanent negative
 * dd_err (status and message on the client). */
static int call_retry(struct run *R, dd_client *cl, enum call_kind k, const void *req,
                      const void **resp)
{
    int64_t start = dd_mono_ns();
    int64_t backoff = 100;
    for (;;) {
        if (stopping(R)) return CALL_ABORT;
        int rc;
        switch (k) {
        case CALL_PLAYS:
            rc = dd_client_record_plays(cl, req, (const Dedup__V1__RecordPlaysResponse **)resp);
            break;
        case CALL_DELIVERY:
            rc = dd_client_record_delivery(cl, req,
                                           (const Dedup__V1__RecordDeliveryResponse **)resp);
            break;
        default:
            rc = dd_client_filter(cl, req, (const Dedup__V1__FilterResponse **)resp);
            break;
        }
        if (rc == DD_OK) return DD_OK;
        if (!retryable(rc)) return rc;
        if (dd_mono_ns() - start > (int64_t)R->o->retry_s * 1000000000) {
            set_fatal(R, "dedupd %s: %s: %s (gave up after %ds)", R->o->target,
                      dd_client_status_name(dd_client_status(cl)), dd_client_errstr(cl),
                      R->o->retry_s);
            return CALL_ABORT;
        }
        atomic_fetch_add(&R->retries, 1);
        static struct dd_log_limit lim;
        dd_log_limited(&lim, 2000, DD_LOG_WARN, MOD,
                       "msg=\"dedupd call failed; retrying\" status=%s error=\"%s\"",
                       dd_client_status_name(dd_client_status(cl)), dd_client_errstr(cl));
        nap(R, backoff);
        backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
    }
}

/* ----------------------------------------------------------------- worker */

struct worker {
    struct run *R;
    pthread_t th;
    bool started;
    struct source src;
    dd_client *cl;
    struct mig_entry_rules rules;
    Dedup__V1__Play *plays;    /* --batch */
    Dedup__V1__Play **pp;
    char **items;              /* max(--recent-size, --verify-chunk) */
    int64_t *times;
    size_t items_cap;
    char *user;                /* NUL-terminated copy of the current user id */
    char *key;                 /* a key built from a pattern */
    size_t key_cap;
};

enum { U_DONE = 0, U_FAILED = 1, U_ABORT = 2 };

static void worker_free(struct worker *w)
{
    if (!w) return;
    dd_client_free(w->cl);
    if (w->src.c) redisFree(w->src.c);
    free(w->plays);
    free(w->pp);
    free(w->items);
    free(w->times);
    free(w->user);
    free(w->key);
}

static int worker_init(struct worker *w, struct run *R, char *err, size_t errlen)
{
    const struct opts *o = R->o;
    memset(w, 0, sizeof *w);
    w->R = R;
    w->src.o = o;
    w->items_cap = o->recent_size > (uint32_t)o->verify_chunk ? o->recent_size
                                                              : (size_t)o->verify_chunk;
    w->plays = calloc((size_t)o->batch, sizeof *w->plays);
    w->pp = calloc((size_t)o->batch, sizeof *w->pp);
    w->items = calloc(w->items_cap, sizeof *w->items);
    w->times = calloc(w->items_cap, sizeof *w->times);
    w->user = malloc((size_t)o->max_id_bytes + 1);
    size_t fix = R->plays.prefix_len + R->plays.suffix_len;
    if (R->has_deliveries && R->deliveries.prefix_len + R->deliveries.suffix_len > fix)
        fix = R->deliveries.prefix_len + R->deliveries.suffix_len;
    w->key_cap = fix + o->max_id_bytes + 1;
    w->key = malloc(w->key_cap);
    if (!w->plays || !w->pp || !w->items || !w->times || !w->user || !w->key) {
        snprintf(err, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    for (int i = 0; i < o->batch; i++) {
        dedup__v1__play__init(&w->plays[i]);
        w->pp[i] = &w->plays[i];
    }
    w->rules = (struct mig_entry_rules){
        .score_scale = o->score_scale, .max_future_ms = o->max_future_ms,
        .max_id_bytes = o->max_id_bytes, .check_expiry = true,
    };
    if (source_connect(&w->src, err, errlen) != 0) return DD_ERR_UNAVAILABLE;
    if (!o->dry_run || o->verify_n) {
        int rc = o->tls.ca ? dd_client_new_tls(&w->cl, o->target, &o->tls, err, errlen)
                           : dd_client_new(&w->cl, o->target, err, errlen);
        if (rc != DD_OK) return rc;
        dd_client_set_timeout(w->cl, o->timeout_ms);
    }
    return DD_OK;
}

/* Retention is in whole UTC days, as in dedupd (history.h): it remembers a
 * play whose day is today or one of the --retention-days days before, so
 * every play at least retention-days full days. Migration sends one day
 * more and lets dedupd count what it refuses as expired (so a daemon that
 * keeps one more day loses nothing); verification checks only what dedupd
 * promises to remember. */
enum cutoff { CUTOFF_MIGRATE, CUTOFF_VERIFY, CUTOFF_NONE };

static void rules_now(struct worker *w, enum cutoff c)
{
    int64_t now = dd_now_ms();
    int64_t today = now / DD_MS_PER_DAY;
    int64_t first_day = today - (int64_t)w->R->o->retention_days - (c == CUTOFF_VERIFY ? 0 : 1);
    w->rules.now_ms = now;
    w->rules.oldest_ms = first_day * DD_MS_PER_DAY;
    w->rules.check_expiry = c != CUTOFF_NONE;
}

/* A ZSCAN reply: [cursor, [member, score, ...]] with strings only. */
static bool zscan_reply_ok(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) return false;
    if (r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len >= MIG_CURSOR_MAX)
        return false;
    const redisReply *a = r->element[1];
    if (a->type != REDIS_REPLY_ARRAY || a->elements % 2) return false;
    for (size_t i = 0; i < a->elements; i++)
        if (a->element[i]->type != REDIS_REPLY_STRING) return false;
    return true;
}

static void user_failed(struct worker *w, const char *what, int rc, struct mig_stats *st)
{
    st->failed_users++;
    dd_error(MOD, "msg=\"user not migrated\" user=\"%s\" call=%s status=%s error=\"%s\" rc=\"%s\"",
             w->user, what, dd_client_status_name(dd_client_status(w->cl)),
             dd_client_errstr(w->cl), dd_strerror(rc));
}

static int send_plays(struct worker *w, size_t n, struct mig_stats *st)
{
    if (w->R->o->dry_run) {
        st->entries += n;
        return U_DONE;
    }
    Dedup__V1__RecordPlaysRequest req = DEDUP__V1__RECORD_PLAYS_REQUEST__INIT;
    req.user_id = w->user;
    req.scene = (char *)w->R->o->scene;
    req.plays = w->pp;
    req.n_plays = n;
    const Dedup__V1__RecordPlaysResponse *resp;
    int rc = call_retry(w->R, w->cl, CALL_PLAYS, &req, (const void **)&resp);
    if (rc == CALL_ABORT) return U_ABORT;
    if (rc != DD_OK) {
        user_failed(w, "RecordPlays", rc, st);
        return U_FAILED;
    }
    st->entries += resp->accepted;
    st->expired += resp->expired;
    return U_DONE;
}

static int migrate_plays(struct worker *w, const char *key, size_t keylen, struct mig_stats *st)
{
    struct run *R = w->R;
    char cursor[MIG_CURSOR_MAX] = "0";
    do {
        redisReply *r = source_cmd(R, &w->src, "ZSCAN %b %s COUNT %d", key, keylen, cursor,
                                   R->o->zscan_count);
        if (!r) return U_ABORT;
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "WRONGTYPE", 9) == 0) {
            st->bad[MIG_BAD_WRONG_TYPE]++;
            freeReplyObject(r);
            return U_DONE;
        }
        if (!zscan_reply_ok(r)) {
            set_fatal(R, "ZSCAN %.*s: unexpected reply%s%s", (int)keylen, key,
                      r->type == REDIS_REPLY_ERROR ? ": " : "",
                      r->type == REDIS_REPLY_ERROR ? r->str : "");
            freeReplyObject(r);
            return U_ABORT;
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
        const redisReply *a = r->element[1];
        rules_now(w, CUTOFF_MIGRATE);
        size_t n = 0;
        int rc = U_DONE;
        for (size_t i = 0; i < a->elements && rc == U_DONE; i += 2) {
            const redisReply *m = a->element[i], *s = a->element[i + 1];
            int64_t ms;
            enum mig_bad why;
            switch (mig_classify(&w->rules, m->str, m->len, s->str, s->len, &ms, &why)) {
            case MIG_ENTRY_BAD: st->bad[why]++; break;
            case MIG_ENTRY_EXPIRED: st->expired++; break;
            case MIG_ENTRY_OK:
                /* The members live in the reply until it is freed below. */
                w->plays[n].item_id = m->str;
                w->plays[n].played_at_ms = ms;
                if (++n == (size_t)R->o->batch) {
                    rc = send_plays(w, n, st);
                    n = 0;
                }
                break;
            }
        }
        if (rc == U_DONE && n > 0) rc = send_plays(w, n, st);
        freeReplyObject(r);
        if (rc != U_DONE) return rc;
    } while (strcmp(cursor, "0") != 0);
    return U_DONE;
}

/* The most recent --recent-size deliveries, oldest first, one RecordDelivery
 * per distinct delivery time so that dedupd keeps the same order. */
static int migrate_deliveries(struct worker *w, size_t user_len, struct mig_stats *st)
{
    struct run *R = w->R;
    int klen = mig_pattern_key(&R->deliveries, w->user, user_len, w->key, w->key_cap);
    if (klen < 0) {
        st->bad[MIG_BAD_KEY_MISMATCH]++;
        return U_DONE;
    }
    redisReply *r = source_cmd(R, &w->src, "ZREVRANGE %b 0 %d WITHSCORES", w->key, (size_t)klen,
                               (int)R->o->recent_size - 1);
    if (!r) return U_ABORT;
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "WRONGTYPE", 9) == 0) {
        st->bad[MIG_BAD_WRONG_TYPE]++;
        freeReplyObject(r);
        return U_DONE;
    }
    bool ok = r->type == REDIS_REPLY_ARRAY && r->elements % 2 == 0;
    for (size_t i = 0; ok && i < r->elements; i++) ok = r->element[i]->type == REDIS_REPLY_STRING;
    if (!ok) {
        set_fatal(R, "ZREVRANGE %s: unexpected reply%s%s", w->key,
                  r->type == REDIS_REPLY_ERROR ? ": " : "",
                  r->type == REDIS_REPLY_ERROR ? r->str : "");
        freeReplyObject(r);
        return U_ABORT;
    }
    rules_now(w, CUTOFF_NONE);
    size_t n = 0;
    for (size_t i = r->elements; i >= 2 && n < w->items_cap; i -= 2) {
        const redisReply *m = r->element[i - 2], *s = r->element[i - 1];
        int64_t ms;
        enum mig_bad why;
        if (mig_classify(&w->rules, m->str, m->len, s->str, s->len, &ms, &why) != MIG_ENTRY_OK) {
            st->bad[why]++;
            continue;
        }
        w->items[n] = m->str;
        w->times[n] = ms;
        n++;
    }
    int rc = U_DONE;
    for (size_t a = 0; a < n && rc == U_DONE;) {
        size_t b = a + 1;
        while (b < n && w->times[b] == w->times[a]) b++;
        if (R->o->dry_run) {
            st->deliveries += b - a;
        } else {
            Dedup__V1__RecordDeliveryRequest req = DEDUP__V1__RECORD_DELIVERY_REQUEST__INIT;
            req.user_id = w->user;
            req.scene = (char *)R->o->scene;
            req.item_ids = w->items + a;
            req.n_item_ids = b - a;
            req.delivered_at_ms = w->times[a];
            const Dedup__V1__RecordDeliveryResponse *resp;
            int c = call_retry(R, w->cl, CALL_DELIVERY, &req, (const void **)&resp);
            if (c == CALL_ABORT) {
                rc = U_ABORT;
            } else if (c != DD_OK) {
                user_failed(w, "RecordDelivery", c, st);
                rc = U_FAILED;
            } else {
                st->deliveries += b - a;
            }
        }
        a = b;
    }
    freeReplyObject(r);
    return rc;
}

/* Copy the user part of KEY under PAT into w->user. Returns its length, or
 * -1 (counted as key_mismatch). */
static long take_user(struct worker *w, const struct mig_pattern *pat, const char *key,
                      size_t keylen)
{
    const char *u;
    size_t ulen;
    if (mig_pattern_user(pat, key, keylen, w->R->o->max_id_bytes, &u, &ulen) != 0) return -1;
    memcpy(w->user, u, ulen);
    w->user[ulen] = '\0';
    return (long)ulen;
}

static int process_key(struct worker *w, int phase, const char *key, size_t keylen,
                       struct mig_stats *st)
{
    struct run *R = w->R;
    long ulen = take_user(w, phase == 0 ? &R->plays : &R->deliveries, key, keylen);
    if (ulen < 0) {
        st->bad[MIG_BAD_KEY_MISMATCH]++;
        return U_DONE;
    }
    if (phase == 1) {
        /* Users with a plays key had their deliveries copied in phase 0. */
        int klen = mig_pattern_key(&R->plays, w->user, (size_t)ulen, w->key, w->key_cap);
        if (klen >= 0) {
            redisReply *r = source_cmd(R, &w->src, "EXISTS %b", w->key, (size_t)klen);
            if (!r) return U_ABORT;
            long long exists = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
            freeReplyObject(r);
            if (exists < 0) {
                set_fatal(R, "EXISTS: unexpected reply");
                return U_ABORT;
            }
            if (exists) return U_DONE;
        }
        st->users++;
        int rc = migrate_deliveries(w, (size_t)ulen, st);
        return rc == U_ABORT ? U_ABORT : U_DONE;
    }
    st->users++;
    int rc = migrate_plays(w, key, keylen, st);
    if (rc == U_DONE && R->has_deliveries) rc = migrate_deliveries(w, (size_t)ulen, st);
    return rc == U_ABORT ? U_ABORT : U_DONE;
}

static int64_t take_rate_slot(struct run *R)
{
    if (R->o->rate <= 0) return 0;
    int64_t now = dd_mono_ns();
    if (R->next_slot_ns < now) R->next_slot_ns = now;
    int64_t t = R->next_slot_ns;
    R->next_slot_ns += (int64_t)(1e9 / R->o->rate);
    return t;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *R = w->R;
    pthread_mutex_lock(&R->mu);
    for (;;) {
        if (stopping(R)) break;
        struct page *p = NULL;
        for (unsigned i = 0; i < R->count && !p; i++) {
            struct page *q = &R->pages[(R->head + i) % MAX_PAGES];
            if (q->next_job < q->nkeys) p = q;
        }
        if (!p) {
            if (R->finished) break;
            pthread_cond_wait(&R->cv_work, &R->mu);
            continue;
        }
        size_t idx = p->next_job++;
        if (p->next_job == p->nkeys) pthread_cond_signal(&R->cv_main); /* time to prefetch */
        int64_t slot = take_rate_slot(R);
        pthread_mutex_unlock(&R->mu);

        if (slot) nap(R, (slot - dd_mono_ns()) / 1000000);
        struct mig_stats st = {0};
        int rc = stopping(R) ? U_ABORT
                             : process_key(w, p->phase, p->keys[idx]->str, p->keys[idx]->len, &st);

        pthread_mutex_lock(&R->mu);
        if (rc == U_ABORT) continue; /* the page never retires; a resume redoes it */
        st.keys = 1;
        mig_stats_add(&p->st, &st);
        if (++p->done == p->nkeys) pthread_cond_signal(&R->cv_main);
    }
    pthread_mutex_unlock(&R->mu);
    return NULL;
}

/* ------------------------------------------------------------- main loop */

/* Called with the lock held: retire finished pages in SCAN order. */
static void retire_pages(struct run *R)
{
    while (R->count > 0) {
        struct page *p = &R->pages[R->head];
        if (p->done < p->nkeys) break;
        mig_stats_add(&R->cp.stats, &p->st);
        if (strcmp(p->next_cursor, "0") != 0) {
            R->cp.phase = p->phase;
            memcpy(R->cp.cursor, p->next_cursor, sizeof R->cp.cursor);
        } else if (p->phase == 0 && R->has_deliveries) {
            R->cp.phase = 1;
            strcpy(R->cp.cursor, "0");
        } else {
            R->cp.phase = p->phase;
            strcpy(R->cp.cursor, "0");
            R->cp.done = true;
        }
        freeReplyObject(p->reply);
        memset(p, 0, sizeof *p);
        R->head = (R->head + 1) % MAX_PAGES;
        R->count--;
    }
}

static int64_t run_elapsed_ms(const struct run *R)
{
    return (dd_mono_ns() - R->start_ns) / 1000000;
}

/* Called with the lock held. */
static struct mig_stats live_stats(const struct run *R)
{
    struct mig_stats s = R->cp.stats;
    for (unsigned i = 0; i < R->count; i++)
        mig_stats_add(&s, &R->pages[(R->head + i) % MAX_PAGES].st);
    return s;
}

static void save_checkpoint(struct run *R)
{
    if (!R->o->checkpoint || R->o->dry_run) return;
    pthread_mutex_lock(&R->mu);
    R->cp.elapsed_ms = R->base_elapsed_ms + run_elapsed_ms(R);
    struct mig_checkpoint cp = R->cp;
    pthread_mutex_unlock(&R->mu);
    char err[512];
    if (mig_checkpoint_write(R->o->checkpoint, &cp, err, sizeof err) != DD_OK) {
        static struct dd_log_limit lim;
        dd_log_limited(&lim, 10000, DD_LOG_ERROR, MOD, "msg=\"cannot write checkpoint\" error=\"%s\"",
                       err);
    }
}

static void fmt_eta(char *buf, size_t n, double s)
{
    if (s < 0 || s > 1e8) snprintf(buf, n, "?");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, n, "%ds", (int)(s + 0.5));
}

/* The progress line: keys done of the total (counted first, or --total),
 * ETA from this run's own pace. Keys added to the source during the run
 * can make the done count pass the total: the total then follows it
 * ("corrected"). FINAL: the run's last line; a complete run's total is
 * what was done (keys deleted meanwhile never come), so it ends at 100 %. */
static void progress(struct run *R, bool final)
{
    pthread_mutex_lock(&R->mu);
    struct mig_stats s = live_stats(R);
    bool complete = R->cp.done;
    pthread_mutex_unlock(&R->mu);
    double secs = (double)run_elapsed_ms(R) / 1000.0;
    if (secs <= 0) secs = 1e-3;
    double ups = (double)(s.users - R->base.users) / secs;
    double eps = (double)(s.entries - R->base.entries) / secs;
    double kps = (double)(s.keys - R->base.keys) / secs;
    const char *from = R->total_from;
    uint64_t total = R->total;
    if (total && s.keys > total) {
        total = s.keys;
        from = "corrected";
    }
    if (final && complete && total != s.keys) {
        total = s.keys;
        from = "corrected";
    }
    char eta[32] = "?";
    char pct[32] = "?";
    if (total) {
        double left = (double)(total - s.keys);
        if (left == 0) snprintf(eta, sizeof eta, "0s");
        else if (kps > 0) fmt_eta(eta, sizeof eta, left / kps);
        snprintf(pct, sizeof pct, "%.1f", 100.0 * (double)s.keys / (double)total);
    }
    uint64_t bad = mig_stats_bad_total(&s);
    uint64_t retries = atomic_load(&R->retries);
    if (R->tty) {
        char of[64] = "";
        if (total) snprintf(of, sizeof of, "/%" PRIu64 " (%s %%)", total, pct);
        fprintf(stderr, "\r keys %" PRIu64 "%s  users %" PRIu64 "  entries %" PRIu64
                        "  %.0f users/s  %.0f entries/s  errors %" PRIu64 "  bad %" PRIu64
                        "  retries %" PRIu64 "  ETA %s   ",
                s.keys, of, s.users, s.entries, ups, eps, s.failed_users, bad, retries, eta);
        fflush(stderr);
    } else {
        dd_info(MOD, "msg=\"progress\" keys=%" PRIu64 " total=%" PRIu64 " pct=%s total_from=%s"
                     " users=%" PRIu64 " entries=%" PRIu64 " expired=%" PRIu64
                     " deliveries=%" PRIu64 " users_per_s=%.0f entries_per_s=%.0f errors=%" PRIu64
                     " bad=%" PRIu64 " retries=%" PRIu64 " eta=%s",
                s.keys, total, pct, from, s.users, s.entries, s.expired, s.deliveries, ups, eps,
                s.failed_users, bad, retries, eta);
    }
}

static bool scan_reply_ok(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) return false;
    const redisReply *c = r->element[0], *a = r->element[1];
    if (c->type != REDIS_REPLY_STRING || c->len >= MIG_CURSOR_MAX || a->type != REDIS_REPLY_ARRAY)
        return false;
    for (size_t i = 0; i < a->elements; i++)
        if (a->element[i]->type != REDIS_REPLY_STRING) return false;
    return true;
}

/* Keys matching MATCH, by a full SCAN; UINT64_MAX when it fails (fatal
 * set) or a stop is asked for. */
static uint64_t scan_count(struct run *R, struct source *src, const char *match)
{
    uint64_t n = 0;
    char cursor[MIG_CURSOR_MAX] = "0";
    do {
        if (stopping(R)) return UINT64_MAX;
        redisReply *r = source_cmd(R, src, "SCAN %s MATCH %b COUNT %d", cursor, match,
                                   strlen(match), R->o->scan_count);
        if (!r) return UINT64_MAX;
        if (!scan_reply_ok(r)) {
            set_fatal(R, "SCAN: unexpected reply%s%s", r->type == REDIS_REPLY_ERROR ? ": " : "",
                      r->type == REDIS_REPLY_ERROR ? r->str : "");
            freeReplyObject(r);
            return UINT64_MAX;
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
        n += r->element[1]->elements;
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

/* R->total from a first SCAN pass over each phase's keys. 0, or -1 (the
 * total stays unknown; a fatal error stops the run). */
static int count_keys(struct run *R, struct source *src)
{
    int64_t t0 = dd_mono_ns();
    uint64_t plays = scan_count(R, src, R->plays.match), dlv = 0;
    if (plays == UINT64_MAX) return -1;
    if (R->has_deliveries && (dlv = scan_count(R, src, R->deliveries.match)) == UINT64_MAX)
        return -1;
    R->total = plays + dlv;
    dd_info(MOD, "msg=\"counted keys\" keys=%" PRIu64 " plays_keys=%" PRIu64
                 " delivery_keys=%" PRIu64 " time_s=%.1f",
            R->total, plays, dlv, (double)(dd_mono_ns() - t0) / 1e9);
    return 0;
}

static void run_migration(struct run *R, struct source *src, struct worker *ws)
{
    const struct opts *o = R->o;
    R->scan_phase = R->cp.phase;
    memcpy(R->scan_cursor, R->cp.cursor, sizeof R->scan_cursor);
    R->all_scanned = false;
    int started = 0;
    for (int i = 0; i < o->parallel; i++) {
        if (pthread_create(&ws[i].th, NULL, worker_main, &ws[i]) != 0) {
            set_fatal(R, "cannot start worker thread %d", i);
            break;
        }
        ws[i].started = true;
        started++;
    }
    int64_t last_ckpt = dd_mono_ns(), last_prog = dd_mono_ns();
    int64_t prog_every = R->tty ? 1000000000 : (int64_t)o->progress_s * 1000000000;

    pthread_mutex_lock(&R->mu);
    for (;;) {
        retire_pages(R);
        if (stopping(R) || (R->all_scanned && R->count == 0)) break;
        struct page *newest = R->count ? &R->pages[(R->head + R->count - 1) % MAX_PAGES] : NULL;
        if (!R->all_scanned && R->count < MAX_PAGES && (!newest || newest->next_job == newest->nkeys)) {
            int phase = R->scan_phase;
            char cursor[MIG_CURSOR_MAX];
            memcpy(cursor, R->scan_cursor, sizeof cursor);
            pthread_mutex_unlock(&R->mu);
            const char *match = phase == 0 ? R->plays.match : R->deliveries.match;
            redisReply *r = source_cmd(R, src, "SCAN %s MATCH %b COUNT %d", cursor, match,
                                       strlen(match), o->scan_count);
            if (r && !scan_reply_ok(r)) {
                set_fatal(R, "SCAN: unexpected reply%s%s", r->type == REDIS_REPLY_ERROR ? ": " : "",
                          r->type == REDIS_REPLY_ERROR ? r->str : "");
                freeReplyObject(r);
                r = NULL;
            }
            pthread_mutex_lock(&R->mu);
            if (!r) continue;
            struct page *p = &R->pages[(R->head + R->count) % MAX_PAGES];
            memset(p, 0, sizeof *p);
            p->reply = r;
            p->keys = r->element[1]->element;
            p->nkeys = r->element[1]->elements;
            p->phase = phase;
            memcpy(p->next_cursor, r->element[0]->str, r->element[0]->len + 1);
            R->count++;
            if (strcmp(p->next_cursor, "0") != 0) {
                memcpy(R->scan_cursor, p->next_cursor, sizeof R->scan_cursor);
            } else if (phase == 0 && R->has_deliveries) {
                R->scan_phase = 1;
                strcpy(R->scan_cursor, "0");
            } else {
                R->all_scanned = true;
            }
            pthread_cond_broadcast(&R->cv_work);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200000000;
        if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
        pthread_cond_timedwait(&R->cv_main, &R->mu, &ts);

        int64_t now = dd_mono_ns();
        if (now - last_prog >= prog_every || now - last_ckpt >= (int64_t)o->checkpoint_s * 1000000000) {
            pthread_mutex_unlock(&R->mu);
            if (now - last_prog >= prog_every) {
                progress(R, false);
                last_prog = now;
            }
            if (now - last_ckpt >= (int64_t)o->checkpoint_s * 1000000000) {
                save_checkpoint(R);
                last_ckpt = now;
            }
            pthread_mutex_lock(&R->mu);
        }
    }
    R->finished = true;
    pthread_cond_broadcast(&R->cv_work);
    pthread_mutex_unlock(&R->mu);
    for (int i = 0; i < o->parallel; i++)
        if (ws[i].started) pthread_join(ws[i].th, NULL);
    (void)started;

    pthread_mutex_lock(&R->mu);
    retire_pages(R);
    /* Pages still here were cut short: the checkpoint sits before them. */
    while (R->count > 0) {
        freeReplyObject(R->pages[R->head].reply);
        memset(&R->pages[R->head], 0, sizeof R->pages[R->head]);
        R->head = (R->head + 1) % MAX_PAGES;
        R->count--;
    }
    pthread_mutex_unlock(&R->mu);
    progress(R, true);
    if (R->tty) fputc('\n', stderr);
    save_checkpoint(R);
}

/* ----------------------------------------------------------------- verify */

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

/* Reservoir-sample N plays keys over one full SCAN. */
static int sample_users(struct run *R, struct source *src)
{
    const struct opts *o = R->o;
    size_t cap = o->verify_n;
    R->sample = calloc(cap, sizeof *R->sample);
    if (!R->sample) {
        set_fatal(R, "out of memory for %zu sampled users", cap);
        return -1;
    }
    uint64_t rng = o->seed | 1, seen = 0;
    char cursor[MIG_CURSOR_MAX] = "0";
    do {
        redisReply *r = source_cmd(R, src, "SCAN %s MATCH %b COUNT %d", cursor, R->plays.match,
                                   strlen(R->plays.match), o->scan_count);
        if (!r) return -1;
        if (!scan_reply_ok(r)) {
            set_fatal(R, "SCAN: unexpected reply");
            freeReplyObject(r);
            return -1;
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
        const redisReply *a = r->element[1];
        for (size_t i = 0; i < a->elements; i++) {
            seen++;
            size_t slot;
            if (R->nsample < cap) {
                slot = R->nsample++;
            } else {
                uint64_t j = rng_next(&rng) % seen;
                if (j >= cap) continue;
                slot = (size_t)j;
                free(R->sample[slot]);
            }
            R->sample[slot] = malloc(a->element[i]->len + 1);
            if (!R->sample[slot]) {
                freeReplyObject(r);
                set_fatal(R, "out of memory sampling users");
                return -1;
            }
            memcpy(R->sample[slot], a->element[i]->str, a->element[i]->len + 1);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

/* Filter n candidates (w->items) for w->user: every one must be removed. */
static int verify_chunk(struct worker *w, size_t n, struct vstats *vs)
{
    struct run *R = w->R;
    Dedup__V1__FilterRequest req = DEDUP__V1__FILTER_REQUEST__INIT;
    req.user_id = w->user;
    req.scene = (char *)R->o->scene;
    req.candidate_ids = w->items;
    req.n_candidate_ids = n;
    req.mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS;
    const Dedup__V1__FilterResponse *resp;
    int rc = call_retry(R, w->cl, CALL_FILTER, &req, (const void **)&resp);
    if (rc == CALL_ABORT) return U_ABORT;
    if (rc != DD_OK) {
        vs->errors++;
        dd_error(MOD, "msg=\"verify: Filter failed\" user=\"%s\" status=%s error=\"%s\"", w->user,
                 dd_client_status_name(dd_client_status(w->cl)), dd_client_errstr(w->cl));
        return U_FAILED;
    }
    vs->items += n;
    vs->misses += resp->n_kept_ids;
    if (resp->degraded) vs->degraded++;
    if (resp->n_kept_ids) {
        pthread_mutex_lock(&R->mu);
        for (size_t i = 0; i < resp->n_kept_ids && R->v.printed < (uint64_t)R->o->verify_print; i++) {
            printf("miss user=%s item=%s\n", w->user, resp->kept_ids[i]);
            R->v.printed++;
        }
        pthread_mutex_unlock(&R->mu);
    }
    return U_DONE;
}

static int verify_user(struct worker *w, const char *key, size_t keylen, struct vstats *vs)
{
    struct run *R = w->R;
    if (take_user(w, &R->plays, key, keylen) < 0) {
        vs->skipped++;
        return U_DONE;
    }
    char cursor[MIG_CURSOR_MAX] = "0";
    do {
        redisReply *r = source_cmd(R, &w->src, "ZSCAN %b %s COUNT %d", key, keylen, cursor,
                                   R->o->zscan_count);
        if (!r) return U_ABORT;
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "WRONGTYPE", 9) == 0) {
            vs->skipped++;
            freeReplyObject(r);
            return U_DONE;
        }
        if (!zscan_reply_ok(r)) {
            set_fatal(R, "ZSCAN %s: unexpected reply", key);
            freeReplyObject(r);
            return U_ABORT;
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
        const redisReply *a = r->element[1];
        rules_now(w, CUTOFF_VERIFY);
        size_t n = 0;
        int rc = U_DONE;
        for (size_t i = 0; i < a->elements && rc == U_DONE; i += 2) {
            const redisReply *m = a->element[i], *s = a->element[i + 1];
            int64_t ms;
            enum mig_bad why;
            if (mig_classify(&w->rules, m->str, m->len, s->str, s->len, &ms, &why) != MIG_ENTRY_OK)
                continue;
            w->items[n++] = m->str;
            if (n == (size_t)R->o->verify_chunk) {
                rc = verify_chunk(w, n, vs);
                n = 0;
            }
        }
        if (rc == U_DONE && n) rc = verify_chunk(w, n, vs);
        freeReplyObject(r);
        if (rc != U_DONE) return rc;
    } while (strcmp(cursor, "0") != 0);
    vs->checked++;
    return U_DONE;
}

static void *verify_main(void *arg)
{
    struct worker *w = arg;
    struct run *R = w->R;
    struct vstats vs = {0};
    for (;;) {
        size_t i = atomic_fetch_add(&R->next_sample, 1);
        if (i >= R->nsample || stopping(R)) break;
        if (verify_user(w, R->sample[i], strlen(R->sample[i]), &vs) == U_ABORT) break;
    }
    pthread_mutex_lock(&R->mu);
    R->v.checked += vs.checked;
    R->v.skipped += vs.skipped;
    R->v.items += vs.items;
    R->v.misses += vs.misses;
    R->v.errors += vs.errors;
    R->v.degraded += vs.degraded;
    pthread_mutex_unlock(&R->mu);
    return NULL;
}

static void run_verify(struct run *R, struct source *src, struct worker *ws)
{
    int64_t t0 = dd_mono_ns();
    if (sample_users(R, src) != 0) return;
    R->v.sampled = R->nsample;
    dd_info(MOD, "msg=\"verify: sampled users\" users=%zu", R->nsample);
    for (int i = 0; i < R->o->parallel; i++) {
        ws[i].started = false;
        if (pthread_create(&ws[i].th, NULL, verify_main, &ws[i]) != 0) {
            set_fatal(R, "cannot start verify thread %d", i);
            break;
        }
        ws[i].started = true;
    }
    for (int i = 0; i < R->o->parallel; i++)
        if (ws[i].started) pthread_join(ws[i].th, NULL);
    double secs = (double)(dd_mono_ns() - t0) / 1e9;
    printf("verify: users=%" PRIu64 " checked=%" PRIu64 " skipped=%" PRIu64 " items=%" PRIu64
           " misses=%" PRIu64 " errors=%" PRIu64 " degraded=%" PRIu64 " time_s=%.1f\n",
           R->v.sampled, R->v.checked, R->v.skipped, R->v.items, R->v.misses, R->v.errors,
           R->v.degraded, secs);
    fflush(stdout);
}

/* ---------------------------------------------------------------- signals */

static void *signal_main(void *arg)
{
    struct run *R = arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    for (int n = 0;; n++) {
        int sig;
        if (sigwait(&set, &sig) != 0) continue;
        if (n > 0) {
            static const char msg[] = "\ndedupd-migrate: second signal: exiting now; "
                                      "the last checkpoint written is still valid\n";
            ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
            (void)w;
            _exit(EXIT_INTERRUPTED);
        }
        dd_warn(MOD, "msg=\"signal: finishing users in flight, writing the checkpoint\" signal=%d",
                sig);
        pthread_mutex_lock(&R->mu);
        atomic_store(&R->interrupted, true);
        atomic_store(&R->stop, true);
        pthread_cond_broadcast(&R->cv_work);
        pthread_cond_broadcast(&R->cv_main);
        pthread_mutex_unlock(&R->mu);
    }
    return NULL;
}

/* ---------------------------------------------------------------- summary */

static void summary(const struct run *R, const struct mig_stats *s, bool migrated)
{
    double run_s = (double)run_elapsed_ms(R) / 1000.0;
    double all_s = (double)(R->base_elapsed_ms + run_elapsed_ms(R)) / 1000.0;
    uint64_t run_entries = s->entries - R->base.entries;
    printf("dedupd-migrate summary%s\n", R->o->dry_run ? " (dry run: nothing written)" : "");
    printf("  %-24s %" PRIu64 "\n", "users", s->users);
    printf("  %-24s %" PRIu64 "\n", "entries", s->entries);
    printf("  %-24s %" PRIu64 "\n", "expired_skipped", s->expired);
    printf("  %-24s %" PRIu64 "\n", "deliveries", s->deliveries);
    printf("  %-24s %" PRIu64 "\n", "failed_users", s->failed_users);
    printf("  %-24s %" PRIu64 "\n", "bad_total", mig_stats_bad_total(s));
    for (int i = 0; i < MIG_BAD_COUNT; i++)
        printf("  bad.%-20s %" PRIu64 "\n", mig_bad_name(i), s->bad[i]);
    printf("  %-24s %" PRIu64 "\n", "retries", (uint64_t)atomic_load(&R->retries));
    /* time_s and entries_per_s are the migration's, over every run;
     * run_* this run's own: a resume that found the work done sent
     * nothing and says "-", not a rate of 0. */
    printf("  %-24s %.1f\n", "time_s", all_s);
    printf("  %-24s %.3f\n", "run_time_s", run_s); /* to the ms: a short run's rate checks */
    printf("  %-24s %" PRIu64 "\n", "run_entries", run_entries);
    printf("  %-24s %.0f\n", "entries_per_s", all_s > 0 ? (double)s->entries / all_s : 0.0);
    if (run_entries > 0 && run_s > 0)
        printf("  %-24s %.0f\n", "run_entries_per_s", (double)run_entries / run_s);
    else
        printf("  %-24s -\n", "run_entries_per_s");
    const char *state;
    if (R->fatal) state = "failed";
    else if (atomic_load(&R->interrupted)) state = "interrupted (rerun with --resume)";
    else if (!migrated) state = "not run (verify only)";
    else if (R->cp.done || R->o->dry_run) state = "complete";
    else state = "incomplete";
    printf("  %-24s %s\n", "state", state);
    if (R->fatal) printf("  %-24s %s\n", "error", R->fatal_msg);
    fflush(stdout);
}

/* ------------------------------------------------------------------- main */

static int load_checkpoint(struct run *R)
{
    const struct opts *o = R->o;
    struct mig_checkpoint *cp = &R->cp;
    memset(cp, 0, sizeof *cp);
    strcpy(cp->cursor, "0");
    if (strlen(o->plays) >= sizeof cp->plays ||
        (o->deliveries && strlen(o->deliveries) >= sizeof cp->deliveries) ||
        strlen(o->scene) >= sizeof cp->scene) {
        fprintf(stderr, "dedupd-migrate: pattern or scene too long\n");
        return EXIT_USAGE;
    }
    strcpy(cp->plays, o->plays);
    strcpy(cp->deliveries, o->deliveries ? o->deliveries : "");
    strcpy(cp->scene, o->scene);
    if (!o->checkpoint || o->verify_only || o->dry_run) return 0;

    struct mig_checkpoint old;
    char err[512];
    int rc = mig_checkpoint_read(o->checkpoint, &old, err, sizeof err);
    if (rc == DD_ERR_NOTFOUND) {
        if (o->resume) dd_warn(MOD, "msg=\"no checkpoint yet; starting from the beginning\" file=\"%s\"",
                               o->checkpoint);
        return 0;
    }
    if (rc != DD_OK) {
        fprintf(stderr, "dedupd-migrate: %s\n", err);
        return EXIT_FAIL;
    }
    if (!o->resume) {
        fprintf(stderr, "dedupd-migrate: checkpoint %s exists: pass --resume to continue that run, "
                        "or remove the file to start over\n", o->checkpoint);
        return EXIT_USAGE;
    }
    if (strcmp(old.plays, cp->plays) != 0 || strcmp(old.deliveries, cp->deliveries) != 0 ||
        strcmp(old.scene, cp->scene) != 0) {
        fprintf(stderr, "dedupd-migrate: checkpoint %s belongs to another run (plays='%s' "
                        "deliveries='%s' scene='%s')\n", o->checkpoint, old.plays, old.deliveries,
                old.scene);
        return EXIT_USAGE;
    }
    if (old.phase == 1 && !cp->deliveries[0]) {
        fprintf(stderr, "dedupd-migrate: checkpoint %s: phase 1 without --deliveries\n",
                o->checkpoint);
        return EXIT_FAIL;
    }
    *cp = old;
    dd_info(MOD, "msg=\"resuming\" phase=%d cursor=%s users=%" PRIu64 " entries=%" PRIu64
                 " done=%d", cp->phase, cp->cursor, cp->stats.users, cp->stats.entries,
            cp->done ? 1 : 0);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse_opts(&o, argc, argv) != 0) return usage_error();
    static struct run run;
    struct run *R = &run;
    R->o = &o;
    char err[512];
    if (mig_pattern_parse(&R->plays, o.plays, err, sizeof err) != DD_OK) {
        fprintf(stderr, "dedupd-migrate: --plays: %s\n", err);
        return EXIT_USAGE;
    }
    if (o.deliveries) {
        if (mig_pattern_parse(&R->deliveries, o.deliveries, err, sizeof err) != DD_OK) {
            fprintf(stderr, "dedupd-migrate: --deliveries: %s\n", err);
            return EXIT_USAGE;
        }
        R->has_deliveries = true;
    }
    int rc = load_checkpoint(R);
    if (rc != 0) return rc;
    R->base = R->cp.stats;
    R->base_elapsed_ms = R->cp.elapsed_ms;
    R->tty = isatty(STDERR_FILENO);
    pthread_mutex_init(&R->mu, NULL);
    pthread_cond_init(&R->cv_work, NULL);
    pthread_cond_init(&R->cv_main, NULL);

    /* Signals go to the signal thread only; SIGPIPE is an error return. */
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t sig_th;
    if (pthread_create(&sig_th, NULL, signal_main, R) != 0) {
        fprintf(stderr, "dedupd-migrate: cannot start the signal thread\n");
        return EXIT_FAIL;
    }
    pthread_detach(sig_th);

    struct source src = {.o = &o};
    if (source_connect(&src, err, sizeof err) != 0) {
        fprintf(stderr, "dedupd-migrate: legacy Redis: %s\n", err);
        return EXIT_FAIL;
    }
    R->total = o.total;
    R->total_from = o.total ? "given" : "none";

    struct worker *ws = calloc((size_t)o.parallel, sizeof *ws);
    if (!ws) {
        fprintf(stderr, "dedupd-migrate: out of memory\n");
        return EXIT_FAIL;
    }
    for (int i = 0; i < o.parallel; i++) {
        if (worker_init(&ws[i], R, err, sizeof err) != DD_OK) {
            fprintf(stderr, "dedupd-migrate: worker %d: %s\n", i, err);
            for (int j = 0; j <= i; j++) worker_free(&ws[j]);
            free(ws);
            return EXIT_FAIL;
        }
    }

    bool migrate = !o.verify_only;
    /* The total the percentage and ETA are of: the keys of every phase,
     * counted with one SCAN pass (DBSIZE would count every key of the
     * database, matching or not). */
    if (migrate && !R->cp.done && !o.total && count_keys(R, &src) == 0) R->total_from = "count";
    R->start_ns = dd_mono_ns();
    if (migrate && R->cp.done) {
        dd_info(MOD, "msg=\"checkpoint says the migration is complete; nothing to migrate\"");
    } else if (migrate) {
        dd_info(MOD, "msg=\"migrating\" source=%s:%d plays=\"%s\" deliveries=\"%s\" target=%s "
                     "scene=\"%s\" parallel=%d dry_run=%d total=%" PRIu64,
                o.source_host, o.source_port, o.plays, o.deliveries ? o.deliveries : "", o.target,
                o.scene, o.parallel, o.dry_run ? 1 : 0, R->total);
        run_migration(R, &src, ws);
    }
    struct mig_stats final = R->cp.stats;
    summary(R, &final, migrate);

    if (o.verify_n && !stopping(R)) run_verify(R, &src, ws);

    for (int i = 0; i < o.parallel; i++) worker_free(&ws[i]);
    free(ws);
    for (size_t i = 0; i < R->nsample; i++) free(R->sample[i]);
    free(R->sample);
    redisFree(src.c);
    mig_pattern_free(&R->plays);
    mig_pattern_free(&R->deliveries);
    free(o.source_host);

    if (R->fatal) {
        fprintf(stderr, "dedupd-migrate: %s\n", R->fatal_msg);
        return EXIT_FAIL;
    }
    if (atomic_load(&R->interrupted)) return EXIT_INTERRUPTED;
    if (final.failed_users) return EXIT_FAIL;
    if (o.verify_n && (R->v.misses || R->v.errors)) return EXIT_FAIL;
    return 0;
}
