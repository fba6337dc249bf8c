/* SPDX-License-Identifier: Apache-2.0
 *
 * test_history.c - the play history's promises, on a real RocksDB in a
 * temporary directory with a clock the test moves: never a false negative
 * across flush, compaction and reopen; expired segments unseen before
 * compaction and gone after it; closed segments re-encoded so the union
 * false-positive rate over a user stays under history.fp_rate; lookback;
 * forget; scenes as separate namespaces; damaged values and operands fail
 * their user's reads and are counted, kept through merges and compactions,
 * listed by the scan and repaired by forget, never a crash; place()
 * verdicts; bad RocksDB options
 * named; open segments kept as a base plus a small delta folded at its
 * threshold, split headers strictly checked, many small operands.
 */
#include "arena.h"
#include "bloom.h"
#include "candset.h"
#include "config.h"
#include "metrics.h"
#include "dd.h"
#include "history.h"
#include "segment.h"
#include "testlib.h"

#include <pthread.h>
#include <time.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rocksdb/c.h>

static char root[64];
static int dir_seq;

static uint64_t item(const char *tag, uint64_t i)
{
    char id[80];
    int n = snprintf(id, sizeof id, "%s-%llu", tag, (unsigned long long)i);
    return dd_hash(id, (size_t)n);
}

