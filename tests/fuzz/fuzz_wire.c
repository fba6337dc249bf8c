/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_wire.c - the FilterRequest decoder (wire.h) against protobuf-c's
 * unpack of the same bytes: the same accept/reject and the same fields and
 * ids, with no limit on ids and with a small one (wire_oracle.h, as
 * test_wire.c). Every accepted request's FilterResponse, with reasons drawn
 * from the input's bytes, in both modes, explained or not, must be
 * protobuf-c's pack byte for byte.
 */
#include "fuzz.h"
#include "wire_oracle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static dd_arena *arena;
    if (!arena) arena = dd_arena_new(0, 0);
    FUZZ_CHECK(arena);
    FUZZ_CHECK(wo_request_agrees(arena, data, size, SIZE_MAX, 1));
    FUZZ_CHECK(wo_request_agrees(arena, data, size, size % 5, 1));

    dd_arena_reset(arena);
    struct dd_filter_query q;
    if (dd_wire_filter_request_decode(data, size, arena, SIZE_MAX, &q, NULL, 0) != DD_OK) return 0;
    size_t n = q.n;
    char **idstr = wo_malloc(n * sizeof *idstr);
    uint8_t *reason = wo_malloc(n);
    for (size_t i = 0; i < n; i++) {
        /* compact candidates (candidate_hashes) have no id strings: their
         * answer is by index only (below) */
        idstr[i] = q.by_hash ? strdup("") : strndup(q.ids[i].p, q.ids[i].len);
        FUZZ_CHECK(idstr[i]);
        /* a reason from the input's bytes: mostly kept, as in practice */
        uint8_t b = size ? data[(i * 7 + 3) % size] : 0;
        reason[i] = b % 5 < 2 ? (uint8_t)(b % 5 + 1 + (b >> 7)) : 0;
    }
    for (int mode = 0; mode < (q.by_hash ? 1 : 2); mode++)
        for (int explain = 0; explain < 2; explain++) {
            q.mode = mode ? DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS
                          : DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES;
            q.explain = explain;
            struct dd_filter_result r = {.reason = reason, .degraded = size % 3 == 0};
            wo_tally(&r, reason, n);
            FUZZ_CHECK(wo_response_matches(&q, &r, idstr));
        }
    for (size_t i = 0; i < n; i++) free(idstr[i]);
    free(idstr);
    free(reason);
    return 0;
}
