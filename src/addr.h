/* SPDX-License-Identifier: Apache-2.0
 *
 * addr.h - the one "host:port" parser: every listen and connect address
 * (config check, admin listener, Redis, dedupctl's HTTP GET, the daemon's
 * log lines) goes through it. Only dd_hostport_resolve looks names up.
 */
#ifndef DD_ADDR_H
#define DD_ADDR_H

#include <netdb.h>
#include <stddef.h>
#include <stdint.h>

/* What dd_hostport_parse found wrong (0 is fine). */
enum dd_hostport_rc {
    DD_HOSTPORT_OK = 0,
    DD_HOSTPORT_NOCOLON = -1, /* no ':' at all */
    DD_HOSTPORT_NOHOST = -2,  /* ":port" */
    DD_HOSTPORT_V6 = -3,      /* a ':' in an unbracketed host, or a bad "[...]" */
    DD_HOSTPORT_BADPORT = -4, /* not 1 to 6 decimal digits, or over 65535 */
    DD_HOSTPORT_TOOLONG = -5, /* the host does not fit in HOSTLEN bytes */
};

/* Split "host:port" or "[v6 address]:port". The host is non-empty and,
 * unless in brackets, has no ':'; the port is 1 to 6 decimal digits worth
 * 0..65535 (port 0 is accepted: a caller that needs a real port rejects
 * it). The host, without brackets, goes to HOST (HOSTLEN bytes, terminated)
 * unless HOST is NULL; the port to *PORT unless PORT is NULL. Returns
 * DD_HOSTPORT_OK or one of the reasons above; HOST and *PORT are then
 * unspecified. */
int dd_hostport_parse(const char *s, char *host, size_t hostlen, uint16_t *port);

/* dd_hostport_parse S, then getaddrinfo(3) on its host and port with HINTS
 * (AI_NUMERICSERV added). Returns 0 with *RES set (free with freeaddrinfo),
 * or DD_ERR_INVALID with *GAI = 0 (S is not host:port) or the getaddrinfo
 * error (the lookup failed). */
int dd_hostport_resolve(const char *s, const struct addrinfo *hints, struct addrinfo **res,
                        int *gai);

/* "host:port", with the host in brackets if it has a ':' (IPv6), into BUF
 * (always terminated when BUFLEN > 0). Returns what snprintf returns. */
int dd_hostport_format(char *buf, size_t buflen, const char *host, unsigned port);

/* Whether a listener on "host:port" S is reachable from this machine only:
 * its host is "localhost", an IPv4 address in 127.0.0.0/8, "::1", or an
 * IPv4-mapped ::ffff:127.x.y.z. Decided from the text alone (no lookup):
 * any other name, a wildcard (0.0.0.0, [::]) or an S that is not host:port
 * counts as reachable from elsewhere. Cannot fail. */
int dd_hostport_is_loopback(const char *s);

#endif
