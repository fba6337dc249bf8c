/* SPDX-License-Identifier: Apache-2.0
 *
 * ddoffsets.c - the offsets a consumer group has committed, for tests that
 * check where dedupd commits (tests/integration/test_ingest_cluster.py).
 * A test tool (tests/tools/). It asks the group's coordinator
 * (OffsetFetch) without joining the group, so it changes nothing.
 *
 *   ddoffsets -b ADDR -g GROUP -t TOPIC -n PARTITIONS
 *
 * Prints "PARTITION<TAB>OFFSET" for partitions 0..PARTITIONS-1, OFFSET
 * being the next offset the group would read, or -1 when it has committed
 * none. Exits 0, 1 when the broker does not answer within 10 s, 2 on bad
 * arguments.
 */
#include <librdkafka/rdkafka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
    char e[256];
    if (rd_kafka_conf_set(conf, k, v, e, sizeof e) == RD_KAFKA_CONF_OK) return 0;
    fprintf(stderr, "ddoffsets: %s\n", e);
    return -1;
}

int main(int argc, char **argv)
{
    const char *brokers = NULL, *group = NULL, *topic = NULL;
    long n = 0;
    int opt;
    while ((opt = getopt(argc, argv, "b:g:t:n:")) != -1) {
        switch (opt) {
        case 'b': brokers = optarg; break;
        case 'g': group = optarg; break;
        case 't': topic = optarg; break;
        case 'n': n = strtol(optarg, NULL, 10); break;
        default: n = -1; break;
        }
    }
    if (!brokers || !group || !topic || n < 1 || n > 100000 || optind != argc) {
        fprintf(stderr, "usage: ddoffsets -b ADDR -g GROUP -t TOPIC -n PARTITIONS\n");
        return 2;
    }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char e[512];
    if (set(conf, "bootstrap.servers", brokers) || set(conf, "group.id", group) ||
        set(conf, "enable.auto.commit", "false")) {
        rd_kafka_conf_destroy(conf);
        return 2;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, e, sizeof e);
    if (!rk) {
        fprintf(stderr, "ddoffsets: %s\n", e);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)n);
    for (long p = 0; p < n; p++) rd_kafka_topic_partition_list_add(l, topic, (int32_t)p);
    int rc = 0;
    rd_kafka_resp_err_t err = rd_kafka_committed(rk, l, 10000);
    if (err) {
        fprintf(stderr, "ddoffsets: %s\n", rd_kafka_err2str(err));
        rc = 1;
    } else {
        for (int i = 0; i < l->cnt; i++)
            printf("%d\t%lld\n", (int)l->elems[i].partition,
                   l->elems[i].offset >= 0 ? (long long)l->elems[i].offset : -1LL);
    }
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(rk);
    return rc;
}
