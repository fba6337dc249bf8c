/* SPDX-License-Identifier: Apache-2.0
 *
 * config.c - see config.h. Every key is one row of the table below: its
 * name ("section.key"), its type, where it lives in struct dd_config, its
 * default as text, and its bounds or allowed words. dd_config_init applies
 * the defaults through the same parser that reads files and -o overrides,
 * dd_config_validate re-checks every row's bounds (the struct is public, so
 * code may have written it directly) before the rules that tie keys
 * together, and dd_config_write walks the table. Adding a key is therefore a
 * struct field, one row here, and its paragraph in conf/dedupd.conf.
 *
 * Syntax (what a user may write, documented again in conf/dedupd.conf):
 *   - "[section]" headers; keys before the first header are an error;
 *   - "key = value"; whitespace around both is trimmed; a key set twice
 *     keeps the last value;
 *   - '#' or ';' at the start of a line, or after whitespace in an unquoted
 *     value, starts a comment ("a=b#c" is the value "b#c");
 *   - a value in double quotes is taken verbatim, with \" and \\ as the only
 *     escapes; a comment may follow the closing quote;
 *   - lines may be of any length;
 *   - numbers are plain decimal integers (no size suffixes, no sign for
 *     unsigned keys), booleans are true/false, yes/no, on/off or 1/0.
 * String values may not hold control characters (other than tab), so that
 * dd_config_write can always write them back on one line.
 */
#include "config.h"

#include "partition.h"
#include "addr.h"
#include "dd.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum kind {
    K_STR,  /* char *, any text without control characters */
    K_ADDR, /* char *, "host:port" (port 0..65535); "" allowed if the row says so */
    K_BOOL, /* bool */
    K_U32,  /* uint32_t within [umin, umax] */
    K_U64,  /* uint64_t within [umin, umax] */
    K_I64,  /* int64_t within [imin, imax] */
    K_DBL,  /* double strictly between dmin and dmax */
    K_ENUM, /* char *, one of words (stored as the table's spelling) */
};

struct key {
    const char *name; /* "section.key" */
    enum kind kind;
    size_t off;      /* of the field in struct dd_config */
    const char *def; /* default, parsed like a value from a file */
    uint64_t umin, umax;
    int64_t imin, imax;
    double dmin, dmax;
    const char *const *words; /* K_ENUM: NULL-terminated */
    bool empty_ok;            /* K_ADDR: "" means off */
};

/* The offset of FIELD, which must have type T: a row whose type does not
 * match its field fails to compile (no _Generic association matches),
 * instead of writing the wrong width at run time. */
#define FIELD(field, T) \
    _Generic(((struct dd_config *)0)->field, T : offsetof(struct dd_config, field))

#define ROW_STR(n, f, d) \
    { \
        .name = n, .kind = K_STR, .off = FIELD(f, char *), .def = d \
    }
#define ROW_ADDR(n, f, d, empty) \
    { \
        .name = n, .kind = K_ADDR, .off = FIELD(f, char *), .def = d, .empty_ok = empty \
    }
#define ROW_BOOL(n, f, d) \
    { \
        .name = n, .kind = K_BOOL, .off = FIELD(f, bool), .def = d \
    }
#define ROW_U32(n, f, d, lo, hi) \
    { \
        .name = n, .kind = K_U32, .off = FIELD(f, uint32_t), .def = d, .umin = lo, .umax = hi \
    }
#define ROW_U64(n, f, d, lo, hi) \
    { \
        .name = n, .kind = K_U64, .off = FIELD(f, uint64_t), .def = d, .umin = lo, .umax = hi \
    }
#define ROW_I64(n, f, d, lo, hi) \
    { \
        .name = n, .kind = K_I64, .off = FIELD(f, int64_t), .def = d, .imin = lo, .imax = hi \
    }
#define ROW_DBL(n, f, d, lo, hi) \
    { \
        .name = n, .kind = K_DBL, .off = FIELD(f, double), .def = d, .dmin = lo, .dmax = hi \
    }
#define ROW_ENUM(n, f, d, w) \
    { \
        .name = n, .kind = K_ENUM, .off = FIELD(f, char *), .def = d, .words = w \
    }

static const char *const format_words[] = {"json", "protobuf", NULL};
static const char *const level_words[] = {"debug", "info", "warn", "error", NULL};
static const char *const poller_words[] = {"poll", "epoll1", NULL};
static const char *const compression_words[] = {"off", "on", NULL};
static const char *const bootstrap_words[] = {"none", "peer", NULL};
static const char *const durable_words[] = {"flush", "wal", "window", NULL};

/* Keep rows of one section together, in the order conf/dedupd.conf
 * documents them; dd_config_write prints them in this order. */
