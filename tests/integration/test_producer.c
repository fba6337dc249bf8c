/* SPDX-License-Identifier: Apache-2.0
 *
 * test_producer.c - src/producer against the real devbroker and
 * src/record's hooks onto it, run by test_producer.py, which starts the
 * servers and passes them on:
 *
 *   test_producer BROKER_ADDR BROKER_PID REDIS_ADDR
 *
 * Plays and forget markers from several threads at once land in the
 * partition dd_partition_of gives their user (murmur2_random on 8
 * partitions, JSON; fnv1a on 6, protobuf) and read back, with a consumer,
 * as the PlayEvents and markers ingest decodes. A deadline already past
 * is DD_ERR_TIMEOUT (the messages' reports come later, into a waiter the
 * caller has left: ASan watches), and so is a call while the brokers are
 * down (the test sends the devbroker SIGUSR1, then SIGUSR2) or the topic
 * is unknown to them (plays-gone, which test_producer.py makes look
 * missing: the devbroker would create a topic really missing). RecordPlays and ForgetUser with a
 * producer write locally, then produce (the resolved times, the marker);
 * with the brokers down they answer UNAVAILABLE saying the local write
 * happened.
 */
#include "arena.h"
#include "config.h"
#include "dd.h"
#include "history.h"
#include "marker.h"
#include "partition.h"
#include "playevent.h"
#include "producer.h"
#include "recent.h"
#include "record.h"
#include "testlib.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define USERS 120
#define PLAYS 3
#define THREADS 4

static const char *broker, *redis_addr;
/* Every producer here signs its markers with it (marker.h). */
static dd_marker_key *key;
#define KEY "test_producer: a forget key of at least 32 bytes"
static pid_t broker_pid;
static char err[512];

