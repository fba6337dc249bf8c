/* SPDX-License-Identifier: Apache-2.0
 *
 * be.h - big-endian (network order) loads and stores of 16-, 32- and
 * 64-bit unsigned integers, byte by byte: the one byte-order codec of the
 * stored formats (history's offsets, trace records and keys, the pending
 * trace entries). P need not be aligned; a load reads and a store writes
 * exactly 2, 4 or 8 bytes at P, which the caller has checked are there.
 * Cannot fail; no state, so safe from any thread.
 */
#ifndef DD_BE_H
#define DD_BE_H

#include <stdint.h>

static inline void dd_be16_store(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void dd_be32_store(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static inline void dd_be64_store(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static inline uint16_t dd_be16_load(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static inline uint32_t dd_be32_load(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t dd_be64_load(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

#endif
