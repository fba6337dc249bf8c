/* SPDX-License-Identifier: Apache-2.0
 *
 * tracerec.c - trace records' bytes and the pending buffer; see
 * tracerec.h.
 */
#include "tracerec.h"

#include "be.h"
#include "dd.h"

#include <string.h>

#include <xxhash.h>

#define REC_VERSION 1
#define REC_HEAD 35 /* fixed part before the strings */
#define KEY_TAIL 12 /* u64 time | u32 seq */

static uint32_t checksum(const void *p, size_t n)
{
    return (uint32_t)XXH3_64bits(p, n);
}

/* ---- names ----------------------------------------------------------------- */

const char *dd_trace_kind_name(int kind)
{
    switch (kind) {
    case DD_TRACE_PLAY: return "play";
    case DD_TRACE_DELIVERY: return "delivery";
    case DD_TRACE_FORGET: return "forget";
    default: return "?";
    }
}

const char *dd_trace_source_name(int source)
{
    switch (source) {
    case DD_TRACE_SRC_KAFKA: return "kafka";
    case DD_TRACE_SRC_RECORD_PLAYS: return "RecordPlays";
    case DD_TRACE_SRC_RECORD_DELIVERY: return "RecordDelivery";
    case DD_TRACE_SRC_FORGET_USER: return "ForgetUser";
    default: return "?";
    }
}

/* ---- the record codec ------------------------------------------------------ */

/* Which items a kind carries: plays and deliveries one, forgets none. */
static bool kind_ok(int kind, size_t item_len)
{
    switch (kind) {
    case DD_TRACE_PLAY:
    case DD_TRACE_DELIVERY: return item_len > 0;
    case DD_TRACE_FORGET: return item_len == 0;
    default: return false;
    }
}

size_t dd_trace_encode(const struct dd_trace_rec *r, uint8_t *out, size_t cap)
{
    if (!kind_ok(r->kind, r->item_len) || r->source < DD_TRACE_SRC_KAFKA ||
        r->source > DD_TRACE_SRC_FORGET_USER || r->scene_len > 255 || r->item_len > 65535 ||
        r->topic_len > 255 || r->at_ms < 0 || r->recorded_ms < 0)
        return 0;
    size_t n = REC_HEAD + r->scene_len + r->item_len + r->topic_len + 4;
    if (n > cap) return 0;
    out[0] = REC_VERSION;
    out[1] = (uint8_t)r->kind;
    out[2] = (uint8_t)r->source;
    out[3] = (uint8_t)r->scene_len;
    dd_be64_store(out + 4, (uint64_t)r->at_ms);
    dd_be64_store(out + 12, (uint64_t)r->recorded_ms);
    dd_be32_store(out + 20, (uint32_t)r->partition);
    dd_be64_store(out + 24, (uint64_t)r->offset);
    dd_be16_store(out + 32, (uint16_t)r->item_len);
    out[34] = (uint8_t)r->topic_len;
    uint8_t *p = out + REC_HEAD;
    if (r->scene_len) memcpy(p, r->scene, r->scene_len);
    p += r->scene_len;
    if (r->item_len) memcpy(p, r->item, r->item_len);
    p += r->item_len;
    if (r->topic_len) memcpy(p, r->topic, r->topic_len);
    p += r->topic_len;
    dd_be32_store(p, checksum(out, (size_t)(p - out)));
    return n;
}

