/* SPDX-License-Identifier: Apache-2.0
 *
 * dedupctl - ask a running dedupd from the shell: filter candidates, record
 * deliveries and plays, forget a user, check health. For people and
 * scripts: readable output on stdout, the failure on stderr, and an exit
 * code that says which kind of failure it was.
 *
 * Options stand anywhere on the line, before or after the command and its
 * arguments, as with other GNU-style CLIs; "--" ends them, so an id that
 * begins with '-' can still be given. getopt_long runs in its in-order mode
 * ("-" first in the option string): the same on every glibc whatever
 * POSIXLY_CORRECT says, and the arguments keep their order without argv
 * being permuted.
 *
 * Exit codes: 0 ok; 1 the RPC failed (status name and message printed), or
 * health is not SERVING; 2 usage error (an unknown option included).
 */
#include "client.h"
#include "dd.h"
#include "dedupctl_cluster.h"
#include "dedupctl_stats.h"
#include "dedupctl_trace.h"
#include "health.pb-c.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_RPC 1
#define EXIT_USAGE 2

struct opts {
    const char *addr;
    const char *admin;            /* why, trace: the admin listener */
    const char *admin_token_file; /* why, trace: --admin-token-file, else the
                                   * environment's DEDUPCTL_ADMIN_TOKEN_FILE */
    struct dd_client_tls tls;     /* all NULL: plaintext */
    const char *scene;
    int timeout_ms;
    uint32_t lookback_days;
    bool explain;      /* filter: ask for each removed id's reason */
    uint32_t min_kept; /* filter: --min-kept */
    char *also[64];    /* filter: --also-scene, in order */
    size_t n_also;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dedupctl [OPTION]... COMMAND [ARG]...\n"
            "  filter USER ID...          which of these candidates USER has not seen\n"
            "  deliver USER ID...         record IDs as just delivered to USER\n"
            "  play USER ID[@TIME_MS]...  record plays (TIME_MS: epoch ms; default now)\n"
            "  forget USER                delete USER's plays and deliveries\n"
            "  health [SERVICE]           SERVING / NOT_SERVING (exit 1 unless SERVING)\n"
            "  stats [ADMIN_ADDR]         requests/s, Filter p99, lag, degraded: two scrapes of\n"
            "                             /metrics 1 s apart (default 127.0.0.1:9464; not gRPC)\n"
            "  cluster [ADMIN_ADDR]       the cluster map as that node sees it: nodes, health,\n"
            "                             lag, partitions, where it forwards each shard\n"
            "  why USER ID...             why each ID is kept or removed for USER: one line per\n"
            "                             ID with its verdict (kept, duplicate, delivered,\n"
            "                             played), time (UTC), source (for traced users: Kafka\n"
            "                             topic/partition@offset or RecordPlays) and detail\n"
            "  trace add USER             keep plain records of USER's plays, deliveries and\n"
            "                             forgets from now on (kept across restarts)\n"
            "  trace remove USER          stop, and delete USER's records\n"
            "  trace list                 the traced users, since when\n"
            "  (why and trace ask the admin listener, --admin; on a cluster ask a node of\n"
            "   the user's shard)\n"
            "Options may stand anywhere: before or after COMMAND and its arguments.\n"
            "'--' ends them: an id that begins with '-' goes after it, as in\n"
            "  dedupctl filter -l 7 alice -- -v1 v2\n"
            "options:\n"
            "  -a, --addr ADDR        dedupd gRPC address (default 127.0.0.1:50051)\n"
            "      --admin ADDR       why, trace: the admin listener (default 127.0.0.1:9464)\n"
            "      --admin-token-file FILE\n"
            "                         why, trace: the file holding the admin token (dedupd's\n"
            "                         admin.token_file; default $DEDUPCTL_ADMIN_TOKEN_FILE)\n"
            "  -s, --scene SCENE      scene (namespace; default \"\")\n"
            "  -t, --timeout MS       deadline per call (default %d)\n"
            "  -l, --lookback DAYS    filter: lookback in days (default 0 = whole retention)\n"
            "      --explain          filter: list each removed id with its reason (default)\n"
            "      --no-explain       filter: counts only, no per-id reasons\n"
            "      --min-kept N       filter, why: let the oldest plays back in (never within\n"
            "                         history.min_lookback_days) until N are kept\n"
            "      --also-scene SCENE filter, why: also remove what was played or delivered in\n"
            "                         SCENE (repeatable; the server takes at most 8)\n"
            "      --tls-ca FILE      TLS: the CA that signed the server's certificate (PEM);\n"
            "                         without it dedupctl speaks plaintext\n"
            "      --tls-cert FILE, --tls-key FILE\n"
            "                         TLS: this client's certificate and key (PEM), for\n"
            "                         servers with rpc.tls_client_ca\n"
            "      --tls-name NAME    TLS: check the server's certificate for NAME instead\n"
            "                         of ADDR's host\n"
            "  -h, --help             this help\n"
            "Long options may be shortened to any unambiguous prefix (--look 7).\n"
            "exit codes: 0 ok, 1 RPC error or not serving, 2 usage (an unknown option too)\n",
            DD_CLIENT_DEFAULT_TIMEOUT_MS);
}

