/* SPDX-License-Identifier: Apache-2.0
 *
 * buf.h - a growable byte buffer that encoders append to (bloom filters,
 * history values and keys, decoded strings). Heap-backed, owned by whoever
 * holds the struct; for per-call scratch that is reset at once see arena.h.
 *
 * A dd_buf is not thread-safe.
 */
#ifndef DD_BUF_H
#define DD_BUF_H

#include <stddef.h>
#include <stdint.h>

/* Zero-initialise ({0}) for an empty buffer; the owner frees it with
 * dd_buf_free. DATA[0 .. LEN) is the content, CAP the room allocated. */
struct dd_buf {
    uint8_t *data;
    size_t len, cap;
};

/* Free B's memory and leave it empty (reusable). NULL is a no-op. */
void dd_buf_free(struct dd_buf *b);

/* Make room for EXTRA more bytes past LEN. Returns 0, or DD_ERR_NOMEM
 * (B unchanged) on out of memory or when LEN + EXTRA overflows. */
int dd_buf_reserve(struct dd_buf *b, size_t extra);

#endif
