/* SPDX-License-Identifier: Apache-2.0
 *
 * trace.c - see trace.h: the published set of traced users and the trace
 * store (its own RocksDB database). The record codec is tracerec.c's.
 */
#include "trace.h"

#include "be.h"
#include "dd.h"
#include "log.h"
#include "metrics.h"
#include "sys.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rocksdb/c.h>
#include <xxhash.h>

#define MOD "trace"
#define META_VERSION 1
#define KEY_TAIL 12 /* u64 time | u32 seq */
#define META_U 'u'
#define META_X 'x'
#define META_U_LEN (1 + 1 + 8 + 4) /* version | flags | since | checksum */
#define SPACE_CHECK_NS INT64_C(1000000000)
/* At most this many traced users are loaded, whatever the store holds. */
#define LOAD_MAX_USERS 1000000u

static uint32_t checksum(const void *p, size_t n)
{
    return (uint32_t)XXH3_64bits(p, n);
}

/* ---- the set ---------------------------------------------------------------- */

struct slot {
    uint64_t h;
    const char *user; /* into the set's bytes; NULL = empty slot */
    uint32_t len;
    uint32_t idx;
};

struct dd_trace_set {
    size_t n, mask;
    struct slot *slots;
    char *bytes;
};

void dd_trace_set_free(dd_trace_set *s)
{
    if (!s) return;
    free(s->slots);
    free(s->bytes);
    free(s);
}

static struct slot *set_find(const dd_trace_set *s, uint64_t h, const char *user, size_t len)
{
    for (size_t i = h & s->mask;; i = (i + 1) & s->mask) {
        struct slot *e = &s->slots[i];
        if (!e->user) return e;
        if (e->h == h && e->len == len && memcmp(e->user, user, len) == 0) return e;
    }
}

dd_trace_set *dd_trace_set_new(const char *const *users, const size_t *lens, size_t n)
{
    dd_trace_set *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    size_t bytes = 0, cap = 8;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] > SIZE_MAX - bytes) goto nomem;
        bytes += lens[i];
    }
    while (cap < 2 * n) {
        if (cap > SIZE_MAX / 4 / sizeof *s->slots) goto nomem;
        cap *= 2;
    }
    s->mask = cap - 1;
    s->slots = calloc(cap, sizeof *s->slots);
    s->bytes = malloc(bytes ? bytes : 1);
    if (!s->slots || !s->bytes) goto nomem;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] == 0 || lens[i] > UINT32_MAX) continue; /* never traced */
        uint64_t h = dd_hash(users[i], lens[i]);
        struct slot *e = set_find(s, h, users[i], lens[i]);
        if (e->user) continue; /* a duplicate */
        memcpy(s->bytes + off, users[i], lens[i]);
        e->h = h;
        e->user = s->bytes + off;
        e->len = (uint32_t)lens[i];
        e->idx = (uint32_t)s->n++;
        off += lens[i];
    }
    return s;
nomem:
    dd_trace_set_free(s);
    return NULL;
}

bool dd_trace_set_has(const dd_trace_set *s, const char *user, size_t len, size_t *idx)
{
    if (!s || len == 0) return false;
    const struct slot *e = set_find(s, dd_hash(user, len), user, len);
    if (!e->user) return false;
    if (idx) *idx = e->idx;
    return true;
}

size_t dd_trace_set_size(const dd_trace_set *s)
{
    return s ? s->n : 0;
}

/* ---- configuration ------------------------------------------------------------ */

/* Call FN(UD, id, len) for each comma-separated id of LIST, trimmed of
 * blanks; stops at and returns FN's first non-zero. An empty LIST (or
 * only blanks) has no ids. */
static int each_id(const char *list, int (*fn)(void *, const char *, size_t), void *ud)
{
    const char *p = list;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return 0;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *a = p, *b = p + n;
        while (a < b && (*a == ' ' || *a == '\t')) a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
        int rc = fn(ud, a, (size_t)(b - a));
        if (rc) return rc;
        if (!end) return 0;
        p = end + 1;
    }
}

struct check_ctx {
    uint32_t max_id_bytes;
    size_t n;
    char *err;
    size_t errlen;
};

static int check_one(void *ud, const char *id, size_t len)
{
    struct check_ctx *c = ud;
    (void)id;
    c->n++;
    if (len == 0)
        return dd_fail(DD_ERR_INVALID, c->err, c->errlen,
                       "trace.users: entry %zu is empty (a comma too many?)", c->n);
    if (len > c->max_id_bytes)
        return dd_fail(DD_ERR_INVALID, c->err, c->errlen,
                       "trace.users: entry %zu is %zu bytes, longer than rpc.max_id_bytes=%" PRIu32,
                       c->n, len, c->max_id_bytes);
    return 0;
}

int dd_trace_conf_check(const struct dd_trace_conf *conf, uint32_t max_id_bytes, char *err,
                        size_t errlen)
{
    if (!conf->path || !conf->path[0])
        return dd_fail(DD_ERR_INVALID, err, errlen, "trace.path: must not be empty");
    if (conf->retention_days == 0)
        return dd_fail(DD_ERR_INVALID, err, errlen, "trace.retention_days: must be at least 1");
    if (conf->max_records == 0 || conf->max_users == 0)
        return dd_fail(DD_ERR_INVALID, err, errlen, "trace.%s: must be at least 1",
                       conf->max_records == 0 ? "max_records" : "max_users");
    struct check_ctx c = {max_id_bytes ? max_id_bytes : 65535, 0, err, errlen};
    int rc = each_id(conf->users ? conf->users : "", check_one, &c);
    if (rc) return rc;
    if (c.n > conf->max_users)
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "trace.users: %zu users, more than trace.max_users=%" PRIu32, c.n,
                       conf->max_users);
    return DD_OK;
}

