/* SPDX-License-Identifier: Apache-2.0
 *
 * auth.c - who may call what; see auth.h.
 */
#include "auth.h"

#include "addr.h"
#include "dd.h"
#include "log.h"

#include <grpc/grpc_security.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One parsed allow list (rpc.h: rpc.allow_read, rpc.allow_write,
 * rpc.allow_peer). */
struct allow {
    const char *key; /* "rpc.allow_read", static */
    bool any;        /* "*" */
    size_t n;        /* identities; 0 and !any = nobody */
    char **ids;      /* n malloc'd strings, trimmed */
};

struct dd_auth {
    struct allow read;  /* Filter */
    struct allow write; /* RecordDelivery, RecordPlays, ForgetUser */
    struct allow peer;  /* the Cluster service, and calls forwarded by a node */
};

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

static void allow_free(struct allow *a)
{
    for (size_t i = 0; i < a->n; i++) free(a->ids[i]);
    free(a->ids);
    a->ids = NULL;
    a->n = 0;
}

/* Parse LIST (the value of KEY) into *A (rpc.h gives the syntax). With A
 * NULL only check it, allocating nothing; *NAMED tells whether it names
 * identities. Returns 0, DD_ERR_INVALID or DD_ERR_NOMEM, with a message
 * naming KEY; on error *A holds nothing. */
static int allow_parse(const char *key, const char *list, struct allow *a, bool *named, char *err,
                       size_t errlen)
{
    const char *p = list;
    while (blank(*p)) p++;
    size_t len = strlen(p);
    while (len > 0 && blank(p[len - 1])) len--;
    *named = false;
    if (a) *a = (struct allow){.key = key};
    if (len == 1 && p[0] == '*') {
        if (a) a->any = true;
        return DD_OK;
    }
    if (len == 0) return DD_OK; /* nobody */
    const char *end = p + len;
    for (const char *q = p; q <= end;) {
        const char *comma = memchr(q, ',', (size_t)(end - q));
        const char *stop = comma ? comma : end;
        const char *b = q, *e = stop;
        while (b < e && blank(*b)) b++;
        while (e > b && blank(e[-1])) e--;
        if (b == e) {
            if (a) allow_free(a);
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "%s: \"%s\" has an empty entry (a comma-separated list of client "
                           "identities, \"*\" for any client, \"\" for none)",
                           key, list);
        }
        if (e - b == 1 && *b == '*') {
            if (a) allow_free(a);
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "%s: \"*\" (any client) must be the whole list, not one entry of "
                           "\"%s\"",
                           key, list);
        }
        *named = true;
        if (a) {
            char **ids = realloc(a->ids, (a->n + 1) * sizeof *ids);
            char *id = ids ? strndup(b, (size_t)(e - b)) : NULL;
            if (ids) a->ids = ids;
            if (!id) {
                allow_free(a);
                return dd_fail(DD_ERR_NOMEM, err, errlen, "%s: out of memory", key);
            }
            a->ids[a->n++] = id;
        }
        q = stop + 1;
    }
    return DD_OK;
}

int dd_auth_conf_check(const struct dd_auth_conf *conf, const char *listen, char *err,
                       size_t errlen)
{
    if (!conf->tls.cert[0] != !conf->tls.key[0])
        return dd_fail(DD_ERR_INVALID, err, errlen, "%s: must be set together with %s",
                       conf->tls.cert[0] ? "rpc.tls_key" : "rpc.tls_cert",
                       conf->tls.cert[0] ? "rpc.tls_cert" : "rpc.tls_key");
    bool mutual = conf->tls.client_ca[0] != '\0';
    if (mutual && !conf->tls.cert[0])
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "rpc.tls_client_ca: needs rpc.tls_cert and rpc.tls_key (client "
                       "certificates are asked for only over TLS)");
    const char *keys[] = {"rpc.allow_read", "rpc.allow_write", "rpc.allow_peer"};
    const char *lists[] = {conf->allow_read, conf->allow_write, conf->allow_peer};
    for (size_t i = 0; i < DD_ARRAY_LEN(keys); i++) {
        bool named;
        int rc = allow_parse(keys[i], lists[i], NULL, &named, err, errlen);
        if (rc != DD_OK) return rc;
        if (named && !mutual)
            return dd_fail(DD_ERR_INVALID, err, errlen,
                           "%s: \"%s\" names client identities, which only rpc.tls_client_ca "
                           "(mutual TLS) provides; without it use \"*\" (anyone) or \"\" "
                           "(no one)",
                           keys[i], lists[i]);
    }
    if (!mutual && !conf->allow_insecure && !dd_hostport_is_loopback(listen))
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "rpc.listen: \"%s\" is not a loopback address and clients are not "
                       "authenticated (%s): set rpc.tls_cert, rpc.tls_key and "
                       "rpc.tls_client_ca for mutual TLS, or rpc.allow_insecure = true to "
                       "let any peer call every method",
                       listen, conf->tls.cert[0] ? "TLS without rpc.tls_client_ca" : "plaintext");
    return DD_OK;
}

