/* SPDX-License-Identifier: Apache-2.0
 *
 * test_producer.c - the plays producer (producer.h) against librdkafka's
 * mock cluster, in process (as tools/devbroker does): the settings it
 * refuses, the partition count read from the broker, plays in the user's
 * partition exactly (partition.h), a call of no plays or a negative time,
 * a forget marker and its applied hook (the offset it waits for, and the
 * hook's answers), and the dedupd_producer_* families.
 */
#include "dd.h"
#include "metrics.h"
#include "partition.h"
#include "producer.h"
#include "testlib.h"

#include <stdio.h>
#include <string.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define TOPIC "plays"
#define PARTITIONS 4

static rd_kafka_t *mock_rk; /* the mock's own handle; connects nowhere */
static rd_kafka_mock_cluster_t *mock;
static rd_kafka_t *query_rk; /* a client of the mock, for its offsets */

static void mock_start(void)
{
    char errstr[256];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    REQUIRE(rd_kafka_conf_set(c, "log_level", "3", errstr, sizeof errstr) == RD_KAFKA_CONF_OK);
    mock_rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, errstr, sizeof errstr);
    REQUIRE(mock_rk != NULL);
    mock = rd_kafka_mock_cluster_new(mock_rk, 1);
    REQUIRE(mock != NULL);
    REQUIRE(rd_kafka_mock_topic_create(mock, TOPIC, PARTITIONS, 1) == RD_KAFKA_RESP_ERR_NO_ERROR);
    c = rd_kafka_conf_new();
    REQUIRE(rd_kafka_conf_set(c, "bootstrap.servers", rd_kafka_mock_cluster_bootstraps(mock),
                              errstr, sizeof errstr) == RD_KAFKA_CONF_OK);
    REQUIRE(rd_kafka_conf_set(c, "log_level", "3", errstr, sizeof errstr) == RD_KAFKA_CONF_OK);
    query_rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, errstr, sizeof errstr);
    REQUIRE(query_rk != NULL);
}

static void mock_stop(void)
{
    rd_kafka_destroy(query_rk);
    rd_kafka_mock_cluster_destroy(mock);
    rd_kafka_destroy(mock_rk);
}

/* The next offset of TOPIC's PARTITION on the mock. */
static int64_t high_watermark(int32_t partition)
{
    int64_t lo = -1, hi = -1;
    REQUIRE(rd_kafka_query_watermark_offsets(query_rk, TOPIC, partition, &lo, &hi, 5000) ==
            RD_KAFKA_RESP_ERR_NO_ERROR);
    return hi;
}

static struct dd_producer_conf conf_of(const char *topic, const char *format, uint32_t timeout_ms)
{
    return (struct dd_producer_conf){.topic = topic,
                                     .format = format,
                                     .partitioner = DD_PARTITIONER_MURMUR2_RANDOM,
                                     .timeout_ms = timeout_ms,
                                     .forget_key = NULL};
}

/* A producer against the mock, its partition count read. */
static dd_producer *producer_on_mock(void)
{
    char err[256] = "";
    struct dd_config_kv kv[] = {
        {(char *)"bootstrap.servers", (char *)rd_kafka_mock_cluster_bootstraps(mock)}};
    struct dd_config_list kafka = {kv, 1, 1};
    struct dd_producer_conf c = conf_of(TOPIC, "json", 5000);
    dd_producer *p = NULL;
    CHECK_MSG(dd_producer_new(&p, &c, &kafka, err, sizeof err) == DD_OK, "%s", err);
    REQUIRE(p != NULL);
    for (int i = 0; i < 100 && dd_producer_partitions(p) == 0; i++) dd_sleep_ms(100);
    CHECK_EQ_INT(dd_producer_partitions(p), PARTITIONS);
    return p;
}