/* A fresh store directory and a config pointing at it. */
static void new_config(struct dd_config *cfg, char *path, size_t pathlen)
{
    char err[256];
    snprintf(path, pathlen, "%s/db%d", root, dir_seq++);
    REQUIRE(dd_config_init(cfg) == DD_OK);
    REQUIRE(dd_config_set(cfg, "history.path", path, err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(cfg, "history.sync", "false", err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(cfg, "history.block_cache_mb", "16", err, sizeof err) == DD_OK);
}

static dd_history *open_store(const struct dd_config *cfg)
{
    char err[256] = "";
    dd_history *h = NULL;
    int rc = dd_history_open(&h, &cfg->history, &cfg->rocksdb, &tclock, err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "open: %s\n", err);
    REQUIRE(rc == DD_OK && h);
    return h;
}

/* OUT[i] = item(TAG, FIRST + i) for i < N. */
static void items(uint64_t *out, size_t n, const char *tag, uint64_t first)
{
    for (size_t i = 0; i < n; i++) out[i] = item(tag, first + i);
}

/* Close H and open its store again, as a restart does. */
static dd_history *reopen(dd_history *h, const struct dd_config *cfg)
{
    dd_history_close(h);
    return open_store(cfg);
}

/* A store in a fresh directory (new_config's settings), opened with the
 * clock at T0. */
static dd_history *fresh_store(struct dd_config *cfg, char *path, size_t pathlen)
{
    new_config(cfg, path, pathlen);
    atomic_store(&clock_now, T0);
    return open_store(cfg);
}

/* Set KEY = VALUE in CFG, which must take it. */
static void set(struct dd_config *cfg, const char *key, const char *value)
{
    char err[256] = "";
    int rc = dd_config_set(cfg, key, value, err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "%s: %s\n", key, err);
    REQUIRE(rc == DD_OK);
}

static void close_store(dd_history *h, struct dd_config *cfg)
{
    dd_history_close(h);
    dd_config_free(cfg);
}

static dd_history_batch *batch_new(void)
{
    dd_history_batch *b = dd_history_batch_new();
    REQUIRE(b);
    return b;
}

/* Write N hashes of (scene, user) played at AT_MS into segment SEG, one
 * operand, dated AT_MS. */
static void play_in(dd_history *h, const char *scene, const char *user, const uint64_t *hs,
                    size_t n, int64_t at_ms, uint32_t seg)
{
    char err[256];
    uint64_t *dated = malloc((n ? n : 1) * sizeof *dated);
    REQUIRE(dated);
    for (size_t i = 0; i < n; i++) dated[i] = dd_history_dated(hs[i], at_ms);
    dd_history_batch *b = batch_new();
    REQUIRE(dd_history_batch_add(b, scene, strlen(scene), user, strlen(user), seg, dated, n) ==
            DD_OK);
    free(dated);
    int rc = dd_history_write(h, b, err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "write: %s\n", err);
    REQUIRE(rc == DD_OK);
    dd_history_batch_free(b);
}

/* Write N hashes of (scene, user) played at AT_MS where the store places
 * them, one operand. */
static void play(dd_history *h, const char *scene, const char *user, const uint64_t *hs, size_t n,
                 int64_t at_ms)
{
    uint32_t seg;
    REQUIRE(dd_history_place(h, scene, strlen(scene), at_ms, &seg) == DD_HISTORY_PLACE_OK);
    play_in(h, scene, user, hs, n, at_ms, seg);
}

/* What dd_history_collect renders for H (the caller frees it). */
static char *history_metrics(dd_history *h)
{
    dd_prom *p = dd_prom_new();
    REQUIRE(p);
    dd_history_collect(p, h);
    size_t len;
    char *text = dd_prom_take(p, &len);
    dd_prom_free(p);
    REQUIRE(text);
    return text;
}

/* dd_history_probe_any over the N hashes as a candidate set of their
 * distinct values (dd_candset_add: a repeat is not a member): MEMBER[i]
 * says whether position i is one. */
static void probe_any_set(dd_history *h, const char *scene, const char *user, uint32_t lookback,
                          const uint64_t *hs, size_t n, uint8_t *hit, uint8_t *member,
                          dd_arena *a)
{
    char err[256];
    struct dd_candset cs;
    REQUIRE(dd_candset_init(&cs, n) == DD_OK);
    REQUIRE(dd_candset_begin(&cs, hs, n) == DD_OK);
    for (size_t i = 0; i < n; i++) member[i] = (uint8_t)dd_candset_add(&cs, (uint32_t)i);
    int rc = dd_history_probe_any(h, scene, strlen(scene), user, strlen(user), lookback, &cs, hit,
                                  a, err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "probe_any: %s\n", err);
    CHECK_EQ_INT(rc, DD_OK);
    dd_candset_free(&cs);
}

/* How many of the N hashes (any order) the store says (scene, user) has.
 * It reads PROBES_PER_COUNT times: dd_history_probe, then
 * dd_history_probe_any on the sorted hashes and on the caller's order
 * (each counts a corrupt value it meets once). */
#define PROBES_PER_COUNT 3
static size_t count_hits(dd_history *h, const char *scene, const char *user, uint32_t lookback,
                         const uint64_t *hs, size_t n)
{
    char err[256];
    uint64_t *s = malloc(n * sizeof *s), *tmp = malloc(n * sizeof *tmp);
    uint8_t *hit = calloc(n, 1);
    REQUIRE(s && tmp && hit);
    memcpy(s, hs, n * sizeof *s);
    dd_bloom_sort_hashes(s, NULL, n, tmp, NULL);
    int rc = dd_history_probe(h, scene, strlen(scene), user, strlen(user), lookback, s, n, hit,
                              err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "probe: %s\n", err);
    CHECK_EQ_INT(rc, DD_OK);
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += hit[i];
    /* dd_history_probe_any must answer the same for every member, on the
     * sorted hashes hash by hash, and on the caller's order in total */
    dd_arena *a = dd_arena_new(0, 0);
    uint8_t *hit2 = calloc(n, 1), *hit3 = calloc(n, 1), *m2 = calloc(n, 1), *m3 = calloc(n, 1);
    REQUIRE(a && hit2 && hit3 && m2 && m3);
    probe_any_set(h, scene, user, lookback, s, n, hit2, m2, a);
    probe_any_set(h, scene, user, lookback, hs, n, hit3, m3, a);
    size_t differ = 0, c2 = 0, c3 = 0;
    for (size_t i = 0; i < n; i++) {
        differ += m2[i] && hit[i] != hit2[i];
        c2 += m2[i] && hit[i];
        c3 += m3[i] && hit3[i];
    }
    CHECK_MSG(differ == 0, "probe_any differs from probe on %zu of %zu hashes", differ, n);
    CHECK_EQ_INT(c3, c2);
    free(m2);
    free(m3);
    dd_arena_free(a);
    free(hit2);
    free(hit3);
    free(s);
    free(tmp);
    free(hit);
    return c;
}

static int has(dd_history *h, const char *scene, const char *user, uint64_t x)
{
    return count_hits(h, scene, user, 0, &x, 1) == 1;
}

static void flush_compact(dd_history *h)
{
    char err[256];
    CHECK_EQ_INT(dd_history_flush(h, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_history_compact(h, err, sizeof err), DD_OK);
}

/* The probe's verdict on (scene "", USER) for the N hashes: its return code
 * (both probes must agree); *HITS counts the hits of dd_history_probe. */
static int probe_rc(dd_history *h, const char *user, const uint64_t *hs, size_t n, size_t *hits,
                    char *err, size_t errlen)
{
    uint64_t *s = malloc(n * sizeof *s), *tmp = malloc(n * sizeof *tmp);
    uint8_t *hit = calloc(n, 1), *hit2 = calloc(n, 1);
    REQUIRE(s && tmp && hit && hit2);
    memcpy(s, hs, n * sizeof *s);
    dd_bloom_sort_hashes(s, NULL, n, tmp, NULL);
    int rc = dd_history_probe(h, "", 0, user, strlen(user), 0, s, n, hit, err, errlen);
    *hits = 0;
    for (size_t i = 0; i < n; i++) *hits += hit[i];
    struct dd_candset cs;
    REQUIRE(dd_candset_init(&cs, n) == DD_OK);
    REQUIRE(dd_candset_begin(&cs, hs, n) == DD_OK);
    for (size_t i = 0; i < n; i++) dd_candset_add(&cs, (uint32_t)i);
    dd_arena *a = dd_arena_new(0, 0);
    REQUIRE(a);
    char err2[256];
    int rc2 = dd_history_probe_any(h, "", 0, user, strlen(user), 0, &cs, hit2, a, err2,
                                   sizeof err2);
    CHECK_MSG(rc2 == rc, "probe %d, probe_any %d", rc, rc2);
    dd_arena_free(a);
    dd_candset_free(&cs);
    free(s);
    free(tmp);
    free(hit);
    free(hit2);
    return rc;
}

/* ---- tests ---------------------------------------------------------------- */

/* Full disk: below history.min_free_mb every write, forget and flush is
 * refused with "no space left on device" before RocksDB sees it, counted,
 * and reported by dd_history_writable and the collector, while reads go on
 * answering from what is stored. A reserve larger than any disk stands in
 * for a full one (the integration test fills a real filesystem). */
static void test_full_disk(void)
{
    struct dd_config cfg;
    char path[128], err[256], why[256];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    uint64_t x[2] = {item("full", 1), item("full", 2)};
    play(h, "", "u", x, 1, T0);
    CHECK(dd_history_writable(h, why, sizeof why));
    dd_history_close(h);

    set(&cfg, "history.min_free_mb", "17592186044415");
    h = open_store(&cfg);
    uint32_t seg;
    REQUIRE(dd_history_place(h, "", 0, T0, &seg) == DD_HISTORY_PLACE_OK);
    dd_history_batch *b = dd_history_batch_new();
    REQUIRE(b && dd_history_batch_add(b, "", 0, "u", 1, seg, x + 1, 1) == DD_OK);
    CHECK_EQ_INT(dd_history_write(h, b, err, sizeof err), DD_ERR_IO);
    CHECK_MSG(strstr(err, "no space left on device") && strstr(err, "history.min_free_mb"),
              "write error: %s", err);
    dd_history_batch_set_unlogged(b, true);
    CHECK_EQ_INT(dd_history_write(h, b, err, sizeof err), DD_ERR_IO);
    dd_history_batch_free(b);
    CHECK_EQ_INT(dd_history_forget(h, "", 0, "u", 1, err, sizeof err), DD_ERR_IO);
    CHECK_EQ_INT(dd_history_flush(h, err, sizeof err), DD_ERR_IO);
    CHECK(!dd_history_writable(h, why, sizeof why));
    CHECK_MSG(strstr(why, "no space left on device"), "why: %s", why);
    CHECK(has(h, "", "u", x[0]));  /* reads go on; the forget did not happen */
    CHECK(!has(h, "", "u", x[1]));

    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.write_errors_no_space, 4);
    CHECK_EQ_INT(st.write_errors_other, 0);
    CHECK(!st.writable);
    CHECK(!st.wal_failed);
    CHECK(st.free_bytes > 0 && st.free_bytes != UINT64_MAX);
    CHECK(st.fs_size_bytes != UINT64_MAX && st.fs_size_bytes >= st.free_bytes);
    char *text = history_metrics(h);
    CHECK(strstr(text, "\ndedupd_history_writable 0\n") != NULL);
    CHECK(strstr(text, "\ndedupd_history_write_errors_total{kind=\"no_space\"} 4\n") != NULL);
    CHECK(strstr(text, "\ndedupd_history_free_bytes ") != NULL);
    char want[96];
    snprintf(want, sizeof want, "\ndedupd_history_filesystem_size_bytes %llu\n",
             (unsigned long long)st.fs_size_bytes);
    CHECK_MSG(strstr(text, want) != NULL, "no %s", want);
    free(text);
    dd_history_close(h);

    /* Room again (no reserve): writable, and everything written is there. */
    set(&cfg, "history.min_free_mb", "0");
    h = open_store(&cfg);
    CHECK(dd_history_writable(h, why, sizeof why));
    play(h, "", "u", x + 1, 1, T0);
    CHECK(has(h, "", "u", x[0]) && has(h, "", "u", x[1]));
    close_store(h, &cfg);
}

static void test_place(void)
{
    struct dd_config cfg;
    char path[128];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    uint32_t seg = 0;

    CHECK_EQ_INT(dd_history_now_ms(h), T0);
    CHECK_EQ_INT(dd_history_place(h, "", 0, T0, &seg), DD_HISTORY_PLACE_OK);
    CHECK_EQ_INT(seg, 20000 / 30);
    /* today and the 90 whole days before it are within retention, so a
     * play is remembered at least 90 full days whatever its time of day */
    int64_t oldest = (INT64_C(20000) - 90) * DAY;
    CHECK_EQ_INT(dd_history_place(h, "", 0, oldest, &seg), DD_HISTORY_PLACE_OK);
    CHECK_EQ_INT(seg, (20000 - 90) / 30);
    /* a play 90 days minus a millisecond before now is still accepted */
    CHECK_EQ_INT(dd_history_place(h, "", 0, T0 - 90 * DAY + 1, &seg), DD_HISTORY_PLACE_OK);
    CHECK_EQ_INT(dd_history_place(h, "", 0, oldest - 1, &seg), DD_HISTORY_PLACE_EXPIRED);
    CHECK_EQ_INT(dd_history_place(h, "", 0, -5 * DAY, &seg), DD_HISTORY_PLACE_EXPIRED);
    /* up to history.max_future_ms ahead is accepted (default one hour) */
    CHECK_EQ_INT(cfg.history.max_future_ms, 3600000);
    CHECK_EQ_INT(dd_history_place(h, "", 0, T0 + cfg.history.max_future_ms, &seg), DD_HISTORY_PLACE_OK);
    CHECK_EQ_INT(dd_history_place(h, "", 0, T0 + cfg.history.max_future_ms + 1, &seg),
                 DD_HISTORY_PLACE_FUTURE);

    /* ids too long for the key layout */
    dd_history_batch *b = batch_new();
    uint64_t x = 1;
    char *big = calloc(65536, 1);
    REQUIRE(big);
    CHECK_EQ_INT(dd_history_batch_add(b, "s", 1, big, 65536, 1, &x, 1), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_history_batch_add(b, big, 256, "u", 1, 1, &x, 1), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_history_batch_operands(b), 0);
    /* the longest legal ids work end to end */
    memset(big, 'u', 65535);
    CHECK_EQ_INT(dd_history_batch_add(b, big, 255, big, 65535, seg, &x, 1), DD_OK);
    CHECK_EQ_INT(dd_history_batch_operands(b), 1);
    CHECK(dd_history_batch_bytes(b) > 65535);
    char err[256];
    CHECK_EQ_INT(dd_history_write(h, b, err, sizeof err), DD_OK);
    uint8_t hit = 0;
    CHECK_EQ_INT(dd_history_probe(h, big, 255, big, 65535, 0, &x, 1, &hit, err, sizeof err),
                 DD_OK);
    CHECK_EQ_INT(hit, 1);
    /* One byte more: invalid on every path, never read as a store
     * failure (DD_ERR_IO) by a caller. */
    big = realloc(big, 65536);
    REQUIRE(big);
    big[65535] = 'u';
    CHECK_EQ_INT(dd_history_probe(h, "s", 1, big, 65536, 0, &x, 1, &hit, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_EQ_INT(dd_history_forget(h, "s", 1, big, 65536, err, sizeof err), DD_ERR_INVALID);
    dd_history_batch_clear(b);
    CHECK_EQ_INT(dd_history_batch_operands(b), 0);
    CHECK_EQ_INT(dd_history_batch_bytes(b), 0);
    dd_history_batch_free(b);
    dd_history_batch_free(NULL);
    free(big);
    dd_history_close(h);
    dd_history_close(NULL);
    dd_config_free(&cfg);
}

/* Plays spread over the retention, for 40 users: every one of them is found
 * after the write, after a flush, after compaction and after reopening. */
static void test_roundtrip(void)
{
    struct dd_config cfg;
    char path[128], err[256];
    dd_history *h = fresh_store(&cfg, path, sizeof path);

    enum { USERS = 40, PER = 2500 };
    uint64_t *hs = malloc(PER * sizeof *hs);
    REQUIRE(hs);
    dd_history_batch *b = batch_new();
    /* each user's plays in 5 writes, spread over 90 days */
    for (int w = 0; w < 5; w++) {
        dd_history_batch_clear(b);
        for (int u = 0; u < USERS; u++) {
            char user[32];
            snprintf(user, sizeof user, "user%d", u);
            for (int i = w * PER / 5; i < (w + 1) * PER / 5; i++) {
                uint64_t x = item(user, (uint64_t)i);
                int64_t at = T0 - (int64_t)((uint64_t)i * 89 * DAY / PER);
                uint32_t seg;
                REQUIRE(dd_history_place(h, "", 0, at, &seg) == DD_HISTORY_PLACE_OK);
                REQUIRE(dd_history_batch_add(b, "", 0, user, strlen(user), seg, &x, 1) ==
                        DD_OK);
            }
        }
        CHECK_EQ_INT(dd_history_write(h, b, err, sizeof err), DD_OK);
    }
    dd_history_batch_free(b);

    for (int stage = 0; stage < 4; stage++) {
        if (stage == 1) CHECK_EQ_INT(dd_history_flush(h, err, sizeof err), DD_OK);
        if (stage == 2) CHECK_EQ_INT(dd_history_compact(h, err, sizeof err), DD_OK);
        if (stage == 3) {
            h = reopen(h, &cfg);
        }
        size_t missed = 0;
        for (int u = 0; u < USERS; u++) {
            char user[32];
            snprintf(user, sizeof user, "user%d", u);
            items(hs, PER, user, 0);
            missed += PER - count_hits(h, "", user, 0, hs, PER);
        }
        CHECK_MSG(missed == 0, "stage %d: %zu false negatives", stage, missed);
        if (stage == 2) {
            /* counters are since open: look before the reopen */
            struct dd_history_stats st;
            dd_history_get_stats(h, &st);
            CHECK(st.merges > 0);
            CHECK(st.live_sst_bytes > 0);
            CHECK(st.block_cache_hits + st.block_cache_misses > 0);
            CHECK_EQ_INT(st.writes, 5);
            CHECK_EQ_INT(st.operands_written, USERS * PER); /* one per play here */
            CHECK_EQ_INT(st.corrupt_values, 0);
        }
    }
    /* a user who never played anything */
    items(hs, PER, "nobody", 0);
    CHECK_EQ_INT(count_hits(h, "", "nobody", 0, hs, PER), 0);
    close_store(h, &cfg);
    free(hs);
}

static void test_stats_counts_writes(void)
{
    struct dd_config cfg;
    char path[128], err[256];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    uint64_t x[3] = {item("s", 1), item("s", 2), item("s", 3)};
    play(h, "", "u", x, 3, T0);
    play(h, "", "u", x, 2, T0 - 40 * DAY);
    dd_history_batch *b = batch_new();
    CHECK_EQ_INT(dd_history_write(h, b, err, sizeof err), DD_OK); /* empty: a no-op */
    dd_history_batch_free(b);
    CHECK_EQ_INT(dd_history_flush(h, err, sizeof err), DD_OK);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.writes, 2);
    CHECK_EQ_INT(st.operands_written, 2);
    CHECK(st.wal_bytes > 0);
    CHECK(st.bytes_written > st.wal_bytes);   /* the flush wrote an SST too */
    CHECK(st.live_sst_bytes > 0);
    close_store(h, &cfg);
}

/* Write one operand of X for USER in a batch set unlogged or nosync.
 * 0 or the write's error. */
static int write_mode(dd_history *h, const char *user, uint64_t x, bool unlogged, bool nosync)
{
    char err[256];
    uint32_t seg;
    if (dd_history_place(h, "", 0, T0, &seg) != DD_HISTORY_PLACE_OK) return DD_ERR_INVALID;
    dd_history_batch *b = dd_history_batch_new();
    if (!b) return DD_ERR_NOMEM;
    dd_history_batch_set_unlogged(b, unlogged);
    dd_history_batch_set_nosync(b, nosync);
    int rc = dd_history_batch_add(b, "", 0, user, strlen(user), seg, &x, 1);
    if (rc == DD_OK) rc = dd_history_write(h, b, err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "write: %s\n", err);
    dd_history_batch_free(b);
    return rc;
}

/* ingest.durable = wal's writes: a nosync batch goes through the WAL but
 * is not fsync'd, even with history.sync = true (counted: no WAL sync per
 * write), and dd_history_sync_wal fsyncs it. It survives a crash (a child
 * process writes and _exits without closing the store); an unlogged write
 * does not (the control); a checkpoint holds it. Runs first: the child is
 * forked before RocksDB has any thread in this process. */
static void test_nosync_crash(void)
{
    struct dd_config cfg;
    char path[128], err[256];
    new_config(&cfg, path, sizeof path);
    set(&cfg, "history.sync", "true");
    uint64_t x[3] = {item("crash", 1), item("crash", 2), item("crash", 3)};
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        atomic_store(&clock_now, T0);
        dd_history *h = NULL;
        if (dd_history_open(&h, &cfg.history, &cfg.rocksdb, &tclock, err, sizeof err) != DD_OK)
            _exit(10);
        struct dd_history_stats s0, s1, s2;
        dd_history_get_stats(h, &s0);
        if (write_mode(h, "nosync", x[0], false, true) != DD_OK) _exit(11);
        if (write_mode(h, "unlogged", x[1], true, false) != DD_OK) _exit(12);
        dd_history_get_stats(h, &s1);
        if (s1.wal_syncs != s0.wal_syncs) _exit(13); /* the nosync write was fsync'd */
        if (s1.wal_bytes == s0.wal_bytes) _exit(14); /* ... or not logged */
        if (dd_history_sync_wal(h, err, sizeof err) != DD_OK) _exit(15);
        dd_history_get_stats(h, &s2);
        if (s2.wal_syncs == s1.wal_syncs) _exit(16); /* the sync did not fsync */
        if (write_mode(h, "synced", x[2], false, false) != DD_OK) _exit(17);
        _exit(0); /* no close: a crash */
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "crash writer: status %d",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    atomic_store(&clock_now, T0);
    dd_history *h = open_store(&cfg);
    CHECK(has(h, "", "nosync", x[0]));
    CHECK(!has(h, "", "unlogged", x[1]));
    CHECK(has(h, "", "synced", x[2]));
    /* A checkpoint (a snapshot's copy) holds nosync writes: it flushes
     * the memtables first. */
    uint64_t y = item("crash", 4);
    CHECK_EQ_INT(write_mode(h, "checkpoint", y, false, true), DD_OK);
    char cp[160];
    snprintf(cp, sizeof cp, "%s-copy", path);
    CHECK_EQ_INT(dd_history_checkpoint(h, cp, err, sizeof err), DD_OK);
    dd_history_close(h);
    struct dd_config ccfg;
    char cpath[128];
    new_config(&ccfg, cpath, sizeof cpath);
    set(&ccfg, "history.path", cp);
    h = open_store(&ccfg);
    CHECK(has(h, "", "checkpoint", y));
    CHECK(has(h, "", "nosync", x[0]));
    close_store(h, &ccfg);

    /* Refused as writes are: short of space. */
    set(&cfg, "history.min_free_mb", "17592186044415");
    h = open_store(&cfg);
    CHECK_EQ_INT(dd_history_sync_wal(h, err, sizeof err), DD_ERR_IO);
    CHECK_MSG(strstr(err, "no space left on device") != NULL, "sync_wal: %s", err);
    close_store(h, &cfg);
}

/* dedupd_history_pending_compaction_bytes is RocksDB's
 * rocksdb.estimate-pending-compaction-bytes: with automatic compactions
 * off, L0 files past level0_file_num_compaction_trigger are owed to
 * compaction (the gauge is above 0, in the stats and in the rendered
 * family); a full compaction pays the debt (0). */
static void test_pending_compaction(void)
{
    struct dd_config cfg;
    char path[128], err[256];
    new_config(&cfg, path, sizeof path);
    set(&cfg, "rocksdb.disable_auto_compactions", "true");
    set(&cfg, "rocksdb.level0_file_num_compaction_trigger", "2");
    atomic_store(&clock_now, T0);
    dd_history *h = open_store(&cfg);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.pending_compaction_bytes, 0);
    for (int f = 0; f < 4; f++) {  /* four L0 files, trigger 2 */
        char user[16];
        snprintf(user, sizeof user, "u%d", f);
        uint64_t x[64];
        items(x, 64, user, 0);
        play(h, "", user, x, 64, T0);
        CHECK_EQ_INT(dd_history_flush(h, err, sizeof err), DD_OK);
    }
    dd_history_get_stats(h, &st);
    CHECK_MSG(st.pending_compaction_bytes > 0, "pending after 4 L0 files: %llu",
              (unsigned long long)st.pending_compaction_bytes);
    char *text = history_metrics(h);
    char want[128];
    snprintf(want, sizeof want, "\n# TYPE dedupd_history_pending_compaction_bytes gauge\n"
             "dedupd_history_pending_compaction_bytes %llu\n",
             (unsigned long long)st.pending_compaction_bytes);
    CHECK_MSG(strstr(text, want) != NULL, "no %s in:\n%s", want, text);
    free(text);
    uint64_t v = 0;
    CHECK_EQ_INT(dd_history_property_int(h, "rocksdb.estimate-pending-compaction-bytes", &v),
                 DD_OK);
    CHECK_EQ_INT(v, st.pending_compaction_bytes);
    CHECK_EQ_INT(dd_history_property_int(h, "rocksdb.no-such-property", &v), DD_ERR_NOTFOUND);
    CHECK_EQ_INT(st.compaction_cpu_micros, 0);
    CHECK_EQ_INT(dd_history_compact(h, err, sizeof err), DD_OK);
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.pending_compaction_bytes, 0);
    /* the compaction's CPU time is counted (its merges decode and encode) */
    CHECK_MSG(st.compaction_cpu_micros > 0, "compaction CPU %llu us",
              (unsigned long long)st.compaction_cpu_micros);
    /* An automatic compaction may start after the manual one: it ends. */
    for (int i = 0; i < 1000; i++) {
        CHECK_EQ_INT(dd_history_property_int(h, "rocksdb.num-running-compactions", &v), DD_OK);
        if (v == 0) break;
        usleep(10000);
    }
    CHECK_EQ_INT(v, 0);
    close_store(h, &cfg);
}

/* history.write_mbps limits what flushes write: 1 Mbit/s makes a flush of
 * a few hundred KB take seconds (a lower bound, which a loaded host cannot
 * break). RocksDB's option string accepts a rate_limiter and ignores it:
 * the store refuses it and names history.write_mbps. */
static void test_write_limit(void)
{
    struct dd_config cfg;
    char path[128], err[256];
    new_config(&cfg, path, sizeof path);
    set(&cfg, "history.write_mbps", "1");
    set(&cfg, "history.compaction_low_cpu", "true");
    atomic_store(&clock_now, T0);
    dd_history *h = open_store(&cfg);
    enum { N = 80000 };
    uint64_t *x = malloc(N * sizeof *x);
    REQUIRE(x);
    items(x, N, "wl", 0);
    play(h, "", "wl", x, N, T0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CHECK_EQ_INT(dd_history_flush(h, err, sizeof err), DD_OK);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double took = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    /* 1 Mbit/s = 125 KB/s */
    double floor_s = (double)st.live_sst_bytes / 125000.0 * 0.7;
    CHECK_MSG(st.live_sst_bytes > 100000 && took >= floor_s,
              "flushed %llu bytes in %.2f s (limit: at least %.2f s)",
              (unsigned long long)st.live_sst_bytes, took, floor_s);
    CHECK_EQ_INT(count_hits(h, "", "wl", 0, x, 100), 100);
    close_store(h, &cfg);
    free(x);

    new_config(&cfg, path, sizeof path);
    REQUIRE(dd_config_set(&cfg, "rocksdb.rate_limiter",
                          "{id=GenericRateLimiter;rate_bytes_per_sec=1000}", err,
                          sizeof err) == DD_OK);
    h = NULL;
    CHECK_EQ_INT(dd_history_open(&h, &cfg.history, &cfg.rocksdb, &tclock, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "history.write_mbps") != NULL, "%s", err);
    CHECK(h == NULL);
    dd_config_free(&cfg);
}

/* A play past the retention is not seen, to the day, even before
 * compaction; a segment past it is deleted by a compaction (moving the
 * clock back does not bring it back). Checked for a folded value and for
 * plain operands. */
static void test_expiry(void)
{
    struct dd_config cfg;
    char path[128];
    dd_history *h = fresh_store(&cfg, path, sizeof path);

    uint64_t old[100], folded_old[100], fresh[100];
    for (int i = 0; i < 100; i++) {
        old[i] = item("old", (uint64_t)i);
        folded_old[i] = item("folded", (uint64_t)i);
        fresh[i] = item("fresh", (uint64_t)i);
    }
    /* day 19915: segment 663 (19890..19919), newest day 19919 */
    play(h, "", "u", folded_old, 100, (INT64_C(19915)) * DAY + 1000);
    flush_compact(h);          /* a folded value in an SST */
    play(h, "", "u", old, 100, (INT64_C(19915)) * DAY + 2000); /* operands, memtable */
    play(h, "", "u", fresh, 100, T0);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, old, 100), 100);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, folded_old, 100), 100);

    /* the plays of day 19915 are remembered while 19915 >= today - 90: to
     * day 20005, to the day (their segment lives until day 20009) */
    atomic_store(&clock_now, INT64_C(20005) * DAY + 5);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, old, 100), 100);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, folded_old, 100), 100);
    atomic_store(&clock_now, INT64_C(20006) * DAY + 5);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, old, 100), 0);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, folded_old, 100), 0);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, fresh, 100), 100);
    flush_compact(h); /* live segment: kept */
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.segments_expired, 0);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, old, 100), 0);
    atomic_store(&clock_now, INT64_C(20005) * DAY + 5); /* still there */
    CHECK_EQ_INT(count_hits(h, "", "u", 0, old, 100), 100);
    atomic_store(&clock_now, INT64_C(20010) * DAY + 5);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, old, 100), 0);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, folded_old, 100), 0);
    uint32_t seg;
    CHECK_EQ_INT(dd_history_place(h, "", 0, INT64_C(19915) * DAY, &seg), DD_HISTORY_PLACE_EXPIRED);

    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.segments_expired, 0);
    flush_compact(h);
    dd_history_get_stats(h, &st);
    CHECK(st.segments_expired >= 1);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, fresh, 100), 100);

    /* back in time: the expired segment is gone for good */
    atomic_store(&clock_now, T0);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, old, 100), 0);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, folded_old, 100), 0);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, fresh, 100), 100);
    close_store(h, &cfg);
}

