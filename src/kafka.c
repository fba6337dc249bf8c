/* SPDX-License-Identifier: Apache-2.0
 *
 * kafka.c - librdkafka configuration, logging and statistics; see kafka.h.
 */
#include "kafka.h"

#include "log.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, char *err,
                    size_t errlen)
{
    char e[256];
    if (rd_kafka_conf_set(conf, key, value, e, sizeof e) != RD_KAFKA_CONF_OK)
        return dd_fail(DD_ERR_INVALID, err, errlen, "kafka.%s: %s", key, e);
    return DD_OK;
}

/* Keys only a consumer reads (statistics too: only the consumer's are
 * read): not given to a producer, which would warn about each. */
static bool consumer_only(const char *key)
{
    static const char *const keys[] = {
        "group.id",
        "group.instance.id",
        "partition.assignment.strategy",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "enable.auto.offset.store",
        "auto.offset.reset",
        "isolation.level",
        "enable.partition.eof",
        "check.crcs",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "fetch.wait.max.ms",
        "fetch.min.bytes",
        "fetch.max.bytes",
        "fetch.message.max.bytes",
        "fetch.error.backoff.ms",
        "max.partition.fetch.bytes",
        "coordinator.query.interval.ms",
        "group.protocol.type",
        "allow.auto.create.topics",
        "statistics.interval.ms",
    };
    for (size_t i = 0; i < DD_ARRAY_LEN(keys); i++)
        if (strcmp(key, keys[i]) == 0) return true;
    return false;
}

static bool is_true(const char *v)
{
    return strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "yes") == 0 ||
           strcmp(v, "on") == 0;
}

rd_kafka_conf_t *dd_kafka_conf_new(rd_kafka_type_t type, const struct dd_config_list *kafka,
                                   char *err, size_t errlen)
{
    static const struct dd_config_list none;
    static const char *const defaults[][2] = {
        {"partition.assignment.strategy", "cooperative-sticky"},
        {"enable.auto.commit", "false"},
        {"auto.offset.reset", "earliest"},
        {"statistics.interval.ms", "5000"},
        /* librdkafka checks queued.min.messages (100000) against the one
         * consumer queue every partition forwards to, and a partition found
         * over it is not fetched again for about a second: a consumer faster
         * than that burst idles most of each second. Memory stays bounded
         * by queued.max.messages.kbytes (64 MiB). */
        {"queued.min.messages", "1000000"},
    };
    bool consumer = type == RD_KAFKA_CONSUMER;
    if (!kafka) kafka = &none;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!conf) {
        dd_set_err(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; consumer && i < DD_ARRAY_LEN(defaults); i++)
        if (conf_set(conf, defaults[i][0], defaults[i][1], err, errlen) != DD_OK) goto fail;
    for (size_t i = 0; i < kafka->len; i++) {
        const struct dd_config_kv *kv = &kafka->items[i];
        if (!consumer && consumer_only(kv->key)) continue;
        if (consumer && strcmp(kv->key, "enable.auto.offset.store") == 0 && is_true(kv->value)) {
            dd_set_err(err, errlen,
                       "kafka.enable.auto.offset.store: must be false (offsets are "
                       "stored once the plays are written)");
            goto fail;
        }
        if (consumer && strcmp(kv->key, "enable.partition.eof") == 0 && !is_true(kv->value)) {
            dd_set_err(err, errlen,
                       "kafka.enable.partition.eof: must be true (the ingest lag "
                       "needs to know when a partition is caught up)");
            goto fail;
        }
        if (conf_set(conf, kv->key, kv->value, err, errlen) != DD_OK) goto fail;
    }
    if (consumer && (conf_set(conf, "enable.auto.offset.store", "false", err, errlen) != DD_OK ||
                     conf_set(conf, "enable.partition.eof", "true", err, errlen) != DD_OK))
        goto fail;
    return conf;
fail:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

void dd_kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    enum dd_log_level l = level <= 3   ? DD_LOG_ERROR
                          : level == 4 ? DD_LOG_WARN
                          : level <= 6 ? DD_LOG_INFO
                                       : DD_LOG_DEBUG;
    dd_log(l, "kafka", "msg=\"%s\" facility=%s", buf, fac);
}

