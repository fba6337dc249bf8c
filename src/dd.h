/* SPDX-License-Identifier: Apache-2.0
 *
 * dd.h - things every dedupd module shares: the error codes that functions
 * return, and the one hash that turns an item id into what every layer
 * passes on. Nothing here allocates or does I/O.
 */
#ifndef DD_H
#define DD_H

#include <stddef.h>
#include <stdint.h>

/* Functions return 0 on success or one of these (negative). Detail, when
 * there is any, is in the handle's errstr or a caller-provided buffer. */
enum dd_err {
    DD_OK = 0,
    DD_ERR_NOMEM = -1,       /* an allocation failed */
    DD_ERR_INVALID = -2,     /* bad argument or input */
    DD_ERR_IO = -3,          /* the storage engine or a file failed */
    DD_ERR_CORRUPT = -4,     /* stored bytes failed their version or checksum */
    DD_ERR_UNAVAILABLE = -5, /* a server (Redis, Kafka) could not be reached */
    DD_ERR_TIMEOUT = -6,     /* a deadline passed */
    DD_ERR_NOTFOUND = -7,    /* no such thing */
    DD_ERR_LIMIT = -8,       /* a configured bound would be exceeded */
    DD_ERR_STATE = -9,       /* called at the wrong time (closed, shutting down) */
};

/* Static, never NULL, for any int (unknown codes give "unknown error"). */
const char *dd_strerror(int err);

/* Write a printf-style message into ERR (ERRLEN bytes, always terminated;
 * nothing when ERR is NULL or ERRLEN is 0). dd_fail does the same and
 * returns CODE, so an error path is one line:
 *   return dd_fail(DD_ERR_IO, err, errlen, "cannot open %s", path);
 * Neither can fail. */
void dd_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int dd_fail(int code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Text from outside this process (a peer's or client's string, a grpc
 * status message) made safe for a log line, /readyz, JSON or a metrics
 * label: IN[0..INLEN) copied into OUT (OUTLEN bytes, always terminated
 * when OUTLEN > 0) as printable ASCII only: '"' and '\\' are escaped with
 * a backslash, every other byte outside 0x20..0x7e becomes \xNN, and text
 * that does not fit ends in "..." (whole escapes only). Returns OUT.
 * Cannot fail. */
char *dd_sanitize(char *out, size_t outlen, const char *in, size_t inlen);

/* The whole of the file PATH (a key, a certificate), NUL-terminated, in
 * a malloc'd buffer the caller frees. NULL on error, with a message naming
 * PATH in err: it cannot be opened or read (code DD_ERR_INVALID) or memory
 * ran out. */
char *dd_read_file(const char *path, char *err, size_t errlen);

/* The item hash: XXH3-64 with DD_HASH_SEED. The function and seed are part
 * of the on-disk format (see bloom.h); changing either needs a format
 * version bump. This function cannot fail. */
#define DD_HASH_SEED UINT64_C(0x6464757064683031) /* "ddupdh01" */
uint64_t dd_hash(const void *data, size_t len);

/* Wall clock in milliseconds since the epoch. */
int64_t dd_now_ms(void);
/* Monotonic clock in nanoseconds, for durations and deadlines. */
int64_t dd_mono_ns(void);
/* Sleep MS milliseconds (<= 0: not at all), resumed across signals. */
void dd_sleep_ms(int64_t ms);

/* One key = value of a pass-through section ([kafka], [rocksdb]), in file
 * order; handed to librdkafka / RocksDB as is. Owned by struct dd_config. */
struct dd_config_kv {
    char *key; /* without the section, e.g. "bootstrap.servers" */
    char *value;
};

struct dd_config_list {
    struct dd_config_kv *items;
    size_t len, cap;
};

#define DD_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define DD_MS_PER_DAY INT64_C(86400000)

#endif
