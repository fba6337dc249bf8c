/* SPDX-License-Identifier: Apache-2.0
 *
 * test_cluster.c - the cluster map ([cluster] keys): parsing cluster.nodes,
 * this node's place (numbers and "auto" from a StatefulSet host name),
 * cluster.redis, the map hash (equal maps agree, any difference shows),
 * and a user's shard from its partition. The running cluster (peers,
 * forwarding) is tests/integration/test_cluster.py's.
 */
#include "testlib.h"

#include "cluster.h"
#include "cluster_page.h"
#include "snapshot.h"
#include "dd.h"
#include "partition.h"

#include <stdio.h>
#include <stdlib.h>

#include <string.h>

static struct dd_cluster_conf conf(uint32_t shards, const char *shard, const char *replica,
                                   const char *nodes)
{
    return (struct dd_cluster_conf){
        .shards = shards,
        .shard = (char *)shard,
        .replica = (char *)replica,
        .nodes = (char *)nodes,
        .partitioner = (char *)"murmur2_random",
        .redis = (char *)"",
        .max_lag_ms = 10000,
        .health_interval_ms = 1000,
        .forward_timeout_ms = 5000,
        .tls_ca = (char *)"",
        .tls_server_name = (char *)"",
    };
}

static void test_single_node(void)
{
    char err[256];
    struct dd_cluster_conf c = conf(1, "0", "0", "");
    struct dd_cluster_map m;
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "h", &m, err, sizeof err), DD_OK);
    CHECK(!dd_cluster_enabled(&c));
    CHECK_EQ_INT(m.shards, 1);
    CHECK_EQ_INT(m.nreplicas[0], 1);
    dd_cluster_map_free(&m);
    /* One shard, one node listed: still a single node. */
    c = conf(1, "0", "0", "10.0.0.1:50051");
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "h", NULL, err, sizeof err), DD_OK);
    CHECK(!dd_cluster_enabled(&c));
    /* One shard of two replicas is a cluster. */
    c = conf(1, "0", "1", "10.0.0.1:50051, 10.0.0.2:50051");
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "h", NULL, err, sizeof err), DD_OK);
    CHECK(dd_cluster_enabled(&c));
}

static void test_map(void)
{
    char err[256];
    struct dd_cluster_conf c =
        conf(2, "1", "0", " a:1 , b:2 ; c:3,d:4,e:5 ");
    struct dd_cluster_map m;
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "h", &m, err, sizeof err), DD_OK);
    CHECK(dd_cluster_enabled(&c));
    CHECK_EQ_INT(m.shards, 2);
    CHECK_EQ_INT(m.shard, 1);
    CHECK_EQ_INT(m.replica, 0);
    CHECK_EQ_INT(m.nreplicas[0], 2);
    CHECK_EQ_INT(m.nreplicas[1], 3);
    CHECK_STR(m.addr[0][0], "a:1");
    CHECK_STR(m.addr[0][1], "b:2");
    CHECK_STR(m.addr[1][2], "e:5");
    CHECK_EQ_INT(m.partitioner, DD_PARTITIONER_MURMUR2_RANDOM);
    char hex[17];
    dd_cluster_map_hash_hex(&m, hex);
    CHECK_EQ_INT(strlen(hex), 16);

    /* The same map from another node (other place, other blanks): same
     * hashes. */
    struct dd_cluster_conf c2 = conf(2, "0", "1", "a:1,b:2;c:3,d:4,e:5");
    struct dd_cluster_map m2;
    CHECK_EQ_INT(dd_cluster_conf_check(&c2, "h", &m2, err, sizeof err), DD_OK);
    CHECK(m.hash == m2.hash && m.nodes_hash == m2.nodes_hash);
    dd_cluster_map_free(&m2);
    /* Another order, address or replica count: the same ownership, another
     * node list. */
    const char *others[] = {"b:2,a:1;c:3,d:4,e:5", "a:1,b:2;c:3,d:4,e:6", "a:1,b:2;c:3,d:4"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        c2 = conf(2, "0", "0", others[i]);
        CHECK_EQ_INT(dd_cluster_conf_check(&c2, "h", &m2, err, sizeof err), DD_OK);
        CHECK_MSG(m.hash == m2.hash && m.nodes_hash != m2.nodes_hash, "%s", others[i]);
        dd_cluster_map_free(&m2);
    }
    /* Another partitioner or shard count: another owner for some users. */
    c2 = conf(2, "0", "0", "a:1,b:2;c:3,d:4,e:5");
    c2.partitioner = (char *)"consistent_random";
    CHECK_EQ_INT(dd_cluster_conf_check(&c2, "h", &m2, err, sizeof err), DD_OK);
    CHECK(m.hash != m2.hash);
    dd_cluster_map_free(&m2);
    c2 = conf(3, "0", "0", "a:1,b:2;c:3,d:4,e:5;f:6");
    CHECK_EQ_INT(dd_cluster_conf_check(&c2, "h", &m2, err, sizeof err), DD_OK);
    CHECK(m.hash != m2.hash);
    dd_cluster_map_free(&m2);
    dd_cluster_map_free(&m);
}

