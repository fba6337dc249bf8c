/* SPDX-License-Identifier: Apache-2.0
 *
 * test_trace.c - trace.h: the record codec against damaged and hostile
 * bytes, the key layout, the set of traced users (also read while another
 * thread swaps it), and the store: the user list across reopens and
 * trace.users changes, records and their scan, forgets, retention on read
 * and in compaction, the max_records and max_users bounds, removal, and
 * corrupt records put into the store behind its back.
 */
#include "trace.h"

#include "dd.h"
#include "testlib.h"

#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[512];

static struct dd_trace_rec play(const char *scene, const char *item, int64_t at)
{
    return (struct dd_trace_rec){.kind = DD_TRACE_PLAY, .source = DD_TRACE_SRC_KAFKA,
                                 .at_ms = at, .recorded_ms = at + 5, .scene = scene,
                                 .scene_len = strlen(scene), .item = item,
                                 .item_len = strlen(item), .topic = "plays", .topic_len = 5,
                                 .partition = 3, .offset = 1234};
}

static void test_codec(void)
{
    uint8_t buf[DD_TRACE_REC_MAX];
    struct dd_trace_rec r = play("feed", "video-42", T0), d;
    size_t n = dd_trace_encode(&r, buf, sizeof buf);
    REQUIRE(n > 0);
    CHECK_EQ_INT(dd_trace_decode(buf, n, &d), DD_OK);
    CHECK_EQ_INT(d.kind, DD_TRACE_PLAY);
    CHECK_EQ_INT(d.source, DD_TRACE_SRC_KAFKA);
    CHECK_EQ_INT(d.at_ms, T0);
    CHECK_EQ_INT(d.recorded_ms, T0 + 5);
    CHECK_EQ_INT(d.partition, 3);
    CHECK_EQ_INT(d.offset, 1234);
    CHECK(d.scene_len == 4 && memcmp(d.scene, "feed", 4) == 0);
    CHECK(d.item_len == 8 && memcmp(d.item, "video-42", 8) == 0);
    CHECK(d.topic_len == 5 && memcmp(d.topic, "plays", 5) == 0);

    /* Every truncation and every single-bit flip is refused. */
    for (size_t len = 0; len < n; len++) CHECK_EQ_INT(dd_trace_decode(buf, len, &d), DD_ERR_CORRUPT);
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++) {
            buf[i] ^= (uint8_t)(1u << b);
            CHECK_MSG(dd_trace_decode(buf, n, &d) == DD_ERR_CORRUPT, "flip byte %zu bit %d", i, b);
            buf[i] ^= (uint8_t)(1u << b);
        }
    CHECK_EQ_INT(dd_trace_decode(NULL, 0, &d), DD_ERR_CORRUPT);

    /* Random bytes (hostile disk): never accepted, never read past. */
    uint64_t st = 7;
    for (int i = 0; i < 20000; i++) {
        size_t len = (size_t)(tl_splitmix64(&st) % 200);
        uint8_t *g = malloc(len ? len : 1);
        REQUIRE(g != NULL);
        for (size_t j = 0; j < len; j++) g[j] = (uint8_t)tl_splitmix64(&st);
        if (len) g[0] = 1; /* the right version, to get past the first check */
        CHECK(dd_trace_decode(g, len, &d) == DD_ERR_CORRUPT);
        free(g);
    }

    /* Fields out of range are not encoded. */
    struct dd_trace_rec bad = r;
    bad.kind = 9;
    CHECK_EQ_INT(dd_trace_encode(&bad, buf, sizeof buf), 0);
    bad = r;
    bad.item_len = 0; /* a play needs an item */
    CHECK_EQ_INT(dd_trace_encode(&bad, buf, sizeof buf), 0);
    bad = r;
    bad.kind = DD_TRACE_FORGET; /* a forget has none */
    CHECK_EQ_INT(dd_trace_encode(&bad, buf, sizeof buf), 0);
    bad = r;
    bad.scene_len = 256;
    CHECK_EQ_INT(dd_trace_encode(&bad, buf, sizeof buf), 0);
    bad = r;
    bad.at_ms = -1;
    CHECK_EQ_INT(dd_trace_encode(&bad, buf, sizeof buf), 0);
    CHECK_EQ_INT(dd_trace_encode(&r, buf, n - 1), 0);
    struct dd_trace_rec fg = {.kind = DD_TRACE_FORGET, .source = DD_TRACE_SRC_FORGET_USER,
                              .at_ms = T0, .partition = -1, .offset = -1};
    n = dd_trace_encode(&fg, buf, sizeof buf);
    CHECK(n > 0);
    CHECK_EQ_INT(dd_trace_decode(buf, n, &d), DD_OK);
    CHECK_EQ_INT(d.kind, DD_TRACE_FORGET);
    CHECK_EQ_INT(d.partition, -1);
    CHECK_STR(dd_trace_kind_name(DD_TRACE_DELIVERY), "delivery");
    CHECK_STR(dd_trace_source_name(DD_TRACE_SRC_RECORD_PLAYS), "RecordPlays");
    CHECK_STR(dd_trace_kind_name(0), "?");
}

