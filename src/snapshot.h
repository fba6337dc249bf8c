/* SPDX-License-Identifier: Apache-2.0
 *
 * snapshot.h - a replica's store copied from a live peer of its shard, so
 * that a new replica, or one whose volume was lost, serves again after a
 * copy and the log since it, not after a replay of the whole plays topic.
 *
 * DESIGN
 *
 * The peer (server side) makes a RocksDB checkpoint of its store
 * (dd_history_checkpoint: consistent, taken while it serves and ingests;
 * the store's log positions are inside it) in "<history.path>.snapshot/ID",
 * on a thread of its own, with an XXH3-64 of every file, and lends it to
 * any number of receivers: SnapshotBegin answers "not ready" until then,
 * and the manifest (id, files, sizes, checksums) after. SnapshotRead sends
 * a file's bytes from an offset, at most DD_SNAPSHOT_CHUNK_MAX per call,
 * within cluster.snapshot_mbps (a token bucket; over it the answer is
 * empty with a retry delay, so no RPC worker ever sleeps). The thread that
 * made a checkpoint lends it, then releases it (its hard links pin SST
 * files compaction would delete) once it is cluster.snapshot_max_age_s old
 * however often it is read, or unread for DD_SNAPSHOT_IDLE_S, or when the
 * server is freed; a read of a released checkpoint is NOT_FOUND and the
 * next SnapshotBegin makes a fresh one (the receiver then starts over). A
 * leftover of a crashed run is removed at start.
 *
 * The receiver (dd_snapshot_fetch, before the store opens) copies the files
 * into "<history.path>.incoming", checks each file's checksum, then renames
 * the directory to history.path. It keeps the manifest there, so a copy
 * cut short (connection lost, the process killed) resumes where each file
 * stopped if the peer still lends the same checkpoint, and starts over if
 * not. The store then opens as any other and ingest resumes from the log
 * positions in it (ingest.h).
 *
 * Hostile input: names are only those of the manifest (plain file names,
 * no '/', no leading '.'), sizes and offsets are checked against it, a
 * chunk past a file's size or a checksum that differs fails the copy. A
 * manifest with no files, or without RocksDB's CURRENT, is refused (an
 * empty directory would open as a new, empty store). What the copy holds
 * is checked once it opens: its ownership record (owner.h) and, for each
 * partition, a log position the log still holds, or a log that starts at
 * offset 0 (ingest.h dd_ingest_log_gap); either failing keeps the node not
 * ready.
 *
 * Threads: a server is used by any number of RPC workers at once (one
 * mutex, held only for bookkeeping, never across I/O); the fetch runs in
 * the caller's thread.
 */
#ifndef DD_SNAPSHOT_H
#define DD_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pthread.h>

#include <grpc/grpc.h>

#include "cluster_map.h"
#include "history.h"

#define DD_SNAPSHOT_CHUNK_MAX (1024u * 1024u)
#define DD_SNAPSHOT_NAME_MAX 128
#define DD_SNAPSHOT_FILES_MAX 100000
#define DD_SNAPSHOT_IDLE_S 600

struct dd_snapshot_file {
    char name[DD_SNAPSHOT_NAME_MAX + 1];
    uint64_t size;
    uint64_t xxh3;
};

/* A checkpoint's description. FILES is malloc'd (dd_snapshot_manifest_free). */
struct dd_snapshot_manifest {
    char id[48];
    bool ready;
    size_t n;
    struct dd_snapshot_file *files;
};
void dd_snapshot_manifest_free(struct dd_snapshot_manifest *m);

/* Whether NAME is a file name a manifest may hold: 1..DD_SNAPSHOT_NAME_MAX
 * bytes, no '/', not starting with '.'. */
bool dd_snapshot_name_ok(const char *name);

/* ---- the lending side --------------------------------------------------- */

typedef struct dd_snapshot_server dd_snapshot_server;

/* A server for store H (borrowed; outlives the server) sending at most
 * MBPS megabits per second in total (0 = no limit), releasing each
 * checkpoint MAX_AGE_S seconds after it was made (cluster.snapshot_max_age_s;
 * 0 counts as 1). Removes a leftover "<history.path>.snapshot". 0,
 * DD_ERR_NOMEM or DD_ERR_IO. */
int dd_snapshot_server_new(dd_snapshot_server **out, dd_history *h, uint32_t mbps,
                           uint32_t max_age_s, char *err, size_t errlen);
/* Wait for a checkpoint being made, release it and remove the checkpoints.
 * NULL: no-op. */
void dd_snapshot_server_free(dd_snapshot_server *s);

/* SnapshotBegin: *OUT is the current checkpoint's manifest (a copy), or
 * ready = false while one is being made (starting it if there is none, or
 * the last one failed or was released) or the current one, too old or
 * idle too long, is being released. 0, DD_ERR_NOMEM, or DD_ERR_IO
 * when the last attempt failed (message in err; the next call tries
 * again). */
int dd_snapshot_begin(dd_snapshot_server *s, struct dd_snapshot_manifest *out, char *err,
                      size_t errlen);

/* SnapshotRead: up to MAX (capped at DD_SNAPSHOT_CHUNK_MAX) bytes of file
 * NAME of checkpoint ID from OFFSET into BUF (room for MAX), *N the count
 * (0 at the end of the file). Over the bandwidth limit: *N = 0 and
 * *RETRY_AFTER_MS > 0. Returns 0, DD_ERR_NOTFOUND (no such checkpoint any
 * more, one past cluster.snapshot_max_age_s, or no such file in it), DD_ERR_INVALID (offset past the end) or
 * DD_ERR_IO. */
