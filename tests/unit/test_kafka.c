/* SPDX-License-Identifier: Apache-2.0
 *
 * test_kafka.c - kafka.h: a consumer's configuration carries dedupd's
 * defaults under the operator's keys and never stores offsets by itself
 * (asking for it is an error); a producer's gets no consumer-only key; a
 * key librdkafka rejects is named in the error. The lag is read from
 * statistics JSON per partition of our topic only, skipping the internal
 * partition -1 and unknown (negative) lags; garbage gives -1.
 */
#include "dd.h"
#include "kafka.h"
#include "testlib.h"

#include <string.h>

static struct dd_config_kv kv[8];
static struct dd_config_list list = {kv, 0, 8};

static void set(const char *k, const char *v)
{
    kv[list.len].key = (char *)k;
    kv[list.len].value = (char *)v;
    list.len++;
}

/* The value of KEY in CONF ("" when unset). */
static const char *get(rd_kafka_conf_t *conf, const char *key)
{
    static char buf[256];
    size_t n = sizeof buf;
    if (rd_kafka_conf_get(conf, key, buf, &n) != RD_KAFKA_CONF_OK) return "";
    return buf;
}

static void test_consumer(void)
{
    char err[256];
    list.len = 0;
    set("group.id", "g1");
    set("auto.offset.reset", "latest");
    rd_kafka_conf_t *c = dd_kafka_conf_new(RD_KAFKA_CONSUMER, &list, err, sizeof err);
    REQUIRE(c);
    CHECK_STR(get(c, "group.id"), "g1");
    CHECK_STR(get(c, "auto.offset.reset"), "largest"); /* the operator's wins (librdkafka's name) */
    CHECK_STR(get(c, "enable.auto.commit"), "false");          /* dedupd's default */
    CHECK_STR(get(c, "partition.assignment.strategy"), "cooperative-sticky");
    CHECK_STR(get(c, "queued.min.messages"), "1000000");
    CHECK_STR(get(c, "enable.auto.offset.store"), "false");
    CHECK_STR(get(c, "enable.partition.eof"), "true");
    rd_kafka_conf_destroy(c);

    list.len = 0;
    set("enable.auto.offset.store", "true");
    err[0] = '\0';
    CHECK(dd_kafka_conf_new(RD_KAFKA_CONSUMER, &list, err, sizeof err) == NULL);
    CHECK(strstr(err, "kafka.enable.auto.offset.store") != NULL);

    list.len = 0;
    set("enable.partition.eof", "false");
    err[0] = '\0';
    CHECK(dd_kafka_conf_new(RD_KAFKA_CONSUMER, &list, err, sizeof err) == NULL);
    CHECK(strstr(err, "kafka.enable.partition.eof") != NULL);

    list.len = 0;
    set("no.such.key", "1");
    err[0] = '\0';
    CHECK(dd_kafka_conf_new(RD_KAFKA_CONSUMER, &list, err, sizeof err) == NULL);
    CHECK(strncmp(err, "kafka.no.such.key: ", 19) == 0);

    c = dd_kafka_conf_new(RD_KAFKA_CONSUMER, NULL, err, sizeof err);
    CHECK(c != NULL);
    if (c) rd_kafka_conf_destroy(c);
}

static void test_producer(void)
{
    char err[256];
    list.len = 0;
    set("bootstrap.servers", "127.0.0.1:1");
    set("group.id", "g1");
    set("statistics.interval.ms", "1000");
    set("enable.auto.offset.store", "true"); /* a consumer's key: ignored here */
    rd_kafka_conf_t *p = dd_kafka_conf_new(RD_KAFKA_PRODUCER, &list, err, sizeof err);
    REQUIRE(p);
    CHECK_STR(get(p, "bootstrap.servers"), "127.0.0.1:1");
    CHECK(strcmp(get(p, "group.id"), "g1") != 0);
    CHECK(strcmp(get(p, "statistics.interval.ms"), "1000") != 0);
    CHECK(strcmp(get(p, "queued.min.messages"), "1000000") != 0); /* no consumer default */
    rd_kafka_conf_destroy(p);
}

static int32_t seen_part[8];
static int64_t seen_lag[8];
static size_t seen;

static void each(void *ud, int32_t partition, int64_t lag)
{
    CHECK(ud == &seen);
    if (seen < 8) {
        seen_part[seen] = partition;
        seen_lag[seen] = lag;
    }
    seen++;
}

static void test_lag(void)
{
    const char *js =
        "{\"topics\":{"
        "\"other\":{\"partitions\":{\"0\":{\"consumer_lag\":1000}}},"
        "\"plays\":{\"partitions\":{"
        "\"0\":{\"consumer_lag\":5},"
        "\"3\":{\"consumer_lag\":7},"
        "\"4\":{\"consumer_lag\":-1},"
        "\"5\":{\"msgs\":1},"
        "\"-1\":{\"consumer_lag\":99}}}}}";
    seen = 0;
    CHECK_EQ_INT(dd_kafka_stats_lag(js, strlen(js), "plays", each, &seen), 12);
    CHECK_EQ_INT(seen, 2);
    CHECK(seen_part[0] == 0 && seen_lag[0] == 5);
    CHECK(seen_part[1] == 3 && seen_lag[1] == 7);
    /* Not terminated where LEN ends: only LEN bytes are read. */
    CHECK_EQ_INT(dd_kafka_stats_lag(js, 10, "plays", NULL, NULL), -1);
    CHECK_EQ_INT(dd_kafka_stats_lag(js, strlen(js), "missing", NULL, NULL), -1);
    const char *none = "{\"topics\":{\"plays\":{\"partitions\":{\"0\":{\"consumer_lag\":-1}}}}}";
    CHECK_EQ_INT(dd_kafka_stats_lag(none, strlen(none), "plays", NULL, NULL), -1);
    const char *zero = "{\"topics\":{\"plays\":{\"partitions\":{\"2\":{\"consumer_lag\":0}}}}}";
    CHECK_EQ_INT(dd_kafka_stats_lag(zero, strlen(zero), "plays", NULL, NULL), 0);
    CHECK_EQ_INT(dd_kafka_stats_lag("not json", 8, "plays", NULL, NULL), -1);
}

