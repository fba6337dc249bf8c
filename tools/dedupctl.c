/* SPDX-License-Identifier: Apache-2.0
 *
 * dedupctl - ask a running dedupd from the shell: filter candidates, record
 * deliveries and plays, forget a user, check health, read the admin
 * listener (stats, cluster, why, trace). For people and scripts: readable
 * output on stdout (or one JSON object with -o json), the failure on
 * stderr, and an exit code that says which kind of failure it was.
 *
 * Options stand anywhere on the line, before or after the command and its
 * arguments, as with other GNU-style CLIs; "--" ends them, so an id that
 * begins with '-' can still be given. getopt_long runs in its in-order mode
 * ("-" first in the option string): the same on every glibc whatever
 * POSIXLY_CORRECT says, and the arguments keep their order without argv
 * being permuted.
 *
 * One way to address a node, as etcdctl's --endpoints: -a/--addr (or
 * $DEDUPD_ADDR) for the gRPC commands, --admin (or $DEDUPD_ADMIN) for the
 * admin listener's; stats and cluster still take the listener as a
 * positional argument. Each option applies to the commands its help line
 * names: given to another command it is refused (exit 2), never ignored.
 *
 * Exit codes (the table in usage() and the README): 0 ok; 1 other failure
 * (health not SERVING included); 2 usage; 3 unavailable; 4 invalid
 * argument; 5 permission; 6 deadline; 7 degraded answer, with --strict.
 */
#include "buildinfo.h"
#include "client.h"
#include "dd.h"
#include "dedupctl_cluster.h"
#include "dedupctl_out.h"
#include "dedupctl_stats.h"
#include "dedupctl_trace.h"
#include "health.pb-c.h"

#include <errno.h>
#include <getopt.h>
#include <grpc/grpc.h> /* GRPC_STATUS_* */
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define EXIT_UNAVAILABLE 3
#define EXIT_INVALID 4
#define EXIT_PERMISSION 5
#define EXIT_DEADLINE 6
#define EXIT_DEGRADED 7

#define DEFAULT_ADDR "127.0.0.1:50051"
#define DEFAULT_ADMIN "127.0.0.1:9464"
/* Ids read from standard input ('-'): at most this many, each at most
 * DD_USER_MAX bytes (the longest id any field takes). */
#define STDIN_IDS_MAX 1000000
#define STDIN_ID_BYTES 65535

/* The options, as bits: which were given, and which each command takes. */
enum {
    O_ADDR = 1 << 0,
    O_ADMIN = 1 << 1,
    O_TOKEN = 1 << 2,
    O_TLS = 1 << 3,
    O_SCENE = 1 << 4,
    O_TIMEOUT = 1 << 5,
    O_LOOKBACK = 1 << 6,
    O_EXPLAIN = 1 << 7,
    O_STRICT = 1 << 8,
    O_OUTPUT = 1 << 9,
    O_MIN_KEPT = 1 << 10,
    O_ALSO = 1 << 11,
};
static const struct {
    unsigned bit;
    const char *name;
} opt_names[] = {
    {O_ADDR, "-a/--addr"},           {O_ADMIN, "--admin"},
    {O_TOKEN, "--admin-token-file"}, {O_TLS, "--tls-*"},
    {O_SCENE, "-s/--scene"},         {O_TIMEOUT, "-t/--timeout"},
    {O_LOOKBACK, "-l/--lookback"},   {O_EXPLAIN, "--explain/--no-explain"},
    {O_STRICT, "--strict"},          {O_OUTPUT, "-o/--output/--json"},
    {O_MIN_KEPT, "--min-kept"},      {O_ALSO, "--also-scene"},
};
#define O_GRPC (O_ADDR | O_TLS | O_TIMEOUT | O_OUTPUT)

struct opts {
    const char *addr;
    const char *admin;            /* stats, cluster, why, trace: the admin listener */
    const char *admin_token_file; /* why, trace: --admin-token-file, else the
                                   * environment's DEDUPCTL_ADMIN_TOKEN_FILE */
    struct dd_client_tls tls;     /* all NULL: plaintext */
    const char *scene;
    int timeout_ms;
    uint32_t lookback_days;
    bool explain;      /* filter: ask for each removed id's reason */
    bool strict;       /* a degraded answer exits EXIT_DEGRADED */
    bool json;         /* -o json */
    unsigned given;    /* O_* of the options on the line */
    uint32_t min_kept; /* filter, why: --min-kept */
    char *also[64];    /* filter, why: --also-scene, in order */
    size_t n_also;
};