/* After the message naming what was refused (getopt_long's own, for an
 * option: it may be an id that begins with '-'). */
static int usage_error(bool option)
{
    fprintf(stderr, "Try 'dedupctl --help'%s.\n",
            option ? "; an id that begins with '-' goes after '--'" : "");
    return EXIT_USAGE;
}

static int parse_u32(const char *s, uint32_t max, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v > max) return -1;
    *out = (uint32_t)v;
    return 0;
}

static int rpc_failed(const char *cmd, dd_client *c)
{
    int st = dd_client_status(c);
    fprintf(stderr, "dedupctl: %s: %s: %s\n", cmd, dd_client_status_name(st),
            dd_client_errstr(c)[0] ? dd_client_errstr(c) : "(no message)");
    return EXIT_RPC;
}

static const char *reason_name(Dedup__V1__Reason r)
{
    switch (r) {
    case DEDUP__V1__REASON__REASON_PLAYED: return "PLAYED";
    case DEDUP__V1__REASON__REASON_DELIVERED: return "DELIVERED";
    case DEDUP__V1__REASON__REASON_DUPLICATE: return "DUPLICATE";
    default: return "UNSPECIFIED";
    }
}

static int cmd_filter(dd_client *c, const struct opts *o, int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "dedupctl: filter: need USER and at least one ID\n");
        return EXIT_USAGE;
    }
    Dedup__V1__FilterRequest req = DEDUP__V1__FILTER_REQUEST__INIT;
    req.user_id = argv[0];
    req.candidate_ids = argv + 1;
    req.n_candidate_ids = (size_t)argc - 1;
    req.scene = (char *)o->scene;
    req.lookback_days = o->lookback_days;
    req.mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS;
    req.explain = o->explain;
    req.min_kept = o->min_kept;
    req.also_scenes = (char **)o->also;
    req.n_also_scenes = o->n_also;
    const Dedup__V1__FilterResponse *r;
    if (dd_client_filter(c, &req, &r) != DD_OK) return rpc_failed("filter", c);

    printf("kept %zu of %zu:\n", r->n_kept_ids, req.n_candidate_ids);
    for (size_t i = 0; i < r->n_kept_ids; i++) printf("  %s\n", r->kept_ids[i]);
    if (o->explain)
        printf("removed %zu:\n", r->n_removed);
    else /* the server sends counts only: no ids, no reasons */
        printf("removed %zu (--no-explain: counts only)\n",
               req.n_candidate_ids >= r->n_kept_ids ? req.n_candidate_ids - r->n_kept_ids : 0);
    for (size_t i = 0; i < r->n_removed; i++) {
        const Dedup__V1__Removed *rm = r->removed[i];
        const char *id = rm->index < req.n_candidate_ids ? req.candidate_ids[rm->index] : "?";
        if (rm->scene && rm->scene[0])
            printf("  %-24s %-9s (index %" PRIu32 ", scene %s)\n", id, reason_name(rm->reason),
                   rm->index, rm->scene);
        else
            printf("  %-24s %-9s (index %" PRIu32 ")\n", id, reason_name(rm->reason), rm->index);
    }
    printf("played=%" PRIu32 " delivered=%" PRIu32 " duplicate=%" PRIu32 " degraded=%s\n",
           r->removed_played, r->removed_delivered, r->removed_duplicate,
           r->degraded ? "yes" : "no");
    printf("lookback_used_days=%" PRIu32 "\n", r->lookback_used_days);
    if (r->degraded)
        fprintf(stderr, "dedupctl: warning: degraded answer (a source was unavailable; "
                        "seen items may have been kept)\n");
    return 0;
}

