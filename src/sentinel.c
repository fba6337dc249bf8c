/* SPDX-License-Identifier: Apache-2.0
 *
 * sentinel.c - the Redis master's address from Redis Sentinel (sentinel.h).
 *
 * DESIGN
 *
 * One watch thread per dd_sentinel; it alone talks to the Sentinels, so a
 * worker never waits for one. It keeps:
 *
 *   - a subscription to +switch-master on one Sentinel (the first of
 *     recent.sentinels that accepts it, in turn from the last one that
 *     answered). A message for our master publishes its new address at
 *     once: that is how a failover reaches the workers.
 *   - asks: SENTINEL get-master-addr-by-name on a short-lived connection,
 *     each Sentinel in turn with recent.timeout_ms for the connect and for
 *     the reply, the first address wins. The thread asks at start, after
 *     every (re)subscription (messages may have been missed while it was
 *     not subscribed), every REFRESH_MS (a Sentinel cut off from its
 *     peers publishes nothing), and when a worker suspects the address
 *     (dd_sentinel_suspect: -READONLY, a dropped connection, a ROLE other
 *     than master), at most once per ASK_GAP_MS.
 *
 * Publishing: the address sits under a mutex with a generation, an atomic
 * that changes only when the address does. Workers load the generation on
 * every call (one relaxed-cost acquire load, no lock) and take the lock
 * only to copy a new address. When no Sentinel answers, the last known
 * address stays published: the master may well be alive.
 *
 * The thread sleeps in poll(2) on the subscription's socket and an eventfd
 * that dd_sentinel_suspect and dd_sentinel_free write; a suspect writes it
 * only when the flag it sets was clear, so a storm of failing calls wakes
 * the thread once per ask.
 *
 * Hostile replies: every connection's hiredis reader gets the reply
 * functions below, which build nothing: they copy at most three strings of
 * at most DD_SENTINEL_STR_MAX bytes into a struct sreply the connection
 * owns, and make hiredis fail the parse (by returning NULL, its "out of
 * memory") on a nested array or one of more than three elements. Bytes
 * buffered for an unfinished reply are bounded by READ_MAX. An address is
 * accepted only as host:port that addr.h parses, of host characters a name
 * or an address may hold.
 */
#include "sentinel.h"

#include "addr.h"
#include "dd.h"
#include "log.h"
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/time.h>
#include <unistd.h>

#define REFRESH_MS 5000   /* ask again this often while all is well */
#define ASK_GAP_MS 100    /* at most one ask per this, however often suspected */
#define RETRY_MIN_MS 100  /* after every Sentinel failed: first wait */
#define RETRY_MAX_MS 2000 /* and the longest */
#define READ_MAX 8192     /* bytes buffered for one unfinished reply */
#define SR_ELEMS 3        /* the most elements of an accepted reply */

/* One reply as the functions below leave it. */
struct sreply {
    int type;             /* top-level REDIS_REPLY_*, 0 before it */
    int elements;         /* its elements when an array */
    int bad;              /* a string too long to keep */
    int kind[SR_ELEMS];   /* elements' REDIS_REPLY_* */
    size_t len[SR_ELEMS]; /* string lengths; [0] also a top-level string's */
    char str[SR_ELEMS][DD_SENTINEL_STR_MAX];
};

struct dd_sentinel {
    struct dd_sentinel_addr sentinels[DD_SENTINEL_MAX];
    size_t nsentinels;
    size_t prefer; /* the Sentinel asked first (the last that answered) */
    char name[DD_SENTINEL_NAME_MAX];
    char *password; /* "" = no AUTH */
    uint32_t timeout_ms;

    pthread_mutex_t mu; /* guards master */
    struct dd_sentinel_addr master;
    _Atomic uint64_t gen; /* 0 = none known; changes with master */
    uint64_t next_gen;    /* the watch thread's */

    atomic_int suspected; /* a worker asked for an ask */
    atomic_int stop;
    int wakefd; /* eventfd; -1 before start */
    pthread_t thread;
    int started;

    redisContext *sub; /* subscribed to +switch-master; NULL while not */
    size_t sub_idx;
    struct sreply sub_reply; /* the sub's reader writes here */
};

static atomic_uint_fast64_t st_changes, st_asks, st_unreachable, st_bad, st_events;
static atomic_int st_known, st_configured;
static struct dd_log_limit lim_ask;

