/* SPDX-License-Identifier: Apache-2.0
 *
 * recent.c - the last N delivered item ids per (scene, user), in Redis, over
 * one blocking hiredis 0.14 connection per dd_recent.
 *
 * DESIGN
 *
 * One sorted set per (scene, user), member = item id, score = delivery
 * time (with a sequence, see ADD_SCRIPT), under the key
 *
 *     "dr:" <decimal length of user> "{" <user bytes> "}" <scene bytes>
 *
 * The length prefix makes the mapping injective for any bytes, and the
 * first '{' is always the one after the digits, so Redis Cluster's hash
 * tag is the user id: every scene of a user lands in one slot.
 *
 * Record is one pipelined round trip on that key: the add script,
 * ZREMRANGEBYRANK to recent.size, EXPIRE, ZCARD. Fetch is one ZREVRANGE
 * (newest first), its members hashed straight out of hiredis' read buffer
 * (recent_reply.h): no reply object per member on Filter's path.
 *
 * The connection is lazy and bounded: every call waits at most
 * recent.timeout_ms per read; a failure drops the connection and calls
 * fail fast with DD_ERR_UNAVAILABLE during a backoff (ensure), so a
 * Redis outage costs Filter nothing but degraded = true.
 *
 * With Sentinel (recent.h), ensure() first follows the watcher's
 * generation (follow): a new one closes the connection and clears the
 * backoff, so the first call after a switch connects to the new master;
 * generation 0 (no master known yet) fails fast. A new connection is used
 * only once ROLE answers "master" (a Sentinel may hand out a stale
 * address). Every failure that may mean the master moved (lost or refused
 * connection, -READONLY, ROLE not master) calls dd_sentinel_suspect.
 *
 * Threads: a dd_recent is used by one thread at a time (the RPC layer owns
 * one per worker). The stats counters are process-wide atomics.
 */
#include "recent.h"

#include "addr.h"
#include "dd.h"
#include "log.h"
#include "metrics.h"
#include "recent_reply.h"
#include "sentinel.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define KEY_PREFIX "dr:"
#define CONN_FAILED 1 /* internal: the connection failed, errno saved */

struct dd_recent {
    char host[DD_SENTINEL_HOST_MAX]; /* host name or address; a unix socket path if is_unix;
                                      * "" while Sentinel has named no master */
    int port;
    int is_unix;
    char *password; /* "" = no AUTH */
    uint32_t size;
    uint32_t ttl_s;
    uint32_t timeout_ms;

    redisContext *c;    /* NULL while disconnected */
    int used;           /* c has completed at least one call */
    int pending;        /* a fetch's replies are due on c (fetch_begin sent them) */
    size_t pending_cap; /* its cap, for a retry */
    size_t pending_n;   /* its keys, back to back in key */
    size_t pending_lens[DD_RECENT_SCENES_MAX]; /* their lengths */
    int64_t retry_at_ns;                       /* monotonic; no connect attempt before this */
    uint32_t backoff_ms;                       /* next backoff to apply after a failure */
    dd_sentinel *sentinel;                     /* borrowed; NULL = the fixed recent.redis */
    uint64_t gen;                              /* the sentinel generation host/port came from */

    /* Reused across calls so the hot paths do not allocate. */
    char *key;
    size_t key_cap;
    const char **argv;
    size_t *argvlen;
    size_t argv_cap;

    char errstr[256];
};

static atomic_uint_fast64_t st_timeouts;
static atomic_uint_fast64_t st_conn_errors;
static atomic_uint_fast64_t st_reply_errors;
static atomic_uint_fast64_t st_readonly;
static atomic_uint_fast64_t st_reconnects;

static struct dd_log_limit lim_conn; /* shared by every instance: one line per interval */

static void set_err(dd_recent *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(dd_recent *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errstr, sizeof r->errstr, fmt, ap);
    va_end(ap);
}

/* Split "host:port", "[v6]:port" or "/path/to.sock". Returns 0 or
 * DD_ERR_INVALID / DD_ERR_NOMEM with a message in err. */
static int parse_addr(dd_recent *r, const char *addr, char *err, size_t errlen)
{
    if (addr[0] == '/' && strlen(addr) < sizeof r->host) {
        r->is_unix = 1;
        r->port = 0;
        strcpy(r->host, addr);
        return DD_OK;
    }
    uint16_t port;
    if (dd_hostport_parse(addr, r->host, sizeof r->host, &port) == DD_HOSTPORT_OK && port != 0) {
        r->port = port;
        return DD_OK;
    }
    snprintf(err, errlen, "recent.redis: '%s' is not host:port or /socket/path", addr);
    return DD_ERR_INVALID;
}

int dd_recent_conf_check(const struct dd_recent_conf *conf, uint32_t shards, char *err,
                         size_t errlen)
{
    if (!conf->sentinels[0]) return DD_OK;
    struct dd_sentinel_addr a[DD_SENTINEL_MAX];
    size_t n;
    int rc = dd_sentinel_parse_list(conf->sentinels, a, DD_SENTINEL_MAX, &n, err, errlen);
    if (rc != DD_OK) return rc;
    if (!conf->master_name[0])
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "recent.master_name: must be set when recent.sentinels is");
    char name[DD_SENTINEL_NAME_MAX];
    for (uint32_t s = 0; s < shards; s++) {
        rc = dd_sentinel_shard_name(conf->master_name, shards, s, name, sizeof name, err, errlen);
        if (rc != DD_OK) return rc;
    }
    return DD_OK;
}

