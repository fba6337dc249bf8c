/* SPDX-License-Identifier: Apache-2.0
 *
 * test_recent.c - src/recent against real redis-server processes that the
 * test starts itself (free loopback port, temporary directory, stopped at
 * exit): record, fetch, trim, TTL, forget, scenes, binary-safe keys, AUTH,
 * an outage and recovery with the same client, and a server that accepts
 * but never answers. The split fetch (fetch_begin / fetch_end) the Filter
 * path uses: the same answer, a begun fetch given up (cancelled, or by the
 * next call) never answering a later command, a server restarted while
 * the client was idle, backoff and a server that never answers.
 *
 * Without redis-server the test skips (exit 77), except in CI (CI set),
 * where it fails.
 */
#include "config.h"
#include "dd.h"
#include "recent.h"
#include "testlib.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct redis {
    pid_t pid;
    int port;
    char dir[64];
    const char *password;
};

static const char *redis_exe;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double ms_since(int64_t t0)
{
    return (double)(dd_mono_ns() - t0) / 1e6;
}

static const char *find_redis(void)
{
    static char buf[4096];
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        snprintf(buf, sizeof buf, "%.*s/redis-server", (int)len, path);
        if (access(buf, X_OK) == 0) return buf;
        path += len;
        if (*path == ':') path++;
    }
    return access("/usr/bin/redis-server", X_OK) == 0 ? "/usr/bin/redis-server" : NULL;
}

static int port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static void redis_start(struct redis *rs)
{
    char port[16], logpath[128];
    snprintf(port, sizeof port, "%d", rs->port);
    snprintf(logpath, sizeof logpath, "%s/redis.log", rs->dir);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        /* DEBUG SLEEP (test_hang) needs the debug command (Redis >= 7). */
        const char *argv[20] = {redis_exe, "--port", port, "--bind", "127.0.0.1", "--dir",
                                rs->dir, "--save", "", "--appendonly", "no", "--daemonize",
                                "no", "--enable-debug-command", "local"};
        int n = 15;
        if (rs->password) {
            argv[n++] = "--requirepass";
            argv[n++] = rs->password;
        }
        argv[n] = NULL;
        execv(redis_exe, (char *const *)argv);
        _exit(127);
    }
    rs->pid = pid;
    for (int i = 0; i < 400; i++) {
        if (port_open(rs->port)) return;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "redis-server exited early; see %s\n", logpath);
            exit(1);
        }
        sleep_ms(25);
    }
    fprintf(stderr, "redis-server not listening on %d after 10 s\n", rs->port);
    kill(pid, SIGKILL);
    exit(1);
}

static void redis_stop(struct redis *rs)
{
    if (rs->pid <= 0) return;
    kill(rs->pid, SIGTERM);
    waitpid(rs->pid, NULL, 0);
    rs->pid = 0;
}

static struct redis *started[4];
static size_t nstarted;