static const struct key keys[] = {
    ROW_STR("history.path", history.path, "./data/history"),
    ROW_U32("history.segment_days", history.segment_days, "30", 1, 36500),
    ROW_U32("history.retention_days", history.retention_days, "90", 1, 36500),
    ROW_DBL("history.fp_rate", history.fp_rate, "0.01", 0.0, 1.0),
    ROW_U32("history.max_successive_merges", history.max_successive_merges, "0", 0, UINT32_MAX),
    ROW_U64("history.block_cache_mb", history.block_cache_mb, "256", 0, UINT64_MAX >> 20),
    ROW_U64("history.index_cache_mb", history.index_cache_mb, "128", 0, UINT64_MAX >> 20),
    ROW_BOOL("history.sync", history.sync, "true"),
    ROW_U64("history.write_mbps", history.write_mbps, "0", 0, 1000000),
    ROW_BOOL("history.compaction_low_cpu", history.compaction_low_cpu, "false"),
    /* at most 10 years, so that now + max_future_ms cannot overflow */
    ROW_I64("history.max_future_ms", history.max_future_ms, "3600000", 0, 3650 * DD_MS_PER_DAY),
    ROW_U64("history.min_free_mb", history.min_free_mb, "256", 0, UINT64_MAX >> 20),
    ROW_STR("history.day_scenes", history.day_scenes, ""),
    ROW_BOOL("history.exact_days", history.exact_days, "true"),
    ROW_U32("history.min_lookback_days", history.min_lookback_days, "7", 0, 36500),

    ROW_BOOL("ingest.enabled", ingest.enabled, "true"),
    ROW_STR("ingest.topic", ingest.topic, "plays"),
    ROW_ENUM("ingest.format", ingest.format, "json", format_words),
    ROW_STR("ingest.dead_letter_topic", ingest.dead_letter_topic, ""),
    /* at most what history keys store of a user id (u16 length, history.h) */
    ROW_U32("ingest.max_id_bytes", ingest.max_id_bytes, "256", 1, 65535),
    ROW_ENUM("ingest.durable", ingest.durable, "flush", durable_words),
    ROW_BOOL("ingest.wal", ingest.wal, "false"),
    ROW_BOOL("ingest.accept_truncated_log", ingest.accept_truncated_log, "false"),
    ROW_U32("ingest.durable_interval_ms", ingest.durable_interval_ms, "10000", 1, UINT32_MAX),

    ROW_U32("window.flush_ms", window.flush_ms, "500", 1, UINT32_MAX),
    /* ingest splits it between two windows of at least 64 KiB (window.h) */
    ROW_U64("window.max_bytes", window.max_bytes, "67108864", 131072, UINT64_MAX),

    ROW_ADDR("recent.redis", recent.redis, "127.0.0.1:6379", false),
    ROW_STR("recent.password", recent.password, ""),
    ROW_STR("recent.sentinels", recent.sentinels, ""),
    ROW_STR("recent.master_name", recent.master_name, ""),
    ROW_STR("recent.sentinel_password", recent.sentinel_password, ""),
    ROW_U32("recent.size", recent.size, "100", 1, UINT32_MAX),
    ROW_U32("recent.ttl_s", recent.ttl_s, "604800", 1, UINT32_MAX),
    ROW_U32("recent.timeout_ms", recent.timeout_ms, "20", 1, UINT32_MAX),

    ROW_ADDR("rpc.listen", rpc.listen, "127.0.0.1:50051", false),
    ROW_U32("rpc.threads", rpc.threads, "2", 1, 1024),
    ROW_U32("rpc.prepost", rpc.prepost, "8", 1, 65536),
    ROW_U32("rpc.max_candidates", rpc.max_candidates, "20000", 1, UINT32_MAX),
    /* at most what history keys store of a user id (u16 length, history.h) */
    ROW_U32("rpc.max_id_bytes", rpc.max_id_bytes, "256", 1, 65535),
    /* gRPC takes the limit as an int */
    ROW_U32("rpc.max_message_bytes", rpc.max_message_bytes, "16777216", 1, INT32_MAX),
    ROW_STR("rpc.tls_cert", rpc.auth.tls.cert, ""),
    ROW_STR("rpc.tls_key", rpc.auth.tls.key, ""),
    ROW_STR("rpc.tls_client_ca", rpc.auth.tls.client_ca, ""),
    ROW_STR("rpc.allow_read", rpc.auth.allow_read, "*"),
    ROW_STR("rpc.allow_write", rpc.auth.allow_write, "*"),
    ROW_STR("rpc.allow_peer", rpc.auth.allow_peer, "*"),
    ROW_BOOL("rpc.allow_insecure", rpc.auth.allow_insecure, "false"),
    ROW_U32("rpc.shutdown_grace_ms", rpc.shutdown_grace_ms, "5000", 0, UINT32_MAX),
    ROW_ENUM("rpc.poller", rpc.poller, "poll", poller_words),
    ROW_U32("rpc.spin_us", rpc.spin_us, "500", 0, 1000000),
    ROW_U32("rpc.send_timeout_ms", rpc.send_timeout_ms, "2000", 10, 86400000),
    /* gRPC takes these as ints; 0 = off where rpc.h says so */
    ROW_U32("rpc.max_streams_per_connection", rpc.max_streams_per_connection, "100", 1, 65536),
    ROW_U32("rpc.max_buffer_mb", rpc.max_buffer_mb, "256", 1, 1048576),
    ROW_U32("rpc.max_connection_idle_ms", rpc.max_connection_idle_ms, "300000", 0, INT32_MAX),
    ROW_U32("rpc.max_connection_age_ms", rpc.max_connection_age_ms, "0", 0, INT32_MAX),
    ROW_U32("rpc.max_connection_age_grace_ms", rpc.max_connection_age_grace_ms, "30000", 0,
            INT32_MAX),
    ROW_U32("rpc.keepalive_min_ms", rpc.keepalive_min_ms, "300000", 0, INT32_MAX),
    ROW_ENUM("rpc.compression", rpc.compression, "off", compression_words),

    ROW_ADDR("admin.listen", admin.listen, "127.0.0.1:9464", true),
    ROW_U32("admin.drain_ms", admin.drain_ms, "0", 0, 600000),
    ROW_U32("admin.threads", admin.threads, "2", 1, 64),
    ROW_U32("admin.max_connections", admin.max_connections, "64", 1, 4096),
    ROW_U32("admin.max_connections_per_ip", admin.max_connections_per_ip, "8", 1, 4096),
    ROW_U32("admin.request_timeout_ms", admin.request_timeout_ms, "10000", 100, 3600000),
    ROW_STR("admin.token_file", admin.token_file, ""),

    ROW_U32("cluster.shards", cluster.shards, "1", 1, DD_CLUSTER_MAX_SHARDS),
    ROW_STR("cluster.shard", cluster.shard, "0"),
    ROW_STR("cluster.replica", cluster.replica, "0"),
    ROW_STR("cluster.nodes", cluster.nodes, ""),
    ROW_ENUM("cluster.partitioner", cluster.partitioner, "murmur2_random", dd_partitioner_names),
    ROW_STR("cluster.redis", cluster.redis, ""),
    ROW_U32("cluster.max_lag_ms", cluster.max_lag_ms, "10000", 1, INT32_MAX),
    ROW_U32("cluster.health_interval_ms", cluster.health_interval_ms, "1000", 50, 600000),
    ROW_U32("cluster.forward_timeout_ms", cluster.forward_timeout_ms, "5000", 1, INT32_MAX),
    /* 0 = auto; against rpc.threads x rpc.prepost: dd_cluster_forward_cap_check */
    ROW_U32("cluster.max_forward_inflight", cluster.max_forward_inflight, "0", 0, 1048576),
    ROW_STR("cluster.tls_ca", cluster.tls_ca, ""),
    ROW_STR("cluster.tls_server_name", cluster.tls_server_name, ""),
    ROW_STR("cluster.forget_key_file", cluster.forget_key_file, ""),
    ROW_ENUM("cluster.bootstrap", cluster.bootstrap, "none", bootstrap_words),
    ROW_U32("cluster.snapshot_mbps", cluster.snapshot_mbps, "400", 0, 1000000),
    ROW_U32("cluster.snapshot_max_age_s", cluster.snapshot_max_age_s, "3600", 1, 604800),
    ROW_U32("cluster.split_from", cluster.split_from, "0", 0, 1024),
    ROW_U32("cluster.split_replicas", cluster.split_replicas, "0", 0, 16),

    /* "" = next to history.path: dd_config_trace_conf */
    ROW_STR("trace.path", trace.path, ""),
    ROW_STR("trace.users", trace.users, ""),
    ROW_U32("trace.retention_days", trace.retention_days, "30", 1, 36500),
    ROW_U32("trace.max_records", trace.max_records, "10000", 1, 10000000),
    ROW_U32("trace.max_users", trace.max_users, "1000", 1, 100000),

    ROW_ENUM("log.level", log.level, "info", level_words),
    ROW_STR("log.file", log.file, ""),
};

