/* SPDX-License-Identifier: Apache-2.0
 *
 * bench_bulk.c - a bulk load through RecordPlays, as dedupd-migrate or a
 * replay sends one: how many plays per second dedupd stores, and what each
 * costs it in CPU and in bytes written.
 *
 * Load: the realistic mix of bench_history (mix.h): USERS users (default
 * 20,000), plays per user log-normal (median 1,000, sigma 1.5, capped at
 * 50,000; --plays-cap lowers the cap), about 58 M plays in all, each
 * dated over the 90 days before the start (plays the store finds past its
 * retention are counted expired). Item ids are 16 hexadecimal digits.
 * Each user's plays go out in calls of at most PER_CALL (default 5,000)
 * plays, INFLIGHT (default 8) calls at once: one thread per call in
 * flight, each with its own blocking client (tools/lib/client.h, as
 * dedupd-migrate's workers), taking the next (user, slice) in user order.
 * gRPC gives channels to one address one connection, so all calls come on
 * one connection, as a migration's do.
 *
 *   bench_bulk --dedupd PATH [-o KEY=VALUE]... [--dir PATH] [--keep]
 *   bench_bulk --addr HOST:PORT [--pid PID]
 *              common: [--users N] [--plays-cap N] [--per-call N]
 *                      [--inflight N] [--settle S]
 *
 * --dedupd starts that dedupd on a fresh store in a temporary directory,
 * removed at the end unless --keep (--dir: in that directory, which must
 * not hold a store yet, and which is kept), with no Kafka ingest, no admin
 * listener, Redis pointed at a closed port (RecordPlays does not use it),
 * a free loopback port and each -o setting (for A/B: the same settings go
 * to either build; a key one build does not know makes it refuse to
 * start), and stops it at the end (SIGTERM). --addr loads a dedupd
 * already running; its CPU and writes are measured when --pid gives its
 * process (same host), else only the rate is.
 *
 * dedupd's CPU (utime + stime, all threads) and bytes written to storage
 * (/proc/PID/io write_bytes: the bytes its threads dirtied, WAL, flushes
 * and compactions alike) are read before and after the load, and again
 * after it settles: once the load is done, RocksDB goes on flushing and
 * compacting what it was given, and a build that defers that work looks
 * faster during the load than it is. Settled = neither figure moved for 2 s
 * (at most --settle S seconds, default 20; 0 = do not wait). Each thread's
 * CPU is read too: rpc.threads workers answer the calls one at a time
 * each, and the connection's calls go to one of them first, so the
 * busiest thread's CPU per play (printed with its share of the load's
 * time) bounds the rate more than the total does. "On disk" is the
 * directory's allocated bytes at the end of the load (RocksDB preallocates
 * its WAL files: large against a small load).
 *
 * A call refused with a transient status (UNAVAILABLE, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ...) is retried as
 * dedupd-migrate does (after 100 ms, doubling up to 2 s, for a minute),
 * and counted: the rate includes the retries' cost, as a migration pays it.
 *
 * Prints the rate, the calls' latency (retries included), the retries,
 * the per-play figures and a SUMMARY line. Exits non-zero if a call fails
 * (for good) or dedupd does not start.
 */
#include "client.h"
#include "dd.h"
#include "dedup.pb-c.h"
#include "mix.h"
#include "testlib.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SETS 32
#define ID_LEN 16

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_bulk: %s: %s\n", what, msg);
    exit(1);
}

/* ---- the work: (user, first play) slices, in user order ----------------- */

struct slice {
    uint32_t user;
    uint32_t first; /* index of the slice's first play */
    uint32_t n;
};

static struct slice *g_slices;
static size_t g_n_slices;
static _Atomic size_t g_next;
static _Atomic int g_failed;
static int64_t g_now_ms; /* the load's "now": plays are dated before it */
static uint32_t g_per_call;
static int64_t *g_lat_ns; /* each call's latency, by slice index */
static _Atomic uint64_t g_accepted, g_expired;
static _Atomic uint64_t g_retries[17]; /* by gRPC status */
static _Atomic int g_retry_said;

