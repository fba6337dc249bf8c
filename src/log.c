/* SPDX-License-Identifier: Apache-2.0
 *
 * log.c - see log.h. A line is formatted into a stack buffer and written
 * with one write(2), so lines from different threads never interleave; the
 * mutex only guards the file descriptor against a concurrent reopen.
 */
#include "log.h"
#include "dd.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 2048

static atomic_int log_level = DD_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = STDERR_FILENO;
static char *log_path; /* NULL: stderr */

static const char *level_names[] = {"debug", "info", "warn", "error"};

int dd_log_level_parse(const char *s)
{
    for (size_t i = 0; i < DD_ARRAY_LEN(level_names); i++)
        if (strcmp(s, level_names[i]) == 0) return (int)i;
    if (strcmp(s, "warning") == 0) return DD_LOG_WARN;
    return -1;
}

void dd_log_set_level(enum dd_log_level level)
{
    atomic_store(&log_level, (int)level);
}

int dd_log_enabled(enum dd_log_level level)
{
    return (int)level >= atomic_load(&log_level);
}

static int open_log(const char *path, char *errbuf, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0 && errbuf)
        snprintf(errbuf, errlen, "cannot open log file %s: %s", path, strerror(errno));
    return fd;
}

int dd_log_open_file(const char *path, char *errbuf, size_t errlen)
{
    char e[300];
    if (dd_sys_mkdir_parents(path, e, sizeof e) != DD_OK) {
        if (errbuf) snprintf(errbuf, errlen, "cannot open log file %s: %s", path, e);
        return DD_ERR_IO;
    }
    int fd = open_log(path, errbuf, errlen);
    if (fd < 0) return DD_ERR_IO;
    char *copy = strdup(path);
    if (!copy) {
        close(fd);
        if (errbuf) snprintf(errbuf, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    pthread_mutex_lock(&log_lock);
    if (log_fd != STDERR_FILENO) close(log_fd);
    free(log_path);
    log_fd = fd;
    log_path = copy;
    pthread_mutex_unlock(&log_lock);
    return DD_OK;
}

int dd_log_reopen(void)
{
    int rc = DD_OK;
    pthread_mutex_lock(&log_lock);
    if (log_path) {
        int fd = open_log(log_path, NULL, 0);
        if (fd >= 0) {
            close(log_fd);
            log_fd = fd;
        } else {
            rc = DD_ERR_IO; /* keep writing to the old file rather than lose lines */
        }
    }
    pthread_mutex_unlock(&log_lock);
    return rc;
}

static void vlog(enum dd_log_level level, const char *module, uint64_t suppressed, const char *fmt,
                 va_list ap)
{
    char line[LINE_MAX_BYTES];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n =
        snprintf(line, sizeof line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s module=%s ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000, level_names[level], module);
    if (n < 0) return;
    size_t len = (size_t)n;
    if (len < sizeof line) {
        int m = vsnprintf(line + len, sizeof line - len, fmt, ap);
        if (m > 0) len += (size_t)m;
    }
    if (suppressed && len < sizeof line) {
        int m = snprintf(line + len, sizeof line - len, " suppressed=%llu",
                         (unsigned long long)suppressed);
        if (m > 0) len += (size_t)m;
    }
    if (len > sizeof line - 2) len = sizeof line - 2; /* truncated: keep room for \n */
    /* One event, one line: a field that carries a newline or another
     * control byte (an id from a bad Kafka message, say) cannot split the
     * line or inject a forged one. */
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f) line[i] = '?';
    line[len++] = '\n';
    pthread_mutex_lock(&log_lock);
    ssize_t w = write(log_fd, line, len);
    pthread_mutex_unlock(&log_lock);
    (void)w; /* nowhere to report a failed log write */
}

void dd_log(enum dd_log_level level, const char *module, const char *fmt, ...)
{
    if (!dd_log_enabled(level)) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, module, 0, fmt, ap);
    va_end(ap);
}

void dd_log_limited(struct dd_log_limit *lim, int64_t interval_ms, enum dd_log_level level,
                    const char *module, const char *fmt, ...)
{
    if (!dd_log_enabled(level)) return;
    static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;
    int64_t now = dd_mono_ns();
    uint64_t suppressed;
    pthread_mutex_lock(&limit_lock);
    if (lim->last_ns != 0 && now - lim->last_ns < interval_ms * 1000000) {
        lim->suppressed++;
        pthread_mutex_unlock(&limit_lock);
        return;
    }
    lim->last_ns = now;
    suppressed = lim->suppressed;
    lim->suppressed = 0;
    pthread_mutex_unlock(&limit_lock);
    va_list ap;
    va_start(ap, fmt);
    vlog(level, module, suppressed, fmt, ap);
    va_end(ap);
}
