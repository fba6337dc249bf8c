/* SPDX-License-Identifier: Apache-2.0
 *
 * test_owner.c - the store's ownership record (owner.h): the codec
 * (round trip; damaged, short, long, wrong-version and out-of-range
 * records refused), how a stored ownership relates to a configured one,
 * and the guard on a real store: created, the same, another shard
 * (refused, the record left as it is), a split's parent, the previous
 * release's 8-byte id and no record (adopted), the take-over, and the
 * partition count recorded once known and refused when it differs.
 */
#include "testlib.h"

#include "config.h"
#include "dd.h"
#include "history.h"
#include "owner.h"
#include "partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

static struct dd_owner own(const char *topic, int32_t parts, uint32_t shards, uint32_t shard,
                           uint32_t split_from)
{
    struct dd_owner o = {.partitions = parts,
                         .partitioner = DD_PARTITIONER_MURMUR2_RANDOM,
                         .shards = shards,
                         .shard = shard,
                         .split_from = split_from};
    snprintf(o.topic, sizeof o.topic, "%s", topic);
    return o;
}

static bool same(const struct dd_owner *a, const struct dd_owner *b)
{
    return strcmp(a->topic, b->topic) == 0 && a->partitions == b->partitions &&
           a->partitioner == b->partitioner && a->shards == b->shards && a->shard == b->shard &&
           a->split_from == b->split_from;
}

/* Re-seal BUF's checksum after a change: a record whose fields are out of
 * range but whose checksum matches. */
static void reseal(uint8_t *buf, size_t n)
{
    uint64_t h = XXH3_64bits(buf, n - 8);
    for (int i = 0; i < 8; i++) buf[n - 8 + i] = (uint8_t)(h >> (56 - 8 * i));
}

