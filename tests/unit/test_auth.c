/* SPDX-License-Identifier: Apache-2.0
 *
 * test_auth.c - who may call what (auth.h): every method's class, the
 * peer class apart from readers and writers (a writer may not call
 * SnapshotBegin or SnapshotRead, issue 26 case 5), identities matched byte
 * for byte, and the configuration checks of rpc.allow_peer (its syntax,
 * and "*" refused in a cluster under mutual TLS), the TLS settings'
 * checks and credentials, and a call's check (dd_auth_call) for a client
 * without a certificate, plain and forwarded.
 */
#include "auth.h"
#include "config.h"
#include "dd.h"
#include "testlib.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

static void test_classes(void)
{
    CHECK_EQ_INT(dd_auth_class_of(DD_API_FILTER), DD_AUTH_READ);
    CHECK_EQ_INT(dd_auth_class_of(DD_API_RECORD_DELIVERY), DD_AUTH_WRITE);
    CHECK_EQ_INT(dd_auth_class_of(DD_API_RECORD_PLAYS), DD_AUTH_WRITE);
    CHECK_EQ_INT(dd_auth_class_of(DD_API_FORGET_USER), DD_AUTH_WRITE);
    CHECK_EQ_INT(dd_auth_class_of(DD_API_HEALTH_CHECK), DD_AUTH_OPEN);
    /* The Cluster service is the peers' alone: not the read class (Status
     * used to be) nor the write class (SnapshotBegin/Read used to be). */
    CHECK_EQ_INT(dd_auth_class_of(DD_API_CLUSTER_STATUS), DD_AUTH_PEER);
    CHECK_EQ_INT(dd_auth_class_of(DD_API_SNAPSHOT_BEGIN), DD_AUTH_PEER);
    CHECK_EQ_INT(dd_auth_class_of(DD_API_SNAPSHOT_READ), DD_AUTH_PEER);
    CHECK_EQ_INT(dd_auth_class_of(DD_API_UNKNOWN), DD_AUTH_OPEN);
    CHECK_STR(dd_auth_class_key(DD_AUTH_PEER), "rpc.allow_peer");
    CHECK_STR(dd_auth_class_key(DD_AUTH_READ), "rpc.allow_read");
    CHECK_STR(dd_auth_class_key(DD_AUTH_WRITE), "rpc.allow_write");
    CHECK(dd_auth_class_key(DD_AUTH_OPEN) == NULL);
}

/* Whether one identity ID is allowed for class C. */
static bool allows(const dd_auth *a, enum dd_auth_class c, const char *id)
{
    size_t len = strlen(id);
    return dd_auth_allows(a, c, &id, &len, 1);
}

static dd_auth *auth_of(const char *rd, const char *wr, const char *peer)
{
    struct dd_config cfg;
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    char err[256] = "";
    REQUIRE(dd_config_set(&cfg, "rpc.allow_read", rd, err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "rpc.allow_write", wr, err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "rpc.allow_peer", peer, err, sizeof err) == DD_OK);
    dd_auth *a = NULL;
    CHECK_MSG(dd_auth_new(&a, &cfg.rpc.auth, err, sizeof err) == DD_OK, "%s", err);
    dd_config_free(&cfg);
    REQUIRE(a != NULL);
    return a;
}

