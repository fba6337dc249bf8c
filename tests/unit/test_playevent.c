/* SPDX-License-Identifier: Apache-2.0
 *
 * test_playevent.c - decoding of Kafka play messages: both JSON spellings,
 * integer ids, proto3-JSON string timestamps, protobuf PlayEvent, the key
 * as the user id (and the payload winning over it), the message timestamp
 * when played_at_ms is missing or 0, and every kind of bad message refused
 * with its reason - never a crash, whatever the bytes. Forget markers'
 * payloads (no item). The encoder against the decoders (protobuf-c's for
 * protobuf), awkward ids included.
 */
#include "buf.h"
#include "dd.h"
#include "dedup.pb-c.h"
#include "playevent.h"
#include "testlib.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TS INT64_C(1700000000000)

static dd_playevent_decoder *json, *pb;

static int dec(dd_playevent_decoder *d, const char *payload, const char *key,
               struct dd_playevent *ev)
{
    return dd_playevent_decode(d, payload, strlen(payload), key, key ? strlen(key) : 0, TS, ev);
}

static int eq(const char *p, size_t n, const char *s)
{
    return n == strlen(s) && memcmp(p, s, n) == 0;
}

static void test_json_good(void)
{
    struct dd_playevent ev;
    CHECK_EQ_INT(dec(json, "{\"user_id\":\"u1\",\"item_id\":\"v9\",\"played_at_ms\":1700000001000,"
                           "\"scene\":\"feed\"}", "u1", &ev), DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "u1"));
    CHECK(eq(ev.item, ev.item_len, "v9"));
    CHECK(eq(ev.scene, ev.scene_len, "feed"));
    CHECK_EQ_INT(ev.played_at_ms, INT64_C(1700000001000));
    CHECK(!ev.key_mismatch);

    /* proto3 JSON names, int64 as a string, no scene, white space around. */
    CHECK_EQ_INT(dec(json, " {\"userId\":\"u2\",\"itemId\":\"v8\",\"playedAtMs\":\"1700000002000\"}\n",
                     NULL, &ev), DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "u2"));
    CHECK(eq(ev.item, ev.item_len, "v8"));
    CHECK_EQ_INT(ev.scene_len, 0);
    CHECK_EQ_INT(ev.played_at_ms, INT64_C(1700000002000));

    /* Integer ids as decimal text; unknown fields ignored; no time -> the
     * message timestamp; 0 likewise. */
    CHECK_EQ_INT(dec(json, "{\"user_id\":12345,\"item_id\":678,\"extra\":[1,{\"a\":2}]}", NULL, &ev),
                 DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "12345"));
    CHECK(eq(ev.item, ev.item_len, "678"));
    CHECK_EQ_INT(ev.played_at_ms, TS);
    CHECK_EQ_INT(dec(json, "{\"user_id\":\"u\",\"item_id\":\"i\",\"played_at_ms\":0}", NULL, &ev),
                 DD_PLAYEVENT_OK);
    CHECK_EQ_INT(ev.played_at_ms, TS);

    /* The key is the user when the payload has none (or null). */
    CHECK_EQ_INT(dec(json, "{\"item_id\":\"i\"}", "keyuser", &ev), DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "keyuser"));
    CHECK(!ev.key_mismatch);
    CHECK_EQ_INT(dec(json, "{\"user_id\":null,\"item_id\":\"i\"}", "keyuser", &ev), DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "keyuser"));
    /* Both present and different: the payload wins, flagged. */
    CHECK_EQ_INT(dec(json, "{\"user_id\":\"payload\",\"item_id\":\"i\"}", "key", &ev),
                 DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "payload"));
    CHECK(ev.key_mismatch);

    /* Escapes decode; an id of exactly the limit (16 here) is fine. */
    CHECK_EQ_INT(dec(json, "{\"user_id\":\"a\\u00e9\\\"b\",\"item_id\":\"0123456789abcdef\"}", NULL,
                     &ev), DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "a\xc3\xa9\"b"));
}