int dd_snapshot_read(dd_snapshot_server *s, const char *id, const char *name, uint64_t offset,
                     size_t max, uint8_t *buf, size_t *n, uint32_t *retry_after_ms, char *err,
                     size_t errlen);

/* Bytes sent and reads throttled so far (metrics). */
void dd_snapshot_server_counts(dd_snapshot_server *s, uint64_t *bytes, uint64_t *throttled);

/* The lending rule: whether this node, of MAP, lends its store to a node
 * asking for shard SHARD's store from its own shard ASKER_SHARD under a
 * map related REL to ours (dd_cluster_check_peer_map said which). Yes to
 * a replica of our shard under our map, or to a new shard of a map that
 * splits ours whose parent we are: we hold every user of theirs. Never to
 * a shard of our own map other than ours, nor to a map ours splits: we
 * may have dropped users they need. Returns 0, or DD_ERR_STATE with the
 * refusal (for the asker) in ERR. */
int dd_snapshot_may_lend(const struct dd_cluster_map *map, enum dd_cluster_relation rel,
                         uint32_t shard, uint32_t asker_shard, char *err, size_t errlen);

/* ---- the receiving side ------------------------------------------------- */

/* Where to copy from: a channel to the peer, what to tell it. */
struct dd_snapshot_source {
    grpc_channel *ch;       /* borrowed */
    const char *peer;       /* its address, for logs */
    const char *map_hash;   /* this node's map hash */
    const char *split_hash; /* the hash of the map this node's splits; "" none */
    const char *from;       /* this node's place "s.r" */
    uint32_t shard;         /* whose store: dd_cluster_source_shard */
    uint32_t asker_shard;   /* this node's own shard */
    int64_t timeout_ms;     /* per call */
    bool (*stop)(void *ud); /* asked between calls: true ends the copy (may be NULL) */
    void *stop_ud;
};

/* Copy the peer's store into HISTORY_PATH (which must not hold a store),
 * resuming a copy cut short (above). Blocks until done. 0; DD_ERR_UNAVAILABLE
 * (the peer cannot be reached or refused: try another), DD_ERR_CORRUPT (a
 * file's checksum differed: the file is removed, a next call fetches it
 * again), DD_ERR_STATE (SRC->stop said stop: what was copied is kept for
 * the next start) or DD_ERR_IO; message in err. */
int dd_snapshot_fetch(const struct dd_snapshot_source *src, const char *history_path, char *err,
                      size_t errlen);

/* ---- bootstrap: cluster.bootstrap = peer ---------------------------------
 *
 * A node started with cluster.bootstrap = peer on an empty store (no
 * RocksDB CURRENT under history.path) first copies the store of a live
 * peer: the other replicas of its own shard first, then, for a new shard
 * of a split (cluster_map.h dd_cluster_source_shard), its parent shard's
 * replicas, each in turn, for up to DD_SNAPSHOT_BOOTSTRAP_ROUNDS rounds a
 * second apart (peers may be starting too). A copy cut short resumes; a
 * file damaged in transit is fetched again at once (up to 3 times). While
 * it copies, the node is not ready, and /readyz says the last peer's
 * refusal or error (struct dd_snapshot_progress). */
#define DD_SNAPSHOT_BOOTSTRAP_ROUNDS 120

/* Whether a node with cluster.bootstrap BOOTSTRAP ("none" or "peer") and
 * the store at HISTORY_PATH copies a peer's store first: "peer" and no
 * store there. Cannot fail. */
bool dd_snapshot_bootstrap_wanted(const char *bootstrap, const char *history_path);

/* What /readyz says while the store is being copied: written by the
 * copying thread, read by the admin's. Initialise with
 * DD_SNAPSHOT_PROGRESS_INIT. */
struct dd_snapshot_progress {
    pthread_mutex_t lock;
    char why[300];
};
#define DD_SNAPSHOT_PROGRESS_INIT \
    { \
        PTHREAD_MUTEX_INITIALIZER, "store: copying from a peer" \
    }
/* admin.h's probe and why for UD (a struct dd_snapshot_progress *): never
 * done (the store component is detached once the copy ends), and the last
 * peer's refusal or error. */
bool dd_snapshot_progress_done(void *ud);
bool dd_snapshot_progress_why(void *ud, char *why, size_t whylen);

/* What a bootstrap needs; everything borrowed. */
struct dd_snapshot_bootstrap {
    const struct dd_cluster_map *map; /* this node's map and place */
    const char *history_path;         /* history.path */
    int64_t timeout_ms;               /* per call (cluster.forward_timeout_ms) */
    /* A channel to a peer for a copy (main: peer.h dd_peer_channel_new);
     * NULL with a message in ERR. The bootstrap destroys it. */
    grpc_channel *(*channel)(void *ud, const char *addr, char *err, size_t errlen);
    void *channel_ud;
    bool (*stop)(void *ud); /* asked between calls: true ends the copy (may be NULL) */
    void *stop_ud;
    struct dd_snapshot_progress *progress; /* may be NULL */
};

/* Copy a peer's store into b->history_path (above). Blocks until done.
 * 0; DD_ERR_STATE when b->stop said stop (logged; the copy resumes at the
 * next start); DD_ERR_UNAVAILABLE (or the last peer's failure) when no
 * peer could give one in every round (logged: the node then stops rather
 * than serve from an empty store whose log may no longer be in Kafka).
 * The last failure's message in ERR. */
int dd_snapshot_bootstrap(const struct dd_snapshot_bootstrap *b, char *err, size_t errlen);

#endif
