/* SPDX-License-Identifier: Apache-2.0
 *
 * recent.h - the last N delivered item ids per (scene, user), in Redis.
 * Covers the seconds between a delivery and its play event arriving.
 * Knows nothing of RocksDB.
 *
 * One sorted set per (scene, user): member = item id, score = delivery time
 * in ms; trimmed to recent.size and given recent.ttl_s on every record, in
 * one pipelined round trip. hiredis 0.14 blocking API with a timeout of
 * recent.timeout_ms on every call.
 *
 * A dd_recent is one connection and is NOT thread-safe: the RPC layer owns
 * one per worker thread. It connects lazily and reconnects with backoff, so
 * it can be created while Redis is down; calls then fail fast with
 * DD_ERR_UNAVAILABLE until a reconnect succeeds.
 *
 * With recent.sentinels the address is not recent.redis but the master
 * Redis Sentinel names (sentinel.h): main.c runs one dd_sentinel and hands
 * it to every dd_recent in the conf. Each call first compares the
 * watcher's generation with the one its connection was made for (one
 * atomic load) and, when it moved, drops the connection and connects to
 * the new master at once, whatever the backoff. A connection is used only
 * after ROLE says "master". A -READONLY reply (the master was demoted), a
 * server that is not master, or a connection lost or refused makes the
 * call fail with DD_ERR_UNAVAILABLE and tells the watcher to ask Sentinel
 * again. So during a failover Filter answers degraded and RecordDelivery
 * fails retryably until Sentinel names the new master; then both resume.
 */
#ifndef DD_RECENT_H
#define DD_RECENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct dd_sentinel dd_sentinel;

/* The Redis client's settings (recent.* in conf/dedupd.conf). */
struct dd_recent_conf {
    char *redis;             /* host:port; not used with sentinels */
    char *password;          /* the master's AUTH; "" = no AUTH */
    char *sentinels;         /* "host:port,host:port": the master from Sentinel; "" = redis */
    char *master_name;       /* the master's name in Sentinel: one, or one per shard by ';'
                                 * (main.c keeps this node's shard's) */
    char *sentinel_password; /* Sentinel's AUTH; "" = no AUTH */
    uint32_t size;           /* deliveries kept per (scene, user) */
    uint32_t ttl_s;          /* expiry of an idle user's set */
    uint32_t timeout_ms;     /* per Redis call, per Sentinel call */
    dd_sentinel *sentinel;   /* not a key: the watcher for sentinels (borrowed, main.c's);
                                 * NULL = connect to redis */
};

/* Check the Sentinel keys of CONF alone: recent.sentinels "" or a list of
 * host:port; recent.master_name set when it is, with one name or SHARDS
 * names. Returns 0 or DD_ERR_INVALID with a message naming the key. */
int dd_recent_conf_check(const struct dd_recent_conf *conf, uint32_t shards, char *err,
                         size_t errlen);

typedef struct dd_recent dd_recent;

/* Create a client for CONF (copied; CONF->sentinel borrowed, it must
 * outlive the client). Does not connect yet.
 * Returns 0, DD_ERR_INVALID (bad recent.redis address, message in err) or
 * DD_ERR_NOMEM; *out is NULL on error. Free with dd_recent_free. */
int dd_recent_new(dd_recent **out, const struct dd_recent_conf *conf, char *err, size_t errlen);
void dd_recent_free(dd_recent *r); /* NULL is a no-op */

/* Record N delivered ids (ITEMS[i] of LENS[i] bytes) for (SCENE, USER) at
 * AT_MS (0 = now), trim to recent.size, refresh the TTL. On success
 * *SIZE_AFTER (if not NULL) is the set's size after trimming. Returns 0,
 * DD_ERR_UNAVAILABLE (connection), DD_ERR_TIMEOUT or DD_ERR_IO (error
 * reply); dd_recent_errstr says more. */
int dd_recent_record(dd_recent *r, const char *scene, size_t scene_len, const char *user,
                     size_t user_len, const char *const *items, const size_t *lens, size_t n,
                     int64_t at_ms, uint32_t *size_after);

/* Fetch (SCENE, USER)'s recent deliveries as item hashes (dd_hash) into
 * HASHES (room for CAP; recent.size is enough), *N = how many. Errors as
 * dd_recent_record; *N = 0 then. */
int dd_recent_fetch(dd_recent *r, const char *scene, size_t scene_len, const char *user,
                    size_t user_len, uint64_t *hashes, size_t cap, size_t *n);

