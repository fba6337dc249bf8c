/* SPDX-License-Identifier: Apache-2.0
 *
 * test_lag.c - the lag table (lag.h) without Kafka: watermarks from a
 * table here; unknown until the end first seen is visible, 0 once
 * caught up, dated by this node's clock while behind; waiting until a
 * message is visible; the consumer lag from statistics JSON.
 */
#include "testlib.h"

#include "dd.h"
#include "lag.h"

#include <stdint.h>
#include <string.h>

static int64_t hi_of[8];

static int watermark(void *ud, int32_t partition, int64_t *hi)
{
    (void)ud;
    if (partition < 0 || partition >= 8 || hi_of[partition] < 0) return 1;
    *hi = hi_of[partition];
    return 0;
}

static void test_lag_ms(void)
{
    dd_lag *l = NULL;
    CHECK_EQ_INT(dd_lag_new(&l, "plays", watermark, NULL), DD_OK);
    int64_t worst, ev;
    int32_t parts[4];
    int64_t lags[4];
    /* Nothing assigned: unknown. */
    CHECK_EQ_INT(dd_lag_ms(l, parts, lags, 4, &worst, &ev), 0);
    CHECK(worst == -1);
    /* Assigned with a log already there: unknown until it is visible. */
    for (int i = 0; i < 8; i++) hi_of[i] = -1;
    hi_of[1] = 10;
    dd_lag_assign(l, 1, true);
    CHECK_EQ_INT(dd_lag_ms(l, parts, lags, 4, &worst, &ev), 0);
    CHECK(worst == -1);
    /* Consumed and written up to 10: caught up, 0. */
    dd_lag_pending(l, 0, 1, 0, 1000);
    int64_t next[2] = {-1, 10}, ts[2] = {0, 1000};
    dd_lag_visible(l, 0, next, ts, 2);
    CHECK_EQ_INT(dd_lag_ms(l, parts, lags, 4, &worst, &ev), 1);
    CHECK(worst == 0 && parts[0] == 1 && lags[0] == 0);
    /* The log grows past what is visible: behind, by this node's clock. */
    hi_of[1] = 12;
    CHECK_EQ_INT(dd_lag_ms(l, parts, lags, 4, &worst, &ev), 1);
    CHECK(worst >= 0 && worst < 1000);
    dd_sleep_ms(20);
    CHECK_EQ_INT(dd_lag_ms(l, parts, lags, 4, &worst, &ev), 1);
    CHECK(worst >= 15);
    /* The end reached with nothing pending: visible again, 0. */
    dd_lag_eof(l, 1, 12);
    CHECK_EQ_INT(dd_lag_ms(l, parts, lags, 4, &worst, &ev), 1);
    CHECK(worst == 0);
    /* A partition whose watermark is unknown makes the node's unknown. */
    dd_lag_assign(l, 2, true);
    dd_lag_ms(l, parts, lags, 4, &worst, &ev);
    CHECK(worst == -1);
    dd_lag_unassign_all(l);
    CHECK_EQ_INT(dd_lag_ms(l, parts, lags, 4, &worst, &ev), 0);
    dd_lag_free(l);
}

static void test_wait_visible(void)
{
    dd_lag *l = NULL;
    CHECK_EQ_INT(dd_lag_new(&l, "plays", watermark, NULL), DD_OK);
    CHECK_EQ_INT(dd_lag_wait_visible(l, 3, 0, dd_mono_ns()), DD_ERR_STATE); /* not assigned */
    dd_lag_assign(l, 3, true);
    CHECK_EQ_INT(dd_lag_wait_visible(l, 3, 5, dd_mono_ns() + 1000000), DD_ERR_TIMEOUT);
    int64_t next[4] = {-1, -1, -1, 6}, ts[4] = {0};
    dd_lag_visible(l, 1, next, ts, 4);
    CHECK_EQ_INT(dd_lag_wait_visible(l, 3, 5, dd_mono_ns()), DD_OK);
    CHECK_EQ_INT(dd_lag_wait_visible(l, 3, 6, dd_mono_ns()), DD_ERR_TIMEOUT);
    dd_lag_free(l);
}

static void test_consumer(void)
{
    dd_lag *l = NULL;
    CHECK_EQ_INT(dd_lag_new(&l, "plays", watermark, NULL), DD_OK);
    CHECK(dd_lag_consumer_total(l) == -1);
    const char *json = "{\"topics\":{\"plays\":{\"partitions\":{"
                       "\"0\":{\"partition\":0,\"consumer_lag\":5},"
                       "\"1\":{\"partition\":1,\"consumer_lag\":7},"
                       "\"-1\":{\"partition\":-1,\"consumer_lag\":-1}}}}}";
    dd_lag_stats(l, json, strlen(json));
    int32_t parts[4];
    int64_t lags[4];
    size_t n = dd_lag_consumer(l, parts, lags, 4);
    CHECK_EQ_INT(n, 2);
    CHECK(dd_lag_consumer_total(l) == 12);
    dd_lag_free(l);
}

int main(void)
{
    test_lag_ms();
    test_wait_visible();
    test_consumer();
    TEST_MAIN_END();
}
