/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_playevent.c - the Kafka play-event decoder (playevent.h), JSON and
 * protobuf. Input: a byte picking the format (bit 0), the key's length
 * (bits 1-5: 0..31) and a play or a forget marker's payload (bit 6), the
 * key, then the payload. An accepted event must hold a non-empty user id
 * and, a play, a non-empty item id (a marker: none), within the limit,
 * each readable (ASan checks the bytes are there); a refusal must be one
 * of the listed statuses.
 */
#include "fuzz.h"

#include "dd.h"
#include "playevent.h"

#define MAX_ID 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static dd_playevent_decoder *dec[2];
    if (!dec[0]) {
        FUZZ_CHECK(dd_playevent_decoder_new(&dec[0], DD_PLAYEVENT_JSON, MAX_ID) == DD_OK);
        FUZZ_CHECK(dd_playevent_decoder_new(&dec[1], DD_PLAYEVENT_PROTOBUF, MAX_ID) == DD_OK);
    }
    if (size == 0) return 0;
    int format = data[0] & 1, forget = data[0] & 0x40;
    size_t klen = (size_t)(data[0] >> 1) % 32;
    data++;
    size--;
    if (klen > size) klen = size;
    /* copies, so ASan sees a read past either end */
    uint8_t *key = klen ? malloc(klen) : NULL;
    uint8_t *payload = malloc(size - klen ? size - klen : 1);
    FUZZ_CHECK(payload && (key || !klen));
    if (klen) memcpy(key, data, klen);
    memcpy(payload, data + klen, size - klen);

    struct dd_playevent ev;
    int st = forget ? dd_playevent_decode_forget(dec[format], payload, size - klen, key, klen, &ev)
                    : dd_playevent_decode(dec[format], payload, size - klen, key, klen,
                                          1700000000000, &ev);
    FUZZ_CHECK(st >= 0 && st < DD_PLAYEVENT_NSTATUS);
    if (st == DD_PLAYEVENT_OK) {
        FUZZ_CHECK(ev.user_len > 0 && ev.user_len <= MAX_ID && ev.user);
        if (forget)
            FUZZ_CHECK(ev.item_len == 0);
        else
            FUZZ_CHECK(ev.item_len > 0 && ev.item_len <= MAX_ID && ev.item);
        FUZZ_CHECK(ev.scene_len <= MAX_ID && (ev.scene || ev.scene_len == 0));
        /* read every byte: a dangling pointer is ASan's to report */
        volatile uint64_t h = dd_hash(ev.user, ev.user_len) ^ dd_hash(ev.item, ev.item_len);
        if (ev.scene_len) h ^= dd_hash(ev.scene, ev.scene_len);
        (void)h;
    }
    free(key);
    free(payload);
    return 0;
}