/* Closed segments are re-encoded at count * S / fp_rate; the union fp over a
 * user with four live segments, measured on 200,000 never-played items,
 * stays under fp_rate, and every play is still found. */
static void test_reduce_fp(void)
{
    struct dd_config cfg;
    char path[128], err[256];
    dd_history *h = fresh_store(&cfg, path, sizeof path);

    enum { PER_SEG = 20000, SEGS = 4, NEVER = 200000 };
    uint64_t *hs = malloc(PER_SEG * SEGS * sizeof *hs);
    REQUIRE(hs);
    /* segments 663..666: days 19915, 19945, 19975 and today (20000) */
    for (int s = 0; s < SEGS; s++) {
        for (int i = 0; i < PER_SEG; i++) hs[s * PER_SEG + i] = item("heavy", (uint64_t)(s * PER_SEG + i));
        /* in two writes each, as ingest would */
        int64_t at = (INT64_C(19915) + 30 * s) * DAY + 1000;
        if (s == SEGS - 1) at = T0;
        play(h, "", "heavy", hs + s * PER_SEG, PER_SEG / 2, at);
        play(h, "", "heavy", hs + s * PER_SEG + PER_SEG / 2, PER_SEG / 2, at + 1000);
    }
    CHECK_EQ_INT(dd_history_flush(h, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_history_compact(h, err, sizeof err), DD_OK);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK_MSG(st.segments_reduced >= 3, "segments_reduced %llu",
              (unsigned long long)st.segments_reduced);

    CHECK_EQ_INT(count_hits(h, "", "heavy", 0, hs, PER_SEG * SEGS), PER_SEG * SEGS);
    uint64_t *never = malloc(NEVER * sizeof *never);
    REQUIRE(never);
    items(never, NEVER, "never", 0);
    size_t fp = count_hits(h, "", "heavy", 0, never, NEVER);
    double rate = (double)fp / NEVER;
    /* S = ceil(90/30)+1 = 4: each closed segment at fp_rate/4, 3 closed */
    double expect = 3 * cfg.history.fp_rate / 4;
    fprintf(stderr, "union fp %.5f (expected about %.5f, bound %.3f)\n", rate, expect,
            cfg.history.fp_rate);
    CHECK(rate <= cfg.history.fp_rate);
    CHECK(rate > expect * 0.7);   /* the closed segments really were reduced */

    /* the store shrank to about log2(S/fp) + 1.5 bits per play */
    double bits = 8.0 * (double)st.live_sst_bytes / (PER_SEG * SEGS);
    fprintf(stderr, "%.2f bits per play on disk\n", bits);

    /* the re-encoding survives another compaction and a reopen unchanged */
    CHECK_EQ_INT(dd_history_compact(h, err, sizeof err), DD_OK);
    h = reopen(h, &cfg);
    CHECK_EQ_INT(count_hits(h, "", "heavy", 0, never, NEVER), fp);
    CHECK_EQ_INT(count_hits(h, "", "heavy", 0, hs, PER_SEG * SEGS), PER_SEG * SEGS);

    uint64_t before;
    /* when today's segment closes, a compaction reduces it too (by then
     * segment 663 has expired: only 664..666 are left) */
    /* 666 (newest day 20009) closes on day 20011 and is re-encoded three
     * days later (history.c: its last operands first reach the base) */
    atomic_store(&clock_now, T0 + 13 * DAY);
    dd_history_get_stats(h, &st);
    before = st.segments_reduced;
    CHECK_EQ_INT(dd_history_compact(h, err, sizeof err), DD_OK);
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.segments_reduced - before, 0);
    atomic_store(&clock_now, T0 + 14 * DAY);
    dd_history_get_stats(h, &st);
    before = st.segments_reduced;
    CHECK_EQ_INT(dd_history_compact(h, err, sizeof err), DD_OK);
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.segments_reduced - before, 1);
    CHECK_EQ_INT(count_hits(h, "", "heavy", 0, hs + PER_SEG, PER_SEG * 3), PER_SEG * 3);
    rate = (double)count_hits(h, "", "heavy", 0, never, NEVER) / NEVER;
    CHECK(rate <= cfg.history.fp_rate);

    free(never);
    free(hs);
    close_store(h, &cfg);
}

/* Plays that reach a segment after it was re-encoded (late operands) must
 * not push its fp over fp_rate / S: they are kept beside the re-encoded
 * filter at the full range. Here as many plays arrive late as were there. */
static void test_late_plays(void)
{
    struct dd_config cfg;
    char path[128];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    enum { N = 20000, NEVER = 200000 };
    uint64_t *hs = malloc(2 * N * sizeof *hs), *never = malloc(NEVER * sizeof *never);
    REQUIRE(hs && never);
    items(hs, 2 * N, "late", 0);
    items(never, NEVER, "never-late", 0);
    int64_t at = INT64_C(19945) * DAY;            /* segment 664, closed */
    play(h, "", "u", hs, N, at);
    flush_compact(h);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.segments_reduced, 1);
    double fp1 = (double)count_hits(h, "", "u", 0, never, NEVER) / NEVER;

    /* late: once through a read (memtable), then folded for good; replays
     * of known items are not stored twice */
    play(h, "", "u", hs + N, N, at);
    play(h, "", "u", hs, N / 2, at);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, hs, 2 * N), 2 * N);
    flush_compact(h);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, hs, 2 * N), 2 * N);
    double fp2 = (double)count_hits(h, "", "u", 0, never, NEVER) / NEVER;
    double seg_fp = cfg.history.fp_rate / 4;
    fprintf(stderr, "late plays: segment fp %.5f before, %.5f after (target %.5f)\n", fp1,
            fp2, seg_fp);
    CHECK(fp1 > seg_fp * 0.8 && fp1 < seg_fp * 1.2);
    CHECK(fp2 < seg_fp * 1.2);   /* a union into the re-encoded filter would double it */

    /* more late plays on top of a split value, and a reopen */
    uint64_t more[100];
    items(more, 100, "later", 0);
    play(h, "", "u", more, 100, at);
    flush_compact(h);
    h = reopen(h, &cfg);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, more, 100), 100);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, hs, 2 * N), 2 * N);
    CHECK((double)count_hits(h, "", "u", 0, never, NEVER) / NEVER < seg_fp * 1.2);
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.corrupt_values, 0);
    free(hs);
    free(never);
    close_store(h, &cfg);
}