/* Pass-through sections: keys are not known here, only stored. */
struct pass {
    const char *section;
    size_t off;                  /* of the struct dd_config_list */
    const char *const *defaults; /* key, value, key, value, ..., NULL */
};

static const char *const kafka_defaults[] = {
    "bootstrap.servers", "127.0.0.1:9092", "group.id", "dedupd", NULL,
};

static const struct pass passes[] = {
    {"kafka", FIELD(kafka, struct dd_config_list), kafka_defaults},
    {"rocksdb", FIELD(rocksdb, struct dd_config_list), NULL},
};

static void *slot_of(struct dd_config *c, size_t off)
{
    return (char *)c + off;
}
static const void *cslot_of(const struct dd_config *c, size_t off)
{
    return (const char *)c + off;
}

static const struct key *find_key(const char *name)
{
    for (size_t i = 0; i < DD_ARRAY_LEN(keys); i++)
        if (strcmp(keys[i].name, name) == 0) return &keys[i];
    return NULL;
}

/* The pass-through section NAME starts with ("kafka.x" -> kafka), or NULL.
 * SECLEN is the length of the section part of NAME. */
static const struct pass *find_pass(const char *name, size_t seclen)
{
    for (size_t i = 0; i < DD_ARRAY_LEN(passes); i++)
        if (strlen(passes[i].section) == seclen && memcmp(passes[i].section, name, seclen) == 0)
            return &passes[i];
    return NULL;
}

static bool known_section(const char *s)
{
    size_t n = strlen(s);
    if (find_pass(s, n)) return true;
    for (size_t i = 0; i < DD_ARRAY_LEN(keys); i++)
        if (strncmp(keys[i].name, s, n) == 0 && keys[i].name[n] == '.') return true;
    return false;
}

/* ---- values ---------------------------------------------------------- */

static int parse_u64(const struct key *k, const char *v, uint64_t *out, char *err, size_t errlen)
{
    if (v[0] == '-' && isdigit((unsigned char)v[1])) {
        dd_set_err(err, errlen, "%s: \"%s\" is negative (this key takes no sign)", k->name, v);
        return DD_ERR_INVALID;
    }
    if (!isdigit((unsigned char)v[0])) {
        dd_set_err(err, errlen, "%s: \"%s\" is not a whole number", k->name, v);
        return DD_ERR_INVALID;
    }
    errno = 0;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end != '\0') {
        dd_set_err(err, errlen, "%s: \"%s\" is not a whole number", k->name, v);
        return DD_ERR_INVALID;
    }
    if (errno == ERANGE || x > k->umax) {
        dd_set_err(err, errlen, "%s: \"%s\" is too large (at most %llu)", k->name, v,
                   (unsigned long long)k->umax);
        return DD_ERR_INVALID;
    }
    if (x < k->umin) {
        dd_set_err(err, errlen, "%s: \"%s\" is too small (at least %llu)", k->name, v,
                   (unsigned long long)k->umin);
        return DD_ERR_INVALID;
    }
    *out = x;
    return DD_OK;
}