static void test_bad(void)
{
    char err[256];
    struct {
        uint32_t shards;
        const char *shard, *replica, *nodes, *want;
    } bad[] = {
        {2, "0", "0", "", "cluster.nodes: must list every node"},
        {2, "0", "0", "a:1", "cluster.nodes: lists 1 shards, cluster.shards is 2"},
        {1, "0", "0", "a:1;b:1", "cluster.nodes: lists more shards"},
        {2, "0", "0", "a:1;", "cluster.nodes: \"\" (shard 1) is not host:port"},
        {2, "0", "0", "a:1;b", "cluster.nodes: \"b\" (shard 1) is not host:port"},
        {2, "0", "0", "a:1;a:1", "cluster.nodes: \"a:1\" is listed twice"},
        {2, "2", "0", "a:1;b:1", "cluster.shard: \"2\" is not \"auto\" nor a number below 2"},
        {2, "-1", "0", "a:1;b:1", "cluster.shard:"},
        {2, "0", "1", "a:1;b:1", "cluster.replica: 1 but shard 0 of cluster.nodes has 1"},
        {2, "auto", "0", "a:1;b:1", "\"auto\" must be given to both"},
        {2, "0", "x", "a:1;b:1", "cluster.replica:"},
        {2, "auto", "auto", "a:1;b:1,c:1", "every shard of cluster.nodes needs the same"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct dd_cluster_conf c = conf(bad[i].shards, bad[i].shard, bad[i].replica, bad[i].nodes);
        err[0] = '\0';
        CHECK_MSG(dd_cluster_conf_check(&c, "h", NULL, err, sizeof err) == DD_ERR_INVALID,
                  "%s", bad[i].nodes);
        CHECK_MSG(strstr(err, bad[i].want) != NULL, "%s: got \"%s\"", bad[i].want, err);
    }
    struct dd_cluster_conf c = conf(1, "0", "0", "");
    c.partitioner = (char *)"random";
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "h", NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "cluster.partitioner") != NULL);
    c = conf(2, "0", "0", "a:1;b:1");
    c.redis = (char *)"r:6379";
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "h", NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "cluster.redis: lists 1 Redis addresses, cluster.shards is 2") != NULL);
    c.redis = (char *)"r:6379;nope";
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "h", NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "\"nope\" (shard 1)") != NULL);
}

static void test_auto(void)
{
    char err[256];
    struct dd_cluster_conf c = conf(3, "auto", "auto", "a:1,a:2;b:1,b:2;c:1,c:2");
    struct dd_cluster_map m;
    /* Replica-major: shard = ordinal mod shards, replica = ordinal / shards. */
    const struct {
        const char *host;
        uint32_t shard, replica;
    } ok[] = {{"dedupd-0", 0, 0}, {"dedupd-1", 1, 0}, {"dedupd-2", 2, 0},
              {"dedupd-4", 1, 1}, {"my-dedupd-5", 2, 1}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CHECK_EQ_INT(dd_cluster_conf_check(&c, ok[i].host, &m, err, sizeof err), DD_OK);
        CHECK_MSG(m.shard == ok[i].shard && m.replica == ok[i].replica, "%s: %u.%u", ok[i].host,
                  m.shard, m.replica);
        dd_cluster_map_free(&m);
    }
    const char *bad[] = {"dedupd-6", "dedupd", "dedupd-", "dedupd-x", "dedupd-1a", "dedupd-+1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(dd_cluster_conf_check(&c, bad[i], NULL, err, sizeof err) == DD_ERR_INVALID,
                  "%s", bad[i]);
        CHECK_MSG(strstr(err, "does not end in -N") != NULL, "%s: %s", bad[i], err);
    }
}

