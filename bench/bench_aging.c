/* SPDX-License-Identifier: Apache-2.0
 *
 * bench_aging.c - the store over months, compressed in time (issue 19,
 * item 3): plays for DAYS simulated days (default 120) go through the real
 * write path (dd_history_batch_add, dd_history_write unlogged, then
 * dd_history_flush, as Kafka ingest makes windows durable) with the
 * store's injectable clock moving day by day, while RocksDB's own
 * background compactions run. Segments open, close, are re-encoded and
 * expire; after day 90 that is the steady state. Printed per simulated day:
 *
 *   - bytes written to disk per play that day: WAL + flush + compaction
 *     bytes (RocksDB statistics) / plays written that day (write
 *     amplification); the WAL is off with --durable flush (the default),
 *     as with ingest.durable = flush;
 *   - disk space: live SST bytes, and against the live data (below); and
 *     the day's peak of what the store's SST files took on disk (sampled
 *     every 50 ms), which also counts compaction outputs not yet live;
 *   - compaction CPU per play: RocksDB's compaction CPU-time histogram
 *     (its SUM), which includes the merge operator and compaction filter;
 *   - Filter's read path: a reader thread calls dd_history_probe_any for
 *     uniformly random users with 10,000 candidates (up to 1,000 of them
 *     played, the rest never), at --probe-rate calls/s, the candidate set
 *     built in the timed part as Filter's duplicate pass does. Calls made
 *     while the writer is busy are left out (on 2 cores the writer's CPU
 *     would swamp what compactions do); each day ends with at least
 *     --quiet-seconds without writes, and the calls there are classed by
 *     "rocksdb.num-running-compactions" read before and after each
 *     (either > 0: during compactions); the p99 of each class is printed,
 *     and over the whole run, per class and per call: block reads and
 *     time per read, the reader thread's CPU time, and RocksDB's timers
 *     (time in SST files; finding tables and index and filter blocks;
 *     merges; checksums and decompression; the DB mutex), which tell more
 *     reads (new files not yet cached) from slower ones (a busy disk) from
 *     more CPU from waiting off the CPU.
 *     The block cache is small (--cache-mb) and reads are direct
 *     (use_direct_reads), so they come from the disk, not the page cache.
 *
 * Live data: what a full compaction of the store would leave at that
 * moment. Every --live-every days (default 10) from day retention_days on,
 * and after the last day, a checkpoint of the store is taken (hard links;
 * under a second); after the run each checkpoint is opened with the clock
 * of its day, compacted (dead segments dropped, closed ones re-encoded,
 * operands folded) and its live SST bytes are the live data of that day. Space amplification = the
 * store's live SST bytes / that.
 *
 * Time: the store's clock is simulated, but RocksDB's ttl and
 * periodic_compaction_seconds count file ages in real seconds. Each
 * simulated day is therefore given at least --day-seconds of real time
 * (default 2; the rest of the day is slept) and both options are scaled by
 * day-seconds / 86400 (given with -o in simulated seconds; the defaults
 * mirror dd_history_open's). A day whose work took longer than
 * --day-seconds is counted as overrun: it ages files in real time faster
 * than the simulation, so ttl and periodic compactions come early.
 *
 * Load: USERS users (default 20,000) with log-normal plays over 90 days
 * (median 1,000, sigma 1.5, capped at 50,000), i.e. a steady daily rate
 * per user; user u's play i falls at a random point of the i-th slot of
 * length 90 days / plays(u). Each day is cut into --rounds-per-day rounds
 * (default 24); a round's plays are written with the clock at its end,
 * one operand per (user, segment), in batches of 2,000 users, then made
 * durable as ingest's durable point does (--durable):
 *
 *   flush  the batches unlogged, the memtables flushed at the round's end
 *          (ingest.durable = flush);
 *   wal    the batches through the WAL without an fsync each, the WAL
 *          fsync'd at the round's end (ingest.durable = wal); memtables
 *          are flushed when full (rocksdb.write_buffer_size), and the WAL
 *          bytes count as written.
 *
 * Users, their play counts and their items are the
 * other benchmarks' realistic mix (mix.h); only the play times are this
 * file's, spread evenly instead of over a fixed 90 days.
 *
 *   bench_aging [--users N] [--days D] [--rounds-per-day R] [--durable flush|wal]
 *               [--day-seconds S]
 *               [--quiet-seconds Q] [--cache-mb M] [--buffered-reads] [--probe-rate N]
 *               [--live-every D] [--full-compact-every D] [--every D]
 *               [--dir PATH] [--keep] [-o section.key=value]...
 *
 * -o sets any dedupd option, [rocksdb] ones included (compaction_style,
 * max_bytes_for_level_base, level0_file_num_compaction_trigger, ...), as
 * conf/dedupd.conf would. --full-compact-every D forces a full compaction
 * every D days (not what the daemon does). --every D prints every D-th
 * day (the summary covers all).
 *
 * Goals (issue 19): <= 60 bytes written per play, disk space <= 1.2x the
 * live data at steady state, Filter p99 during compactions within 1.5x of
 * without. Not a test: it prints figures; it exits non-zero only if the
 * store fails or a played item is not found.
 */