/* KEY of the statistics object OBJ as an integer, or DFLT when absent. */
static int64_t stat_int(struct json_object *obj, const char *key, int64_t dflt)
{
    struct json_object *v;
    if (!json_object_object_get_ex(obj, key, &v) || !v) return dflt;
    return json_object_get_int64(v);
}

/* The lag of one partition's statistics object P, or -1 when unknown: how
 * many messages of the log are not durable in the store yet, as Kafka's
 * own tools count it (kafka-consumer-groups: the end minus the committed
 * offset).
 *
 * librdkafka's consumer_lag counts from the group's committed offset only,
 * and stays -1 while this process has none: a partition assigned with an
 * explicit offset (the store's position) is not told the group's, and
 * dedupd commits only once plays are durable. It is then counted from the
 * offset stored for the next commit (stored_offset: ingest stores the
 * start position at assignment and each durable window's end, so
 * everything before it is durable), else, before anything is stored, from
 * the log's start (lo_offset): nothing of it is known to be durable.
 * Never from the consumed position (app_offset): plays consumed but still
 * in a window are not stored. The end is ls_offset (the last stable
 * offset, what consumer_lag uses under librdkafka's default
 * isolation.level = read_committed; it equals hi_offset without
 * transactions), else hi_offset. A partition that has a committed offset
 * and still no consumer_lag (its end not known yet, or the commit past it)
 * stays unknown, as librdkafka has it. */
static int64_t partition_lag(struct json_object *p)
{
    int64_t lag = stat_int(p, "consumer_lag", -1);
    if (lag >= 0) return lag;
    struct json_object *st;
    if (!json_object_object_get_ex(p, "fetch_state", &st) ||
        !json_object_is_type(st, json_type_string) ||
        strcmp(json_object_get_string(st), "active") != 0)
        return -1; /* not assigned here, or its start offset not known yet */
    if (stat_int(p, "committed_offset", -1) >= 0) return -1;
    int64_t end = stat_int(p, "ls_offset", -1);
    if (end < 0) end = stat_int(p, "hi_offset", -1);
    int64_t pos = stat_int(p, "stored_offset", -1);
    if (pos < 0) pos = stat_int(p, "lo_offset", -1);
    if (end < 0 || pos < 0 || pos > end) return -1;
    return end - pos;
}

int64_t dd_kafka_stats_lag(const char *json, size_t len, const char *topic,
                           void (*each)(void *ud, int32_t partition, int64_t lag), void *ud)
{
    if (len > INT32_MAX) return -1;
    struct json_tokener *tok = json_tokener_new();
    if (!tok) return -1;
    struct json_object *root = json_tokener_parse_ex(tok, json, (int)len);
    json_tokener_free(tok);
    if (!root) return -1;
    struct json_object *topics, *t, *parts;
    int64_t lag = -1;
    if (json_object_object_get_ex(root, "topics", &topics) &&
        json_object_object_get_ex(topics, topic, &t) &&
        json_object_object_get_ex(t, "partitions", &parts) &&
        json_object_is_type(parts, json_type_object)) {
        json_object_object_foreach(parts, k, v)
        {
            if (strcmp(k, "-1") == 0) continue; /* librdkafka's internal UA partition */
            int64_t x = partition_lag(v);
            if (x < 0) continue; /* unknown yet */
            lag = (lag < 0 ? 0 : lag) + x;
            if (each) each(ud, (int32_t)strtol(k, NULL, 10), x);
        }
    }
    json_object_put(root);
    return lag;
}

int32_t dd_kafka_partition_count(rd_kafka_t *rk, rd_kafka_topic_t *rkt, int timeout_ms,
                                 struct dd_log_limit *lim)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
    int32_t n = 0;
    if (!err) {
        err = RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
        for (int i = 0; i < md->topic_cnt; i++) {
            const rd_kafka_metadata_topic_t *t = &md->topics[i];
            if (strcmp(t->topic, rd_kafka_topic_name(rkt)) != 0) continue;
            err = t->err;
            if (!t->err && t->partition_cnt > 0) n = t->partition_cnt;
        }
        rd_kafka_metadata_destroy(md);
    }
    if (!n)
        dd_log_limited(lim, 30000, DD_LOG_WARN, "kafka",
                       "msg=\"cannot read the topic's partition count; retrying\" topic=%s "
                       "error=\"%s\"",
                       rd_kafka_topic_name(rkt),
                       rd_kafka_err2str(err ? err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART));
    return n;
}
