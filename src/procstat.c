/* SPDX-License-Identifier: Apache-2.0
 *
 * procstat.c - see procstat.h.
 */
#include "procstat.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Read up to CAP - 1 bytes of PATH into BUF (NUL-terminated). Returns the
 * length, or -1. */
static long read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return (long)n;
}

/* The next space-separated unsigned decimal field at *P; advances *P. */
static int next_u64(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    while (s < end && *s == ' ') s++;
    if (s >= end || *s < '0' || *s > '9') return -1;
    uint64_t v = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        if (v > (UINT64_MAX - 9) / 10) return -1;
        v = v * 10 + (uint64_t)(*s - '0');
        s++;
    }
    *out = v;
    *p = s;
    return 0;
}

/* Skip one space-separated field (any text) at *P. */
static int skip_field(const char **p, const char *end)
{
    const char *s = *p;
    while (s < end && *s == ' ') s++;
    if (s >= end) return -1;
    while (s < end && *s != ' ') s++;
    *p = s;
    return 0;
}

int dd_procstat_parse_stat(const char *text, uint64_t len, uint64_t *cpu_ticks,
                           uint64_t *start_ticks, uint64_t *vsize, uint64_t *rss_pages)
{
    const char *end = text + len;
    /* Field 2 (comm) is in parentheses and may hold anything: the fields
     * after it start after its last ')'. */
    const char *p = NULL;
    for (const char *s = text; s < end; s++)
        if (*s == ')') p = s + 1;
    if (!p) return -1;
    /* p is before field 3 (state). Fields 3..13 are skipped, 14 utime,
     * 15 stime, 16..21 skipped, 22 starttime, 23 vsize, 24 rss. */
    uint64_t utime, stime, v;
    for (int f = 3; f <= 13; f++)
        if (skip_field(&p, end) != 0) return -1;
    if (next_u64(&p, end, &utime) != 0 || next_u64(&p, end, &stime) != 0) return -1;
    for (int f = 16; f <= 21; f++)
        if (skip_field(&p, end) != 0) return -1;
    if (next_u64(&p, end, start_ticks) != 0 || next_u64(&p, end, vsize) != 0) return -1;
    /* rss is signed in the kernel's format; a negative one is not read. */
    if (next_u64(&p, end, &v) != 0) return -1;
    *rss_pages = v;
    *cpu_ticks = utime + stime;
    return 0;
}

/* The boot time, seconds since the epoch ("btime" of /proc/stat), or 0.
 * Read a piece at a time: the "intr" line before it can be long. */
static uint64_t boot_time(void)
{
    FILE *f = fopen("/proc/stat", "re");
    if (!f) return 0;
    char line[256];
    bool at_start = true; /* LINE starts a line of the file */
    uint64_t v = 0;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (at_start && strncmp(line, "btime ", 6) == 0) {
            const char *b = line + 6;
            if (next_u64(&b, line + n, &v) != 0) v = 0;
            break;
        }
        at_start = n > 0 && line[n - 1] == '\n';
    }
    fclose(f);
    return v;
}

void dd_procstat_read(struct dd_procstat *out)
{
    memset(out, 0, sizeof *out);
    long ticks = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    char buf[1024];
    long n = read_small("/proc/self/stat", buf, sizeof buf);
    uint64_t cpu, start, vsize, rss;
    if (n > 0 && ticks > 0 && page > 0 &&
        dd_procstat_parse_stat(buf, (uint64_t)n, &cpu, &start, &vsize, &rss) == 0) {
        out->cpu_seconds = (double)cpu / (double)ticks;
        out->virtual_bytes = vsize;
        out->resident_bytes = rss * (uint64_t)page;
        out->have |= DD_PROCSTAT_CPU | DD_PROCSTAT_MEM;
        uint64_t bt = boot_time();
        if (bt) {
            out->start_time_seconds = (double)bt + (double)start / (double)ticks;
            out->have |= DD_PROCSTAT_START;
        }
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        uint64_t k = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (e->d_name[0] != '.') k++;
        closedir(d);
        /* the directory's own descriptor, open while it was read */
        out->open_fds = k > 0 ? k - 1 : 0;
        out->have |= DD_PROCSTAT_FDS;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        out->max_fds = (uint64_t)rl.rlim_cur;
        out->have |= DD_PROCSTAT_MAXFD;
    }
}
