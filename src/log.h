/* SPDX-License-Identifier: Apache-2.0
 *
 * log.h - leveled, one-line-per-event logging with key=value fields.
 *
 *   ts=2026-11-22T06:30:01.123Z level=warn module=ingest msg="bad message" partition=3 offset=42
 *
 * Lines go to stderr (journald) unless dd_log_open_file() was called; the
 * file is reopened by dd_log_reopen() (main calls it on SIGHUP, for
 * logrotate). Every function here is thread-safe and cannot fail: a log
 * line that cannot be written is dropped.
 */
#ifndef DD_LOG_H
#define DD_LOG_H

#include <stddef.h>
#include <stdint.h>

enum dd_log_level {
    DD_LOG_DEBUG = 0,
    DD_LOG_INFO = 1,
    DD_LOG_WARN = 2,
    DD_LOG_ERROR = 3,
};

/* Parse "debug", "info", "warn" or "error". Returns the level, or -1. */
int dd_log_level_parse(const char *s);
void dd_log_set_level(enum dd_log_level level);
int dd_log_enabled(enum dd_log_level level);

/* Send lines to PATH (appended, created 0640, with every missing parent
 * directory). Returns 0, or DD_ERR_IO with the reason in errbuf; on error
 * the previous destination is kept. */
int dd_log_open_file(const char *path, char *errbuf, size_t errlen);
/* Reopen the file given to dd_log_open_file (after a rename by logrotate).
 * A no-op when logging to stderr. Returns 0 or DD_ERR_IO. */
int dd_log_reopen(void);

/* Write one line. MODULE is a short word; FMT produces the rest of the line
 * after module=, normally msg="..." followed by key=value fields. */
void dd_log(enum dd_log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Rate limiting for repeated errors: a caller keeps one dd_log_limit per
 * kind of event (zero-initialised, usually static). dd_log_limited() logs at
 * most one line per interval_ms and appends suppressed=N to it, N being the
 * lines dropped since the last one written. */
struct dd_log_limit {
    int64_t last_ns;     /* monotonic time of the last line written */
    uint64_t suppressed; /* lines dropped since then */
};
void dd_log_limited(struct dd_log_limit *lim, int64_t interval_ms, enum dd_log_level level,
                    const char *module, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define dd_debug(mod, ...) \
    do { \
        if (dd_log_enabled(DD_LOG_DEBUG)) dd_log(DD_LOG_DEBUG, mod, __VA_ARGS__); \
    } while (0)
#define dd_info(mod, ...) dd_log(DD_LOG_INFO, mod, __VA_ARGS__)
#define dd_warn(mod, ...) dd_log(DD_LOG_WARN, mod, __VA_ARGS__)
#define dd_error(mod, ...) dd_log(DD_LOG_ERROR, mod, __VA_ARGS__)

#endif
