/* SPDX-License-Identifier: Apache-2.0
 *
 * playevent.c - decode and check one play message; see playevent.h.
 *
 * JSON goes through yajl's event (SAX) parser: no object tree, the fields
 * we read are picked out as they stream by and their strings copied into
 * one buffer reused for every message; yajl's handle (yajl 2 cannot reset
 * one) comes from an arena reset per message. Not json-c: it builds a tree
 * per message and switches locale inside every parse, which made it most of
 * the ingest poll thread's time. Protobuf goes
 * through protobuf-c with an arena allocator reset per message, so that
 * path allocates nothing once the arena has grown to the largest message.
 */
#include "playevent.h"

#include "arena.h"
#include "buf.h"
#include "dd.h"
#include "text.h" /* the text rule every id follows */

#include "dedup.pb-c.h"

#include <ctype.h>
#include <inttypes.h>
#include <yajl/yajl_parse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 16
#define SCENE_MAX 255u

struct dd_playevent_decoder {
    enum dd_playevent_format format;
    uint32_t max_id_bytes;
    struct dd_buf sbuf;              /* JSON: the last message's strings */
    dd_arena *arena;                 /* protobuf messages, or yajl's memory */
    char user_num[24], item_num[24]; /* integer ids as text */
};

static const char *const status_names[DD_PLAYEVENT_NSTATUS] = {
    "ok", "undecodable", "empty_user", "empty_item", "id_too_long",
};

const char *dd_playevent_status_name(int status)
{
    if (status < 0 || status >= DD_PLAYEVENT_NSTATUS) return "unknown";
    return status_names[status];
}

int dd_playevent_format_parse(const char *s)
{
    if (strcmp(s, "json") == 0) return DD_PLAYEVENT_JSON;
    if (strcmp(s, "protobuf") == 0) return DD_PLAYEVENT_PROTOBUF;
    return -1;
}

int dd_playevent_decoder_new(dd_playevent_decoder **out, enum dd_playevent_format format,
                             uint32_t max_id_bytes)
{
    *out = NULL;
    if ((format != DD_PLAYEVENT_JSON && format != DD_PLAYEVENT_PROTOBUF) || max_id_bytes == 0)
        return DD_ERR_INVALID;
    dd_playevent_decoder *d = calloc(1, sizeof *d);
    if (!d) return DD_ERR_NOMEM;
    d->format = format;
    d->max_id_bytes = max_id_bytes;
    if (format == DD_PLAYEVENT_JSON && dd_buf_reserve(&d->sbuf, 256) != 0) goto err;
    d->arena = dd_arena_new(4096, 1u << 20);
    if (!d->arena) goto err;
    *out = d;
    return DD_OK;
err:
    dd_playevent_decoder_free(d);
    return DD_ERR_NOMEM;
}

void dd_playevent_decoder_free(dd_playevent_decoder *d)
{
    if (!d) return;
    dd_buf_free(&d->sbuf);
    dd_arena_free(d->arena);
    free(d);
}

/* JSON fields we read, each spelling its own slot. */
enum jfield {
    JF_NONE = -1,
    JF_USER,
    JF_USER_CC,
    JF_ITEM,
    JF_ITEM_CC,
    JF_TIME,
    JF_TIME_CC,
    JF_SCENE,
    JF_COUNT
};
static const char *const jfield_names[JF_COUNT] = {
    "user_id", "userId", "item_id", "itemId", "played_at_ms", "playedAtMs", "scene",
};

enum jtype { JT_MISSING = 0, JT_STRING, JT_INT };

/* What the parse saw of one field (the last occurrence wins, as in an
 * object; JSON null is "missing"). Strings live in d->sbuf at OFF. */
struct jval {
    enum jtype type;
    size_t off, len;
    long long i;
};

/* The SAX state of one decode. */
struct jctx {
    dd_playevent_decoder *d;
    int depth;         /* open maps and arrays; 1 = inside the top object */
    enum jfield field; /* the top-level key whose value comes next */
    bool nomem;
    struct jval v[JF_COUNT];
};