static void test_lookback(void)
{
    struct dd_config cfg;
    char path[128];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    uint64_t a = item("lb", 1), b = item("lb", 2);
    play(h, "", "u", &a, 1, T0 - 60 * DAY);   /* day 19940: segment 664 (19920..19949) */
    play(h, "", "u", &b, 1, T0);              /* segment 666 */

    CHECK_EQ_INT(count_hits(h, "", "u", 7, &a, 1), 0);
    CHECK_EQ_INT(count_hits(h, "", "u", 7, &b, 1), 1);
    CHECK_EQ_INT(count_hits(h, "", "u", 1, &b, 1), 1);
    CHECK_EQ_INT(count_hits(h, "", "u", 50, &a, 1), 0);   /* oldest 19951: segment 665 */
    CHECK_EQ_INT(count_hits(h, "", "u", 61, &a, 1), 1);   /* oldest 19940 */
    CHECK_EQ_INT(count_hits(h, "", "u", 0, &a, 1), 1);
    CHECK_EQ_INT(count_hits(h, "", "u", 1000, &a, 1), 1);
    close_store(h, &cfg);
}

/* Every scene's lookback is exact to the day. Plays are written day by day
 * over 121 days (the clock moving as with live ingest, flushed every week
 * so closed segments are re-encoded): at the end, for every D, exactly the
 * plays of today and the D days before it are found, none older, none
 * missed, before and after a full compaction and after a reopen; plays
 * past the retention are gone for every D. Checked for a scene listed
 * nowhere ("") and one listed in history.day_scenes ("live", now an alias
 * that writes no day segments): the same answers. Day segments written by
 * an earlier release for a listed scene are still read, to the day. */
#define LB_DAYS 121
#define LB_PER_DAY 3
static void check_day_lookback(dd_history *h, const char *scene, const char *when)
{
    static const uint32_t ds[] = {1, 2, 7, 13, 29, 30, 31, 60, 89, 90, 0};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
        uint32_t d = ds[k] ? ds[k] : 90; /* 0: the whole retention */
        size_t bad = 0;
        for (int age = 0; age < LB_DAYS; age++) {
            uint64_t hs[LB_PER_DAY];
            items(hs, LB_PER_DAY, "day", (uint64_t)(age * 10));
            size_t want = (uint32_t)age <= d ? LB_PER_DAY : 0;
            size_t got = count_hits(h, scene, "u", ds[k], hs, LB_PER_DAY);
            if (got != want) {
                if (bad++ < 5)
                    fprintf(stderr,
                            "%s, scene \"%s\": lookback %u, plays %d days ago: %zu of %d found, "
                            "want %zu\n",
                            when, scene, ds[k], age, got, LB_PER_DAY, want);
            }
        }
        CHECK_EQ_INT(bad, 0);
    }
}

static void test_day_lookback(void)
{
    char err[256];
    struct dd_config cfg;
    char path[128];
    new_config(&cfg, path, sizeof path);
    /* small enough that no check below meets a false positive */
    set(&cfg, "history.fp_rate", "0.00001");
    const int64_t first = T0 - (int64_t)(LB_DAYS - 1) * DAY;

    /* "live" before it is a day scene: segment_days segments */
    atomic_store(&clock_now, T0 - 60 * DAY);
    dd_history *h = open_store(&cfg);
    uint64_t legacy = item("legacy", 1);
    play(h, "live", "old", &legacy, 1, T0 - 60 * DAY); /* day 19940: segment 664 */
    dd_history_close(h);

    set(&cfg, "history.day_scenes", " live , x");
    atomic_store(&clock_now, first);
    h = open_store(&cfg);
    CHECK(dd_history_day_scene(h, "live", 4));
    CHECK(dd_history_day_scene(h, "x", 1));
    CHECK(!dd_history_day_scene(h, "", 0));
    CHECK(!dd_history_day_scene(h, "liv", 3));
    uint32_t seg;
    CHECK_EQ_INT(dd_history_place(h, "live", 4, first, &seg), DD_HISTORY_PLACE_OK);
    CHECK(!dd_segment_is_day(seg)); /* the alias writes no day segment */
    CHECK_EQ_INT(dd_history_place(h, "", 0, first, &seg), DD_HISTORY_PLACE_OK);
    CHECK(!dd_segment_is_day(seg));

    for (int64_t day = 0; day < LB_DAYS; day++) {
        int64_t now = first + day * DAY + 3600 * 1000;
        atomic_store(&clock_now, now);
        int age = LB_DAYS - 1 - (int)day;
        uint64_t hs[LB_PER_DAY];
        items(hs, LB_PER_DAY, "day", (uint64_t)(age * 10));
        play(h, "live", "u", hs, LB_PER_DAY, now);
        play(h, "", "u", hs, LB_PER_DAY, now);
        if (day % 7 == 6) flush_compact(h);
    }
    /* a day segment as an earlier release wrote it for the listed scene:
     * read, to its day (10 days ago), until it expires */
    uint64_t daily = item("daily", 1);
    atomic_store(&clock_now, T0 - 10 * DAY);
    play_in(h, "live", "d", &daily, 1, T0 - 10 * DAY, dd_day_segment(20000 - 10));

    atomic_store(&clock_now, T0 + 7200 * 1000);
    check_day_lookback(h, "", "before compaction");
    check_day_lookback(h, "live", "before compaction");
    flush_compact(h);
    check_day_lookback(h, "", "after compaction");
    check_day_lookback(h, "live", "after compaction");
    h = reopen(h, &cfg);
    check_day_lookback(h, "", "after reopen");
    check_day_lookback(h, "live", "after reopen");

    /* 20 days back is not found with a 7-day lookback, though it is in the
     * open 30-day segment (19980..20009 for today 20000) */
    uint64_t a20 = item("day", 200);
    CHECK_EQ_INT(count_hits(h, "", "u", 7, &a20, 1), 0);
    CHECK_EQ_INT(count_hits(h, "", "u", 20, &a20, 1), 1);
    CHECK_EQ_INT(count_hits(h, "live", "u", 7, &a20, 1), 0);
    CHECK_EQ_INT(count_hits(h, "live", "d", 9, &daily, 1), 0);
    CHECK_EQ_INT(count_hits(h, "live", "d", 10, &daily, 1), 1);
    CHECK_EQ_INT(count_hits(h, "live", "d", 0, &daily, 1), 1);

    /* the play written before "live" was listed (dated too) */
    CHECK_EQ_INT(count_hits(h, "live", "old", 7, &legacy, 1), 0);
    CHECK_EQ_INT(count_hits(h, "live", "old", 50, &legacy, 1), 0);
    CHECK_EQ_INT(count_hits(h, "live", "old", 61, &legacy, 1), 1);
    CHECK_EQ_INT(count_hits(h, "live", "old", 0, &legacy, 1), 1);

    /* forget deletes both kinds */
    CHECK_EQ_INT(dd_history_forget(h, "live", 4, "u", 1, err, sizeof err), DD_OK);
    uint64_t a0 = item("day", 0);
    CHECK_EQ_INT(count_hits(h, "live", "u", 0, &a0, 1), 0);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, &a0, 1), 1);
    close_store(h, &cfg);
}

/* A user with plays on every day of the retention (91 days, 4 live
 * segments), in a scene listed nowhere: once compacted, closed segments
 * are re-encoded at fp_rate / S, and the union false-positive rate stays
 * under fp_rate for every lookback, each play found by every lookback
 * that covers its day. */
static void test_dated_fp(void)
{
    struct dd_config cfg;
    char path[128];
    new_config(&cfg, path, sizeof path);
    enum { PER_DAY = 200, NEVER = 100000 };
    atomic_store(&clock_now, T0 - 90 * DAY);
    dd_history *h = open_store(&cfg);
    static uint64_t hs[PER_DAY];
    for (int64_t day = 0; day <= 90; day++) {
        int64_t now = T0 - (90 - day) * DAY;
        atomic_store(&clock_now, now);
        items(hs, PER_DAY, "fp", (uint64_t)(day * PER_DAY));
        play(h, "live", "u", hs, PER_DAY, now);
    }
    flush_compact(h);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK(st.segments_reduced >= 2);
    uint64_t *never = malloc(NEVER * sizeof *never);
    REQUIRE(never);
    items(never, NEVER, "never", 0);
    static const uint32_t lbs[] = {0, 1, 7, 30, 60, 89};
    for (size_t k = 0; k < sizeof lbs / sizeof lbs[0]; k++) {
        uint32_t span = lbs[k] ? lbs[k] : 90;
        size_t found = 0, want = 0;
        for (int64_t age = 0; age <= 90; age++) {
            items(hs, PER_DAY, "fp", (uint64_t)((90 - age) * PER_DAY));
            size_t got = count_hits(h, "live", "u", lbs[k], hs, PER_DAY);
            found += got;
            if (age <= span) want += PER_DAY;
            if (age <= span) CHECK_EQ_INT(got, PER_DAY);
        }
        /* older plays may be false positives, at the rate never-played
         * items are */
        size_t older = 91 * PER_DAY - want;
        CHECK_MSG(found >= want && (double)(found - want) <= older * cfg.history.fp_rate * 1.5 + 3,
                  "lookback %u: %zu found, want %zu", lbs[k], found, want);
        size_t fp = count_hits(h, "live", "u", lbs[k], never, NEVER);
        double rate = (double)fp / NEVER;
        fprintf(stderr, "dated union fp, lookback %u: %.4f%% (fp_rate %.2f%%)\n", lbs[k],
                100 * rate, 100 * cfg.history.fp_rate);
        CHECK(rate < cfg.history.fp_rate * 1.2);
        if (lbs[k] == 0) CHECK(rate > cfg.history.fp_rate / 20); /* re-encoded */
    }
    free(never);
    close_store(h, &cfg);
}

/* history.day_scenes values: blanks trimmed, empty entries, over-long
 * scenes and too many scenes refused with the key's name. */