static void test_json_bad(void)
{
    struct dd_playevent ev;
    static const struct {
        const char *payload, *key;
        int want;
    } cases[] = {
        {"", "u", DD_PLAYEVENT_UNDECODABLE},
        {"not json", "u", DD_PLAYEVENT_UNDECODABLE},
        {"{\"user_id\":\"u\",\"item_id\":\"i\"", "u", DD_PLAYEVENT_UNDECODABLE}, /* truncated */
        {"{\"user_id\":\"u\",\"item_id\":\"i\"} x", "u", DD_PLAYEVENT_UNDECODABLE}, /* trailing */
        {"{\"user_id\":\"u\",\"item_id\":\"i\",}", "u", DD_PLAYEVENT_UNDECODABLE}, /* strict */
        {"[\"u\",\"i\"]", "u", DD_PLAYEVENT_UNDECODABLE},
        {"\"just a string\"", "u", DD_PLAYEVENT_UNDECODABLE},
        {"{\"user_id\":\"u\",\"item_id\":1.5}", "u", DD_PLAYEVENT_UNDECODABLE},
        {"{\"user_id\":true,\"item_id\":\"i\"}", "u", DD_PLAYEVENT_UNDECODABLE},
        {"{\"user_id\":\"u\",\"item_id\":\"i\",\"played_at_ms\":\"12ab\"}", "u",
         DD_PLAYEVENT_UNDECODABLE},
        {"{\"user_id\":\"u\",\"item_id\":\"i\",\"played_at_ms\":-5}", "u",
         DD_PLAYEVENT_UNDECODABLE},
        {"{\"user_id\":\"u\",\"item_id\":\"i\",\"played_at_ms\":1.5e12}", "u",
         DD_PLAYEVENT_UNDECODABLE},
        {"{\"user_id\":\"u\",\"item_id\":\"i\",\"scene\":7}", "u", DD_PLAYEVENT_UNDECODABLE},
        {"{\"item_id\":\"i\"}", NULL, DD_PLAYEVENT_EMPTY_USER},
        {"{\"user_id\":\"\",\"item_id\":\"i\"}", "", DD_PLAYEVENT_EMPTY_USER},
        {"{\"user_id\":\"u\"}", "u", DD_PLAYEVENT_EMPTY_ITEM},
        {"{\"user_id\":\"u\",\"item_id\":\"\"}", "u", DD_PLAYEVENT_EMPTY_ITEM},
        {"{\"user_id\":\"0123456789abcdefX\",\"item_id\":\"i\"}", NULL, DD_PLAYEVENT_ID_TOO_LONG},
        {"{\"user_id\":\"u\",\"item_id\":\"0123456789abcdefX\"}", "u", DD_PLAYEVENT_ID_TOO_LONG},
        {"{\"user_id\":\"u\",\"item_id\":\"i\",\"scene\":\"0123456789abcdefX\"}", "u",
         DD_PLAYEVENT_ID_TOO_LONG},
        {"{\"item_id\":\"i\"}", "0123456789abcdefX", DD_PLAYEVENT_ID_TOO_LONG}, /* key as user */
    };
    for (size_t i = 0; i < DD_ARRAY_LEN(cases); i++) {
        int st = dec(json, cases[i].payload, cases[i].key, &ev);
        CHECK_MSG(st == cases[i].want, "case %zu (%s): got %s want %s", i, cases[i].payload,
                  dd_playevent_status_name(st), dd_playevent_status_name(cases[i].want));
    }
    /* Deep nesting is refused, not a stack overflow. */
    char deep[4096];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "{\"user_id\":\"u\",\"item_id\":\"i\",\"x\":");
    for (int i = 0; i < 1000; i++) deep[n++] = '[';
    for (int i = 0; i < 1000; i++) deep[n++] = ']';
    deep[n++] = '}';
    CHECK_EQ_INT(dd_playevent_decode(json, deep, n, NULL, 0, TS, &ev), DD_PLAYEVENT_UNDECODABLE);
    /* A NUL inside the payload. */
    static const char nul[] = "{\"user_id\":\"u\",\0\"item_id\":\"i\"}";
    CHECK_EQ_INT(dd_playevent_decode(json, nul, sizeof nul - 1, NULL, 0, TS, &ev),
                 DD_PLAYEVENT_UNDECODABLE);
    CHECK_STR(dd_playevent_status_name(DD_PLAYEVENT_ID_TOO_LONG), "id_too_long");
    CHECK_STR(dd_playevent_status_name(99), "unknown");
}