/* A value at the top level of the object: the field it belongs to, or
 * JF_NONE for an unknown key or a nested value. */
static enum jfield jtake(struct jctx *c)
{
    enum jfield f = c->depth == 1 ? c->field : JF_NONE;
    if (c->depth == 1) c->field = JF_NONE;
    return f;
}

/* Callbacks return 0 to stop the parse: the message is undecodable. A
 * known field of the wrong type stops it too (json_id/json_time rules). */
static int j_null(void *ctx)
{
    struct jctx *c = ctx;
    if (c->depth == 0) return 0;
    enum jfield f = jtake(c);
    if (f != JF_NONE) c->v[f].type = JT_MISSING;
    return 1;
}

static int j_bad_scalar(struct jctx *c)
{
    return c->depth == 0 ? 0 : jtake(c) == JF_NONE;
}

static int j_bool(void *ctx, int b)
{
    (void)b;
    return j_bad_scalar(ctx);
}

static int j_double(void *ctx, double x)
{
    (void)x;
    return j_bad_scalar(ctx);
}

static int j_int(void *ctx, long long x)
{
    struct jctx *c = ctx;
    if (c->depth == 0) return 0;
    enum jfield f = jtake(c);
    if (f == JF_SCENE) return 0;
    if (f != JF_NONE) {
        c->v[f].type = JT_INT;
        c->v[f].i = x;
    }
    return 1;
}

static int j_string(void *ctx, const unsigned char *s, size_t len)
{
    struct jctx *c = ctx;
    if (c->depth == 0) return 0;
    enum jfield f = jtake(c);
    if (f == JF_NONE) return 1;
    struct dd_buf *b = &c->d->sbuf;
    if (dd_buf_reserve(b, len + 1) != 0) {
        c->nomem = true;
        return 0;
    }
    memcpy(b->data + b->len, s, len);
    c->v[f] = (struct jval){.type = JT_STRING, .off = b->len, .len = len};
    b->len += len;
    return 1;
}

static int j_key(void *ctx, const unsigned char *s, size_t len)
{
    struct jctx *c = ctx;
    if (c->depth != 1) return 1;
    c->field = JF_NONE;
    for (int i = 0; i < JF_COUNT; i++)
        if (strlen(jfield_names[i]) == len && memcmp(jfield_names[i], s, len) == 0) {
            c->field = (enum jfield)i;
            break;
        }
    return 1;
}

/* A map or array opens: only an object at the top; no known field may be
 * one; at most JSON_MAX_DEPTH deep. */
static int j_open(struct jctx *c, bool map)
{
    if (c->depth == 0 && !map) return 0;
    if (c->depth >= 1 && jtake(c) != JF_NONE) return 0;
    return ++c->depth <= JSON_MAX_DEPTH;
}

static int j_start_map(void *ctx)
{
    return j_open(ctx, true);
}
static int j_start_array(void *ctx)
{
    return j_open(ctx, false);
}

static int j_close(void *ctx)
{
    struct jctx *c = ctx;
    c->depth--;
    return 1;
}

/* yajl's memory comes from the decoder's arena, reset per message, so a
 * decode allocates nothing once the arena has grown. Each block carries its
 * size in front for realloc; free is a no-op until the reset. */
#define JALIGN 16
static void *j_malloc(void *ctx, size_t size)
{
    uint8_t *p = dd_arena_alloc(ctx, size + JALIGN);
    if (!p) return NULL;
    memcpy(p, &size, sizeof size);
    return p + JALIGN;
}

static void *j_realloc(void *ctx, void *ptr, size_t size)
{
    if (!ptr) return j_malloc(ctx, size);
    size_t old;
    memcpy(&old, (uint8_t *)ptr - JALIGN, sizeof old);
    if (size <= old) return ptr;
    void *q = j_malloc(ctx, size);
    if (q) memcpy(q, ptr, old);
    return q;
}

