/* SPDX-License-Identifier: Apache-2.0
 *
 * test_sentinel.c - what dedupd takes from Redis Sentinel, on bytes: the
 * reply to get-master-addr-by-name and +switch-master messages, good and
 * hostile (long, nested, wide, bad addresses, cut short); the list of
 * Sentinels and the per-shard master names; the config rules that tie
 * recent.sentinels to recent.master_name and cluster.redis.
 */
#include "testlib.h"

#include "config.h"
#include "dd.h"
#include "sentinel.h"

#include <stdint.h>
#include <string.h>

static int master(const char *bytes, struct dd_sentinel_addr *a, size_t *used)
{
    char why[256];
    return dd_sentinel_parse_master(bytes, strlen(bytes), a, used, why, sizeof why);
}

static int event(const char *bytes, const char *name, struct dd_sentinel_addr *a)
{
    char why[256];
    size_t used;
    return dd_sentinel_parse_event(bytes, strlen(bytes), name, a, &used, why, sizeof why);
}

static void test_master_reply(void)
{
    struct dd_sentinel_addr a;
    size_t used;
    const char *ok = "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\nextra";
    CHECK_EQ_INT(master(ok, &a, &used), DD_SENTINEL_ADDR);
    CHECK_STR(a.host, "127.0.0.1");
    CHECK_EQ_INT(a.port, 6380);
    CHECK_EQ_INT(used, strlen(ok) - 5); /* bytes after the reply are not its */

    CHECK_EQ_INT(master("*2\r\n$3\r\n::1\r\n$5\r\n65535\r\n", &a, &used), DD_SENTINEL_ADDR);
    CHECK_STR(a.host, "::1");
    CHECK_EQ_INT(a.port, 65535);
    CHECK_EQ_INT(master("*2\r\n$15\r\nredis-0.example\r\n$1\r\n1\r\n", &a, &used),
                 DD_SENTINEL_ADDR);
    CHECK_STR(a.host, "redis-0.example");

    /* Sentinel does not know the name: not an address, not an attack. */
    CHECK_EQ_INT(master("*-1\r\n", &a, &used), DD_SENTINEL_OTHER);
    CHECK_EQ_INT(master("$-1\r\n", &a, &used), DD_SENTINEL_OTHER);
    CHECK_EQ_INT(a.port, 0);

    static const char *const bad[] = {
        "-IDONTKNOW I don't know\r\n",               /* error reply */
        "+OK\r\n",                                     /* wrong type */
        ":6379\r\n",
        "*1\r\n$9\r\n127.0.0.1\r\n",                   /* one element */
        "*3\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\n1\r\n",     /* three */
        "*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\n1\r\n$1\r\n1\r\n", /* wider: refused by the reader */
        "*2\r\n*1\r\n$1\r\na\r\n$1\r\n1\r\n",          /* nested */
        "*2\r\n$9\r\n127.0.0.1\r\n:6379\r\n",          /* port as an integer */
        "*2\r\n$9\r\n127.0.0.1\r\n$1\r\n0\r\n",        /* port 0 */
        "*2\r\n$9\r\n127.0.0.1\r\n$5\r\n65536\r\n",    /* past 65535 */
        "*2\r\n$9\r\n127.0.0.1\r\n$6\r\n006379\r\n",   /* six digits */
        "*2\r\n$9\r\n127.0.0.1\r\n$3\r\n-80\r\n",
        "*2\r\n$9\r\n127.0.0.1\r\n$0\r\n\r\n",
        "*2\r\n$0\r\n\r\n$4\r\n6379\r\n",              /* empty host */
        "*2\r\n$9\r\n127.0.0 1\r\n$4\r\n6379\r\n",     /* a space */
        "*2\r\n$9\r\n127.0.0\n1\r\n$4\r\n6379\r\n",    /* a newline (log injection) */
        "*2\r\n$9\r\n127.0.0/1\r\n$4\r\n6379\r\n",     /* a path */
        "*2\r\n$4\r\n[::]\r\n$4\r\n6379\r\n",          /* brackets */
        "*2\r\n$5\r\n:::::\r\n$4\r\n6379\r\n",
        "*2000000000\r\n",                             /* a huge array announced */
        "?what\r\n",                                   /* not RESP */
    };
    for (size_t i = 0; i < DD_ARRAY_LEN(bad); i++) {
        memset(&a, 0x55, sizeof a);
        CHECK_MSG(master(bad[i], &a, &used) == DD_SENTINEL_BAD, "case %zu", i);
        CHECK_MSG(a.port == 0 && a.host[0] == '\0', "case %zu leaves an address", i);
        CHECK_EQ_INT(used, 0);
    }
    char nul[] = "*2\r\n$3\r\na\0b\r\n$4\r\n6379\r\n"; /* a NUL inside the host */
    char why[256];
    CHECK_EQ_INT(dd_sentinel_parse_master(nul, sizeof nul - 1, &a, &used, why, sizeof why),
                 DD_SENTINEL_BAD);

    /* A host of 255 bytes fits; 256 does not; a string of a megabyte is
     * refused without being kept. */
    static char big[2 * 1024 * 1024];
    char h[300];
    memset(h, 'a', sizeof h);
    snprintf(big, sizeof big, "*2\r\n$255\r\n%.255s\r\n$2\r\n80\r\n", h);
    CHECK_EQ_INT(master(big, &a, &used), DD_SENTINEL_ADDR);
    CHECK_EQ_INT(strlen(a.host), 255);
    snprintf(big, sizeof big, "*2\r\n$256\r\n%.256s\r\n$2\r\n80\r\n", h);
    CHECK_EQ_INT(master(big, &a, &used), DD_SENTINEL_BAD);
    size_t n = (size_t)snprintf(big, sizeof big, "*2\r\n$1048576\r\n");
    memset(big + n, 'a', 1048576);
    n += 1048576;
    n += (size_t)snprintf(big + n, sizeof big - n, "\r\n$2\r\n80\r\n");
    CHECK_EQ_INT(dd_sentinel_parse_master(big, n, &a, &used, why, sizeof why), DD_SENTINEL_BAD);

    /* Cut anywhere before its end, a reply is partial, never an address. */
    for (size_t cut = 0; cut < strlen(ok) - 5; cut++) {
        int rc = dd_sentinel_parse_master(ok, cut, &a, &used, why, sizeof why);
        CHECK_MSG(rc == DD_SENTINEL_PARTIAL, "cut at %zu: %d", cut, rc);
    }
}