/* ---- the store ------------------------------------------------------------------ */

struct tuser {
    char *id;
    size_t len;
    int64_t since_ms;
    bool from_config;
    bool counted;   /* count is known */
    uint32_t count; /* its records in the store (expired ones included) */
};

struct dd_trace {
    /* The published set (NULL: nobody traced) and its readers. */
    _Atomic(dd_trace_set *) set;
    atomic_uint epoch; /* readers count in readers[epoch & 1] */
    atomic_uint_fast64_t readers[2];

    pthread_mutex_t mu;  /* writers: records, the user list */
    struct tuser *users; /* the set's entries, by index */
    size_t nusers, cap;
    dd_trace_set *config; /* trace.users */

    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_readoptions_t *ropts;
    rocksdb_writeoptions_t *wopts_meta; /* WAL, fsync */
    rocksdb_writeoptions_t *wopts_rec;  /* no WAL */
    rocksdb_flushoptions_t *fopts;
    rocksdb_compactionfilter_t *cfilter;
    rocksdb_writebatch_t *wb; /* under mu */
    uint8_t *kbuf, *vbuf;     /* under mu */

    struct dd_trace_clock clock;
    int64_t retention_ms;
    uint32_t max_records, max_users, max_id_bytes;
    uint64_t min_free_bytes;
    char *path;

    atomic_uint_fast32_t seq;
    _Atomic int64_t space_checked_ns;
    atomic_bool space_low;

    _Atomic uint64_t records[DD_TRACE_NKINDS];
    _Atomic uint64_t errors_write, errors_dropped, errors_corrupt, trimmed;
    _Atomic uint64_t nusers_now;
    struct dd_log_limit lim_write, lim_corrupt;
};

#define KEY_MAX (2 + 65535 + KEY_TAIL + 1)

static int64_t now_ms(const dd_trace *t)
{
    return t->clock.now_ms ? t->clock.now_ms(t->clock.ud) : dd_now_ms();
}

int64_t dd_trace_now_ms(const dd_trace *t)
{
    return now_ms(t);
}
int64_t dd_trace_retention_ms(const dd_trace *t)
{
    return t->retention_ms;
}

static bool expired(const dd_trace *t, int64_t at_ms, int64_t now)
{
    return at_ms < now - t->retention_ms;
}

/* The compaction filter: drop records past the retention. Meta keys and
 * anything that is not a record key are kept. */
static unsigned char cfilter_fn(void *st, int level, const char *key, size_t klen, const char *val,
                                size_t vlen, char **nv, size_t *nvlen, unsigned char *changed)
{
    (void)level;
    (void)val;
    (void)vlen;
    (void)nv;
    (void)nvlen;
    *changed = 0;
    const dd_trace *t = st;
    const char *u;
    size_t ul;
    int64_t at;
    uint32_t seq;
    if (dd_trace_key_parse((const uint8_t *)key, klen, &u, &ul, &at, &seq) != DD_OK) return 0;
    return expired(t, at, now_ms(t)) ? 1 : 0;
}

static const char *cfilter_name(void *st)
{
    (void)st;
    return "dedupd.trace.expire.v1";
}

static void cfilter_destroy(void *st)
{
    (void)st;
}

/* Whether writes must wait for room (checked at most once a second). */
static bool space_low(dd_trace *t)
{
    if (t->min_free_bytes == 0) return false;
    int64_t now = dd_mono_ns();
    int64_t last = atomic_load_explicit(&t->space_checked_ns, memory_order_relaxed);
    if (last && now - last < SPACE_CHECK_NS)
        return atomic_load_explicit(&t->space_low, memory_order_relaxed);
    bool low = dd_sys_free_bytes(t->path, NULL) < t->min_free_bytes; /* unknown: not low */
    atomic_store_explicit(&t->space_low, low, memory_order_relaxed);
    atomic_store_explicit(&t->space_checked_ns, now, memory_order_relaxed);
    return low;
}

#define INC(field, n) atomic_fetch_add_explicit(&t->field, (uint64_t)(n), memory_order_relaxed)

static void write_error(dd_trace *t, const char *what, const char *why)
{
    INC(errors_write, 1);
    dd_log_limited(&t->lim_write, 10000, DD_LOG_ERROR, MOD,
                   "msg=\"trace not written\" what=%s error=\"%s\"", what, why);
}

static void corrupt(dd_trace *t, const uint8_t *key, size_t klen)
{
    INC(errors_corrupt, 1);
    dd_log_limited(&t->lim_corrupt, 10000, DD_LOG_WARN, MOD,
                   "msg=\"corrupt trace record skipped\" key_bytes=%zu", klen);
    (void)key;
}

/* ---- the published set ------------------------------------------------------------ */

bool dd_trace_wanted(dd_trace *t, const char *user, size_t len)
{
    if (!t || !atomic_load_explicit(&t->set, memory_order_acquire)) return false;
    unsigned i = atomic_load(&t->epoch) & 1;
    atomic_fetch_add(&t->readers[i], 1);
    const dd_trace_set *s = atomic_load(&t->set);
    bool hit = dd_trace_set_has(s, user, len, NULL);
    atomic_fetch_sub_explicit(&t->readers[i], 1, memory_order_release);
    return hit;
}

/* Build the set of the N USERS but the one at SKIP (SIZE_MAX: none), in
 * their order, so that the set's indexes are USERS' once SKIP is dropped
 * (drop_user moves the last user into its place: so does this). NULL on
 * out of memory; an empty list gives an empty set (published as NULL). */