#include "arena.h"
#include "candset.h"
#include "config.h"
#include "dd.h"
#include "history.h"
#include "mix.h"
#include "util.h"

#include <dirent.h>
#include <rocksdb/c.h>
#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DAY DD_MS_PER_DAY
#define CANDIDATES 10000
#define USERS_PER_BATCH 2000
/* dd_history_open's ttl and periodic_compaction_seconds (history.c,
 * BASE_OPTIONS), in simulated seconds; -o rocksdb.ttl=... overrides. */
#define DEFAULT_TTL_S 0
#define DEFAULT_PERIODIC_S 2592000
/* The first simulated day: not on a segment boundary, so the first
 * segment (10 days of it written) expires within a 120-day run. */
#define DAY0 20000

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "bench_aging: %s: %s\n", what, detail);
    exit(1);
}

/* ---- the simulated clock -------------------------------------------------- */

static _Atomic int64_t clock_now;

/* ---- the load: a pure function of (user, play index) ------------------- */

/* Per user: ms between plays; play i is at slot_ms * (i + jitter(u, i))
 * after the start. */
static double *slot_ms;

static double play_at(uint32_t u, uint64_t i)
{
    return slot_ms[u] * ((double)i + mix_unit(mix_user_seed(u) ^ mix_hash(i + 0x5bd1e995ull)));
}

/* Plays of U before offset T ms (its count so far). */
static uint64_t plays_before(uint32_t u, double t)
{
    if (t <= 0) return 0;
    uint64_t i = (uint64_t)(t / slot_ms[u]);
    return play_at(u, i) < t ? i + 1 : i;
}

/* ---- helpers ------------------------------------------------------------ */

static void sleep_ns(int64_t ns)
{
    if (ns <= 0) return;
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    nanosleep(&ts, NULL);
}

/* Bytes the SST files in directory PATH take on disk (allocated blocks):
 * what the store holds at this moment, compaction outputs not yet
 * installed and files not yet deleted included. Not the WAL and MANIFEST,
 * whose space RocksDB preallocates whatever the store holds. */
static uint64_t dir_bytes(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return 0;
    uint64_t sum = 0;
    char f[1024];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        struct stat st;
        snprintf(f, sizeof f, "%s/%s", path, e->d_name);
        size_t n = strlen(e->d_name);
        if (n > 4 && !strcmp(e->d_name + n - 4, ".sst") && stat(f, &st) == 0)
            sum += (uint64_t)st.st_blocks * 512;
    }
    closedir(d);
    return sum;
}

/* P-th percentile (0..100) of N samples, sorted in place; 0 if none. */
static double pct_ms(int64_t *v, size_t n, double p)
{
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, bench_cmp_i64);
    size_t k = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return (double)v[k] / 1e6;
}

/* ---- samples of the read path ------------------------------------------ */

struct samples {
    int64_t *v;
    size_t n, cap;
};

static void samples_add(struct samples *s, int64_t x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        int64_t *p = realloc(s->v, cap * sizeof *p);
        if (!p) die("samples", "out of memory");
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = x;
}

static void samples_append(struct samples *to, const struct samples *from)
{
    for (size_t i = 0; i < from->n; i++) samples_add(to, from->v[i]);
}

struct reader {
    dd_history *h;
    const char *path;          /* the store's directory */
    _Atomic uint64_t peak_bytes; /* most dir_bytes seen since the main thread reset it */
    uint32_t users;
    uint32_t retention_days;
    double rate;               /* calls per second */
    _Atomic uint64_t start_ms; /* the simulation's start, for "plays so far" */
    atomic_int stop;
    atomic_int writing;        /* the writer is in a day's rounds */
    pthread_mutex_t mu;
    struct samples during, idle; /* this day's, ns, while not writing; under mu */
    uint64_t while_writing;      /* calls left out: the writer was busy; under mu */
    uint64_t calls, misses;      /* under mu */
    /* the whole run's block reads and their time (perf context), by class
     * [0] none running, [1] during compactions; under mu */
    uint64_t calls_by[2], reads_by[2], read_ns_by[2];
    uint64_t cpu_ns_by[2], merge_ns_by[2], unpack_ns_by[2]; /* thread CPU; merges; checksums + decompression */
    uint64_t files_ns_by[2], meta_ns_by[2]; /* in SST files; finding tables, index and filter blocks */
    uint64_t mutex_ns_by[2];                /* waiting for the DB mutex */
    int failed;
    char err[256];
};

