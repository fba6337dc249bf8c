/* SPDX-License-Identifier: Apache-2.0
 *
 * bench_cold.c - Filter's decision on the cold path: a store many times
 * larger than its block cache, read through direct I/O, so that most calls
 * read their user's segments from disk, as in production.
 *
 * Store: the realistic mix (mix.h: log-normal plays per user, median 1,000,
 * sigma 1.5, cap 50,000, over 90 days) for USERS users (default 400,000),
 * written as bench_history writes it (the daemon's way, round by round),
 * then compacted. It is built in DIR/history unless DIR already holds one
 * (--dir PATH with --keep: built once, reused; a store left by
 * `bench_history --users N --dir PATH --keep` is the same store).
 *
 * Variants: each --variant NAME=OPTS is a copy of that store (a checkpoint
 * in DIR/v-NAME) rewritten by a full compaction under the RocksDB options
 * OPTS (the [rocksdb] pass-through of conf/dedupd.conf, ';' between
 * options, e.g. "block_based_table_factory={block_size=4096}"), so table
 * settings can be compared on the same data; without --variant there is
 * one, "default" (history.c's settings). A copy is kept and reused with
 * --keep while the settings it would be written with (this build's
 * defaults and OPTS) are those it was written with.
 *
 * Run: every variant is reopened with a block cache of --cache-mb MiB
 * (default: the store's SST bytes / 32) and use_direct_reads=true
 * (--buffered: through the page cache instead), the page cache is dropped
 * where allowed (/proc/sys/vm/drop_caches; whether it worked is printed),
 * --warmup calls per variant load the index and filter blocks, then
 * --calls calls per variant and user choice are timed, in --slices slices
 * that alternate the variants (A B B A ...), the same users for each
 * variant. Users are chosen two ways: uniformly, and in proportion to
 * their plays (heavy users call more). A call is what Filter does with
 * the store (filter.c): 10,000 candidates (ids already hashed) put in the
 * candidate set, dd_history_probe_any over the whole retention, the hits
 * counted. Of the candidates, up to 2,000 are the user's plays, the rest
 * never played.
 *
 * Prints per variant and choice: p50/p99/p999 and mean of the call in
 * microseconds; p50/p99 of the same call made again at once (warm: its
 * blocks cached, so cold - warm is what the disk adds); block reads and
 * bytes read from disk per call and the block cache's hit rate over the
 * cold calls (RocksDB's perf context, this thread: data, index and filter
 * blocks). Not a test: it exits non-zero only if the store fails, a
 * played candidate is not found, or no call read a block while the store
 * is larger than the cache (instrumentation broken).
 *
 *   bench_cold [--users N] [--dir PATH] [--keep] [--rounds R] [--cache-mb M]
 *              [--calls N] [--warmup N] [--slices S] [--buffered] [--wall-clock]
 *              [--users-out PREFIX] [--variant NAME=OPTS]...
 *
 * --wall-clock builds the store with "now" the wall clock instead of a
 * fixed day, so that a dedupd (whose clock is the wall clock) can serve
 * it; --users-out PREFIX then writes PREFIX.uniform and PREFIX.weighted,
 * 20,000 user ids each drawn as the timed calls draw them, for loadgen's
 * --users-file, and exits (bench/run_cold_loadgen.sh does both).
 */
#include "arena.h"
#include "candset.h"
#include "config.h"
#include "dd.h"
#include "history.h"
#include "mix.h"
#include "util.h"

#include <rocksdb/c.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CANDIDATES 10000
#define PLAYED_MAX 2000
#define VARIANTS_MAX 8
#define PHASE 0.5
#define USERS_OUT 20000

static _Atomic int64_t clock_now;

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench_cold: %s: %s\n", what, err);
    exit(1);
}

static int exists(const char *dir, const char *name)
{
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* The whole of a small file into BUF (NUL-terminated); 0 or -1. */
static int read_small(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
    return 0;
}

static void write_small(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) die("write", path);
}