static dd_trace_set *build_set(const struct tuser *users, size_t n, size_t skip)
{
    const char **ids = malloc((n ? n : 1) * sizeof *ids);
    size_t *lens = malloc((n ? n : 1) * sizeof *lens);
    dd_trace_set *s = NULL;
    if (ids && lens) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            size_t j = i == skip ? n - 1 : i; /* drop_user's order */
            if (skip < n && i == n - 1) break;
            ids[m] = users[j].id;
            lens[m++] = users[j].len;
        }
        s = dd_trace_set_new(ids, lens, m);
    }
    free(ids);
    free(lens);
    return s;
}

/* Publish S (taken over; empty: NULL is published) and free the set it
 * replaces once no reader holds it. Under mu. */
static void publish(dd_trace *t, dd_trace_set *s)
{
    size_t n = dd_trace_set_size(s);
    if (n == 0) {
        dd_trace_set_free(s);
        s = NULL;
    }
    dd_trace_set *old = atomic_exchange(&t->set, s);
    atomic_store_explicit(&t->nusers_now, n, memory_order_relaxed);
    if (!old) return;
    /* A reader that loaded OLD incremented its counter before (both
     * seq_cst), so it shows in one of the two until it is done; one whose
     * increment comes after our look at its counter loads the new set.
     * Each counter is waited for after the epoch moved new readers to the
     * other one, so a stream of readers cannot starve the writer (as
     * SRCU does); a reader that read the epoch long ago and counts late
     * on the old index is why both are waited for. */
    for (int k = 0; k < 2; k++) {
        unsigned p = atomic_fetch_add(&t->epoch, 1) & 1;
        for (unsigned spins = 0; atomic_load(&t->readers[p]) != 0; spins++) {
            if (spins < 64) {
                sched_yield();
            } else {
                struct timespec ts = {0, 100000};
                nanosleep(&ts, NULL);
            }
        }
    }
    dd_trace_set_free(old);
}

/* The index of USER among T's users (under mu), or -1. */
static long user_index(dd_trace *t, const char *user, size_t len)
{
    const dd_trace_set *s = atomic_load(&t->set);
    size_t idx;
    if (!dd_trace_set_has(s, user, len, &idx) || idx >= t->nusers) return -1;
    return (long)idx;
}

/* ---- meta keys --------------------------------------------------------------------- */

/* 0x00 0x00 TYPE USER into t->kbuf; returns the length. */
static size_t meta_key(dd_trace *t, char type, const char *user, size_t len)
{
    t->kbuf[0] = 0;
    t->kbuf[1] = 0;
    t->kbuf[2] = (uint8_t)type;
    memcpy(t->kbuf + 3, user, len);
    return 3 + len;
}

static void meta_u_value(uint8_t out[META_U_LEN], int64_t since_ms, bool from_config)
{
    out[0] = META_VERSION;
    out[1] = from_config ? 1 : 0;
    dd_be64_store(out + 2, (uint64_t)since_ms);
    dd_be32_store(out + 10, checksum(out, 10));
}

static int meta_u_parse(const uint8_t *v, size_t len, int64_t *since_ms, bool *from_config)
{
    if (len != META_U_LEN || v[0] != META_VERSION || v[1] > 1 ||
        dd_be32_load(v + 10) != checksum(v, 10) || dd_be64_load(v + 2) > INT64_MAX)
        return DD_ERR_CORRUPT;
    *since_ms = (int64_t)dd_be64_load(v + 2);
    *from_config = v[1] == 1;
    return DD_OK;
}

/* The key range of USER's records: [lo, hi) with lo = len | user and hi =
 * lo followed by 0xFF * (KEY_TAIL + 1), past every record key. */
static size_t range_lo(uint8_t *out, const char *user, size_t len)
{
    dd_be16_store(out, (uint16_t)len);
    memcpy(out + 2, user, len);
    return 2 + len;
}

static size_t range_hi(uint8_t *out, const char *user, size_t len)
{
    size_t n = range_lo(out, user, len);
    memset(out + n, 0xFF, KEY_TAIL + 1);
    return n + KEY_TAIL + 1;
}

static int write_batch(dd_trace *t, rocksdb_writeoptions_t *wo, char *err, size_t errlen)
{
    char *e = NULL;
    rocksdb_write(t->db, wo, t->wb, &e);
    rocksdb_writebatch_clear(t->wb);
    if (e) {
        dd_set_err(err, errlen, "%s: %s", t->path, e);
        rocksdb_free(e);
        return DD_ERR_IO;
    }
    return DD_OK;
}

/* ---- records ------------------------------------------------------------------------- */

/* Visit USER's record keys oldest first; FN(ud, key, klen, val, vlen)
 * returning non-zero stops. At most LIMIT keys. */
typedef int (*raw_fn)(void *ud, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl);
static int scan_raw(dd_trace *t, const char *user, size_t len, size_t limit, raw_fn fn, void *ud,
                    char *err, size_t errlen)
{
    uint8_t *lo = malloc(2 + len), *hi = malloc(2 + len + KEY_TAIL + 1);
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    int rc = DD_OK;
    if (!lo || !hi || !ro) {
        rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
        goto out;
    }
    size_t lol = range_lo(lo, user, len), hil = range_hi(hi, user, len);
    rocksdb_readoptions_set_iterate_upper_bound(ro, (const char *)hi, hil);
    rocksdb_iterator_t *it = rocksdb_create_iterator(t->db, ro);
    size_t seen = 0;
    for (rocksdb_iter_seek(it, (const char *)lo, lol); rocksdb_iter_valid(it) && seen < limit;
         rocksdb_iter_next(it), seen++) {
        size_t kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
        if (kl < lol || memcmp(k, lo, lol) != 0) break;
        if (fn(ud, k, kl, v, vl)) break;
    }
    char *e = NULL;
    rocksdb_iter_get_error(it, &e);
    rocksdb_iter_destroy(it);
    if (e) {
        rc = dd_fail(DD_ERR_IO, err, errlen, "%s: %s", t->path, e);
        rocksdb_free(e);
    }
out:
    if (ro) rocksdb_readoptions_destroy(ro);
    free(lo);
    free(hi);
    return rc;
}