static int parse_i64(const struct key *k, const char *v, int64_t *out, char *err, size_t errlen)
{
    const char *d = v[0] == '-' ? v + 1 : v;
    if (!isdigit((unsigned char)d[0])) {
        dd_set_err(err, errlen, "%s: \"%s\" is not a whole number", k->name, v);
        return DD_ERR_INVALID;
    }
    errno = 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (*end != '\0') {
        dd_set_err(err, errlen, "%s: \"%s\" is not a whole number", k->name, v);
        return DD_ERR_INVALID;
    }
    if ((errno == ERANGE && x > 0) || x > k->imax) {
        dd_set_err(err, errlen, "%s: \"%s\" is too large (at most %lld)", k->name, v,
                   (long long)k->imax);
        return DD_ERR_INVALID;
    }
    if (errno == ERANGE || x < k->imin) {
        dd_set_err(err, errlen, "%s: \"%s\" is too small (at least %lld)", k->name, v,
                   (long long)k->imin);
        return DD_ERR_INVALID;
    }
    *out = x;
    return DD_OK;
}

static int check_dbl(const struct key *k, double x, const char *v, char *err, size_t errlen)
{
    if (!(x > k->dmin && x < k->dmax)) {
        dd_set_err(err, errlen, "%s: \"%s\" is out of range (must be above %g and below %g)",
                   k->name, v, k->dmin, k->dmax);
        return DD_ERR_INVALID;
    }
    return DD_OK;
}

static int parse_dbl(const struct key *k, const char *v, double *out, char *err, size_t errlen)
{
    char *end = NULL;
    double x = 0.0;
    errno = 0;
    if (v[0] && !isspace((unsigned char)v[0])) x = strtod(v, &end);
    if (!end || end == v || *end != '\0' || !isfinite(x) || errno == ERANGE) {
        dd_set_err(err, errlen, "%s: \"%s\" is not a number", k->name, v);
        return DD_ERR_INVALID;
    }
    if (check_dbl(k, x, v, err, errlen) != DD_OK) return DD_ERR_INVALID;
    *out = x;
    return DD_OK;
}

static int parse_bool(const struct key *k, const char *v, bool *out, char *err, size_t errlen)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < DD_ARRAY_LEN(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return DD_OK;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return DD_OK;
        }
    }
    dd_set_err(err, errlen, "%s: \"%s\" is not a boolean (true/false, yes/no, on/off, 1/0)",
               k->name, v);
    return DD_ERR_INVALID;
}

/* The table's spelling of V among K's words, or NULL. */
static const char *enum_word(const struct key *k, const char *v)
{
    for (const char *const *w = k->words; *w; w++)
        if (strcasecmp(*w, v) == 0) return *w;
    return NULL;
}

static void enum_error(const struct key *k, const char *v, char *err, size_t errlen)
{
    char list[256];
    size_t n = 0;
    list[0] = '\0';
    for (const char *const *w = k->words; *w && n < sizeof list; w++) {
        int r = snprintf(list + n, sizeof list - n, "%s%s", w == k->words ? "" : ", ", *w);
        if (r < 0) break;
        n += (size_t)r;
    }
    dd_set_err(err, errlen, "%s: \"%s\" is not one of %s", k->name, v, list);
}

static bool has_control(const char *v)
{
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f) return true;
    return false;
}

/* host:port with a non-empty host (an IPv6 address in brackets) and a
 * decimal port 0..65535. */
static int check_addr(const struct key *k, const char *v, char *err, size_t errlen)
{
    if (v[0] == '\0' && k->empty_ok) return DD_OK;
    const char *why = NULL;
    switch (dd_hostport_parse(v, NULL, 0, NULL)) {
    case DD_HOSTPORT_OK: break;
    case DD_HOSTPORT_NOHOST: why = "has no host (expected host:port)"; break;
    case DD_HOSTPORT_V6:
        why = "is not host:port (put an IPv6 address in brackets: [::1]:port)";
        break;
    case DD_HOSTPORT_BADPORT: why = "has no valid port (0..65535)"; break;
    default: why = "is not host:port"; break;
    }
    if (why) {
        dd_set_err(err, errlen, "%s: \"%s\" %s", k->name, v, why);
        return DD_ERR_INVALID;
    }
    return DD_OK;
}

static int set_str(char **slot, const char *v)
{
    char *copy = strdup(v);
    if (!copy) return DD_ERR_NOMEM;
    free(*slot);
    *slot = copy;
    return DD_OK;
}

/* Parse V for K and store it; on any error C is unchanged. */
static int set_key(struct dd_config *c, const struct key *k, const char *v, char *err,
                   size_t errlen)
{
    void *slot = slot_of(c, k->off);
    int r;
    switch (k->kind) {
    case K_STR:
    case K_ADDR:
        if (has_control(v)) {
            dd_set_err(err, errlen, "%s: value contains a control character", k->name);
            return DD_ERR_INVALID;
        }
        if (k->kind == K_ADDR && check_addr(k, v, err, errlen) != DD_OK) return DD_ERR_INVALID;
        r = set_str(slot, v);
        break;
    case K_ENUM: {
        const char *w = enum_word(k, v);
        if (!w) {
            enum_error(k, v, err, errlen);
            return DD_ERR_INVALID;
        }
        r = set_str(slot, w);
        break;
    }
    case K_BOOL: return parse_bool(k, v, slot, err, errlen);
    case K_U32: {
        uint64_t x;
        if ((r = parse_u64(k, v, &x, err, errlen)) == DD_OK) *(uint32_t *)slot = (uint32_t)x;
        return r;
    }
    case K_U64: return parse_u64(k, v, slot, err, errlen);
    case K_I64: return parse_i64(k, v, slot, err, errlen);
    case K_DBL: return parse_dbl(k, v, slot, err, errlen);
    default:
        dd_set_err(err, errlen, "%s: internal error: unknown key type", k->name);
        return DD_ERR_INVALID;
    }
    if (r == DD_ERR_NOMEM) dd_set_err(err, errlen, "%s: out of memory", k->name);
    return r;
}