/* A config for a store at PATH with the history settings every run uses
 * and the pass-through options OPTS (';' between key=value pairs, braces
 * nest), CACHE_MB MiB of block cache (0: the default). */
static void make_config(struct dd_config *cfg, const char *path, const char *opts,
                        uint64_t cache_mb, int direct)
{
    char err[512];
    if (dd_config_init(cfg) != DD_OK) die("config", "out of memory");
    if (dd_config_set(cfg, "history.path", path, err, sizeof err)) die("config", err);
    if (dd_config_set(cfg, "history.sync", "false", err, sizeof err)) die("config", err);
    if (cache_mb) {
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)cache_mb);
        if (dd_config_set(cfg, "history.block_cache_mb", v, err, sizeof err)) die("config", err);
    }
    if (direct && dd_config_set(cfg, "rocksdb.use_direct_reads", "true", err, sizeof err))
        die("config", err);
    char *s = strdup(opts ? opts : "");
    if (!s) die("config", "out of memory");
    char *p = s;
    while (*p) {
        char *q = p;
        int depth = 0;
        while (*q && (depth > 0 || *q != ';')) {
            depth += *q == '{';
            depth -= *q == '}';
            q++;
        }
        int last = *q == '\0';
        *q = '\0';
        char *eq = strchr(p, '=');
        if (!eq) die("variant options", p);
        *eq = '\0';
        char key[256];
        snprintf(key, sizeof key, "rocksdb.%s", p);
        if (dd_config_set(cfg, key, eq + 1, err, sizeof err)) die("config", err);
        if (last) break;
        p = q + 1;
    }
    free(s);
}

static dd_history *open_store(struct dd_config *cfg)
{
    char err[512];
    struct dd_history_clock clk = {mix_clock_ms, &clock_now};
    dd_history *h = NULL;
    if (dd_history_open(&h, &cfg->history, &cfg->rocksdb, &clk, err, sizeof err))
        die("open", err);
    return h;
}

/* Build the mix's store at PATH: USERS users in ROUNDS rounds, flushed
 * and compacted, with the store's clock ending at NOW. */
static void build(const char *path, uint32_t users, uint32_t rounds, int64_t now)
{
    char err[512];
    struct dd_config cfg;
    make_config(&cfg, path, NULL, 0, 0);
    atomic_store(&clock_now, now - MIX_SPAN_DAYS * DD_MS_PER_DAY);
    dd_history *h = open_store(&cfg);
    printf("building the store: %u users, %u rounds, in %s\n", users, rounds, path);
    fflush(stdout);
    int64_t t0 = dd_mono_ns();
    struct mix_load ml = {
        .prog = "bench_cold", .h = h, .clock = &clock_now, .users = users, .rounds = rounds,
        .now = now, .scene = "", .scene_len = 0, .geo_days = cfg.history.segment_days,
        .seg_flag = 0, .round_flush = 1,
    };
    mix_load(&ml);
    atomic_store(&clock_now, now);
    if (dd_history_flush(h, err, sizeof err)) die("flush", err);
    if (dd_history_compact(h, err, sizeof err)) die("compact", err);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    printf("built: %llu plays in %.1f s (writes %.1f s), SST %.1f MB\n",
           (unsigned long long)ml.written, (double)(dd_mono_ns() - t0) / 1e9,
           (double)ml.write_ns / 1e9, (double)st.live_sst_bytes / 1e6);
    dd_history_close(h);
    dd_config_free(&cfg);
}

/* The table and read settings a store was last opened with, from the
 * newest OPTIONS file RocksDB wrote in PATH, into OUT ("" if none). */