struct count_ctx {
    size_t n;
    size_t del; /* delete this many first (0 = count only) */
    rocksdb_writebatch_t *wb;
};

static int count_fn(void *ud, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    (void)v;
    (void)vl;
    struct count_ctx *c = ud;
    if (c->del) {
        if (c->n >= c->del) return 1;
        rocksdb_writebatch_delete(c->wb, (const char *)k, kl);
    }
    c->n++;
    return 0;
}

/* Make USER's count known, and at most max_records (under mu). */
static void trim(dd_trace *t, struct tuser *u)
{
    char err[256];
    if (!u->counted) {
        struct count_ctx c = {0};
        if (scan_raw(t, u->id, u->len, SIZE_MAX, count_fn, &c, err, sizeof err) != DD_OK) {
            write_error(t, "count", err);
            return;
        }
        u->count = c.n > UINT32_MAX ? UINT32_MAX : (uint32_t)c.n;
        u->counted = true;
    }
    if (u->count <= t->max_records) return;
    /* Count again (the compaction filter may have dropped some), then
     * delete the oldest down to the target. */
    struct count_ctx c = {0};
    if (scan_raw(t, u->id, u->len, SIZE_MAX, count_fn, &c, err, sizeof err) != DD_OK) {
        write_error(t, "count", err);
        return;
    }
    size_t target = t->max_records - t->max_records / 16;
    if (c.n <= t->max_records) {
        u->count = (uint32_t)c.n;
        return;
    }
    struct count_ctx d = {0, c.n - target, t->wb};
    rocksdb_writebatch_clear(t->wb);
    if (scan_raw(t, u->id, u->len, SIZE_MAX, count_fn, &d, err, sizeof err) != DD_OK ||
        write_batch(t, t->wopts_rec, err, sizeof err) != DD_OK) {
        rocksdb_writebatch_clear(t->wb);
        write_error(t, "trim", err);
        return;
    }
    INC(trimmed, d.n);
    u->count = (uint32_t)(c.n - d.n);
}

/* Under mu: the index of USER, or -1 with the reason (not traced, or no
 * room) already counted. */
static long writable_user(dd_trace *t, const char *user, size_t len, int *rc)
{
    long idx = user_index(t, user, len);
    if (idx < 0) {
        *rc = DD_ERR_NOTFOUND;
        return -1;
    }
    if (space_low(t)) {
        write_error(t, "record", "less free space than history.min_free_mb");
        *rc = DD_ERR_LIMIT;
        return -1;
    }
    return idx;
}

/* Add one encoded record V of time AT_MS to the batch (under mu). */
static void batch_put(dd_trace *t, const char *user, size_t len, int64_t at_ms, const uint8_t *v,
                      size_t vlen)
{
    uint32_t seq = (uint32_t)atomic_fetch_add_explicit(&t->seq, 1, memory_order_relaxed);
    size_t kl = dd_trace_key(t->kbuf, KEY_MAX, user, len, at_ms, seq);
    rocksdb_writebatch_put(t->wb, (const char *)t->kbuf, kl, (const char *)v, vlen);
}

/* Write the batch of COUNTS[kind - 1] records for user IDX (under mu). */
static int commit_records(dd_trace *t, long idx, const uint64_t counts[DD_TRACE_NKINDS])
{
    uint64_t n = counts[0] + counts[1] + counts[2];
    if (n == 0) return DD_OK;
    char err[256];
    int rc = write_batch(t, t->wopts_rec, err, sizeof err);
    if (rc != DD_OK) {
        write_error(t, "record", err);
        return rc;
    }
    for (int k = 0; k < DD_TRACE_NKINDS; k++) INC(records[k], counts[k]);
    struct tuser *u = &t->users[idx];
    if (u->counted) u->count = u->count + n > UINT32_MAX ? UINT32_MAX : (uint32_t)(u->count + n);
    trim(t, u);
    return DD_OK;
}

