/* SPDX-License-Identifier: Apache-2.0
 *
 * stream.c - see stream.h.
 *
 * DESIGN
 *
 * A fixed set of slots, one per stream that may be open: for each method
 * its bound plus one, so that a call past the bound is always matched and
 * refused rather than left waiting in grpc's queue. A slot's call has at
 * most two ops pending on the queue: its RECV_CLOSE_ON_SERVER, started
 * when the call is matched, which completes once the call is over (status
 * sent, or cancelled by the client or its deadline), and one I/O batch
 * (send a message, receive one, or send the status). The slot is released
 * and re-posted once the close has completed and no I/O is pending. Every
 * event carries a tag pointing at one of the slot's three tags (request,
 * I/O, close). Everything runs on the stream thread but dd_stream_start's
 * first posts, made before the thread exists.
 */
#include "stream.h"

#include "dd.h"
#include "log.h"
#include "reflect.h"

#include "health.pb-c.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { WATCH = 0, REFLECT, REFLECT_ALPHA, KINDS };
enum io { IO_NONE = 0, IO_SEND, IO_RECV, IO_STATUS };
enum which { TAG_REQUEST = 0, TAG_IO, TAG_CLOSE };

/* A health service name longer than this is refused INVALID_ARGUMENT. */
#define SERVICE_MAX 256
/* A Watch request longer than this is refused INVALID_ARGUMENT. */
#define WATCH_REQUEST_MAX 1024
/* Services whose status one tick remembers. */
#define STATUS_CACHE 4

struct slot;
struct tag {
    struct slot *s;
    enum which which;
};

struct slot {
    struct tag t[3];
    dd_stream *st;
    enum kind kind;
    bool posted; /* a request is pending on the queue */
    bool active; /* matched: a call in hand */
    bool close_pending;
    bool closed;   /* its close completed: the call is over */
    enum io io;    /* the I/O batch pending, or IO_NONE */
    bool md_sent;  /* initial metadata sent */
    bool ending;   /* the status is sent or being sent */
    bool counted;  /* counted in st->open[kind] */
    int cancelled; /* RECV_CLOSE_ON_SERVER's output */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload; /* Watch: the request; reflection: a received message */
    grpc_byte_buffer *send;    /* the message being sent */
    char service[SERVICE_MAX + 1];
    int last; /* Watch: the status last sent, 0 none */
};

struct dd_stream {
    grpc_server *server;
    grpc_completion_queue *cq;
    void *method[KINDS];
    dd_stream_status_fn status;
    void *ud;
    struct slot *slots;
    size_t nslots;
    size_t open[KINDS]; /* matched calls, by kind */
    size_t outstanding; /* ops pending on cq */
    pthread_t thread;
    bool thread_started;
    bool cq_shut;
    atomic_bool stopping;
    atomic_bool drain;
    struct {
        char service[SERVICE_MAX + 1];
        int status;
    } cache[STATUS_CACHE]; /* this tick's statuses (status_of) */
    size_t ncache;
};

static const char *const kind_path[KINDS] = {DD_STREAM_PATH_WATCH, DD_STREAM_PATH_REFLECTION,
                                             DD_STREAM_PATH_REFLECTION_ALPHA};

static size_t kind_max(enum kind k)
{
    return k == WATCH ? DD_STREAM_MAX_WATCHERS : DD_STREAM_MAX_REFLECTION;
}

int dd_stream_new(dd_stream **out, grpc_server *server, dd_stream_status_fn status, void *ud,
                  char *err, size_t errlen)
{
    *out = NULL;
    dd_stream *st = calloc(1, sizeof *st);
    if (!st) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    st->server = server;
    st->status = status;
    st->ud = ud;
    atomic_init(&st->stopping, false);
    atomic_init(&st->drain, false);
    for (int k = 0; k < KINDS; k++) {
        st->method[k] = grpc_server_register_method(
            server, kind_path[k], NULL,
            k == WATCH ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER : GRPC_SRM_PAYLOAD_NONE, 0);
        if (!st->method[k]) {
            free(st);
            return dd_fail(DD_ERR_INVALID, err, errlen, "cannot register %s", kind_path[k]);
        }
        st->nslots += kind_max(k) + 1;
    }
    st->slots = calloc(st->nslots, sizeof *st->slots);
    st->cq = grpc_completion_queue_create_for_next(NULL);
    if (!st->slots || !st->cq) {
        if (st->cq) grpc_completion_queue_destroy(st->cq);
        free(st->slots);
        free(st);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }
    size_t i = 0;
    for (int k = 0; k < KINDS; k++) {
        for (size_t j = 0; j <= kind_max(k); j++, i++) {
            struct slot *s = &st->slots[i];
            s->st = st;
            s->kind = (enum kind)k;
            for (int w = 0; w < 3; w++) s->t[w] = (struct tag){s, (enum which)w};
            grpc_metadata_array_init(&s->md);
        }
    }
    grpc_server_register_completion_queue(server, st->cq, NULL);
    *out = st;
    return DD_OK;
}