static void test_peer_class(void)
{
    dd_auth *a = auth_of("recall", "feed, dedupd-migrate", " dedupd-node , dedupd.default.svc ");
    enum dd_auth_class begin = dd_auth_class_of(DD_API_SNAPSHOT_BEGIN);
    enum dd_auth_class read = dd_auth_class_of(DD_API_SNAPSHOT_READ);
    enum dd_auth_class status = dd_auth_class_of(DD_API_CLUSTER_STATUS);
    /* A writer and a reader may not copy the store or ask a node's state. */
    CHECK(!allows(a, begin, "feed"));
    CHECK(!allows(a, read, "feed"));
    CHECK(!allows(a, status, "feed"));
    CHECK(!allows(a, begin, "recall"));
    CHECK(!allows(a, status, "recall"));
    CHECK(!allows(a, read, "dedupd-migrate"));
    /* The nodes may, by either entry (trimmed). */
    CHECK(allows(a, begin, "dedupd-node"));
    CHECK(allows(a, read, "dedupd.default.svc"));
    CHECK(allows(a, status, "dedupd-node"));
    /* ... and are not readers or writers for it. */
    CHECK(!allows(a, DD_AUTH_READ, "dedupd-node"));
    CHECK(!allows(a, DD_AUTH_WRITE, "dedupd-node"));
    CHECK(allows(a, DD_AUTH_READ, "recall"));
    CHECK(allows(a, DD_AUTH_WRITE, "feed"));
    /* Byte for byte: no prefix, no case folding, no NUL tricks. */
    CHECK(!allows(a, DD_AUTH_PEER, "dedupd-nod"));
    CHECK(!allows(a, DD_AUTH_PEER, "dedupd-node2"));
    CHECK(!allows(a, DD_AUTH_PEER, "DEDUPD-NODE"));
    const char *nul = "dedupd-node\0x";
    size_t nul_len = 13;
    CHECK(!dd_auth_allows(a, DD_AUTH_PEER, &nul, &nul_len, 1));
    /* Any one of a client's identities (CN, SANs) is enough. */
    const char *ids[] = {"feed", "localhost", "dedupd-node"};
    size_t lens[] = {4, 9, 11};
    CHECK(dd_auth_allows(a, DD_AUTH_PEER, ids, lens, 3));
    CHECK(!dd_auth_allows(a, DD_AUTH_PEER, ids, lens, 2));
    /* No identity at all (plaintext): only "*" lets it through. */
    CHECK(!dd_auth_allows(a, DD_AUTH_PEER, NULL, NULL, 0));
    CHECK(dd_auth_allows(a, DD_AUTH_OPEN, NULL, NULL, 0));
    dd_auth_free(a);

    a = auth_of("*", "*", "");
    CHECK(!allows(a, DD_AUTH_PEER, "dedupd-node")); /* "" = nobody */
    CHECK(allows(a, DD_AUTH_WRITE, "anyone"));
    dd_auth_free(a);
    a = auth_of("", "", "*");
    CHECK(dd_auth_allows(a, DD_AUTH_PEER, NULL, NULL, 0));
    CHECK(!dd_auth_allows(a, DD_AUTH_READ, NULL, NULL, 0));
    dd_auth_free(a);
}

/* dd_config_validate's verdict on CFG with KEY=VALUE pairs set; the
 * message in ERR. */
static int validate(char *err, size_t errlen, const char *const *kv, size_t n)
{
    struct dd_config cfg;
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    for (size_t i = 0; i + 1 < n; i += 2)
        REQUIRE(dd_config_set(&cfg, kv[i], kv[i + 1], err, errlen) == DD_OK);
    int rc = dd_config_validate(&cfg, err, errlen);
    dd_config_free(&cfg);
    return rc;
}