int dd_trace_record(dd_trace *t, const char *user, size_t user_len, const struct dd_trace_rec *recs,
                    size_t n)
{
    if (!t || n == 0) return DD_OK;
    int rc = DD_OK;
    pthread_mutex_lock(&t->mu);
    long idx = writable_user(t, user, user_len, &rc);
    if (idx < 0) goto out;
    int64_t now = now_ms(t);
    uint64_t counts[DD_TRACE_NKINDS] = {0};
    rocksdb_writebatch_clear(t->wb);
    for (size_t i = 0; i < n; i++) {
        struct dd_trace_rec r = recs[i];
        if (r.recorded_ms == 0) r.recorded_ms = now;
        if (expired(t, r.at_ms, now)) continue;
        size_t vl = dd_trace_encode(&r, t->vbuf, DD_TRACE_REC_MAX);
        if (vl == 0) {
            write_error(t, "record", "a record out of range (ids too long?)");
            rc = DD_ERR_INVALID;
            continue;
        }
        batch_put(t, user, user_len, r.at_ms, t->vbuf, vl);
        counts[r.kind - 1]++;
    }
    int wrc = commit_records(t, idx, counts);
    if (wrc != DD_OK) rc = wrc;
out:
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* One encoded record of USER (tracerec.h), as pending buffers keep them. */
static int record_encoded(dd_trace *t, const char *user, size_t user_len, const uint8_t *v,
                          size_t len)
{
    struct dd_trace_rec r;
    if (dd_trace_decode(v, len, &r) != DD_OK) {
        write_error(t, "record", "an encoded record does not decode");
        return DD_ERR_INVALID;
    }
    return dd_trace_record(t, user, user_len, &r, 1);
}

void dd_trace_record_pending(dd_trace *t, struct dd_trace_pending *p)
{
    size_t pos = 0, ul, vl;
    const char *u;
    const uint8_t *v;
    while (t && dd_trace_pending_next(p, &pos, &u, &ul, &v, &vl)) record_encoded(t, u, ul, v, vl);
    dd_trace_pending_clear(p);
}

void dd_trace_dropped(dd_trace *t, uint64_t n)
{
    if (t) INC(errors_dropped, n);
}

/* ---- scans ----------------------------------------------------------------------------- */

struct scan_ctx {
    dd_trace *t;
    int64_t now;
    dd_trace_rec_fn fn;
    void *ud;
};

static int scan_fn(void *ud, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    struct scan_ctx *c = ud;
    const char *u;
    size_t ul;
    int64_t at;
    uint32_t seq;
    struct dd_trace_rec r;
    if (dd_trace_key_parse(k, kl, &u, &ul, &at, &seq) != DD_OK ||
        dd_trace_decode(v, vl, &r) != DD_OK || r.at_ms != at) {
        corrupt(c->t, k, kl);
        return 0;
    }
    if (expired(c->t, at, c->now)) return 0;
    r.seq = seq;
    return c->fn(c->ud, &r);
}

int dd_trace_scan(dd_trace *t, const char *user, size_t len, dd_trace_rec_fn fn, void *ud,
                  char *err, size_t errlen)
{
    if (len == 0 || len > 65535) return DD_OK;
    struct scan_ctx c = {t, now_ms(t), fn, ud};
    size_t limit = (size_t)t->max_records * 2 + 1024;
    return scan_raw(t, user, len, limit, scan_fn, &c, err, errlen);
}

/* ---- the user list ----------------------------------------------------------------------- */

static int push_user(dd_trace *t, const char *id, size_t len, int64_t since, bool from_config)
{
    if (t->nusers == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        struct tuser *u = realloc(t->users, cap * sizeof *u);
        if (!u) return DD_ERR_NOMEM;
        t->users = u;
        t->cap = cap;
    }
    char *copy = malloc(len);
    if (!copy) return DD_ERR_NOMEM;
    memcpy(copy, id, len);
    t->users[t->nusers++] = (struct tuser){copy, len, since, from_config, false, 0};
    return DD_OK;
}

static void drop_user(dd_trace *t, size_t idx)
{
    free(t->users[idx].id);
    t->users[idx] = t->users[--t->nusers];
}

int dd_trace_add(dd_trace *t, const char *user, size_t len, bool *added, char *err, size_t errlen)
{
    if (added) *added = false;
    if (len == 0) return dd_fail(DD_ERR_INVALID, err, errlen, "user_id is empty");
    if (len > t->max_id_bytes)
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "user_id is %zu bytes, longer than rpc.max_id_bytes=%" PRIu32, len,
                       t->max_id_bytes);
    int rc = DD_OK;
    pthread_mutex_lock(&t->mu);
    if (user_index(t, user, len) >= 0) goto out;
    if (t->nusers >= t->max_users) {
        rc = dd_fail(DD_ERR_LIMIT, err, errlen,
                     "%zu users are traced already, trace.max_users=%" PRIu32 " (remove one first)",
                     t->nusers, t->max_users);
        goto out;
    }
    if (space_low(t)) {
        rc = dd_fail(DD_ERR_LIMIT, err, errlen,
                     "less free space on trace.path than history.min_free_mb");
        goto out;
    }
    bool from_config = dd_trace_set_has(t->config, user, len, NULL);
    int64_t since = now_ms(t);
    if ((rc = push_user(t, user, len, since, from_config)) != DD_OK) {
        rc = dd_fail(rc, err, errlen, "out of memory");
        goto out;
    }
    dd_trace_set *s = build_set(t->users, t->nusers, SIZE_MAX);
    if (!s) {
        drop_user(t, t->nusers - 1);
        rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
        goto out;
    }
    uint8_t v[META_U_LEN];
    meta_u_value(v, since, from_config);
    rocksdb_writebatch_clear(t->wb);
    rocksdb_writebatch_put(t->wb, (const char *)t->kbuf, meta_key(t, META_U, user, len),
                           (const char *)v, sizeof v);
    rocksdb_writebatch_delete(t->wb, (const char *)t->kbuf, meta_key(t, META_X, user, len));
    if ((rc = write_batch(t, t->wopts_meta, err, errlen)) != DD_OK) {
        dd_trace_set_free(s);
        drop_user(t, t->nusers - 1);
        goto out;
    }
    publish(t, s);
    if (added) *added = true;
    dd_info(MOD, "msg=\"tracing a user\" user_bytes=%zu from_config=%s users=%zu", len,
            from_config ? "yes" : "no", t->nusers);
out:
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* Delete USER's meta entry and records (and mark a config user removed)
 * in t->wb; the caller writes it. Under mu. */
static void batch_remove(dd_trace *t, const char *user, size_t len, bool mark)
{
    rocksdb_writebatch_delete(t->wb, (const char *)t->kbuf, meta_key(t, META_U, user, len));
    if (mark)
        rocksdb_writebatch_put(t->wb, (const char *)t->kbuf, meta_key(t, META_X, user, len), "\1",
                               1);
    uint8_t *lo = t->kbuf, *hi = t->vbuf; /* both are large enough */
    size_t lol = range_lo(lo, user, len);
    size_t hil = range_hi(hi, user, len);
    rocksdb_writebatch_delete_range(t->wb, (const char *)lo, lol, (const char *)hi, hil);
}

int dd_trace_remove(dd_trace *t, const char *user, size_t len, char *err, size_t errlen)
{
    int rc = DD_OK;
    pthread_mutex_lock(&t->mu);
    long idx = user_index(t, user, len);
    if (idx < 0) {
        rc = dd_fail(DD_ERR_NOTFOUND, err, errlen, "this user is not traced");
        goto out;
    }
    if (space_low(t)) {
        rc = dd_fail(DD_ERR_LIMIT, err, errlen,
                     "less free space on trace.path than history.min_free_mb");
        goto out;
    }
    /* The set without it, built before anything changes. */
    dd_trace_set *s = build_set(t->users, t->nusers, (size_t)idx);
    if (!s) {
        rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
        goto out;
    }
    rocksdb_writebatch_clear(t->wb);
    batch_remove(t, user, len, t->users[idx].from_config);
    if ((rc = write_batch(t, t->wopts_meta, err, errlen)) != DD_OK) {
        dd_trace_set_free(s);
        goto out;
    }
    drop_user(t, (size_t)idx);
    publish(t, s);
    dd_info(MOD, "msg=\"no longer tracing a user; its records deleted\" user_bytes=%zu users=%zu",
            len, t->nusers);
out:
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void dd_trace_get_user(dd_trace *t, const char *user, size_t len, struct dd_trace_user *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&t->mu);
    long idx = user_index(t, user, len);
    if (idx >= 0) {
        out->traced = true;
        out->from_config = t->users[idx].from_config;
        out->since_ms = t->users[idx].since_ms;
    }
    pthread_mutex_unlock(&t->mu);
}

size_t dd_trace_list(dd_trace *t, dd_trace_user_fn fn, void *ud)
{
    pthread_mutex_lock(&t->mu);
    size_t n = t->nusers;
    for (size_t i = 0; i < n; i++) {
        struct dd_trace_user info = {true, t->users[i].from_config, t->users[i].since_ms};
        fn(ud, t->users[i].id, t->users[i].len, &info);
    }
    pthread_mutex_unlock(&t->mu);
    return n;
}

/* ---- open, reconcile, close ------------------------------------------------------------- */

struct load_ctx {
    dd_trace *t;
    int rc;
    size_t skipped;
    /* 'x' markers, as one list of ids */
    char **x;
    size_t *xlen;
    size_t nx, capx;
};

static int load_meta(dd_trace *t, struct load_ctx *c, char *err, size_t errlen)
{
    static const uint8_t lo[2] = {0, 0}, hi[2] = {0, 1};
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    if (!ro) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    rocksdb_readoptions_set_iterate_upper_bound(ro, (const char *)hi, sizeof hi);
    rocksdb_iterator_t *it = rocksdb_create_iterator(t->db, ro);
    int rc = DD_OK;
    for (rocksdb_iter_seek(it, (const char *)lo, sizeof lo); rocksdb_iter_valid(it) && rc == DD_OK;
         rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vl);
        if (kl < 4 || kl > 3 + 65535 || k[0] || k[1]) continue;
        const char *id = (const char *)k + 3;
        size_t len = kl - 3;
        if (k[2] == META_U) {
            int64_t since;
            bool fc;
            if (meta_u_parse(v, vl, &since, &fc) != DD_OK) {
                corrupt(t, k, kl);
                continue;
            }
            if (t->nusers >= LOAD_MAX_USERS) {
                c->skipped++;
                continue;
            }
            rc = push_user(t, id, len, since, fc);
        } else if (k[2] == META_X) {
            if (c->nx >= LOAD_MAX_USERS) continue;
            if (c->nx == c->capx) {
                size_t cap = c->capx ? c->capx * 2 : 16;
                char **x = realloc(c->x, cap * sizeof *x);
                size_t *xl = x ? realloc(c->xlen, cap * sizeof *xl) : NULL;
                if (x) c->x = x;
                if (!x || !xl) {
                    rc = DD_ERR_NOMEM;
                    break;
                }
                c->xlen = xl;
                c->capx = cap;
            }
            char *copy = malloc(len);
            if (!copy) {
                rc = DD_ERR_NOMEM;
                break;
            }
            memcpy(copy, id, len);
            c->x[c->nx] = copy;
            c->xlen[c->nx++] = len;
        }
    }
    char *e = NULL;
    rocksdb_iter_get_error(it, &e);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    if (e) {
        rc = dd_fail(DD_ERR_IO, err, errlen, "%s: %s", t->path, e);
        rocksdb_free(e);
    } else if (rc == DD_ERR_NOMEM) {
        dd_set_err(err, errlen, "out of memory");
    }
    return rc;
}

