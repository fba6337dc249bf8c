/* SPDX-License-Identifier: Apache-2.0
 *
 * client.c - blocking unary calls to dedupd over grpc core's C API.
 *
 * One channel, one pluck completion queue and one registered call handle
 * per method, per client. A call is the daemon's own blocking call
 * (src/unary.h, dd_unary_call: one batch of the six client ops, plucked
 * from the queue by its tag, cancelled if grpc overruns the deadline). The request is packed straight into a
 * grpc slice; the response is decoded by protobuf-c into a bump arena that
 * is rewound at the start of the next call, so decoding a 10,000-id Filter
 * response is not 10,000 mallocs and the caller never frees anything.
 */
#include "client.h"
#include "api.h"

#include "dd.h"
#include "unary.h"
#include "health.pb-c.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Replies larger than this are refused by grpc (a 20,000-id Filter response
 * is under 6 MiB). */
#define MAX_RECV_BYTES (64 * 1024 * 1024)
#define ARENA_MIN_BLOCK 4096
#define ARENA_ALIGN 16

/* ------------------------------------------------------------------ arena */

struct arena_block {
    struct arena_block *next;
    size_t cap; /* usable bytes after the header */
    size_t used;
};
#define ARENA_HDR ((sizeof(struct arena_block) + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1))

struct arena {
    struct arena_block *head; /* newest block first */
    int failed;               /* an allocation failed since the last reset */
};

static struct arena_block *block_new(size_t cap)
{
    if (cap > SIZE_MAX - ARENA_HDR) return NULL;
    struct arena_block *b = malloc(ARENA_HDR + cap);
    if (!b) return NULL;
    b->next = NULL;
    b->cap = cap;
    b->used = 0;
    return b;
}

static void *arena_alloc(void *data, size_t size)
{
    struct arena *a = data;
    if (size > SIZE_MAX - ARENA_ALIGN) {
        a->failed = 1;
        return NULL;
    }
    size = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    struct arena_block *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = b ? b->cap * 2 : ARENA_MIN_BLOCK;
        if (cap < size) cap = size;
        struct arena_block *nb = block_new(cap);
        if (!nb) {
            a->failed = 1;
            return NULL;
        }
        nb->next = b;
        a->head = b = nb;
    }
    void *p = (char *)b + ARENA_HDR + b->used;
    b->used += size;
    return p;
}

static void arena_free_noop(void *data, void *ptr)
{
    (void)data;
    (void)ptr;
}

