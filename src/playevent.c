/* SPDX-License-Identifier: Apache-2.0
 *
 * playevent.c - decode and check one play message; see playevent.h.
 *
 * JSON goes through json-c (one tokener reused for every message; json-c
 * allocates the parsed object, released at the next decode). Protobuf goes
 * through protobuf-c with an arena allocator reset per message, so that
 * path allocates nothing once the arena has grown to the largest message.
 */
#include "playevent.h"

#include "arena.h"
#include "dd.h"
#include "dedup.pb-c.h"

#include <ctype.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 16
#define SCENE_MAX 255u

struct dd_playevent_decoder {
    enum dd_playevent_format format;
    uint32_t max_id_bytes;
    struct json_tokener *tok;
    struct json_object *obj;   /* the last parsed JSON, owned */
    dd_arena *arena;           /* protobuf messages */
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
    if (format == DD_PLAYEVENT_JSON) {
        d->tok = json_tokener_new_ex(JSON_MAX_DEPTH);
        if (!d->tok) goto err;
        json_tokener_set_flags(d->tok, JSON_TOKENER_STRICT);
    } else {
        d->arena = dd_arena_new(4096, 1u << 20);
        if (!d->arena) goto err;
    }
    *out = d;
    return DD_OK;
err:
    dd_playevent_decoder_free(d);
    return DD_ERR_NOMEM;
}

void dd_playevent_decoder_free(dd_playevent_decoder *d)
{
    if (!d) return;
    if (d->obj) json_object_put(d->obj);
    if (d->tok) json_tokener_free(d->tok);
    dd_arena_free(d->arena);
    free(d);
}

/* The first of two spellings present in OBJ, or NULL. */
static struct json_object *field(struct json_object *obj, const char *a, const char *b)
{
    struct json_object *v;
    if (json_object_object_get_ex(obj, a, &v) && v) return v;
    if (b && json_object_object_get_ex(obj, b, &v) && v) return v;
    return NULL;
}

/* An id field: a string, or an integer as its decimal text (in NUM).
 * Missing or JSON null is "". Returns 0, or -1 for any other type. */
static int json_id(struct json_object *v, char num[24], const char **s, size_t *len)
{
    if (!v || json_object_is_type(v, json_type_null)) {
        *s = "";
        *len = 0;
        return 0;
    }
    if (json_object_is_type(v, json_type_string)) {
        *s = json_object_get_string(v);
        *len = (size_t)json_object_get_string_len(v);
        return 0;
    }
    if (json_object_is_type(v, json_type_int)) {
        int n = snprintf(num, 24, "%" PRId64, json_object_get_int64(v));
        if (n <= 0 || n >= 24) return -1;
        *s = num;
        *len = (size_t)n;
        return 0;
    }
    return -1;
}

/* played_at_ms: an integer, or a string of at most 18 digits. Missing or
 * null is 0. Returns 0 or -1. */
static int json_time(struct json_object *v, int64_t *out)
{
    *out = 0;
    if (!v || json_object_is_type(v, json_type_null)) return 0;
    if (json_object_is_type(v, json_type_int)) {
        *out = json_object_get_int64(v);
        return 0;
    }
    if (json_object_is_type(v, json_type_string)) {
        const char *s = json_object_get_string(v);
        size_t len = (size_t)json_object_get_string_len(v);
        if (len == 0 || len > 18) return -1;
        int64_t t = 0;
        for (size_t i = 0; i < len; i++) {
            if (!isdigit((unsigned char)s[i])) return -1;
            t = t * 10 + (s[i] - '0');
        }
        *out = t;
        return 0;
    }
    return -1;
}

static int decode_json(dd_playevent_decoder *d, const void *payload, size_t len,
                       struct dd_playevent *ev)
{
    if (d->obj) {
        json_object_put(d->obj);
        d->obj = NULL;
    }
    if (len == 0 || len > INT32_MAX) return DD_PLAYEVENT_UNDECODABLE;
    json_tokener_reset(d->tok);
    struct json_object *obj = json_tokener_parse_ex(d->tok, payload, (int)len);
    if (!obj) return DD_PLAYEVENT_UNDECODABLE; /* error, or incomplete input */
    d->obj = obj;
    if (json_tokener_get_error(d->tok) != json_tokener_success) return DD_PLAYEVENT_UNDECODABLE;
    const char *p = payload;
    for (size_t i = json_tokener_get_parse_end(d->tok); i < len; i++)
        if (!isspace((unsigned char)p[i])) return DD_PLAYEVENT_UNDECODABLE;
    if (!json_object_is_type(obj, json_type_object)) return DD_PLAYEVENT_UNDECODABLE;

    if (json_id(field(obj, "user_id", "userId"), d->user_num, &ev->user, &ev->user_len) != 0 ||
        json_id(field(obj, "item_id", "itemId"), d->item_num, &ev->item, &ev->item_len) != 0 ||
        json_time(field(obj, "played_at_ms", "playedAtMs"), &ev->played_at_ms) != 0)
        return DD_PLAYEVENT_UNDECODABLE;
    struct json_object *sc = field(obj, "scene", NULL);
    if (!sc || json_object_is_type(sc, json_type_null)) {
        ev->scene = "";
        ev->scene_len = 0;
    } else if (json_object_is_type(sc, json_type_string)) {
        ev->scene = json_object_get_string(sc);
        ev->scene_len = (size_t)json_object_get_string_len(sc);
    } else {
        return DD_PLAYEVENT_UNDECODABLE;
    }
    return DD_PLAYEVENT_OK;
}

static int decode_protobuf(dd_playevent_decoder *d, const void *payload, size_t len,
                           struct dd_playevent *ev)
{
    dd_arena_reset(d->arena);
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

int dd_playevent_decode(dd_playevent_decoder *d, const void *payload, size_t len,
                        const void *key, size_t key_len, int64_t msg_ts_ms,
                        struct dd_playevent *ev)
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
    if (e.item_len == 0) return DD_PLAYEVENT_EMPTY_ITEM;
    if (e.user_len > d->max_id_bytes || e.item_len > d->max_id_bytes ||
        e.scene_len > d->max_id_bytes || e.scene_len > SCENE_MAX || e.user_len > UINT16_MAX)
        return DD_PLAYEVENT_ID_TOO_LONG;
    *ev = e;
    return DD_PLAYEVENT_OK;
}
