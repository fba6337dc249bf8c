/* SPDX-License-Identifier: Apache-2.0
 *
 * httpget.c - see httpget.h: a minimal HTTP/1.0 GET with one deadline.
 */
#include "httpget.h"
#include "addr.h"
#include "dd.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int64_t ms_left(int64_t deadline_ns)
{
    int64_t left = (deadline_ns - dd_mono_ns()) / 1000000;
    return left < 0 ? 0 : left;
}

/* Wait for FD to be ready for EVENTS before the deadline. */
static int wait_fd(int fd, short events, int64_t deadline_ns)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = events};
        int64_t left = ms_left(deadline_ns);
        int r = poll(&pfd, 1, (int)(left > INT32_MAX ? INT32_MAX : left));
        if (r > 0) return DD_OK;
        if (r == 0) return DD_ERR_TIMEOUT;
        if (errno != EINTR) return DD_ERR_IO;
    }
}

int dd_http_get(const char *addr, const char *path, int timeout_ms, int *status, char **body,
                size_t *len, char *err, size_t errlen)
{
    return dd_http_request(addr, "GET", path, timeout_ms, status, body, len, err, errlen);
}

int dd_http_request(const char *addr, const char *method, const char *path, int timeout_ms,
                    int *status, char **body, size_t *len, char *err, size_t errlen)
{
    return dd_http_request_h(addr, method, path, NULL, timeout_ms, status, body, len, err, errlen);
}

int dd_http_request_h(const char *addr, const char *method, const char *path, const char *headers,
                      int timeout_ms, int *status, char **body, size_t *len, char *err,
                      size_t errlen)
{
    if (!headers) headers = "";
    *body = NULL;
    *len = 0;
    *status = 0;
    int64_t deadline = dd_mono_ns() + (int64_t)timeout_ms * 1000000;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai;
    if (dd_hostport_resolve(addr, &hints, &res, &gai) != DD_OK) {
        if (gai)
            snprintf(err, errlen, "%s: %s", addr, gai_strerror(gai));
        else
            snprintf(err, errlen, "bad address \"%s\" (want host:port)", addr);
        return DD_ERR_INVALID;
    }
    int fd = -1, rc = DD_ERR_UNAVAILABLE;
    char *buf = NULL;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline) == DD_OK) {
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) break;
            errno = soerr;
        }
        snprintf(err, errlen, "cannot connect to %s: %s", addr, strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (!err[0]) snprintf(err, errlen, "cannot connect to %s", addr);
        return DD_ERR_UNAVAILABLE;
    }
    char *req = NULL;
    size_t reqcap = strlen(method) + strlen(path) + strlen(addr) + strlen(headers) + 128;
    int rn = -1;
    if (strlen(headers) > DD_HTTP_HEADERS_MAX) {
        snprintf(err, errlen, "headers too long (%zu bytes, at most %d)", strlen(headers),
                 DD_HTTP_HEADERS_MAX);
        rc = DD_ERR_INVALID;
        goto out;
    }
    if (strlen(path) > DD_HTTP_PATH_MAX) {
        snprintf(err, errlen, "path too long (%zu bytes, at most %d)", strlen(path),
                 DD_HTTP_PATH_MAX);
        rc = DD_ERR_INVALID;
        goto out;
    }
    if (!(req = malloc(reqcap))) {
        snprintf(err, errlen, "out of memory");
        rc = DD_ERR_NOMEM;
        goto out;
    }
    /* A POST or DELETE has no body: say so, as HTTP/1.0 servers expect. */
    rn = snprintf(req, reqcap, "%s %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n%s%s\r\n",
                  method, path, addr,
                  strcmp(method, "GET") && strcmp(method, "HEAD") ? "Content-Length: 0\r\n" : "",
                  headers);
    if (rn < 0 || (size_t)rn >= reqcap) {
        snprintf(err, errlen, "request too long");
        rc = DD_ERR_INVALID;
        goto out;
    }
    for (size_t off = 0; off < (size_t)rn;) {
        ssize_t w = send(fd, req + off, (size_t)rn - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
            (rc = wait_fd(fd, POLLOUT, deadline)) == DD_OK)
            continue;
        snprintf(err, errlen, "%s: send failed", addr);
        rc = rc == DD_ERR_TIMEOUT ? rc : DD_ERR_IO;
        goto out;
    }
    size_t cap = 65536, n = 0;
    buf = malloc(cap);
    if (!buf) {
        snprintf(err, errlen, "out of memory");
        rc = DD_ERR_NOMEM;
        goto out;
    }
    for (;;) {
        if (n + 1 == cap) {
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                snprintf(err, errlen, "out of memory");
                rc = DD_ERR_NOMEM;
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
        if (r > 0) {
            n += (size_t)r;
            continue;
        }
        if (r == 0) break;
        if (errno == EINTR) continue;
        if ((errno == EAGAIN || errno == EWOULDBLOCK) &&
            (rc = wait_fd(fd, POLLIN, deadline)) == DD_OK)
            continue;
        rc = rc == DD_ERR_TIMEOUT ? rc : DD_ERR_IO;
        snprintf(err, errlen, "%s: %s", addr,
                 rc == DD_ERR_TIMEOUT ? "timed out" : "receive failed");
        goto out;
    }
    buf[n] = '\0';
    int maj, min, st;
    char *hdr_end = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/%d.%d %d", &maj, &min, &st) != 3 || !hdr_end) {
        snprintf(err, errlen, "%s: not an HTTP reply", addr);
        rc = DD_ERR_INVALID;
        goto out;
    }
    size_t off = (size_t)(hdr_end + 4 - buf);
    memmove(buf, buf + off, n - off + 1);
    *status = st;
    *body = buf;
    *len = n - off;
    buf = NULL;
    rc = DD_OK;
out:
    free(req);
    free(buf);
    close(fd);
    return rc;
}
