/* SPDX-License-Identifier: Apache-2.0
 *
 * test_config.c - the configuration as an operator meets it: the defaults,
 * INI files (comments, quotes, long lines, duplicates), -o overrides, every
 * kind of error with the key (and file line) named in the message,
 * validation across keys, the pass-through sections, dd_config_write read
 * back to the same configuration, and conf/dedupd.conf documenting exactly
 * the defaults (found through DD_SOURCE_ROOT, set by meson).
 */
#include "config.h"
#include "dd.h"
#include "testlib.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <unistd.h>

/* dd_config_write into a malloc'd string; NULL if the write failed. */
static char *dump(const struct dd_config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    REQUIRE(f != NULL);
    int r = dd_config_write(c, f);
    fclose(f);
    if (r != DD_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* A temporary file holding LEN bytes of TEXT; the caller unlinks and frees
 * the path. */
static char *write_tmp(const char *text, size_t len)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    size_t n = strlen(dir) + 32;
    char *path = malloc(n);
    REQUIRE(path != NULL);
    snprintf(path, n, "%s/dd-config-XXXXXX", dir);
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    FILE *f = fdopen(fd, "w");
    REQUIRE(f != NULL);
    REQUIRE(fwrite(text, 1, len, f) == len);
    REQUIRE(fclose(f) == 0);
    return path;
}

/* Load LEN bytes of TEXT as a file over C; returns the result, message in
 * err. */
static int load_bytes(struct dd_config *c, const char *text, size_t len, char *err,
                      size_t errlen)
{
    char *path = write_tmp(text, len);
    int r = dd_config_load_file(c, path, err, errlen);
    unlink(path);
    free(path);
    return r;
}

static int load_text(struct dd_config *c, const char *text, char *err, size_t errlen)
{
    return load_bytes(c, text, strlen(text), err, errlen);
}

/* dd_config_set must fail with DD_ERR_INVALID, a message holding KEY and
 * WHAT, and leave the configuration as it was. */
static void expect_set_error(const char *key, const char *value, const char *what, int line)
{
    struct dd_config c;
    char err[512] = "";
    REQUIRE(dd_config_init(&c) == DD_OK);
    char *before = dump(&c);
    int r = dd_config_set(&c, key, value, err, sizeof err);
    CHECK_MSG(r == DD_ERR_INVALID, "line %d: %s=\"%s\" gave %d", line, key, value, r);
    CHECK_MSG(strstr(err, key) != NULL, "line %d: message \"%s\" does not name %s", line, err,
              key);
    CHECK_MSG(strstr(err, what) != NULL, "line %d: message \"%s\" does not say \"%s\"", line,
              err, what);
    char *after = dump(&c);
    CHECK_MSG(before && after && strcmp(before, after) == 0, "line %d: %s changed on error",
              line, key);
    free(before);
    free(after);
    dd_config_free(&c);
}
#define SET_ERROR(k, v, what) expect_set_error(k, v, what, __LINE__)

/* Validation of C (modified by the caller) must fail naming KEY. */
static void expect_invalid(const struct dd_config *c, const char *key, int line)
{
    char err[512] = "";
    int r = dd_config_validate(c, err, sizeof err);
    CHECK_MSG(r == DD_ERR_INVALID, "line %d: validate gave %d, expected an error on %s", line,
              r, key);
    CHECK_MSG(strstr(err, key) != NULL, "line %d: message \"%s\" does not name %s", line, err,
              key);
}
#define INVALID(c, k) expect_invalid(c, k, __LINE__)

static void set_ok(struct dd_config *c, const char *key, const char *value)
{
    char err[512] = "";
    int r = dd_config_set(c, key, value, err, sizeof err);
    CHECK_MSG(r == DD_OK, "%s=\"%s\": %s", key, value, err);
}

static void replace_str(char **slot, const char *v)
{
    free(*slot);
    *slot = strdup(v);
    REQUIRE(*slot != NULL);
}

static void test_defaults(void)
{
    struct dd_config c;
    char err[512] = "";
    REQUIRE(dd_config_init(&c) == DD_OK);
    CHECK_STR(c.history.path, "./data/history");
    CHECK_EQ_INT(c.history.segment_days, 30);
    CHECK_EQ_INT(c.history.retention_days, 90);
    CHECK(c.history.fp_rate == 0.01);
    CHECK_EQ_INT(c.history.max_successive_merges, 0);
    CHECK_EQ_INT(c.history.block_cache_mb, 256);
    CHECK(c.history.sync == true);
    CHECK_EQ_INT(c.history.max_future_ms, 3600000);
    CHECK(c.ingest.enabled == true);
    CHECK_STR(c.ingest.topic, "plays");
    CHECK_STR(c.ingest.format, "json");
    CHECK_STR(c.ingest.dead_letter_topic, "");
    CHECK_STR(c.ingest.durable, "flush");
    CHECK(c.ingest.wal == false);
    CHECK_EQ_INT(c.ingest.durable_interval_ms, 10000);
    CHECK_EQ_INT(c.ingest.max_id_bytes, 256);
    CHECK_EQ_INT(c.window.flush_ms, 500);
    CHECK_EQ_INT(c.window.max_bytes, 67108864);
    CHECK_STR(c.recent.redis, "127.0.0.1:6379");
    CHECK_STR(c.recent.password, "");
    CHECK_EQ_INT(c.recent.size, 100);
    CHECK_EQ_INT(c.recent.ttl_s, 604800);
    CHECK_EQ_INT(c.recent.timeout_ms, 20);
    CHECK_STR(c.rpc.listen, "127.0.0.1:50051");
    CHECK_EQ_INT(c.rpc.threads, 2);
    CHECK_EQ_INT(c.rpc.prepost, 8);
    CHECK_EQ_INT(c.rpc.max_candidates, 20000);
    CHECK_EQ_INT(c.rpc.max_id_bytes, 256);
    CHECK_EQ_INT(c.rpc.max_message_bytes, 16777216);
    CHECK_STR(c.rpc.auth.tls.cert, "");
    CHECK_STR(c.rpc.auth.tls.key, "");
    CHECK_EQ_INT(c.rpc.shutdown_grace_ms, 5000);
    CHECK_STR(c.rpc.poller, "poll");
    CHECK_EQ_INT(c.rpc.spin_us, 500);
    CHECK_EQ_INT(c.rpc.send_timeout_ms, 2000);
    CHECK_EQ_INT(c.rpc.max_streams_per_connection, 100);
    CHECK_EQ_INT(c.rpc.max_buffer_mb, 256);
    CHECK_EQ_INT(c.rpc.max_connection_idle_ms, 300000);
    CHECK_EQ_INT(c.rpc.max_connection_age_ms, 0);
    CHECK_EQ_INT(c.rpc.max_connection_age_grace_ms, 30000);
    CHECK_EQ_INT(c.rpc.keepalive_min_ms, 300000);
    CHECK_STR(c.rpc.compression, "off");
    CHECK_STR(c.admin.listen, "127.0.0.1:9464");
    CHECK_EQ_INT(c.admin.threads, 2);
    CHECK_EQ_INT(c.admin.max_connections, 64);
    CHECK_EQ_INT(c.admin.max_connections_per_ip, 8);
    CHECK_EQ_INT(c.admin.request_timeout_ms, 10000);
    CHECK_STR(c.log.level, "info");
    CHECK_STR(c.log.file, "");
    CHECK_EQ_INT(c.kafka.len, 2);
    CHECK_STR(dd_config_list_get(&c.kafka, "bootstrap.servers"), "127.0.0.1:9092");
    CHECK_STR(dd_config_list_get(&c.kafka, "group.id"), "dedupd");
    CHECK(dd_config_list_get(&c.kafka, "auto.offset.reset") == NULL);
    CHECK_EQ_INT(c.rocksdb.len, 0);
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "defaults invalid: %s", err);

    /* free leaves a struct that can be freed again or re-initialised */
    dd_config_free(&c);
    dd_config_free(&c);
    dd_config_free(NULL);
    REQUIRE(dd_config_init(&c) == DD_OK);
    CHECK_STR(c.history.path, "./data/history");
    dd_config_free(&c);
}