static void test_codec(void)
{
    char err[256];
    uint8_t buf[DD_OWNER_RECORD_MAX];
    struct dd_owner o = own("plays", 8, 4, 2, 2), r;
    size_t n = dd_owner_encode(&o, buf);
    REQUIRE(n > 0 && n <= DD_OWNER_RECORD_MAX);
    CHECK_EQ_INT(dd_owner_decode(buf, n, &r, err, sizeof err), DD_OK);
    CHECK(same(&o, &r));
    char text[200];
    dd_owner_format(&o, text, sizeof text);
    CHECK(strcmp(text, "shards=4 shard=2 split_from=2 topic=plays partitions=8 "
                       "partitioner=murmur2_random") == 0);
    struct dd_owner single = own("plays", 0, 1, 0, 0);
    n = dd_owner_encode(&single, buf);
    REQUIRE(n > 0);
    CHECK_EQ_INT(dd_owner_decode(buf, n, &r, err, sizeof err), DD_OK);
    CHECK(same(&single, &r));
    dd_owner_format(&single, text, sizeof text);
    CHECK(strstr(text, "partitions=?") != NULL);
    /* the longest topic fits */
    struct dd_owner longest = own("", 3, 1, 0, 0);
    memset(longest.topic, 't', DD_TOPIC_MAX);
    longest.topic[DD_TOPIC_MAX] = '\0';
    n = dd_owner_encode(&longest, buf);
    CHECK_EQ_INT(n, DD_OWNER_RECORD_MAX);
    CHECK_EQ_INT(dd_owner_decode(buf, n, &r, err, sizeof err), DD_OK);
    CHECK(same(&longest, &r));

    /* invalid ownerships are not encoded */
    struct dd_owner bad = own("plays", 8, 4, 4, 0);
    CHECK_EQ_INT(dd_owner_encode(&bad, buf), 0);
    bad = own("", 8, 1, 0, 0);
    CHECK_EQ_INT(dd_owner_encode(&bad, buf), 0);
    bad = own("pl/ays", 8, 1, 0, 0);
    CHECK_EQ_INT(dd_owner_encode(&bad, buf), 0);
    bad = own("plays", 8, 4, 0, 3);
    CHECK_EQ_INT(dd_owner_encode(&bad, buf), 0);

    n = dd_owner_encode(&o, buf);
    struct dd_owner untouched = own("x", 1, 1, 0, 0);
    r = untouched;
    /* every single damaged byte is caught; *O is left alone */
    for (size_t i = 0; i < n; i++) {
        uint8_t copy[DD_OWNER_RECORD_MAX];
        memcpy(copy, buf, n);
        copy[i] ^= 0x01;
        int rc = dd_owner_decode(copy, n, &r, err, sizeof err);
        CHECK_MSG(rc == DD_ERR_CORRUPT || (i == 4 && rc == DD_ERR_INVALID),
                  "byte %zu flipped: %d", i, rc);
        CHECK(same(&r, &untouched));
    }
    /* short and long */
    for (size_t k = 0; k < n; k++)
        CHECK_EQ_INT(dd_owner_decode(buf, k, &r, err, sizeof err), DD_ERR_CORRUPT);
    uint8_t longer[DD_OWNER_RECORD_MAX + 1];
    memcpy(longer, buf, n);
    longer[n] = 0;
    CHECK_EQ_INT(dd_owner_decode(longer, n + 1, &r, err, sizeof err), DD_ERR_CORRUPT);
    /* the previous release's 8-byte id is no record */
    CHECK_EQ_INT(dd_owner_decode((const uint8_t *)"\1\2\3\4\5\6\7\10", 8, &r, err, sizeof err),
                 DD_ERR_CORRUPT);
    /* a version this release does not know, checksum intact */
    uint8_t v2[DD_OWNER_RECORD_MAX];
    memcpy(v2, buf, n);
    v2[4] = 2;
    reseal(v2, n);
    CHECK_EQ_INT(dd_owner_decode(v2, n, &r, err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "version 2") != NULL);
    /* fields out of range behind a good checksum: hostile bytes */
    size_t tl = strlen(o.topic), at_parts = 6 + tl, at_part = at_parts + 4,
           at_shards = at_part + 1, at_shard = at_shards + 4, at_split = at_shard + 4;
    struct {
        size_t at;
        uint8_t v;
        const char *what;
    } hostile[] = {
        {at_parts, 0x80, "negative partition count"},
        {at_part, DD_PARTITIONER_COUNT, "unknown partitioner"},
        {at_shards + 3, 0, "shards out of range"},      /* shards 0 */
        {at_shards + 2, 0x10, "shards out of range"},   /* shards 4100 */
        {at_shard + 3, 4, "shard out of range"},
        {at_split + 3, 3, "split_from does not divide"},
        {6, '/', "not a Kafka topic name"},
        {6, 0, "not a Kafka topic name"},
    };
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        uint8_t h[DD_OWNER_RECORD_MAX];
        memcpy(h, buf, n);
        h[hostile[i].at] = hostile[i].v;
        reseal(h, n);
        CHECK_EQ_INT(dd_owner_decode(h, n, &r, err, sizeof err), DD_ERR_CORRUPT);
        CHECK_MSG(strstr(err, hostile[i].what) != NULL, "%s: %s", hostile[i].what, err);
        CHECK(same(&r, &untouched));
    }
    /* a topic length that points past the end */
    uint8_t h[DD_OWNER_RECORD_MAX];
    memcpy(h, buf, n);
    h[5] = 255;
    CHECK_EQ_INT(dd_owner_decode(h, n, &r, err, sizeof err), DD_ERR_CORRUPT);
}

static void test_relate(void)
{
    struct dd_owner s = own("plays", 8, 2, 1, 0), w = own("plays", 0, 2, 1, 0);
    CHECK_EQ_INT(dd_owner_relate(&s, &w), DD_OWNER_SAME);      /* count not known yet */
    w.partitions = 8;
    CHECK_EQ_INT(dd_owner_relate(&s, &w), DD_OWNER_SAME);
    w.partitions = 16;
    CHECK_EQ_INT(dd_owner_relate(&s, &w), DD_OWNER_OTHER);
    w = own("plays", 8, 2, 0, 0);                               /* a swapped volume */
    CHECK_EQ_INT(dd_owner_relate(&s, &w), DD_OWNER_OTHER);
    w = own("other", 8, 2, 1, 0);                               /* another deployment */
    CHECK_EQ_INT(dd_owner_relate(&s, &w), DD_OWNER_OTHER);
    w = own("plays", 8, 2, 1, 0);
    w.partitioner = DD_PARTITIONER_CONSISTENT_RANDOM;
    CHECK_EQ_INT(dd_owner_relate(&s, &w), DD_OWNER_OTHER);
    /* split 2 -> 4: shard 1 and shard 3 have parent 1; shard 2 does not */
    w = own("plays", 8, 4, 1, 2);
    CHECK_EQ_INT(dd_owner_relate(&s, &w), DD_OWNER_PARENT);
    w = own("plays", 8, 4, 3, 2);
    CHECK_EQ_INT(dd_owner_relate(&s, &w), DD_OWNER_PARENT);
    w = own("plays", 8, 4, 2, 2);
    CHECK_EQ_INT(dd_owner_relate(&s, &w), DD_OWNER_OTHER);
    /* no split declared: the parent is a stranger */
    w = own("plays", 8, 4, 3, 0);
    CHECK_EQ_INT(dd_owner_relate(&s, &w), DD_OWNER_OTHER);
}

