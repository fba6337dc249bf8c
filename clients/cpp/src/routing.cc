// SPDX-License-Identifier: Apache-2.0
//
// routing.cc - librdkafka's key partitioners and dedupd's item hash, bit
// for bit as the server computes them (src/partition.c, src/dd.h).
#include "dedupd/routing.h"

#include <xxhash.h>

#include <cstring>

namespace dedupd
{
namespace
{

struct Name {
    const char *name;
    Partitioner p;
};
constexpr Name kNames[] = {
    {"murmur2_random", Partitioner::kMurmur2Random},
    {"consistent_random", Partitioner::kConsistentRandom},
    {"murmur2", Partitioner::kMurmur2},
    {"consistent", Partitioner::kConsistent},
    {"fnv1a", Partitioner::kFnv1a},
    {"fnv1a_random", Partitioner::kFnv1aRandom},
};

// MurmurHash2 as Java's Utils.murmur2 (seed 0x9747b28c), words assembled
// from bytes so the result does not depend on byte order or alignment.
uint32_t Murmur2(const unsigned char *p, size_t len)
{
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28cu ^ static_cast<uint32_t>(len);
    for (; len >= 4; p += 4, len -= 4) {
        uint32_t k = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                     static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = h * m ^ k;
    }
    if (len > 0) {
        if (len == 3) h ^= static_cast<uint32_t>(p[2]) << 16;
        if (len >= 2) h ^= static_cast<uint32_t>(p[1]) << 8;
        h ^= p[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    return h ^ h >> 15;
}

// CRC-32 (zlib's, reflected 0xedb88320), as librdkafka's rd_crc32.
uint32_t Crc32(const unsigned char *p, size_t len)
{
    static const uint32_t nibble[16] = {
        0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac, 0x76dc4190, 0x6b6b51f4,
        0x4db26158, 0x5005713c, 0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c,
        0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c,
    };
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++) {
        c ^= p[i];
        c = nibble[c & 15] ^ c >> 4;
        c = nibble[c & 15] ^ c >> 4;
    }
    return c ^ 0xffffffffu;
}

// FNV-1a 32-bit read as int32 and negated when negative, on unsigned
// numbers: 2^31 stays 2^31, as librdkafka's wrapping negation gives.
uint32_t Fnv1aAbs(const unsigned char *p, size_t len)
{
    uint32_t h = 0x811c9dc5u;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x01000193u;
    return (h & 0x80000000u) ? 0u - h : h;
}

} // namespace

std::optional<Partitioner> ParsePartitioner(std::string_view name)
{
    for (const Name &n : kNames)
        if (name == n.name) return n.p;
    return std::nullopt;
}

const char *PartitionerName(Partitioner p)
{
    for (const Name &n : kNames)
        if (n.p == p) return n.name;
    return "unknown";
}

int32_t PartitionOf(Partitioner p, std::string_view key, int32_t partitions)
{
    if (partitions < 1) return -1;
    const auto *k = reinterpret_cast<const unsigned char *>(key.data());
    size_t len = key.size();
    uint32_t h;
    switch (p) {
    case Partitioner::kMurmur2Random:
    case Partitioner::kMurmur2: h = Murmur2(k, len) & 0x7fffffffu; break;
    case Partitioner::kConsistentRandom:
        if (len == 0) return -1; // librdkafka picks at random
        h = Crc32(k, len);
        break;
    case Partitioner::kConsistent: h = Crc32(k, len); break;
    case Partitioner::kFnv1a:
    case Partitioner::kFnv1aRandom: h = Fnv1aAbs(k, len); break;
    default: return -1;
    }
    return static_cast<int32_t>(h % static_cast<uint32_t>(partitions));
}

uint64_t ItemHash(std::string_view id)
{
    return XXH3_64bits_withSeed(id.data(), id.size(), kItemHashSeed);
}

} // namespace dedupd