static void j_free(void *ctx, void *ptr)
{
    (void)ctx;
    (void)ptr;
}

static const yajl_callbacks jcallbacks = {
    .yajl_null = j_null,
    .yajl_boolean = j_bool,
    .yajl_integer = j_int,
    .yajl_double = j_double,
    .yajl_string = j_string,
    .yajl_start_map = j_start_map,
    .yajl_map_key = j_key,
    .yajl_end_map = j_close,
    .yajl_start_array = j_start_array,
    .yajl_end_array = j_close,
};

/* The first of two spellings present, or NULL. */
static const struct jval *jfield_of(const struct jctx *c, enum jfield a, enum jfield b)
{
    if (c->v[a].type != JT_MISSING) return &c->v[a];
    if (b != JF_NONE && c->v[b].type != JT_MISSING) return &c->v[b];
    return NULL;
}

/* An id field: a string, or an integer as its decimal text (in NUM).
 * Missing or JSON null is "". Returns 0, or -1. */
static int json_id(const struct jctx *c, const struct jval *v, char num[24], const char **s,
                   size_t *len)
{
    if (!v) {
        *s = "";
        *len = 0;
        return 0;
    }
    if (v->type == JT_STRING) {
        *s = (const char *)c->d->sbuf.data + v->off;
        *len = v->len;
        return 0;
    }
    int n = snprintf(num, 24, "%lld", v->i);
    if (n <= 0 || n >= 24) return -1;
    *s = num;
    *len = (size_t)n;
    return 0;
}

/* played_at_ms: an integer, or a string of at most 18 digits. Missing or
 * null is 0. Returns 0 or -1. */
static int json_time(const struct jctx *c, const struct jval *v, int64_t *out)
{
    *out = 0;
    if (!v) return 0;
    if (v->type == JT_INT) {
        *out = v->i;
        return 0;
    }
    const char *s = (const char *)c->d->sbuf.data + v->off;
    if (v->len == 0 || v->len > 18) return -1;
    int64_t t = 0;
    for (size_t i = 0; i < v->len; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        t = t * 10 + (s[i] - '0');
    }
    *out = t;
    return 0;
}

static int decode_json(dd_playevent_decoder *d, const void *payload, size_t len,
                       struct dd_playevent *ev)
{
    if (len == 0) return DD_PLAYEVENT_UNDECODABLE;
    struct jctx c = {.d = d, .field = JF_NONE};
    d->sbuf.len = 0;
    /* yajl 2 has no reset: a handle per message, from the arena. */
    dd_arena_reset(d->arena);
    yajl_alloc_funcs af = {j_malloc, j_realloc, j_free, d->arena};
    yajl_handle y = yajl_alloc(&jcallbacks, &af, &c);
    if (!y) return DD_PLAYEVENT_UNDECODABLE;
    int ok =
        yajl_parse(y, payload, len) == yajl_status_ok && yajl_complete_parse(y) == yajl_status_ok;
    yajl_free(y);
    if (!ok || c.nomem) return DD_PLAYEVENT_UNDECODABLE;

    if (json_id(&c, jfield_of(&c, JF_USER, JF_USER_CC), d->user_num, &ev->user, &ev->user_len) !=
            0 ||
        json_id(&c, jfield_of(&c, JF_ITEM, JF_ITEM_CC), d->item_num, &ev->item, &ev->item_len) !=
            0 ||
        json_time(&c, jfield_of(&c, JF_TIME, JF_TIME_CC), &ev->played_at_ms) != 0)
        return DD_PLAYEVENT_UNDECODABLE;
    const struct jval *sc = jfield_of(&c, JF_SCENE, JF_NONE);
    if (sc) {
        ev->scene = (const char *)d->sbuf.data + sc->off;
        ev->scene_len = sc->len;
    } else {
        ev->scene = "";
        ev->scene_len = 0;
    }
    return DD_PLAYEVENT_OK;
}

