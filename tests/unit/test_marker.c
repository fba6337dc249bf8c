/* SPDX-License-Identifier: Apache-2.0
 *
 * test_marker.c - marker.h: the bytes MACed and the MAC on known-answer
 * vectors computed apart from dedupd (Python's hmac over the bytes
 * marker.h documents), verification of every kind of bad MAC, and the key
 * file's bounds and permissions.
 */
#include "testlib.h"

#include "dd.h"
#include "marker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Key: 31 x 'k' and a newline (a key file's trailing newline is key). */
static const char key1[] = "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\n";

struct vec {
    const char *user, *scene;
    int64_t at_ms;
    const char *message_hex, *mac;
};

/* hmac.new(key, b"dedupd forget v1" + pack(">I", len(u)) + u +
 * pack(">I", len(s)) + s + pack(">q", t), sha256).hexdigest() */
static const struct vec vecs[] = {
    {"u1", "", 1700000000000,
     "64656475706420666f72676574207631000000027531000000000000018bcfe56800",
     "bd8e5b5d34677c005710610bf962e62ab0cc93205101fc2af65a36392b1419a2"},
    {"user-\xc3\xa9", "feed", 0,
     "64656475706420666f7267657420763100000007757365722dc3a900000004666565640000000000000000",
     "a2627fca51d8b6a4a9ec6581b7d58d39c0dda8ac1950f21fcfa88873ae9ac89d"},
};

static void hex_of(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", p[i]);
    out[2 * n] = '\0';
}

static void test_vectors(void)
{
    dd_marker_key *k = NULL;
    char err[256];
    CHECK_EQ_INT(dd_marker_key_new(&k, key1, strlen(key1), err, sizeof err), DD_OK);
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) {
        const struct vec *v = &vecs[i];
        uint8_t msg[256];
        char hex[2 * sizeof msg + 1];
        size_t n = dd_marker_message(msg, sizeof msg, v->user, strlen(v->user), v->scene,
                                     strlen(v->scene), v->at_ms);
        CHECK_EQ_INT(n, strlen(v->message_hex) / 2);
        hex_of(msg, n, hex);
        CHECK_STR(hex, v->message_hex);
        /* Too small a buffer: the length, nothing written. */
        CHECK_EQ_INT(dd_marker_message(msg, 3, v->user, strlen(v->user), v->scene,
                                       strlen(v->scene), v->at_ms), n);

        char mac[DD_MARKER_MAC_HEX + 1];
        CHECK_EQ_INT(dd_marker_sign(k, v->user, strlen(v->user), v->scene, strlen(v->scene),
                                    v->at_ms, mac), DD_OK);
        CHECK_STR(mac, v->mac);
        CHECK_EQ_INT(dd_marker_verify(k, v->user, strlen(v->user), v->scene, strlen(v->scene),
                                      v->at_ms, v->mac, strlen(v->mac)), DD_MARKER_VALID);
    }
    dd_marker_key_free(k);
}

/* The third vector: a key of bytes 0..31, the largest time. */
static void test_binary_key(void)
{
    uint8_t raw[32];
    for (int i = 0; i < 32; i++) raw[i] = (uint8_t)i;
    dd_marker_key *k = NULL;
    CHECK_EQ_INT(dd_marker_key_new(&k, raw, sizeof raw, NULL, 0), DD_OK);
    char mac[DD_MARKER_MAC_HEX + 1];
    CHECK_EQ_INT(dd_marker_sign(k, "ab", 2, "c", 1, INT64_MAX, mac), DD_OK);
    CHECK_STR(mac, "4b0baad23fd26c237463b054037895abaded31eed653ad4901b6c98dc97d788b");
    dd_marker_key_free(k);
}