static void test_conf(void)
{
    char err[256] = "";
    dd_producer *p = (dd_producer *)&p;
    struct dd_producer_conf c = conf_of(TOPIC, "xml", 1000);
    CHECK_EQ_INT(dd_producer_new(&p, &c, NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK(p == NULL);
    CHECK_MSG(strstr(err, "ingest.format") != NULL, "%s", err);
    c = conf_of("", "json", 1000);
    CHECK_EQ_INT(dd_producer_new(&p, &c, NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "ingest.topic") != NULL, "%s", err);
    c = conf_of(TOPIC, "protobuf", 0);
    CHECK_EQ_INT(dd_producer_new(&p, &c, NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "timeout") != NULL, "%s", err);
    /* A [kafka] key librdkafka does not know is named. */
    struct dd_config_kv kv[] = {{(char *)"no.such.property", (char *)"1"}};
    struct dd_config_list kafka = {kv, 1, 1};
    c = conf_of(TOPIC, "json", 1000);
    CHECK_EQ_INT(dd_producer_new(&p, &c, &kafka, err, sizeof err), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "kafka.no.such.property") != NULL, "%s", err);
    CHECK(p == NULL);
    dd_producer_free(NULL); /* a no-op */
}

static void test_plays(void)
{
    char err[256] = "";
    dd_producer *p = producer_on_mock();
    int32_t part = dd_partition_of(DD_PARTITIONER_MURMUR2_RANDOM, "alice", 5, PARTITIONS);
    int64_t before[PARTITIONS];
    for (int32_t i = 0; i < PARTITIONS; i++) before[i] = high_watermark(i);

    const char *items[] = {"v1", "v2", "v3"};
    int64_t now = dd_now_ms();
    int64_t at[] = {now - 2000, now - 1000, now};
    CHECK_MSG(dd_producer_plays(p, "alice", "", items, at, 3, 0, err, sizeof err) == DD_OK, "%s",
              err);
    /* All three in alice's partition, none elsewhere. */
    for (int32_t i = 0; i < PARTITIONS; i++)
        CHECK_EQ_INT(high_watermark(i) - before[i], (i == part ? 3 : 0));

    /* No plays: done at once; a negative time: refused, nothing sent. */
    CHECK_EQ_INT(dd_producer_plays(p, "alice", "", items, at, 0, 0, err, sizeof err), DD_OK);
    int64_t bad[] = {-1};
    CHECK_EQ_INT(dd_producer_plays(p, "alice", "", items, bad, 1, 0, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "negative") != NULL, "%s", err);
    CHECK_EQ_INT(high_watermark(part) - before[part], 3);

    /* The families operators read. */
    dd_prom *pr = dd_prom_new();
    REQUIRE(pr != NULL);
    dd_producer_collect(pr, p);
    size_t len;
    char *text = dd_prom_take(pr, &len);
    dd_prom_free(pr);
    REQUIRE(text != NULL);
    CHECK_MSG(strstr(text, "dedupd_producer_messages_total{result=\"delivered\"} 3\n") != NULL,
              "%s", text);
    CHECK_MSG(strstr(text, "dedupd_producer_calls_total{result=\"ok\"} 1\n") != NULL, "%s", text);
    CHECK_MSG(strstr(text, "dedupd_producer_partitions 4\n") != NULL, "%s", text);
    free(text);
    dd_producer_free(p);
}

/* The applied hook's record of its last call, and its answer. */
static int32_t applied_partition = -2;
static int64_t applied_offset = -2;
static int applied_rc = DD_OK;

static int applied(void *ud, int32_t partition, int64_t offset, int64_t deadline_ns)
{
    (void)deadline_ns;
    CHECK(ud == &applied_rc);
    applied_partition = partition;
    applied_offset = offset;
    return applied_rc;
}

static void test_forget(void)
{
    char err[256] = "";
    dd_producer *p = producer_on_mock();
    int32_t part = dd_partition_of(DD_PARTITIONER_MURMUR2_RANDOM, "bob", 3, PARTITIONS);
    int64_t next = high_watermark(part);
    /* Without a hook: acknowledged is done. */
    CHECK_MSG(dd_producer_forget(p, "bob", "", 0, err, sizeof err) == DD_OK, "%s", err);
    CHECK_EQ_INT(high_watermark(part), next + 1);

    /* With one: it is asked about the marker's own partition and offset. */
    dd_producer_set_applied(p, applied, &applied_rc);
    CHECK_MSG(dd_producer_forget(p, "bob", "s", 0, err, sizeof err) == DD_OK, "%s", err);
    CHECK_EQ_INT(applied_partition, part);
    CHECK_EQ_INT(applied_offset, next + 1);
    applied_rc = DD_ERR_TIMEOUT;
    CHECK_EQ_INT(dd_producer_forget(p, "bob", "s", 0, err, sizeof err), DD_ERR_TIMEOUT);
    CHECK_MSG(strstr(err, "not applied here") != NULL, "%s", err);
    CHECK_EQ_INT(applied_offset, next + 2);
    applied_rc = DD_ERR_STATE;
    CHECK_EQ_INT(dd_producer_forget(p, "bob", "s", 0, err, sizeof err), DD_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(err, "does not consume") != NULL, "%s", err);
    applied_rc = DD_OK;
    dd_producer_free(p);
}

int main(void)
{
    test_conf();
    mock_start();
    test_plays();
    test_forget();
    mock_stop();
    TEST_MAIN_END();
}
