/* SPDX-License-Identifier: Apache-2.0
 *
 * testlib.h - the few macros unit tests use. A failed CHECK prints where and
 * why and marks the test failed; the test goes on so one run shows every
 * failure. TEST_MAIN_END returns meson's exit code (0 pass, 1 fail).
 */
#ifndef DD_TESTLIB_H
#define DD_TESTLIB_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tl_failures;
static int tl_checks;

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

/* Remove PATH and everything below it (a test's temporary directory). */
static inline void tl_rm_tree(const char *path)
{
    nftw(path, tl_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#define TEST_MAIN_END() do { \
    fprintf(stderr, "%d checks, %d failed\n", tl_checks, tl_failures); \
    return tl_failures ? 1 : 0; } while (0)

#endif