static void test_set(void)
{
    struct dd_config c;
    REQUIRE(dd_config_init(&c) == DD_OK);
    set_ok(&c, "history.path", "/var/lib/dedupd");
    CHECK_STR(c.history.path, "/var/lib/dedupd");
    set_ok(&c, "history.segment_days", "7");
    CHECK_EQ_INT(c.history.segment_days, 7);
    set_ok(&c, "history.segment_days", "007");
    CHECK_EQ_INT(c.history.segment_days, 7);
    set_ok(&c, "history.fp_rate", "0.001");
    CHECK(c.history.fp_rate == 0.001);
    set_ok(&c, "history.fp_rate", "1e-4");
    CHECK(c.history.fp_rate == 1e-4);
    set_ok(&c, "history.block_cache_mb", "0");
    CHECK_EQ_INT(c.history.block_cache_mb, 0);
    set_ok(&c, "window.max_bytes", "18446744073709551615");
    CHECK(c.window.max_bytes == UINT64_MAX);
    set_ok(&c, "history.max_future_ms", "315360000000"); /* 10 years, the most */
    CHECK(c.history.max_future_ms == INT64_C(315360000000));
    set_ok(&c, "history.max_future_ms", "0");
    CHECK_EQ_INT(c.history.max_future_ms, 0);
    set_ok(&c, "rpc.max_candidates", "4294967295");
    CHECK(c.rpc.max_candidates == UINT32_MAX);

    static const char *const yes[] = {"true", "yes", "on", "1", "TRUE", "Yes"};
    static const char *const no[] = {"false", "no", "off", "0", "False", "OFF"};
    for (size_t i = 0; i < DD_ARRAY_LEN(yes); i++) {
        set_ok(&c, "history.sync", no[i]);
        CHECK_MSG(c.history.sync == false, "%s", no[i]);
        set_ok(&c, "history.sync", yes[i]);
        CHECK_MSG(c.history.sync == true, "%s", yes[i]);
    }
    set_ok(&c, "ingest.format", "protobuf");
    CHECK_STR(c.ingest.format, "protobuf");
    set_ok(&c, "ingest.format", "JSON"); /* stored as the canonical word */
    CHECK_STR(c.ingest.format, "json");
    set_ok(&c, "ingest.durable", "wal");
    CHECK_STR(c.ingest.durable, "wal");
    set_ok(&c, "ingest.durable", "window");
    CHECK_STR(c.ingest.durable, "window");
    set_ok(&c, "log.level", "debug");
    CHECK_STR(c.log.level, "debug");
    set_ok(&c, "rpc.poller", "epoll1");
    CHECK_STR(c.rpc.poller, "epoll1");

    set_ok(&c, "rpc.listen", "[::1]:0");
    CHECK_STR(c.rpc.listen, "[::1]:0");
    set_ok(&c, "rpc.listen", "0.0.0.0:65535");
    set_ok(&c, "recent.redis", "redis.internal:6380");
    CHECK_STR(c.recent.redis, "redis.internal:6380");
    set_ok(&c, "admin.listen", ""); /* off */
    CHECK_STR(c.admin.listen, "");
    set_ok(&c, "recent.password", "p#ss; \"w\\rd\"");
    CHECK_STR(c.recent.password, "p#ss; \"w\\rd\"");
    set_ok(&c, "log.file", "\t");
    CHECK_STR(c.log.file, "\t");
    dd_config_free(&c);
}