static void test_day_scenes_config(void)
{
    char err[256];
    CHECK_EQ_INT(dd_history_check_day_scenes("", err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_history_check_day_scenes(NULL, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_history_check_day_scenes(" a,b ,c", err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_history_check_day_scenes("a,,b", err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "history.day_scenes: empty scene") != NULL);
    CHECK_EQ_INT(dd_history_check_day_scenes("a,", err, sizeof err), DD_ERR_INVALID);
    char big[300];
    memset(big, 's', 256);
    big[256] = '\0';
    CHECK_EQ_INT(dd_history_check_day_scenes(big, err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "longer than 255") != NULL);
    char many[4 * (DD_DAY_SCENES_MAX + 1) + 1];
    size_t o = 0;
    for (int i = 0; i <= DD_DAY_SCENES_MAX; i++) o += (size_t)sprintf(many + o, "%s%d", i ? "," : "", i % 100);
    CHECK_EQ_INT(dd_history_check_day_scenes(many, err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "more than 64") != NULL);
}

/* Log positions: an offset written in a batch with plays reads back after
 * flush, compaction and reopen; a later write replaces it; other topics
 * and partitions have none; the keys are outside the history (no probe,
 * forget or compaction meets them); bad arguments are refused. */
static void test_offsets(void)
{
    char err[256];
    struct dd_config cfg;
    char path[128];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    int64_t next = -1;
    CHECK_EQ_INT(dd_history_get_offset(h, "plays", 3, &next, err, sizeof err), DD_ERR_NOTFOUND);

    dd_history_batch *b = batch_new();
    uint64_t a = item("off", 1);
    uint32_t seg;
    REQUIRE(dd_history_place(h, "", 0, T0, &seg) == DD_HISTORY_PLACE_OK);
    CHECK_EQ_INT(dd_history_batch_put_offset(b, "plays", 3, 12345), DD_OK);
    CHECK_EQ_INT(dd_history_batch_put_offset(b, "plays", 0, 7), DD_OK);
    CHECK_EQ_INT(dd_history_batch_add(b, "", 0, "u", 1, seg, &a, 1), DD_OK);
    CHECK_EQ_INT(dd_history_batch_operands(b), 1);
    CHECK_EQ_INT(dd_history_write(h, b, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_history_get_offset(h, "plays", 3, &next, err, sizeof err), DD_OK);
    CHECK_EQ_INT(next, 12345);
    CHECK_EQ_INT(dd_history_get_offset(h, "plays", 0, &next, err, sizeof err), DD_OK);
    CHECK_EQ_INT(next, 7);
    CHECK_EQ_INT(dd_history_get_offset(h, "plays", 1, &next, err, sizeof err), DD_ERR_NOTFOUND);
    CHECK_EQ_INT(dd_history_get_offset(h, "play", 3, &next, err, sizeof err), DD_ERR_NOTFOUND);
    CHECK_EQ_INT(dd_history_get_offset(h, "plays2", 3, &next, err, sizeof err), DD_ERR_NOTFOUND);

    /* offsets alone are a write too; a later one wins */
    dd_history_batch_clear(b);
    CHECK_EQ_INT(dd_history_batch_put_offset(b, "plays", 3, 20000), DD_OK);
    CHECK_EQ_INT(dd_history_write(h, b, err, sizeof err), DD_OK);
    flush_compact(h);
    dd_history_close(h);
    atomic_store(&clock_now, T0 + 200 * DAY); /* every segment dead: compaction drops them */
    h = open_store(&cfg);
    flush_compact(h);
    CHECK_EQ_INT(dd_history_get_offset(h, "plays", 3, &next, err, sizeof err), DD_OK);
    CHECK_EQ_INT(next, 20000);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, &a, 1), 0);

    /* a forget in a batch, with an offset: both land */
    atomic_store(&clock_now, T0);
    play(h, "", "v", &a, 1, T0);
    CHECK_EQ_INT(count_hits(h, "", "v", 0, &a, 1), 1);
    dd_history_batch_clear(b);
    CHECK_EQ_INT(dd_history_batch_forget(b, "", 0, "v", 1), DD_OK);
    CHECK_EQ_INT(dd_history_batch_put_offset(b, "plays", 3, 20001), DD_OK);
    CHECK_EQ_INT(dd_history_write(h, b, err, sizeof err), DD_OK);
    CHECK_EQ_INT(count_hits(h, "", "v", 0, &a, 1), 0);
    CHECK_EQ_INT(dd_history_get_offset(h, "plays", 3, &next, err, sizeof err), DD_OK);
    CHECK_EQ_INT(next, 20001);

    /* no user "" to forget, which would reach the offsets' keys */
    CHECK_EQ_INT(dd_history_batch_forget(b, "", 0, "", 0), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_history_forget(h, "", 0, "", 0, err, sizeof err), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_history_batch_put_offset(b, "", 3, 1), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_history_batch_put_offset(b, "plays", -1, 1), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_history_batch_put_offset(b, "plays", 1, -1), DD_ERR_INVALID);
    char longtopic[DD_TOPIC_MAX + 2];
    memset(longtopic, 't', sizeof longtopic - 1);
    longtopic[sizeof longtopic - 1] = '\0';
    CHECK_EQ_INT(dd_history_batch_put_offset(b, longtopic, 1, 1), DD_ERR_INVALID);
    longtopic[DD_TOPIC_MAX] = '\0';
    CHECK_EQ_INT(dd_history_batch_put_offset(b, longtopic, 1, 1), DD_OK);
    dd_history_batch_free(b);
    close_store(h, &cfg);
}

/* Resharding: an owner that refuses some users; compactions drop them. */
static bool odd_users_foreign(void *ud, const char *user, size_t len)
{
    (*(int *)ud)++;
    return !(len >= 2 && (user[len - 1] - '0') % 2 == 1);
}

static void test_owner(void)
{
    char err[256];
    struct dd_config cfg;
    char path[128];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    uint64_t a[3] = {item("own", 1), item("own", 2), item("own", 3)};
    char users[10][4];
    for (int i = 0; i < 10; i++) {
        snprintf(users[i], sizeof users[i], "u%d", i);
        play(h, "", users[i], a, 3, T0);
        play(h, "sc", users[i], a, 1, T0 - 40 * DAY); /* an older segment, another scene */
    }
    dd_history_batch *b = batch_new();
    CHECK_EQ_INT(dd_history_batch_put_offset(b, "plays", 1, 99), DD_OK);
    CHECK_EQ_INT(dd_history_write(h, b, err, sizeof err), DD_OK);
    dd_history_batch_free(b);

    /* the ownership record */
    uint8_t rec[16];
    size_t reclen = 0;
    CHECK_EQ_INT(dd_history_get_holds(h, rec, sizeof rec, &reclen, err, sizeof err),
                 DD_ERR_NOTFOUND);
    CHECK_EQ_INT(dd_history_put_holds(h, (const uint8_t *)"owner-record", 12, err, sizeof err),
                 DD_OK);
    CHECK_EQ_INT(dd_history_get_holds(h, rec, sizeof rec, &reclen, err, sizeof err), DD_OK);
    CHECK(reclen == 12 && memcmp(rec, "owner-record", 12) == 0);

    /* no owner: compaction keeps everyone */
    flush_compact(h);
    for (int i = 0; i < 10; i++) CHECK_EQ_INT(count_hits(h, "", users[i], 0, a, 3), 3);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.segments_foreign, 0);

    /* one more operand on a foreign user, so a merge meets the owner too */
    play(h, "", "u1", a, 1, T0);
    int calls = 0;
    dd_history_set_owner(h, odd_users_foreign, &calls);
    /* reads are not filtered: routing keeps foreign users away */
    CHECK_EQ_INT(count_hits(h, "", "u1", 0, a, 3), 3);
    flush_compact(h);
    CHECK(calls > 0);
    for (int i = 0; i < 10; i++) {
        size_t want = i % 2 ? 0 : 3;
        CHECK_EQ_INT(count_hits(h, "", users[i], 0, a, 3), want);
        CHECK_EQ_INT(count_hits(h, "sc", users[i], 0, a, 1), i % 2 ? 0 : 1);
    }
    dd_history_get_stats(h, &st);
    CHECK(st.segments_foreign >= 10); /* 5 users x 2 segments, some emptied by a merge first */
    int64_t next = 0;
    CHECK_EQ_INT(dd_history_get_offset(h, "plays", 1, &next, err, sizeof err), DD_OK);
    CHECK_EQ_INT(next, 99);
    reclen = 0;
    CHECK_EQ_INT(dd_history_get_holds(h, rec, sizeof rec, &reclen, err, sizeof err), DD_OK);
    CHECK(reclen == 12 && memcmp(rec, "owner-record", 12) == 0);

    /* cleared: a foreign user written again stays */
    dd_history_set_owner(h, NULL, NULL);
    play(h, "", "u3", a, 2, T0);
    flush_compact(h);
    CHECK_EQ_INT(count_hits(h, "", "u3", 0, a, 3), 2);

    /* a cancelled compaction says so, and later ones are refused */
    dd_history_cancel_compact(h);
    CHECK_EQ_INT(dd_history_compact(h, err, sizeof err), DD_ERR_STATE);
    CHECK(strstr(err, "cancelled") != NULL);
    close_store(h, &cfg);
}

static void test_forget_and_scenes(void)
{
    struct dd_config cfg;
    char path[128], err[256];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    uint64_t x[4];
    items(x, 4, "fs", 0);

    play(h, "", "u", &x[0], 1, T0);
    play(h, "", "u", &x[0], 1, T0 - 50 * DAY);
    play(h, "feed", "u", &x[1], 1, T0);
    play(h, "", "uu", &x[2], 1, T0);
    /* "a"+"bc" and "ab"+"c" are different keys thanks to the length fields */
    play(h, "a", "bc", &x[3], 1, T0);

    CHECK(has(h, "", "u", x[0]));
    CHECK(!has(h, "", "u", x[1]));
    CHECK(has(h, "feed", "u", x[1]));
    CHECK(!has(h, "feed", "u", x[0]));
    CHECK(has(h, "", "uu", x[2]));
    CHECK(!has(h, "", "uu", x[0]));
    CHECK(has(h, "a", "bc", x[3]));
    CHECK(!has(h, "ab", "c", x[3]));

    flush_compact(h);
    CHECK_EQ_INT(dd_history_forget(h, "", 0, "u", 1, err, sizeof err), DD_OK);
    CHECK(!has(h, "", "u", x[0]));
    CHECK(has(h, "feed", "u", x[1]));
    CHECK(has(h, "", "uu", x[2]));
    CHECK(has(h, "a", "bc", x[3]));
    /* stays forgotten through compaction and reopen; new plays count again */
    flush_compact(h);
    h = reopen(h, &cfg);
    CHECK(!has(h, "", "u", x[0]));
    CHECK(has(h, "feed", "u", x[1]));
    play(h, "", "u", &x[2], 1, T0);
    CHECK(has(h, "", "u", x[2]));
    CHECK(!has(h, "", "u", x[0]));
    /* forgetting a user with no history is fine */
    CHECK_EQ_INT(dd_history_forget(h, "", 0, "ghost", 5, err, sizeof err), DD_OK);
    close_store(h, &cfg);
}

/* Probes from several threads while another writes, flushes and compacts:
 * no error, no false negative on what was written before they started. */
struct prober {
    dd_history *h;
    _Atomic int *stop;
    size_t missed, rounds;
    int failed;
};

static void *probe_thread(void *arg)
{
    struct prober *p = arg;
    uint64_t hs[500];
    char err[256];
    while (!atomic_load(p->stop)) {
        for (int u = 0; u < 8; u++) {
            char user[16];
            snprintf(user, sizeof user, "c%d", u);
            items(hs, 500, user, 0);
            uint64_t tmp[500];
            uint8_t hit[500] = {0};
            dd_bloom_sort_hashes(hs, NULL, 500, tmp, NULL);
            if (dd_history_probe(p->h, "", 0, user, strlen(user), 0, hs, 500, hit, err,
                                 sizeof err) != DD_OK)
                p->failed++;
            for (int i = 0; i < 500; i++) p->missed += !hit[i];
        }
        p->rounds++;
    }
    return NULL;
}

static void test_concurrent(void)
{
    struct dd_config cfg;
    char path[128], err[256];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    uint64_t hs[500];
    for (int u = 0; u < 8; u++) {
        char user[16];
        snprintf(user, sizeof user, "c%d", u);
        items(hs, 500, user, 0);
        play(h, "", user, hs, 250, T0 - 40 * DAY);
        play(h, "", user, hs + 250, 250, T0);
    }
    _Atomic int stop = 0;
    struct prober p[2] = {{h, &stop, 0, 0, 0}, {h, &stop, 0, 0, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&t[i], NULL, probe_thread, &p[i]) == 0);
    for (int round = 0; round < 6; round++) {
        for (int u = 0; u < 50; u++) {
            char user[16];
            snprintf(user, sizeof user, "w%d", u);
            items(hs, 500, user, (uint64_t)(round * 500));
            play(h, "", user, hs, 500, T0 - (int64_t)(round * 10) * DAY);
        }
        /* the probed users get more plays too, so their keys keep merging */
        for (int u = 0; u < 8; u++) {
            char user[16];
            snprintf(user, sizeof user, "c%d", u);
            items(hs, 100, user, (uint64_t)(1000 + round * 100));
            play(h, "", user, hs, 100, T0 - (int64_t)(round * 15) * DAY);
        }
        CHECK_EQ_INT(dd_history_flush(h, err, sizeof err), DD_OK);
        if (round % 2) CHECK_EQ_INT(dd_history_compact(h, err, sizeof err), DD_OK);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ_INT(p[i].failed, 0);
        CHECK_EQ_INT(p[i].missed, 0);
        CHECK(p[i].rounds > 0);
    }
    close_store(h, &cfg);
}

/* ---- corruption ----------------------------------------------------------- */

static size_t make_key(uint8_t *k, const char *scene, const char *user, uint32_t seg)
{
    size_t n = 0, sl = strlen(scene), ul = strlen(user);
    k[n++] = (uint8_t)sl;
    memcpy(k + n, scene, sl);
    n += sl;
    k[n++] = (uint8_t)(ul >> 8);
    k[n++] = (uint8_t)ul;
    memcpy(k + n, user, ul);
    n += ul;
    k[n++] = (uint8_t)(seg >> 24);
    k[n++] = (uint8_t)(seg >> 16);
    k[n++] = (uint8_t)(seg >> 8);
    k[n++] = (uint8_t)seg;
    return n;
}

/* A stand-in merge operator for the raw handle, so it can write operands; it
 * is never asked to merge (nothing is read or compacted through it). */
static char *raw_full(void *st, const char *k, size_t kl, const char *e, size_t el,
                      const char *const *o, const size_t *ol, int n, unsigned char *ok,
                      size_t *len)
{
    (void)st; (void)k; (void)kl; (void)e; (void)el; (void)o; (void)ol; (void)n;
    *ok = 0;
    *len = 0;
    return malloc(1);
}
static char *raw_partial(void *st, const char *k, size_t kl, const char *const *o,
                         const size_t *ol, int n, unsigned char *ok, size_t *len)
{
    (void)st; (void)k; (void)kl; (void)o; (void)ol; (void)n;
    *ok = 0;
    *len = 0;
    return malloc(1);
}
static void raw_nop(void *st) { (void)st; }
static const char *raw_name(void *st) { (void)st; return "dedupd.history.v1"; }

/* dd_history_scan_damaged's callback for user "u": the segments seen. */
struct scan_seen {
    uint32_t seg[16];
    int n;
    int other_user;
};
static int scan_note(void *ud, const char *scene, size_t scene_len, const char *user,
                     size_t user_len, uint32_t segment)
{
    struct scan_seen *s = ud;
    (void)scene;
    if (scene_len != 0 || user_len != 1 || user[0] != 'u') s->other_user++;
    if (s->n < 16) s->seg[s->n++] = segment;
    return 0;
}

static void test_corrupt(void)
{
    struct dd_config cfg;
    char path[128], err[256];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    uint64_t a[50], b[50], c[50], d[50];
    for (int i = 0; i < 50; i++) {
        a[i] = item("ca", (uint64_t)i);   /* segment 666, to be overwritten */
        b[i] = item("cb", (uint64_t)i);   /* segment 665, left alone */
        c[i] = item("cc", (uint64_t)i);   /* segment 664, gets a bad checksum */
        d[i] = item("cd", (uint64_t)i);   /* segment 663, gets a garbage operand */
    }
    play(h, "", "u", a, 50, T0);
    play(h, "", "u", b, 50, T0 - 30 * DAY);
    play(h, "", "u", c, 50, T0 - 60 * DAY);
    play(h, "", "u", d, 50, T0 - 85 * DAY);
    flush_compact(h);
    dd_history_close(h);

    /* Damage the values with a raw handle. */
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_merge_operator(o, rocksdb_mergeoperator_create(
        NULL, raw_nop, raw_full, raw_partial, NULL, raw_name));
    char *e = NULL;
    rocksdb_t *db = rocksdb_open(o, path, &e);
    REQUIRE(!e && db);
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    uint8_t k[64];
    size_t kl = make_key(k, "", "u", 666);
    rocksdb_put(db, wo, (const char *)k, kl, "garbage!garbage!garbage!", 24, &e);
    REQUIRE(!e);
    kl = make_key(k, "", "u", 664);
    size_t vl = 0;
    char *v = rocksdb_get(db, ro, (const char *)k, kl, &vl, &e);
    REQUIRE(!e && v && vl > 12);
    v[vl - 1] ^= 0x5a;   /* checksum no longer matches */
    rocksdb_put(db, wo, (const char *)k, kl, v, vl, &e);
    REQUIRE(!e);
    rocksdb_free(v);
    kl = make_key(k, "", "u", 663);
    rocksdb_merge(db, wo, (const char *)k, kl, "\x01\x02junk", 6, &e);
    REQUIRE(!e);
    /* an ownership record longer than any (owner.h checks the rest) */
    char longrec[300];
    memset(longrec, 'x', sizeof longrec);
    rocksdb_put(db, wo, "\0\0\0M", 4, longrec, sizeof longrec, &e);
    REQUIRE(!e);
    rocksdb_readoptions_destroy(ro);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_close(db);
    rocksdb_options_destroy(o);

    h = open_store(&cfg);
    /* every read of u fails (any live segment in the lookback damaged) */
    size_t hits;
    CHECK_EQ_INT(probe_rc(h, "u", a, 50, &hits, err, sizeof err), DD_ERR_CORRUPT);
    CHECK_EQ_INT(probe_rc(h, "u", b, 50, &hits, err, sizeof err), DD_ERR_CORRUPT);
    CHECK_EQ_INT(probe_rc(h, "u", d, 50, &hits, err, sizeof err), DD_ERR_CORRUPT);
    uint8_t held[64] = {7};
    size_t heldlen = 5;
    CHECK_EQ_INT(dd_history_get_holds(h, held, sizeof held, &heldlen, err, sizeof err),
                 DD_ERR_CORRUPT);
    CHECK(strstr(err, "corrupt") != NULL);
    CHECK(held[0] == 7 && heldlen == 5);
    CHECK_EQ_INT(dd_history_put_holds(h, (const uint8_t *)"\x2a", 1, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_history_get_holds(h, held, sizeof held, &heldlen, err, sizeof err), DD_OK);
    CHECK(heldlen == 1 && held[0] == 42);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK_MSG(st.corrupt_values >= 3, "corrupt_values %llu",
              (unsigned long long)st.corrupt_values);

    CHECK(st.damaged_reads >= 3);

    /* compaction does not choke on them, nor fold them away: new plays do
     * not hide the damage (the bad operand of 663 included) */
    flush_compact(h);
    play(h, "", "u", a, 10, T0);
    play(h, "", "v", b, 10, T0);
    CHECK_EQ_INT(probe_rc(h, "u", a, 10, &hits, err, sizeof err), DD_ERR_CORRUPT);
    flush_compact(h);
    CHECK_EQ_INT(probe_rc(h, "u", a, 10, &hits, err, sizeof err), DD_ERR_CORRUPT);
    CHECK_EQ_INT(count_hits(h, "", "v", 0, b, 10), 10);
    dd_history_get_stats(h, &st);
    CHECK(st.damaged_merges >= 1);

    /* the scan lists exactly the damaged segments */
    struct scan_seen seen = {0};
    uint64_t values = 0;
    CHECK_EQ_INT(dd_history_scan_damaged(h, scan_note, &seen, &values, err, sizeof err), DD_OK);
    CHECK_EQ_INT(seen.n, 3);
    CHECK_EQ_INT(seen.seg[0], 663);
    CHECK_EQ_INT(seen.seg[1], 664);
    CHECK_EQ_INT(seen.seg[2], 666);
    CHECK_EQ_INT(seen.other_user, 0);
    CHECK_EQ_INT(values, 5);   /* u: 663..666, v: 666 */

    /* forgetting u repairs it */
    CHECK_EQ_INT(dd_history_forget(h, "", 0, "u", 1, err, sizeof err), DD_OK);
    CHECK_EQ_INT(probe_rc(h, "u", a, 10, &hits, err, sizeof err), DD_OK);
    CHECK_EQ_INT(hits, 0);
    seen.n = 0;
    CHECK_EQ_INT(dd_history_scan_damaged(h, scan_note, &seen, &values, err, sizeof err), DD_OK);
    CHECK_EQ_INT(seen.n, 0);
    CHECK_EQ_INT(values, 1);
    close_store(h, &cfg);
}

/* ---- split values and cheap reads ---------------------------------------- */

/* Raw access to a closed store: Get/Put of one key's value. */
static rocksdb_t *raw_open(const char *path, rocksdb_options_t **o)
{
    *o = rocksdb_options_create();
    rocksdb_options_set_merge_operator(*o, rocksdb_mergeoperator_create(
        NULL, raw_nop, raw_full, raw_partial, NULL, raw_name));
    char *e = NULL;
    rocksdb_t *db = rocksdb_open(*o, path, &e);
    REQUIRE(!e && db);
    return db;
}

static void raw_close(rocksdb_t *db, rocksdb_options_t *o)
{
    rocksdb_close(db);
    rocksdb_options_destroy(o);
}

/* The stored value of (scene "", USER, SEG) into *V (malloc'd), or NULL. */
static size_t raw_get(rocksdb_t *db, const char *user, uint32_t seg, char **v)
{
    uint8_t k[64];
    size_t kl = make_key(k, "", user, seg), vl = 0;
    char *e = NULL;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    *v = rocksdb_get(db, ro, (const char *)k, kl, &vl, &e);
    rocksdb_readoptions_destroy(ro);
    REQUIRE(!e);
    return vl;
}

static void raw_put(rocksdb_t *db, const char *user, uint32_t seg, const void *v, size_t vl,
                    int merge)
{
    uint8_t k[64];
    size_t kl = make_key(k, "", user, seg);
    char *e = NULL;
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    if (merge) rocksdb_merge(db, wo, (const char *)k, kl, v, vl, &e);
    else rocksdb_put(db, wo, (const char *)k, kl, v, vl, &e);
    rocksdb_writeoptions_destroy(wo);
    REQUIRE(!e);
}

/* Stores written before plays were dated keep answering: an undated
 * operand (a fingerprint list) and an undated value (a filter) read as of
 * their segment's newest day, as before; dated plays fold onto them (the
 * value becomes dated, the old items dated the segment's newest day), and
 * the answers hold through a full compaction, the re-encoding of the
 * closed segment and a reopen. */
static void test_undated_compat(void)
{
    struct dd_config cfg;
    char path[128];
    dd_history *h = fresh_store(&cfg, path, sizeof path); /* today 20000 */
    dd_history_close(h);
    const uint64_t a = item("undated", 1), b = item("undated", 2), c = item("dated", 3);
    rocksdb_options_t *o;
    rocksdb_t *db = raw_open(path, &o);
    struct dd_buf v = {0};
    /* segment 664 (19920..19949): an old operand */
    REQUIRE(dd_bloom_fps_encode(&v, &a, 1) == DD_OK);
    raw_put(db, "u", 664, v.data, v.len, 1);
    /* segment 665 (19950..19979): an old value */
    v.len = 0;
    REQUIRE(dd_bloom_build(&v, &b, 1, DD_BLOOM_FULL_RANGE, NULL) == DD_OK);
    raw_put(db, "u", 665, v.data, v.len, 0);
    raw_close(db, o);
    dd_buf_free(&v);

    h = open_store(&cfg);
    play(h, "", "u", &c, 1, T0 - 45 * DAY); /* day 19955, segment 665 */
    for (int round = 0; round < 3; round++) {
        CHECK_EQ_INT(count_hits(h, "", "u", 50, &a, 1), 0);
        CHECK_EQ_INT(count_hits(h, "", "u", 51, &a, 1), 1); /* as of 19949 */
        CHECK_EQ_INT(count_hits(h, "", "u", 20, &b, 1), 0);
        CHECK_EQ_INT(count_hits(h, "", "u", 21, &b, 1), 1); /* as of 19979 */
        CHECK_EQ_INT(count_hits(h, "", "u", 44, &c, 1), 0);
        CHECK_EQ_INT(count_hits(h, "", "u", 45, &c, 1), 1); /* its own day */
        CHECK_EQ_INT(count_hits(h, "", "u", 0, &a, 1), 1);
        if (round == 0) {
            flush_compact(h); /* folded: closed, re-encoded */
            struct dd_history_stats st;
            dd_history_get_stats(h, &st);
            CHECK(st.segments_reduced >= 1);
            CHECK_EQ_INT(st.corrupt_values, 0);
        }
        if (round == 1) h = reopen(h, &cfg);
    }
    close_store(h, &cfg);
}

/* A stored value as history.c lays it out: nv = 1 (one filter) or 2 (split
 * A | B), counts and ranges in F. Returns nv, or 0 if it does not parse. */
static int value_parts(const char *v, size_t len, struct dd_bloom_view f[2])
{
    const uint8_t *p = (const uint8_t *)v;
    if (len == 0) return 0;
    if (p[0] != 0xd5) return dd_bloom_parse(v, len, &f[0]) == DD_OK ? 1 : 0;
    if (len < 8) return 0;
    size_t la = (size_t)p[4] | (size_t)p[5] << 8 | (size_t)p[6] << 16 | (size_t)p[7] << 24;
    if (la > len - 8) return 0;
    if (dd_bloom_parse(v + 8, la, &f[0]) != DD_OK) return 0;
    if (dd_bloom_parse(v + 8 + la, len - 8 - la, &f[1]) != DD_OK) return 0;
    return 2;
}

/* history.exact_days = false: new plays are stored as of their segment's
 * newest day, so a lookback reads whole segments again (a play 20 days
 * ago in the open 30-day segment is found with a 7-day lookback) and the
 * stored filters carry no day bits; plays folded dated before keep their
 * day (operands not yet folded take the segment's newest day). */
static void test_coarse_days(void)
{
    struct dd_config cfg;
    char path[128];
    dd_history *h = fresh_store(&cfg, path, sizeof path); /* today 20000, segment 666 */
    const uint64_t a = item("coarse", 1), b = item("coarse", 2);
    play(h, "", "u", &a, 1, T0 - 20 * DAY); /* dated: day 19980 */
    CHECK_EQ_INT(count_hits(h, "", "u", 7, &a, 1), 0);
    flush_compact(h); /* folded: keeps its day (an operand not yet folded would not) */
    set(&cfg, "history.exact_days", "false");
    h = reopen(h, &cfg);
    play(h, "", "u", &b, 1, T0 - 20 * DAY);
    for (int round = 0; round < 2; round++) {
        CHECK_EQ_INT(count_hits(h, "", "u", 7, &b, 1), 1); /* as of 20009 */
        CHECK_EQ_INT(count_hits(h, "", "u", 7, &a, 1), 0); /* kept its day */
        CHECK_EQ_INT(count_hits(h, "", "u", 20, &a, 1), 1);
        flush_compact(h);
    }
    dd_history_close(h);
    /* a segment written only in coarse mode stores no day bits */
    set(&cfg, "history.exact_days", "false");
    h = open_store(&cfg);
    uint64_t c[50];
    items(c, 50, "coarse-only", 0);
    for (int i = 0; i < 50; i++) play(h, "", "v", &c[i], 1, T0 - (int64_t)(i % 20) * DAY);
    flush_compact(h);
    CHECK_EQ_INT(count_hits(h, "", "v", 1, c, 50), 50); /* all of segment 666 */
    dd_history_close(h);
    rocksdb_options_t *o;
    rocksdb_t *db = raw_open(path, &o);
    char *v = NULL;
    size_t vl = raw_get(db, "v", 666, &v);
    struct dd_bloom_view f[2];
    REQUIRE(vl > 0 && value_parts(v, vl, f) == 1);
    CHECK(f[0].days != NULL && f[0].day_bits == 0 && f[0].day0 == 20009);
    free(v);
    raw_close(db, o);
    dd_config_free(&cfg);
}

/* An open segment with a base gets its new plays in a small full-range
 * delta B beside the base A (copied as it is on every read); B is folded
 * into A once it holds more than max(256, count(A)/8); reads find every
 * item at every stage and the fp stays that of the full range. */
static void test_split_fold(void)
{
    struct dd_config cfg;
    char path[128];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    enum { BASE = 16000, SMALL = 20, NSMALL = 30, NEVER = 100000 };
    const uint32_t seg = 20000 / 30;
    uint64_t *hs = malloc((BASE + 4000) * sizeof *hs), *never = malloc(NEVER * sizeof *never);
    REQUIRE(hs && never);
    items(hs, BASE + 4000, "sf", 0);
    items(never, NEVER, "sf-never", 0);

    play(h, "", "u", hs, BASE, T0);
    flush_compact(h);
    /* 30 small writes (600 items, under max(256, 16000/8) = 2000), read
     * through the merge on every probe, then compacted */
    size_t n = BASE;
    for (int w = 0; w < NSMALL; w++) {
        play(h, "", "u", hs + n, SMALL, T0);
        n += SMALL;
        if (w % 10 == 9) CHECK_EQ_INT(count_hits(h, "", "u", 0, hs, n), n);
    }
    /* re-adds of known items change nothing that reads see */
    play(h, "", "u", hs, 100, T0);
    flush_compact(h);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, hs, n), n);
    CHECK(count_hits(h, "", "u", 0, never, NEVER) < 10);
    dd_history_close(h);

    rocksdb_options_t *o;
    rocksdb_t *db = raw_open(path, &o);
    char *v;
    size_t vl = raw_get(db, "u", seg, &v);
    struct dd_bloom_view f[2];
    REQUIRE(v);
    CHECK_EQ_INT(value_parts(v, vl, f), 2);
    CHECK_EQ_INT(f[0].count, BASE);
    CHECK(f[0].range == DD_BLOOM_FULL_RANGE && f[1].range == DD_BLOOM_FULL_RANGE);
    /* B: the 600 new items and the 100 re-added ones (not checked against
     * A, to keep reads cheap; they go at the fold) */
    CHECK_EQ_INT(f[1].count, NSMALL * SMALL + 100);
    rocksdb_free(v);
    raw_close(db, o);

    /* 1,400 more: B reaches 2,100 > 2,000, so it is folded into A */
    h = open_store(&cfg);
    play(h, "", "u", hs + n, 1400, T0);
    n += 1400;
    CHECK_EQ_INT(count_hits(h, "", "u", 0, hs, n), n);
    flush_compact(h);
    CHECK_EQ_INT(count_hits(h, "", "u", 0, hs, n), n);
    dd_history_close(h);
    db = raw_open(path, &o);
    vl = raw_get(db, "u", seg, &v);
    REQUIRE(v);
    CHECK_EQ_INT(value_parts(v, vl, f), 1);
    CHECK_EQ_INT(f[0].count, n);   /* the duplicates are gone */
    CHECK(f[0].range == DD_BLOOM_FULL_RANGE);
    rocksdb_free(v);

    /* the same at the minimum: a base of 100 takes 256 items in B, not 257 */
    raw_close(db, o);
    h = open_store(&cfg);
    play(h, "", "small", hs, 100, T0);
    flush_compact(h);
    play(h, "", "small", hs + 100, 256, T0);
    flush_compact(h);
    dd_history_close(h);
    db = raw_open(path, &o);
    vl = raw_get(db, "small", seg, &v);
    REQUIRE(v);
    CHECK_EQ_INT(value_parts(v, vl, f), 2);
    CHECK_EQ_INT(f[1].count, 256);
    rocksdb_free(v);
    raw_close(db, o);
    h = open_store(&cfg);
    play(h, "", "small", hs + 356, 1, T0);
    flush_compact(h);
    CHECK_EQ_INT(count_hits(h, "", "small", 0, hs, 357), 357);
    dd_history_close(h);
    db = raw_open(path, &o);
    vl = raw_get(db, "small", seg, &v);
    REQUIRE(v);
    CHECK_EQ_INT(value_parts(v, vl, f), 1);
    CHECK_EQ_INT(f[0].count, 357);
    rocksdb_free(v);
    raw_close(db, o);

    /* A split value whose segment closes is folded and re-encoded by the
     * compaction filter: no full-range leftovers in closed segments. */
    h = open_store(&cfg);
    play(h, "", "closing", hs, 4000, T0);
    flush_compact(h);
    play(h, "", "closing", hs + 4000, 300, T0);
    flush_compact(h);   /* split: 4,000 | 300 */
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    uint64_t reduced = st.segments_reduced;
    atomic_store(&clock_now, T0 + 14 * DAY);   /* segment 666 closed, grace over */
    flush_compact(h);
    dd_history_get_stats(h, &st);
    CHECK(st.segments_reduced > reduced);
    CHECK_EQ_INT(count_hits(h, "", "closing", 0, hs, 4300), 4300);
    double fp = (double)count_hits(h, "", "closing", 0, never, NEVER) / NEVER;
    CHECK(fp <= cfg.history.fp_rate / 4 * 1.3);
    CHECK(fp > cfg.history.fp_rate / 4 * 0.7);   /* really re-encoded */
    CHECK_EQ_INT(st.corrupt_values, 0);
    dd_history_close(h);
    db = raw_open(path, &o);
    vl = raw_get(db, "closing", seg, &v);
    REQUIRE(v);
    CHECK_EQ_INT(value_parts(v, vl, f), 1);
    /* distinct fingerprints at the final range: a few collide */
    CHECK(f[0].count <= 4300 && f[0].count > 4250);
    CHECK(f[0].range < DD_BLOOM_FULL_RANGE);
    rocksdb_free(v);
    raw_close(db, o);
    atomic_store(&clock_now, T0);
    free(hs);
    free(never);
    dd_config_free(&cfg);
}