static void usage(FILE *f)
{
    /* Two strings: each within the length C11 compilers must take. */
    fputs("usage: dedupctl [OPTION]... COMMAND [ARG]...\n"
          "commands:\n"
          "  filter USER ID...           which of these candidates USER has not seen (gRPC)\n"
          "  deliver USER ID...          record IDs as just delivered to USER (gRPC)\n"
          "  play USER ID[@TIME_MS]...   record plays; TIME_MS in epoch ms, default now (gRPC)\n"
          "  forget USER                 delete USER's plays and deliveries in every scene, or "
          "in -s SCENE only; prints the scenes (gRPC)\n"
          "  health [SERVICE]            SERVING / NOT_SERVING; exit 1 unless SERVING (gRPC)\n"
          "  stats [ADMIN_ADDR]          requests/s, Filter p99, lag, degraded: two scrapes of "
          "/metrics 1 s apart (admin)\n"
          "  cluster [ADMIN_ADDR]        the cluster map as that node sees it: nodes, health, "
          "lag, partitions, forwarding (admin)\n"
          "  why USER ID...              why each ID is kept or removed for USER: verdict, time "
          "(UTC), source, detail (admin)\n"
          "  trace add USER              keep plain records of USER's plays, deliveries and "
          "forgets from now on (admin)\n"
          "  trace remove USER           stop, and delete USER's records (admin)\n"
          "  trace list                  the traced users, since when (admin)\n"
          "  (admin: the admin listener, --admin; on a cluster ask a node of the user's shard "
          "for why and trace)\n"
          "An ID given as '-' stands for the ids on standard input, one a line (blank lines "
          "skipped).\n"
          "Options may stand anywhere: before or after COMMAND and its arguments.\n"
          "'--' ends them: an id that begins with '-' (or '-' itself) goes after it, as in\n"
          "  dedupctl filter -l 7 alice -- -v1 v2\n",
          f);
    fprintf(
        f,
        "options (each for the commands it names; given to another command it is an error, "
        "exit 2):\n"
        "  -a, --addr ADDR             gRPC commands: dedupd's gRPC address (default "
        "$DEDUPD_ADDR, else " DEFAULT_ADDR ")\n"
        "      --admin ADDR            stats, cluster, why, trace: the admin listener "
        "(default $DEDUPD_ADMIN, else " DEFAULT_ADMIN ")\n"
        "      --admin-token-file FILE why, trace: the file of dedupd's admin.token_file "
        "(default $DEDUPCTL_ADMIN_TOKEN_FILE)\n"
        "  -s, --scene SCENE           filter, deliver, play, forget, why: the scene "
        "(default \"\"; forget: every scene)\n"
        "  -t, --timeout MS            gRPC commands, stats, cluster, why, trace: deadline per call "
        "(default %d)\n"
        "  -l, --lookback DAYS         filter, why: lookback in days (default 0 = whole "
        "retention)\n"
        "      --explain               filter: list each removed id with its reason "
        "(default)\n"
        "      --no-explain            filter: counts only, no per-id reasons\n"
        "      --min-kept N            filter, why: let the oldest plays back in (never within "
        "history.min_lookback_days) until N are kept\n"
        "      --also-scene SCENE      filter, why: also remove what was played or delivered in "
        "SCENE (repeatable; the server takes at most 8)\n"
        "      --strict                filter, why: a degraded answer exits 7 (default: 0 "
        "and a warning on stderr)\n"
        "  -o, --output FORMAT         every command: text (default) or json (one JSON "
        "object on stdout)\n"
        "      --json                  every command: the same as -o json\n"
        "      --tls-ca FILE           gRPC commands: speak TLS, the server's certificate "
        "signed by this CA (PEM)\n"
        "      --tls-cert FILE         gRPC commands: this client's certificate (PEM), for "
        "servers with rpc.tls_client_ca\n"
        "      --tls-key FILE          gRPC commands: this client's key (PEM), with "
        "--tls-cert\n"
        "      --tls-name NAME         gRPC commands: check the server's certificate for NAME "
        "instead of ADDR's host\n"
        "  -h, --help                  this help\n"
        "  -V, --version               version, git revision and library versions\n"
        "Long options may be shortened to any unambiguous prefix (--look 7).\n"
        "gRPC commands: filter, deliver, play, forget, health.\n"
        "exit codes:\n"
        "  0  ok\n"
        "  1  other failure: health not SERVING, an error not listed below\n"
        "  2  usage: unknown command or option, an option the command does not take, "
        "missing or extra arguments\n"
        "  3  unavailable: dedupd or its admin listener cannot be reached, or a store behind "
        "it is down (UNAVAILABLE, HTTP 5xx)\n"
        "  4  invalid argument: the server refused the request (INVALID_ARGUMENT, "
        "OUT_OF_RANGE, RESOURCE_EXHAUSTED, HTTP 400/404)\n"
        "  5  permission: PERMISSION_DENIED, UNAUTHENTICATED, HTTP 401/403\n"
        "  6  deadline: DEADLINE_EXCEEDED, or no answer from the admin listener in time\n"
        "  7  degraded answer (a source was unavailable), only with --strict\n",
        DD_CLIENT_DEFAULT_TIMEOUT_MS);
}