static char root[64];
static struct dd_config cfg;

static dd_history *open_store(const char *name, bool *created)
{
    char err[256] = "", path[128];
    snprintf(path, sizeof path, "%s/%s", root, name);
    REQUIRE(dd_config_set(&cfg, "history.path", path, err, sizeof err) == DD_OK);
    dd_history *h = NULL;
    int rc = dd_history_open(&h, &cfg.history, &cfg.rocksdb, NULL, err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "open: %s\n", err);
    REQUIRE(rc == DD_OK && h);
    if (created) *created = dd_history_created(h);
    return h;
}

/* Open store NAME with WANT through a guard; whether it was refused, and
 * its message in WHY. */
static bool guarded(const char *name, const struct dd_owner *want, bool take_over,
                    uint64_t legacy, uint64_t legacy_parent, char *why, size_t whylen,
                    enum dd_owner_relation *rel, struct dd_owner *stored)
{
    char err[256];
    bool created;
    dd_history *h = open_store(name, &created);
    dd_owner_guard *g = NULL;
    REQUIRE(dd_owner_guard_new(&g, h, want, created, take_over, legacy, legacy_parent, err,
                               sizeof err) == DD_OK);
    why[0] = '\0';
    bool refused = dd_owner_guard_refused(g, why, whylen);
    if (rel) *rel = dd_owner_guard_relation(g);
    if (stored) {
        uint8_t v[DD_OWNER_RECORD_MAX];
        size_t n = 0;
        REQUIRE(dd_history_get_holds(h, v, sizeof v, &n, err, sizeof err) == DD_OK);
        if (n == 8)
            memset(stored, 0, sizeof *stored);
        else
            REQUIRE(dd_owner_decode(v, n, stored, err, sizeof err) == DD_OK);
    }
    dd_owner_guard_free(g);
    dd_history_close(h);
    return refused;
}

static void put_raw(const char *name, const void *v, size_t n)
{
    char err[256];
    dd_history *h = open_store(name, NULL);
    REQUIRE(dd_history_put_holds(h, v, n, err, sizeof err) == DD_OK);
    dd_history_close(h);
}