struct config_ids {
    const char **ids;
    size_t *lens;
    size_t n, cap;
};

static int collect_id(void *ud, const char *id, size_t len)
{
    struct config_ids *c = ud;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        const char **ids = realloc(c->ids, cap * sizeof *ids);
        if (!ids) return DD_ERR_NOMEM;
        c->ids = ids;
        size_t *lens = realloc(c->lens, cap * sizeof *lens);
        if (!lens) return DD_ERR_NOMEM;
        c->lens = lens;
        c->cap = cap;
    }
    c->ids[c->n] = id;
    c->lens[c->n++] = len;
    return 0;
}

/* The list as loaded, against trace.users: drop config entries no longer
 * configured, add configured users that have no entry nor 'x' marker,
 * forget 'x' markers of users no longer configured. One synced batch. */
static int reconcile(dd_trace *t, struct load_ctx *lc, const struct config_ids *cfg, char *err,
                     size_t errlen)
{
    rocksdb_writebatch_clear(t->wb);
    size_t dropped = 0, added = 0;
    for (size_t i = 0; i < t->nusers;) {
        struct tuser *u = &t->users[i];
        if (u->from_config && !dd_trace_set_has(t->config, u->id, u->len, NULL)) {
            batch_remove(t, u->id, u->len, false);
            drop_user(t, i);
            dropped++;
            continue;
        }
        i++;
    }
    dd_trace_set *have = build_set(t->users, t->nusers, SIZE_MAX);
    dd_trace_set *x = dd_trace_set_new((const char *const *)lc->x, lc->xlen, lc->nx);
    if (!have || !x) {
        dd_trace_set_free(have);
        dd_trace_set_free(x);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }
    int64_t now = now_ms(t);
    int rc = DD_OK;
    for (size_t i = 0; i < cfg->n && rc == DD_OK; i++) {
        if (dd_trace_set_has(have, cfg->ids[i], cfg->lens[i], NULL) ||
            dd_trace_set_has(x, cfg->ids[i], cfg->lens[i], NULL))
            continue;
        /* A duplicate in trace.users: the first one added it. */
        bool dup = false;
        for (size_t j = 0; j < i && !dup; j++)
            dup =
                cfg->lens[j] == cfg->lens[i] && memcmp(cfg->ids[j], cfg->ids[i], cfg->lens[i]) == 0;
        if (dup) continue;
        if ((rc = push_user(t, cfg->ids[i], cfg->lens[i], now, true)) != DD_OK) break;
        uint8_t v[META_U_LEN];
        meta_u_value(v, now, true);
        rocksdb_writebatch_put(t->wb, (const char *)t->kbuf,
                               meta_key(t, META_U, cfg->ids[i], cfg->lens[i]), (const char *)v,
                               sizeof v);
        added++;
    }
    for (size_t i = 0; i < lc->nx && rc == DD_OK; i++)
        if (!dd_trace_set_has(t->config, lc->x[i], lc->xlen[i], NULL))
            rocksdb_writebatch_delete(t->wb, (const char *)t->kbuf,
                                      meta_key(t, META_X, lc->x[i], lc->xlen[i]));
    dd_trace_set_free(have);
    dd_trace_set_free(x);
    if (rc != DD_OK) return dd_fail(rc, err, errlen, "out of memory");
    if (rocksdb_writebatch_count(t->wb) &&
        (rc = write_batch(t, t->wopts_meta, err, errlen)) != DD_OK)
        return rc;
    if (added || dropped)
        dd_info(MOD, "msg=\"trace.users applied\" added=%zu dropped=%zu", added, dropped);
    return DD_OK;
}