/* ---- pass-through lists --------------------------------------------- */

static bool pass_key_ok(const char *key)
{
    if (!key[0]) return false;
    for (const char *p = key; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') return false;
    return true;
}

static int list_set(struct dd_config_list *l, const char *key, const char *value)
{
    for (size_t i = 0; i < l->len; i++)
        if (strcmp(l->items[i].key, key) == 0) return set_str(&l->items[i].value, value);
    if (l->len == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        if (cap > SIZE_MAX / sizeof *l->items) return DD_ERR_NOMEM;
        struct dd_config_kv *items = realloc(l->items, cap * sizeof *items);
        if (!items) return DD_ERR_NOMEM;
        l->items = items;
        l->cap = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return DD_ERR_NOMEM;
    }
    l->items[l->len].key = k;
    l->items[l->len].value = v;
    l->len++;
    return DD_OK;
}

static void list_free(struct dd_config_list *l)
{
    for (size_t i = 0; i < l->len; i++) {
        free(l->items[i].key);
        free(l->items[i].value);
    }
    free(l->items);
    l->items = NULL;
    l->len = l->cap = 0;
}

const char *dd_config_list_get(const struct dd_config_list *l, const char *key)
{
    for (size_t i = 0; i < l->len; i++)
        if (strcmp(l->items[i].key, key) == 0) return l->items[i].value;
    return NULL;
}

static int set_pass(struct dd_config *c, const struct pass *p, const char *name, const char *key,
                    const char *value, char *err, size_t errlen)
{
    if (!pass_key_ok(key)) {
        dd_set_err(err, errlen, "bad key \"%s\" (letters, digits, '.', '_' and '-' only)", name);
        return DD_ERR_INVALID;
    }
    if (has_control(value)) {
        dd_set_err(err, errlen, "%s: value contains a control character", name);
        return DD_ERR_INVALID;
    }
    int r = list_set(slot_of(c, p->off), key, value);
    if (r != DD_OK) dd_set_err(err, errlen, "%s: out of memory", name);
    return r;
}

/* ---- the public functions ------------------------------------------- */

void dd_config_free(struct dd_config *c)
{
    if (!c) return;
    for (size_t i = 0; i < DD_ARRAY_LEN(keys); i++) {
        enum kind t = keys[i].kind;
        if (t == K_STR || t == K_ADDR || t == K_ENUM) free(*(char **)slot_of(c, keys[i].off));
    }
    for (size_t i = 0; i < DD_ARRAY_LEN(passes); i++) list_free(slot_of(c, passes[i].off));
    memset(c, 0, sizeof *c);
}

int dd_config_init(struct dd_config *c)
{
    char err[256];
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < DD_ARRAY_LEN(keys); i++) {
        int r = set_key(c, &keys[i], keys[i].def, err, sizeof err);
        if (r == DD_ERR_NOMEM) goto nomem;
        if (r != DD_OK) {
            /* A default that does not parse is a bug in the table above,
             * caught by the first test run; there is nothing to recover. */
            fprintf(stderr, "dedupd: bad built-in default: %s\n", err);
            abort();
        }
    }
    for (size_t i = 0; i < DD_ARRAY_LEN(passes); i++) {
        const char *const *d = passes[i].defaults;
        for (; d && d[0]; d += 2)
            if (list_set(slot_of(c, passes[i].off), d[0], d[1]) != DD_OK) goto nomem;
    }
    return DD_OK;
nomem:
    dd_config_free(c);
    return DD_ERR_NOMEM;
}

int dd_config_set(struct dd_config *c, const char *name, const char *value, char *err,
                  size_t errlen)
{
    const struct key *k = find_key(name);
    if (k) return set_key(c, k, value, err, errlen);
    const char *dot = strchr(name, '.');
    const struct pass *p = dot ? find_pass(name, (size_t)(dot - name)) : NULL;
    if (p) return set_pass(c, p, name, dot + 1, value, err, errlen);
    dd_set_err(err, errlen, "unknown key \"%s\"", name);
    return DD_ERR_INVALID;
}

/* ---- the INI reader --------------------------------------------------- */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

/* Turn the text after '=' into the value, in place. Returns NULL (with the
 * reason in *why) on a malformed value. */
static char *parse_value(char *s, const char **why)
{
    while (isspace((unsigned char)*s)) s++;
    if (*s == '"') {
        char *out = s, *in = s + 1;
        for (;; in++) {
            if (*in == '\0') {
                *why = "unterminated quoted value";
                return NULL;
            }
            if (*in == '"') break;
            if (*in == '\\') {
                in++;
                if (*in != '"' && *in != '\\') {
                    *why = "unknown escape in quoted value (only \\\" and \\\\)";
                    return NULL;
                }
            }
            *out++ = *in;
        }
        *out = '\0';
        in = trim(in + 1);
        if (*in != '\0' && *in != '#' && *in != ';') {
            *why = "text after the closing quote";
            return NULL;
        }
        return s;
    }
    for (char *p = s; *p; p++) {
        if ((*p == '#' || *p == ';') && (p == s || isspace((unsigned char)p[-1]))) {
            *p = '\0';
            break;
        }
    }
    return trim(s);
}