static void test_verify(void)
{
    dd_marker_key *k = NULL, *other = NULL;
    CHECK_EQ_INT(dd_marker_key_new(&k, key1, strlen(key1), NULL, 0), DD_OK);
    CHECK_EQ_INT(dd_marker_key_new(&other, "0123456789abcdef0123456789abcdef", 32, NULL, 0),
                 DD_OK);
    const char *good = vecs[0].mac;
    char upper[DD_MARKER_MAC_HEX + 1], flipped[DD_MARKER_MAC_HEX + 1];
    for (int i = 0; i <= DD_MARKER_MAC_HEX; i++)
        upper[i] = (char)(good[i] >= 'a' && good[i] <= 'f' ? good[i] - 32 : good[i]);
    memcpy(flipped, good, sizeof flipped);
    flipped[DD_MARKER_MAC_HEX - 1] = flipped[DD_MARKER_MAC_HEX - 1] == '0' ? '1' : '0';
    int64_t t = vecs[0].at_ms;

    CHECK_EQ_INT(dd_marker_verify(k, "u1", 2, "", 0, t, upper, 64), DD_MARKER_VALID);
    CHECK_EQ_INT(dd_marker_verify(NULL, "u1", 2, "", 0, t, good, 64), DD_MARKER_NO_KEY);
    CHECK_EQ_INT(dd_marker_verify(k, "u1", 2, "", 0, t, NULL, 0), DD_MARKER_MISSING);
    CHECK_EQ_INT(dd_marker_verify(k, "u1", 2, "", 0, t, good, 63), DD_MARKER_MALFORMED);
    CHECK_EQ_INT(dd_marker_verify(k, "u1", 2, "", 0, t, good, 0), DD_MARKER_MALFORMED);
    char longer[DD_MARKER_MAC_HEX + 2];
    snprintf(longer, sizeof longer, "%s0", good);
    CHECK_EQ_INT(dd_marker_verify(k, "u1", 2, "", 0, t, longer, 65), DD_MARKER_MALFORMED);
    char notHex[DD_MARKER_MAC_HEX + 1];
    memcpy(notHex, good, sizeof notHex);
    notHex[10] = 'g';
    CHECK_EQ_INT(dd_marker_verify(k, "u1", 2, "", 0, t, notHex, 64), DD_MARKER_MALFORMED);
    CHECK_EQ_INT(dd_marker_verify(k, "u1", 2, "", 0, t, flipped, 64), DD_MARKER_MISMATCH);
    CHECK_EQ_INT(dd_marker_verify(other, "u1", 2, "", 0, t, good, 64), DD_MARKER_MISMATCH);
    /* Every field is covered: user, scene, time. */
    CHECK_EQ_INT(dd_marker_verify(k, "u2", 2, "", 0, t, good, 64), DD_MARKER_MISMATCH);
    CHECK_EQ_INT(dd_marker_verify(k, "u1", 2, "x", 1, t, good, 64), DD_MARKER_MISMATCH);
    CHECK_EQ_INT(dd_marker_verify(k, "u1", 2, "", 0, t + 1, good, 64), DD_MARKER_MISMATCH);
    /* Lengths are prefixed: moving a byte from the user to the scene
     * changes the message ("u1" + "" vs "u" + "1"). */
    CHECK_EQ_INT(dd_marker_verify(k, "u", 1, "1", 1, t, good, 64), DD_MARKER_MISMATCH);
    CHECK_STR(dd_marker_strerror(DD_MARKER_MISMATCH), "wrong MAC");
    dd_marker_key_free(k);
    dd_marker_key_free(other);
    dd_marker_key_free(NULL);
}

static char *write_key(const char *dir, const char *name, const void *data, size_t n, mode_t mode)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return path;
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
    CHECK(chmod(path, mode) == 0);
    return path;
}

/* hmac.new(key, b"dedupd forget all" + pack(">I", len(u)) + u +
 * pack(">q", t), sha256).hexdigest(): the all-scenes marker. */
static const struct vec all_vecs[] = {
    {"u1", NULL, 1700000000000,
     "64656475706420666f7267657420616c6c0000000275310000018bcfe56800",
     "d53abb220201c9bf8087f1d8ab8ece6dd6dfb93d1abd18c3addfc8c512b56e76"},
    {"user-\xc3\xa9", NULL, 0,
     "64656475706420666f7267657420616c6c00000007757365722dc3a90000000000000000",
     "8c78888de652a27ab2d504b2c95f2dae56d3bbeb9f87098cff82a0a07c43fc84"},
};