static size_t pack(const char *user, const char *item, int64_t at, const char *scene,
                   uint8_t *out)
{
    Dedup__V1__PlayEvent m = DEDUP__V1__PLAY_EVENT__INIT;
    m.user_id = (char *)user;
    m.item_id = (char *)item;
    m.played_at_ms = at;
    m.scene = (char *)scene;
    return dedup__v1__play_event__pack(&m, out);
}

static void test_protobuf(void)
{
    uint8_t buf[512];
    struct dd_playevent ev;
    size_t n = pack("u7", "v7", TS + 5, "s", buf);
    CHECK_EQ_INT(dd_playevent_decode(pb, buf, n, "u7", 2, TS, &ev), DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "u7"));
    CHECK(eq(ev.item, ev.item_len, "v7"));
    CHECK(eq(ev.scene, ev.scene_len, "s"));
    CHECK_EQ_INT(ev.played_at_ms, TS + 5);

    n = pack("", "v7", 0, "", buf);
    CHECK_EQ_INT(dd_playevent_decode(pb, buf, n, "k", 1, TS, &ev), DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "k"));
    CHECK_EQ_INT(ev.played_at_ms, TS);
    CHECK_EQ_INT(dd_playevent_decode(pb, buf, n, NULL, 0, TS, &ev), DD_PLAYEVENT_EMPTY_USER);
    n = pack("u", "", 0, "", buf);
    CHECK_EQ_INT(dd_playevent_decode(pb, buf, n, NULL, 0, TS, &ev), DD_PLAYEVENT_EMPTY_ITEM);
    n = pack("u", "0123456789abcdefX", 0, "", buf);
    CHECK_EQ_INT(dd_playevent_decode(pb, buf, n, NULL, 0, TS, &ev), DD_PLAYEVENT_ID_TOO_LONG);
    n = pack("u", "i", -1, "", buf);
    CHECK_EQ_INT(dd_playevent_decode(pb, buf, n, NULL, 0, TS, &ev), DD_PLAYEVENT_UNDECODABLE);

    /* Not a PlayEvent: a truncated message, a bad wire type, JSON. */
    n = pack("user", "item", TS, "", buf);
    CHECK_EQ_INT(dd_playevent_decode(pb, buf, n - 2, NULL, 0, TS, &ev), DD_PLAYEVENT_UNDECODABLE);
    static const uint8_t badwire[] = {0x0f, 0x01, 0x02};
    CHECK_EQ_INT(dd_playevent_decode(pb, badwire, sizeof badwire, NULL, 0, TS, &ev),
                 DD_PLAYEVENT_UNDECODABLE);
    static const char js[] = "{\"user_id\":\"u\",\"item_id\":\"i\"}";
    CHECK_EQ_INT(dd_playevent_decode(pb, js, sizeof js - 1, NULL, 0, TS, &ev),
                 DD_PLAYEVENT_UNDECODABLE);

    /* Ids are proto strings: a NUL byte inside (protobuf-c would hand out
     * "victim") or bytes that are not UTF-8 make the event undecodable. */
    static const uint8_t nul_user[] = {0x0a, 0x08, 'v', 'i', 'c', 't', 'i', 'm', 0x00, 'x',
                                       0x12, 0x01, 'i'};
    CHECK_EQ_INT(dd_playevent_decode(pb, nul_user, sizeof nul_user, NULL, 0, TS, &ev),
                 DD_PLAYEVENT_UNDECODABLE);
    static const uint8_t bad_item[] = {0x0a, 0x01, 'u', 0x12, 0x02, 0xc3, 0x28};
    CHECK_EQ_INT(dd_playevent_decode(pb, bad_item, sizeof bad_item, NULL, 0, TS, &ev),
                 DD_PLAYEVENT_UNDECODABLE);
    /* A binary message key standing in for the user. */
    n = pack("", "v7", 0, "", buf);
    CHECK_EQ_INT(dd_playevent_decode(pb, buf, n, "k\xff", 2, TS, &ev), DD_PLAYEVENT_UNDECODABLE);
}