/* What every binary's --version prints (buildinfo.h), and json-c's. */
static void version(void)
{
    dd_buildinfo_print(stdout, "dedupctl");
    printf("json-c %s\n", json_c_version());
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

/* The exit code of a failed RPC with gRPC status ST. */
static int exit_of_status(int st)
{
    switch (st) {
    case GRPC_STATUS_UNAVAILABLE: return EXIT_UNAVAILABLE;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_OUT_OF_RANGE:
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return EXIT_INVALID;
    case GRPC_STATUS_PERMISSION_DENIED:
    case GRPC_STATUS_UNAUTHENTICATED: return EXIT_PERMISSION;
    case GRPC_STATUS_DEADLINE_EXCEEDED: return EXIT_DEADLINE;
    default: return EXIT_FAIL;
    }
}

/* The exit code of a failed admin-listener command: by the HTTP status it
 * answered (O->http_status), else by the client's error RC. */
static int exit_of_admin(const struct dedupctl_out *o, int rc)
{
    int h = o->http_status;
    if (h == 401 || h == 403) return EXIT_PERMISSION;
    if (h == 400 || h == 404 || h == 413 || h == 414) return EXIT_INVALID;
    if (h >= 500) return EXIT_UNAVAILABLE;
    if (h) return EXIT_FAIL;
    switch (rc) {
    case DD_ERR_UNAVAILABLE: return EXIT_UNAVAILABLE;
    case DD_ERR_TIMEOUT: return EXIT_DEADLINE;
    default: return EXIT_FAIL;
    }
}

/* With -o json, a failure is an answer too: {"error": {...}} on stdout. */
static void json_error(const struct opts *o, const char *cmd, const char *status, const char *msg,
                       int code)
{
    if (!o->json) return;
    json_object *e = json_object_new_object(), *root = json_object_new_object();
    if (!e || !root) {
        json_object_put(e);
        json_object_put(root);
        return;
    }
    json_object_object_add(e, "command", json_object_new_string(cmd));
    json_object_object_add(e, "status", json_object_new_string(status));
    json_object_object_add(e, "message", json_object_new_string(msg));
    json_object_object_add(e, "exit", json_object_new_int(code));
    json_object_object_add(root, "error", e);
    printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                            JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
}

/* ROOT (consumed) as one line of JSON on stdout. */
static void print_json(json_object *root)
{
    if (!root) {
        fprintf(stderr, "dedupctl: out of memory\n");
        return;
    }
    printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                            JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
}

static int rpc_failed(const char *cmd, const struct opts *o, dd_client *c)
{
    int st = dd_client_status(c);
    const char *msg = dd_client_errstr(c)[0] ? dd_client_errstr(c) : "(no message)";
    /* A server that wants a client certificate closes the TLS handshake
     * without a word: grpc says only "Socket closed". */
    const char *hint = "";
    if (st == GRPC_STATUS_UNAVAILABLE && o->tls.ca &&
        (strstr(msg, "Socket closed") || strstr(msg, "andshake") ||
         strstr(msg, "Connection reset"))) {
        hint = o->tls.cert ? " (the TLS handshake was refused: does the server trust this "
                             "client certificate's CA, and is --tls-ca the server's CA?)"
                           : " (the server closed the TLS handshake: it likely requires a "
                             "client certificate (rpc.tls_client_ca); give --tls-cert and "
                             "--tls-key)";
    }
    fprintf(stderr, "dedupctl: %s: %s: %s%s\n", cmd, dd_client_status_name(st), msg, hint);
    int code = exit_of_status(st);
    if (o->json) {
        char full[1200];
        snprintf(full, sizeof full, "%s%s", msg, hint);
        json_error(o, cmd, dd_client_status_name(st), full, code);
    }
    return code;
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

static json_object *str_array(char *const *v, size_t n)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; a && i < n; i++) json_object_array_add(a, json_object_new_string(v[i]));
    return a;
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
    if (dd_client_filter(c, &req, &r) != DD_OK) return rpc_failed("filter", o, c);

    if (o->json) {
        json_object *root = json_object_new_object();
        json_object *rm = json_object_new_array();
        for (size_t i = 0; rm && i < r->n_removed; i++) {
            const Dedup__V1__Removed *x = r->removed[i];
            json_object *e = json_object_new_object();
            if (!e) break;
            json_object_object_add(e, "id",
                                   json_object_new_string(x->index < req.n_candidate_ids
                                                              ? req.candidate_ids[x->index]
                                                              : "?"));
            json_object_object_add(e, "index", json_object_new_int64(x->index));
            json_object_object_add(e, "reason", json_object_new_string(reason_name(x->reason)));
            if (x->scene && x->scene[0])
                json_object_object_add(e, "scene", json_object_new_string(x->scene));
            json_object_array_add(rm, e);
        }
        if (root) {
            json_object_object_add(root, "user", json_object_new_string(req.user_id));
            json_object_object_add(root, "scene", json_object_new_string(req.scene));
            json_object_object_add(root, "candidates",
                                   json_object_new_int64((int64_t)req.n_candidate_ids));
            json_object_object_add(root, "kept", str_array(r->kept_ids, r->n_kept_ids));
            json_object_object_add(root, "removed", o->explain ? rm : NULL);
            if (!o->explain) json_object_put(rm);
            json_object_object_add(root, "removed_played",
                                   json_object_new_int64(r->removed_played));
            json_object_object_add(root, "removed_delivered",
                                   json_object_new_int64(r->removed_delivered));
            json_object_object_add(root, "removed_duplicate",
                                   json_object_new_int64(r->removed_duplicate));
            json_object_object_add(root, "degraded", json_object_new_boolean(r->degraded));
            json_object_object_add(root, "lookback_used_days",
                                   json_object_new_int64(r->lookback_used_days));
        } else {
            json_object_put(rm);
        }
        print_json(root);
    } else {
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
                printf("  %-24s %-9s (index %" PRIu32 ")\n", id, reason_name(rm->reason),
                       rm->index);
        }
        printf("played=%" PRIu32 " delivered=%" PRIu32 " duplicate=%" PRIu32 " degraded=%s\n",
               r->removed_played, r->removed_delivered, r->removed_duplicate,
               r->degraded ? "yes" : "no");
        printf("lookback_used_days=%" PRIu32 "\n", r->lookback_used_days);
    }
    if (r->degraded) {
        fprintf(stderr, "dedupctl: warning: degraded answer (a source was unavailable; "
                        "seen items may have been kept)\n");
        if (o->strict) return EXIT_DEGRADED;
    }
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
    if (dd_client_record_delivery(c, &req, &r) != DD_OK) return rpc_failed("deliver", o, c);
    if (o->json) {
        json_object *root = json_object_new_object();
        if (root) {
            json_object_object_add(root, "user", json_object_new_string(req.user_id));
            json_object_object_add(root, "scene", json_object_new_string(req.scene));
            json_object_object_add(root, "recorded",
                                   json_object_new_int64((int64_t)req.n_item_ids));
            json_object_object_add(root, "recent_size", json_object_new_int64(r->recent_size));
        }
        print_json(root);
    } else {
        printf("recorded %zu deliver%s for %s; recent size %" PRIu32 "\n", req.n_item_ids,
               req.n_item_ids == 1 ? "y" : "ies", argv[0], r->recent_size);
    }
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
        rc = EXIT_FAIL;
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
        rc = rpc_failed("play", o, c);
        goto out;
    }
    if (o->json) {
        json_object *root = json_object_new_object();
        if (root) {
            json_object_object_add(root, "user", json_object_new_string(req.user_id));
            json_object_object_add(root, "scene", json_object_new_string(req.scene));
            json_object_object_add(root, "accepted", json_object_new_int64(r->accepted));
            json_object_object_add(root, "expired", json_object_new_int64(r->expired));
        }
        print_json(root);
    } else {
        printf("accepted %" PRIu32 ", expired %" PRIu32 " for %s\n", r->accepted, r->expired,
               argv[0]);
    }
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
    /* Every scene unless -s names one (-s "" included: the default scene). */
    bool all = !(o->given & O_SCENE);
    req.scene = all ? "" : (char *)o->scene;
    req.all_scenes = all;
    const Dedup__V1__ForgetUserResponse *r;
    if (dd_client_forget_user(c, &req, &r) != DD_OK) return rpc_failed("forget", o, c);
    if (o->json) {
        json_object *root = json_object_new_object();
        if (root) {
            json_object_object_add(root, "user", json_object_new_string(req.user_id));
            json_object_object_add(root, "all_scenes", json_object_new_boolean(all));
            json_object_object_add(root, "scenes", str_array(r->scenes, r->n_scenes));
        }
        print_json(root);
        return 0;
    }
    if (!all) {
        printf("forgot %s in scene \"%s\"\n", argv[0], req.scene);
        return 0;
    }
    printf("forgot %s in %zu scene%s", argv[0], r->n_scenes, r->n_scenes == 1 ? "" : "s");
    for (size_t i = 0; i < r->n_scenes; i++) printf("%s\"%s\"", i ? ", " : ": ", r->scenes[i]);
    printf("%s\n", r->n_scenes ? "" : " (nothing was stored for this user)");
    return 0;
}