static void test_set_errors(void)
{
    char err[512] = "";
    struct dd_config c;
    REQUIRE(dd_config_init(&c) == DD_OK);
    CHECK_EQ_INT(dd_config_set(&c, "history.segment_days", "abc", err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_STR(err, "history.segment_days: \"abc\" is not a whole number");
    CHECK_EQ_INT(dd_config_set(&c, "history.segmnet_days", "3", err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_STR(err, "unknown key \"history.segmnet_days\"");
    /* a NULL or tiny buffer is not written past */
    CHECK_EQ_INT(dd_config_set(&c, "history.bogus", "1", NULL, 0), DD_ERR_INVALID);
    char tiny[4] = "xyz";
    CHECK_EQ_INT(dd_config_set(&c, "history.bogus", "1", tiny, 1), DD_ERR_INVALID);
    CHECK_EQ_INT(tiny[0], '\0');
    CHECK_EQ_INT(tiny[1], 'y');
    dd_config_free(&c);

    SET_ERROR("history.bogus", "1", "unknown key");
    SET_ERROR("bogus", "1", "unknown key");
    SET_ERROR("nosection.key", "1", "unknown key");
    SET_ERROR("history", "1", "unknown key");
    SET_ERROR("", "1", "unknown key");

    /* whole numbers */
    SET_ERROR("history.segment_days", "", "is not a whole number");
    SET_ERROR("history.segment_days", "12x", "is not a whole number");
    SET_ERROR("history.segment_days", "1.5", "is not a whole number");
    SET_ERROR("history.segment_days", " 12", "is not a whole number");
    SET_ERROR("history.segment_days", "+12", "is not a whole number");
    SET_ERROR("history.segment_days", "-1", "is negative");
    SET_ERROR("window.max_bytes", "-0", "is negative");
    SET_ERROR("history.segment_days", "-x", "is not a whole number");
    SET_ERROR("history.segment_days", "0x10", "is not a whole number");
    SET_ERROR("history.segment_days", "64k", "is not a whole number");
    SET_ERROR("history.segment_days", "0", "too small");
    SET_ERROR("rpc.threads", "0", "too small");
    SET_ERROR("recent.size", "0", "too small");
    SET_ERROR("window.flush_ms", "0", "too small");
    SET_ERROR("rpc.max_candidates", "4294967296", "too large");
    /* A user id is stored in history keys with a u16 length (history.h):
     * longer ones could only fail there, reading as a store failure. */
    SET_ERROR("rpc.max_id_bytes", "65536", "too large (at most 65535)");
    SET_ERROR("ingest.max_id_bytes", "65536", "too large (at most 65535)");
    SET_ERROR("rpc.max_id_bytes", "4294967295", "too large");
    SET_ERROR("rpc.max_message_bytes", "2147483648", "too large");
    SET_ERROR("window.max_bytes", "18446744073709551616", "too large");
    SET_ERROR("window.max_bytes", "99999999999999999999999999", "too large");
    SET_ERROR("history.block_cache_mb", "18446744073709551615", "too large");
    SET_ERROR("history.max_future_ms", "315360000001", "too large");
    SET_ERROR("history.max_future_ms", "9223372036854775807", "too large");
    SET_ERROR("history.max_future_ms", "9223372036854775808", "too large");
    SET_ERROR("history.max_future_ms", "-1", "too small");
    SET_ERROR("history.max_future_ms", "-99999999999999999999", "too small");
    SET_ERROR("history.max_future_ms", "--1", "is not a whole number");
    SET_ERROR("history.max_future_ms", "5 ms", "is not a whole number");

    /* fractions */
    SET_ERROR("history.fp_rate", "abc", "is not a number");
    SET_ERROR("history.fp_rate", "", "is not a number");
    SET_ERROR("history.fp_rate", "0.01x", "is not a number");
    SET_ERROR("history.fp_rate", "nan", "is not a number");
    SET_ERROR("history.fp_rate", "inf", "is not a number");
    SET_ERROR("history.fp_rate", "1e999", "is not a number");
    SET_ERROR("history.fp_rate", "0", "out of range");
    SET_ERROR("history.fp_rate", "1", "out of range");
    SET_ERROR("history.fp_rate", "-0.5", "out of range");

    /* booleans, enums */
    SET_ERROR("history.sync", "maybe", "is not a boolean");
    SET_ERROR("history.sync", "", "is not a boolean");
    SET_ERROR("history.sync", "2", "is not a boolean");
    SET_ERROR("ingest.format", "xml", "is not one of json, protobuf");
    SET_ERROR("ingest.durable", "sync", "is not one of flush, wal, window");
    SET_ERROR("ingest.format", "", "is not one of");
    SET_ERROR("log.level", "loud", "is not one of debug, info, warn, error");
    SET_ERROR("rpc.poller", "epollex", "is not one of poll, epoll1");

    /* host:port */
    SET_ERROR("rpc.listen", "localhost", "is not host:port");
    SET_ERROR("rpc.listen", "", "is not host:port");
    SET_ERROR("rpc.listen", ":50051", "has no host");
    SET_ERROR("rpc.listen", "localhost:", "has no valid port");
    SET_ERROR("rpc.listen", "localhost:70000", "has no valid port");
    SET_ERROR("rpc.listen", "localhost:5005x", "has no valid port");
    SET_ERROR("rpc.listen", "localhost:-1", "has no valid port");
    SET_ERROR("rpc.listen", "localhost:0000080000", "has no valid port");
    SET_ERROR("rpc.listen", "::1:80", "brackets");
    SET_ERROR("recent.redis", "redis", "is not host:port");
    SET_ERROR("admin.listen", "0.0.0.0:99999", "has no valid port");

    /* strings that could not be written back on one line */
    SET_ERROR("history.path", "a\nb", "control character");
    SET_ERROR("kafka.sasl.password", "a\rb", "control character");

    /* pass-through keys */
    SET_ERROR("kafka.", "x", "bad key");
    SET_ERROR("kafka.bad key", "x", "bad key");
    SET_ERROR("rocksdb.a=b", "x", "bad key");
}

static void test_validate(void)
{
    struct dd_config c;
    char err[512] = "";
    REQUIRE(dd_config_init(&c) == DD_OK);

    set_ok(&c, "history.segment_days", "91");
    INVALID(&c, "history.segment_days");
    set_ok(&c, "history.retention_days", "91");
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    set_ok(&c, "history.retention_days", "90");
    set_ok(&c, "history.segment_days", "30");
    /* A retention shorter than min_kept's floor (default 7) is valid: the
     * floor in effect is then the retention (nothing comes back). */
    set_ok(&c, "history.retention_days", "6");
    set_ok(&c, "history.segment_days", "2");
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    set_ok(&c, "history.retention_days", "90");
    set_ok(&c, "history.segment_days", "30");

    /* Traces (trace.h, dd_trace_conf_check). */
    set_ok(&c, "trace.users", " alice , bob ");
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    set_ok(&c, "trace.users", "alice,,bob");
    INVALID(&c, "trace.users");
    set_ok(&c, "trace.users", "alice,");
    INVALID(&c, "trace.users");
    set_ok(&c, "trace.max_users", "1");
    set_ok(&c, "trace.users", "alice,bob");
    INVALID(&c, "trace.users");
    set_ok(&c, "trace.max_users", "1000");
    set_ok(&c, "rpc.max_id_bytes", "4");
    INVALID(&c, "trace.users"); /* alice is 5 bytes */
    set_ok(&c, "rpc.max_id_bytes", "256");
    set_ok(&c, "trace.users", "");
    set_ok(&c, "trace.path", "./data/history");
    INVALID(&c, "trace.path");
    set_ok(&c, "trace.path", "./data/trace");
    /* trace.path "" (the default): the directory "trace" next to
     * history.path, whatever the working directory. */
    {
        char buf[256];
        static const char *const cases[][2] = {
            {"./data/history", "./data/trace"},
            {"/srv/dedupd/history", "/srv/dedupd/trace"},
            {"/srv/dedupd/history/", "/srv/dedupd/trace"},
            {"/srv//x", "/srv/trace"},
            {"history", "trace"},
            {"/srv", "/trace"},
        };
        set_ok(&c, "trace.path", "");
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            set_ok(&c, "history.path", cases[i][0]);
            struct dd_trace_conf tc = dd_config_trace_conf(&c, buf, sizeof buf);
            CHECK_MSG(strcmp(tc.path, cases[i][1]) == 0, "history.path %s: trace.path %s",
                      cases[i][0], tc.path);
            CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
        }
        set_ok(&c, "history.path", "/srv/trace"); /* its sibling would be itself */
        INVALID(&c, "trace.path");
        set_ok(&c, "trace.path", "/elsewhere");
        struct dd_trace_conf tc = dd_config_trace_conf(&c, buf, sizeof buf);
        CHECK(strcmp(tc.path, "/elsewhere") == 0);
        set_ok(&c, "history.path", "./data/history");
        set_ok(&c, "trace.path", "./data/trace");
    }
    CHECK_EQ_INT(dd_config_set(&c, "trace.max_users", "0", err, sizeof err), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_config_set(&c, "trace.retention_days", "0", err, sizeof err), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_config_set(&c, "trace.max_records", "x", err, sizeof err), DD_ERR_INVALID);

    set_ok(&c, "rpc.tls_cert", "/etc/dedupd/cert.pem");
    INVALID(&c, "rpc.tls_key");
    set_ok(&c, "rpc.tls_key", "/etc/dedupd/key.pem");
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    set_ok(&c, "rpc.tls_cert", "");
    INVALID(&c, "rpc.tls_cert");
    set_ok(&c, "rpc.tls_key", "");

    /* Mutual TLS and the allow lists (rpc.h, dd_rpc_conf_check). */
    set_ok(&c, "rpc.tls_client_ca", "/etc/dedupd/ca.pem");
    INVALID(&c, "rpc.tls_client_ca"); /* without tls_cert */
    set_ok(&c, "rpc.tls_cert", "/etc/dedupd/cert.pem");
    set_ok(&c, "rpc.tls_key", "/etc/dedupd/key.pem");
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    static const char *const good_lists[] = {"*", " * ", "", "  ", "feed", "feed,recall",
                                             " feed , spiffe://c/ns/a/sa/recall ", "a b"};
    for (size_t i = 0; i < DD_ARRAY_LEN(good_lists); i++) {
        set_ok(&c, "rpc.allow_read", good_lists[i]);
        set_ok(&c, "rpc.allow_write", good_lists[i]);
        CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "\"%s\": %s",
                  good_lists[i], err);
    }
    static const char *const bad_lists[] = {"feed,", ",feed", "a,,b", "a, ,b", "*,feed",
                                            "feed,*", ","};
    for (size_t i = 0; i < DD_ARRAY_LEN(bad_lists); i++) {
        set_ok(&c, "rpc.allow_write", bad_lists[i]);
        INVALID(&c, "rpc.allow_write");
    }
    set_ok(&c, "rpc.allow_write", "*");
    set_ok(&c, "rpc.allow_read", "recall");
    set_ok(&c, "rpc.tls_client_ca", ""); /* identities need client certificates */
    INVALID(&c, "rpc.allow_read");
    set_ok(&c, "rpc.allow_read", ""); /* no one: needs no identity */
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    set_ok(&c, "rpc.allow_read", "*");

    /* Not loopback: mutual TLS or rpc.allow_insecure. */
    static const char *const open[] = {"0.0.0.0:50051", "[::]:50051", "10.1.2.3:1",
                                       "dedupd.internal:50051"};
    for (size_t i = 0; i < DD_ARRAY_LEN(open); i++) {
        set_ok(&c, "rpc.listen", open[i]);
        INVALID(&c, "rpc.allow_insecure"); /* TLS, but no client certificates */
        set_ok(&c, "rpc.tls_cert", "");
        set_ok(&c, "rpc.tls_key", "");
        INVALID(&c, "rpc.allow_insecure"); /* plaintext */
        set_ok(&c, "rpc.allow_insecure", "true");
        CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
        set_ok(&c, "rpc.allow_insecure", "false");
        set_ok(&c, "rpc.tls_cert", "/etc/dedupd/cert.pem");
        set_ok(&c, "rpc.tls_key", "/etc/dedupd/key.pem");
        set_ok(&c, "rpc.tls_client_ca", "/etc/dedupd/ca.pem");
        CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
        set_ok(&c, "rpc.tls_client_ca", "");
    }
    static const char *const local[] = {"127.0.0.1:0", "127.9.9.9:1", "[::1]:1", "localhost:1"};
    set_ok(&c, "rpc.tls_cert", "");
    set_ok(&c, "rpc.tls_key", "");
    for (size_t i = 0; i < DD_ARRAY_LEN(local); i++) {
        set_ok(&c, "rpc.listen", local[i]);
        CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s: %s", local[i], err);
    }
    set_ok(&c, "rpc.listen", "127.0.0.1:50051");

    set_ok(&c, "ingest.topic", "");
    INVALID(&c, "ingest.topic");
    set_ok(&c, "ingest.enabled", "false");
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    set_ok(&c, "ingest.enabled", "true");
    set_ok(&c, "ingest.topic", "plays");

    set_ok(&c, "ingest.dead_letter_topic", "plays");
    INVALID(&c, "ingest.dead_letter_topic");
    set_ok(&c, "ingest.dead_letter_topic", "plays-dead");
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);

    set_ok(&c, "kafka.bootstrap.servers", "");
    INVALID(&c, "kafka.bootstrap.servers");
    set_ok(&c, "ingest.enabled", "no");
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    set_ok(&c, "ingest.enabled", "yes");
    set_ok(&c, "kafka.bootstrap.servers", "127.0.0.1:9092");

    set_ok(&c, "admin.listen", "127.0.0.1:50051");
    INVALID(&c, "admin.listen");
    set_ok(&c, "admin.listen", "127.0.0.1:9464");

    /* The struct is public: values written directly are checked too. */
    c.history.segment_days = 0;
    INVALID(&c, "history.segment_days");
    c.history.segment_days = 30;
    c.history.retention_days = 0;
    INVALID(&c, "history.retention_days");
    c.history.retention_days = 90;
    c.history.fp_rate = 0.0;
    INVALID(&c, "history.fp_rate");
    c.history.fp_rate = 1.0;
    INVALID(&c, "history.fp_rate");
    c.history.fp_rate = NAN;
    INVALID(&c, "history.fp_rate");
    c.history.fp_rate = 0.01;
    c.rpc.threads = 0;
    INVALID(&c, "rpc.threads");
    c.rpc.threads = 2;
    c.window.flush_ms = 0;
    INVALID(&c, "window.flush_ms");
    c.window.flush_ms = 1000;
    c.recent.size = 0;
    INVALID(&c, "recent.size");
    c.recent.size = 100;
    c.rpc.max_id_bytes = 65536;
    INVALID(&c, "rpc.max_id_bytes");
    c.rpc.max_id_bytes = 65535;
    c.history.max_future_ms = -5;
    INVALID(&c, "history.max_future_ms");
    c.history.max_future_ms = 0;
    replace_str(&c.log.level, "loud");
    INVALID(&c, "log.level");
    replace_str(&c.log.level, "warn");
    replace_str(&c.rpc.listen, "nowhere");
    INVALID(&c, "rpc.listen");
    replace_str(&c.rpc.listen, "127.0.0.1:50051");
    replace_str(&c.recent.redis, "127.0.0.1:123456");
    INVALID(&c, "recent.redis");
    replace_str(&c.recent.redis, "127.0.0.1:6379");
    replace_str(&c.admin.listen, "x");
    INVALID(&c, "admin.listen");
    replace_str(&c.admin.listen, "");
    /* A forward cap that would take every call slot (2 threads x 8). */
    set_ok(&c, "cluster.max_forward_inflight", "16");
    INVALID(&c, "cluster.max_forward_inflight");
    set_ok(&c, "rpc.prepost", "9");
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    set_ok(&c, "rpc.prepost", "8");
    set_ok(&c, "cluster.max_forward_inflight", "0");
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    dd_config_free(&c);
}

static void test_file(void)
{
    struct dd_config c;
    char err[512] = "";
    REQUIRE(dd_config_init(&c) == DD_OK);
    const char *text =
        "# a comment\n"
        "; another\n"
        "\n"
        "[history]\n"
        "path = /data/h   # trailing comment\n"
        "  segment_days=15\n"
        "segment_days = 10 ; last one wins\n"
        "fp_rate = 0.005\n"
        "sync = off\n"
        "\t[ rpc ]   # spaces inside the brackets are trimmed\n"
        "listen = \"0.0.0.0:7000\" # quoted, then a comment\n"
        "tls_cert = \"/etc/a b/\\\"c\\\"\\\\d.pem\"\n"
        "tls_key = \"  spaced  \"\n"
        "[recent]\n"
        "password = pa#ss;word\n"
        "redis = 1.2.3.4:1\n"
        "redis = 10.0.0.1:6379\n"
        "[ingest]\n"
        "topic = \"plays # not a comment\"\n"
        "dead_letter_topic = \"\"\n"
        "[kafka]\n"
        "auto.offset.reset = earliest\n"
        "bootstrap.servers = k1:9092,k2:9092\n"
        "fetch.max.bytes = 1\n"
        "fetch.max.bytes = 2\n"
        "[rocksdb]\n"
        "max_background_jobs = 4\n"
        "compaction_style = kCompactionStyleLevel\n"
        "[log]\n"
        "file = /tmp/x.log\n"
        "file =\n"
        "[history]\n"
        "retention_days = 60\r\n";
    int r = load_text(&c, text, err, sizeof err);
    CHECK_MSG(r == DD_OK, "load: %s", err);
    CHECK_STR(c.history.path, "/data/h");
    CHECK_EQ_INT(c.history.segment_days, 10);
    CHECK_EQ_INT(c.history.retention_days, 60);
    CHECK(c.history.fp_rate == 0.005);
    CHECK(c.history.sync == false);
    CHECK_STR(c.rpc.listen, "0.0.0.0:7000");
    CHECK_STR(c.rpc.auth.tls.cert, "/etc/a b/\"c\"\\d.pem");
    CHECK_STR(c.rpc.auth.tls.key, "  spaced  ");
    CHECK_STR(c.recent.password, "pa#ss;word");
    CHECK_STR(c.recent.redis, "10.0.0.1:6379");
    CHECK_STR(c.ingest.topic, "plays # not a comment");
    CHECK_STR(c.ingest.dead_letter_topic, "");
    CHECK_STR(c.log.file, "");
    /* untouched keys keep their defaults */
    CHECK_EQ_INT(c.rpc.threads, 2);
    CHECK_STR(c.log.level, "info");

    /* pass-through: file order after the defaults, one entry per key,
     * last value wins, a default overridden keeps its place */
    CHECK_EQ_INT(c.kafka.len, 4);
    if (c.kafka.len == 4) {
        CHECK_STR(c.kafka.items[0].key, "bootstrap.servers");
        CHECK_STR(c.kafka.items[0].value, "k1:9092,k2:9092");
        CHECK_STR(c.kafka.items[1].key, "group.id");
        CHECK_STR(c.kafka.items[1].value, "dedupd");
        CHECK_STR(c.kafka.items[2].key, "auto.offset.reset");
        CHECK_STR(c.kafka.items[2].value, "earliest");
        CHECK_STR(c.kafka.items[3].key, "fetch.max.bytes");
        CHECK_STR(c.kafka.items[3].value, "2");
    }
    CHECK_EQ_INT(c.rocksdb.len, 2);
    if (c.rocksdb.len == 2) {
        CHECK_STR(c.rocksdb.items[0].key, "max_background_jobs");
        CHECK_STR(c.rocksdb.items[1].key, "compaction_style");
    }
    CHECK_STR(dd_config_list_get(&c.rocksdb, "max_background_jobs"), "4");
    /* 0.0.0.0 with TLS but no client certificates: only with the opt-in */
    INVALID(&c, "rpc.allow_insecure");
    set_ok(&c, "rpc.allow_insecure", "true");
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    /* -o after the file, as main does it */
    set_ok(&c, "kafka.fetch.max.bytes", "3");
    CHECK_STR(dd_config_list_get(&c.kafka, "fetch.max.bytes"), "3");
    CHECK_EQ_INT(c.kafka.len, 4);
    dd_config_free(&c);

    /* lines far longer than any fixed buffer, many pass-through keys */
    size_t big = 200000;
    size_t cap = big + 65536;
    char *long_text = malloc(cap);
    REQUIRE(long_text != NULL);
    size_t n = (size_t)snprintf(long_text, cap, "[history]\npath = ");
    memset(long_text + n, 'p', big);
    n += big;
    n += (size_t)snprintf(long_text + n, cap - n, "\n[rocksdb]\n");
    for (int i = 0; i < 1000; i++)
        n += (size_t)snprintf(long_text + n, cap - n, "opt%d = %d\n", i, i);
    n += (size_t)snprintf(long_text + n, cap - n, "[history]\nsegment_days = 9");
    REQUIRE(n < cap);
    REQUIRE(dd_config_init(&c) == DD_OK);
    r = load_text(&c, long_text, err, sizeof err);
    CHECK_MSG(r == DD_OK, "long: %s", err);
    CHECK_EQ_INT(strlen(c.history.path), big);
    CHECK_EQ_INT(c.rocksdb.len, 1000);
    CHECK_STR(dd_config_list_get(&c.rocksdb, "opt999"), "999");
    CHECK_EQ_INT(c.history.segment_days, 9); /* last line without '\n' */
    dd_config_free(&c);
    free(long_text);

    /* an empty file changes nothing */
    REQUIRE(dd_config_init(&c) == DD_OK);
    CHECK_EQ_INT(load_text(&c, "", err, sizeof err), DD_OK);
    CHECK_STR(c.history.path, "./data/history");
    dd_config_free(&c);
}

/* Loading TEXT must fail with CODE and a message holding every one of the
 * NULL-terminated fragments. */
static void expect_file_error(const char *text, int code, int line, ...)
{
    struct dd_config c;
    char err[512] = "";
    REQUIRE(dd_config_init(&c) == DD_OK);
    int r = load_text(&c, text, err, sizeof err);
    CHECK_MSG(r == code, "line %d: gave %d, expected %d (%s)", line, r, code, err);
    va_list ap;
    va_start(ap, line);
    for (const char *frag; (frag = va_arg(ap, const char *)) != NULL;)
        CHECK_MSG(strstr(err, frag) != NULL, "line %d: message \"%s\" lacks \"%s\"", line, err,
                  frag);
    va_end(ap);
    dd_config_free(&c);
}
#define FILE_ERROR(text, ...) expect_file_error(text, DD_ERR_INVALID, __LINE__, __VA_ARGS__, NULL)

static void test_file_errors(void)
{
    FILE_ERROR("# header\n\n[history]\nsegmnet_days = 3\n", ":4: ",
               "unknown key \"history.segmnet_days\"");
    FILE_ERROR("[history]\nsegment_days = 1\nsegment_days = abc\n", ":3: ",
               "history.segment_days: \"abc\" is not a whole number");
    FILE_ERROR("[history]\nsegment_days = 4294967296\n", ":2: ", "history.segment_days",
               "too large");
    FILE_ERROR("[history]\nsync = maybe # no\n", ":2: ", "history.sync", "\"maybe\"");
    FILE_ERROR("[ingest]\nformat = xml\n", ":2: ", "ingest.format", "not one of");
    FILE_ERROR("[rpc]\nlisten = localhost:99999\n", ":2: ", "rpc.listen", "port");
    FILE_ERROR("path = /x\n", ":1: ", "\"path\" before any [section]");
    FILE_ERROR("[histroy]\npath = /x\n", ":1: ", "unknown section [histroy]");
    FILE_ERROR("[history\n", ":1: ", "malformed section header");
    FILE_ERROR("[history] junk\n", ":1: ", "malformed section header");
    FILE_ERROR("[]\n", ":1: ", "unknown section []");
    FILE_ERROR("[history]\njust words\n", ":2: ", "expected key = value");
    FILE_ERROR("[history]\n= 3\n", ":2: ", "missing key");
    FILE_ERROR("[history]\npath = \"/x\n", ":2: ", "history.path", "unterminated");
    FILE_ERROR("[history]\npath = \"/x\\n\"\n", ":2: ", "history.path", "escape");
    FILE_ERROR("[history]\npath = \"/x\" y\n", ":2: ", "history.path", "after the closing quote");
    FILE_ERROR("[kafka]\nbad key = 1\n", ":2: ", "bad key \"kafka.bad key\"");

    /* a NUL byte would silently cut the value short */
    struct dd_config c;
    char err[512] = "";
    REQUIRE(dd_config_init(&c) == DD_OK);
    static const char nul[] = "[history]\npath = a\0b\n";
    CHECK_EQ_INT(load_bytes(&c, nul, sizeof nul - 1, err, sizeof err), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, ":2: NUL") != NULL, "%s", err);

    /* a file that cannot be read: DD_ERR_IO naming the file */
    CHECK_EQ_INT(dd_config_load_file(&c, "/nonexistent/dedupd.conf", err, sizeof err),
                 DD_ERR_IO);
    CHECK_MSG(strstr(err, "/nonexistent/dedupd.conf") != NULL, "%s", err);
    CHECK_EQ_INT(dd_config_load_file(&c, "/", err, sizeof err), DD_ERR_IO);
    CHECK_MSG(strstr(err, "/") == err, "%s", err);
    /* the failing line's predecessors were applied, the rest not */
    char msg[512];
    CHECK_EQ_INT(load_text(&c, "[history]\npath = /p1\nbogus = 1\nsegment_days = 5\n", msg,
                           sizeof msg),
                 DD_ERR_INVALID);
    CHECK_STR(c.history.path, "/p1");
    CHECK_EQ_INT(c.history.segment_days, 30);
    dd_config_free(&c);
}