static void cleanup(void)
{
    for (size_t i = 0; i < nstarted; i++) {
        redis_stop(started[i]);
        char cmd[160];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", started[i]->dir);
        if (!getenv("DD_KEEP_TMP") && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", started[i]->dir);
    }
}

static void redis_new(struct redis *rs, const char *password)
{
    memset(rs, 0, sizeof *rs);
    tl_tmpdir(rs->dir, sizeof rs->dir, "recent");
    rs->port = tl_free_port();
    rs->password = password;
    started[nstarted++] = rs;
    redis_start(rs);
}

/* A client with the given settings; fails the test if it cannot be made. */
static dd_recent *client(const char *addr, const char *password, uint32_t size, uint32_t ttl_s,
                         uint32_t timeout_ms)
{
    struct dd_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.recent.redis = (char *)addr;
    cfg.recent.password = (char *)(password ? password : "");
    cfg.recent.size = size;
    cfg.recent.ttl_s = ttl_s;
    cfg.recent.timeout_ms = timeout_ms;
    dd_recent *r = NULL;
    char err[256];
    int rc = dd_recent_new(&r, &cfg.recent, err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "dd_recent_new(%s): %s\n", addr, err);
    REQUIRE(rc == DD_OK && r);
    return r;
}

static int record_str(dd_recent *r, const char *scene, const char *user, const char **items,
                      size_t n, int64_t at_ms, uint32_t *size_after)
{
    size_t lens[64];
    REQUIRE(n <= 64);
    for (size_t i = 0; i < n; i++) lens[i] = strlen(items[i]);
    return dd_recent_record(r, scene, strlen(scene), user, strlen(user), items, lens, n, at_ms,
                            size_after);
}

/* Whether fetching (scene, user) gives exactly the hashes of WANT (any
 * order): with dd_recent_fetch, or SPLIT, with dd_recent_fetch_begin and
 * dd_recent_fetch_end (the Filter path's two halves). */
static int fetched_is(dd_recent *r, const char *scene, const char *user, const char **want,
                      size_t nwant, int split)
{
    uint64_t h[128];
    size_t n = 99;
    int rc;
    if (split) {
        rc = dd_recent_fetch_begin(r, scene, strlen(scene), user, strlen(user), 128);
        if (rc == DD_OK) rc = dd_recent_fetch_end(r, h, 128, &n);
    } else {
        rc = dd_recent_fetch(r, scene, strlen(scene), user, strlen(user), h, 128, &n);
    }
    const char *how = split ? "split fetch" : "fetch";
    if (rc != DD_OK) {
        fprintf(stderr, "%s %s/%s: %s (%s)\n", how, scene, user, dd_strerror(rc),
                dd_recent_errstr(r));
        return 0;
    }
    if (n != nwant) {
        fprintf(stderr, "%s %s/%s: %zu items, want %zu\n", how, scene, user, n, nwant);
        return 0;
    }
    for (size_t i = 0; i < nwant; i++) {
        uint64_t w = dd_hash(want[i], strlen(want[i]));
        size_t j = 0;
        while (j < n && h[j] != w) j++;
        if (j == n) {
            fprintf(stderr, "%s %s/%s: %s missing\n", how, scene, user, want[i]);
            return 0;
        }
    }
    return 1;
}

static int fetch_is(dd_recent *r, const char *scene, const char *user, const char **want,
                    size_t nwant)
{
    return fetched_is(r, scene, user, want, nwant, 0);
}

static redisContext *raw(const struct redis *rs)
{
    redisContext *c = redisConnect("127.0.0.1", rs->port);
    REQUIRE(c && !c->err);
    if (rs->password) {
        redisReply *rep = redisCommand(c, "AUTH %s", rs->password);
        REQUIRE(rep && rep->type == REDIS_REPLY_STATUS);
        freeReplyObject(rep);
    }
    return c;
}

static long long raw_int(redisContext *c, const char *cmd, const char *key, size_t keylen)
{
    redisReply *rep = redisCommand(c, "%s %b", cmd, key, keylen);
    REQUIRE(rep && rep->type == REDIS_REPLY_INTEGER);
    long long v = rep->integer;
    freeReplyObject(rep);
    return v;
}

static void test_basic(const struct redis *rs, const char *addr)
{
    dd_recent *r = client(addr, NULL, 5, 3600, 1000);
    const char *a[] = {"v1", "v2", "v3"};
    uint32_t sz = 0;

    CHECK_EQ_INT(record_str(r, "", "alice", a, 3, 0, &sz), DD_OK);
    CHECK_EQ_INT(sz, 3);
    CHECK(fetch_is(r, "", "alice", a, 3));
    CHECK(fetch_is(r, "", "bob", NULL, 0));

    /* The documented key layout, its TTL and its scores. */
    redisContext *c = raw(rs);
    CHECK_EQ_INT(raw_int(c, "EXISTS", "dr:5{alice}", 11), 1);
    long long ttl = raw_int(c, "TTL", "dr:5{alice}", 11);
    CHECK_MSG(ttl > 3590 && ttl <= 3600, "ttl %lld", ttl);
    redisReply *rep = redisCommand(c, "ZSCORE dr:5{alice} v1");
    REQUIRE(rep && rep->type == REDIS_REPLY_STRING);
    long long score = atoll(rep->str);
    freeReplyObject(rep);
    /* at_ms * 1024 + a sequence number (recent.c). */
    CHECK_MSG(llabs(score / 1024 - dd_now_ms()) < 10000, "score %lld is not now", score);

    /* Trim to the newest 5, one delivery at a time, explicit times. */
    const char *b[] = {"w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8"};
    for (int i = 0; i < 8; i++) {
        CHECK_EQ_INT(record_str(r, "", "carol", &b[i], 1, 1000 + i, &sz), DD_OK);
        CHECK_EQ_INT(sz, i < 5 ? i + 1 : 5);
    }
    CHECK(fetch_is(r, "", "carol", b + 3, 5));
    /* Re-delivering an old-but-kept id moves it to now: w4 survives the next two. */
    CHECK_EQ_INT(record_str(r, "", "carol", &b[3], 1, 2000, &sz), DD_OK);
    const char *c2[] = {"x1", "x2"};
    CHECK_EQ_INT(record_str(r, "", "carol", c2, 2, 2001, &sz), DD_OK);
    CHECK_EQ_INT(sz, 5);
    const char *want_c[] = {"w4", "x1", "x2", "w7", "w8"};
    CHECK(fetch_is(r, "", "carol", want_c, 5));

    /* A batch larger than the size keeps its last 5. */
    const char *d[] = {"d1", "d2", "d3", "d4", "d5", "d6", "d7"};
    CHECK_EQ_INT(record_str(r, "", "dave", d, 7, 0, &sz), DD_OK);
    CHECK_EQ_INT(sz, 5);
    CHECK(fetch_is(r, "", "dave", d + 2, 5));

    /* fetch with less room gives the newest first. */
    uint64_t h[2];
    size_t n = 0;
    CHECK_EQ_INT(dd_recent_fetch(r, "", 0, "carol", 5, h, 2, &n), DD_OK);
    CHECK_EQ_INT(n, 2);
    CHECK(n == 2 && ((h[0] == dd_hash("x1", 2) && h[1] == dd_hash("x2", 2)) ||
                     (h[0] == dd_hash("x2", 2) && h[1] == dd_hash("x1", 2))));

    /* Recording nothing reports the size. */
    CHECK_EQ_INT(record_str(r, "", "carol", NULL, 0, 0, &sz), DD_OK);
    CHECK_EQ_INT(sz, 5);

    /* Scenes are separate; forget removes one scene's set only. */
    const char *s1[] = {"s1"}, *s2[] = {"s2"};
    CHECK_EQ_INT(record_str(r, "home", "erin", s1, 1, 0, NULL), DD_OK);
    CHECK_EQ_INT(record_str(r, "follow", "erin", s2, 1, 0, NULL), DD_OK);
    CHECK(fetch_is(r, "home", "erin", s1, 1));
    CHECK(fetch_is(r, "follow", "erin", s2, 1));
    CHECK(fetch_is(r, "", "erin", NULL, 0));
    CHECK_EQ_INT(dd_recent_forget(r, "home", 4, "erin", 4), DD_OK);
    CHECK(fetch_is(r, "home", "erin", NULL, 0));
    CHECK(fetch_is(r, "follow", "erin", s2, 1));
    CHECK_EQ_INT(dd_recent_forget(r, "", 0, "alice", 5), DD_OK);
    CHECK(fetch_is(r, "", "alice", NULL, 0));
    CHECK_EQ_INT(raw_int(c, "EXISTS", "dr:5{alice}", 11), 0);
    CHECK_EQ_INT(dd_recent_forget(r, "", 0, "nobody", 6), DD_OK);

    /* Binary-safe keys: ("", "a}b") and ("b}", "a") must not share a set;
     * ids and users with NUL bytes work. */
    const char *k1[] = {"k1"}, *k2[] = {"k2"};
    CHECK_EQ_INT(record_str(r, "", "a}b", k1, 1, 0, NULL), DD_OK);
    CHECK_EQ_INT(record_str(r, "b}", "a", k2, 1, 0, NULL), DD_OK);
    CHECK(fetch_is(r, "", "a}b", k1, 1));
    CHECK(fetch_is(r, "b}", "a", k2, 1));
    const char nul_user[] = {'u', 0, 'v'};
    const char nul_item[] = {'i', 0, 'j'};
    const char *items[] = {nul_item};
    size_t lens[] = {3};
    CHECK_EQ_INT(dd_recent_record(r, "", 0, nul_user, 3, items, lens, 1, 0, &sz), DD_OK);
    CHECK_EQ_INT(sz, 1);
    CHECK_EQ_INT(dd_recent_fetch(r, "", 0, nul_user, 3, h, 2, &n), DD_OK);
    CHECK(n == 1 && h[0] == dd_hash(nul_item, 3));
    CHECK(fetch_is(r, "", "u", NULL, 0));

    /* ttl_s = 0 leaves the set without expiry. */
    dd_recent *r0 = client(addr, NULL, 5, 0, 1000);
    CHECK_EQ_INT(record_str(r0, "", "frank", k1, 1, 0, NULL), DD_OK);
    CHECK_EQ_INT(raw_int(c, "TTL", "dr:5{frank}", 11), -1);
    dd_recent_free(r0);

    /* A wrong-type key is a reply error (DD_ERR_IO) and the connection
     * stays usable. */
    redisReply *set = redisCommand(c, "SET dr:4{gina} x");
    REQUIRE(set);
    freeReplyObject(set);
    struct dd_recent_stats st0, st1;
    dd_recent_get_stats(&st0);
    CHECK_EQ_INT(record_str(r, "", "gina", k1, 1, 0, NULL), DD_ERR_IO);
    CHECK(strstr(dd_recent_errstr(r), "WRONGTYPE") != NULL);
    CHECK_EQ_INT(dd_recent_fetch(r, "", 0, "gina", 4, h, 2, &n), DD_ERR_IO);
    CHECK_EQ_INT(n, 0);
    CHECK(strstr(dd_recent_errstr(r), "ZREVRANGE: WRONGTYPE") != NULL);
    /* ... the same through the split fetch, whose reply is parsed by the
     * same reply functions */
    CHECK_EQ_INT(dd_recent_fetch_begin(r, "", 0, "gina", 4, 2), DD_OK);
    CHECK_EQ_INT(dd_recent_fetch_end(r, h, 2, &n), DD_ERR_IO);
    CHECK_EQ_INT(n, 0);
    CHECK(strstr(dd_recent_errstr(r), "ZREVRANGE: WRONGTYPE") != NULL);
    dd_recent_get_stats(&st1);
    CHECK_EQ_INT(st1.reply_errors - st0.reply_errors, 3);
    CHECK_EQ_INT(st1.reconnects, st0.reconnects);
    CHECK(fetch_is(r, "b}", "a", k2, 1));

    redisFree(c);
    dd_recent_free(r);
}

static void test_auth(void)
{
    static struct redis rs;
    char addr[64];
    redis_new(&rs, "s3cret pass");
    snprintf(addr, sizeof addr, "127.0.0.1:%d", rs.port);
    const char *a[] = {"p1"};

    dd_recent *ok = client(addr, "s3cret pass", 10, 60, 1000);
    CHECK_EQ_INT(record_str(ok, "", "u", a, 1, 0, NULL), DD_OK);
    CHECK(fetch_is(ok, "", "u", a, 1));
    dd_recent_free(ok);

    dd_recent *bad = client(addr, "wrong", 10, 60, 1000);
    CHECK_EQ_INT(record_str(bad, "", "u", a, 1, 0, NULL), DD_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(dd_recent_errstr(bad), "AUTH") != NULL, "%s", dd_recent_errstr(bad));
    dd_recent_free(bad);

    dd_recent *none = client(addr, NULL, 10, 60, 1000);
    CHECK_EQ_INT(record_str(none, "", "u", a, 1, 0, NULL), DD_ERR_IO);
    CHECK_MSG(strstr(dd_recent_errstr(none), "NOAUTH") != NULL, "%s", dd_recent_errstr(none));
    dd_recent_free(none);
    redis_stop(&rs);
}

static void test_outage(struct redis *rs, const char *addr)
{
    dd_recent *r = client(addr, NULL, 10, 60, 200);
    const char *a[] = {"o1"};
    struct dd_recent_stats st0, st1;
    uint64_t h[4];
    size_t n = 7;

    CHECK_EQ_INT(record_str(r, "", "oscar", a, 1, 0, NULL), DD_OK);
    redis_stop(rs);

    int64_t t0 = dd_mono_ns();
    CHECK_EQ_INT(dd_recent_fetch(r, "", 0, "oscar", 5, h, 4, &n), DD_ERR_UNAVAILABLE);
    CHECK_EQ_INT(n, 0);
    CHECK_MSG(ms_since(t0) < 150, "first failure took %.1f ms", ms_since(t0));
    CHECK(dd_recent_errstr(r)[0] != '\0');

    /* Backing off: fail fast, no connect attempt. */
    dd_recent_get_stats(&st0);
    t0 = dd_mono_ns();
    for (int i = 0; i < 1000; i++) {
        int rc = dd_recent_fetch(r, "", 0, "oscar", 5, h, 4, &n);
        if (rc != DD_ERR_UNAVAILABLE) {
            CHECK_EQ_INT(rc, DD_ERR_UNAVAILABLE);
            break;
        }
    }
    double fast = ms_since(t0);
    CHECK_MSG(fast < 50, "1000 calls while backing off took %.1f ms", fast);
    CHECK_EQ_INT(record_str(r, "", "oscar", a, 1, 0, NULL), DD_ERR_UNAVAILABLE);
    CHECK_EQ_INT(dd_recent_forget(r, "", 0, "oscar", 5), DD_ERR_UNAVAILABLE);
    dd_recent_get_stats(&st1);
    CHECK_MSG(st1.connection_errors - st0.connection_errors <= 1, "%llu connect errors",
              (unsigned long long)(st1.connection_errors - st0.connection_errors));

    /* Keep failing for a while so the backoff grows, then restart on the
     * same port: the same client recovers on its own within the 5 s cap. */
    int64_t until = dd_mono_ns() + 1500 * INT64_C(1000000);
    while (dd_mono_ns() < until) {
        CHECK_EQ_INT(dd_recent_fetch(r, "", 0, "oscar", 5, h, 4, &n), DD_ERR_UNAVAILABLE);
        sleep_ms(20);
    }
    redis_start(rs);
    t0 = dd_mono_ns();
    int rc;
    do {
        rc = record_str(r, "", "oscar", a, 1, 0, NULL);
        if (rc != DD_OK) sleep_ms(20);
    } while (rc != DD_OK && ms_since(t0) < 8000);
    CHECK_EQ_INT(rc, DD_OK);
    CHECK_MSG(ms_since(t0) < 5500, "recovery took %.0f ms", ms_since(t0));
    CHECK(fetch_is(r, "", "oscar", a, 1));

    /* Redis restarted while the client was idle: the next call reconnects
     * at once and succeeds (no error surfaces). */
    redis_stop(rs);
    redis_start(rs);
    CHECK_EQ_INT(record_str(r, "", "oscar", a, 1, 0, NULL), DD_OK);
    CHECK(fetch_is(r, "", "oscar", a, 1));
    dd_recent_free(r);
}

/* A loopback listener that never accepts: the kernel completes the
 * handshake, so connect succeeds and every read hangs. Its address goes
 * to ADDR; returns the socket (close it when done). */
static int mute_listener(char *addr, size_t addrlen)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    REQUIRE(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    REQUIRE(listen(fd, 16) == 0);
    socklen_t len = sizeof a;
    REQUIRE(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    snprintf(addr, addrlen, "127.0.0.1:%d", ntohs(a.sin_port));
    return fd;
}

static void test_hang(const struct redis *rs)
{
    char addr[64];
    int fd = mute_listener(addr, sizeof addr);

    dd_recent *r = client(addr, NULL, 10, 60, 50);
    struct dd_recent_stats st0, st1;
    uint64_t h[4];
    size_t n = 3;
    dd_recent_get_stats(&st0);
    int64_t t0 = dd_mono_ns();
    CHECK_EQ_INT(dd_recent_fetch(r, "", 0, "hank", 4, h, 4, &n), DD_ERR_TIMEOUT);
    double took = ms_since(t0);
    CHECK_MSG(took >= 45 && took < 500, "timeout after %.1f ms (timeout_ms 50)", took);
    CHECK_EQ_INT(n, 0);
    CHECK(strstr(dd_recent_errstr(r), "timed out") != NULL);
    dd_recent_get_stats(&st1);
    CHECK_EQ_INT(st1.timeouts - st0.timeouts, 1);
    t0 = dd_mono_ns();
    CHECK_EQ_INT(dd_recent_fetch(r, "", 0, "hank", 4, h, 4, &n), DD_ERR_UNAVAILABLE);
    CHECK_MSG(ms_since(t0) < 5, "call while backing off took %.1f ms", ms_since(t0));
    dd_recent_free(r);
    close(fd);

    /* A server that sends the first member of a three-member reply and
     * then nothing: the call times out with the reply half parsed (by the
     * fetch's own reply functions), which must be dropped with the
     * connection, never handed to hiredis' free (ASan watches). */
    fd = mute_listener(addr, sizeof addr); /* a fresh one: no old connection queued */
    pid_t half = fork();
    REQUIRE(half >= 0);
    if (half == 0) {
        int cfd = accept(fd, NULL, NULL);
        char buf[512];
        if (cfd < 0 || read(cfd, buf, sizeof buf) <= 0) _exit(1);
        static const char part[] = "*3\r\n$2\r\nv1\r\n$2\r\nv";
        if (write(cfd, part, sizeof part - 1) != (ssize_t)(sizeof part - 1)) _exit(2);
        sleep_ms(1000);
        _exit(0);
    }
    r = client(addr, NULL, 10, 60, 50);
    n = 3;
    t0 = dd_mono_ns();
    CHECK_EQ_INT(dd_recent_fetch_begin(r, "", 0, "hank", 4, 4), DD_OK);
    CHECK_EQ_INT(dd_recent_fetch_end(r, h, 4, &n), DD_ERR_TIMEOUT);
    took = ms_since(t0);
    CHECK_MSG(took >= 45 && took < 500, "timeout after %.1f ms (timeout_ms 50)", took);
    CHECK_EQ_INT(n, 0);
    dd_recent_free(r);
    kill(half, SIGKILL);
    waitpid(half, NULL, 0);
    close(fd);

    /* A real Redis that stalls (DEBUG SLEEP from another connection). */
    char raddr[64];
    snprintf(raddr, sizeof raddr, "127.0.0.1:%d", rs->port);
    dd_recent *rr = client(raddr, NULL, 10, 60, 50);
    const char *it[] = {"h1"};
    CHECK_EQ_INT(record_str(rr, "", "hank", it, 1, 0, NULL), DD_OK);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        redisContext *c = redisConnect("127.0.0.1", rs->port);
        if (!c || c->err) _exit(1);
        redisReply *rep = redisCommand(c, "DEBUG SLEEP 0.6");
        _exit(rep && rep->type == REDIS_REPLY_STATUS ? 0 : 2);
    }
    sleep_ms(100);
    t0 = dd_mono_ns();
    CHECK_EQ_INT(record_str(rr, "", "hank", it, 1, 0, NULL), DD_ERR_TIMEOUT);
    took = ms_since(t0);
    CHECK_MSG(took >= 45 && took < 500, "timeout after %.1f ms (timeout_ms 50)", took);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "DEBUG SLEEP failed (%d)", st);
    /* After the stall and the backoff, the same client works again. */
    t0 = dd_mono_ns();
    int rc;
    do {
        rc = record_str(rr, "", "hank", it, 1, 0, NULL);
        if (rc != DD_OK) sleep_ms(10);
    } while (rc != DD_OK && ms_since(t0) < 3000);
    CHECK_EQ_INT(rc, DD_OK);
    dd_recent_free(rr);
}

