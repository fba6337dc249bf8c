/* SPDX-License-Identifier: Apache-2.0
 *
 * test_segment.c - history keys and time segments (segment.h): days round
 * down before 1970 too; segment boundaries; dead and closed verdicts at
 * their exact edges; keys round-trip and foreign keys are refused.
 */
#include "dd.h"
#include "segment.h"
#include "testlib.h"

#include <string.h>

static void test_days(void)
{
    CHECK_EQ_INT(dd_day_of_ms(0), 0);
    CHECK_EQ_INT(dd_day_of_ms(DD_MS_PER_DAY - 1), 0);
    CHECK_EQ_INT(dd_day_of_ms(DD_MS_PER_DAY), 1);
    CHECK_EQ_INT(dd_day_of_ms(-1), -1);
    CHECK_EQ_INT(dd_day_of_ms(-DD_MS_PER_DAY), -1);
    CHECK_EQ_INT(dd_day_of_ms(-DD_MS_PER_DAY - 1), -2);
}

static void test_segments(void)
{
    struct dd_segments g = {7, 30};
    CHECK_EQ_INT(dd_segment_of_day(&g, 0), 0);
    CHECK_EQ_INT(dd_segment_of_day(&g, 6), 0);
    CHECK_EQ_INT(dd_segment_of_day(&g, 7), 1);
    CHECK_EQ_INT(dd_segment_of_day(&g, -5), 0);
    CHECK_EQ_INT(dd_segment_last_day(&g, 2857), 20005);
    CHECK_EQ_INT(dd_segment_oldest_live_day(&g, 20000), 19970);
    /* segment 2852 ends on day 19970, the oldest live day on 20000 */
    CHECK(!dd_segment_dead(&g, 2852, 20000));
    CHECK(dd_segment_dead(&g, 2852, 20001));
    CHECK(dd_segment_dead(&g, 2851, 20000));
    /* closed once its last day < today - 1 - grace */
    int64_t last = dd_segment_last_day(&g, 2855); /* 19991 */
    CHECK(!dd_segment_closed(&g, 2855, last + 1 + DD_SEGMENT_REDUCE_GRACE_DAYS));
    CHECK(dd_segment_closed(&g, 2855, last + 2 + DD_SEGMENT_REDUCE_GRACE_DAYS));
    struct dd_segments one = {1, 1};
    CHECK_EQ_INT(dd_segment_of_day(&one, INT64_C(1) << 40), DD_SEGMENT_DAY - 1);
    CHECK(!dd_segment_is_day(dd_segment_of_day(&one, INT64_C(1) << 40)));
}

/* Day segments (history.day_scenes): one day each, whatever segment_days,
 * numbered after every segment_days segment. */
static void test_day_segments(void)
{
    struct dd_segments g = {7, 30};
    uint32_t s = dd_day_segment(20000);
    CHECK(dd_segment_is_day(s));
    CHECK_EQ_INT(s, DD_SEGMENT_DAY | 20000u);
    CHECK_EQ_INT(dd_segment_last_day(&g, s), 20000);
    CHECK(s > dd_segment_of_day(&g, 20000));
    CHECK_EQ_INT(dd_day_segment(-5), DD_SEGMENT_DAY);
    /* live while its day >= today - retention, to the day */
    CHECK(!dd_segment_dead(&g, s, 20030));
    CHECK(dd_segment_dead(&g, s, 20031));
    /* closed once its day < today - 1 - grace */
    CHECK(!dd_segment_closed(&g, s, 20001 + DD_SEGMENT_REDUCE_GRACE_DAYS));
    CHECK(dd_segment_closed(&g, s, 20002 + DD_SEGMENT_REDUCE_GRACE_DAYS));
    /* the key's number is read back whole */
    uint8_t k[DD_KEY_MAX];
    size_t n = dd_key_prefix(k, "live", 4, "u1", 2);
    dd_key_put_segment(k + n, s);
    uint32_t back = 0;
    CHECK(dd_key_segment((const char *)k, n + 4, &back));
    CHECK_EQ_INT(back, s);
}

static void test_keys(void)
{
    static uint8_t k[DD_KEY_MAX];
    CHECK_EQ_INT(DD_KEY_MAX, 1 + 255 + 2 + 65535 + 4);
    size_t n = dd_key_prefix(k, "sc", 2, "user", 4);
    CHECK_EQ_INT(n, 1 + 2 + 2 + 4);
    CHECK(memcmp(k, "\x02sc\x00\x04user", n) == 0);
    dd_key_put_segment(k + n, 0x01020304);
    CHECK(memcmp(k + n, "\x01\x02\x03\x04", 4) == 0);
    uint32_t seg = 0;
    CHECK(dd_key_segment((char *)k, n + 4, &seg));
    CHECK_EQ_INT(seg, 0x01020304);
    seg = 7;
    CHECK(!dd_key_segment((char *)k, n + 3, &seg));
    CHECK(!dd_key_segment((char *)k, n + 5, &seg));
    CHECK(!dd_key_segment("abc", 3, &seg));
    CHECK_EQ_INT(seg, 7);
    /* empty ids are valid */
    n = dd_key_prefix(k, "", 0, "", 0);
    dd_key_put_segment(k + n, 9);
    CHECK(dd_key_segment((char *)k, n + 4, &seg));
    CHECK_EQ_INT(seg, 9);
    char hex[16];
    dd_key_hex(hex, sizeof hex, "\x01\xab\xff", 3);
    CHECK_STR(hex, "01abff");
    dd_key_hex(hex, 6, "\x01\xab\xff", 3);  /* truncated to whole bytes */
    CHECK_STR(hex, "01ab");
}

int main(void)
{
    test_days();
    test_segments();
    test_keys();
    test_day_segments();
    TEST_MAIN_END();
}