static void test_redis(void)
{
    char err[256], out[64];
    struct dd_cluster_conf c = conf(2, "1", "0", "a:1;b:1");
    CHECK(!dd_cluster_shard_redis(&c, 1, out, sizeof out));
    c.redis = (char *)" r0:6379 ; r1:6380 ";
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "h", NULL, err, sizeof err), DD_OK);
    CHECK(dd_cluster_shard_redis(&c, 0, out, sizeof out));
    CHECK_STR(out, "r0:6379");
    CHECK(dd_cluster_shard_redis(&c, 1, out, sizeof out));
    CHECK_STR(out, "r1:6380");
}

static void test_shard_of(void)
{
    char err[256];
    struct dd_cluster_conf c = conf(3, "0", "0", "a:1;b:1;c:1");
    struct dd_cluster_map m;
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "h", &m, err, sizeof err), DD_OK);
    int seen[3] = {0};
    for (int i = 0; i < 3000; i++) {
        char user[32];
        int n = snprintf(user, sizeof user, "user-%d", i);
        int32_t p;
        uint32_t s = dd_cluster_shard_of(&m, user, (size_t)n, 12, &p);
        CHECK_EQ_INT(p, dd_partition_of(DD_PARTITIONER_MURMUR2_RANDOM, user, (size_t)n, 12));
        CHECK_EQ_INT(s, (uint32_t)p % 3);
        seen[s]++;
    }
    /* Every shard gets users (murmur2 spreads them). */
    CHECK(seen[0] > 800 && seen[1] > 800 && seen[2] > 800);
    dd_cluster_map_free(&m);
}

/* What the running cluster asks of ingest, faked. */
static int32_t fake_partitions = 0;
static bool fake_changed = false;
static int64_t fake_lag = -1;
static int32_t l_partitions(void *ud) { (void)ud; return fake_partitions; }
static bool l_changed(void *ud) { (void)ud; return fake_changed; }
static int64_t l_lag(void *ud) { (void)ud; return fake_lag; }

/* The running cluster's answers from ingest's state alone (no peer is
 * probed: the health thread is not started): routing needs the partition
 * count, and a count that changed while running (partitions added to the
 * topic) makes the node refuse every call and report not ready. ingest.c's
 * detection of the change cannot be driven here nor against the devbroker
 * (librdkafka's mock cluster cannot add partitions to a topic). */
static void test_running(void)
{
    char err[256], why[256];
    struct dd_cluster_conf c = conf(2, "0", "0", "127.0.0.1:1;127.0.0.1:2");
    struct dd_cluster_map m;
    REQUIRE(dd_cluster_conf_check(&c, "h", &m, err, sizeof err) == DD_OK);
    struct dd_tls_conf tls = {.cert = (char *)"", .key = (char *)"", .client_ca = (char *)""};
    struct dd_peer_conf peer = {.tls = &tls, .tls_ca = "", .tls_server_name = ""};
    struct dd_cluster_local local = {l_partitions, l_changed, l_lag, NULL};
    dd_cluster *cl = NULL;
    REQUIRE(dd_cluster_new(&cl, &m, &c, &peer, 0, 0, &local, err, sizeof err) == DD_OK);
    uint32_t shard;
    bool here;
    CHECK_EQ_INT(dd_cluster_route(cl, "u", 1, &shard, &here, err, sizeof err),
                 DD_ERR_UNAVAILABLE);
    CHECK(strstr(err, "partition count") != NULL);
    CHECK(!dd_cluster_ready(cl, why, sizeof why));
    CHECK(strstr(why, "not known yet") != NULL);
    fake_partitions = 8;
    int shards_seen[2] = {0, 0};
    for (int i = 0; i < 200; i++) {
        char u[16];
        int n = snprintf(u, sizeof u, "u%d", i);
        CHECK_EQ_INT(dd_cluster_route(cl, u, (size_t)n, &shard, &here, err, sizeof err), DD_OK);
        CHECK(shard < 2 && here == (shard == 0));
        shards_seen[shard]++;
    }
    CHECK(shards_seen[0] > 0 && shards_seen[1] > 0);
    /* Not caught up until a health round says so (none runs here). */
    fake_lag = 0;
    CHECK(!dd_cluster_ready(cl, why, sizeof why));
    CHECK(dd_cluster_self_behind(cl));
    fake_changed = true;
    CHECK_EQ_INT(dd_cluster_route(cl, "u1", 2, &shard, &here, err, sizeof err),
                 DD_ERR_UNAVAILABLE);
    CHECK(strstr(err, "partition count changed") != NULL);
    CHECK(!dd_cluster_ready(cl, why, sizeof why));
    CHECK(strstr(why, "partition count changed") != NULL);
    char *json = dd_cluster_describe(cl);
    CHECK(json && strstr(json, "\"partition_count\":8") && strstr(json, "\"self\":true"));
    free(json);
    dd_cluster_free(cl);
}

