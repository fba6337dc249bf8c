/* SPDX-License-Identifier: Apache-2.0
 *
 * test_admin.c - the admin listener over real HTTP on a loopback port:
 * /healthz, /readyz before and after components come up and on stopping
 * (with what is missing in its body), /metrics parsed by the strict
 * parser, 404, nothing listening after free, a taken port named in the
 * error, and admin.listen "" (no listener, readiness still kept); and
 * handlers (dd_admin_set_handler): methods, decoded arguments, removal.
 */
#include "admin.h"
#include "config.h"
#include "dd.h"
#include "httpget.h"
#include "promtext.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

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

/* A stand-in for the cluster module: readiness, why, degraded, a page. */
struct fake {
    bool ready, degraded;
    int pages;
};
static bool fake_ready(void *m) { return ((struct fake *)m)->ready; }
static bool fake_why(void *m, char *why, size_t len)
{
    (void)m;
    snprintf(why, len, "cluster: ingest 12345 ms behind");
    return true;
}
static bool fake_degraded(void *m, char *why, size_t len)
{
    snprintf(why, len, "peer 1.1 has another cluster map");
    return ((struct fake *)m)->degraded;
}
static char *fake_page(void *m)
{
    ((struct fake *)m)->pages++;
    return strdup("{\"shards\":2}");
}

/* An optional component (the cluster): not counted until required; then
 * /readyz waits for it and says why with its own words; its degraded note
 * and its page (served only while attached). */
/* A listener on a free loopback port, ingest not required; its address
 * in ADDR (64 bytes). */
static dd_admin *new_admin(struct dd_config *cfg, char *addr)
{
    char err[256] = "";
    REQUIRE(dd_config_init(cfg) == DD_OK);
    REQUIRE(dd_config_set(cfg, "admin.listen", "127.0.0.1:0", err, sizeof err) == DD_OK);
    dd_admin *a = NULL;
    REQUIRE(dd_admin_new(&a, &cfg->admin, false, err, sizeof err) == DD_OK);
    snprintf(addr, 64, "127.0.0.1:%d", dd_admin_port(a));
    return a;
}

static void test_required_component(void)
{
    struct dd_config cfg;
    char addr[64];
    dd_admin *a = new_admin(&cfg, addr);
    int status = 0;
    char *body = NULL;
    struct fake f = {.ready = false};
    dd_admin_set_ready(a, DD_ADMIN_STORE, true);
    dd_admin_set_ready(a, DD_ADMIN_RPC, true);
    CHECK(get(addr, "/readyz", &status, &body) == DD_OK && status == 200);
    free(body);
    /* Not attached: no page. */
    dd_admin_set_page(a, DD_ADMIN_CLUSTER, "/cluster", fake_page);
    CHECK(get(addr, "/cluster", &status, &body) == DD_OK && status == 404);
    free(body);
    dd_admin_require(a, DD_ADMIN_CLUSTER);
    CHECK(get(addr, "/readyz", &status, &body) == DD_OK && status == 503);
    CHECK_MSG(body && strstr(body, "cluster not ready"), "body: %s", body ? body : "(null)");
    free(body);
    dd_admin_set_why(a, DD_ADMIN_CLUSTER, fake_why);
    dd_admin_set_degraded(a, DD_ADMIN_CLUSTER, fake_degraded);
    REQUIRE(dd_admin_attach(a, DD_ADMIN_CLUSTER, &f, NULL, fake_ready) == DD_OK);
    CHECK(get(addr, "/readyz", &status, &body) == DD_OK && status == 503);
    CHECK_MSG(body && strstr(body, "not ready: cluster: ingest 12345 ms behind"), "body: %s",
              body ? body : "(null)");
    free(body);
    CHECK(get(addr, "/metrics", &status, &body) == DD_OK && status == 200);
    CHECK(body && strstr(body, "dedupd_component_ready{component=\"cluster\"} 0\n"));
    free(body);
    f.ready = true;
    CHECK(get(addr, "/readyz", &status, &body) == DD_OK && status == 200);
    CHECK_MSG(body && strcmp(body, "ready\n") == 0, "body: %s", body ? body : "(null)");
    free(body);
    f.degraded = true;
    CHECK(get(addr, "/readyz", &status, &body) == DD_OK && status == 200);
    CHECK_MSG(body && strstr(body, "ready; degraded: peer 1.1 has another cluster map"),
              "body: %s", body ? body : "(null)");
    free(body);
    CHECK(get(addr, "/cluster", &status, &body) == DD_OK && status == 200);
    CHECK_MSG(body && strcmp(body, "{\"shards\":2}") == 0, "body: %s", body ? body : "(null)");
    free(body);
    CHECK_EQ_INT(f.pages, 1);
    dd_admin_detach(a, DD_ADMIN_CLUSTER);
    CHECK(get(addr, "/cluster", &status, &body) == DD_OK && status == 404);
    free(body);
    CHECK(get(addr, "/readyz", &status, &body) == DD_OK && status == 503);
    free(body);
    CHECK_EQ_INT(f.pages, 1);
    dd_admin_free(a);
    dd_config_free(&cfg);
}

