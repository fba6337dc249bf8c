/* SPDX-License-Identifier: Apache-2.0
 *
 * test_addr.c - the host:port parser every address goes through: IPv4 and
 * names, IPv6 in brackets, the port range (0 allowed), and each way an
 * address can be wrong, with the reason config.c turns into its message.
 */
#include "testlib.h"

#include "addr.h"
#include "dd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>

static void test_good(void)
{
    char host[64];
    uint16_t port = 1;
    CHECK_EQ_INT(dd_hostport_parse("127.0.0.1:50051", host, sizeof host, &port), DD_HOSTPORT_OK);
    CHECK_STR(host, "127.0.0.1");
    CHECK_EQ_INT(port, 50051);
    CHECK_EQ_INT(dd_hostport_parse("localhost:0", host, sizeof host, &port), DD_HOSTPORT_OK);
    CHECK_STR(host, "localhost");
    CHECK_EQ_INT(port, 0);
    CHECK_EQ_INT(dd_hostport_parse("[::1]:9464", host, sizeof host, &port), DD_HOSTPORT_OK);
    CHECK_STR(host, "::1");
    CHECK_EQ_INT(port, 9464);
    CHECK_EQ_INT(dd_hostport_parse("[fe80::1%eth0]:65535", host, sizeof host, &port),
                 DD_HOSTPORT_OK);
    CHECK_STR(host, "fe80::1%eth0");
    CHECK_EQ_INT(port, 65535);
    /* Up to six digits, leading zeros included, as config always took. */
    CHECK_EQ_INT(dd_hostport_parse("h:000080", host, sizeof host, &port), DD_HOSTPORT_OK);
    CHECK_EQ_INT(port, 80);
    /* HOST and PORT may be NULL: validate only. */
    CHECK_EQ_INT(dd_hostport_parse("[::]:1", NULL, 0, NULL), DD_HOSTPORT_OK);
}

static void test_missing_port(void)
{
    char host[64];
    uint16_t port;
    CHECK_EQ_INT(dd_hostport_parse("localhost", host, sizeof host, &port), DD_HOSTPORT_NOCOLON);
    CHECK_EQ_INT(dd_hostport_parse("", host, sizeof host, &port), DD_HOSTPORT_NOCOLON);
    CHECK_EQ_INT(dd_hostport_parse("localhost:", host, sizeof host, &port), DD_HOSTPORT_BADPORT);
    CHECK_EQ_INT(dd_hostport_parse("[::1]", host, sizeof host, &port), DD_HOSTPORT_V6);
    CHECK_EQ_INT(dd_hostport_parse("[::1]:", host, sizeof host, &port), DD_HOSTPORT_BADPORT);
}

