/* SPDX-License-Identifier: Apache-2.0
 *
 * procstat.h - this process's resources as the operating system counts
 * them, for the standard process_* metric families every Prometheus
 * client library exports (process_cpu_seconds_total,
 * process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_open_fds, process_max_fds, process_start_time_seconds): read
 * from /proc/self/stat, /proc/stat (boot time), /proc/self/fd and
 * getrlimit, at the moment of the call.
 *
 * Linux only. Nothing is cached, nothing allocated; safe from any thread.
 */
#ifndef DD_PROCSTAT_H
#define DD_PROCSTAT_H

#include <stdint.h>

/* What dd_procstat_read could read: a field whose bit is not in HAVE is
 * unknown (its family is left out of /metrics, never given a sentinel). */
enum {
    DD_PROCSTAT_CPU = 1 << 0,   /* cpu_seconds */
    DD_PROCSTAT_MEM = 1 << 1,   /* resident_bytes, virtual_bytes */
    DD_PROCSTAT_START = 1 << 2, /* start_time_seconds */
    DD_PROCSTAT_FDS = 1 << 3,   /* open_fds */
    DD_PROCSTAT_MAXFD = 1 << 4, /* max_fds */
};

struct dd_procstat {
    unsigned have;             /* DD_PROCSTAT_* bits */
    double cpu_seconds;        /* user + system CPU time */
    uint64_t resident_bytes;   /* resident set size */
    uint64_t virtual_bytes;    /* virtual memory size */
    double start_time_seconds; /* process start, seconds since the Unix epoch */
    uint64_t open_fds;         /* open file descriptors */
    uint64_t max_fds;          /* RLIMIT_NOFILE's soft limit */
};

/* Fill OUT with what can be read now; OUT->have says what. Cannot fail
 * otherwise: an unreadable source leaves its bits out. */
void dd_procstat_read(struct dd_procstat *out);

/* The fields of a /proc/PID/stat line TEXT (LEN bytes; the command name
 * in parentheses may hold spaces and parentheses) that dd_procstat_read
 * takes: utime + stime and starttime in clock ticks, vsize in bytes, rss
 * in pages. Returns 0, or -1 if TEXT is not such a line. For tests. */
int dd_procstat_parse_stat(const char *text, uint64_t len, uint64_t *cpu_ticks,
                           uint64_t *start_ticks, uint64_t *vsize, uint64_t *rss_pages);

#endif