int dd_trace_open(dd_trace **out, const struct dd_trace_conf *conf,
                  const struct dd_trace_clock *clock, char *err, size_t errlen)
{
    *out = NULL;
    int rc = dd_trace_conf_check(conf, conf->max_id_bytes, err, errlen);
    if (rc != DD_OK) return rc;
    dd_trace *t = calloc(1, sizeof *t);
    if (!t) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    struct config_ids cfg = {0};
    struct load_ctx lc = {.t = t};
    bool mu_ok = false;
    rc = DD_ERR_NOMEM;
    atomic_init(&t->set, NULL);
    atomic_init(&t->epoch, 0);
    atomic_init(&t->readers[0], 0);
    atomic_init(&t->readers[1], 0);
    atomic_init(&t->seq, (uint32_t)dd_mono_ns());
    if (clock) t->clock = *clock;
    t->retention_ms = (int64_t)conf->retention_days * DD_MS_PER_DAY;
    t->max_records = conf->max_records;
    t->max_users = conf->max_users;
    t->max_id_bytes = conf->max_id_bytes ? conf->max_id_bytes : 65535;
    t->min_free_bytes = conf->min_free_mb > UINT64_MAX >> 20 ? UINT64_MAX : conf->min_free_mb << 20;
    if (pthread_mutex_init(&t->mu, NULL) != 0) goto nomem;
    mu_ok = true;
    if (!(t->path = strdup(conf->path)) || !(t->kbuf = malloc(KEY_MAX)) ||
        !(t->vbuf = malloc(DD_TRACE_REC_MAX > KEY_MAX ? DD_TRACE_REC_MAX : KEY_MAX)) ||
        !(t->wb = rocksdb_writebatch_create()))
        goto nomem;
    if (each_id(conf->users ? conf->users : "", collect_id, &cfg) != 0) goto nomem;
    if (!(t->config = dd_trace_set_new(cfg.ids, cfg.lens, cfg.n))) goto nomem;

    t->opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(t->opts, 1);
    rocksdb_options_set_info_log_level(t->opts, 4); /* FATAL: see history.h, "Full disk" */
    rocksdb_options_set_keep_log_file_num(t->opts, 2);
    rocksdb_options_set_write_buffer_size(t->opts, 4u << 20);
    rocksdb_options_set_max_write_buffer_number(t->opts, 2);
    rocksdb_options_set_compression(t->opts, rocksdb_lz4_compression);
    t->cfilter = rocksdb_compactionfilter_create(t, cfilter_destroy, cfilter_fn, cfilter_name);
    rocksdb_options_set_compaction_filter(t->opts, t->cfilter);
    char *e = NULL;
    char mkerr[300];
    if ((rc = dd_sys_mkdir_parents(conf->path, mkerr, sizeof mkerr)) != DD_OK) {
        dd_set_err(err, errlen, "trace.path: %s: %s", conf->path, mkerr);
        goto fail;
    }
    t->db = rocksdb_open(t->opts, conf->path, &e);
    if (e) {
        rc = dd_fail(DD_ERR_IO, err, errlen, "trace.path: %s: %s", conf->path, e);
        rocksdb_free(e);
        t->db = NULL;
        goto fail;
    }
    t->ropts = rocksdb_readoptions_create();
    t->wopts_meta = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(t->wopts_meta, 1);
    t->wopts_rec = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(t->wopts_rec, 1);
    t->fopts = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(t->fopts, 1);

    if ((rc = load_meta(t, &lc, err, errlen)) != DD_OK) goto fail;
    if (lc.skipped)
        dd_warn(MOD,
                "msg=\"more traced users in the store than can be loaded; the rest ignored\" "
                "ignored=%zu",
                lc.skipped);
    if ((rc = reconcile(t, &lc, &cfg, err, errlen)) != DD_OK) goto fail;
    if (t->nusers > t->max_users)
        dd_warn(MOD,
                "msg=\"more users traced than trace.max_users; none can be added until "
                "some are removed\" users=%zu max_users=%" PRIu32,
                t->nusers, t->max_users);
    dd_trace_set *s = build_set(t->users, t->nusers, SIZE_MAX);
    if (!s) goto nomem;
    publish(t, s);
    for (size_t i = 0; i < lc.nx; i++) free(lc.x[i]);
    free(lc.x);
    free(lc.xlen);
    free(cfg.ids);
    free(cfg.lens);
    dd_info(MOD,
            "msg=\"trace open\" path=\"%s\" users=%zu retention_days=%" PRIu32
            " max_records=%" PRIu32,
            conf->path, t->nusers, conf->retention_days, conf->max_records);
    *out = t;
    return DD_OK;
nomem:
    rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
fail:
    for (size_t i = 0; i < lc.nx; i++) free(lc.x[i]);
    free(lc.x);
    free(lc.xlen);
    free(cfg.ids);
    free(cfg.lens);
    if (!mu_ok) {
        free(t);
        return rc;
    }
    dd_trace_close(t);
    return rc;
}

