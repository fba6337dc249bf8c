/* SPDX-License-Identifier: Apache-2.0
 *
 * main.c - the dedupd daemon: parse the command line, load and validate the
 * configuration, open the history store, start the front ends, wait for a
 * signal, shut down in order. Wiring only: no logic lives here.
 *
 * Signals are blocked in every thread (set before any thread starts) and
 * taken synchronously here with sigwait: SIGTERM/SIGINT stop, SIGHUP
 * reopens the log file.
 */
#include "addr.h"
#include "admin.h"
#include "buildinfo.h"
#include "cluster.h"
#include "cluster_page.h"
#include "config.h"
#include "dd.h"
#include "history.h"
#include "ingest.h"
#include "marker.h"
#include "producer.h"
#include "log.h"
#include "owner.h"
#include "partition.h"
#include "peer.h"
#include "plays.h"
#include "rpc.h"
#include "sentinel.h"
#include "snapshot.h"
#include "sweep.h"
#include "recent_watch.h"
#include "trace.h"
#include "why.h"

#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grpc/grpc.h>

/* The one-line usage a mistake prints (on stderr, exit 2). */
#define USAGE_LINE "usage: dedupd [-c FILE] [-o section.key=value]... [-t] [-p] [--take-over]\n"

/* --help: every option. man/gen_man.py makes dedupd(8) from this text, so
 * an option is listed here or nowhere. */
static void help(FILE *f)
{
    fprintf(f, USAGE_LINE
            "Persistent \"already seen\" filter for short-video recommendation: Filter,\n"
            "RecordDelivery, RecordPlays and ForgetUser over gRPC, plays from Kafka.\n"
            "\n"
            "  -c, --config FILE       configuration file (INI; see dedupd.conf(5))\n"
            "  -o, --set K=V           override one key, e.g. -o history.path=/data\n"
            "                          (repeatable; applied after the file)\n"
            "  -t, --check             check the configuration and exit\n"
            "  -p, --print             print the effective configuration and exit\n"
            "      --take-over         record this configuration's ownership in the store,\n"
            "                          replacing the one it holds (a store refused as\n"
            "                          another's; README, \"Ownership\"); for this start only\n"
            "  -h, --help              this help\n"
            "      --version           version, git revision and library versions\n"
            "\n"
            "Exit status: 0 stopped cleanly (or -t/-p done), 1 error, 2 usage error.\n");
}

static int usage_error(void)
{
    fputs(USAGE_LINE "Try 'dedupd --help' for more information.\n", stderr);
    return 2;
}

/* The store as admin's component: the history and its ownership check. */
struct store_ref {
    dd_history *h;
    dd_owner_guard *owner;
};

/* The store is degraded while it refuses writes (full disk): /readyz stays
 * 200 and says why (admin.h, "Ready"). */
static bool store_degraded(void *ud, char *why, size_t whylen)
{
    struct store_ref *s = ud;
    char r[256];
    if (dd_history_writable(s->h, r, sizeof r)) return false;
    snprintf(why, whylen, "store not writable: %s", r);
    return true;
}

/* Not ready while the store is another ownership's (owner.h). */
static bool store_ready(void *ud)
{
    struct store_ref *s = ud;
    return !dd_owner_guard_refused(s->owner, NULL, 0);
}
static bool store_why(void *ud, char *why, size_t whylen)
{
    struct store_ref *s = ud;
    return dd_owner_guard_refused(s->owner, why, whylen);
}
static void store_collect(dd_prom *p, void *ud)
{
    struct store_ref *s = ud;
    dd_history_collect(p, s->h);
    dd_owner_guard_collect(p, s->owner);
}
static bool owner_refused(void *g, char *why, size_t whylen)
{
    return dd_owner_guard_refused(g, why, whylen);
}

/* Ingest is ready while it has partitions (admin.h's probe), and never
 * while the store misses plays the log no longer holds. */