/* What was sent, to compare with what is read back. */
struct sent {
    char user[32], scene[16];
    char items[PLAYS][32];
    int64_t at[PLAYS];
    int forget;
    int found;       /* messages read back for it */
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static dd_producer *producer(const char *topic, const char *format, enum dd_partitioner part,
                             uint32_t timeout_ms)
{
    struct dd_config_list kafka = {0};
    struct dd_config_kv kv = {"bootstrap.servers", (char *)broker};
    kafka.items = &kv;
    kafka.len = kafka.cap = 1;
    struct dd_producer_conf conf = {.topic = topic, .format = format, .partitioner = (int)part,
                                    .timeout_ms = timeout_ms, .forget_key = key};
    dd_producer *p = NULL;
    int rc = dd_producer_new(&p, &conf, &kafka, err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "dd_producer_new: %s\n", err);
    REQUIRE(rc == DD_OK && p);
    return p;
}

/* ---- reading a topic back ------------------------------------------------- */

/* Every message of TOPIC (NPARTS partitions) from the beginning, handed to
 * EACH; stops at the end of every partition. Returns how many. */
static size_t read_topic(const char *topic, int nparts,
                         void (*each)(const rd_kafka_message_t *m, void *ud), void *ud)
{
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    char e[256];
    REQUIRE(rd_kafka_conf_set(c, "bootstrap.servers", broker, e, sizeof e) == RD_KAFKA_CONF_OK);
    REQUIRE(rd_kafka_conf_set(c, "enable.partition.eof", "true", e, sizeof e) ==
            RD_KAFKA_CONF_OK);
    /* assign needs a group id; nothing is committed under it. */
    REQUIRE(rd_kafka_conf_set(c, "group.id", "test-producer-reader", e, sizeof e) ==
            RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, e, sizeof e);
    REQUIRE(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(nparts);
    for (int i = 0; i < nparts; i++)
        rd_kafka_topic_partition_list_add(l, topic, i)->offset = RD_KAFKA_OFFSET_BEGINNING;
    REQUIRE(rd_kafka_assign(rk, l) == RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(l);
    size_t n = 0;
    int eofs = 0;
    int64_t deadline = dd_mono_ns() + INT64_C(30000000000);
    while (eofs < nparts && dd_mono_ns() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m) continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            eofs++;
        } else if (m->err) {
            fprintf(stderr, "consume %s: %s\n", topic, rd_kafka_message_errstr(m));
        } else {
            each(m, ud);
            n++;
        }
        rd_kafka_message_destroy(m);
    }
    CHECK_MSG(eofs == nparts, "%s: %d of %d partitions read to their end", topic, eofs, nparts);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return n;
}

struct check {
    enum dd_partitioner part;
    int nparts;
    dd_playevent_decoder *dec;
    struct sent *sent;
    size_t nsent;
};

static int is_forget(const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *h;
    const void *v;
    size_t n;
    return rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR &&
           rd_kafka_header_get_last(h, "dedupd-op", &v, &n) == RD_KAFKA_RESP_ERR_NO_ERROR &&
           n == 6 && memcmp(v, "forget", 6) == 0;
}

/* A message read back: in its user's partition, decoding to what was sent. */
static void check_message(const rd_kafka_message_t *m, void *ud)
{
    struct check *c = ud;
    int32_t want = dd_partition_of(c->part, m->key, m->key_len, c->nparts);
    CHECK_MSG(want == m->partition, "key %.*s in partition %d, dd_partition_of says %d",
              (int)m->key_len, (const char *)m->key, (int)m->partition, (int)want);
    struct sent *s = NULL;
    for (size_t i = 0; i < c->nsent; i++)
        if (strlen(c->sent[i].user) == m->key_len &&
            memcmp(c->sent[i].user, m->key, m->key_len) == 0)
            s = &c->sent[i];
    CHECK_MSG(s != NULL, "a message of an unknown key %.*s", (int)m->key_len,
              (const char *)m->key);
    if (!s) return;
    struct dd_playevent ev;
    int forget = is_forget(m);
    CHECK_EQ_INT(forget, s->forget);
    int st = forget ? dd_playevent_decode_forget(c->dec, m->payload, m->len, m->key, m->key_len,
                                                 &ev)
                    : dd_playevent_decode(c->dec, m->payload, m->len, m->key, m->key_len, 1,
                                          &ev);
    CHECK_EQ_INT(st, DD_PLAYEVENT_OK);
    if (st != DD_PLAYEVENT_OK) return;
    CHECK(!ev.key_mismatch);
    CHECK(ev.scene_len == strlen(s->scene) && memcmp(ev.scene, s->scene, ev.scene_len) == 0);
    if (forget) {
        /* Signed with the key over its user, scene and time (now). */
        rd_kafka_headers_t *h;
        const void *mac = NULL;
        size_t n = 0;
        CHECK(rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR &&
              rd_kafka_header_get_last(h, DD_MARKER_HEADER, &mac, &n) ==
                  RD_KAFKA_RESP_ERR_NO_ERROR);
        CHECK(ev.played_at_ms > 1600000000000);
        CHECK_EQ_INT(dd_marker_verify(key, ev.user, ev.user_len, ev.scene, ev.scene_len,
                                      ev.played_at_ms, mac, n), DD_MARKER_VALID);
    } else {
        int k = s->found;
        CHECK_MSG(k < PLAYS && ev.item_len == strlen(s->items[k]) &&
                      memcmp(ev.item, s->items[k], ev.item_len) == 0,
                  "%s: play %d out of order or wrong", s->user, k);
        if (k < PLAYS) CHECK_EQ_INT(ev.played_at_ms, s->at[k]);
    }
    s->found++;
}

/* ---- plays and markers from several threads --------------------------- */

struct worker {
    dd_producer *p;
    struct sent *sent;
    size_t from, to;
    int failures;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    char e[256];
    for (size_t i = w->from; i < w->to; i++) {
        struct sent *s = &w->sent[i];
        int rc;
        if (s->forget) {
            rc = dd_producer_forget(w->p, s->user, s->scene, 0, e, sizeof e);
        } else {
            const char *items[PLAYS];
            for (int k = 0; k < PLAYS; k++) items[k] = s->items[k];
            rc = dd_producer_plays(w->p, s->user, s->scene, items, s->at, PLAYS, 0, e, sizeof e);
        }
        if (rc != DD_OK) {
            fprintf(stderr, "%s: %d %s\n", s->user, rc, e);
            w->failures++;
        }
    }
    return NULL;
}

static void produce_and_read(const char *topic, int nparts, const char *format,
                             enum dd_partitioner part)
{
    static struct sent sent[USERS];
    memset(sent, 0, sizeof sent);
    for (size_t i = 0; i < USERS; i++) {
        struct sent *s = &sent[i];
        /* Ids JSON must escape, and UTF-8, now and then. */
        snprintf(s->user, sizeof s->user, i % 7 ? "user-%zu" : "us\"er\\%zu-\xc3\xa9", i);
        snprintf(s->scene, sizeof s->scene, "%s", i % 3 ? "" : "feed");
        s->forget = i % 5 == 4;
        for (int k = 0; k < PLAYS; k++) {
            snprintf(s->items[k], sizeof s->items[k], "item-%zu-%d", i, k);
            s->at[k] = INT64_C(1700000000000) + (int64_t)(i * PLAYS + (size_t)k);
        }
    }
    dd_producer *p = producer(topic, format, part, 10000);
    pthread_t thr[THREADS];
    struct worker w[THREADS];
    for (int t = 0; t < THREADS; t++) {
        w[t] = (struct worker){p, sent, USERS * (size_t)t / THREADS,
                               USERS * (size_t)(t + 1) / THREADS, 0};
        REQUIRE(pthread_create(&thr[t], NULL, work, &w[t]) == 0);
    }
    int failures = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(thr[t], NULL);
        failures += w[t].failures;
    }
    CHECK_EQ_INT(failures, 0);
    CHECK_EQ_INT(dd_producer_partitions(p), nparts);
    dd_producer_free(p);

