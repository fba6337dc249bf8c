/* SPDX-License-Identifier: Apache-2.0
 *
 * bench_history.c - the play history's three figures on a realistic load:
 * bytes on disk per stored play, the measured union false-positive rate over
 * users, and ns per candidate for a 10,000-candidate check against the
 * heaviest user with the history cached (sorting included), and the same
 * through dd_history_probe_any in request order (Filter's way, no sort).
 *
 * Load: USERS users (default 20,000); plays per user log-normal (median
 * 1,000, sigma 1.5, capped at 50,000: mean about 3,000); event times
 * uniform over the last 90 days. Plays are ingested the way the daemon
 * does: the 90 days are cut into flush rounds (default one per day); in
 * each round the clock is at the round's end and every user's plays of that
 * round are written in batches of 2,000 users, one merge operand per (user,
 * segment). So a segment gets its plays while it is open and is folded at
 * its final size once it closes, as with live ingest (coarse rounds would
 * instead make most plays arrive "late", after their segment closed). The
 * memtable is flushed after each round, as a full-size instance's would be
 * many times a day (--no-round-flush shows the cost of late plays when it
 * is not: they are stored at the full range, see history.c). Then the
 * store is compacted (closed segments are re-encoded) and measured.
 *
 * "Today" is placed PHASE of the way into its segment (default 0.5), since
 * the open segment is kept at the full range and its share of the plays
 * depends on where in the segment today falls.
 *
 *   bench_history [--users N] [--segment-days D] [--phase F] [--rounds R]
 *                 [--no-round-flush] [--lookback D] [--dir PATH]
 *                 [--keep] [--build-only] [--set KEY=VALUE]...
 *   bench_history --read-merge [--segment-days D] [--dir PATH] [--keep]
 *   bench_history --floor [--users N] [--segment-days D] (print_floor: the
 *                 fewest bits per play a day-exact store could take)
 *
 * --set changes a dedupd setting (e.g. history.index_cache_mb=0), for A/B.
 *
 * segment_days defaults to history.segment_days' default (30).
 * Every play is dated (lookbacks are exact to the day, history.h): the
 * union false-positive rate, the false negatives and the share of older
 * plays found are measured for the lookbacks 0 (the whole retention), 1,
 * 7, 30, 60 and 89. --lookback D times the heaviest user's probes with
 * that lookback (default 0, the whole retention).
 *
 * --build-only writes the store and stops after its size (no figures but
 * the load's); it implies --keep. Its "today" is the real clock's, not one
 * near day 20000, so that a dedupd opened on the store (bench/run_snapshot.py)
 * finds the plays inside its retention and serves them.
 *
 * --read-merge measures what a read costs while a user's segment is not
 * compacted: RocksDB runs the merge operator on every Get of a key with
 * merge operands. Scenarios, one user each, all in today's segment, 10,000
 * candidates (10% played, sort included), no compaction after the writes:
 *   batch:     10,000 plays in one write, then the store is reopened (the
 *              operand is recovered from the WAL into an L0 file, no base);
 *   ops:       10,000 plays as 20 writes of 500 (operands in the memtable,
 *              no base);
 *   ops-flush: the same, then a flush (which partial-merges them);
 *   base+ops:  a compacted base of 50,000 plays, then 20 writes of 20 plays
 *              (the steady state of an active user's open segment);
 *   compacted: 50,000 plays, compacted (no merge on read: the floor).
 *
 * Not a test: it prints figures and the goals; it exits non-zero only if the
 * store fails or a played item is not found.
 */
#include "arena.h"
#include "bloom.h"
#include "candset.h"
#include "config.h"
#include "dd.h"
#include "history.h"
#include "mix.h"
#include "segment.h"
#include "util.h"

#include <ftw.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DAY DD_MS_PER_DAY
#define SPAN_DAYS MIX_SPAN_DAYS
#define MAX_PLAYS MIX_MAX_PLAYS
#define NEVER_PER_USER 100
#define CANDIDATES 10000
#define REPEATS 300

static _Atomic int64_t clock_now;

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench_history: %s: %s\n", what, err);
    exit(1);
}

/* ---- --read-merge ----------------------------------------------------- */

#define RM_REPEATS 200

/* Median, p90 and min ns per candidate of sorting and probing the N
 * candidates SRC against USER; *FOUND gets the hits of the first round and
 * *MERGES the full merges the probes ran, per probe. */
