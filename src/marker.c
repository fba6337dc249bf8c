/* SPDX-License-Identifier: Apache-2.0
 *
 * marker.c - HMAC-SHA256 of forget markers with OpenSSL's EVP_MAC; see
 * marker.h for the bytes MACed and the header.
 */
#include "marker.h"

#include "be.h"
#include "dd.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LABEL "dedupd forget v1"
#define LABEL_LEN 16
#define LABEL_ALL "dedupd forget all"
#define LABEL_ALL_LEN 17

struct dd_marker_key {
    EVP_MAC *mac; /* HMAC, fetched once; shared by every thread's context */
    size_t len;
    uint8_t key[]; /* DD_MARKER_KEY_MIN..DD_MARKER_KEY_MAX bytes */
};

int dd_marker_key_new(dd_marker_key **out, const void *key, size_t len, char *err, size_t errlen)
{
    *out = NULL;
    if (len < DD_MARKER_KEY_MIN || len > DD_MARKER_KEY_MAX)
        return dd_fail(DD_ERR_INVALID, err, errlen, "the key is %zu bytes; %d to %d are needed",
                       len, DD_MARKER_KEY_MIN, DD_MARKER_KEY_MAX);
    dd_marker_key *k = malloc(sizeof *k + len);
    if (!k) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    k->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!k->mac) {
        free(k);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "OpenSSL has no HMAC");
    }
    k->len = len;
    memcpy(k->key, key, len);
    *out = k;
    return DD_OK;
}