    dd_playevent_decoder *dec;
    REQUIRE(dd_playevent_decoder_new(&dec, (enum dd_playevent_format)dd_playevent_format_parse(
                                               format), 64) == DD_OK);
    struct check c = {part, nparts, dec, sent, USERS};
    size_t n = read_topic(topic, nparts, check_message, &c);
    size_t want = 0;
    for (size_t i = 0; i < USERS; i++) {
        want += sent[i].forget ? 1 : PLAYS;
        CHECK_MSG(sent[i].found == (sent[i].forget ? 1 : PLAYS), "%s: %d messages read back",
                  sent[i].user, sent[i].found);
    }
    CHECK_EQ_INT(n, want);
    fprintf(stderr, "%s: %zu messages in their users' partitions (%s, %s)\n", topic, n, format,
            dd_partitioner_name(part));
    dd_playevent_decoder_free(dec);
}

/* ---- deadlines and outages --------------------------------------------- */

static void test_deadlines(void)
{
    dd_producer *p = producer("plays", "json", DD_PARTITIONER_MURMUR2_RANDOM, 5000);
    const char *items[] = {"d1"};
    int64_t at[] = {INT64_C(1700000000000)};
    /* Known partitions first (the poll thread reads them). */
    CHECK_EQ_INT(dd_producer_plays(p, "dl-user", "", items, at, 1, 0, err, sizeof err), DD_OK);
    /* A deadline already past: the message is queued, the caller leaves at
     * once, its report arrives later. */
    for (int i = 0; i < 50; i++)
        CHECK_EQ_INT(dd_producer_plays(p, "dl-user", "", items, at, 1, dd_mono_ns() - 1, err,
                                       sizeof err), DD_ERR_TIMEOUT);
    CHECK_MSG(strstr(err, "not acknowledged") != NULL, "%s", err);

    /* Brokers down: the call gives up at its deadline, not before. */
    REQUIRE(kill(broker_pid, SIGUSR1) == 0);
    sleep_ms(200);
    int64_t t0 = dd_mono_ns();
    int rc = dd_producer_plays(p, "dl-user", "", items, at, 1,
                               dd_mono_ns() + INT64_C(1000000000), err, sizeof err);
    double ms = (double)(dd_mono_ns() - t0) / 1e6;
    CHECK_MSG(rc == DD_ERR_TIMEOUT || rc == DD_ERR_UNAVAILABLE, "brokers down: %d %s", rc, err);
    CHECK_MSG(ms < 3000, "brokers down: gave up after %.0f ms", ms);
    fprintf(stderr, "brokers down: %s after %.0f ms: %s\n", dd_strerror(rc), ms, err);
    REQUIRE(kill(broker_pid, SIGUSR2) == 0);
    rc = DD_ERR_TIMEOUT;
    for (int i = 0; i < 20 && rc != DD_OK; i++)
        rc = dd_producer_plays(p, "dl-user", "", items, at, 1, 0, err, sizeof err);
    CHECK_MSG(rc == DD_OK, "brokers up again: %d %s", rc, err);
    dd_producer_free(p);

    /* A topic the broker says does not exist (the devbroker's
     * --unavailable): the call times out waiting for its partition count. */
    p = producer("plays-gone", "json", DD_PARTITIONER_MURMUR2_RANDOM, 1500);
    rc = dd_producer_plays(p, "u", "", items, at, 1, 0, err, sizeof err);
    CHECK_EQ_INT(rc, DD_ERR_TIMEOUT);
    CHECK_MSG(strstr(err, "partition count") != NULL, "%s", err);
    CHECK_EQ_INT(dd_producer_partitions(p), 0);
    dd_producer_free(p);
}