int dd_recent_new(dd_recent **out, const struct dd_recent_conf *conf, char *err, size_t errlen)
{
    int rc = DD_ERR_NOMEM;
    dd_recent *r;

    *out = NULL;
    if (conf->size == 0) {
        snprintf(err, errlen, "recent.size: must be at least 1");
        return DD_ERR_INVALID;
    }
    if (conf->timeout_ms == 0) {
        snprintf(err, errlen, "recent.timeout_ms: must be at least 1");
        return DD_ERR_INVALID;
    }
    r = calloc(1, sizeof *r);
    if (!r) goto err;
    r->sentinel = conf->sentinel;
    if (!r->sentinel) {
        rc = parse_addr(r, conf->redis, err, errlen);
        if (rc != DD_OK) goto err;
    }
    rc = DD_ERR_NOMEM;
    r->password = strdup(conf->password);
    if (!r->password) goto err;
    r->size = conf->size;
    r->ttl_s = conf->ttl_s;
    r->timeout_ms = conf->timeout_ms;
    r->backoff_ms = BACKOFF_MIN_MS;
    r->key_cap = 64;
    r->key = malloc(r->key_cap);
    if (!r->key) goto err;
    *out = r;
    return DD_OK;
err:
    if (rc == DD_ERR_NOMEM) snprintf(err, errlen, "out of memory");
    dd_recent_free(r);
    return rc;
}

void dd_recent_free(dd_recent *r)
{
    if (!r) return;
    if (r->c) redisFree(r->c);
    free(r->password);
    free(r->key);
    free(r->argv);
    free(r->argvlen);
    free(r);
}

const char *dd_recent_errstr(const dd_recent *r)
{
    return r->errstr;
}

void dd_recent_get_stats(struct dd_recent_stats *out)
{
    out->timeouts = atomic_load_explicit(&st_timeouts, memory_order_relaxed);
    out->connection_errors = atomic_load_explicit(&st_conn_errors, memory_order_relaxed);
    out->reply_errors = atomic_load_explicit(&st_reply_errors, memory_order_relaxed);
    out->readonly = atomic_load_explicit(&st_readonly, memory_order_relaxed);
    out->reconnects = atomic_load_explicit(&st_reconnects, memory_order_relaxed);
}