static void count(atomic_uint_fast64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* ---- reply functions ---------------------------------------------------- */

static void keep_string(struct sreply *k, int idx, int type, const char *str, size_t len)
{
    if (idx < 0 || idx >= SR_ELEMS) return;
    k->kind[idx] = type;
    if (len >= DD_SENTINEL_STR_MAX) {
        /* An error's text is only shown: keep its start. Anything else
         * this long is no address and no event of ours. */
        if (type != REDIS_REPLY_ERROR) k->bad = 1;
        len = DD_SENTINEL_STR_MAX - 1;
    }
    memcpy(k->str[idx], str, len);
    k->str[idx][len] = '\0';
    k->len[idx] = len;
}

static void *sr_string(const redisReadTask *t, char *str, size_t len)
{
    struct sreply *k = t->privdata;
    if (t->parent) {
        keep_string(k, t->idx, t->type, str, len);
    } else {
        k->type = t->type;
        keep_string(k, 0, t->type, str, len);
    }
    return k;
}

static void *sr_array(const redisReadTask *t, int elements)
{
    struct sreply *k = t->privdata;
    if (t->parent || elements > SR_ELEMS) return NULL; /* refused: hiredis fails the parse */
    k->type = REDIS_REPLY_ARRAY;
    k->elements = elements;
    return k;
}

static void *sr_other(const redisReadTask *t, int type)
{
    struct sreply *k = t->privdata;
    if (t->parent) {
        if (t->idx >= 0 && t->idx < SR_ELEMS) k->kind[t->idx] = type;
    } else {
        k->type = type;
    }
    return k;
}

static void *sr_integer(const redisReadTask *t, long long v)
{
    (void)v;
    return sr_other(t, REDIS_REPLY_INTEGER);
}

static void *sr_nil(const redisReadTask *t)
{
    return sr_other(t, REDIS_REPLY_NIL);
}

static void sr_free(void *obj)
{
    (void)obj; /* the sreply belongs to its connection or caller */
}

static redisReplyObjectFunctions sr_functions = {
    .createString = sr_string,
    .createArray = sr_array,
    .createInteger = sr_integer,
    .createNil = sr_nil,
    .freeObject = sr_free,
};

/* ---- what a reply means ------------------------------------------------- */

static int host_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_' || c == ':' || c == '%';
}

/* HOST and PORT as texts from a Sentinel into OUT, if they are an address
 * we would connect to. Returns DD_SENTINEL_ADDR or DD_SENTINEL_BAD. */
static int addr_from(const char *host, size_t hlen, const char *port, size_t plen,
                     struct dd_sentinel_addr *out, char *why, size_t whylen)
{
    if (hlen == 0 || hlen >= DD_SENTINEL_HOST_MAX) {
        dd_set_err(why, whylen, "host of %zu bytes", hlen);
        return DD_SENTINEL_BAD;
    }
    for (size_t i = 0; i < hlen; i++)
        if (!host_char_ok((unsigned char)host[i])) {
            dd_set_err(why, whylen, "host has byte 0x%02x", (unsigned char)host[i]);
            return DD_SENTINEL_BAD;
        }
    unsigned long p = 0;
    if (plen == 0 || plen > 5) {
        dd_set_err(why, whylen, "port of %zu bytes", plen);
        return DD_SENTINEL_BAD;
    }
    for (size_t i = 0; i < plen; i++) {
        if (port[i] < '0' || port[i] > '9') {
            dd_set_err(why, whylen, "port is not a number");
            return DD_SENTINEL_BAD;
        }
        p = p * 10 + (unsigned long)(port[i] - '0');
    }
    if (p == 0 || p > 65535) {
        dd_set_err(why, whylen, "port %lu", p);
        return DD_SENTINEL_BAD;
    }
    char h[DD_SENTINEL_HOST_MAX], both[DD_SENTINEL_HOST_MAX + 16];
    memcpy(h, host, hlen);
    h[hlen] = '\0';
    uint16_t parsed;
    dd_hostport_format(both, sizeof both, h, (unsigned)p);
    if (dd_hostport_parse(both, out->host, sizeof out->host, &parsed) != DD_HOSTPORT_OK ||
        parsed != p) {
        dd_set_err(why, whylen, "\"%.64s\" is not host:port", both);
        return DD_SENTINEL_BAD;
    }
    /* A host with ':' can only be an IPv6 address (a zone after '%'). */
    if (strchr(h, ':')) {
        struct in6_addr a6;
        char *pct = strchr(h, '%');
        if (pct) *pct = '\0';
        if (inet_pton(AF_INET6, h, &a6) != 1) {
            dd_set_err(why, whylen, "\"%.64s\" is not an IPv6 address", h);
            memset(out, 0, sizeof *out);
            return DD_SENTINEL_BAD;
        }
    }
    out->port = (uint16_t)p;
    return DD_SENTINEL_ADDR;
}