int dd_marker_key_load(dd_marker_key **out, const char *path, bool *world_readable, char *err,
                       size_t errlen)
{
    *out = NULL;
    if (world_readable) *world_readable = false;
    /* Kubernetes mounts a Secret's files as symlinks: follow them. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dd_fail(DD_ERR_INVALID, err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    uint8_t buf[DD_MARKER_KEY_MAX + 1];
    size_t n = 0;
    int rc = DD_OK;
    if (fstat(fd, &st) != 0) {
        rc = dd_fail(DD_ERR_INVALID, err, errlen, "%s: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = dd_fail(DD_ERR_INVALID, err, errlen, "%s: not a regular file", path);
        goto done;
    }
    /* Read one byte past the bound, so a longer file is refused rather
     * than cut. */
    while (n < sizeof buf) {
        ssize_t r = read(fd, buf + n, sizeof buf - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = dd_fail(DD_ERR_INVALID, err, errlen, "%s: %s", path, strerror(errno));
            goto done;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    if (n > DD_MARKER_KEY_MAX) {
        rc =
            dd_fail(DD_ERR_INVALID, err, errlen, "%s: more than %d bytes", path, DD_MARKER_KEY_MAX);
        goto done;
    }
    if (n < DD_MARKER_KEY_MIN) {
        rc = dd_fail(DD_ERR_INVALID, err, errlen,
                     "%s: %zu bytes; at least %d are needed (e.g. "
                     "openssl rand -hex 32)",
                     path, n, DD_MARKER_KEY_MIN);
        goto done;
    }
    rc = dd_marker_key_new(out, buf, n, err, errlen);
    if (rc == DD_OK && world_readable) *world_readable = (st.st_mode & S_IROTH) != 0;
done:
    OPENSSL_cleanse(buf, sizeof buf);
    close(fd);
    return rc;
}

void dd_marker_key_free(dd_marker_key *k)
{
    if (!k) return;
    EVP_MAC_free(k->mac);
    OPENSSL_cleanse(k->key, k->len);
    free(k);
}

size_t dd_marker_message(uint8_t *out, size_t cap, const char *user, size_t user_len,
                         const char *scene, size_t scene_len, int64_t at_ms)
{
    size_t n = LABEL_LEN + 4 + user_len + 4 + scene_len + 8;
    if (n > cap) return n;
    uint8_t *p = out;
    memcpy(p, LABEL, LABEL_LEN);
    p += LABEL_LEN;
    dd_be32_store(p, (uint32_t)user_len);
    p += 4;
    if (user_len) memcpy(p, user, user_len);
    p += user_len;
    dd_be32_store(p, (uint32_t)scene_len);
    p += 4;
    if (scene_len) memcpy(p, scene, scene_len);
    p += scene_len;
    dd_be64_store(p, (uint64_t)at_ms);
    return n;
}

size_t dd_marker_message_all(uint8_t *out, size_t cap, const char *user, size_t user_len,
                             int64_t at_ms)
{
    size_t n = LABEL_ALL_LEN + 4 + user_len + 8;
    if (n > cap) return n;
    uint8_t *p = out;
    memcpy(p, LABEL_ALL, LABEL_ALL_LEN);
    p += LABEL_ALL_LEN;
    dd_be32_store(p, (uint32_t)user_len);
    p += 4;
    if (user_len) memcpy(p, user, user_len);
    p += user_len;
    dd_be64_store(p, (uint64_t)at_ms);
    return n;
}

/* The raw MAC into MAC. Fed in pieces (the same bytes as
 * dd_marker_message), so a 64 KiB user id needs no copy. */
static int compute(const dd_marker_key *k, bool all, const char *user, size_t user_len,
                   const char *scene, size_t scene_len, int64_t at_ms,
                   uint8_t mac[DD_MARKER_MAC_BYTES])
{
    uint8_t ulen[4], slen[4], at[8];
    dd_be32_store(ulen, (uint32_t)user_len);
    dd_be32_store(slen, (uint32_t)scene_len);
    dd_be64_store(at, (uint64_t)at_ms);
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(k->mac);
    if (!ctx) return DD_ERR_NOMEM;
    size_t outl = 0;
    int ok = EVP_MAC_init(ctx, k->key, k->len, params) &&
             (all ? EVP_MAC_update(ctx, (const uint8_t *)LABEL_ALL, LABEL_ALL_LEN)
                  : EVP_MAC_update(ctx, (const uint8_t *)LABEL, LABEL_LEN)) &&
             EVP_MAC_update(ctx, ulen, 4) &&
             (user_len == 0 || EVP_MAC_update(ctx, (const uint8_t *)user, user_len)) &&
             (all || EVP_MAC_update(ctx, slen, 4)) &&
             (all || scene_len == 0 || EVP_MAC_update(ctx, (const uint8_t *)scene, scene_len)) &&
             EVP_MAC_update(ctx, at, 8) && EVP_MAC_final(ctx, mac, &outl, DD_MARKER_MAC_BYTES) &&
             outl == DD_MARKER_MAC_BYTES;
    EVP_MAC_CTX_free(ctx);
    return ok ? DD_OK : DD_ERR_NOMEM;
}

static int sign(const dd_marker_key *k, bool all, const char *user, size_t user_len,
                const char *scene, size_t scene_len, int64_t at_ms, char hex[DD_MARKER_MAC_HEX + 1])
{
    static const char digits[] = "0123456789abcdef";
    uint8_t mac[DD_MARKER_MAC_BYTES];
    hex[0] = '\0';
    int rc = compute(k, all, user, user_len, scene, scene_len, at_ms, mac);
    if (rc != DD_OK) return rc;
    for (int i = 0; i < DD_MARKER_MAC_BYTES; i++) {
        hex[2 * i] = digits[mac[i] >> 4];
        hex[2 * i + 1] = digits[mac[i] & 15];
    }
    hex[DD_MARKER_MAC_HEX] = '\0';
    return DD_OK;
}

int dd_marker_sign(const dd_marker_key *k, const char *user, size_t user_len, const char *scene,
                   size_t scene_len, int64_t at_ms, char hex[DD_MARKER_MAC_HEX + 1])
{
    return sign(k, false, user, user_len, scene, scene_len, at_ms, hex);
}

int dd_marker_sign_all(const dd_marker_key *k, const char *user, size_t user_len, int64_t at_ms,
                       char hex[DD_MARKER_MAC_HEX + 1])
{
    return sign(k, true, user, user_len, "", 0, at_ms, hex);
}

static int unhex(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static enum dd_marker_check verify(const dd_marker_key *k, bool all, const char *user,
                                   size_t user_len, const char *scene, size_t scene_len,
                                   int64_t at_ms, const void *mac, size_t mac_len)
{
    if (!k) return DD_MARKER_NO_KEY;
    if (!mac) return DD_MARKER_MISSING;
    if (mac_len != DD_MARKER_MAC_HEX) return DD_MARKER_MALFORMED;
    const unsigned char *h = mac;
    uint8_t got[DD_MARKER_MAC_BYTES], want[DD_MARKER_MAC_BYTES];
    for (int i = 0; i < DD_MARKER_MAC_BYTES; i++) {
        int hi = unhex(h[2 * i]), lo = unhex(h[2 * i + 1]);
        if (hi < 0 || lo < 0) return DD_MARKER_MALFORMED;
        got[i] = (uint8_t)(hi << 4 | lo);
    }
    if (compute(k, all, user, user_len, scene, scene_len, at_ms, want) != DD_OK)
        return DD_MARKER_ERROR;
    return CRYPTO_memcmp(got, want, sizeof want) == 0 ? DD_MARKER_VALID : DD_MARKER_MISMATCH;
}

enum dd_marker_check dd_marker_verify(const dd_marker_key *k, const char *user, size_t user_len,
                                      const char *scene, size_t scene_len, int64_t at_ms,
                                      const void *mac, size_t mac_len)
{
    return verify(k, false, user, user_len, scene, scene_len, at_ms, mac, mac_len);
}

enum dd_marker_check dd_marker_verify_all(const dd_marker_key *k, const char *user, size_t user_len,
                                          int64_t at_ms, const void *mac, size_t mac_len)
{
    return verify(k, true, user, user_len, "", 0, at_ms, mac, mac_len);
}

const char *dd_marker_strerror(enum dd_marker_check c)
{
    switch (c) {
    case DD_MARKER_VALID: return "valid";
    case DD_MARKER_NO_KEY: return "no key";
    case DD_MARKER_MISSING: return "no MAC";
    case DD_MARKER_MALFORMED: return "malformed MAC";
    case DD_MARKER_MISMATCH: return "wrong MAC";
    case DD_MARKER_ERROR: return "MAC error";
    }
    return "unknown";
}
