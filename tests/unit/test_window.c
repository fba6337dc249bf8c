/* SPDX-License-Identifier: Apache-2.0
 *
 * test_window.c - the pending-play window's promises, written through to a
 * real history store in a temporary directory with a fixed clock: repeated
 * plays written once, plays grouped by (scene, user, segment) and found
 * where they belong, expired plays dropped and counted, future plays
 * refused, bad lengths refused, memory never above max_bytes whatever is
 * added (DD_ERR_LIMIT leaves the window unchanged), memory reused across
 * flushes, and nothing lost over many full-window cycles.
 */
#include "bloom.h"
#include "config.h"
#include "dd.h"
#include "history.h"
#include "testlib.h"
#include "window.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[64];

static uint64_t item(const char *tag, uint64_t i)
{
    char id[64];
    int n = snprintf(id, sizeof id, "%s-%llu", tag, (unsigned long long)i);
    return dd_hash(id, (size_t)n);
}

/* How many of the N hashes (scene, user) has seen. */
static size_t seen(dd_history *h, const char *scene, const char *user, const uint64_t *items,
                   size_t n)
{
    uint64_t *s = malloc(n * sizeof *s), *tmp = malloc(n * sizeof *tmp);
    uint8_t *hit = calloc(n, 1);
    char err[256];
    REQUIRE(s && tmp && hit);
    memcpy(s, items, n * sizeof *s);
    dd_bloom_sort_hashes(s, NULL, n, tmp, NULL);
    int rc = dd_history_probe(h, scene, strlen(scene), user, strlen(user), 0, s, n, hit, err,
                              sizeof err);
    CHECK_MSG(rc == DD_OK, "probe: %s", err);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += hit[i];
    free(s);
    free(tmp);
    free(hit);
    return k;
}

static int add(dd_window *w, const char *scene, const char *user, uint64_t it, int64_t at)
{
    return dd_window_add(w, scene, strlen(scene), user, strlen(user), it, at);
}

static void flush_ok(dd_window *w, dd_history *h, dd_history_batch *b, uint64_t *written)
{
    char err[256] = "";
    int rc = dd_window_flush(w, h, b, written, err, sizeof err);
    CHECK_MSG(rc == DD_OK, "flush: %s", err);
}

static void test_dedup_and_grouping(dd_history *h, dd_history_batch *b)
{
    dd_window *w;
    REQUIRE(dd_window_new(&w, h, 1u << 20) == DD_OK);
    uint64_t a = item("dup", 1), c = item("dup", 2);
    /* a, a (consecutive), c, a (not consecutive): two distinct items. */
    CHECK_EQ_INT(add(w, "", "alice", a, T0), DD_WINDOW_ADDED);
    CHECK_EQ_INT(add(w, "", "alice", a, T0 - 1000), DD_WINDOW_ADDED);
    CHECK_EQ_INT(add(w, "", "alice", c, T0), DD_WINDOW_ADDED);
    CHECK_EQ_INT(add(w, "", "alice", a, T0), DD_WINDOW_ADDED);
    CHECK_EQ_INT(dd_window_entries(w), 1);
    /* Same user, 40 days ago: another segment (30-day segments). */
    uint64_t old = item("old", 1);
    CHECK_EQ_INT(add(w, "", "alice", old, T0 - 40 * DAY), DD_WINDOW_ADDED);
    CHECK_EQ_INT(dd_window_entries(w), 2);
    /* Another scene is another namespace. */
    uint64_t sc = item("scene", 1);
    CHECK_EQ_INT(add(w, "live", "alice", sc, T0), DD_WINDOW_ADDED);
    CHECK_EQ_INT(dd_window_entries(w), 3);

    uint64_t written = 0;
    flush_ok(w, h, b, &written);
    CHECK_EQ_INT(written, 4); /* a, c, old, sc */
    CHECK_EQ_INT(dd_window_plays(w), 0);
    CHECK_EQ_INT(dd_window_entries(w), 0);
    struct dd_window_stats st;
    dd_window_get_stats(w, &st);
    CHECK_EQ_INT(st.plays_added, 6);
    CHECK_EQ_INT(st.duplicates, 2);
    CHECK_EQ_INT(st.hashes_written, 4);
    CHECK_EQ_INT(st.flushes, 1);

    uint64_t want[] = {a, c, old};
    CHECK_EQ_INT(seen(h, "", "alice", want, 3), 3);
    CHECK_EQ_INT(seen(h, "live", "alice", &sc, 1), 1);
    CHECK_EQ_INT(seen(h, "", "alice", &sc, 1), 0);   /* not across scenes */
    CHECK_EQ_INT(seen(h, "live", "alice", &a, 1), 0);
    /* The 40-day-old play is outside a 10-day lookback, inside the whole. */
    uint64_t s1[1] = {old}, t1[1];
    uint8_t hit = 0;
    char err[128];
    dd_bloom_sort_hashes(s1, NULL, 1, t1, NULL);
    CHECK(dd_history_probe(h, "", 0, "alice", 5, 10, s1, 1, &hit, err, sizeof err) == DD_OK);
    CHECK_EQ_INT(hit, 0);

    /* An empty flush writes nothing and succeeds. */
    flush_ok(w, h, b, &written);
    CHECK_EQ_INT(written, 0);
    dd_window_get_stats(w, &st);
    CHECK_EQ_INT(st.flushes, 1);
    dd_window_free(w);
}

