/* SPDX-License-Identifier: Apache-2.0
 *
 * test_record.c - the write RPCs' semantics (record.h) on a real history
 * and with Redis down (store_fixture.h): RecordPlays validates the whole
 * request before writing any of it, RecordDelivery fails UNAVAILABLE,
 * ForgetUser forgets the plays and asks for a retry for the deliveries.
 * The real-Redis paths are covered by the Python integration test.
 */
#include "store_fixture.h"
#include "testlib.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_future_rejects_whole_request(void)
{
    Dedup__V1__RecordPlaysResponse pr;
    char *items[] = {"fine", "later"};
    int64_t at[] = {T0, T0 + cfg.history.max_future_ms + 60000};
    CHECK_EQ_INT(play("dave", "", items, at, 2, &pr), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "plays[1].played_at_ms") != NULL, "%s", err);
    CHECK_MSG(strstr(err, "history.max_future_ms") != NULL, "%s", err);
    /* Nothing of the request was written. */
    Dedup__V1__FilterResponse r;
    char *ids[] = {"fine"};
    CHECK_EQ_INT(filter("dave", ids, 1, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_OK);
    CHECK_EQ_INT(r.n_kept_ids, 1);
    /* Within max_future_ms is fine. */
    int64_t soon[] = {T0, T0 + 1000};
    CHECK_EQ_INT(play("dave", "", items, soon, 2, &pr), DD_OK);
    CHECK_EQ_INT(pr.accepted, 2);
}

/* RecordDelivery dated more than history.max_future_ms ahead is refused
 * (it would sort above every genuine delivery and push them out of the
 * last recent.size); within the bound it goes on to Redis (down here, so
 * UNAVAILABLE). */
/* RecordDelivery of the one item "d1" for USER dated AT. */
static int deliver(const char *user, int64_t at)
{
    Dedup__V1__RecordDeliveryRequest dr = DEDUP__V1__RECORD_DELIVERY_REQUEST__INIT;
    Dedup__V1__RecordDeliveryResponse dresp;
    char *ids[] = {"d1"};
    dr.user_id = (char *)user;
    dr.item_ids = ids;
    dr.n_item_ids = 1;
    dr.delivered_at_ms = at;
    dd_arena_reset(arena);
    return dd_record_delivery(wr, arena, &dr, &dresp, err, sizeof err);
}

static void test_delivery_future(void)
{
    CHECK_EQ_INT(deliver("fred", T0 + cfg.history.max_future_ms + 1), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "delivered_at_ms") != NULL, "%s", err);
    CHECK_MSG(strstr(err, "history.max_future_ms") != NULL, "%s", err);
    CHECK_EQ_INT(deliver("fred", INT64_MAX), DD_ERR_INVALID);
    CHECK_EQ_INT(deliver("fred", T0 + cfg.history.max_future_ms), DD_ERR_UNAVAILABLE);
    CHECK_EQ_INT(deliver("fred", 0), DD_ERR_UNAVAILABLE); /* 0 = now */
}