/* The statuses dedupd-migrate retries (its call_retry). */
static int retryable(int rc)
{
    return rc == DD_ERR_UNAVAILABLE || rc == DD_ERR_TIMEOUT || rc == DD_ERR_LIMIT ||
           rc == DD_ERR_STATE;
}

struct worker {
    pthread_t tid;
    const char *addr;
};

static void *work(void *arg)
{
    const struct worker *w = arg;
    char err[256];
    dd_client *c = NULL;
    if (dd_client_new(&c, w->addr, err, sizeof err) != DD_OK) die("client", err);
    dd_client_set_timeout(c, 120000);
    char *ids = malloc((size_t)g_per_call * (ID_LEN + 1));
    Dedup__V1__Play *plays = malloc(g_per_call * sizeof *plays);
    Dedup__V1__Play **pp = malloc(g_per_call * sizeof *pp);
    if (!ids || !plays || !pp) die("worker", "out of memory");
    for (uint32_t i = 0; i < g_per_call; i++) {
        dedup__v1__play__init(&plays[i]);
        plays[i].item_id = ids + (size_t)i * (ID_LEN + 1);
        pp[i] = &plays[i];
    }
    char user[16];
    for (;;) {
        size_t k = atomic_fetch_add(&g_next, 1);
        if (k >= g_n_slices || atomic_load(&g_failed)) break;
        const struct slice *s = &g_slices[k];
        for (uint32_t j = 0; j < s->n; j++) {
            uint32_t i = s->first + j;
            snprintf(plays[j].item_id, ID_LEN + 1, "%016" PRIx64, mix_play_hash(s->user, i));
            plays[j].played_at_ms = g_now_ms - mix_play_age_ms(s->user, i);
        }
        snprintf(user, sizeof user, "u%" PRIu32, s->user);
        Dedup__V1__RecordPlaysRequest req = DEDUP__V1__RECORD_PLAYS_REQUEST__INIT;
        req.user_id = user;
        req.plays = pp;
        req.n_plays = s->n;
        const Dedup__V1__RecordPlaysResponse *resp = NULL;
        int64_t t0 = dd_mono_ns(), backoff_ms = 100;
        int rc;
        /* dedupd-migrate's retries: transient refusals again after 100 ms,
         * doubling to 2 s, for at most a minute; each one counted */
        while ((rc = dd_client_record_plays(c, &req, &resp)) != DD_OK && retryable(rc) &&
               dd_mono_ns() - t0 < 60 * INT64_C(1000000000)) {
            int st = dd_client_status(c);
            atomic_fetch_add(&g_retries[st >= 0 && st < 17 ? st : 2], 1);
            if (!atomic_exchange(&g_retry_said, 1))
                fprintf(stderr, "bench_bulk: RecordPlays for %s: %s (%s); retrying\n", user,
                        dd_client_status_name(st), dd_client_errstr(c));
            usleep((useconds_t)backoff_ms * 1000);
            backoff_ms = backoff_ms * 2 > 2000 ? 2000 : backoff_ms * 2;
        }
        g_lat_ns[k] = dd_mono_ns() - t0;
        if (rc != DD_OK) {
            if (!atomic_exchange(&g_failed, 1))
                fprintf(stderr, "bench_bulk: RecordPlays for %s: %s (%s)\n", user,
                        dd_client_status_name(dd_client_status(c)), dd_client_errstr(c));
            break;
        }
        atomic_fetch_add(&g_accepted, resp->accepted);
        atomic_fetch_add(&g_expired, resp->expired);
    }
    free(ids);
    free(plays);
    free(pp);
    dd_client_free(c);
    return NULL;
}

/* ---- dedupd's process: CPU and writes ----------------------------------- */

struct proc_sample {
    int ok;
    double cpu_s;         /* utime + stime */
    uint64_t write_bytes; /* /proc/PID/io */
    int64_t at_ns;
};