static void test_expiry_and_refusals(dd_history *h, dd_history_batch *b)
{
    dd_window *w;
    REQUIRE(dd_window_new(&w, h, 1u << 20) == DD_OK);
    uint64_t x = item("exp", 1);
    CHECK_EQ_INT(add(w, "", "bob", x, T0 - 200 * DAY), DD_WINDOW_EXPIRED);
    CHECK_EQ_INT(add(w, "", "bob", x, T0 + 2 * DAY), DD_WINDOW_FUTURE);
    CHECK_EQ_INT(dd_window_plays(w), 0);
    struct dd_window_stats st;
    dd_window_get_stats(w, &st);
    CHECK_EQ_INT(st.expired, 1);
    CHECK_EQ_INT(st.future, 1);

    char long_scene[300];
    memset(long_scene, 's', sizeof long_scene);
    CHECK_EQ_INT(dd_window_add(w, long_scene, 256, "bob", 3, x, T0), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_window_add(w, "", 0, "", 0, x, T0), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_window_add(w, long_scene, 255, "bob", 3, x, T0), DD_WINDOW_ADDED);
    uint64_t written;
    flush_ok(w, h, b, &written);
    CHECK_EQ_INT(written, 1);
    CHECK_EQ_INT(seen(h, "", "bob", &x, 1), 0); /* the expired play was never written */

    dd_window *bad;
    CHECK_EQ_INT(dd_window_new(&bad, h, DD_WINDOW_MIN_BYTES - 1), DD_ERR_INVALID);
    CHECK(bad == NULL);
    dd_window_free(NULL);
    dd_window_free(w);
}

/* Add plays of many users through a small window, flushing whenever it is
 * full: memory stays under max_bytes, LIMIT changes nothing, nothing is
 * lost, and after the first cycles the allocation stops growing. */
