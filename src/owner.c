/* SPDX-License-Identifier: Apache-2.0
 *
 * owner.c - the store's ownership record and the check at open (owner.h).
 */
#include "owner.h"

#include "cluster_map.h"
#include "dd.h"
#include "log.h"
#include "partition.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define MOD "owner"

static const uint8_t magic[4] = {'D', 'D', 'O', 'W'};

static void put32(uint8_t *p, uint32_t x)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (24 - 8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put64(uint8_t *p, uint64_t x)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(x >> (56 - 8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x = x << 8 | p[i];
    return x;
}

/* A Kafka topic name: 1..249 of [A-Za-z0-9._-]. */
static bool topic_ok(const char *t, size_t n)
{
    if (n == 0 || n > DD_TOPIC_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* The fields' ranges, for both directions; NULL when O is valid. */
static const char *invalid(const struct dd_owner *o, size_t topic_len)
{
    if (!topic_ok(o->topic, topic_len)) return "topic is not a Kafka topic name";
    if (o->partitions < 0) return "negative partition count";
    if (o->partitioner < 0 || o->partitioner >= DD_PARTITIONER_COUNT) return "unknown partitioner";
    if (o->shards < 1 || o->shards > DD_CLUSTER_MAX_SHARDS) return "shards out of range";
    if (o->shard >= o->shards) return "shard out of range";
    if (o->split_from && (o->split_from >= o->shards || o->shards % o->split_from != 0))
        return "split_from does not divide shards";
    return NULL;
}

size_t dd_owner_encode(const struct dd_owner *o, uint8_t *buf)
{
    size_t tl = strnlen(o->topic, sizeof o->topic);
    if (invalid(o, tl)) return 0;
    uint8_t *p = buf;
    memcpy(p, magic, 4);
    p += 4;
    *p++ = DD_OWNER_VERSION;
    *p++ = (uint8_t)tl;
    memcpy(p, o->topic, tl);
    p += tl;
    put32(p, (uint32_t)o->partitions);
    p += 4;
    *p++ = (uint8_t)o->partitioner;
    put32(p, o->shards);
    put32(p + 4, o->shard);
    put32(p + 8, o->split_from);
    p += 12;
    put64(p, XXH3_64bits(buf, (size_t)(p - buf)));
    return (size_t)(p - buf) + 8;
}

int dd_owner_decode(const uint8_t *buf, size_t len, struct dd_owner *o, char *err, size_t errlen)
{
    /* magic, version and topic length first: they say how long the rest is */
    if (len < 6 || memcmp(buf, magic, 4) != 0)
        return dd_fail(DD_ERR_CORRUPT, err, errlen, "ownership record: not a record (%zu bytes)",
                       len);
    if (buf[4] != DD_OWNER_VERSION)
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "ownership record: version %u, this release knows %d", buf[4],
                       DD_OWNER_VERSION);
    size_t tl = buf[5], want = 6 + tl + 4 + 1 + 12 + 8;
    if (len != want)
        return dd_fail(DD_ERR_CORRUPT, err, errlen,
                       "ownership record: %zu bytes, its topic length says %zu", len, want);
    if (get64(buf + len - 8) != XXH3_64bits(buf, len - 8))
        return dd_fail(DD_ERR_CORRUPT, err, errlen, "ownership record: checksum differs");
    struct dd_owner r = {0};
    const uint8_t *p = buf + 6;
    memcpy(r.topic, p, tl);
    r.topic[tl] = '\0';
    p += tl;
    uint32_t parts = get32(p);
    p += 4;
    r.partitions = parts > INT32_MAX ? -1 : (int32_t)parts;
    r.partitioner = *p++;
    r.shards = get32(p);
    r.shard = get32(p + 4);
    r.split_from = get32(p + 8);
    const char *bad = invalid(&r, tl);
    if (bad) return dd_fail(DD_ERR_CORRUPT, err, errlen, "ownership record: %s", bad);
    *o = r;
    return DD_OK;
}

void dd_owner_format(const struct dd_owner *o, char *out, size_t outlen)
{
    char parts[16] = "?", split[32] = "";
    if (o->partitions > 0) snprintf(parts, sizeof parts, "%" PRId32, o->partitions);
    if (o->split_from) snprintf(split, sizeof split, " split_from=%" PRIu32, o->split_from);
    const char *pn = o->partitioner >= 0 && o->partitioner < DD_PARTITIONER_COUNT
                         ? dd_partitioner_name((enum dd_partitioner)o->partitioner)
                         : "?";
    snprintf(out, outlen,
             "shards=%" PRIu32 " shard=%" PRIu32 "%s topic=%s partitions=%s "
             "partitioner=%s",
             o->shards, o->shard, split, o->topic, parts, pn);
}

enum dd_owner_relation dd_owner_relate(const struct dd_owner *s, const struct dd_owner *w)
{
    if (strcmp(s->topic, w->topic) != 0 || s->partitioner != w->partitioner ||
        (s->partitions && w->partitions && s->partitions != w->partitions))
        return DD_OWNER_OTHER;
    if (s->shards == w->shards && s->shard == w->shard) return DD_OWNER_SAME;
    /* The parent of a split: the M-shard map's shard that held this
     * shard's users (cluster.h, resharding). */
    if (w->split_from && s->shards == w->split_from && s->shard == w->shard % w->split_from)
        return DD_OWNER_PARENT;
    return DD_OWNER_OTHER;
}

/* ---- the guard ----------------------------------------------------------- */

struct dd_owner_guard {
    dd_history *h;
    struct dd_owner want;
    struct dd_owner stored; /* what the store holds now (after any write here) */
    enum dd_owner_relation rel;
    pthread_mutex_t lock; /* partitions and swept: one writer at a time */
    atomic_bool refused;
    char why[640]; /* written once, before refused is set */
};

static int put_record(dd_owner_guard *g, const struct dd_owner *o, char *err, size_t errlen)
{
    uint8_t v[DD_OWNER_RECORD_MAX];
    size_t n = dd_owner_encode(o, v);
    if (n == 0) return dd_fail(DD_ERR_INVALID, err, errlen, "ownership to record is invalid");
    int rc = dd_history_put_holds(g->h, v, n, err, errlen);
    if (rc == DD_OK) g->stored = *o;
    return rc;
}

/* Refuse the store, once: STORED_TEXT is what the store holds (or why it
 * cannot be read). */
static void refuse(dd_owner_guard *g, const char *stored_text)
{
    if (atomic_load(&g->refused)) return;
    char want[300];
    dd_owner_format(&g->want, want, sizeof want);
    snprintf(g->why, sizeof g->why,
             "ownership mismatch: the store is %s; configured: %s; not serving from it "
             "(dedupd --take-over)",
             stored_text, want);
    dd_error(MOD,
             "msg=\"the store belongs to another ownership: not serving from it; check the "
             "volume, or take it over with dedupd --take-over (README, Ownership)\" "
             "store=\"%s\" configured=\"%s\"",
             stored_text, want);
    atomic_store(&g->refused, true);
}

int dd_owner_guard_new(dd_owner_guard **out, dd_history *h, const struct dd_owner *want,
                       bool created, bool take_over, uint64_t legacy_id, uint64_t legacy_parent,
                       char *err, size_t errlen)
{
    *out = NULL;
    dd_owner_guard *g = calloc(1, sizeof *g);
    if (!g) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    g->h = h;
    g->want = *want;
    pthread_mutex_init(&g->lock, NULL);
    atomic_init(&g->refused, false);

    uint8_t v[DD_OWNER_RECORD_MAX];
    size_t n = 0;
    char rerr[200] = "", text[300];
    int rc = dd_history_get_holds(h, v, sizeof v, &n, rerr, sizeof rerr);
    if (rc == DD_ERR_IO) {
        dd_fail(rc, err, errlen, "reading the ownership record: %s", rerr);
        goto fail;
    }
    if (take_over) {
        if (rc == DD_OK) {
            struct dd_owner s;
            if (n != 8 && dd_owner_decode(v, n, &s, rerr, sizeof rerr) == DD_OK)
                dd_owner_format(&s, text, sizeof text);
            else
                snprintf(text, sizeof text, "%s",
                         n == 8 ? "a record of the previous release" : rerr);
        } else {
            snprintf(text, sizeof text, "no record");
        }
        if ((rc = put_record(g, want, err, errlen)) != DD_OK) goto fail;
        dd_owner_format(want, rerr, sizeof rerr);
        dd_warn(MOD,
                "msg=\"store taken over (dedupd --take-over): its ownership record "
                "replaced\" was=\"%s\" now=\"%s\"",
                text, rerr);
        g->rel = DD_OWNER_SAME;
        *out = g;
        return DD_OK;
    }
    if (rc == DD_ERR_NOTFOUND) {
        /* A store this open created, or one of the previous release (the
         * only writer of stores without a record), adopted once. */
        if ((rc = put_record(g, want, err, errlen)) != DD_OK) goto fail;
        if (!created) {
            dd_owner_format(want, text, sizeof text);
            dd_info(MOD,
                    "msg=\"store without an ownership record (written by the previous "
                    "release): adopted\" ownership=\"%s\"",
                    text);
        }
        g->rel = DD_OWNER_SAME;
    } else if (rc == DD_OK && n == 8) {
        uint64_t id = get64(v);
        if (legacy_id && id == legacy_id) {
            if ((rc = put_record(g, want, err, errlen)) != DD_OK) goto fail;
            dd_owner_format(want, text, sizeof text);
            dd_info(MOD,
                    "msg=\"store with the previous release's ownership id: adopted\" "
                    "ownership=\"%s\"",
                    text);
            g->rel = DD_OWNER_SAME;
        } else if (legacy_parent && id == legacy_parent) {
            /* a copy of the split's parent: the sweep records ours */
            g->stored = *want;
            g->stored.shards = want->split_from;
            g->stored.shard = want->shard % want->split_from;
            g->stored.split_from = 0;
            g->rel = DD_OWNER_PARENT;
        } else {
            snprintf(text, sizeof text,
                     "the previous release's ownership id %016" PRIx64 " (another shard or map)",
                     id);
            g->rel = DD_OWNER_OTHER;
            refuse(g, text);
        }
    } else {
        struct dd_owner s;
        if (rc == DD_OK) rc = dd_owner_decode(v, n, &s, rerr, sizeof rerr);
        if (rc != DD_OK) {
            /* damaged, too long, or of a newer release: never guessed at */
            snprintf(text, sizeof text, "an unreadable record (%s)", rerr);
            g->rel = DD_OWNER_OTHER;
            refuse(g, text);
        } else {
            g->stored = s;
            g->rel = dd_owner_relate(&s, want);
            if (g->rel == DD_OWNER_OTHER) {
                dd_owner_format(&s, text, sizeof text);
                refuse(g, text);
            }
        }
    }
    *out = g;
    return DD_OK;
fail:
    pthread_mutex_destroy(&g->lock);
    free(g);
    return rc;
}

void dd_owner_guard_free(dd_owner_guard *g)
{
    if (!g) return;
    pthread_mutex_destroy(&g->lock);
    free(g);
}

bool dd_owner_guard_refused(const dd_owner_guard *g, char *why, size_t whylen)
{
    if (!atomic_load(&g->refused)) return false;
    if (why && whylen) snprintf(why, whylen, "%s", g->why);
    return true;
}

enum dd_owner_relation dd_owner_guard_relation(const dd_owner_guard *g)
{
    return g->rel;
}

bool dd_owner_guard_partitions(void *ud, int32_t n)
{
    dd_owner_guard *g = ud;
    if (n <= 0) return !atomic_load(&g->refused);
    pthread_mutex_lock(&g->lock);
    bool ok = !atomic_load(&g->refused);
    if (ok && g->stored.partitions && g->stored.partitions != n) {
        char text[300];
        dd_owner_format(&g->stored, text, sizeof text);
        g->want.partitions = n;
        refuse(g, text);
        ok = false;
    } else if (ok && g->want.partitions == 0) {
        g->want.partitions = n;
        if (g->rel == DD_OWNER_SAME && g->stored.partitions == 0) {
            char err[256];
            if (put_record(g, &g->want, err, sizeof err) != DD_OK)
                dd_warn(MOD,
                        "msg=\"cannot record the topic's partition count in the store's "
                        "ownership; tried again at the next start\" error=\"%s\"",
                        err);
        }
    }
    pthread_mutex_unlock(&g->lock);
    return ok;
}

int dd_owner_guard_swept(dd_owner_guard *g, int32_t n, char *err, size_t errlen)
{
    pthread_mutex_lock(&g->lock);
    int rc;
    if (atomic_load(&g->refused) || g->rel != DD_OWNER_PARENT) {
        rc = dd_fail(DD_ERR_STATE, err, errlen, "not a split's store");
    } else {
        struct dd_owner w = g->want;
        if (n > 0) w.partitions = n;
        rc = put_record(g, &w, err, errlen);
        if (rc == DD_OK) g->rel = DD_OWNER_SAME;
    }
    pthread_mutex_unlock(&g->lock);
    return rc;
}

void dd_owner_guard_collect(dd_prom *p, void *ud)
{
    const dd_owner_guard *g = ud;
    dd_prom_gauge(p, "dedupd_history_ownership_mismatch",
                  "1 while the store's ownership record differs from this node's configuration "
                  "(nothing is served from it)",
                  atomic_load(&g->refused) ? 1 : 0);
}