/* Resharding: split_from's checks, the hashes and ids, the relation of
 * maps, and that nothing is dropped while not settled. */
static void test_split(void)
{
    char err[256];
    struct dd_cluster_conf c = conf(2, "1", "0", "127.0.0.1:1;127.0.0.1:2");
    c.split_from = 2;
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "h", NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "cluster.split_from") != NULL);
    c.split_from = 3;
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "h", NULL, err, sizeof err), DD_ERR_INVALID);
    struct dd_cluster_conf c4 = conf(4, "0", "0", "127.0.0.1:1;127.0.0.1:2;127.0.0.1:3;127.0.0.1:4");
    c4.split_from = 3;
    CHECK_EQ_INT(dd_cluster_conf_check(&c4, "h", NULL, err, sizeof err), DD_ERR_INVALID);

    /* the old map: one shard, two replicas */
    struct dd_cluster_conf old = conf(1, "0", "0", "127.0.0.1:1,127.0.0.1:3");
    struct dd_cluster_map mo, mn;
    REQUIRE(dd_cluster_conf_check(&old, "h", &mo, err, sizeof err) == DD_OK);
    char old_hex[17], split_none[17];
    dd_cluster_map_hash_hex(&mo, old_hex);
    dd_cluster_map_split_hex(&mo, split_none);
    CHECK(split_none[0] == '\0');
    CHECK_EQ_INT(dd_cluster_source_shard(&mo), 0);

    /* the new map: 2 shards split from 1; this node is the new shard 1 */
    c.split_from = 1;
    REQUIRE(dd_cluster_conf_check(&c, "h", &mn, err, sizeof err) == DD_OK);
    char new_hex[17], new_split[17];
    dd_cluster_map_hash_hex(&mn, new_hex);
    dd_cluster_map_split_hex(&mn, new_split);
    CHECK(strcmp(new_split, old_hex) == 0);
    CHECK(strcmp(new_hex, old_hex) != 0);
    CHECK_EQ_INT(dd_cluster_source_shard(&mn), 0);
    CHECK(dd_cluster_ownership_id(&mn) != dd_cluster_ownership_id(&mo));
    struct dd_cluster_conf c0 = c;
    c0.shard = (char *)"0";
    struct dd_cluster_map m0;
    REQUIRE(dd_cluster_conf_check(&c0, "h", &m0, err, sizeof err) == DD_OK);
    CHECK_EQ_INT(dd_cluster_source_shard(&m0), 0);
    CHECK(dd_cluster_ownership_id(&m0) != dd_cluster_ownership_id(&mn));
    dd_cluster_map_free(&m0);
    /* 2 -> 4: shard 3's parent is 1 */
    struct dd_cluster_conf c43 = c4;
    c43.shard = (char *)"3";
    c43.split_from = 2;
    struct dd_cluster_map m43;
    REQUIRE(dd_cluster_conf_check(&c43, "h", &m43, err, sizeof err) == DD_OK);
    CHECK_EQ_INT(dd_cluster_source_shard(&m43), 1);
    dd_cluster_map_free(&m43);

    /* auto after a split 2 -> 4 with 2 replicas: the old pods 0..3 keep
     * their places, 4..7 take shards 2 and 3 */
    struct dd_cluster_conf ca = conf(4, "auto", "auto",
                                     "h0:1,h2:1;h1:1,h3:1;h4:1,h6:1;h5:1,h7:1");
    ca.split_from = 2;
    /* without the replicas at the split, auto after a split is refused */
    CHECK_EQ_INT(dd_cluster_conf_check(&ca, "dedupd-4", NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "cluster.split_replicas") != NULL);
    ca.split_replicas = 3;   /* more than there are */
    CHECK_EQ_INT(dd_cluster_conf_check(&ca, "dedupd-4", NULL, err, sizeof err), DD_ERR_INVALID);
    ca.split_replicas = 2;
    static const uint32_t want[8][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1},
                                        {2, 0}, {3, 0}, {2, 1}, {3, 1}};
    for (int k = 0; k < 8; k++) {
        char host[32];
        snprintf(host, sizeof host, "dedupd-%d", k);
        struct dd_cluster_map ma;
        REQUIRE(dd_cluster_conf_check(&ca, host, &ma, err, sizeof err) == DD_OK);
        CHECK_EQ_INT(ma.shard, want[k][0]);
        CHECK_EQ_INT(ma.replica, want[k][1]);
        dd_cluster_map_free(&ma);
    }
    CHECK_EQ_INT(dd_cluster_conf_check(&ca, "dedupd-8", NULL, err, sizeof err), DD_ERR_INVALID);

    struct dd_tls_conf tls = {.cert = (char *)"", .key = (char *)"", .client_ca = (char *)""};
    struct dd_peer_conf peer = {.tls = &tls, .tls_ca = "", .tls_server_name = ""};
    struct dd_cluster_local local = {l_partitions, l_changed, l_lag, NULL};
    fake_partitions = 8;
    fake_changed = false;
    /* an old node meets new ones */
    dd_cluster *co = NULL, *cn = NULL;
    REQUIRE(dd_cluster_new(&co, &mo, &old, &peer, 0, 0, &local, err, sizeof err) == DD_OK);
    REQUIRE(dd_cluster_new(&cn, &mn, &c, &peer, 0, 0, &local, err, sizeof err) == DD_OK);
    enum dd_cluster_relation rel = DD_MAP_OTHER;
    CHECK_EQ_INT(dd_cluster_check_peer_map(co, new_hex, new_split, "1.0", &rel, err, sizeof err),
                 DD_OK);
    CHECK_EQ_INT(rel, DD_MAP_NEWER);
    CHECK_EQ_INT(dd_cluster_check_peer_map(cn, old_hex, "", "0.1", &rel, err, sizeof err), DD_OK);
    CHECK_EQ_INT(rel, DD_MAP_OLDER);
    CHECK_EQ_INT(dd_cluster_check_peer_map(cn, new_hex, new_split, "0.0", &rel, err, sizeof err),
                 DD_OK);
    CHECK_EQ_INT(rel, DD_MAP_SAME);
    /* a new map without split_from is a stranger to the old one */
    CHECK_EQ_INT(dd_cluster_check_peer_map(co, new_hex, "", "1.0", &rel, err, sizeof err),
                 DD_ERR_STATE);
    CHECK_EQ_INT(rel, DD_MAP_OTHER);
    /* a map that claims to split some other map */
    CHECK_EQ_INT(dd_cluster_check_peer_map(co, "0123456789abcdef", "fedcba9876543210", "1.0",
                                           &rel, err, sizeof err),
                 DD_ERR_STATE);
    /* not settled (no health round ran): every user is kept */
    uint64_t rounds = 7;
    CHECK(!dd_cluster_settled(cn, &rounds));
    CHECK_EQ_INT(rounds, 0);
    for (int i = 0; i < 100; i++) {
        char u[16];
        int n = snprintf(u, sizeof u, "u%d", i);
        CHECK(dd_cluster_owns(cn, u, (size_t)n));
    }
    char *json = dd_cluster_describe(cn);
    CHECK(json && strstr(json, "\"split_from\":1") && strstr(json, "\"settled\":false"));
    free(json);
    dd_cluster_free(co);
    dd_cluster_free(cn);
}

