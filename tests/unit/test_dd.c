/* SPDX-License-Identifier: Apache-2.0
 *
 * test_dd.c - dd.h: every error code has its own message, dd_fail and
 * dd_set_err write a terminated message however small the buffer and
 * return the code, dd_hash is XXH3-64 with DD_HASH_SEED and gives the
 * values stored filters were written with (they are part of the on-disk
 * format: a change here fails this test before it corrupts a store), and
 * the clocks move the right way.
 */
#include "dd.h"
#include "testlib.h"

#include <string.h>
#include <time.h>
#include <xxhash.h>

static void test_strerror(void)
{
    const int codes[] = {DD_OK, DD_ERR_NOMEM, DD_ERR_INVALID, DD_ERR_IO, DD_ERR_CORRUPT,
                         DD_ERR_UNAVAILABLE, DD_ERR_TIMEOUT, DD_ERR_NOTFOUND, DD_ERR_LIMIT,
                         DD_ERR_STATE};
    for (size_t i = 0; i < DD_ARRAY_LEN(codes); i++) {
        const char *s = dd_strerror(codes[i]);
        CHECK(s != NULL && s[0] != '\0');
        CHECK(strcmp(s, "unknown error") != 0);
        for (size_t j = 0; j < i; j++) CHECK(strcmp(s, dd_strerror(codes[j])) != 0);
    }
    CHECK_STR(dd_strerror(DD_ERR_NOMEM), "out of memory");
    CHECK_STR(dd_strerror(-100), "unknown error");
    CHECK_STR(dd_strerror(7), "unknown error");
}

static void test_fail(void)
{
    char err[16];
    memset(err, 'z', sizeof err);
    CHECK_EQ_INT(dd_fail(DD_ERR_IO, err, sizeof err, "cannot open %s", "/some/long/path"),
                 DD_ERR_IO);
    CHECK_STR(err, "cannot open /so");  /* cut to fit, terminated */
    dd_set_err(err, sizeof err, "n=%d", 7);
    CHECK_STR(err, "n=7");
    /* No buffer: nothing written, the code still returned. */
    CHECK_EQ_INT(dd_fail(DD_ERR_LIMIT, NULL, 0, "x"), DD_ERR_LIMIT);
    err[0] = 'q';
    dd_set_err(err, 0, "y");
    CHECK(err[0] == 'q');
}

static void test_hash(void)
{
    /* Golden values: the format (bloom.h) depends on them. */
    CHECK(dd_hash("", 0) == UINT64_C(0xe76610285badee06));
    CHECK(dd_hash("abc", 3) == UINT64_C(0x0d99f1f373032051));
    CHECK(dd_hash("video:123456", 12) == UINT64_C(0x6684a2f4ff9772b7));
    /* Bytes, not C strings: a NUL inside counts. */
    CHECK(dd_hash("a\0b", 3) != dd_hash("a", 1));
    CHECK(dd_hash("a\0b", 3) == XXH3_64bits_withSeed("a\0b", 3, DD_HASH_SEED));
}

static void test_clocks(void)
{
    int64_t wall = dd_now_ms();
    int64_t sys = (int64_t)time(NULL) * 1000;
    CHECK(wall >= sys - 2000 && wall <= sys + 2000);
    int64_t a = dd_mono_ns();
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    int64_t b = dd_mono_ns();
    CHECK(b - a >= 2000000);
}

/* Outside text made safe for a log line or /readyz: printable ASCII,
 * quotes and backslashes escaped, other bytes as \xNN, bounded. */
static void test_sanitize(void)
{
    char out[64];
    CHECK_STR(dd_sanitize(out, sizeof out, "abc", 3), "abc");
    CHECK_STR(dd_sanitize(out, sizeof out, "a\nb\"c\\", 6), "a\\x0ab\\\"c\\\\");
    CHECK_STR(dd_sanitize(out, sizeof out, "\x1b[2J\x00\x7f\xff", 7), "\\x1b[2J\\x00\\x7f\\xff");
    CHECK_STR(dd_sanitize(out, sizeof out, "", 0), "");
    /* Long input: cut with "...", never a half escape, always terminated. */
    char in[300];
    memset(in, '\n', sizeof in);
    dd_sanitize(out, sizeof out, in, sizeof in);
    CHECK(strlen(out) < sizeof out);
    CHECK(strcmp(out + strlen(out) - 3, "...") == 0);
    CHECK((strlen(out) - 3) % 4 == 0);
    for (const char *p = out; *p; p++) CHECK(*p >= 0x20 && *p < 0x7f);
    memset(in, 'x', sizeof in);
    dd_sanitize(out, 8, in, sizeof in);
    CHECK_STR(out, "xxxx...");
    CHECK_STR(dd_sanitize(out, 4, "abc", 3), "abc");
    CHECK_STR(dd_sanitize(out, 1, "abc", 3), "");
}

int main(void)
{
    test_sanitize();
    test_strerror();
    test_fail();
    test_hash();
    test_clocks();
    TEST_MAIN_END();
}