static void test_conf(void)
{
    char err[512] = "";
    /* Identities need client certificates, as for the other lists. */
    const char *named[] = {"rpc.allow_peer", "dedupd-node"};
    CHECK(validate(err, sizeof err, named, 2) == DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "rpc.allow_peer") && strstr(err, "rpc.tls_client_ca"), "%s", err);
    const char *empty_entry[] = {"rpc.allow_peer", "a,,b"};
    CHECK(validate(err, sizeof err, empty_entry, 2) == DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "rpc.allow_peer") && strstr(err, "empty entry"), "%s", err);
    const char *star_entry[] = {"rpc.allow_peer", "a, *"};
    CHECK(validate(err, sizeof err, star_entry, 2) == DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "rpc.allow_peer"), "%s", err);

    /* A cluster under mutual TLS must name its peers. */
    const char *mtls_cluster[] = {
        "rpc.tls_cert", "/x/node.crt", "rpc.tls_key", "/x/node.key",
        "rpc.tls_client_ca", "/x/ca.crt", "ingest.enabled", "true",
        "cluster.shards", "2", "cluster.shard", "0", "cluster.replica", "0",
        "cluster.nodes", "127.0.0.1:1;127.0.0.1:2", "cluster.redis", "127.0.0.1:6379;127.0.0.1:6380",
        "cluster.forget_key_file", "/x/forget.key", "rpc.allow_peer", " * ",
    };
    size_t n = DD_ARRAY_LEN(mtls_cluster);
    CHECK(validate(err, sizeof err, mtls_cluster, n) == DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "rpc.allow_peer") && strstr(err, "mutual TLS"), "%s", err);
    mtls_cluster[n - 1] = "dedupd-node";
    CHECK_MSG(validate(err, sizeof err, mtls_cluster, n) == DD_OK, "%s", err);
    /* Without client certificates "*" is the only choice, as for the others. */
    const char *plain_cluster[] = {
        "ingest.enabled", "true", "cluster.shards", "2", "cluster.shard", "0",
        "cluster.replica", "0", "cluster.nodes", "127.0.0.1:1;127.0.0.1:2",
        "cluster.redis", "127.0.0.1:6379;127.0.0.1:6380", "cluster.forget_key_file", "/x/forget.key",
    };
    CHECK_MSG(validate(err, sizeof err, plain_cluster, DD_ARRAY_LEN(plain_cluster)) == DD_OK, "%s",
              err);
    /* A cluster without the forget markers' key is refused (marker.h). */
    CHECK(validate(err, sizeof err, plain_cluster, DD_ARRAY_LEN(plain_cluster) - 2) ==
          DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "cluster.forget_key_file"), "%s", err);
}


/* dd_auth_call on a real grpc call that carries no client certificate
 * (a client-side call: no handshake, so no identity), as a plaintext or
 * server-only TLS client looks to the check. */
static void test_call(void)
{
    grpc_init();
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create("127.0.0.1:1", creds, NULL);
    grpc_channel_credentials_release(creds);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_call *call = grpc_channel_create_call(
        ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
        grpc_slice_from_static_string(dd_api_method_path(DD_API_FILTER)), NULL,
        gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    REQUIRE(call != NULL);
    char msg[512] = "";

    dd_auth *a = auth_of("recall", "*", "dedupd-node");
    /* A named list: no identity, no entry. */
    CHECK_EQ_INT(dd_auth_call(a, call, DD_API_FILTER, false, msg, sizeof msg),
                 GRPC_STATUS_PERMISSION_DENIED);
    CHECK_MSG(strstr(msg, "(no client certificate)") && strstr(msg, "may not call Filter") &&
                  strstr(msg, "rpc.allow_read"),
              "%s", msg);
    /* "*" and the open class let anyone through. */
    CHECK_EQ_INT(dd_auth_call(a, call, DD_API_RECORD_PLAYS, false, msg, sizeof msg),
                 GRPC_STATUS_OK);
    CHECK_EQ_INT(dd_auth_call(a, call, DD_API_HEALTH_CHECK, false, msg, sizeof msg),
                 GRPC_STATUS_OK);
    /* Forwarded: judged by rpc.allow_peer alone, whatever the method's
     * class, so a writer's "*" does not let a forward of a write in. */
    msg[0] = '\0';
    CHECK_EQ_INT(dd_auth_call(a, call, DD_API_RECORD_PLAYS, true, msg, sizeof msg),
                 GRPC_STATUS_PERMISSION_DENIED);
    CHECK_MSG(strstr(msg, "may not forward calls") && strstr(msg, "rpc.allow_peer"), "%s", msg);
    CHECK_EQ_INT(dd_auth_call(a, call, DD_API_HEALTH_CHECK, true, msg, sizeof msg),
                 GRPC_STATUS_PERMISSION_DENIED);
    dd_auth_free(a);
    /* ... and a peer list of "*" lets any forward in, even of a method
     * whose own class names its clients. */
    a = auth_of("recall", "feed", "*");
    CHECK_EQ_INT(dd_auth_call(a, call, DD_API_FILTER, true, msg, sizeof msg), GRPC_STATUS_OK);
    CHECK_EQ_INT(dd_auth_call(a, call, DD_API_FILTER, false, msg, sizeof msg),
                 GRPC_STATUS_PERMISSION_DENIED);
    dd_auth_free(a);

    grpc_call_unref(call);
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    grpc_shutdown();
}

/* dd_auth_conf_check on a copy of the default settings with the TLS
 * fields and allow_insecure set, for LISTEN; the message in ERR. */
static int tls_check(const char *cert, const char *key, const char *ca, const char *listen,
                     bool insecure, char *err, size_t errlen)
{
    struct dd_config cfg;
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    struct dd_auth_conf c = cfg.rpc.auth;
    c.tls.cert = (char *)cert;
    c.tls.key = (char *)key;
    c.tls.client_ca = (char *)ca;
    c.allow_insecure = insecure;
    err[0] = '\0';
    int rc = dd_auth_conf_check(&c, listen, err, errlen);
    dd_config_free(&cfg);
    return rc;
}

static void test_tls_conf(void)
{
    char err[512];
    /* Certificate and key go together. */
    CHECK_EQ_INT(tls_check("/x/c.crt", "", "", "127.0.0.1:0", false, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "rpc.tls_key") != NULL, "%s", err);
    CHECK_EQ_INT(tls_check("", "/x/c.key", "", "127.0.0.1:0", false, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "rpc.tls_cert") != NULL, "%s", err);
    /* Client certificates only over TLS. */
    CHECK_EQ_INT(tls_check("", "", "/x/ca.crt", "127.0.0.1:0", false, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "rpc.tls_client_ca") != NULL, "%s", err);
    /* Unauthenticated clients only on loopback, unless the operator says so. */
    CHECK_EQ_INT(tls_check("", "", "", "127.0.0.1:0", false, err, sizeof err), DD_OK);
    CHECK_EQ_INT(tls_check("", "", "", "0.0.0.0:9000", false, err, sizeof err), DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "rpc.listen") && strstr(err, "plaintext"), "%s", err);
    CHECK_EQ_INT(tls_check("/x/c.crt", "/x/c.key", "", "0.0.0.0:9000", false, err, sizeof err),
                 DD_ERR_INVALID);
    CHECK_MSG(strstr(err, "TLS without rpc.tls_client_ca"), "%s", err);
    CHECK_EQ_INT(tls_check("", "", "", "0.0.0.0:9000", true, err, sizeof err), DD_OK);
    CHECK_EQ_INT(tls_check("/x/c.crt", "/x/c.key", "/x/ca.crt", "0.0.0.0:9000", false, err,
                           sizeof err),
                 DD_OK);
}

