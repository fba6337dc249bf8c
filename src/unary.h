/* SPDX-License-Identifier: Apache-2.0
 *
 * unary.h - one unary gRPC client call as one batch of the six client ops
 * (send metadata, message and close; receive metadata, message and
 * status), and the blocking call built on it. The one client call path of
 * the tree: the daemon's peer calls (peer.h: the health probes start the
 * batch on their own queue, forwarding on a worker's, a copy blocks on
 * it) and the tools' client library (tools/lib/client.c) all go through
 * here. Only grpc core: it knows nothing of dedupd's methods, messages or
 * peers, so the tools link this one object and nothing else of the
 * daemon.
 */
#ifndef DD_UNARY_H
#define DD_UNARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <grpc/support/time.h>

/* One unary client call's batch: send metadata MD[0..NMD), the message
 * SEND (borrowed; kept by the caller until the batch completes) and close;
 * receive metadata, the answer (RECV, owned here) and the status. */
struct dd_unary {
    const grpc_metadata *md;
    size_t nmd;
    uint32_t flags; /* GRPC_INITIAL_METADATA_* of the send (wait for ready) */
    grpc_byte_buffer *send;
    grpc_metadata_array md_in, trailers;
    grpc_byte_buffer *recv;
    grpc_status_code status;
    grpc_slice details;
};

/* Empty U (no allocation); dd_unary_reset releases what a finished batch
 * left in it (not SEND, the caller's) and empties it again. Cannot fail. */
void dd_unary_init(struct dd_unary *u);
void dd_unary_reset(struct dd_unary *u);

/* Start U's batch on CALL with TAG; grpc's result. For callers that run
 * many calls on one completion queue (the health probes, forwarding). */
grpc_call_error dd_unary_start(grpc_call *call, struct dd_unary *u, void *tag);

/* How a blocking call ended. */
enum dd_unary_end {
    DD_UNARY_DONE = 0,  /* the batch completed: U->status, U->details and U->recv say how
                         * the call ended */
    DD_UNARY_FAILED,    /* it completed, but grpc failed the batch as a whole (U->status
                         * is still set) */
    DD_UNARY_UNSTARTED, /* grpc refused to start it (*CE says why) */
    DD_UNARY_NO_QUEUE,  /* CQ was shut down first */
};

/* The blocking call: start U's batch on CALL, which the caller created on
 * CQ (a queue for pluck, used by this thread alone) with DEADLINE, and
 * wait for it. grpc ends the call at its deadline; should the batch still
 * not have completed DD_UNARY_SLACK_MS later, the call is cancelled and
 * waited for. CE (may be NULL) gets grpc's answer to the start. CALL stays
 * the caller's (grpc_call_unref), and so does U->send. */
#define DD_UNARY_SLACK_MS 5000
enum dd_unary_end dd_unary_call(grpc_call *call, grpc_completion_queue *cq, struct dd_unary *u,
                                gpr_timespec deadline, grpc_call_error *ce);

/* U's answer as one slice (the caller unrefs it), false when there is
 * none or it cannot be read. */
bool dd_unary_reply(const struct dd_unary *u, grpc_slice *out);

#endif
