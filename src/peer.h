/* SPDX-License-Identifier: Apache-2.0
 *
 * peer.h - the client side of one node calling another: the channels to
 * peers, the credentials they are called with, and what a channel may
 * receive (receive limits sized to each method, a memory quota of its
 * own). The call itself is unary.h's (dd_unary_start for callers that run
 * many calls on one queue: the health probes, forwarding; dd_unary_call
 * for a blocking one: a copy). Knows nothing of which peer is which (the
 * cluster's), nor of what the calls mean.
 *
 * DESIGN
 *
 * Credentials: TLS with this node's own certificate (rpc.tls_cert,
 *   rpc.tls_key) as client certificate when it has one, the peers'
 *   rpc.allow_peer naming its identity (auth.h); else plaintext. Peers'
 *   certificates are verified against cluster.tls_ca, else
 *   rpc.tls_client_ca, else rpc.tls_cert itself.
 * Receive limits: a peer's reply is read whole into memory by grpc before
 *   anything here sees it, so every peer channel bounds what it receives
 *   by what the method can legitimately answer: a reply over the limit
 *   fails the call in grpc (RESOURCE_EXHAUSTED, "Received message larger
 *   than max") and counts as a failed attempt of that peer. One channel to
 *   each peer serves the status probes and the forwarded calls over one
 *   connection; its limit is the largest forwarded answer (Filter's), and
 *   a service config on the channel gives each smaller method its own
 *   lower limit (grpc applies the lower of the two). A copy's channel is
 *   bounded the same way by the snapshot methods' sizes.
 * Memory quota: grpc reads a whole message before its size limit is
 *   checked, so each channel also has a resource quota of its own (twice
 *   the largest reply plus 8 MB); under pressure grpc cancels that
 *   connection's calls ("Buffers full"), a failed attempt of that peer
 *   alone.
 * Threads: channels are thread-safe (grpc's); everything here may be
 * called from any thread.
 */
#ifndef DD_PEER_H
#define DD_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "auth.h"
#include "unary.h"

/* What a peer channel is built from, borrowed from the configuration
 * (dd_config_peer_conf fills it from rpc.* and cluster.*). */
struct dd_peer_conf {
    const struct dd_tls_conf *tls; /* this node's own (rpc.tls_*): with a cert, peers are
                                    * called over TLS presenting it */
    const char *tls_ca;            /* cluster.tls_ca: roots peers are verified by; "" =
                                    * tls->client_ca, else tls->cert */
    const char *tls_server_name;   /* cluster.tls_server_name: the name peers' certificates
                                    * are checked against; "" = the address's host */
    uint32_t max_candidates;       /* rpc.max_candidates and rpc.max_id_bytes: the largest */
    uint32_t max_id_bytes;         /* Filter answer a peer may send back */
};

/* What a channel is for: its receive limits and quota follow. */
enum dd_peer_use {
    DD_PEER_CLUSTER = 0, /* the status probes and forwarded calls (cluster.h) */
    DD_PEER_COPY,        /* a copy of a peer's store (snapshot.h) */
};

/* The credentials peers are called with (above). The PEM files are read
 * now. NULL with a message naming the file in ERR. The caller releases
 * them (grpc_channel_credentials_release). */
grpc_channel_credentials *dd_peer_credentials(const struct dd_peer_conf *conf, char *err,
                                              size_t errlen);

/* A channel to ADDR with CREDS (borrowed) for USE: reconnecting within a
 * second of a peer coming back, grpc's own retries off (callers choose the
 * next replica themselves), no service config from DNS, USE's receive
 * limits and a memory quota of its own. Connects lazily. NULL with a
 * message in ERR. Destroy with grpc_channel_destroy. */
grpc_channel *dd_peer_channel_create(const struct dd_peer_conf *conf,
                                     grpc_channel_credentials *creds, const char *addr,
                                     enum dd_peer_use use, char *err, size_t errlen);

/* dd_peer_credentials and dd_peer_channel_create in one: a channel to ADDR
 * for a copy of its store (DD_PEER_COPY), before the cluster runs. NULL
 * with a message in ERR. Destroy with grpc_channel_destroy. */
grpc_channel *dd_peer_channel_new(const struct dd_peer_conf *conf, const char *addr, char *err,
                                  size_t errlen);

/* Receive limits of peer channels (a reply over one fails the call in
 * grpc, RESOURCE_EXHAUSTED, and is a failed attempt of that peer): the
 * largest FilterResponse this node could produce for a request of
 * MAX_CANDIDATES ids of at most MAX_ID_BYTES each (rpc.max_candidates,
 * rpc.max_id_bytes; SIZE_MAX on overflow), the largest SnapshotManifest
 * (DD_SNAPSHOT_FILES_MAX files) and the largest SnapshotChunk
 * (DD_SNAPSHOT_CHUNK_MAX bytes). Status and the other forwarded methods'
 * replies are limited to a few KiB. In bytes of the encoded message. */
size_t dd_cluster_filter_reply_max(uint32_t max_candidates, uint32_t max_id_bytes);
size_t dd_cluster_manifest_reply_max(void);
size_t dd_cluster_chunk_reply_max(void);

/* Whether a call to a peer failed because its reply was over the channel's
 * receive limit or its memory quota (grpc's RESOURCE_EXHAUSTED "Received
 * message larger than max" or "Buffers full"). Cannot fail. */
bool dd_cluster_reply_too_large(grpc_status_code status, grpc_slice details);

#endif