static int decode_protobuf(dd_playevent_decoder *d, const void *payload, size_t len,
                           struct dd_playevent *ev)
{
    dd_arena_reset(d->arena);
    /* protobuf-c hands strings out cut at their first NUL byte: check the
     * bytes first, so "victim\0x" cannot act on "victim". */
    if (dd_text_pb_check(&dedup__v1__play_event__descriptor, payload, len, 1, NULL, 0))
        return DD_PLAYEVENT_UNDECODABLE;
    Dedup__V1__PlayEvent *m =
        dedup__v1__play_event__unpack(dd_arena_allocator(d->arena), len, payload);
    if (!m) return DD_PLAYEVENT_UNDECODABLE;
    ev->user = m->user_id ? m->user_id : "";
    ev->item = m->item_id ? m->item_id : "";
    ev->scene = m->scene ? m->scene : "";
    ev->user_len = strlen(ev->user);
    ev->item_len = strlen(ev->item);
    ev->scene_len = strlen(ev->scene);
    ev->played_at_ms = m->played_at_ms;
    return DD_PLAYEVENT_OK;
}

/* Decode and check a play (FORGET false) or a forget marker's payload
 * (true: the item must be empty). */
static int decode(dd_playevent_decoder *d, const void *payload, size_t len, const void *key,
                  size_t key_len, int64_t msg_ts_ms, bool forget, struct dd_playevent *ev)
{
    struct dd_playevent e = {0};
    int st = d->format == DD_PLAYEVENT_JSON ? decode_json(d, payload, len, &e)
                                            : decode_protobuf(d, payload, len, &e);
    if (st != DD_PLAYEVENT_OK) return st;
    if (e.played_at_ms < 0) return DD_PLAYEVENT_UNDECODABLE;
    if (e.played_at_ms == 0) e.played_at_ms = msg_ts_ms;
    if (!key) key_len = 0;
    if (e.user_len == 0) {
        e.user = key;
        e.user_len = key_len;
    } else if (key_len && (key_len != e.user_len || memcmp(key, e.user, key_len) != 0)) {
        e.key_mismatch = true;
    }
    if (e.user_len == 0) return DD_PLAYEVENT_EMPTY_USER;
    if (forget ? e.item_len != 0 : e.item_len == 0)
        return forget ? DD_PLAYEVENT_UNDECODABLE : DD_PLAYEVENT_EMPTY_ITEM;
    /* JSON's \u0000 and a binary message key reach here: ids are proto
     * strings everywhere else (Filter, RecordPlays), so the same rule. */
    if (dd_text_check((const uint8_t *)e.user, e.user_len) ||
        dd_text_check((const uint8_t *)e.item, e.item_len) ||
        dd_text_check((const uint8_t *)e.scene, e.scene_len))
        return DD_PLAYEVENT_UNDECODABLE;
    if (e.user_len > d->max_id_bytes || e.item_len > d->max_id_bytes ||
        e.scene_len > d->max_id_bytes || e.scene_len > SCENE_MAX || e.user_len > UINT16_MAX)
        return DD_PLAYEVENT_ID_TOO_LONG;
    *ev = e;
    return DD_PLAYEVENT_OK;
}

int dd_playevent_decode(dd_playevent_decoder *d, const void *payload, size_t len, const void *key,
                        size_t key_len, int64_t msg_ts_ms, struct dd_playevent *ev)
{
    return decode(d, payload, len, key, key_len, msg_ts_ms, false, ev);
}

int dd_playevent_decode_forget(dd_playevent_decoder *d, const void *payload, size_t len,
                               const void *key, size_t key_len, struct dd_playevent *ev)
{
    return decode(d, payload, len, key, key_len, 0, true, ev);
}

/* ---- encoding ---------------------------------------------------------- */

/* Room for N more bytes in B, or the encoding fails (B's length restored
 * by the caller). */
