/* SPDX-License-Identifier: Apache-2.0
 *
 * sentinel.h - where the Redis master is, according to Redis Sentinel, for
 * recent.c. Knows nothing of what is stored in Redis.
 *
 * A dd_sentinel asks the Sentinels of recent.sentinels, in turn, for the
 * address of one master (SENTINEL get-master-addr-by-name), keeps a
 * subscription to one Sentinel's +switch-master channel, and publishes the
 * address with a generation number that changes with it. Every worker's
 * dd_recent reads the generation (one atomic load) on each call and
 * reconnects when it moved; a worker that finds the address wrong (a
 * -READONLY reply, a dropped connection, a server whose ROLE is not
 * master) says so with dd_sentinel_suspect, and Sentinel is asked again.
 *
 * Every byte from a Sentinel is untrusted: replies are parsed with reply
 * functions of our own that refuse nesting, more than a few elements and
 * strings longer than DD_SENTINEL_STR_MAX, the bytes buffered for one
 * reply are bounded, and an address must be a host:port that addr.h
 * accepts with a port other than 0.
 *
 * Threads: one watch thread per dd_sentinel (dd_sentinel_start). The
 * getters and dd_sentinel_suspect are for any thread; new, start and free
 * for the owner's (main.c's).
 */
#ifndef DD_SENTINEL_H
#define DD_SENTINEL_H

#include <stddef.h>
#include <stdint.h>

#define DD_SENTINEL_MAX 16       /* Sentinels in recent.sentinels */
#define DD_SENTINEL_HOST_MAX 256 /* a host name or address, with its NUL */
#define DD_SENTINEL_NAME_MAX 128 /* a master name, with its NUL */
#define DD_SENTINEL_STR_MAX 1024 /* the longest string accepted in a reply */

/* A Sentinel's or a master's address. */
struct dd_sentinel_addr {
    char host[DD_SENTINEL_HOST_MAX];
    uint16_t port; /* never 0 once parsed */
};

/* The watcher's settings (recent.sentinels and friends; strings borrowed
 * for the duration of dd_sentinel_new only). */
struct dd_sentinel_conf {
    const char *sentinels;   /* "host:port,host:port", asked in this order */
    const char *master_name; /* one master name */
    const char *password;    /* Sentinel AUTH; "" = none */
    uint32_t timeout_ms;     /* per connect and per reply */
};

typedef struct dd_sentinel dd_sentinel;

/* Check and copy CONF; no connection yet, no thread. Returns 0,
 * DD_ERR_INVALID (message in ERR names the key) or DD_ERR_NOMEM; *OUT is
 * NULL on error. Free with dd_sentinel_free. */
int dd_sentinel_new(dd_sentinel **out, const struct dd_sentinel_conf *conf, char *err,
                    size_t errlen);

/* Start the watch thread: it asks for the master at once and then keeps
 * watching (DESIGN in sentinel.c). Does not wait for an answer: until one
 * comes, dd_sentinel_generation is 0. Returns 0 or DD_ERR_IO (no thread,
 * no eventfd). */
int dd_sentinel_start(dd_sentinel *s, char *err, size_t errlen);

/* Stop the thread and free S: the Sentinel call in progress, if any, ends
 * first (a connect and a reply or two, each bounded by recent.timeout_ms).
 * NULL is a no-op. No other call on S may run or follow. */
void dd_sentinel_free(dd_sentinel *s);

/* The generation of the master's address: 0 while none is known, else a
 * number that changes each time the address does. One atomic load; cannot
 * fail. */
uint64_t dd_sentinel_generation(const dd_sentinel *s);

/* The master's address into *OUT and its generation as the return value
 * (0: none known yet, *OUT zeroed). Takes a lock held only while the
 * address is copied; cannot fail. */
uint64_t dd_sentinel_master(dd_sentinel *s, struct dd_sentinel_addr *out);

/* The master's address looks wrong (demoted, unreachable): ask Sentinel
 * again soon. The first call since the last ask wakes the watch thread;
 * the others are one atomic exchange. Cannot fail. */
