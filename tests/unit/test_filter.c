/* SPDX-License-Identifier: Apache-2.0
 *
 * test_filter.c - the Filter decision's semantics on a real history and a
 * recent-deliveries client pointed at a closed port (store_fixture.h;
 * Redis down: Filter must answer from history with degraded set). The
 * writes are test_record.c's; the real-Redis paths are covered by the
 * Python integration test. Also the arena's promises: alignment, growth, one
 * chunk in the steady state.
 */
#include "store_fixture.h"
#include "testlib.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int kept_is(const Dedup__V1__FilterResponse *r, const char *const *want, size_t n)
{
    if (r->n_kept_ids != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(r->kept_ids[i], want[i]) != 0) return 0;
    return 1;
}

/* ---- tests ------------------------------------------------------------ */

static void test_arena(void)
{
    dd_arena *a = dd_arena_new(1024, 1 << 20);
    REQUIRE(a != NULL);
    char *p = dd_arena_alloc(a, 3);
    uint64_t *q = dd_arena_alloc(a, sizeof *q);
    CHECK(p && q);
    CHECK(((uintptr_t)q & 7) == 0);
    CHECK((char *)q >= p + 3);
    /* Past the first chunk: more chunks, all memory usable. */
    char *big = dd_arena_alloc(a, 100000);
    CHECK(big != NULL);
    memset(big, 0xab, 100000);
    CHECK(dd_arena_chunks(a) == 2);
    size_t used = dd_arena_used(a);
    CHECK(used >= 100000 + 16);
    /* Reset: one chunk that fits the same sequence again without growing. */
    dd_arena_reset(a);
    CHECK(dd_arena_chunks(a) == 1);
    CHECK(dd_arena_used(a) == 0);
    CHECK(dd_arena_alloc(a, 3) && dd_arena_alloc(a, 8) && dd_arena_alloc(a, 100000));
    CHECK(dd_arena_chunks(a) == 1);
    /* Beyond the retain limit: back to the initial size after reset. */
    CHECK(dd_arena_alloc(a, 4u << 20) != NULL);
    dd_arena_reset(a);
    CHECK(dd_arena_chunks(a) == 1);
    CHECK(dd_arena_alloc(a, 512) != NULL);
    CHECK(dd_arena_chunks(a) == 1);
    /* calloc zeroes and refuses overflow. */
    uint32_t *z = dd_arena_calloc(a, 100, sizeof *z);
    CHECK(z && z[0] == 0 && z[99] == 0);
    CHECK(dd_arena_calloc(a, SIZE_MAX / 2, 4) == NULL);
    CHECK(dd_arena_alloc(a, SIZE_MAX) == NULL);
    /* protobuf-c decodes through it. */
    Dedup__V1__FilterRequest in = DEDUP__V1__FILTER_REQUEST__INIT;
    char *ids[] = {"x", "yy"};
    in.user_id = "u";
    in.candidate_ids = ids;
    in.n_candidate_ids = 2;
    uint8_t buf[64];
    size_t len = dedup__v1__filter_request__pack(&in, buf);
    Dedup__V1__FilterRequest *out =
        dedup__v1__filter_request__unpack(dd_arena_allocator(a), len, buf);
    CHECK(out && out->n_candidate_ids == 2 && strcmp(out->candidate_ids[1], "yy") == 0);
    dd_arena_free(a);
    dd_arena_free(NULL);
}

