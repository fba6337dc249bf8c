/* SPDX-License-Identifier: Apache-2.0
 *
 * test_why.c - why.h's verdicts (dd_why_explain) on every path: kept (and
 * kept although traced as played: forgotten, or outside the lookback),
 * duplicate, delivered (time from Redis, else from the trace), played
 * with a trace record (Kafka and RecordPlays sources), and played without
 * one: a false positive when the trace covers the history, else "before
 * tracing began" or "before the trace's retention"; and for an untraced
 * user, that no trace is kept. And the ISO-8601 times.
 */
#include "why.h"

#include "testlib.h"

#include <string.h>

static const struct dd_trace_rec kplay = {
    .kind = DD_TRACE_PLAY, .source = DD_TRACE_SRC_KAFKA, .at_ms = T0 - 1000, .item = "v",
    .item_len = 1, .topic = "plays", .topic_len = 5, .partition = 2, .offset = 41};
static const struct dd_trace_rec rplay = {
    .kind = DD_TRACE_PLAY, .source = DD_TRACE_SRC_RECORD_PLAYS, .at_ms = T0 - 2000, .item = "v",
    .item_len = 1, .partition = -1, .offset = -1};

static struct dd_why_verdict explain(const struct dd_why_user *u, struct dd_why_item it)
{
    struct dd_why_verdict v;
    dd_why_explain(u, &it, &v);
    return v;
}

int main(void)
{
    /* Traced for 2 days; the trace keeps 30, the history answers for 121. */
    struct dd_why_user u = {true, T0 - 2 * DAY, T0, 30 * DAY, 121 * DAY};
    struct dd_why_verdict v;

    v = explain(&u, (struct dd_why_item){0});
    CHECK_STR(v.verdict, "kept");
    CHECK_STR(v.detail, "kept");
    CHECK_EQ_INT(v.time_ms, -1);

    v = explain(&u, (struct dd_why_item){.reason = DEDUP__V1__REASON__REASON_DUPLICATE,
                                         .first_index = 3});
    CHECK_STR(v.verdict, "duplicate");
    CHECK(strstr(v.detail, "index 3") != NULL);

    v = explain(&u, (struct dd_why_item){.reason = DEDUP__V1__REASON__REASON_DELIVERED,
                                         .delivered_ms = T0 - 5, .history = true});
    CHECK_STR(v.verdict, "delivered");
    CHECK_EQ_INT(v.time_ms, T0 - 5);
    CHECK_STR(v.source, "RecordDelivery");
    CHECK(strstr(v.detail, "played too") != NULL);
    struct dd_trace_rec del = {.kind = DD_TRACE_DELIVERY, .at_ms = T0 - 7};
    v = explain(&u, (struct dd_why_item){.reason = DEDUP__V1__REASON__REASON_DELIVERED,
                                         .delivery = &del});
    CHECK_EQ_INT(v.time_ms, T0 - 7);

    v = explain(&u, (struct dd_why_item){.reason = DEDUP__V1__REASON__REASON_PLAYED,
                                         .play = &kplay});
    CHECK_STR(v.verdict, "played");
    CHECK_EQ_INT(v.time_ms, T0 - 1000);
    CHECK_STR(v.source, "kafka plays/2@41");
    v = explain(&u, (struct dd_why_item){.reason = DEDUP__V1__REASON__REASON_PLAYED,
                                         .play = &rplay});
    CHECK_STR(v.source, "RecordPlays");

    /* Played, no record: the trace began 2 days ago. */
    v = explain(&u, (struct dd_why_item){.reason = DEDUP__V1__REASON__REASON_PLAYED});
    CHECK_MSG(strstr(v.detail, "played before tracing began (since 2024-10-02T12:00:00.000Z)") &&
                  strstr(v.detail, "dated before 2024-09-04T12:00:00.000Z "
                                   "(trace.retention_days=30)") &&
                  strstr(v.detail, "false positive"), "%s", v.detail);
    /* Traced for long, but the trace keeps 30 days of 121. */
    u.since_ms = T0 - 200 * DAY;
    v = explain(&u, (struct dd_why_item){.reason = DEDUP__V1__REASON__REASON_PLAYED});
    CHECK_MSG(strstr(v.detail, "no traced play") && strstr(v.detail, "trace.retention_days"),
              "%s", v.detail);
    /* The trace covers all the history holds: a false positive. */
    u.trace_retention_ms = 200 * DAY;
    v = explain(&u, (struct dd_why_item){.reason = DEDUP__V1__REASON__REASON_PLAYED});
    CHECK_MSG(strncmp(v.detail, "false positive of the filter", 28) == 0, "%s", v.detail);
    CHECK_EQ_INT(v.time_ms, -1);

    /* Kept, but the trace knows of a play. */
    v = explain(&u, (struct dd_why_item){.forgotten = &kplay, .forget_ms = T0});
    CHECK_STR(v.verdict, "kept");
    CHECK_MSG(strstr(v.detail, "then forgotten at 2024-10-04T12:00:00.000Z") != NULL, "%s",
              v.detail);
    v = explain(&u, (struct dd_why_item){.play = &rplay});
    CHECK(strstr(v.detail, "outside the lookback") != NULL);

    /* Untraced. */
    struct dd_why_user nu = {false, 0, T0, 30 * DAY, 121 * DAY};
    v = explain(&nu, (struct dd_why_item){.reason = DEDUP__V1__REASON__REASON_PLAYED});
    CHECK_STR(v.verdict, "played");
    CHECK(strstr(v.detail, "no trace is kept") != NULL);

    char iso[40];
    dd_why_iso8601(T0 + 7, iso, sizeof iso);
    CHECK_STR(iso, "2024-10-04T12:00:00.007Z");
    dd_why_iso8601(0, iso, sizeof iso);
    CHECK_STR(iso, "1970-01-01T00:00:00.000Z");
    TEST_MAIN_END();
}
