/* SPDX-License-Identifier: Apache-2.0
 *
 * test_admin.c - the admin listener over real HTTP on a loopback port:
 * /healthz, /readyz before and after components come up and on stopping
 * (with what is missing in its body), /metrics parsed by the strict
 * parser, 404, nothing listening after free, a taken port named in the
 * error, and admin.listen "" (no listener, readiness still kept).
 */
#include "admin.h"
#include "config.h"
#include "dd.h"
#include "httpget.h"
#include "promtext.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
    test_admin();
    TEST_MAIN_END();
}
