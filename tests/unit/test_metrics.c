/* SPDX-License-Identifier: Apache-2.0
 *
 * test_metrics.c - histograms (buckets, sum, quantiles, concurrent
 * observers), the Prometheus text writer (exact output, escaping), the
 * strict parser (round trip, and each malformation it must reject), the
 * collector registry, and the admin listener over real HTTP on a loopback
 * port (/healthz, /readyz before and after components come up and on
 * stopping, /metrics parsing, 404), and the log behaviour operators rely
 * on (one line per event, rate limiting, reopen after rename).
 */
#include "admin.h"
#include "config.h"
#include "dd.h"
#include "httpget.h"
#include "log.h"
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

static void expect_reject(const char *text, const char *why_contains)
{
    dd_promtext *t = (dd_promtext *)1;
    char err[200] = "";
    int rc = dd_promtext_parse(text, strlen(text), &t, err, sizeof err);
    CHECK_MSG(rc == DD_ERR_INVALID, "accepted: %s", text);
    CHECK(t == NULL);
    CHECK_MSG(strstr(err, why_contains) != NULL, "error \"%s\" lacks \"%s\"", err,
              why_contains);
}

static void test_parser_rejects(void)
{
    expect_reject("a 1\n", "no # TYPE");
    expect_reject("# HELP a x\na 1\n", "no # TYPE");
    expect_reject("# TYPE a counter\na 1\n# TYPE b counter\nb 1\na 2\n", "not of family");
    expect_reject("# TYPE a counter\n# TYPE a counter\n", "second # TYPE");
    expect_reject("# TYPE a counter\n# TYPE b gauge\n# TYPE a gauge\n", "appears twice");
    expect_reject("# TYPE a foo\n", "unknown type");
    expect_reject("# TYPE a counter\na{x=\"1} 1\n", "unterminated");
    expect_reject("# TYPE a counter\na{x=\"\\t\"} 1\n", "bad escape");
    expect_reject("# TYPE a counter\na{x=\"1\",x=\"2\"} 1\n", "twice");
    expect_reject("# TYPE a counter\na one\n", "bad value");
    expect_reject("# TYPE a counter\na 1 2 3\n", "junk");
    expect_reject("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "+Inf");
    expect_reject("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
                  "no _sum");
    expect_reject("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\n",
                  "no _count");
    expect_reject("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
                  "+Inf bucket is");
    expect_reject("# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n",
                  "not ascending");
    expect_reject("# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\n",
                  "decrease");
    expect_reject("# TYPE h histogram\nh_total 1\n", "_bucket, _sum or _count");
    expect_reject("# TYPE h histogram\nh_sum 1\n", "before the buckets");
    /* And a valid file with a timestamp, comments, CRLF and blank lines. */
    const char *ok = "# a comment\r\n\n# TYPE a gauge\na{b=\"c\"} 1.5e3 1700000000000\r\n"
                     "# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\n"
                     "h_sum 0\nh_count 0\n";
    dd_promtext *t = NULL;
    char err[200] = "";
    CHECK_MSG(dd_promtext_parse(ok, strlen(ok), &t, err, sizeof err) == DD_OK, "%s", err);
    if (t) {
        size_t found;
        CHECK(dd_promtext_sum(t, "a", "b", "c", &found) == 1500.0 && found == 1);
        CHECK(dd_promtext_sum(t, "a", "b", "x", &found) == 0.0 && found == 0);
    }
    dd_promtext_free(t);
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

static int get(const char *addr, const char *path, int *status, char **body)
{
    size_t len;
    char err[200];
    int rc = dd_http_get(addr, path, 5000, status, body, &len, err, sizeof err);
    if (rc) fprintf(stderr, "GET %s%s: %s\n", addr, path, err);
    return rc;
}

static void test_admin(void)
{
    struct dd_config cfg;
    char err[256] = "";
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "admin.listen", "127.0.0.1:0", err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "ingest.enabled", "false", err, sizeof err) == DD_OK);
    dd_admin *a = NULL;
    CHECK_MSG(dd_admin_new(&a, &cfg.admin, cfg.ingest.enabled, err, sizeof err) == DD_OK, "%s", err);
    REQUIRE(a);
    int port = dd_admin_port(a);
    CHECK(port > 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);

    int status = 0;
    char *body = NULL;
    CHECK(get(addr, "/healthz", &status, &body) == DD_OK && status == 200);
    free(body);
    CHECK(get(addr, "/readyz", &status, &body) == DD_OK && status == 503);
    CHECK_MSG(body && strstr(body, "store"), "body: %s", body ? body : "(null)");
    free(body);
    CHECK(get(addr, "/nope", &status, &body) == DD_OK && status == 404);
    free(body);
    CHECK(get(addr, "/metrics", &status, &body) == DD_OK && status == 200);
    dd_promtext *t = NULL;
    CHECK_MSG(body && dd_promtext_parse(body, strlen(body), &t, err, sizeof err) == DD_OK,
              "%s", err);
    if (t) CHECK_EQ_INT(dd_promtext_sum(t, "dedupd_ready", NULL, NULL, NULL), 0);
    dd_promtext_free(t);
    free(body);

    /* Readiness follows the components; stopping wins over everything. */
    dd_admin_set_ready(a, DD_ADMIN_STORE, true);
    CHECK(get(addr, "/readyz", &status, &body) == DD_OK && status == 503);
    CHECK_MSG(body && strstr(body, "grpc"), "body: %s", body ? body : "(null)");
    free(body);
    dd_admin_set_ready(a, DD_ADMIN_RPC, true);
    CHECK(get(addr, "/readyz", &status, &body) == DD_OK && status == 200);
    free(body);
    CHECK(get(addr, "/metrics", &status, &body) == DD_OK && status == 200);
    CHECK(body && strstr(body, "\ndedupd_ready 1\n"));
    free(body);
    dd_admin_stopping(a);
    CHECK(get(addr, "/readyz", &status, &body) == DD_OK && status == 503);
    CHECK_MSG(body && strstr(body, "stopping"), "body: %s", body ? body : "(null)");
    free(body);
    dd_admin_set_ready(a, DD_ADMIN_RPC, true);
    CHECK(get(addr, "/readyz", &status, &body) == DD_OK && status == 503);
    free(body);
    CHECK(get(addr, "/healthz", &status, &body) == DD_OK && status == 200);
    free(body);
    dd_admin_free(a);
    /* Gone: nothing listens any more. */
    CHECK(dd_http_get(addr, "/healthz", 1000, &status, &body, &(size_t){0}, err,
                               sizeof err) == DD_ERR_UNAVAILABLE);

    /* A taken port is an error that names the address. */
    dd_admin *b = NULL, *c = NULL;
    REQUIRE(dd_config_set(&cfg, "admin.listen", "127.0.0.1:0", err, sizeof err) == DD_OK);
    REQUIRE(dd_admin_new(&b, &cfg.admin, cfg.ingest.enabled, err, sizeof err) == DD_OK);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", dd_admin_port(b));
    REQUIRE(dd_config_set(&cfg, "admin.listen", addr, err, sizeof err) == DD_OK);
    err[0] = '\0';
    CHECK(dd_admin_new(&c, &cfg.admin, cfg.ingest.enabled, err, sizeof err) != DD_OK && c == NULL);
    CHECK_MSG(strstr(err, addr) != NULL, "err: %s", err);
    dd_admin_free(b);

    /* admin.listen "" turns the listener off but readiness still works. */
    REQUIRE(dd_config_set(&cfg, "admin.listen", "", err, sizeof err) == DD_OK);
    CHECK(dd_admin_new(&c, &cfg.admin, cfg.ingest.enabled, err, sizeof err) == DD_OK && c);
    CHECK_EQ_INT(dd_admin_port(c), 0);
    dd_admin_free(c);
    dd_admin_free(NULL);
    dd_config_free(&cfg);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* The logging the admin side relies on (log.h): one line per event even
 * when a field carries a newline, rate limiting with suppressed=N, and
 * reopening after a rename (what SIGHUP does for logrotate). */
static void test_log(void)
{
    char dir[] = "/tmp/dedupd-test-log-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char path[128], rotated[140], err[200];
    snprintf(path, sizeof path, "%s/d.log", dir);
    snprintf(rotated, sizeof rotated, "%s.1", path);
    REQUIRE(dd_log_open_file(path, err, sizeof err) == DD_OK);
    dd_info("test", "msg=\"bad id\" id=\"a\nts=forged level=error\"");
    struct dd_log_limit lim = {0, 0};
    for (int i = 0; i < 5; i++) dd_log_limited(&lim, 60000, DD_LOG_WARN, "test", "msg=limited");
    lim.last_ns -= (int64_t)61000 * 1000000; /* as if a minute went by */
    dd_log_limited(&lim, 60000, DD_LOG_WARN, "test", "msg=limited");
    const char *txt = slurp(path);
    REQUIRE(txt);
    int lines = 0;
    for (const char *c = txt; *c; c++) lines += *c == '\n';
    CHECK_EQ_INT(lines, 3); /* the event, the first limited line, the one after a minute */
    CHECK(strstr(txt, "id=\"a?ts=forged level=error\"") != NULL);
    CHECK(strstr(txt, "msg=limited suppressed=4\n") != NULL);
    REQUIRE(rename(path, rotated) == 0);
    CHECK_EQ_INT(dd_log_reopen(), DD_OK);
    dd_info("test", "msg=after");
    txt = slurp(path);
    CHECK(txt && strstr(txt, "msg=after") && !strstr(txt, "limited"));
    txt = slurp(rotated);
    CHECK(txt && !strstr(txt, "msg=after"));
    unlink(rotated);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_histogram();
    test_histogram_threads();
    test_writer();
    test_parser_rejects();
    test_registry();
    test_admin();
    test_log(); /* last: it sends this process's log lines to a file */
    TEST_MAIN_END();
}