static void arena_destroy(struct arena *a)
{
    struct arena_block *b = a->head;
    while (b) {
        struct arena_block *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
}

/* Forget everything allocated. Several blocks are folded into one of their
 * total size, so a client settles on one block big enough for its largest
 * response and stops allocating. */
static void arena_reset(struct arena *a)
{
    a->failed = 0;
    if (!a->head) return;
    if (!a->head->next) {
        a->head->used = 0;
        return;
    }
    size_t total = 0;
    for (struct arena_block *b = a->head; b; b = b->next) total += b->cap;
    arena_destroy(a);
    a->head = block_new(total); /* NULL is fine: arena_alloc starts over */
}

/* ----------------------------------------------------------------- client */

struct dd_client {
    grpc_channel *channel;
    grpc_completion_queue *cq;
    void *methods[DD_API_UNKNOWN]; /* registered call handles, by api.h method */
    int timeout_ms;
    struct arena arena;
    ProtobufCAllocator alloc;
    int status; /* grpc_status_code of the last call */
    char errstr[256];
};

static bool set(const char *s)
{
    return s && s[0];
}

/* Channel credentials for TLS (NULL: plaintext). NULL on error, with the
 * message in err and *rc set. */
static grpc_channel_credentials *make_credentials(const struct dd_client_tls *tls, int *rc,
                                                  char *err, size_t errlen)
{
    *rc = DD_ERR_INVALID;
    if (!tls) return grpc_insecure_credentials_create();
    if (!set(tls->ca)) {
        dd_set_err(err, errlen, "TLS needs the CA certificate that signed the server's");
        return NULL;
    }
    if (set(tls->cert) != set(tls->key)) {
        dd_set_err(err, errlen, "a client certificate needs its key, and a key its certificate");
        return NULL;
    }
    grpc_channel_credentials *creds = NULL;
    char *cert = NULL, *key = NULL;
    char *ca = dd_read_file(tls->ca, err, errlen);
    if (!ca) goto out;
    if (set(tls->cert)) {
        if (!(cert = dd_read_file(tls->cert, err, errlen))) goto out;
        if (!(key = dd_read_file(tls->key, err, errlen))) goto out;
    }
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    /* grpc copies the PEM text. */
    creds = grpc_ssl_credentials_create_ex(ca, cert ? &pair : NULL, NULL, NULL);
    if (!creds) dd_set_err(err, errlen, "cannot create TLS credentials");
out:
    free(key);
    free(cert);
    free(ca);
    return creds;
}

int dd_client_new(dd_client **out, const char *addr, char *err, size_t errlen)
{
    return dd_client_new_tls(out, addr, NULL, err, errlen);
}

int dd_client_new_tls(dd_client **out, const char *addr, const struct dd_client_tls *tls, char *err,
                      size_t errlen)
{
    *out = NULL;
    if (!addr || !*addr) {
        dd_set_err(err, errlen, "empty server address");
        return DD_ERR_INVALID;
    }
    int rc;
    grpc_channel_credentials *creds = make_credentials(tls, &rc, err, errlen);
    if (!creds) return rc;
    dd_client *c = calloc(1, sizeof *c);
    if (!c) {
        grpc_channel_credentials_release(creds);
        dd_set_err(err, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    grpc_init();
    c->timeout_ms = DD_CLIENT_DEFAULT_TIMEOUT_MS;
    c->alloc.alloc = arena_alloc;
    c->alloc.free = arena_free_noop;
    c->alloc.allocator_data = &c->arena;

    grpc_arg args[2];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = MAX_RECV_BYTES;
    grpc_channel_args chargs = {.num_args = 1, .args = args};
    if (tls && set(tls->server_name)) {
        args[1].type = GRPC_ARG_STRING;
        args[1].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[1].value.string = (char *)tls->server_name;
        chargs.num_args = 2;
    }

    c->channel = grpc_channel_create(addr, creds, &chargs);
    grpc_channel_credentials_release(creds);
    c->cq = grpc_completion_queue_create_for_pluck(NULL);
    if (!c->channel || !c->cq) {
        dd_set_err(err, errlen, "cannot create a channel to %s", addr);
        goto err;
    }
    /* The paths are string literals: they outlive the channel, as grpc
     * requires of registered methods. */
    for (int m = 0; m < DD_API_UNKNOWN; m++) {
        const char *path = dd_api_method_path((enum dd_api_method)m);
        c->methods[m] = grpc_channel_register_call(c->channel, path, NULL, NULL);
        if (!c->methods[m]) {
            dd_set_err(err, errlen, "cannot register method %s", path);
            goto err;
        }
    }
    *out = c;
    return DD_OK;

err:
    dd_client_free(c);
    return DD_ERR_NOMEM;
}

void dd_client_free(dd_client *c)
{
    if (!c) return;
    if (c->channel) grpc_channel_destroy(c->channel);
    if (c->cq) {
        /* Every tag was plucked by its call, so the queue is empty. */
        grpc_completion_queue_shutdown(c->cq);
        grpc_completion_queue_destroy(c->cq);
    }
    arena_destroy(&c->arena);
    free(c);
    grpc_shutdown();
}

void dd_client_set_timeout(dd_client *c, int timeout_ms)
{
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : DD_CLIENT_DEFAULT_TIMEOUT_MS;
}

int dd_client_status(const dd_client *c)
{
    return c->status;
}

const char *dd_client_errstr(const dd_client *c)
{
    return c->errstr;
}

const char *dd_client_status_name(int code)
{
    return dd_api_status_name(code);
}

static int status_to_err(grpc_status_code s)
{
    switch (s) {
    case GRPC_STATUS_OK: return DD_OK;
    case GRPC_STATUS_DEADLINE_EXCEEDED: return DD_ERR_TIMEOUT;
    case GRPC_STATUS_UNAVAILABLE: return DD_ERR_UNAVAILABLE;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_OUT_OF_RANGE: return DD_ERR_INVALID;
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return DD_ERR_LIMIT;
    case GRPC_STATUS_NOT_FOUND:
    case GRPC_STATUS_UNIMPLEMENTED: return DD_ERR_NOTFOUND;
    case GRPC_STATUS_CANCELLED:
    case GRPC_STATUS_ABORTED:
    case GRPC_STATUS_FAILED_PRECONDITION: return DD_ERR_STATE;
    default: return DD_ERR_IO;
    }
}

/* Fail locally, as if the server had said STATUS. */
static int local_fail(dd_client *c, grpc_status_code status, int rc, const char *msg)
{
    c->status = status;
    snprintf(c->errstr, sizeof c->errstr, "%s", msg);
    return rc;
}

/* One unary call: REQ out, a RESP_DESC message into the arena (*resp). */
static int call_unary(dd_client *c, enum dd_api_method m, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp)
{
    *resp = NULL;
    c->status = GRPC_STATUS_OK;
    c->errstr[0] = '\0';
    arena_reset(&c->arena);

    size_t n = protobuf_c_message_get_packed_size(req);
    grpc_slice out_slice = grpc_slice_malloc(n);
    if (protobuf_c_message_pack(req, GRPC_SLICE_START_PTR(out_slice)) != n) {
        grpc_slice_unref(out_slice);
        return local_fail(c, GRPC_STATUS_INTERNAL, DD_ERR_INVALID, "cannot encode request");
    }
    grpc_byte_buffer *send_buf = grpc_raw_byte_buffer_create(&out_slice, 1);
    grpc_slice_unref(out_slice); /* the buffer holds its own reference */

    gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
    gpr_timespec deadline = gpr_time_add(now, gpr_time_from_millis(c->timeout_ms, GPR_TIMESPAN));
    grpc_call *call = grpc_channel_create_registered_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
                                                          c->cq, c->methods[m], deadline, NULL);
    if (!call) {
        grpc_byte_buffer_destroy(send_buf);
        return local_fail(c, GRPC_STATUS_INTERNAL, DD_ERR_NOMEM, "cannot create call");
    }

    struct dd_unary u;
    dd_unary_init(&u);
    u.send = send_buf;
    u.status = GRPC_STATUS_UNKNOWN;

    int rc = DD_OK;
    grpc_call_error ce;
    enum dd_unary_end end = dd_unary_call(call, c->cq, &u, deadline, &ce);
    if (end == DD_UNARY_UNSTARTED) {
        char msg[64];
        snprintf(msg, sizeof msg, "cannot start call (grpc_call_error %d)", (int)ce);
        rc = local_fail(c, GRPC_STATUS_INTERNAL, DD_ERR_IO, msg);
        goto out;
    }
    if (end == DD_UNARY_NO_QUEUE) {
        rc = local_fail(c, GRPC_STATUS_INTERNAL, DD_ERR_IO, "completion queue shut down");
        goto out;
    }
    /* RECV_STATUS_ON_CLIENT always succeeds: the status says what happened. */
    c->status = u.status;
    if (u.status != GRPC_STATUS_OK) {
        size_t len = GRPC_SLICE_LENGTH(u.details);
        if (len >= sizeof c->errstr) len = sizeof c->errstr - 1;
        memcpy(c->errstr, GRPC_SLICE_START_PTR(u.details), len);
        c->errstr[len] = '\0';
        rc = status_to_err(u.status);
        goto out;
    }
    if (!u.recv) {
        rc = local_fail(c, GRPC_STATUS_INTERNAL, DD_ERR_CORRUPT,
                        "OK status but no response message");
        goto out;
    }
    grpc_slice in;
    if (!dd_unary_reply(&u, &in)) {
        rc = local_fail(c, GRPC_STATUS_INTERNAL, DD_ERR_CORRUPT, "cannot read response message");
        goto out;
    }
    /* protobuf-c copies strings out, so the slice can go right after. */
    *resp = protobuf_c_message_unpack(resp_desc, &c->alloc, GRPC_SLICE_LENGTH(in),
                                      GRPC_SLICE_START_PTR(in));
    grpc_slice_unref(in);
    if (!*resp) {
        rc = c->arena.failed
                 ? local_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, DD_ERR_NOMEM,
                              "out of memory decoding the response")
                 : local_fail(c, GRPC_STATUS_INTERNAL, DD_ERR_CORRUPT, "cannot decode response");
    }

out:
    dd_unary_reset(&u);
    grpc_byte_buffer_destroy(send_buf);
    grpc_call_unref(call);
    return rc;
}

int dd_client_filter(dd_client *c, const Dedup__V1__FilterRequest *req,
                     const Dedup__V1__FilterResponse **resp)
{
    ProtobufCMessage *m;
    int rc = call_unary(c, DD_API_FILTER, &req->base, &dedup__v1__filter_response__descriptor, &m);
    if (resp) *resp = (const Dedup__V1__FilterResponse *)m;
    return rc;
}

int dd_client_record_delivery(dd_client *c, const Dedup__V1__RecordDeliveryRequest *req,
                              const Dedup__V1__RecordDeliveryResponse **resp)
{
    ProtobufCMessage *m;
    int rc = call_unary(c, DD_API_RECORD_DELIVERY, &req->base,
                        &dedup__v1__record_delivery_response__descriptor, &m);
    if (resp) *resp = (const Dedup__V1__RecordDeliveryResponse *)m;
    return rc;
}

int dd_client_record_plays(dd_client *c, const Dedup__V1__RecordPlaysRequest *req,
                           const Dedup__V1__RecordPlaysResponse **resp)
{
    ProtobufCMessage *m;
    int rc = call_unary(c, DD_API_RECORD_PLAYS, &req->base,
                        &dedup__v1__record_plays_response__descriptor, &m);
    if (resp) *resp = (const Dedup__V1__RecordPlaysResponse *)m;
    return rc;
}

int dd_client_forget(dd_client *c, const Dedup__V1__ForgetUserRequest *req)
{
    ProtobufCMessage *m;
    return call_unary(c, DD_API_FORGET_USER, &req->base,
                      &dedup__v1__forget_user_response__descriptor, &m);
}

int dd_client_forget_user(dd_client *c, const Dedup__V1__ForgetUserRequest *req,
                          const Dedup__V1__ForgetUserResponse **resp)
{
    ProtobufCMessage *m;
    int rc = call_unary(c, DD_API_FORGET_USER, &req->base,
                        &dedup__v1__forget_user_response__descriptor, &m);
    if (resp) *resp = (const Dedup__V1__ForgetUserResponse *)m;
    return rc;
}

int dd_client_health(dd_client *c, const char *service, int *serving_status)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    req.service = (char *)(service ? service : "");
    ProtobufCMessage *m;
    int rc = call_unary(c, DD_API_HEALTH_CHECK, &req.base,
                        &grpc__health__v1__health_check_response__descriptor, &m);
    if (rc == DD_OK)
        *serving_status = (int)((const Grpc__Health__V1__HealthCheckResponse *)m)->status;
    return rc;
}