static void test_round_trip(void)
{
    struct dd_config a, b;
    char err[512] = "";
    REQUIRE(dd_config_init(&a) == DD_OK);
    set_ok(&a, "history.path", "/data with spaces/\"q\"\\b #x ;y");
    set_ok(&a, "history.fp_rate", "0.30000000000000004");
    set_ok(&a, "history.max_future_ms", "315360000000");
    set_ok(&a, "history.sync", "no");
    set_ok(&a, "window.max_bytes", "18446744073709551615");
    set_ok(&a, "ingest.format", "protobuf");
    set_ok(&a, "ingest.enabled", "off");
    set_ok(&a, "recent.password", "  lead;trail#  ");
    set_ok(&a, "admin.listen", "");
    set_ok(&a, "rpc.listen", "[::]:0");
    set_ok(&a, "log.level", "error");
    set_ok(&a, "log.file", "\ttabbed");
    set_ok(&a, "kafka.security.protocol", "SASL_SSL");
    set_ok(&a, "kafka.sasl.password", "x=\"y\" # z");
    set_ok(&a, "rocksdb.max_background_jobs", "4");
    set_ok(&a, "rocksdb.empty", "");
    char *text = dump(&a);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "[history]\n") == text);
    CHECK(strstr(text, "\n[kafka]\n") != NULL);
    CHECK(strstr(text, "\n[rocksdb]\n") != NULL);

    /* read back over the defaults: every value returns */
    REQUIRE(dd_config_init(&b) == DD_OK);
    int r = load_text(&b, text, err, sizeof err);
    CHECK_MSG(r == DD_OK, "reload: %s\n%s", err, text);
    char *again = dump(&b);
    CHECK_MSG(again && strcmp(text, again) == 0, "round trip differs:\n%s\n---\n%s", text,
              again ? again : "(null)");
    CHECK_STR(b.history.path, "/data with spaces/\"q\"\\b #x ;y");
    CHECK(b.history.fp_rate == 0.1 + 0.2);
    CHECK(b.history.max_future_ms == INT64_C(315360000000));
    CHECK(b.window.max_bytes == UINT64_MAX);
    CHECK_STR(b.recent.password, "  lead;trail#  ");
    CHECK_STR(b.log.file, "\ttabbed");
    CHECK_STR(dd_config_list_get(&b.kafka, "sasl.password"), "x=\"y\" # z");
    CHECK_STR(dd_config_list_get(&b.rocksdb, "empty"), "");
    CHECK_EQ_INT(b.kafka.len, a.kafka.len);
    CHECK_EQ_INT(b.rocksdb.len, a.rocksdb.len);
    free(again);
    dd_config_free(&b);

    /* a short, even fp_rate is written the short way */
    set_ok(&a, "history.fp_rate", "0.01");
    free(text);
    text = dump(&a);
    CHECK(text && strstr(text, "fp_rate = 0.01\n") != NULL);
    free(text);

    /* a stream that fails is DD_ERR_IO */
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        CHECK_EQ_INT(dd_config_write(&a, full), DD_ERR_IO);
        fclose(full);
    }
    dd_config_free(&a);
}

