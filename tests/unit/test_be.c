/* SPDX-License-Identifier: Apache-2.0
 *
 * test_be.c - the big-endian loads and stores (be.h): the byte order on
 * the page, round trips at the edges, and unaligned access.
 */
#include "testlib.h"

#include "be.h"

#include <stdint.h>
#include <string.h>

static void test_layout(void)
{
    uint8_t b[8];
    dd_be16_store(b, 0x0102);
    CHECK(b[0] == 0x01 && b[1] == 0x02);
    dd_be32_store(b, 0x01020304u);
    CHECK(memcmp(b, "\x01\x02\x03\x04", 4) == 0);
    dd_be64_store(b, UINT64_C(0x0102030405060708));
    CHECK(memcmp(b, "\x01\x02\x03\x04\x05\x06\x07\x08", 8) == 0);
    CHECK(dd_be16_load((const uint8_t *)"\xfe\xff") == 0xfeff);
    CHECK(dd_be32_load((const uint8_t *)"\x80\x00\x00\x01") == 0x80000001u);
    CHECK(dd_be64_load((const uint8_t *)"\xff\x00\x00\x00\x00\x00\x00\x01") ==
          UINT64_C(0xff00000000000001));
}

static void test_round_trip(void)
{
    static const uint64_t v64[] = {0, 1, 0xff, 0x100, UINT32_MAX, (uint64_t)UINT32_MAX + 1,
                                   INT64_MAX, UINT64_MAX};
    /* Odd offsets: nothing assumes alignment. */
    uint8_t b[16];
    for (size_t i = 0; i < sizeof v64 / sizeof v64[0]; i++) {
        memset(b, 0xaa, sizeof b);
        dd_be64_store(b + 1, v64[i]);
        CHECK(dd_be64_load(b + 1) == v64[i]);
        CHECK(b[0] == 0xaa && b[9] == 0xaa); /* exactly 8 bytes written */
        dd_be32_store(b + 3, (uint32_t)v64[i]);
        CHECK(b[2] == (uint8_t)(v64[i] >> 48)); /* the 64-bit value's bytes around it kept */
        CHECK(dd_be32_load(b + 3) == (uint32_t)v64[i]);
        dd_be16_store(b + 5, (uint16_t)v64[i]);
        CHECK(dd_be16_load(b + 5) == (uint16_t)v64[i]);
    }
    /* Signed values go through their unsigned image. */
    dd_be64_store(b, (uint64_t)INT64_C(-2));
    CHECK((int64_t)dd_be64_load(b) == -2);
    dd_be32_store(b, (uint32_t)INT32_C(-1));
    CHECK((int32_t)dd_be32_load(b) == -1);
}

int main(void)
{
    test_layout();
    test_round_trip();
    TEST_MAIN_END();
}
