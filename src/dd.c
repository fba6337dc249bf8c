/* SPDX-License-Identifier: Apache-2.0
 *
 * dd.c - error strings, the item hash and clocks shared by every module.
 */
#include "dd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

const char *dd_strerror(int err)
{
    switch (err) {
    case DD_OK: return "ok";
    case DD_ERR_NOMEM: return "out of memory";
    case DD_ERR_INVALID: return "invalid argument";
    case DD_ERR_IO: return "i/o error";
    case DD_ERR_CORRUPT: return "corrupt data";
    case DD_ERR_UNAVAILABLE: return "unavailable";
    case DD_ERR_TIMEOUT: return "timed out";
    case DD_ERR_NOTFOUND: return "not found";
    case DD_ERR_LIMIT: return "limit exceeded";
    case DD_ERR_STATE: return "wrong state";
    }
    return "unknown error";
}

static void vset_err(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
}

void dd_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset_err(err, errlen, fmt, ap);
    va_end(ap);
}

int dd_fail(int code, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset_err(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

uint64_t dd_hash(const void *data, size_t len)
{
    return XXH3_64bits_withSeed(data, len, DD_HASH_SEED);
}

int64_t dd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dd_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void dd_sleep_ms(int64_t ms)
{
    if (ms <= 0) return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

char *dd_read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        dd_fail(DD_ERR_INVALID, err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            size_t ncap = cap ? cap * 2 : 8192;
            char *n = realloc(buf, ncap);
            if (!n) {
                dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory reading %s", path);
                goto bad;
            }
            buf = n;
            cap = ncap;
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        len += r;
        if (r == 0) break;
    }
    if (ferror(f)) {
        dd_fail(DD_ERR_INVALID, err, errlen, "cannot read %s", path);
        goto bad;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
bad:
    free(buf);
    fclose(f);
    return NULL;
}

/* The length of byte C escaped by dd_sanitize. */
static size_t escaped_len(unsigned char c)
{
    return c == '"' || c == '\\' ? 2 : c >= 0x20 && c < 0x7f ? 1 : 4;
}

char *dd_sanitize(char *out, size_t outlen, const char *in, size_t inlen)
{
    static const char hex[] = "0123456789abcdef";
    if (!outlen) return out;
    /* Whether all of IN fits; if not, room is kept for "..." at the end. */
    size_t need = 0;
    for (size_t i = 0; i < inlen && need < outlen; i++) need += escaped_len((unsigned char)in[i]);
    size_t room = need < outlen ? outlen - 1 : outlen - 1 < 3 ? 0 : outlen - 1 - 3;
    size_t n = 0;
    for (size_t i = 0; i < inlen; i++) {
        unsigned char c = (unsigned char)in[i];
        if (n + escaped_len(c) > room) break;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c >= 0x20 && c < 0x7f) {
            out[n++] = (char)c;
        } else {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    if (need >= outlen) {
        size_t dots = outlen - 1 - n < 3 ? outlen - 1 - n : 3;
        memcpy(out + n, "...", dots);
        n += dots;
    }
    out[n] = '\0';
    return out;
}