/* ---- record's hooks --------------------------------------------------- */

struct rp_seen {
    int plays, forgets;
    int64_t at[4];
};

static void collect_rp(const rd_kafka_message_t *m, void *ud)
{
    struct rp_seen *r = ud;
    if (m->key_len != 7 || memcmp(m->key, "rp-user", 7) != 0) return;
    if (is_forget(m)) {
        r->forgets++;
        return;
    }
    dd_playevent_decoder *d;
    REQUIRE(dd_playevent_decoder_new(&d, DD_PLAYEVENT_JSON, 64) == DD_OK);
    struct dd_playevent ev;
    if (dd_playevent_decode(d, m->payload, m->len, m->key, m->key_len, 1, &ev) ==
            DD_PLAYEVENT_OK && r->plays < 4)
        r->at[r->plays] = ev.played_at_ms;
    r->plays++;
    dd_playevent_decoder_free(d);
}

static int record_plays(dd_record *wr, dd_arena *arena, const char *user, char **items,
                        const int64_t *at, size_t n)
{
    Dedup__V1__Play plays[4], *pp[4];
    REQUIRE(n <= 4);
    for (size_t i = 0; i < n; i++) {
        dedup__v1__play__init(&plays[i]);
        plays[i].item_id = items[i];
        plays[i].played_at_ms = at[i];
        pp[i] = &plays[i];
    }
    Dedup__V1__RecordPlaysRequest req = DEDUP__V1__RECORD_PLAYS_REQUEST__INIT;
    Dedup__V1__RecordPlaysResponse resp;
    req.user_id = (char *)user;
    req.scene = "";
    req.plays = pp;
    req.n_plays = n;
    dd_arena_reset(arena);
    err[0] = '\0';
    return dd_record_plays(wr, arena, &req, &resp, err, sizeof err);
}

/* Whether (scene "", USER) has played ITEM in the local store. */
static int stored(dd_history *h, const char *user, const char *item)
{
    uint64_t hash = dd_hash(item, strlen(item));
    uint8_t hit = 0;
    REQUIRE(dd_history_probe(h, "", 0, user, strlen(user), 0, &hash, 1, &hit, err,
                             sizeof err) == DD_OK);
    return hit;
}

/* The applied hook: what it was asked to wait for, and its answer. */
static int32_t applied_partition = -2;
static int64_t applied_offset = -2;
static int applied_rc = DD_OK;
static int fake_applied(void *ud, int32_t partition, int64_t offset, int64_t deadline_ns)
{
    (void)ud;
    CHECK(deadline_ns > dd_mono_ns());
    applied_partition = partition;
    applied_offset = offset;
    return applied_rc;
}