/* A split value round-trips through raw storage; a split header damaged in
 * any field fails the user's reads and is counted; legacy raw-hash
 * operands still count. */
static void test_split_corrupt(void)
{
    struct dd_config cfg;
    char path[128];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    const uint32_t seg = 20000 / 30;
    uint64_t hs[1300];
    items(hs, 1300, "sc", 0);
    play(h, "", "src", hs, 1000, T0);
    flush_compact(h);
    play(h, "", "src", hs + 1000, 200, T0);   /* 200 <= 256: split */
    flush_compact(h);
    dd_history_close(h);

    rocksdb_options_t *o;
    rocksdb_t *db = raw_open(path, &o);
    char *v;
    size_t vl = raw_get(db, "src", seg, &v);
    struct dd_bloom_view f[2];
    REQUIRE(v);
    REQUIRE(value_parts(v, vl, f) == 2);
    size_t la = (size_t)(uint8_t)v[4] | (size_t)(uint8_t)v[5] << 8;
    char *m = malloc(vl + 8);
    REQUIRE(m);
    enum { NBAD = 11 };
    char user[16];
    for (int c = 0; c < NBAD; c++) {
        memcpy(m, v, vl);
        size_t ml = vl;
        switch (c) {
        case 0: m[0] = (char)0xd4; break;                 /* tag */
        case 1: m[1] = 1; break;                          /* reserved bytes */
        case 2: m[3] = (char)0x80; break;
        case 3: m[4] = (char)(la + 1); m[5] = (char)((la + 1) >> 8); break;  /* len(A) */
        case 4: m[4] = (char)(la - 1); m[5] = (char)((la - 1) >> 8); break;
        case 5: m[7] = 0x7f; break;                       /* len(A) past the end */
        case 6: m[4] = m[5] = 0; break;                   /* len(A) = 0 */
        case 7: ml = 7; break;                            /* shorter than the header */
        case 8: m[8 + la / 2] ^= 0x10; break;             /* inside A */
        case 9: m[vl - 3] ^= 0x01; break;                 /* inside B (its checksum) */
        case 10: ml = vl - 1; break;                      /* truncated */
        }
        snprintf(user, sizeof user, "bad%d", c);
        raw_put(db, user, seg, m, ml, 0);
    }
    raw_put(db, "copy", seg, v, vl, 0);
    /* a valid split value whose A is empty: B's plays must still be found
     * (a probe once dropped the view after an empty one) */
    struct dd_buf ea = {0};
    REQUIRE(dd_bloom_build(&ea, NULL, 0, f[0].range, NULL) == DD_OK);
    size_t lb = vl - 8 - la, el = 8 + ea.len + lb;
    char *e = malloc(el);
    REQUIRE(e);
    memcpy(e, v, 4);
    e[4] = (char)ea.len;
    e[5] = (char)(ea.len >> 8);
    e[6] = e[7] = 0;
    memcpy(e + 8, ea.data, ea.len);
    memcpy(e + 8 + ea.len, v + 8 + la, lb);
    raw_put(db, "emptya", seg, e, el, 0);
    free(e);
    dd_buf_free(&ea);
    /* a raw-hash operand, the format written before filter operands */
    struct dd_buf op = {0};
    REQUIRE(dd_bloom_operand_encode(&op, hs, 50) == DD_OK);
    raw_put(db, "legacy", seg, op.data, op.len, 1);
    dd_buf_free(&op);
    free(m);
    rocksdb_free(v);
    raw_close(db, o);

    h = open_store(&cfg);
    struct dd_history_stats st;
    CHECK_EQ_INT(count_hits(h, "", "copy", 0, hs, 1200), 1200);   /* round trip */
    CHECK_EQ_INT(count_hits(h, "", "legacy", 0, hs, 50), 50);
    CHECK_EQ_INT(count_hits(h, "", "emptya", 0, hs + 1000, 200), 200);
    char err[256];
    size_t hits;
    for (int c = 0; c < NBAD; c++) {
        snprintf(user, sizeof user, "bad%d", c);
        dd_history_get_stats(h, &st);
        uint64_t before = st.corrupt_values;
        CHECK_MSG(probe_rc(h, user, hs, 1200, &hits, err, sizeof err) == DD_ERR_CORRUPT,
                  "damage %d not detected", c);
        dd_history_get_stats(h, &st);
        CHECK_MSG(st.corrupt_values == before + 2, "damage %d not counted", c);
    }
    /* new plays do not replace a damaged value; forget does; the legacy
     * operand is folded */
    play(h, "", "bad3", hs, 10, T0);
    CHECK_EQ_INT(probe_rc(h, "bad3", hs, 10, &hits, err, sizeof err), DD_ERR_CORRUPT);
    flush_compact(h);
    CHECK_EQ_INT(probe_rc(h, "bad3", hs, 10, &hits, err, sizeof err), DD_ERR_CORRUPT);
    CHECK_EQ_INT(dd_history_forget(h, "", 0, "bad3", 4, err, sizeof err), DD_OK);
    play(h, "", "bad3", hs, 10, T0);
    flush_compact(h);
    CHECK_EQ_INT(count_hits(h, "", "bad3", 0, hs, 10), 10);
    CHECK_EQ_INT(count_hits(h, "", "legacy", 0, hs, 50), 50);
    CHECK_EQ_INT(count_hits(h, "", "copy", 0, hs, 1200), 1200);
    close_store(h, &cfg);
}