int dd_config_load_file(struct dd_config *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        dd_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return DD_ERR_IO;
    }
    char *line = NULL, *section = NULL, *name = NULL;
    size_t cap = 0, namecap = 0;
    unsigned long lineno = 0;
    int rc = DD_OK;
    char msg[512];

    for (;;) {
        errno = 0;
        ssize_t n = getline(&line, &cap, f);
        if (n < 0) {
            if (ferror(f)) {
                dd_set_err(err, errlen, "%s:%lu: read error: %s", path, lineno + 1,
                           strerror(errno ? errno : EIO));
                rc = errno == ENOMEM ? DD_ERR_NOMEM : DD_ERR_IO;
            }
            break;
        }
        lineno++;
        if (memchr(line, '\0', (size_t)n)) {
            dd_set_err(err, errlen, "%s:%lu: NUL byte in line", path, lineno);
            rc = DD_ERR_INVALID;
            break;
        }
        char *s = trim(line);
        if (lineno == 1 && (unsigned char)s[0] == 0xef && (unsigned char)s[1] == 0xbb &&
            (unsigned char)s[2] == 0xbf)
            s = trim(s + 3); /* a UTF-8 byte order mark from a Windows editor */
        if (*s == '\0' || *s == '#' || *s == ';') continue;

        if (*s == '[') {
            char *close = strchr(s, ']');
            char *rest = close ? trim(close + 1) : NULL;
            if (!close || (*rest && *rest != '#' && *rest != ';')) {
                dd_set_err(err, errlen, "%s:%lu: malformed section header", path, lineno);
                rc = DD_ERR_INVALID;
                break;
            }
            *close = '\0';
            char *sec = trim(s + 1);
            if (!known_section(sec)) {
                dd_set_err(err, errlen, "%s:%lu: unknown section [%s]", path, lineno, sec);
                rc = DD_ERR_INVALID;
                break;
            }
            char *copy = strdup(sec);
            if (!copy) {
                dd_set_err(err, errlen, "%s:%lu: out of memory", path, lineno);
                rc = DD_ERR_NOMEM;
                break;
            }
            free(section);
            section = copy;
            continue;
        }

        char *eq = strchr(s, '=');
        if (!eq) {
            dd_set_err(err, errlen, "%s:%lu: expected key = value or [section]", path, lineno);
            rc = DD_ERR_INVALID;
            break;
        }
        *eq = '\0';
        char *key = trim(s);
        if (!*key) {
            dd_set_err(err, errlen, "%s:%lu: missing key before '='", path, lineno);
            rc = DD_ERR_INVALID;
            break;
        }
        if (!section) {
            dd_set_err(err, errlen, "%s:%lu: key \"%s\" before any [section]", path, lineno, key);
            rc = DD_ERR_INVALID;
            break;
        }
        const char *why = NULL;
        char *value = parse_value(eq + 1, &why);
        if (!value) {
            dd_set_err(err, errlen, "%s:%lu: %s.%s: %s", path, lineno, section, key, why);
            rc = DD_ERR_INVALID;
            break;
        }
        size_t need = strlen(section) + 1 + strlen(key) + 1;
        if (need > namecap) {
            char *nn = realloc(name, need);
            if (!nn) {
                dd_set_err(err, errlen, "%s:%lu: out of memory", path, lineno);
                rc = DD_ERR_NOMEM;
                break;
            }
            name = nn;
            namecap = need;
        }
        snprintf(name, need, "%s.%s", section, key);
        int r = dd_config_set(c, name, value, msg, sizeof msg);
        if (r != DD_OK) {
            dd_set_err(err, errlen, "%s:%lu: %s", path, lineno, msg);
            rc = r;
            break;
        }
    }
    free(line);
    free(section);
    free(name);
    fclose(f);
    return rc;
}

/* ---- validation --------------------------------------------------------- */

/* Re-check one row's bounds on the value now in C. */
static int check_row(const struct dd_config *c, const struct key *k, char *err, size_t errlen)
{
    const void *slot = cslot_of(c, k->off);
    char num[64];
    switch (k->kind) {
    case K_STR:
    case K_ADDR:
    case K_ENUM: {
        const char *v = *(char *const *)slot;
        if (!v) {
            dd_set_err(err, errlen, "%s: not set", k->name);
            return DD_ERR_INVALID;
        }
        if (has_control(v)) {
            dd_set_err(err, errlen, "%s: value contains a control character", k->name);
            return DD_ERR_INVALID;
        }
        if (k->kind == K_ADDR) return check_addr(k, v, err, errlen);
        if (k->kind == K_ENUM && !enum_word(k, v)) {
            enum_error(k, v, err, errlen);
            return DD_ERR_INVALID;
        }
        return DD_OK;
    }
    case K_BOOL: return DD_OK;
    case K_U32:
    case K_U64: {
        uint64_t x = k->kind == K_U32 ? *(const uint32_t *)slot : *(const uint64_t *)slot;
        snprintf(num, sizeof num, "%llu", (unsigned long long)x);
        uint64_t ignored;
        return parse_u64(k, num, &ignored, err, errlen);
    }
    case K_I64: {
        snprintf(num, sizeof num, "%lld", (long long)*(const int64_t *)slot);
        int64_t ignored;
        return parse_i64(k, num, &ignored, err, errlen);
    }
    case K_DBL: {
        double x = *(const double *)slot;
        snprintf(num, sizeof num, "%g", x);
        if (!isfinite(x)) {
            dd_set_err(err, errlen, "%s: \"%s\" is not a number", k->name, num);
            return DD_ERR_INVALID;
        }
        return check_dbl(k, x, num, err, errlen);
    }
    }
    dd_set_err(err, errlen, "%s: internal error: unknown key type", k->name);
    return DD_ERR_INVALID;
}

