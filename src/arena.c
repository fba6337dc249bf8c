/* SPDX-License-Identifier: Apache-2.0
 *
 * arena.c - see arena.h. Chunks are a singly linked list, newest first;
 * allocation bumps an offset in the newest chunk.
 */
#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN 8
#define ARENA_DEFAULT_INITIAL ((size_t)64 * 1024)
#define ARENA_DEFAULT_RETAIN ((size_t)16 * 1024 * 1024)

struct chunk {
    struct chunk *next;
    size_t size; /* usable bytes after the header */
    size_t used;
    /* data follows, aligned: the header is a multiple of ARENA_ALIGN */
};

struct dd_arena {
    struct chunk *head;
    size_t initial, retain;
    size_t used_total; /* bytes handed out since the last reset */
    size_t chunk_count;
    ProtobufCAllocator pb;
};

_Static_assert(sizeof(struct chunk) % ARENA_ALIGN == 0, "chunk header keeps alignment");

static struct chunk *chunk_new(size_t size)
{
    if (size > SIZE_MAX - sizeof(struct chunk)) return NULL;
    struct chunk *c = malloc(sizeof(struct chunk) + size);
    if (!c) return NULL;
    c->next = NULL;
    c->size = size;
    c->used = 0;
    return c;
}

static void *pb_alloc(void *data, size_t size)
{
    return dd_arena_alloc(data, size);
}

static void pb_free(void *data, void *ptr)
{
    (void)data;
    (void)ptr; /* released all at once by dd_arena_reset */
}

dd_arena *dd_arena_new(size_t initial, size_t retain)
{
    dd_arena *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->initial = initial ? initial : ARENA_DEFAULT_INITIAL;
    a->retain = retain ? retain : ARENA_DEFAULT_RETAIN;
    if (a->retain < a->initial) a->retain = a->initial;
    a->head = chunk_new(a->initial);
    if (!a->head) {
        free(a);
        return NULL;
    }
    a->chunk_count = 1;
    a->pb.alloc = pb_alloc;
    a->pb.free = pb_free;
    a->pb.allocator_data = a;
    return a;
}

static void free_chunks(struct chunk *c)
{
    while (c) {
        struct chunk *next = c->next;
        free(c);
        c = next;
    }
}

void dd_arena_free(dd_arena *a)
{
    if (!a) return;
    free_chunks(a->head);
    free(a);
}

void *dd_arena_alloc(dd_arena *a, size_t size)
{
    if (size > SIZE_MAX - ARENA_ALIGN) return NULL;
    size_t need = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (need == 0) need = ARENA_ALIGN;
    struct chunk *c = a->head;
    if (c->size - c->used < need) {
        size_t grow = c->size > SIZE_MAX / 2 ? SIZE_MAX : c->size * 2;
        if (grow < need) grow = need;
        struct chunk *n = chunk_new(grow);
        if (!n) return NULL;
        n->next = c;
        a->head = c = n;
        a->chunk_count++;
    }
    void *p = (char *)(c + 1) + c->used;
    c->used += need;
    a->used_total += need;
    return p;
}

void *dd_arena_calloc(dd_arena *a, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = dd_arena_alloc(a, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

void dd_arena_reset(dd_arena *a)
{
    if (a->chunk_count > 1) {
        /* The last call needed more than one chunk: replace them all by one
         * big enough for that much, so the next such call needs no malloc.
         * Past the retain limit, go back to the initial size instead. */
        size_t want = a->used_total;
        if (want > a->retain) want = a->initial;
        if (want < a->initial) want = a->initial;
        struct chunk *n = chunk_new(want);
        if (n) {
            free_chunks(a->head);
            a->head = n;
        } else {
            /* No memory for the merged chunk: keep the newest (largest) one. */
            free_chunks(a->head->next);
            a->head->next = NULL;
        }
        a->chunk_count = 1;
    } else if (a->head->size > a->retain) {
        struct chunk *n = chunk_new(a->initial);
        if (n) {
            free(a->head);
            a->head = n;
        }
    }
    a->head->used = 0;
    a->used_total = 0;
}

size_t dd_arena_used(const dd_arena *a)
{
    return a->used_total;
}

size_t dd_arena_chunks(const dd_arena *a)
{
    return a->chunk_count;
}

ProtobufCAllocator *dd_arena_allocator(dd_arena *a)
{
    return &a->pb;
}