static void options_summary(const char *path, char *out, size_t outlen)
{
    out[0] = '\0';
    DIR *d = opendir(path);
    if (!d) return;
    char best[300] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "OPTIONS-", 8) != 0 || strlen(e->d_name) >= sizeof best) continue;
        /* OPTIONS-NNNNNN: equal widths, so the name orders them */
        if (strcmp(e->d_name, best) > 0) snprintf(best, sizeof best, "%s", e->d_name);
    }
    closedir(d);
    if (!best[0]) return;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", path, best);
    FILE *f = fopen(p, "r");
    if (!f) return;
    static const char *const keys[] = {
        "use_direct_reads=", "block_size=", "index_type=", "partition_filters=",
        "metadata_block_size=", "filter_policy=", "whole_key_filtering=",
        "optimize_filters_for_hits=", "cache_index_and_filter_blocks=",
        "cache_index_and_filter_blocks_with_high_priority=", "pin_top_level_index_and_filter=",
        "pin_l0_filter_and_index_blocks_in_cache=", "data_block_index_type=",
    };
    char line[512];
    size_t o = 0;
    while (fgets(line, sizeof line, f)) {
        char *s = line;
        while (*s == ' ') s++;
        s[strcspn(s, "\n")] = '\0';
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
            if (strncmp(s, keys[i], strlen(keys[i])) != 0) continue;
            if (strstr(out, s)) break; /* one line per setting (several sections) */
            int n = snprintf(out + o, outlen - o, " %s", s);
            if (n > 0 && (size_t)n < outlen - o) o += (size_t)n;
            break;
        }
    }
    fclose(f);
}

/* The variant copy at DIR/v-NAME under OPTS: reused if its files were
 * written under the settings it opens with now (its stamp: this build's
 * defaults and OPTS), else a checkpoint of BASE rewritten by a full
 * compaction. */
static void make_variant(const char *base_path, const char *dir, const char *name,
                         const char *opts, char *out, size_t outlen)
{
    char err[512], stamp[1100], have[4096], now[4096];
    struct dd_config cfg;
    dd_history *h;
    snprintf(out, outlen, "%s/v-%s", dir, name);
    snprintf(stamp, sizeof stamp, "%s/v-%s.options", dir, name);
    if (exists(out, "CURRENT") && read_small(stamp, have, sizeof have) == 0) {
        make_config(&cfg, out, opts, 0, 0);
        dd_history_close(open_store(&cfg)); /* writes an OPTIONS file */
        dd_config_free(&cfg);
        options_summary(out, now, sizeof now);
        if (strcmp(have, now) == 0) {
            printf("variant %s: reusing %s\n", name, out);
            return;
        }
    }
    bench_rm_tree(out);
    remove(stamp);
    make_config(&cfg, base_path, NULL, 0, 0);
    h = open_store(&cfg);
    if (dd_history_checkpoint(h, out, err, sizeof err)) die("checkpoint", err);
    dd_history_close(h);
    dd_config_free(&cfg);

    make_config(&cfg, out, opts, 0, 0);
    h = open_store(&cfg);
    int64_t t0 = dd_mono_ns();
    if (dd_history_compact(h, err, sizeof err)) die("compact", err);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    printf("variant %s: rewritten in %.1f s, SST %.1f MB (options \"%s\")\n", name,
           (double)(dd_mono_ns() - t0) / 1e9, (double)st.live_sst_bytes / 1e6, opts);
    dd_history_close(h);
    dd_config_free(&cfg);
    options_summary(out, now, sizeof now);
    write_small(stamp, now);
}

/* ---- calls ------------------------------------------------------------ */

struct variant {
    const char *name;
    const char *opts;
    char path[1100];
    struct dd_config cfg;
    dd_history *h;
    /* per choice (0 uniform, 1 weighted) */
    int64_t *ns[2], *warm_ns[2];
    size_t n[2];
    uint64_t reads[2], bytes[2], plays[2];
    uint64_t hits[2]; /* block cache hits (the cold calls') */
};

struct caller {
    struct dd_candset cs;
    dd_arena *arena;
    uint64_t *cand;
    uint8_t *hit;
    rocksdb_perfcontext_t *pc;
    uint32_t found; /* hits of the last decide */
};