static void test_bad_port(void)
{
    const char *bad[] = {"h:70000", "h:65536", "h:5005x", "h:-1", "h:+80", "h: 80",
                         "h:0000080000", "h:http", "[::1]:99999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(dd_hostport_parse(bad[i], NULL, 0, NULL) == DD_HOSTPORT_BADPORT, "%s", bad[i]);
}

static void test_bad_host(void)
{
    CHECK_EQ_INT(dd_hostport_parse(":50051", NULL, 0, NULL), DD_HOSTPORT_NOHOST);
    CHECK_EQ_INT(dd_hostport_parse(":", NULL, 0, NULL), DD_HOSTPORT_NOHOST);
    /* IPv6 needs brackets; brackets need a host and a ':' after them. */
    CHECK_EQ_INT(dd_hostport_parse("::1:80", NULL, 0, NULL), DD_HOSTPORT_V6);
    CHECK_EQ_INT(dd_hostport_parse("a:b:80", NULL, 0, NULL), DD_HOSTPORT_V6);
    CHECK_EQ_INT(dd_hostport_parse("[]:80", NULL, 0, NULL), DD_HOSTPORT_V6);
    CHECK_EQ_INT(dd_hostport_parse("[::1]80", NULL, 0, NULL), DD_HOSTPORT_V6);
    CHECK_EQ_INT(dd_hostport_parse("[::1:80", NULL, 0, NULL), DD_HOSTPORT_V6);
    CHECK_EQ_INT(dd_hostport_parse("[abc", NULL, 0, NULL), DD_HOSTPORT_NOCOLON);
}

static void test_too_long(void)
{
    char host[8];
    uint16_t port = 7;
    CHECK_EQ_INT(dd_hostport_parse("1234567:1", host, sizeof host, &port), DD_HOSTPORT_OK);
    CHECK_STR(host, "1234567");
    CHECK_EQ_INT(dd_hostport_parse("12345678:1", host, sizeof host, &port), DD_HOSTPORT_TOOLONG);
    CHECK_EQ_INT(dd_hostport_parse("[1:3:5:78]:1", host, sizeof host, &port),
                 DD_HOSTPORT_TOOLONG);
    /* Without a buffer any length is fine. */
    CHECK_EQ_INT(dd_hostport_parse("12345678:1", NULL, 0, NULL), DD_HOSTPORT_OK);
}

static void test_format(void)
{
    char buf[64];
    CHECK_EQ_INT(dd_hostport_format(buf, sizeof buf, "127.0.0.1", 50051), 15);
    CHECK_STR(buf, "127.0.0.1:50051");
    dd_hostport_format(buf, sizeof buf, "::1", 0);
    CHECK_STR(buf, "[::1]:0");
    /* Round trip. */
    char host[64];
    uint16_t port;
    CHECK_EQ_INT(dd_hostport_parse(buf, host, sizeof host, &port), DD_HOSTPORT_OK);
    CHECK_STR(host, "::1");
    CHECK_EQ_INT(port, 0);
}

static void test_resolve(void)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int gai = -1;
    CHECK_EQ_INT(dd_hostport_resolve("127.0.0.1:9464", &hints, &res, &gai), DD_OK);
    CHECK_EQ_INT(gai, 0);
    REQUIRE(res);
    CHECK_EQ_INT(res->ai_family, AF_INET);
    CHECK_EQ_INT(ntohs(((struct sockaddr_in *)res->ai_addr)->sin_port), 9464);
    freeaddrinfo(res);
    CHECK_EQ_INT(dd_hostport_resolve("[::1]:0", &hints, &res, &gai), DD_OK);
    REQUIRE(res);
    CHECK_EQ_INT(res->ai_family, AF_INET6);
    freeaddrinfo(res);
    /* Not host:port: *GAI stays 0, nothing to free. */
    CHECK_EQ_INT(dd_hostport_resolve("localhost", &hints, &res, &gai), DD_ERR_INVALID);
    CHECK_EQ_INT(gai, 0);
    CHECK(res == NULL);
    /* host:port that does not resolve (numeric only, so no DNS is asked). */
    hints.ai_flags = AI_NUMERICHOST;
    CHECK_EQ_INT(dd_hostport_resolve("no-such-host:1", &hints, &res, &gai), DD_ERR_INVALID);
    CHECK(gai != 0);
}

/* What counts as reachable from this machine only: the plaintext rule
 * (rpc.allow_insecure) rests on it, so every doubtful case is "not". */
static void test_loopback(void)
{
    const char *yes[] = {"127.0.0.1:50051", "127.255.0.9:0", "localhost:1", "LocalHost:1",
                         "[::1]:9464", "[::ffff:127.0.0.1]:1", "[0:0:0:0:0:0:0:1]:1"};
    const char *no[] = {"0.0.0.0:50051", "[::]:1", "10.0.0.1:1", "128.0.0.1:1",
                        "dedupd.internal:1", "localhost.evil.example:1", "127.0.0.1.nip.io:1",
                        "127.1:1", "[::ffff:10.0.0.1]:1", "[fe80::1%lo]:1", "", "localhost",
                        "[::1]", "1.2.3.4:99999"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        CHECK_MSG(dd_hostport_is_loopback(yes[i]) == 1, "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        CHECK_MSG(dd_hostport_is_loopback(no[i]) == 0, "%s", no[i]);
}

int main(void)
{
    test_loopback();
    test_good();
    test_missing_port();
    test_bad_port();
    test_bad_host();
    test_too_long();
    test_format();
    test_resolve();
    TEST_MAIN_END();
}