static void test_bad_config(void)
{
    struct dd_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.recent.password = (char *)"";
    cfg.recent.size = 10;
    cfg.recent.ttl_s = 10;
    cfg.recent.timeout_ms = 10;
    const char *bad[] = {"localhost", "localhost:0", "localhost:99999", ":6379", "[::1]6379",
                         "host:12x"};
    for (size_t i = 0; i < DD_ARRAY_LEN(bad); i++) {
        dd_recent *r = (dd_recent *)1;
        char err[256] = "";
        cfg.recent.redis = (char *)bad[i];
        CHECK_EQ_INT(dd_recent_new(&r, &cfg.recent, err, sizeof err), DD_ERR_INVALID);
        CHECK(r == NULL);
        CHECK_MSG(strstr(err, "recent.redis") != NULL, "%s", err);
    }
    cfg.recent.redis = (char *)"[::1]:6379";
    dd_recent *r = NULL;
    char err[256];
    CHECK_EQ_INT(dd_recent_new(&r, &cfg.recent, err, sizeof err), DD_OK);
    dd_recent_free(r);
    dd_recent_free(NULL);
}

/* dd_recent_fetch_begin / _end: exactly dd_recent_fetch's answers, never
 * a stale reply, and the same failures. */
static int split_is(dd_recent *r, const char *user, const char **want, size_t nwant)
{
    return fetched_is(r, "", user, want, nwant, 1);
}