static void test_keys(void)
{
    uint8_t k[128];
    size_t n = dd_trace_key(k, sizeof k, "alice", 5, T0, 77);
    CHECK_EQ_INT(n, 2 + 5 + 12);
    const char *u;
    size_t ul;
    int64_t at;
    uint32_t seq;
    CHECK_EQ_INT(dd_trace_key_parse(k, n, &u, &ul, &at, &seq), DD_OK);
    CHECK(ul == 5 && memcmp(u, "alice", 5) == 0 && at == T0 && seq == 77);
    CHECK_EQ_INT(dd_trace_key(k, sizeof k, "", 0, T0, 1), 0); /* never an empty user */
    CHECK_EQ_INT(dd_trace_key(k, 10, "alice", 5, T0, 1), 0);
    /* Meta keys (0x00 0x00 ...) and lengths that do not fit are not records. */
    uint8_t meta[20] = {0, 0, 'u', 'a', 'l', 'i', 'c', 'e'};
    CHECK_EQ_INT(dd_trace_key_parse(meta, sizeof meta, &u, &ul, &at, &seq), DD_ERR_CORRUPT);
    CHECK_EQ_INT(dd_trace_key_parse(k, n - 1, &u, &ul, &at, &seq), DD_ERR_CORRUPT);
    CHECK_EQ_INT(dd_trace_key_parse(k, n + 1, &u, &ul, &at, &seq), DD_ERR_CORRUPT);
    /* Time order within a user: a later time sorts after. */
    uint8_t k2[128];
    size_t n2 = dd_trace_key(k2, sizeof k2, "alice", 5, T0 + 1, 0);
    CHECK(n2 == n && memcmp(k, k2, n) < 0);
}

static void test_set(void)
{
    const char *ids[] = {"a", "bb", "a", "", "ccc"};
    size_t lens[] = {1, 2, 1, 0, 3};
    dd_trace_set *s = dd_trace_set_new(ids, lens, 5);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(dd_trace_set_size(s), 3);
    size_t idx = 99;
    CHECK(dd_trace_set_has(s, "bb", 2, &idx) && idx == 1);
    CHECK(dd_trace_set_has(s, "ccc", 3, &idx) && idx == 2);
    CHECK(!dd_trace_set_has(s, "b", 1, NULL));
    CHECK(!dd_trace_set_has(s, "", 0, NULL));
    CHECK(!dd_trace_set_has(NULL, "a", 1, NULL));
    dd_trace_set_free(s);
    dd_trace_set_free(NULL);

    enum { N = 5000 };
    char (*many)[16] = malloc(N * sizeof *many);
    const char **mp = malloc(N * sizeof *mp);
    size_t *ml = malloc(N * sizeof *ml);
    REQUIRE(many && mp && ml);
    for (int i = 0; i < N; i++) {
        ml[i] = (size_t)snprintf(many[i], sizeof many[i], "user-%d", i);
        mp[i] = many[i];
    }
    s = dd_trace_set_new(mp, ml, N);
    REQUIRE(s != NULL);
    int found = 0;
    for (int i = 0; i < N; i++) found += dd_trace_set_has(s, mp[i], ml[i], &idx) && idx == (size_t)i;
    CHECK_EQ_INT(found, N);
    CHECK(!dd_trace_set_has(s, "user-5000", 9, NULL));
    dd_trace_set_free(s);
    free(many);
    free(mp);
    free(ml);
}

/* ---- the store ---- */

static char root[64], path[128];

