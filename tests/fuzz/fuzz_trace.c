/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_trace.c - the trace store's record and key codecs (trace.h), which
 * read what the disk holds. Input: a byte choosing the mode, then either
 * bytes read as a stored value and as a key (mode even: decoding never
 * reads outside them, an accepted value has fields within their bounds),
 * or (mode odd) a record built from the bytes, encoded, decoded and
 * compared field by field, and its key built and parsed back.
 */
#include "fuzz.h"

#include "dd.h"
#include "trace.h"

static uint8_t out[DD_TRACE_REC_MAX];

static void check_rec(const struct dd_trace_rec *r)
{
    FUZZ_CHECK(r->kind >= 1 && r->kind <= DD_TRACE_NKINDS);
    FUZZ_CHECK(r->scene_len <= 255 && r->topic_len <= 255 && r->item_len <= 65535);
    /* read every byte: ASan reports a pointer outside the value */
    volatile uint64_t h = 0;
    if (r->scene_len) h ^= dd_hash(r->scene, r->scene_len);
    if (r->item_len) h ^= dd_hash(r->item, r->item_len);
    if (r->topic_len) h ^= dd_hash(r->topic, r->topic_len);
    (void)h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    if (!(mode & 1)) {
        /* copies, so ASan sees a read past either end */
        uint8_t *v = malloc(size ? size : 1);
        FUZZ_CHECK(v);
        memcpy(v, data, size);
        struct dd_trace_rec r;
        if (dd_trace_decode(v, size, &r) == DD_OK) check_rec(&r);
        const char *user;
        size_t ulen;
        int64_t at;
        uint32_t seq;
        if (dd_trace_key_parse(v, size, &user, &ulen, &at, &seq) == DD_OK) {
            FUZZ_CHECK(ulen > 0 && ulen <= 65535 && (const uint8_t *)user >= v &&
                       (const uint8_t *)user + ulen <= v + size);
            uint8_t k[2 + 65535 + 12];
            size_t kn = dd_trace_key(k, sizeof k, user, ulen, at, seq);
            FUZZ_CHECK(kn == size && memcmp(k, v, kn) == 0);
        }
        free(v);
        return 0;
    }
    struct fz f = {data, size};
    struct dd_trace_rec r = {0};
    r.kind = 1 + fz_u8(&f) % DD_TRACE_NKINDS;
    r.source = 1 + fz_u8(&f) % 4;
    r.at_ms = (int64_t)(fz_u64(&f) >> 1);
    r.recorded_ms = (int64_t)(fz_u64(&f) >> 1);
    r.partition = r.source == DD_TRACE_SRC_KAFKA ? (int32_t)(fz_u8(&f) % 64) : -1;
    r.offset = r.source == DD_TRACE_SRC_KAFKA ? (int64_t)(fz_u64(&f) >> 2) : -1;
    size_t sl = fz_u8(&f) % 16, tl = r.source == DD_TRACE_SRC_KAFKA ? fz_u8(&f) % 16 : 0;
    size_t il = r.kind == DD_TRACE_FORGET ? 0 : 1 + fz_u8(&f) % 32;
    char scene[16], topic[16], item[33], user[33];
    for (size_t i = 0; i < sl; i++) scene[i] = (char)fz_u8(&f);
    for (size_t i = 0; i < tl; i++) topic[i] = (char)fz_u8(&f);
    for (size_t i = 0; i < il; i++) item[i] = (char)fz_u8(&f);
    r.scene = scene;
    r.scene_len = sl;
    r.topic = topic;
    r.topic_len = tl;
    r.item = item;
    r.item_len = il;
    size_t n = dd_trace_encode(&r, out, sizeof out);
    if (n == 0) return 0; /* a field out of range: refused, nothing to compare */
    struct dd_trace_rec b;
    FUZZ_CHECK(dd_trace_decode(out, n, &b) == DD_OK);
    check_rec(&b);
    FUZZ_CHECK(b.kind == r.kind && b.source == r.source && b.at_ms == r.at_ms);
    FUZZ_CHECK(b.scene_len == sl && memcmp(b.scene, scene, sl) == 0);
    FUZZ_CHECK(b.item_len == il && memcmp(b.item, item, il) == 0);
    if (r.source == DD_TRACE_SRC_KAFKA)
        FUZZ_CHECK(b.topic_len == tl && memcmp(b.topic, topic, tl) == 0 &&
                   b.partition == r.partition && b.offset == r.offset);
    /* one flipped bit is caught (version, lengths or checksum) */
    size_t bit = (size_t)(fz_u64(&f) % (n * 8));
    out[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    FUZZ_CHECK(dd_trace_decode(out, n, &b) != DD_OK);
    /* the key of a user of the input */
    size_t ul = 1 + fz_u8(&f) % 32;
    for (size_t i = 0; i < ul; i++) user[i] = (char)fz_u8(&f);
    uint8_t k[2 + 32 + 12];
    uint32_t seq = (uint32_t)fz_u64(&f);
    size_t kn = dd_trace_key(k, sizeof k, user, ul, r.at_ms, seq);
    FUZZ_CHECK(kn > 0);
    const char *pu;
    size_t pl;
    int64_t pat;
    uint32_t pseq;
    FUZZ_CHECK(dd_trace_key_parse(k, kn, &pu, &pl, &pat, &pseq) == DD_OK);
    FUZZ_CHECK(pl == ul && memcmp(pu, user, ul) == 0 && pat == r.at_ms && pseq == seq);
    return 0;
}