/* JSON's \u0000 escape puts a NUL byte into an id: undecodable too. */
static void test_json_nul_escape(void)
{
    struct dd_playevent ev;
    static const char js[] = "{\"user_id\":\"victim\\u0000x\",\"item_id\":\"i\"}";
    CHECK_EQ_INT(dd_playevent_decode(json, js, sizeof js - 1, NULL, 0, TS, &ev),
                 DD_PLAYEVENT_UNDECODABLE);
    static const char ok[] = "{\"user_id\":\"caf\\u00e9\",\"item_id\":\"i\"}";
    CHECK_EQ_INT(dd_playevent_decode(json, ok, sizeof ok - 1, NULL, 0, TS, &ev), DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "caf\xc3\xa9"));
}

/* A forget marker's payload: an event without an item; one with an item
 * is undecodable, an empty user (no key) is refused as for a play. */
static void test_forget(void)
{
    struct dd_playevent ev;
    static const char js[] = "{\"user_id\":\"u1\",\"scene\":\"feed\"}";
    CHECK_EQ_INT(dd_playevent_decode_forget(json, js, sizeof js - 1, "u1", 2, &ev),
                 DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "u1"));
    CHECK(eq(ev.scene, ev.scene_len, "feed"));
    CHECK_EQ_INT(ev.item_len, 0);
    /* The key as the user, the default scene. */
    CHECK_EQ_INT(dd_playevent_decode_forget(json, "{}", 2, "k9", 2, &ev), DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "k9"));
    CHECK_EQ_INT(ev.scene_len, 0);
    static const char item[] = "{\"user_id\":\"u1\",\"item_id\":\"i\"}";
    CHECK_EQ_INT(dd_playevent_decode_forget(json, item, sizeof item - 1, NULL, 0, &ev),
                 DD_PLAYEVENT_UNDECODABLE);
    CHECK_EQ_INT(dd_playevent_decode_forget(json, "{}", 2, NULL, 0, &ev),
                 DD_PLAYEVENT_EMPTY_USER);
    /* A play decoder still refuses the marker's payload as a play. */
    CHECK_EQ_INT(dec(json, js, "u1", &ev), DD_PLAYEVENT_EMPTY_ITEM);
    uint8_t buf[64];
    size_t n = pack("u2", "", 0, "s", buf);
    CHECK_EQ_INT(dd_playevent_decode_forget(pb, buf, n, NULL, 0, &ev), DD_PLAYEVENT_OK);
    CHECK(eq(ev.user, ev.user_len, "u2"));
    CHECK(eq(ev.scene, ev.scene_len, "s"));
}

/* What dd_playevent_encode writes decodes to what it was given, in both
 * formats; protobuf also with protobuf-c itself. Ids with quotes,
 * backslashes, control characters and UTF-8. */
static void test_encode(void)
{
    static const struct { const char *user, *item, *scene; int64_t at; } cases[] = {
        {"u1", "v1", "", TS},
        {"u\"q\\b", "it\x01\x1f\t", "sc\xc3\xa9ne", 1},
        {"12345", "x", "feed", 0},
        {"u", "", "s", 0}, /* a forget marker */
    };
    dd_playevent_decoder *dj, *dp;
    REQUIRE(dd_playevent_decoder_new(&dj, DD_PLAYEVENT_JSON, 64) == DD_OK);
    REQUIRE(dd_playevent_decoder_new(&dp, DD_PLAYEVENT_PROTOBUF, 64) == DD_OK);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int f = 0; f < 2; f++) {
            struct dd_buf b = {0};
            const char *u = cases[i].user, *it = cases[i].item, *sc = cases[i].scene;
            REQUIRE(dd_playevent_encode(&b, f ? DD_PLAYEVENT_PROTOBUF : DD_PLAYEVENT_JSON, u,
                                        strlen(u), it, strlen(it), cases[i].at, sc,
                                        strlen(sc)) == DD_OK);
            struct dd_playevent ev;
            int st = it[0] ? dd_playevent_decode(f ? dp : dj, b.data, b.len, NULL, 0, 77, &ev)
                           : dd_playevent_decode_forget(f ? dp : dj, b.data, b.len, NULL, 0, &ev);
            CHECK_MSG(st == DD_PLAYEVENT_OK, "case %zu format %d: %d", i, f, st);
            if (st == DD_PLAYEVENT_OK) {
                CHECK(eq(ev.user, ev.user_len, u));
                CHECK(eq(ev.item, ev.item_len, it));
                CHECK(eq(ev.scene, ev.scene_len, sc));
                if (it[0]) CHECK_EQ_INT(ev.played_at_ms, cases[i].at ? cases[i].at : 77);
            }
            if (f) {
                Dedup__V1__PlayEvent *m = dedup__v1__play_event__unpack(NULL, b.len, b.data);
                CHECK(m != NULL);
                if (m) {
                    CHECK_STR(m->user_id, u);
                    CHECK_STR(m->item_id, it);
                    CHECK_STR(m->scene, sc);
                    CHECK_EQ_INT(m->played_at_ms, cases[i].at);
                    dedup__v1__play_event__free_unpacked(m, NULL);
                }
            }
            dd_buf_free(&b);
        }
    }
    struct dd_buf b = {0};
    CHECK_EQ_INT(dd_playevent_encode(&b, DD_PLAYEVENT_JSON, "u", 1, "i", 1, -1, "", 0),
                 DD_ERR_INVALID);
    CHECK_EQ_INT(b.len, 0);
    dd_buf_free(&b);
    dd_playevent_decoder_free(dj);
    dd_playevent_decoder_free(dp);
}