/* User number R of a run: uniform, or by plays through CUM (prefix sums). */
static uint32_t pick(uint64_t r, int weighted, const uint64_t *cum, uint32_t users)
{
    if (!weighted) return (uint32_t)(r % users);
    uint64_t x = r % cum[users];
    uint32_t lo = 0, hi = users; /* first u with cum[u + 1] > x */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cum[mid + 1] > x) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* Filter's work on the store for C's candidates against USER: the
 * candidate set, the probe, the hits counted. Returns its ns. */
static int64_t decide(struct caller *c, struct variant *v, const char *user, size_t ul)
{
    char err[512];
    memset(c->hit, 0, CANDIDATES);
    dd_arena_reset(c->arena);
    int64_t t0 = dd_mono_ns();
    if (dd_candset_begin(&c->cs, c->cand, CANDIDATES) != DD_OK) die("candset", "out of memory");
    for (uint32_t j = 0; j < CANDIDATES; j++) dd_candset_add(&c->cs, j);
    if (dd_history_probe_any(v->h, "", 0, user, ul, 0, &c->cs, c->hit, c->arena, err,
                             sizeof err))
        die("probe", err);
    uint32_t found = 0;
    for (uint32_t j = 0; j < CANDIDATES; j++) found += c->hit[j];
    int64_t t1 = dd_mono_ns();
    c->found = found;
    return t1 - t0;
}

/* One Filter decision for user U against V; when TIMED it is timed and
 * counted, then made again at once (its blocks now cached) for the warm
 * figure. Exits if a played candidate is not found. */
static void call(struct caller *c, struct variant *v, uint32_t u, uint64_t salt, int choice,
                 int timed)
{
    char user[16];
    int ul = snprintf(user, sizeof user, "u%u", u);
    uint32_t plays = mix_user_plays(u);
    uint32_t played = plays < PLAYED_MAX ? plays : PLAYED_MAX;
    /* played ones spread over the list, as a recall tier's would be */
    for (uint32_t j = 0; j < CANDIDATES; j++) c->cand[j] = mix_never_hash(u, j + (uint32_t)salt);
    /* distinct plays (a repeated hash is not a member of the set, as
     * Filter's repeats are not), from a random start */
    uint32_t first = (uint32_t)(mix_hash(salt) % plays);
    for (uint32_t k = 0; k < played; k++) {
        uint32_t pos = (uint32_t)((uint64_t)k * CANDIDATES / played);
        c->cand[pos] = mix_play_hash(u, (first + k) % plays);
    }
    rocksdb_perfcontext_reset(c->pc);
    int64_t ns = decide(c, v, user, (size_t)ul);
    for (uint32_t k = 0; k < played; k++)
        if (!c->hit[(uint64_t)k * CANDIDATES / played])
            die("probe", "a played candidate was not found");
    if (c->found < played) die("probe", "fewer hits than played candidates");
    if (!timed) return;
    size_t i = v->n[choice]++;
    v->ns[choice][i] = ns;
    v->reads[choice] += rocksdb_perfcontext_metric(c->pc, rocksdb_block_read_count);
    v->bytes[choice] += rocksdb_perfcontext_metric(c->pc, rocksdb_block_read_byte);
    v->hits[choice] += rocksdb_perfcontext_metric(c->pc, rocksdb_block_cache_hit_count);
    v->plays[choice] += plays;
    v->warm_ns[choice][i] = decide(c, v, user, (size_t)ul);
}

/* Try to drop the page cache; prints whether it worked. */
static void drop_caches(void)
{
    sync();
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
    int ok = fd >= 0 && write(fd, "3\n", 2) == 2;
    int e = errno;
    if (fd >= 0) close(fd);
    printf("page cache drop: %s\n", ok ? "done" : strerror(e));
}