/* No committed offset in this process (what librdkafka 2.0.2 reports for
 * a fresh group, and for a partition assigned at the store's position,
 * until the first commit): counted from the offset stored for the next
 * commit (durable), else from the log's start; never from the consumed
 * position, since plays still in a window are not stored. */
static void test_lag_uncommitted(void)
{
#define UNC(fields) "{\"consumer_lag\":-1,\"committed_offset\":-1001," fields "}"
    const char *js =
        "{\"topics\":{\"plays\":{\"partitions\":{"
        /* nothing produced: hi 0, fetching from 0 */
        "\"0\":" UNC("\"fetch_state\":\"active\",\"app_offset\":-1001,\"next_offset\":0,"
                     "\"stored_offset\":-1001,\"lo_offset\":0,\"hi_offset\":0,\"ls_offset\":0") ","
        /* 40 consumed of 100, nothing stored yet: all 100 count, not 60 */
        "\"1\":" UNC("\"fetch_state\":\"active\",\"app_offset\":40,\"next_offset\":90,"
                     "\"stored_offset\":-1001,\"lo_offset\":0,\"hi_offset\":100,"
                     "\"ls_offset\":100") ","
        /* an open transaction: the last stable offset is the end */
        "\"2\":" UNC("\"fetch_state\":\"active\",\"app_offset\":10,\"next_offset\":10,"
                     "\"stored_offset\":10,\"hi_offset\":30,\"ls_offset\":20") ","
        /* no ls_offset (an old librdkafka): hi_offset; the log starts at 5 */
        "\"3\":" UNC("\"fetch_state\":\"active\",\"app_offset\":-1001,\"next_offset\":5,"
                     "\"stored_offset\":-1001,\"lo_offset\":5,\"hi_offset\":9") ","
        /* not assigned here */
        "\"4\":" UNC("\"fetch_state\":\"none\",\"app_offset\":-1001,\"next_offset\":0,"
                     "\"hi_offset\":7,\"ls_offset\":7") ","
        /* assigned, the end not known yet */
        "\"5\":" UNC("\"fetch_state\":\"active\",\"app_offset\":-1001,\"next_offset\":0,"
                     "\"stored_offset\":0,\"hi_offset\":-1001,\"ls_offset\":-1001") ","
        /* assigned, the start offset still being looked up (logical -2) */
        "\"6\":" UNC("\"fetch_state\":\"offset-query\",\"app_offset\":-1001,"
                     "\"next_offset\":-2,\"hi_offset\":4,\"ls_offset\":4") ","
        /* a committed offset past a stale end: librdkafka's -1 stands */
        "\"7\":{\"consumer_lag\":-1,\"committed_offset\":50,\"fetch_state\":\"active\","
        "\"app_offset\":50,\"next_offset\":50,\"hi_offset\":40,\"ls_offset\":40},"
        /* the stored position past the end (a stale end): unknown, not negative */
        "\"8\":" UNC("\"fetch_state\":\"active\",\"app_offset\":12,\"next_offset\":12,"
                     "\"stored_offset\":12,\"hi_offset\":11,\"ls_offset\":11") ","
        /* committed: consumer_lag as librdkafka has it */
        "\"9\":{\"consumer_lag\":3,\"committed_offset\":7,\"fetch_state\":\"active\","
        "\"app_offset\":10,\"next_offset\":10,\"hi_offset\":10,\"ls_offset\":10},"
        /* stored (durable) to 30, consumed to 40: 70 behind, not 60 */
        "\"10\":" UNC("\"fetch_state\":\"active\",\"app_offset\":40,\"next_offset\":60,"
                      "\"stored_offset\":30,\"lo_offset\":0,\"hi_offset\":100,"
                      "\"ls_offset\":100")
        "}}}}";
#undef UNC
    seen = 0;
    CHECK_EQ_INT(dd_kafka_stats_lag(js, strlen(js), "plays", each, &seen),
                 0 + 100 + 10 + 4 + 3 + 70);
    CHECK_EQ_INT(seen, 6);
    static const int32_t want_part[] = {0, 1, 2, 3, 9, 10};
    static const int64_t want_lag[] = {0, 100, 10, 4, 3, 70};
    for (size_t i = 0; i < 6 && i < seen; i++) {
        CHECK_EQ_INT(seen_part[i], want_part[i]);
        CHECK_EQ_INT(seen_lag[i], want_lag[i]);
    }
}

int main(void)
{
    test_consumer();
    test_producer();
    test_lag();
    test_lag_uncommitted();
    TEST_MAIN_END();
}