static int cmd_deliver(dd_client *c, const struct opts *o, int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "dedupctl: deliver: need USER and at least one ID\n");
        return EXIT_USAGE;
    }
    Dedup__V1__RecordDeliveryRequest req = DEDUP__V1__RECORD_DELIVERY_REQUEST__INIT;
    req.user_id = argv[0];
    req.item_ids = argv + 1;
    req.n_item_ids = (size_t)argc - 1;
    req.scene = (char *)o->scene;
    req.delivered_at_ms = dd_now_ms();
    const Dedup__V1__RecordDeliveryResponse *r;
    if (dd_client_record_delivery(c, &req, &r) != DD_OK) return rpc_failed("deliver", c);
    printf("recorded %zu deliveries for %s; recent size %" PRIu32 "\n", req.n_item_ids, argv[0],
           r->recent_size);
    return 0;
}

static int cmd_play(dd_client *c, const struct opts *o, int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "dedupctl: play: need USER and at least one ID[@TIME_MS]\n");
        return EXIT_USAGE;
    }
    size_t n = (size_t)argc - 1;
    Dedup__V1__Play *plays = calloc(n, sizeof *plays);
    Dedup__V1__Play **pp = calloc(n, sizeof *pp);
    int rc = EXIT_USAGE;
    if (!plays || !pp) {
        fprintf(stderr, "dedupctl: out of memory\n");
        rc = EXIT_RPC;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char *arg = argv[1 + i];
        dedup__v1__play__init(&plays[i]);
        /* An id may itself hold '@': only the last one separates the time. */
        char *at = strrchr(arg, '@');
        if (at) {
            char *end;
            errno = 0;
            long long t = strtoll(at + 1, &end, 10);
            if (errno || end == at + 1 || *end || t < 0) {
                fprintf(stderr, "dedupctl: play: bad time in '%s' (want ID@EPOCH_MS)\n", arg);
                goto out;
            }
            *at = '\0';
            plays[i].played_at_ms = t;
        }
        plays[i].item_id = arg;
        pp[i] = &plays[i];
    }
    Dedup__V1__RecordPlaysRequest req = DEDUP__V1__RECORD_PLAYS_REQUEST__INIT;
    req.user_id = argv[0];
    req.plays = pp;
    req.n_plays = n;
    req.scene = (char *)o->scene;
    const Dedup__V1__RecordPlaysResponse *r;
    if (dd_client_record_plays(c, &req, &r) != DD_OK) {
        rc = rpc_failed("play", c);
        goto out;
    }
    printf("accepted %" PRIu32 ", expired %" PRIu32 " for %s\n", r->accepted, r->expired, argv[0]);
    rc = 0;
out:
    free(plays);
    free(pp);
    return rc;
}

static int cmd_forget(dd_client *c, const struct opts *o, int argc, char **argv)
{
    if (argc != 1) {
        fprintf(stderr, "dedupctl: forget: need exactly one USER\n");
        return EXIT_USAGE;
    }
    Dedup__V1__ForgetUserRequest req = DEDUP__V1__FORGET_USER_REQUEST__INIT;
    req.user_id = argv[0];
    req.scene = (char *)o->scene;
    if (dd_client_forget(c, &req) != DD_OK) return rpc_failed("forget", c);
    printf("forgot %s\n", argv[0]);
    return 0;
}

