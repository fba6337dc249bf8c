/* SPDX-License-Identifier: Apache-2.0
 *
 * candset.c - see candset.h.
 */
#include "candset.h"

#include "dd.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

int dd_candset_init(struct dd_candset *s, size_t n)
{
    memset(s, 0, sizeof *s);
    /* Not secret forever, but not in the source: getrandom, else the clock. */
    if (getrandom(&s->salt, sizeof s->salt, 0) != (ssize_t)sizeof s->salt)
        s->salt = (uint64_t)dd_mono_ns() * UINT64_C(0x9e3779b97f4a7c15);
    s->salt |= 1;
    if (dd_candset_begin(s, NULL, n) != DD_OK) return DD_ERR_NOMEM;
    s->n = 0;
    return DD_OK;
}

void dd_candset_free(struct dd_candset *s)
{
    free(s->slot);
    memset(s, 0, sizeof *s);
}

int dd_candset_begin(struct dd_candset *s, const uint64_t *hash, size_t n)
{
    size_t slots = 1024;
    while (slots < 2 * n) slots *= 2;
    if (!s->slot || slots > (size_t)s->cap_mask + 1) {
        if (slots > ((size_t)1 << 32)) return DD_ERR_NOMEM;
        struct dd_candset_slot *t = calloc(slots, sizeof *t);
        if (!t) return DD_ERR_NOMEM;
        free(s->slot);
        s->slot = t;
        s->cap_mask = (uint32_t)(slots - 1);
        s->gen = 0;
    }
    if (++s->gen == 0) {
        memset(s->slot, 0, ((size_t)s->cap_mask + 1) * sizeof *s->slot);
        s->gen = 1;
    }
    s->mask = (uint32_t)(slots - 1);
    s->hash = hash;
    s->n = n;
    return DD_OK;
}

int dd_candset_add(struct dd_candset *s, uint32_t pos)
{
    const uint64_t x = s->hash[pos];
    for (uint32_t i = dd_candset_home(s, x);; i = (i + 1) & s->mask) {
        struct dd_candset_slot *t = &s->slot[i];
        if (t->gen != s->gen) {
            t->gen = s->gen;
            t->pos = pos;
            t->hi = (uint32_t)(x >> 32);
            return 1;
        }
        if (t->hi == (uint32_t)(x >> 32) && s->hash[t->pos] == x) return 0;
    }
}
