/* SPDX-License-Identifier: Apache-2.0
 *
 * client.h - a small blocking client for dedupd's gRPC API (dedup.v1.Dedup
 * and grpc.health.v1.Health/Check), on grpc core's C API and protobuf-c.
 * dedupctl, dedupd-migrate and the benchmarks use it; it is also the
 * reference for anyone calling dedupd from C.
 *
 * Requests are the protobuf-c structs from dedup.pb-c.h, built by the
 * caller (borrowed for the duration of the call). Responses are decoded into
 * an arena owned by the client: the pointer a call hands back stays valid
 * until the next call on the same client or dd_client_free, and is never
 * freed by the caller. In steady state a call allocates nothing of its own
 * (the arena and the send buffer are reused; grpc allocates internally).
 *
 * Errors: every call returns 0 or a negative dd_err. The gRPC status code of
 * the last call (GRPC_STATUS_OK = 0 on success) and its message are kept on
 * the handle (dd_client_status, dd_client_errstr) until the next call. A
 * failed call leaves the client usable: the channel reconnects by itself.
 * Mapping: DEADLINE_EXCEEDED -> DD_ERR_TIMEOUT; UNAVAILABLE ->
 * DD_ERR_UNAVAILABLE; INVALID_ARGUMENT, OUT_OF_RANGE -> DD_ERR_INVALID;
 * RESOURCE_EXHAUSTED -> DD_ERR_LIMIT; NOT_FOUND, UNIMPLEMENTED ->
 * DD_ERR_NOTFOUND; CANCELLED, ABORTED, FAILED_PRECONDITION -> DD_ERR_STATE;
 * any other status -> DD_ERR_IO; a response that does not decode ->
 * DD_ERR_CORRUPT (status INTERNAL, set by this side).
 *
 * Threads: a dd_client is not thread-safe; use one client per thread (each
 * has its own channel and completion queue). Different clients may be used
 * from different threads at the same time.
 */
#ifndef DD_CLIENT_H
#define DD_CLIENT_H

#include <stddef.h>

#include "dedup.pb-c.h"

typedef struct dd_client dd_client;

#define DD_CLIENT_DEFAULT_TIMEOUT_MS 5000

/* Connect lazily to ADDR ("host:port" or any gRPC target URI, plaintext;
 * dd_client_new_tls for TLS).
 * The connection is made on the first call, so a daemon that is down shows
 * up as UNAVAILABLE there, not here. On success *out is set and 0 returned;
 * on error (DD_ERR_INVALID for an empty address, DD_ERR_NOMEM) a message is
 * written to err, *out is NULL and nothing needs freeing. */
int dd_client_new(dd_client **out, const char *addr, char *err, size_t errlen);

/* TLS settings of a client (all PEM files; NULL or "" = not set). */
struct dd_client_tls {
    const char *ca;          /* CA that signed the server's certificate; required */
    const char *cert;        /* this client's certificate chain (mutual TLS) ... */
    const char *key;         /* ... and its key: both or neither */
    const char *server_name; /* name to check the server's certificate against,
                              * when it is not ADDR's host */
};

/* As dd_client_new, over TLS when TLS is not NULL: the server's
 * certificate must chain to tls->ca and name ADDR's host (or
 * tls->server_name); with tls->cert and tls->key the client presents its
 * certificate (servers with rpc.tls_client_ca require one). The files are
 * read now: DD_ERR_INVALID (unreadable file, ca missing, cert without key)
 * with a message naming the file. A failed handshake shows up on the first
 * call as UNAVAILABLE. */
int dd_client_new_tls(dd_client **out, const char *addr, const struct dd_client_tls *tls, char *err,
                      size_t errlen);

/* Close the channel and free everything, including the last response.
 * NULL is a no-op. */
void dd_client_free(dd_client *c);

/* Deadline of each later call, in milliseconds from its start (default
 * DD_CLIENT_DEFAULT_TIMEOUT_MS). A value <= 0 restores the default. This
 * function cannot fail. */
void dd_client_set_timeout(dd_client *c, int timeout_ms);

/* Dedup/Filter. On success *resp (if RESP is not NULL) points to the
 * response, owned by C (see above). On error *resp is NULL. */
int dd_client_filter(dd_client *c, const Dedup__V1__FilterRequest *req,
                     const Dedup__V1__FilterResponse **resp);

/* Dedup/RecordDelivery. As dd_client_filter. */
int dd_client_record_delivery(dd_client *c, const Dedup__V1__RecordDeliveryRequest *req,
                              const Dedup__V1__RecordDeliveryResponse **resp);

/* Dedup/RecordPlays: returns once the server has made the plays durable.
 * As dd_client_filter. */
int dd_client_record_plays(dd_client *c, const Dedup__V1__RecordPlaysRequest *req,
                           const Dedup__V1__RecordPlaysResponse **resp);

/* Dedup/ForgetUser, the response (the scenes forgotten) not handed back. */
int dd_client_forget(dd_client *c, const Dedup__V1__ForgetUserRequest *req);
/* The same, with the response as dd_client_filter. */
int dd_client_forget_user(dd_client *c, const Dedup__V1__ForgetUserRequest *req,
                          const Dedup__V1__ForgetUserResponse **resp);

/* grpc.health.v1.Health/Check for SERVICE ("" or NULL = the server as a
 * whole). On success *serving_status is the HealthCheckResponse status
 * (1 = SERVING, 2 = NOT_SERVING, 0 = UNKNOWN). An unknown service is an
 * error: DD_ERR_NOTFOUND with status NOT_FOUND. */
int dd_client_health(dd_client *c, const char *service, int *serving_status);

/* gRPC status code of the last call: 0 (OK) after a success. */
int dd_client_status(const dd_client *c);

/* Message of the last failed call ("" after a success). Borrowed, valid
 * until the next call on C. */
const char *dd_client_errstr(const dd_client *c);

/* The canonical name of a gRPC status code ("OK", "UNAVAILABLE", ...);
 * static, never NULL ("UNKNOWN_STATUS" for codes outside the table). */
const char *dd_client_status_name(int code);

#endif
