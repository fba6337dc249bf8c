/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_admin_http.c - the admin listener (admin.h) fed the fuzz bytes as
 * one HTTP connection. Nothing of ours parses HTTP: libmicrohttpd does,
 * and admin.c routes on the method and URL it hands over (exact string
 * compares). So the target drives a real listener on 127.0.0.1 (started
 * once): connect, send the bytes, and read what comes back
 * (see below for when it ends). Whatever it sends must start with an
 * HTTP/1.x status line, an answer once begun must not stall, and the
 * process must survive it (ASan/UBSan over admin.c, routing and
 * replies; libmicrohttpd itself is not instrumented, so coverage guidance
 * only sees our side).
 */
#include "fuzz.h"

#include "admin.h"
#include "dd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

static dd_admin *admin;

static void cleanup(void)
{
    dd_admin_free(admin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!admin) {
        char err[256];
        /* conf/dedupd.conf's defaults: a zero request timeout or
         * connection limit would test a listener nobody runs. */
        struct dd_admin_conf conf = {.listen = "127.0.0.1:0", .drain_ms = 0, .threads = 2,
                                     .max_connections = 64, .max_connections_per_ip = 8,
                                     .request_timeout_ms = 10000};
        FUZZ_CHECK(dd_admin_new(&admin, &conf, false, err, sizeof err) == DD_OK);
        dd_admin_set_ready(admin, DD_ADMIN_STORE, true);
        atexit(cleanup);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)dd_admin_port(admin))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int cr = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (cr != 0 && errno == EINTR) {
        /* libFuzzer's timer signal: the connection goes on in the
         * background; wait for it and read its outcome. */
        struct pollfd pw = {.fd = fd, .events = POLLOUT};
        int e = 0;
        socklen_t el = sizeof e;
        while (poll(&pw, 1, 5000) < 0 && errno == EINTR) {}
        cr = getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0 ? 0 : -1;
        if (cr != 0) errno = e;
    }
    if (cr != 0) fprintf(stderr, "connect: %s\n", strerror(errno));
    FUZZ_CHECK(cr == 0); /* the listener stopped accepting */
    /* The server may answer and close before reading it all (EPIPE,
     * ECONNRESET): that is an answer too. */
    size_t off = 0;
    while (off < size) {
        ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    /* libmicrohttpd keeps an HTTP/1.1 connection open after answering and
     * waits for the rest of an incomplete request up to its connection
     * timeout (10 s): so the exchange ends at a close, at
     * 10 ms of quiet once an answer's header block is in, or at 50 ms
     * with no answer at all (the connection is then reset from here). */
    char head[16], tail[4] = {0};
    size_t got = 0;
    int headers = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, headers ? 10 : got ? 5000 : 50);
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0 && (headers || !got)) break;
        FUZZ_CHECK(pr == 1); /* 5 s in the middle of an answer: stuck */
        char buf[4096];
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; /* closed (or reset) by the server */
        for (ssize_t i = 0; i < r; i++) {
            if (got < sizeof head) head[got] = buf[i];
            got++;
            memmove(tail, tail + 1, 3);
            tail[3] = buf[i];
            if (memcmp(tail, "\r\n\r\n", 4) == 0) headers = 1;
        }
    }
    if (got) FUZZ_CHECK(got >= 8 && memcmp(head, "HTTP/1.", 7) == 0);
    /* a reset, so the server drops its side at once (a plain close of an
     * incomplete request would be held to its connection timeout) */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
    return 0;
}
