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
#include <ftw.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

/* A loopback port with nothing listening: bind, read the port, close. */
static inline int tl_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    REQUIRE(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    socklen_t len = sizeof a;
    REQUIRE(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
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