static void test_redis_down_degraded_and_order(void)
{
    Dedup__V1__FilterResponse r;
    char *ids[] = {"v3", "v1", "v2"};
    CHECK_EQ_INT(filter("fresh", ids, 3, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 1, &r),
                 DD_OK);
    const char *want[] = {"v3", "v1", "v2"};
    CHECK(kept_is(&r, want, 3));
    CHECK(r.degraded);
    CHECK_EQ_INT(r.n_removed, 0);
    CHECK_EQ_INT(r.removed_played + r.removed_delivered + r.removed_duplicate, 0);
    /* No candidates at all is a valid request. */
    CHECK_EQ_INT(filter("fresh", NULL, 0, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_OK);
    CHECK_EQ_INT(r.n_kept_ids, 0);
}

static void test_duplicates(void)
{
    Dedup__V1__FilterResponse r;
    char *ids[] = {"a", "b", "a", "c", "b", "a"};
    CHECK_EQ_INT(filter("dupuser", ids, 6, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 1, &r),
                 DD_OK);
    const char *want[] = {"a", "b", "c"};
    CHECK(kept_is(&r, want, 3));
    CHECK_EQ_INT(r.removed_duplicate, 3);
    REQUIRE(r.n_removed == 3);
    CHECK_EQ_INT(r.removed[0]->index, 2);
    CHECK_EQ_INT(r.removed[1]->index, 4);
    CHECK_EQ_INT(r.removed[2]->index, 5);
    for (size_t i = 0; i < 3; i++)
        CHECK_EQ_INT(r.removed[i]->reason, DEDUP__V1__REASON__REASON_DUPLICATE);
    /* Without explain, no removed list; counters still filled. */
    CHECK_EQ_INT(filter("dupuser", ids, 6, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_OK);
    CHECK_EQ_INT(r.n_removed, 0);
    CHECK_EQ_INT(r.removed_duplicate, 3);
}

/* Many duplicates of few ids: long runs of equal sort keys (the sort's
 * bucket pass gives up on them and falls back to its radix sort), first
 * occurrences kept in request order, every later one DUPLICATE with its
 * own index. */
static void test_duplicate_runs(void)
{
    enum { N = 3000 };
    static char *ids[N];
    static char names[3][8] = {"x", "y", "z"};
    for (size_t i = 0; i < N; i++) ids[i] = names[(i * 7 / 5) % 3];
    Dedup__V1__FilterResponse r;
    CHECK_EQ_INT(filter("runuser", ids, N, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES, 1,
                        &r),
                 DD_OK);
    CHECK_EQ_INT(r.n_kept_indexes, 3);
    CHECK_EQ_INT(r.removed_duplicate, N - 3);
    REQUIRE(r.n_kept_indexes == 3 && r.n_removed == N - 3);
    /* first occurrences: i = 0 ("x"), 1 ("y"), 2 ("z") */
    CHECK_EQ_INT(r.kept_indexes[0], 0);
    CHECK_EQ_INT(r.kept_indexes[1], 1);
    CHECK_EQ_INT(r.kept_indexes[2], 2);
    int order_ok = 1;
    for (size_t i = 0; i < r.n_removed; i++) {
        if (r.removed[i]->reason != DEDUP__V1__REASON__REASON_DUPLICATE) order_ok = 0;
        if (i && r.removed[i]->index <= r.removed[i - 1]->index) order_ok = 0;
    }
    CHECK(order_ok);
}

static void test_played_and_modes(void)
{
    Dedup__V1__RecordPlaysResponse pr;
    char *items[] = {"p1", "p2", "p3"};
    CHECK_EQ_INT(play("alice", "", items, NULL, 3, &pr), DD_OK);
    CHECK_EQ_INT(pr.accepted, 3);
    CHECK_EQ_INT(pr.expired, 0);

    Dedup__V1__FilterResponse r;
    char *ids[] = {"x1", "p2", "x2", "p1", "p2", "x3"};
    CHECK_EQ_INT(filter("alice", ids, 6, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 1, &r),
                 DD_OK);
    const char *want[] = {"x1", "x2", "x3"};
    CHECK(kept_is(&r, want, 3));
    CHECK_EQ_INT(r.removed_played, 2);
    CHECK_EQ_INT(r.removed_duplicate, 1);
    REQUIRE(r.n_removed == 3);
    CHECK_EQ_INT(r.removed[0]->index, 1);
    CHECK_EQ_INT(r.removed[0]->reason, DEDUP__V1__REASON__REASON_PLAYED);
    CHECK_EQ_INT(r.removed[1]->index, 3);
    CHECK_EQ_INT(r.removed[1]->reason, DEDUP__V1__REASON__REASON_PLAYED);
    CHECK_EQ_INT(r.removed[2]->index, 4);
    CHECK_EQ_INT(r.removed[2]->reason, DEDUP__V1__REASON__REASON_DUPLICATE);

    /* Index mode: positions, no ids. */
    CHECK_EQ_INT(
        filter("alice", ids, 6, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES, 0, &r),
        DD_OK);
    CHECK_EQ_INT(r.n_kept_ids, 0);
    REQUIRE(r.n_kept_indexes == 3);
    CHECK_EQ_INT(r.kept_indexes[0], 0);
    CHECK_EQ_INT(r.kept_indexes[1], 2);
    CHECK_EQ_INT(r.kept_indexes[2], 5);

    /* Another user, and the same user in another scene, saw nothing. */
    CHECK_EQ_INT(filter("bob", ids, 6, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_OK);
    CHECK_EQ_INT(r.n_kept_ids, 5);
    Dedup__V1__FilterRequest req = DEDUP__V1__FILTER_REQUEST__INIT;
    req.user_id = "alice";
    req.scene = "other";
    req.candidate_ids = ids;
    req.n_candidate_ids = 6;
    dd_arena_reset(arena);
    CHECK_EQ_INT(dd_filter_run(flt, arena, &req, &r, 0, err, sizeof err), DD_OK);
    CHECK_EQ_INT(r.n_kept_ids, 5);
}

/* Compact candidates: the same ids sent as their dd_hash give the same
 * decision (played, duplicates, the removed list by index), answered by
 * index whatever mode asks; both lists, or too many hashes, are refused
 * naming the field. alice played p1 and p2 (test_played_and_modes). */
static void test_candidate_hashes(void)
{
    char *ids[] = {"x1", "p2", "x2", "p1", "p2", "x3"};
    uint64_t hv[6];
    for (size_t i = 0; i < 6; i++) hv[i] = dd_hash(ids[i], strlen(ids[i]));
    Dedup__V1__FilterRequest req = DEDUP__V1__FILTER_REQUEST__INIT;
    Dedup__V1__FilterResponse r;
    req.user_id = "alice";
    req.candidate_hashes = hv;
    req.n_candidate_hashes = 6;
    req.mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS;
    req.explain = 1;
    dd_arena_reset(arena);
    CHECK_EQ_INT(dd_filter_run(flt, arena, &req, &r, 0, err, sizeof err), DD_OK);
    CHECK_EQ_INT(r.n_kept_ids, 0);
    REQUIRE(r.n_kept_indexes == 3);
    CHECK_EQ_INT(r.kept_indexes[0], 0);
    CHECK_EQ_INT(r.kept_indexes[1], 2);
    CHECK_EQ_INT(r.kept_indexes[2], 5);
    CHECK_EQ_INT(r.removed_played, 2);
    CHECK_EQ_INT(r.removed_duplicate, 1);
    REQUIRE(r.n_removed == 3);
    CHECK_EQ_INT(r.removed[0]->index, 1);
    CHECK_EQ_INT(r.removed[0]->reason, DEDUP__V1__REASON__REASON_PLAYED);
    CHECK_EQ_INT(r.removed[2]->index, 4);
    CHECK_EQ_INT(r.removed[2]->reason, DEDUP__V1__REASON__REASON_DUPLICATE);

    req.candidate_ids = ids;
    req.n_candidate_ids = 6;
    dd_arena_reset(arena);
    CHECK_EQ_INT(dd_filter_run(flt, arena, &req, &r, 0, err, sizeof err), DD_ERR_INVALID);
    CHECK_STR(err, "candidate_ids and candidate_hashes are both set; send one of them");

    size_t n = cfg.rpc.max_candidates + 1;
    uint64_t *many = calloc(n, sizeof *many);
    REQUIRE(many);
    req.candidate_ids = NULL;
    req.n_candidate_ids = 0;
    req.candidate_hashes = many;
    req.n_candidate_hashes = n;
    dd_arena_reset(arena);
    CHECK_EQ_INT(dd_filter_run(flt, arena, &req, &r, 0, err, sizeof err), DD_ERR_LIMIT);
    CHECK_STR(err, "candidate_hashes has 12001 entries, more than rpc.max_candidates=12000");
    free(many);
}

static void test_lookback_and_expiry(void)
{
    Dedup__V1__RecordPlaysResponse pr;
    char *items[] = {"old", "ancient", "today"};
    int64_t at[] = {T0 - 10 * DAY, T0 - 100 * DAY, T0};
    CHECK_EQ_INT(play("carol", "", items, at, 3, &pr), DD_OK);
    CHECK_EQ_INT(pr.accepted, 2);
    CHECK_EQ_INT(pr.expired, 1);

    Dedup__V1__FilterResponse r;
    char *ids[] = {"old", "ancient", "today", "never"};
    CHECK_EQ_INT(filter("carol", ids, 4, 3, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_OK);
    const char *want3[] = {"old", "ancient", "never"};
    CHECK(kept_is(&r, want3, 3));
    CHECK_EQ_INT(filter("carol", ids, 4, 30, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_OK);
    const char *want30[] = {"ancient", "never"};
    CHECK(kept_is(&r, want30, 2));
    CHECK_EQ_INT(filter("carol", ids, 4, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_OK);
    CHECK(kept_is(&r, want30, 2));
}

static void test_bad_input(void)
{
    Dedup__V1__FilterResponse r;
    char *ids[] = {"ok", "0123456789012345678901234567890123456789012345678901234567890123456789"};
    CHECK_EQ_INT(filter("", ids, 1, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_ERR_INVALID);
    CHECK_STR(err, "user_id is empty");
    CHECK_EQ_INT(filter("u", ids, 2, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_ERR_INVALID);
    CHECK_STR(err, "candidate_ids[1] is 70 bytes, longer than rpc.max_id_bytes=64");
    CHECK_EQ_INT(filter(ids[1], ids, 1, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_ERR_INVALID);
    CHECK_MSG(strncmp(err, "user_id is 70 bytes", 19) == 0, "%s", err);
    CHECK_EQ_INT(filter("u", ids, 1, 0, (Dedup__V1__ResponseMode)7, 0, &r), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "mode") != NULL, "%s", err);

    size_t n = cfg.rpc.max_candidates + 1;
    char **many = calloc(n, sizeof *many);
    REQUIRE(many);
    for (size_t i = 0; i < n; i++) many[i] = "same";
    CHECK_EQ_INT(filter("u", many, n, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_ERR_LIMIT);
    CHECK_STR(err, "candidate_ids has 12001 entries, more than rpc.max_candidates=12000");
    free(many);

    char scene[300];
    memset(scene, 's', sizeof scene - 1);
    scene[sizeof scene - 1] = '\0';
    Dedup__V1__FilterRequest req = DEDUP__V1__FILTER_REQUEST__INIT;
    req.user_id = "u";
    req.scene = scene;
    dd_arena_reset(arena);
    CHECK_EQ_INT(dd_filter_run(flt, arena, &req, &r, 0, err, sizeof err), DD_ERR_INVALID);
    CHECK_MSG(strncmp(err, "scene is 299 bytes", 18) == 0, "%s", err);

}

static void test_deadline(void)
{
    Dedup__V1__FilterRequest req = DEDUP__V1__FILTER_REQUEST__INIT;
    Dedup__V1__FilterResponse r;
    char *ids[] = {"a"};
    req.user_id = "u";
    req.candidate_ids = ids;
    req.n_candidate_ids = 1;
    dd_arena_reset(arena);
    CHECK_EQ_INT(dd_filter_run(flt, arena, &req, &r, dd_mono_ns() - 1, err, sizeof err),
                 DD_ERR_TIMEOUT);
    CHECK_EQ_INT(dd_filter_run(flt, arena, &req, &r, dd_mono_ns() + 10 * INT64_C(1000000000),
                               err, sizeof err),
                 DD_OK);
}

/* 10,000 candidates, every third one played, a few duplicated: the exact
 * kept set, and after the first call the arena serves a call from one
 * chunk (nothing allocated per candidate). */
static void test_large(void)
{
    enum { N = 10000 };
    static char idbuf[N][16];
    static char *ids[N];
    for (int i = 0; i < N; i++) {
        snprintf(idbuf[i], sizeof idbuf[i], "item-%d", i % 9990); /* last 10 repeat 0..9 */
        ids[i] = idbuf[i];
    }
    /* Plays in batches of 16 through the same path RecordPlays uses. */
    Dedup__V1__RecordPlaysResponse pr;
    char *batch[16];
    int nb = 0, played = 0;
    for (int i = 0; i < 9990; i += 3) {
        batch[nb++] = idbuf[i];
        played++;
        if (nb == 16 || i + 3 >= 9990) {
            REQUIRE_MSG_OK(play("heavy", "", batch, NULL, (size_t)nb, &pr));
            nb = 0;
        }
    }
    Dedup__V1__FilterResponse r;
    for (int round = 0; round < 3; round++) {
        CHECK_EQ_INT(
            filter("heavy", ids, N, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES, 1, &r),
            DD_OK);
        if (round > 0) CHECK_EQ_INT(dd_arena_chunks(arena), 1);
    }
    CHECK_EQ_INT(r.removed_duplicate, 10);
    CHECK_EQ_INT(r.removed_played, played);
    CHECK_EQ_INT(r.n_kept_indexes, N - 10 - played);
    CHECK_EQ_INT(r.n_removed, 10 + played);
    int bad = 0;
    for (size_t k = 0; k < r.n_kept_indexes; k++)
        if (r.kept_indexes[k] >= 9990 || r.kept_indexes[k] % 3 == 0) bad++;
    CHECK_EQ_INT(bad, 0);
    for (size_t k = 1; k < r.n_kept_indexes; k++)
        if (r.kept_indexes[k] <= r.kept_indexes[k - 1]) bad++;
    CHECK_EQ_INT(bad, 0);
}

/* A call larger than any before grows the duplicate table (sized at
 * creation for 20,000 candidates): 50,000 candidates, 25,000 ids each
 * twice, the second occurrences DUPLICATE at their own indexes; then a
 * small call and the large one again on the grown table. */
static void test_table_growth(void)
{
    enum { N = 50000, D = N / 2 };
    REQUIRE(dd_config_set(&cfg, "rpc.max_candidates", "60000", err, sizeof err) == DD_OK);
    dd_filter *big;
    struct dd_filter_conf fconf_big = dd_config_filter_conf(&cfg);
    REQUIRE_MSG_OK(dd_filter_new(&big, &fconf_big, hist, rec, err, sizeof err));
    REQUIRE(dd_config_set(&cfg, "rpc.max_candidates", "12000", err, sizeof err) == DD_OK);
    static char idbuf[D][16];
    static char *ids[N];
    for (int i = 0; i < D; i++) snprintf(idbuf[i], sizeof idbuf[i], "grow-%d", i);
    for (int i = 0; i < N; i++) ids[i] = idbuf[i < D ? i : (i - D) * 7 % D];
    for (int round = 0; round < 3; round++) {
        Dedup__V1__FilterRequest req = DEDUP__V1__FILTER_REQUEST__INIT;
        req.user_id = "grower";
        req.candidate_ids = ids;
        req.n_candidate_ids = round == 1 ? 100 : N;
        req.mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES;
        req.explain = 1;
        Dedup__V1__FilterResponse r;
        dd_arena_reset(arena);
        CHECK_EQ_INT(dd_filter_run(big, arena, &req, &r, 0, err, sizeof err), DD_OK);
        if (round == 1) {
            CHECK_EQ_INT(r.n_kept_indexes, 100);
            CHECK_EQ_INT(r.removed_duplicate, 0);
            continue;
        }
        CHECK_EQ_INT(r.n_kept_indexes, D);
        CHECK_EQ_INT(r.removed_duplicate, D);
        REQUIRE(r.n_removed == D);
        int bad = 0;
        for (size_t k = 0; k < r.n_kept_indexes; k++) bad += r.kept_indexes[k] != k;
        for (size_t k = 0; k < r.n_removed; k++)
            bad += r.removed[k]->index != D + k ||
                   r.removed[k]->reason != DEDUP__V1__REASON__REASON_DUPLICATE;
        CHECK_EQ_INT(bad, 0);
    }
    dd_filter_free(big);
}

static void test_stats(void)
{
    struct dd_filter_stats s;
    dd_filter_get_stats(&s);
    CHECK(s.filter_calls > 10);
    CHECK(s.degraded >= s.filter_calls); /* Redis was down throughout */
    CHECK(s.removed_played > 3000);
    CHECK(s.removed_duplicate >= 30);
    struct dd_record_stats w;
    dd_record_get_stats(&w);
    CHECK(w.plays > 3000);
    CHECK(w.plays_expired == 1);
}

/* The store cannot be read (its SST files go bad under it): Filter must
 * fail UNAVAILABLE, never answer as if nothing had been played. Runs last:
 * it leaves the store broken. */
static size_t zero_ssts(const char *dir)
{
    DIR *d = opendir(dir);
    REQUIRE(d != NULL);
    size_t n = 0;
    struct dirent *e;
    static char zeros[65536];
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 4, ".sst") != 0) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_WRONLY); /* same inode: the open store sees it */
        REQUIRE(fd >= 0);
        struct stat st;
        REQUIRE(fstat(fd, &st) == 0);
        for (off_t off = 0; off < st.st_size; off += (off_t)sizeof zeros) {
            size_t chunk = (size_t)(st.st_size - off) < sizeof zeros ? (size_t)(st.st_size - off)
                                                                      : sizeof zeros;
            REQUIRE(pwrite(fd, zeros, chunk, off) == (ssize_t)chunk);
        }
        close(fd);
        n++;
    }
    closedir(d);
    return n;
}

static void test_history_unreadable(void)
{
    char *items[] = {"gone-a", "gone-b"};
    Dedup__V1__RecordPlaysResponse pr = DEDUP__V1__RECORD_PLAYS_RESPONSE__INIT;
    REQUIRE(play("u-unreadable", "", items, NULL, 2, &pr) == DD_OK);
    REQUIRE_MSG_OK(dd_history_flush(hist, err, sizeof err));
    REQUIRE_MSG_OK(dd_history_compact(hist, err, sizeof err));
    /* reopen, so that no data block is in the block cache */
    dd_record_free(wr);
    dd_filter_free(flt);
    dd_history_close(hist);
    REQUIRE_MSG_OK(dd_history_open(&hist, &cfg.history, &cfg.rocksdb, &tclock, err, sizeof err));
    struct dd_filter_conf fconf_flt = dd_config_filter_conf(&cfg);
    REQUIRE_MSG_OK(dd_filter_new(&flt, &fconf_flt, hist, rec, err, sizeof err));
    struct dd_record_conf rconf_wr = dd_config_record_conf(&cfg);
    REQUIRE_MSG_OK(dd_record_new(&wr, &rconf_wr, hist, rec, NULL, err, sizeof err));
    REQUIRE(zero_ssts(cfg.history.path) > 0);

    char *cands[] = {"gone-a", "gone-b", "never"};
    Dedup__V1__FilterResponse resp = DEDUP__V1__FILTER_RESPONSE__INIT;
    CHECK_EQ_INT(filter("u-unreadable", cands, 3, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS,
                        0, &resp),
                 DD_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(err, "history") != NULL, "err: %s", err);
}

int main(void)
{
    test_arena();
    setup();
    test_redis_down_degraded_and_order();
    test_duplicates();
    test_duplicate_runs();
    test_played_and_modes();
    test_candidate_hashes();
    test_lookback_and_expiry();
    test_bad_input();
    test_deadline();
    test_large();
    test_table_growth();
    test_stats();
    test_history_unreadable();
    teardown();
    TEST_MAIN_END();
}