static struct proc_sample sample(pid_t pid)
{
    struct proc_sample s = {.at_ns = dd_mono_ns()};
    if (pid <= 0) return s;
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return s;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* fields after the command's closing parenthesis: state is field 3,
     * utime 14 and stime 15 */
    const char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return s;
    s.cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
    f = fopen(path, "r");
    if (!f) return s;
    char line[128];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "write_bytes: %" SCNu64, &s.write_bytes) == 1) s.ok = 1;
    fclose(f);
    return s;
}

/* The CPU seconds of each of PID's threads into TIDS/CPU (at most MAX);
 * returns how many. */
#define MAX_THREADS 256
static size_t thread_cpu(pid_t pid, pid_t *tids, double *cpu, char (*names)[16], size_t max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    size_t n = 0;
    struct dirent *e;
    while (n < max && (e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char p2[300], buf[1024];
        snprintf(p2, sizeof p2, "/proc/%d/task/%s/stat", (int)pid, e->d_name);
        FILE *f = fopen(p2, "r");
        if (!f) continue;
        size_t l = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[l] = '\0';
        const char *open = strchr(buf, '('), *close = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        if (!open || !close ||
            sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
            continue;
        size_t nl = (size_t)(close - open - 1) < 15 ? (size_t)(close - open - 1) : 15;
        memcpy(names[n], open + 1, nl);
        names[n][nl] = '\0';
        tids[n] = (pid_t)atol(e->d_name);
        cpu[n] = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
        n++;
    }
    closedir(d);
    return n;
}

/* ---- starting dedupd ---------------------------------------------------- */

static pid_t start_dedupd(const char *exe, const char *dir, int port, const char **sets,
                          int nsets)
{
    char logpath[4200], hist[4200], listen[64], redis[64];
    snprintf(logpath, sizeof logpath, "%s/dedupd.log", dir);
    snprintf(hist, sizeof hist, "history.path=%s/history", dir);
    snprintf(listen, sizeof listen, "rpc.listen=127.0.0.1:%d", port);
    /* RecordPlays never calls Redis: a port nothing listens on (reserved) */
    snprintf(redis, sizeof redis, "recent.redis=127.0.0.1:%d", tl_free_port());
    const char *argv[16 + 2 * MAX_SETS];
    int a = 0;
    argv[a++] = exe;
    const char *fixed[] = {hist, "ingest.enabled=false", listen, "admin.listen=", redis,
                           "log.level=warn"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        argv[a++] = "-o";
        argv[a++] = fixed[i];
    }
    for (int i = 0; i < nsets; i++) {
        argv[a++] = "-o";
        argv[a++] = sets[i];
    }
    argv[a] = NULL;
    pid_t pid = fork();
    if (pid < 0) die("fork", strerror(errno));
    if (pid == 0) {
        FILE *log = freopen(logpath, "a", stderr);
        if (!log) _exit(127);
        dup2(fileno(stderr), 1);
        execv(exe, (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    return pid;
}

/* Whether something accepts TCP connections on 127.0.0.1:PORT. */
static int port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* Wait until ADDR answers Health SERVING (at most 60 s), or PID exits.
 * A dedupd started here (PORT > 0): first until its port accepts, so that
 * the first gRPC call does not meet a refused connection and wait out
 * gRPC's reconnect backoff. */
static void wait_serving(const char *addr, int port, pid_t pid, const char *dir)
{
    for (int i = 0; port > 0 && !port_open(port); i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            fprintf(stderr, "bench_bulk: dedupd exited at start; its log: %s/dedupd.log\n", dir);
            exit(1);
        }
        if (i == 6000) die("dedupd", "its port not open after 60 s");
        usleep(10000);
    }
    char err[256];
    dd_client *c = NULL;
    if (dd_client_new(&c, addr, err, sizeof err) != DD_OK) die("client", err);
    dd_client_set_timeout(c, 1000);
    for (int i = 0; i < 600; i++) {
        int st = 0;
        if (dd_client_health(c, "", &st) == DD_OK && st == 1) {
            dd_client_free(c);
            return;
        }
        if (pid > 0 && waitpid(pid, NULL, WNOHANG) == pid) {
            fprintf(stderr, "bench_bulk: dedupd exited at start; its log: %s/dedupd.log\n", dir);
            exit(1);
        }
        usleep(100000);
    }
    die("dedupd", "not serving after 60 s");
}

/* Bytes allocated under PATH (the store and the trace store on disk). */
static uint64_t g_du;
static int du_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (flag == FTW_F) g_du += (uint64_t)sb->st_blocks * 512;
    return 0;
}

int main(int argc, char **argv)
{
    uint32_t users = 20000, cap = MIX_MAX_PLAYS, per_call = 5000, inflight = 8;
    double settle_s = 20;
    const char *exe = NULL, *addr_opt = NULL, *dir_opt = NULL;
    const char *sets[MAX_SETS];
    int nsets = 0, keep = 0;
    pid_t pid = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--users") && i + 1 < argc) users = (uint32_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--plays-cap") && i + 1 < argc) cap = (uint32_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--per-call") && i + 1 < argc)
            per_call = (uint32_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--inflight") && i + 1 < argc)
            inflight = (uint32_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--settle") && i + 1 < argc) settle_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--dedupd") && i + 1 < argc) exe = argv[++i];
        else if (!strcmp(argv[i], "--addr") && i + 1 < argc) addr_opt = argv[++i];
        else if (!strcmp(argv[i], "--pid") && i + 1 < argc) pid = (pid_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir_opt = argv[++i];
        else if (!strcmp(argv[i], "--keep")) keep = 1;
        else if (!strcmp(argv[i], "-o") && i + 1 < argc && nsets < MAX_SETS)
            sets[nsets++] = argv[++i];
        else {
            fprintf(stderr,
                    "usage: bench_bulk --dedupd PATH [-o KEY=VALUE]... [--dir PATH] [--keep]\n"
                    "       bench_bulk --addr HOST:PORT [--pid PID]\n"
                    "         [--users N] [--plays-cap N] [--per-call N] [--inflight N]"
                    " [--settle S]\n");
            return 2;
        }
    }
    if (!exe == !addr_opt) die("arguments", "give either --dedupd or --addr");
    if (users == 0 || cap == 0 || per_call == 0 || inflight == 0 || inflight > 256 ||
        settle_s < 0)
        die("arguments", "out of range");

    /* the slices, and the plays in all */
    uint64_t total = 0;
    g_n_slices = 0;
    for (uint32_t u = 0; u < users; u++) {
        uint32_t n = mix_user_plays(u);
        if (n > cap) n = cap;
        total += n;
        g_n_slices += (n + per_call - 1) / per_call;
    }
    g_slices = malloc(g_n_slices * sizeof *g_slices);
    g_lat_ns = calloc(g_n_slices, sizeof *g_lat_ns);
    if (!g_slices || !g_lat_ns) die("slices", "out of memory");
    size_t k = 0;
    for (uint32_t u = 0; u < users; u++) {
        uint32_t n = mix_user_plays(u);
        if (n > cap) n = cap;
        for (uint32_t f = 0; f < n; f += per_call)
            g_slices[k++] = (struct slice){u, f, n - f < per_call ? n - f : per_call};
    }
    g_per_call = per_call;

    char tmpl[256], addr[300], dir[256] = "";
    int port = 0;
    if (exe) {
        if (dir_opt) {
            snprintf(dir, sizeof dir, "%s", dir_opt);
            if (mkdir(dir, 0755) != 0 && errno != EEXIST) die("mkdir", strerror(errno));
        } else {
            const char *t = getenv("TMPDIR");
            snprintf(tmpl, sizeof tmpl, "%s/dd_bench_bulk_XXXXXX", t && *t ? t : "/tmp");
            if (!mkdtemp(tmpl)) die("mkdtemp", strerror(errno));
            snprintf(dir, sizeof dir, "%s", tmpl);
        }
        port = tl_free_port();
        snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
        pid = start_dedupd(exe, dir, port, sets, nsets);
    } else {
        snprintf(addr, sizeof addr, "%s", addr_opt);
    }
    wait_serving(addr, port, exe ? pid : 0, dir);

    printf("bench_bulk: users=%u plays=%" PRIu64 " (cap %u per user) calls=%zu per_call<=%u "
           "inflight=%u dedupd=%s",
           users, total, cap, g_n_slices, per_call, inflight, exe ? exe : addr);
    for (int i = 0; i < nsets; i++) printf(" -o %s", sets[i]);
    printf("\n");
    fflush(stdout);

    g_now_ms = dd_now_ms();
    struct worker *ws = calloc(inflight, sizeof *ws);
    if (!ws) die("workers", "out of memory");
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    struct proc_sample s0 = sample(pid);
    static pid_t tid0[MAX_THREADS], tid1[MAX_THREADS];
    static double tcpu0[MAX_THREADS], tcpu1[MAX_THREADS];
    static char tname0[MAX_THREADS][16], tname1[MAX_THREADS][16];
    size_t nt0 = s0.ok ? thread_cpu(pid, tid0, tcpu0, tname0, MAX_THREADS) : 0;
    for (uint32_t i = 0; i < inflight; i++) {
        ws[i].addr = addr;
        if (pthread_create(&ws[i].tid, NULL, work, &ws[i]) != 0) die("thread", "cannot start");
    }
    for (uint32_t i = 0; i < inflight; i++) pthread_join(ws[i].tid, NULL);
    struct proc_sample s1 = sample(pid);
    size_t nt1 = s1.ok ? thread_cpu(pid, tid1, tcpu1, tname1, MAX_THREADS) : 0;
    getrusage(RUSAGE_SELF, &ru1);

    /* settle: until neither CPU nor writes moved for 2 s */
    struct proc_sample s2 = s1;
    if (s1.ok && settle_s > 0 && !atomic_load(&g_failed)) {
        struct proc_sample last = s1;
        int64_t still_since = s1.at_ns;
        while ((double)(dd_mono_ns() - s1.at_ns) < settle_s * 1e9) {
            usleep(250000);
            struct proc_sample s = sample(pid);
            if (!s.ok) break;
            if (s.write_bytes != last.write_bytes || s.cpu_s - last.cpu_s > 0.02) {
                still_since = s.at_ns;
                s2 = s;
            }
            last = s;
            if (s.at_ns - still_since >= 2000000000) break;
        }
    }

    const uint64_t acc = atomic_load(&g_accepted), exp = atomic_load(&g_expired);
    const uint64_t sent = acc + exp;
    const double secs = (double)(s1.at_ns - s0.at_ns) / 1e9;
    qsort(g_lat_ns, g_n_slices, sizeof *g_lat_ns, bench_cmp_i64);
    const double own_cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                           (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                           (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6 +
                           (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
    printf("load: %" PRIu64 " plays (%" PRIu64 " accepted, %" PRIu64 " expired) in %.2f s: "
           "%.3f M plays/s\n",
           sent, acc, exp, secs, (double)sent / secs / 1e6);
    printf("calls: p50 %.1f ms, p99 %.1f ms, max %.1f ms; this loader's own CPU %.1f s "
           "(%.0f ns per play)\n",
           (double)g_lat_ns[g_n_slices / 2] / 1e6, (double)g_lat_ns[g_n_slices * 99 / 100] / 1e6,
           (double)g_lat_ns[g_n_slices - 1] / 1e6, own_cpu, own_cpu * 1e9 / (double)sent);
    uint64_t retries = 0;
    for (int st = 0; st < 17; st++) {
        uint64_t n = atomic_load(&g_retries[st]);
        if (!n) continue;
        printf("%s calls retried: %" PRIu64 " (%s)\n", retries ? "  and" : "refused and",
               n, dd_client_status_name(st));
        retries += n;
    }
    double top_ns = 0;
    double cpu_pp = 0, wb_pp = 0, cpu_settled = 0, wb_settled = 0;
    if (s1.ok && s0.ok) {
        cpu_pp = (s1.cpu_s - s0.cpu_s) * 1e9 / (double)sent;
        wb_pp = (double)(s1.write_bytes - s0.write_bytes) / (double)sent;
        cpu_settled = (s2.cpu_s - s0.cpu_s) * 1e9 / (double)sent;
        wb_settled = (double)(s2.write_bytes - s0.write_bytes) / (double)sent;
        printf("dedupd during the load: CPU %.1f s (%.0f ns per play, %.2f cores), "
               "wrote %.1f MB (%.1f bytes per play)\n",
               s1.cpu_s - s0.cpu_s, cpu_pp, (s1.cpu_s - s0.cpu_s) / secs,
               (double)(s1.write_bytes - s0.write_bytes) / 1e6, wb_pp);
        /* the threads that did the load's work, busiest first: a bulk
         * load's calls are worked on synchronously by rpc.threads workers,
         * so the busiest one's CPU per play bounds the rate */
        double busy[MAX_THREADS];
        size_t idx[MAX_THREADS];
        for (size_t i = 0; i < nt1; i++) {
            busy[i] = tcpu1[i];
            for (size_t j = 0; j < nt0; j++)
                if (tid0[j] == tid1[i]) busy[i] -= tcpu0[j];
            idx[i] = i;
        }
        for (size_t i = 1; i < nt1; i++)
            for (size_t j = i; j > 0 && busy[idx[j]] > busy[idx[j - 1]]; j--) {
                size_t t = idx[j];
                idx[j] = idx[j - 1];
                idx[j - 1] = t;
            }
        printf("dedupd's busiest threads:");
        for (size_t i = 0; i < nt1 && i < 4 && busy[idx[i]] > 0.05; i++)
            printf("%s %s %.0f ns per play (%.0f%% of the time)", i ? "," : "", tname1[idx[i]],
                   busy[idx[i]] * 1e9 / (double)sent, 100 * busy[idx[i]] / secs);
        printf("\n");
        if (nt1) top_ns = busy[idx[0]] * 1e9 / (double)sent;
        printf("dedupd until settled (%.1f s after the load): CPU %.1f s (%.0f ns per play), "
               "wrote %.1f MB (%.1f bytes per play)\n",
               (double)(s2.at_ns - s1.at_ns) / 1e9, s2.cpu_s - s0.cpu_s, cpu_settled,
               (double)(s2.write_bytes - s0.write_bytes) / 1e6, wb_settled);
    } else {
        printf("dedupd's CPU and writes: not measured (no --pid, or /proc/PID unreadable)\n");
    }
    if (dir[0]) {
        g_du = 0;
        nftw(dir, du_entry, 16, FTW_PHYS);
        printf("on disk: %.1f MB (%.2f bytes per accepted play)\n", (double)g_du / 1e6,
               acc ? (double)g_du / (double)acc : 0.0);
    }
    printf("SUMMARY bulk plays=%" PRIu64 " seconds=%.2f plays_per_s=%.0f cpu_ns_per_play=%.0f "
           "bytes_written_per_play=%.1f settled_cpu_ns_per_play=%.0f "
           "settled_bytes_written_per_play=%.1f busiest_thread_ns_per_play=%.0f retries=%" PRIu64 "\n",
           sent, secs, (double)sent / secs, cpu_pp, wb_pp, cpu_settled, wb_settled, top_ns,
           retries);
    fflush(stdout);

    if (exe) {
        kill(pid, SIGTERM);
        int st = 0;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fprintf(stderr, "bench_bulk: dedupd stopped with status %d (log: %s/dedupd.log)\n",
                    st, dir);
        if (!keep && !dir_opt) bench_rm_tree(dir);
    }
    free(ws);
    free(g_slices);
    free(g_lat_ns);
    return atomic_load(&g_failed) ? 1 : 0;
}