int dd_trace_decode(const uint8_t *v, size_t len, struct dd_trace_rec *r)
{
    if (!v || len < REC_HEAD + 4 || v[0] != REC_VERSION) return DD_ERR_CORRUPT;
    size_t scene_len = v[3], item_len = dd_be16_load(v + 32), topic_len = v[34];
    if (REC_HEAD + scene_len + item_len + topic_len + 4 != len) return DD_ERR_CORRUPT;
    if (dd_be32_load(v + len - 4) != checksum(v, len - 4)) return DD_ERR_CORRUPT;
    memset(r, 0, sizeof *r);
    r->kind = v[1];
    r->source = v[2];
    r->at_ms = (int64_t)dd_be64_load(v + 4);
    r->recorded_ms = (int64_t)dd_be64_load(v + 12);
    r->partition = (int32_t)dd_be32_load(v + 20);
    r->offset = (int64_t)dd_be64_load(v + 24);
    if (!kind_ok(r->kind, item_len) || r->source < DD_TRACE_SRC_KAFKA ||
        r->source > DD_TRACE_SRC_FORGET_USER || r->at_ms < 0 || r->recorded_ms < 0)
        return DD_ERR_CORRUPT;
    const char *p = (const char *)v + REC_HEAD;
    r->scene = p;
    r->scene_len = scene_len;
    r->item = p + scene_len;
    r->item_len = item_len;
    r->topic = p + scene_len + item_len;
    r->topic_len = topic_len;
    return DD_OK;
}

size_t dd_trace_key(uint8_t *out, size_t cap, const char *user, size_t user_len, int64_t at_ms,
                    uint32_t seq)
{
    if (user_len == 0 || user_len > 65535 || 2 + user_len + KEY_TAIL > cap) return 0;
    dd_be16_store(out, (uint16_t)user_len);
    memcpy(out + 2, user, user_len);
    dd_be64_store(out + 2 + user_len, (uint64_t)(at_ms < 0 ? 0 : at_ms));
    dd_be32_store(out + 2 + user_len + 8, seq);
    return 2 + user_len + KEY_TAIL;
}

int dd_trace_key_parse(const uint8_t *key, size_t len, const char **user, size_t *user_len,
                       int64_t *at_ms, uint32_t *seq)
{
    if (len < 2 + 1 + KEY_TAIL) return DD_ERR_CORRUPT;
    size_t ul = dd_be16_load(key);
    if (ul == 0 || 2 + ul + KEY_TAIL != len) return DD_ERR_CORRUPT;
    uint64_t t = dd_be64_load(key + 2 + ul);
    if (t > INT64_MAX) return DD_ERR_CORRUPT;
    *user = (const char *)key + 2;
    *user_len = ul;
    *at_ms = (int64_t)t;
    *seq = dd_be32_load(key + 2 + ul + 8);
    return DD_OK;
}

/* ---- records pending a write ---------------------------------------------- */

int dd_trace_pending_add(struct dd_trace_pending *p, const char *user, size_t user_len,
                         const struct dd_trace_rec *r)
{
    if (user_len > 65535) return DD_ERR_INVALID;
    size_t need = 2 + user_len + 4 + DD_TRACE_REC_MAX;
    if (p->b.len + need > DD_TRACE_PENDING_MAX + DD_TRACE_REC_MAX) return DD_ERR_LIMIT;
    if (dd_buf_reserve(&p->b, need) != DD_OK) return DD_ERR_NOMEM;
    uint8_t *e = p->b.data + p->b.len;
    size_t vl = dd_trace_encode(r, e + 2 + user_len + 4, DD_TRACE_REC_MAX);
    if (vl == 0) return DD_ERR_INVALID;
    dd_be16_store(e, (uint16_t)user_len);
    memcpy(e + 2, user, user_len);
    dd_be32_store(e + 2 + user_len, (uint32_t)vl);
    p->b.len += 2 + user_len + 4 + vl;
    return DD_OK;
}

bool dd_trace_pending_next(const struct dd_trace_pending *p, size_t *pos, const char **user,
                           size_t *user_len, const uint8_t **v, size_t *len)
{
    if (!p->b.data || p->b.len - *pos < 6 || *pos > p->b.len) return false;
    const uint8_t *e = p->b.data + *pos;
    size_t ul = dd_be16_load(e);
    size_t vl = dd_be32_load(e + 2 + ul);
    *user = (const char *)e + 2;
    *user_len = ul;
    *v = e + 2 + ul + 4;
    *len = vl;
    *pos += 2 + ul + 4 + vl;
    return true;
}

void dd_trace_pending_clear(struct dd_trace_pending *p)
{
    p->b.len = 0;
}

void dd_trace_pending_free(struct dd_trace_pending *p)
{
    dd_buf_free(&p->b);
}