/* A pub/sub message as Redis frames it: "*3" and three bulk strings. */
static const char *message(char *buf, size_t cap, const char *kind, const char *channel,
                           const char *payload)
{
    snprintf(buf, cap, "*3\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(kind),
             kind, strlen(channel), channel, strlen(payload), payload);
    return buf;
}

static void test_events(void)
{
    struct dd_sentinel_addr a;
    char m[512];
    const char *sw = message(m, sizeof m, "message", "+switch-master",
                             "mymaster 10.0.0.1 6379 10.0.0.2 6380");
    CHECK_EQ_INT(event(sw, "mymaster", &a), DD_SENTINEL_ADDR);
    CHECK_STR(a.host, "10.0.0.2");
    CHECK_EQ_INT(a.port, 6380);
    /* Another master's switch, on the same Sentinel. */
    CHECK_EQ_INT(event(sw, "mymaste", &a), DD_SENTINEL_OTHER);
    CHECK_EQ_INT(event(sw, "other", &a), DD_SENTINEL_OTHER);
    CHECK_EQ_INT(a.port, 0);
    /* The subscription's confirmation. */
    CHECK_EQ_INT(event("*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n", "mymaster",
                       &a),
                 DD_SENTINEL_OTHER);

    static const char *const bad_payloads[] = {
        "mymaster 10.0.0.1 6379 10.0.0.2",         /* four fields */
        "mymaster 10.0.0.1 6379 10.0.0.2 6380 9",  /* six */
        "mymaster 10.0.0.1 6379  10.0.0.2 6380",   /* an empty one */
        "mymaster 10.0.0.1 6379 10.0.0.2 99999",   /* a bad new port */
        "mymaster 10.0.0.1 6379 10.0.0.2\n 6380",  /* a newline in the host */
        "",
    };
    for (size_t i = 0; i < DD_ARRAY_LEN(bad_payloads); i++)
        CHECK_MSG(event(message(m, sizeof m, "message", "+switch-master", bad_payloads[i]),
                        "mymaster", &a) == DD_SENTINEL_BAD,
                  "payload \"%s\"", bad_payloads[i]);
    static const char *const bad[] = {
        "*3\r\n$7\r\nmessage\r\n$5\r\n+sdwn\r\n$3\r\nabc\r\n",       /* another channel */
        "*3\r\n$8\r\npmessage\r\n$14\r\n+switch-master\r\n$3\r\nabc\r\n",
        "*2\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n",
        "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n:5\r\n",
        "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n*0\r\n",     /* nested */
        "-ERR nope\r\n",
    };
    for (size_t i = 0; i < DD_ARRAY_LEN(bad); i++)
        CHECK_MSG(event(bad[i], "mymaster", &a) == DD_SENTINEL_BAD, "case %zu", i);
}