static bool compacting(dd_history *h)
{
    uint64_t v = 0;
    return dd_history_property_int(h, "rocksdb.num-running-compactions", &v) == 0 && v > 0;
}

/* The read path at a steady rate until told to stop. Candidates: 1,000 of
 * the user's plays so far, 9,000 never played. */
static void *reader_main(void *arg)
{
    struct reader *r = arg;
    static uint64_t src[CANDIDATES];
    static uint8_t hit[CANDIDATES];
    dd_arena *arena = dd_arena_new(0, 0);
    struct dd_candset cs;
    if (!arena || dd_candset_init(&cs, CANDIDATES) != DD_OK) die("reader", "out of memory");
    uint64_t k = 0;
    const int64_t period = (int64_t)(1e9 / r->rate);
    int64_t next = dd_mono_ns();
    int64_t next_du = 0;
    /* Perf context is per thread: block reads and their time, so the two
     * classes' p99 can be told apart as more reads or slower reads. */
    rocksdb_set_perf_level(rocksdb_enable_time);
    rocksdb_perfcontext_t *pc = rocksdb_perfcontext_create();
    while (!atomic_load(&r->stop)) {
        sleep_ns(next - dd_mono_ns());
        next += period;
        if (next < dd_mono_ns()) next = dd_mono_ns();
        k++;
        if (dd_mono_ns() >= next_du) {
            /* the disk's peak, every 50 ms (a compaction writes for longer) */
            uint64_t bytes = dir_bytes(r->path);
            if (bytes > atomic_load(&r->peak_bytes)) atomic_store(&r->peak_bytes, bytes);
            next_du = dd_mono_ns() + 50000000;
        }
        uint32_t u = (uint32_t)(mix_hash(k ^ 0xabcdefull) % r->users);
        /* plays a day old at least: the writer may not have written the
         * newest round yet */
        double t = (double)(atomic_load(&clock_now) - (int64_t)atomic_load(&r->start_ms) - DAY);
        uint64_t have = plays_before(u, t);
        /* distinct plays, spread over 90 % of those still within the
         * retention a day ago (MIX_SPAN_DAYS hold user_plays) */
        double keep_days = r->retention_days > 1 ? r->retention_days - 1.0 : 0.0;
        uint64_t live = (uint64_t)((double)mix_user_plays(u) * 0.9 * keep_days / MIX_SPAN_DAYS);
        if (live > have) live = have;
        uint32_t played = 0;
        for (uint32_t j = 0; j < CANDIDATES; j++) {
            if (j % 10 == 0 && j / 10 < live) {
                uint64_t q = j / 10, spread = q * live / (CANDIDATES / 10);
                src[j] = mix_play_hash(u, have - 1 - (live > CANDIDATES / 10 ? spread : q));
                played++;
            } else {
                src[j] = mix_never_hash(u, k * CANDIDATES + j);
            }
        }
        char user[16];
        int ul = snprintf(user, sizeof user, "u%u", u);
        memset(hit, 0, sizeof hit);
        dd_arena_reset(arena);
        bool w0 = atomic_load(&r->writing);
        bool c0 = compacting(r->h);
        rocksdb_perfcontext_reset(pc);
        struct timespec ca, cb;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ca);
        int64_t a = dd_mono_ns();
        if (dd_candset_begin(&cs, src, CANDIDATES) != DD_OK) die("candset", "out of memory");
        for (uint32_t j = 0; j < CANDIDATES; j++) dd_candset_add(&cs, j);
        char err[256];
        int rc = dd_history_probe_any(r->h, "", 0, user, (size_t)ul, 0, &cs, hit, arena, err,
                                      sizeof err);
        int64_t ns = dd_mono_ns() - a;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cb);
        uint64_t cpu_ns = (uint64_t)((cb.tv_sec - ca.tv_sec) * 1000000000LL + (cb.tv_nsec - ca.tv_nsec));
        uint64_t merge_ns = rocksdb_perfcontext_metric(pc, rocksdb_merge_operator_time_nanos);
        uint64_t unpack_ns = rocksdb_perfcontext_metric(pc, rocksdb_block_checksum_time) +
                             rocksdb_perfcontext_metric(pc, rocksdb_block_decompress_time);
        uint64_t files_ns = rocksdb_perfcontext_metric(pc, rocksdb_get_from_output_files_time);
        uint64_t mutex_ns = rocksdb_perfcontext_metric(pc, rocksdb_db_mutex_lock_nanos) +
                            rocksdb_perfcontext_metric(pc, rocksdb_db_condition_wait_nanos);
        uint64_t meta_ns = rocksdb_perfcontext_metric(pc, rocksdb_find_table_nanos) +
                           rocksdb_perfcontext_metric(pc, rocksdb_read_index_block_nanos) +
                           rocksdb_perfcontext_metric(pc, rocksdb_read_filter_block_nanos);
        uint64_t nreads = rocksdb_perfcontext_metric(pc, rocksdb_block_read_count);
        uint64_t read_ns = rocksdb_perfcontext_metric(pc, rocksdb_block_read_time);
        bool c1 = compacting(r->h);
        bool w1 = atomic_load(&r->writing);
        uint32_t found = 0;
        for (uint32_t j = 0; j < CANDIDATES && j / 10 < live; j += 10) found += hit[j];
        pthread_mutex_lock(&r->mu);
        if (rc != 0 && !r->failed) {
            r->failed = 1;
            snprintf(r->err, sizeof r->err, "%s", err);
        }
        r->calls++;
        r->misses += played - found;
        if (w0 || w1) r->while_writing++;
        else {
            int c = c0 || c1;
            samples_add(c ? &r->during : &r->idle, ns);
            r->calls_by[c]++;
            r->reads_by[c] += nreads;
            r->read_ns_by[c] += read_ns;
            r->cpu_ns_by[c] += cpu_ns;
            r->merge_ns_by[c] += merge_ns;
            r->unpack_ns_by[c] += unpack_ns;
            r->files_ns_by[c] += files_ns;
            r->meta_ns_by[c] += meta_ns;
            r->mutex_ns_by[c] += mutex_ns;
        }
        pthread_mutex_unlock(&r->mu);
    }
    rocksdb_perfcontext_destroy(pc);
    dd_candset_free(&cs);
    dd_arena_free(arena);
    return NULL;
}