void dd_sentinel_suspect(dd_sentinel *s);

/* ---- pure functions, for config checks, tests and fuzzers ---- */

/* Parse "host:port,host:port" (spaces around entries allowed, at least
 * one, at most CAP and DD_SENTINEL_MAX, ports 1..65535, no address twice)
 * into OUT, *N entries. Returns 0 or DD_ERR_INVALID with a message naming
 * recent.sentinels in ERR. */
int dd_sentinel_parse_list(const char *list, struct dd_sentinel_addr *out, size_t cap, size_t *n,
                           char *err, size_t errlen);

/* Whether NAME (LEN bytes) can be a master name here: 1 to
 * DD_SENTINEL_NAME_MAX - 1 bytes of printable ASCII without spaces (a
 * +switch-master message separates its fields by spaces). */
int dd_sentinel_name_ok(const char *name, size_t len);

/* The master name of SHARD (of SHARDS) from recent.master_name, NAMES:
 * one name for every shard, or one per shard separated by ';' (as
 * cluster.redis lists its addresses). Into OUT (OUTLEN bytes). Returns 0
 * or DD_ERR_INVALID with a message naming recent.master_name in ERR (a
 * count other than 1 or SHARDS, an empty or bad name). */
int dd_sentinel_shard_name(const char *names, uint32_t shards, uint32_t shard, char *out,
                           size_t outlen, char *err, size_t errlen);

/* What a reply from a Sentinel said. */
enum dd_sentinel_reply {
    DD_SENTINEL_ADDR = 0,    /* an address (the master's, or the new one of NAME's switch) */
    DD_SENTINEL_OTHER = 1,   /* a well-formed reply or message that names no address for us */
    DD_SENTINEL_PARTIAL = 2, /* the bytes end before the reply does */
    DD_SENTINEL_BAD = 3,     /* protocol error, wrong shape, error reply, bad address */
};

/* Parse the reply to SENTINEL get-master-addr-by-name at BUF (LEN bytes):
 * DD_SENTINEL_ADDR with the address in *OUT; DD_SENTINEL_OTHER for a nil
 * (Sentinel does not know the name); else PARTIAL or BAD, with a reason in
 * WHY (WHYLEN bytes; an error reply's own text, bounded). *USED gets the
 * bytes the reply took (0 unless ADDR or OTHER). Allocates nothing. */
int dd_sentinel_parse_master(const void *buf, size_t len, struct dd_sentinel_addr *out,
                             size_t *used, char *why, size_t whylen);

/* Parse one message on a connection subscribed to +switch-master at BUF:
 * DD_SENTINEL_ADDR when it is "message" "+switch-master" "NAME oldhost
 * oldport newhost newport" for NAME, with the new address in *OUT;
 * DD_SENTINEL_OTHER for the subscription's confirmation or another
 * master's switch; else PARTIAL or BAD as above. */
int dd_sentinel_parse_event(const void *buf, size_t len, const char *name,
                            struct dd_sentinel_addr *out, size_t *used, char *why, size_t whylen);

/* Counters since start (atomic, process-wide). */
struct dd_sentinel_stats {
    uint64_t master_changes; /* the published address changed */
    uint64_t asks;           /* get-master-addr-by-name asked */
    uint64_t unreachable;    /* a Sentinel not reached in time, or its connection lost */
    uint64_t bad_replies;    /* error, unknown master, malformed or hostile replies */
    uint64_t events;         /* +switch-master messages for our master */
    int master_known;        /* some watcher knows a master (0/1) */
    int configured;          /* some dd_sentinel exists */
};
void dd_sentinel_get_stats(struct dd_sentinel_stats *out);

/* Render dedupd_recent_master_changes_total, dedupd_recent_master_known,
 * dedupd_recent_sentinel_asks_total, dedupd_recent_sentinel_events_total
 * and dedupd_recent_sentinel_errors_total{kind} when a dd_sentinel exists;
 * nothing otherwise. */
typedef struct dd_prom dd_prom;
void dd_sentinel_collect(dd_prom *p);

#endif
