/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_redis_reply.c - recent.c's own reply functions for ZREVRANGE
 * replies (dd_recent_reply_parse: hiredis' reader with them swapped in)
 * against hiredis' reader with its own functions on the same bytes: the
 * same outcome (a reply, more bytes needed, a protocol error), the same
 * top-level type, and, for every string element at any depth in order,
 * the same hashes.
 */
#include "fuzz.h"

#include "dd.h"
#include "recent_reply.h"

#include <hiredis/hiredis.h>

#define CAP 64

/* Append the hashes of R's string elements (below the top), depth first. */
static void collect(const redisReply *r, int top, uint64_t *h, size_t *n)
{
    if (!top && r->type == REDIS_REPLY_STRING) {
        if (*n < CAP) h[*n] = dd_hash(r->str, r->len);
        (*n)++;
    }
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) collect(r->element[i], 0, h, n);
}

/* Whether some '*' in DATA is followed by a count over 4096. hiredis
 * 0.14's own reader allocates an array's element pointers up front, so
 * "*666666661" would have the oracle (not recent.c's functions, which
 * allocate nothing) ask for gigabytes: such inputs are parsed by ours only.
 * Any '*', not only one at a line's start: hiredis does not check the CRLF
 * after a bulk string, so a header can follow one mid-line. */
static int huge_array(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        if (data[i] != '*') continue;
        unsigned long long v = 0;
        size_t j = i + 1;
        if (j < size && data[j] == '-') continue;
        for (; j < size && data[j] >= '0' && data[j] <= '9' && v <= 4096; j++)
            v = v * 10 + (data[j] - '0');
        if (v > 4096) return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t got[CAP], want[CAP];
    size_t n = 0, nwant = 0;
    int type = 0;
    int rc = dd_recent_reply_parse(data, size, got, CAP, &n, &type);
    FUZZ_CHECK(rc != DD_ERR_NOMEM);
    if (huge_array(data, size)) return 0;

    redisReader *rd = redisReaderCreate();
    FUZZ_CHECK(rd);
    void *rep = NULL;
    int hr = redisReaderFeed(rd, (const char *)data, size);
    if (hr == REDIS_OK) hr = redisReaderGetReply(rd, &rep);
    if (hr != REDIS_OK) {
        FUZZ_CHECK(rc == DD_ERR_INVALID);
    } else if (!rep) {
        FUZZ_CHECK(rc == DD_ERR_STATE);
    } else {
        const redisReply *r = rep;
        FUZZ_CHECK(rc == DD_OK);
        FUZZ_CHECK(type == r->type);
        collect(r, 1, want, &nwant);
        FUZZ_CHECK(n == (nwant < CAP ? nwant : CAP));
        FUZZ_CHECK(memcmp(got, want, n * sizeof *got) == 0);
        freeReplyObject(rep);
    }
    redisReaderFree(rd);
    return 0;
}