static void test_record(void)
{
    char root[64], path[128];
    tl_tmpdir(root, sizeof root, "producer");
    struct dd_config cfg;
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    snprintf(path, sizeof path, "%s/history", root);
    REQUIRE(dd_config_set(&cfg, "history.path", path, err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "history.sync", "false", err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "recent.redis", redis_addr, err, sizeof err) == DD_OK);
    dd_history *h;
    dd_recent *rec;
    REQUIRE(dd_history_open(&h, &cfg.history, &cfg.rocksdb, &tclock, err, sizeof err) == DD_OK);
    REQUIRE(dd_recent_new(&rec, &cfg.recent, err, sizeof err) == DD_OK);
    dd_producer *p = producer("plays-rp", "json", DD_PARTITIONER_MURMUR2_RANDOM, 1500);
    struct dd_record_conf rconf = dd_config_record_conf(&cfg);
    dd_record *wr;
    REQUIRE(dd_record_new(&wr, &rconf, h, rec, p, err, sizeof err) == DD_OK);
    dd_arena *arena = dd_arena_new(0, 0);
    REQUIRE(arena);

    /* Written here, then produced with the times resolved (0 = now, the
     * history's clock: T0). */
    char *items[] = {"rp-1", "rp-2"};
    int64_t at[] = {0, T0 - 1000};
    CHECK_EQ_INT(record_plays(wr, arena, "rp-user", items, at, 2), DD_OK);
    CHECK(stored(h, "rp-user", "rp-1") && stored(h, "rp-user", "rp-2"));
    Dedup__V1__ForgetUserRequest fr = DEDUP__V1__FORGET_USER_REQUEST__INIT;
    Dedup__V1__ForgetUserResponse fresp;
    fr.user_id = "rp-user";
    fr.scene = "";
    /* A cluster's forget: the plays are not deleted here but by this
     * node's ingest applying the marker, which the call waits for (the
     * hook stands in for ingest: no consumer runs here). */
    dd_producer_set_applied(p, fake_applied, NULL);
    CHECK_EQ_INT(dd_record_forget(wr, arena, &fr, &fresp, err, sizeof err), DD_OK);
    CHECK(stored(h, "rp-user", "rp-1"));
    CHECK_EQ_INT(applied_partition,
                 dd_partition_of(DD_PARTITIONER_MURMUR2_RANDOM, "rp-user", 7, 4));
    CHECK(applied_offset >= 0);
    applied_rc = DD_ERR_TIMEOUT;
    CHECK_EQ_INT(dd_record_forget(wr, arena, &fr, &fresp, err, sizeof err), DD_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(err, "not applied here") && strstr(err, "safe to retry"), "%s", err);
    applied_rc = DD_OK;
    struct rp_seen seen = {0};
    read_topic("plays-rp", 4, collect_rp, &seen);
    CHECK_EQ_INT(seen.plays, 2);
    CHECK_EQ_INT(seen.forgets, 2);
    CHECK_EQ_INT(seen.at[0], T0);
    CHECK_EQ_INT(seen.at[1], T0 - 1000);

    /* Brokers down: the local write happens, the call says so and fails. */
    REQUIRE(kill(broker_pid, SIGUSR1) == 0);
    sleep_ms(200);
    char *late[] = {"rp-3"};
    int64_t now[] = {0};
    CHECK_EQ_INT(record_plays(wr, arena, "rp-user", late, now, 1), DD_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(err, "plays written here") && strstr(err, "safe to retry"), "%s", err);
    CHECK(stored(h, "rp-user", "rp-3"));
    CHECK_EQ_INT(dd_record_forget(wr, arena, &fr, &fresp, err, sizeof err), DD_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(err, "deliveries forgotten") && strstr(err, "safe to retry"), "%s", err);
    CHECK(stored(h, "rp-user", "rp-3"));
    REQUIRE(kill(broker_pid, SIGUSR2) == 0);

    dd_record_free(wr);
    dd_producer_free(p);
    dd_arena_free(arena);
    dd_recent_free(rec);
    dd_history_close(h);
    dd_config_free(&cfg);
    tl_rm_tree(root);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_producer BROKER_ADDR BROKER_PID REDIS_ADDR\n");
        return 2;
    }
    broker = argv[1];
    broker_pid = (pid_t)atoi(argv[2]);
    redis_addr = argv[3];
    REQUIRE(dd_marker_key_new(&key, KEY, strlen(KEY), err, sizeof err) == DD_OK);
    produce_and_read("plays", 8, "json", DD_PARTITIONER_MURMUR2_RANDOM);
    produce_and_read("plays-pb", 6, "protobuf", DD_PARTITIONER_FNV1A);
    test_deadlines();
    test_record();
    dd_marker_key_free(key);
    TEST_MAIN_END();
}