static int master_from(const struct sreply *k, struct dd_sentinel_addr *out, char *why,
                       size_t whylen)
{
    switch (k->type) {
    case REDIS_REPLY_NIL:
        dd_set_err(why, whylen, "Sentinel does not know the master");
        return DD_SENTINEL_OTHER;
    case REDIS_REPLY_ERROR:
        dd_set_err(why, whylen, "error reply: %.200s", k->str[0]);
        return DD_SENTINEL_BAD;
    case REDIS_REPLY_ARRAY:
        if (k->bad || k->elements != 2 || k->kind[0] != REDIS_REPLY_STRING ||
            k->kind[1] != REDIS_REPLY_STRING)
            break;
        return addr_from(k->str[0], k->len[0], k->str[1], k->len[1], out, why, whylen);
    default: break;
    }
    dd_set_err(why, whylen, "unexpected reply (type %d)", k->type);
    return DD_SENTINEL_BAD;
}

static int elem_is(const struct sreply *k, int i, const char *s)
{
    size_t n = strlen(s);
    return k->kind[i] == REDIS_REPLY_STRING && k->len[i] == n && memcmp(k->str[i], s, n) == 0;
}

static int event_from(const struct sreply *k, const char *name, struct dd_sentinel_addr *out,
                      char *why, size_t whylen)
{
    if (k->type != REDIS_REPLY_ARRAY || k->elements != 3 || k->bad) {
        dd_set_err(why, whylen, "unexpected message (type %d)", k->type);
        return DD_SENTINEL_BAD;
    }
    if (elem_is(k, 0, "subscribe") && elem_is(k, 1, "+switch-master")) return DD_SENTINEL_OTHER;
    if (!elem_is(k, 0, "message") || !elem_is(k, 1, "+switch-master") ||
        k->kind[2] != REDIS_REPLY_STRING) {
        dd_set_err(why, whylen, "unexpected message");
        return DD_SENTINEL_BAD;
    }
    /* "<name> <old host> <old port> <new host> <new port>" */
    const char *f[5];
    size_t fl[5], nf = 0;
    const char *p = k->str[2], *end = p + k->len[2];
    while (p < end) {
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        const char *e = sp ? sp : end;
        if (nf == 5) {
            nf = 6;
            break;
        }
        f[nf] = p;
        fl[nf++] = (size_t)(e - p);
        p = sp ? sp + 1 : end;
    }
    if (nf != 5) {
        dd_set_err(why, whylen, "+switch-master without 5 fields");
        return DD_SENTINEL_BAD;
    }
    if (fl[0] != strlen(name) || memcmp(f[0], name, fl[0]) != 0) return DD_SENTINEL_OTHER;
    return addr_from(f[3], fl[3], f[4], fl[4], out, why, whylen);
}

/* Parse one reply of BUF into K with the functions above. */
static int parse_bytes(const void *buf, size_t len, struct sreply *k, size_t *used, char *why,
                       size_t whylen)
{
    *used = 0;
    memset(k, 0, sizeof *k);
    redisReader *rd = redisReaderCreateWithFunctions(&sr_functions);
    if (!rd) {
        dd_set_err(why, whylen, "out of memory");
        return DD_SENTINEL_BAD;
    }
    rd->privdata = k;
    void *rep = NULL;
    int rc = DD_SENTINEL_BAD;
    if (redisReaderFeed(rd, buf, len) != REDIS_OK || redisReaderGetReply(rd, &rep) != REDIS_OK) {
        dd_set_err(why, whylen, "protocol error: %s", rd->errstr);
    } else if (!rep) {
        dd_set_err(why, whylen, "incomplete reply");
        rc = DD_SENTINEL_PARTIAL;
    } else {
        *used = len - (rd->len - rd->pos);
        rc = DD_SENTINEL_OTHER;
    }
    rd->reply = NULL; /* the sreply is the caller's */
    redisReaderFree(rd);
    return rc;
}

int dd_sentinel_parse_master(const void *buf, size_t len, struct dd_sentinel_addr *out,
                             size_t *used, char *why, size_t whylen)
{
    struct sreply k;
    size_t u;
    memset(out, 0, sizeof *out);
    *used = 0;
    int rc = parse_bytes(buf, len, &k, &u, why, whylen);
    if (rc != DD_SENTINEL_OTHER) return rc;
    rc = master_from(&k, out, why, whylen);
    if (rc == DD_SENTINEL_BAD)
        memset(out, 0, sizeof *out);
    else
        *used = u;
    return rc;
}