int dd_auth_new(dd_auth **out, const struct dd_auth_conf *conf, char *err, size_t errlen)
{
    *out = NULL;
    dd_auth *a = calloc(1, sizeof *a);
    if (!a) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    bool named;
    int rc = allow_parse("rpc.allow_read", conf->allow_read, &a->read, &named, err, errlen);
    if (rc == DD_OK)
        rc = allow_parse("rpc.allow_write", conf->allow_write, &a->write, &named, err, errlen);
    if (rc == DD_OK)
        rc = allow_parse("rpc.allow_peer", conf->allow_peer, &a->peer, &named, err, errlen);
    if (rc != DD_OK) {
        dd_auth_free(a);
        return rc;
    }
    *out = a;
    return DD_OK;
}

void dd_auth_free(dd_auth *a)
{
    if (!a) return;
    allow_free(&a->read);
    allow_free(&a->write);
    allow_free(&a->peer);
    free(a);
}

/* Plaintext, TLS, or TLS that requires and verifies a client certificate
 * signed by rpc.tls_client_ca. NULL on error (message in err). */
grpc_server_credentials *dd_auth_credentials(const struct dd_tls_conf *conf, char *err,
                                             size_t errlen)
{
    if (!conf->cert[0]) return grpc_insecure_server_credentials_create();
    grpc_server_credentials *c = NULL;
    char *key = NULL, *ca = NULL;
    char *cert = dd_read_file(conf->cert, err, errlen);
    if (!cert) goto out;
    key = dd_read_file(conf->key, err, errlen);
    if (!key) goto out;
    if (conf->client_ca[0]) {
        ca = dd_read_file(conf->client_ca, err, errlen);
        if (!ca) goto out;
        /* grpc would take an empty or wrong file and fail every handshake
         * later, which looks like a client problem; say so now. */
        if (!strstr(ca, "-----BEGIN CERTIFICATE-----")) {
            dd_fail(DD_ERR_INVALID, err, errlen, "rpc.tls_client_ca: %s holds no PEM certificate",
                    conf->client_ca);
            goto out;
        }
    }
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    /* The config copies the PEM text; the options take the config, the
     * credentials the options. */
    grpc_ssl_server_certificate_config *cfg =
        grpc_ssl_server_certificate_config_create(ca, &pair, 1);
    grpc_ssl_server_credentials_options *opts =
        cfg ? grpc_ssl_server_credentials_create_options_using_config(
                  ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                     : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
                  cfg)
            : NULL;
    c = opts ? grpc_ssl_server_credentials_create_with_options(opts) : NULL;
    if (!c)
        dd_fail(DD_ERR_INVALID, err, errlen,
                "rpc.tls_cert/rpc.tls_key/rpc.tls_client_ca: cannot create TLS credentials");
out:
    free(ca);
    free(key);
    free(cert);
    return c;
}

/* Whether one of property NAME's values in CTX is allowed for class C. */
static bool ctx_allows(const dd_auth *auth, enum dd_auth_class c, const grpc_auth_context *ctx,
                       const char *name)
{
    grpc_auth_property_iterator it = grpc_auth_context_find_properties_by_name(ctx, name);
    const grpc_auth_property *p;
    while ((p = grpc_auth_property_iterator_next(&it))) {
        const char *v = p->value;
        size_t len = p->value_length;
        if (v && dd_auth_allows(auth, c, &v, &len, 1)) return true;
    }
    return false;
}

