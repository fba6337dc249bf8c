/* SPDX-License-Identifier: Apache-2.0
 *
 * test_log.c - log.h: level names, the line format, the level filter,
 * control bytes replaced so one event stays one line, long lines cut with
 * their newline kept, rate-limited lines carrying suppressed=N, a file
 * that cannot be opened leaving the destination as it was, and reopen
 * after a rename (logrotate's way).
 */
#include "dd.h"
#include "log.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[128];

/* The whole file at PATH as a malloc'd string ("" when missing). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t cap = 1 << 16, len = 0;
    char *buf = calloc(1, cap);
    REQUIRE(buf);
    if (!f) return buf;
    len = fread(buf, 1, cap - 1, f);
    buf[len] = '\0';
    fclose(f);
    return buf;
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void test_levels(void)
{
    CHECK_EQ_INT(dd_log_level_parse("debug"), DD_LOG_DEBUG);
    CHECK_EQ_INT(dd_log_level_parse("info"), DD_LOG_INFO);
    CHECK_EQ_INT(dd_log_level_parse("warn"), DD_LOG_WARN);
    CHECK_EQ_INT(dd_log_level_parse("warning"), DD_LOG_WARN);
    CHECK_EQ_INT(dd_log_level_parse("error"), DD_LOG_ERROR);
    CHECK_EQ_INT(dd_log_level_parse("INFO"), -1);
    CHECK_EQ_INT(dd_log_level_parse(""), -1);
    dd_log_set_level(DD_LOG_WARN);
    CHECK(!dd_log_enabled(DD_LOG_INFO));
    CHECK(dd_log_enabled(DD_LOG_WARN));
    CHECK(dd_log_enabled(DD_LOG_ERROR));
    dd_log_set_level(DD_LOG_INFO);
}

static void test_file_lines(void)
{
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/a.log", dir);
    REQUIRE(dd_log_open_file(path, err, sizeof err) == DD_OK);
    dd_log_set_level(DD_LOG_INFO);
    dd_debug("test", "msg=hidden");
    dd_info("test", "msg=\"hello\" n=%d", 42);
    dd_warn("test", "msg=\"bad id\" id=%s", "a\nts=forged\x7f");
    char *s = slurp(path);
    CHECK_EQ_INT(count_lines(s), 2);
    CHECK(strncmp(s, "ts=", 3) == 0);
    /* ts=YYYY-MM-DDTHH:MM:SS.mmmZ */
    CHECK(strlen(s) > 27 && s[7] == '-' && s[13] == 'T' && s[22] == '.' && s[26] == 'Z');
    CHECK(strstr(s, " level=info module=test msg=\"hello\" n=42\n") != NULL);
    CHECK(strstr(s, " level=warn module=test msg=\"bad id\" id=a?ts=forged?\n") != NULL);
    CHECK(strstr(s, "hidden") == NULL);
    free(s);

    /* A line longer than the buffer is cut and still ends the line. */
    char *big = malloc(5000);
    REQUIRE(big);
    memset(big, 'x', 4999);
    big[4999] = '\0';
    dd_info("test", "msg=big v=%s", big);
    dd_info("test", "msg=after");
    free(big);
    s = slurp(path);
    CHECK_EQ_INT(count_lines(s), 4);
    const char *last = strstr(s, "msg=after\n");
    CHECK(last != NULL);
    const char *bigline = strstr(s, "msg=big");
    CHECK(bigline && strchr(bigline, '\n') - bigline < 2048);
    free(s);
}

static void test_open_failure_keeps_file(void)
{
    char path[256], bad[256], err[256] = "";
    snprintf(path, sizeof path, "%s/a.log", dir);
    /* Missing directories are made; a file in the way is an error. */
    snprintf(bad, sizeof bad, "%s/missing/dir/b.log", dir);
    CHECK_EQ_INT(dd_log_open_file(bad, err, sizeof err), DD_OK);
    CHECK(access(bad, F_OK) == 0);
    CHECK_EQ_INT(dd_log_open_file(path, err, sizeof err), DD_OK); /* back to a.log */
    snprintf(bad, sizeof bad, "%s/plain", dir);
    FILE *pf = fopen(bad, "w");
    REQUIRE(pf != NULL);
    fclose(pf);
    snprintf(bad, sizeof bad, "%s/plain/dir/b.log", dir);
    CHECK_EQ_INT(dd_log_open_file(bad, err, sizeof err), DD_ERR_IO);
    CHECK(strstr(err, "cannot open log file") != NULL);
    CHECK(strstr(err, bad) != NULL);
    char *before = slurp(path);
    size_t n = count_lines(before);
    free(before);
    dd_info("test", "msg=still_here");
    char *s = slurp(path);
    CHECK_EQ_INT(count_lines(s), n + 1);
    CHECK(strstr(s, "msg=still_here") != NULL);
    free(s);
}

static void test_reopen(void)
{
    char path[256], rotated[256];
    snprintf(path, sizeof path, "%s/a.log", dir);
    snprintf(rotated, sizeof rotated, "%s/a.log.1", dir);
    REQUIRE(rename(path, rotated) == 0);
    dd_info("test", "msg=to_rotated");
    CHECK_EQ_INT(dd_log_reopen(), DD_OK);
    dd_info("test", "msg=to_new");
    char *old = slurp(rotated), *cur = slurp(path);
    CHECK(strstr(old, "msg=to_rotated") != NULL);
    CHECK(strstr(old, "msg=to_new") == NULL);
    CHECK(strstr(cur, "msg=to_new") != NULL);
    CHECK_EQ_INT(count_lines(cur), 1);
    free(old);
    free(cur);
}

static void test_limited(void)
{
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/limited.log", dir);
    REQUIRE(dd_log_open_file(path, err, sizeof err) == DD_OK);
    struct dd_log_limit lim = {0};
    for (int i = 0; i < 5; i++)
        dd_log_limited(&lim, 60000, DD_LOG_WARN, "test", "msg=repeat i=%d", i);
    char *s = slurp(path);
    CHECK_EQ_INT(count_lines(s), 1);
    CHECK(strstr(s, "msg=repeat i=0\n") != NULL);
    free(s);
    CHECK_EQ_INT(lim.suppressed, 4);
    /* Once the interval has passed the next line carries the count. */
    lim.last_ns -= INT64_C(61000) * 1000000;
    dd_log_limited(&lim, 60000, DD_LOG_WARN, "test", "msg=repeat i=%d", 5);
    s = slurp(path);
    CHECK_EQ_INT(count_lines(s), 2);
    CHECK(strstr(s, "msg=repeat i=5 suppressed=4\n") != NULL);
    free(s);
    CHECK_EQ_INT(lim.suppressed, 0);
    /* Below the level: neither written nor counted. */
    dd_log_set_level(DD_LOG_ERROR);
    dd_log_limited(&lim, 0, DD_LOG_WARN, "test", "msg=quiet");
    dd_log_set_level(DD_LOG_INFO);
    CHECK_EQ_INT(lim.suppressed, 0);
    s = slurp(path);
    CHECK(strstr(s, "quiet") == NULL);
    free(s);
}

int main(void)
{
    tl_tmpdir(dir, sizeof dir, "log");
    test_levels();
    test_file_lines();
    test_open_failure_keeps_file();
    test_reopen();
    test_limited();
    tl_rm_tree(dir);
    TEST_MAIN_END();
}