/* Every map transition auto placement meets: replicas added one at a time
 * to every shard, before and after a split (N -> kN), never gives an
 * existing ordinal another place, and the split itself keeps the old
 * map's ordinals where they were. The case: 2 -> 4 shards with 2
 * replicas, then a third: dedupd-4 stays shard 2 replica 0 (the placement
 * before cluster.split_replicas made it shard 0 replica 2). */
static void test_auto_transitions(void)
{
    int moves = 0, checked = 0;
    for (uint32_t m = 1; m <= 4; m++) {
        for (uint32_t k = 2; k <= 3; k++) {
            uint32_t n = m * k;
            for (uint32_t r0 = 1; r0 <= 3; r0++) {
                /* the split: the M-shard map's pods keep their places */
                for (uint32_t ord = 0; ord < m * r0; ord++) {
                    uint32_t s0, p0, s1, p1;
                    REQUIRE(dd_cluster_auto_place(m, r0, 0, 0, ord, &s0, &p0) == DD_OK);
                    REQUIRE(dd_cluster_auto_place(n, r0, m, r0, ord, &s1, &p1) == DD_OK);
                    if (s0 != s1 || p0 != p1) moves++;
                    checked++;
                }
                /* then replicas added: R -> R + 1, each ordinal that existed
                 * keeps shard and replica; each place is taken once */
                for (uint32_t r = r0; r < 6; r++) {
                    bool seen[12][8] = {{false}};
                    for (uint32_t ord = 0; ord < n * (r + 1); ord++) {
                        uint32_t s1, p1;
                        REQUIRE(dd_cluster_auto_place(n, r + 1, m, r0, ord, &s1, &p1) == DD_OK);
                        REQUIRE(s1 < n && p1 < r + 1);
                        CHECK(!seen[s1][p1]);
                        seen[s1][p1] = true;
                        if (ord >= n * r) continue;
                        uint32_t s0, p0;
                        REQUIRE(dd_cluster_auto_place(n, r, m, r0, ord, &s0, &p0) == DD_OK);
                        if (s0 != s1 || p0 != p1) moves++;
                        checked++;
                    }
                }
            }
        }
        /* no split: adding replicas moves nobody either */
        for (uint32_t r = 1; r < 6; r++)
            for (uint32_t ord = 0; ord < m * r; ord++) {
                uint32_t s0, p0, s1, p1;
                REQUIRE(dd_cluster_auto_place(m, r, 0, 0, ord, &s0, &p0) == DD_OK);
                REQUIRE(dd_cluster_auto_place(m, r + 1, 0, 0, ord, &s1, &p1) == DD_OK);
                if (s0 != s1 || p0 != p1) moves++;
                checked++;
            }
    }
    CHECK_EQ_INT(moves, 0);
    CHECK(checked > 1000);

    /* the case, through the configuration: 2 -> 4 shards made with
     * 2 replicas, a third replica added, split_from kept */
    char err[512];
    struct dd_cluster_conf c = conf(4, "auto", "auto",
                                    "h0:1,h2:1,h8:1;h1:1,h3:1,h9:1;h4:1,h6:1,h10:1;"
                                    "h5:1,h7:1,h11:1");
    c.split_from = 2;
    c.split_replicas = 2;
    struct dd_cluster_map ma;
    REQUIRE(dd_cluster_conf_check(&c, "dedupd-4", &ma, err, sizeof err) == DD_OK);
    CHECK_EQ_INT(ma.shard, 2);
    CHECK_EQ_INT(ma.replica, 0);
    dd_cluster_map_free(&ma);
    REQUIRE(dd_cluster_conf_check(&c, "dedupd-8", &ma, err, sizeof err) == DD_OK);
    CHECK_EQ_INT(ma.shard, 0);
    CHECK_EQ_INT(ma.replica, 2);
    dd_cluster_map_free(&ma);
    /* the same map without split_replicas would have moved dedupd-4 (to
     * shard 0 replica 2): refused instead */
    c.split_replicas = 0;
    CHECK_EQ_INT(dd_cluster_conf_check(&c, "dedupd-4", NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "cluster.split_replicas") != NULL);
    /* arguments that describe no map */
    uint32_t s, r;
    CHECK_EQ_INT(dd_cluster_auto_place(4, 2, 2, 2, 8, &s, &r), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_cluster_auto_place(4, 2, 3, 2, 0, &s, &r), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_cluster_auto_place(4, 2, 2, 3, 0, &s, &r), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_cluster_auto_place(4, 2, 2, 0, 0, &s, &r), DD_ERR_INVALID);
}