/* ---- checkpoints of the live data ---------------------------------------- */

struct live_point {
    uint32_t day;
    int64_t now_ms;
    uint64_t store_sst; /* the store's live SST bytes then */
    uint64_t peak;      /* the most its directory held during that day */
    uint64_t live;      /* the compacted copy's, filled in after the run */
    char dir[600];
};

/* ---- main --------------------------------------------------------------- */

/* Scale SIM simulated seconds to real ones at DAY_SECONDS per day (0 stays
 * 0: off; anything else at least 1, RocksDB's resolution). */
static uint64_t scaled(uint64_t sim, double day_seconds)
{
    if (sim == 0) return 0;
    double r = ceil((double)sim * day_seconds / 86400.0);
    return r < 1 ? 1 : (uint64_t)r;
}

int main(int argc, char **argv)
{
    uint32_t users = 20000, days = 120, rounds = 24, live_every = 10, full_every = 0, every = 1;
    uint64_t cache_mb = 8, ttl_sim = DEFAULT_TTL_S, periodic_sim = DEFAULT_PERIODIC_S;
    double day_seconds = 2.0, quiet_seconds = 0.5, probe_rate = 100;
    int keep = 0, direct = 1, wal = 0;
    char dir[512] = "", err[512];

    struct dd_config cfg;
    if (dd_config_init(&cfg) != DD_OK) die("config", "out of memory");
    static const struct option opts[] = {
        {"users", required_argument, NULL, 'u'},
        {"days", required_argument, NULL, 'D'},
        {"rounds-per-day", required_argument, NULL, 'r'},
        {"durable", required_argument, NULL, 'W'},
        {"day-seconds", required_argument, NULL, 's'},
        {"cache-mb", required_argument, NULL, 'c'},
        {"buffered-reads", no_argument, NULL, 'b'},
        {"quiet-seconds", required_argument, NULL, 'q'},
        {"probe-rate", required_argument, NULL, 'p'},
        {"live-every", required_argument, NULL, 'l'},
        {"full-compact-every", required_argument, NULL, 'f'},
        {"every", required_argument, NULL, 'e'},
        {"dir", required_argument, NULL, 'd'},
        {"keep", no_argument, NULL, 'k'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        switch (opt) {
        case 'u': users = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'D': days = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'r': rounds = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'W':
            if (!strcmp(optarg, "wal")) wal = 1;
            else if (!strcmp(optarg, "flush")) wal = 0;
            else die("--durable", "flush or wal");
            break;
        case 's': day_seconds = atof(optarg); break;
        case 'c': cache_mb = strtoull(optarg, NULL, 10); break;
        case 'b': direct = 0; break;
        case 'q': quiet_seconds = atof(optarg); break;
        case 'p': probe_rate = atof(optarg); break;
        case 'l': live_every = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'f': full_every = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'e': every = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'd': snprintf(dir, sizeof dir, "%s", optarg); break;
        case 'k': keep = 1; break;
        case 'o': {
            char *eq = strchr(optarg, '=');
            if (!eq) die("-o", "expected section.key=value");
            *eq = '\0';
            /* RocksDB counts these in real seconds: scaled below */
            if (!strcmp(optarg, "rocksdb.ttl")) ttl_sim = strtoull(eq + 1, NULL, 10);
            else if (!strcmp(optarg, "rocksdb.periodic_compaction_seconds"))
                periodic_sim = strtoull(eq + 1, NULL, 10);
            else if (dd_config_set(&cfg, optarg, eq + 1, err, sizeof err) != DD_OK)
                die(optarg, err);
            break;
        }
        default:
            fprintf(stderr,
                    "usage: bench_aging [--users N] [--days D] [--rounds-per-day R] "
                    "[--durable flush|wal]\n"
                    "                   [--day-seconds S] [--quiet-seconds Q]\n"
                    "                   [--cache-mb M]"
                    " [--buffered-reads] [--probe-rate N] [--live-every D] "
                    "[--full-compact-every D]\n"
                    "                   [--every D] [--dir PATH] [--keep] "
                    "[-o section.key=value]...\n");
            return 2;
        }
    }
    if (!users || !days || !rounds || rounds > 100000 || day_seconds < 0 || quiet_seconds < 0 ||
        probe_rate <= 0 ||
        !every)
        die("options", "out of range");

    int own_dir = !dir[0];
    if (own_dir) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/dd_bench_aging_XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) die("mkdtemp", dir);
    }
    char path[600], v[64];
    snprintf(path, sizeof path, "%s/history", dir);
    if (dd_config_set(&cfg, "history.path", path, err, sizeof err)) die("config", err);
    snprintf(v, sizeof v, "%llu", (unsigned long long)cache_mb);
    if (dd_config_set(&cfg, "history.block_cache_mb", v, err, sizeof err)) die("config", err);
    const uint64_t ttl = scaled(ttl_sim, day_seconds);
    const uint64_t periodic = scaled(periodic_sim, day_seconds);
    snprintf(v, sizeof v, "%llu", (unsigned long long)ttl);
    if (dd_config_set(&cfg, "rocksdb.ttl", v, err, sizeof err)) die("config", err);
    snprintf(v, sizeof v, "%llu", (unsigned long long)periodic);
    if (dd_config_set(&cfg, "rocksdb.periodic_compaction_seconds", v, err, sizeof err))
        die("config", err);
    if (direct && dd_config_set(&cfg, "rocksdb.use_direct_reads", "true", err, sizeof err))
        die("config", err);

    /* the load */
    slot_ms = malloc((size_t)users * sizeof *slot_ms);
    if (!slot_ms) die("load", "out of memory");
    uint64_t per90 = 0;
    for (uint32_t u = 0; u < users; u++) {
        uint32_t n = mix_user_plays(u);
        per90 += n;
        slot_ms[u] = (double)MIX_SPAN_DAYS * DAY / n;
    }

    const int64_t start = (int64_t)DAY0 * DAY;
    atomic_store(&clock_now, start);
    struct dd_history_clock clk = {mix_clock_ms, &clock_now};
    dd_history *h = NULL;
    if (dd_history_open(&h, &cfg.history, &cfg.rocksdb, &clk, err, sizeof err)) die("open", err);

    printf("bench_aging: users=%u days=%u rounds_per_day=%u durable=%s day_seconds=%.2f "
           "quiet_seconds=%.2f cache_mb=%llu direct_reads=%d probe_rate=%.0f/s segment_days=%u "
           "retention_days=%u\n"
           "  ttl=%llu s simulated (%llu s real) periodic_compaction_seconds=%llu s simulated "
           "(%llu s real) full_compact_every=%u dir=%s\n",
           users, days, rounds, wal ? "wal" : "flush", day_seconds, quiet_seconds,
           (unsigned long long)cache_mb, direct, probe_rate,
           cfg.history.segment_days, cfg.history.retention_days, (unsigned long long)ttl_sim,
           (unsigned long long)ttl, (unsigned long long)periodic_sim,
           (unsigned long long)periodic, full_every, path);
    for (size_t i = 0; i < cfg.rocksdb.len; i++)
        printf("  rocksdb.%s = %s\n", cfg.rocksdb.items[i].key, cfg.rocksdb.items[i].value);
    printf("plays: %.0f per day (%llu per 90 days, mean %.0f per user)\n",
           (double)per90 / MIX_SPAN_DAYS, (unsigned long long)per90, (double)per90 / users);
    printf("%4s %9s %7s %7s %7s %7s %8s %8s %8s %9s %6s %6s %8s %8s %s\n", "day", "plays",
           "B/play", "wal", "flush", "compact", "sst_MB", "peak_MB", "pend_MB", "cpu_us/pl",
           "n_comp", "n_idle", "p99_comp", "p99_idle", "");
    fflush(stdout);

    struct reader rd = {.h = h, .path = path, .users = users,
                        .retention_days = cfg.history.retention_days, .rate = probe_rate};
    atomic_store(&rd.start_ms, (uint64_t)start);
    pthread_mutex_init(&rd.mu, NULL);
    pthread_t rt;
    if (pthread_create(&rt, NULL, reader_main, &rd) != 0) die("reader", "pthread_create");

    size_t max_live = days / (live_every ? live_every : days) + 2;
    struct live_point *lp = calloc(max_live, sizeof *lp);
    uint32_t *nseg_user = calloc(8, sizeof *nseg_user);
    uint64_t *hs = malloc(8 * (size_t)MIX_MAX_PLAYS * sizeof *hs);
    uint32_t *segs = malloc(8 * sizeof *segs);
    uint64_t *pos = calloc(users, sizeof *pos);   /* next play index per user */
    dd_history_batch *b = dd_history_batch_new();
    if (!lp || !nseg_user || !hs || !segs || !pos || !b) die("load", "out of memory");
    dd_history_batch_set_unlogged(b, !wal);
    dd_history_batch_set_nosync(b, wal);
    size_t nlive = 0;

    /* steady state: the days after the first retention_days */
    const uint32_t steady_from = cfg.history.retention_days + 1;
    struct samples st_during = {0}, st_idle = {0}, day_d = {0}, day_i = {0};
    uint64_t st_plays = 0, st_wal = 0, st_flush = 0, st_comp = 0, st_cpu = 0, all_plays = 0;
    uint64_t overruns = 0;
    uint64_t misses = 0, calls = 0, calls_writing = 0;
    double st_sst = 0, st_days = 0;
    uint64_t st_peak = 0;
    struct dd_history_stats s0, s1;
    dd_history_get_stats(h, &s0);
    const int64_t t_run = dd_mono_ns();
    for (uint32_t d = 0; d < days; d++) {
        const int64_t t_day = dd_mono_ns();
        uint64_t plays = 0;
        atomic_store(&rd.writing, 1);
        for (uint32_t r = 0; r < rounds; r++) {
            /* the window [lo, hi) ms after the start; written at its end */
            double hi = (double)d * DAY + (double)(r + 1) * DAY / rounds;
            atomic_store(&clock_now, start + (int64_t)hi);
            for (uint32_t u0 = 0; u0 < users; u0 += USERS_PER_BATCH) {
                dd_history_batch_clear(b);
                for (uint32_t u = u0; u < users && u < u0 + USERS_PER_BATCH; u++) {
                    uint64_t end = plays_before(u, hi);
                    size_t ns = 0;
                    for (; pos[u] < end; pos[u]++) {
                        int64_t at = start + (int64_t)play_at(u, pos[u]);
                        uint32_t seg;
                        if (dd_history_place(h, "", 0, at, &seg) != DD_HISTORY_PLACE_OK)
                            die("place", "a play of this round was not placed");
                        size_t k = 0;
                        while (k < ns && segs[k] != seg) k++;
                        if (k == ns) {
                            if (ns == 8) die("place", "more than 8 segments in a round");
                            segs[ns] = seg;
                            nseg_user[ns++] = 0;
                        }
                        if (nseg_user[k] < MIX_MAX_PLAYS)
                            hs[k * MIX_MAX_PLAYS + nseg_user[k]++] =
                                dd_history_dated(mix_play_hash(u, pos[u]), at);
                    }
                    char user[16];
                    int ul = snprintf(user, sizeof user, "u%u", u);
                    for (size_t k = 0; k < ns; k++) {
                        if (dd_history_batch_add(b, "", 0, user, (size_t)ul, segs[k],
                                                 hs + k * MIX_MAX_PLAYS, nseg_user[k]))
                            die("batch", "add failed");
                        plays += nseg_user[k];
                    }
                }
                if (dd_history_write(h, b, err, sizeof err)) die("write", err);
            }
            /* what ingest's durable point does after its windows */
            if (wal ? dd_history_sync_wal(h, err, sizeof err)
                    : dd_history_flush(h, err, sizeof err))
                die(wal ? "WAL sync" : "flush", err);
        }
        if (full_every && (d + 1) % full_every == 0 &&
            dd_history_compact(h, err, sizeof err))
            die("compact", err);
        atomic_store(&rd.writing, 0);
        int64_t used = dd_mono_ns() - t_day;
        int overrun = day_seconds > 0 && (double)used > day_seconds * 1e9;
        overruns += (uint64_t)overrun;
        /* the rest of the day, and at least the quiet part: reads with
         * background compactions alone */
        int64_t rest = (int64_t)(day_seconds * 1e9) - used;
        sleep_ns(rest > (int64_t)(quiet_seconds * 1e9) ? rest : (int64_t)(quiet_seconds * 1e9));

        dd_history_get_stats(h, &s1);
        uint64_t peak = atomic_exchange(&rd.peak_bytes, 0);
        pthread_mutex_lock(&rd.mu);
        struct samples td = rd.during, ti = rd.idle;
        memset(&rd.during, 0, sizeof rd.during);
        memset(&rd.idle, 0, sizeof rd.idle);
        if (rd.failed) die("probe", rd.err);
        misses += rd.misses;
        calls += rd.calls;
        calls_writing += rd.while_writing;
        rd.misses = rd.calls = rd.while_writing = 0;
        pthread_mutex_unlock(&rd.mu);

        uint64_t wl = s1.wal_bytes - s0.wal_bytes;
        uint64_t fl = s1.flush_bytes - s0.flush_bytes, co = s1.compaction_bytes - s0.compaction_bytes;
        uint64_t cpu = s1.compaction_cpu_micros - s0.compaction_cpu_micros;
        all_plays += plays;
        if (d >= steady_from) {
            st_plays += plays;
            st_wal += wl;
            st_flush += fl;
            st_comp += co;
            st_cpu += cpu;
            st_sst += (double)s1.live_sst_bytes;
            if (peak > st_peak) st_peak = peak;
            st_days++;
            samples_append(&st_during, &td);
            samples_append(&st_idle, &ti);
        }
        samples_append(&day_d, &td);
        samples_append(&day_i, &ti);
        if ((d + 1) % every == 0 || d + 1 == days) {
            double pp = plays ? (double)plays : 1;
            printf("%4u %9llu %7.1f %7.1f %7.1f %7.1f %8.1f %8.1f %8.1f %9.2f %6zu %6zu %8.2f %8.2f"
                   "%s\n",
                   d + 1, (unsigned long long)plays, (double)(wl + fl + co) / pp, (double)wl / pp,
                   (double)fl / pp,
                   (double)co / pp, (double)s1.live_sst_bytes / 1e6, (double)peak / 1e6,
                   (double)s1.pending_compaction_bytes / 1e6,
                   (double)cpu / pp, day_d.n, day_i.n, pct_ms(day_d.v, day_d.n, 99),
                   pct_ms(day_i.v, day_i.n, 99), overrun ? " overrun" : "");
            fflush(stdout);
            day_d.n = day_i.n = 0;
        }
        free(td.v);
        free(ti.v);
        s0 = s1;

        /* a checkpoint of the live data, compacted after the run */
        bool last = d + 1 == days;
        if (live_every &&
            (last || ((d + 1) >= cfg.history.retention_days && (d + 1) % live_every == 0)) &&
            nlive < max_live) {
            struct live_point *p = &lp[nlive++];
            p->day = d + 1;
            p->now_ms = atomic_load(&clock_now);
            p->store_sst = s1.live_sst_bytes;
            p->peak = peak;
            snprintf(p->dir, sizeof p->dir, "%s/live-%u", dir, d + 1);
            if (dd_history_checkpoint(h, p->dir, err, sizeof err)) die("checkpoint", err);
        }
    }
    double run_s = (double)(dd_mono_ns() - t_run) / 1e9;
    atomic_store(&rd.stop, 1);
    pthread_join(rt, NULL);
    if (rd.failed) die("probe", rd.err);
    misses += rd.misses;
    calls += rd.calls;
    if (days > steady_from) {
        samples_append(&st_during, &rd.during);
        samples_append(&st_idle, &rd.idle);
    }
    calls_writing += rd.while_writing;
    struct dd_history_stats fin;
    dd_history_get_stats(h, &fin);
    dd_history_close(h);
    free(rd.during.v);
    free(rd.idle.v);

    /* live data: each checkpoint compacted with its day's clock */
    double st_ratio_sum = 0, ratio_max = 0, peak_max = 0;
    uint32_t st_ratio_n = 0;
    for (size_t i = 0; i < nlive; i++) {
        struct live_point *p = &lp[i];
        atomic_store(&clock_now, p->now_ms);
        dd_history *c = NULL;
        if (dd_config_set(&cfg, "history.path", p->dir, err, sizeof err)) die("config", err);
        if (dd_history_open(&c, &cfg.history, &cfg.rocksdb, &clk, err, sizeof err))
            die("open checkpoint", err);
        if (dd_history_compact(c, err, sizeof err)) die("compact checkpoint", err);
        struct dd_history_stats cs;
        dd_history_get_stats(c, &cs);
        dd_history_close(c);
        p->live = cs.live_sst_bytes;
        bench_rm_tree(p->dir);
        double ratio = p->live ? (double)p->store_sst / (double)p->live : 0;
        double pratio = p->live ? (double)p->peak / (double)p->live : 0;
        printf("live data, day %u: %.1f MB (the store compacted fully); store %.1f MB: "
               "space amplification %.2fx; that day's peak on disk %.1f MB: %.2fx\n",
               p->day, (double)p->live / 1e6, (double)p->store_sst / 1e6, ratio,
               (double)p->peak / 1e6, pratio);
        if (p->day >= steady_from) {
            st_ratio_sum += ratio;
            st_ratio_n++;
            if (ratio > ratio_max) ratio_max = ratio;
            if (pratio > peak_max) peak_max = pratio;
        }
    }

    double st_p = st_plays ? (double)st_plays : 1;
    double p99_d = pct_ms(st_during.v, st_during.n, 99), p99_i = pct_ms(st_idle.v, st_idle.n, 99);
    double p50_d = pct_ms(st_during.v, st_during.n, 50), p50_i = pct_ms(st_idle.v, st_idle.n, 50);
    printf("\nrun: %.0f s for %u days (%llu overran --day-seconds), %llu plays; "
           "%llu segments expired, %llu re-encoded, %llu merges; %llu probes (%llu while "
           "writing, left out), %llu played candidates not found\n",
           run_s, days, (unsigned long long)overruns, (unsigned long long)all_plays,
           (unsigned long long)fin.segments_expired, (unsigned long long)fin.segments_reduced,
           (unsigned long long)fin.merges, (unsigned long long)calls,
           (unsigned long long)calls_writing, (unsigned long long)misses);
    printf("steady state (days %u-%u):\n", steady_from + 1, days);
    printf("  bytes written per play: %.1f (WAL %.1f, flush %.1f, compaction %.1f)  (goal <= 60)\n",
           (double)(st_wal + st_flush + st_comp) / st_p, (double)st_wal / st_p,
           (double)st_flush / st_p, (double)st_comp / st_p);
    printf("  disk space: %.1f MB mean live SST; %.2fx the live data (mean of %u checkpoints, "
           "max %.2fx)  (goal <= 1.2x)\n",
           st_days ? st_sst / st_days / 1e6 : 0, st_ratio_n ? st_ratio_sum / st_ratio_n : 0,
           st_ratio_n, ratio_max);
    printf("  peak on disk (the store's SST files, sampled every 50 ms: compaction outputs "
           "not yet live included): %.1f MB; on checkpoint days up to %.2fx the live data\n",
           (double)st_peak / 1e6, peak_max);
    printf("  compaction CPU per play: %.2f us\n", (double)st_cpu / st_p);
    printf("  Filter read path, 10,000 candidates: during compactions p50 %.2f ms p99 %.2f ms "
           "(%zu calls); none running p50 %.2f ms p99 %.2f ms (%zu calls); p99 ratio %.2f  "
           "(goal <= 1.5)\n",
           p50_d, p99_d, st_during.n, p50_i, p99_i, st_idle.n, p99_i > 0 ? p99_d / p99_i : 0);
    for (int c = 1; c >= 0; c--) {
        double n = rd.calls_by[c] ? (double)rd.calls_by[c] : 1;
        double per = rd.reads_by[c] ? (double)rd.read_ns_by[c] / (double)rd.reads_by[c] : 0;
        printf("  %s (whole run, %llu calls): %.2f block reads per call, %.0f us per read; "
               "per call: %.0f us of the reader's CPU, of which merges %.0f us and block "
               "checksums and decompression %.0f us; wall time in SST files %.0f us, of which "
               "finding tables and reading index and filter blocks %.0f us; waiting for the DB "
               "mutex %.0f us\n",
               c ? "during compactions" : "none running", (unsigned long long)rd.calls_by[c],
               (double)rd.reads_by[c] / n, per / 1e3, (double)rd.cpu_ns_by[c] / n / 1e3,
               (double)rd.merge_ns_by[c] / n / 1e3, (double)rd.unpack_ns_by[c] / n / 1e3,
               (double)rd.files_ns_by[c] / n / 1e3, (double)rd.meta_ns_by[c] / n / 1e3,
               (double)rd.mutex_ns_by[c] / n / 1e3);
    }
    printf("SUMMARY users=%u days=%u durable=%s bytes_per_play=%.1f space_amp=%.2f "
           "peak_space_amp=%.2f cpu_us_per_play=%.2f p99_compacting_ms=%.2f p99_idle_ms=%.2f "
           "p99_ratio=%.2f overruns=%llu\n",
           users, days, wal ? "wal" : "flush", (double)(st_wal + st_flush + st_comp) / st_p,
           st_ratio_n ? st_ratio_sum / st_ratio_n : 0, peak_max, (double)st_cpu / st_p, p99_d, p99_i,
           p99_i > 0 ? p99_d / p99_i : 0, (unsigned long long)overruns);

    free(st_during.v);
    free(st_idle.v);
    free(day_d.v);
    free(day_i.v);
    free(lp);
    free(nseg_user);
    free(hs);
    free(segs);
    free(pos);
    free(slot_ms);
    dd_history_batch_free(b);
    pthread_mutex_destroy(&rd.mu);
    dd_config_free(&cfg);
    if (!keep) {
        bench_rm_tree(path);
        if (own_dir) rmdir(dir);
    }
    return misses ? 1 : 0;
}