static void test_credentials(void)
{
    char err[512] = "", dir[64], cert[128], key[128], ca[128];
    struct dd_config cfg;
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    struct dd_tls_conf c = cfg.rpc.auth.tls;
    c.cert = c.key = c.client_ca = (char *)"";
    /* Plaintext without a certificate. */
    grpc_server_credentials *cr = dd_auth_credentials(&c, err, sizeof err);
    CHECK(cr != NULL);
    if (cr) grpc_server_credentials_release(cr);
    /* A file that cannot be read is named. */
    tl_tmpdir(dir, sizeof dir, "auth");
    snprintf(cert, sizeof cert, "%s/missing.crt", dir);
    c.cert = cert;
    c.key = cert;
    CHECK(dd_auth_credentials(&c, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "missing.crt") != NULL, "%s", err);
    /* A client CA file without a PEM certificate is refused now, not at
     * every handshake later. */
    snprintf(cert, sizeof cert, "%s/node.crt", dir);
    snprintf(key, sizeof key, "%s/node.key", dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", dir);
    const char *files[] = {cert, key, ca};
    for (size_t i = 0; i < 3; i++) {
        FILE *f = fopen(files[i], "w");
        REQUIRE(f != NULL);
        fputs("not a certificate\n", f);
        fclose(f);
    }
    c.cert = cert;
    c.key = key;
    c.client_ca = ca;
    CHECK(dd_auth_credentials(&c, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "rpc.tls_client_ca") && strstr(err, "no PEM certificate"), "%s", err);
    tl_rm_tree(dir);
    dd_config_free(&cfg);
}

int main(void)
{
    test_classes();
    test_peer_class();
    test_conf();
    test_call();
    test_tls_conf();
    test_credentials();
    TEST_MAIN_END();
}