int dd_sentinel_parse_event(const void *buf, size_t len, const char *name,
                            struct dd_sentinel_addr *out, size_t *used, char *why, size_t whylen)
{
    struct sreply k;
    size_t u;
    memset(out, 0, sizeof *out);
    *used = 0;
    int rc = parse_bytes(buf, len, &k, &u, why, whylen);
    if (rc != DD_SENTINEL_OTHER) return rc;
    rc = event_from(&k, name, out, why, whylen);
    if (rc == DD_SENTINEL_BAD)
        memset(out, 0, sizeof *out);
    else
        *used = u;
    return rc;
}

/* ---- configuration ------------------------------------------------------- */

int dd_sentinel_name_ok(const char *name, size_t len)
{
    if (len == 0 || len >= DD_SENTINEL_NAME_MAX) return 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] <= ' ' || (unsigned char)name[i] >= 0x7f) return 0;
    return 1;
}

/* The bounds of LIST's entry I (separated by SEP, blanks around trimmed)
 * in *B and *E; returns the number of entries. */
static size_t entry(const char *list, char sep, size_t i, const char **b, const char **e)
{
    size_t n = 0;
    const char *p = list;
    for (;;) {
        const char *q = strchr(p, sep);
        const char *end = q ? q : p + strlen(p);
        if (n == i && b) {
            const char *s = p;
            while (s < end && (*s == ' ' || *s == '\t')) s++;
            const char *t = end;
            while (t > s && (t[-1] == ' ' || t[-1] == '\t')) t--;
            *b = s;
            *e = t;
        }
        n++;
        if (!q) return n;
        p = q + 1;
    }
}

int dd_sentinel_parse_list(const char *list, struct dd_sentinel_addr *out, size_t cap, size_t *n,
                           char *err, size_t errlen)
{
    *n = 0;
    size_t count = entry(list, ',', 0, NULL, NULL);
    if (count > cap || count > DD_SENTINEL_MAX)
        return dd_fail(DD_ERR_INVALID, err, errlen, "recent.sentinels: %zu addresses, at most %d",
                       count, DD_SENTINEL_MAX);
    for (size_t i = 0; i < count; i++) {
        const char *b, *e;
        entry(list, ',', i, &b, &e);
        char a[DD_SENTINEL_HOST_MAX + 16];
        size_t len = (size_t)(e - b);
        uint16_t port = 0;
        int ok = len < sizeof a;
        if (ok) {
            memcpy(a, b, len);
            a[len] = '\0';
            ok = dd_hostport_parse(a, out[i].host, sizeof out[i].host, &port) == DD_HOSTPORT_OK &&
                 port != 0;
        }
        if (!ok)
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "recent.sentinels: entry %zu \"%.*s\" is not host:port", i + 1,
                           (int)((e - b) > 64 ? 64 : (e - b)), b);
        out[i].port = port;
        for (size_t j = 0; j < i; j++)
            if (out[j].port == port && strcmp(out[j].host, out[i].host) == 0)
                return dd_fail(DD_ERR_INVALID, err, errlen,
                               "recent.sentinels: \"%s\" is listed twice", a);
    }
    *n = count;
    return DD_OK;
}

int dd_sentinel_shard_name(const char *names, uint32_t shards, uint32_t shard, char *out,
                           size_t outlen, char *err, size_t errlen)
{
    size_t count = entry(names, ';', 0, NULL, NULL);
    if (count != 1 && count != shards)
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "recent.master_name: %zu names for %" PRIu32
                       " shards (one for all, or one per shard separated by ';')",
                       count, shards);
    const char *b, *e;
    entry(names, ';', count == 1 ? 0 : shard, &b, &e);
    size_t len = (size_t)(e - b);
    if (!dd_sentinel_name_ok(b, len))
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "recent.master_name: \"%.*s\" (shard %" PRIu32
                       ") is not a master name (1 to %d printable bytes, no spaces)",
                       (int)(len > 64 ? 64 : len), b, shard, DD_SENTINEL_NAME_MAX - 1);
    if (len >= outlen) return dd_fail(DD_ERR_INVALID, err, errlen, "recent.master_name: too long");
    memcpy(out, b, len);
    out[len] = '\0';
    return DD_OK;
}

/* ---- the handle ------------------------------------------------------------ */