static int cmd_health(dd_client *c, const struct opts *o, int argc, char **argv)
{
    if (argc > 1) {
        fprintf(stderr, "dedupctl: health: at most one SERVICE\n");
        return EXIT_USAGE;
    }
    int st;
    if (dd_client_health(c, argc ? argv[0] : "", &st) != DD_OK) return rpc_failed("health", o, c);
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
    if (o->json) {
        json_object *root = json_object_new_object();
        if (root) {
            json_object_object_add(root, "service", json_object_new_string(argc ? argv[0] : ""));
            json_object_object_add(root, "status", json_object_new_string(name));
        }
        print_json(root);
    } else {
        printf("%s\n", name);
    }
    return st == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING ? 0 : EXIT_FAIL;
}

/* Every command, the options it takes, and whether its arguments after the
 * first (USER) are ids that '-' may stand for. */
static const struct command {
    const char *name;
    int (*fn)(dd_client *, const struct opts *, int, char **);
    unsigned takes;
    bool ids;
} commands[] = {
    {"filter", cmd_filter,
     O_GRPC | O_SCENE | O_LOOKBACK | O_EXPLAIN | O_STRICT | O_MIN_KEPT | O_ALSO, true},
    {"deliver", cmd_deliver, O_GRPC | O_SCENE, true},
    {"play", cmd_play, O_GRPC | O_SCENE, true},
    {"forget", cmd_forget, O_GRPC | O_SCENE, false},
    {"health", cmd_health, O_GRPC, false},
    {"stats", NULL, O_ADMIN | O_TIMEOUT | O_OUTPUT, false},
    {"cluster", NULL, O_ADMIN | O_TIMEOUT | O_OUTPUT, false},
    {"why", NULL,
     O_ADMIN | O_TOKEN | O_SCENE | O_LOOKBACK | O_TIMEOUT | O_STRICT | O_OUTPUT | O_MIN_KEPT |
         O_ALSO,
     true},
    {"trace", NULL, O_ADMIN | O_TOKEN | O_TIMEOUT | O_OUTPUT, false},
};

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

