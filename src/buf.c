/* SPDX-License-Identifier: Apache-2.0
 *
 * buf.c - growable byte buffer (buf.h). Capacity doubles from 64 bytes.
 */
#include "buf.h"

#include <stdlib.h>

#include "dd.h"

void dd_buf_free(struct dd_buf *b)
{
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

int dd_buf_reserve(struct dd_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len) return DD_ERR_NOMEM;
    size_t need = b->len + extra;
    if (need <= b->cap) return DD_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) return DD_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return DD_OK;
}