static int cmd_health(dd_client *c, const struct opts *o, int argc, char **argv)
{
    (void)o;
    if (argc > 1) {
        fprintf(stderr, "dedupctl: health: at most one SERVICE\n");
        return EXIT_USAGE;
    }
    int st;
    if (dd_client_health(c, argc ? argv[0] : "", &st) != DD_OK) return rpc_failed("health", c);
    const char *name;
    switch (st) {
    case GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING: name = "SERVING"; break;
    case GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING:
        name = "NOT_SERVING";
        break;
    case GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN:
        name = "SERVICE_UNKNOWN";
        break;
    default: name = "UNKNOWN"; break;
    }
    printf("%s\n", name);
    return st == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING ? 0 : EXIT_RPC;
}

static const struct {
    const char *name;
    int (*fn)(dd_client *, const struct opts *, int, char **);
} commands[] = {
    {"filter", cmd_filter}, {"deliver", cmd_deliver}, {"play", cmd_play},
    {"forget", cmd_forget}, {"health", cmd_health},
};

/* Run the command ARGS[0] with its NARGS - 1 arguments, options O read. */
/* The admin token in file PATH (dedupd's admin.token_file): its one line,
 * blanks and line ends around it dropped, into OUT. 0, or DD_ERR_IO /
 * DD_ERR_INVALID with a message naming the file. */
static int read_token(const char *path, char *out, size_t cap, char *err, size_t errlen)
{
    char *text = dd_read_file(path, err, errlen);
    if (!text) return DD_ERR_IO;
    const char *b = text, *e = text + strlen(text);
    while (b < e && strchr(" \t\r\n", *b)) b++;
    while (e > b && strchr(" \t\r\n", e[-1])) e--;
    size_t n = (size_t)(e - b);
    int rc = DD_OK;
    if (n == 0 || n >= cap || memchr(b, '\n', n) || memchr(b, '\r', n)) {
        rc = dd_fail(DD_ERR_INVALID, err, errlen, "%s: not a token (one line, under %zu bytes)",
                     path, cap);
    } else {
        memcpy(out, b, n);
        out[n] = '\0';
    }
    memset(text, 0, strlen(text));
    free(text);
    return rc;
}