static int post(struct slot *s)
{
    dd_stream *st = s->st;
    s->call = NULL;
    s->payload = NULL;
    grpc_call_error e = grpc_server_request_registered_call(
        st->server, st->method[s->kind], &s->call, &s->deadline, &s->md,
        s->kind == WATCH ? &s->payload : NULL, st->cq, st->cq, &s->t[TAG_REQUEST]);
    if (e != GRPC_CALL_OK) {
        dd_error("rpc", "msg=\"cannot post a streaming call\" method=%s error=\"%s\"",
                 kind_path[s->kind], grpc_call_error_to_string(e));
        return DD_ERR_STATE;
    }
    s->posted = true;
    st->outstanding++;
    return DD_OK;
}

/* Start one batch of S's call with tag WHICH; false if grpc refused it
 * (then nothing is pending). */
static bool batch(struct slot *s, const grpc_op *ops, size_t n, enum which which)
{
    grpc_call_error e = grpc_call_start_batch(s->call, ops, n, &s->t[which], NULL);
    if (e != GRPC_CALL_OK) {
        dd_warn("rpc", "msg=\"cannot start a batch on a streaming call\" method=%s error=\"%s\"",
                kind_path[s->kind], grpc_call_error_to_string(e));
        return false;
    }
    s->st->outstanding++;
    return true;
}

/* Send MSG (owned from now on) as S's next message. */
static void send_message(struct slot *s, grpc_byte_buffer *msg)
{
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!s->md_sent) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = msg;
    n++;
    s->send = msg;
    s->io = IO_SEND;
    s->md_sent = true;
    if (!batch(s, ops, n, TAG_IO)) {
        s->io = IO_NONE;
        grpc_byte_buffer_destroy(msg);
        s->send = NULL;
        s->ending = true; /* nothing more can be sent; wait for the close */
        grpc_call_cancel(s->call, NULL);
    }
}

/* End S's stream with CODE and MSG (NULL: none). */
static void end_stream(struct slot *s, grpc_status_code code, const char *msg)
{
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!s->md_sent) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    grpc_slice details = msg ? grpc_slice_from_copied_string(msg) : grpc_empty_slice();
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n].data.send_status_from_server.status_details = msg ? &details : NULL;
    n++;
    s->ending = true;
    s->md_sent = true;
    s->io = IO_STATUS;
    if (!batch(s, ops, n, TAG_IO)) {
        s->io = IO_NONE;
        grpc_call_cancel(s->call, NULL);
    }
    grpc_slice_unref(details);
}

static void recv_message(struct slot *s)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &s->payload;
    s->payload = NULL;
    s->io = IO_RECV;
    if (!batch(s, &op, 1, TAG_IO)) {
        s->io = IO_NONE;
        s->ending = true;
        grpc_call_cancel(s->call, NULL);
    }
}

/* The whole of BB, copied into a malloc'd buffer of at most MAX bytes:
 * NULL (with *LEN past MAX) when longer, or out of memory. */
static uint8_t *read_all(grpc_byte_buffer *bb, size_t max, size_t *len)
{
    *len = grpc_byte_buffer_length(bb);
    if (*len > max) return NULL;
    uint8_t *buf = malloc(*len ? *len : 1);
    grpc_byte_buffer_reader r;
    if (!buf || !grpc_byte_buffer_reader_init(&r, bb)) {
        free(buf);
        *len = 0;
        return NULL;
    }
    size_t off = 0;
    grpc_slice sl;
    while (grpc_byte_buffer_reader_next(&r, &sl)) {
        size_t n = GRPC_SLICE_LENGTH(sl);
        if (off + n <= *len) memcpy(buf + off, GRPC_SLICE_START_PTR(sl), n);
        off += n;
        grpc_slice_unref(sl);
    }
    grpc_byte_buffer_reader_destroy(&r);
    return buf;
}

