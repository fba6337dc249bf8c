/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz.h - what the libFuzzer targets share: a check that aborts (libFuzzer
 * saves the input as a crash), and a reader over the fuzz bytes for the
 * targets that build structured inputs from them.
 */
#ifndef DD_FUZZ_H
#define DD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    abort(); } } while (0)

/* The fuzz bytes, consumed from the front; past the end every read is 0. */
struct fz {
    const uint8_t *p;
    size_t left;
};

static inline uint8_t fz_u8(struct fz *f)
{
    if (!f->left) return 0;
    f->left--;
    return *f->p++;
}

static inline uint64_t fz_u64(struct fz *f)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | fz_u8(f);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
