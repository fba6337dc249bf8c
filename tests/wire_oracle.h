/* SPDX-License-Identifier: Apache-2.0
 *
 * wire_oracle.h - wire.h checked against protobuf-c, shared by
 * tests/unit/test_wire.c (chosen inputs) and tests/fuzz/fuzz_wire.c (fuzz
 * inputs): the in-place FilterRequest decoder must accept and reject what
 * protobuf-c's unpack does and read the same fields and ids, and the hand
 * encoded FilterResponse must be protobuf_c_message_pack's bytes. Header
 * only (static functions); no testlib.h, so a fuzz target can use it. An
 * allocation failure aborts: both callers treat it as a broken test.
 */
#ifndef DD_TEST_WIRE_ORACLE_H
#define DD_TEST_WIRE_ORACLE_H

#include "arena.h"
#include "dd.h"
#include "filter.h"
#include "wire.h"

#include "dedup.pb-c.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void *wo_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

/* 1 if P[0..LEN) is valid UTF-8 without a NUL, by decoding each code
 * point (the oracle for wire.c's range checks). */
static inline int ref_text_ok(const uint8_t *p, size_t len)
{
    static const uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
    for (size_t i = 0; i < len;) {
        uint32_t c = p[i];
        size_t more = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2
                    : (c & 0xf8) == 0xf0 ? 3 : 9;
        if (c == 0 || more == 9 || more > len - i - 1) return 0;
        if (more) c &= 0x3fu >> more;
        for (size_t k = 1; k <= more; k++) {
            if ((p[i + k] & 0xc0) != 0x80) return 0;
            c = c << 6 | (p[i + k] & 0x3f);
        }
        if (c < min_cp[more] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
        i += 1 + more;
    }
    return 1;
}

/* A varint of any length, its low 64 bits. */
static inline uint64_t ref_varint64(const uint8_t **pp)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        uint8_t b = *p++;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
    }
    *pp = p;
    return v;
}

/* protobuf-c reads a varint of at most 5 bytes as 32 bits. */
static inline uint32_t ref_varint32(const uint8_t **pp)
{
    return (uint32_t)ref_varint64(pp);
}

/* A key's varint as protobuf-c reads it: the field number is bits 3-34
 * (a tag of 5 bytes can set bit 31 of the number), not the low 32 bits
 * of the whole varint. */
static inline uint32_t ref_tag(const uint8_t **pp, unsigned *wire_type)
{
    uint64_t v = ref_varint64(pp);
    *wire_type = (unsigned)(v & 7);
    return (uint32_t)(v >> 3);
}

/* For bytes protobuf-c unpacks: 1 if the strings dedupd reads (the last
 * user_id and scene; every candidate while at most MAX_IDS; the first
 * DD_FILTER_ALSO_MAX also_scenes) are valid UTF-8 without a NUL, which
 * protobuf-c does not ask. */
static inline int ref_strings_ok(const uint8_t *buf, size_t len, size_t max_ids)
{
    const uint8_t *p = buf, *end = buf + len, *user = NULL, *scene = NULL;
    size_t user_len = 0, scene_len = 0, n = 0, n_also = 0;
    int ids_ok = 1, also_ok = 1;
    while (p < end) {
        unsigned wt;
        uint32_t field = ref_tag(&p, &wt);
        switch (wt) {
        case 0: while (*p++ & 0x80) {} break;
        case 1: p += 8; break;
        case 5: p += 4; break;
        default: {
            uint32_t l = ref_varint32(&p);
            if (field == 1) user = p, user_len = l;
            else if (field == 3) scene = p, scene_len = l;
            else if (field == 2 && !ref_text_ok(p, l)) ids_ok = 0;
            if (field == 2) n++;
            if (field == 9 && n_also++ < DD_FILTER_ALSO_MAX && !ref_text_ok(p, l)) also_ok = 0;
            p += l;
        }
        }
    }
    return (!user || ref_text_ok(user, user_len)) && (!scene || ref_text_ok(scene, scene_len)) &&
           (ids_ok || n > max_ids) && also_ok;
}

/* Decode BUF both ways, the in-place decoder with MAX_IDS (its memory from
 * ARENA, reset first); 1 if they agree: both reject, or both accept with
 * the same content (over MAX_IDS, the same count and no ids), where
 * dedupd also rejects, with a reason, what protobuf-c accepts with a
 * string that is not UTF-8 or holds a NUL. VERBOSE: say how they differ
 * on stderr. */