#define NEED(b, n) \
    do { \
        if (dd_buf_reserve((b), (n)) != 0) goto nomem; \
    } while (0)

static void put_bytes(struct dd_buf *b, const void *p, size_t n)
{
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void put_varint(struct dd_buf *b, uint64_t v)
{
    while (v >= 0x80) {
        b->data[b->len++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b->data[b->len++] = (uint8_t)v;
}

/* A length-delimited field NUM (proto3: left out when empty). */
static int pb_string(struct dd_buf *b, unsigned num, const char *s, size_t n)
{
    if (n == 0) return DD_OK;
    NEED(b, 1 + 10 + n);
    put_varint(b, (uint64_t)num << 3 | 2);
    put_varint(b, n);
    put_bytes(b, s, n);
    return DD_OK;
nomem:
    return DD_ERR_NOMEM;
}

/* A JSON string: '"', '\\' and control characters escaped; the rest
 * (UTF-8 checked by the caller) as is. */
static int json_string(struct dd_buf *b, const char *s, size_t n)
{
    NEED(b, 2 + 6 * n); /* at most \u00XX per byte */
    b->data[b->len++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            b->data[b->len++] = '\\';
            b->data[b->len++] = c;
        } else if (c < 0x20) {
            static const char hex[] = "0123456789abcdef";
            put_bytes(b, "\\u00", 4);
            b->data[b->len++] = (uint8_t)hex[c >> 4];
            b->data[b->len++] = (uint8_t)hex[c & 15];
        } else {
            b->data[b->len++] = c;
        }
    }
    b->data[b->len++] = '"';
    return DD_OK;
nomem:
    return DD_ERR_NOMEM;
}

static int json_field(struct dd_buf *b, const char *name, const char *s, size_t n, bool first)
{
    size_t nl = strlen(name);
    NEED(b, nl + 4);
    if (!first) b->data[b->len++] = ',';
    b->data[b->len++] = '"';
    put_bytes(b, name, nl);
    put_bytes(b, "\":", 2);
    return json_string(b, s, n);
nomem:
    return DD_ERR_NOMEM;
}

int dd_playevent_encode(struct dd_buf *out, enum dd_playevent_format format, const char *user,
                        size_t user_len, const char *item, size_t item_len, int64_t played_at_ms,
                        const char *scene, size_t scene_len)
{
    if (played_at_ms < 0) return DD_ERR_INVALID;
    size_t len0 = out->len;
    int rc = DD_OK;
    if (format == DD_PLAYEVENT_PROTOBUF) {
        /* dedup.v1.PlayEvent's field numbers, in order; protobuf-c is not
         * used because the ids come with lengths, not as C strings. */
        if ((rc = pb_string(out, 1, user, user_len)) || (rc = pb_string(out, 2, item, item_len)))
            goto fail;
        if (played_at_ms) {
            NEED(out, 11);
            put_varint(out, 3 << 3 | 0);
            put_varint(out, (uint64_t)played_at_ms);
        }
        if ((rc = pb_string(out, 4, scene, scene_len))) goto fail;
        return DD_OK;
    }
    if (format != DD_PLAYEVENT_JSON) return DD_ERR_INVALID;
    NEED(out, 1);
    out->data[out->len++] = '{';
    if ((rc = json_field(out, "user_id", user, user_len, true)) ||
        (rc = json_field(out, "item_id", item, item_len, false)))
        goto fail;
    if (played_at_ms) {
        NEED(out, 40);
        out->len += (size_t)snprintf((char *)out->data + out->len, 40, ",\"played_at_ms\":%" PRId64,
                                     played_at_ms);
    }
    if ((rc = json_field(out, "scene", scene, scene_len, false))) goto fail;
    NEED(out, 1);
    out->data[out->len++] = '}';
    return DD_OK;
nomem:
    rc = DD_ERR_NOMEM;
fail:
    out->len = len0;
    return rc;
}