int dd_sentinel_new(dd_sentinel **out, const struct dd_sentinel_conf *conf, char *err,
                    size_t errlen)
{
    *out = NULL;
    if (conf->timeout_ms == 0)
        return dd_fail(DD_ERR_INVALID, err, errlen, "recent.timeout_ms: must be at least 1");
    size_t nl = strlen(conf->master_name);
    if (!dd_sentinel_name_ok(conf->master_name, nl))
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "recent.master_name: \"%.64s\" is not one master name", conf->master_name);
    dd_sentinel *s = calloc(1, sizeof *s);
    if (!s) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    s->wakefd = -1;
    int rc = dd_sentinel_parse_list(conf->sentinels, s->sentinels, DD_SENTINEL_MAX, &s->nsentinels,
                                    err, errlen);
    if (rc != DD_OK) {
        free(s);
        return rc;
    }
    s->password = strdup(conf->password);
    if (!s->password || pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s->password);
        free(s);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }
    memcpy(s->name, conf->master_name, nl + 1);
    s->timeout_ms = conf->timeout_ms;
    s->next_gen = 1;
    atomic_store(&st_configured, 1);
    *out = s;
    return DD_OK;
}

uint64_t dd_sentinel_generation(const dd_sentinel *s)
{
    return atomic_load_explicit(&s->gen, memory_order_acquire);
}

uint64_t dd_sentinel_master(dd_sentinel *s, struct dd_sentinel_addr *out)
{
    pthread_mutex_lock(&s->mu);
    uint64_t g = atomic_load_explicit(&s->gen, memory_order_relaxed);
    *out = s->master;
    pthread_mutex_unlock(&s->mu);
    return g;
}

static void wake(dd_sentinel *s)
{
    uint64_t one = 1;
    if (s->wakefd >= 0 && write(s->wakefd, &one, sizeof one) < 0) {
        /* EAGAIN: the counter is full, so a wake-up is pending anyway */
    }
}

void dd_sentinel_suspect(dd_sentinel *s)
{
    if (atomic_exchange_explicit(&s->suspected, 1, memory_order_relaxed)) return;
    wake(s);
}

/* Make M the master (VIA says how it was learnt). */
static void publish(dd_sentinel *s, const struct dd_sentinel_addr *m, const char *via)
{
    pthread_mutex_lock(&s->mu);
    uint64_t g = atomic_load_explicit(&s->gen, memory_order_relaxed);
    struct dd_sentinel_addr old = s->master;
    int same = g != 0 && old.port == m->port && strcmp(old.host, m->host) == 0;
    if (!same) {
        s->master = *m;
        atomic_store_explicit(&s->gen, s->next_gen++, memory_order_release);
    }
    pthread_mutex_unlock(&s->mu);
    if (same) return;
    atomic_store(&st_known, 1);
    char a[DD_SENTINEL_HOST_MAX + 16], b[DD_SENTINEL_HOST_MAX + 16];
    dd_hostport_format(a, sizeof a, m->host, m->port);
    if (g) {
        count(&st_changes);
        dd_hostport_format(b, sizeof b, old.host, old.port);
        dd_warn("sentinel",
                "msg=\"redis master changed\" master_name=%s master=%s previous=%s via=%s", s->name,
                a, b, via);
    } else {
        dd_info("sentinel", "msg=\"redis master found\" master_name=%s master=%s via=%s", s->name,
                a, via);
    }
}

/* ---- connections (the watch thread's) ----------------------------------- */

enum { C_OK = 0, C_UNREACHABLE = -1, C_BAD = -2 };

/* The next reply on C into K (the reader's privdata), by DEADLINE_NS. */
static int conn_read(redisContext *c, int64_t deadline_ns, char *why, size_t whylen)
{
    for (;;) {
        void *rep = NULL;
        if (redisGetReplyFromReader(c, &rep) != REDIS_OK) {
            dd_set_err(why, whylen, "protocol error: %s", c->errstr);
            return C_BAD;
        }
        if (rep) return C_OK;
        if (c->reader->len - c->reader->pos > READ_MAX) {
            dd_set_err(why, whylen, "reply longer than %d bytes", READ_MAX);
            return C_BAD;
        }
        int64_t left = deadline_ns - dd_mono_ns();
        if (left <= 0) {
            dd_set_err(why, whylen, "timed out");
            return C_UNREACHABLE;
        }
        struct pollfd pf = {.fd = c->fd, .events = POLLIN};
        int pr = poll(&pf, 1, (int)((left + 999999) / 1000000));
        if (pr < 0 && errno != EINTR) {
            dd_set_err(why, whylen, "poll: %s", strerror(errno));
            return C_UNREACHABLE;
        }
        if (pr > 0 && redisBufferRead(c) != REDIS_OK) {
            dd_set_err(why, whylen, "%s", c->errstr[0] ? c->errstr : "connection lost");
            return C_UNREACHABLE;
        }
    }
}

