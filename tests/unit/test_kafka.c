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

int main(void)
{
    test_consumer();
    test_producer();
    test_lag();
    TEST_MAIN_END();
}