static inline int wo_request_agrees(dd_arena *arena, const uint8_t *buf, size_t len,
                                    size_t max_ids, int verbose)
{
    dd_arena_reset(arena);
    Dedup__V1__FilterRequest *pb = dedup__v1__filter_request__unpack(NULL, len, buf);
    struct dd_filter_query q;
    char why[128] = "";
    int rc = dd_wire_filter_request_decode(buf, len, arena, max_ids, &q, why, sizeof why);
    int ok = 1;
    if (!pb) {
        ok = rc == DD_ERR_INVALID && why[0];
        if (!ok && verbose) fprintf(stderr, "protobuf-c rejects, wire gives %d\n", rc);
        return ok;
    }
    if (!ref_strings_ok(buf, len, max_ids)) {
        ok = rc == DD_ERR_INVALID && why[0];
        if (!ok && verbose) fprintf(stderr, "bad string accepted: wire gives %d\n", rc);
        dedup__v1__filter_request__free_unpacked(pb, NULL);
        return ok;
    }
    if (pb->n_candidate_ids && pb->n_candidate_hashes) {
        /* Both candidate lists: dedupd refuses, naming both. */
        ok = rc == DD_ERR_INVALID && strstr(why, "candidate_ids and candidate_hashes");
        if (!ok && verbose) fprintf(stderr, "both lists accepted: wire gives %d\n", rc);
        dedup__v1__filter_request__free_unpacked(pb, NULL);
        return ok;
    }
    if (rc != DD_OK) {
        if (verbose) fprintf(stderr, "protobuf-c accepts, wire gives %d (%s)\n", rc, why);
        dedup__v1__filter_request__free_unpacked(pb, NULL);
        return 0;
    }
    if (pb->n_candidate_hashes) {
        /* Compact candidates: counted and read in order, answered by index. */
        size_t nh = pb->n_candidate_hashes;
        ok = q.by_hash && q.n == nh && q.ids == NULL &&
             q.mode == DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES &&
             (nh > max_ids ? q.hashes == NULL
                           : q.hashes && memcmp(q.hashes, pb->candidate_hashes, nh * 8) == 0);
        if (q.user_len != strlen(pb->user_id) ||
            memcmp(q.user_id, pb->user_id, q.user_len) != 0 ||
            q.scene_len != strlen(pb->scene) || memcmp(q.scene, pb->scene, q.scene_len) != 0 ||
            q.lookback_days != pb->lookback_days || !q.explain != !pb->explain)
            ok = 0;
        if (!ok && verbose) fprintf(stderr, "decoded hashes differ\n");
        dedup__v1__filter_request__free_unpacked(pb, NULL);
        return ok;
    }
    if (q.by_hash || q.hashes) ok = 0;
    if (q.user_len != strlen(pb->user_id) || memcmp(q.user_id, pb->user_id, q.user_len) != 0)
        ok = 0;
    if (q.scene_len != strlen(pb->scene) || memcmp(q.scene, pb->scene, q.scene_len) != 0) ok = 0;
    if (q.lookback_days != pb->lookback_days || q.mode != (int32_t)pb->mode ||
        !q.explain != !pb->explain || q.n != pb->n_candidate_ids ||
        q.min_kept != pb->min_kept || q.n_also != pb->n_also_scenes)
        ok = 0;
    for (size_t k = 0; ok && k < q.n_also && k < DD_FILTER_ALSO_MAX; k++)
        if (q.also[k].len != strlen(pb->also_scenes[k]) ||
            memcmp(q.also[k].p, pb->also_scenes[k], q.also[k].len) != 0)
            ok = 0;
    if (ok && q.n > max_ids) ok = q.ids == NULL;
    for (size_t i = 0; ok && q.n <= max_ids && i < q.n; i++) {
        const char *id = pb->candidate_ids[i];
        if (q.ids[i].len != strlen(id) || memcmp(q.ids[i].p, id, q.ids[i].len) != 0) ok = 0;
    }
    if (!ok && verbose) fprintf(stderr, "decoded contents differ\n");
    dedup__v1__filter_request__free_unpacked(pb, NULL);
    return ok;
}