/* cluster.max_forward_inflight: the automatic cap leaves half a method's
 * slots to this node's own calls, and an explicit value that would leave
 * it none is refused naming the key. */
static void test_forward_cap(void)
{
    char err[256];
    /* 2 threads x 8 slots, 2 shards: 8 for the other shard. */
    CHECK_EQ_INT(dd_cluster_forward_cap(0, 2, 2, 8), 8);
    /* 5 shards: 16 / (2 x 4) = 2 each. */
    CHECK_EQ_INT(dd_cluster_forward_cap(0, 5, 2, 8), 2);
    /* Never 0, however many shards. */
    CHECK_EQ_INT(dd_cluster_forward_cap(0, 64, 1, 1), 1);
    /* One shard of replicas: its own calls go to a caught-up replica. */
    CHECK_EQ_INT(dd_cluster_forward_cap(0, 1, 2, 8), 8);
    CHECK_EQ_INT(dd_cluster_forward_cap(3, 2, 2, 8), 3);

    CHECK_EQ_INT(dd_cluster_forward_cap_check(0, 2, 2, 8, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_cluster_forward_cap_check(15, 2, 2, 8, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_cluster_forward_cap_check(16, 2, 2, 8, err, sizeof err), DD_ERR_INVALID);
    CHECK(strstr(err, "cluster.max_forward_inflight") != NULL);
    /* 3 other shards x 5 = 15 < 16: passes; x 6 = 18 does not. */
    CHECK_EQ_INT(dd_cluster_forward_cap_check(5, 4, 2, 8, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_cluster_forward_cap_check(6, 4, 2, 8, err, sizeof err), DD_ERR_INVALID);
}

/* Peer channels' receive limits: a Filter reply of rpc.max_candidates
 * ids of rpc.max_id_bytes each fits, a byte more than the bound cannot be
 * produced; the snapshot ones cover a full chunk and manifest. */
static void test_reply_limits(void)
{
    /* 20000 ids of 256 bytes: each a key, a 2-byte length and the id. */
    size_t max = dd_cluster_filter_reply_max(20000, 256);
    CHECK(max >= 20000u * (1 + 2 + 256));
    CHECK(max < 20000u * (1 + 2 + 256) + 64);
    /* Tiny ids: a Removed entry (explain) is the larger per candidate. */
    CHECK(dd_cluster_filter_reply_max(10, 1) >= 10u * (2 + 2 + 2)); /* key, length, index, reason */
    CHECK(dd_cluster_filter_reply_max(UINT32_MAX, 65535) > (size_t)INT32_MAX);
    CHECK(dd_cluster_chunk_reply_max() > DD_SNAPSHOT_CHUNK_MAX);
    CHECK(dd_cluster_chunk_reply_max() < DD_SNAPSHOT_CHUNK_MAX + 16);
    CHECK(dd_cluster_manifest_reply_max() >
          (size_t)DD_SNAPSHOT_FILES_MAX * (DD_SNAPSHOT_NAME_MAX + 22));
    grpc_slice big = grpc_slice_from_static_string("Received message larger than max (9 vs. 4)");
    grpc_slice full = grpc_slice_from_static_string("Buffers full");
    grpc_slice other = grpc_slice_from_static_string("out of memory");
    CHECK(dd_cluster_reply_too_large(GRPC_STATUS_RESOURCE_EXHAUSTED, big));
    CHECK(dd_cluster_reply_too_large(GRPC_STATUS_RESOURCE_EXHAUSTED, full));
    CHECK(!dd_cluster_reply_too_large(GRPC_STATUS_RESOURCE_EXHAUSTED, other));
    CHECK(!dd_cluster_reply_too_large(GRPC_STATUS_UNAVAILABLE, big));
}

int main(void)
{
    test_reply_limits();
    test_single_node();
    test_map();
    test_bad();
    test_auto();
    test_redis();
    test_shard_of();
    test_running();
    test_split();
    test_auto_transitions();
    test_forward_cap();
    TEST_MAIN_END();
}