/* A value that fails dedupd's checksum (RocksDB's own checks pass: it is
 * written through RocksDB) is an error for that user, never "not seen":
 * the probe fails naming the segment, through later writes and
 * compactions (the damage is kept, not folded away), while other users
 * read on; dd_history_forget clears the user, who then reads as new. */
static void test_damaged_read(void)
{
    struct dd_config cfg;
    char path[128], err[256];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    const uint32_t seg = 20000 / 30;
    uint64_t hs[300];
    items(hs, 300, "dr", 0);
    play(h, "", "dmg", hs, 100, T0);
    play(h, "", "fine", hs, 100, T0);
    flush_compact(h);
    dd_history_close(h);

    rocksdb_options_t *o;
    rocksdb_t *db = raw_open(path, &o);
    char *v;
    size_t vl = raw_get(db, "dmg", seg, &v);
    REQUIRE(v && vl > 16);
    v[vl / 2] ^= 0x20;
    raw_put(db, "dmg", seg, v, vl, 0);
    rocksdb_free(v);
    raw_close(db, o);

    h = open_store(&cfg);
    size_t hits = 0;
    err[0] = '\0';
    CHECK_EQ_INT(probe_rc(h, "dmg", hs, 100, &hits, err, sizeof err), DD_ERR_CORRUPT);
    CHECK_MSG(strstr(err, "damaged") && strstr(err, "segment 666"), "message: %s", err);
    CHECK_EQ_INT(probe_rc(h, "fine", hs, 100, &hits, err, sizeof err), DD_OK);
    CHECK_EQ_INT(hits, 100);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK(st.corrupt_values > 0);

    /* new plays do not hide the damage, nor does a compaction */
    play(h, "", "dmg", hs + 100, 50, T0);
    CHECK_EQ_INT(probe_rc(h, "dmg", hs, 150, &hits, err, sizeof err), DD_ERR_CORRUPT);
    flush_compact(h);
    CHECK_EQ_INT(probe_rc(h, "dmg", hs, 150, &hits, err, sizeof err), DD_ERR_CORRUPT);
    play(h, "", "dmg", hs + 150, 50, T0);
    flush_compact(h);
    h = reopen(h, &cfg);
    CHECK_EQ_INT(probe_rc(h, "dmg", hs, 200, &hits, err, sizeof err), DD_ERR_CORRUPT);
    CHECK_EQ_INT(probe_rc(h, "fine", hs, 100, &hits, err, sizeof err), DD_OK);
    CHECK_EQ_INT(hits, 100);

    /* forget repairs: the user reads as new, then as written */
    CHECK_EQ_INT(dd_history_forget(h, "", 0, "dmg", 3, err, sizeof err), DD_OK);
    CHECK_EQ_INT(probe_rc(h, "dmg", hs, 200, &hits, err, sizeof err), DD_OK);
    CHECK_EQ_INT(hits, 0);
    play(h, "", "dmg", hs + 200, 100, T0);
    flush_compact(h);
    CHECK_EQ_INT(probe_rc(h, "dmg", hs + 200, 100, &hits, err, sizeof err), DD_OK);
    CHECK_EQ_INT(hits, 100);
    close_store(h, &cfg);
}