/* Ids read from standard input for a '-' argument: owned here. */
struct stdin_ids {
    char **v;
    size_t n;
};

static void stdin_ids_free(struct stdin_ids *s)
{
    for (size_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
}

/* Read standard input into S: one id a line, blanks around it dropped,
 * blank lines skipped; at most STDIN_IDS_MAX ids of STDIN_ID_BYTES. 0, or
 * EXIT_USAGE / EXIT_FAIL with the message printed. */
static int read_stdin_ids(const char *cmd, struct stdin_ids *s)
{
    char *line = NULL;
    size_t cap = 0, lineno = 0, vcap = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        char *b = line, *e = line + len;
        while (b < e && strchr(" \t\r\n", *b)) b++;
        while (e > b && strchr(" \t\r\n", e[-1])) e--;
        if (b == e) continue;
        if ((size_t)(e - b) > STDIN_ID_BYTES) {
            fprintf(stderr,
                    "dedupctl: %s: standard input line %zu: an id of %zu bytes (at most %d)\n", cmd,
                    lineno, (size_t)(e - b), STDIN_ID_BYTES);
            rc = EXIT_USAGE;
            break;
        }
        if (s->n == STDIN_IDS_MAX) {
            fprintf(stderr, "dedupctl: %s: more than %d ids on standard input\n", cmd,
                    STDIN_IDS_MAX);
            rc = EXIT_USAGE;
            break;
        }
        if (s->n == vcap) {
            size_t nc = vcap ? 2 * vcap : 64;
            char **nv = realloc(s->v, nc * sizeof *nv);
            if (!nv) {
                rc = EXIT_FAIL;
                break;
            }
            s->v = nv;
            vcap = nc;
        }
        char *id = strndup(b, (size_t)(e - b));
        if (!id) {
            rc = EXIT_FAIL;
            break;
        }
        s->v[s->n++] = id;
    }
    if (rc == 0 && ferror(stdin)) {
        fprintf(stderr, "dedupctl: %s: standard input: %s\n", cmd, strerror(errno));
        rc = EXIT_FAIL;
    }
    if (rc == EXIT_FAIL && !ferror(stdin)) fprintf(stderr, "dedupctl: out of memory\n");
    free(line);
    return rc;
}