int main(int argc, char **argv)
{
    uint32_t users = 400000, rounds = MIX_SPAN_DAYS, slices = 10;
    size_t calls = 20000, warmup = 2000;
    uint64_t cache_mb = 0;
    int keep = 0, direct = 1, wall = 0;
    const char *dir = NULL, *users_out = NULL;
    struct variant var[VARIANTS_MAX];
    size_t nvar = 0;
    memset(var, 0, sizeof var);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--users") && i + 1 < argc) users = (uint32_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--keep")) keep = 1;
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = (uint32_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--cache-mb") && i + 1 < argc)
            cache_mb = (uint64_t)atoll(argv[++i]);
        else if (!strcmp(argv[i], "--calls") && i + 1 < argc) calls = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--slices") && i + 1 < argc) slices = (uint32_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--buffered")) direct = 0;
        else if (!strcmp(argv[i], "--wall-clock")) wall = 1;
        else if (!strcmp(argv[i], "--users-out") && i + 1 < argc) users_out = argv[++i];
        else if (!strcmp(argv[i], "--variant") && i + 1 < argc && nvar < VARIANTS_MAX) {
            char *s = argv[++i], *eq = strchr(s, '=');
            if (!eq || eq == s) die("--variant", "NAME=OPTIONS expected");
            *eq = '\0';
            var[nvar].name = s;
            var[nvar++].opts = eq + 1;
        } else {
            fprintf(stderr,
                    "usage: %s [--users N] [--dir PATH] [--keep] [--rounds R] [--cache-mb M]\n"
                    "       [--calls N] [--warmup N] [--slices S] [--buffered] [--wall-clock]\n"
                    "       [--users-out PREFIX] [--variant NAME=OPTS]... (at most %d)\n",
                    argv[0], VARIANTS_MAX);
            return 2;
        }
    }
    if (users == 0 || rounds == 0 || rounds > 10000 || slices == 0 || calls < slices)
        die("arguments", "out of range");
    if (nvar == 0) {
        var[0].name = "default";
        var[0].opts = "";
        nvar = 1;
    }

    char tmpl[256], base[1024], meta[1100];
    if (!dir) {
        const char *t = getenv("TMPDIR");
        snprintf(tmpl, sizeof tmpl, "%s/dd_bench_cold_XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmpl)) die("mkdtemp", tmpl);
        dir = tmpl;
    }
    snprintf(base, sizeof base, "%s/history", dir);
    snprintf(meta, sizeof meta, "%s/mix.users", dir);

    /* The store's "now": near day 20000 (mix_now_ms, segment_days is
     * history's default), or the wall clock for a store dedupd is to serve
     * (--wall-clock); kept in META with the user count, for reuse. */
    struct dd_config dflt;
    make_config(&dflt, base, NULL, 0, 0);
    int64_t now = wall ? dd_now_ms() : mix_now_ms(dflt.history.segment_days, PHASE);
    dd_config_free(&dflt);

    char have[64];
    int built = 0;
    long long meta_now = 0;
    if (!exists(base, "CURRENT")) {
        built = 1;
        atomic_store(&clock_now, now);
        build(base, users, rounds, now);
        snprintf(have, sizeof have, "%u %lld\n", users, (long long)now);
        write_small(meta, have);
    } else if (read_small(meta, have, sizeof have) == 0) {
        if (sscanf(have, "%u %lld", &users, &meta_now) == 2) now = meta_now;
        printf("reusing the store in %s: %u users, now %lld ms (%s)\n", base, users,
               (long long)now, meta);
    } else {
        printf("reusing the store in %s: %u users (--users; no %s)\n", base, users, meta);
        snprintf(have, sizeof have, "%u %lld\n", users, (long long)now);
        write_small(meta, have);
    }
    atomic_store(&clock_now, now);
    for (size_t i = 0; i < nvar; i++)
        make_variant(base, dir, var[i].name, var[i].opts, var[i].path, sizeof var[i].path);

    uint64_t *cum = malloc(((size_t)users + 1) * sizeof *cum);
    if (!cum) die("users", "out of memory");
    cum[0] = 0;
    for (uint32_t u = 0; u < users; u++) cum[u + 1] = cum[u] + mix_user_plays(u);
    if (users_out) {
        /* users for loadgen --users-file, drawn as the timed calls are */
        for (int ch = 0; ch < 2; ch++) {
            char p[1100];
            snprintf(p, sizeof p, "%s.%s", users_out, ch ? "weighted" : "uniform");
            FILE *f = fopen(p, "w");
            if (!f) die("--users-out", p);
            for (uint64_t k = 0; k < USERS_OUT; k++)
                fprintf(f, "u%u\n", pick(mix_hash(0x5eed0000 ^ ((uint64_t)ch << 32) ^ k), ch,
                                         cum, users));
            if (fclose(f) != 0) die("--users-out", p);
            printf("users: %s (%d)\n", p, USERS_OUT);
        }
        free(cum);
        return 0;
    }

    /* ---- open every variant cold ---------------------------------------- */
    drop_caches();
    size_t per_slice = calls / slices;
    calls = per_slice * slices;
    uint64_t sst_max = 0;
    for (size_t i = 0; i < nvar; i++) {
        struct variant *v = &var[i];
        /* the cache is sized after the store, so open once to measure it */
        if (cache_mb == 0) {
            struct dd_config c;
            make_config(&c, v->path, v->opts, 1, 0);
            dd_history *h = open_store(&c);
            struct dd_history_stats st;
            dd_history_get_stats(h, &st);
            dd_history_close(h);
            dd_config_free(&c);
            if (st.live_sst_bytes > sst_max) sst_max = st.live_sst_bytes;
        }
    }
    if (cache_mb == 0) cache_mb = sst_max / 32 >> 20 ? sst_max / 32 >> 20 : 1;
    printf("bench_cold: users=%u plays=%llu calls=%zu per variant and choice (%u slices) "
           "warmup=%zu cache=%llu MiB direct_reads=%d candidates=%d (up to %d played)\n",
           users, (unsigned long long)cum[users], calls, slices, warmup,
           (unsigned long long)cache_mb, direct, CANDIDATES, PLAYED_MAX);
    for (size_t i = 0; i < nvar; i++) {
        struct variant *v = &var[i];
        make_config(&v->cfg, v->path, v->opts, cache_mb, direct);
        v->h = open_store(&v->cfg);
        struct dd_history_stats st;
        dd_history_get_stats(v->h, &st);
        if (st.live_sst_bytes > sst_max) sst_max = st.live_sst_bytes;
        printf("variant %s: SST %.1f MB = %.1fx the cache; options \"%s\"\n", v->name,
               (double)st.live_sst_bytes / 1e6,
               (double)st.live_sst_bytes / (double)(cache_mb << 20), v->opts);
        char as[4096];
        options_summary(v->path, as, sizeof as);
        printf("  as opened:%s\n", as);
        for (int c = 0; c < 2; c++) {
            v->ns[c] = malloc(calls * sizeof *v->ns[c]);
            v->warm_ns[c] = malloc(calls * sizeof *v->warm_ns[c]);
            if (!v->ns[c] || !v->warm_ns[c]) die("calls", "out of memory");
        }
    }
    fflush(stdout);

    struct caller c;
    c.arena = dd_arena_new(0, 0);
    c.cand = malloc(CANDIDATES * sizeof *c.cand);
    c.hit = malloc(CANDIDATES);
    if (!c.arena || !c.cand || !c.hit || dd_candset_init(&c.cs, CANDIDATES) != DD_OK)
        die("caller", "out of memory");
    rocksdb_set_perf_level(rocksdb_enable_count);
    c.pc = rocksdb_perfcontext_create();

    /* warm-up: index and filter blocks into each cache (uniform users) */
    for (size_t i = 0; i < nvar; i++)
        for (size_t k = 0; k < warmup; k++)
            call(&c, &var[i], pick(mix_hash(0xa11ce + k), 0, cum, users), k, 0, 0);

    /* slices: A B ... then the reverse, each on the same users */
    for (uint32_t s = 0; s < slices; s++) {
        for (size_t j = 0; j < nvar; j++) {
            struct variant *v = &var[s % 2 ? nvar - 1 - j : j];
            for (int choice = 0; choice < 2; choice++) {
                for (size_t k = 0; k < per_slice; k++) {
                    uint64_t r = mix_hash(((uint64_t)s << 40) ^ ((uint64_t)choice << 32) ^ k);
                    call(&c, v, pick(r, choice, cum, users), r, choice, 1);
                }
            }
        }
    }

    int bad = 0;
    static const char *const choice_name[2] = {"uniform", "weighted"};
    printf("\n%-9s %-8s %8s %8s %8s %8s %8s %8s %10s %8s %9s %10s\n", "variant", "users",
           "p50 us", "p99 us", "p999 us", "mean us", "warm p50", "warm p99", "reads/call",
           "KB/call", "cache hit", "plays/user");
    for (size_t i = 0; i < nvar; i++) {
        struct variant *v = &var[i];
        for (int ch = 0; ch < 2; ch++) {
            size_t n = v->n[ch];
            int64_t *ns = v->ns[ch], *wn = v->warm_ns[ch];
            double sum = 0;
            for (size_t k = 0; k < n; k++) sum += (double)ns[k];
            qsort(ns, n, sizeof *ns, bench_cmp_i64);
            qsort(wn, n, sizeof *wn, bench_cmp_i64);
            double p50 = (double)ns[n / 2] / 1e3, p99 = (double)ns[n * 99 / 100] / 1e3,
                   p999 = (double)ns[n * 999 / 1000] / 1e3, mean = sum / (double)n / 1e3;
            double w50 = (double)wn[n / 2] / 1e3, w99 = (double)wn[n * 99 / 100] / 1e3;
            double reads = (double)v->reads[ch] / (double)n;
            double kb = (double)v->bytes[ch] / (double)n / 1024;
            uint64_t lookups = v->hits[ch] + v->reads[ch];
            double hit = lookups ? (double)v->hits[ch] / (double)lookups : 0;
            printf("%-9s %-8s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %10.2f %8.1f %8.1f%% %10.0f\n",
                   v->name, choice_name[ch], p50, p99, p999, mean, w50, w99, reads, kb, 100 * hit,
                   (double)v->plays[ch] / (double)n);
            printf("SUMMARY variant=%s users=%s p50_us=%.1f p99_us=%.1f p999_us=%.1f mean_us=%.1f "
                   "warm_p50_us=%.1f warm_p99_us=%.1f block_reads_per_call=%.2f "
                   "kb_read_per_call=%.1f cache_hit=%.3f\n",
                   v->name, choice_name[ch], p50, p99, p999, mean, w50, w99, reads, kb, hit);
            if (v->reads[ch] == 0 && v->cfg.history.block_cache_mb << 20 < sst_max) bad = 1;
        }
    }
    printf("goals (weighted users): p99 <= 2000 us, p50 <= 600 us, <= 1.5 block reads per call\n");
    if (bad) fprintf(stderr, "bench_cold: no block was read from disk: perf context not counting?\n");

    rocksdb_perfcontext_destroy(c.pc);
    dd_candset_free(&c.cs);
    dd_arena_free(c.arena);
    free(c.cand);
    free(c.hit);
    free(cum);
    for (size_t i = 0; i < nvar; i++) {
        dd_history_close(var[i].h);
        dd_config_free(&var[i].cfg);
        for (int ch = 0; ch < 2; ch++) {
            free(var[i].ns[ch]);
            free(var[i].warm_ns[ch]);
        }
    }
    if (!keep) {
        /* what this run made: the variants, and the store if it built it */
        for (size_t i = 0; i < nvar; i++) {
            char stamp[1200];
            snprintf(stamp, sizeof stamp, "%s.options", var[i].path);
            bench_rm_tree(var[i].path);
            remove(stamp);
        }
        if (built) {
            bench_rm_tree(base);
            remove(meta);
        }
        if (dir == tmpl) rmdir(tmpl);
    }
    return bad;
}
