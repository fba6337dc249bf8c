/* SPDX-License-Identifier: Apache-2.0
 *
 * dedupctl_trace.c - see dedupctl_trace.h.
 */
#include "dedupctl_trace.h"

#include "dd.h"
#include "httpget.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A growing path with percent-encoded arguments. */
struct path {
    char *s;
    size_t len, cap;
    bool nomem;
};

static void put(struct path *p, const char *s, size_t n)
{
    if (p->nomem) return;
    if (p->len + n + 1 > p->cap) {
        size_t cap = (p->len + n + 1) * 2;
        char *ns = realloc(p->s, cap);
        if (!ns) {
            p->nomem = true;
            return;
        }
        p->s = ns;
        p->cap = cap;
    }
    memcpy(p->s + p->len, s, n);
    p->len += n;
    p->s[p->len] = '\0';
}

/* "&KEY=" (or "?KEY=" first) and VALUE percent-encoded (RFC 3986:
 * everything but unreserved characters). */
static void arg(struct path *p, const char *key, const char *value)
{
    put(p, strchr(p->s ? p->s : "", '?') ? "&" : "?", 1);
    put(p, key, strlen(key));
    put(p, "=", 1);
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *v = (const unsigned char *)value; *v; v++) {
        if ((*v >= 'A' && *v <= 'Z') || (*v >= 'a' && *v <= 'z') || (*v >= '0' && *v <= '9') ||
            *v == '-' || *v == '_' || *v == '.' || *v == '~') {
            put(p, (const char *)v, 1);
        } else {
            char e[3] = {'%', hex[*v >> 4], hex[*v & 15]};
            put(p, e, 3);
        }
    }
}

/* Run METHOD PATH, with TOKEN (NULL: none) as bearer token and writes as
 * JSON (admin.h: what an operator page wants), and parse the JSON answer
 * into *ROOT. */
static int ask(const char *addr, int timeout_ms, const char *method, const char *token,
               struct path *p, json_object **root, int *http_status, char *err, size_t errlen)
{
    *root = NULL;
    if (p->nomem) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    int status;
    char *body;
    size_t len;
    char headers[DD_HTTP_HEADERS_MAX + 1];
    int hn = snprintf(headers, sizeof headers, "%s%s%s%s", token ? "Authorization: Bearer " : "",
                      token ? token : "", token ? "\r\n" : "",
                      strcmp(method, "GET") != 0 ? "Content-Type: application/json\r\n" : "");
    if (hn < 0 || (size_t)hn >= sizeof headers)
        return dd_fail(DD_ERR_INVALID, err, errlen, "the admin token is too long");
    int rc = dd_http_request_h(addr, method, p->s, headers, timeout_ms, &status, &body, &len, err,
                               errlen);
    if (rc != DD_OK) return rc;
    json_object *o = json_tokener_parse(body);
    json_object *e;
    if (status != 200) {
        *http_status = status;
        const char *msg =
            o && json_object_object_get_ex(o, "error", &e) ? json_object_get_string(e) : body;
        rc = dd_fail(status >= 500   ? DD_ERR_UNAVAILABLE
                     : status == 404 ? DD_ERR_NOTFOUND
                                     : DD_ERR_INVALID,
                     err, errlen, "%s (HTTP %d)", msg, status);
        if (status == 404 && !o)
            dd_set_err(err, errlen, "%s has no %.*s (an older dedupd?)", addr,
                       (int)strcspn(p->s, "?"), p->s);
        json_object_put(o);
        free(body);
        return rc;
    }
    free(body);
    if (!o) return dd_fail(DD_ERR_INVALID, err, errlen, "%s: the answer is not JSON", addr);
    *root = o;
    return DD_OK;
}

static const char *str_of(json_object *o, const char *key, const char *dflt)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !v) return dflt;
    return json_object_get_string(v);
}

/* ROOT as one line of JSON on O's stream. */
static void print_json(struct dedupctl_out *o, json_object *root)
{
    fprintf(o->f, "%s\n",
            json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                     JSON_C_TO_STRING_NOSLASHESCAPE));
}