/* Port of a host:port that check_addr accepted. */
static unsigned long addr_port(const char *v)
{
    uint16_t port = 0;
    dd_hostport_parse(v, NULL, 0, &port);
    return port;
}

/* Whether allow list V is "*" (blanks around it ignored, as auth.c reads it). */
static bool list_is_any(const char *v)
{
    while (*v == ' ' || *v == '\t') v++;
    if (*v++ != '*') return false;
    while (*v == ' ' || *v == '\t') v++;
    return *v == '\0';
}

struct dd_trace_conf dd_config_trace_conf(const struct dd_config *c, char *pathbuf, size_t pathlen)
{
    struct dd_trace_conf tc = c->trace;
    tc.min_free_mb = c->history.min_free_mb;
    tc.max_id_bytes = c->rpc.max_id_bytes;
    if (c->trace.path && c->trace.path[0]) return tc;
    /* history.path's directory, without the trailing slashes of either. */
    const char *h = c->history.path ? c->history.path : "";
    size_t n = strlen(h);
    while (n > 1 && h[n - 1] == '/') n--;
    while (n > 0 && h[n - 1] != '/') n--;
    while (n > 1 && h[n - 1] == '/') n--;
    int w = n == 0
                ? snprintf(pathbuf, pathlen, "trace")
                : snprintf(pathbuf, pathlen, "%.*s%strace", (int)n, h, h[n - 1] == '/' ? "" : "/");
    if (w < 0 || (size_t)w >= pathlen) pathbuf[0] = '\0';
    tc.path = pathbuf;
    return tc;
}

int dd_config_validate(const struct dd_config *c, char *err, size_t errlen)
{
    for (size_t i = 0; i < DD_ARRAY_LEN(keys); i++)
        if (check_row(c, &keys[i], err, errlen) != DD_OK) return DD_ERR_INVALID;

    if (c->history.segment_days > c->history.retention_days) {
        dd_set_err(err, errlen, "history.segment_days: %u is more than history.retention_days (%u)",
                   c->history.segment_days, c->history.retention_days);
        return DD_ERR_INVALID;
    }
    if (dd_history_check_day_scenes(c->history.day_scenes, err, errlen) != DD_OK)
        return DD_ERR_INVALID;
    /* TLS, the allow lists and the plaintext rule: rpc.h's own check. */
    if (dd_rpc_conf_check(&c->rpc, err, errlen) != DD_OK) return DD_ERR_INVALID;
    if (dd_log_level_parse(c->log.level) < 0) {
        dd_set_err(err, errlen, "log.level: \"%s\" is not a log level", c->log.level);
        return DD_ERR_INVALID;
    }
    if (c->admin.listen[0] && strcmp(c->admin.listen, c->rpc.listen) == 0 &&
        addr_port(c->admin.listen) != 0) {
        dd_set_err(err, errlen, "admin.listen: \"%s\" is also rpc.listen", c->admin.listen);
        return DD_ERR_INVALID;
    }
    /* The map, this node's place in it and the partitioner: cluster.h. */
    if (dd_cluster_conf_check(&c->cluster, NULL, NULL, err, errlen) != DD_OK) return DD_ERR_INVALID;
    if (dd_cluster_forward_cap_check(c->cluster.max_forward_inflight, c->cluster.shards,
                                     c->rpc.threads, c->rpc.prepost, err, errlen) != DD_OK)
        return DD_ERR_INVALID;
    /* recent.sentinels and the master names per shard: recent.h. */
    if (dd_recent_conf_check(&c->recent, c->cluster.shards, err, errlen) != DD_OK)
        return DD_ERR_INVALID;
    if (c->recent.sentinels[0] && c->cluster.redis[0]) {
        dd_set_err(err, errlen,
                   "cluster.redis: set while recent.sentinels is (each shard's "
                   "master then comes from Sentinel: recent.master_name)");
        return DD_ERR_INVALID;
    }
    /* trace.users against rpc.max_id_bytes and trace.max_users: trace.h. */
    char trace_path[4096];
    struct dd_trace_conf tc = dd_config_trace_conf(c, trace_path, sizeof trace_path);
    if (dd_trace_conf_check(&tc, c->rpc.max_id_bytes, err, errlen) != DD_OK) return DD_ERR_INVALID;
    if (strcmp(tc.path, c->history.path) == 0) {
        dd_set_err(err, errlen,
                   "trace.path: \"%s\" is also history.path (the trace is a "
                   "database of its own%s)",
                   tc.path, c->trace.path[0] ? "" : "; set trace.path");
        return DD_ERR_INVALID;
    }
    if (dd_cluster_enabled(&c->cluster) && c->rpc.auth.tls.client_ca[0] &&
        list_is_any(c->rpc.auth.allow_peer)) {
        dd_set_err(err, errlen,
                   "rpc.allow_peer: \"*\" in a cluster under mutual TLS lets any client "
                   "holding a certificate rpc.tls_client_ca signed (every reader and writer) "
                   "call the Cluster service and copy every user's history: name the nodes' "
                   "certificate identities (they call each other with rpc.tls_cert)");
        return DD_ERR_INVALID;
    }
    /* Forget markers from the topic are applied only when signed
     * (marker.h); a cluster produces them for ForgetUser, so it needs the
     * key. The file itself is read by main (dedupd -t and at start). */
    if (dd_cluster_enabled(&c->cluster) && !c->cluster.forget_key_file[0]) {
        dd_set_err(err, errlen,
                   "cluster.forget_key_file: must be set in a cluster (the secret "
                   "that signs forget markers; the same file on every node)");
        return DD_ERR_INVALID;
    }
    if (dd_cluster_enabled(&c->cluster) && !c->ingest.enabled) {
        dd_set_err(err, errlen,
                   "cluster.shards: a cluster needs ingest.enabled = true (a node "
                   "owns its users by the plays topic's partitions)");
        return DD_ERR_INVALID;
    }
    if (c->ingest.enabled) {
        if (!c->ingest.topic[0]) {
            dd_set_err(err, errlen, "ingest.topic: must not be empty while ingest.enabled is true");
            return DD_ERR_INVALID;
        }
        if (strcmp(c->ingest.dead_letter_topic, c->ingest.topic) == 0) {
            dd_set_err(err, errlen,
                       "ingest.dead_letter_topic: must differ from ingest.topic (\"%s\")",
                       c->ingest.topic);
            return DD_ERR_INVALID;
        }
        static const char *const needed[] = {"bootstrap.servers", "group.id"};
        for (size_t i = 0; i < DD_ARRAY_LEN(needed); i++) {
            const char *v = dd_config_list_get(&c->kafka, needed[i]);
            if (!v || !v[0]) {
                dd_set_err(err, errlen, "kafka.%s: must be set while ingest.enabled is true",
                           needed[i]);
                return DD_ERR_INVALID;
            }
        }
    }
    return DD_OK;
}