static bool ingest_assigned(void *in)
{
    return dd_ingest_assigned(in) && !dd_ingest_log_gap(in, NULL, 0);
}
static bool ingest_why(void *in, char *why, size_t whylen)
{
    if (dd_ingest_log_gap(in, why, whylen)) return true;
    char e[200];
    if (!dd_ingest_broker_error(in, e, sizeof e)) return false;
    snprintf(why, whylen, "ingest has no partitions assigned; kafka: %s", e);
    return true;
}

/* What the cluster asks of ingest (cluster.h, struct dd_cluster_local). */
static int32_t ingest_partitions(void *in)
{
    return dd_ingest_partition_count(in);
}
static bool ingest_partitions_changed(void *in)
{
    return dd_ingest_partitions_changed(in);
}
static int64_t ingest_lag_ms(void *in)
{
    return dd_ingest_lag_ms(in);
}
static int ingest_applied(void *in, int32_t partition, int64_t offset, int64_t deadline_ns)
{
    return dd_ingest_wait_visible(in, partition, offset, deadline_ns);
}

/* Redis as an optional component (recent_watch.h): up, or degraded. */
static bool redis_up(void *w)
{
    return dd_recent_watch_up(w, NULL, 0);
}
static bool redis_degraded(void *w, char *why, size_t whylen)
{
    char e[200];
    if (dd_recent_watch_up(w, e, sizeof e)) return false;
    snprintf(why, whylen,
             "redis unreachable (recent deliveries unknown; Filter answers "
             "degraded): %s",
             e);
    return true;
}

/* gRPC health is /readyz (rpc.h, dd_rpc_set_ready), and /readyz's gRPC
 * component is whether it serves: one source of truth. */
static bool node_ready(void *admin)
{
    return dd_admin_ready(admin, NULL, 0);
}
static bool rpc_serving(void *rpc)
{
    return dd_rpc_serving(rpc);
}

/* The cluster's readiness, and why not (admin.h's probe and why). */
static bool cluster_ready(void *cl)
{
    char why[8];
    return dd_cluster_ready(cl, why, sizeof why);
}
static bool cluster_why(void *cl, char *why, size_t whylen)
{
    return !dd_cluster_ready(cl, why, whylen);
}
static bool cluster_degraded(void *cl, char *why, size_t whylen)
{
    return dd_cluster_degraded(cl, why, whylen);
}
static char *cluster_page(void *cl)
{
    return dd_cluster_describe(cl);
}

/* A "host:port" setting with the port actually bound (it may have asked
 * for port 0), for the log. The setting passed config validation. */
static const char *bound_addr(char *buf, size_t buflen, const char *listen, int port)
{
    char host[256];
    if (dd_hostport_parse(listen, host, sizeof host, NULL) != DD_HOSTPORT_OK)
        snprintf(host, sizeof host, "%s", listen);
    dd_hostport_format(buf, buflen, host, (unsigned)port);
    return buf;
}

/* Whether SIGTERM or SIGINT waits (they are blocked: main takes them with
 * sigwait once running), so that a copy of a peer's store stops when
 * asked (snapshot.h, dd_snapshot_bootstrap). */
static bool stop_pending(void *ud)
{
    (void)ud;
    sigset_t p;
    return sigpending(&p) == 0 && (sigismember(&p, SIGTERM) == 1 || sigismember(&p, SIGINT) == 1);
}

/* A channel for a copy of a peer's store (peer.h), for snapshot.h. */
static grpc_channel *copy_channel(void *cfg, const char *addr, char *err, size_t errlen)
{
    struct dd_peer_conf pc = dd_config_peer_conf(cfg);
    return dd_peer_channel_new(&pc, addr, err, errlen);
}