static void rm_time(dd_history *h, const char *user, const uint64_t *src, size_t n, double out[3],
                    size_t *found, double *merges)
{
    uint64_t *cand = malloc(n * sizeof *cand), *tmp = malloc(n * sizeof *tmp);
    uint8_t *hit = malloc(n);
    int64_t *ns = malloc(RM_REPEATS * sizeof *ns);
    if (!cand || !tmp || !hit || !ns) die("read-merge", "out of memory");
    char err[256];
    struct dd_history_stats a, b;
    dd_history_get_stats(h, &a);
    for (int r = -20; r < RM_REPEATS; r++) {   /* 20 warm-up rounds */
        memcpy(cand, src, n * sizeof *cand);
        memset(hit, 0, n);
        int64_t t0 = dd_mono_ns();
        dd_bloom_sort_hashes(cand, NULL, n, tmp, NULL);
        if (dd_history_probe(h, "", 0, user, strlen(user), 0, cand, n, hit, err, sizeof err))
            die("probe", err);
        int64_t t1 = dd_mono_ns();
        if (r >= 0) ns[r] = t1 - t0;
        if (r == -20) {
            *found = 0;
            for (size_t j = 0; j < n; j++) *found += hit[j];
        }
    }
    dd_history_get_stats(h, &b);
    *merges = (double)(b.merges - a.merges) / (RM_REPEATS + 20);
    qsort(ns, RM_REPEATS, sizeof *ns, bench_cmp_i64);
    out[0] = (double)ns[RM_REPEATS / 2] / (double)n;
    out[1] = (double)ns[RM_REPEATS * 9 / 10] / (double)n;
    out[2] = (double)ns[0] / (double)n;
    free(cand);
    free(tmp);
    free(hit);
    free(ns);
}

static void rm_write(dd_history *h, const char *user, uint32_t seg, const uint64_t *hs, size_t n)
{
    char err[256];
    dd_history_batch *b = dd_history_batch_new();
    if (!b) die("batch", "out of memory");
    /* dated as of the store's today: the scenarios are all in today's segment */
    uint64_t *dated = malloc((n ? n : 1) * sizeof *dated);
    if (!dated) die("batch", "out of memory");
    for (size_t i = 0; i < n; i++) dated[i] = dd_history_dated(hs[i], dd_history_now_ms(h));
    if (dd_history_batch_add(b, "", 0, user, strlen(user), seg, dated, n))
        die("batch", "add failed");
    free(dated);
    if (dd_history_write(h, b, err, sizeof err)) die("write", err);
    dd_history_batch_free(b);
}

/* The play hashes of scenario user U: (U, i); candidates: 10% of them. */
static uint64_t rm_play(uint32_t u, uint32_t i)
{
    return mix_hash(((uint64_t)u << 40) ^ (2 * (uint64_t)i + 1));
}