/* The response dd_filter_run would build for Q and R (IDSTR: Q's ids as C
 * strings), in the caller's arrays of q->n entries. */
static inline void wo_build_response(const struct dd_filter_query *q,
                                     const struct dd_filter_result *r, char **idstr,
                                     Dedup__V1__FilterResponse *resp, Dedup__V1__Removed *rm,
                                     Dedup__V1__Removed **rmp, uint32_t *idx, char **kept)
{
    dedup__v1__filter_response__init(resp);
    if (q->mode == DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS) resp->kept_ids = kept;
    else resp->kept_indexes = idx;
    if (q->explain) resp->removed = rmp;
    for (size_t i = 0; i < q->n; i++) {
        if (r->reason[i] == 0) {
            if (resp->kept_ids) resp->kept_ids[resp->n_kept_ids++] = idstr[i];
            else resp->kept_indexes[resp->n_kept_indexes++] = (uint32_t)i;
        } else if (q->explain) {
            Dedup__V1__Removed *x = &rm[resp->n_removed];
            dedup__v1__removed__init(x);
            x->index = (uint32_t)i;
            x->reason = (Dedup__V1__Reason)r->reason[i];
            if (r->scene && x->reason != DEDUP__V1__REASON__REASON_DUPLICATE) {
                /* as dd_filter_run names it: NUL-terminated copies */
                const struct dd_filter_id *sc =
                    r->scene[i] ? &q->also[r->scene[i] - 1]
                                : &(struct dd_filter_id){q->scene, q->scene_len};
                char *c = wo_malloc(sc->len + 1);
                memcpy(c, sc->p, sc->len);
                c[sc->len] = '\0';
                x->scene = c;
            }
            resp->removed[resp->n_removed++] = x;
        }
    }
    resp->degraded = r->degraded;
    resp->removed_played = r->played;
    resp->removed_delivered = r->delivered;
    resp->removed_duplicate = r->duplicate;
    resp->lookback_used_days = r->lookback_used;
}

/* R's counters from REASON[0..n) (R->reason must already point there). */
static inline void wo_tally(struct dd_filter_result *r, const uint8_t *reason, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (reason[i] == 1) r->played++;
        else if (reason[i] == 2) r->delivered++;
        else if (reason[i] == 3) r->duplicate++;
        else r->kept++;
    }
}

/* 1 if the hand-encoded response for Q and R (IDSTR: Q's ids as C
 * strings) is protobuf-c's, byte for byte, with size and write agreeing,
 * written into a buffer of exactly the bound (ASan catches a write past
 * it). */
static inline int wo_response_matches(const struct dd_filter_query *q,
                                      const struct dd_filter_result *r, char **idstr)
{
    size_t n = q->n ? q->n : 1;
    Dedup__V1__Removed *rm = wo_malloc(n * sizeof *rm);
    Dedup__V1__Removed **rmp = wo_malloc(n * sizeof *rmp);
    uint32_t *idx = wo_malloc(n * sizeof *idx);
    char **kept = wo_malloc(n * sizeof *kept);
    Dedup__V1__FilterResponse resp;
    wo_build_response(q, r, idstr, &resp, rm, rmp, idx, kept);
    size_t want = dedup__v1__filter_response__get_packed_size(&resp);
    size_t bound = dd_wire_filter_response_bound(q, r);
    uint8_t *a = wo_malloc(want + 1), *b = wo_malloc(bound);
    dedup__v1__filter_response__pack(&resp, a);
    size_t size = dd_wire_filter_response_size(q, r);
    size_t wrote = bound >= want ? dd_wire_filter_response_write(q, r, b) : 0;
    int ok = size == want && wrote == want && memcmp(a, b, want) == 0;
    if (!ok)
        fprintf(stderr, "response differs: n %zu kept %zu mode %d explain %d: size %zu bound %zu "
                "wrote %zu want %zu\n", q->n, r->kept, q->mode, q->explain, size, bound, wrote,
                want);
    for (size_t i = 0; i < resp.n_removed; i++)
        if (rm[i].scene && rm[i].scene != protobuf_c_empty_string) free(rm[i].scene);
    free(a);
    free(b);
    free(rm);
    free(rmp);
    free(idx);
    free(kept);
    return ok;
}

#endif
