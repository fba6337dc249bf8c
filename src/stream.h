/* SPDX-License-Identifier: Apache-2.0
 *
 * stream.h - the gRPC methods whose calls stay open, served on a thread
 * and completion queue of their own, apart from rpc.h's call slots (which
 * answer one request with one reply):
 *
 * - grpc.health.v1.Health/Watch (server streaming): the status of the
 *   service asked for at once, then again on every change (looked at
 *   every DD_STREAM_TICK_MS), as gRPC clients' health checking and load
 *   balancers expect. What a status is comes from the owner's callback
 *   (rpc.h: the same answer as Health/Check; drain turns it NOT_SERVING).
 *   An unknown service is SERVICE_UNKNOWN, and the stream stays open.
 *   At most DD_STREAM_MAX_WATCHERS streams at once; one more is refused
 *   RESOURCE_EXHAUSTED.
 * - grpc.reflection.v1.ServerReflection/ServerReflectionInfo and the same
 *   under grpc.reflection.v1alpha (bidirectional): each request answered
 *   in order by reflect.h; at most DD_STREAM_MAX_REFLECTION streams at
 *   once, one more refused RESOURCE_EXHAUSTED; a request that is not a
 *   ServerReflectionRequest, or longer than DD_REFLECT_MAX_REQUEST, ends
 *   its stream INVALID_ARGUMENT.
 *
 * Both are open to every client that passed the TLS handshake, as
 * Health/Check is: they tell nothing beyond the published protos and the
 * node's readiness.
 *
 * Lifecycle, driven by the gRPC server's owner (rpc.c): dd_stream_new
 * before grpc_server_start (registers the methods and the queue),
 * dd_stream_start after it, dd_stream_stop before the server's shutdown
 * (every Watch is sent NOT_SERVING, then every stream ends UNAVAILABLE),
 * dd_stream_drain once the server's shutdown is done (the thread closes
 * its queue when nothing of its own is pending on it, and is joined),
 * dd_stream_free last. Threads: those four on the owner's thread; the
 * status callback runs on the stream thread.
 */
#ifndef DD_STREAM_H
#define DD_STREAM_H

#include <grpc/grpc.h>
#include <stddef.h>

#define DD_STREAM_MAX_WATCHERS 100
#define DD_STREAM_MAX_REFLECTION 8
#define DD_STREAM_TICK_MS 100

#define DD_STREAM_PATH_WATCH "/grpc.health.v1.Health/Watch"
#define DD_STREAM_PATH_REFLECTION "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
#define DD_STREAM_PATH_REFLECTION_ALPHA \
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"

/* grpc.health.v1.HealthCheckResponse.ServingStatus values. */
enum dd_stream_health {
    DD_STREAM_SERVING = 1,
    DD_STREAM_NOT_SERVING = 2,
    DD_STREAM_SERVICE_UNKNOWN = 3,
};

/* SERVICE's status now (a dd_stream_health). Called on the stream thread,
 * at most once per service and tick; must not block. */
typedef int (*dd_stream_status_fn)(void *ud, const char *service);

typedef struct dd_stream dd_stream;

/* Register the methods and a completion queue of its own on SERVER (not
 * started yet). STATUS(UD) answers Watch. Returns 0, or DD_ERR_NOMEM /
 * DD_ERR_INVALID with a message in err (*out NULL). */
int dd_stream_new(dd_stream **out, grpc_server *server, dd_stream_status_fn status, void *ud,
                  char *err, size_t errlen);

/* After grpc_server_start: post the calls and start the thread. Returns 0
 * or DD_ERR_IO / DD_ERR_NOMEM with a message in err. */
int dd_stream_start(dd_stream *s, char *err, size_t errlen);

/* Before the server shuts down: end every stream (a Watch first gets
 * NOT_SERVING) and post no more calls. Returns at once; the thread acts
 * within a tick. */
void dd_stream_stop(dd_stream *s);

/* After the server's shutdown completed: wait for the thread to finish its
 * calls and close its queue, and join it. */
void dd_stream_drain(dd_stream *s);

/* Free S (NULL is a no-op); after dd_stream_drain, or when never started. */
void dd_stream_free(dd_stream *s);

#endif