/* Many small operands (no base; through the memtable's successive merges,
 * flushes that partial-merge them, and compaction), and a base plus many
 * operands in closed and open segments: never a false negative, and the
 * union fp over the user stays under fp_rate. */
static void test_many_operands(void)
{
    struct dd_config cfg;
    char path[128], err[256];
    dd_history *h = fresh_store(&cfg, path, sizeof path);
    enum { OPS = 400, PER = 7, NEVER = 200000 };
    uint64_t *hs = malloc(2 * OPS * PER * sizeof *hs), *never = malloc(NEVER * sizeof *never);
    REQUIRE(hs && never);
    items(hs, 2 * OPS * PER, "mo", 0);
    items(never, NEVER, "mo-never", 0);

    /* segment 666 (open) and 664 (closed): OPS operands each, re-adds
     * included, flushed every 50 */
    for (int w = 0; w < OPS; w++) {
        play(h, "", "many", hs + w * PER, PER, T0);
        play(h, "", "many", hs + (OPS + w) * PER, PER, T0 - 60 * DAY);
        if (w % 3 == 0) play(h, "", "many", hs + (w / 2) * PER, PER, T0);
        if (w % 50 == 49) {
            CHECK_EQ_INT(dd_history_flush(h, err, sizeof err), DD_OK);
            CHECK_EQ_INT(count_hits(h, "", "many", 0, hs, (size_t)(w + 1) * PER),
                         (size_t)(w + 1) * PER);
        }
        if (w == OPS / 2) CHECK_EQ_INT(dd_history_compact(h, err, sizeof err), DD_OK);
    }
    CHECK_EQ_INT(count_hits(h, "", "many", 0, hs, 2 * OPS * PER), 2 * OPS * PER);
    flush_compact(h);
    CHECK_EQ_INT(count_hits(h, "", "many", 0, hs, 2 * OPS * PER), 2 * OPS * PER);
    h = reopen(h, &cfg);
    CHECK_EQ_INT(count_hits(h, "", "many", 0, hs, 2 * OPS * PER), 2 * OPS * PER);
    double fp = (double)count_hits(h, "", "many", 0, never, NEVER) / NEVER;
    fprintf(stderr, "many operands: union fp %.5f (bound %.3f)\n", fp, cfg.history.fp_rate);
    CHECK(fp <= cfg.history.fp_rate);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.corrupt_values, 0);
    dd_history_close(h);
    free(hs);
    free(never);
    dd_config_free(&cfg);
}

/* A new store says so once: reopened, it was not created by that open. */
static void test_created(void)
{
    struct dd_config cfg;
    char path[128];
    new_config(&cfg, path, sizeof path);
    dd_history *h = open_store(&cfg);
    CHECK(dd_history_created(h));
    h = reopen(h, &cfg);
    CHECK(!dd_history_created(h));
    close_store(h, &cfg);
}

static void test_open_errors(void)
{
    struct dd_config cfg;
    char path[128], err[256] = "";
    new_config(&cfg, path, sizeof path);
    dd_history *h = (dd_history *)&cfg;   /* must be reset to NULL on error */

    set(&cfg, "rocksdb.write_buffer_size", "4194304");
    set(&cfg, "rocksdb.no_such_option_xyz", "1");
    CHECK_EQ_INT(dd_history_open(&h, &cfg.history, &cfg.rocksdb, &tclock, err, sizeof err), DD_ERR_INVALID);
    CHECK(h == NULL);
    CHECK_MSG(strstr(err, "rocksdb.no_such_option_xyz") != NULL, "err: %s", err);
    dd_config_free(&cfg);

    /* good pass-through options are applied */
    new_config(&cfg, path, sizeof path);
    set(&cfg, "rocksdb.write_buffer_size", "4194304");
    set(&cfg, "rocksdb.max_write_buffer_number", "3");
    h = open_store(&cfg);
    close_store(h, &cfg);

    /* a path that cannot be a directory */
    new_config(&cfg, path, sizeof path);
    char file[160];
    snprintf(file, sizeof file, "%s/plainfile", root);
    FILE *f = fopen(file, "w");
    REQUIRE(f);
    fclose(f);
    char sub[200];
    snprintf(sub, sizeof sub, "%s/db", file);
    REQUIRE(dd_config_set(&cfg, "history.path", sub, err, sizeof err) == DD_OK);
    h = (dd_history *)&cfg;
    CHECK_EQ_INT(dd_history_open(&h, &cfg.history, &cfg.rocksdb, &tclock, err, sizeof err), DD_ERR_IO);
    CHECK(h == NULL);
    CHECK(strstr(err, sub) != NULL);
    dd_config_free(&cfg);
}

/* dd_history_probe_any's three ways: full-range filters no larger than
 * the batch through the candidate set; other filters, up to 8, each
 * indexed; more (one-day segments), one sort and a sorted merge each.
 * count_hits checks them against dd_history_probe; here every played item is found
 * and the never-played ones mostly are not, for 5 and for 20 segments,
 * before and after compaction (closed segments re-encoded at a reduced
 * range). */
static void test_probe_any_ways(void)
{
    static const int days[] = {5, 20};
    for (size_t d = 0; d < DD_ARRAY_LEN(days); d++) {
        struct dd_config cfg;
        char path[128];
        new_config(&cfg, path, sizeof path);
        set(&cfg, "history.segment_days", "1");
        atomic_store(&clock_now, T0);
        dd_history *h = open_store(&cfg);
        enum { PER_DAY = 300, NEVER = 3000 };
        size_t n = (size_t)days[d] * PER_DAY;
        uint64_t *hs = malloc((n + NEVER) * sizeof *hs);
        REQUIRE(hs);
        for (int day = 0; day < days[d]; day++) {
            for (size_t i = 0; i < PER_DAY; i++)
                hs[(size_t)day * PER_DAY + i] = item("any", (uint64_t)day * PER_DAY + i);
            play(h, "", "u", hs + (size_t)day * PER_DAY, PER_DAY, T0 - (int64_t)day * DAY);
        }
        for (size_t i = 0; i < NEVER; i++) hs[n + i] = item("never", i);
        for (int round = 0; round < 2; round++) {
            CHECK_EQ_INT(count_hits(h, "", "u", 0, hs, n), n);
            size_t fp = count_hits(h, "", "u", 0, hs + n, NEVER);
            CHECK_MSG(fp < NEVER / 20, "%zu of %d never-played items hit", fp, NEVER);
            CHECK_EQ_INT(count_hits(h, "", "u", 0, hs, n + NEVER) - fp, n);
            /* fewer candidates than a segment's plays: open segments
             * indexed too */
            CHECK_EQ_INT(count_hits(h, "", "u", 0, hs, 50), 50);
            if (round == 0) {
                atomic_store(&clock_now, T0 + 4 * DAY); /* past REDUCE_GRACE_DAYS */
                flush_compact(h);
            }
        }
        free(hs);
        close_store(h, &cfg);
    }
}

/* dd_history_probe_scenes: one read over several scenes gives each found
 * candidate the age of its newest day and the scene of that find (exact
 * to the day: dated items carry their day), and a read with lookback L finds exactly the candidates of age <= L: what
 * min_kept's choice (lookback.h) relies on. */
static void test_probe_marks(void)
{
    char err[256];
    struct dd_config cfg;
    char path[128];
    new_config(&cfg, path, sizeof path);
    atomic_store(&clock_now, T0);
    dd_history *h = open_store(&cfg);
    /* T0 is day 20000; 30-day segments: 19920..19949, ..., 19980..20009 */
    uint64_t c[6];
    items(c, 6, "mark", 0);
    play(h, "coarse", "u", &c[0], 1, T0 - 60 * DAY); /* 60 */
    play(h, "coarse", "u", &c[1], 1, T0);            /* 0 */
    play(h, "daily", "u", &c[0], 1, T0 - 5 * DAY);   /* newer than the coarse play */
    play(h, "daily", "u", &c[2], 1, T0 - 12 * DAY);
    play(h, "coarse", "u", &c[3], 1, T0 - 21 * DAY);
    play(h, "daily", "u", &c[3], 1, T0 - 21 * DAY);  /* the same age: the lower scene index */
    play(h, "coarse", "u", &c[4], 1, T0 - 40 * DAY); /* and a newer one in the same segment */
    play(h, "coarse", "u", &c[4], 1, T0 - 33 * DAY);
    struct dd_candset cs;
    REQUIRE(dd_candset_init(&cs, 6) == DD_OK);
    REQUIRE(dd_candset_begin(&cs, c, 6) == DD_OK);
    for (uint32_t i = 0; i < 6; i++) dd_candset_add(&cs, i);
    dd_arena *a = dd_arena_new(0, 0);
    REQUIRE(a);
    const struct dd_history_scene sc[2] = {{"coarse", 6}, {"daily", 5}};
    uint8_t hit[6] = {0}, where[6] = {9, 9, 9, 9, 9, 9};
    uint16_t age[6];
    CHECK_EQ_INT(
        dd_history_probe_scenes(h, sc, 2, "u", 1, 0, &cs, hit, age, where, a, err, sizeof err),
        DD_OK);
    static const uint16_t want_age[6] = {5, 0, 12, 21, 33, DD_HISTORY_AGE_NONE};
    static const uint8_t want_where[6] = {1, 0, 1, 0, 0, 9};
    for (int i = 0; i < 6; i++) {
        CHECK_MSG(age[i] == want_age[i] && where[i] == want_where[i] &&
                      hit[i] == (want_age[i] != DD_HISTORY_AGE_NONE),
                  "candidate %d: age %u where %u hit %u", i, age[i], where[i], hit[i]);
    }
    /* One scene: the coarse segment's age alone. */
    uint16_t age1[6];
    uint8_t hit1[6] = {0};
    CHECK_EQ_INT(
        dd_history_probe_scenes(h, sc, 1, "u", 1, 0, &cs, hit1, age1, NULL, a, err, sizeof err),
        DD_OK);
    CHECK(age1[0] == 60 && age1[1] == 0 && age1[2] == DD_HISTORY_AGE_NONE && age1[3] == 21);
    /* Every lookback finds exactly the ages within it. */
    for (uint32_t l = 1; l <= 90; l++) {
        uint8_t hl[6] = {0};
        dd_arena_reset(a);
        CHECK_EQ_INT(dd_history_probe_scenes(h, sc, 2, "u", 1, l, &cs, hl, NULL, NULL, a, err,
                                             sizeof err),
                     DD_OK);
        for (int i = 0; i < 6; i++)
            CHECK_MSG(hl[i] == (age[i] <= l), "lookback %u candidate %d: hit %u age %u", l, i,
                      hl[i], age[i]);
    }
    /* bounds */
    CHECK_EQ_INT(dd_history_probe_scenes(h, sc, 0, "u", 1, 0, &cs, hit, age, where, a, err,
                                         sizeof err),
                 DD_ERR_INVALID);
    dd_arena_free(a);
    dd_candset_free(&cs);
    close_store(h, &cfg);
}

int main(void)
{
    tl_tmpdir(root, sizeof root, "history");

    test_nosync_crash(); /* first: it forks */
    test_place();
    test_created();
    test_roundtrip();
    test_stats_counts_writes();
    test_pending_compaction();
    test_write_limit();
    test_full_disk();
    test_expiry();
    test_reduce_fp();
    test_late_plays();
    test_lookback();
    test_day_scenes_config();
    test_day_lookback();
    test_dated_fp();
    test_undated_compat();
    test_coarse_days();
    test_offsets();
    test_owner();
    test_probe_any_ways();
    test_probe_marks();
    test_forget_and_scenes();
    test_concurrent();
    test_corrupt();
    test_split_fold();
    test_split_corrupt();
    test_damaged_read();
    test_many_operands();
    test_open_errors();

    tl_rm_tree(root);
    TEST_MAIN_END();
}
