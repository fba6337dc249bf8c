/* SPDX-License-Identifier: Apache-2.0
 *
 * test_promtext.c - the strict Prometheus text parser of the client
 * library (tools/lib/promtext.h): each malformation it must reject, with a
 * message saying why, and a valid file with comments, CRLF, blank lines
 * and a timestamp read to the right sums.
 */
#include "dd.h"
#include "promtext.h"
#include "testlib.h"

#include <stdio.h>
#include <string.h>

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

int main(void)
{
    test_parser_rejects();
    TEST_MAIN_END();
}