static void test_memory_bound(dd_history *h, dd_history_batch *b, int heavy)
{
    const uint64_t max = 256u * 1024u;
    const size_t users = heavy ? 20 : 40000, per_user = heavy ? 3000 : 2;
    dd_window *w;
    REQUIRE(dd_window_new(&w, h, max) == DD_OK);
    uint64_t limits = 0, peak = 0, bytes_after_cycles = 0, total_written = 0;
    char user[32];
    for (size_t round = 0; round < per_user; round++) {
        for (size_t u = 0; u < users; u++) {
            snprintf(user, sizeof user, "%s%zu", heavy ? "heavy" : "light", u);
            uint64_t it = item(user, round);
            int rc = add(w, "", user, it, T0);
            if (rc == DD_ERR_LIMIT) {
                size_t before = dd_window_plays(w), entries = dd_window_entries(w);
                CHECK_EQ_INT(add(w, "", user, it, T0), DD_ERR_LIMIT);
                CHECK_EQ_INT(dd_window_plays(w), before);
                CHECK_EQ_INT(dd_window_entries(w), entries);
                limits++;
                if (limits == 3) bytes_after_cycles = dd_window_bytes(w);
                uint64_t written;
                flush_ok(w, h, b, &written);
                total_written += written;
                rc = add(w, "", user, it, T0);
            }
            CHECK_EQ_INT(rc, DD_WINDOW_ADDED);
            uint64_t now = dd_window_bytes(w);
            if (now > peak) peak = now;
        }
    }
    uint64_t written;
    flush_ok(w, h, b, &written);
    total_written += written;
    CHECK_EQ_INT(total_written, users * per_user);
    CHECK(limits >= 3);
    /* The flush scratch is the only allowance above max_bytes: one user's
     * plays, 8 bytes each. */
    CHECK_MSG(peak <= max + (heavy ? per_user * 8 * 2 : 1024), "peak %llu > max %llu",
              (unsigned long long)peak, (unsigned long long)max);
    if (!heavy) CHECK_EQ_INT(dd_window_bytes(w), bytes_after_cycles);
    struct dd_window_stats st;
    dd_window_get_stats(w, &st);
    CHECK_EQ_INT(st.limit_hits, limits * 2);

    /* Every play is in the store: check a sample of users fully. */
    uint64_t *items = malloc(per_user * sizeof *items);
    REQUIRE(items);
    for (size_t u = 0; u < users; u += heavy ? 1 : 997) {
        snprintf(user, sizeof user, "%s%zu", heavy ? "heavy" : "light", u);
        for (size_t r = 0; r < per_user; r++) items[r] = item(user, r);
        CHECK_EQ_INT(seen(h, "", user, items, per_user), per_user);
    }
    free(items);
    dd_window_free(w);
}

/* What the caller put in the batch is written with the window's plays, in
 * one write, also when the window is empty; the batch is empty after. */
static void test_callers_part(dd_history *h, dd_history_batch *b)
{
    char err[256];
    dd_window *w;
    REQUIRE(dd_window_new(&w, h, 1u << 20) == DD_OK);
    uint64_t a = item("part", 1);
    CHECK_EQ_INT(add(w, "", "carol", a, T0), DD_WINDOW_ADDED);
    dd_history_batch_clear(b);
    REQUIRE(dd_history_batch_put_offset(b, "plays", 2, 41) == DD_OK);
    uint64_t written = 0;
    flush_ok(w, h, b, &written);
    CHECK_EQ_INT(written, 1);
    CHECK_EQ_INT(dd_history_batch_bytes(b), 0);
    int64_t next = 0;
    CHECK_EQ_INT(dd_history_get_offset(h, "plays", 2, &next, err, sizeof err), DD_OK);
    CHECK_EQ_INT(next, 41);
    /* an empty window: only the caller's part */
    REQUIRE(dd_history_batch_put_offset(b, "plays", 2, 42) == DD_OK);
    flush_ok(w, h, b, &written);
    CHECK_EQ_INT(written, 0);
    CHECK_EQ_INT(dd_history_get_offset(h, "plays", 2, &next, err, sizeof err), DD_OK);
    CHECK_EQ_INT(next, 42);
    dd_window_free(w);
}

int main(void)
{
    tl_tmpdir(root, sizeof root, "window");
    char path[128], err[256];
    snprintf(path, sizeof path, "%s/db", root);
    struct dd_config cfg;
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "history.path", path, err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "history.sync", "false", err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "history.segment_days", "30", err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "history.retention_days", "90", err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "history.max_future_ms", "3600000", err, sizeof err) == DD_OK);
    dd_history *h = NULL;
    int rc = dd_history_open(&h, &cfg.history, &cfg.rocksdb, &tclock, err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "open: %s\n", err);
    REQUIRE(rc == DD_OK);
    dd_history_batch *b = dd_history_batch_new();
    REQUIRE(b);

    test_dedup_and_grouping(h, b);
    test_expiry_and_refusals(h, b);
    test_memory_bound(h, b, 0);
    test_memory_bound(h, b, 1);
    test_callers_part(h, b);

    dd_history_batch_free(b);
    dd_history_close(h);
    dd_config_free(&cfg);
    tl_rm_tree(root);
    TEST_MAIN_END();
}