static void test_bad_input(void)
{
    char *ids[] = {"ok", "0123456789012345678901234567890123456789012345678901234567890123456789"};
    Dedup__V1__RecordPlaysResponse pr;
    char *items[] = {"good", ""};
    CHECK_EQ_INT(play("u", "", items, NULL, 2, &pr), DD_ERR_INVALID);
    CHECK_STR(err, "plays[1].item_id is empty");
    int64_t neg[] = {T0, -5};
    char *items2[] = {"good", "bad"};
    CHECK_EQ_INT(play("u", "", items2, neg, 2, &pr), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "plays[1].played_at_ms is negative") != NULL, "%s", err);
    CHECK_EQ_INT(play("", "", items2, NULL, 2, &pr), DD_ERR_INVALID);
    CHECK_STR(err, "user_id is empty");

    Dedup__V1__ForgetUserRequest fr = DEDUP__V1__FORGET_USER_REQUEST__INIT;
    Dedup__V1__ForgetUserResponse fresp;
    CHECK_EQ_INT(dd_record_forget(wr, arena, &fr, &fresp, err, sizeof err), DD_ERR_INVALID);
    CHECK_STR(err, "user_id is empty");

    Dedup__V1__RecordDeliveryRequest dr = DEDUP__V1__RECORD_DELIVERY_REQUEST__INIT;
    Dedup__V1__RecordDeliveryResponse dresp;
    dr.user_id = "u";
    dd_arena_reset(arena);
    CHECK_EQ_INT(dd_record_delivery(wr, arena, &dr, &dresp, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_STR(err, "item_ids is empty");
    dr.item_ids = ids;
    dr.n_item_ids = 2;
    CHECK_EQ_INT(dd_record_delivery(wr, arena, &dr, &dresp, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_STR(err, "item_ids[1] is 70 bytes, longer than rpc.max_id_bytes=64");
}

static void test_redis_down_writes(void)
{
    CHECK_EQ_INT(deliver("erin", 0), DD_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(err, "recent deliveries unavailable") != NULL, "%s", err);

    /* ForgetUser: the plays go even though Redis is down, and the caller
     * is told to retry (UNAVAILABLE) for the deliveries. */
    Dedup__V1__RecordPlaysResponse pr;
    char *items[] = {"e1"};
    CHECK_EQ_INT(play("erin", "", items, NULL, 1, &pr), DD_OK);
    Dedup__V1__FilterResponse r;
    CHECK_EQ_INT(filter("erin", items, 1, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_OK);
    CHECK_EQ_INT(r.n_kept_ids, 0);
    Dedup__V1__ForgetUserRequest fr = DEDUP__V1__FORGET_USER_REQUEST__INIT;
    Dedup__V1__ForgetUserResponse fresp;
    fr.user_id = "erin";
    CHECK_EQ_INT(dd_record_forget(wr, arena, &fr, &fresp, err, sizeof err), DD_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(err, "plays forgotten") != NULL, "%s", err);
    CHECK_EQ_INT(filter("erin", items, 1, 0, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r),
                 DD_OK);
    CHECK_EQ_INT(r.n_kept_ids, 1);
}

/* RecordPlays for USER of N plays "USER-i" dated AGE[i] days before T0
 * (a few seconds apart within a day), then, for every lookback L from 1
 * to the oldest age, a Filter of all of them with lookback L must keep
 * exactly those older than L days: each play was written to its own
 * day's segment (segment_days is 1 here), whatever the order of the
 * request. */
static void check_days(const char *user, size_t n, const int *age)
{
    enum { MAXN = 512 };
    REQUIRE(n <= MAXN);
    static char ids[MAXN][32];
    static char *idp[MAXN];
    static Dedup__V1__Play plays[MAXN], *pp[MAXN];
    int oldest = 0;
    for (size_t i = 0; i < n; i++) {
        snprintf(ids[i], sizeof ids[i], "%s-%zu", user, i);
        idp[i] = ids[i];
        dedup__v1__play__init(&plays[i]);
        plays[i].item_id = ids[i];
        plays[i].played_at_ms = T0 - (int64_t)age[i] * DAY - (int64_t)(i % 5) * 1000;
        pp[i] = &plays[i];
        if (age[i] > oldest) oldest = age[i];
    }
    Dedup__V1__RecordPlaysRequest req = DEDUP__V1__RECORD_PLAYS_REQUEST__INIT;
    req.user_id = (char *)user;
    req.plays = pp;
    req.n_plays = n;
    Dedup__V1__RecordPlaysResponse pr;
    dd_arena_reset(arena);
    CHECK_EQ_INT(dd_record_plays(wr, arena, &req, &pr, err, sizeof err), DD_OK);
    CHECK_EQ_INT(pr.accepted, n);
    int bad = 0;
    for (int l = 1; l <= oldest; l++) {
        Dedup__V1__FilterResponse r;
        if (filter(user, idp, n, (uint32_t)l, DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_IDS, 0, &r) !=
            DD_OK) {
            bad++;
            continue;
        }
        size_t want = 0;
        for (size_t i = 0; i < n; i++) want += age[i] > l;
        size_t k = 0, wrong = 0;
        for (size_t i = 0; i < n; i++) {
            if (age[i] <= l) continue;
            /* kept in request order */
            if (k >= r.n_kept_ids || strcmp(r.kept_ids[k], ids[i]) != 0) wrong++;
            k++;
        }
        if (r.n_kept_ids != want || wrong) {
            fprintf(stderr, "%s lookback %d: %zu kept, %zu wanted, %zu wrong\n", user, l,
                    r.n_kept_ids, want, wrong);
            bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_plays_to_their_days(void)
{
    /* 400 plays over 40 days in no order: grouped by a count over the
     * days */
    static int age[400];
    uint64_t seed = 7;
    for (size_t i = 0; i < 400; i++) age[i] = (int)(tl_splitmix64(&seed) % 40);
    check_days("gina", 400, age);
    /* 3 plays 40 days apart, out of order: a range wider than the
     * request, grouped by sorting */
    static const int spread[] = {40, 0, 80};
    check_days("hank", 3, spread);
}

int main(void)
{
    setup();
    test_future_rejects_whole_request();
    test_delivery_future();
    test_bad_input();
    test_redis_down_writes();
    test_plays_to_their_days();
    teardown();
    TEST_MAIN_END();
}