void dd_trace_close(dd_trace *t)
{
    if (!t) return;
    if (t->db) {
        char *e = NULL;
        rocksdb_flush(t->db, t->fopts, &e);
        if (e) {
            dd_warn(MOD,
                    "msg=\"cannot flush the trace store at close; the last records are "
                    "lost\" error=\"%s\"",
                    e);
            rocksdb_free(e);
        }
        rocksdb_close(t->db);
    }
    if (t->opts) rocksdb_options_destroy(t->opts);
    if (t->cfilter) rocksdb_compactionfilter_destroy(t->cfilter);
    if (t->ropts) rocksdb_readoptions_destroy(t->ropts);
    if (t->wopts_meta) rocksdb_writeoptions_destroy(t->wopts_meta);
    if (t->wopts_rec) rocksdb_writeoptions_destroy(t->wopts_rec);
    if (t->fopts) rocksdb_flushoptions_destroy(t->fopts);
    if (t->wb) rocksdb_writebatch_destroy(t->wb);
    dd_trace_set_free(atomic_load(&t->set));
    dd_trace_set_free(t->config);
    for (size_t i = 0; i < t->nusers; i++) free(t->users[i].id);
    free(t->users);
    free(t->kbuf);
    free(t->vbuf);
    free(t->path);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int dd_trace_compact(dd_trace *t, char *err, size_t errlen)
{
    rocksdb_compactoptions_t *co = rocksdb_compactoptions_create();
    if (!co) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    rocksdb_compactoptions_set_bottommost_level_compaction(co, 2); /* kForce */
    char *e = NULL;
    rocksdb_flush(t->db, t->fopts, &e);
    if (!e) rocksdb_compact_range_opt(t->db, co, NULL, 0, NULL, 0);
    rocksdb_compactoptions_destroy(co);
    if (e) {
        int rc = dd_fail(DD_ERR_IO, err, errlen, "%s: %s", t->path, e);
        rocksdb_free(e);
        return rc;
    }
    return DD_OK;
}

/* ---- metrics ------------------------------------------------------------------------------ */

void dd_trace_get_stats(dd_trace *t, struct dd_trace_stats *out)
{
#define LOAD(x) atomic_load_explicit(&t->x, memory_order_relaxed)
    out->users = LOAD(nusers_now);
    for (int k = 0; k < DD_TRACE_NKINDS; k++) out->records[k] = LOAD(records[k]);
    out->errors_write = LOAD(errors_write);
    out->errors_dropped = LOAD(errors_dropped);
    out->errors_corrupt = LOAD(errors_corrupt);
    out->trimmed = LOAD(trimmed);
#undef LOAD
}

void dd_trace_collect(dd_prom *p, void *ud)
{
    struct dd_trace_stats s;
    dd_trace_get_stats(ud, &s);
    dd_prom_gauge(p, "dedupd_trace_users", "Users whose plays, deliveries and forgets are traced",
                  s.users);
    dd_prom_family(p, "dedupd_trace_records_total", "Trace records written, by kind",
                   DD_PROM_COUNTER);
    for (int k = 0; k < DD_TRACE_NKINDS; k++) {
        struct dd_prom_label l = {"kind", dd_trace_kind_name(k + 1)};
        dd_prom_sample_u64(p, "dedupd_trace_records_total", &l, 1, s.records[k]);
    }
    dd_prom_family(p, "dedupd_trace_errors_total",
                   "Trace records not written (write), not kept for writing (dropped), or "
                   "read back corrupt (corrupt)",
                   DD_PROM_COUNTER);
    static const struct dd_prom_label lw = {"kind", "write"}, ld = {"kind", "dropped"},
                                      lc = {"kind", "corrupt"};
    dd_prom_sample_u64(p, "dedupd_trace_errors_total", &lw, 1, s.errors_write);
    dd_prom_sample_u64(p, "dedupd_trace_errors_total", &ld, 1, s.errors_dropped);
    dd_prom_sample_u64(p, "dedupd_trace_errors_total", &lc, 1, s.errors_corrupt);
    dd_prom_counter(p, "dedupd_trace_trimmed_total",
                    "Trace records deleted to keep a user within trace.max_records", s.trimmed);
}
