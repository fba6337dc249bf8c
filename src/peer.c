/* SPDX-License-Identifier: Apache-2.0
 *
 * peer.c - see peer.h. Channels to peers: their credentials, receive
 * limits and memory quota.
 */
#include "peer.h"

#include "dd.h"
#include "snapshot.h"

#include <grpc/grpc_security.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

grpc_channel_credentials *dd_peer_credentials(const struct dd_peer_conf *c, char *err,
                                              size_t errlen)
{
    if (!c->tls->cert[0]) return grpc_insecure_credentials_create();
    const char *ca = c->tls_ca[0]           ? c->tls_ca
                     : c->tls->client_ca[0] ? c->tls->client_ca
                                            : c->tls->cert;
    char *roots = dd_read_file(ca, err, errlen);
    char *cert = roots ? dd_read_file(c->tls->cert, err, errlen) : NULL;
    char *key = cert ? dd_read_file(c->tls->key, err, errlen) : NULL;
    grpc_channel_credentials *creds = NULL;
    if (key) {
        grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
        creds = grpc_ssl_credentials_create(roots, &pair, NULL, NULL);
        if (!creds) dd_set_err(err, errlen, "cannot build TLS credentials for peers from %s", ca);
    }
    free(roots);
    free(cert);
    if (key) {
        memset(key, 0, strlen(key));
        free(key);
    }
    return creds;
}

/* ---- receive limits ---------------------------------------------------- */

/* The size of V as a protobuf varint. */
static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

/* The most a Status, RecordDelivery, RecordPlays or ForgetUser reply can
 * take: a NodeStatus is two varints, three 16-digit hashes, a count and a
 * reason under 200 bytes; the others a few varints. */
#define SMALL_REPLY_MAX 4096

size_t dd_cluster_filter_reply_max(uint32_t max_candidates, uint32_t max_id_bytes)
{
    /* Each candidate is either kept (an id: key, length, bytes; or an
     * index in the packed list: at most 5 bytes) or removed (with explain:
     * a Removed of key, length, index varint and reason varint). */
    size_t id = 1 + varint_len(max_id_bytes) + max_id_bytes;
    size_t removed = 1 + 1 + (1 + varint_len(max_candidates)) + (1 + 1);
    size_t per = id > removed ? id : removed;
    if (per < 5) per = 5;
    /* The packed indexes' key and length, degraded, three counts. */
    size_t fixed = (1 + 10) + 2 + 3 * (1 + 5);
    if ((size_t)max_candidates > (SIZE_MAX - fixed) / per) return SIZE_MAX;
    return (size_t)max_candidates * per + fixed;
}

size_t dd_cluster_manifest_reply_max(void)
{
    /* A SnapshotFile: name (key, length, at most DD_SNAPSHOT_NAME_MAX
     * bytes), size and checksum varints; in the manifest each is a
     * length-delimited field. The id is under 48 bytes, ready a bool. */
    size_t file = 1 + varint_len(DD_SNAPSHOT_NAME_MAX) + DD_SNAPSHOT_NAME_MAX + 2 * (1 + 10);
    return (size_t)DD_SNAPSHOT_FILES_MAX * (1 + varint_len(file) + file) + (1 + 1 + 48) + 2;
}

size_t dd_cluster_chunk_reply_max(void)
{
    /* data (key, length, at most DD_SNAPSHOT_CHUNK_MAX bytes), retry. */
    return 1 + varint_len(DD_SNAPSHOT_CHUNK_MAX) + DD_SNAPSHOT_CHUNK_MAX + (1 + 5);
}

static int clamp_int(size_t v)
{
    return v > INT_MAX ? INT_MAX : (int)v;
}

/* The memory grpc may hold for one peer channel's connection (its read
 * buffers, and a reply being received): grpc reads a whole message before
 * its size limit is checked, so without a quota a peer could still make
 * this node hold one huge reply for a moment. Under pressure grpc cancels
 * that connection's calls (a failed attempt of that peer). Room for two of
 * the largest replies and the connection's own buffers. */
static size_t peer_quota_bytes(size_t reply_max)
{
    size_t q = reply_max < (SIZE_MAX - (8u << 20)) / 2 ? 2 * reply_max + (8u << 20) : SIZE_MAX;
    return q < (16u << 20) ? 16u << 20 : q;
}

/* The service config of a peer channel: per-method receive limits below
 * the channel's own. Into BUF; false if it does not fit (cannot happen). */
static bool peer_service_config(char *buf, size_t len, bool copy)
{
    int n;
    if (copy)
        n = snprintf(buf, len,
                     "{\"methodConfig\":[{\"name\":[{\"service\":\"dedup.v1.Cluster\","
                     "\"method\":\"SnapshotRead\"}],\"maxResponseMessageBytes\":%d},"
                     "{\"name\":[{\"service\":\"dedup.v1.Cluster\",\"method\":\"Status\"}],"
                     "\"maxResponseMessageBytes\":%d}]}",
                     clamp_int(dd_cluster_chunk_reply_max()), SMALL_REPLY_MAX);
    else
        n = snprintf(buf, len,
                     "{\"methodConfig\":[{\"name\":["
                     "{\"service\":\"dedup.v1.Cluster\",\"method\":\"Status\"},"
                     "{\"service\":\"dedup.v1.Dedup\",\"method\":\"RecordDelivery\"},"
                     "{\"service\":\"dedup.v1.Dedup\",\"method\":\"RecordPlays\"},"
                     "{\"service\":\"dedup.v1.Dedup\",\"method\":\"ForgetUser\"}],"
                     "\"maxResponseMessageBytes\":%d}]}",
                     SMALL_REPLY_MAX);
    return n > 0 && (size_t)n < len;
}