static void test_guard(void)
{
    char why[700], err[256];
    enum dd_owner_relation rel;
    struct dd_owner stored;
    struct dd_owner s0 = own("plays", 0, 2, 0, 0), s1 = own("plays", 0, 2, 1, 0);

    /* created: recorded; the same again: served */
    CHECK(!guarded("a", &s0, false, 0, 0, why, sizeof why, &rel, &stored));
    CHECK(same(&stored, &s0));
    CHECK(!guarded("a", &s0, false, 0, 0, why, sizeof why, &rel, NULL));
    CHECK_EQ_INT(rel, DD_OWNER_SAME);
    /* shard 1's node on shard 0's store: refused, naming both, record kept */
    CHECK(guarded("a", &s1, false, 0, 0, why, sizeof why, &rel, &stored));
    CHECK_MSG(strstr(why, "shards=2 shard=0") && strstr(why, "shards=2 shard=1"), "%s", why);
    CHECK(same(&stored, &s0));
    CHECK(guarded("a", &s1, false, 0, 0, why, sizeof why, NULL, NULL)); /* still */
    /* the take-over records shard 1 */
    CHECK(!guarded("a", &s1, true, 0, 0, why, sizeof why, &rel, &stored));
    CHECK(same(&stored, &s1));
    CHECK(guarded("a", &s0, false, 0, 0, why, sizeof why, NULL, NULL));

    /* the partition count: recorded once known, then compared */
    bool created;
    dd_history *h = open_store("b", &created);
    dd_owner_guard *g = NULL;
    REQUIRE(dd_owner_guard_new(&g, h, &s0, created, false, 0, 0, err, sizeof err) == DD_OK);
    CHECK(dd_owner_guard_partitions(g, 8));
    dd_owner_guard_free(g);
    dd_history_close(h);
    struct dd_owner s0p8 = own("plays", 8, 2, 0, 0);
    CHECK(!guarded("b", &s0, false, 0, 0, why, sizeof why, NULL, &stored));
    CHECK(same(&stored, &s0p8));
    h = open_store("b", &created);
    REQUIRE(dd_owner_guard_new(&g, h, &s0, created, false, 0, 0, err, sizeof err) == DD_OK);
    CHECK(!dd_owner_guard_refused(g, NULL, 0));
    CHECK(!dd_owner_guard_partitions(g, 16));       /* the topic was recreated */
    CHECK(dd_owner_guard_refused(g, why, sizeof why));
    CHECK_MSG(strstr(why, "partitions=8") && strstr(why, "partitions=16"), "%s", why);
    dd_owner_guard_free(g);
    dd_history_close(h);

    /* a split's parent: served, swept, then recorded as ours */
    struct dd_owner n3 = own("plays", 0, 4, 3, 2), parent = own("plays", 0, 2, 1, 0);
    CHECK(!guarded("c", &parent, false, 0, 0, why, sizeof why, NULL, NULL));
    h = open_store("c", &created);
    REQUIRE(dd_owner_guard_new(&g, h, &n3, created, false, 0, 0, err, sizeof err) == DD_OK);
    CHECK(!dd_owner_guard_refused(g, NULL, 0));
    CHECK_EQ_INT(dd_owner_guard_relation(g), DD_OWNER_PARENT);
    CHECK_EQ_INT(dd_owner_guard_swept(g, 8, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_owner_guard_relation(g), DD_OWNER_SAME);
    dd_owner_guard_free(g);
    dd_history_close(h);
    struct dd_owner n3p8 = own("plays", 8, 4, 3, 2);
    CHECK(!guarded("c", &n3, false, 0, 0, why, sizeof why, &rel, &stored));
    CHECK(same(&stored, &n3p8));
    CHECK_EQ_INT(rel, DD_OWNER_SAME);
    /* a swept store is not swept again, nor is a same-ownership one */
    h = open_store("c", &created);
    REQUIRE(dd_owner_guard_new(&g, h, &n3, created, false, 0, 0, err, sizeof err) == DD_OK);
    CHECK_EQ_INT(dd_owner_guard_swept(g, 8, err, sizeof err), DD_ERR_STATE);
    dd_owner_guard_free(g);
    dd_history_close(h);

    /* no record (the previous release's single node): adopted once */
    h = open_store("d", &created);
    dd_history_close(h); /* made, no record */
    CHECK(!guarded("d", &s0, false, 0, 0, why, sizeof why, &rel, &stored));
    CHECK(same(&stored, &s0));
    /* the previous release's id: ours adopted, the parent's swept, any
     * other refused */
    const uint8_t id1[8] = {0, 0, 0, 0, 0, 0, 0, 1}, id2[8] = {0, 0, 0, 0, 0, 0, 0, 2};
    put_raw("e", id1, 8);
    CHECK(!guarded("e", &s0, false, 1, 0, why, sizeof why, &rel, &stored));
    CHECK(same(&stored, &s0));
    put_raw("f", id2, 8);
    CHECK(!guarded("f", &n3, false, 1, 2, why, sizeof why, &rel, NULL));
    CHECK_EQ_INT(rel, DD_OWNER_PARENT);
    CHECK(guarded("f", &s0, false, 1, 0, why, sizeof why, NULL, NULL));
    CHECK(strstr(why, "previous release") != NULL);
    /* a damaged record: refused, never guessed at, left as it is */
    uint8_t v[DD_OWNER_RECORD_MAX];
    size_t n = dd_owner_encode(&s0, v);
    v[7] ^= 0x20;
    put_raw("g", v, n);
    CHECK(guarded("g", &s0, false, 0, 0, why, sizeof why, NULL, NULL));
    CHECK_MSG(strstr(why, "checksum") != NULL, "%s", why);
    h = open_store("g", NULL);
    uint8_t back[DD_OWNER_RECORD_MAX];
    size_t bn = 0;
    REQUIRE(dd_history_get_holds(h, back, sizeof back, &bn, err, sizeof err) == DD_OK);
    CHECK(bn == n && memcmp(back, v, n) == 0);
    dd_history_close(h);
}

int main(void)
{
    test_codec();
    test_relate();
    tl_tmpdir(root, sizeof root, "owner");
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    char err[256];
    REQUIRE(dd_config_set(&cfg, "history.sync", "false", err, sizeof err) == DD_OK);
    test_guard();
    dd_config_free(&cfg);
    tl_rm_tree(root);
    TEST_MAIN_END();
}