/* A handler echoes its method and every value of "item" (URL-decoded,
 * in order); the path answers loopback clients, other methods get 405,
 * and after removal the path is gone. */
static void collect_arg(void *ud, const char *v, size_t len)
{
    char *out = ud;
    size_t n = strlen(out);
    snprintf(out + n, 256 - n, "[%.*s]", (int)len, v);
}

static char *echo(void *ud, const dd_admin_request *r, unsigned *status, const char **ctype)
{
    (*(int *)ud)++;
    char items[256] = "";
    dd_admin_args(r, "item", collect_arg, items);
    size_t ul = 0;
    const char *u = dd_admin_arg(r, "user", &ul);
    *status = strcmp(dd_admin_method(r), "DELETE") == 0 ? 404 : 200;
    *ctype = "text/plain";
    char *body = malloc(400);
    if (body)
        snprintf(body, 400, "%s user=%.*s items=%s", dd_admin_method(r), u ? (int)ul : 6,
                 u ? u : "(none)", items);
    return body;
}

static void test_handlers(void)
{
    struct dd_config cfg;
    char addr[64], err[256] = "";
    dd_admin *a = new_admin(&cfg, addr);
    int calls = 0, status = 0;
    char *body = NULL;
    size_t len;
    CHECK_EQ_INT(dd_admin_set_handler(a, "/echo", echo, &calls, false), DD_OK);
    CHECK(dd_http_request(addr, "GET", "/echo?user=a%2Cb&item=x&item=y%20z&item=&other=1", 5000,
                          &status, &body, &len, err, sizeof err) == DD_OK);
    CHECK_EQ_INT(status, 200);
    CHECK_MSG(body && strcmp(body, "GET user=a,b items=[x][y z][]") == 0, "%s", body);
    free(body);
    /* A value cut by a NUL byte is no value. */
    CHECK(dd_http_request(addr, "POST", "/echo?item=a%00b&item=c", 5000, &status, &body, &len,
                          err, sizeof err) == DD_OK);
    CHECK_MSG(body && strcmp(body, "POST user=(none) items=[c]") == 0, "%s", body);
    free(body);
    CHECK(dd_http_request(addr, "DELETE", "/echo", 5000, &status, &body, &len, err,
                          sizeof err) == DD_OK && status == 404);
    free(body);
    CHECK(dd_http_request(addr, "PUT", "/echo", 5000, &status, &body, &len, err, sizeof err) ==
              DD_OK && status == 405);
    free(body);
    CHECK_EQ_INT(calls, 3);
    CHECK_EQ_INT(dd_admin_set_handler(a, "/echo", NULL, NULL, false), DD_OK);
    CHECK(get(addr, "/echo", &status, &body) == DD_OK && status == 404);
    free(body);
    for (int i = 0; i < 4; i++) {
        static const char *const paths[] = {"/a", "/b", "/c", "/d"};
        CHECK_EQ_INT(dd_admin_set_handler(a, paths[i], echo, &calls, false), DD_OK);
    }
    CHECK_EQ_INT(dd_admin_set_handler(a, "/e", echo, &calls, false), DD_ERR_LIMIT);
    dd_admin_free(a);
    dd_config_free(&cfg);
}

/* STATUS of METHOD PATH with HEADERS on ADDR (0 when it could not ask). */
static int ask(const char *addr, const char *method, const char *path, const char *headers)
{
    int status = 0;
    char *body = NULL, err[200];
    size_t len;
    if (dd_http_request_h(addr, method, path, headers, 5000, &status, &body, &len, err,
                          sizeof err) != DD_OK)
        fprintf(stderr, "%s %s: %s\n", method, path, err);
    free(body);
    return status;
}

static void test_token_parse(void)
{
    char tok[DD_ADMIN_TOKEN_MAX + 1], err[256];
    CHECK(dd_admin_token_parse("  0123456789abcdef\r\n", tok, sizeof tok, err, sizeof err) ==
          DD_OK);
    CHECK_STR(tok, "0123456789abcdef");
    CHECK(dd_admin_token_parse("short\n", tok, sizeof tok, err, sizeof err) == DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "admin.token_file"), "%s", err);
    CHECK(dd_admin_token_parse("0123456789 abcdef", tok, sizeof tok, err, sizeof err) ==
          DD_ERR_INVALID);
    CHECK(dd_admin_token_parse("0123456789abcdef\nsecond", tok, sizeof tok, err, sizeof err) ==
          DD_ERR_INVALID);
    CHECK(dd_admin_token_parse("", tok, sizeof tok, err, sizeof err) == DD_ERR_INVALID);
}