static void test_all_scenes(void)
{
    dd_marker_key *k = NULL;
    char err[256];
    CHECK_EQ_INT(dd_marker_key_new(&k, key1, strlen(key1), err, sizeof err), DD_OK);
    for (size_t i = 0; i < sizeof all_vecs / sizeof all_vecs[0]; i++) {
        const struct vec *v = &all_vecs[i];
        uint8_t msg[256];
        char hex[2 * sizeof msg + 1];
        size_t n = dd_marker_message_all(msg, sizeof msg, v->user, strlen(v->user), v->at_ms);
        CHECK_EQ_INT(n, strlen(v->message_hex) / 2);
        hex_of(msg, n, hex);
        CHECK_STR(hex, v->message_hex);
        CHECK_EQ_INT(dd_marker_message_all(msg, 3, v->user, strlen(v->user), v->at_ms), n);
        char mac[DD_MARKER_MAC_HEX + 1];
        CHECK_EQ_INT(dd_marker_sign_all(k, v->user, strlen(v->user), v->at_ms, mac), DD_OK);
        CHECK_STR(mac, v->mac);
        CHECK_EQ_INT(dd_marker_verify_all(k, v->user, strlen(v->user), v->at_ms, v->mac, 64),
                     DD_MARKER_VALID);
        /* Neither kind's MAC is valid for the other: a one-scene marker
         * cannot be turned into an all-scenes one, nor back. */
        CHECK_EQ_INT(dd_marker_verify(k, v->user, strlen(v->user), "", 0, v->at_ms, v->mac, 64),
                     DD_MARKER_MISMATCH);
        CHECK_EQ_INT(dd_marker_sign(k, v->user, strlen(v->user), "", 0, v->at_ms, mac), DD_OK);
        CHECK_EQ_INT(dd_marker_verify_all(k, v->user, strlen(v->user), v->at_ms, mac, 64),
                     DD_MARKER_MISMATCH);
    }
    /* The one-scene vectors keep their meaning: unchanged bytes, same MAC. */
    CHECK_EQ_INT(dd_marker_verify(k, "u1", 2, "", 0, vecs[0].at_ms, vecs[0].mac, 64),
                 DD_MARKER_VALID);
    const char *good = all_vecs[0].mac;
    int64_t t = all_vecs[0].at_ms;
    CHECK_EQ_INT(dd_marker_verify_all(NULL, "u1", 2, t, good, 64), DD_MARKER_NO_KEY);
    CHECK_EQ_INT(dd_marker_verify_all(k, "u1", 2, t, NULL, 0), DD_MARKER_MISSING);
    CHECK_EQ_INT(dd_marker_verify_all(k, "u1", 2, t, good, 63), DD_MARKER_MALFORMED);
    CHECK_EQ_INT(dd_marker_verify_all(k, "u2", 2, t, good, 64), DD_MARKER_MISMATCH);
    CHECK_EQ_INT(dd_marker_verify_all(k, "u1", 2, t + 1, good, 64), DD_MARKER_MISMATCH);
    dd_marker_key_free(k);
}

static void test_key_file(void)
{
    char dir[] = "/tmp/dd-test-marker-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char err[512];
    dd_marker_key *k = NULL;
    bool world = true;

    const char *p = write_key(dir, "ok", key1, strlen(key1), 0600);
    CHECK_EQ_INT(dd_marker_key_load(&k, p, &world, err, sizeof err), DD_OK);
    CHECK(!world);
    /* The file's bytes are the key, newline included: vector 1 again. */
    char mac[DD_MARKER_MAC_HEX + 1];
    CHECK_EQ_INT(dd_marker_sign(k, "u1", 2, "", 0, vecs[0].at_ms, mac), DD_OK);
    CHECK_STR(mac, vecs[0].mac);
    dd_marker_key_free(k);

    p = write_key(dir, "world", key1, strlen(key1), 0644);
    CHECK_EQ_INT(dd_marker_key_load(&k, p, &world, err, sizeof err), DD_OK);
    CHECK(world);
    dd_marker_key_free(k);

    p = write_key(dir, "short", key1, DD_MARKER_KEY_MIN - 1, 0600);
    CHECK_EQ_INT(dd_marker_key_load(&k, p, NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK(k == NULL);
    CHECK_MSG(strstr(err, "31 bytes") != NULL, "%s", err);

    char *big = calloc(1, DD_MARKER_KEY_MAX + 1);
    CHECK(big != NULL);
    if (big) {
        p = write_key(dir, "exact", big, DD_MARKER_KEY_MAX, 0600);
        CHECK_EQ_INT(dd_marker_key_load(&k, p, NULL, err, sizeof err), DD_OK);
        dd_marker_key_free(k);
        p = write_key(dir, "long", big, DD_MARKER_KEY_MAX + 1, 0600);
        CHECK_EQ_INT(dd_marker_key_load(&k, p, NULL, err, sizeof err), DD_ERR_INVALID);
        CHECK_MSG(strstr(err, "more than") != NULL, "%s", err);
        free(big);
    }

    char missing[600];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    CHECK_EQ_INT(dd_marker_key_load(&k, missing, NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK_EQ_INT(dd_marker_key_load(&k, dir, NULL, err, sizeof err), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "regular") != NULL, "%s", err);
    CHECK_EQ_INT(dd_marker_key_new(&k, key1, DD_MARKER_KEY_MIN - 1, err, sizeof err),
                 DD_ERR_INVALID);

    static const char *const names[] = {"ok", "world", "short", "exact", "long"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char q[600];
        snprintf(q, sizeof q, "%s/%s", dir, names[i]);
        unlink(q);
    }
    rmdir(dir);
}

int main(void)
{
    test_vectors();
    test_binary_key();
    test_verify();
    test_key_file();
    test_all_scenes();
    TEST_MAIN_END();
}
