/* SPDX-License-Identifier: Apache-2.0
 *
 * testlib.h - the few macros unit tests use. A failed CHECK prints where and
 * why and marks the test failed; the test goes on so one run shows every
 * failure. TEST_MAIN_END returns meson's exit code (0 pass, 1 fail).
 *
 * And the helpers tests (and a benchmark) had each copied: a temporary
 * directory's removal, a settable history clock, a loopback port with
 * nothing listening, and splitmix64 random numbers.
 */
#ifndef DD_TESTLIB_H
#define DD_TESTLIB_H

#include "dd.h"
#include "history.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TL_UNUSED __attribute__((unused))

static int tl_failures TL_UNUSED;
static int tl_checks TL_UNUSED;

#define CHECK(cond) do { tl_checks++; if (!(cond)) { tl_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { tl_checks++; if (!(cond)) { tl_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_EQ_INT(a, b) do { long long tl_a = (long long)(a), tl_b = (long long)(b); \
    tl_checks++; if (tl_a != tl_b) { tl_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__, __LINE__, \
            #a, #b, tl_a, tl_b); } } while (0)
#define CHECK_STR(a, b) do { const char *tl_a = (a), *tl_b = (b); tl_checks++; \
    if (!tl_a || !tl_b || strcmp(tl_a, tl_b) != 0) { tl_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s == %s (\"%s\" != \"%s\")\n", __FILE__, __LINE__, \
            #a, #b, tl_a ? tl_a : "(null)", tl_b ? tl_b : "(null)"); } } while (0)
/* Stop the test now (a precondition for the rest failed). */
#define REQUIRE(cond) do { tl_checks++; if (!(cond)) { \
    fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); exit(1); } } while (0)

static inline int tl_rm_entry(const char *path, const struct stat *sb, int flag,
                              struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Make a fresh directory "$TMPDIR/dd-test-NAME-XXXXXX" (TMPDIR unset or
 * empty: /tmp) into BUF (CAP bytes) and return BUF; stop the test if it
 * cannot be made. Remove it with tl_rm_tree. */
static inline char *tl_tmpdir(char *buf, size_t cap, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(buf, cap, "%s/dd-test-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    REQUIRE(n > 0 && (size_t)n < cap);
    REQUIRE(mkdtemp(buf) != NULL);
    return buf;
}

/* Remove PATH and everything below it (a test's temporary directory). */
static inline void tl_rm_tree(const char *path)
{
    nftw(path, tl_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The test clock: history's "now" is CLOCK_NOW (ms), which a test moves;
 * it starts at T0, day 20000 (2024-10-04) at noon: with 30-day segments,
 * segment 666 holds days 19980..20009, so "today" is mid-segment. Pass
 * &tclock to dd_history_open. */
#define DAY DD_MS_PER_DAY
#define T0 (INT64_C(20000) * DAY + DAY / 2)

static _Atomic int64_t clock_now TL_UNUSED = T0;
static inline int64_t test_clock(void *ud)
{
    (void)ud;
    return atomic_load(&clock_now);
}
static const struct dd_history_clock tclock TL_UNUSED = {test_clock, NULL};

/* A loopback port with nothing listening, reserved for this process until
 * it exits: taken below the kernel's ephemeral range (ip_local_port_range,
 * which bind(0) and connections' source ports draw from, so the port cannot
 * be taken by them before the test binds it) and claimed with flock(2) on a
 * file named after it in DD_TEST_PORT_DIR (default /tmp/dedupd-test-ports),
 * the scheme tests/integration/harness.py's free_port uses: two tests
 * running at once never get the same port. The lock's descriptor stays open
 * (close-on-exec) for the life of the process. */
static inline int tl_free_port(void)
{
    const char *dir = getenv("DD_TEST_PORT_DIR");
    if (dir == NULL || dir[0] == '\0')
        dir = "/tmp/dedupd-test-ports";
    if (mkdir(dir, 01777) == 0)
        (void)chmod(dir, 01777);
    int eph_lo = 32768, eph_hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d %d", &eph_lo, &eph_hi) != 2) {
            eph_lo = 32768;
            eph_hi = 60999;
        }
        fclose(f);
    }
    int lo, hi;
    if (eph_lo - 1 >= 20000 + 4096) {
        lo = 20000;
        hi = eph_lo - 1;
    } else {
        REQUIRE(65535 - eph_hi >= 4096);
        lo = eph_hi + 1;
        hi = 65535;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t mix = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec;
    mix = (mix ^ (mix >> 31)) * 0x9e3779b97f4a7c15ULL;
    int n = hi - lo + 1;
    int start = (int)(mix % (uint64_t)n);
    for (int i = 0; i < n; i++) {
        int port = lo + (start + i) % n;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%d", dir, port) >= (int)sizeof path)
            break;
        int lk = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (lk < 0)
            continue;
        if (flock(lk, LOCK_EX | LOCK_NB) != 0) {
            close(lk);
            continue;
        }
        /* Claimed; it must also be free (no SO_REUSEADDR: a port with
         * connections in TIME_WAIT is passed over too). */
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        REQUIRE(fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
        close(fd);
        if (rc != 0) {
            close(lk);
            continue;
        }
        return port; /* lk stays open: the reservation */
    }
    fprintf(stderr, "tl_free_port: no free port in %d-%d\n", lo, hi);
    exit(1);
}

/* splitmix64: the next number of the sequence in *STATE (each test keeps
 * its own state and seed). */
static inline uint64_t tl_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define TEST_MAIN_END() do { \
    fprintf(stderr, "%d checks, %d failed\n", tl_checks, tl_failures); \
    return tl_failures ? 1 : 0; } while (0)

#endif