static struct dd_trace_conf conf(const char *users)
{
    return (struct dd_trace_conf){.path = path, .users = (char *)users, .retention_days = 30,
                                  .max_records = 100, .max_users = 5, .min_free_mb = 0,
                                  .max_id_bytes = 256};
}

static dd_trace *open_trace(const char *users)
{
    struct dd_trace_conf c = conf(users);
    struct dd_trace_clock clk = {test_clock, NULL};
    dd_trace *t = NULL;
    int rc = dd_trace_open(&t, &c, &clk, err, sizeof err);
    CHECK_MSG(rc == DD_OK, "%s", err);
    REQUIRE(t != NULL);
    return t;
}

struct collected {
    int n;
    char items[256][32];
    int64_t at[256];
    int kinds[256];
};

static int collect(void *ud, const struct dd_trace_rec *r)
{
    struct collected *c = ud;
    if (c->n < 256) {
        snprintf(c->items[c->n], sizeof c->items[c->n], "%.*s", (int)r->item_len, r->item);
        c->at[c->n] = r->at_ms;
        c->kinds[c->n] = r->kind;
    }
    c->n++;
    return 0;
}

static struct collected scan(dd_trace *t, const char *user)
{
    struct collected c;
    memset(&c, 0, sizeof c);
    CHECK_EQ_INT(dd_trace_scan(t, user, strlen(user), collect, &c, err, sizeof err), DD_OK);
    return c;
}

static int nlisted;
static void count_user(void *ud, const char *u, size_t len, const struct dd_trace_user *info)
{
    (void)ud;
    (void)u;
    (void)len;
    CHECK(info->traced);
    nlisted++;
}

