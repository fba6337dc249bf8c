/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_sentinel.c - what dedupd takes from a Sentinel (sentinel.h), on
 * any bytes: the reply to get-master-addr-by-name and a +switch-master
 * message. No oracle (our reader refuses what hiredis' would build), so
 * invariants: an address is only ever a non-empty host of the allowed
 * characters, terminated inside its buffer, with a port other than 0,
 * that addr.h parses back to itself; a refusal leaves no address and
 * consumes nothing; a reply read from a prefix of the bytes reads the same
 * from exactly the bytes it used.
 */
#include "fuzz.h"

#include "addr.h"
#include "sentinel.h"

static void check_addr(const struct dd_sentinel_addr *a)
{
    size_t n = strnlen(a->host, sizeof a->host);
    FUZZ_CHECK(n > 0 && n < sizeof a->host);
    FUZZ_CHECK(a->port != 0);
    for (size_t i = 0; i < n; i++) {
        char c = a->host[i];
        FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '-' || c == '_' || c == ':' || c == '%');
    }
    char both[DD_SENTINEL_HOST_MAX + 16], host[DD_SENTINEL_HOST_MAX];
    uint16_t port;
    dd_hostport_format(both, sizeof both, a->host, a->port);
    FUZZ_CHECK(dd_hostport_parse(both, host, sizeof host, &port) == DD_HOSTPORT_OK);
    FUZZ_CHECK(port == a->port && strcmp(host, a->host) == 0);
}

static void check(int rc, const struct dd_sentinel_addr *a, size_t used, size_t size)
{
    static const struct dd_sentinel_addr zero;
    FUZZ_CHECK(rc >= DD_SENTINEL_ADDR && rc <= DD_SENTINEL_BAD);
    if (rc == DD_SENTINEL_ADDR) check_addr(a);
    else FUZZ_CHECK(memcmp(a, &zero, sizeof zero) == 0);
    if (rc == DD_SENTINEL_ADDR || rc == DD_SENTINEL_OTHER) FUZZ_CHECK(used > 0 && used <= size);
    else FUZZ_CHECK(used == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dd_sentinel_addr a, b;
    size_t used, used2;
    char why[256];

    int rc = dd_sentinel_parse_master(data, size, &a, &used, why, sizeof why);
    check(rc, &a, used, size);
    if (rc == DD_SENTINEL_ADDR || rc == DD_SENTINEL_OTHER) {
        FUZZ_CHECK(dd_sentinel_parse_master(data, used, &b, &used2, why, sizeof why) == rc);
        FUZZ_CHECK(used2 == used && memcmp(&a, &b, sizeof a) == 0);
    }

    rc = dd_sentinel_parse_event(data, size, "mymaster", &a, &used, why, sizeof why);
    check(rc, &a, used, size);
    if (rc == DD_SENTINEL_ADDR || rc == DD_SENTINEL_OTHER) {
        FUZZ_CHECK(dd_sentinel_parse_event(data, used, "mymaster", &b, &used2, why,
                                           sizeof why) == rc);
        FUZZ_CHECK(used2 == used && memcmp(&a, &b, sizeof a) == 0);
    }
    return 0;
}