static grpc_byte_buffer *buffer_of(const uint8_t *data, size_t len)
{
    grpc_slice sl = grpc_slice_from_copied_buffer((const char *)data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

static void send_health(struct slot *s, int status)
{
    Grpc__Health__V1__HealthCheckResponse resp;
    grpc__health__v1__health_check_response__init(&resp);
    resp.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
    uint8_t buf[16];
    size_t n = grpc__health__v1__health_check_response__pack(&resp, buf);
    s->last = status;
    send_message(s, buffer_of(buf, n));
}

/* A Watch call was matched: read its service, send its status. */
static void watch_begin(struct slot *s, int (*status_of)(struct slot *))
{
    size_t len = 0;
    uint8_t *data = s->payload ? read_all(s->payload, WATCH_REQUEST_MAX, &len) : NULL;
    if (s->payload) grpc_byte_buffer_destroy(s->payload);
    s->payload = NULL;
    Grpc__Health__V1__HealthCheckRequest *req =
        data || len == 0 ? grpc__health__v1__health_check_request__unpack(NULL, len, data) : NULL;
    free(data);
    if (!req || strlen(req->service) > SERVICE_MAX) {
        if (req) grpc__health__v1__health_check_request__free_unpacked(req, NULL);
        end_stream(s, GRPC_STATUS_INVALID_ARGUMENT,
                   "request is not a valid grpc.health.v1.HealthCheckRequest");
        return;
    }
    snprintf(s->service, sizeof s->service, "%s", req->service);
    grpc__health__v1__health_check_request__free_unpacked(req, NULL);
    send_health(s, status_of(s));
}

/* A reflection request arrived in s->payload: answer it. */
static void reflect_answer(struct slot *s)
{
    size_t len = 0;
    uint8_t *data = read_all(s->payload, DD_REFLECT_MAX_REQUEST, &len);
    grpc_byte_buffer_destroy(s->payload);
    s->payload = NULL;
    uint8_t *out = NULL;
    size_t outlen = 0;
    int rc = data || len == 0 ? dd_reflect_answer(data, len, &out, &outlen) : DD_ERR_INVALID;
    free(data);
    if (rc == DD_ERR_NOMEM) {
        end_stream(s, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    if (rc != DD_OK) {
        end_stream(s, GRPC_STATUS_INVALID_ARGUMENT,
                   "request is not a valid grpc.reflection.v1.ServerReflectionRequest (or "
                   "longer than 4096 bytes)");
        return;
    }
    grpc_byte_buffer *bb = buffer_of(out, outlen);
    free(out);
    send_message(s, bb);
}

/* The status of S's service for this tick (cached per service per tick:
 * the callback runs a few times a tick, however many watch). */
static int status_of(struct slot *s)
{
    dd_stream *st = s->st;
    for (size_t i = 0; i < st->ncache; i++)
        if (strcmp(st->cache[i].service, s->service) == 0) return st->cache[i].status;
    int v = st->status(st->ud, s->service);
    if (st->ncache < STATUS_CACHE) {
        snprintf(st->cache[st->ncache].service, sizeof st->cache[0].service, "%s", s->service);
        st->cache[st->ncache++].status = v;
    }
    return v;
}

/* Release S's call once it is over and nothing of it is pending. */
static void maybe_release(struct slot *s)
{
    dd_stream *st = s->st;
    if (!s->active || !s->closed || s->io != IO_NONE || s->close_pending) return;
    if (s->payload) grpc_byte_buffer_destroy(s->payload);
    s->payload = NULL;
    grpc_call_unref(s->call);
    s->call = NULL;
    grpc_metadata_array_destroy(&s->md);
    grpc_metadata_array_init(&s->md);
    if (s->counted) st->open[s->kind]--;
    s->counted = false;
    s->active = s->closed = s->md_sent = s->ending = false;
    s->last = 0;
    s->service[0] = '\0';
    if (!atomic_load(&st->stopping)) post(s);
}

static void matched(struct slot *s, bool ok)
{
    dd_stream *st = s->st;
    s->posted = false;
    if (!ok) return; /* the server is shutting down: never to be matched */
    s->active = true;
    s->closed = false;
    s->cancelled = 0;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &s->cancelled;
    s->close_pending = batch(s, &op, 1, TAG_CLOSE);
    if (!s->close_pending) {
        /* Not expected of a fresh call; release it. */
        s->closed = true;
        maybe_release(s);
        return;
    }
    if (atomic_load(&st->stopping)) {
        end_stream(s, GRPC_STATUS_UNAVAILABLE, "server shutting down");
        return;
    }
    if (st->open[s->kind] >= kind_max(s->kind)) {
        static struct dd_log_limit limit;
        char msg[128];
        snprintf(msg, sizeof msg, "too many %s streams open (at most %zu)",
                 s->kind == WATCH ? "Health/Watch" : "reflection", kind_max(s->kind));
        dd_log_limited(&limit, 10000, DD_LOG_WARN, "rpc",
                       "msg=\"streaming call refused\" method=%s reason=\"%s\"", kind_path[s->kind],
                       msg);
        end_stream(s, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
        return;
    }
    st->open[s->kind]++;
    s->counted = true;
    if (s->kind == WATCH)
        watch_begin(s, status_of);
    else
        recv_message(s);
}

static void io_done(struct slot *s, bool ok)
{
    enum io io = s->io;
    s->io = IO_NONE;
    if (s->send) grpc_byte_buffer_destroy(s->send);
    s->send = NULL;
    if (!ok) {
        /* The call is broken (cancelled, connection lost): the close
         * completes too; send nothing more. */
        s->ending = true;
    } else if (!s->ending && s->kind != WATCH) {
        if (io == IO_SEND)
            recv_message(s);
        else if (io == IO_RECV && !s->payload)
            end_stream(s, GRPC_STATUS_OK, NULL); /* the client half-closed: done */
        else if (io == IO_RECV)
            reflect_answer(s);
    }
    maybe_release(s);
}

/* Every tick: each Watch whose service's status changed gets it; while
 * stopping, every stream ends (a Watch after NOT_SERVING). */
static void tick(dd_stream *st)
{
    bool stopping = atomic_load(&st->stopping);
    st->ncache = 0;
    for (size_t i = 0; i < st->nslots; i++) {
        struct slot *s = &st->slots[i];
        if (!s->active || s->closed || s->ending || s->io != IO_NONE) continue;
        if (s->kind == WATCH) {
            int now = stopping ? DD_STREAM_NOT_SERVING : status_of(s);
            if (now != s->last)
                send_health(s, now);
            else if (stopping)
                end_stream(s, GRPC_STATUS_UNAVAILABLE, "server shutting down");
        } else if (stopping) {
            /* A reflection stream waits in RECV; it ends once that fails
             * or the client half-closes, or here when idle between. */
            end_stream(s, GRPC_STATUS_UNAVAILABLE, "server shutting down");
        }
    }
    if (stopping) {
        /* A reflection stream blocked in RECV_MESSAGE would hold the
         * server's shutdown for its grace: cancel it. */
        for (size_t i = 0; i < st->nslots; i++) {
            struct slot *s = &st->slots[i];
            if (s->active && !s->closed && !s->ending && s->io == IO_RECV) {
                s->ending = true;
                grpc_call_cancel_with_status(s->call, GRPC_STATUS_UNAVAILABLE,
                                             "server shutting down", NULL);
            }
        }
    }
}

static void *stream_main(void *arg)
{
    dd_stream *st = arg;
    int64_t next_tick = 0;
    for (;;) {
        gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                          gpr_time_from_millis(DD_STREAM_TICK_MS, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(st->cq, until, NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type == GRPC_OP_COMPLETE) {
            struct tag *t = ev.tag;
            struct slot *s = t->s;
            st->outstanding--;
            switch (t->which) {
            case TAG_REQUEST: matched(s, ev.success); break;
            case TAG_IO: io_done(s, ev.success); break;
            case TAG_CLOSE:
                s->close_pending = false;
                s->closed = true;
                maybe_release(s);
                break;
            }
        }
        int64_t now = dd_mono_ns();
        if (now >= next_tick) {
            tick(st);
            next_tick = now + (int64_t)DD_STREAM_TICK_MS * 1000000;
        }
        if (!st->cq_shut && st->outstanding == 0 && atomic_load(&st->drain)) {
            grpc_completion_queue_shutdown(st->cq);
            st->cq_shut = true;
        }
    }
    return NULL;
}

int dd_stream_start(dd_stream *st, char *err, size_t errlen)
{
    for (size_t i = 0; i < st->nslots; i++)
        if (post(&st->slots[i]) != DD_OK)
            return dd_fail(DD_ERR_IO, err, errlen, "cannot post %s calls",
                           kind_path[st->slots[i].kind]);
    if (pthread_create(&st->thread, NULL, stream_main, st) != 0)
        return dd_fail(DD_ERR_NOMEM, err, errlen, "cannot start the streaming calls' thread");
    st->thread_started = true;
    return DD_OK;
}

void dd_stream_stop(dd_stream *st)
{
    if (st) atomic_store(&st->stopping, true);
}

void dd_stream_drain(dd_stream *st)
{
    if (!st) return;
    atomic_store(&st->stopping, true);
    atomic_store(&st->drain, true);
    if (st->thread_started) {
        pthread_join(st->thread, NULL);
        st->thread_started = false;
    }
}

void dd_stream_free(dd_stream *st)
{
    if (!st) return;
    if (!st->cq_shut) {
        /* Never ran: its only events are the killed requests. */
        grpc_completion_queue_shutdown(st->cq);
        st->cq_shut = true;
        grpc_event e;
        do {
            e = grpc_completion_queue_next(st->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        } while (e.type != GRPC_QUEUE_SHUTDOWN);
    }
    grpc_completion_queue_destroy(st->cq);
    for (size_t i = 0; i < st->nslots; i++) {
        struct slot *s = &st->slots[i];
        if (s->payload) grpc_byte_buffer_destroy(s->payload);
        if (s->send) grpc_byte_buffer_destroy(s->send);
        if (s->call) grpc_call_unref(s->call);
        grpc_metadata_array_destroy(&s->md);
    }
    free(st->slots);
    free(st);
}