/* The reference file must set every key the writer knows, to its default. */
static void test_reference_file(void)
{
    const char *root = getenv("DD_SOURCE_ROOT");
    REQUIRE(root != NULL); /* set by tests/meson.build */
    size_t n = strlen(root) + 32;
    char *path = malloc(n);
    REQUIRE(path != NULL);
    snprintf(path, n, "%s/conf/dedupd.conf", root);

    struct dd_config def, c;
    char err[512] = "";
    REQUIRE(dd_config_init(&def) == DD_OK);
    REQUIRE(dd_config_init(&c) == DD_OK);
    int r = dd_config_load_file(&c, path, err, sizeof err);
    CHECK_MSG(r == DD_OK, "%s", err);
    CHECK_MSG(dd_config_validate(&c, err, sizeof err) == DD_OK, "%s", err);
    char *want = dump(&def), *got = dump(&c);
    REQUIRE(want && got);
    CHECK_MSG(strcmp(want, got) == 0, "conf/dedupd.conf is not the defaults:\n%s\n---\n%s",
              want, got);

    /* Loading over the defaults would hide a key the file forgot, so also
     * look for every "section.key" of the writer's output among the file's
     * own (uncommented) lines. */
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL);
    char *file = NULL;
    size_t cap = 0, len = 0;
    char buf[4096];
    for (size_t k; (k = fread(buf, 1, sizeof buf, f)) > 0;) {
        if (len + k + 1 > cap) {
            cap = (len + k + 1) * 2;
            file = realloc(file, cap);
            REQUIRE(file != NULL);
        }
        memcpy(file + len, buf, k);
        len += k;
    }
    fclose(f);
    REQUIRE(file != NULL);
    file[len] = '\0';

    char section[64] = "", wsec[64] = "";
    int keys_seen = 0;
    for (char *line = strtok(want, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '[') {
            snprintf(wsec, sizeof wsec, "%s", line);
            continue;
        }
        char key[128];
        if (sscanf(line, "%127s =", key) != 1) continue;
        keys_seen++;
        /* find "KEY =" at the start of a line inside section WSEC */
        int found = 0;
        section[0] = '\0';
        for (char *p = file; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
            while (*p == ' ' || *p == '\t') p++;
            if (*p == '[') {
                size_t l = strcspn(p, "\n");
                snprintf(section, sizeof section, "%.*s", (int)l, p);
                continue;
            }
            size_t kl = strlen(key);
            if (strcmp(section, wsec) == 0 && strncmp(p, key, kl) == 0 &&
                (p[kl] == ' ' || p[kl] == '\t' || p[kl] == '='))
                found = 1;
        }
        CHECK_MSG(found, "conf/dedupd.conf does not set %s %s", wsec, key);
    }
    CHECK(keys_seen >= 30);
    free(file);
    free(want);
    free(got);
    free(path);
    dd_config_free(&def);
    dd_config_free(&c);
}

int main(void)
{
    test_defaults();
    test_set();
    test_set_errors();
    test_validate();
    test_file();
    test_file_errors();
    test_round_trip();
    test_reference_file();
    TEST_MAIN_END();
}
