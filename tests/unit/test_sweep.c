/* SPDX-License-Identifier: Apache-2.0
 *
 * test_sweep.c - the sweep after a split (sweep.h): none is started for a
 * store that is not a copy of the split's parent; one that is waits, and
 * neither compacts nor records ownership, while the cluster is not
 * settled; stopping it returns at once and leaves the store as it was.
 * (A settled cluster needs peers answering health rounds: the fleet
 * tests cover the sweep that runs.)
 */
#include "cluster.h"
#include "config.h"
#include "dd.h"
#include "history.h"
#include "owner.h"
#include "partition.h"
#include "rpc.h"
#include "sweep.h"
#include "testlib.h"

#include <stdio.h>
#include <string.h>

static char root[64];
static struct dd_config cfg;

static struct dd_owner own(uint32_t shards, uint32_t shard, uint32_t split_from)
{
    struct dd_owner o = {.partitions = 0,
                         .partitioner = DD_PARTITIONER_MURMUR2_RANDOM,
                         .shards = shards,
                         .shard = shard,
                         .split_from = split_from};
    snprintf(o.topic, sizeof o.topic, "plays");
    return o;
}

/* Store NAME under root, opened with a guard that wants WANT (*G). */
static dd_history *open_guarded(const char *name, const struct dd_owner *want, dd_owner_guard **g)
{
    char err[256] = "", path[128];
    snprintf(path, sizeof path, "%s/%s", root, name);
    REQUIRE(dd_config_set(&cfg, "history.path", path, err, sizeof err) == DD_OK);
    dd_history *h = NULL;
    CHECK_MSG(dd_history_open(&h, &cfg.history, &cfg.rocksdb, NULL, err, sizeof err) == DD_OK, "%s",
              err);
    REQUIRE(h != NULL);
    CHECK_MSG(dd_owner_guard_new(g, h, want, dd_history_created(h), false, 0, 0, err, sizeof err) ==
                  DD_OK,
              "%s", err);
    REQUIRE(*g != NULL);
    return h;
}

static int32_t l_partitions(void *ud)
{
    (void)ud;
    return 8;
}

static bool l_changed(void *ud)
{
    (void)ud;
    return false;
}

static int64_t l_lag(void *ud)
{
    (void)ud;
    return 0;
}

/* A store of this node's own ownership is never swept. */
static void test_not_parent(void)
{
    char err[256] = "";
    struct dd_owner mine = own(4, 3, 2);
    dd_owner_guard *g = NULL;
    dd_history *h = open_guarded("same", &mine, &g);
    CHECK(dd_owner_guard_relation(g) != DD_OWNER_PARENT);
    dd_sweep *s = (dd_sweep *)&s; /* must be overwritten */
    CHECK_MSG(dd_sweep_start(&s, h, NULL, g, err, sizeof err) == DD_OK, "%s", err);
    CHECK(s == NULL);
    dd_sweep_stop(s); /* NULL is a no-op */
    dd_owner_guard_free(g);
    dd_history_close(h);
}

/* A copy of the parent's store under a cluster that is not settled (no
 * health round has run): the sweep waits and changes nothing. */
static void test_waits_until_settled(void)
{
    char err[256] = "";
    /* The parent shard 1 of 2 made the store ... */
    struct dd_owner parent = own(2, 1, 0), mine = own(4, 3, 2);
    dd_owner_guard *g = NULL;
    dd_history *h = open_guarded("parent", &parent, &g);
    dd_owner_guard_free(g);
    /* A play of some user, foreign or not: nothing may drop it. */
    dd_history_batch *b = dd_history_batch_new();
    REQUIRE(b != NULL);
    uint32_t seg = 0;
    REQUIRE(dd_history_place(h, "", 0, dd_history_now_ms(h), &seg) == DD_HISTORY_PLACE_OK);
    uint64_t item = dd_hash("v1", 2);
    for (int u = 0; u < 64; u++) {
        char user[16];
        int n = snprintf(user, sizeof user, "u%d", u);
        REQUIRE(dd_history_batch_add(b, "", 0, user, (size_t)n, seg, &item, 1) == DD_OK);
    }
    CHECK_MSG(dd_history_write(h, b, err, sizeof err) == DD_OK, "%s", err);
    dd_history_batch_free(b);
    dd_history_close(h);

    /* ... and shard 3 of the split 2 -> 4 opens it. */
    h = open_guarded("parent", &mine, &g);
    CHECK_EQ_INT(dd_owner_guard_relation(g), DD_OWNER_PARENT);
    struct dd_cluster_conf c = {
        .shards = 4,
        .shard = (char *)"3",
        .replica = (char *)"0",
        .nodes = (char *)"127.0.0.1:1;127.0.0.1:2;127.0.0.1:3;127.0.0.1:4",
        .partitioner = (char *)"murmur2_random",
        .redis = (char *)"",
        .max_lag_ms = 10000,
        .health_interval_ms = 1000,
        .forward_timeout_ms = 5000,
        .tls_ca = (char *)"",
        .tls_server_name = (char *)"",
        .split_from = 2,
    };
    struct dd_cluster_map m;
    REQUIRE(dd_cluster_conf_check(&c, "h", &m, err, sizeof err) == DD_OK);
    struct dd_tls_conf tls = {.cert = (char *)"", .key = (char *)"", .client_ca = (char *)""};
    struct dd_peer_conf peer = {.tls = &tls, .tls_ca = "", .tls_server_name = ""};
    struct dd_cluster_local local = {l_partitions, l_changed, l_lag, NULL};
    dd_cluster *cl = NULL;
    REQUIRE(dd_cluster_new(&cl, &m, &c, &peer, 0, 0, &local, err, sizeof err) == DD_OK);
    dd_history_set_owner(h, dd_cluster_owns, cl);
    REQUIRE(!dd_cluster_settled(cl, NULL));

    dd_sweep *s = NULL;
    CHECK_MSG(dd_sweep_start(&s, h, cl, g, err, sizeof err) == DD_OK, "%s", err);
    CHECK(s != NULL);
    dd_sleep_ms(2500); /* past two of the sweep's looks at the cluster */
    int64_t t0 = dd_mono_ns();
    dd_sweep_stop(s);
    int64_t stop_ms = (dd_mono_ns() - t0) / 1000000;
    CHECK_MSG(stop_ms < 1000, "dd_sweep_stop took %lld ms", (long long)stop_ms);
    /* Not swept: the ownership is still the parent's, nothing compacted
     * or dropped, every user still there. */
    CHECK_EQ_INT(dd_owner_guard_relation(g), DD_OWNER_PARENT);
    struct dd_history_stats st;
    dd_history_get_stats(h, &st);
    CHECK_EQ_INT(st.segments_foreign, 0);
    CHECK_EQ_INT(st.compaction_bytes, 0); /* one L0 file: only a sweep would compact */
    int found = 0;
    for (int u = 0; u < 64; u++) {
        char user[16];
        int n = snprintf(user, sizeof user, "u%d", u);
        uint8_t hit = 0;
        REQUIRE(dd_history_probe(h, "", 0, user, (size_t)n, 0, &item, 1, &hit, err, sizeof err) ==
                DD_OK);
        found += hit != 0;
    }
    CHECK_EQ_INT(found, 64);
    dd_owner_guard_free(g);
    dd_history_close(h);
    dd_cluster_free(cl); /* and the map it took over */
}

int main(void)
{
    tl_tmpdir(root, sizeof root, "sweep");
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    test_not_parent();
    test_waits_until_settled();
    dd_config_free(&cfg);
    tl_rm_tree(root);
    TEST_MAIN_END();
}