/* An operator page: off (403) without admin.token_file; with it the
 * token, no cross-site request and no form content type for writes. */
static void test_operator_page(void)
{
    struct dd_config cfg;
    char addr[64], err[256] = "";
    int calls = 0;
    dd_admin *a = new_admin(&cfg, addr);
    CHECK_EQ_INT(dd_admin_set_handler(a, "/op", echo, &calls, true), DD_OK);
    CHECK_EQ_INT(ask(addr, "GET", "/op?user=u", NULL), 403);
    CHECK_EQ_INT(calls, 0);
    dd_admin_free(a);
    dd_config_free(&cfg);

    char path[] = "/tmp/dd-admin-token-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, "tok-0123456789abcdef\n", 21) == 21);
    close(fd);
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "admin.listen", "127.0.0.1:0", err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "admin.token_file", path, err, sizeof err) == DD_OK);
    REQUIRE(dd_admin_new(&a, &cfg.admin, false, err, sizeof err) == DD_OK);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", dd_admin_port(a));
    CHECK_EQ_INT(dd_admin_set_handler(a, "/op", echo, &calls, true), DD_OK);
    const char *tok = "Authorization: Bearer tok-0123456789abcdef\r\n";
    const char *json = "Authorization: Bearer tok-0123456789abcdef\r\n"
                       "Content-Type: application/json\r\n";
    CHECK_EQ_INT(ask(addr, "GET", "/op?user=u", NULL), 401);
    CHECK_EQ_INT(ask(addr, "GET", "/op?user=u", "Authorization: Bearer tok-0123456789abcdeF\r\n"),
                 401);
    CHECK_EQ_INT(ask(addr, "GET", "/op?user=u", "Authorization: Bearer tok-0123456789abcde\r\n"),
                 401);
    CHECK_EQ_INT(ask(addr, "GET", "/op?user=u", tok), 200);
    CHECK_EQ_INT(calls, 1);
    CHECK_EQ_INT(ask(addr, "POST", "/op?user=u", tok), 415);
    char h[512];
    snprintf(h, sizeof h, "%sContent-Type: application/x-www-form-urlencoded\r\n", tok);
    CHECK_EQ_INT(ask(addr, "POST", "/op?user=u", h), 415);
    snprintf(h, sizeof h, "%sContent-Type: Text/Plain; charset=utf-8\r\n", tok);
    CHECK_EQ_INT(ask(addr, "POST", "/op?user=u", h), 415);
    snprintf(h, sizeof h, "%sOrigin: http://evil.example\r\n", json);
    CHECK_EQ_INT(ask(addr, "POST", "/op?user=u", h), 403);
    snprintf(h, sizeof h, "%sSec-Fetch-Site: same-site\r\n", json);
    CHECK_EQ_INT(ask(addr, "POST", "/op?user=u", h), 403);
    snprintf(h, sizeof h, "%sSec-Fetch-Site: none\r\n", json);
    CHECK_EQ_INT(ask(addr, "POST", "/op?user=u", h), 200);
    CHECK_EQ_INT(ask(addr, "POST", "/op?user=u", json), 200);
    CHECK_EQ_INT(calls, 3);
    dd_admin_free(a);
    dd_config_free(&cfg);
    unlink(path);

    /* A token file that is not a token stops the start, naming the key. */
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, "short\n", 6) == 6);
    close(fd);
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "admin.token_file", path, err, sizeof err) == DD_OK);
    a = NULL;
    CHECK(dd_admin_new(&a, &cfg.admin, false, err, sizeof err) == DD_ERR_INVALID && !a);
    CHECK_MSG(strstr(err, "admin.token_file"), "%s", err);
    unlink(path);
    REQUIRE(dd_config_set(&cfg, "admin.token_file", path, err, sizeof err) == DD_OK);
    CHECK(dd_admin_new(&a, &cfg.admin, false, err, sizeof err) == DD_ERR_INVALID && !a);
    CHECK_MSG(strstr(err, "admin.token_file"), "%s", err);
    dd_config_free(&cfg);
}

int main(void)
{
    test_admin();
    test_required_component();
    test_handlers();
    test_token_parse();
    test_operator_page();
    TEST_MAIN_END();
}