/* ARGS with each '-' among the ids (ARGS[2..], before index LITERAL, from
 * where "--" made every argument literal) replaced by the ids of standard
 * input, read once. *OUT is ARGS itself when there is no '-', else a new
 * array (free it) whose strings belong to ARGS and IDS. 0 or an exit code. */
static int expand_stdin(const char *cmd, char **args, int nargs, int literal, char ***out,
                        int *nout, struct stdin_ids *ids)
{
    int dash = -1;
    for (int i = 2; i < nargs && i < literal; i++) {
        if (strcmp(args[i], "-") != 0) continue;
        if (dash >= 0) {
            fprintf(stderr, "dedupctl: %s: '-' (standard input) may be given once\n", cmd);
            return EXIT_USAGE;
        }
        dash = i;
    }
    *out = args;
    *nout = nargs;
    if (dash < 0) return 0;
    int rc = read_stdin_ids(cmd, ids);
    if (rc) return rc;
    size_t n = (size_t)nargs - 1 + ids->n;
    if (n > INT_MAX) {
        fprintf(stderr, "dedupctl: %s: too many ids\n", cmd);
        return EXIT_USAGE;
    }
    char **v = malloc((n ? n : 1) * sizeof *v);
    if (!v) {
        fprintf(stderr, "dedupctl: out of memory\n");
        return EXIT_FAIL;
    }
    size_t k = 0;
    for (int i = 0; i < dash; i++) v[k++] = args[i];
    for (size_t i = 0; i < ids->n; i++) v[k++] = ids->v[i];
    for (int i = dash + 1; i < nargs; i++) v[k++] = args[i];
    *out = v;
    *nout = (int)k;
    return 0;
}

/* The admin listener for stats and cluster: --admin or a positional
 * ADMIN_ADDR (not both), else $DEDUPD_ADMIN's or the default. */
static int admin_of(const struct opts *o, const char *cmd, int nargs, char **args,
                    const char **admin)
{
    if (nargs > 2) {
        fprintf(stderr, "dedupctl: %s: at most one ADMIN_ADDR\n", cmd);
        return EXIT_USAGE;
    }
    if (nargs == 2 && (o->given & O_ADMIN)) {
        fprintf(stderr, "dedupctl: %s: the admin listener given twice (--admin and ADMIN_ADDR)\n",
                cmd);
        return EXIT_USAGE;
    }
    *admin = nargs == 2 ? args[1] : o->admin;
    return 0;
}

static int admin_failed(const struct opts *o, const char *cmd, const struct dedupctl_out *out,
                        int rc, const char *err)
{
    fprintf(stderr, "dedupctl: %s: %s\n", cmd, err);
    int code = exit_of_admin(out, rc);
    json_error(o, cmd, out->http_status ? "HTTP" : dd_strerror(rc), err, code);
    return code;
}

/* Run the command ARGS[0] with its NARGS - 1 arguments, options O read;
 * arguments from index LITERAL on came after "--". */