/* ---- the writer ----------------------------------------------------------- */

static int write_quoted(FILE *out, const char *v)
{
    if (fputc('"', out) == EOF) return -1;
    for (; *v; v++) {
        if ((*v == '"' || *v == '\\') && fputc('\\', out) == EOF) return -1;
        if (fputc(*v, out) == EOF) return -1;
    }
    return fputc('"', out) == EOF ? -1 : 0;
}

/* The shortest text strtod reads back as exactly X. */
static void format_double(double x, char *buf, size_t len)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

static int write_row(const struct dd_config *c, const struct key *k, FILE *out)
{
    const void *slot = cslot_of(c, k->off);
    const char *key = strchr(k->name, '.') + 1;
    char num[64];
    if (fprintf(out, "%s = ", key) < 0) return -1;
    switch (k->kind) {
    case K_STR:
    case K_ADDR:
    case K_ENUM:
        if (write_quoted(out, *(char *const *)slot) < 0) return -1;
        break;
    case K_BOOL:
        if (fputs(*(const bool *)slot ? "true" : "false", out) == EOF) return -1;
        break;
    case K_U32:
        if (fprintf(out, "%u", (unsigned)*(const uint32_t *)slot) < 0) return -1;
        break;
    case K_U64:
        if (fprintf(out, "%llu", (unsigned long long)*(const uint64_t *)slot) < 0) return -1;
        break;
    case K_I64:
        if (fprintf(out, "%lld", (long long)*(const int64_t *)slot) < 0) return -1;
        break;
    case K_DBL:
        format_double(*(const double *)slot, num, sizeof num);
        if (fputs(num, out) == EOF) return -1;
        break;
    }
    return fputc('\n', out) == EOF ? -1 : 0;
}

int dd_config_write(const struct dd_config *c, FILE *out)
{
    /* Sections in order of first appearance in the table, each with all of
     * its rows, wherever a later addition put them. */
    for (size_t i = 0; i < DD_ARRAY_LEN(keys); i++) {
        size_t seclen = (size_t)(strchr(keys[i].name, '.') - keys[i].name);
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strncmp(keys[j].name, keys[i].name, seclen + 1) == 0;
        if (seen) continue;
        if (fprintf(out, "%s[%.*s]\n", i ? "\n" : "", (int)seclen, keys[i].name) < 0)
            return DD_ERR_IO;
        for (size_t j = i; j < DD_ARRAY_LEN(keys); j++)
            if (strncmp(keys[j].name, keys[i].name, seclen + 1) == 0 &&
                write_row(c, &keys[j], out) < 0)
                return DD_ERR_IO;
    }
    for (size_t i = 0; i < DD_ARRAY_LEN(passes); i++) {
        const struct dd_config_list *l = cslot_of(c, passes[i].off);
        if (fprintf(out, "\n[%s]\n", passes[i].section) < 0) return DD_ERR_IO;
        for (size_t j = 0; j < l->len; j++) {
            if (fprintf(out, "%s = ", l->items[j].key) < 0 ||
                write_quoted(out, l->items[j].value) < 0 || fputc('\n', out) == EOF)
                return DD_ERR_IO;
        }
    }
    return fflush(out) == 0 && !ferror(out) ? DD_OK : DD_ERR_IO;
}

struct dd_filter_conf dd_config_filter_conf(const struct dd_config *c)
{
    return (struct dd_filter_conf){c->rpc.max_candidates, c->rpc.max_id_bytes, c->recent.size};
}

struct dd_record_conf dd_config_record_conf(const struct dd_config *c)
{
    return (struct dd_record_conf){c->rpc.max_candidates, c->rpc.max_id_bytes};
}

struct dd_peer_conf dd_config_peer_conf(const struct dd_config *c)
{
    return (struct dd_peer_conf){&c->rpc.auth.tls, c->cluster.tls_ca, c->cluster.tls_server_name,
                                 c->rpc.max_candidates, c->rpc.max_id_bytes};
}