static void test_users(void)
{
    atomic_store(&clock_now, T0);
    dd_trace *t = open_trace(" alice , bob");
    CHECK(dd_trace_wanted(t, "alice", 5));
    CHECK(dd_trace_wanted(t, "bob", 3));
    CHECK(!dd_trace_wanted(t, "carol", 5));
    CHECK(!dd_trace_wanted(NULL, "alice", 5));
    struct dd_trace_user info;
    dd_trace_get_user(t, "alice", 5, &info);
    CHECK(info.traced && info.from_config && info.since_ms == T0);

    atomic_store(&clock_now, T0 + DAY);
    bool added = false;
    CHECK_EQ_INT(dd_trace_add(t, "carol", 5, &added, err, sizeof err), DD_OK);
    CHECK(added && dd_trace_wanted(t, "carol", 5));
    CHECK_EQ_INT(dd_trace_add(t, "carol", 5, &added, err, sizeof err), DD_OK);
    CHECK(!added);
    CHECK_EQ_INT(dd_trace_add(t, "", 0, NULL, err, sizeof err), DD_ERR_INVALID);
    char longid[300];
    memset(longid, 'x', sizeof longid);
    CHECK_EQ_INT(dd_trace_add(t, longid, sizeof longid, NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_trace_remove(t, "bob", 3, err, sizeof err), DD_OK);
    CHECK(!dd_trace_wanted(t, "bob", 3));
    CHECK_EQ_INT(dd_trace_remove(t, "bob", 3, err, sizeof err), DD_ERR_NOTFOUND);
    /* max_users = 5: alice, carol, d1, d2, d3; then refused. */
    CHECK_EQ_INT(dd_trace_add(t, "d1", 2, NULL, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_trace_add(t, "d2", 2, NULL, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_trace_add(t, "d3", 2, NULL, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_trace_add(t, "d4", 2, NULL, err, sizeof err), DD_ERR_LIMIT);
    CHECK_MSG(strstr(err, "trace.max_users=5") != NULL, "%s", err);
    nlisted = 0;
    CHECK_EQ_INT(dd_trace_list(t, count_user, NULL), 5);
    CHECK_EQ_INT(nlisted, 5);
    dd_trace_close(t);

    /* Reopen with the same config: the list survives, bob stays removed,
     * since times are kept. */
    atomic_store(&clock_now, T0 + 2 * DAY);
    t = open_trace("alice,bob");
    CHECK(dd_trace_wanted(t, "alice", 5) && dd_trace_wanted(t, "carol", 5));
    CHECK(!dd_trace_wanted(t, "bob", 3));
    dd_trace_get_user(t, "carol", 5, &info);
    CHECK(info.traced && !info.from_config && info.since_ms == T0 + DAY);
    dd_trace_get_user(t, "alice", 5, &info);
    CHECK(info.since_ms == T0);
    /* Re-adding bob at run time undoes the removal. */
    CHECK_EQ_INT(dd_trace_add(t, "d4", 2, NULL, err, sizeof err), DD_ERR_LIMIT);
    CHECK_EQ_INT(dd_trace_remove(t, "d3", 2, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_trace_add(t, "bob", 3, NULL, err, sizeof err), DD_OK);
    dd_trace_get_user(t, "bob", 3, &info);
    CHECK(info.traced && info.from_config && info.since_ms == T0 + 2 * DAY);
    dd_trace_close(t);

    /* trace.users without alice and bob: their entries go; run-time ones stay. */
    t = open_trace("");
    CHECK(!dd_trace_wanted(t, "alice", 5) && !dd_trace_wanted(t, "bob", 3));
    CHECK(dd_trace_wanted(t, "carol", 5) && dd_trace_wanted(t, "d1", 2));
    /* bob back in the config later: traced again (the 'x' marker is gone). */
    dd_trace_close(t);
    t = open_trace("bob");
    CHECK(dd_trace_wanted(t, "bob", 3));
    dd_trace_close(t);
    /* trace.users is checked. */
    struct dd_trace_conf c = conf("a,,b");
    CHECK_EQ_INT(dd_trace_conf_check(&c, 256, err, sizeof err), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "trace.users") != NULL, "%s", err);
    c = conf("a,b,c,d,e,f");
    CHECK_EQ_INT(dd_trace_conf_check(&c, 256, err, sizeof err), DD_ERR_INVALID);
    c = conf("abc");
    CHECK_EQ_INT(dd_trace_conf_check(&c, 2, err, sizeof err), DD_ERR_INVALID);
    c = conf("   ");
    CHECK_EQ_INT(dd_trace_conf_check(&c, 2, err, sizeof err), DD_OK);
}

/* The pending buffer: entries come back in order, whole; it refuses
 * records past DD_TRACE_PENDING_MAX and users over 65535 bytes. */
static void test_pending(void)
{
    struct dd_trace_pending p = {0};
    size_t pos = 0, ul, vl;
    const char *u;
    const uint8_t *v;
    CHECK(!dd_trace_pending_next(&p, &pos, &u, &ul, &v, &vl));
    struct dd_trace_rec a = play("s", "item-a", T0), b = play("", "item-b", T0 + 1);
    CHECK_EQ_INT(dd_trace_pending_add(&p, "alice", 5, &a), DD_OK);
    CHECK_EQ_INT(dd_trace_pending_add(&p, "bo", 2, &b), DD_OK);
    struct dd_trace_rec r;
    CHECK(dd_trace_pending_next(&p, &pos, &u, &ul, &v, &vl));
    CHECK(ul == 5 && memcmp(u, "alice", 5) == 0);
    CHECK_EQ_INT(dd_trace_decode(v, vl, &r), DD_OK);
    CHECK(r.item_len == 6 && memcmp(r.item, "item-a", 6) == 0 && r.at_ms == T0);
    CHECK(dd_trace_pending_next(&p, &pos, &u, &ul, &v, &vl));
    CHECK(ul == 2 && memcmp(u, "bo", 2) == 0);
    CHECK_EQ_INT(dd_trace_decode(v, vl, &r), DD_OK);
    CHECK(r.item_len == 6 && memcmp(r.item, "item-b", 6) == 0 && r.at_ms == T0 + 1);
    CHECK(!dd_trace_pending_next(&p, &pos, &u, &ul, &v, &vl));
    static char big[65536];
    CHECK_EQ_INT(dd_trace_pending_add(&p, big, sizeof big, &a), DD_ERR_INVALID);
    dd_trace_pending_clear(&p);
    int rc;
    size_t n = 0;
    while ((rc = dd_trace_pending_add(&p, "u", 1, &a)) == DD_OK) n++;
    CHECK_EQ_INT(rc, DD_ERR_LIMIT);
    CHECK(p.b.len <= DD_TRACE_PENDING_MAX + DD_TRACE_REC_MAX && p.b.len + 100 > DD_TRACE_PENDING_MAX);
    CHECK(n > 1000);
    dd_trace_pending_free(&p);
}

static void test_records(void)
{
    atomic_store(&clock_now, T0);
    dd_trace *t = open_trace("u1");
    struct dd_trace_rec recs[3] = {play("", "i1", T0 - 2 * DAY), play("", "i2", T0 - 40 * DAY),
                                   play("feed", "i3", T0)};
    CHECK_EQ_INT(dd_trace_record(t, "u1", 2, recs, 3), DD_OK);
    CHECK_EQ_INT(dd_trace_record(t, "u2", 2, recs, 3), DD_ERR_NOTFOUND);
    struct dd_trace_rec fg = {.kind = DD_TRACE_FORGET, .source = DD_TRACE_SRC_FORGET_USER,
                              .at_ms = T0 - DAY, .partition = -1, .offset = -1};
    struct dd_trace_pending pend = {0};
    CHECK_EQ_INT(dd_trace_pending_add(&pend, "u1", 2, &fg), DD_OK);
    struct dd_trace_rec bad = fg;
    bad.kind = 9;
    CHECK_EQ_INT(dd_trace_pending_add(&pend, "u1", 2, &bad), DD_ERR_INVALID);
    dd_trace_record_pending(t, &pend);
    CHECK_EQ_INT(pend.b.len, 0);
    dd_trace_pending_free(&pend);
    CHECK_EQ_INT(dd_trace_record(t, "u1", 2, &bad, 1), DD_ERR_INVALID);
    struct collected c = scan(t, "u1");
    /* i2 was past the retention (30 days): not written. Oldest first. */
    CHECK_EQ_INT(c.n, 3);
    CHECK_STR(c.items[0], "i1");
    CHECK_EQ_INT(c.kinds[1], DD_TRACE_FORGET);
    CHECK_STR(c.items[2], "i3");
    struct dd_trace_stats st;
    dd_trace_get_stats(t, &st);
    CHECK_EQ_INT(st.records[DD_TRACE_PLAY - 1], 2);
    CHECK_EQ_INT(st.records[DD_TRACE_FORGET - 1], 1);
    CHECK(st.errors_write >= 1); /* the bad encoded record */
    CHECK_EQ_INT(st.users, 1);

    /* Time passes: i1 (2 days old) expires after 28 more days, on read and
     * in compaction. */
    atomic_store(&clock_now, T0 + 29 * DAY);
    c = scan(t, "u1");
    CHECK_EQ_INT(c.n, 2);
    CHECK_EQ_INT(dd_trace_compact(t, err, sizeof err), DD_OK);
    atomic_store(&clock_now, T0);
    c = scan(t, "u1");
    CHECK_MSG(c.n == 2, "compaction kept %d records", c.n); /* i1 is gone for good */
    atomic_store(&clock_now, T0);

    /* max_records = 100: 250 more plays leave at most 100, the newest. */
    for (int i = 0; i < 250; i++) {
        char item[16];
        snprintf(item, sizeof item, "m%03d", i);
        struct dd_trace_rec r = play("", item, T0 + 1000 + i);
        CHECK_EQ_INT(dd_trace_record(t, "u1", 2, &r, 1), DD_OK);
    }
    c = scan(t, "u1");
    CHECK_MSG(c.n <= 100 && c.n >= 100 - 100 / 16, "%d records", c.n);
    CHECK_STR(c.items[c.n - 1], "m249");
    dd_trace_get_stats(t, &st);
    CHECK(st.trimmed > 0);
    dd_trace_close(t);

    /* Records survive a reopen (written without the WAL: flushed at close). */
    t = open_trace("u1");
    struct collected c2 = scan(t, "u1");
    CHECK_EQ_INT(c2.n, c.n);
    /* Removing the user deletes its records; adding it again starts empty. */
    CHECK_EQ_INT(dd_trace_remove(t, "u1", 2, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_trace_add(t, "u1", 2, NULL, err, sizeof err), DD_OK);
    c2 = scan(t, "u1");
    CHECK_EQ_INT(c2.n, 0);
    CHECK_EQ_INT(dd_trace_record(t, "u1", 2, recs, 1), DD_OK);
    dd_trace_close(t);
}

/* Bytes put into the store behind the trace's back: a record that does
 * not decode, one whose key time differs from its value's, and a key of
 * the user's range that is no record key. All are skipped and counted. */
static void test_corrupt(void)
{
    atomic_store(&clock_now, T0);
    dd_trace *t = open_trace("u1");
    struct dd_trace_rec r = play("", "good", T0);
    CHECK_EQ_INT(dd_trace_record(t, "u1", 2, &r, 1), DD_OK);
    dd_trace_close(t);

    rocksdb_options_t *o = rocksdb_options_create();
    char *e = NULL;
    rocksdb_t *db = rocksdb_open(o, path, &e);
    REQUIRE(e == NULL);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    uint8_t k[64], v[DD_TRACE_REC_MAX];
    size_t kl = dd_trace_key(k, sizeof k, "u1", 2, T0 + 1, 1);
    rocksdb_put(db, wo, (char *)k, kl, "garbage", 7, &e);
    REQUIRE(e == NULL);
    struct dd_trace_rec r2 = play("", "moved", T0 + 5);
    size_t vl = dd_trace_encode(&r2, v, sizeof v);
    kl = dd_trace_key(k, sizeof k, "u1", 2, T0 + 2, 2); /* the key says another time */
    rocksdb_put(db, wo, (char *)k, kl, (char *)v, vl, &e);
    REQUIRE(e == NULL);
    kl = dd_trace_key(k, sizeof k, "u1", 2, T0 + 3, 3);
    rocksdb_put(db, wo, (char *)k, kl - 1, (char *)v, vl, &e); /* a short key in the range */
    REQUIRE(e == NULL);
    /* A damaged meta entry: skipped, not traced. */
    uint8_t mk[8] = {0, 0, 'u', 'z', 'z'};
    rocksdb_put(db, wo, (char *)mk, 5, "\1\0\0", 3, &e);
    REQUIRE(e == NULL);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_close(db);
    rocksdb_options_destroy(o);

    t = open_trace("u1");
    CHECK(!dd_trace_wanted(t, "zz", 2));
    struct collected c = scan(t, "u1");
    CHECK_EQ_INT(c.n, 1);
    CHECK_STR(c.items[0], "good");
    struct dd_trace_stats st;
    dd_trace_get_stats(t, &st);
    CHECK_MSG(st.errors_corrupt >= 3, "corrupt %llu", (unsigned long long)st.errors_corrupt);
    dd_trace_close(t);
}

/* Readers check the set while a writer adds and removes users: the
 * reclamation must never free a set a reader holds (run under ASan in
 * the sanitizer pass). */
static dd_trace *shared;
static atomic_bool stop;

static void *reader(void *arg)
{
    (void)arg;
    uint64_t hits = 0;
    while (!atomic_load(&stop)) {
        hits += dd_trace_wanted(shared, "stay", 4);
        hits += dd_trace_wanted(shared, "flip", 4);
        hits += dd_trace_wanted(shared, "never", 5);
    }
    return (void *)(uintptr_t)hits;
}

static void test_concurrent(void)
{
    atomic_store(&clock_now, T0);
    shared = open_trace("stay");
    pthread_t th[2];
    atomic_store(&stop, false);
    for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&th[i], NULL, reader, NULL) == 0);
    for (int i = 0; i < 100; i++) {
        CHECK_EQ_INT(dd_trace_add(shared, "flip", 4, NULL, err, sizeof err), DD_OK);
        CHECK(dd_trace_wanted(shared, "flip", 4));
        CHECK_EQ_INT(dd_trace_remove(shared, "flip", 4, err, sizeof err), DD_OK);
        CHECK(!dd_trace_wanted(shared, "flip", 4));
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++) {
        void *hits;
        pthread_join(th[i], &hits);
        CHECK((uintptr_t)hits > 0); /* "stay" was always there */
    }
    /* The last user removed: the set is NULL again (the empty fast path). */
    CHECK_EQ_INT(dd_trace_remove(shared, "stay", 4, err, sizeof err), DD_OK);
    CHECK(!dd_trace_wanted(shared, "stay", 4));
    struct dd_trace_stats st;
    dd_trace_get_stats(shared, &st);
    CHECK_EQ_INT(st.users, 0);
    dd_trace_close(shared);
}

int main(void)
{
    test_codec();
    test_keys();
    test_set();
    tl_tmpdir(root, sizeof root, "trace");
    snprintf(path, sizeof path, "%s/trace", root);
    test_users();
    tl_rm_tree(path);
    test_pending();
    test_records();
    tl_rm_tree(path);
    test_corrupt();
    tl_rm_tree(path);
    test_concurrent();
    tl_rm_tree(root);
    TEST_MAIN_END();
}
