/* SPDX-License-Identifier: Apache-2.0
 *
 * test_metrics.c - histograms (buckets, sum, quantiles, concurrent
 * observers), the Prometheus text writer (exact output, escaping, read
 * back by the strict parser), and the collector registry.
 */
#include "dd.h"
#include "metrics.h"
#include "promtext.h"
#include "testlib.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const double b3[] = {0.001, 0.01, 0.1};

static void test_histogram(void)
{
    struct dd_histogram h;
    static const double bad[] = {1, 1};
    CHECK_EQ_INT(dd_histogram_init(&h, bad, 2), DD_ERR_INVALID);
    static double many[DD_HISTOGRAM_MAX_BOUNDS + 1];
    for (size_t i = 0; i < DD_ARRAY_LEN(many); i++) many[i] = (double)i;
    CHECK_EQ_INT(dd_histogram_init(&h, many, DD_ARRAY_LEN(many)), DD_ERR_INVALID);
    REQUIRE(dd_histogram_init(&h, b3, 3) == DD_OK);

    dd_histogram_observe(&h, 0.0005); /* <= 0.001 */
    dd_histogram_observe(&h, 0.001);  /* a value on a bound belongs to it (le) */
    dd_histogram_observe(&h, 0.005);
    dd_histogram_observe(&h, 5.0);    /* above every bound */
    dd_histogram_observe(&h, NAN);    /* +Inf bucket, not in the sum */
    struct dd_histogram_snap s;
    dd_histogram_snapshot(&h, &s);
    CHECK_EQ_INT(s.nbounds, 3);
    CHECK_EQ_INT(s.buckets[0], 2);
    CHECK_EQ_INT(s.buckets[1], 3);
    CHECK_EQ_INT(s.buckets[2], 3);
    CHECK_EQ_INT(s.buckets[3], 5);
    CHECK_EQ_INT(s.count, 5);
    CHECK_MSG(fabs(s.sum - 5.0065) < 1e-12, "sum %.17g", s.sum);

    /* Quantiles interpolate inside the bucket, as histogram_quantile does. */
    struct dd_histogram q;
    static const double b10[] = {10, 20, 30, 40};
    REQUIRE(dd_histogram_init(&q, b10, 4) == DD_OK);
    struct dd_histogram_snap qs;
    dd_histogram_snapshot(&q, &qs);
    CHECK(isnan(dd_histogram_quantile(&qs, 0.5)));
    for (int i = 0; i < 100; i++) dd_histogram_observe(&q, 15); /* all in (10, 20] */
    dd_histogram_snapshot(&q, &qs);
    CHECK_MSG(fabs(dd_histogram_quantile(&qs, 0.5) - 15.0) < 1e-9, "%g",
              dd_histogram_quantile(&qs, 0.5));
    CHECK_MSG(fabs(dd_histogram_quantile(&qs, 0.99) - 19.9) < 1e-9, "%g",
              dd_histogram_quantile(&qs, 0.99));
    dd_histogram_observe(&q, 1000);
    dd_histogram_observe(&q, 1000);
    dd_histogram_snapshot(&q, &qs);
    CHECK_EQ_INT((long long)dd_histogram_quantile(&qs, 1.0), 40); /* +Inf: highest bound */
    CHECK(isnan(dd_histogram_quantile(&qs, 0.0)));
}

struct obs_arg {
    struct dd_histogram *h;
    int n;
};

static void *observer(void *p)
{
    struct obs_arg *a = p;
    for (int i = 0; i < a->n; i++) dd_histogram_observe(a->h, (i % 3) == 0 ? 0.0001 : 1.0);
    return NULL;
}

