/* SPDX-License-Identifier: Apache-2.0
 *
 * ddproduce.c - produce play events to Kafka from lines of text, fast
 * enough for a million plays in a test. A test tool (tests/tools/), run by
 * the ingest and metrics integration tests.
 *
 *   ddproduce -b ADDR [-t TOPIC] [-F json|protobuf|raw|hex] [-r PER_SEC]
 *             [-f KEYFILE] [-T SKEW_MS] [-X key=value]... [FILE]
 *
 * Lines (FILE or stdin), fields separated by tabs:
 *   json, protobuf:  user  item  [played_at_ms  [scene]]
 *                    key = user; the payload is a dedup.v1.PlayEvent in the
 *                    chosen encoding (played_at_ms omitted when absent).
 *   raw:             key  payload     the payload sent as is
 *   hex:             key  hexpayload  the payload given in hex
 *                    (an empty key sends a message without a key)
 * -f KEYFILE (json, protobuf): every line is a forget marker instead,
 *                    user  [scene  [time_ms]]
 *                    signed with the key in KEYFILE as dedupd checks it
 *                    (src/marker.h: header dedupd-mac over user, scene and
 *                    time; time_ms defaults to now): the operator's way to
 *                    forget a user through Kafka, e.g.
 *                      printf 'u1\t\n' | ddproduce -b B -f /etc/dedupd/forget.key
 * -r paces production at about PER_SEC messages a second (0 = as fast as
 * possible). -T gives every message the Kafka timestamp (CreateTime) of
 * the producer's clock plus SKEW_MS (negative: behind), as a producer with
 * a wrong clock would. At the end it waits for every delivery, prints
 * "produced=N failed=M" and exits 0 only when nothing failed.
 */
#include "dedup.pb-c.h"
#include "marker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum fmt { F_JSON, F_PROTOBUF, F_RAW, F_HEX };

static unsigned long delivered, failed;

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (m->err) {
        if (failed++ < 5)
            fprintf(stderr, "ddproduce: delivery failed: %s\n", rd_kafka_err2str(m->err));
    } else {
        delivered++;
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ddproduce -b ADDR [-t TOPIC] [-F json|protobuf|raw|hex] [-r PER_SEC]"
               " [-f KEYFILE] [-T SKEW_MS] [-X key=value]... [FILE]\n");
}

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Append S as a JSON string (quotes, escapes) to BUF at *N; -1 if full. */
static int json_str(char *buf, size_t cap, size_t *n, const char *s)
{
    if (*n + 1 >= cap) return -1;
    buf[(*n)++] = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (*n + 7 >= cap) return -1;
        if (c == '"' || c == '\\') {
            buf[(*n)++] = '\\';
            buf[(*n)++] = (char)c;
        } else if (c < 0x20) {
            *n += (size_t)snprintf(buf + *n, cap - *n, "\\u%04x", c);
        } else {
            buf[(*n)++] = (char)c;
        }
    }
    buf[(*n)++] = '"';
    return 0;
}

static int unhex(const char *s, unsigned char *out, size_t cap, size_t *len)
{
    size_t n = strlen(s);
    if (n % 2 || n / 2 > cap) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (unsigned char)v;
    }
    *len = n / 2;
    return 0;
}

