/* SPDX-License-Identifier: Apache-2.0
 *
 * window.h - plays pending between flushes, per (scene, user, segment),
 * in bounded memory. Knows nothing of where plays come from; placement
 * (event time -> segment) and the write go through history.h.
 *
 * DESIGN
 *
 * A window is three growable arrays kept across flushes:
 *   - entries: one per (scene, user, segment): the key's offset in a byte
 *     arena, the segment, the head of its play chain and its count;
 *   - slots: an open-addressing (linear probing) table of entry indexes,
 *     at most half full;
 *   - plays: an item hash and the index of the entry's previous play (a
 *     singly linked chain per entry, 12 bytes a play).
 * Adding a play is a table lookup and an append: no allocation once the
 * arrays have reached their working size.
 *
 * Memory is bounded whatever the input rate: an array grows (doubling) only
 * while the window's total allocation stays within max_bytes, and a play
 * that does not fit is refused (DD_ERR_LIMIT) so that the caller flushes.
 * A play equal to its entry's last play is not stored; the other
 * duplicates go at the flush, so an item played again inside a window is
 * written once. The flush writes in the store's key order (dd_window_flush).
 *
 * Threads: a window is used by one thread at a time (ingest hands a whole
 * window to its flush thread); nothing here locks.
 */
#ifndef DD_WINDOW_H
#define DD_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "history.h"

/* When ingest writes a window (window.* in conf/dedupd.conf). */
struct dd_window_conf {
    uint32_t flush_ms;  /* flush pending plays at least this often */
    uint64_t max_bytes; /* flush early when pending memory passes this */
};

typedef struct dd_window dd_window;

/* Create an empty window that keeps its allocation within MAX_BYTES
 * (at least DD_WINDOW_MIN_BYTES). H (borrowed, must outlive the window)
 * places plays in segments. Returns 0, DD_ERR_INVALID (max_bytes too small)
 * or DD_ERR_NOMEM; *out is NULL on error. Free with dd_window_free. */
#define DD_WINDOW_MIN_BYTES (64u * 1024u)
int dd_window_new(dd_window **out, const dd_history *h, uint64_t max_bytes);

/* Free the window and everything pending in it. NULL is a no-op. */
void dd_window_free(dd_window *w);

/* Outcome of dd_window_add (non-negative) or an error (negative dd_err). */
enum dd_window_add_result {
    DD_WINDOW_ADDED = 0,   /* pending (or already pending: a duplicate) */
    DD_WINDOW_EXPIRED = 1, /* older than the retention: dropped and counted */
    DD_WINDOW_FUTURE = 2,  /* beyond history.max_future_ms: not added; callers
                              normally reject such plays before */
};

/* Add the play of item hash ITEM by (SCENE, USER) at AT_MS (event time, ms
 * since the epoch). Ids are bytes, not NUL-terminated: scene <= 255 bytes,
 * user 1..65535 bytes. Returns a dd_window_add_result, DD_ERR_INVALID
 * (lengths), or DD_ERR_LIMIT when the play does not fit in max_bytes: the
 * window is unchanged, the caller flushes it and adds again. Allocates
 * only while the window is still growing (DD_ERR_NOMEM, window unchanged,
 * if that fails). */
int dd_window_add(dd_window *w, const char *scene, size_t scene_len, const char *user,
                  size_t user_len, uint64_t item, int64_t at_ms);

/* Add every pending (scene, user, segment) - each an operand of its
 * distinct item hashes (sorted and made unique here) - to B (borrowed)
 * after what the caller put there (e.g. the log offsets the plays cover:
 * dd_history_batch_put_offset), and write B with dd_history_write to H, so
 * both land in one write. The entries go in the store's key order
 * (segment.h), because RocksDB's memtable inserts a sorted run much faster
 * than scattered keys. B is empty on return, whatever happened. On
 * success the window is emptied as by dd_window_clear and 0 is returned,
 * with *WRITTEN (if not NULL) the number of distinct hashes written. On
 * error (DD_ERR_IO from the store, message in err; DD_ERR_NOMEM) nothing
 * pending is lost: the window is unchanged and the flush may be retried
 * (with the caller's part added again). An empty window writes only what
 * the caller put in B (nothing if B is empty) and returns 0. */
int dd_window_flush(dd_window *w, dd_history *h, dd_history_batch *b, uint64_t *written, char *err,
                    size_t errlen);

/* Empty the window without writing (e.g. after a lost partition
 * assignment); memory is kept, except that after the window has hit its
 * limit, half of any array that was less than a quarter used is given
 * back, so a shift from heavy to light users (or back) does not pin memory
 * in the wrong array. Cannot fail. */
void dd_window_clear(dd_window *w);

/* Plays pending (duplicates not yet removed); 0 when empty. */
size_t dd_window_plays(const dd_window *w);
/* (scene, user, segment) entries pending. */
size_t dd_window_entries(const dd_window *w);
/* Bytes allocated: the arrays (<= max_bytes) plus the flush scratch (4
 * bytes per entry slot for the key-order sort, 8 per play of the largest
 * entry). */
uint64_t dd_window_bytes(const dd_window *w);

/* Counters since the window was created. Cannot fail. */
struct dd_window_stats {
    uint64_t plays_added;    /* plays accepted (before duplicate removal) */
    uint64_t expired;        /* plays older than the retention, dropped */
    uint64_t future;         /* plays refused as too far in the future */
    uint64_t duplicates;     /* plays not written because already pending */
    uint64_t hashes_written; /* distinct (entry, item) hashes written */
    uint64_t flushes;        /* successful non-empty flushes */
    uint64_t limit_hits;     /* adds refused with DD_ERR_LIMIT */
};
void dd_window_get_stats(const dd_window *w, struct dd_window_stats *out);

#endif