enum dd_auth_class dd_auth_class_of(enum dd_api_method m)
{
    switch (m) {
    case DD_API_FILTER:
    case DD_API_CLUSTER_MAP: return DD_AUTH_READ;
    case DD_API_RECORD_DELIVERY:
    case DD_API_RECORD_PLAYS:
    case DD_API_FORGET_USER: return DD_AUTH_WRITE;
    case DD_API_CLUSTER_STATUS:
    case DD_API_SNAPSHOT_BEGIN:
    case DD_API_SNAPSHOT_READ: return DD_AUTH_PEER;
    default: return DD_AUTH_OPEN;
    }
}

const char *dd_auth_class_key(enum dd_auth_class c)
{
    switch (c) {
    case DD_AUTH_READ: return "rpc.allow_read";
    case DD_AUTH_WRITE: return "rpc.allow_write";
    case DD_AUTH_PEER: return "rpc.allow_peer";
    default: return NULL;
    }
}

/* The allow list of class C, or NULL for the open class. */
static const struct allow *allow_of(const dd_auth *a, enum dd_auth_class c)
{
    switch (c) {
    case DD_AUTH_READ: return &a->read;
    case DD_AUTH_WRITE: return &a->write;
    case DD_AUTH_PEER: return &a->peer;
    default: return NULL;
    }
}

bool dd_auth_allows(const dd_auth *auth, enum dd_auth_class c, const char *const *ids,
                    const size_t *lens, size_t n)
{
    const struct allow *a = allow_of(auth, c);
    if (!a || a->any) return true;
    /* By length too, so an identity with a NUL inside never matches a
     * shorter entry. */
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < a->n; i++)
            if (strlen(a->ids[i]) == lens[j] && memcmp(a->ids[i], ids[j], lens[j]) == 0)
                return true;
    return false;
}

bool dd_auth_forwarded(enum dd_api_method m, bool header)
{
    return header && (m == DD_API_FILTER || m == DD_API_RECORD_DELIVERY ||
                      m == DD_API_RECORD_PLAYS || m == DD_API_FORGET_USER);
}

grpc_status_code dd_auth_call(const dd_auth *auth, grpc_call *call, enum dd_api_method m,
                              bool forwarded, char *msg, size_t msg_cap)
{
    static struct dd_log_limit denied_log;
    /* A forwarded call was checked against its method's class by the node
     * that forwarded it; here the question is whether that node is one. */
    enum dd_auth_class c = forwarded ? DD_AUTH_PEER : dd_auth_class_of(m);
    const struct allow *a = allow_of(auth, c);
    if (!a || a->any) return GRPC_STATUS_OK;
    grpc_auth_context *ctx = grpc_call_auth_context(call);
    bool ok = ctx && (ctx_allows(auth, c, ctx, GRPC_X509_CN_PROPERTY_NAME) ||
                      ctx_allows(auth, c, ctx, GRPC_X509_SAN_PROPERTY_NAME));
    if (!ok) {
        /* Name the client by what grpc calls its identity (the SANs, else
         * the CN); the first one is enough to tell certificates apart. */
        const grpc_auth_property *p = NULL;
        if (ctx) {
            grpc_auth_property_iterator it = grpc_auth_context_peer_identity(ctx);
            p = grpc_auth_property_iterator_next(&it);
        }
        const char *who = p && p->value ? p->value : "(no client certificate)";
        if (forwarded)
            snprintf(msg, msg_cap,
                     "client \"%.200s\" may not forward calls (%s carries %s; "
                     "not in %s)",
                     who, dd_api_method_name(m), DD_CLUSTER_MD_FROM, a->key);
        else
            snprintf(msg, msg_cap, "client \"%.200s\" may not call %s (not in %s)", who,
                     dd_api_method_name(m), a->key);
        dd_log_limited(&denied_log, 10000, DD_LOG_WARN, "rpc",
                       "msg=\"call denied\" method=%s forwarded=%s client=\"%.200s\" "
                       "setting=%s",
                       dd_api_method_path(m), forwarded ? "true" : "false", who, a->key);
    }
    if (ctx) grpc_auth_context_release(ctx);
    return ok ? GRPC_STATUS_OK : GRPC_STATUS_PERMISSION_DENIED;
}
