/* SPDX-License-Identifier: Apache-2.0
 *
 * devbroker.c - a Kafka-protocol broker for local runs and tests, built on
 * librdkafka's mock cluster (rdkafka_mock.h). It listens on 127.0.0.1
 * (ports picked by the mock), keeps everything in memory, and serves
 * producers, consumers, consumer groups and committed offsets over TCP to
 * other processes (kcat, dedupd, ddproduce).
 * It stays in tools/ (not tests/tools/): scripts/run-local.sh runs it as the dev broker.
 *
 *   devbroker --topic plays:8 [--topic dlq:1] [--unavailable plays] [--bootstrap-file F]
 *             [--brokers N]
 *
 * It prints the bootstrap address on stdout, writes it to F (tmp file +
 * rename, so a reader never sees half of it), and runs until SIGTERM or
 * SIGINT. SIGUSR1 takes every broker down (connections dropped, new ones
 * refused), SIGUSR2 brings them back: the fault tests use these. A topic
 * named by --unavailable (one of the --topic ones) answers metadata
 * requests with UNKNOWN_TOPIC_OR_PART, as a missing topic does, until
 * SIGHUP. (A topic really missing cannot be had: the mock answers
 * Metadata at most in version 2, which has no AllowAutoTopicCreation, so
 * it creates every topic a client asks about, with 4 partitions.)
 *
 * Signals are blocked before the mock's threads start and taken with
 * sigwait in main, so no work ever runs in a signal handler.
 *
 * Retention: the mock keeps at most 5 MB (or 100,000 record batches) per
 * partition and drops the oldest batches beyond that, as a size-limited
 * Kafka log would. Tests that hold many messages unconsumed use enough
 * partitions and compressed batches (ddproduce compresses with lz4).
 *
 * Consumer groups: the mock (librdkafka 2.0.2) answers the first JoinGroup
 * of an empty group only after a fixed 3 s, and meanwhile expires members
 * on their session timeout (checked once a second), dropping the JoinGroup
 * response it holds: the client then waits max.poll.interval.ms (5 min)
 * for it, without a word. Give consumers session.timeout.ms >= 6000 (the
 * least a Kafka broker accepts by default, group.min.session.timeout.ms):
 * with 3000, joining a group that has been empty for a while hangs now and
 * then, when the broker's thread runs late.
 *
 * A development tool only: dedupd talks to any Kafka cluster.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOPICS 32

struct topic_spec {
    char name[250];
    int partitions;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: devbroker --topic NAME[:PARTITIONS] [--topic ...] [--unavailable NAME]..."
               " [--bootstrap-file F] [--brokers N]\n"
               "  SIGUSR1: brokers down, SIGUSR2: brokers up, SIGHUP: --unavailable topics\n"
               "  available, SIGTERM/SIGINT: exit\n");
}

static int parse_topic(const char *arg, struct topic_spec *t)
{
    const char *colon = strrchr(arg, ':');
    size_t len = colon ? (size_t)(colon - arg) : strlen(arg);
    if (len == 0 || len >= sizeof t->name) return -1;
    memcpy(t->name, arg, len);
    t->name[len] = '\0';
    t->partitions = 1;
    if (colon) {
        char *end;
        errno = 0;
        long n = strtol(colon + 1, &end, 10);
        if (errno || *end || n < 1 || n > 10000) return -1;
        t->partitions = (int)n;
    }
    return 0;
}

static int write_bootstrap(const char *path, const char *addr)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return -1;
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    int ok = fprintf(f, "%s\n", addr) > 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"topic", required_argument, NULL, 't'},   {"bootstrap-file", required_argument, NULL, 'f'},
        {"brokers", required_argument, NULL, 'b'}, {"unavailable", required_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    struct topic_spec topics[MAX_TOPICS];
    int ntopics = 0, nbrokers = 1, opt;
    const char *unavailable[MAX_TOPICS];
    int nunavailable = 0;
    const char *bootstrap_file = NULL;
    char errstr[512];

    while ((opt = getopt_long(argc, argv, "t:f:b:u:h", opts, NULL)) != -1) {
        switch (opt) {
        case 't':
            if (ntopics == MAX_TOPICS || parse_topic(optarg, &topics[ntopics]) != 0) {
                fprintf(stderr, "devbroker: bad --topic '%s' (NAME[:PARTITIONS], at most %d)\n",
                        optarg, MAX_TOPICS);
                return 2;
            }
            ntopics++;
            break;
        case 'f': bootstrap_file = optarg; break;
        case 'u':
            if (nunavailable == MAX_TOPICS) {
                fprintf(stderr, "devbroker: at most %d --unavailable\n", MAX_TOPICS);
                return 2;
            }
            unavailable[nunavailable++] = optarg;
            break;
        case 'b': {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || n < 1 || n > 16) {
                fprintf(stderr, "devbroker: --brokers must be 1..16\n");
                return 2;
            }
            nbrokers = (int)n;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc || ntopics == 0) {
        usage(stderr);
        return 2;
    }

    /* Blocked here, inherited by every librdkafka thread, taken by sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGUSR1);
    sigaddset(&sigs, SIGUSR2);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    /* The mock needs an rd_kafka_t for its bookkeeping; a producer with no
     * bootstrap servers never connects anywhere. */
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "devbroker: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!rk) {
        fprintf(stderr, "devbroker: rd_kafka_new: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, nbrokers);
    if (!mc) {
        fprintf(stderr, "devbroker: cannot create the mock cluster\n");
        rd_kafka_destroy(rk);
        return 1;
    }
    int rc = 1;
    for (int i = 0; i < ntopics; i++) {
        rd_kafka_resp_err_t e =
            rd_kafka_mock_topic_create(mc, topics[i].name, topics[i].partitions, 1);
        if (e) {
            fprintf(stderr, "devbroker: topic %s: %s\n", topics[i].name, rd_kafka_err2str(e));
            goto out;
        }
    }
    for (int i = 0; i < nunavailable; i++) {
        int known = 0;
        for (int k = 0; k < ntopics; k++) known |= strcmp(topics[k].name, unavailable[i]) == 0;
        if (!known) {
            fprintf(stderr, "devbroker: --unavailable %s: not a --topic\n", unavailable[i]);
            goto out;
        }
        rd_kafka_mock_topic_set_error(mc, unavailable[i], RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
    }
    const char *addr = rd_kafka_mock_cluster_bootstraps(mc);
    if (bootstrap_file && write_bootstrap(bootstrap_file, addr) != 0) {
        fprintf(stderr, "devbroker: cannot write %s: %s\n", bootstrap_file, strerror(errno));
        goto out;
    }
    printf("%s\n", addr);
    fflush(stdout);
    fprintf(stderr, "devbroker: listening on %s (%d broker%s)\n", addr, nbrokers,
            nbrokers > 1 ? "s" : "");

    for (;;) {
        int sig;
        if (sigwait(&sigs, &sig) != 0) continue;
        if (sig == SIGHUP) {
            for (int i = 0; i < nunavailable; i++)
                rd_kafka_mock_topic_set_error(mc, unavailable[i], RD_KAFKA_RESP_ERR_NO_ERROR);
            fprintf(stderr, "devbroker: %d topic%s available\n", nunavailable,
                    nunavailable == 1 ? "" : "s");
            nunavailable = 0;
            continue;
        }
        if (sig == SIGUSR1 || sig == SIGUSR2) {
            int down = sig == SIGUSR1;
            rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
            for (int b = 1; b <= nbrokers && !e; b++)
                e = down ? rd_kafka_mock_broker_set_down(mc, b)
                         : rd_kafka_mock_broker_set_up(mc, b);
            fprintf(stderr, "devbroker: brokers %s%s%s\n", down ? "down" : "up", e ? ": " : "",
                    e ? rd_kafka_err2str(e) : "");
            continue;
        }
        break;
    }
    fprintf(stderr, "devbroker: exiting\n");
    rc = 0;
out:
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return rc;
}