/* Random bytes and random mutations of good messages: any status, no
 * crash (run under the sanitizers in CI). */
static void test_fuzz(void)
{
    uint64_t s = 0x1234567;
    uint8_t buf[256], good[256];
    struct dd_playevent ev;
    size_t gn = pack("someuser", "someitem", TS, "feed", good);
    static const char gj[] = "{\"user_id\":\"someuser\",\"item_id\":\"it\",\"played_at_ms\":17}";
    size_t ok = 0;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        int mode = (int)(s >> 60) & 3;
        size_t n;
        if (mode == 0) {
            n = (s >> 33) % sizeof buf;
            for (size_t k = 0; k < n; k++) buf[k] = (uint8_t)(dd_hash(&s, sizeof s) >> (k % 56));
        } else if (mode == 1) {
            n = gn;
            memcpy(buf, good, n);
            buf[(s >> 20) % n] ^= (uint8_t)(s >> 40);
        } else {
            n = sizeof gj - 1;
            memcpy(buf, gj, n);
            buf[(s >> 20) % n] = (uint8_t)(s >> 40);
        }
        dd_playevent_decoder *d = mode == 2 || mode == 3 ? json : pb;
        int st = dd_playevent_decode(d, buf, n, "k", 1, TS, &ev);
        CHECK(st >= 0 && st < DD_PLAYEVENT_NSTATUS);
        if (st == DD_PLAYEVENT_OK) {
            ok++;
            CHECK(ev.user_len > 0 && ev.user_len <= 16 && ev.item_len > 0 && ev.item_len <= 16);
        }
    }
    CHECK(ok > 0);
}

int main(void)
{
    CHECK_EQ_INT(dd_playevent_format_parse("json"), DD_PLAYEVENT_JSON);
    CHECK_EQ_INT(dd_playevent_format_parse("protobuf"), DD_PLAYEVENT_PROTOBUF);
    CHECK_EQ_INT(dd_playevent_format_parse("xml"), -1);
    dd_playevent_decoder *d;
    CHECK_EQ_INT(dd_playevent_decoder_new(&d, DD_PLAYEVENT_JSON, 0), DD_ERR_INVALID);
    CHECK(d == NULL);
    REQUIRE(dd_playevent_decoder_new(&json, DD_PLAYEVENT_JSON, 16) == DD_OK);
    REQUIRE(dd_playevent_decoder_new(&pb, DD_PLAYEVENT_PROTOBUF, 16) == DD_OK);
    test_json_good();
    test_json_bad();
    test_protobuf();
    test_json_nul_escape();
    test_forget();
    test_encode();
    test_fuzz();
    dd_playevent_decoder_free(json);
    dd_playevent_decoder_free(pb);
    dd_playevent_decoder_free(NULL);
    TEST_MAIN_END();
}