/* The same fetch in two halves, so the Redis round trip overlaps other
 * work: dd_recent_fetch_begin sends the command (connecting if needed,
 * with the same backoff) and returns 0 or an error as above; only after 0,
 * dd_recent_fetch_end reads the reply into HASHES (at most CAP, and at
 * most begin's CAP) and returns as dd_recent_fetch (a connection the
 * server closed while idle is retried once, waiting). recent.timeout_ms
 * runs from when each half starts waiting. Between the two, no other call
 * on R; a begun fetch not ended is given up with dd_recent_fetch_cancel
 * (or by the next call on R), which reads and drops its reply, so it is
 * never taken for another command's. */
int dd_recent_fetch_begin(dd_recent *r, const char *scene, size_t scene_len, const char *user,
                          size_t user_len, size_t cap);
int dd_recent_fetch_end(dd_recent *r, uint64_t *hashes, size_t cap, size_t *n);
void dd_recent_fetch_cancel(dd_recent *r); /* nothing pending: a no-op; cannot fail */

/* The fetch for several scenes of one user in one round trip: one
 * pipeline of NSCENES (1 to DD_RECENT_SCENES_MAX) ZREVRANGE commands.
 * SCENES[i] are LEN bytes at P (borrowed for the call). Begin as
 * dd_recent_fetch_begin, DD_ERR_INVALID for NSCENES out of range; end
 * reads every reply: scene i's hashes into HASHES[i * CAP ..] (room for
 * NSCENES * CAP), their count into COUNTS[i]. A failure of any reply
 * fails the whole fetch (every count 0), as dd_recent_fetch_end fails;
 * the other replies are read all the same, so the connection stays in
 * step. dd_recent_fetch_end ends only a fetch of one scene
 * (DD_ERR_INVALID otherwise); dd_recent_fetch_cancel gives up either. */
#define DD_RECENT_SCENES_MAX 9
struct dd_recent_scene {
    const char *p;
    size_t len;
};
int dd_recent_fetch_begin_scenes(dd_recent *r, const struct dd_recent_scene *scenes, size_t nscenes,
                                 const char *user, size_t user_len, size_t cap);
int dd_recent_fetch_end_scenes(dd_recent *r, uint64_t *hashes, size_t cap, size_t *counts);

/* The same fetch with the delivery times (ZREVRANGE WITHSCORES), newest
 * first: HASHES[i] delivered at TIMES_MS[i] (ms; from the score, which is
 * at_ms * 1024 + a sequence, or at_ms in sets written before that). For
 * operators' questions (why.h), not Filter's path: it builds hiredis'
 * reply objects. Errors as dd_recent_fetch. */
int dd_recent_fetch_times(dd_recent *r, const char *scene, size_t scene_len, const char *user,
                          size_t user_len, uint64_t *hashes, int64_t *times_ms, size_t cap,
                          size_t *n);

/* PING: whether Redis answers within recent.timeout_ms (connecting, and
 * authenticating, if need be; a connection that failed is retried only
 * after its back-off). Errors as dd_recent_record. */
int dd_recent_ping(dd_recent *r);

/* Delete (SCENE, USER)'s deliveries. Errors as dd_recent_record. */
int dd_recent_forget(dd_recent *r, const char *scene, size_t scene_len, const char *user,
                     size_t user_len);

/* Delete USER's deliveries in every scene: SCAN (COUNT 1000) with a
 * pattern bounded to USER's own keys (its length and hash tag, glob
 * characters of the id escaped), never KEYS; each key found is deleted and
 * FN(UD, scene, scene_len) told its scene (valid for the call only; a
 * scene may be told twice if SCAN returns its key twice). A non-zero
 * return from FN stops and is returned. SCAN walks the whole keyspace in
 * cursor steps, so the cost grows with Redis' key count: for erasure
 * requests, not a hot path. Errors as dd_recent_record (DD_ERR_NOMEM
 * too); keys deleted before an error stay deleted, and the call is safe
 * to repeat. */
typedef int (*dd_recent_scene_fn)(void *ud, const char *scene, size_t scene_len);
int dd_recent_forget_all(dd_recent *r, const char *user, size_t user_len, dd_recent_scene_fn fn,
                         void *ud);

/* The last error's text; "" if none. Borrowed, valid until the next call. */
const char *dd_recent_errstr(const dd_recent *r);

/* Error counters since start, by kind, for metrics (atomic, process-wide). */
struct dd_recent_stats {
    uint64_t timeouts;
    uint64_t connection_errors;
    uint64_t reply_errors;
    uint64_t readonly; /* -READONLY, or ROLE not master: not the master any more */
    uint64_t reconnects;
};
void dd_recent_get_stats(struct dd_recent_stats *out);

/* Render dedupd_recent_errors_total{kind} and
 * dedupd_recent_reconnects_total from the counters above, and the
 * Sentinel families (dd_sentinel_collect). */
typedef struct dd_prom dd_prom;
void dd_recent_collect(dd_prom *p);

#endif