static int conn_send(redisContext *c, int argc, const char **argv, const size_t *lens, char *why,
                     size_t whylen)
{
    if (redisAppendCommandArgv(c, argc, argv, lens) != REDIS_OK) {
        dd_set_err(why, whylen, "out of memory");
        return C_UNREACHABLE;
    }
    int done = 0;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK) {
            dd_set_err(why, whylen, "%s", c->errstr[0] ? c->errstr : "write failed");
            return C_UNREACHABLE;
        }
    return C_OK;
}

/* Connect to A with our reply functions writing into K, and AUTH. */
static int conn_open(dd_sentinel *s, const struct dd_sentinel_addr *a, struct sreply *k,
                     redisContext **out, char *why, size_t whylen)
{
    *out = NULL;
    struct timeval tv = {.tv_sec = s->timeout_ms / 1000,
                         .tv_usec = (suseconds_t)(s->timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(a->host, a->port, tv);
    if (!c) {
        dd_set_err(why, whylen, "out of memory");
        return C_UNREACHABLE;
    }
    if (c->err || redisSetTimeout(c, tv) != REDIS_OK) {
        dd_set_err(why, whylen, "connect: %s", c->errstr[0] ? c->errstr : "failed");
        redisFree(c);
        return C_UNREACHABLE;
    }
    c->reader->fn = &sr_functions;
    c->reader->privdata = k;
    memset(k, 0, sizeof *k);
    if (s->password[0]) {
        const char *argv[2] = {"AUTH", s->password};
        size_t lens[2] = {4, strlen(s->password)};
        int rc = conn_send(c, 2, argv, lens, why, whylen);
        if (rc == C_OK)
            rc = conn_read(c, dd_mono_ns() + (int64_t)s->timeout_ms * 1000000, why, whylen);
        if (rc == C_OK && k->type != REDIS_REPLY_STATUS) {
            dd_set_err(why, whylen, "AUTH: %.200s",
                       k->type == REDIS_REPLY_ERROR ? k->str[0] : "unexpected reply");
            rc = C_BAD;
        }
        if (rc != C_OK) {
            redisFree(c);
            return rc;
        }
        memset(k, 0, sizeof *k);
    }
    *out = c;
    return C_OK;
}

static void sentinel_failed(dd_sentinel *s, const struct dd_sentinel_addr *a, int rc,
                            const char *what, const char *why)
{
    char at[DD_SENTINEL_HOST_MAX + 16];
    count(rc == C_BAD ? &st_bad : &st_unreachable);
    dd_hostport_format(at, sizeof at, a->host, a->port);
    dd_log_limited(&lim_ask, 10000, DD_LOG_WARN, "sentinel",
                   "msg=\"sentinel failed\" sentinel=%s master_name=%s call=%s error=\"%s\"", at,
                   s->name, what, why);
}

/* Ask the Sentinel A for the master. */
static int ask_one(dd_sentinel *s, const struct dd_sentinel_addr *a, struct dd_sentinel_addr *m,
                   char *why, size_t whylen)
{
    struct sreply k;
    redisContext *c;
    int rc = conn_open(s, a, &k, &c, why, whylen);
    if (rc != C_OK) return rc;
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", s->name};
    size_t lens[3] = {8, 23, strlen(s->name)};
    count(&st_asks);
    rc = conn_send(c, 3, argv, lens, why, whylen);
    if (rc == C_OK) rc = conn_read(c, dd_mono_ns() + (int64_t)s->timeout_ms * 1000000, why, whylen);
    if (rc == C_OK && master_from(&k, m, why, whylen) != DD_SENTINEL_ADDR) rc = C_BAD;
    redisFree(c);
    return rc;
}

/* Each Sentinel in turn until one names the master. Returns 0 or -1. */
static int ask_all(dd_sentinel *s)
{
    for (size_t i = 0; i < s->nsentinels && !atomic_load(&s->stop); i++) {
        size_t idx = (s->prefer + i) % s->nsentinels;
        struct dd_sentinel_addr m;
        char why[256] = "";
        int rc = ask_one(s, &s->sentinels[idx], &m, why, sizeof why);
        if (rc == C_OK) {
            s->prefer = idx;
            publish(s, &m, "ask");
            return 0;
        }
        sentinel_failed(s, &s->sentinels[idx], rc, "get-master-addr-by-name", why);
    }
    return -1;
}

static void sub_close(dd_sentinel *s)
{
    if (s->sub) redisFree(s->sub);
    s->sub = NULL;
}

/* Subscribe to +switch-master on the first Sentinel that accepts. */
static int subscribe(dd_sentinel *s)
{
    for (size_t i = 0; i < s->nsentinels && !atomic_load(&s->stop); i++) {
        size_t idx = (s->prefer + i) % s->nsentinels;
        const struct dd_sentinel_addr *a = &s->sentinels[idx];
        char why[256] = "";
        redisContext *c;
        int rc = conn_open(s, a, &s->sub_reply, &c, why, sizeof why);
        if (rc == C_OK) {
            const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
            size_t lens[2] = {9, 14};
            rc = conn_send(c, 2, argv, lens, why, sizeof why);
            if (rc == C_OK)
                rc = conn_read(c, dd_mono_ns() + (int64_t)s->timeout_ms * 1000000, why, sizeof why);
            struct dd_sentinel_addr m;
            if (rc == C_OK &&
                event_from(&s->sub_reply, s->name, &m, why, sizeof why) != DD_SENTINEL_OTHER) {
                if (!why[0]) dd_set_err(why, sizeof why, "not subscribed");
                rc = C_BAD;
            }
            memset(&s->sub_reply, 0, sizeof s->sub_reply);
            if (rc == C_OK) {
                s->sub = c;
                s->sub_idx = idx;
                char at[DD_SENTINEL_HOST_MAX + 16];
                dd_hostport_format(at, sizeof at, a->host, a->port);
                dd_info("sentinel", "msg=\"watching +switch-master\" sentinel=%s master_name=%s",
                        at, s->name);
                return 0;
            }
            redisFree(c);
        }
        sentinel_failed(s, a, rc, "subscribe", why);
    }
    return -1;
}

/* Read what the subscription has and act on every whole message. Returns
 * 0, or -1 after closing it. */
static int sub_read(dd_sentinel *s)
{
    char why[256] = "";
    int rc = C_OK;
    if (redisBufferRead(s->sub) != REDIS_OK) {
        dd_set_err(why, sizeof why, "%s", s->sub->errstr[0] ? s->sub->errstr : "connection lost");
        rc = C_UNREACHABLE;
    }
    /* Ends: every pass consumes a whole reply from a finite buffer. */
    while (rc == C_OK) {
        void *rep = NULL;
        if (redisGetReplyFromReader(s->sub, &rep) != REDIS_OK) {
            dd_set_err(why, sizeof why, "protocol error: %s", s->sub->errstr);
            rc = C_BAD;
            break;
        }
        if (!rep) {
            if (s->sub->reader->len - s->sub->reader->pos > READ_MAX) {
                dd_set_err(why, sizeof why, "message longer than %d bytes", READ_MAX);
                rc = C_BAD;
            }
            break;
        }
        struct dd_sentinel_addr m;
        int e = event_from(&s->sub_reply, s->name, &m, why, sizeof why);
        memset(&s->sub_reply, 0, sizeof s->sub_reply);
        if (e == DD_SENTINEL_ADDR) {
            count(&st_events);
            publish(s, &m, "+switch-master");
        } else if (e == DD_SENTINEL_BAD) {
            rc = C_BAD;
        }
    }
    if (rc == C_OK) return 0;
    sentinel_failed(s, &s->sentinels[s->sub_idx], rc, "+switch-master", why);
    sub_close(s);
    /* The next subscription and ask start with the next Sentinel. */
    s->prefer = (s->sub_idx + 1) % s->nsentinels;
    return -1;
}

static void *watch_main(void *arg)
{
    dd_sentinel *s = arg;
    const int64_t ms = 1000000;
    int64_t next_ask = 0, last_ask = 0, next_sub = 0;
    uint32_t ask_retry = RETRY_MIN_MS, sub_retry = RETRY_MIN_MS;

    while (!atomic_load(&s->stop)) {
        int64_t now = dd_mono_ns();
        if (!s->sub && now >= next_sub) {
            if (subscribe(s) == 0) {
                next_ask = now; /* events may have been missed meanwhile */
                sub_retry = RETRY_MIN_MS;
            } else {
                next_sub = dd_mono_ns() + sub_retry * ms;
                sub_retry = sub_retry * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : sub_retry * 2;
            }
        }
        if (atomic_exchange_explicit(&s->suspected, 0, memory_order_relaxed) &&
            last_ask + ASK_GAP_MS * ms < next_ask)
            next_ask = last_ask + ASK_GAP_MS * ms;
        now = dd_mono_ns();
        if (now >= next_ask && !atomic_load(&s->stop)) {
            int ok = ask_all(s) == 0;
            last_ask = dd_mono_ns();
            next_ask = last_ask + (ok ? REFRESH_MS : ask_retry) * ms;
            ask_retry =
                ok ? RETRY_MIN_MS : (ask_retry * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : ask_retry * 2);
            now = last_ask;
        }
        int64_t until = next_ask;
        if (!s->sub && next_sub < until) until = next_sub;
        int64_t wait = (until - now + ms - 1) / ms;
        if (wait < 0) wait = 0;
        if (wait > 1000) wait = 1000;
        struct pollfd pf[2] = {{.fd = s->wakefd, .events = POLLIN},
                               {.fd = s->sub ? s->sub->fd : -1, .events = POLLIN}};
        int pr = poll(pf, 2, (int)wait);
        if (pr < 0 && errno != EINTR) {
            /* Not expected (our own fds); never spin on it. */
            dd_log_limited(&lim_ask, 10000, DD_LOG_ERROR, "sentinel",
                           "msg=\"poll failed\" error=\"%s\"", strerror(errno));
            dd_sleep_ms(100);
        }
        if (pr <= 0) continue;
        if (pf[0].revents) {
            uint64_t v;
            if (read(s->wakefd, &v, sizeof v) < 0) {
                /* EAGAIN: already drained */
            }
        }
        if (s->sub && pf[1].revents && sub_read(s) != 0) {
            next_sub = 0; /* another Sentinel at once */
            next_ask = dd_mono_ns();
        }
    }
    sub_close(s);
    return NULL;
}

int dd_sentinel_start(dd_sentinel *s, char *err, size_t errlen)
{
    s->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wakefd < 0) return dd_fail(DD_ERR_IO, err, errlen, "eventfd: %s", strerror(errno));
    if (pthread_create(&s->thread, NULL, watch_main, s) != 0) {
        close(s->wakefd);
        s->wakefd = -1;
        return dd_fail(DD_ERR_IO, err, errlen, "cannot start the Sentinel thread");
    }
    s->started = 1;
    return DD_OK;
}

void dd_sentinel_free(dd_sentinel *s)
{
    if (!s) return;
    if (s->started) {
        atomic_store(&s->stop, 1);
        wake(s);
        pthread_join(s->thread, NULL);
    }
    sub_close(s);
    if (s->wakefd >= 0) close(s->wakefd);
    pthread_mutex_destroy(&s->mu);
    free(s->password);
    free(s);
}

/* ---- metrics --------------------------------------------------------------- */

void dd_sentinel_get_stats(struct dd_sentinel_stats *out)
{
    out->master_changes = atomic_load_explicit(&st_changes, memory_order_relaxed);
    out->asks = atomic_load_explicit(&st_asks, memory_order_relaxed);
    out->unreachable = atomic_load_explicit(&st_unreachable, memory_order_relaxed);
    out->bad_replies = atomic_load_explicit(&st_bad, memory_order_relaxed);
    out->events = atomic_load_explicit(&st_events, memory_order_relaxed);
    out->master_known = atomic_load(&st_known);
    out->configured = atomic_load(&st_configured);
}

void dd_sentinel_collect(dd_prom *p)
{
    struct dd_sentinel_stats st;
    dd_sentinel_get_stats(&st);
    if (!st.configured) return;
    dd_prom_counter(p, "dedupd_recent_master_changes_total",
                    "Times the Redis master's address from Sentinel changed (failovers seen)",
                    st.master_changes);
    dd_prom_gauge(p, "dedupd_recent_master_known",
                  "1 once Sentinel has named a Redis master, else 0", (uint64_t)st.master_known);
    dd_prom_counter(p, "dedupd_recent_sentinel_asks_total",
                    "SENTINEL get-master-addr-by-name calls", st.asks);
    dd_prom_counter(p, "dedupd_recent_sentinel_events_total",
                    "+switch-master messages for this node's master", st.events);
    dd_prom_family(p, "dedupd_recent_sentinel_errors_total", "Sentinel calls that failed, by kind",
                   DD_PROM_COUNTER);
    static const struct dd_prom_label unreachable = {"kind", "unreachable"},
                                      reply = {"kind", "reply"};
    dd_prom_sample_u64(p, "dedupd_recent_sentinel_errors_total", &unreachable, 1, st.unreachable);
    dd_prom_sample_u64(p, "dedupd_recent_sentinel_errors_total", &reply, 1, st.bad_replies);
}