static void test_list(void)
{
    struct dd_sentinel_addr a[DD_SENTINEL_MAX];
    size_t n;
    char err[256];
    CHECK_EQ_INT(dd_sentinel_parse_list("10.0.0.1:26379, 10.0.0.2:26379 ,[::1]:26380", a,
                                        DD_SENTINEL_MAX, &n, err, sizeof err),
                 DD_OK);
    CHECK_EQ_INT(n, 3);
    CHECK_STR(a[1].host, "10.0.0.2");
    CHECK_STR(a[2].host, "::1");
    CHECK_EQ_INT(a[2].port, 26380);
    static const char *const bad[] = {"", "a", "a:0", "a:1,", ",a:1", "a:1,a:1", "a:1 b:2",
                                      "a:65536"};
    for (size_t i = 0; i < DD_ARRAY_LEN(bad); i++) {
        CHECK_MSG(dd_sentinel_parse_list(bad[i], a, DD_SENTINEL_MAX, &n, err, sizeof err) ==
                      DD_ERR_INVALID,
                  "\"%s\"", bad[i]);
        CHECK_MSG(strstr(err, "recent.sentinels") != NULL, "%s", err);
    }
    char many[1024] = "";
    for (int i = 0; i <= DD_SENTINEL_MAX; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%sh:%d", i ? "," : "", i + 1);
    CHECK_EQ_INT(dd_sentinel_parse_list(many, a, DD_SENTINEL_MAX, &n, err, sizeof err),
                 DD_ERR_INVALID);
}

static void test_shard_names(void)
{
    char name[DD_SENTINEL_NAME_MAX], err[256];
    /* One name: every shard's. */
    CHECK_EQ_INT(dd_sentinel_shard_name("mymaster", 4, 3, name, sizeof name, err, sizeof err),
                 DD_OK);
    CHECK_STR(name, "mymaster");
    /* One per shard, by ';', as cluster.redis. */
    CHECK_EQ_INT(dd_sentinel_shard_name("s0; s1 ;s2", 3, 1, name, sizeof name, err, sizeof err),
                 DD_OK);
    CHECK_STR(name, "s1");
    CHECK_EQ_INT(dd_sentinel_shard_name("s0;s1;s2", 3, 2, name, sizeof name, err, sizeof err),
                 DD_OK);
    CHECK_STR(name, "s2");
    CHECK_EQ_INT(dd_sentinel_shard_name("s0;s1", 3, 0, name, sizeof name, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK(strstr(err, "recent.master_name") != NULL);
    CHECK_EQ_INT(dd_sentinel_shard_name("s0;;s2", 3, 1, name, sizeof name, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_EQ_INT(dd_sentinel_shard_name("my master", 1, 0, name, sizeof name, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_EQ_INT(dd_sentinel_shard_name("", 1, 0, name, sizeof name, err, sizeof err),
                 DD_ERR_INVALID);
    char longname[DD_SENTINEL_NAME_MAX + 1];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    CHECK_EQ_INT(dd_sentinel_shard_name(longname, 1, 0, name, sizeof name, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK(dd_sentinel_name_ok("a", 1));
    CHECK(!dd_sentinel_name_ok("a\tb", 3));
    CHECK(!dd_sentinel_name_ok("\x80", 1));
}

static int validate(const char *const *kv, char *err, size_t errlen)
{
    struct dd_config c;
    REQUIRE(dd_config_init(&c) == DD_OK);
    for (; kv[0]; kv += 2) REQUIRE(dd_config_set(&c, kv[0], kv[1], err, errlen) == DD_OK);
    int rc = dd_config_validate(&c, err, errlen);
    dd_config_free(&c);
    return rc;
}

static void test_config(void)
{
    char err[512];
    const char *ok[] = {"recent.sentinels", "127.0.0.1:26379", "recent.master_name", "m", NULL};
    CHECK_EQ_INT(validate(ok, err, sizeof err), DD_OK);
    const char *noname[] = {"recent.sentinels", "127.0.0.1:26379", NULL};
    CHECK_EQ_INT(validate(noname, err, sizeof err), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "recent.master_name") != NULL, "%s", err);
    const char *badlist[] = {"recent.sentinels", "127.0.0.1", "recent.master_name", "m", NULL};
    CHECK_EQ_INT(validate(badlist, err, sizeof err), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "recent.sentinels") != NULL, "%s", err);
    /* Two names for one shard. */
    const char *two[] = {"recent.sentinels", "127.0.0.1:26379", "recent.master_name", "a;b",
                         NULL};
    CHECK_EQ_INT(validate(two, err, sizeof err), DD_ERR_INVALID);
    /* Without sentinels the names are not looked at. */
    const char *off[] = {"recent.master_name", "a;b", NULL};
    CHECK_EQ_INT(validate(off, err, sizeof err), DD_OK);
}

static void test_handle(void)
{
    dd_sentinel *s;
    char err[256];
    struct dd_sentinel_conf bad = {"127.0.0.1:1", "two names", "", 20};
    CHECK_EQ_INT(dd_sentinel_new(&s, &bad, err, sizeof err), DD_ERR_INVALID);
    CHECK(s == NULL);
    /* Created, never started: nothing known, suspect and free are safe. */
    struct dd_sentinel_conf c = {"127.0.0.1:1", "m", "", 20};
    REQUIRE(dd_sentinel_new(&s, &c, err, sizeof err) == DD_OK);
    struct dd_sentinel_addr a;
    CHECK_EQ_INT(dd_sentinel_generation(s), 0);
    CHECK_EQ_INT(dd_sentinel_master(s, &a), 0);
    CHECK_EQ_INT(a.port, 0);
    dd_sentinel_suspect(s);
    dd_sentinel_free(s);
    dd_sentinel_free(NULL);
    /* Started against a port where nothing listens: it keeps trying, knows
     * no master, and stops promptly. */
    int port = tl_free_port();
    char list[64];
    snprintf(list, sizeof list, "127.0.0.1:%d", port);
    struct dd_sentinel_conf dead = {list, "m", "", 20};
    REQUIRE(dd_sentinel_new(&s, &dead, err, sizeof err) == DD_OK);
    REQUIRE(dd_sentinel_start(s, err, sizeof err) == DD_OK);
    dd_sleep_ms(300);
    dd_sentinel_suspect(s);
    dd_sleep_ms(50);
    CHECK_EQ_INT(dd_sentinel_generation(s), 0);
    int64_t t0 = dd_mono_ns();
    dd_sentinel_free(s);
    CHECK((dd_mono_ns() - t0) / 1000000 < 1000);
    struct dd_sentinel_stats st;
    dd_sentinel_get_stats(&st);
    CHECK(st.unreachable >= 1);
    CHECK_EQ_INT(st.master_known, 0);
}

int main(void)
{
    test_master_reply();
    test_events();
    test_list();
    test_shard_names();
    test_config();
    test_handle();
    TEST_MAIN_END();
}