static void count(atomic_uint_fast64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* Close the connection and forbid a new attempt for the current backoff,
 * which then doubles. */
static void drop(dd_recent *r)
{
    if (r->c) {
        redisFree(r->c);
        r->c = NULL;
    }
    r->used = 0;
    r->retry_at_ns = dd_mono_ns() + (int64_t)r->backoff_ms * 1000000;
    r->backoff_ms = r->backoff_ms >= BACKOFF_MAX_MS / 2 ? BACKOFF_MAX_MS : r->backoff_ms * 2;
}

/* Close the connection without a backoff: it went stale while idle (or
 * holds a half-sent pipeline), and a fresh one may be opened at once. */
static void close_now(dd_recent *r)
{
    if (r->c) redisFree(r->c);
    r->c = NULL;
    r->used = 0;
}

/* Translate a failed hiredis call on r->c (errno as saved right after it) into
 * a dd_err, count it, log it (rate limited) and drop the connection. */
static int conn_failed(dd_recent *r, int saved_errno, const char *what)
{
    int timeout = r->c && r->c->err == REDIS_ERR_IO &&
                  (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK ||
                   saved_errno == ETIMEDOUT || saved_errno == EINPROGRESS);
    set_err(r, "redis %s:%d: %s: %s", r->host, r->port, what,
            r->c ? (r->c->errstr[0] ? r->c->errstr : "unknown error") : "out of memory");
    if (timeout) {
        set_err(r, "redis %s:%d: %s: timed out after %" PRIu32 " ms", r->host, r->port, what,
                r->timeout_ms);
        count(&st_timeouts);
    } else {
        count(&st_conn_errors);
    }
    dd_log_limited(&lim_conn, 10000, DD_LOG_WARN, "recent",
                   "msg=\"redis call failed\" error=\"%s\" backoff_ms=%" PRIu32, r->errstr,
                   r->backoff_ms);
    drop(r);
    /* Lost, refused or silent: the master may have been replaced. */
    if (r->sentinel) dd_sentinel_suspect(r->sentinel);
    return timeout ? DD_ERR_TIMEOUT : DD_ERR_UNAVAILABLE;
}

static int auth(dd_recent *r)
{
    const char *argv[2] = {"AUTH", r->password};
    size_t lens[2] = {4, strlen(r->password)};
    redisReply *rep = redisCommandArgv(r->c, 2, argv, lens);
    if (!rep) return conn_failed(r, errno, "AUTH");
    int ok = rep->type == REDIS_REPLY_STATUS;
    if (!ok) {
        set_err(r, "redis %s:%d: AUTH: %s", r->host, r->port,
                rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
        count(&st_conn_errors);
        dd_log_limited(&lim_conn, 10000, DD_LOG_WARN, "recent",
                       "msg=\"redis AUTH failed\" error=\"%s\"", r->errstr);
    }
    freeReplyObject(rep);
    if (!ok) {
        drop(r);
        return DD_ERR_UNAVAILABLE;
    }
    return DD_OK;
}

/* The server at r->host is not (or no longer) the master: count it, drop
 * the connection with a backoff and have Sentinel asked again. Returns
 * DD_ERR_UNAVAILABLE: the call may be retried once the new master is
 * known. */
static int not_master(dd_recent *r, const char *what, const char *detail)
{
    set_err(r, "redis %s:%d: %s: not the master (%.120s)", r->host, r->port, what, detail);
    count(&st_readonly);
    dd_log_limited(&lim_conn, 10000, DD_LOG_WARN, "recent",
                   "msg=\"redis is not the master; asking Sentinel again\" error=\"%s\"",
                   r->errstr);
    drop(r);
    if (r->sentinel) dd_sentinel_suspect(r->sentinel);
    return DD_ERR_UNAVAILABLE;
}

/* Whether an error reply says the server was demoted to a replica. */
static int is_readonly(const char *msg)
{
    return strncmp(msg, "READONLY", 8) == 0;
}

/* Take the master Sentinel names now, if it changed since r's connection
 * was made: drop that connection and any backoff, so the next connect goes
 * to the new master at once. Returns 0 while no master is known (the call
 * fails fast), else 1. One atomic load when nothing changed. */
static int follow(dd_recent *r)
{
    uint64_t g = dd_sentinel_generation(r->sentinel);
    if (g != r->gen) {
        struct dd_sentinel_addr a;
        g = dd_sentinel_master(r->sentinel, &a);
        close_now(r);
        memcpy(r->host, a.host, sizeof r->host);
        r->port = a.port;
        r->gen = g;
        r->retry_at_ns = 0;
        r->backoff_ms = BACKOFF_MIN_MS;
    }
    if (g == 0) {
        set_err(r, "redis: no master known yet (asking Sentinel)");
        return 0;
    }
    return 1;
}

/* A fresh connection is to a master (ROLE), or is dropped: Sentinel may
 * name a server that was demoted since. */
static int check_role(dd_recent *r)
{
    const char *argv[1] = {"ROLE"};
    size_t lens[1] = {4};
    errno = 0;
    redisReply *rep = redisCommandArgv(r->c, 1, argv, lens);
    if (!rep) return conn_failed(r, errno, "ROLE");
    /* An error (ROLE refused by an ACL, or unknown) cannot tell: trust
     * Sentinel's word then. */
    int master =
        rep->type == REDIS_REPLY_ERROR || (rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
                                           rep->element[0]->type == REDIS_REPLY_STRING &&
                                           strcmp(rep->element[0]->str, "master") == 0);
    char role[64];
    snprintf(role, sizeof role, "ROLE is %s",
             rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
                     rep->element[0]->type == REDIS_REPLY_STRING
                 ? rep->element[0]->str
             : rep->type == REDIS_REPLY_ERROR ? rep->str
                                              : "not an array");
    freeReplyObject(rep);
    return master ? DD_OK : not_master(r, "connect", role);
}

/* Make sure r->c is a live connection, or fail fast while backing off.
 * The first call connects (recent.timeout_ms for connect, then the same as
 * the socket's read/write timeout, so every call is bounded by it per
 * read) and sends AUTH when recent.password is set. A timeout or an I/O
 * error drops the connection (drop); the next attempt is allowed
 * after a backoff that starts at 100 ms and doubles up to 5 s, and a
 * success resets it. A connection that had worked and is found closed by
 * the peer (Redis restarted while we were idle) is replaced once within
 * the same call, since the commands are idempotent; a timeout is never
 * retried, so a call costs at most about twice recent.timeout_ms. */
static int ensure(dd_recent *r)
{
    if (r->sentinel && !follow(r)) return DD_ERR_UNAVAILABLE;
    if (r->c) return DD_OK;
    if (dd_mono_ns() < r->retry_at_ns) {
        set_err(r, "redis %s:%d: unavailable (reconnect in backoff)", r->host, r->port);
        return DD_ERR_UNAVAILABLE;
    }
    struct timeval tv = {.tv_sec = r->timeout_ms / 1000,
                         .tv_usec = (suseconds_t)(r->timeout_ms % 1000) * 1000};
    if (r->is_unix)
        r->c = redisConnectUnixWithTimeout(r->host, tv);
    else
        r->c = redisConnectWithTimeout(r->host, r->port, tv);
    if (!r->c || r->c->err) return conn_failed(r, errno, "connect");
    if (redisSetTimeout(r->c, tv) != REDIS_OK) return conn_failed(r, errno, "set timeout");
    count(&st_reconnects);
    if (r->password[0]) {
        int rc = auth(r);
        if (rc != DD_OK) return rc;
    }
    if (r->sentinel) return check_role(r);
    return DD_OK;
}

/* Whether a failure on a connection that had worked looks like the peer
 * closed it while idle, so one immediate retry on a fresh one is worth it. */
static int stale(const dd_recent *r, int saved_errno)
{
    if (!r->used || !r->c) return 0;
    if (r->c->err == REDIS_ERR_EOF) return 1;
    return r->c->err == REDIS_ERR_IO &&
           (saved_errno == ECONNRESET || saved_errno == EPIPE || saved_errno == ECONNABORTED);
}

/* A reply left pending by a fetch_begin without its fetch_end: read and
 * dropped, so it is never taken for the next command's. */
static void settle(dd_recent *r)
{
    if (!r->pending) return;
    r->pending = 0;
    if (r->pending_cap == 0) return; /* nothing was sent */
    for (size_t i = 0; i < r->pending_n; i++) {
        struct dd_recent_reply k = {0}; /* room for nothing: the reply is only read */
        if (!r->c || dd_recent_reply_read(r->c, &k) != REDIS_OK) {
            close_now(r);
            return;
        }
    }
}

/* Build the key for (scene, user) in r->key; returns its length or 0 on
 * allocation failure (the message is set). */
static size_t make_key_at(dd_recent *r, size_t off, const char *scene, size_t scene_len,
                          const char *user, size_t user_len)
{
    char num[24];
    int nl = snprintf(num, sizeof num, "%zu", user_len);
    size_t need = off + sizeof KEY_PREFIX - 1 + (size_t)nl + 1 + user_len + 1 + scene_len;
    if (need > r->key_cap) {
        size_t cap = need * 2;
        char *k = realloc(r->key, cap);
        if (!k) {
            set_err(r, "out of memory");
            return 0;
        }
        r->key = k;
        r->key_cap = cap;
    }
    char *p = r->key + off;
    memcpy(p, KEY_PREFIX, sizeof KEY_PREFIX - 1);
    p += sizeof KEY_PREFIX - 1;
    memcpy(p, num, (size_t)nl);
    p += nl;
    *p++ = '{';
    if (user_len) memcpy(p, user, user_len);
    p += user_len;
    *p++ = '}';
    if (scene_len) memcpy(p, scene, scene_len);
    p += scene_len;
    return (size_t)(p - r->key) - off;
}

static size_t make_key(dd_recent *r, const char *scene, size_t scene_len, const char *user,
                       size_t user_len)
{
    return make_key_at(r, 0, scene, scene_len, user, user_len);
}

static int reserve_argv(dd_recent *r, size_t n)
{
    if (n <= r->argv_cap) return DD_OK;
    const char **a = realloc(r->argv, n * sizeof *a);
    if (!a) goto nomem;
    r->argv = a;
    size_t *l = realloc(r->argvlen, n * sizeof *l);
    if (!l) goto nomem;
    r->argvlen = l;
    r->argv_cap = n;
    return DD_OK;
nomem:
    set_err(r, "out of memory");
    return DD_ERR_NOMEM;
}

/* An error reply: the connection stays usable, unless it says the server
 * is a replica now (-READONLY), which not_master handles. */
static int reply_error(dd_recent *r, const char *what, const redisReply *rep)
{
    if (rep->type == REDIS_REPLY_ERROR && is_readonly(rep->str))
        return not_master(r, what, rep->str);
    set_err(r, "redis %s:%d: %s: %s", r->host, r->port, what,
            rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply type");
    count(&st_reply_errors);
    return DD_ERR_IO;
}

/* Send the NCMD commands already appended and read their replies into
 * REPS. Returns 0, or -1 with errno saved (every reply read is freed). */
static int read_replies(dd_recent *r, redisReply **reps, int ncmd, int *saved_errno)
{
    for (int i = 0; i < ncmd; i++) {
        void *rep = NULL;
        errno = 0;
        if (redisGetReply(r->c, &rep) != REDIS_OK) {
            *saved_errno = errno;
            for (int j = 0; j < i; j++) freeReplyObject(reps[j]);
            return -1;
        }
        reps[i] = rep;
    }
    return 0;
}

/* KEYS[1] the set, ARGV[1] at_ms, ARGV[2..] the ids oldest first: ZADD
 * them with scores at_ms * 1024 + the next sequence numbers, in chunks
 * that stay under Lua's unpack limit. Returns the ids added.
 *
 * The script (atomic in Redis, so right across dedupd workers and nodes)
 * finds the highest score already in [at_ms * 1024, at_ms * 1024 + 1023]
 * and gives the request's ids the next ones, in request order. Ids
 * delivered in the same millisecond then keep their delivery order and
 * the trim drops the oldest; with bare at_ms scores they tied and Redis
 * broke ties by member bytes, dropping some of the newest. Past 1024 ids
 * in one millisecond for one key the last score repeats. at_ms * 1024 is
 * exact in a double until the year 2248. Sets written with bare at_ms
 * scores read as before; their ids rank below every new one. Only the
 * last recent.size ids of a request are sent (the others would be
 * trimmed at once); re-delivering an id moves it to the new time. */
static const char ADD_SCRIPT[] =
    "local k, base = KEYS[1], tonumber(ARGV[1]) * 1024\n"
    "local top = redis.call('ZREVRANGEBYSCORE', k, base + 1023, base, 'WITHSCORES', 'LIMIT', 0, 1)\n"
    "local s = top[2] and tonumber(top[2]) + 1 or base\n"
    "local added, args = 0, {}\n"
    "for i = 2, #ARGV do\n"
    "  args[#args + 1] = math.min(s, base + 1023)\n"
    "  args[#args + 1] = ARGV[i]\n"
    "  s = s + 1\n"
    "  if #args >= 1000 or i == #ARGV then\n"
    "    added = added + redis.call('ZADD', k, unpack(args))\n"
    "    args = {}\n"
    "  end\n"
    "end\n"
    "return added\n";

/* One pipelined record on the live connection. Returns a dd_err, or
 * CONN_FAILED with errno in *saved_errno for the caller to retry or drop. */
static int do_record(dd_recent *r, size_t keylen, const char *const *items, const size_t *lens,
                     size_t n, int64_t at_ms, uint32_t *size_after, int *saved_errno)
{
    char ms[24], stop[24], ttl[16];
    size_t first = n > r->size ? n - r->size : 0;
    size_t m = n - first;
    int sl = snprintf(ms, sizeof ms, "%" PRId64, at_ms);
    int tl = snprintf(stop, sizeof stop, "%" PRId64, -(int64_t)r->size - 1);
    int el = snprintf(ttl, sizeof ttl, "%" PRIu32, r->ttl_s);
    redisReply *reps[4];
    int ncmd = 0;

    const char *head[5] = {"EVAL", ADD_SCRIPT, "1", r->key, ms};
    size_t headlen[5] = {4, sizeof ADD_SCRIPT - 1, 1, keylen, (size_t)sl};
    for (size_t i = 0; i < 5; i++) {
        r->argv[i] = head[i];
        r->argvlen[i] = headlen[i];
    }
    for (size_t i = 0; i < m; i++) {
        r->argv[5 + i] = items[first + i];
        r->argvlen[5 + i] = lens[first + i];
    }
    /* Appending only fills hiredis' output buffer; nothing is sent until the
     * first redisGetReply, so all four go in one write. */
    if (redisAppendCommandArgv(r->c, (int)(5 + m), r->argv, r->argvlen) != REDIS_OK) goto io;
    ncmd++;
    const char *trim[4] = {"ZREMRANGEBYRANK", r->key, "0", stop};
    size_t trimlen[4] = {15, keylen, 1, (size_t)tl};
    if (redisAppendCommandArgv(r->c, 4, trim, trimlen) != REDIS_OK) goto io;
    ncmd++;
    int with_ttl = r->ttl_s > 0;
    if (with_ttl) {
        const char *exp[3] = {"EXPIRE", r->key, ttl};
        size_t explen[3] = {6, keylen, (size_t)el};
        if (redisAppendCommandArgv(r->c, 3, exp, explen) != REDIS_OK) goto io;
        ncmd++;
    }
    const char *card[2] = {"ZCARD", r->key};
    size_t cardlen[2] = {5, keylen};
    if (redisAppendCommandArgv(r->c, 2, card, cardlen) != REDIS_OK) goto io;
    ncmd++;

    if (read_replies(r, reps, ncmd, saved_errno) != 0) return CONN_FAILED;
    int rc = DD_OK;
    for (int i = 0; i < ncmd && rc == DD_OK; i++) {
        static const char *const names[] = {"EVAL", "ZREMRANGEBYRANK", "EXPIRE", "ZCARD"};
        int idx = (!with_ttl && i == 2) ? 3 : i;
        if (reps[i]->type != REDIS_REPLY_INTEGER) rc = reply_error(r, names[idx], reps[i]);
    }
    if (rc == DD_OK && size_after) {
        long long card_n = reps[ncmd - 1]->integer;
        *size_after = card_n < 0 ? 0 : card_n > UINT32_MAX ? UINT32_MAX : (uint32_t)card_n;
    }
    for (int i = 0; i < ncmd; i++) freeReplyObject(reps[i]);
    return rc;
io:
    /* Only allocation fails while appending; the context is then in error
     * with part of the pipeline queued, so it cannot be reused. */
    set_err(r, "out of memory");
    close_now(r);
    return DD_ERR_NOMEM;
}

int dd_recent_record(dd_recent *r, const char *scene, size_t scene_len, const char *user,
                     size_t user_len, const char *const *items, const size_t *lens, size_t n,
                     int64_t at_ms, uint32_t *size_after)
{
    settle(r);
    r->errstr[0] = '\0';
    if (size_after) *size_after = 0;
    if (at_ms == 0) at_ms = dd_now_ms();
    size_t keylen = make_key(r, scene, scene_len, user, user_len);
    if (!keylen) return DD_ERR_NOMEM;
    size_t m = n > r->size ? r->size : n;
    if (5 + m > INT_MAX) {
        set_err(r, "too many items");
        return DD_ERR_INVALID;
    }
    if (reserve_argv(r, 5 + m) != DD_OK) return DD_ERR_NOMEM;

    for (int attempt = 0;; attempt++) {
        int rc = ensure(r);
        if (rc != DD_OK) return rc;
        int saved_errno = 0;
        if (m == 0) {
            const char *card[2] = {"ZCARD", r->key};
            size_t cardlen[2] = {5, keylen};
            errno = 0;
            redisReply *rep = redisCommandArgv(r->c, 2, card, cardlen);
            if (rep) {
                r->used = 1;
                r->backoff_ms = BACKOFF_MIN_MS;
                if (rep->type != REDIS_REPLY_INTEGER) {
                    rc = reply_error(r, "ZCARD", rep);
                } else if (size_after) {
                    *size_after = rep->integer < 0 ? 0 : (uint32_t)rep->integer;
                }
                freeReplyObject(rep);
                return rc;
            }
            saved_errno = errno;
        } else {
            rc = do_record(r, keylen, items, lens, n, at_ms, size_after, &saved_errno);
            if (rc != CONN_FAILED) {
                if (rc == DD_OK || rc == DD_ERR_IO) {
                    r->used = 1;
                    r->backoff_ms = BACKOFF_MIN_MS;
                }
                return rc;
            }
        }
        if (attempt == 0 && stale(r, saved_errno)) {
            close_now(r);
            continue;
        }
        return conn_failed(r, saved_errno, "record");
    }
}

/* ZREVRANGE key 0 cap-1: the fetch command for the key in r->key. */
struct fetch_cmd {
    char stop[24];
    const char *argv[4];
    size_t lens[4];
};

static void fetch_cmd_at(const char *key, size_t keylen, size_t cap, struct fetch_cmd *c)
{
    int sl = snprintf(c->stop, sizeof c->stop, "%zu", cap - 1);
    c->argv[0] = "ZREVRANGE";
    c->argv[1] = key;
    c->argv[2] = "0";
    c->argv[3] = c->stop;
    c->lens[0] = 9;
    c->lens[1] = keylen;
    c->lens[2] = 1;
    c->lens[3] = (size_t)sl;
}

static void fetch_cmd(const dd_recent *r, size_t keylen, size_t cap, struct fetch_cmd *c)
{
    fetch_cmd_at(r->key, keylen, cap, c);
}

/* A fetch reply read into K: its hashes are in the caller's array. */
static int fetch_done(dd_recent *r, const struct dd_recent_reply *k, size_t *n)
{
    r->used = 1;
    r->backoff_ms = BACKOFF_MIN_MS;
    if (k->type == REDIS_REPLY_ARRAY) {
        *n = k->n;
        return DD_OK;
    }
    if (k->type == REDIS_REPLY_ERROR && is_readonly(k->err))
        return not_master(r, "ZREVRANGE", k->err);
    set_err(r, "redis %s:%d: ZREVRANGE: %s", r->host, r->port,
            k->type == REDIS_REPLY_ERROR ? k->err : "unexpected reply type");
    count(&st_reply_errors);
    return DD_ERR_IO;
}

/* Send the fetch of CAP (> 0) members for the key in r->key, all of it
 * written: one immediate retry on a fresh connection if the old one was
 * found closed while idle. Returns 0 or an error (the connection dropped
 * as conn_failed does; on out of memory closed, hiredis having marked it
 * unusable). */
static int fetch_send_keys(dd_recent *r, size_t nkeys, const size_t *lens, size_t cap)
{
    for (int attempt = 0;; attempt++) {
        int rc = ensure(r);
        if (rc != DD_OK) return rc;
        /* One pipeline: every key's command written at once. */
        size_t off = 0;
        for (size_t i = 0; i < nkeys; i++) {
            struct fetch_cmd cmd;
            fetch_cmd_at(r->key + off, lens[i], cap, &cmd);
            off += lens[i];
            if (redisAppendCommandArgv(r->c, 4, cmd.argv, cmd.lens) != REDIS_OK) {
                set_err(r, "out of memory");
                close_now(r);
                return DD_ERR_NOMEM;
            }
        }
        int done = 0;
        errno = 0;
        while (!done && redisBufferWrite(r->c, &done) == REDIS_OK) {
        }
        if (done) return DD_OK;
        int saved_errno = errno;
        if (attempt == 0 && stale(r, saved_errno)) {
            close_now(r);
            continue;
        }
        return conn_failed(r, saved_errno, "fetch");
    }
}

static int fetch_send(dd_recent *r, size_t keylen, size_t cap)
{
    return fetch_send_keys(r, 1, &keylen, cap);
}

/* The whole fetch, waiting for the reply, for the key in r->key. A reply
 * that fails on a connection found closed while idle is asked for once
 * more on a fresh one. */
static int fetch_sync(dd_recent *r, size_t keylen, uint64_t *hashes, size_t cap, size_t *n)
{
    for (int attempt = 0;; attempt++) {
        int rc = fetch_send(r, keylen, cap);
        if (rc != DD_OK) return rc;
        struct dd_recent_reply k = {.hashes = hashes, .cap = cap};
        errno = 0;
        if (dd_recent_reply_read(r->c, &k) == REDIS_OK) return fetch_done(r, &k, n);
        int saved_errno = errno;
        if (attempt == 0 && stale(r, saved_errno)) {
            close_now(r);
            continue;
        }
        return conn_failed(r, saved_errno, "fetch");
    }
}

int dd_recent_fetch(dd_recent *r, const char *scene, size_t scene_len, const char *user,
                    size_t user_len, uint64_t *hashes, size_t cap, size_t *n)
{
    *n = 0;
    settle(r);
    r->errstr[0] = '\0';
    if (cap == 0) return DD_OK;
    size_t keylen = make_key(r, scene, scene_len, user, user_len);
    if (!keylen) return DD_ERR_NOMEM;
    return fetch_sync(r, keylen, hashes, cap, n);
}

int dd_recent_fetch_begin(dd_recent *r, const char *scene, size_t scene_len, const char *user,
                          size_t user_len, size_t cap)
{
    struct dd_recent_scene sc = {scene, scene_len};
    return dd_recent_fetch_begin_scenes(r, &sc, 1, user, user_len, cap);
}

int dd_recent_fetch_begin_scenes(dd_recent *r, const struct dd_recent_scene *scenes, size_t nscenes,
                                 const char *user, size_t user_len, size_t cap)
{
    settle(r);
    r->errstr[0] = '\0';
    if (nscenes == 0 || nscenes > DD_RECENT_SCENES_MAX) {
        set_err(r, "%zu scenes: want 1 to %d", nscenes, DD_RECENT_SCENES_MAX);
        return DD_ERR_INVALID;
    }
    size_t off = 0;
    for (size_t i = 0; i < nscenes; i++) {
        size_t keylen = make_key_at(r, off, scenes[i].p, scenes[i].len, user, user_len);
        if (!keylen) return DD_ERR_NOMEM;
        r->pending_lens[i] = keylen;
        off += keylen;
    }
    r->pending_n = nscenes;
    r->pending_cap = cap;
    if (cap == 0) {
        r->pending = 1;
        return DD_OK;
    }
    int rc = fetch_send_keys(r, nscenes, r->pending_lens, cap);
    if (rc == DD_OK) r->pending = 1;
    return rc;
}

/* Every pending reply, waiting, on a fresh connection: the keys are sent
 * again (the whole pipeline). */
static int fetch_sync_keys(dd_recent *r, uint64_t *hashes, size_t cap, size_t *counts)
{
    int rc = fetch_send_keys(r, r->pending_n, r->pending_lens, r->pending_cap);
    for (size_t i = 0; rc == DD_OK && i < r->pending_n; i++) {
        struct dd_recent_reply k = {.hashes = hashes + i * cap, .cap = cap};
        errno = 0;
        if (dd_recent_reply_read(r->c, &k) != REDIS_OK) return conn_failed(r, errno, "fetch");
        rc = fetch_done(r, &k, &counts[i]);
    }
    return rc;
}

int dd_recent_fetch_end_scenes(dd_recent *r, uint64_t *hashes, size_t cap, size_t *counts)
{
    if (!r->pending) {
        set_err(r, "fetch_end without a fetch_begin");
        return DD_ERR_INVALID;
    }
    size_t n = r->pending_n;
    for (size_t i = 0; i < n; i++) counts[i] = 0;
    r->pending = 0;
    if (r->pending_cap == 0) return DD_OK;
    if (cap > r->pending_cap) cap = r->pending_cap;
    int rc = DD_OK;
    for (size_t i = 0; i < n; i++) {
        struct dd_recent_reply k = {.hashes = hashes + i * cap, .cap = cap};
        errno = 0;
        if (r->c && dd_recent_reply_read(r->c, &k) == REDIS_OK) {
            /* every reply is read, whatever an earlier one said */
            int one = fetch_done(r, &k, &counts[i]);
            if (rc == DD_OK) rc = one;
            continue;
        }
        int saved_errno = errno;
        if (i == 0 && stale(r, saved_errno)) {
            /* closed while idle before the commands reached it: once more,
             * on a fresh connection, waiting this time */
            close_now(r);
            return fetch_sync_keys(r, hashes, cap, counts);
        }
        for (size_t j = 0; j < n; j++) counts[j] = 0;
        return conn_failed(r, saved_errno, "fetch");
    }
    if (rc != DD_OK)
        for (size_t j = 0; j < n; j++) counts[j] = 0;
    return rc;
}

int dd_recent_fetch_end(dd_recent *r, uint64_t *hashes, size_t cap, size_t *n)
{
    *n = 0;
    if (r->pending && r->pending_n != 1) {
        set_err(r, "fetch_end of a fetch of %zu scenes", r->pending_n);
        return DD_ERR_INVALID;
    }
    return dd_recent_fetch_end_scenes(r, hashes, cap, n);
}

void dd_recent_fetch_cancel(dd_recent *r)
{
    settle(r);
}

/* One command on the live connection, once more on a fresh one when the
 * old one was found closed while idle. Returns 0 with the reply in *REP
 * (the caller frees it), or an error as conn_failed (WHAT names the call). */
static int command(dd_recent *r, int argc, const char **argv, const size_t *lens, const char *what,
                   redisReply **rep)
{
    for (int attempt = 0;; attempt++) {
        int rc = ensure(r);
        if (rc != DD_OK) return rc;
        errno = 0;
        *rep = redisCommandArgv(r->c, argc, argv, lens);
        if (*rep) {
            r->used = 1;
            r->backoff_ms = BACKOFF_MIN_MS;
            return DD_OK;
        }
        int saved_errno = errno;
        if (attempt == 0 && stale(r, saved_errno)) {
            close_now(r);
            continue;
        }
        return conn_failed(r, saved_errno, what);
    }
}

int dd_recent_ping(dd_recent *r)
{
    settle(r);
    r->errstr[0] = '\0';
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    redisReply *rep;
    int rc = command(r, 1, argv, lens, "ping", &rep);
    if (rc != DD_OK) return rc;
    if (rep->type != REDIS_REPLY_STATUS) rc = reply_error(r, "PING", rep);
    freeReplyObject(rep);
    return rc;
}

int dd_recent_forget(dd_recent *r, const char *scene, size_t scene_len, const char *user,
                     size_t user_len)
{
    settle(r);
    r->errstr[0] = '\0';
    size_t keylen = make_key(r, scene, scene_len, user, user_len);
    if (!keylen) return DD_ERR_NOMEM;
    const char *argv[2] = {"DEL", r->key};
    size_t lens[2] = {3, keylen};
    redisReply *rep;
    int rc = command(r, 2, argv, lens, "forget", &rep);
    if (rc != DD_OK) return rc;
    if (rep->type != REDIS_REPLY_INTEGER) rc = reply_error(r, "DEL", rep);
    freeReplyObject(rep);
    return rc;
}

int dd_recent_forget_all(dd_recent *r, const char *user, size_t user_len, dd_recent_scene_fn fn,
                         void *ud)
{
    settle(r);
    r->errstr[0] = '\0';
    /* The pattern: KEY_PREFIX len{user}* with the id's glob characters
     * escaped, so it matches exactly this user's sets, whatever scene. */
    char num[24];
    int nl = snprintf(num, sizeof num, "%zu", user_len);
    size_t prefix_len = sizeof KEY_PREFIX - 1 + (size_t)nl + 1 + user_len + 1;
    char *pat = malloc(sizeof KEY_PREFIX - 1 + (size_t)nl + 1 + 2 * user_len + 2 + 1);
    if (!pat) {
        set_err(r, "out of memory");
        return DD_ERR_NOMEM;
    }
    size_t pl = 0;
    memcpy(pat, KEY_PREFIX, sizeof KEY_PREFIX - 1);
    pl += sizeof KEY_PREFIX - 1;
    memcpy(pat + pl, num, (size_t)nl);
    pl += (size_t)nl;
    pat[pl++] = '{';
    for (size_t i = 0; i < user_len; i++) {
        if (strchr("*?[]\\", user[i]) && user[i]) pat[pl++] = '\\';
        pat[pl++] = user[i];
    }
    pat[pl++] = '}';
    pat[pl++] = '*';
    char cursor[32] = "0";
    int rc = DD_OK;
    do {
        const char *argv[6] = {"SCAN", cursor, "MATCH", pat, "COUNT", "1000"};
        size_t lens[6] = {4, strlen(cursor), 5, pl, 5, 4};
        redisReply *rep;
        rc = command(r, 6, argv, lens, "forget (scan)", &rep);
        if (rc != DD_OK) break;
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
            rep->element[0]->type != REDIS_REPLY_STRING || rep->element[0]->len >= sizeof cursor ||
            rep->element[1]->type != REDIS_REPLY_ARRAY) {
            rc = reply_error(r, "SCAN", rep);
            freeReplyObject(rep);
            break;
        }
        memcpy(cursor, rep->element[0]->str, rep->element[0]->len);
        cursor[rep->element[0]->len] = '\0';
        const redisReply *keys = rep->element[1];
        for (size_t i = 0; i < keys->elements && rc == DD_OK; i++) {
            const redisReply *k = keys->element[i];
            if (k->type != REDIS_REPLY_STRING || k->len < prefix_len) continue;
            const char *dargv[2] = {"DEL", k->str};
            size_t dlens[2] = {3, k->len};
            redisReply *d;
            rc = command(r, 2, dargv, dlens, "forget", &d);
            if (rc != DD_OK) break;
            bool gone = d->type == REDIS_REPLY_INTEGER && d->integer > 0;
            if (d->type != REDIS_REPLY_INTEGER) rc = reply_error(r, "DEL", d);
            freeReplyObject(d);
            if (rc == DD_OK && gone && fn) rc = fn(ud, k->str + prefix_len, k->len - prefix_len);
        }
        freeReplyObject(rep);
    } while (rc == DD_OK && strcmp(cursor, "0") != 0);
    free(pat);
    return rc;
}

/* A score as the delivery time in ms: at_ms * 1024 + a sequence since
 * ADD_SCRIPT, bare at_ms before it (below 10^14 ms, the year 5138). */
static int64_t score_ms(double score)
{
    if (!(score >= 0) || score > 9e18) return 0;
    return score >= 1e14 ? (int64_t)(score / 1024) : (int64_t)score;
}

int dd_recent_fetch_times(dd_recent *r, const char *scene, size_t scene_len, const char *user,
                          size_t user_len, uint64_t *hashes, int64_t *times_ms, size_t cap,
                          size_t *n)
{
    *n = 0;
    settle(r);
    r->errstr[0] = '\0';
    if (cap == 0) return DD_OK;
    size_t keylen = make_key(r, scene, scene_len, user, user_len);
    if (!keylen) return DD_ERR_NOMEM;
    struct fetch_cmd c;
    fetch_cmd(r, keylen, cap, &c);
    const char *argv[5] = {c.argv[0], c.argv[1], c.argv[2], c.argv[3], "WITHSCORES"};
    size_t lens[5] = {c.lens[0], c.lens[1], c.lens[2], c.lens[3], 10};
    redisReply *rep;
    int rc = command(r, 5, argv, lens, "fetch", &rep);
    if (rc != DD_OK) return rc;
    if (rep->type != REDIS_REPLY_ARRAY) {
        rc = reply_error(r, "ZREVRANGE WITHSCORES", rep);
    } else {
        for (size_t i = 0; i + 1 < rep->elements && *n < cap; i += 2) {
            const redisReply *m = rep->element[i], *sc = rep->element[i + 1];
            if (m->type != REDIS_REPLY_STRING || sc->type != REDIS_REPLY_STRING) continue;
            hashes[*n] = dd_hash(m->str, m->len);
            times_ms[*n] = score_ms(strtod(sc->str, NULL));
            (*n)++;
        }
    }
    freeReplyObject(rep);
    return rc;
}

void dd_recent_collect(dd_prom *p)
{
    struct dd_recent_stats r;
    dd_recent_get_stats(&r);
    dd_prom_family(p, "dedupd_recent_errors_total", "Redis errors, by kind", DD_PROM_COUNTER);
    static const struct dd_prom_label timeout = {"kind", "timeout"},
                                      connection = {"kind", "connection"},
                                      reply = {"kind", "reply"}, readonly = {"kind", "readonly"};
    dd_prom_sample_u64(p, "dedupd_recent_errors_total", &timeout, 1, r.timeouts);
    dd_prom_sample_u64(p, "dedupd_recent_errors_total", &connection, 1, r.connection_errors);
    dd_prom_sample_u64(p, "dedupd_recent_errors_total", &reply, 1, r.reply_errors);
    dd_prom_sample_u64(p, "dedupd_recent_errors_total", &readonly, 1, r.readonly);
    dd_prom_counter(p, "dedupd_recent_reconnects_total", "Redis reconnections", r.reconnects);
    dd_sentinel_collect(p);
}