static int read_merge(struct dd_config *cfg, const char *path, int64_t now)
{
    char err[512];
    struct dd_history_clock clk = {mix_clock_ms, &clock_now};
    dd_history *h = NULL;
    atomic_store(&clock_now, now);
    if (dd_history_open(&h, &cfg->history, &cfg->rocksdb, &clk, err, sizeof err)) die("open", err);
    uint32_t seg;
    if (dd_history_place(h, "", 0, now, &seg) != DD_HISTORY_PLACE_OK) die("place", "today");
    printf("bench_history --read-merge: segment_days=%u fp_rate=%.4f dir=%s\n",
           cfg->history.segment_days, cfg->history.fp_rate, path);

    enum { BIG = 50000, MID = 10000 };
    static uint64_t hs[BIG];
    static const char *const names[] = {"batch", "ops", "ops-flush", "base+ops", "compacted"};
    static const uint32_t plays[] = {MID, MID, MID, BIG + 20 * 20, BIG};

    /* base+ops and compacted: a compacted base of 50,000 each */
    for (uint32_t i = 0; i < BIG; i++) hs[i] = rm_play(3, i);
    rm_write(h, "base+ops", seg, hs, BIG);
    for (uint32_t i = 0; i < BIG; i++) hs[i] = rm_play(4, i);
    rm_write(h, "compacted", seg, hs, BIG);
    if (dd_history_flush(h, err, sizeof err)) die("flush", err);
    if (dd_history_compact(h, err, sizeof err)) die("compact", err);
    /* batch: one write of 10,000, then a restart */
    for (uint32_t i = 0; i < MID; i++) hs[i] = rm_play(0, i);
    rm_write(h, "batch", seg, hs, MID);
    dd_history_close(h);
    h = NULL;
    if (dd_history_open(&h, &cfg->history, &cfg->rocksdb, &clk, err, sizeof err)) die("reopen", err);
    /* ops-flush: 20 writes of 500, flushed */
    for (uint32_t w = 0; w < 20; w++) {
        for (uint32_t i = 0; i < 500; i++) hs[i] = rm_play(2, w * 500 + i);
        rm_write(h, "ops-flush", seg, hs, 500);
    }
    if (dd_history_flush(h, err, sizeof err)) die("flush", err);
    /* ops: 20 writes of 500, no base; base+ops: 20 writes of 20 */
    for (uint32_t w = 0; w < 20; w++) {
        for (uint32_t i = 0; i < 500; i++) hs[i] = rm_play(1, w * 500 + i);
        rm_write(h, "ops", seg, hs, 500);
        for (uint32_t i = 0; i < 20; i++) hs[i] = rm_play(3, BIG + w * 20 + i);
        rm_write(h, "base+ops", seg, hs, 20);
    }

    int bad = 0;
    static uint64_t src[CANDIDATES];
    for (int s = 0; s < 5; s++) {
        for (uint32_t j = 0; j < CANDIDATES; j++)
            src[j] = j % 10 == 0 ? rm_play((uint32_t)s, (uint32_t)(mix_hash(j) % plays[s]))
                                 : mix_hash(~((uint64_t)s << 40) ^ j);
        double t[3], merges = 0;
        size_t found = 0;
        rm_time(h, names[s], src, CANDIDATES, t, &found, &merges);
        printf("%-9s (%5u plays): ns per candidate median %7.1f, p90 %7.1f, min %7.1f; "
               "%.1f merges per probe; %zu of %u found (>= %u played)\n",
               names[s], plays[s], t[0], t[1], t[2], merges, found, CANDIDATES, CANDIDATES / 10);
        if (found < CANDIDATES / 10) bad = 1;
        printf("SUMMARY read_merge scenario=%s ns_per_candidate=%.1f\n", names[s], t[0]);
    }
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    if (st.corrupt_values) bad = 1;
    dd_history_close(h);
    return bad;
}

/* --floor: the fewest bits per play any store can take that answers a
 * lookback exact to the day for every D at union false-positive rate FP,
 * for this load (no store is written). An item's newest day must be told
 * apart for every D, so a user's N plays need N log2(1/FP) bits for the
 * set and N H bits for their days, H the entropy of the user's plays over
 * days (the items are distinct, their days independent of their hashes).
 * Beside it the same for today's coarse form, whose fingerprints pay
 * log2(S/FP) each and whose days cost nothing. Any real coder adds to the
 * floor (Golomb-Rice codes about 1.5 bits a fingerprint; keys and headers
 * more). */
static void print_floor(uint32_t users, int64_t now, double fp, uint32_t s_max)
{
    double plays = 0, day_bits = 0;
    uint32_t hist[MIX_SPAN_DAYS + 2];
    for (uint32_t u = 0; u < users; u++) {
        uint32_t n = mix_user_plays(u);
        memset(hist, 0, sizeof hist);
        for (uint32_t i = 0; i < n; i++) {
            int64_t t = now - mix_play_age_ms(u, i);
            int64_t age = now / DD_MS_PER_DAY - t / DD_MS_PER_DAY;
            hist[age < 0 ? 0 : age > MIX_SPAN_DAYS ? MIX_SPAN_DAYS + 1 : age]++;
        }
        double h = 0;
        for (size_t d = 0; d < sizeof hist / sizeof hist[0]; d++)
            if (hist[d]) h -= hist[d] * log2((double)hist[d] / n);
        day_bits += h; /* n * H_u */
        plays += n;
    }
    double set_bits = log2(1 / fp), days = day_bits / plays;
    printf("bench_history --floor: users=%u plays=%.0f fp_rate=%.4f S=%u\n", users, plays, fp,
           s_max);
    printf("floor, exact days: %.2f bits per play = %.3f bytes (set %.2f + days %.2f: the "
           "entropy of a play's day, per user, weighted by plays)\n",
           set_bits + days, (set_bits + days) / 8, set_bits, days);
    printf("floor, today's coarse segments: %.2f bits per play = %.3f bytes (log2(S/fp_rate))\n",
           log2(s_max / fp), log2(s_max / fp) / 8);
}

