/* SPDX-License-Identifier: Apache-2.0
 *
 * recent_reply.h - a fetch's reply (ZREVRANGE's array of item ids) read
 * straight out of hiredis' read buffer: each member is hashed with
 * dd_hash where it lies and no reply object is built, where hiredis' own
 * reply functions would allocate a reply and a string per member on every
 * Filter call. recent.c reads its fetches with it; the fuzzer feeds it
 * hostile bytes.
 *
 * It knows nothing of keys, connections' lifetimes or what the ids mean.
 * Threads: as the redisContext it reads from (one thread at a time).
 */
#ifndef DD_RECENT_REPLY_H
#define DD_RECENT_REPLY_H

#include <stddef.h>
#include <stdint.h>

struct redisContext;

/* What a fetch reply's parse leaves: the hashes of its members (in the
 * caller's array) and the type of the reply (an error's text). */
struct dd_recent_reply {
    uint64_t *hashes; /* room for CAP hashes; borrowed */
    size_t cap, n;    /* N: string elements hashed, at most CAP */
    int type;         /* REDIS_REPLY_* of the top-level reply, 0 before it */
    char err[128];    /* its text when it is an error */
};

/* Read the next reply on C into K (HASHES and CAP set by the caller, the
 * rest zero), with these reply functions swapped in on the connection's
 * reader for that one reply. Returns REDIS_OK, or REDIS_ERR (errno as
 * hiredis left it) after which the connection must be dropped. The reader
 * gets its own functions back either way; a reply half-parsed into K is
 * forgotten, not given to hiredis' free. */
int dd_recent_reply_read(struct redisContext *c, struct dd_recent_reply *k);

/* The same parse on bytes, for tests and fuzzers: parse BUF (LEN bytes,
 * the start of a RESP reply as Redis sends it to ZREVRANGE). Returns 0
 * with the top-level reply's REDIS_REPLY_* in *TYPE and, in HASHES, the
 * dd_hash of its first CAP string elements (at any depth, in order) and
 * their count in *N; DD_ERR_STATE if the bytes end before the reply does;
 * DD_ERR_INVALID on a protocol error; DD_ERR_NOMEM. Bytes past the first
 * reply are ignored. */
int dd_recent_reply_parse(const void *buf, size_t len, uint64_t *hashes, size_t cap, size_t *n,
                          int *type);

#endif
