/* SPDX-License-Identifier: Apache-2.0
 *
 * recent_reply.c - see recent_reply.h.
 */
#include "recent_reply.h"

#include "dd.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>

/* The reply functions below return the sink itself for every object, so
 * hiredis sees no NULL (its "out of memory") and nothing is ever freed. */

static void *sink_string(const redisReadTask *t, char *str, size_t len)
{
    struct dd_recent_reply *k = t->privdata;
    if (t->parent) {
        if (t->type == REDIS_REPLY_STRING && k->n < k->cap) k->hashes[k->n++] = dd_hash(str, len);
    } else {
        k->type = t->type;
        if (t->type == REDIS_REPLY_ERROR)
            snprintf(k->err, sizeof k->err, "%.*s", len > 127 ? 127 : (int)len, str);
    }
    return k;
}

static void *sink_other(const redisReadTask *t, int type)
{
    struct dd_recent_reply *k = t->privdata;
    if (!t->parent) k->type = type;
    return k;
}

static void *sink_array(const redisReadTask *t, int elements)
{
    (void)elements;
    return sink_other(t, REDIS_REPLY_ARRAY);
}

static void *sink_integer(const redisReadTask *t, long long v)
{
    (void)v;
    return sink_other(t, REDIS_REPLY_INTEGER);
}

static void *sink_nil(const redisReadTask *t)
{
    return sink_other(t, REDIS_REPLY_NIL);
}

static void sink_free(void *obj)
{
    (void)obj; /* the sink belongs to the caller */
}

static redisReplyObjectFunctions sink_functions = {
    .createString = sink_string,
    .createArray = sink_array,
    .createInteger = sink_integer,
    .createNil = sink_nil,
    .freeObject = sink_free,
};

int dd_recent_reply_read(redisContext *c, struct dd_recent_reply *k)
{
    redisReader *rd = c->reader;
    redisReplyObjectFunctions *fn = rd->fn;
    void *privdata = rd->privdata;
    rd->fn = &sink_functions;
    rd->privdata = k;
    void *rep = NULL;
    int rc = redisGetReply(c, &rep);
    int saved_errno = errno;
    rd->reply = NULL;
    rd->fn = fn;
    rd->privdata = privdata;
    errno = saved_errno;
    return rc == REDIS_OK && rep ? REDIS_OK : REDIS_ERR;
}

int dd_recent_reply_parse(const void *buf, size_t len, uint64_t *hashes, size_t cap, size_t *n,
                          int *type)
{
    *n = 0;
    *type = 0;
    struct dd_recent_reply k = {.hashes = hashes, .cap = cap};
    redisReader *rd = redisReaderCreateWithFunctions(&sink_functions);
    if (!rd) return DD_ERR_NOMEM;
    rd->privdata = &k;
    void *rep = NULL;
    int rc = DD_ERR_INVALID;
    if (redisReaderFeed(rd, buf, len) == REDIS_OK && redisReaderGetReply(rd, &rep) == REDIS_OK)
        rc = rep ? DD_OK : DD_ERR_STATE;
    rd->reply = NULL; /* the sink is ours: never given to a free */
    redisReaderFree(rd);
    if (rc == DD_OK) {
        *n = k.n;
        *type = k.type;
    }
    return rc;
}