static void test_histogram_threads(void)
{
    struct dd_histogram h;
    REQUIRE(dd_histogram_init(&h, b3, 3) == DD_OK);
    enum { T = 4, N = 200000 };
    pthread_t th[T];
    struct obs_arg a = {&h, N};
    for (int i = 0; i < T; i++) REQUIRE(pthread_create(&th[i], NULL, observer, &a) == 0);
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    struct dd_histogram_snap s;
    dd_histogram_snapshot(&h, &s);
    CHECK_EQ_INT(s.count, T * N);
    long long small = (N + 2) / 3; /* i % 3 == 0 for i in [0, N) */
    CHECK_EQ_INT(s.buckets[0], T * small);
    double want = T * (small * 0.0001 + (double)(N - small) * 1.0);
    CHECK_MSG(fabs(s.sum - want) < 1e-6 * want, "sum %.17g want %.17g (lost updates?)", s.sum,
              want);
}

static void test_writer(void)
{
    dd_prom *p = dd_prom_new();
    REQUIRE(p);
    dd_prom_family(p, "x_total", "Things\\done\nso far", DD_PROM_COUNTER);
    struct dd_prom_label l[] = {{"method", "Filter"}, {"why", "a\"b\\c\nd"}};
    dd_prom_sample_u64(p, "x_total", l, 2, UINT64_C(18446744073709551615));
    dd_prom_family(p, "g", "A gauge", DD_PROM_GAUGE);
    dd_prom_sample_f64(p, "g", NULL, 0, 0.1);
    dd_prom_sample_f64(p, "g", l, 1, NAN);
    dd_prom_sample_f64(p, "g", l + 1, 1, -INFINITY);
    struct dd_histogram h;
    REQUIRE(dd_histogram_init(&h, b3, 3) == DD_OK);
    dd_histogram_observe(&h, 0.002);
    dd_histogram_observe(&h, 0.5);
    struct dd_histogram_snap s;
    dd_histogram_snapshot(&h, &s);
    dd_prom_family(p, "d_seconds", "Durations", DD_PROM_HISTOGRAM);
    dd_prom_histogram(p, "d_seconds", l, 1, &s);
    const char *want =
        "# HELP x_total Things\\\\done\\nso far\n"
        "# TYPE x_total counter\n"
        "x_total{method=\"Filter\",why=\"a\\\"b\\\\c\\nd\"} 18446744073709551615\n"
        "# HELP g A gauge\n"
        "# TYPE g gauge\n"
        "g 0.1\n"
        "g{method=\"Filter\"} NaN\n"
        "g{why=\"a\\\"b\\\\c\\nd\"} -Inf\n"
        "# HELP d_seconds Durations\n"
        "# TYPE d_seconds histogram\n"
        "d_seconds_bucket{method=\"Filter\",le=\"0.001\"} 0\n"
        "d_seconds_bucket{method=\"Filter\",le=\"0.01\"} 1\n"
        "d_seconds_bucket{method=\"Filter\",le=\"0.1\"} 1\n"
        "d_seconds_bucket{method=\"Filter\",le=\"+Inf\"} 2\n"
        "d_seconds_sum{method=\"Filter\"} 0.502\n"
        "d_seconds_count{method=\"Filter\"} 2\n";
    size_t len;
    const char *got = dd_prom_data(p, &len);
    CHECK_EQ_INT(dd_prom_err(p), 0);
    CHECK_STR(got, want);
    CHECK_EQ_INT(len, strlen(want));

    /* What we write, the strict parser reads back, unescaped. */
    dd_promtext *t = NULL;
    char err[200] = "";
    CHECK_MSG(dd_promtext_parse(got, len, &t, err, sizeof err) == DD_OK, "%s", err);
    if (t) {
        CHECK_EQ_INT(dd_promtext_count(t), 10);
        const struct dd_promtext_sample *x = dd_promtext_sample(t, 0);
        CHECK_STR(x->name, "x_total");
        CHECK_EQ_INT(x->nlabels, 2);
        CHECK_STR(x->labels[1].value, "a\"b\\c\nd");
        CHECK_STR(dd_promtext_type(t, "d_seconds"), "histogram");
        CHECK(isnan(dd_promtext_sample(t, 2)->value));
        CHECK(isinf(dd_promtext_sample(t, 3)->value));
        double bounds[DD_HISTOGRAM_MAX_BOUNDS];
        struct dd_histogram_snap r;
        CHECK_EQ_INT(dd_promtext_histogram(t, "d_seconds", "method", "Filter", bounds, &r),
                     DD_OK);
        CHECK_EQ_INT(r.nbounds, 3);
        CHECK_EQ_INT(r.count, 2);
        CHECK_EQ_INT(r.buckets[1], 1);
        CHECK(fabs(r.sum - 0.502) < 1e-12);
        CHECK_EQ_INT(dd_promtext_histogram(t, "d_seconds", "method", "Other", bounds, &r),
                     DD_ERR_NOTFOUND);
    }
    dd_promtext_free(t);

    size_t tlen;
    char *taken = dd_prom_take(p, &tlen);
    CHECK(taken && tlen == strlen(want));
    free(taken);
    CHECK_EQ_INT(dd_prom_data(p, &len)[0], '\0');
    dd_prom_sample_u64(p, "a", NULL, 0, 7); /* the writer grows again after a take */
    CHECK_STR(dd_prom_data(p, NULL), "a 7\n");
    dd_prom_free(p);
    dd_prom_free(NULL);
}

