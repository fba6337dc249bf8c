/* SPDX-License-Identifier: Apache-2.0
 *
 * arena.h - a bump allocator for everything one RPC needs: the decoded
 * request (protobuf-c through dd_arena_allocator), the filter's scratch
 * arrays, the response message. Reset between calls, so a steady stream of
 * 10,000-candidate requests runs without touching malloc at all.
 *
 * DESIGN
 *
 * Memory comes in chunks; an allocation that does not fit the current chunk
 * starts a new one (at least twice the previous, at least the request).
 * dd_arena_reset() keeps one chunk as large as everything the last call
 * used (up to the retain limit), so after the first big call every later
 * one is served from a single chunk. Individual frees are no-ops.
 *
 * A dd_arena is not thread-safe: the RPC layer owns one per worker.
 */
#ifndef DD_ARENA_H
#define DD_ARENA_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

typedef struct dd_arena dd_arena;

/* Create an arena whose first chunk is INITIAL bytes (0 = 64 KiB) and that
 * keeps at most RETAIN bytes across dd_arena_reset (0 = 16 MiB; a call that
 * needed more gets its memory back to the system at the next reset).
 * Returns NULL on out of memory. Free with dd_arena_free. */
dd_arena *dd_arena_new(size_t initial, size_t retain);

/* Free the arena and everything allocated from it. NULL is a no-op. */
void dd_arena_free(dd_arena *a);

/* SIZE bytes aligned for any scalar type (8 bytes), valid until the next
 * dd_arena_reset or dd_arena_free. Returns NULL on out of memory (or when
 * SIZE overflows); the arena stays usable. SIZE 0 returns a valid unique
 * pointer. */
void *dd_arena_alloc(dd_arena *a, size_t size);

/* dd_arena_alloc of N * SIZE bytes, zeroed; NULL on overflow or out of
 * memory. */
void *dd_arena_calloc(dd_arena *a, size_t n, size_t size);

/* Forget every allocation at once, keeping memory for the next call as
 * described above. Cannot fail. */
void dd_arena_reset(dd_arena *a);

/* Bytes handed out since the last reset (for tests and metrics). */
size_t dd_arena_used(const dd_arena *a);

/* Number of chunks currently held (1 in the steady state). */
size_t dd_arena_chunks(const dd_arena *a);

/* A protobuf-c allocator over A: alloc is dd_arena_alloc, free a no-op.
 * Borrowed; valid as long as A. Messages unpacked with it must not be
 * passed to *_free_unpacked with another allocator; dd_arena_reset frees
 * them. */
ProtobufCAllocator *dd_arena_allocator(dd_arena *a);

#endif