/* The settings of every channel to a peer, into ARGS (room for 10); their
 * count. Strings are borrowed from CONF and SC (the service config, made
 * by peer_service_config), QUOTA too (the channel takes its own
 * reference). COPY: the channel of a copy (snapshot.h),
 * else the probes' and forwarded calls'. */
static size_t channel_args(const struct dd_peer_conf *conf, bool copy, char *sc,
                           grpc_resource_quota *quota, grpc_arg *args)
{
    /* Reconnect soon after a peer comes back (grpc's default backoff grows
     * to 2 minutes); we retry on the next replica ourselves, so grpc's own
     * retries are off. */
    size_t nargs = 0;
#define INT_ARG(k, v) \
    do { \
        args[nargs].type = GRPC_ARG_INTEGER; \
        args[nargs].key = (char *)(k); \
        args[nargs].value.integer = (v); \
        nargs++; \
    } while (0)
    INT_ARG(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    INT_ARG(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    INT_ARG(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    INT_ARG(GRPC_ARG_ENABLE_RETRIES, 0);
    /* The limits below are ours: no service config from DNS replaces them. */
    INT_ARG(GRPC_ARG_SERVICE_CONFIG_DISABLE_RESOLUTION, 1);
    INT_ARG(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
            clamp_int(copy
                          ? dd_cluster_manifest_reply_max()
                          : dd_cluster_filter_reply_max(conf->max_candidates, conf->max_id_bytes)));
#undef INT_ARG
    args[nargs].type = GRPC_ARG_STRING;
    args[nargs].key = (char *)GRPC_ARG_SERVICE_CONFIG;
    args[nargs].value.string = sc;
    nargs++;
    args[nargs].type = GRPC_ARG_POINTER;
    args[nargs].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
    args[nargs].value.pointer.p = quota;
    args[nargs].value.pointer.vtable = grpc_resource_quota_arg_vtable();
    nargs++;
    if (conf->tls_server_name[0] && conf->tls->cert[0]) {
        args[nargs].type = GRPC_ARG_STRING;
        args[nargs].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[nargs].value.string = (char *)conf->tls_server_name;
        nargs++;
    }
    return nargs;
}

grpc_channel *dd_peer_channel_create(const struct dd_peer_conf *conf,
                                     grpc_channel_credentials *creds, const char *addr,
                                     enum dd_peer_use use, char *err, size_t errlen)
{
    bool copy = use == DD_PEER_COPY;
    char sc[1024];
    if (!peer_service_config(sc, sizeof sc, copy)) {
        dd_set_err(err, errlen, "cannot build the peer channel's service config");
        return NULL;
    }
    /* A quota of its own: one peer's pressure cancels only its calls. */
    grpc_resource_quota *quota = grpc_resource_quota_create(NULL);
    grpc_resource_quota_resize(
        quota, peer_quota_bytes(
                   copy ? dd_cluster_manifest_reply_max()
                        : dd_cluster_filter_reply_max(conf->max_candidates, conf->max_id_bytes)));
    grpc_arg args[10];
    size_t nargs = channel_args(conf, copy, sc, quota, args);
    grpc_channel_args chargs = {.num_args = nargs, .args = args};
    grpc_channel *ch = grpc_channel_create(addr, creds, &chargs);
    grpc_resource_quota_unref(quota);
    if (!ch) dd_set_err(err, errlen, "cannot create a channel to %s", addr);
    return ch;
}

grpc_channel *dd_peer_channel_new(const struct dd_peer_conf *conf, const char *addr, char *err,
                                  size_t errlen)
{
    grpc_channel_credentials *creds = dd_peer_credentials(conf, err, errlen);
    if (!creds) return NULL;
    grpc_channel *ch = dd_peer_channel_create(conf, creds, addr, DD_PEER_COPY, err, errlen);
    grpc_channel_credentials_release(creds);
    return ch;
}

/* Whether DETAILS starts with the literal PREFIX. */
#define SLICE_STARTS(details, prefix) \
    (GRPC_SLICE_LENGTH(details) >= sizeof(prefix) - 1 && \
     memcmp(GRPC_SLICE_START_PTR(details), prefix, sizeof(prefix) - 1) == 0)

bool dd_cluster_reply_too_large(grpc_status_code status, grpc_slice details)
{
    /* grpc's words: the size limit, and the memory quota's reclaimer. */
    return status == GRPC_STATUS_RESOURCE_EXHAUSTED &&
           (SLICE_STARTS(details, "Received message larger than max") ||
            SLICE_STARTS(details, "Buffers full"));
}
