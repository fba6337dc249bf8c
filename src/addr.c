/* SPDX-License-Identifier: Apache-2.0
 *
 * addr.c - the host:port parser and formatter (see addr.h).
 */
#include "addr.h"
#include "dd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int dd_hostport_parse(const char *s, char *host, size_t hostlen, uint16_t *port)
{
    const char *h = s, *colon;
    size_t hn;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':') return strchr(s, ':') ? DD_HOSTPORT_V6 : DD_HOSTPORT_NOCOLON;
        h = s + 1;
        hn = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) return DD_HOSTPORT_NOCOLON;
        hn = (size_t)(colon - s);
        if (memchr(s, ':', hn)) return DD_HOSTPORT_V6;
    }
    if (hn == 0) return s[0] == '[' ? DD_HOSTPORT_V6 : DD_HOSTPORT_NOHOST;

    const char *p = colon + 1;
    unsigned long v = 0;
    size_t digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 6; p++, digits++)
        v = v * 10 + (unsigned long)(*p - '0');
    if (digits == 0 || *p != '\0' || v > 65535) return DD_HOSTPORT_BADPORT;

    if (host) {
        if (hn >= hostlen) return DD_HOSTPORT_TOOLONG;
        memcpy(host, h, hn);
        host[hn] = '\0';
    }
    if (port) *port = (uint16_t)v;
    return DD_HOSTPORT_OK;
}

int dd_hostport_resolve(const char *s, const struct addrinfo *hints, struct addrinfo **res,
                        int *gai)
{
    char host[256], port[8];
    uint16_t portnum;
    *res = NULL;
    *gai = 0;
    if (dd_hostport_parse(s, host, sizeof host, &portnum) != DD_HOSTPORT_OK) return DD_ERR_INVALID;
    snprintf(port, sizeof port, "%u", (unsigned)portnum);
    struct addrinfo h = *hints;
    h.ai_flags |= AI_NUMERICSERV;
    *gai = getaddrinfo(host, port, &h, res);
    return *gai ? DD_ERR_INVALID : DD_OK;
}

int dd_hostport_format(char *buf, size_t buflen, const char *host, unsigned port)
{
    const char *fmt = strchr(host, ':') ? "[%s]:%u" : "%s:%u";
    return snprintf(buf, buflen, fmt, host, port);
}

int dd_hostport_is_loopback(const char *s)
{
    char host[256];
    if (dd_hostport_parse(s, host, sizeof host, NULL) != DD_HOSTPORT_OK) return 0;
    if (strcasecmp(host, "localhost") == 0) return 1;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6)) return 1;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    }
    return 0;
}