int main(int argc, char **argv)
{
    struct dd_config cfg;
    char err[512], addrbuf[300];
    int check_only = 0, print_only = 0, take_over = 0, opt, rc = 1;
    dd_history *history = NULL;
    dd_admin *admin = NULL;
    dd_rpc *rpc = NULL;
    dd_ingest *ingest = NULL;
    dd_plays *plays = NULL;
    dd_cluster *cluster = NULL;
    dd_sweep *sweep = NULL;
    dd_producer *producer = NULL;
    dd_snapshot_server *snapshot = NULL;
    dd_trace *trace = NULL;
    dd_why *why = NULL;
    dd_recent_watch *redis_watch = NULL;
    dd_owner_guard *owner = NULL;
    struct store_ref store = {0};
    dd_marker_key *forget_key = NULL;
    bool trace_metrics = false, producer_metrics = false, key_world_readable = false;
    dd_sentinel *sentinel = NULL;
    struct dd_cluster_map map = {0};

    if (dd_config_init(&cfg) != DD_OK) {
        fprintf(stderr, "dedupd: out of memory\n");
        return 1;
    }
    /* First pass: the file; overrides are applied after it, whatever the
     * order on the command line. */
    const char *conf_path = NULL;
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'}, {"set", required_argument, NULL, 'o'},
        {"check", no_argument, NULL, 't'},        {"print", no_argument, NULL, 'p'},
        {"take-over", no_argument, NULL, 'T'},    {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0}};
    while ((opt = getopt_long(argc, argv, "c:o:tph", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': conf_path = optarg; break;
        case 'T': take_over = 1; break;
        case 'o': break;
        case 't': check_only = 1; break;
        case 'p': print_only = 1; break;
        case 'h':
            help(stdout);
            dd_config_free(&cfg);
            return 0;
        case 'V':
            dd_buildinfo_print(stdout, "dedupd");
            dd_config_free(&cfg);
            return 0;
        default: dd_config_free(&cfg); return usage_error();
        }
    }
    if (optind != argc) {
        fprintf(stderr, "dedupd: unexpected argument '%s'\n", argv[optind]);
        dd_config_free(&cfg);
        return usage_error();
    }
    if (conf_path && dd_config_load_file(&cfg, conf_path, err, sizeof err) != DD_OK) {
        fprintf(stderr, "dedupd: %s\n", err);
        goto out;
    }
    optind = 1;
    while ((opt = getopt_long(argc, argv, "c:o:tph", longopts, NULL)) != -1) {
        if (opt != 'o') continue;
        char *eq = strchr(optarg, '=');
        if (!eq) {
            fprintf(stderr, "dedupd: -o %s: expected section.key=value\n", optarg);
            goto out;
        }
        *eq = '\0';
        int r = dd_config_set(&cfg, optarg, eq + 1, err, sizeof err);
        *eq = '=';
        if (r != DD_OK) {
            fprintf(stderr, "dedupd: -o %s: %s\n", optarg, err);
            goto out;
        }
    }
    if (dd_config_validate(&cfg, err, sizeof err) != DD_OK) {
        fprintf(stderr, "dedupd: %s\n", err);
        goto out;
    }
    if (print_only) {
        rc = dd_config_write(&cfg, stdout) == DD_OK ? 0 : 1;
        goto out;
    }
    /* The forget markers' key (marker.h), read once here, so that -t checks
     * the file as well as the key. */
    if (cfg.cluster.forget_key_file[0] &&
        dd_marker_key_load(&forget_key, cfg.cluster.forget_key_file, &key_world_readable, err,
                           sizeof err) != DD_OK) {
        fprintf(stderr, "dedupd: cluster.forget_key_file: %s\n", err);
        goto out;
    }
    if (check_only) {
        if (key_world_readable)
            fprintf(stderr,
                    "dedupd: warning: cluster.forget_key_file: %s is world-readable: "
                    "any local user can sign forget markers (chmod 600 it)\n",
                    cfg.cluster.forget_key_file);
        printf("configuration ok\n");
        rc = 0;
        goto out;
    }

    dd_log_set_level((enum dd_log_level)dd_log_level_parse(cfg.log.level));
    if (cfg.log.file[0] && dd_log_open_file(cfg.log.file, err, sizeof err) != DD_OK) {
        fprintf(stderr, "dedupd: log.file: %s\n", err);
        goto out;
    }

    if (key_world_readable)
        dd_warn("main",
                "msg=\"cluster.forget_key_file is world-readable: any local user can "
                "sign forget markers (chmod 600 it)\" path=\"%s\"",
                cfg.cluster.forget_key_file);
    if (forget_key)
        dd_info("main", "msg=\"forget markers from the topic are applied only when signed "
                        "with cluster.forget_key_file\"");
    else if (cfg.ingest.enabled)
        dd_info("main", "msg=\"no cluster.forget_key_file: forget markers from the topic are "
                        "not applied\"");
    cfg.ingest.forget_key = forget_key;

    if (dd_rpc_process_init(&cfg.rpc, err, sizeof err) != DD_OK) {
        fprintf(stderr, "dedupd: %s\n", err);
        goto out;
    }

    /* A cluster node consumes only its shard's partitions and talks to
     * its shard's Redis (cluster.h). */
    bool clustered = dd_cluster_enabled(&cfg.cluster);
    if (clustered) {
        if (dd_cluster_conf_check(&cfg.cluster, NULL, &map, err, sizeof err) != DD_OK) {
            fprintf(stderr, "dedupd: %s\n", err);
            goto out;
        }
        cfg.ingest.assign = true;
        cfg.ingest.shards = map.shards;
        cfg.ingest.shard = map.shard;
        cfg.ingest.replica = map.replica;
        cfg.ingest.partitioner = map.partitioner;
        char redis[300];
        if (dd_cluster_shard_redis(&cfg.cluster, map.shard, redis, sizeof redis) &&
            dd_config_set(&cfg, "recent.redis", redis, err, sizeof err) != DD_OK) {
            fprintf(stderr, "dedupd: cluster.redis: %s\n", err);
            goto out;
        }
        /* With Sentinel: this shard's master name (one for all, or one per
         * shard). */
        char name[DD_SENTINEL_NAME_MAX];
        if (cfg.recent.sentinels[0] &&
            (dd_sentinel_shard_name(cfg.recent.master_name, map.shards, map.shard, name,
                                    sizeof name, err, sizeof err) != DD_OK ||
             dd_config_set(&cfg, "recent.master_name", name, err, sizeof err) != DD_OK)) {
            fprintf(stderr, "dedupd: %s\n", err);
            goto out;
        }
    }

    /* Block the signals we handle before any thread exists, so every thread
     * inherits the mask and only sigwait below sees them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* The admin listener before anything else: /healthz answers and
     * /readyz says 503 (with why) while the store opens; readiness flips as
     * each component is attached. */
    if (dd_admin_new(&admin, &cfg.admin, cfg.ingest.enabled, err, sizeof err) != DD_OK) {
        dd_error("main", "msg=\"cannot start the admin listener\" error=\"%s\"", err);
        goto out;
    }
    /* The plays families next, whether or not ingest runs (admin.h's
     * own families come first: the registry renders in order of adding). */
    if (dd_plays_new(&plays) != DD_OK ||
        dd_metrics_add(dd_admin_metrics(admin), dd_plays_collect, plays) != DD_OK) {
        dd_error("main", "msg=\"out of memory\"");
        goto out;
    }
    if (cfg.admin.listen[0]) {
        dd_info("main", "msg=\"admin listening\" admin=%s",
                bound_addr(addrbuf, sizeof addrbuf, cfg.admin.listen, dd_admin_port(admin)));
        /* Allowed (probes and Prometheus come from other hosts) but said
         * once: the admin listener has no TLS. Its pages with user data
         * or writes (/why, /trace) answer loopback clients with the
         * admin.token_file token only (admin.h, "An OPERATOR page"). */
        if (!dd_hostport_is_loopback(cfg.admin.listen))
            dd_warn("main",
                    "msg=\"admin listener on a non-loopback address: /metrics, /healthz "
                    "and /readyz are plaintext and open to any peer (/why and /trace "
                    "answer loopback clients with the admin token only)\" admin=%s",
                    cfg.admin.listen);
        if (!cfg.admin.token_file[0])
            dd_info("main", "msg=\"/why and /trace are off (403) until admin.token_file is "
                            "set\"");
    }

    if (clustered && dd_snapshot_bootstrap_wanted(cfg.cluster.bootstrap, cfg.history.path)) {
        dd_info("main",
                "msg=\"empty store and cluster.bootstrap = peer: copying a replica's "
                "store\" path=\"%s\"",
                cfg.history.path);
        /* Not ready meanwhile, saying why (admin.h: the store component
         * with the copy's state as its module until the store opens). */
        static struct dd_snapshot_progress progress = DD_SNAPSHOT_PROGRESS_INIT;
        dd_admin_set_why(admin, DD_ADMIN_STORE, dd_snapshot_progress_why);
        if (dd_admin_attach(admin, DD_ADMIN_STORE, &progress, NULL, dd_snapshot_progress_done) !=
            DD_OK) {
            dd_error("main", "msg=\"out of memory\"");
            goto out;
        }
        struct dd_snapshot_bootstrap boot = {.map = &map,
                                             .history_path = cfg.history.path,
                                             .timeout_ms = cfg.cluster.forward_timeout_ms,
                                             .channel = copy_channel,
                                             .channel_ud = &cfg,
                                             .stop = stop_pending,
                                             .progress = &progress};
        int brc = dd_snapshot_bootstrap(&boot, err, sizeof err);
        dd_admin_detach(admin, DD_ADMIN_STORE);
        if (brc == DD_ERR_STATE) rc = 0; /* stopped when asked */
        if (brc != DD_OK) goto out;
    }
    if (dd_history_open(&history, &cfg.history, &cfg.rocksdb, NULL, err, sizeof err) != DD_OK) {
        dd_error("main", "msg=\"cannot open history\" path=\"%s\" error=\"%s\"", cfg.history.path,
                 err);
        goto out;
    }
    dd_info("main", "msg=\"history open\" path=\"%s\" segment_days=%u retention_days=%u",
            cfg.history.path, cfg.history.segment_days, cfg.history.retention_days);

    /* Whose store it is (owner.h): a store of another ownership is
     * refused before anything serves from it or writes to it. */
    {
        struct dd_owner want = {.shards = 1};
        snprintf(want.topic, sizeof want.topic, "%s", cfg.ingest.topic);
        enum dd_partitioner part = DD_PARTITIONER_MURMUR2_RANDOM;
        dd_partitioner_parse(cfg.cluster.partitioner, &part);
        want.partitioner = (int)part;
        uint64_t legacy = 0, legacy_parent = 0;
        if (clustered) {
            want.shards = map.shards;
            want.shard = map.shard;
            want.split_from = map.split_from;
            want.partitioner = map.partitioner;
            legacy = dd_cluster_ownership_id(&map);
            if (map.split_from) {
                struct dd_cluster_map parent = {.shards = map.split_from,
                                                .shard = map.shard % map.split_from,
                                                .partitioner = map.partitioner};
                legacy_parent = dd_cluster_ownership_id(&parent);
            }
        }
        if (dd_owner_guard_new(&owner, history, &want, dd_history_created(history), take_over,
                               legacy, legacy_parent, err, sizeof err) != DD_OK) {
            dd_error("main", "msg=\"cannot check the store's ownership\" error=\"%s\"", err);
            goto out;
        }
    }
    bool refused = dd_owner_guard_refused(owner, NULL, 0);
    store.h = history;
    store.owner = owner;
    dd_admin_set_degraded(admin, DD_ADMIN_STORE, store_degraded);
    dd_admin_set_why(admin, DD_ADMIN_STORE, store_why);
    if (dd_admin_attach(admin, DD_ADMIN_STORE, &store, store_collect, store_ready) != DD_OK) {
        dd_error("main", "msg=\"out of memory\"");
        goto out;
    }

    /* The trace store (trace.h) next: ingest and gRPC record into it. */
    char trace_path[4096];
    struct dd_trace_conf trace_conf = dd_config_trace_conf(&cfg, trace_path, sizeof trace_path);
    if (dd_trace_open(&trace, &trace_conf, NULL, err, sizeof err) != DD_OK) {
        dd_error("main", "msg=\"cannot open the trace store\" path=\"%s\" error=\"%s\"",
                 trace_conf.path, err);
        goto out;
    }
    dd_info("main", "msg=\"trace store open\" path=\"%s\"", trace_conf.path);
    if (dd_metrics_add(dd_admin_metrics(admin), dd_trace_collect, trace) != DD_OK) {
        dd_error("main", "msg=\"out of memory\"");
        goto out;
    }
    trace_metrics = true;

    /* Kafka ingest once the store is open; it stops before the store closes.
     * A cluster node on a new store (a new replica, a replaced volume)
     * replays its partitions from their beginning: its group's committed
     * offsets belonged to a store that is gone. */
    cfg.ingest.from_beginning = clustered && dd_history_created(history);
    if (cfg.ingest.enabled && refused) {
        dd_error("main", "msg=\"the store is another ownership's: not consuming into it\"");
    } else if (cfg.ingest.enabled) {
        if (dd_ingest_new(&ingest, &cfg.ingest, &cfg.window, &cfg.kafka, history, err,
                          sizeof err) != DD_OK) {
            dd_error("main", "msg=\"cannot create the Kafka consumer\" error=\"%s\"", err);
            goto out;
        }
        dd_ingest_set_trace(ingest, trace);
        dd_ingest_set_partitions_check(ingest, dd_owner_guard_partitions, owner);
        if (dd_ingest_start(ingest) != DD_OK) {
            dd_error("main", "msg=\"cannot start Kafka ingest\" topic=%s", cfg.ingest.topic);
            goto out;
        }
        dd_admin_set_why(admin, DD_ADMIN_INGEST, ingest_why);
        if (dd_admin_attach(admin, DD_ADMIN_INGEST, ingest, dd_ingest_collect, ingest_assigned) !=
            DD_OK) {
            dd_error("main", "msg=\"out of memory\"");
            goto out;
        }
        dd_plays_set_ingest(plays, ingest);
    }

    if (clustered) {
        /* No ingest (a refused store): the partition count stays unknown,
         * so the node is not ready for the cluster either. */
        struct dd_cluster_local local = {0};
        if (ingest)
            local = (struct dd_cluster_local){ingest_partitions, ingest_partitions_changed,
                                              ingest_lag_ms, ingest};
        struct dd_peer_conf peer = dd_config_peer_conf(&cfg);
        if (dd_cluster_new(&cluster, &map, &cfg.cluster, &peer, cfg.rpc.threads, cfg.rpc.prepost,
                           &local, err, sizeof err) != DD_OK ||
            dd_cluster_start(cluster, err, sizeof err) != DD_OK) {
            dd_error("main", "msg=\"cannot start the cluster\" error=\"%s\"", err);
            goto out;
        }
        dd_admin_require(admin, DD_ADMIN_CLUSTER);
        dd_admin_set_why(admin, DD_ADMIN_CLUSTER, cluster_why);
        dd_admin_set_degraded(admin, DD_ADMIN_CLUSTER, cluster_degraded);
        dd_admin_set_page(admin, DD_ADMIN_CLUSTER, "/cluster", cluster_page);
        if (dd_admin_attach(admin, DD_ADMIN_CLUSTER, cluster, dd_cluster_collect, cluster_ready) !=
            DD_OK) {
            dd_error("main", "msg=\"out of memory\"");
            goto out;
        }
        /* Resharding: compactions drop the users this node no longer owns
         * once the cluster has settled, and a store that may hold some is
         * swept (sweep.h). */
        if (!refused) dd_history_set_owner(history, dd_cluster_owns, cluster);
        if (dd_sweep_start(&sweep, history, cluster, owner, err, sizeof err) != DD_OK) {
            dd_error("main", "msg=\"cannot check the store's ownership\" error=\"%s\"", err);
            goto out;
        }
    }

    /* gRPC last: once it answers, everything behind it is up. */
    if (clustered) {
        struct dd_producer_conf pc = {.topic = cfg.ingest.topic,
                                      .format = cfg.ingest.format,
                                      .partitioner = cfg.ingest.partitioner,
                                      .timeout_ms = cfg.cluster.forward_timeout_ms,
                                      .forget_key = forget_key};
        if (dd_producer_new(&producer, &pc, &cfg.kafka, err, sizeof err) != DD_OK) {
            dd_error("main", "msg=\"cannot start the producer\" error=\"%s\"", err);
            goto out;
        }
        if (ingest) dd_producer_set_applied(producer, ingest_applied, ingest);
        /* dedupd_producer_*, which record.h points operators at. */
        if (dd_metrics_add(dd_admin_metrics(admin), dd_producer_collect, producer) != DD_OK) {
            dd_error("main", "msg=\"out of memory\"");
            goto out;
        }
        producer_metrics = true;
    }
    if (clustered &&
        dd_snapshot_server_new(&snapshot, history, cfg.cluster.snapshot_mbps,
                               cfg.cluster.snapshot_max_age_s, err, sizeof err) != DD_OK) {
        dd_error("main", "msg=\"cannot set up snapshots\" error=\"%s\"", err);
        goto out;
    }
    /* The Redis master from Sentinel (sentinel.h), before anything that
     * talks to Redis: every dd_recent follows its watcher. */
    if (cfg.recent.sentinels[0]) {
        struct dd_sentinel_conf sc = {cfg.recent.sentinels, cfg.recent.master_name,
                                      cfg.recent.sentinel_password, cfg.recent.timeout_ms};
        if (dd_sentinel_new(&sentinel, &sc, err, sizeof err) != DD_OK ||
            dd_sentinel_start(sentinel, err, sizeof err) != DD_OK) {
            dd_error("main", "msg=\"cannot watch Redis Sentinel\" error=\"%s\"", err);
            goto out;
        }
        cfg.recent.sentinel = sentinel;
        dd_info("main", "msg=\"redis master from sentinel\" sentinels=\"%s\" master_name=%s",
                cfg.recent.sentinels, cfg.recent.master_name);
    }
    /* Redis reachability for /readyz and dedupd_component_ready. */
    if (dd_recent_watch_new(&redis_watch, &cfg.recent, err, sizeof err) != DD_OK) {
        dd_error("main", "msg=\"cannot watch Redis\" error=\"%s\"", err);
        goto out;
    }
    dd_admin_set_degraded(admin, DD_ADMIN_REDIS, redis_degraded);
    if (dd_admin_attach(admin, DD_ADMIN_REDIS, redis_watch, NULL, redis_up) != DD_OK) {
        dd_error("main", "msg=\"out of memory\"");
        goto out;
    }
    /* /why and /trace on the admin listener (why.h): operator pages, for
     * loopback clients with the admin token (admin.h). */
    struct dd_why_conf wc = {dd_config_filter_conf(&cfg),
                             cfg.history.retention_days + cfg.history.segment_days + 1,
                             cfg.trace.retention_days};
    if (dd_why_new(&why, &wc, &cfg.recent, history, trace, cluster, err, sizeof err) != DD_OK ||
        dd_admin_set_handler(admin, "/why", dd_why_page, why, true) != DD_OK ||
        dd_admin_set_handler(admin, "/trace", dd_why_trace_page, why, true) != DD_OK) {
        dd_error("main", "msg=\"cannot serve /why and /trace\" error=\"%s\"", err);
        goto out;
    }
    if (dd_rpc_new(&rpc, &cfg.rpc, &cfg.recent, history, cluster, producer, err, sizeof err) ==
        DD_OK) {
        dd_rpc_set_trace(rpc, trace);
        dd_rpc_set_snapshot(rpc, snapshot);
        dd_rpc_set_ready(rpc, node_ready, admin);
        dd_rpc_set_refusal(rpc, owner_refused, owner);
        if (!cluster) {
            /* ClusterMap on a single node: one shard of one replica. */
            struct dd_serve_single single = {.partitioner = "", .ud = ingest};
            struct dd_cluster_map smap = {0};
            if (dd_cluster_conf_check(&cfg.cluster, NULL, &smap, err, sizeof err) == DD_OK) {
                dd_cluster_map_hash_hex(&smap, single.map_hash);
                single.partitioner = dd_partitioner_name((enum dd_partitioner)smap.partitioner);
            }
            dd_cluster_map_free(&smap);
            if (ingest) {
                single.partitions = ingest_partitions;
                single.lag_ms = ingest_lag_ms;
            }
            dd_rpc_set_single(rpc, &single);
        }
    }
    if (!rpc || dd_rpc_start(rpc, err, sizeof err) != DD_OK) {
        dd_error("main", "msg=\"cannot start the gRPC server\" listen=\"%s\" error=\"%s\"",
                 cfg.rpc.listen, err);
        goto out;
    }
    /* rpc.listen with the real port (it may have asked for port 0). */
    dd_info("main", "msg=serving rpc=%s",
            bound_addr(addrbuf, sizeof addrbuf, cfg.rpc.listen, dd_rpc_port(rpc)));
    if (dd_admin_attach(admin, DD_ADMIN_RPC, rpc, dd_rpc_collect, rpc_serving) != DD_OK) {
        dd_error("main", "msg=\"out of memory\"");
        goto out;
    }
    dd_admin_service_ready(admin); /* systemd READY=1 */

    dd_info("main", "msg=ready");
    for (;;) {
        int sig;
        if (sigwait(&sigs, &sig) != 0) continue;
        if (sig == SIGHUP) {
            if (dd_log_reopen() != DD_OK)
                dd_warn("main", "msg=\"cannot reopen log file\" file=\"%s\"", cfg.log.file);
            else
                dd_info("main", "msg=\"log reopened\"");
            continue;
        }
        dd_info("main", "msg=\"shutting down\" signal=%s", sig == SIGTERM ? "TERM" : "INT");
        break;
    }
    /* Not ready first (/readyz 503, gRPC health NOT_SERVING, systemd
     * STOPPING=1), then admin.drain_ms of serving while load balancers
     * notice. */
    dd_rpc_set_serving(rpc, false);
    dd_admin_stopping(admin);
    /* Stop taking calls first, so nothing new reaches the stores. */
    dd_rpc_shutdown(rpc);
    /* Then ingest: final flush, write, commit, leave the group. */
    dd_ingest_stop(ingest);
    rc = 0;

out:
    /* Every module leaves /metrics before it is freed. */
    dd_admin_detach(admin, DD_ADMIN_RPC);
    dd_rpc_free(rpc);
    dd_snapshot_server_free(snapshot);
    if (admin) {
        dd_admin_set_handler(admin, "/why", NULL, NULL, false);
        dd_admin_set_handler(admin, "/trace", NULL, NULL, false);
    }
    dd_why_free(why);
    dd_admin_detach(admin, DD_ADMIN_REDIS);
    dd_recent_watch_free(redis_watch);
    dd_sentinel_free(sentinel); /* after every dd_recent that follows it */
    if (producer_metrics) dd_metrics_remove(dd_admin_metrics(admin), dd_producer_collect, producer);
    dd_producer_free(producer);
    dd_admin_detach(admin, DD_ADMIN_CLUSTER);
    /* Stopped now, freed after the store: compactions ask it who owns a
     * user until the store is closed (dd_cluster_owns). */
    dd_cluster_stop(cluster);
    dd_sweep_stop(sweep);
    dd_cluster_map_free(&map);
    if (plays) dd_plays_set_ingest(plays, NULL);
    dd_admin_detach(admin, DD_ADMIN_INGEST);
    dd_ingest_free(ingest);
    if (trace_metrics) dd_metrics_remove(dd_admin_metrics(admin), dd_trace_collect, trace);
    dd_trace_close(trace);
    dd_admin_detach(admin, DD_ADMIN_STORE);
    dd_owner_guard_free(owner);
    dd_history_close(history);
    dd_cluster_free(cluster);
    if (rc == 0 && history) dd_info("main", "msg=stopped");
    dd_admin_free(admin); /* the registry with it: no collector runs after */
    dd_plays_free(plays);
    dd_marker_key_free(forget_key); /* after ingest and the producer, which borrowed it */
    dd_config_free(&cfg);
    return rc;
}