int dedupctl_why(const char *addr, const char *token, int timeout_ms, const char *user,
                 const char *scene, uint32_t lookback_days, uint32_t min_kept, char *const *also,
                 size_t n_also, char *const *items, size_t n, struct dedupctl_out *o, char *err,
                 size_t errlen)
{
    FILE *out = o->f;
    struct path p = {0};
    put(&p, "/why", 4);
    arg(&p, "user", user);
    if (scene[0]) arg(&p, "scene", scene);
    if (lookback_days) {
        char lb[16];
        snprintf(lb, sizeof lb, "%" PRIu32, lookback_days);
        arg(&p, "lookback", lb);
    }
    if (min_kept) {
        char mk[16];
        snprintf(mk, sizeof mk, "%" PRIu32, min_kept);
        arg(&p, "min_kept", mk);
    }
    for (size_t i = 0; i < n_also; i++) arg(&p, "also_scene", also[i]);
    for (size_t i = 0; i < n; i++) arg(&p, "item", items[i]);
    json_object *root;
    int rc = ask(addr, timeout_ms, "GET", token, &p, &root, &o->http_status, err, errlen);
    free(p.s);
    if (rc != DD_OK) return rc;
    json_object *dg0;
    o->degraded = json_object_object_get_ex(root, "degraded", &dg0) && json_object_get_boolean(dg0);
    if (o->json) {
        print_json(o, root);
        json_object_put(root);
        return DD_OK;
    }
    json_object *arr, *tr;
    bool traced = json_object_object_get_ex(root, "traced", &tr) && json_object_get_boolean(tr);
    if (traced)
        fprintf(out, "user %s: traced since %s\n", user, str_of(root, "since", "?"));
    else
        fprintf(out,
                "user %s: no trace is kept for this user (the filter's and Redis' verdicts "
                "only)\n",
                user);
    json_object *dg;
    if (json_object_object_get_ex(root, "degraded", &dg) && json_object_get_boolean(dg))
        fprintf(out, "warning: Redis did not answer: deliveries are not known\n");
    if (!json_object_object_get_ex(root, "items", &arr) ||
        !json_object_is_type(arr, json_type_array)) {
        json_object_put(root);
        return dd_fail(DD_ERR_INVALID, err, errlen, "%s/why: no item list", addr);
    }
    if (min_kept) fprintf(out, "lookback used: %s days\n", str_of(root, "lookback_used_days", "?"));
    size_t m = json_object_array_length(arr);
    for (size_t i = 0; i < m; i++) {
        json_object *it = json_object_array_get_idx(arr, i);
        const char *sc = n_also ? str_of(it, "scene", NULL) : NULL;
        fprintf(out, "%-20s %-9s %-24s %-24s %s%s%s\n", str_of(it, "item", "?"),
                str_of(it, "verdict", "?"), str_of(it, "time", "-"), str_of(it, "source", "-"),
                str_of(it, "detail", ""), sc ? " in scene " : "", sc ? sc : "");
    }
    json_object_put(root);
    return DD_OK;
}

int dedupctl_trace(const char *addr, const char *token, int timeout_ms, const char *action,
                   const char *user, struct dedupctl_out *o, char *err, size_t errlen)
{
    FILE *out = o->f;
    struct path p = {0};
    put(&p, "/trace", 6);
    const char *method = "GET";
    if (strcmp(action, "add") == 0)
        method = "POST";
    else if (strcmp(action, "remove") == 0)
        method = "DELETE";
    if (user) arg(&p, "user", user);
    json_object *root;
    int rc = ask(addr, timeout_ms, method, token, &p, &root, &o->http_status, err, errlen);
    free(p.s);
    if (rc != DD_OK) return rc;
    if (o->json) {
        print_json(o, root);
    } else if (strcmp(method, "GET") == 0) {
        json_object *arr;
        if (!json_object_object_get_ex(root, "users", &arr) ||
            !json_object_is_type(arr, json_type_array)) {
            json_object_put(root);
            return dd_fail(DD_ERR_INVALID, err, errlen, "%s/trace: no user list", addr);
        }
        size_t m = json_object_array_length(arr);
        fprintf(out, "%zu traced user%s\n", m, m == 1 ? "" : "s");
        for (size_t i = 0; i < m; i++) {
            json_object *u = json_object_array_get_idx(arr, i), *fc;
            bool from_config =
                json_object_object_get_ex(u, "from_config", &fc) && json_object_get_boolean(fc);
            fprintf(out, "%-24s since %s  (%s)\n", str_of(u, "user", "?"), str_of(u, "since", "?"),
                    from_config ? "trace.users" : "added at run time");
        }
    } else if (strcmp(method, "POST") == 0) {
        json_object *a;
        bool added = json_object_object_get_ex(root, "added", &a) && json_object_get_boolean(a);
        fprintf(out, "%s %s; traced since %s\n", user, added ? "added" : "was traced already",
                str_of(root, "since", "?"));
    } else {
        fprintf(out, "%s removed; its trace records are deleted\n", user);
    }
    json_object_put(root);
    return DD_OK;
}