int main(int argc, char **argv)
{
    const char *brokers = NULL, *topic = "plays", *keyfile = NULL;
    dd_marker_key *key = NULL;
    enum fmt fmt = F_JSON;
    double rate = 0;
    long long skew_ms = 0;
    bool skewed = false;
    char errstr[512];
    int opt;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    static const char *const defaults[][2] = {
        /* Large batches even at a paced rate: the devbroker returns one
         * batch per partition per fetch, so tiny batches crawl. */
        {"linger.ms", "100"},
        {"batch.num.messages", "10000"},
        {"queue.buffering.max.messages", "1000000"},
        {"queue.buffering.max.kbytes", "1048576"},
        {"message.timeout.ms", "120000"},
        /* The devbroker keeps about 5 MB a partition: compress to fit more. */
        {"compression.codec", "lz4"},
    };
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        if (rd_kafka_conf_set(conf, defaults[i][0], defaults[i][1], errstr, sizeof errstr)) {
            fprintf(stderr, "ddproduce: %s\n", errstr);
            return 2;
        }
    while ((opt = getopt(argc, argv, "b:t:F:r:f:T:X:h")) != -1) {
        switch (opt) {
        case 'b': brokers = optarg; break;
        case 't': topic = optarg; break;
        case 'F':
            if (strcmp(optarg, "json") == 0) fmt = F_JSON;
            else if (strcmp(optarg, "protobuf") == 0) fmt = F_PROTOBUF;
            else if (strcmp(optarg, "raw") == 0) fmt = F_RAW;
            else if (strcmp(optarg, "hex") == 0) fmt = F_HEX;
            else {
                usage(stderr);
                return 2;
            }
            break;
        case 'r': rate = strtod(optarg, NULL); break;
        case 'f': keyfile = optarg; break;
        case 'T':
            skew_ms = strtoll(optarg, NULL, 10);
            skewed = true;
            break;
        case 'X': {
            char *eq = strchr(optarg, '=');
            if (!eq) {
                usage(stderr);
                return 2;
            }
            *eq = '\0';
            if (rd_kafka_conf_set(conf, optarg, eq + 1, errstr, sizeof errstr)) {
                fprintf(stderr, "ddproduce: %s\n", errstr);
                return 2;
            }
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!brokers || argc - optind > 1) {
        usage(stderr);
        return 2;
    }
    if (keyfile) {
        bool world;
        if (fmt != F_JSON && fmt != F_PROTOBUF) {
            fprintf(stderr, "ddproduce: -f needs -F json or protobuf\n");
            return 2;
        }
        if (dd_marker_key_load(&key, keyfile, &world, errstr, sizeof errstr) != 0) {
            fprintf(stderr, "ddproduce: -f: %s\n", errstr);
            return 2;
        }
    }
    FILE *in = stdin;
    if (optind < argc && !(in = fopen(argv[optind], "r"))) {
        fprintf(stderr, "ddproduce: %s: %s\n", argv[optind], strerror(errno));
        return 2;
    }
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof errstr)) {
        fprintf(stderr, "ddproduce: %s\n", errstr);
        return 2;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!rk) {
        fprintf(stderr, "ddproduce: %s\n", errstr);
        return 2;
    }

    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    unsigned long n = 0, lineno = 0, bad_lines = 0;
    static char payload[1 << 16];
    double t0 = now_s();
    while ((len = getline(&line, &cap, in)) > 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        char *f[4] = {line, NULL, NULL, NULL};
        int nf = 1, maxf = fmt == F_RAW || fmt == F_HEX ? 2 : 4;
        for (char *p = line; *p && nf < maxf; p++)
            if (*p == '\t') {
                *p = '\0';
                f[nf++] = p + 1;
            }
        /* A marker: user [scene [time]]; as a play line, item = "". */
        char forget_at[24] = "";
        if (key) {
            const char *scene = nf > 1 ? f[1] : "";
            long long at = nf > 2 && f[2][0] ? strtoll(f[2], NULL, 10) : 0;
            if (at <= 0) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                at = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
            }
            snprintf(forget_at, sizeof forget_at, "%lld", at);
            f[3] = (char *)scene;
            f[2] = forget_at;
            f[1] = "";
            nf = 4;
        }
        if (nf < 2) {
            if (bad_lines++ < 5) fprintf(stderr, "ddproduce: line %lu: too few fields\n", lineno);
            continue;
        }
        const char *ukey = f[0];
        const void *val;
        size_t vlen = 0;
        if (fmt == F_JSON) {
            size_t k = 0;
            int ok = 0;
            k += (size_t)snprintf(payload, sizeof payload, "{\"user_id\":");
            ok |= json_str(payload, sizeof payload, &k, f[0]);
            k += (size_t)snprintf(payload + k, sizeof payload - k, ",\"item_id\":");
            ok |= json_str(payload, sizeof payload, &k, f[1]);
            if (nf > 2 && f[2][0])
                k += (size_t)snprintf(payload + k, sizeof payload - k, ",\"played_at_ms\":%s",
                                      f[2]);
            if (nf > 3) {
                k += (size_t)snprintf(payload + k, sizeof payload - k, ",\"scene\":");
                ok |= json_str(payload, sizeof payload, &k, f[3]);
            }
            if (ok || k + 2 > sizeof payload) {
                fprintf(stderr, "ddproduce: line %lu: too long\n", lineno);
                continue;
            }
            payload[k++] = '}';
            val = payload;
            vlen = k;
        } else if (fmt == F_PROTOBUF) {
            Dedup__V1__PlayEvent ev = DEDUP__V1__PLAY_EVENT__INIT;
            ev.user_id = f[0];
            ev.item_id = f[1];
            ev.played_at_ms = nf > 2 ? strtoll(f[2], NULL, 10) : 0;
            ev.scene = nf > 3 ? f[3] : "";
            if (dedup__v1__play_event__get_packed_size(&ev) > sizeof payload) {
                fprintf(stderr, "ddproduce: line %lu: too long\n", lineno);
                continue;
            }
            vlen = dedup__v1__play_event__pack(&ev, (uint8_t *)payload);
            val = payload;
        } else if (fmt == F_RAW) {
            val = f[1];
            vlen = strlen(f[1]);
        } else {
            if (unhex(f[1], (unsigned char *)payload, sizeof payload, &vlen) != 0) {
                fprintf(stderr, "ddproduce: line %lu: bad hex\n", lineno);
                continue;
            }
            val = payload;
        }
        char mac[DD_MARKER_MAC_HEX + 1] = "";
        if (key && dd_marker_sign(key, f[0], strlen(f[0]), f[3], strlen(f[3]),
                                  strtoll(f[2], NULL, 10), mac) != 0) {
            fprintf(stderr, "ddproduce: line %lu: cannot sign\n", lineno);
            failed++;
            continue;
        }
        /* -T: the Kafka timestamp a producer with a skewed clock would set. */
        int64_t ts = skewed ? wall_ms() + skew_ms : 0;
        for (;;) {
            rd_kafka_resp_err_t e = mac[0]
                ? rd_kafka_producev(
                      rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                      RD_KAFKA_V_VALUE((void *)val, vlen),
                      RD_KAFKA_V_KEY((ukey[0] ? ukey : NULL), strlen(ukey)),
                      RD_KAFKA_V_HEADER("dedupd-op", "forget", 6),
                      RD_KAFKA_V_HEADER(DD_MARKER_HEADER, mac, DD_MARKER_MAC_HEX),
                      RD_KAFKA_V_TIMESTAMP(ts), RD_KAFKA_V_END)
                : rd_kafka_producev(
                      rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                      RD_KAFKA_V_VALUE((void *)val, vlen),
                      RD_KAFKA_V_KEY((ukey[0] ? ukey : NULL), strlen(ukey)),
                      RD_KAFKA_V_TIMESTAMP(ts), RD_KAFKA_V_END);
            if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                rd_kafka_poll(rk, 50);
                continue;
            }
            if (e) {
                fprintf(stderr, "ddproduce: line %lu: %s\n", lineno, rd_kafka_err2str(e));
                failed++;
            }
            break;
        }
        n++;
        if ((n & 1023) == 0) rd_kafka_poll(rk, 0);
        if (rate > 0) {
            double ahead = n / rate - (now_s() - t0);
            if (ahead > 0.002) {
                struct timespec ts = {(time_t)ahead, (long)((ahead - (time_t)ahead) * 1e9)};
                nanosleep(&ts, NULL);
            }
        }
    }
    free(line);
    if (in != stdin) fclose(in);
    while (rd_kafka_outq_len(rk) > 0 && rd_kafka_flush(rk, 1000) == RD_KAFKA_RESP_ERR__TIMED_OUT) {}
    printf("produced=%lu failed=%lu seconds=%.2f\n", delivered, failed, now_s() - t0);
    rd_kafka_destroy(rk);
    dd_marker_key_free(key);
    return failed || bad_lines ? 1 : 0;
}
