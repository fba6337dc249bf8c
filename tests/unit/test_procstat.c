/* SPDX-License-Identifier: Apache-2.0
 *
 * test_procstat.c - the process_* figures (src/procstat.h): a
 * /proc/PID/stat line whose command name holds spaces and parentheses is
 * read at the right fields, truncated or malformed lines are refused, and
 * this process's own figures are all read and plausible (a descriptor
 * opened here is counted).
 */
#include "dd.h"
#include "procstat.h"
#include "testlib.h"

#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void test_parse(void)
{
    /* fields 3..24: state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime(14) stime(15) cutime cstime priority nice
     * num_threads itrealvalue starttime(22) vsize(23) rss(24) ... */
    const char *line = "1234 (a) (b c) S 1 2 3 4 5 6 7 8 9 10 150 25 11 12 20 0 3 0 "
                       "987654 123456789 4321 18446744073709551615 1 2\n";
    uint64_t cpu = 0, start = 0, vsize = 0, rss = 0;
    CHECK_EQ_INT(dd_procstat_parse_stat(line, strlen(line), &cpu, &start, &vsize, &rss), 0);
    CHECK_EQ_INT(cpu, 175);
    CHECK_EQ_INT(start, 987654);
    CHECK_EQ_INT(vsize, 123456789);
    CHECK_EQ_INT(rss, 4321);
    const char *bad[] = {
        "",
        "1234 no parenthesis S 1 2",
        "1234 (a) S 1 2 3 4 5 6 7 8 9 10 150",                              /* cut after utime */
        "1234 (a) S 1 2 3 4 5 6 7 8 9 10 x 25 11 12 20 0 3 0 9 9 9",        /* utime not a number */
        "1234 (a) S 1 2 3 4 5 6 7 8 9 10 150 25 11 12 20 0 3 0 987654 123", /* no rss */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(dd_procstat_parse_stat(bad[i], strlen(bad[i]), &cpu, &start, &vsize, &rss) != 0,
                  "accepted: %s", bad[i]);
}

static void test_self(void)
{
    struct dd_procstat a, b;
    dd_procstat_read(&a);
    unsigned all =
        DD_PROCSTAT_CPU | DD_PROCSTAT_MEM | DD_PROCSTAT_START | DD_PROCSTAT_FDS | DD_PROCSTAT_MAXFD;
    CHECK_EQ_INT(a.have, all);
    CHECK(a.resident_bytes > 0 && a.resident_bytes < a.virtual_bytes);
    CHECK(a.open_fds >= 3 && a.open_fds < a.max_fds);
    double now = (double)time(NULL);
    CHECK_MSG(a.start_time_seconds > now - 600 && a.start_time_seconds <= now + 1,
              "start %f now %f", a.start_time_seconds, now);
    CHECK(a.cpu_seconds >= 0);
    int fd = open("/dev/null", O_RDONLY);
    dd_procstat_read(&b);
    CHECK_EQ_INT(b.open_fds, a.open_fds + 1);
    close(fd);
}

int main(void)
{
    test_parse();
    test_self();
    TEST_MAIN_END();
}