static int run(const struct opts *o, int nargs, char **args)
{
    if (nargs < 1) {
        usage(stderr);
        return EXIT_USAGE;
    }
    bool tls = o->tls.ca || o->tls.cert || o->tls.key || o->tls.server_name;
    if (tls && !o->tls.ca) {
        fprintf(stderr, "dedupctl: --tls-cert, --tls-key and --tls-name need --tls-ca\n");
        return EXIT_USAGE;
    }
    if (!o->tls.cert != !o->tls.key) {
        fprintf(stderr, "dedupctl: --tls-cert and --tls-key go together\n");
        return EXIT_USAGE;
    }
    const char *cmd = args[0];
    if (strcmp(cmd, "stats") == 0) { /* the admin listener's /metrics, not gRPC */
        if (nargs > 2) {
            fprintf(stderr, "dedupctl: stats: at most one ADMIN_ADDR\n");
            return EXIT_USAGE;
        }
        char err[256];
        const char *admin = nargs == 2 ? args[1] : "127.0.0.1:9464";
        if (dedupctl_stats(admin, 1000, stdout, err, sizeof err) == DD_OK) return 0;
        fprintf(stderr, "dedupctl: stats: %s\n", err);
        return EXIT_RPC;
    }
    if (strcmp(cmd, "cluster") == 0) { /* the admin listener's /cluster, not gRPC */
        if (nargs > 2) {
            fprintf(stderr, "dedupctl: cluster: at most one ADMIN_ADDR\n");
            return EXIT_USAGE;
        }
        char err[256];
        const char *admin = nargs == 2 ? args[1] : "127.0.0.1:9464";
        int ms = o->timeout_ms > 0 ? o->timeout_ms : DD_CLIENT_DEFAULT_TIMEOUT_MS;
        if (dedupctl_cluster(admin, ms, stdout, err, sizeof err) == DD_OK) return 0;
        fprintf(stderr, "dedupctl: cluster: %s\n", err);
        return EXIT_RPC;
    }
    int ms = o->timeout_ms > 0 ? o->timeout_ms : DD_CLIENT_DEFAULT_TIMEOUT_MS;
    char token[520];
    const char *tok = NULL;
    if (strcmp(cmd, "why") == 0 || strcmp(cmd, "trace") == 0) {
        const char *tf =
            o->admin_token_file ? o->admin_token_file : getenv("DEDUPCTL_ADMIN_TOKEN_FILE");
        if (tf && tf[0]) {
            char err[400];
            if (read_token(tf, token, sizeof token, err, sizeof err) != DD_OK) {
                fprintf(stderr, "dedupctl: %s: %s\n", cmd, err);
                return EXIT_RPC;
            }
            tok = token;
        }
    }
    if (strcmp(cmd, "why") == 0) { /* the admin listener's /why */
        if (nargs < 3) {
            fprintf(stderr, "dedupctl: why: need USER and at least one ID\n");
            return EXIT_USAGE;
        }
        char err[600];
        if (dedupctl_why(o->admin, tok, ms, args[1], o->scene, o->lookback_days, o->min_kept,
                         o->also, o->n_also, args + 2, (size_t)nargs - 2, stdout, err,
                         sizeof err) == DD_OK)
            return 0;
        fprintf(stderr, "dedupctl: why: %s\n", err);
        return EXIT_RPC;
    }
    if (strcmp(cmd, "trace") == 0) { /* the admin listener's /trace */
        const char *action = nargs >= 2 ? args[1] : "";
        bool list = strcmp(action, "list") == 0;
        if (!(list && nargs == 2) &&
            !((strcmp(action, "add") == 0 || strcmp(action, "remove") == 0) && nargs == 3)) {
            fprintf(stderr, "dedupctl: trace: want 'add USER', 'remove USER' or 'list'\n");
            return EXIT_USAGE;
        }
        char err[600];
        if (dedupctl_trace(o->admin, tok, ms, action, list ? NULL : args[2], stdout, err,
                           sizeof err) == DD_OK)
            return 0;
        fprintf(stderr, "dedupctl: trace %s: %s\n", action, err);
        return EXIT_RPC;
    }
    for (size_t i = 0; i < DD_ARRAY_LEN(commands); i++) {
        if (strcmp(cmd, commands[i].name) != 0) continue;
        char err[256];
        dd_client *c;
        if (dd_client_new_tls(&c, o->addr, tls ? &o->tls : NULL, err, sizeof err) != DD_OK) {
            fprintf(stderr, "dedupctl: %s\n", err);
            return EXIT_RPC;
        }
        dd_client_set_timeout(c, o->timeout_ms);
        int rc = commands[i].fn(c, o, nargs - 1, args + 1);
        dd_client_free(c);
        return rc;
    }
    fprintf(stderr, "dedupctl: unknown command '%s'\n", cmd);
    return usage_error(false);
}