static void collect_a(dd_prom *p, void *ud)
{
    dd_prom_family(p, "test_a_total", "A", DD_PROM_COUNTER);
    dd_prom_sample_u64(p, "test_a_total", NULL, 0, *(uint64_t *)ud);
}

static void collect_b(dd_prom *p, void *ud)
{
    (void)ud;
    dd_prom_family(p, "test_b", "B", DD_PROM_GAUGE);
    dd_prom_sample_f64(p, "test_b", NULL, 0, 2.5);
}

static void test_registry(void)
{
    dd_metrics *m;
    REQUIRE(dd_metrics_new(&m) == DD_OK);
    dd_prom *p = dd_prom_new();
    REQUIRE(p);
    uint64_t a = 41;
    CHECK_EQ_INT(dd_metrics_add(m, collect_a, &a), DD_OK);
    CHECK_EQ_INT(dd_metrics_add(m, collect_b, NULL), DD_OK);
    a++;
    CHECK_EQ_INT(dd_metrics_render(m, p), DD_OK);
    const char *txt = dd_prom_data(p, NULL);
    CHECK(strstr(txt, "dedupd_build_info{version=\"") != NULL);
    CHECK(strstr(txt, "# TYPE dedupd_uptime_seconds gauge\n") != NULL);
    const char *pa = strstr(txt, "test_a_total 42\n"), *pb = strstr(txt, "test_b 2.5\n");
    CHECK(pa && pb && pa < pb); /* collectors run in order of addition */
    dd_promtext *t = NULL;
    char err[200] = "";
    CHECK_MSG(dd_promtext_parse(txt, strlen(txt), &t, err, sizeof err) == DD_OK, "%s", err);
    dd_promtext_free(t);

    CHECK_EQ_INT(dd_metrics_remove(m, collect_a, &a), DD_OK);
    CHECK_EQ_INT(dd_metrics_remove(m, collect_a, &a), DD_ERR_NOTFOUND);
    CHECK_EQ_INT(dd_metrics_remove(m, collect_b, &a), DD_ERR_NOTFOUND); /* wrong ud */
    CHECK_EQ_INT(dd_metrics_render(m, p), DD_OK);
    txt = dd_prom_data(p, NULL);
    CHECK(strstr(txt, "test_a_total") == NULL);
    CHECK(strstr(txt, "test_b 2.5\n") != NULL);
    dd_prom_free(p);
    dd_metrics_free(m);
    dd_metrics_free(NULL);
}

int main(void)
{
    test_histogram();
    test_histogram_threads();
    test_writer();
    test_registry();
    TEST_MAIN_END();
}