static int run(const struct opts *o, int nargs, char **args, int literal)
{
    if (nargs < 1) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = args[0];
    const struct command *c = NULL;
    for (size_t i = 0; i < DD_ARRAY_LEN(commands); i++)
        if (strcmp(cmd, commands[i].name) == 0) c = &commands[i];
    if (!c) {
        fprintf(stderr, "dedupctl: unknown command '%s'\n", cmd);
        return usage_error(false);
    }
    unsigned extra = o->given & ~c->takes;
    if (extra) {
        char names[256] = "";
        size_t off = 0;
        for (size_t i = 0; i < DD_ARRAY_LEN(opt_names) && off < sizeof names; i++) {
            if (!(c->takes & opt_names[i].bit)) continue;
            int w = snprintf(names + off, sizeof names - off, "%s%s", off ? ", " : "",
                             opt_names[i].name);
            if (w > 0) off += (size_t)w;
        }
        for (size_t i = 0; i < DD_ARRAY_LEN(opt_names); i++) {
            if (!(extra & opt_names[i].bit)) continue;
            fprintf(stderr, "dedupctl: %s: option %s does not apply (%s takes %s)\n", cmd,
                    opt_names[i].name, cmd, names);
            break;
        }
        return usage_error(false);
    }
    if (o->tls.cert && !o->tls.ca) {
        fprintf(stderr, "dedupctl: --tls-cert, --tls-key and --tls-name need --tls-ca\n");
        return EXIT_USAGE;
    }
    if ((o->tls.key || o->tls.server_name) && !o->tls.ca) {
        fprintf(stderr, "dedupctl: --tls-cert, --tls-key and --tls-name need --tls-ca\n");
        return EXIT_USAGE;
    }
    if (!o->tls.cert != !o->tls.key) {
        fprintf(stderr, "dedupctl: --tls-cert and --tls-key go together\n");
        return EXIT_USAGE;
    }
    struct stdin_ids ids = {0};
    char **av = args;
    int n = nargs;
    int rc = c->ids ? expand_stdin(cmd, args, nargs, literal, &av, &n, &ids) : 0;
    if (rc) goto out;
    int ms = o->timeout_ms > 0 ? o->timeout_ms : DD_CLIENT_DEFAULT_TIMEOUT_MS;
    struct dedupctl_out out = {.f = stdout, .json = o->json};
    char err[600];
    if (strcmp(cmd, "stats") == 0 || strcmp(cmd, "cluster") == 0) { /* /metrics, /cluster */
        const char *admin;
        rc = admin_of(o, cmd, n, av, &admin);
        if (rc) goto out;
        int r = cmd[0] == 's' ? dedupctl_stats(admin, 1000, ms, &out, err, sizeof err)
                              : dedupctl_cluster(admin, ms, &out, err, sizeof err);
        rc = r == DD_OK ? 0 : admin_failed(o, cmd, &out, r, err);
        goto out;
    }
    char token[520];
    const char *tok = NULL;
    if (o->given & O_TOKEN || strcmp(cmd, "why") == 0 || strcmp(cmd, "trace") == 0) {
        const char *tf =
            o->admin_token_file ? o->admin_token_file : getenv("DEDUPCTL_ADMIN_TOKEN_FILE");
        if (tf && tf[0]) {
            if (read_token(tf, token, sizeof token, err, sizeof err) != DD_OK) {
                fprintf(stderr, "dedupctl: %s: %s\n", cmd, err);
                rc = EXIT_USAGE;
                goto out;
            }
            tok = token;
        }
    }
    if (strcmp(cmd, "why") == 0) { /* the admin listener's /why */
        if (n < 3) {
            fprintf(stderr, "dedupctl: why: need USER and at least one ID\n");
            rc = EXIT_USAGE;
            goto out;
        }
        int r = dedupctl_why(o->admin, tok, ms, av[1], o->scene, o->lookback_days, o->min_kept,
                             o->also, o->n_also, av + 2, (size_t)n - 2, &out, err, sizeof err);
        if (r != DD_OK)
            rc = admin_failed(o, cmd, &out, r, err);
        else if (out.degraded && o->strict)
            rc = EXIT_DEGRADED;
        goto out;
    }
    if (strcmp(cmd, "trace") == 0) { /* the admin listener's /trace */
        const char *action = n >= 2 ? av[1] : "";
        bool list = strcmp(action, "list") == 0;
        if (!(list && n == 2) &&
            !((strcmp(action, "add") == 0 || strcmp(action, "remove") == 0) && n == 3)) {
            fprintf(stderr, "dedupctl: trace: want 'add USER', 'remove USER' or 'list'\n");
            rc = EXIT_USAGE;
            goto out;
        }
        int r =
            dedupctl_trace(o->admin, tok, ms, action, list ? NULL : av[2], &out, err, sizeof err);
        if (r != DD_OK) {
            char what[32];
            snprintf(what, sizeof what, "trace %s", action);
            rc = admin_failed(o, what, &out, r, err);
        }
        goto out;
    }
    dd_client *cl;
    if (dd_client_new_tls(&cl, o->addr, o->tls.ca ? &o->tls : NULL, err, sizeof err) != DD_OK) {
        fprintf(stderr, "dedupctl: %s: %s\n", cmd, err);
        json_error(o, cmd, "CLIENT", err, EXIT_USAGE);
        rc = EXIT_USAGE; /* a bad address or unreadable TLS file: the command line's */
        goto out;
    }
    dd_client_set_timeout(cl, o->timeout_ms);
    rc = c->fn(cl, o, n - 1, av + 1);
    dd_client_free(cl);
out:
    if (av != args) free(av);
    stdin_ids_free(&ids);
    return rc;
}

