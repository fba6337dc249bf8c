/* SPDX-License-Identifier: Apache-2.0
 *
 * auth.h - who may call what on the gRPC port: the server's credentials
 * (plaintext, TLS, or mutual TLS against rpc.tls_client_ca), the allow
 * lists of the read class (Filter), the write class (RecordDelivery,
 * RecordPlays, ForgetUser) and the peer class (the Cluster service, and
 * Dedup calls another node forwards), and the per-call check of the
 * client's certificate identities against them. rpc.h documents the
 * settings.
 *
 * DESIGN
 *
 * grpc verifies a client certificate during the handshake, so a connection
 * without one never makes a call; what is left per call is whether one of
 * the identities grpc put in the call's auth context (the certificate's CN
 * and its subject alternative names) is on the method class's list. The
 * lists are parsed once and read-only after, so every worker reads one
 * dd_auth without a lock, and a "*" class costs nothing per call. The
 * check reads only the auth context: it runs before a request is decoded.
 */
#ifndef DD_AUTH_H
#define DD_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

#include "api.h"

typedef struct dd_auth dd_auth;

/* The port's TLS files (rpc.tls_cert, rpc.tls_key, rpc.tls_client_ca):
 * the server's credentials here, and in a cluster the client certificate
 * this node calls its peers with (peer.h). Each "" when unset. */
struct dd_tls_conf {
    char *cert;      /* PEM chain; "" = plaintext */
    char *key;       /* its PEM key, with cert */
    char *client_ca; /* PEM roots clients' certificates must chain to (mutual
                                 * TLS); "" = no client certificates */
};

/* Who may call what: the TLS files and the allow lists (rpc.h, "Who may
 * call what", documents the keys; struct dd_rpc_conf embeds this). */
struct dd_auth_conf {
    struct dd_tls_conf tls;
    char *allow_read;    /* identities that may call Filter */
    char *allow_write;   /* ... RecordDelivery, RecordPlays and ForgetUser */
    char *allow_peer;    /* ... the Cluster service and forwarded calls */
    bool allow_insecure; /* serve a non-loopback rpc.listen without client
                                 * certificates (anyone may call everything) */
};

/* Who may call a method (rpc.h, "Who may call what"). */
enum dd_auth_class {
    DD_AUTH_OPEN = 0, /* grpc.health.v1.Health/Check: any client that connects */
    DD_AUTH_READ,     /* rpc.allow_read: Filter */
    DD_AUTH_WRITE,    /* rpc.allow_write: RecordDelivery, RecordPlays, ForgetUser */
    DD_AUTH_PEER,     /* rpc.allow_peer: Cluster/Status, SnapshotBegin, SnapshotRead,
                       * and any Dedup call carrying a forwarding header */
};

/* The class of method M (DD_AUTH_OPEN for health and unknown methods).
 * Cannot fail. */
enum dd_auth_class dd_auth_class_of(enum dd_api_method m);

/* "rpc.allow_read", "rpc.allow_write", "rpc.allow_peer"; NULL for the open
 * class. Static. */
const char *dd_auth_class_key(enum dd_auth_class c);

/* Check CONF's TLS and allow-list settings alone, reading no file, for a
 * port listening on LISTEN (rpc.listen; rpc.h, dd_rpc_conf_check, which
 * calls this, says what is checked). Returns 0 or DD_ERR_INVALID with a
 * message naming the keys. */
int dd_auth_conf_check(const struct dd_auth_conf *conf, const char *listen, char *err,
                       size_t errlen);

/* Parse CONF's allow lists. Returns 0, DD_ERR_INVALID or DD_ERR_NOMEM (a
 * message naming the key in err; *out NULL). Free with dd_auth_free (NULL
 * is a no-op). */
int dd_auth_new(dd_auth **out, const struct dd_auth_conf *conf, char *err, size_t errlen);
void dd_auth_free(dd_auth *a);

/* The port's credentials: plaintext without rpc.tls_cert; TLS with it;
 * TLS that requires and verifies a client certificate signed by
 * rpc.tls_client_ca with that too. The PEM files are read now. NULL on
 * error (a message naming the file or key in err). The caller releases
 * them (grpc_server_credentials_release). */
grpc_server_credentials *dd_auth_credentials(const struct dd_tls_conf *conf, char *err,
                                             size_t errlen);

/* Whether a client with the N verified identities IDS[i] (LENS[i] bytes
 * each: its certificate's CN and SANs; none on a plaintext or server-only
 * TLS connection) is on class C's list: "*" allows anyone, N = 0
 * included; a named list an identity equal to an entry byte for byte.
 * The open class allows anyone. Thread-safe; cannot fail. */
bool dd_auth_allows(const dd_auth *a, enum dd_auth_class c, const char *const *ids,
                    const size_t *lens, size_t n);

/* Whether a call of method M whose metadata HEADER says carries a
 * forwarding header (a "dedupd-..." key, forward.h dd_forward_has_header)
 * is a forwarded call, judged by rpc.allow_peer alone (dd_auth_call): a
 * Dedup method's (Filter, RecordDelivery, RecordPlays, ForgetUser). The
 * Cluster service is the peer class anyway; Health/Check stays open
 * whatever its headers. Cannot fail. */
bool dd_auth_forwarded(enum dd_api_method m, bool header);

/* May the client of CALL call method M? FORWARDED (dd_auth_forwarded): the
 * call carries a forwarding header, which only a peer may send, so it is
 * judged by rpc.allow_peer alone (the node that forwarded it judged the
 * original client by M's class). Returns
 * GRPC_STATUS_OK, or GRPC_STATUS_PERMISSION_DENIED with the client and the
 * key named in MSG (MSG_CAP bytes) and a rate-limited warning logged.
 * Thread-safe. */
grpc_status_code dd_auth_call(const dd_auth *a, grpc_call *call, enum dd_api_method m,
                              bool forwarded, char *msg, size_t msg_cap);

#endif