/* The scene the plays go to, and the lookback of the timed probes. */
static const char *g_scene = "";
static size_t g_scene_len;
static uint32_t g_lookback;

int main(int argc, char **argv)
{
    uint32_t users = 20000, segment_days = 0, rounds = SPAN_DAYS;
    double phase = 0.5;
    const char *dir = NULL;
    int keep = 0, round_flush = 1, rmerge = 0, build_only = 0, floor_only = 0;
    const char *set[8];
    int nset = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--users") && i + 1 < argc) users = (uint32_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--segment-days") && i + 1 < argc)
            segment_days = (uint32_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--phase") && i + 1 < argc) phase = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = (uint32_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--keep")) keep = 1;
        else if (!strcmp(argv[i], "--set") && i + 1 < argc && nset < 8) set[nset++] = argv[++i];
        else if (!strcmp(argv[i], "--build-only")) build_only = keep = 1;
        else if (!strcmp(argv[i], "--no-round-flush")) round_flush = 0;
        else if (!strcmp(argv[i], "--read-merge")) rmerge = 1;
        else if (!strcmp(argv[i], "--floor")) floor_only = 1;
        else if (!strcmp(argv[i], "--lookback") && i + 1 < argc)
            g_lookback = (uint32_t)atol(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--users N] [--segment-days D] [--phase F] "
                            "[--rounds R] [--no-round-flush] [--lookback D]\n"
                            "       [--floor]\n"
                            "       [--dir PATH] [--keep] [--build-only]\n"
                            "       %s --read-merge [--segment-days D] [--dir PATH] [--keep]\n",
                    argv[0], argv[0]);
            return 2;
        }
    }
    if (users == 0 || rounds == 0 || rounds > 10000 || phase < 0 || phase >= 1)
        die("arguments", "out of range");

    char tmpl[256], err[512];
    if (!dir) {
        const char *t = getenv("TMPDIR");
        snprintf(tmpl, sizeof tmpl, "%s/dd_bench_history_XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmpl)) die("mkdtemp", tmpl);
        dir = tmpl;
    }
    char path[300];
    snprintf(path, sizeof path, "%s/history", dir);

    struct dd_config cfg;
    if (dd_config_init(&cfg) != DD_OK) die("config", "out of memory");
    char sd[16];
    if (segment_days) {
        snprintf(sd, sizeof sd, "%u", segment_days);
        if (dd_config_set(&cfg, "history.segment_days", sd, err, sizeof err)) die("config", err);
    }
    if (dd_config_set(&cfg, "history.path", path, err, sizeof err)) die("config", err);
    for (int i = 0; i < nset; i++) {
        char key[128];
        const char *eq = strchr(set[i], '=');
        if (!eq || (size_t)(eq - set[i]) >= sizeof key) die("--set", "not KEY=VALUE");
        memcpy(key, set[i], (size_t)(eq - set[i]));
        key[eq - set[i]] = '\0';
        if (dd_config_set(&cfg, key, eq + 1, err, sizeof err)) die("config", err);
    }
    /* fsync per batch changes time, not size or lookups */
    if (dd_config_set(&cfg, "history.sync", "false", err, sizeof err)) die("config", err);
    segment_days = cfg.history.segment_days;
    const uint32_t geo_days = segment_days, seg_flag = 0;

    /* today = a day PHASE into its segment, near day 20000 */
    int64_t now = mix_now_ms(segment_days, phase);
    if (build_only) now = dd_now_ms();
    if (floor_only) {
        print_floor(users, now, cfg.history.fp_rate,
                    (cfg.history.retention_days + segment_days - 1) / segment_days + 1);
        dd_config_free(&cfg);
        if (dir == tmpl) rmdir(tmpl);
        return 0;
    }
    if (rmerge) {
        int bad = read_merge(&cfg, path, now);
        dd_config_free(&cfg);
        if (!keep) {
            bench_rm_tree(path);
            if (dir == tmpl) rmdir(tmpl);
        }
        return bad;
    }
    atomic_store(&clock_now, now - SPAN_DAYS * DAY);

    struct dd_history_clock clk = {mix_clock_ms, &clock_now};
    dd_history *h = NULL;
    if (dd_history_open(&h, &cfg.history, &cfg.rocksdb, &clk, err, sizeof err)) die("open", err);

    uint32_t s_max = (cfg.history.retention_days + geo_days - 1) / geo_days + 1;
    printf("bench_history: users=%u segment_days=%u retention_days=%u "
           "fp_rate=%.4f S=%u phase=%.2f rounds=%u round_flush=%d lookback=%u dir=%s\n",
           users, segment_days, cfg.history.retention_days, cfg.history.fp_rate, s_max, phase,
           rounds, round_flush, g_lookback, path);

    /* ---- load --------------------------------------------------------- */
    uint64_t total = 0;
    uint32_t heavy = 0;
    for (uint32_t u = 0; u < users; u++) {
        uint32_t n = mix_user_plays(u);
        total += n;
        if (n > mix_user_plays(heavy)) heavy = u;
    }
    printf("plays: %llu (mean %.0f per user), heaviest user %u with %u plays\n",
           (unsigned long long)total, (double)total / users, heavy, mix_user_plays(heavy));

    struct mix_load ml = {
        .prog = "bench_history", .h = h, .clock = &clock_now, .users = users, .rounds = rounds,
        .now = now, .scene = g_scene, .scene_len = g_scene_len, .geo_days = geo_days,
        .seg_flag = seg_flag, .round_flush = round_flush,
    };
    int64_t t0 = dd_mono_ns();
    mix_load(&ml);
    const uint64_t written = ml.written, expired = ml.expired;
    int64_t t1 = dd_mono_ns();
    atomic_store(&clock_now, now);
    if (dd_history_flush(h, err, sizeof err)) die("flush", err);
    if (dd_history_compact(h, err, sizeof err)) die("compact", err);
    struct dd_history_stats st1, st2;
    dd_history_get_stats(h, &st1);
    if (dd_history_compact(h, err, sizeof err)) die("compact", err);
    dd_history_get_stats(h, &st2);
    int64_t t2 = dd_mono_ns();
    printf("load: %.1f s (%llu plays written, %llu expired at ingest, %llu writes, "
           "%llu operands); compaction: %.1f s (second pass re-encoded %llu more)\n",
           (double)ml.write_ns / 1e9, (unsigned long long)written, (unsigned long long)expired,
           (unsigned long long)st2.writes, (unsigned long long)st2.operands_written,
           (double)(t2 - t1) / 1e9,
           (unsigned long long)(st2.segments_reduced - st1.segments_reduced));
    printf("merges %llu, segments reduced %llu, RocksDB wrote %.1f MB (WAL %.1f MB)\n",
           (unsigned long long)st2.merges, (unsigned long long)st2.segments_reduced,
           (double)st2.bytes_written / 1e6, (double)st2.wal_bytes / 1e6);

    /* ---- figures ------------------------------------------------------ */
    double bpp = (double)st2.live_sst_bytes / (double)written;
    printf("\nbytes on disk per stored play: %.3f  (SST %.1f MB / %llu plays; %.2f bits; "
           "goal <= 1.8)\n",
           bpp, (double)st2.live_sst_bytes / 1e6, (unsigned long long)written, 8 * bpp);
    if (build_only) {
        printf("SUMMARY build users=%u plays=%llu sst_bytes=%llu seconds=%.1f dir=%s\n", users,
               (unsigned long long)written, (unsigned long long)st2.live_sst_bytes,
               (double)(t2 - t0) / 1e9, path);
        dd_history_close(h);
        dd_config_free(&cfg);
        return 0;
    }

    uint64_t cand[CANDIDATES], tmp[CANDIDATES];
    uint8_t hit[CANDIDATES];
    uint64_t fp_hits = 0, probes = 0, fn = 0;
    uint64_t *mine = malloc(MAX_PLAYS * sizeof *mine), *mtmp = malloc(MAX_PLAYS * sizeof *mtmp);
    uint8_t *mhit = malloc(MAX_PLAYS);
    if (!mine || !mtmp || !mhit) die("fp", "out of memory");

    /* Day-exactness, per lookback L: the union fp over every user, the
     * plays of age <= L not found (false negatives: must be 0), and the
     * share of older plays found (false positives only) on a sample of
     * users. Ages in whole days, as the store counts them. */
    static const uint32_t lbs[] = {0, 1, 7, 30, 60, 89};
    uint32_t *midx = malloc(2 * MAX_PLAYS * sizeof *midx), *midx_tmp = midx + MAX_PLAYS;
    if (!midx) die("lookbacks", "out of memory");
    const int64_t today = dd_day_of_ms(now);
    uint64_t fn_all = 0;
    double worst_fp = 0;
    for (size_t k = 0; k < sizeof lbs / sizeof lbs[0]; k++) {
        const uint32_t span = lbs[k] ? lbs[k] : cfg.history.retention_days;
        uint64_t lfp = 0, lprobes = 0, lfn = 0, lin = 0, lold = 0, lold_found = 0;
        for (uint32_t u = 0; u < users; u++) {
            char user[16];
            int ul = snprintf(user, sizeof user, "u%u", u);
            for (uint32_t j = 0; j < NEVER_PER_USER; j++) cand[j] = mix_never_hash(u, j);
            dd_bloom_sort_hashes(cand, NULL, NEVER_PER_USER, tmp, NULL);
            memset(hit, 0, NEVER_PER_USER);
            if (dd_history_probe(h, g_scene, g_scene_len, user, (size_t)ul, lbs[k], cand,
                                 NEVER_PER_USER, hit, err, sizeof err))
                die("probe", err);
            for (uint32_t j = 0; j < NEVER_PER_USER; j++) lfp += hit[j];
            lprobes += NEVER_PER_USER;
            if (u % 97 != 0 && u != heavy) continue;
            uint32_t n = mix_user_plays(u);
            for (uint32_t i = 0; i < n; i++) {
                mine[i] = mix_play_hash(u, i);
                midx[i] = i;
            }
            dd_bloom_sort_hashes(mine, midx, n, mtmp, midx_tmp);
            memset(mhit, 0, n);
            if (dd_history_probe(h, g_scene, g_scene_len, user, (size_t)ul, lbs[k], mine, n, mhit,
                                 err, sizeof err))
                die("probe", err);
            for (uint32_t p = 0; p < n; p++) {
                int64_t age = today - dd_day_of_ms(now - mix_play_age_ms(u, midx[p]));
                if (age <= (int64_t)span) {
                    lin++;
                    lfn += !mhit[p];
                } else {
                    lold++;
                    lold_found += mhit[p];
                }
            }
        }
        double rate = 100.0 * (double)lfp / (double)lprobes;
        if (lbs[k] == 0) {
            fp_hits = lfp; /* the whole retention: the store's union fp */
            probes = lprobes;
        }
        if (rate > worst_fp) worst_fp = rate;
        fn_all += lfn;
        printf("lookback %2u: union fp %.4f%% (goal <= %.2f%%), false negatives %llu of %llu "
               "plays within it, older plays found %.4f%% of %llu\n",
               lbs[k], rate, 100 * cfg.history.fp_rate, (unsigned long long)lfn,
               (unsigned long long)lin, lold ? 100.0 * (double)lold_found / (double)lold : 0.0,
               (unsigned long long)lold);
    }
    fn += fn_all;
    free(midx);

    /* 10,000 candidates against the heaviest user, cached: 10% played */
    char huser[16];
    int hul = snprintf(huser, sizeof huser, "u%u", heavy);
    uint32_t hn = mix_user_plays(heavy);
    uint64_t src[CANDIDATES];
    for (uint32_t j = 0; j < CANDIDATES; j++)
        src[j] = j % 10 == 0 ? mix_play_hash(heavy, (uint32_t)(mix_hash(j) % hn))
                             : mix_never_hash(heavy, j);
    int64_t *ns = malloc(2 * REPEATS * sizeof *ns), *sort_ns = ns + REPEATS;
    if (!ns) die("timing", "out of memory");
    size_t found = 0;
    for (int r = -30; r < REPEATS; r++) {   /* 30 warm-up rounds */
        memcpy(cand, src, sizeof cand);
        memset(hit, 0, sizeof hit);
        int64_t a = dd_mono_ns();
        dd_bloom_sort_hashes(cand, NULL, CANDIDATES, tmp, NULL);
        int64_t m = dd_mono_ns();
        if (dd_history_probe(h, g_scene, g_scene_len, huser, (size_t)hul, g_lookback, cand,
                             CANDIDATES, hit, err,
                             sizeof err))
            die("probe", err);
        int64_t z = dd_mono_ns();
        if (r >= 0) {
            ns[r] = z - a;
            sort_ns[r] = m - a;
        }
        if (r == 0) for (uint32_t j = 0; j < CANDIDATES; j++) found += hit[j];
    }
    qsort(ns, REPEATS, sizeof *ns, bench_cmp_i64);
    qsort(sort_ns, REPEATS, sizeof *sort_ns, bench_cmp_i64);
    printf("ns per candidate (10,000 vs the heaviest user, %u plays, cached, sort included): "
           "median %.1f, p90 %.1f, min %.1f  (goal <= 100; %zu of %u found)\n",
           hn, (double)ns[REPEATS / 2] / CANDIDATES, (double)ns[REPEATS * 9 / 10] / CANDIDATES,
           (double)ns[0] / CANDIDATES, found, CANDIDATES);
    printf("  of which sorting: median %.1f ns per candidate\n",
           (double)sort_ns[REPEATS / 2] / CANDIDATES);
    const double sorted_med = (double)ns[REPEATS / 2] / CANDIDATES;
    /* The same candidates in request order through dd_history_probe_any
     * (what Filter uses: no sort). sort_ns is reused for the time spent
     * building the candidate set. */
    dd_arena *arena = dd_arena_new(0, 0);
    struct dd_candset cs;
    if (!arena || dd_candset_init(&cs, CANDIDATES) != DD_OK) die("arena", "out of memory");
    size_t found_any = 0;
    for (int r = -30; r < REPEATS; r++) {
        memset(hit, 0, sizeof hit);
        dd_arena_reset(arena);
        int64_t a = dd_mono_ns();
        /* the set is built in the timed part: Filter builds it too (its
         * duplicate pass) */
        if (dd_candset_begin(&cs, src, CANDIDATES) != DD_OK) die("candset", "out of memory");
        for (uint32_t j = 0; j < CANDIDATES; j++) dd_candset_add(&cs, j);
        int64_t m = dd_mono_ns();
        if (dd_history_probe_any(h, g_scene, g_scene_len, huser, (size_t)hul, g_lookback, &cs,
                                 hit, arena, err,
                                 sizeof err))
            die("probe_any", err);
        if (r >= 0) {
            ns[r] = dd_mono_ns() - a;
            sort_ns[r] = m - a;
        }
        if (r == 0) for (uint32_t j = 0; j < CANDIDATES; j++) found_any += hit[j];
    }
    dd_arena_free(arena);
    dd_candset_free(&cs);
    qsort(ns, REPEATS, sizeof *ns, bench_cmp_i64);
    qsort(sort_ns, REPEATS, sizeof *sort_ns, bench_cmp_i64);
    printf("ns per candidate, any order (dd_history_probe_any, as Filter): median %.1f, "
           "p90 %.1f, min %.1f  (%zu of %u found)\n",
           (double)ns[REPEATS / 2] / CANDIDATES, (double)ns[REPEATS * 9 / 10] / CANDIDATES,
           (double)ns[0] / CANDIDATES, found_any, CANDIDATES);
    printf("  of which building the candidate set (Filter's duplicate pass does): "
           "median %.1f ns per candidate\n",
           (double)sort_ns[REPEATS / 2] / CANDIDATES);
    if (found_any != found) die("probe_any", "found a different number than dd_history_probe");
    struct dd_history_stats st3;
    dd_history_get_stats(h, &st3);
    printf("block cache: %llu hits, %llu misses\n", (unsigned long long)st3.block_cache_hits,
           (unsigned long long)st3.block_cache_misses);
    printf("SUMMARY segment_days=%u lookback=%u bytes_per_play=%.3f "
           "union_fp=%.4f%% worst_lookback_fp=%.4f%% false_negatives=%llu ns_per_candidate=%.1f "
           "ns_per_candidate_any=%.1f\n",
           segment_days, g_lookback, bpp, 100.0 * (double)fp_hits / (double)probes, worst_fp,
           (unsigned long long)fn, sorted_med, (double)ns[REPEATS / 2] / CANDIDATES);

    free(ns);
    free(mine);
    free(mtmp);
    free(mhit);
    dd_history_close(h);
    dd_config_free(&cfg);
    if (!keep) {
        bench_rm_tree(path);
        if (dir == tmpl) rmdir(tmpl);
    }
    return fn ? 1 : 0;
}