static void test_split_fetch(struct redis *rs, const char *addr)
{
    dd_recent *r = client(addr, NULL, 10, 60, 200);
    const char *a[] = {"p1", "p2"}, *b[] = {"q1"};
    uint64_t h[8];
    size_t n = 5;
    CHECK_EQ_INT(record_str(r, "", "pat", a, 2, 0, NULL), DD_OK);
    CHECK_EQ_INT(record_str(r, "", "quinn", b, 1, 0, NULL), DD_OK);
    CHECK(split_is(r, "pat", a, 2));
    CHECK(split_is(r, "nobody", NULL, 0));
    /* room for one: the newest */
    CHECK_EQ_INT(dd_recent_fetch_begin(r, "", 0, "pat", 3, 1), DD_OK);
    CHECK_EQ_INT(dd_recent_fetch_end(r, h, 8, &n), DD_OK);
    CHECK(n == 1 && h[0] == dd_hash("p2", 2));
    /* room for none: nothing sent, nothing read, the next call not held up */
    CHECK_EQ_INT(dd_recent_fetch_begin(r, "", 0, "pat", 3, 0), DD_OK);
    CHECK_EQ_INT(dd_recent_fetch_end(r, h, 8, &n), DD_OK);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(dd_recent_fetch_begin(r, "", 0, "pat", 3, 0), DD_OK);
    int64_t t_none = dd_mono_ns();
    CHECK(fetch_is(r, "", "quinn", b, 1));
    CHECK_MSG(ms_since(t_none) < 150, "a fetch after an empty begin took %.1f ms",
              ms_since(t_none));
    /* an end without a begin */
    CHECK_EQ_INT(dd_recent_fetch_end(r, h, 8, &n), DD_ERR_INVALID);
    CHECK_EQ_INT(n, 0);
    /* given up: cancelled, then by the next calls of every kind */
    CHECK_EQ_INT(dd_recent_fetch_begin(r, "", 0, "pat", 3, 8), DD_OK);
    dd_recent_fetch_cancel(r);
    dd_recent_fetch_cancel(r); /* nothing pending: a no-op */
    CHECK(fetch_is(r, "", "quinn", b, 1));
    CHECK_EQ_INT(dd_recent_fetch_begin(r, "", 0, "pat", 3, 8), DD_OK);
    CHECK(fetch_is(r, "", "quinn", b, 1));
    CHECK_EQ_INT(dd_recent_fetch_begin(r, "", 0, "pat", 3, 8), DD_OK);
    CHECK(split_is(r, "quinn", b, 1));
    CHECK_EQ_INT(dd_recent_fetch_begin(r, "", 0, "pat", 3, 8), DD_OK);
    uint32_t sz = 0;
    CHECK_EQ_INT(record_str(r, "", "quinn", b, 1, 0, &sz), DD_OK);
    CHECK_EQ_INT(sz, 1);
    CHECK_EQ_INT(dd_recent_fetch_begin(r, "", 0, "pat", 3, 8), DD_OK);
    CHECK_EQ_INT(dd_recent_forget(r, "", 0, "quinn", 5), DD_OK);
    CHECK(split_is(r, "quinn", NULL, 0));
    CHECK(split_is(r, "pat", a, 2));
    /* restarted while idle: the end retries on a fresh connection */
    redis_stop(rs);
    redis_start(rs); /* empty again: no persistence */
    dd_recent *other = client(addr, NULL, 10, 60, 200);
    CHECK_EQ_INT(record_str(other, "", "pat", a, 2, 0, NULL), DD_OK);
    dd_recent_free(other);
    CHECK(split_is(r, "pat", a, 2));
    /* down: begin fails at once, then fails fast while backing off */
    redis_stop(rs);
    int64_t t0 = dd_mono_ns();
    int rc = dd_recent_fetch_begin(r, "", 0, "pat", 3, 8);
    if (rc == DD_OK) rc = dd_recent_fetch_end(r, h, 8, &n); /* the send may still succeed */
    CHECK_EQ_INT(rc, DD_ERR_UNAVAILABLE);
    CHECK_EQ_INT(dd_recent_fetch_begin(r, "", 0, "pat", 3, 8), DD_ERR_UNAVAILABLE);
    CHECK_MSG(ms_since(t0) < 150, "failing took %.1f ms", ms_since(t0));
    redis_start(rs);
    dd_recent_free(r);

    /* a listener that never answers: the end times out */
    char haddr[64];
    int fd = mute_listener(haddr, sizeof haddr);
    dd_recent *hr = client(haddr, NULL, 10, 60, 50);
    CHECK_EQ_INT(dd_recent_fetch_begin(hr, "", 0, "hank", 4, 8), DD_OK);
    t0 = dd_mono_ns();
    CHECK_EQ_INT(dd_recent_fetch_end(hr, h, 8, &n), DD_ERR_TIMEOUT);
    double took = ms_since(t0);
    CHECK_MSG(took >= 45 && took < 500, "timeout after %.1f ms (timeout_ms 50)", took);
    dd_recent_free(hr);
    close(fd);
}