int main(int argc, char **argv)
{
    const char *env_addr = getenv("DEDUPD_ADDR"), *env_admin = getenv("DEDUPD_ADMIN");
    struct opts o = {.addr = env_addr && env_addr[0] ? env_addr : DEFAULT_ADDR,
                     .admin = env_admin && env_admin[0] ? env_admin : DEFAULT_ADMIN,
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
        OPT_ALSO_SCENE,
        OPT_STRICT,
        OPT_JSON,
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
        {"strict", no_argument, NULL, OPT_STRICT},
        {"output", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"tls-ca", required_argument, NULL, OPT_TLS_CA},
        {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
        {"tls-key", required_argument, NULL, OPT_TLS_KEY},
        {"tls-name", required_argument, NULL, OPT_TLS_NAME},
        {NULL, 0, NULL, 0},
    };
    /* getopt_long's own messages name argv[0]: the program's name, not the
     * path it was started by. */
    if (argc > 0) argv[0] = (char *)"dedupctl";
    /* The command and its arguments, in the order given; options between
     * them are taken out. At most argc - 1 of them. */
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) {
        fprintf(stderr, "dedupctl: out of memory\n");
        return EXIT_FAIL;
    }
    int nargs = 0;
    /* '-' first: each non-option comes back as code 1 in place, so options
     * are read wherever they stand, and "--" still ends them. */
    while ((opt = getopt_long(argc, argv, "-a:s:t:l:o:hV", longopts, NULL)) != -1) {
        switch (opt) {
        case 1: args[nargs++] = optarg; break;
        case 'a':
            o.addr = optarg;
            o.given |= O_ADDR;
            break;
        case OPT_ADMIN:
            o.admin = optarg;
            o.given |= O_ADMIN;
            break;
        case OPT_ADMIN_TOKEN_FILE:
            o.admin_token_file = optarg;
            o.given |= O_TOKEN;
            break;
        case OPT_TLS_CA:
            o.tls.ca = optarg;
            o.given |= O_TLS;
            break;
        case OPT_TLS_CERT:
            o.tls.cert = optarg;
            o.given |= O_TLS;
            break;
        case OPT_TLS_KEY:
            o.tls.key = optarg;
            o.given |= O_TLS;
            break;
        case OPT_TLS_NAME:
            o.tls.server_name = optarg;
            o.given |= O_TLS;
            break;
        case 's':
            o.scene = optarg;
            o.given |= O_SCENE;
            break;
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
            o.given |= O_TIMEOUT;
            break;
        case 'l':
            if (parse_u32(optarg, UINT32_MAX, &v) != 0) {
                fprintf(stderr, "dedupctl: --lookback: want a number of days, not '%s'\n", optarg);
                free(args);
                return EXIT_USAGE;
            }
            o.lookback_days = v;
            o.given |= O_LOOKBACK;
            break;
        case OPT_EXPLAIN:
            o.explain = true;
            o.given |= O_EXPLAIN;
            break;
        case OPT_NO_EXPLAIN:
            o.explain = false;
            o.given |= O_EXPLAIN;
            break;
        case OPT_STRICT:
            o.strict = true;
            o.given |= O_STRICT;
            break;
        case 'o':
            if (strcmp(optarg, "json") != 0 && strcmp(optarg, "text") != 0) {
                fprintf(stderr, "dedupctl: --output: want 'text' or 'json', not '%s'\n", optarg);
                free(args);
                return EXIT_USAGE;
            }
            o.json = strcmp(optarg, "json") == 0;
            o.given |= O_OUTPUT;
            break;
        case OPT_JSON:
            o.json = true;
            o.given |= O_OUTPUT;
            break;
        case OPT_MIN_KEPT:
            if (parse_u32(optarg, UINT32_MAX, &v) != 0) {
                fprintf(stderr, "dedupctl: --min-kept: want a number, not '%s'\n", optarg);
                free(args);
                return EXIT_USAGE;
            }
            o.min_kept = v;
            o.given |= O_MIN_KEPT;
            break;
        case OPT_ALSO_SCENE:
            if (o.n_also == DD_ARRAY_LEN(o.also)) {
                fprintf(stderr, "dedupctl: --also-scene: at most %zu\n", DD_ARRAY_LEN(o.also));
                free(args);
                return EXIT_USAGE;
            }
            o.also[o.n_also++] = optarg;
            o.given |= O_ALSO;
            break;
        case 'h':
            usage(stdout);
            free(args);
            return 0;
        case 'V':
            version();
            free(args);
            return 0;
        default: /* getopt_long has said which option and why */
            free(args);
            return usage_error(true);
        }
    }
    int literal = nargs;
    while (optind < argc) args[nargs++] = argv[optind++]; /* after "--" */
    int rc = run(&o, nargs, args, literal);
    free(args);
    return rc;
}