int main(int argc, char **argv)
{
    struct opts o = {.addr = "127.0.0.1:50051",
                     .admin = "127.0.0.1:9464",
                     .scene = "",
                     .timeout_ms = 0,
                     .lookback_days = 0,
                     .explain = true};
    int opt;
    uint32_t v;
    enum {
        OPT_TLS_CA = 256,
        OPT_TLS_CERT,
        OPT_TLS_KEY,
        OPT_TLS_NAME,
        OPT_EXPLAIN,
        OPT_NO_EXPLAIN,
        OPT_ADMIN,
        OPT_ADMIN_TOKEN_FILE,
        OPT_MIN_KEPT,
        OPT_ALSO_SCENE
    };
    static const struct option longopts[] = {
        {"addr", required_argument, NULL, 'a'},
        {"admin", required_argument, NULL, OPT_ADMIN},
        {"admin-token-file", required_argument, NULL, OPT_ADMIN_TOKEN_FILE},
        {"scene", required_argument, NULL, 's'},
        {"timeout", required_argument, NULL, 't'},
        {"lookback", required_argument, NULL, 'l'},
        {"explain", no_argument, NULL, OPT_EXPLAIN},
        {"no-explain", no_argument, NULL, OPT_NO_EXPLAIN},
        {"min-kept", required_argument, NULL, OPT_MIN_KEPT},
        {"also-scene", required_argument, NULL, OPT_ALSO_SCENE},
        {"help", no_argument, NULL, 'h'},
        {"tls-ca", required_argument, NULL, OPT_TLS_CA},
        {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
        {"tls-key", required_argument, NULL, OPT_TLS_KEY},
        {"tls-name", required_argument, NULL, OPT_TLS_NAME},
        {NULL, 0, NULL, 0},
    };
    /* The command and its arguments, in the order given; options between
     * them are taken out. At most argc - 1 of them. */
    char **args = calloc((size_t)argc, sizeof *args);
    if (!args) {
        fprintf(stderr, "dedupctl: out of memory\n");
        return EXIT_RPC;
    }
    int nargs = 0;
    /* '-' first: each non-option comes back as code 1 in place, so options
     * are read wherever they stand, and "--" still ends them. */
    while ((opt = getopt_long(argc, argv, "-a:s:t:l:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 1: args[nargs++] = optarg; break;
        case 'a': o.addr = optarg; break;
        case OPT_ADMIN: o.admin = optarg; break;
        case OPT_ADMIN_TOKEN_FILE: o.admin_token_file = optarg; break;
        case OPT_TLS_CA: o.tls.ca = optarg; break;
        case OPT_TLS_CERT: o.tls.cert = optarg; break;
        case OPT_TLS_KEY: o.tls.key = optarg; break;
        case OPT_TLS_NAME: o.tls.server_name = optarg; break;
        case 's': o.scene = optarg; break;
        case 't':
            if (parse_u32(optarg, INT_MAX, &v) != 0 || v == 0) {
                fprintf(stderr,
                        "dedupctl: --timeout: want a positive number of milliseconds, "
                        "not '%s'\n",
                        optarg);
                free(args);
                return EXIT_USAGE;
            }
            o.timeout_ms = (int)v;
            break;
        case 'l':
            if (parse_u32(optarg, UINT32_MAX, &v) != 0) {
                fprintf(stderr, "dedupctl: --lookback: want a number of days, not '%s'\n", optarg);
                free(args);
                return EXIT_USAGE;
            }
            o.lookback_days = v;
            break;
        case OPT_EXPLAIN: o.explain = true; break;
        case OPT_NO_EXPLAIN: o.explain = false; break;
        case OPT_MIN_KEPT:
            if (parse_u32(optarg, UINT32_MAX, &v) != 0) {
                fprintf(stderr, "dedupctl: --min-kept: want a number, not '%s'\n", optarg);
                free(args);
                return EXIT_USAGE;
            }
            o.min_kept = v;
            break;
        case OPT_ALSO_SCENE:
            if (o.n_also == DD_ARRAY_LEN(o.also)) {
                fprintf(stderr, "dedupctl: --also-scene: at most %zu\n", DD_ARRAY_LEN(o.also));
                free(args);
                return EXIT_USAGE;
            }
            o.also[o.n_also++] = optarg;
            break;
        case 'h':
            usage(stdout);
            free(args);
            return 0;
        default: /* getopt_long has said which option and why */
            free(args);
            return usage_error(true);
        }
    }
    while (optind < argc) args[nargs++] = argv[optind++]; /* after "--" */
    int rc = run(&o, nargs, args);
    free(args);
    return rc;
}