/* Whether fetching (SCENE, USER) gives the hashes of WANT[0..n) in that
 * order. */
static int fetched_in_order(dd_recent *r, const char *scene, const char *user,
                            const char *const *want, size_t nwant)
{
    uint64_t h[256];
    size_t n = 0;
    int rc = dd_recent_fetch(r, scene, strlen(scene), user, strlen(user), h, 256, &n);
    if (rc != DD_OK || n != nwant) {
        fprintf(stderr, "fetch %s: rc %d, %zu items, want %zu\n", user, rc, n, nwant);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (h[i] != dd_hash(want[i], strlen(want[i]))) {
            fprintf(stderr, "fetch %s: item %zu is not %s\n", user, i, want[i]);
            return 0;
        }
    return 1;
}

/* Deliveries within one millisecond keep their order: 150 ids in batches
 * of 10, all with the same delivered_at_ms, leave exactly the last 100,
 * fetched newest first, although their names sort the other way (Redis
 * orders equal scores by member bytes, so with bare at_ms scores the trim
 * kept the 100 oldest). A second client (another worker or node) in the
 * same millisecond continues the order. Sets written with bare at_ms
 * scores still read, their ids older than any new one. */
static void test_same_ms(const struct redis *rs, const char *addr)
{
    dd_recent *r = client(addr, NULL, 100, 3600, 1000);
    dd_recent *r2 = client(addr, NULL, 100, 3600, 1000);
    static char names[150][16];
    const char *ids[150];
    for (int i = 0; i < 150; i++) {
        snprintf(names[i], sizeof names[i], "id-%03d", 999 - i);
        ids[i] = names[i];
    }
    uint32_t sz = 0;
    for (int b = 0; b < 15; b++)
        CHECK_EQ_INT(record_str(b % 2 ? r2 : r, "", "tie", ids + 10 * b, 10, 5000, &sz), DD_OK);
    CHECK_EQ_INT(sz, 100);
    const char *want[100];
    for (int i = 0; i < 100; i++) want[i] = ids[149 - i];
    CHECK(fetched_in_order(r, "", "tie", want, 100));

    /* An old-format set: bare millisecond scores. */
    redisContext *c = raw(rs);
    redisReply *rep = redisCommand(c, "ZADD dr:3{old} 7000 o1 7001 o2");
    REQUIRE(rep && rep->type == REDIS_REPLY_INTEGER);
    freeReplyObject(rep);
    const char *fresh[] = {"n1", "n2"};
    const char *want_old[] = {"n2", "n1", "o2", "o1"};
    CHECK(fetch_is(r, "", "old", want_old + 2, 2));
    CHECK_EQ_INT(record_str(r, "", "old", fresh, 2, 8000, &sz), DD_OK);
    CHECK_EQ_INT(sz, 4);
    CHECK(fetched_in_order(r, "", "old", want_old, 4));
    redisFree(c);
    dd_recent_free(r);
    dd_recent_free(r2);
}

int main(void)
{
    static struct redis rs;
    char addr[64];

    signal(SIGPIPE, SIG_IGN);
    test_bad_config();
    redis_exe = find_redis();
    if (!redis_exe) {
        fprintf(stderr, "redis-server is not installed\n");
        return getenv("CI") ? 1 : 77;
    }
    atexit(cleanup);
    redis_new(&rs, NULL);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", rs.port);

    test_basic(&rs, addr);
    test_auth();
    test_hang(&rs);
    test_outage(&rs, addr);
    test_split_fetch(&rs, addr);
    test_same_ms(&rs, addr);
    TEST_MAIN_END();
}
