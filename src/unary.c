/* SPDX-License-Identifier: Apache-2.0
 *
 * unary.c - see unary.h. grpc core only: the tools' client library links
 * this object alone.
 */
#include "unary.h"

#include <grpc/byte_buffer_reader.h>

#include <string.h>

void dd_unary_init(struct dd_unary *u)
{
    memset(u, 0, sizeof *u);
    grpc_metadata_array_init(&u->md_in);
    grpc_metadata_array_init(&u->trailers);
    u->details = grpc_empty_slice();
}

void dd_unary_reset(struct dd_unary *u)
{
    if (u->recv) grpc_byte_buffer_destroy(u->recv);
    grpc_metadata_array_destroy(&u->md_in);
    grpc_metadata_array_destroy(&u->trailers);
    grpc_slice_unref(u->details);
    dd_unary_init(u);
}

grpc_call_error dd_unary_start(grpc_call *call, struct dd_unary *u, void *tag)
{
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = u->nmd;
    ops[0].data.send_initial_metadata.metadata = (grpc_metadata *)u->md;
    ops[0].flags = u->flags;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = u->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &u->md_in;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &u->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &u->trailers;
    ops[5].data.recv_status_on_client.status = &u->status;
    ops[5].data.recv_status_on_client.status_details = &u->details;
    return grpc_call_start_batch(call, ops, 6, tag, NULL);
}

enum dd_unary_end dd_unary_call(grpc_call *call, grpc_completion_queue *cq, struct dd_unary *u,
                                gpr_timespec deadline, grpc_call_error *ce)
{
    grpc_call_error e = dd_unary_start(call, u, u); /* one call per thread: U is the tag */
    if (ce) *ce = e;
    if (e != GRPC_CALL_OK) return DD_UNARY_UNSTARTED;
    gpr_timespec limit =
        gpr_time_add(deadline, gpr_time_from_millis(DD_UNARY_SLACK_MS, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_pluck(cq, u, limit, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        /* grpc should have ended the call at its deadline; make sure. */
        grpc_call_cancel(call, NULL);
        ev = grpc_completion_queue_pluck(cq, u, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    }
    if (ev.type != GRPC_OP_COMPLETE) return DD_UNARY_NO_QUEUE;
    return ev.success ? DD_UNARY_DONE : DD_UNARY_FAILED;
}

bool dd_unary_reply(const struct dd_unary *u, grpc_slice *out)
{
    grpc_byte_buffer_reader r;
    if (!u->recv || !grpc_byte_buffer_reader_init(&r, u->recv)) return false;
    *out = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    return true;
}
