/* SPDX-License-Identifier: Apache-2.0
 *
 * partition.c - librdkafka's key partitioners (see partition.h).
 */
#include "partition.h"

#include "dd.h"

#include <string.h>

const char *const dd_partitioner_names[DD_PARTITIONER_COUNT + 1] = {
    [DD_PARTITIONER_MURMUR2_RANDOM] = "murmur2_random",
    [DD_PARTITIONER_CONSISTENT_RANDOM] = "consistent_random",
    [DD_PARTITIONER_MURMUR2] = "murmur2",
    [DD_PARTITIONER_CONSISTENT] = "consistent",
    [DD_PARTITIONER_FNV1A] = "fnv1a",
    [DD_PARTITIONER_FNV1A_RANDOM] = "fnv1a_random",
    [DD_PARTITIONER_COUNT] = NULL,
};

const char *dd_partitioner_name(enum dd_partitioner p)
{
    return (unsigned)p < DD_PARTITIONER_COUNT ? dd_partitioner_names[p] : NULL;
}

int dd_partitioner_parse(const char *name, enum dd_partitioner *out)
{
    for (int i = 0; i < DD_PARTITIONER_COUNT; i++) {
        if (strcmp(name, dd_partitioner_names[i]) == 0) {
            *out = (enum dd_partitioner)i;
            return DD_OK;
        }
    }
    return DD_ERR_INVALID;
}

/* MurmurHash2 as Java's Utils.murmur2: 4-byte little-endian words, then
 * the 1 to 3 bytes left. Words are assembled from bytes, so the result
 * does not depend on the host's byte order or the key's alignment. */
static uint32_t murmur2(const unsigned char *p, size_t len)
{
    const uint32_t m = 0x5bd1e995;
    uint32_t h = UINT32_C(0x9747b28c) ^ (uint32_t)len;
    for (; len >= 4; p += 4, len -= 4) {
        uint32_t k =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = h * m ^ k;
    }
    if (len > 0) {
        if (len == 3) h ^= (uint32_t)p[2] << 16;
        if (len >= 2) h ^= (uint32_t)p[1] << 8;
        h ^= p[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    return h ^ h >> 15;
}

/* CRC-32 (reflected polynomial 0xedb88320, initial and final value all
 * ones), as zlib's crc32 and librdkafka's rd_crc32. A table of the 16
 * nibble remainders, two steps a byte: keys are short, and 16 constants
 * need neither a 1 KiB table nor code to fill one before the first call. */
static uint32_t crc32_ieee(const unsigned char *p, size_t len)
{
    static const uint32_t nibble[16] = {
        0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac, 0x76dc4190, 0x6b6b51f4,
        0x4db26158, 0x5005713c, 0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c,
        0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c,
    };
    uint32_t c = 0xffffffff;
    for (size_t i = 0; i < len; i++) {
        c ^= p[i];
        c = nibble[c & 15] ^ c >> 4;
        c = nibble[c & 15] ^ c >> 4;
    }
    return c ^ 0xffffffff;
}

/* FNV-1a 32-bit, then librdkafka's rd_fnv1a step: the hash as an int32,
 * negated when negative (Sarama's NewHashPartitioner takes the absolute
 * value). Done on unsigned numbers, where negation is defined: 2^31
 * negates to itself, which is what librdkafka's wrapping int32 gives. */
static uint32_t fnv1a_abs(const unsigned char *p, size_t len)
{
    uint32_t h = 0x811c9dc5;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x01000193;
    return (h & 0x80000000u) ? 0u - h : h;
}

int32_t dd_partition_of(enum dd_partitioner p, const void *key, size_t len, int32_t partitions)
{
    if (partitions < 1) return -1;
    const unsigned char *k = key;
    if (!k) len = 0; /* librdkafka drops the length of a NULL key */

    /* Where the _random variants leave the key aside (partition.h's
     * table): only consistent_random looks at the length. */
    if ((p == DD_PARTITIONER_MURMUR2_RANDOM || p == DD_PARTITIONER_FNV1A_RANDOM) && !k) return -1;
    if (p == DD_PARTITIONER_CONSISTENT_RANDOM && len == 0) return -1;

    uint32_t h;
    switch (p) {
    case DD_PARTITIONER_MURMUR2_RANDOM:
    case DD_PARTITIONER_MURMUR2: h = murmur2(k, len) & 0x7fffffff; break;
    case DD_PARTITIONER_CONSISTENT_RANDOM:
    case DD_PARTITIONER_CONSISTENT: h = crc32_ieee(k, len); break;
    case DD_PARTITIONER_FNV1A_RANDOM:
    case DD_PARTITIONER_FNV1A: h = fnv1a_abs(k, len); break;
    default: return -1;
    }
    return (int32_t)(h % (uint32_t)partitions);
}
